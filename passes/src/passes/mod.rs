//! The built-in passes (each registered once in `registry.rs`) and what the
//! e-graph passes share: saturation-limit options and the run loop over a
//! module's functions.

pub mod algebraic;
pub mod fold_bn;
pub mod fuse;
pub mod qdq;
pub mod user_rules;
pub mod winograd;

use crate::egraph::{Limits, Optimized, Rewrite, Roofline, optimize_func_selected};
use crate::pass::{OptionSpec, PassContext, PassStats, parse_usize};
use aoc_ir::{Diagnostic, Func, Location, Module};
use std::time::Duration;

/// The options every e-graph pass takes (the saturation limits).
pub const LIMIT_OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "node-limit",
        kind: "integer",
        default: "50000",
        doc: "stop saturating at this many e-nodes",
    },
    OptionSpec {
        name: "iter-limit",
        kind: "integer",
        default: "30",
        doc: "stop saturating after this many iterations",
    },
    OptionSpec {
        name: "time-limit-ms",
        kind: "integer",
        default: "1000",
        doc: "stop saturating after this long",
    },
    OptionSpec {
        name: "fold-limit",
        kind: "integer",
        default: "4096",
        doc: "fold constants of at most this many elements",
    },
];

/// Sets a limit option (`key` is one of `LIMIT_OPTIONS`).
pub fn set_limit(limits: &mut Limits, key: &str, value: &str) -> Result<(), String> {
    let n = parse_usize(value)?;
    if n == 0 && key != "fold-limit" {
        return Err("must be at least 1".to_string());
    }
    match key {
        "node-limit" => limits.nodes = n,
        "iter-limit" => limits.iterations = n,
        "time-limit-ms" => limits.time = Duration::from_millis(n as u64),
        "fold-limit" => limits.fold_limit = n,
        _ => return Err(format!("unknown option `{key}`")),
    }
    Ok(())
}

/// Saturates every function of `module` with `rules` and extracts the
/// cheapest form under the context's target cost model.
pub fn run_rules(
    module: &mut Module,
    rules: &[Rewrite],
    limits: &Limits,
    cx: &PassContext,
) -> Result<PassStats, Diagnostic> {
    run_rules_with(module, rules, limits, cx, None)
}

/// Which weights-file constants of a function a folding pass's rules can
/// consume (indexed by `ValueId`): see `rules::fold_bn::weights_needed`.
pub type WeightsNeeded = fn(&Func) -> Vec<bool>;

/// As [`run_rules`], for passes whose rules fold weights at compile time
/// (BN folding, Winograd): the weights-file constants `needed` selects are
/// loaded through `cx.weights` first, so rules see their values
/// (`crate::egraph::const_tensor`); the others stay unloaded, since
/// decoding weights dominates these passes. Weights that cannot be loaded
/// are reported as notes and simply not folded.
pub fn run_rules_folding(
    module: &mut Module,
    rules: &[Rewrite],
    limits: &Limits,
    cx: &PassContext,
    needed: WeightsNeeded,
) -> Result<PassStats, Diagnostic> {
    run_rules_with(module, rules, limits, cx, Some(needed))
}

fn run_rules_with(
    module: &mut Module,
    rules: &[Rewrite],
    limits: &Limits,
    cx: &PassContext,
    needed: Option<WeightsNeeded>,
) -> Result<PassStats, Diagnostic> {
    let model = Roofline::for_target(cx.target).ok_or_else(|| {
        Diagnostic::error(
            format!(
                "unknown target `{}` (known: sm_90, sm_86, x86-64-v4)",
                cx.target
            ),
            Location::default(),
        )
    })?;
    let mut stats = PassStats::default();
    for func in &mut module.funcs {
        let (weights, wanted) = match needed {
            Some(f) => (Some(cx.weights), Some(f(func))),
            None => (None, None),
        };
        let (outcome, notes) =
            optimize_func_selected(func, rules, limits, &model, weights, wanted.as_deref())?;
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
