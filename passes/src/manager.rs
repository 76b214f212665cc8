//! The pass manager: runs a text pipeline over a module.
//!
//! After every pass it runs the verifier, as MLIR's pass manager does, unless
//! `verify_each` is turned off (`aoc opt --no-verify-each`); a pass that
//! leaves invalid IR is an internal error naming the pass, so a broken pass
//! is caught where it breaks the IR, not by a later pass or backend that
//! trusts verified input. It measures wall time per pass,
//! collects each pass's statistics and op counts, and captures the printed
//! IR after the passes asked for. Nothing is printed: the report carries the
//! text and the driver decides what to show.

use crate::egraph::Rewrite;
use crate::pass::{PassContext, PassStats};
use crate::pipeline::{parse_pipeline, resolve};
use crate::registry::{PassEntry, registry};
use aoc_ir::interp::{NoWeights, WeightSource};
use aoc_ir::{Diagnostic, Location, Module};
use std::time::{Duration, Instant};

/// How to run a pipeline (the CLI's `aoc opt` flags).
pub struct PipelineOptions<'a> {
    /// Verify after every pass (the default; `--no-verify-each` turns it
    /// off, in every build).
    pub verify_each: bool,
    /// Capture the IR after every pass (`--print-ir-after-all`).
    pub print_ir_after_all: bool,
    /// Capture the IR after the passes with these names (`--print-ir-after=NAME`).
    pub print_ir_after: Vec<String>,
    /// Rules loaded with `load_rules` (`--rules FILE`), applied by the
    /// `user-rules` pass.
    pub user_rules: Vec<Rewrite>,
    /// Passes defined outside this crate, looked up after the built-ins.
    pub extra_passes: Vec<PassEntry>,
    /// Source of external weights for passes that fold them.
    pub weights: &'a dyn WeightSource,
    /// The target whose cost model extraction uses (`sm_90`, `sm_86`,
    /// `x86-64-v4`).
    pub target: String,
}

impl Default for PipelineOptions<'static> {
    fn default() -> Self {
        PipelineOptions {
            verify_each: true,
            print_ir_after_all: false,
            print_ir_after: vec![],
            user_rules: vec![],
            extra_passes: vec![],
            weights: &NoWeights,
            target: "x86-64-v4".to_string(),
        }
    }
}

/// What one pass did.
#[derive(Clone, Debug)]
pub struct PassReport {
    pub name: String,
    pub wall: Duration,
    pub ops_before: usize,
    pub ops_after: usize,
    pub stats: PassStats,
}

/// What a pipeline run did.
#[derive(Clone, Debug, Default)]
pub struct PipelineReport {
    pub passes: Vec<PassReport>,
    /// (pass name, printed module) for each capture asked for, in order.
    pub printed_ir: Vec<(String, String)>,
}

impl PipelineReport {
    /// The `--timing` table: wall time per pass and the total.
    pub fn render_timing(&self) -> String {
        let mut s = String::from("pass timing (wall):\n");
        let mut total = Duration::ZERO;
        for p in &self.passes {
            total += p.wall;
            s.push_str(&format!(
                "  {:<16} {:>10.3} ms\n",
                p.name,
                p.wall.as_secs_f64() * 1e3
            ));
        }
        s.push_str(&format!(
            "  {:<16} {:>10.3} ms\n",
            "total",
            total.as_secs_f64() * 1e3
        ));
        s
    }

    /// The `--stats` report: op counts and e-graph statistics per pass.
    pub fn render_stats(&self) -> String {
        let mut s = String::new();
        for p in &self.passes {
            s.push_str(&format!(
                "{}: ops {} -> {}\n",
                p.name, p.ops_before, p.ops_after
            ));
            for e in &p.stats.saturation {
                s.push_str(&format!(
                    "  @{}: e-graph {} nodes, {} classes, {} iterations, stopped: {}\n",
                    e.func, e.nodes, e.classes, e.iterations, e.stop_reason
                ));
                for (rule, n) in &e.applied {
                    s.push_str(&format!("    {rule}: {n}\n"));
                }
            }
            for n in &p.stats.notes {
                s.push_str(&format!("  note: {n}\n"));
            }
        }
        s
    }
}

/// Number of ops in the module's function bodies.
pub fn op_count(module: &Module) -> usize {
    module.funcs.iter().map(|f| f.body.ops.len()).sum()
}

/// Parses `pipeline`, then runs its passes over `module` in order.
/// Diagnostics about the pipeline text carry spans into `pipeline`.
pub fn run_pipeline(
    module: &mut Module,
    pipeline: &str,
    opts: &PipelineOptions,
) -> Result<PipelineReport, Diagnostic> {
    let items = parse_pipeline(pipeline)?;
    let entries: Vec<PassEntry> = registry()
        .iter()
        .copied()
        .chain(opts.extra_passes.iter().copied())
        .collect();
    let resolved = resolve(&items, &entries)?;
    for name in &opts.print_ir_after {
        if !entries.iter().any(|e| e.name == name) {
            return Err(Diagnostic::error(
                format!("--print-ir-after: unknown pass `{name}`"),
                Location::default(),
            ));
        }
    }
    // Build every pass first so option errors come before any work.
    let mut passes = Vec::new();
    for (entry, item) in &resolved {
        passes.push((entry.build)(&item.options)?);
    }
    let mut report = PipelineReport::default();
    let mut cx = PassContext {
        weights: opts.weights,
        user_rules: &opts.user_rules,
        target: &opts.target,
    };
    for pass in &mut passes {
        let name = pass.name();
        let ops_before = op_count(module);
        let start = Instant::now();
        let stats = pass.run(module, &mut cx)?;
        let wall = start.elapsed();
        if opts.verify_each {
            let errors: Vec<Diagnostic> = aoc_ir::verify::verify_module(module)
                .into_iter()
                .filter(|d| d.is_error())
                .collect();
            if let Some(first) = errors.first() {
                let mut d = Diagnostic::error(
                    format!(
                        "internal error: pass `{name}` produced invalid IR: {} (please report)",
                        first.message
                    ),
                    first.loc.clone(),
                );
                for e in &errors[1..] {
                    d = d.with_note(e.message.clone());
                }
                return Err(d);
            }
        }
        report.passes.push(PassReport {
            name: name.to_string(),
            wall,
            ops_before,
            ops_after: op_count(module),
            stats,
        });
        if opts.print_ir_after_all || opts.print_ir_after.iter().any(|n| n == name) {
            report
                .printed_ir
                .push((name.to_string(), aoc_ir::print::print_module(module)));
        }
    }
    Ok(report)
}
