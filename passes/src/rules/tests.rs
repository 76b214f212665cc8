//! Every rule set builds; every algebraic rule fires on its pattern and
//! keeps the numbers (seeded random inputs, reference interpreter; all these
//! rules are exact, so the tolerance is 0); the family's growth is bounded.

use super::rule_sets;
use crate::egraph::Rewrite;
use crate::testutil::*;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{Func, Location, Opcode, Scalar, ValueId};
use std::collections::HashSet;

#[test]
fn every_rule_set_builds_with_unique_kebab_case_names() {
    let mut names = HashSet::new();
    for (family, build) in rule_sets() {
        let rules = build().unwrap_or_else(|e| panic!("rule family {family}: {e}"));
        assert!(!rules.is_empty());
        for r in rules {
            let n = r.name.to_string();
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
            assert!(names.insert(n.clone()), "duplicate rule {n}");
        }
    }
}

fn algebraic_rule(name: &str) -> Vec<Rewrite> {
    let r: Vec<Rewrite> = super::algebraic::rules()
        .unwrap()
        .into_iter()
        .filter(|r| r.name.as_str() == name)
        .collect();
    assert_eq!(r.len(), 1, "no rule {name}");
    r
}

/// Builds `body(x)` over a parameter of `shape`, applies the one rule and
/// checks it fired, left `expect` ops, and kept the outputs exactly.
fn check(
    name: &str,
    shape: &[usize],
    expect: &[Opcode],
    body: impl Fn(&mut Func, ValueId) -> ValueId,
) {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(shape), Location::default());
    let y = body(&mut f, x);
    f.set_return(vec![y]);
    let (g, stats) = optimize(&f, &algebraic_rule(name));
    assert!(
        stats.applied.iter().any(|(r, n)| r == name && *n > 0),
        "{name} did not fire: {stats:?}"
    );
    assert_eq!(opcodes(&g), expect, "{name}");
    assert_eq!(max_error(&f, &g, 4), 0.0, "{name}");
}

fn un(f: &mut Func, opcode: Opcode, x: ValueId, attrs: Attrs) -> ValueId {
    op(f, opcode, &[x], attrs)
}

#[test]
fn identity_and_noop_rules() {
    check("identity-elim", &[2, 3], &[Opcode::Relu], |f, x| {
        let i = un(f, Opcode::Identity, x, Attrs::new());
        un(f, Opcode::Relu, i, Attrs::new())
    });
    check("reshape-noop", &[2, 3], &[Opcode::Relu], |f, x| {
        let r = un(f, Opcode::Reshape, x, ints("shape", &[2, 3]));
        un(f, Opcode::Relu, r, Attrs::new())
    });
    check("flatten-noop", &[2, 3], &[Opcode::Relu], |f, x| {
        let r = un(f, Opcode::Flatten, x, Attrs::new());
        un(f, Opcode::Relu, r, Attrs::new())
    });
    check("expand-noop", &[2, 3], &[Opcode::Relu], |f, x| {
        let r = un(f, Opcode::Expand, x, ints("shape", &[3]));
        un(f, Opcode::Relu, r, Attrs::new())
    });
    check("cast-noop", &[2, 3], &[Opcode::Relu], |f, x| {
        let r = un(
            f,
            Opcode::Cast,
            x,
            Attrs::new().with("to", Attr::Type(Scalar::F32)),
        );
        un(f, Opcode::Relu, r, Attrs::new())
    });
    check("transpose-noop", &[2, 3], &[Opcode::Relu], |f, x| {
        let r = un(f, Opcode::Transpose, x, ints("perm", &[0, 1]));
        un(f, Opcode::Relu, r, Attrs::new())
    });
}

#[test]
fn chains_of_reshapes_and_transposes_merge() {
    check("reshape-reshape", &[2, 3, 4], &[Opcode::Reshape], |f, x| {
        let r = un(f, Opcode::Reshape, x, ints("shape", &[6, 4]));
        un(f, Opcode::Reshape, r, ints("shape", &[4, 6]))
    });
    check("reshape-flatten", &[2, 3, 4], &[Opcode::Reshape], |f, x| {
        let r = un(f, Opcode::Flatten, x, Attrs::new());
        un(f, Opcode::Reshape, r, ints("shape", &[24]))
    });
    // [0,2,1] then [1,0,2]: q = [p1[1], p1[0], p1[2]] = [2, 0, 1]
    check(
        "transpose-transpose",
        &[2, 3, 4],
        &[Opcode::Transpose],
        |f, x| {
            let t = un(f, Opcode::Transpose, x, ints("perm", &[0, 2, 1]));
            un(f, Opcode::Transpose, t, ints("perm", &[1, 0, 2]))
        },
    );
    // a permutation and its inverse cancel
    check(
        "transpose-transpose",
        &[2, 3, 4],
        &[Opcode::Relu],
        |f, x| {
            let t = un(f, Opcode::Transpose, x, ints("perm", &[1, 2, 0]));
            let u = un(f, Opcode::Transpose, t, ints("perm", &[2, 0, 1]));
            un(f, Opcode::Relu, u, Attrs::new())
        },
    );
}

#[test]
fn composed_transpose_has_the_right_permutation() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[2, 3, 4]), Location::default());
    let t = un(&mut f, Opcode::Transpose, x, ints("perm", &[0, 2, 1]));
    let u = un(&mut f, Opcode::Transpose, t, ints("perm", &[1, 0, 2]));
    f.set_return(vec![u]);
    let (g, _) = optimize(&f, &algebraic_rule("transpose-transpose"));
    assert_eq!(
        g.ops[g.body.ops[0]].attrs.get("perm"),
        Some(&Attr::Ints(vec![2, 0, 1]))
    );
}

#[test]
fn involutions_and_idempotence() {
    check("neg-neg", &[5], &[Opcode::Relu], |f, x| {
        let a = un(f, Opcode::Neg, x, Attrs::new());
        let b = un(f, Opcode::Neg, a, Attrs::new());
        un(f, Opcode::Relu, b, Attrs::new())
    });
    check("relu-relu", &[5], &[Opcode::Relu], |f, x| {
        let a = un(f, Opcode::Relu, x, Attrs::new());
        un(f, Opcode::Relu, a, Attrs::new())
    });
}

#[test]
fn multiplying_by_one_and_adding_zero() {
    let with_const = |opcode: Opcode, value: f64, const_first: bool| {
        move |f: &mut Func, x: ValueId| {
            let c = dense(f, &[3], vec![value; 3]);
            let (a, b) = if const_first { (c, x) } else { (x, c) };
            let y = op(f, opcode, &[a, b], Attrs::new());
            un(f, Opcode::Relu, y, Attrs::new())
        }
    };
    check(
        "mul-one",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Mul, 1.0, false),
    );
    check(
        "mul-one-left",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Mul, 1.0, true),
    );
    check(
        "div-one",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Div, 1.0, false),
    );
    check(
        "add-zero",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Add, 0.0, false),
    );
    check(
        "add-zero-left",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Add, 0.0, true),
    );
    check(
        "sub-zero",
        &[2, 3],
        &[Opcode::Relu],
        with_const(Opcode::Sub, 0.0, false),
    );
}

#[test]
fn conditions_reject_non_identities() {
    // x * 2 stays; x[3] * ones[2,3] broadcasts, so it stays too
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[3]), Location::default());
    let two = dense(&mut f, &[3], vec![2.0; 3]);
    let ones = dense(&mut f, &[2, 3], vec![1.0; 6]);
    let a = op(&mut f, Opcode::Mul, &[x, two], Attrs::new());
    let b = op(&mut f, Opcode::Mul, &[a, ones], Attrs::new());
    // a real transpose of a square matrix keeps its shape but is not a no-op
    let sq = f.add_param("s", f32t(&[3, 3]), Location::default());
    let t = un(&mut f, Opcode::Transpose, sq, ints("perm", &[1, 0]));
    f.set_return(vec![b, t]);
    let (g, _) = optimize(&f, &super::algebraic::rules().unwrap());
    assert_eq!(opcodes(&g).iter().filter(|o| **o == Opcode::Mul).count(), 2);
    assert!(opcodes(&g).contains(&Opcode::Transpose));
    assert_eq!(max_error(&f, &g, 3), 0.0);
}

/// Growth: a 300-op chain mixing every pattern the family matches stays
/// within 4 nodes per original op and saturates.
#[test]
fn algebraic_growth_is_bounded() {
    let mut f = Func::new("main");
    let mut x = f.add_param("x", f32t(&[4, 6]), Location::default());
    let one = dense(&mut f, &[6], vec![1.0; 6]);
    let zero = dense(&mut f, &[6], vec![0.0; 6]);
    for i in 0..50 {
        x = un(&mut f, Opcode::Reshape, x, ints("shape", &[6, 4]));
        x = un(&mut f, Opcode::Reshape, x, ints("shape", &[4, 6]));
        x = un(&mut f, Opcode::Transpose, x, ints("perm", &[1, 0]));
        x = un(&mut f, Opcode::Transpose, x, ints("perm", &[1, 0]));
        x = op(
            &mut f,
            if i % 2 == 0 { Opcode::Mul } else { Opcode::Sub },
            &[x, if i % 2 == 0 { one } else { zero }],
            Attrs::new(),
        );
        x = un(&mut f, Opcode::Tanh, x, Attrs::new());
    }
    f.set_return(vec![x]);
    let n_ops = f.body.ops.len();
    let (g, stats) = optimize(&f, &super::algebraic::rules().unwrap());
    assert_eq!(stats.stop_reason, "saturated");
    assert!(
        stats.nodes <= 4 * n_ops,
        "{} nodes for {n_ops} ops",
        stats.nodes
    );
    assert!(
        stats.classes <= n_ops + 2,
        "{} classes for {n_ops} ops",
        stats.classes
    );
    assert_eq!(opcodes(&g), vec![Opcode::Tanh; 50]);
    assert!(max_error(&f, &g, 2) < 1e-12);
}
