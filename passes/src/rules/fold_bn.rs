//! The `fold-bn` family: a linear op (conv2d — grouped and depthwise too —,
//! matmul, gemm) followed by an inference batch-norm, or by a per-channel
//! multiply or add with constant operands, becomes one op whose weights and
//! bias are computed at compile time.
//!
//! Every rule is an affine map per output channel, `y' = y * f + g`:
//! batch-norm gives `f = scale / sqrt(var + eps)`, `g = bias - mean * f`; a
//! multiply gives `f = s, g = 0`; an add `f = 1, g = t`. Folding it into the
//! producer gives `w'[o] = w[o] * f[o]` (the output channel is axis 0 of an
//! OIHW conv weight, the column of a matmul/gemm right operand) and
//! `b'[o] = b[o] * f[o] + g[o]`, computed in f64 and rounded once to the
//! weight's element type (element by element from the weight's storage, no
//! intermediate copy, and only the first time a match is seen). The folded
//! tensors are in-memory constants (`add_computed_const`), memoized per rule
//! and inputs.
//!
//! Conditions: the producer's result has exactly one use (else folding
//! would duplicate it), every folded operand is a known constant (inline, in
//! memory, or a loaded weight), and the scale/shift are constant along every
//! dimension but the channel one (axis 1 for conv, the last for matmul and
//! gemm). Multiply and add rules match both operand orders.
//!
//! Tolerance: folding changes rounding (the weights are rounded after
//! scaling, and a conv's bias is accumulated instead of added after
//! rounding): results agree within 1e-4 relative to the output's magnitude
//! (the tests check 1e-5 on unit-scale data).

use super::{nodes_of, rule_fn, var};
use crate::egraph::Rewrite;
use crate::egraph::analysis::{Graph, add_computed_const, const_tensor};
use crate::egraph::convert::mark_constant_leaves;
use crate::egraph::node::{Node, OpAttrs, OpNode};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::entity::EntityId;
use aoc_ir::tensor::{Data, broadcast_index_map, round_to};
use aoc_ir::ops::kind::AffineFold;
use aoc_ir::{Func, OpId, Opcode, Tensor, TensorType, ValueId};
use egg::{Id, Subst};
use std::sync::Arc;

pub fn rules() -> Result<Vec<Rewrite>, String> {
    let mut out = Vec::new();
    for (name, producer) in [
        ("conv", "(core.conv2d ?x ?w)"),
        ("conv-bias", "(core.conv2d ?x ?w ?b)"),
        ("matmul", "(core.matmul ?x ?w)"),
        ("gemm", "(core.gemm ?x ?w)"),
        ("gemm-c", "(core.gemm ?x ?w ?b)"),
    ] {
        // batch_norm(p(x, w, b)) -> p(x, w * f, b * f + g)   f = scale / sqrt(var + eps), g = bias - mean * f
        out.push(rule_fn(
            &format!("fold-bn-{name}"),
            &format!("(core.batch_norm {producer} ?s ?t ?m ?v)"),
            fold_batch_norm,
        )?);
        // p(x, w, b) * s -> p(x, w * s, b * s)   s per output channel
        out.push(rule_fn(
            &format!("fold-mul-{name}"),
            &format!("(core.mul {producer} ?s)"),
            fold_mul,
        )?);
        // s * p(x, w, b) -> p(x, w * s, b * s)
        out.push(rule_fn(
            &format!("fold-mul-left-{name}"),
            &format!("(core.mul ?s {producer})"),
            fold_mul,
        )?);
        // p(x, w, b) + t -> p(x, w, b + t)   t per output channel
        out.push(rule_fn(
            &format!("fold-add-{name}"),
            &format!("(core.add {producer} ?t)"),
            fold_add,
        )?);
        // t + p(x, w, b) -> p(x, w, b + t)
        out.push(rule_fn(
            &format!("fold-add-left-{name}"),
            &format!("(core.add ?t {producer})"),
            fold_add,
        )?);
    }
    Ok(out)
}

/// The constants this family's rules can consume in `func`, by `ValueId`
/// (for `crate::egraph::optimize_func_selected`): the weight and bias of
/// every conv2d/matmul/gemm whose result feeds a chain of batch-norms and
/// multiplies/adds by constants, and those ops' constant operands. Folding
/// a link makes its result a producer again, so the whole chain is marked.
/// A function with no such pattern (BERT: its matmuls feed adds of
/// activations) loads nothing.
pub fn weights_needed(func: &Func) -> Vec<bool> {
    let n = func.values.len();
    let mut wanted = vec![false; n];
    // Whether a value is computed from constants only (marks nothing).
    let constant = |v: ValueId| mark_constant_leaves(func, v, &mut []);
    // The producer op a value stems from through foldable links.
    let mut root: Vec<Option<OpId>> = vec![None; n];
    for &op_id in &func.body.ops {
        let op = &func.ops[op_id];
        let [result] = op.results[..] else { continue };
        let from = |v: ValueId| root[v.index()];
        let opcode = op.opcode;
        // (producer, the link's constant operands, whether it shifts)
        let link = if opcode == Opcode::BatchNorm {
            match op.operands.split_first() {
                Some((&x, params)) if params.iter().all(|&v| constant(v)) => {
                    from(x).map(|p| (p, params.to_vec(), true))
                }
                _ => None,
            }
        } else if opcode == Opcode::Mul || opcode == Opcode::Add {
            let shifts = opcode == Opcode::Add;
            match op.operands[..] {
                [a, b] if from(a).is_some() && constant(b) => from(a).map(|p| (p, vec![b], shifts)),
                [a, b] if from(b).is_some() && constant(a) => from(b).map(|p| (p, vec![a], shifts)),
                _ => None,
            }
        } else {
            None
        };
        let stem = if opcode == Opcode::Conv2d || opcode == Opcode::MatMul || opcode == Opcode::Gemm
        {
            Some(op_id)
        } else if let Some((p, consts, shifts)) = link {
            let prod = &func.ops[p];
            let operands = &prod.operands;
            // As `fold_node` requires: constant weight and bias; a shift
            // of a matmul/gemm makes a gemm, which is 2-D only.
            let two_d = |v: Option<&ValueId>| v.is_some_and(|&v| func.ty(v).shape.len() == 2);
            let foldable = operands
                .get(1..)
                .is_some_and(|wb| wb.iter().all(|&v| constant(v)))
                && (prod.opcode == Opcode::Conv2d
                    || !shifts
                    || two_d(operands.first()) && two_d(prod.results.first()));
            foldable.then(|| {
                for v in consts.into_iter().chain(operands[1..].iter().copied()) {
                    mark_constant_leaves(func, v, &mut wanted);
                }
                p
            })
        } else {
            None
        };
        root[result.index()] = stem;
    }
    wanted
}

/// `y' = y * f + g` per output channel.
struct Affine {
    f: Vec<f64>,
    g: Vec<f64>,
    /// Identifies the scale/shift operands for memoization.
    key: String,
}

/// `batch_norm(p(...))`: the affine map from the batch-norm's constants.
fn fold_batch_norm(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let p = egraph.find(subst[var("?x")]);
    let mut out = Vec::new();
    for bn in nodes_of(egraph, eclass, Opcode::BatchNorm) {
        let eps = match bn.attrs.as_ref().and_then(|a| a.get("epsilon")) {
            Some(Attr::Float(e)) => e,
            _ => continue,
        };
        let [y, s, t, m, v] = bn.children[..] else {
            continue;
        };
        let vals: Option<Vec<Arc<Tensor>>> = [s, t, m, v]
            .iter()
            .map(|c| const_tensor(egraph, *c))
            .collect();
        let Some(vals) = vals else { continue };
        let c = vals[0].len();
        if vals.iter().any(|t| t.len() != c) {
            continue;
        }
        let f: Vec<f64> = (0..c)
            .map(|i| vals[0].get_f64(i) / (vals[3].get_f64(i) + eps).sqrt())
            .collect();
        let g: Vec<f64> = (0..c)
            .map(|i| vals[1].get_f64(i) - vals[2].get_f64(i) * f[i])
            .collect();
        let key = format!(
            "bn:{}:{}:{}:{}:{}",
            egraph.find(s),
            egraph.find(t),
            egraph.find(m),
            egraph.find(v),
            eps.to_bits()
        );
        let y = egraph.find(y);
        out.extend(fold_into(egraph, y, p, &Affine { f, g, key }, 1));
    }
    out
}

fn fold_mul(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    fold_pointwise(egraph, eclass, subst, Opcode::Mul, var("?s"))
}

fn fold_add(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    fold_pointwise(egraph, eclass, subst, Opcode::Add, var("?t"))
}

/// `producer * c` or `producer + c` (either order) with `c` constant per
/// output channel.
fn fold_pointwise(
    egraph: &mut Graph,
    eclass: Id,
    subst: &Subst,
    opcode: Opcode,
    cvar: egg::Var,
) -> Vec<Id> {
    let c = egraph.find(subst[cvar]);
    let Some(ct) = const_tensor(egraph, c) else {
        return vec![];
    };
    let mut out = Vec::new();
    for node in nodes_of(egraph, eclass, opcode) {
        let [a, b] = node.children[..] else { continue };
        let y = if egraph.find(b) == c {
            egraph.find(a)
        } else if egraph.find(a) == c {
            egraph.find(b)
        } else {
            continue;
        };
        let Some(yt) = egraph[y].data.ty.clone() else {
            continue;
        };
        let rank = yt.shape.len();
        if rank == 0 {
            continue;
        }
        // conv: channel axis 1; matmul/gemm: the last axis (tried in turn,
        // `fold_into` checks which producer the class holds).
        let axes = if rank > 2 {
            vec![1, rank - 1]
        } else {
            vec![rank - 1]
        };
        for axis in axes {
            let Some(vals) = per_channel(&ct, &yt.shape, axis) else {
                continue;
            };
            let n = vals.len();
            let affine = if opcode == Opcode::Mul {
                Affine {
                    f: vals,
                    g: vec![0.0; n],
                    key: format!("mul:{c}"),
                }
            } else {
                Affine {
                    f: vec![1.0; n],
                    g: vals,
                    key: format!("add:{c}"),
                }
            };
            out.extend(fold_into(egraph, y, subst[var("?x")], &affine, axis));
        }
    }
    out
}

/// The values of `t` per channel of `axis` when `t` broadcasts to `shape`
/// and is constant along every other dimension; `None` otherwise.
fn per_channel(t: &Tensor, shape: &[usize], axis: usize) -> Option<Vec<f64>> {
    let ts = t.shape();
    if ts.len() > shape.len() || t.ty.elem.quant().is_some() {
        return None;
    }
    let off = shape.len() - ts.len();
    for (i, &d) in ts.iter().enumerate() {
        if d != 1 && (i + off != axis || d != shape[axis]) {
            return None;
        }
    }
    let channel_shape: Vec<usize> = (0..shape.len())
        .map(|i| if i == axis { shape[axis] } else { 1 })
        .collect();
    let map = broadcast_index_map(ts, &channel_shape);
    Some(map.into_iter().map(|i| t.get_f64(i)).collect())
}

/// Folds `affine` (per channel of `axis` of class `y`'s result) into each
/// conv2d/matmul/gemm node of class `y` whose first operand is `x`.
fn fold_into(egraph: &mut Graph, y: Id, x: Id, affine: &Affine, axis: usize) -> Vec<Id> {
    let x = egraph.find(x);
    if egraph[y].data.uses != 1 {
        return vec![];
    }
    let Some(yt) = egraph[y].data.ty.clone() else {
        return vec![];
    };
    let rank = yt.shape.len();
    let mut out = Vec::new();
    for opcode in [Opcode::Conv2d, Opcode::MatMul, Opcode::Gemm] {
        let channel_axis = if opcode == Opcode::Conv2d {
            1
        } else {
            rank.saturating_sub(1)
        };
        if axis != channel_axis || yt.shape.get(axis) != Some(&affine.f.len()) {
            continue;
        }
        for node in nodes_of(egraph, y, opcode) {
            if egraph.find(node.children[0]) != x {
                continue;
            }
            if let Some(id) = fold_node(egraph, &node, &yt, affine) {
                out.push(id);
            }
        }
    }
    out
}

/// `w` with every element multiplied by its output channel's factor
/// (`channel(i)` for flat index `i`), computed in f64 straight from the
/// weight's storage and rounded once to the element type: no intermediate
/// copy of the weight.
fn scaled(w: &Tensor, f: &[f64], channel: impl Fn(usize) -> usize) -> Option<Tensor> {
    let Data::F(v) = &w.data else { return None };
    let s = w.ty.elem.storage();
    let vals = v
        .iter()
        .enumerate()
        .map(|(i, &x)| round_to(s, x * f[channel(i)]))
        .collect();
    Some(Tensor {
        ty: w.ty.clone(),
        data: Data::F(vals),
    })
}

/// A conv weight (OIHW: output channel `o` owns the contiguous block `o`)
/// scaled per output channel, block by block.
fn scaled_blocks(w: &Tensor, f: &[f64]) -> Option<Tensor> {
    let Data::F(v) = &w.data else { return None };
    let block = v.len() / f.len().max(1);
    if block == 0 || block * f.len() != v.len() {
        return None;
    }
    let s = w.ty.elem.storage();
    let mut vals = Vec::with_capacity(v.len());
    for (chunk, &k) in v.chunks_exact(block).zip(f) {
        vals.extend(chunk.iter().map(|&x| round_to(s, x * k)));
    }
    Some(Tensor {
        ty: w.ty.clone(),
        data: Data::F(vals),
    })
}

/// Builds the folded form of one producer node.
fn fold_node(egraph: &mut Graph, node: &OpNode, yt: &TensorType, a: &Affine) -> Option<Id> {
    let attrs = node.attrs.as_ref()?;
    let w = egraph.find(node.children[1]);
    let wt = const_tensor(egraph, w)?;
    let wty = wt.ty.clone();
    if wty.elem.quant().is_some() || !wty.elem.storage().is_float() {
        return None;
    }
    let bias = node.children.get(2).map(|b| egraph.find(*b));
    let bt = match bias {
        Some(b) => Some(const_tensor(egraph, b)?),
        None => None,
    };
    let c = a.f.len();
    let unit = a.f.iter().all(|&f| f == 1.0);
    let key = |what: &str| {
        format!(
            "fold-bn:{what}:{}:{:?}:{w}:{}",
            node.opcode.name(),
            bias,
            a.key
        )
    };
    match node.opcode.kind().affine_fold() {
        Some(AffineFold::ConvOutput) => {
            // OIHW: output channel o owns the contiguous block o.
            if wty.shape.first() != Some(&c) {
                return None;
            }
            let new_w = if unit {
                w
            } else {
                add_computed_const(egraph, key("w"), &wty, || scaled_blocks(&wt, &a.f))?
            };
            let bty = TensorType::new(vec![c], wty.elem.clone());
            let bvals: Vec<f64> = (0..c)
                .map(|o| {
                    bt.as_ref().map_or(0.0, |b| {
                        if b.len() == c {
                            b.get_f64(o)
                        } else {
                            b.get_f64(0)
                        }
                    }) * a.f[o]
                        + a.g[o]
                })
                .collect();
            if bt.as_ref().is_some_and(|b| b.len() != c) {
                return None;
            }
            let new_b = add_computed_const(egraph, key("b"), &bty, || {
                Some(Tensor::from_f64(bty.clone(), bvals))
            })?;
            let conv = Node::op(
                Opcode::Conv2d,
                (**attrs).clone(),
                vec![node.children[0], new_w, new_b],
            );
            Some(egraph.add(conv))
        }
        Some(AffineFold::MatMulColumns | AffineFold::GemmColumns) => {
            let trans_b = matches!(attrs.get("trans_b"), Some(Attr::Bool(true)));
            // The right operand must be a 2-D matrix whose columns are the
            // output channels.
            if wty.shape.len() != 2 {
                return None;
            }
            let (k, n) = if trans_b {
                (wty.shape[1], wty.shape[0])
            } else {
                (wty.shape[0], wty.shape[1])
            };
            if n != c {
                return None;
            }
            let new_w = if unit {
                w
            } else {
                add_computed_const(egraph, key("w"), &wty, || {
                    scaled(&wt, &a.f, |i| if trans_b { i / k } else { i % n })
                })?
            };
            let shift = a.g.iter().any(|&g| g != 0.0) || bt.is_some();
            if node.opcode == Opcode::MatMul && !shift {
                return Some(egraph.add(Node::op(
                    Opcode::MatMul,
                    (**attrs).clone(),
                    vec![node.children[0], new_w],
                )));
            }
            // A shift needs gemm: 2-D operands only.
            if yt.shape.len() != 2 || egraph[node.children[0]].data.ty.as_ref()?.shape.len() != 2 {
                return None;
            }
            let beta = match attrs.get("beta") {
                Some(Attr::Float(b)) => b,
                _ => 1.0,
            };
            // c' = (beta * c) * f + g, per column when c is, else full.
            let full = bt
                .as_ref()
                .is_some_and(|b| per_channel(b, &yt.shape, 1).is_none());
            let (cshape, cvals): (Vec<usize>, Vec<f64>) = if full {
                let b = bt.as_ref()?;
                let map = broadcast_index_map(b.shape(), &yt.shape);
                (
                    yt.shape.clone(),
                    map.iter()
                        .enumerate()
                        .map(|(i, &j)| beta * b.get_f64(j) * a.f[i % c] + a.g[i % c])
                        .collect(),
                )
            } else {
                let per = match &bt {
                    Some(b) => per_channel(b, &yt.shape, 1)?,
                    None => vec![0.0; c],
                };
                (
                    vec![c],
                    (0..c).map(|o| beta * per[o] * a.f[o] + a.g[o]).collect(),
                )
            };
            let cty = TensorType::new(cshape, wty.elem.clone());
            let new_c = add_computed_const(egraph, key("c"), &cty, || {
                Some(Tensor::from_f64(cty.clone(), cvals))
            })?;
            // This arm holds only matmul and gemm; a matmul has no gemm
            // attributes to carry over.
            let mut gattrs = if node.opcode == Opcode::Gemm {
                attrs.to_attrs()
            } else {
                Attrs::new()
            };
            gattrs.set("beta", Attr::Float(1.0));
            let gattrs = OpAttrs::new(Opcode::Gemm, gattrs, None).ok()?;
            Some(egraph.add(Node::op(
                Opcode::Gemm,
                gattrs,
                vec![node.children[0], new_w, new_c],
            )))
        }
        // Other producers keep the batch norm: only conv2d, matmul and gemm
        // are folded into.
        None => None,
    }
}
