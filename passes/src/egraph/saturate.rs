//! Bounded saturation and the whole optimize-a-function step.
//!
//! Saturation always stops: at a node limit, an iteration limit or a time
//! limit, whichever comes first, and reports which.
//!
//! Default limits and why:
//! - 50 000 nodes: a BERT-base graph has about 2 500 ops and a ResNet-50
//!   about 500; directional rules add a few nodes per op, so real models
//!   saturate far below this, while a runaway rule set stops at a size that
//!   still extracts in milliseconds (a few MB of memory).
//! - 30 iterations: every rule family's chains (e.g. cancelling nested
//!   reshapes or Q/DQ moved through a dozen data-movement ops) need far fewer.
//! - 1 s: the whole `default` pipeline must stay under 2 s on a ResNet-50.

use super::Rewrite;
use super::analysis::{DEFAULT_FOLD_LIMIT, Graph};
use super::convert::{FuncGraph, extract, func_to_egraph_selected};
use super::cost::CostModel;
use aoc_ir::interp::WeightSource;
use aoc_ir::{Diagnostic, Func};
use egg::{Runner, StopReason};

/// Statistics of one saturation run (one function).
#[derive(Clone, Debug, PartialEq)]
pub struct SaturationStats {
    pub func: String,
    pub nodes: usize,
    pub classes: usize,
    pub iterations: usize,
    /// Why saturation stopped: `saturated`, `node limit 50000`, ...
    pub stop_reason: String,
    /// Applications per rule name, summed over iterations (non-zero only).
    pub applied: Vec<(String, usize)>,
}
use std::collections::BTreeMap;
use std::time::Duration;

/// Bounds on one saturation run.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub nodes: usize,
    pub iterations: usize,
    pub time: Duration,
    /// Largest constant (in elements) the analysis folds.
    pub fold_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 50_000,
            iterations: 30,
            time: Duration::from_secs(1),
            fold_limit: DEFAULT_FOLD_LIMIT,
        }
    }
}

fn describe(reason: &Option<StopReason>) -> String {
    match reason {
        Some(StopReason::Saturated) => "saturated".to_string(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit {n}"),
        Some(StopReason::NodeLimit(n)) => format!("node limit {n}"),
        Some(StopReason::TimeLimit(s)) => format!("time limit {s}s"),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".to_string(),
    }
}

/// Runs `rules` over the e-graph within `limits`.
pub fn saturate(
    fg: FuncGraph,
    rules: &[Rewrite],
    limits: &Limits,
    func: &str,
) -> (FuncGraph, SaturationStats) {
    let analysis = fg.egraph.analysis.clone();
    let runner: Runner<_, _, ()> = Runner::new(analysis)
        .with_egraph(fg.egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(rules.iter());
    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    for it in &runner.iterations {
        for (rule, n) in &it.applied {
            *applied.entry(rule.to_string()).or_default() += n;
        }
    }
    let egraph: Graph = runner.egraph;
    let stats = SaturationStats {
        func: func.to_string(),
        nodes: egraph.total_number_of_nodes(),
        classes: egraph.number_of_classes(),
        iterations: runner.iterations.len(),
        stop_reason: describe(&runner.stop_reason),
        applied: applied.into_iter().filter(|(_, n)| *n > 0).collect(),
    };
    let roots = fg.roots.iter().map(|r| egraph.find(*r)).collect();
    let notes = fg.notes;
    (
        FuncGraph {
            egraph,
            roots,
            notes,
        },
        stats,
    )
}

/// The outcome of optimizing one function.
// Made once per function and moved straight out: boxing the `Func` would
// buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Optimized {
    Done(Func, SaturationStats),
    /// The function cannot go through the e-graph (the reason says why); it
    /// is left unchanged.
    Skipped(String),
}

/// Function -> e-graph -> saturation -> extraction -> function.
/// Errors are internal errors (a rule that changes types, an extraction
/// failure) and name the function.
pub fn optimize_func(
    func: &Func,
    rules: &[Rewrite],
    limits: &Limits,
    model: &dyn CostModel,
) -> Result<Optimized, Diagnostic> {
    optimize_func_with(func, rules, limits, model, None).map(|(o, _)| o)
}

/// As [`optimize_func`]; with `weights`, the function's weights-file
/// constants are loaded so rules can fold them (BN folding, Winograd).
/// Also returns notes about weights that could not be loaded.
pub fn optimize_func_with(
    func: &Func,
    rules: &[Rewrite],
    limits: &Limits,
    model: &dyn CostModel,
    weights: Option<&dyn WeightSource>,
) -> Result<(Optimized, Vec<String>), Diagnostic> {
    optimize_func_selected(func, rules, limits, model, weights, None)
}

/// As [`optimize_func_with`], loading only the weights marked in `wanted`
/// (indexed by `ValueId`; `None` loads all), as
/// [`super::convert::func_to_egraph_selected`] does.
pub fn optimize_func_selected(
    func: &Func,
    rules: &[Rewrite],
    limits: &Limits,
    model: &dyn CostModel,
    weights: Option<&dyn WeightSource>,
    wanted: Option<&[bool]>,
) -> Result<(Optimized, Vec<String>), Diagnostic> {
    let fg = match func_to_egraph_selected(func, limits.fold_limit, weights, wanted) {
        Ok(fg) => fg,
        Err(reason) => {
            return Ok((
                Optimized::Skipped(format!("@{}: {reason}", func.name)),
                vec![],
            ));
        }
    };
    let (fg, stats) = saturate(fg, rules, limits, &func.name);
    if let Some((a, b)) = fg.egraph.classes().find_map(|c| c.data.conflict.clone()) {
        return Err(Diagnostic::error(
            format!(
                "@{}: a rewrite rule equated values of different types ({a} and {b}); the rule is wrong",
                func.name
            ),
            func.loc.clone(),
        ));
    }
    let out = extract(&fg, model, func).map_err(|m| {
        Diagnostic::error(
            format!("internal error: @{}: {m} (please report)", func.name),
            func.loc.clone(),
        )
    })?;
    Ok((Optimized::Done(out, stats), fg.notes))
}
