//! Elementwise ops: unary math and activations, `core.cast`, binary
//! arithmetic and comparisons with numpy broadcasting, and `core.where`.
//!
//! Semantics are ONNX's (its reference implementation in
//! `onnx/reference/ops` is the model):
//! - float results are computed in `f64` and rounded once to the element type
//!   by [`Tensor::from_f64`]; for `+ - * /` and `sqrt` this equals the
//!   correctly rounded operation in f32/f16/bf16. Activations that ONNX
//!   defines as a short chain of float ops (`hard_sigmoid`, `hard_swish`,
//!   `leaky_relu`, `prelu`) round after each step as numpy does in the type;
//! - integer results wrap to the type (two's complement, as numpy);
//!   integer division truncates toward zero (ONNX's reference adjusts
//!   numpy's floor division to C semantics) and division by zero is an error;
//! - `max`/`min` (binary, `clip`, `relu`, `hard_sigmoid`) propagate NaN;
//! - quantized element types are rejected: quantized tensors only pass
//!   through the quant ops and data-movement ops.

use crate::ops::kind::{Activation, Binary, ScalarOp, Unary, sigmoid};
use crate::ops::{EvalCx, InferCx, Opcode};
use crate::tensor::{Data, Tensor, broadcast_index_map, broadcast_shapes, round_f8, round_to};
use crate::types::{Scalar, TensorType};

mod erf;
pub use erf::erf;

#[cfg(test)]
pub(crate) mod tests;

// ---------------------------------------------------------------------------
// Which elementwise computation an op is comes from its table entry
// (`Opcode::kind`); the eval hooks match on that.

/// A one-operand pointwise function of the table: a scalar function or a
/// (parameterized) activation.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum UnaryOp {
    Math(Unary),
    Act(Activation),
}

/// A two-operand pointwise function: a scalar function or prelu.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum BinaryOp {
    Math(Binary),
    Prelu,
}

fn internal(op: Opcode, hook: &str) -> String {
    format!("internal error: {hook} called for {} (please report)", op.name())
}

// ---------------------------------------------------------------------------
// Operand checks shared by the infer hooks (and by other op families).

/// The operand's scalar type if it is a float tensor.
pub fn expect_float(t: &TensorType, what: &str) -> Result<Scalar, String> {
    match t.elem.scalar() {
        Some(s) if s.is_float() => Ok(s),
        _ => Err(format!("{what} must be a float tensor, found {t}")),
    }
}

/// The operand's scalar type if it is a numeric (float or integer, not `i1`,
/// not quantized) tensor.
pub fn expect_numeric(t: &TensorType, what: &str) -> Result<Scalar, String> {
    match t.elem.scalar() {
        Some(s) if !s.is_bool() => Ok(s),
        _ => Err(format!("{what} must be a numeric tensor (float or integer), found {t}")),
    }
}

/// The operand's scalar type if it is not quantized.
fn expect_plain(t: &TensorType, what: &str) -> Result<Scalar, String> {
    t.elem.scalar().ok_or_else(|| format!("{what} must not be quantized, found {t}"))
}

fn expect_same_elem(a: &TensorType, b: &TensorType) -> Result<(), String> {
    if a.elem == b.elem {
        Ok(())
    } else {
        Err(format!("operand element types must match, found {} and {}", a.elem, b.elem))
    }
}

/// NaN-propagating maximum; on ties returns `a` (numpy's `maximum`).
pub fn fmax_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || a >= b { a } else { b }
}

/// NaN-propagating minimum; on ties returns `a` (numpy's `minimum`).
pub fn fmin_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || a <= b { a } else { b }
}

// ---------------------------------------------------------------------------
// core.identity

pub fn infer_same(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Ok(vec![cx.operands[0].clone()])
}

pub fn eval_identity(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let mut t = cx.inputs[0].clone();
    t.ty = cx.result_type().clone();
    Ok(vec![t])
}

// ---------------------------------------------------------------------------
// Unary ops

pub fn infer_numeric_unary(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let s = expect_numeric(x, "operand")?;
    Ok(vec![TensorType::new(x.shape.clone(), s)])
}

pub fn infer_float_unary(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let s = expect_float(x, "operand")?;
    if cx.opcode == Opcode::Gelu {
        let a = cx.str("approximate")?;
        if a != "none" && a != "tanh" {
            return Err(format!("attribute `approximate` must be \"none\" or \"tanh\", found \"{a}\""));
        }
    }
    Ok(vec![TensorType::new(x.shape.clone(), s)])
}

/// Attribute values the activations use, read once per op.
struct UnaryParams {
    alpha: f64,
    beta: f64,
    lo: Option<f64>,
    hi: Option<f64>,
    tanh_gelu: bool,
}

impl UnaryParams {
    fn read(op: UnaryOp, cx: &EvalCx) -> Result<UnaryParams, String> {
        let opt = |name: &str| -> Result<Option<f64>, String> {
            if cx.has(name) { cx.float(name).map(Some) } else { Ok(None) }
        };
        let mut p = UnaryParams { alpha: 0.0, beta: 0.0, lo: None, hi: None, tanh_gelu: false };
        let UnaryOp::Act(act) = op else { return Ok(p) };
        match act {
            Activation::HardSigmoid => {
                p.alpha = cx.float("alpha")?;
                p.beta = cx.float("beta")?;
            }
            // ONNX defines HardSwish as x * HardSigmoid(x; 1/6, 1/2).
            Activation::HardSwish => {
                p.alpha = 1.0 / 6.0;
                p.beta = 0.5;
            }
            Activation::LeakyRelu => p.alpha = cx.float("alpha")?,
            Activation::Clip => {
                p.lo = opt("min")?;
                p.hi = opt("max")?;
            }
            Activation::Gelu => p.tanh_gelu = cx.str("approximate")? == "tanh",
            Activation::Silu | Activation::Prelu => {}
        }
        Ok(p)
    }
}

/// One unary op on a float value of type `s`. `r` rounds to `s`, for the
/// ops ONNX computes as several rounded steps.
fn unary_float(op: UnaryOp, x: f64, s: Scalar, p: &UnaryParams) -> f64 {
    let r = |v: f64| round_to(s, v);
    let hard_sigmoid = |x: f64| fmax_nan(0.0, fmin_nan(1.0, r(r(x * r(p.alpha)) + r(p.beta))));
    let act = match op {
        UnaryOp::Math(u) => return u.eval(x),
        UnaryOp::Act(a) => a,
    };
    match act {
        Activation::Gelu if p.tanh_gelu => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Activation::Silu => x * sigmoid(x),
        Activation::HardSigmoid => hard_sigmoid(x),
        Activation::HardSwish => x * hard_sigmoid(x),
        Activation::LeakyRelu => {
            if x > 0.0 {
                x
            } else {
                x * r(p.alpha)
            }
        }
        Activation::Clip => {
            // numpy's clip: minimum(maximum(x, lo), hi); with lo > hi every
            // value becomes hi, as the ONNX spec says.
            let mut v = x;
            if let Some(lo) = p.lo {
                v = fmax_nan(v, r(lo));
            }
            if let Some(hi) = p.hi {
                v = fmin_nan(v, r(hi));
            }
            v
        }
        // Two operands: `eval_unary` refuses it, `eval_binary` computes it.
        Activation::Prelu => f64::NAN,
    }
}

/// One unary op on an integer value (before wrapping to the type); `None`
/// for float-only ops, which the infer hook keeps away from integers.
fn unary_int(op: UnaryOp, x: i64, p: &UnaryParams) -> Option<i64> {
    match op {
        UnaryOp::Math(Unary::Floor | Unary::Ceil | Unary::Trunc | Unary::RoundEven) => None,
        UnaryOp::Math(u) => u.eval_int(x),
        UnaryOp::Act(Activation::Clip) => {
            // Integer bounds: the smallest integer >= lo, the largest <= hi.
            let mut v = x;
            if let Some(lo) = p.lo {
                v = v.max(lo.ceil() as i64);
            }
            if let Some(hi) = p.hi {
                v = v.min(hi.floor() as i64);
            }
            Some(v)
        }
        UnaryOp::Act(
            Activation::Gelu
            | Activation::Silu
            | Activation::HardSigmoid
            | Activation::HardSwish
            | Activation::LeakyRelu
            | Activation::Prelu,
        ) => None,
    }
}

/// The one-operand function an op of the table computes.
fn unary_op(opcode: Opcode) -> Option<UnaryOp> {
    match opcode.kind().scalar_op()? {
        ScalarOp::Unary(u) => Some(UnaryOp::Math(u)),
        ScalarOp::Activation(Activation::Prelu) | ScalarOp::Binary(_) => None,
        ScalarOp::Activation(a) => Some(UnaryOp::Act(a)),
    }
}

/// The two-operand function an op of the table computes.
fn binary_op(opcode: Opcode) -> Option<BinaryOp> {
    match opcode.kind().scalar_op()? {
        ScalarOp::Binary(b) => Some(BinaryOp::Math(b)),
        ScalarOp::Activation(Activation::Prelu) => Some(BinaryOp::Prelu),
        ScalarOp::Activation(_) | ScalarOp::Unary(_) => None,
    }
}

pub fn eval_unary(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let op = unary_op(cx.opcode).ok_or_else(|| internal(cx.opcode, "eval_unary"))?;
    let p = UnaryParams::read(op, cx)?;
    let x = cx.inputs[0];
    let ty = cx.result_type().clone();
    let s = ty.elem.storage();
    let out = match &x.data {
        Data::F(v) => Tensor::from_f64(ty, v.iter().map(|&x| unary_float(op, x, s, &p)).collect()),
        Data::I(v) => {
            let vals = v.iter().map(|&x| unary_int(op, x, &p)).collect::<Option<Vec<i64>>>();
            let vals = vals.ok_or_else(|| internal(cx.opcode, "eval_unary on integers"))?;
            Tensor::from_i64(ty, vals)
        }
    };
    Ok(vec![out])
}

// ---------------------------------------------------------------------------
// core.cast

pub fn infer_cast(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    expect_plain(x, "operand")?;
    let to = cx.ty("to")?;
    cx.bool("saturate")?;
    Ok(vec![TensorType::new(x.shape.clone(), to)])
}

/// ONNX `Cast` of one tensor to scalar type `to` (numpy's `astype`, plus
/// ONNX's saturating fp8 conversion).
pub fn cast_tensor(x: &Tensor, ty: TensorType, saturate: bool) -> Tensor {
    let to = ty.elem.storage();
    match (&x.data, to) {
        // astype(bool) tests for non-zero: 0.5 and NaN are true.
        (Data::F(v), Scalar::I1) => Tensor::from_i64(ty, v.iter().map(|&x| (x != 0.0) as i64).collect()),
        (_, Scalar::F8E4M3FN | Scalar::F8E5M2) => {
            let vals = x.to_f64().into_iter().map(|v| round_f8(to, v, saturate)).collect();
            Tensor { ty, data: Data::F(vals) }
        }
        // Floats to integers truncate toward zero, then wrap (from_f64);
        // integers to floats round to nearest even; integers to integers
        // wrap (from_i64).
        (Data::F(v), _) => Tensor::from_f64(ty, v.clone()),
        (Data::I(v), _) => Tensor::from_i64(ty, v.clone()),
    }
}

pub fn eval_cast(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let saturate = cx.bool("saturate")?;
    Ok(vec![cast_tensor(cx.inputs[0], cx.result_type().clone(), saturate)])
}

// ---------------------------------------------------------------------------
// Binary ops

pub fn infer_binary(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (a, b) = (&cx.operands[0], &cx.operands[1]);
    let s = expect_numeric(a, "lhs")?;
    expect_numeric(b, "rhs")?;
    expect_same_elem(a, b)?;
    let shape = broadcast_shapes(&a.shape, &b.shape)?;
    Ok(vec![TensorType::new(shape, s)])
}

pub fn infer_pow(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (a, b) = (&cx.operands[0], &cx.operands[1]);
    let s = expect_numeric(a, "base")?;
    expect_numeric(b, "exponent")?;
    let shape = broadcast_shapes(&a.shape, &b.shape)?;
    Ok(vec![TensorType::new(shape, s)])
}

pub fn infer_prelu(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, slope) = (&cx.operands[0], &cx.operands[1]);
    let s = expect_numeric(x, "operand")?;
    expect_numeric(slope, "slope")?;
    expect_same_elem(x, slope)?;
    // Unidirectional: slope broadcasts to x, x keeps its shape.
    match broadcast_shapes(&x.shape, &slope.shape) {
        Ok(shape) if shape == x.shape => Ok(vec![TensorType::new(x.shape.clone(), s)]),
        _ => Err(format!("slope shape {:?} must broadcast to the operand shape {:?}", slope.shape, x.shape)),
    }
}

pub fn infer_compare(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (a, b) = (&cx.operands[0], &cx.operands[1]);
    if cx.opcode == Opcode::Equal {
        expect_plain(a, "lhs")?;
        expect_plain(b, "rhs")?;
    } else {
        expect_numeric(a, "lhs")?;
        expect_numeric(b, "rhs")?;
    }
    expect_same_elem(a, b)?;
    let shape = broadcast_shapes(&a.shape, &b.shape)?;
    Ok(vec![TensorType::new(shape, Scalar::I1)])
}

fn binary_float(op: BinaryOp, a: f64, b: f64, s: Scalar) -> f64 {
    match op {
        BinaryOp::Math(m) => m.eval(a, b),
        BinaryOp::Prelu => {
            if a > 0.0 {
                a
            } else {
                round_to(s, a * b)
            }
        }
    }
}

/// Integer power with wrapping (numpy's integer `power`). A negative
/// exponent gives what C's truncating division would: only bases 1 and -1
/// survive; a zero base is an error.
fn int_pow(base: i64, exp: i64) -> Result<i64, String> {
    if exp < 0 {
        return match base {
            0 => Err("zero raised to a negative power".to_string()),
            1 => Ok(1),
            -1 => Ok(if exp % 2 == 0 { 1 } else { -1 }),
            _ => Ok(0),
        };
    }
    let (mut acc, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    Ok(acc)
}

fn binary_int(op: BinaryOp, a: i64, b: i64) -> Result<i64, String> {
    let op = match op {
        BinaryOp::Math(m) => m,
        BinaryOp::Prelu => return Ok(if a > 0 { a } else { a.wrapping_mul(b) }),
    };
    Ok(match op {
        Binary::Add => a.wrapping_add(b),
        Binary::Sub => a.wrapping_sub(b),
        Binary::Mul => a.wrapping_mul(b),
        Binary::Div => {
            if b == 0 {
                return Err("division by zero".to_string());
            }
            // Truncates toward zero, as ONNX's reference (C semantics).
            a.wrapping_div(b)
        }
        Binary::Max => a.max(b),
        Binary::Min => a.min(b),
        Binary::Pow => int_pow(a, b)?,
        Binary::Equal => (a == b) as i64,
        Binary::Less => (a < b) as i64,
        Binary::Greater => (a > b) as i64,
    })
}

pub fn eval_binary(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let op = binary_op(cx.opcode).ok_or_else(|| internal(cx.opcode, "eval_binary"))?;
    let (a, b) = (cx.inputs[0], cx.inputs[1]);
    let ty = cx.result_type().clone();
    let ma = broadcast_index_map(a.shape(), &ty.shape);
    let mb = broadcast_index_map(b.shape(), &ty.shape);
    let pairs = ma.iter().zip(&mb);
    let out = match (&a.data, &b.data) {
        // Both integer (or bool): exact integer arithmetic, wrapped by from_i64.
        (Data::I(x), Data::I(y)) => {
            let vals = pairs.map(|(&i, &j)| binary_int(op, x[i], y[j])).collect::<Result<Vec<i64>, String>>()?;
            Tensor::from_i64(ty, vals)
        }
        // A float on either side (pow may mix types): compute in f64;
        // from_f64 rounds to the result type (truncating for an integer
        // base with a float exponent, as numpy's astype does).
        _ => {
            let s = a.ty.elem.storage();
            let vals = pairs.map(|(&i, &j)| binary_float(op, a.get_f64(i), b.get_f64(j), s)).collect();
            Tensor::from_f64(ty, vals)
        }
    };
    Ok(vec![out])
}

// ---------------------------------------------------------------------------
// core.where

pub fn infer_where(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (c, x, y) = (&cx.operands[0], &cx.operands[1], &cx.operands[2]);
    if !c.elem.is_bool() {
        return Err(format!("condition must be an i1 tensor, found {c}"));
    }
    let s = expect_plain(x, "x")?;
    expect_plain(y, "y")?;
    expect_same_elem(x, y)?;
    let shape = broadcast_shapes(&broadcast_shapes(&c.shape, &x.shape)?, &y.shape)?;
    Ok(vec![TensorType::new(shape, s)])
}

pub fn eval_where(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (c, x, y) = (cx.inputs[0], cx.inputs[1], cx.inputs[2]);
    let ty = cx.result_type().clone();
    let mc = broadcast_index_map(c.shape(), &ty.shape);
    let mx = broadcast_index_map(x.shape(), &ty.shape);
    let my = broadcast_index_map(y.shape(), &ty.shape);
    let take = |k: usize| c.get_i64(mc[k]) != 0;
    let n = ty.num_elements();
    let data = match (&x.data, &y.data) {
        (Data::F(xv), Data::F(yv)) => Data::F((0..n).map(|k| if take(k) { xv[mx[k]] } else { yv[my[k]] }).collect()),
        (Data::I(xv), Data::I(yv)) => Data::I((0..n).map(|k| if take(k) { xv[mx[k]] } else { yv[my[k]] }).collect()),
        _ => return Err(internal(cx.opcode, "eval_where with mixed storage")),
    };
    Ok(vec![Tensor { ty, data }])
}
