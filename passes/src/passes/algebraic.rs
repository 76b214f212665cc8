//! `algebraic`: algebraic simplification and constant folding through the
//! e-graph (rules in `rules/algebraic.rs`; folding by the analysis).

use super::{LIMIT_OPTIONS, run_rules, set_limit};
use crate::egraph::Limits;
use crate::pass::{Pass, PassContext, PassDef, PassOptions, PassStats};
use aoc_ir::{Diagnostic, Location, Module};

#[derive(Default, Debug, Clone)]
pub struct AlgebraicOptions {
    pub limits: Limits,
}

impl PassOptions for AlgebraicOptions {
    const SPEC: &'static [crate::pass::OptionSpec] = LIMIT_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        set_limit(&mut self.limits, key, value)
    }
}

pub struct Algebraic {
    options: AlgebraicOptions,
}

impl PassDef for Algebraic {
    const NAME: &'static str = "algebraic";
    const SUMMARY: &'static str = "remove identity ops (reshape/transpose chains, x*1, x+0, ...) and fold small constant subgraphs";
    type Options = AlgebraicOptions;
    fn new(options: AlgebraicOptions) -> Self {
        Algebraic { options }
    }
}

impl Pass for Algebraic {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let rules = crate::rules::algebraic::rules().map_err(|m| {
            Diagnostic::error(
                format!("internal error: {m} (please report)"),
                Location::default(),
            )
        })?;
        run_rules(module, &rules, &self.options.limits, cx)
    }
}
