//! `fold-bn`: folds inference batch-norms and per-channel scale/shift into
//! the preceding conv2d, matmul or gemm (rules in `rules/fold_bn.rs`). The
//! folded weights are computed at compile time through the pass's weight
//! source and left in memory (`ConstValue::Tensor`); the driver writes them
//! out (`aoc_ir::weights::bundle_weights`).

use super::{LIMIT_OPTIONS, run_rules_folding, set_limit};
use crate::egraph::Limits;
use crate::pass::{Pass, PassContext, PassDef, PassOptions, PassStats};
use aoc_ir::{Diagnostic, Location, Module};

#[derive(Default, Debug, Clone)]
pub struct FoldBnOptions {
    pub limits: Limits,
}

impl PassOptions for FoldBnOptions {
    const SPEC: &'static [crate::pass::OptionSpec] = LIMIT_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        set_limit(&mut self.limits, key, value)
    }
}

pub struct FoldBn {
    options: FoldBnOptions,
}

impl PassDef for FoldBn {
    const NAME: &'static str = "fold-bn";
    const SUMMARY: &'static str = "fold batch-norms and per-channel scale/shift into the preceding conv2d, matmul or gemm (weights computed at compile time)";
    type Options = FoldBnOptions;
    fn new(options: FoldBnOptions) -> Self {
        FoldBn { options }
    }
}

impl Pass for FoldBn {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let rules = crate::rules::fold_bn::rules().map_err(|m| {
            Diagnostic::error(
                format!("internal error: {m} (please report)"),
                Location::default(),
            )
        })?;
        run_rules_folding(
            module,
            &rules,
            &self.options.limits,
            cx,
            crate::rules::fold_bn::weights_needed,
        )
    }
}
