//! Tests of the pass manager through `run_pipeline`.

use crate::manager::{PipelineOptions, run_pipeline};
use crate::pass::{NoOptions, Pass, PassContext, PassDef, PassStats};
use crate::registry::PassEntry;
use crate::testutil::*;
use aoc_ir::attr::Attrs;
use aoc_ir::{Diagnostic, Func, Location, Module, Opcode, Span};

fn module() -> Module {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[2, 3]), Location::default());
    let a = op(&mut f, Opcode::Identity, &[x], Attrs::new());
    let b = op(&mut f, Opcode::Reshape, &[a], ints("shape", &[3, 2]));
    let c = op(&mut f, Opcode::Reshape, &[b], ints("shape", &[6]));
    let d = op(&mut f, Opcode::Relu, &[c], Attrs::new());
    f.set_return(vec![d]);
    Module {
        weights: vec![],
        funcs: vec![f],
    }
}

#[test]
fn runs_a_pipeline_and_reports_counts_stats_and_captures() {
    let mut m = module();
    let before = m.funcs[0].clone();
    let opts = PipelineOptions {
        print_ir_after: vec!["algebraic".into()],
        ..Default::default()
    };
    let report = run_pipeline(&mut m, "algebraic, algebraic{iter-limit=2}", &opts).unwrap();
    assert_eq!(report.passes.len(), 2);
    let p = &report.passes[0];
    assert_eq!(
        (p.name.as_str(), p.ops_before, p.ops_after),
        ("algebraic", 4, 2)
    );
    assert_eq!(p.stats.saturation[0].stop_reason, "saturated");
    assert!(
        p.stats.saturation[0]
            .applied
            .iter()
            .any(|(r, _)| r == "reshape-reshape")
    );
    assert_eq!(report.passes[1].ops_before, 2);
    assert_eq!(opcodes(&m.funcs[0]), [Opcode::Reshape, Opcode::Relu]);
    assert_eq!(
        report
            .printed_ir
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["algebraic", "algebraic"]
    );
    assert!(report.render_stats().contains("algebraic: ops 4 -> 2"));
    assert!(report.render_timing().contains("total"));
    assert_eq!(max_error(&before, &m.funcs[0], 2), 0.0);
}

#[test]
fn option_errors_name_the_pass_and_point_at_the_text() {
    let mut m = module();
    let opts = PipelineOptions::default();
    let text = "algebraic{node-limt=5}";
    let e = run_pipeline(&mut m, text, &opts).unwrap_err();
    assert_eq!(
        e.message,
        "pass `algebraic` has no option `node-limt` (valid options: node-limit, iter-limit, time-limit-ms, fold-limit)"
    );
    assert_eq!(&text[e.loc.span.unwrap().range()], "node-limt");
    let text = "algebraic{node-limit=many}";
    let e = run_pipeline(&mut m, text, &opts).unwrap_err();
    assert_eq!(
        e.message,
        "pass `algebraic`, option `node-limit`: expected a non-negative integer, found `many`"
    );
    assert_eq!(e.loc.span, Some(Span::new(21, 25)));
    let e = run_pipeline(&mut m, "user-rules{x=1}", &opts).unwrap_err();
    assert!(e.message.starts_with("pass `user-rules` has no option `x`"));
    // nothing ran
    assert_eq!(m.funcs[0].body.ops.len(), 4);
}

/// A pass that breaks the IR (returns a value of the wrong type).
struct Breaker;
impl PassDef for Breaker {
    const NAME: &'static str = "breaker";
    const SUMMARY: &'static str = "breaks the return type";
    type Options = NoOptions;
    fn new(_: NoOptions) -> Self {
        Breaker
    }
}
impl Pass for Breaker {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, m: &mut Module, _: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let f = &mut m.funcs[0];
        f.result_types[0] = f32t(&[7]);
        Ok(PassStats::default())
    }
}

#[test]
fn the_verifier_runs_after_every_pass_by_default_and_names_the_breaker() {
    assert!(PipelineOptions::default().verify_each);
    let mut m = module();
    let opts = PipelineOptions {
        extra_passes: vec![PassEntry::of::<Breaker>(false)],
        ..Default::default()
    };
    let e = run_pipeline(&mut m, "algebraic,breaker,algebraic", &opts).unwrap_err();
    assert!(e.message.starts_with("internal error: pass `breaker` produced invalid IR: return: result 0 of @main is declared tensor<7xf32>"), "{}", e.message);
}

#[test]
fn without_verify_each_broken_ir_is_not_caught_after_the_pass() {
    let mut m = module();
    let opts = PipelineOptions {
        extra_passes: vec![PassEntry::of::<Breaker>(false)],
        verify_each: false,
        ..Default::default()
    };
    let report = run_pipeline(&mut m, "breaker", &opts).unwrap();
    assert_eq!(report.passes[0].name, "breaker");
    // The module is broken; only a later verifier run sees it.
    assert!(
        aoc_ir::verify::verify_module(&m)
            .iter()
            .any(|d| d.is_error())
    );
}

#[test]
fn user_rules_apply_through_the_pipeline() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[4]), Location::default());
    let a = op(&mut f, Opcode::Relu, &[x], Attrs::new());
    let b = op(&mut f, Opcode::Relu, &[a], Attrs::new());
    f.set_return(vec![b]);
    let mut m = Module {
        weights: vec![],
        funcs: vec![f.clone()],
    };
    let rules =
        crate::load_rules("relu-relu: (core.relu (core.relu ?x)) => (core.relu ?x)").unwrap();
    let opts = PipelineOptions {
        user_rules: rules,
        ..Default::default()
    };
    let report = run_pipeline(&mut m, "user-rules", &opts).unwrap();
    assert_eq!(opcodes(&m.funcs[0]), [Opcode::Relu]);
    assert_eq!(
        report.passes[0].stats.saturation[0].applied,
        [("relu-relu".to_string(), 1)]
    );
    assert_eq!(max_error(&f, &m.funcs[0], 2), 0.0);
    // without rules the pass says so and changes nothing
    let mut m2 = Module {
        weights: vec![],
        funcs: vec![f],
    };
    let report = run_pipeline(&mut m2, "user-rules", &PipelineOptions::default()).unwrap();
    assert_eq!(m2.funcs[0].body.ops.len(), 2);
    assert!(report.passes[0].stats.notes[0].contains("--rules"));
    let e = run_pipeline(&mut m2, "user-rules,bogus", &PipelineOptions::default()).unwrap_err();
    assert_eq!(e.message, "unknown pass `bogus`");
}
