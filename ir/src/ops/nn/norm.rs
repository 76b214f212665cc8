//! Normalizations and softmax: inference batch norm, layer norm, softmax and
//! log-softmax (ONNX opset-13 semantics: one axis, not the flattened tail).
//!
//! Invariant: statistics (mean, variance, the softmax sum) are computed in
//! `f64` and each result element is rounded once to the result type.

use super::require_float;
use crate::ops::{EvalCx, InferCx, Opcode, normalize_axis};
use crate::tensor::{Tensor, broadcast_index_map, broadcast_shapes};
use crate::types::TensorType;

// ---- batch_norm ----

pub fn infer_batch_norm(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    if x.rank() < 2 {
        return Err(format!("input rank must be at least 2, found {}", x.rank()));
    }
    require_float(x, "input")?;
    let c = x.shape[1];
    for (i, name) in [(1, "scale"), (2, "bias"), (3, "mean"), (4, "var")] {
        let p = &cx.operands[i];
        if p.elem != x.elem {
            return Err(format!(
                "{name} has element type {}, expected {}",
                p.elem, x.elem
            ));
        }
        if p.shape != [c] {
            return Err(format!("{name} shape must be [{c}], found {:?}", p.shape));
        }
    }
    Ok(vec![x.with_shape(x.shape.clone())])
}

pub fn eval_batch_norm(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let eps = cx.float("epsilon")?;
    let c = x.shape()[1];
    let inner: usize = x.shape()[2..].iter().product();
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| cx.inputs[i].to_f64());
    let out = x
        .to_f64()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / inner.max(1)) % c;
            (v - mean[ch]) / (var[ch] + eps).sqrt() * scale[ch] + bias[ch]
        })
        .collect();
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), out)])
}

// ---- layer_norm ----

pub fn infer_layer_norm(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    require_float(x, "input")?;
    if x.rank() == 0 {
        return Err("input rank must be at least 1, found 0".into());
    }
    let axis = normalize_axis(cx.int("axis")?, x.rank())?;
    let normalized = &x.shape[axis..];
    for (i, name) in [(1, "scale"), (2, "bias")] {
        let Some(p) = cx.operand(i) else { continue };
        if p.elem != x.elem {
            return Err(format!(
                "{name} has element type {}, expected {}",
                p.elem, x.elem
            ));
        }
        // Unidirectional broadcast to the normalized shape.
        let ok = p.rank() <= normalized.len()
            && broadcast_shapes(&p.shape, normalized).is_ok_and(|s| s == normalized);
        if !ok {
            return Err(format!(
                "{name} shape {:?} does not broadcast to the normalized shape {normalized:?}",
                p.shape
            ));
        }
    }
    Ok(vec![x.with_shape(x.shape.clone())])
}

pub fn eval_layer_norm(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let eps = cx.float("epsilon")?;
    let axis = normalize_axis(cx.int("axis")?, x.shape().len())?;
    let normalized = &x.shape()[axis..];
    let n: usize = normalized.iter().product();
    let param = |i: usize| {
        cx.input(i).map(|p| {
            let map = broadcast_index_map(p.shape(), normalized);
            let v = p.to_f64();
            map.into_iter().map(|j| v[j]).collect::<Vec<f64>>()
        })
    };
    let scale = param(1).unwrap_or_else(|| vec![1.0; n]);
    let bias = param(2).unwrap_or_else(|| vec![0.0; n]);
    let xv = x.to_f64();
    let mut out = Vec::with_capacity(xv.len());
    for row in xv.chunks(n.max(1)) {
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps).sqrt();
        out.extend(
            row.iter()
                .enumerate()
                .map(|(j, v)| (v - mean) * inv * scale[j] + bias[j]),
        );
    }
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), out)])
}

// ---- softmax / log_softmax ----

pub fn infer_softmax(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    require_float(x, "input")?;
    if x.rank() == 0 {
        return Err("input rank must be at least 1, found 0".into());
    }
    normalize_axis(cx.int("axis")?, x.rank())?;
    Ok(vec![x.with_shape(x.shape.clone())])
}

pub fn eval_softmax(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let shape = x.shape();
    let axis = normalize_axis(cx.int("axis")?, shape.len())?;
    // The table routes only softmax and log_softmax here.
    let log = cx.opcode == Opcode::LogSoftmax;
    let d = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let xv = x.to_f64();
    let mut out = vec![0.0; xv.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * d + k) * inner + i;
            // Subtracting the max keeps exp from overflowing.
            let max = (0..d).map(|k| xv[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..d).map(|k| (xv[at(k)] - max).exp()).sum();
            for k in 0..d {
                let z = xv[at(k)] - max;
                out[at(k)] = if log { z - sum.ln() } else { z.exp() / sum };
            }
        }
    }
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), out)])
}
