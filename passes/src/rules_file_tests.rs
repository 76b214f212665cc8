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
