//! Reductions: `core.reduce_sum`, `core.reduce_mean`, `core.reduce_max`,
//! `core.reduce_min`, as ONNX's `Reduce*` with explicit axes.
//!
//! - `axes` may be negative; a repeated axis is an error; an empty list
//!   reduces nothing (the importer turns ONNX's "no axes means all axes" into
//!   the full list);
//! - float sums and means accumulate in `f64` and round once to the element
//!   type; integer sums wrap to the type (as numpy's `sum` in that dtype), an
//!   integer mean truncates toward zero;
//! - over zero elements: sum 0, mean NaN, max -inf and min +inf for floats
//!   (the type's smallest and largest value for integers), as ONNX's
//!   reference gives;
//! - max and min propagate NaN; on `i1` they are logical or / and.

use crate::ops::{EvalCx, InferCx, Opcode, normalize_axis};
use crate::tensor::{Data, Tensor, strides, unravel, wrap_int};
use crate::types::{Scalar, TensorType};

use super::elementwise::{fmax_nan, fmin_nan};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

/// The reduction an opcode names. A lookup rather than a match: the op
/// table routes only these four opcodes here.
fn kind_of(op: Opcode) -> Result<Reduce, String> {
    const KINDS: [(Opcode, Reduce); 4] = [
        (Opcode::ReduceSum, Reduce::Sum),
        (Opcode::ReduceMean, Reduce::Mean),
        (Opcode::ReduceMax, Reduce::Max),
        (Opcode::ReduceMin, Reduce::Min),
    ];
    KINDS
        .iter()
        .find(|(o, _)| *o == op)
        .map(|&(_, k)| k)
        .ok_or_else(|| format!("internal error: reduce hook called for {} (please report)", op.name()))
}

/// Which dimensions of a rank-`rank` tensor `axes` reduces.
fn reduced_dims(axes: &[i64], rank: usize) -> Result<Vec<bool>, String> {
    let mut reduced = vec![false; rank];
    for &a in axes {
        let d = normalize_axis(a, rank)?;
        if reduced[d] {
            return Err(format!("axis {a} is reduced twice (`axes` = {axes:?})"));
        }
        reduced[d] = true;
    }
    Ok(reduced)
}

pub fn infer_reduce(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let op = kind_of(cx.opcode)?;
    let x = &cx.operands[0];
    let s = match (x.elem.scalar(), op) {
        (Some(s), Reduce::Max | Reduce::Min) => s,
        (Some(s), Reduce::Sum | Reduce::Mean) if !s.is_bool() => s,
        _ => return Err(format!("operand must be a numeric tensor (float or integer), found {x}")),
    };
    let reduced = reduced_dims(cx.ints("axes")?, x.rank())?;
    let keepdims = cx.bool("keepdims")?;
    let shape = x
        .shape
        .iter()
        .zip(&reduced)
        .filter_map(|(&d, &r)| match (r, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect::<Vec<usize>>();
    Ok(vec![TensorType::new(shape, s)])
}

pub fn eval_reduce(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let op = kind_of(cx.opcode)?;
    let x = cx.inputs[0];
    let ty = cx.result_type().clone();
    let in_shape = x.shape();
    let reduced = reduced_dims(cx.ints("axes")?, in_shape.len())?;
    // The result with reduced dimensions kept as 1 has the same row-major
    // order as the result without them, so index into that.
    let kept: Vec<usize> = in_shape.iter().zip(&reduced).map(|(&d, &r)| if r { 1 } else { d }).collect();
    let kstrides = strides(&kept);
    let out_len: usize = kept.iter().product();
    let count: usize = in_shape.iter().zip(&reduced).filter(|(_, r)| **r).map(|(d, _)| d).product();
    let target = |flat: usize| -> usize {
        let idx = unravel(flat, in_shape);
        idx.iter().zip(&reduced).zip(&kstrides).map(|((&i, &r), &st)| if r { 0 } else { i * st }).sum()
    };
    let out = match &x.data {
        Data::F(v) => {
            let init = match op {
                Reduce::Sum | Reduce::Mean => 0.0,
                Reduce::Max => f64::NEG_INFINITY,
                Reduce::Min => f64::INFINITY,
            };
            let mut acc = vec![init; out_len];
            for (i, &e) in v.iter().enumerate() {
                let a = &mut acc[target(i)];
                *a = match op {
                    Reduce::Sum | Reduce::Mean => *a + e,
                    Reduce::Max => fmax_nan(*a, e),
                    Reduce::Min => fmin_nan(*a, e),
                };
            }
            if op == Reduce::Mean {
                // 0 / 0 is NaN: the mean of nothing.
                acc.iter_mut().for_each(|a| *a /= count as f64);
            }
            Tensor::from_f64(ty, acc)
        }
        Data::I(v) => {
            let s: Scalar = x.ty.elem.storage();
            let (lo, hi) = s.int_range().unwrap_or((i64::MIN, i64::MAX));
            let init = match op {
                Reduce::Sum | Reduce::Mean => 0,
                Reduce::Max => lo,
                Reduce::Min => hi,
            };
            let mut acc = vec![init; out_len];
            for (i, &e) in v.iter().enumerate() {
                let a = &mut acc[target(i)];
                *a = match op {
                    Reduce::Sum | Reduce::Mean => a.wrapping_add(e),
                    Reduce::Max => (*a).max(e),
                    Reduce::Min => (*a).min(e),
                };
            }
            if op == Reduce::Mean {
                if count == 0 {
                    return Err("the mean of zero integers is undefined".to_string());
                }
                // numpy sums in the type (wrapping), then divides.
                acc.iter_mut().for_each(|a| *a = wrap_int(s, *a) / count as i64);
            }
            Tensor::from_i64(ty, acc)
        }
    };
    Ok(vec![out])
}

#[cfg(test)]
mod tests;
