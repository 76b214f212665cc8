//! `fuse`: kernel fusion (rules in `rules/fuse.rs`). Two saturation rounds:
//! first the recognizers (Erf-GELU, layer-norm, softmax written out in
//! primitives), then epilogue, pointwise-chain and attention fusion on the
//! extracted result, so use counts see the recognized ops.

use super::{LIMIT_OPTIONS, run_rules, set_limit};
use crate::egraph::Limits;
use crate::pass::{OptionSpec, Pass, PassContext, PassDef, PassOptions, PassStats, parse_usize};
use crate::rules::fuse::{DEFAULT_MAX_OPS, fusion_rules, pattern_rules};
use aoc_ir::{Diagnostic, Location, Module};

#[derive(Debug, Clone)]
pub struct FuseOptions {
    pub limits: Limits,
    /// Most ops one fused op may replace (the core op counts as one).
    pub max_ops: usize,
}

impl Default for FuseOptions {
    fn default() -> Self {
        FuseOptions {
            limits: Limits::default(),
            max_ops: DEFAULT_MAX_OPS,
        }
    }
}

impl PassOptions for FuseOptions {
    const SPEC: &'static [OptionSpec] = &[
        OptionSpec {
            name: "max-ops",
            kind: "integer",
            default: "8",
            doc: "most ops one fused op may replace (at least 2)",
        },
        LIMIT_OPTIONS[0],
        LIMIT_OPTIONS[1],
        LIMIT_OPTIONS[2],
        LIMIT_OPTIONS[3],
    ];
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key == "max-ops" {
            let n = parse_usize(value)?;
            if n < 2 {
                return Err("must be at least 2".to_string());
            }
            self.max_ops = n;
            return Ok(());
        }
        set_limit(&mut self.limits, key, value)
    }
}

pub struct Fuse {
    options: FuseOptions,
}

impl PassDef for Fuse {
    const NAME: &'static str = "fuse";
    const SUMMARY: &'static str = "fuse conv/matmul/gemm epilogues (bias, activation, residual) and pointwise chains; recognize gelu, layer-norm, softmax and attention";
    type Options = FuseOptions;
    fn new(options: FuseOptions) -> Self {
        Fuse { options }
    }
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let internal = |m: String| {
            Diagnostic::error(
                format!("internal error: {m} (please report)"),
                Location::default(),
            )
        };
        let patterns = pattern_rules().map_err(internal)?;
        let fusion = fusion_rules(self.options.max_ops).map_err(internal)?;
        let mut stats = run_rules(module, &patterns, &self.options.limits, cx)?;
        let more = run_rules(module, &fusion, &self.options.limits, cx)?;
        stats.saturation.extend(more.saturation);
        stats.notes.extend(more.notes);
        Ok(stats)
    }
}
