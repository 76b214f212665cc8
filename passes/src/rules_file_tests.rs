//! Tests of rules files: a valid file, and every kind of malformed line
//! with its position.

use crate::rules_file::load_rules;
use crate::testutil::*;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::diag::line_col;
use aoc_ir::{Func, Location, Opcode};

#[test]
fn loads_rules_with_comments_and_blank_lines() {
    let text = "# my rules\n\nrelu-relu: (core.relu (core.relu ?x)) => (core.relu ?x)  # idempotent\nneg-neg: (core.neg (core.neg ?x)) => ?x\n";
    let rules = load_rules(text).unwrap();
    assert_eq!(
        rules.iter().map(|r| r.name.to_string()).collect::<Vec<_>>(),
        ["relu-relu", "neg-neg"]
    );
}

fn first_error(text: &str) -> (String, (usize, usize)) {
    let errs = load_rules(text).expect_err("an error");
    let d = &errs[0];
    (
        d.message.clone(),
        line_col(text, d.loc.span.unwrap().start as usize),
    )
}

#[test]
fn malformed_lines_are_reported_with_line_and_column() {
    let ok = "a: (core.relu ?x) => ?x\n";
    assert_eq!(
        first_error(&format!("{ok}b: (core.rleu ?x) => ?x")),
        ("unknown op `core.rleu`".into(), (2, 5))
    );
    assert_eq!(
        first_error("b: (core.relu ?x) -> ?x"),
        ("expected `=>`, found `-`".into(), (1, 19))
    );
    assert_eq!(
        first_error("b: (core.relu ?x) => ?y"),
        (
            "variable `?y` is not bound by the left-hand side".into(),
            (1, 22)
        )
    );
    assert_eq!(
        first_error("b: (core.add ?x) => ?x"),
        ("core.add: expected 2 operands, found 1".into(), (1, 5))
    );
    assert_eq!(
        first_error("b: (core.relu ?x) => (core.reshape ?x)"),
        (
            "core.reshape: missing required attribute `shape`".into(),
            (1, 23)
        )
    );
    assert_eq!(
        first_error(&format!("{ok}a: (core.neg ?x) => ?x")),
        ("rule `a` is defined twice".into(), (2, 1))
    );
    assert_eq!(
        first_error("B_ad: (core.neg ?x) => ?x"),
        (
            "rule name `B_ad` must be kebab-case (a-z, 0-9, -)".into(),
            (1, 1)
        )
    );
    assert_eq!(
        first_error("b: ?x => ?x"),
        (
            "the left-hand side must be an op, not a variable".into(),
            (1, 1)
        )
    );
    assert_eq!(
        first_error("b: (core.relu ?x => ?x"),
        ("expected `(` or `?var`, found `=`".into(), (1, 18))
    );
    assert_eq!(
        first_error("b (core.relu ?x) => ?x"),
        ("expected `:` after the rule name, found `(`".into(), (1, 3))
    );
    assert_eq!(
        first_error("b: (core.leaky_relu {alpha = } ?x) => ?x"),
        ("expected an attribute value, found `}`".into(), (1, 30))
    );
    // every bad line is reported
    assert_eq!(
        load_rules("x: (a ?x) => ?x\ny: (b ?x) => ?x\n")
            .err()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn attributes_on_the_left_match_exactly() {
    let rules = load_rules("lrelu-half: (core.leaky_relu {alpha = 0.5} ?x) => (core.neg (core.neg (core.leaky_relu {alpha = 0.5} ?x)))\ncheap: (core.neg (core.neg ?x)) => ?x").unwrap();
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[4]), Location::default());
    let a = op(
        &mut f,
        Opcode::LeakyRelu,
        &[x],
        Attrs::new().with("alpha", Attr::Float(0.5)),
    );
    let b = op(
        &mut f,
        Opcode::LeakyRelu,
        &[x],
        Attrs::new().with("alpha", Attr::Float(0.25)),
    );
    f.set_return(vec![a, b]);
    let (_, stats) = optimize(&f, &rules);
    let fired: Vec<_> = stats
        .applied
        .iter()
        .filter(|(r, _)| r == "lrelu-half")
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(fired, [1], "{stats:?}");
}

/// A user rule builds a fused op with an epilogue (written as its step
/// list) and another matches one by its epilogue; the result verifies,
/// holds the epilogue as its region and means what the input meant.
#[test]
fn rules_build_and_match_fused_ops_by_their_epilogue() {
    use aoc_ir::ops::fused::{epilogue, print_epilogue};
    let rules = load_rules(concat!(
        "fuse-relu: (core.relu (core.matmul ?a ?b)) => (core.fused_matmul {epilogue = \"relu\"} ?a ?b)\n",
        "relu-twice: (core.fused_matmul {epilogue = \"relu\"} ?a ?b) => (core.neg (core.neg (core.fused_matmul {epilogue = \"relu; relu\"} ?a ?b)))\n",
    ))
    .unwrap();
    let mut f = Func::new("main");
    let a = f.add_param("a", f32t(&[2, 3]), Location::default());
    let b = f.add_param("b", f32t(&[3, 4]), Location::default());
    let m = op(&mut f, Opcode::MatMul, &[a, b], Attrs::new());
    let r = op(&mut f, Opcode::Relu, &[m], Attrs::new());
    f.set_return(vec![r]);
    let (g, stats) = optimize(&f, &rules);
    assert!(stats.applied.iter().any(|(r, n)| r == "fuse-relu" && *n > 0), "{stats:?}");
    assert!(stats.applied.iter().any(|(r, n)| r == "relu-twice" && *n > 0), "{stats:?}");
    // Both fused forms are in the e-graph; whichever is extracted carries
    // its epilogue as a region.
    let fused: Vec<_> = g.body.ops.iter().map(|&o| &g.ops[o]).filter(|o| o.opcode == Opcode::FusedMatMul).collect();
    assert_eq!(fused.len(), 1);
    assert_eq!(fused[0].regions.len(), 1);
    let steps = print_epilogue(&epilogue(&g, fused[0]).unwrap());
    assert!(steps == "relu" || steps == "relu; relu", "{steps}");
    let x = aoc_ir::Tensor::from_f64(f32t(&[2, 3]), vec![1.0, -2.0, 0.5, 3.0, -1.0, 2.0]);
    let y = aoc_ir::Tensor::from_f64(f32t(&[3, 4]), (0..12).map(|i| i as f64 - 6.0).collect());
    let run = |f: &Func| aoc_ir::interp::run(f, vec![x.clone(), y.clone()], &aoc_ir::interp::NoWeights).unwrap()[0].to_f64();
    assert_eq!(run(&g), run(&f));
    // A bad step list is an error at the term.
    let errs = load_rules("bad: (core.relu ?x) => (core.fused_pointwise {epilogue = \"frob\"} ?x)").unwrap_err();
    assert!(errs[0].message.contains("unknown epilogue step `frob`"), "{}", errs[0].message);
}
