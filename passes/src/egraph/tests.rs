//! Tests of the egg bridge: conversion both ways, sharing, several results,
//! locations, constant folding, type safety and bounded saturation.

use crate::egraph::node::Node;
use crate::rules_file::load_rules;
use crate::testutil::*;
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData};
use aoc_ir::{Func, Location, Opcode};

#[test]
fn round_trip_keeps_sharing_results_names_and_locations() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[2, 3]), Location::named("input"));
    let a = op(&mut f, Opcode::Relu, &[x], Attrs::new());
    let b = op(&mut f, Opcode::Add, &[a, a], Attrs::new());
    let c = op(&mut f, Opcode::Mul, &[a, b], Attrs::new());
    f.set_return(vec![b, c]);
    let (g, stats) = optimize(&f, &[]);
    assert_eq!(opcodes(&g), [Opcode::Relu, Opcode::Add, Opcode::Mul]);
    assert_eq!(g.results().len(), 2);
    assert_eq!(stats.stop_reason, "saturated");
    assert_eq!(stats.classes, 4);
    // relu is computed once and used three times
    let relu = g.ops[g.body.ops[0]].results[0];
    let uses = g
        .body
        .ops
        .iter()
        .flat_map(|o| g.ops[*o].operands.clone())
        .filter(|v| *v == relu)
        .count();
    assert_eq!(uses, 3);
    for (&old, &new) in f.body.ops.iter().zip(&g.body.ops) {
        assert_eq!(g.ops[new].loc, f.ops[old].loc);
        assert_eq!(
            g.name_of(g.ops[new].results[0]),
            f.name_of(f.ops[old].results[0])
        );
    }
    assert_eq!(max_error(&f, &g, 3), 0.0);
}

#[test]
fn small_constant_subgraphs_fold() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[3]), Location::default());
    let c1 = dense(&mut f, &[3], vec![1.0, 2.0, 3.0]);
    let c2 = dense(&mut f, &[3], vec![1.0, 1.0, 1.0]);
    let s = op(&mut f, Opcode::Add, &[c1, c2], Attrs::new());
    let e = op(&mut f, Opcode::Neg, &[s], Attrs::new());
    let y = op(&mut f, Opcode::Mul, &[x, e], Attrs::new());
    f.set_return(vec![y]);
    let (g, _) = optimize(&f, &[]);
    assert_eq!(opcodes(&g), [Opcode::Const, Opcode::Mul]);
    let folded = g.ops[g.body.ops[0]].attrs.get("value").cloned();
    assert_eq!(
        folded,
        Some(Attr::Const(ConstValue::Dense(DenseData::Floats(vec![
            -2.0, -3.0, -4.0
        ]))))
    );
    assert_eq!(max_error(&f, &g, 3), 0.0);
}

#[test]
fn a_rule_that_changes_the_type_never_applies() {
    let rules = load_rules("bad: (core.relu ?x) => (core.matmul ?x ?x)").unwrap();
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[3]), Location::default());
    let y = op(&mut f, Opcode::Relu, &[x], Attrs::new());
    f.set_return(vec![y]);
    let (g, stats) = optimize(&f, &rules);
    assert_eq!(opcodes(&g), [Opcode::Relu]);
    assert_eq!(g.result_types, f.result_types);
    // the matmul was added (a scalar) but not merged with the relu's class
    assert!(stats.classes >= 3);
}

#[test]
fn saturation_is_bounded_and_says_why_it_stopped() {
    let rules = load_rules("grow: (core.relu ?x) => (core.relu (core.max ?x ?x))").unwrap();
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[2]), Location::default());
    let y = op(&mut f, Opcode::Relu, &[x], Attrs::new());
    f.set_return(vec![y]);
    let limits = crate::egraph::Limits {
        iterations: 5,
        ..Default::default()
    };
    let r = crate::egraph::optimize_func(&f, &rules, &limits, &crate::egraph::Roofline::default())
        .unwrap();
    let crate::egraph::Optimized::Done(g, stats) = r else {
        panic!("skipped")
    };
    assert_eq!(stats.stop_reason, "iteration limit 5");
    assert_eq!(stats.iterations, 5);
    // the cheapest form is still one relu
    assert_eq!(opcodes(&g), [Opcode::Relu]);
}

#[test]
fn language_reads_mnemonics_and_checks_arity() {
    use egg::FromOp;
    assert!(Node::from_op("core.relu", vec![0.into()]).is_ok());
    assert_eq!(
        Node::from_op("core.nope", vec![]).unwrap_err(),
        "unknown op `core.nope`"
    );
    assert_eq!(
        Node::from_op("core.relu", vec![]).unwrap_err(),
        "core.relu: expected 1 operands, found 0"
    );
    let n = Node::from_op("param:3", vec![]).unwrap();
    assert_eq!(n.to_string(), "param:3");
    assert_eq!(
        Node::from_op("core.add", vec![0.into(), 1.into()])
            .unwrap()
            .to_string(),
        "core.add"
    );
}

#[test]
fn roofline_prefers_fewer_ops_and_prices_matmul_by_flops() {
    use crate::egraph::cost::{CostModel, CostNode, flops};
    use crate::egraph::node::OpAttrs;
    let m = crate::egraph::Roofline::for_target("sm_90").unwrap();
    let a = f32t(&[64, 128]);
    let b = f32t(&[128, 32]);
    let r = f32t(&[64, 32]);
    let attrs = OpAttrs::new(Opcode::MatMul, Attrs::new(), None).unwrap();
    assert_eq!(
        flops(Opcode::MatMul, &attrs, &[&a, &b], &r),
        2.0 * 64.0 * 32.0 * 128.0
    );
    let c = m.cost(&CostNode::Op {
        opcode: Opcode::MatMul,
        attrs: &attrs,
        operands: &[&a, &b],
        result: &r,
    });
    // launch overhead plus max(flops / peak, bytes / bandwidth)
    let bytes = 4.0 * (64.0 * 128.0 + 128.0 * 32.0 + 64.0 * 32.0);
    assert!((c - (3e-6 + (524288.0 / 67e12f64).max(bytes / 4.8e12))).abs() < 1e-15);
    assert!(crate::egraph::Roofline::for_target("tpu").is_none());
}
