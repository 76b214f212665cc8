//! The `winograd` family: 3x3 convolutions as Winograd F(2x2, 3x3) or
//! F(4x4, 3x3) (`core.winograd_conv2d`), with the weight transform
//! `U = G g G^T` computed at compile time into an in-memory constant
//! (`add_lazy_const`, memoized per tile and weight, and computed only for
//! the forms extraction keeps).
//!
//! Conditions (`is_eligible`): kernel 3x3, stride 1, dilation 1, groups 1,
//! f32 input and weight, and the weight a known constant (inline, in memory
//! or a loaded weights-file tensor).
//!
//! Both forms stay in the e-graph beside the direct convolution; which one
//! is extracted is the cost model's decision (the `winograd` pass tilts it
//! so every eligible conv is rewritten; `winograd-auto` leaves it to the
//! target's roofline).
//!
//! Tolerance: Winograd changes rounding (f32 transforms and channel sums
//! instead of one rounding of an f64 sum): 1e-3 absolute for activations
//! and weights of order 1, as `aoc_ir::ops::winograd` states.

use super::{lhs, nodes_of, union_if_same_type, var};
use crate::egraph::analysis::{Graph, add_lazy_const, const_tensor, infer_node};
use crate::egraph::convert::mark_constant_leaves;
use crate::egraph::node::{Node, OpAttrs, OpNode};
use crate::egraph::{Rewrite, TensorAnalysis};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::winograd::transform_weight;
use aoc_ir::{Func, Opcode, Scalar, TensorType};
use egg::{Applier, Id, PatternAst, Subst, Symbol};

/// The tiles the family offers: (m, rule-name tag).
pub const TILES: &[(usize, &str)] = &[(2, "f2x2"), (4, "f4x4")];

pub fn rules() -> Result<Vec<Rewrite>, String> {
    let mut out = Vec::new();
    for &(tile, tag) in TILES {
        out.extend(rules_for_tile(tile, tag)?);
    }
    Ok(out)
}

/// The rules of one tile size (the `winograd{tile=...}` pass uses one).
pub fn rules_for(tile: usize) -> Result<Vec<Rewrite>, String> {
    let &(t, tag) = TILES
        .iter()
        .find(|(t, _)| *t == tile)
        .ok_or_else(|| format!("no Winograd tile {tile} (2 or 4)"))?;
    rules_for_tile(t, tag)
}

fn rules_for_tile(tile: usize, tag: &str) -> Result<Vec<Rewrite>, String> {
    Ok(vec![
        // conv2d(x, w) -> winograd_conv2d(x, G w G^T)   3x3, stride 1, dilation 1, groups 1
        Rewrite::new(
            format!("winograd-{tag}"),
            lhs("(core.conv2d ?x ?w)")?,
            ToWinograd { tile },
        )?,
        // conv2d(x, w, b) -> winograd_conv2d(x, G w G^T, b)   3x3, stride 1, dilation 1, groups 1
        Rewrite::new(
            format!("winograd-{tag}-bias"),
            lhs("(core.conv2d ?x ?w ?b)")?,
            ToWinograd { tile },
        )?,
    ])
}

/// The constants this family's rules can consume in `func`, by `ValueId`
/// (for `crate::egraph::optimize_func_selected`): the weights of eligible
/// convolutions only.
pub fn weights_needed(func: &Func) -> Vec<bool> {
    let mut wanted = vec![false; func.values.len()];
    for &op_id in &func.body.ops {
        let op = &func.ops[op_id];
        if op.opcode != Opcode::Conv2d {
            continue;
        }
        let (Some(&x), Some(&w)) = (op.operands.first(), op.operands.get(1)) else {
            continue;
        };
        let Ok(attrs) = OpAttrs::new(Opcode::Conv2d, op.attrs.clone(), None) else {
            continue;
        };
        if is_eligible(&attrs, func.ty(x), func.ty(w)) {
            mark_constant_leaves(func, w, &mut wanted);
        }
    }
    wanted
}

struct ToWinograd {
    tile: usize,
}

fn ints(attrs: &OpAttrs, name: &str) -> Option<Vec<i64>> {
    match attrs.get(name) {
        Some(Attr::Ints(v)) => Some(v),
        _ => None,
    }
}

/// A conv Winograd F(m x m, 3 x 3) computes: 3x3 kernel, stride 1, dilation
/// 1, one group, f32 operands.
fn is_eligible(conv: &OpAttrs, x: &TensorType, w: &TensorType) -> bool {
    let f32_only = x.elem.scalar() == Some(Scalar::F32) && w.elem.scalar() == Some(Scalar::F32);
    f32_only
        && w.shape.len() == 4
        && w.shape[2..] == [3, 3]
        && ints(conv, "strides").as_deref() == Some(&[1, 1])
        && ints(conv, "dilations").as_deref() == Some(&[1, 1])
        && conv.get("groups") == Some(Attr::Int(1))
}

impl Applier<Node, TensorAnalysis> for ToWinograd {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        let x = egraph.find(subst[var("?x")]);
        let w = egraph.find(subst[var("?w")]);
        let b = subst.get(var("?b")).map(|b| egraph.find(*b));
        let mut forms = Vec::new();
        for conv in nodes_of(egraph, eclass, Opcode::Conv2d) {
            let children: Vec<Id> = conv.children.iter().map(|c| egraph.find(*c)).collect();
            let expected: Vec<Id> = [Some(x), Some(w), b].into_iter().flatten().collect();
            if children != expected {
                continue;
            }
            if let Some(id) = winograd_form(egraph, &conv, x, w, b, self.tile) {
                forms.push(id);
            }
        }
        forms
            .into_iter()
            .filter_map(|new| union_if_same_type(egraph, eclass, new))
            .collect()
    }
}

/// The Winograd node for one eligible conv, with its transformed weight.
fn winograd_form(
    egraph: &mut Graph,
    conv: &OpNode,
    x: Id,
    w: Id,
    b: Option<Id>,
    tile: usize,
) -> Option<Id> {
    let attrs = conv.attrs.as_deref()?;
    let (xt, wt) = (egraph[x].data.ty.clone()?, egraph[w].data.ty.clone()?);
    if !is_eligible(attrs, &xt, &wt) {
        return None;
    }
    let weight = const_tensor(egraph, w)?;
    let a = tile + 2;
    let u_ty = TensorType::new(vec![a, a, wt.shape[0], wt.shape[1]], Scalar::F32);
    // Keyed by the weight's side-table entry where it has one (stable across
    // merges), else by its class.
    let wkey = egraph[w]
        .nodes
        .iter()
        .find_map(|n| match n {
            Node::Const(c) => Some(format!("const{}", c.0)),
            _ => None,
        })
        .unwrap_or_else(|| format!("class{w}"));
    let key = format!("winograd-f{tile}:{wkey}");
    // Computed only if extraction keeps this form (`winograd-auto` offers
    // two tiles per conv and usually keeps at most one); the shape checks
    // above are all `transform_weight` makes.
    let u = add_lazy_const(egraph, key, &u_ty, move || {
        transform_weight(&weight, tile).ok()
    });
    let wattrs = Attrs::new()
        .with("tile", Attr::Int(tile as i64))
        .with("pads", Attr::Ints(ints(attrs, "pads")?));
    let node = Node::op(
        Opcode::WinogradConv2d,
        OpAttrs::new(Opcode::WinogradConv2d, wattrs, None).ok()?,
        [Some(x), Some(u), b].into_iter().flatten().collect(),
    );
    infer_node(egraph, &node)?;
    Some(egraph.add(node))
}
