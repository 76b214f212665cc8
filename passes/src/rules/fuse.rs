//! The `fuse` family: kernel fusion as rewrites into fused ops (see
//! `aoc_ir::ops::fused` for their meaning).
//!
//! - Epilogues: a pointwise op whose chain operand is a conv2d, matmul or
//!   gemm (or already a fused one) becomes one `core.fused_conv2d` /
//!   `core.fused_matmul` / `core.fused_gemm` with the op appended to its
//!   epilogue: bias adds, activations (relu, clip, gelu, sigmoid, silu,
//!   hard_swish, ...) and residual adds.
//! - Pointwise chains: a pointwise op over another becomes one
//!   `core.fused_pointwise`, extended step by step.
//! - Patterns exporters write out: the Erf-GELU
//!   `x * 0.5 * (1 + erf(x / sqrt 2))` (division by 1.4142135 or
//!   multiplication by 0.70710677, the 0.5 multiply before or after, any
//!   operand order) becomes `core.gelu`; layer-norm in primitives
//!   (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, then Mul and
//!   Add) becomes `core.layer_norm`; `exp(z) / reduce_sum(exp(z))` with
//!   `z = x` or `x - reduce_max(x)` becomes `core.softmax`;
//!   `matmul(softmax(steps(matmul(q, kt))), v)` becomes `core.attention`.
//!
//! Conditions: a producer is absorbed only when the original graph uses it
//! once (`ClassData::uses`), so no work is duplicated; a step that
//! broadcasts its chain operand to a larger result is not absorbed (the
//! chain would be recomputed per element of the result); an epilogue holds at
//! most `max_ops - 1` steps (one op is the core) and as many extra operands
//! as the fused op has slots; only float, non-quantized values fuse.
//!
//! Tolerance: epilogue and pointwise fusion and attention are exact (0):
//! fused ops evaluate step by step with the unfused rounding. The pattern
//! recognizers compute the same function with different rounding: GELU and
//! softmax within 1e-6, layer-norm within 1e-5 (relative to unit-scale
//! data).

use super::{nodes_of, union_if_same_type, var};
use crate::egraph::analysis::{Graph, add_computed_const, const_tensor};
use crate::egraph::node::{Node, OpAttrs, OpNode};
use crate::egraph::{Rewrite, TensorAnalysis};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::fused::{Step, operand_count};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{Opcode, Tensor, TensorType};
use egg::{Applier, Id, PatternAst, Subst, Symbol};

/// The default bound on ops per fused op (`fuse{max-ops=N}`).
pub const DEFAULT_MAX_OPS: usize = 8;

/// Unary pointwise ops fusion absorbs.
const UNARY: &[Opcode] = &[
    Opcode::Relu,
    Opcode::Clip,
    Opcode::Gelu,
    Opcode::Sigmoid,
    Opcode::Silu,
    Opcode::HardSwish,
    Opcode::HardSigmoid,
    Opcode::LeakyRelu,
    Opcode::Tanh,
    Opcode::Erf,
    Opcode::Exp,
    Opcode::Sqrt,
    Opcode::Neg,
    Opcode::Abs,
];
/// Binary pointwise ops fusion absorbs.
const BINARY: &[Opcode] = &[
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::Div,
    Opcode::Max,
    Opcode::Min,
];

/// The `fuse` family with the default `max-ops`.
pub fn rules() -> Result<Vec<Rewrite>, String> {
    rules_with(DEFAULT_MAX_OPS)
}

/// The `fuse` family with at most `max_ops` ops per fused op: the
/// recognizers, then the fusion rules.
pub fn rules_with(max_ops: usize) -> Result<Vec<Rewrite>, String> {
    let mut out = pattern_rules()?;
    out.extend(fusion_rules(max_ops)?);
    Ok(out)
}

fn mk(name: &str, lhs: &str, kind: Kind, max_ops: usize) -> Result<Rewrite, String> {
    Rewrite::new(name, super::lhs(lhs)?, Fuse { kind, max_ops })
}

/// Epilogue, pointwise-chain and attention fusion. The pass runs these after
/// [`pattern_rules`], on the extracted result, so use counts see the
/// recognized ops (the Erf-GELU uses its input twice; `gelu` once).
pub fn fusion_rules(max_ops: usize) -> Result<Vec<Rewrite>, String> {
    let mut out = Vec::new();
    let mk = |name: &str, lhs: &str, kind: Kind| mk(name, lhs, kind, max_ops);
    for &op in UNARY.iter().chain(BINARY) {
        let name = op.name().trim_start_matches("core.").replace('_', "-");
        let lhs = if BINARY.contains(&op) {
            format!("({} ?a ?b)", op.name())
        } else {
            format!("({} ?a)", op.name())
        };
        // op(p(...), e) -> fused_p(..., e){epilogue + op}; op(op'(..), e) -> fused_pointwise(.., e){op'; op}
        out.push(mk(&format!("fuse-{name}"), &lhs, Kind::Absorb)?);
    }
    // matmul(softmax(steps(matmul(q, kt))), v) -> attention(q, kt, v, ...){steps}
    out.push(mk(
        "attention",
        "(core.matmul (core.softmax ?s) ?v)",
        Kind::Attention,
    )?);
    Ok(out)
}

/// Recognizers of ops written out in primitives (GELU, layer-norm,
/// softmax).
pub fn pattern_rules() -> Result<Vec<Rewrite>, String> {
    let mut out = Vec::new();
    let mk = |name: &str, lhs: &str, kind: Kind| mk(name, lhs, kind, DEFAULT_MAX_OPS);
    // x * 0.5 * (1 + erf(x / sqrt 2)), in exporters' variants -> gelu(x)
    out.push(mk("erf-gelu", "(core.mul ?a ?b)", Kind::ErfGelu)?);
    // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) -> layer_norm(x, 1)
    out.push(mk(
        "layer-norm",
        "(core.div ?d (core.sqrt (core.add ?var ?eps)))",
        Kind::LayerNorm,
    )?);
    // layer_norm(x, s, b) * g -> layer_norm(x, s * g, b * g)
    out.push(mk(
        "layer-norm-scale",
        "(core.mul ?a ?b)",
        Kind::LayerNormScale,
    )?);
    // layer_norm(x, s, b) + t -> layer_norm(x, s, b + t)
    out.push(mk(
        "layer-norm-shift",
        "(core.add ?a ?b)",
        Kind::LayerNormShift,
    )?);
    // exp(z) / reduce_sum(exp(z)) -> softmax(x)   z = x or x - reduce_max(x)
    out.push(mk(
        "softmax",
        "(core.div ?e (core.reduce_sum ?e))",
        Kind::Softmax,
    )?);
    Ok(out)
}

#[derive(Copy, Clone, Debug)]
enum Kind {
    Absorb,
    ErfGelu,
    LayerNorm,
    LayerNormScale,
    LayerNormShift,
    Softmax,
    Attention,
}

struct Fuse {
    kind: Kind,
    max_ops: usize,
}

impl Applier<Node, TensorAnalysis> for Fuse {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        if !is_float(egraph, eclass) {
            return vec![];
        }
        let forms = match self.kind {
            Kind::Absorb => absorb(egraph, eclass, self.max_ops),
            Kind::ErfGelu => super::fuse_patterns::erf_gelu(egraph, eclass),
            Kind::LayerNorm => super::fuse_patterns::layer_norm(egraph, eclass, subst),
            Kind::LayerNormScale => {
                super::fuse_patterns::layer_norm_affine(egraph, eclass, Opcode::Mul)
            }
            Kind::LayerNormShift => {
                super::fuse_patterns::layer_norm_affine(egraph, eclass, Opcode::Add)
            }
            Kind::Softmax => super::fuse_patterns::softmax(egraph, eclass, subst),
            Kind::Attention => attention(egraph, eclass, subst, self.max_ops),
        };
        forms
            .into_iter()
            .filter_map(|new| union_if_same_type(egraph, eclass, new))
            .collect()
    }
}

/// Whether a class holds a float, non-quantized tensor.
pub fn is_float(egraph: &Graph, id: Id) -> bool {
    egraph[id]
        .data
        .ty
        .as_ref()
        .is_some_and(|t| t.elem.quant().is_none() && t.elem.storage().is_float())
}

/// The epilogue steps of a fused node.
fn steps_of(node: &OpNode) -> Option<Vec<Step>> {
    Some(node.attrs.as_ref()?.steps())
}

/// The step computing `node`, with the chain operand first: (step, extra
/// operand) for each way the node can continue a chain from `chain`.
fn as_steps(egraph: &Graph, node: &OpNode, chain: Id) -> Vec<(Step, Option<Id>)> {
    let attrs = node
        .attrs
        .as_ref()
        .map(|a| a.to_attrs())
        .unwrap_or_default();
    match node.children[..] {
        [a] if egraph.find(a) == chain => Step::unary(node.opcode, attrs)
            .map(|s| (s, None))
            .into_iter()
            .collect(),
        [a, b] => {
            let mut out = Vec::new();
            if egraph.find(a) == chain {
                out.extend(Step::binary(node.opcode, false).map(|s| (s, Some(b))));
            }
            if egraph.find(b) == chain && egraph.find(a) != chain {
                // add and mul are exactly commutative in IEEE arithmetic.
                let rev = !matches!(node.opcode, Opcode::Add | Opcode::Mul);
                out.extend(Step::binary(node.opcode, rev).map(|s| (s, Some(a))));
            }
            out
        }
        _ => vec![],
    }
}

/// The fused op each producer opcode grows into, with its operand-slot
/// budget for epilogue operands.
fn fused_of(opcode: Opcode) -> Option<(Opcode, usize)> {
    let slots = |o: Opcode| o.info().operands.len();
    [
        (Opcode::Conv2d, Opcode::FusedConv2d),
        (Opcode::MatMul, Opcode::FusedMatMul),
        (Opcode::Gemm, Opcode::FusedGemm),
        (Opcode::FusedConv2d, Opcode::FusedConv2d),
        (Opcode::FusedMatMul, Opcode::FusedMatMul),
        (Opcode::FusedGemm, Opcode::FusedGemm),
        (Opcode::FusedPointwise, Opcode::FusedPointwise),
    ]
    .iter()
    .find(|(p, _)| *p == opcode)
    .map(|&(_, f)| {
        (
            f,
            if f == Opcode::FusedPointwise {
                usize::MAX
            } else {
                slots(f)
            },
        )
    })
}

/// A fused node: `opcode` with `base` attributes (the core's), operands and
/// epilogue.
fn build(
    egraph: &mut Graph,
    opcode: Opcode,
    base: Attrs,
    operands: Vec<Id>,
    steps: &[Step],
) -> Option<Id> {
    let attrs = OpAttrs::new(opcode, base, None).ok()?.with_epilogue(steps);
    Some(egraph.add(Node::op(opcode, attrs, operands)))
}

/// For each pointwise node of `eclass`, each way of appending it to a
/// fusable producer (or starting a pointwise chain) in its chain operand's
/// class.
fn absorb(egraph: &mut Graph, eclass: Id, max_ops: usize) -> Vec<Id> {
    let mut out = Vec::new();
    let nodes: Vec<OpNode> = UNARY
        .iter()
        .chain(BINARY)
        .flat_map(|&op| nodes_of(egraph, eclass, op))
        .collect();
    for node in nodes {
        let chains: Vec<Id> = node.children.iter().map(|c| egraph.find(*c)).collect();
        for chain in chains {
            if egraph[chain].data.uses != 1 || !is_float(egraph, chain) || widens(egraph, chain, eclass) {
                continue;
            }
            for (step, extra) in as_steps(egraph, &node, chain) {
                for producer in egraph[chain].nodes.clone() {
                    let Node::Op(p) = producer else { continue };
                    if let Some(id) = extend(egraph, &p, &step, extra, max_ops) {
                        out.push(id);
                    }
                    // A pointwise producer starts a pointwise chain.
                    if let Some(id) = start_chain(egraph, &p, &step, extra, max_ops) {
                        out.push(id);
                    }
                }
            }
        }
    }
    out
}

/// Whether `result` has more elements than its chain operand `chain`
/// (the step broadcasts the chain, as the `x * sigmoid(s)` of a
/// squeeze-and-excitation block does with its per-channel `s`). Absorbing
/// such a step would run the producer's epilogue, and for a pointwise chain
/// every earlier step, once per element of the larger result instead of
/// once per element of the chain: 1024 sigmoids instead of 8 for a 32×32
/// image. The step stays a pointwise op of its own.
fn widens(egraph: &Graph, chain: Id, result: Id) -> bool {
    let n = |id: Id| egraph[id].data.ty.as_ref().map(|t| t.num_elements());
    match (n(chain), n(result)) {
        (Some(c), Some(r)) => r > c,
        _ => true,
    }
}

/// `p` (a producer or a fused op) with `step` appended.
fn extend(
    egraph: &mut Graph,
    p: &OpNode,
    step: &Step,
    extra: Option<Id>,
    max_ops: usize,
) -> Option<Id> {
    let (fused, slots) = fused_of(p.opcode)?;
    let attrs = p.attrs.as_ref()?;
    let mut base = attrs.to_attrs();
    let mut steps = if p.opcode == fused {
        steps_of(p)?
    } else {
        vec![]
    };
    if p.opcode == Opcode::Conv2d || p.opcode == Opcode::Gemm {
        base.set("bias", Attr::Bool(p.children.len() == 3));
    }
    steps.push(step.clone());
    // the core counts as one op, except for a pointwise chain
    let ops = steps.len() + usize::from(fused != Opcode::FusedPointwise);
    let mut operands = p.children.clone();
    operands.extend(extra);
    if ops > max_ops || operands.len() > slots {
        return None;
    }
    build(egraph, fused, base, operands, &steps)
}

/// `q(…)` followed by `step` as a two-step `core.fused_pointwise`, when `q`
/// is itself a pointwise op of the step vocabulary.
fn start_chain(
    egraph: &mut Graph,
    q: &OpNode,
    step: &Step,
    extra: Option<Id>,
    max_ops: usize,
) -> Option<Id> {
    if max_ops < 2 || !(UNARY.contains(&q.opcode) || BINARY.contains(&q.opcode)) {
        return None;
    }
    let first = egraph.find(*q.children.first()?);
    let (s0, e0) = as_steps(egraph, q, first).into_iter().next()?;
    let mut operands = vec![first];
    operands.extend(e0);
    operands.extend(extra);
    build(
        egraph,
        Opcode::FusedPointwise,
        Attrs::new(),
        operands,
        &[s0, step.clone()],
    )
}

/// `matmul(softmax(s), v)`: walks `s` back through at most `max_ops - 3`
/// pointwise steps (scale, mask) to `matmul(q, kt)`.
fn attention(egraph: &mut Graph, eclass: Id, subst: &Subst, max_ops: usize) -> Vec<Id> {
    let s = egraph.find(subst[var("?s")]);
    let v = subst[var("?v")];
    // the softmax must be over the last dimension, and used only here
    let sm_class = match nodes_of(egraph, eclass, Opcode::MatMul)
        .into_iter()
        .map(|m| egraph.find(m.children[0]))
        .find(|c| {
            nodes_of(egraph, *c, Opcode::Softmax)
                .iter()
                .any(|n| egraph.find(n.children[0]) == s)
        }) {
        Some(c) => c,
        None => return vec![],
    };
    let Some(rank) = egraph[s].data.ty.as_ref().map(|t| t.shape.len()) else {
        return vec![];
    };
    let last = nodes_of(egraph, sm_class, Opcode::Softmax).iter().any(|n| {
        matches!(n.attrs.as_ref().and_then(|a| a.get("axis")), Some(Attr::Int(a)) if normalize_axis(a, rank) == Ok(rank - 1))
    });
    if !last || egraph[sm_class].data.uses != 1 {
        return vec![];
    }
    let budget = max_ops.saturating_sub(3).min(4);
    let mut out = Vec::new();
    for (q, kt, steps, extras) in score_chains(egraph, s, budget) {
        let mut operands = vec![q, kt, v];
        operands.extend(extras);
        if operand_count(&steps) + 3 != operands.len() {
            continue;
        }
        out.extend(build(
            egraph,
            Opcode::Attention,
            Attrs::new(),
            operands,
            &steps,
        ));
    }
    out
}

/// Ways `s` is `steps(matmul(q, kt))` with single-use intermediates:
/// (q, kt, steps in order, extra operands in order).
fn score_chains(egraph: &Graph, s: Id, budget: usize) -> Vec<(Id, Id, Vec<Step>, Vec<Id>)> {
    let mut out = Vec::new();
    for m in nodes_of(egraph, s, Opcode::MatMul) {
        out.push((m.children[0], m.children[1], vec![], vec![]));
    }
    if budget == 0 {
        return out;
    }
    for op in [Opcode::Mul, Opcode::Div, Opcode::Add, Opcode::Sub] {
        for node in nodes_of(egraph, s, op) {
            for &c in &node.children {
                let c = egraph.find(c);
                if egraph[c].data.uses != 1 {
                    continue;
                }
                for (step, extra) in as_steps(egraph, &node, c) {
                    for (q, kt, mut steps, mut extras) in score_chains(egraph, c, budget - 1) {
                        steps.push(step.clone());
                        extras.extend(extra);
                        out.push((q, kt, steps, extras));
                    }
                }
            }
        }
    }
    out
}

/// A constant class's value, for the pattern recognizers.
pub fn constant(egraph: &Graph, id: Id) -> Option<std::sync::Arc<Tensor>> {
    const_tensor(egraph, id)
}

/// A constant of `ty` filled with `value` (memoized by value and type).
pub fn splat(egraph: &mut Graph, ty: &TensorType, value: f64) -> Option<Id> {
    let key = format!("fuse-splat:{ty}:{}", value.to_bits());
    add_computed_const(egraph, key, ty, || Some(Tensor::splat(ty.clone(), value)))
}
