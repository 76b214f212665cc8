//! `qdq`: quantize/dequantize propagation, Q/DQ pair cancellation and
//! integer ops through the e-graph (rules in `rules/qdq.rs`). Every rewrite
//! is exact in the reference interpreter: the integer ops are defined as the
//! Q/DQ graphs they replace.

use super::{LIMIT_OPTIONS, run_rules, set_limit};
use crate::egraph::Limits;
use crate::pass::{Pass, PassContext, PassDef, PassOptions, PassStats};
use aoc_ir::{Diagnostic, Location, Module};

#[derive(Default, Debug, Clone)]
pub struct QdqOptions {
    pub limits: Limits,
}

impl PassOptions for QdqOptions {
    const SPEC: &'static [crate::pass::OptionSpec] = LIMIT_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        set_limit(&mut self.limits, key, value)
    }
}

pub struct Qdq {
    options: QdqOptions,
}

impl PassDef for Qdq {
    const NAME: &'static str = "qdq";
    const SUMMARY: &'static str = "move dequantize forward and quantize backward through data movement, cancel Q/DQ pairs, and turn dequantize -> op -> quantize into integer ops";
    type Options = QdqOptions;
    fn new(options: QdqOptions) -> Self {
        Qdq { options }
    }
}

impl Pass for Qdq {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let rules = crate::rules::qdq::rules().map_err(|m| {
            Diagnostic::error(
                format!("internal error: {m} (please report)"),
                Location::default(),
            )
        })?;
        run_rules(module, &rules, &self.options.limits, cx)
    }
}
