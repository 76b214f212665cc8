//! `quant.quantize`, `quant.dequantize` and `quant.requantize`: bit-exact
//! with ONNX `QuantizeLinear` / `DequantizeLinear` (opset 21+), following its
//! reference implementation step by step.
//!
//! - quantize: `x / scale` is computed in the expressed type (numpy divides
//!   two arrays of that type; an f64 quotient rounded once to f32, f16 or
//!   bf16 is exactly that division), then for integer storage rounded half to
//!   even, offset by the zero point and saturated to the storage range; for
//!   fp8 storage cast to fp8 (saturating or not, per `saturate`), with zero
//!   point 0.
//! - dequantize: `(q - zero_point) * scale` in float32 — numpy promotes the
//!   stored integers to f32, or to f64 where the storage has 32 or more bits
//!   or the scale is f64 — then converted to the expressed type.
//! - requantize: exactly dequantize then quantize.
//!
//! Scales live in the type as `f64`; they are first rounded to the expressed
//! type, as ONNX's scale tensors have that type. Per-axis parameters index
//! along the quantized type's axis.
//!
//! Invariant (checked by `check_quant_type`): the axis is within the rank,
//! there is one (scale, zero point) pair per slice, zero points lie in the
//! storage range and are 0 for fp8 storage.

use crate::ops::{EvalCx, InferCx};
use crate::tensor::{Data, Tensor, round_f8, round_to, strides};
use crate::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};

/// Checks a quantized element type against the shape it is used with.
pub fn check_quant_type(q: &QuantType, t: &TensorType) -> Result<(), String> {
    let storage_ok = q.storage.is_int() || matches!(q.storage, Scalar::F8E4M3FN | Scalar::F8E5M2);
    if !storage_ok {
        return Err(format!("quantized storage must be an integer or fp8 type, found {} in {t}", q.storage));
    }
    if !q.expressed.is_float() {
        return Err(format!("quantized expressed type must be a float type, found {} in {t}", q.expressed));
    }
    let zero_points: &[i64] = match &q.params {
        QuantParams::PerTensor { zero_point, .. } => std::slice::from_ref(zero_point),
        QuantParams::PerAxis { axis, scales, zero_points } => {
            if *axis >= t.rank() {
                return Err(format!("quantization axis {axis} is out of range for rank {} in {t}", t.rank()));
            }
            let dim = t.shape[*axis];
            if scales.len() != dim || zero_points.len() != dim {
                return Err(format!(
                    "per-axis quantization along axis {axis} needs {dim} scales and zero points (the dimension), found {} and {} in {t}",
                    scales.len(),
                    zero_points.len()
                ));
            }
            zero_points
        }
    };
    for &z in zero_points {
        match q.storage.int_range() {
            Some((lo, hi)) if !(lo..=hi).contains(&z) => {
                return Err(format!("zero point {z} is outside the range of {} in {t}", q.storage));
            }
            None if z != 0 => return Err(format!("zero point must be 0 for fp8 storage, found {z} in {t}")),
            _ => {}
        }
    }
    Ok(())
}

fn expect_quant<'t>(t: &'t TensorType, what: &str) -> Result<&'t QuantType, String> {
    let q = t.elem.quant().ok_or_else(|| format!("{what} must have a quantized element type, found {t}"))?;
    check_quant_type(q, t)?;
    Ok(q)
}

pub fn infer_quantize(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let s = match x.elem.scalar() {
        Some(s) if s.is_float() => s,
        _ => return Err(format!("operand must be a float tensor, found {x}")),
    };
    cx.bool("saturate")?;
    let r = cx.declared_one()?;
    let q = expect_quant(r, "result")?;
    if r.shape != x.shape {
        return Err(format!("result shape {:?} must equal the operand shape {:?}", r.shape, x.shape));
    }
    if q.expressed != s {
        return Err(format!("result's expressed type must be {s} (the operand's), found {}", q.expressed));
    }
    Ok(vec![r.clone()])
}

pub fn infer_dequantize(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let q = expect_quant(x, "operand")?;
    Ok(vec![TensorType::new(x.shape.clone(), q.expressed)])
}

pub fn infer_requantize(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let qi = expect_quant(x, "operand")?;
    let r = cx.declared_one()?;
    let qo = expect_quant(r, "result")?;
    if r.shape != x.shape {
        return Err(format!("result shape {:?} must equal the operand shape {:?}", r.shape, x.shape));
    }
    if qo.expressed != qi.expressed {
        return Err(format!(
            "result's expressed type must be {} (the operand's), found {}",
            qi.expressed, qo.expressed
        ));
    }
    Ok(vec![r.clone()])
}

/// For each flat index of `shape`, the slice index along `q`'s axis (0 for
/// per-tensor parameters).
fn param_index(q: &QuantType, shape: &[usize]) -> impl Fn(usize) -> usize {
    let (stride, dim) = match q.axis() {
        Some(a) => (strides(shape)[a], shape[a]),
        None => (1, 1),
    };
    move |i| (i / stride) % dim
}

/// Quantizes float values (already of type `q.expressed`) of a tensor with
/// `shape` to `q`'s storage.
pub fn quantize_values(x: &[f64], shape: &[usize], q: &QuantType, saturate: bool) -> Data {
    let at = param_index(q, shape);
    let e = q.expressed;
    let scaled = |i: usize| -> (f64, i64) {
        let (scale, zp) = q.params_at(at(i));
        (round_to(e, x[i] / round_to(e, scale)), zp)
    };
    match q.storage.int_range() {
        Some((lo, hi)) => Data::I(
            (0..x.len())
                .map(|i| {
                    let (v, zp) = scaled(i);
                    // NaN has no integer; it is taken as 0 (ONNX leaves it
                    // undefined). Infinities saturate like any large value.
                    let v = if v.is_nan() { 0.0 } else { v.round_ties_even() };
                    (v + zp as f64).clamp(lo as f64, hi as f64) as i64
                })
                .collect(),
        ),
        None => Data::F((0..x.len()).map(|i| round_f8(q.storage, scaled(i).0, saturate)).collect()),
    }
}

/// Dequantizes stored values of a tensor with `shape` and type `q` to
/// `q.expressed`.
pub fn dequantize_values(x: &Tensor, q: &QuantType) -> Vec<f64> {
    let at = param_index(q, x.shape());
    let e = q.expressed;
    let f32r = |v: f64| round_to(Scalar::F32, v);
    // numpy: q.astype(f32) - zp, where an integer zero point of 32 or more
    // bits promotes the difference to f64; then * scale, in f64 when either
    // side is f64, else in f32.
    let wide_diff = q.storage.bits() >= 32 && q.storage.int_range().is_some();
    (0..x.len())
        .map(|i| {
            let (scale, zp) = q.params_at(at(i));
            let qf = f32r(x.get_f64(i));
            let d = if wide_diff { qf - zp as f64 } else { f32r(qf - zp as f64) };
            let y = d * round_to(e, scale);
            let y = if wide_diff || e == Scalar::F64 { y } else { f32r(y) };
            round_to(e, y)
        })
        .collect()
}

pub fn eval_quantize(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let ty = cx.result_type().clone();
    let q = quant_of(&ty)?;
    let data = quantize_values(&x.to_f64(), x.shape(), q, cx.bool("saturate")?);
    Ok(vec![Tensor { ty, data }])
}

pub fn eval_dequantize(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let q = quant_of(&x.ty)?;
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), dequantize_values(x, q))])
}

pub fn eval_requantize(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let ty = cx.result_type().clone();
    let (qi, qo) = (quant_of(&x.ty)?, quant_of(&ty)?);
    // The dequantized values are already rounded to the shared expressed type.
    let mid = dequantize_values(x, qi);
    let data = quantize_values(&mid, x.shape(), qo, true);
    Ok(vec![Tensor { ty, data }])
}

fn quant_of(t: &TensorType) -> Result<&QuantType, String> {
    match &t.elem {
        ElemType::Quant(q) => Ok(q),
        ElemType::Scalar(_) => Err(format!("internal error: {t} is not quantized (please report)")),
    }
}

#[cfg(test)]
mod tests;
