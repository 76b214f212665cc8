//! Elementwise ONNX ops, activations, casts, softmax and pass-throughs.
//!
//! Ops without an op of their own in the table become exact decompositions:
//! variadic Max/Min/Sum/Mean are left-to-right chains, the boolean ops and
//! LessOrEqual/GreaterOrEqual use `core.where`/`core.equal` with boolean
//! constants (so NaN compares false, as ONNX says).

use super::context::{Cx, Node, R, V};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{Opcode, Scalar, Tensor, TensorType};

/// A bool scalar constant.
pub fn bool_const(b: bool) -> V {
    V::konst(Tensor::from_i64(
        TensorType::new(vec![], Scalar::I1),
        vec![b as i64],
    ))
}

/// A scalar constant of `v`'s element type.
pub fn scalar_like(cx: &Cx, v: &V, x: f64) -> V {
    V::konst(Tensor::from_f64(
        TensorType::new(vec![], cx.ty(v).elem),
        vec![x],
    ))
}

/// A node that is exactly one op of the table: its first inputs are the
/// op's operands in order (as many as the table lists; each is required).
pub fn direct(cx: &mut Cx, n: &Node, opcode: Opcode, attrs: Attrs) -> R<Vec<V>> {
    let slots = opcode.info().operands.len();
    let operands = (0..slots).map(|i| cx.need(n, i).cloned()).collect::<R<Vec<V>>>()?;
    Ok(vec![cx.op1(opcode, &operands, attrs)?])
}

pub fn gelu_attrs(n: &Node) -> Attrs {
    Attrs::new().with("approximate", Attr::Str(n.str("approximate", "none")))
}

pub fn leaky_relu_attrs(n: &Node) -> Attrs {
    Attrs::new().with("alpha", Attr::Float(n.float("alpha", 0.01f32 as f64)))
}

pub fn hard_sigmoid_attrs(n: &Node) -> Attrs {
    Attrs::new()
        .with("alpha", Attr::Float(n.float("alpha", 0.2f32 as f64)))
        .with("beta", Attr::Float(n.float("beta", 0.5)))
}

/// `a <= b` is `where(a < b, true, a == b)`; `>=` likewise.
pub fn compare_or_equal(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let a = cx.need(n, 0)?.clone();
    let b = cx.need(n, 1)?.clone();
    let strict = if n.op_type == "LessOrEqual" {
        Opcode::Less
    } else {
        Opcode::Greater
    };
    let lt = cx.op1(strict, &[a.clone(), b.clone()], Attrs::new())?;
    let eq = cx.op1(Opcode::Equal, &[a, b], Attrs::new())?;
    Ok(vec![cx.op1(
        Opcode::Where,
        &[lt, bool_const(true), eq],
        Attrs::new(),
    )?])
}

/// Boolean Not/And/Or/Xor through `where` and `equal`.
pub fn logic(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let a = cx.need(n, 0)?.clone();
    for v in n.inputs.iter().flatten() {
        if !cx.ty(v).elem.is_bool() {
            return Err(cx.bad(format!("operands must be bool, found {}", cx.ty(v))));
        }
    }
    let not = |cx: &mut Cx, v: V| cx.op1(Opcode::Equal, &[v, bool_const(false)], Attrs::new());
    let out = match n.op_type {
        "Not" => not(cx, a)?,
        "And" => {
            let b = cx.need(n, 1)?.clone();
            cx.op1(Opcode::Where, &[a, b, bool_const(false)], Attrs::new())?
        }
        "Or" => {
            let b = cx.need(n, 1)?.clone();
            cx.op1(Opcode::Where, &[a, bool_const(true), b], Attrs::new())?
        }
        _ => {
            let b = cx.need(n, 1)?.clone();
            let nb = not(cx, b.clone())?;
            cx.op1(Opcode::Where, &[a, nb, b], Attrs::new())?
        }
    };
    Ok(vec![out])
}

/// Max/Min/Sum/Mean over any number of inputs, as a chain.
pub fn variadic(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let inputs: Vec<V> = n.inputs.iter().flatten().cloned().collect();
    let Some(first) = inputs.first().cloned() else {
        return Err(cx.bad("at least one input is required"));
    };
    let opcode = match n.op_type {
        "Max" => Opcode::Max,
        "Min" => Opcode::Min,
        _ => Opcode::Add,
    };
    let mut acc = first;
    for v in &inputs[1..] {
        acc = cx.op1(opcode, &[acc, v.clone()], Attrs::new())?;
    }
    if inputs.len() == 1 {
        // A lone input still broadcasts to nothing: the result is the input.
        return Ok(vec![acc]);
    }
    if n.op_type == "Mean" {
        let count = scalar_like(cx, &acc, inputs.len() as f64);
        acc = cx.op1(Opcode::Div, &[acc, count], Attrs::new())?;
    }
    Ok(vec![acc])
}

/// `Clip`: constant bounds become attributes; others become max/min.
pub fn clip(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let mut x = cx.need(n, 0)?.clone();
    let mut attrs = Attrs::new();
    if cx.opset < 11 {
        // Before opset 11 the bounds are attributes.
        for name in ["min", "max"] {
            if n.attr(name).is_some() {
                attrs.set(name, Attr::Float(n.float(name, 0.0)));
            }
        }
        return Ok(vec![cx.op1(Opcode::Clip, &[x], attrs)?]);
    }
    let mut dynamic = vec![];
    for (i, name) in [(1, "min"), (2, "max")] {
        match n.input(i) {
            None => {}
            Some(V::C(t)) => {
                if t.len() != 1 {
                    return Err(cx.bad(format!("`{name}` must be a scalar")));
                }
                attrs.set(name, Attr::Float(t.get_f64(0)));
            }
            Some(v) => dynamic.push((name, v.clone())),
        }
    }
    if !attrs.0.is_empty() || dynamic.is_empty() {
        x = cx.op1(Opcode::Clip, &[x], attrs)?;
    }
    for (name, bound) in dynamic {
        let op = if name == "min" {
            Opcode::Max
        } else {
            Opcode::Min
        };
        x = cx.op1(op, &[x, bound], Attrs::new())?;
    }
    Ok(vec![x])
}

pub fn where_(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let c = cx.need(n, 0)?.clone();
    let a = cx.need(n, 1)?.clone();
    let b = cx.need(n, 2)?.clone();
    Ok(vec![cx.op1(Opcode::Where, &[c, a, b], Attrs::new())?])
}

/// `Cast` and `CastLike`.
pub fn cast(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let to = if n.op_type == "CastLike" {
        let like = cx.need(n, 1)?;
        cx.ty(like)
            .elem
            .scalar()
            .ok_or_else(|| cx.bad("the target type must not be quantized"))?
    } else {
        let t = n
            .opt_int("to")
            .ok_or_else(|| cx.bad("attribute `to` is required"))?;
        super::tensors::scalar_of(t as i32, "the target of Cast").map_err(|m| cx.bad(m))?
    };
    let attrs = Attrs::new()
        .with("to", Attr::Type(to))
        .with("saturate", Attr::Bool(n.int("saturate", 1) != 0));
    Ok(vec![cx.op1(Opcode::Cast, &[x], attrs)?])
}

/// `Softmax`/`LogSoftmax`. Before opset 13 they normalize over the
/// flattened dimensions from `axis` on (default 1).
pub fn softmax(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let opcode = if n.op_type == "Softmax" {
        Opcode::Softmax
    } else {
        Opcode::LogSoftmax
    };
    let shape = cx.shape(&x);
    let rank = shape.len();
    if cx.opset >= 13 {
        let axis = n.int("axis", -1);
        return Ok(vec![cx.op1(
            opcode,
            &[x],
            Attrs::new().with("axis", Attr::Int(axis)),
        )?]);
    }
    let axis = aoc_ir::ops::normalize_axis(n.int("axis", 1), rank.max(1)).map_err(|m| cx.bad(m))?;
    if axis + 1 >= rank {
        return Ok(vec![cx.op1(
            opcode,
            &[x],
            Attrs::new().with("axis", Attr::Int(-1)),
        )?]);
    }
    let rows: usize = shape[..axis].iter().product();
    let cols: usize = shape[axis..].iter().product();
    let flat = cx.reshape(&x, &[rows, cols])?;
    let y = cx.op1(opcode, &[flat], Attrs::new().with("axis", Attr::Int(-1)))?;
    Ok(vec![cx.reshape(&y, &shape)?])
}

pub fn identity(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    Ok(vec![cx.need(n, 0)?.clone()])
}

/// `Dropout` in inference (or with ratio 0) passes its input through and
/// its mask is all true; random training-mode dropout is unsupported.
pub fn dropout(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    if cx.opset < 12 {
        // Before opset 12 the ratio is an attribute and there is no
        // training mode: Dropout is the identity at inference. The mask
        // (of the input's type before opset 10) is all zeros, as ONNX
        // Runtime writes it for these opsets.
        let x = cx.need(n, 0)?.clone();
        let mask_type = if cx.opset >= 10 { Scalar::I1 } else { cx.ty(&x).elem.scalar().unwrap_or(Scalar::F32) };
        let mask = Tensor::splat(TensorType::new(cx.shape(&x), mask_type), 0.0);
        return Ok(vec![x, V::konst(mask)]);
    }
    let training = match n.input(2) {
        None => false,
        Some(V::C(t)) if t.len() == 1 => t.get_i64(0) != 0,
        Some(_) => return Err(cx.bad("`training_mode` must be a constant scalar")),
    };
    let ratio = match n.input(1) {
        None => 0.5,
        Some(V::C(t)) if t.len() == 1 => t.get_f64(0),
        Some(_) => return Err(cx.bad("`ratio` must be a constant scalar")),
    };
    if training && ratio != 0.0 {
        return Err(cx.bad("training mode (random dropout) is unsupported"));
    }
    let x = cx.need(n, 0)?.clone();
    let mask = Tensor::splat(TensorType::new(cx.shape(&x), Scalar::I1), 1.0);
    Ok(vec![x, V::konst(mask)])
}

/// `Mod` (the table has no modulo op): folded on constants; on integer
/// values, an exact decomposition. `fmod = 0` takes the divisor's sign, as
/// Python's `%`; `fmod = 1` the dividend's, as C's `fmod`.
pub fn modulo(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let (a, b) = match (cx.need(n, 0)?, cx.need(n, 1)?) {
        (V::C(a), V::C(b)) => (a.clone(), b.clone()),
        (a, b) if cx.ty(a).elem.is_int() => {
            let (a, b) = (a.clone(), b.clone());
            return Ok(vec![int_mod(cx, a, b, n.int("fmod", 0) != 0)?]);
        }
        _ => return Err(cx.bad("float operands are only supported when both are known at import time (the IR has no modulo op)")),
    };
    let shape = aoc_ir::tensor::broadcast_shapes(a.shape(), b.shape()).map_err(|m| cx.bad(m))?;
    let (ia, ib) = (
        aoc_ir::tensor::broadcast_index_map(a.shape(), &shape),
        aoc_ir::tensor::broadcast_index_map(b.shape(), &shape),
    );
    let ty = TensorType::new(shape, a.ty.elem.clone());
    let fmod = n.int("fmod", 0) != 0;
    let t = if ty.elem.storage().is_float() {
        let v = ia.iter().zip(&ib).map(|(&i, &j)| {
            let (x, y) = (a.get_f64(i), b.get_f64(j));
            let r = x % y;
            if fmod || r == 0.0 || (r < 0.0) == (y < 0.0) {
                r
            } else {
                r + y
            }
        });
        Tensor::from_f64(ty, v.collect())
    } else {
        let mut out = Vec::with_capacity(ia.len());
        for (&i, &j) in ia.iter().zip(&ib) {
            let (x, y) = (a.get_i64(i), b.get_i64(j));
            if y == 0 {
                return Err(cx.bad("integer modulo by zero"));
            }
            let r = x.wrapping_rem(y);
            out.push(if fmod || r == 0 || (r < 0) == (y < 0) {
                r
            } else {
                r + y
            });
        }
        Tensor::from_i64(ty, out)
    };
    Ok(vec![V::konst(t)])
}

/// Integer modulo: `r = a - (a / b) * b` (division truncates, so `r` has
/// the dividend's sign), then for `fmod = 0` add `b` where `r != 0` and the
/// signs of `r` and `b` differ.
fn int_mod(cx: &mut Cx, a: V, b: V, fmod: bool) -> R<V> {
    let q = cx.op1(Opcode::Div, &[a.clone(), b.clone()], Attrs::new())?;
    let qb = cx.op1(Opcode::Mul, &[q, b.clone()], Attrs::new())?;
    let r = cx.op1(Opcode::Sub, &[a, qb], Attrs::new())?;
    if fmod {
        return Ok(r);
    }
    let zero = scalar_like(cx, &r, 0.0);
    let r_neg = cx.op1(Opcode::Less, &[r.clone(), zero.clone()], Attrs::new())?;
    let b_neg = cx.op1(Opcode::Less, &[b.clone(), zero.clone()], Attrs::new())?;
    let b_pos = cx.op1(
        Opcode::Equal,
        &[b_neg.clone(), bool_const(false)],
        Attrs::new(),
    )?;
    let differ = cx.op1(Opcode::Where, &[r_neg, b_pos, b_neg], Attrs::new())?;
    let is_zero = cx.op1(Opcode::Equal, &[r.clone(), zero], Attrs::new())?;
    let fix = cx.op1(
        Opcode::Where,
        &[is_zero, bool_const(false), differ],
        Attrs::new(),
    )?;
    let shifted = cx.op1(Opcode::Add, &[r.clone(), b], Attrs::new())?;
    cx.op1(Opcode::Where, &[fix, shifted, r], Attrs::new())
}
