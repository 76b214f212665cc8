//! The `qdq` family: quantize/dequantize propagation and integer ops.
//!
//! - Dequantize moves forward and quantize backward through data-movement
//!   ops (reshape, transpose, flatten, slice, max-pool with a positive scale,
//!   concat of equal quantized types), so Q/DQ pairs meet;
//! - `quantize(dequantize(x))` cancels to `x` (identical types) or becomes
//!   `quant.requantize` (different types);
//! - `quantize(op(dequantize(a), dequantize(b), ...))` becomes the integer op
//!   (`quant.conv2d`, `quant.matmul`, `quant.gemm`, `quant.add`,
//!   `quant.avg_pool2d`, `quant.global_avg_pool`), with a relu or clip
//!   between the op and the quantize folded into its clamp epilogue;
//! - a relu before a quantize whose range starts at zero is dropped;
//! - `op(dequantize(a), dequantize(b), ...)` of fp8 operands with no
//!   quantize after it (an fp8 layer whose output stays float) becomes the
//!   quantized product with a float result (`quant.conv2d`, `quant.matmul`,
//!   `quant.gemm`), which the fp8 kernels run.
//!
//! Scales and zero points live in the quantized element types, so they are
//! always constants here.
//!
//! Tolerance: every rule is exact in the reference interpreter (tolerance 0).
//! The integer ops are *defined* as their Q/DQ graphs, data movement
//! commutes with an elementwise map (and max with a nondecreasing one), and
//! `qdq-cancel` only fires where the f32 round trip provably returns every
//! stored integer (see `roundtrip_is_exact`).

use super::{lhs, nodes_of, union_if_same_type, var};
use crate::egraph::analysis::{Graph, infer_node};
use crate::egraph::node::{Node, OpAttrs, OpNode};
use crate::egraph::{Rewrite, TensorAnalysis};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{ElemType, Opcode, QuantParams, QuantType, Scalar, TensorType};
use egg::{Applier, Id, PatternAst, Subst, Symbol};

/// The integer ops and the float ops they replace: (rule stem, float op,
/// operand count, integer op).
const INT_OPS: &[(&str, Opcode, usize, Opcode)] = &[
    ("conv2d", Opcode::Conv2d, 3, Opcode::QuantConv2d),
    ("conv2d-no-bias", Opcode::Conv2d, 2, Opcode::QuantConv2d),
    ("matmul", Opcode::MatMul, 2, Opcode::QuantMatMul),
    ("gemm", Opcode::Gemm, 3, Opcode::QuantGemm),
    ("gemm-no-c", Opcode::Gemm, 2, Opcode::QuantGemm),
    ("add", Opcode::Add, 2, Opcode::QuantAdd),
    ("avg-pool2d", Opcode::AvgPool2d, 1, Opcode::QuantAvgPool2d),
    (
        "global-avg-pool",
        Opcode::GlobalAvgPool,
        1,
        Opcode::QuantGlobalAvgPool,
    ),
];

/// Unary data-movement ops Q/DQ move through: (rule stem, op).
const MOVES: &[(&str, Opcode)] = &[
    ("reshape", Opcode::Reshape),
    ("transpose", Opcode::Transpose),
    ("flatten", Opcode::Flatten),
    ("slice", Opcode::Slice),
    ("max-pool2d", Opcode::MaxPool2d),
    // Nearest only: the resize's `infer` refuses quantized operands in
    // other modes, so the rewrite adds nothing for them.
    ("resize", Opcode::Resize),
];

/// Concat arities the propagation rules cover.
const CONCAT_ARITIES: std::ops::RangeInclusive<usize> = 2..=6;

pub fn rules() -> Result<Vec<Rewrite>, String> {
    let mut out = vec![
        // quantize(dequantize(x)) -> x   when both types are equal and the round trip is exact
        rewrite(
            "qdq-cancel",
            "(quant.quantize (quant.dequantize ?x))",
            Apply::Cancel,
        )?,
        // quantize(dequantize(x)) -> requantize(x)   when the types differ
        rewrite(
            "qdq-requantize",
            "(quant.quantize (quant.dequantize ?x))",
            Apply::Requantize,
        )?,
        // quantize(relu(y)) -> quantize(y)   when the quantized range starts at zero
        rewrite(
            "qdq-relu-redundant",
            "(quant.quantize (core.relu ?y))",
            Apply::DropRelu,
        )?,
    ];
    for &(stem, op) in MOVES {
        let name = op.name();
        // D(dequantize(x)) -> dequantize(D(x))   for data movement D
        out.push(rewrite(
            &format!("dequantize-through-{stem}"),
            &format!("({name} (quant.dequantize ?x0))"),
            Apply::DequantizeForward(op),
        )?);
        // quantize(D(y)) -> D(quantize(y))   for data movement D
        out.push(rewrite(
            &format!("quantize-through-{stem}"),
            &format!("(quant.quantize ({name} ?y0))"),
            Apply::QuantizeBackward(op),
        )?);
    }
    for n in CONCAT_ARITIES {
        let dqs: Vec<String> = (0..n)
            .map(|i| format!("(quant.dequantize ?x{i})"))
            .collect();
        let ys: Vec<String> = (0..n).map(|i| format!("?y{i}")).collect();
        // concat(dequantize(a), dequantize(b), ...) -> dequantize(concat(a, b, ...))   equal types
        out.push(rewrite(
            &format!("dequantize-through-concat-{n}"),
            &format!("(core.concat {})", dqs.join(" ")),
            Apply::DequantizeForward(Opcode::Concat),
        )?);
        // quantize(concat(a, b, ...)) -> concat(quantize(a), quantize(b), ...)
        out.push(rewrite(
            &format!("quantize-through-concat-{n}"),
            &format!("(quant.quantize (core.concat {}))", ys.join(" ")),
            Apply::QuantizeBackward(Opcode::Concat),
        )?);
    }
    for &(stem, float, arity, int_op) in INT_OPS {
        let args: Vec<String> = (0..arity)
            .map(|i| format!("(quant.dequantize ?a{i})"))
            .collect();
        let inner = format!("({} {})", float.name(), args.join(" "));
        for (suffix, act, wrapped) in [
            ("", Act::None, inner.clone()),
            ("-relu", Act::Relu, format!("(core.relu {inner})")),
            ("-clip", Act::Clip, format!("(core.clip {inner})")),
        ] {
            // quantize([relu|clip](F(dequantize(a), ...))) -> quant.F(a, ...){clip epilogue}
            out.push(rewrite(
                &format!("int-{stem}{suffix}"),
                &format!("(quant.quantize {wrapped})"),
                Apply::IntOp {
                    float,
                    int_op,
                    arity,
                    act,
                },
            )?);
        }
        if float == Opcode::MatMul {
            // quantize([relu|clip](add(matmul(dequantize(a), dequantize(b)), dequantize(c))))
            //   -> quant.matmul(a, b, c){clip epilogue}   (a linear layer's bias, either side of the add)
            let mm = "(core.matmul (quant.dequantize ?a0) (quant.dequantize ?a1))";
            for (side, add) in [
                ("", format!("(core.add {mm} (quant.dequantize ?a2))")),
                ("-rev", format!("(core.add (quant.dequantize ?a2) {mm})")),
            ] {
                for (suffix, act, wrapped) in [
                    ("", Act::None, add.clone()),
                    ("-relu", Act::Relu, format!("(core.relu {add})")),
                    ("-clip", Act::Clip, format!("(core.clip {add})")),
                ] {
                    out.push(rewrite(
                        &format!("int-matmul-bias{side}{suffix}"),
                        &format!("(quant.quantize {wrapped})"),
                        Apply::IntOp {
                            float,
                            int_op,
                            arity: 3,
                            act,
                        },
                    )?);
                }
            }
        }
        if matches!(float, Opcode::Conv2d | Opcode::MatMul | Opcode::Gemm) {
            // F(dequantize(a), ...) -> quant.F(a, ...) : float   when a is fp8
            out.push(rewrite(
                &format!("fp8-{stem}-float"),
                &inner,
                Apply::Fp8FloatOut { float, int_op, arity },
            )?);
        }
    }
    Ok(out)
}

fn rewrite(name: &str, lhs_text: &str, apply: Apply) -> Result<Rewrite, String> {
    Rewrite::new(name, lhs(lhs_text)?, QdqApplier(apply))
}

/// What sits between the float op and the quantize.
#[derive(Copy, Clone, Debug)]
enum Act {
    None,
    Relu,
    Clip,
}

/// The appliers of this family; each computes new forms of the matched
/// class, which are unioned only when their types agree.
#[derive(Copy, Clone, Debug)]
enum Apply {
    Cancel,
    Requantize,
    DropRelu,
    DequantizeForward(Opcode),
    QuantizeBackward(Opcode),
    IntOp {
        float: Opcode,
        int_op: Opcode,
        arity: usize,
        act: Act,
    },
    Fp8FloatOut {
        float: Opcode,
        int_op: Opcode,
        arity: usize,
    },
}

struct QdqApplier(Apply);

impl Applier<Node, TensorAnalysis> for QdqApplier {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        let forms = match self.0 {
            Apply::Cancel => cancel(egraph, eclass, subst),
            Apply::Requantize => requantize(egraph, eclass, subst),
            Apply::DropRelu => drop_relu(egraph, eclass, subst),
            Apply::DequantizeForward(op) => dequantize_forward(egraph, eclass, op),
            Apply::QuantizeBackward(op) => quantize_backward(egraph, eclass, op),
            Apply::IntOp {
                float,
                int_op,
                arity,
                act,
            } => int_op_forms(egraph, eclass, subst, float, int_op, arity, act),
            Apply::Fp8FloatOut { float, int_op, arity } => fp8_float_forms(egraph, eclass, subst, float, int_op, arity),
        };
        forms
            .into_iter()
            .filter_map(|new| union_if_same_type(egraph, eclass, new))
            .collect()
    }
}

// ---- named conditions ----

/// The per-tensor (scale, zero point) of a quantized type.
fn per_tensor(q: &QuantType) -> Option<(f64, i64)> {
    match q.params {
        QuantParams::PerTensor { scale, zero_point } => Some((scale, zero_point)),
        QuantParams::PerAxis { .. } => None,
    }
}

/// Every scale is positive (after rounding to the expressed type), so
/// dequantize and quantize are nondecreasing and commute with max.
fn scale_is_positive(q: &QuantType) -> bool {
    let scales: &[f64] = match &q.params {
        QuantParams::PerTensor { scale, .. } => std::slice::from_ref(scale),
        QuantParams::PerAxis { scales, .. } => scales,
    };
    scales
        .iter()
        .all(|&s| aoc_ir::tensor::round_to(q.expressed, s) > 0.0)
}

/// `quantize` to `q` ignores `saturate` (integer storage) or saturates, as
/// the integer ops and `quant.requantize` do.
fn saturates_or_int(q: &QuantType, saturate: bool) -> bool {
    q.storage.is_int() || saturate
}

/// The quantized range starts at real zero: per-tensor, positive scale, zero
/// point at the storage minimum, so `quantize(relu(y)) == quantize(y)`.
fn range_starts_at_zero(q: &QuantType) -> bool {
    let min = q.storage.int_range().map(|r| r.0);
    per_tensor(q).is_some_and(|(_, zp)| Some(zp) == min) && scale_is_positive(q)
}

/// `quantize(dequantize(q)) == q` for every stored value: f32 expressed,
/// integer storage of at most 16 bits, scales in [2^-100, 2^100]. Then
/// `d = q - zp` has |d| < 2^17, `fl(fl(d * s) / s)` is within
/// `|d| * 2^-22 < 0.05` of `d` (two roundings, no subnormals, no overflow),
/// and rounding to the nearest integer returns `d`.
fn roundtrip_is_exact(q: &QuantType) -> bool {
    let scales: &[f64] = match &q.params {
        QuantParams::PerTensor { scale, .. } => std::slice::from_ref(scale),
        QuantParams::PerAxis { scales, .. } => scales,
    };
    q.expressed == Scalar::F32
        && q.storage.is_int()
        && q.storage.bits() <= 16
        && scales.iter().all(|&s| {
            let s = (s as f32 as f64).abs();
            (2f64.powi(-100)..=2f64.powi(100)).contains(&s)
        })
}

// ---- helpers ----

/// A node's declared type and `saturate` flag, when it is a quantize.
fn quantize_target(n: &OpNode) -> Option<(TensorType, bool)> {
    let attrs = n.attrs.as_ref()?;
    let ty = attrs.declared.as_ref()?.ty.clone();
    let sat = !matches!(attrs.get("saturate"), Some(Attr::Bool(false)));
    Some((ty, sat))
}

/// The operands `x` of the `dequantize(x)` nodes in `class`.
fn dequantized_from(egraph: &Graph, class: Id) -> Vec<Id> {
    nodes_of(egraph, egraph.find(class), Opcode::Dequantize)
        .into_iter()
        .map(|n| egraph.find(n.children[0]))
        .collect()
}

/// Adds an op node when its type checks; ill-typed forms are never added.
fn add_typed(
    egraph: &mut Graph,
    opcode: Opcode,
    attrs: Attrs,
    declared: Option<TensorType>,
    children: Vec<Id>,
) -> Option<Id> {
    let attrs = OpAttrs::new(opcode, attrs, declared).ok()?;
    let node = Node::op(opcode, attrs, children);
    infer_node(egraph, &node)?;
    Some(egraph.add(node))
}

fn class_ty(egraph: &Graph, id: Id) -> Option<TensorType> {
    egraph[id].data.ty.clone()
}

fn quant_elem(ty: &TensorType) -> Option<&QuantType> {
    ty.elem.quant()
}

// ---- appliers ----

/// `x` for each `quantize(dequantize(x))` whose result type is `x`'s.
fn cancel(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let x = egraph.find(subst[var("?x")]);
    let Some(xt) = class_ty(egraph, x) else {
        return vec![];
    };
    let ok = nodes_of(egraph, eclass, Opcode::Quantize).iter().any(|n| {
        quantize_target(n).is_some_and(|(ty, sat)| {
            ty == xt
                && dequantized_from(egraph, n.children[0]).contains(&x)
                && quant_elem(&ty)
                    .is_some_and(|q| saturates_or_int(q, sat) && roundtrip_is_exact(q))
        })
    });
    if ok { vec![x] } else { vec![] }
}

/// `requantize(x)` for each `quantize(dequantize(x))` to another type.
fn requantize(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let x = egraph.find(subst[var("?x")]);
    let Some(xt) = class_ty(egraph, x) else {
        return vec![];
    };
    let mut out = vec![];
    for n in nodes_of(egraph, eclass, Opcode::Quantize) {
        let Some((ty, sat)) = quantize_target(&n) else {
            continue;
        };
        let ok = ty != xt
            && quant_elem(&ty).is_some_and(|q| saturates_or_int(q, sat))
            && dequantized_from(egraph, n.children[0]).contains(&x);
        if ok {
            out.extend(add_typed(
                egraph,
                Opcode::Requantize,
                Attrs::new(),
                Some(ty),
                vec![x],
            ));
        }
    }
    out
}

/// `quantize(y)` for each `quantize(relu(y))` whose range starts at zero.
fn drop_relu(egraph: &mut Graph, eclass: Id, subst: &Subst) -> Vec<Id> {
    let y = egraph.find(subst[var("?y")]);
    let mut out = vec![];
    for n in nodes_of(egraph, eclass, Opcode::Quantize) {
        let Some((ty, _)) = quantize_target(&n) else {
            continue;
        };
        let relu_of_y = nodes_of(egraph, egraph.find(n.children[0]), Opcode::Relu)
            .iter()
            .any(|r| egraph.find(r.children[0]) == y);
        if relu_of_y && quant_elem(&ty).is_some_and(range_starts_at_zero) {
            let attrs = n.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
            out.extend(add_typed(
                egraph,
                Opcode::Quantize,
                attrs,
                Some(ty),
                vec![y],
            ));
        }
    }
    out
}

/// `dequantize(D(x, ...))` for each `D(dequantize(x), ...)` in the class.
/// Max-pool needs positive scales; concat equal types (its `infer` checks).
fn dequantize_forward(egraph: &mut Graph, eclass: Id, op: Opcode) -> Vec<Id> {
    let mut out = vec![];
    for d in nodes_of(egraph, eclass, op) {
        // One dequantized operand per child (the first found; classes with
        // several dequantize nodes hold equal values).
        let Some(xs) = d
            .children
            .iter()
            .map(|&c| dequantized_from(egraph, c).first().copied())
            .collect::<Option<Vec<Id>>>()
        else {
            continue;
        };
        let positive = xs.iter().all(|&x| {
            class_ty(egraph, x)
                .as_ref()
                .and_then(quant_elem)
                .is_some_and(scale_is_positive)
        });
        if op == Opcode::MaxPool2d && !positive {
            continue;
        }
        let attrs = d.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
        if let Some(moved) = add_typed(egraph, op, attrs, None, xs) {
            out.extend(add_typed(
                egraph,
                Opcode::Dequantize,
                Attrs::new(),
                None,
                vec![moved],
            ));
        }
    }
    out
}

/// `D(quantize(y), ...)` for each `quantize(D(y, ...))` in the class, with
/// a per-tensor quantized type (max-pool: positive scale).
fn quantize_backward(egraph: &mut Graph, eclass: Id, op: Opcode) -> Vec<Id> {
    let mut out = vec![];
    for n in nodes_of(egraph, eclass, Opcode::Quantize) {
        let Some((ty, _)) = quantize_target(&n) else {
            continue;
        };
        let Some(q) = quant_elem(&ty).filter(|q| per_tensor(q).is_some()) else {
            continue;
        };
        if op == Opcode::MaxPool2d && !scale_is_positive(q) {
            continue;
        }
        let elem = ElemType::Quant(Box::new(q.clone()));
        let q_attrs = n.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
        for d in nodes_of(egraph, egraph.find(n.children[0]), op) {
            let mut qs = Vec::with_capacity(d.children.len());
            for &y in &d.children {
                let Some(yt) = class_ty(egraph, y) else { break };
                let decl = TensorType::new(yt.shape.clone(), elem.clone());
                match add_typed(
                    egraph,
                    Opcode::Quantize,
                    q_attrs.clone(),
                    Some(decl),
                    vec![y],
                ) {
                    Some(id) => qs.push(id),
                    None => break,
                }
            }
            if qs.len() != d.children.len() {
                continue;
            }
            let attrs = d.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
            out.extend(add_typed(egraph, op, attrs, None, qs));
        }
    }
    out
}

/// The integer op for each `quantize([act](F(dequantize(a0), ...)))` in the
/// class whose float op has exactly the matched operands.
/// The first operand's storage is fp8: the products' float-result form
/// applies (`quant_compute` allows it only then).
fn fp8_operand(ty: &TensorType) -> bool {
    quant_elem(ty).is_some_and(|q| matches!(q.storage, Scalar::F8E4M3FN | Scalar::F8E5M2))
}

/// `quant.F(a, ...)` with the float op's result type, for each float node
/// `F(dequantize(a), ...)` of the class whose first operand is fp8.
fn fp8_float_forms(egraph: &mut Graph, eclass: Id, subst: &Subst, float: Opcode, int_op: Opcode, arity: usize) -> Vec<Id> {
    let args: Vec<Id> = (0..arity).map(|i| egraph.find(subst[var(&format!("?a{i}"))])).collect();
    let (Some(ty), Some(a0)) = (class_ty(egraph, eclass), class_ty(egraph, args[0])) else {
        return vec![];
    };
    if !fp8_operand(&a0) || ty.elem.quant().is_some() {
        return vec![];
    }
    let mut out = vec![];
    for f in nodes_of(egraph, eclass, float) {
        let exact_operands = f.children.len() == arity
            && f.children.iter().zip(&args).all(|(&c, a)| dequantized_from(egraph, c).contains(a));
        if exact_operands {
            let attrs = f.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
            out.extend(add_typed(egraph, int_op, attrs, Some(ty.clone()), args.clone()));
        }
    }
    out
}

/// The nodes of `float` in class `fc` whose operands are the dequantized
/// `args`; for a matmul with three `args`, the matmul nodes of `a0, a1`
/// under an add (either side) of the dequantized bias `a2` in `fc`.
fn float_nodes(egraph: &Graph, fc: Id, float: Opcode, args: &[Id]) -> Vec<OpNode> {
    let exact = |n: &OpNode, args: &[Id]| {
        n.children.len() == args.len()
            && n.children
                .iter()
                .zip(args)
                .all(|(&c, a)| dequantized_from(egraph, c).contains(a))
    };
    if float != Opcode::MatMul || args.len() != 3 {
        return nodes_of(egraph, fc, float).into_iter().filter(|n| exact(n, args)).collect();
    }
    let mut out = vec![];
    for add in nodes_of(egraph, fc, Opcode::Add) {
        let [x, y] = add.children[..] else { continue };
        for (mm, b) in [(x, y), (y, x)] {
            if dequantized_from(egraph, b).contains(&args[2]) {
                let mm = egraph.find(mm);
                out.extend(nodes_of(egraph, mm, float).into_iter().filter(|n| exact(n, &args[..2])));
            }
        }
    }
    out
}

fn int_op_forms(
    egraph: &mut Graph,
    eclass: Id,
    subst: &Subst,
    float: Opcode,
    int_op: Opcode,
    arity: usize,
    act: Act,
) -> Vec<Id> {
    let args: Vec<Id> = (0..arity)
        .map(|i| egraph.find(subst[var(&format!("?a{i}"))]))
        .collect();
    let mut out = vec![];
    for n in nodes_of(egraph, eclass, Opcode::Quantize) {
        let Some((ty, sat)) = quantize_target(&n) else {
            continue;
        };
        if !quant_elem(&ty).is_some_and(|q| saturates_or_int(q, sat)) {
            continue;
        }
        let inner = egraph.find(n.children[0]);
        // (class of the float op, epilogue clamp bounds)
        let stages: Vec<(Id, Option<Attr>, Option<Attr>)> = match act {
            Act::None => vec![(inner, None, None)],
            Act::Relu => nodes_of(egraph, inner, Opcode::Relu)
                .into_iter()
                .map(|r| (egraph.find(r.children[0]), Some(Attr::Float(0.0)), None))
                .collect(),
            Act::Clip => nodes_of(egraph, inner, Opcode::Clip)
                .into_iter()
                .map(|c| {
                    let a = c.attrs.as_deref();
                    let bound = |k: &str| a.and_then(|a| a.get(k));
                    (egraph.find(c.children[0]), bound("min"), bound("max"))
                })
                .collect(),
        };
        for (fc, lo, hi) in stages {
            for f in float_nodes(egraph, fc, float, &args) {
                let mut attrs = f.attrs.as_ref().map_or_else(Attrs::new, |a| a.to_attrs());
                if let Some(lo) = lo.clone() {
                    attrs.set("clip_min", lo);
                }
                if let Some(hi) = hi.clone() {
                    attrs.set("clip_max", hi);
                }
                out.extend(add_typed(
                    egraph,
                    int_op,
                    attrs,
                    Some(ty.clone()),
                    args.clone(),
                ));
            }
        }
    }
    out
}
