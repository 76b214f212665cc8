//! Algebraic simplification: identities that remove ops.
//!
//! Constant folding itself is done by the e-class analysis (any op whose
//! operands are small constants gets a constant node); these rules remove
//! ops that do nothing. All are directional (they only ever shrink the
//! graph), so the family cannot grow the e-graph beyond the nodes it adds
//! for merged reshapes and transposes.
//!
//! Tolerance: every rule here is exact in the reference interpreter except
//! that `x + 0` turns `-0.0` into `+0.0` and back (sign of zero only).

use super::{nodes_of, rule, rule_fn, rule_if, var};
use crate::egraph::Rewrite;
use crate::egraph::analysis::Graph;
use crate::egraph::node::{Node, OpAttrs};
use aoc_ir::Opcode;
use aoc_ir::attr::{Attr, Attrs};
use egg::{Id, Subst};

pub fn rules() -> Result<Vec<Rewrite>, String> {
    Ok(vec![
        // identity(x) -> x
        rule("identity-elim", "(core.identity ?x)", "?x")?,
        // reshape(x) -> x   when the shapes are equal
        rule("reshape-noop", "(core.reshape ?x)", "?x")?,
        // flatten(x) -> x   when the shapes are equal
        rule("flatten-noop", "(core.flatten ?x)", "?x")?,
        // expand(x) -> x    when the shapes are equal
        rule("expand-noop", "(core.expand ?x)", "?x")?,
        // cast(x) -> x      when the element types are equal
        rule("cast-noop", "(core.cast ?x)", "?x")?,
        // reshape(reshape(x, s1), s2) -> reshape(x, s2)
        rule_fn(
            "reshape-reshape",
            "(core.reshape (core.reshape ?x))",
            reshape_to_class_shape,
        )?,
        // reshape(flatten(x), s) -> reshape(x, s)
        rule_fn(
            "reshape-flatten",
            "(core.reshape (core.flatten ?x))",
            reshape_to_class_shape,
        )?,
        // transpose(transpose(x, p1), p2) -> transpose(x, p1∘p2), or x when that is the identity
        rule_fn(
            "transpose-transpose",
            "(core.transpose (core.transpose ?x))",
            compose_transposes,
        )?,
        // transpose(x, [0, 1, ..]) -> x
        rule_fn(
            "transpose-noop",
            "(core.transpose ?x)",
            drop_identity_transpose,
        )?,
        // neg(neg(x)) -> x
        rule("neg-neg", "(core.neg (core.neg ?x))", "?x")?,
        // relu(relu(x)) -> relu(x)
        rule("relu-relu", "(core.relu (core.relu ?x))", "(core.relu ?x)")?,
        // x * 1 -> x
        rule_if("mul-one", "(core.mul ?x ?c)", "?x", c_is_one)?,
        // 1 * x -> x
        rule_if("mul-one-left", "(core.mul ?c ?x)", "?x", c_is_one)?,
        // x / 1 -> x
        rule_if("div-one", "(core.div ?x ?c)", "?x", c_is_one)?,
        // x + 0 -> x
        rule_if("add-zero", "(core.add ?x ?c)", "?x", c_is_zero)?,
        // 0 + x -> x
        rule_if("add-zero-left", "(core.add ?c ?x)", "?x", c_is_zero)?,
        // x - 0 -> x
        rule_if("sub-zero", "(core.sub ?x ?c)", "?x", c_is_zero)?,
    ])
}

/// Whether `?c` is a known constant, not quantized, every element `value`.
fn c_is_all(egraph: &Graph, subst: &Subst, value: f64) -> bool {
    let data = &egraph[subst[var("?c")]].data;
    match (&data.value, &data.ty) {
        (Some(t), Some(ty)) if ty.elem.quant().is_none() => {
            (0..t.len()).all(|i| t.get_f64(i) == value)
        }
        _ => false,
    }
}

/// `?c` is all ones (the typed applier checks `?x` has the result's type,
/// so a broadcasting `1` that enlarges `x` does not apply).
fn c_is_one(egraph: &Graph, _: Id, subst: &Subst) -> bool {
    c_is_all(egraph, subst, 1.0)
}

/// `?c` is all zeros.
fn c_is_zero(egraph: &Graph, _: Id, subst: &Subst) -> bool {
    c_is_all(egraph, subst, 0.0)
}

/// A reshape of `?x` to the matched class's shape.
fn reshape_to_class_shape(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let Some(ty) = egraph[eclass].data.ty.clone() else {
        return vec![];
    };
    let shape = ty.shape.iter().map(|&d| d as i64).collect();
    let Ok(attrs) = OpAttrs::new(
        Opcode::Reshape,
        Attrs::new().with("shape", Attr::Ints(shape)),
        None,
    ) else {
        return vec![];
    };
    vec![egraph.add(Node::op(Opcode::Reshape, attrs, vec![subst[var("?x")]]))]
}

fn perm_of(attrs: &OpAttrs) -> Option<Vec<i64>> {
    match attrs.get("perm") {
        Some(Attr::Ints(p)) => Some(p),
        _ => None,
    }
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

/// For each transpose(transpose(x, p1), p2) in the class: x permuted by
/// `q[j] = p1[p2[j]]`, or `x` itself when `q` is the identity.
fn compose_transposes(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let x = egraph.find(subst[var("?x")]);
    let mut out = Vec::new();
    for outer in nodes_of(egraph, eclass, Opcode::Transpose) {
        let inner_class = egraph.find(outer.children[0]);
        for inner in nodes_of(egraph, inner_class, Opcode::Transpose) {
            if egraph.find(inner.children[0]) != x {
                continue;
            }
            let (Some(p1), Some(p2)) = (
                inner.attrs.as_deref().and_then(perm_of),
                outer.attrs.as_deref().and_then(perm_of),
            ) else {
                continue;
            };
            let Some(q) = p2
                .iter()
                .map(|&j| usize::try_from(j).ok().and_then(|j| p1.get(j).copied()))
                .collect::<Option<Vec<i64>>>()
            else {
                continue;
            };
            if is_identity(&q) {
                out.push(x);
            } else if let Ok(attrs) = OpAttrs::new(
                Opcode::Transpose,
                Attrs::new().with("perm", Attr::Ints(q)),
                None,
            ) {
                out.push(egraph.add(Node::op(Opcode::Transpose, attrs, vec![x])));
            }
        }
    }
    out
}

/// `x` for each transpose of `?x` in the class whose permutation is the
/// identity.
fn drop_identity_transpose(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let x = egraph.find(subst[var("?x")]);
    let found = nodes_of(egraph, eclass, Opcode::Transpose).iter().any(|t| {
        egraph.find(t.children[0]) == x
            && t.attrs
                .as_deref()
                .and_then(perm_of)
                .is_some_and(|p| is_identity(&p))
    });
    if found { vec![x] } else { vec![] }
}
