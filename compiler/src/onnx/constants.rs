//! The ONNX ops that only ever produce constants: Constant,
//! ConstantOfShape, Shape, Size, Range and NonZero. Their inputs must be
//! known at import time (Shape and Size read only the static type), and
//! what they build is bounded by the folding limit.
//!
//! `NonZero` is here because its output shape (`rank × count`) depends on
//! the values of its input: shapes are static in aoc, so a `NonZero` whose
//! input is computed at run time is refused, naming the node and why.

use super::context::{Cx, Node, R, V, tensor_attr};
use super::fold::FOLD_LIMIT;
use aoc_ir::{Scalar, Tensor, TensorType};

fn i64_tensor(values: Vec<i64>, shape: Vec<usize>) -> V {
    V::konst(Tensor::from_i64(
        TensorType::new(shape, Scalar::I64),
        values,
    ))
}

/// `Constant`: exactly one of its value attributes.
pub fn constant(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let what = format!("the value of Constant `{}`", n.name);
    let t = if let Some(a) = n.attr("value") {
        let t =
            a.t.as_ref()
                .ok_or_else(|| cx.bad("attribute `value` holds no tensor"))?;
        tensor_attr(t, &what, &cx.loc)?
    } else if let Some(f) = n.attr("value_float").and_then(|a| a.f) {
        Tensor::from_f64(TensorType::new(vec![], Scalar::F32), vec![f as f64])
    } else if let Some(v) = n.floats("value_floats") {
        let len = v.len();
        Tensor::from_f64(TensorType::new(vec![len], Scalar::F32), v)
    } else if let Some(i) = n.attr("value_int").and_then(|a| a.i) {
        Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![i])
    } else if let Some(v) = n.ints("value_ints") {
        let len = v.len();
        Tensor::from_i64(TensorType::new(vec![len], Scalar::I64), v)
    } else if n.attr("sparse_value").is_some() {
        return Err(cx.bad("sparse constants are unsupported"));
    } else if n.attr("value_string").is_some() || n.attr("value_strings").is_some() {
        return Err(cx.bad("string constants are unsupported"));
    } else {
        return Err(cx.bad("no value attribute"));
    };
    Ok(vec![V::konst(t)])
}

/// `ConstantOfShape`: the shape input must be constant.
pub fn constant_of_shape(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let shape = cx.const_input(n, 0, "input")?.to_i64();
    if shape.iter().any(|&d| d < 0) {
        return Err(cx.bad(format!("shape {shape:?} has a negative dimension")));
    }
    let shape: Vec<usize> = shape.into_iter().map(|d| d as usize).collect();
    let (elem, value) = match n.attr("value").and_then(|a| a.t.as_ref()) {
        Some(t) => {
            let t = tensor_attr(t, "ConstantOfShape's value", &cx.loc)?;
            if t.len() != 1 {
                return Err(cx.bad("attribute `value` must hold one element"));
            }
            (t.ty.elem.clone(), t.get_f64(0))
        }
        None => (Scalar::F32.into(), 0.0),
    };
    match aoc_ir::types::checked_elements(&shape) {
        Ok(n) if n <= FOLD_LIMIT => {}
        _ => return Err(cx.bad(format!("shape {shape:?} is too large to build at import time"))),
    }
    let ty = TensorType::new(shape, elem);
    Ok(vec![V::konst(Tensor::splat(ty, value))])
}

/// `Shape` (with `start`/`end` since opset 15).
pub fn shape(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let dims = cx.shape(cx.need(n, 0)?);
    let r = dims.len() as i64;
    let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
    let start = clamp(n.int("start", 0));
    let end = clamp(n.opt_int("end").unwrap_or(r));
    let vals: Vec<i64> = if start < end {
        dims[start..end].iter().map(|&d| d as i64).collect()
    } else {
        vec![]
    };
    let len = vals.len();
    Ok(vec![i64_tensor(vals, vec![len])])
}

pub fn size(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let t = cx.ty(cx.need(n, 0)?);
    Ok(vec![i64_tensor(vec![t.num_elements() as i64], vec![])])
}

/// `Range`: all three inputs must be constant scalars.
pub fn range(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let start = cx.const_input(n, 0, "start")?;
    let limit = cx.const_input(n, 1, "limit")?;
    let delta = cx.const_input(n, 2, "delta")?;
    if start.len() != 1 || limit.len() != 1 || delta.len() != 1 {
        return Err(cx.bad("start, limit and delta must be scalars"));
    }
    let elem = start.ty.elem.clone();
    let (s, l, d) = (start.get_f64(0), limit.get_f64(0), delta.get_f64(0));
    if d == 0.0 {
        return Err(cx.bad("delta must not be 0"));
    }
    let count = ((l - s) / d).ceil().max(0.0);
    if count > FOLD_LIMIT as f64 {
        return Err(cx.bad(format!("the range has {count} elements, too many to build")));
    }
    let count = count as usize;
    let ty = TensorType::new(vec![count], elem);
    let t = if ty.elem.storage().is_float() {
        // ONNX accumulates in the element type: start + i * delta.
        Tensor::from_f64(ty, (0..count).map(|i| s + i as f64 * d).collect())
    } else {
        let (s, d) = (start.get_i64(0), delta.get_i64(0));
        Tensor::from_i64(ty, (0..count as i64).map(|i| s + i * d).collect())
    };
    Ok(vec![V::konst(t)])
}

/// `NonZero`: the indices of the non-zero elements of a constant input, as
/// `rank × count` i64 in row-major order (a scalar input has rank 1 here,
/// as ONNX Runtime answers: `1 × count`).
pub fn non_zero(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let t = match cx.need(n, 0)? {
        V::C(t) => t.clone(),
        V::R(_) => {
            return Err(cx.bad(format!(
                "node `{}`: the input is computed at run time, and the output's shape (rank × number of non-zero \
                 elements) depends on its values; aoc's shapes are static, so only a NonZero whose input is known \
                 at import time (folded from constants) is supported",
                n.name
            )));
        }
    };
    let shape = t.shape().to_vec();
    let rank = shape.len().max(1);
    let hits: Vec<usize> = (0..t.len()).filter(|&i| t.get_f64(i) != 0.0).collect();
    if hits.len().saturating_mul(rank) > FOLD_LIMIT {
        return Err(cx.bad(format!("the result has {} indices, too many to build at import time", hits.len() * rank)));
    }
    let mut out = vec![0i64; rank * hits.len()];
    for (k, &flat) in hits.iter().enumerate() {
        let idx = if shape.is_empty() { vec![0] } else { aoc_ir::tensor::unravel(flat, &shape) };
        for (d, &i) in idx.iter().enumerate() {
            out[d * hits.len() + k] = i as i64;
        }
    }
    let count = hits.len();
    Ok(vec![i64_tensor(out, vec![rank, count])])
}
