//! The `fuse` family's recognizers for patterns exporters write out in
//! primitives: Erf-GELU, layer-norm and softmax (rules in `fuse.rs`).
//! Each matches in code, trying every operand order of the commutative
//! adds and multiplies, so one rule covers the exporters' variants.

use super::fuse::{constant, splat};
use super::nodes_of;
use super::var;
use crate::egraph::analysis::Graph;
use crate::egraph::node::{Node, OpAttrs, OpNode};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{Opcode, TensorType};
use egg::{Id, Subst};

/// Whether class `id` is a constant whose elements all equal `target`
/// within 1e-6 relative (exporters write 0.70710677 or 1.4142135).
fn is_scalar(egraph: &Graph, id: Id, target: f64) -> bool {
    constant(egraph, id).is_some_and(|t| {
        t.ty.elem.quant().is_none()
            && !t.is_empty()
            && (0..t.len()).all(|i| (t.get_f64(i) - target).abs() <= 1e-6 * target.abs())
    })
}

/// The (x, other) pairs of binary `opcode` nodes in `class`, both orders.
fn pairs(egraph: &Graph, class: Id, opcode: Opcode) -> Vec<(Id, Id)> {
    let mut out = Vec::new();
    for n in nodes_of(egraph, class, opcode) {
        let (a, b) = (egraph.find(n.children[0]), egraph.find(n.children[1]));
        out.push((a, b));
        out.push((b, a));
    }
    out
}

/// The `x` of each `erf(x / sqrt 2)` (or `erf(x * 0.70710677)`) in `class`.
fn erf_args(egraph: &Graph, class: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for e in nodes_of(egraph, class, Opcode::Erf) {
        let inner = egraph.find(e.children[0]);
        for d in nodes_of(egraph, inner, Opcode::Div) {
            if is_scalar(egraph, d.children[1], std::f64::consts::SQRT_2) {
                out.push(egraph.find(d.children[0]));
            }
        }
        for (x, c) in pairs(egraph, inner, Opcode::Mul) {
            if is_scalar(egraph, c, std::f64::consts::FRAC_1_SQRT_2) {
                out.push(x);
            }
        }
    }
    out
}

/// The `x` of each `1 + erf(x / sqrt 2)` in `class`.
fn one_plus_erf(egraph: &Graph, class: Id) -> Vec<Id> {
    pairs(egraph, class, Opcode::Add)
        .into_iter()
        .filter(|&(_, one)| is_scalar(egraph, one, 1.0))
        .flat_map(|(e, _)| erf_args(egraph, e))
        .collect()
}

/// `gelu(x)` for each Erf-GELU form of `eclass` (a product).
pub fn erf_gelu(egraph: &mut Graph, eclass: Id) -> Vec<Id> {
    let mut xs = Vec::new();
    for (p, q) in pairs(egraph, eclass, Opcode::Mul) {
        // (x * (1 + erf)) * 0.5
        if is_scalar(egraph, q, 0.5) {
            for (x, e) in pairs(egraph, p, Opcode::Mul) {
                if one_plus_erf(egraph, e).contains(&x) {
                    xs.push(x);
                }
            }
        }
        // (x * 0.5) * (1 + erf)
        for (x, h) in pairs(egraph, p, Opcode::Mul) {
            if is_scalar(egraph, h, 0.5) && one_plus_erf(egraph, q).contains(&x) {
                xs.push(x);
            }
        }
        // x * ((1 + erf) * 0.5)
        for (e, h) in pairs(egraph, q, Opcode::Mul) {
            if is_scalar(egraph, h, 0.5) && one_plus_erf(egraph, e).contains(&p) {
                xs.push(p);
            }
        }
    }
    xs.sort();
    xs.dedup();
    let Ok(attrs) = OpAttrs::new(Opcode::Gelu, Attrs::new(), None) else {
        return vec![];
    };
    xs.into_iter()
        .map(|x| egraph.add(Node::op(Opcode::Gelu, attrs.clone(), vec![x])))
        .collect()
}

/// The normalized trailing axes of a reduce node with `keepdims`, as the
/// first reduced axis, when they are exactly the last ones.
fn trailing_axes(node: &OpNode, rank: usize) -> Option<usize> {
    let attrs = node.attrs.as_ref()?;
    if attrs.get("keepdims") != Some(Attr::Bool(true)) {
        return None;
    }
    let Some(Attr::Ints(axes)) = attrs.get("axes") else {
        return None;
    };
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<Result<_, _>>()
        .ok()?;
    axes.sort();
    let first = *axes.first()?;
    (axes.iter().enumerate().all(|(i, &a)| a == first + i) && axes.last() == Some(&(rank - 1)))
        .then_some(first)
}

/// `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)` -> `layer_norm(x, 1)`.
pub fn layer_norm(egraph: &mut Graph, _eclass: Id, subst: &Subst) -> Vec<Id> {
    let d = egraph.find(subst[var("?d")]);
    let (v, eps) = (egraph.find(subst[var("?var")]), subst[var("?eps")]);
    let Some(ty) = egraph[d].data.ty.clone() else {
        return vec![];
    };
    let rank = ty.shape.len();
    let Some(eps_t) = constant(egraph, eps) else {
        return vec![];
    };
    if eps_t.len() != 1 {
        return vec![];
    }
    let epsilon = eps_t.get_f64(0);
    // var = reduce_mean(pow(d, 2)) over the same trailing axes as the mean
    let var_axis: Vec<usize> = nodes_of(egraph, v, Opcode::ReduceMean)
        .iter()
        .filter(|r| {
            nodes_of(egraph, r.children[0], Opcode::Pow)
                .iter()
                .any(|p| egraph.find(p.children[0]) == d && is_scalar(egraph, p.children[1], 2.0))
        })
        .filter_map(|r| trailing_axes(r, rank))
        .collect();
    let mut out = Vec::new();
    for s in nodes_of(egraph, d, Opcode::Sub) {
        let (x, mu) = (egraph.find(s.children[0]), egraph.find(s.children[1]));
        let axes: Vec<usize> = nodes_of(egraph, mu, Opcode::ReduceMean)
            .iter()
            .filter(|r| egraph.find(r.children[0]) == x)
            .filter_map(|r| trailing_axes(r, rank))
            .filter(|a| var_axis.contains(a))
            .collect();
        for axis in axes {
            let one_ty = TensorType::new(vec![1], ty.elem.clone());
            let Some(one) = splat(egraph, &one_ty, 1.0) else {
                continue;
            };
            let attrs = Attrs::new()
                .with("axis", Attr::Int(axis as i64))
                .with("epsilon", Attr::Float(epsilon));
            let Ok(attrs) = OpAttrs::new(Opcode::LayerNorm, attrs, None) else {
                continue;
            };
            out.push(egraph.add(Node::op(Opcode::LayerNorm, attrs, vec![x, one])));
        }
    }
    out
}

/// `layer_norm(x, s, b) * g -> layer_norm(x, s * g, b * g)` (`Mul`) and
/// `layer_norm(x, s, b) + t -> layer_norm(x, s, b + t)` (`Add`), for
/// constant `s`, `b`, `g`, `t` and a single-use layer-norm.
pub fn layer_norm_affine(egraph: &mut Graph, eclass: Id, opcode: Opcode) -> Vec<Id> {
    let mut out = Vec::new();
    for (ln_class, c) in pairs(egraph, eclass, opcode) {
        if egraph[ln_class].data.uses != 1 {
            continue;
        }
        let Some(ct) = constant(egraph, c) else {
            continue;
        };
        for ln in nodes_of(egraph, ln_class, Opcode::LayerNorm) {
            let Some(attrs) = ln.attrs.clone() else {
                continue;
            };
            let vals: Option<Vec<_>> = ln.children[1..]
                .iter()
                .map(|&k| constant(egraph, k))
                .collect();
            let Some(vals) = vals else { continue };
            let scale = &vals[0];
            let bias = vals.get(1);
            let combine = |a: &aoc_ir::Tensor,
                           b: &aoc_ir::Tensor,
                           f: fn(f64, f64) -> f64|
             -> Option<aoc_ir::Tensor> {
                let shape = aoc_ir::tensor::broadcast_shapes(a.shape(), b.shape()).ok()?;
                let ma = aoc_ir::tensor::broadcast_index_map(a.shape(), &shape);
                let mb = aoc_ir::tensor::broadcast_index_map(b.shape(), &shape);
                let vals = ma
                    .iter()
                    .zip(&mb)
                    .map(|(&i, &j)| f(a.get_f64(i), b.get_f64(j)))
                    .collect();
                Some(aoc_ir::Tensor::from_f64(
                    TensorType::new(shape, a.ty.elem.clone()),
                    vals,
                ))
            };
            let mul = |x: f64, y: f64| x * y;
            let add = |x: f64, y: f64| x + y;
            let (new_s, new_b) = if opcode == Opcode::Mul {
                (
                    combine(scale, &ct, mul),
                    bias.and_then(|b| combine(b, &ct, mul)),
                )
            } else {
                let b = match bias {
                    Some(b) => combine(b, &ct, add),
                    None => Some(ct.as_ref().clone()),
                };
                (Some(scale.as_ref().clone()), b)
            };
            let Some(new_s) = new_s else { continue };
            let key = |what: &str| format!("fuse-ln-{what}:{opcode:?}:{ln_class}:{c}");
            let sty = new_s.ty.clone();
            let Some(s_id) =
                crate::egraph::add_computed_const(egraph, key("s"), &sty, || Some(new_s))
            else {
                continue;
            };
            let mut children = vec![ln.children[0], s_id];
            if let Some(b) = new_b {
                let bty = b.ty.clone();
                let Some(b_id) =
                    crate::egraph::add_computed_const(egraph, key("b"), &bty, || Some(b))
                else {
                    continue;
                };
                children.push(b_id);
            } else if bias.is_some() {
                continue;
            }
            out.push(egraph.add(Node::op(Opcode::LayerNorm, (*attrs).clone(), children)));
        }
    }
    out
}

/// `exp(z) / reduce_sum(exp(z), [a])` -> `softmax(z, a)`, and
/// `softmax(x, a)` when `z = x - reduce_max(x, [a])`.
pub fn softmax(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let e = egraph.find(subst[var("?e")]);
    let zs: Vec<Id> = nodes_of(egraph, e, Opcode::Exp)
        .iter()
        .map(|n| egraph.find(n.children[0]))
        .collect();
    zs.into_iter()
        .flat_map(|z| softmax_of(egraph, eclass, e, z))
        .collect()
}

fn softmax_of(egraph: &mut Graph, eclass: Id, e: Id, z: Id) -> Vec<Id> {
    let Some(rank) = egraph[z].data.ty.as_ref().map(|t| t.shape.len()) else {
        return vec![];
    };
    // the axes of the divisions of `e` by its own sum (the matched one and
    // any other form of the class)
    let mut axes = Vec::new();
    for d in nodes_of(egraph, eclass, Opcode::Div) {
        if egraph.find(d.children[0]) != e {
            continue;
        }
        for r in nodes_of(egraph, d.children[1], Opcode::ReduceSum) {
            if egraph.find(r.children[0]) != e {
                continue;
            }
            if let Some(a) = single_axis(&r, rank) {
                axes.push(a);
            }
        }
    }
    let mut out = Vec::new();
    for a in axes {
        let mut xs = vec![z];
        for s in nodes_of(egraph, z, Opcode::Sub) {
            let x = egraph.find(s.children[0]);
            let max_of_x = nodes_of(egraph, s.children[1], Opcode::ReduceMax)
                .iter()
                .any(|m| egraph.find(m.children[0]) == x && single_axis(m, rank) == Some(a));
            if max_of_x {
                xs.push(x);
            }
        }
        for x in xs {
            let Ok(attrs) = OpAttrs::new(
                Opcode::Softmax,
                Attrs::new().with("axis", Attr::Int(a as i64)),
                None,
            ) else {
                continue;
            };
            out.push(egraph.add(Node::op(Opcode::Softmax, attrs, vec![x])));
        }
    }
    out
}

/// The one reduced axis of a reduce node with `keepdims`.
fn single_axis(node: &OpNode, rank: usize) -> Option<usize> {
    let attrs = node.attrs.as_ref()?;
    if attrs.get("keepdims") != Some(Attr::Bool(true)) {
        return None;
    }
    match attrs.get("axes") {
        Some(Attr::Ints(v)) if v.len() == 1 => normalize_axis(v[0], rank).ok(),
        _ => None,
    }
}
