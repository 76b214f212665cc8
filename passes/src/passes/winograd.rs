//! `winograd` and `winograd-auto`: 3x3 stride-1 convolutions as Winograd
//! convolutions (rules in `rules/winograd.rs`), with the weight transform
//! computed at compile time from constants and loaded weights.
//!
//! - `winograd{tile=2|4}` rewrites every eligible conv with the chosen tile:
//!   extraction runs under the target's roofline with Winograd ops priced at
//!   a thousandth of their estimate, so wherever a Winograd form exists it is
//!   the one extracted.
//! - `winograd-auto` (in `default`) offers both tiles beside the direct conv
//!   and lets the target's roofline decide per layer: Winograd does fewer
//!   multiplies but moves more memory (a larger transformed weight and the
//!   transformed tiles), so on the bandwidth-poor CPU model it wins only on
//!   large, compute-bound layers.

use super::{LIMIT_OPTIONS, set_limit};
use crate::egraph::cost::CostNode;
use crate::egraph::{CostModel, Limits, Optimized, Rewrite, Roofline, optimize_func_selected};
use crate::pass::{OptionSpec, Pass, PassContext, PassDef, PassOptions, PassStats, parse_usize};
use aoc_ir::{Diagnostic, Location, Module, Opcode};

#[derive(Debug, Clone)]
pub struct WinogradOptions {
    /// The output tile m of F(m x m, 3 x 3): 2 or 4.
    pub tile: usize,
    pub limits: Limits,
}

impl Default for WinogradOptions {
    fn default() -> Self {
        WinogradOptions {
            tile: 2,
            limits: Limits::default(),
        }
    }
}

const WINOGRAD_OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "tile",
        kind: "integer",
        default: "2",
        doc: "output tile: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3)",
    },
    LIMIT_OPTIONS[0],
    LIMIT_OPTIONS[1],
    LIMIT_OPTIONS[2],
    LIMIT_OPTIONS[3],
];

impl PassOptions for WinogradOptions {
    const SPEC: &'static [OptionSpec] = WINOGRAD_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key == "tile" {
            self.tile = match parse_usize(value)? {
                t @ (2 | 4) => t,
                t => return Err(format!("expected 2 or 4, found {t}")),
            };
            return Ok(());
        }
        set_limit(&mut self.limits, key, value)
    }
}

/// The target's roofline with Winograd ops made nearly free, so extraction
/// takes the Winograd form of every conv that has one.
pub(crate) struct PreferWinograd(pub(crate) Roofline);

impl CostModel for PreferWinograd {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn cost(&self, node: &CostNode) -> f64 {
        let c = self.0.cost(node);
        match node {
            CostNode::Op {
                opcode: Opcode::WinogradConv2d,
                ..
            } => c * 1e-3,
            _ => c,
        }
    }
}

fn internal(m: String) -> Diagnostic {
    Diagnostic::error(
        format!("internal error: {m} (please report)"),
        Location::default(),
    )
}

fn roofline(cx: &PassContext) -> Result<Roofline, Diagnostic> {
    Roofline::for_target(cx.target).ok_or_else(|| {
        Diagnostic::error(
            format!(
                "unknown target `{}` (known: sm_90, sm_86, x86-64-v4)",
                cx.target
            ),
            Location::default(),
        )
    })
}

/// Saturates every function with `rules` (the weights of eligible convs
/// loaded, so the transform can read them; no other weight) and extracts
/// under `model`.
fn run_with_model(
    module: &mut Module,
    rules: &[Rewrite],
    limits: &Limits,
    model: &dyn CostModel,
    cx: &PassContext,
) -> Result<PassStats, Diagnostic> {
    let mut stats = PassStats::default();
    for func in &mut module.funcs {
        let wanted = crate::rules::winograd::weights_needed(func);
        let (outcome, notes) =
            optimize_func_selected(func, rules, limits, model, Some(cx.weights), Some(&wanted))?;
        stats.notes.extend(notes);
        match outcome {
            Optimized::Done(new, s) => {
                *func = new;
                stats.saturation.push(s);
            }
            Optimized::Skipped(reason) => stats.notes.push(format!("skipped {reason}")),
        }
    }
    Ok(stats)
}

pub struct Winograd {
    options: WinogradOptions,
}

impl PassDef for Winograd {
    const NAME: &'static str = "winograd";
    const SUMMARY: &'static str =
        "rewrite every 3x3 stride-1 conv with a constant weight as a Winograd F(m x m, 3 x 3) conv";
    type Options = WinogradOptions;
    fn new(options: WinogradOptions) -> Self {
        Winograd { options }
    }
}

impl Pass for Winograd {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let rules = crate::rules::winograd::rules_for(self.options.tile).map_err(internal)?;
        let model = PreferWinograd(roofline(cx)?);
        run_with_model(module, &rules, &self.options.limits, &model, cx)
    }
}

#[derive(Default, Debug, Clone)]
pub struct WinogradAutoOptions {
    pub limits: Limits,
}

impl PassOptions for WinogradAutoOptions {
    const SPEC: &'static [OptionSpec] = LIMIT_OPTIONS;
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        set_limit(&mut self.limits, key, value)
    }
}

pub struct WinogradAuto {
    options: WinogradAutoOptions,
}

impl PassDef for WinogradAuto {
    const NAME: &'static str = "winograd-auto";
    const SUMMARY: &'static str = "offer F(2x2, 3x3) and F(4x4, 3x3) for every eligible conv and let the target's cost model choose per layer";
    type Options = WinogradAutoOptions;
    fn new(options: WinogradAutoOptions) -> Self {
        WinogradAuto { options }
    }
}

impl Pass for WinogradAuto {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let rules = crate::rules::winograd::rules().map_err(internal)?;
        let model = roofline(cx)?;
        run_with_model(module, &rules, &self.options.limits, &model, cx)
    }
}
