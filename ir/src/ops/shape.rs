//! Shape and data-movement ops: reshape, transpose, flatten, concat, slice,
//! pad, gather and expand, with ONNX semantics on static shapes.
//!
//! These ops never change values, so they accept every element type,
//! quantized ones included: the element type carries through unchanged. A
//! per-axis quantized type names a dimension, so each op either keeps that
//! dimension intact (remapping its index where the op moves it: transpose,
//! gather, expand) or rejects the type with a message saying why. Reshape
//! and flatten always reject per-axis types: whether the axis survives a
//! reshape is not worth guessing.
//!
//! Invariant: `eval` only moves elements (`Tensor::select`), so values are
//! bit-for-bit those of the operand.

use crate::attr::{Attr, Attrs};
use crate::ops::{EvalCx, InferCx, normalize_axis};
use crate::tensor::{Data, Tensor, broadcast_index_map, broadcast_shapes, strides, unravel};
use crate::types::{ElemType, QuantParams, Scalar, TensorType};

// ---- per-axis quantized types ----

/// The quantized axis of a per-axis quantized element type.
fn quant_axis(elem: &ElemType) -> Option<usize> {
    elem.quant().and_then(|q| q.axis())
}

/// `elem` with its per-axis quantization moved to `axis`.
fn with_quant_axis(elem: &ElemType, axis: usize) -> ElemType {
    match elem {
        ElemType::Quant(q) => {
            let mut q = q.clone();
            if let QuantParams::PerAxis { axis: a, .. } = &mut q.params {
                *a = axis;
            }
            ElemType::Quant(q)
        }
        ElemType::Scalar(_) => elem.clone(),
    }
}

fn per_axis_error(elem: &ElemType, why: &str) -> String {
    format!("per-axis quantized element type {elem} is not supported here: {why}")
}

fn reject_per_axis(elem: &ElemType, why: &str) -> Result<(), String> {
    match quant_axis(elem) {
        Some(_) => Err(per_axis_error(elem, why)),
        None => Ok(()),
    }
}

// ---- reshape, flatten ----

pub fn infer_reshape(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    reject_per_axis(&x.elem, "reshape may split or merge the quantized axis")?;
    let shape = cx.ints("shape")?;
    if let Some(bad) = shape.iter().find(|&&d| d < 0) {
        return Err(format!(
            "shape dimensions must be non-negative, found {bad} (the importer resolves -1)"
        ));
    }
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n = crate::types::checked_elements(&shape)?;
    if n != x.num_elements() {
        return Err(format!(
            "shape {shape:?} has {n} elements, operand {:?} has {}",
            x.shape,
            x.num_elements()
        ));
    }
    Ok(vec![x.with_shape(shape)])
}

/// Reshape and flatten: the row-major elements are unchanged.
pub fn eval_reshape(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Ok(vec![Tensor {
        ty: cx.result_type().clone(),
        data: cx.inputs[0].data.clone(),
    }])
}

pub fn infer_flatten(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    reject_per_axis(&x.elem, "flatten merges dimensions")?;
    let r = x.rank() as i64;
    let axis = cx.int("axis")?;
    // ONNX allows axis == rank (all dimensions form the rows).
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&a) {
        return Err(format!("axis {axis} is out of range [-{r}, {r}]"));
    }
    let a = a as usize;
    let rows: usize = x.shape[..a].iter().product();
    let cols: usize = x.shape[a..].iter().product();
    Ok(vec![x.with_shape(vec![rows, cols])])
}

// ---- transpose ----

fn check_perm(perm: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank
        && perm.iter().all(|&p| {
            let fresh = p >= 0 && (p as usize) < rank && !seen[p as usize];
            if fresh {
                seen[p as usize] = true;
            }
            fresh
        });
    if !ok {
        return Err(format!("perm {perm:?} is not a permutation of 0..{rank}"));
    }
    Ok(perm.iter().map(|&p| p as usize).collect())
}

pub fn infer_transpose(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let perm = check_perm(cx.ints("perm")?, x.rank())?;
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let elem = match quant_axis(&x.elem) {
        // Result dimension i is operand dimension perm[i].
        Some(a) => with_quant_axis(
            &x.elem,
            perm.iter()
                .position(|&p| p == a)
                .expect("perm is a permutation"),
        ),
        None => x.elem.clone(),
    };
    Ok(vec![TensorType::new(shape, elem)])
}

pub fn eval_transpose(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let perm = check_perm(cx.ints("perm")?, x.shape().len())?;
    let ty = cx.result_type().clone();
    let st = strides(x.shape());
    let out_shape = ty.shape.clone();
    let n = ty.num_elements();
    Ok(vec![x.select(
        ty,
        (0..n).map(|f| {
            let idx = unravel(f, &out_shape);
            idx.iter().zip(&perm).map(|(&i, &p)| i * st[p]).sum()
        }),
    )])
}

// ---- concat ----

pub fn infer_concat(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let first = &cx.operands[0];
    if first.rank() == 0 {
        return Err("operands must have rank at least 1".into());
    }
    let axis = normalize_axis(cx.int("axis")?, first.rank())?;
    if quant_axis(&first.elem) == Some(axis) {
        reject_per_axis(&first.elem, "concat joins along the quantized axis")?;
    }
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (i, t) in cx.operands.iter().enumerate() {
        if t.elem != first.elem {
            return Err(format!(
                "operand {i} has element type {}, expected {}",
                t.elem, first.elem
            ));
        }
        let same = t.rank() == first.rank()
            && (0..t.rank()).all(|d| d == axis || t.shape[d] == first.shape[d]);
        if !same {
            return Err(format!(
                "operand {i} has shape {:?}, which differs from {:?} outside axis {axis}",
                t.shape, first.shape
            ));
        }
        shape[axis] += t.shape[axis];
    }
    Ok(vec![first.with_shape(shape)])
}

pub fn eval_concat(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let ty = cx.result_type().clone();
    let axis = normalize_axis(cx.int("axis")?, ty.rank())?;
    let outer: usize = ty.shape[..axis].iter().product();
    let inner: usize = ty.shape[axis + 1..].iter().product();
    // (input, flat index) for each output element, in order.
    let mut picks = Vec::with_capacity(ty.num_elements());
    for o in 0..outer {
        for (k, t) in cx.inputs.iter().enumerate() {
            let chunk = t.shape()[axis] * inner;
            picks.extend((0..chunk).map(|j| (k, o * chunk + j)));
        }
    }
    let data = match &cx.inputs[0].data {
        Data::F(_) => Data::F(
            picks
                .iter()
                .map(|&(k, j)| cx.inputs[k].get_f64(j))
                .collect(),
        ),
        Data::I(_) => Data::I(
            picks
                .iter()
                .map(|&(k, j)| cx.inputs[k].get_i64(j))
                .collect(),
        ),
    };
    Ok(vec![Tensor { ty, data }])
}

// ---- slice ----

/// Per dimension of the operand: (first index, step, count) of the result.
fn slice_plan(
    cx_starts: &[i64],
    cx_ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
    shape: &[usize],
) -> Result<Vec<(i64, i64, usize)>, String> {
    let n = cx_starts.len();
    if cx_ends.len() != n {
        return Err(format!(
            "starts has {n} entries but ends has {}",
            cx_ends.len()
        ));
    }
    if let Some(a) = axes.filter(|a| a.len() != n) {
        return Err(format!("starts has {n} entries but axes has {}", a.len()));
    }
    if let Some(s) = steps.filter(|s| s.len() != n) {
        return Err(format!("starts has {n} entries but steps has {}", s.len()));
    }
    let mut plan: Vec<(i64, i64, usize)> = shape.iter().map(|&d| (0, 1, d)).collect();
    let mut seen = vec![false; shape.len()];
    for i in 0..n {
        let axis = match axes {
            Some(a) => normalize_axis(a[i], shape.len())?,
            None if i < shape.len() => i,
            None => return Err(format!("{n} starts given for rank {}", shape.len())),
        };
        if std::mem::replace(&mut seen[axis], true) {
            return Err(format!("axis {axis} is sliced twice"));
        }
        let step = steps.map_or(1, |s| s[i]);
        if step == 0 {
            return Err("steps must be non-zero".into());
        }
        let d = shape[axis] as i64;
        // Negative indexes count from the end; then clamp as ONNX does, with
        // different ranges for forward and backward steps. i64 sentinels
        // (INT64_MIN, INT64_MAX) cannot overflow: d is added only to negatives.
        let norm = |v: i64| if v < 0 { v + d } else { v };
        let (start, end) = (norm(cx_starts[i]), norm(cx_ends[i]));
        let (start, end) = if step > 0 {
            (start.clamp(0, d), end.clamp(0, d))
        } else if d == 0 {
            // Nothing to walk back over (and `d - 1` is no upper bound).
            (0, 0)
        } else {
            (start.clamp(0, d - 1), end.clamp(-1, d - 1))
        };
        let span = if step > 0 { end - start } else { start - end };
        let count = if span > 0 {
            (span as u64).div_ceil(step.unsigned_abs()) as usize
        } else {
            0
        };
        plan[axis] = (start, step, count);
    }
    Ok(plan)
}

/// Per axis `(start, step, length)` of a slice from its completed attributes
/// (`axes` and `steps` may be absent); backends lower slices with it.
pub fn slice_plan_of(attrs: &Attrs, shape: &[usize]) -> Result<Vec<(i64, i64, usize)>, String> {
    let ints = |name: &str| match attrs.get(name) {
        Some(Attr::Ints(v)) => Ok(Some(v.as_slice())),
        None => Ok(None),
        Some(a) => Err(format!(
            "attribute `{name}` must be an integer list, found {a}"
        )),
    };
    let starts = ints("starts")?.ok_or("missing attribute `starts`")?;
    let ends = ints("ends")?.ok_or("missing attribute `ends`")?;
    slice_plan(starts, ends, ints("axes")?, ints("steps")?, shape)
}

pub fn infer_slice(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let plan = slice_plan_of(cx.attrs, &x.shape)?;
    if let Some(a) = quant_axis(&x.elem)
        && plan[a] != (0, 1, x.shape[a])
    {
        reject_per_axis(&x.elem, "the slice changes the quantized axis")?;
    }
    Ok(vec![
        x.with_shape(plan.iter().map(|p| p.2).collect::<Vec<_>>()),
    ])
}

pub fn eval_slice(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let plan = slice_plan_of(cx.attrs, x.shape())?;
    let ty = cx.result_type().clone();
    let st = strides(x.shape());
    let out_shape = ty.shape.clone();
    let n = ty.num_elements();
    Ok(vec![x.select(
        ty,
        (0..n).map(|f| {
            let idx = unravel(f, &out_shape);
            idx.iter()
                .zip(&plan)
                .zip(&st)
                .map(|((&i, &(start, step, _)), &s)| (start + i as i64 * step) as usize * s)
                .sum()
        }),
    )])
}

// ---- pad ----

#[derive(Copy, Clone, PartialEq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

fn pad_mode(s: &str) -> Result<PadMode, String> {
    Ok(match s {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        _ => {
            return Err(format!(
                "mode must be \"constant\", \"reflect\", \"edge\" or \"wrap\", found {s:?}"
            ));
        }
    })
}

pub fn infer_pad(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let r = x.rank();
    let pads = cx.ints("pads")?;
    if pads.len() != 2 * r {
        return Err(format!(
            "pads must have {} entries (2 x rank), found {}",
            2 * r,
            pads.len()
        ));
    }
    let mode = pad_mode(cx.str("mode")?)?;
    // Bounded like shapes, so the sums below (and eval's index arithmetic)
    // cannot overflow.
    let limit = crate::types::MAX_ELEMENTS as i64;
    if let Some(bad) = pads.iter().find(|p| p.unsigned_abs() > limit as u64) {
        return Err(format!("pads must be within ±2^40, found {bad}"));
    }
    let mut shape = Vec::with_capacity(r);
    for d in 0..r {
        let (b, e) = (pads[d], pads[r + d]);
        let n = x.shape[d] as i64 + b + e;
        if n < 0 {
            return Err(format!(
                "pads {b} and {e} crop more than the {} elements of dimension {d}",
                x.shape[d]
            ));
        }
        let kept = x.shape[d] as i64 + b.min(0) + e.min(0);
        if mode != PadMode::Constant && kept <= 0 && (b > 0 || e > 0) {
            return Err(format!(
                "dimension {d} has no elements left to pad from in mode {:?}",
                cx.str("mode")?
            ));
        }
        if quant_axis(&x.elem) == Some(d) && (b != 0 || e != 0) {
            reject_per_axis(&x.elem, "pads change the quantized axis")?;
        }
        shape.push(n as usize);
    }
    Ok(vec![x.with_shape(shape)])
}

/// [`pad_source`] for a mode named as in the `mode` attribute: where
/// padded position `o` of a dimension of length `len` (pads `begin`,
/// `end`) reads, or `None` for the constant fill. The lowering of
/// `reflect`, `edge` and `wrap` pads gathers with these indices.
pub fn pad_source_index(o: usize, begin: i64, end: i64, len: usize, mode: &str) -> Result<Option<usize>, String> {
    Ok(pad_source(o, begin, end, len, pad_mode(mode)?))
}

/// The source index along one dimension of length `len` for padded
/// position `o`, or `None` for the constant fill. Negative pads crop first;
/// `reflect`, `edge` and `wrap` then read from the kept range `[lo, hi)`.
fn pad_source(o: usize, begin: i64, end: i64, len: usize, mode: PadMode) -> Option<usize> {
    let j = o as i64 - begin;
    let (lo, hi) = (-(begin.min(0)), len as i64 + end.min(0));
    if (lo..hi).contains(&j) {
        return Some(j as usize);
    }
    let n = hi - lo;
    let r = j - lo;
    let r = match mode {
        PadMode::Constant => return None,
        PadMode::Edge => r.clamp(0, n - 1),
        PadMode::Wrap => r.rem_euclid(n),
        // Mirror about the first and last elements (period 2(n - 1)), as
        // numpy does when the pad exceeds the dimension.
        PadMode::Reflect if n == 1 => 0,
        PadMode::Reflect => {
            let m = r.rem_euclid(2 * (n - 1));
            if m < n { m } else { 2 * (n - 1) - m }
        }
    };
    Some((lo + r) as usize)
}

pub fn eval_pad(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let pads = cx.ints("pads")?;
    let mode = pad_mode(cx.str("mode")?)?;
    let ty = cx.result_type().clone();
    let r = ty.rank();
    let st = strides(x.shape());
    let srcs: Vec<Option<usize>> = (0..ty.num_elements())
        .map(|f| {
            let idx = unravel(f, &ty.shape);
            (0..r).try_fold(0, |acc, d| {
                Some(acc + pad_source(idx[d], pads[d], pads[r + d], x.shape()[d], mode)? * st[d])
            })
        })
        .collect();
    // The fill value in the element type (for quantized types: in storage units).
    let fill = Tensor::from_f64(ty.with_shape(vec![]), vec![cx.float("value")?]);
    let data = match (&x.data, &fill.data) {
        (Data::F(v), Data::F(f)) => {
            Data::F(srcs.iter().map(|s| s.map_or(f[0], |i| v[i])).collect())
        }
        (Data::I(v), Data::I(f)) => {
            Data::I(srcs.iter().map(|s| s.map_or(f[0], |i| v[i])).collect())
        }
        _ => {
            return Err(
                "internal error: operand storage does not match its type (please report)".into(),
            );
        }
    };
    Ok(vec![Tensor { ty, data }])
}

// ---- gather ----

pub fn infer_gather(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (data, idx) = (&cx.operands[0], &cx.operands[1]);
    if data.rank() == 0 {
        return Err("data rank must be at least 1, found 0".into());
    }
    if !matches!(idx.elem, ElemType::Scalar(Scalar::I32 | Scalar::I64)) {
        return Err(format!("indices must be i32 or i64, found {}", idx.elem));
    }
    let axis = normalize_axis(cx.int("axis")?, data.rank())?;
    let mut shape = data.shape[..axis].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&data.shape[axis + 1..]);
    let elem = match quant_axis(&data.elem) {
        Some(a) if a == axis => {
            return Err(per_axis_error(
                &data.elem,
                "gather indexes the quantized axis",
            ));
        }
        Some(a) if a > axis => with_quant_axis(&data.elem, a + idx.rank() - 1),
        _ => data.elem.clone(),
    };
    Ok(vec![TensorType::new(shape, elem)])
}

pub fn eval_gather(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (data, idx) = (cx.inputs[0], cx.inputs[1]);
    let axis = normalize_axis(cx.int("axis")?, data.shape().len())?;
    let d = data.shape()[axis];
    let outer: usize = data.shape()[..axis].iter().product();
    let inner: usize = data.shape()[axis + 1..].iter().product();
    let indices = idx
        .to_i64()
        .into_iter()
        .map(|v| {
            let w = if v < 0 { v + d as i64 } else { v };
            if (0..d as i64).contains(&w) {
                Ok(w as usize)
            } else {
                Err(format!(
                    "index {v} is out of range for dimension {axis} of size {d}"
                ))
            }
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let ty = cx.result_type().clone();
    let mut srcs = Vec::with_capacity(ty.num_elements());
    for o in 0..outer {
        for &i in &indices {
            srcs.extend((0..inner).map(|j| (o * d + i) * inner + j));
        }
    }
    Ok(vec![data.select(ty, srcs.into_iter())])
}

// ---- expand ----

pub fn infer_expand(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let target = cx.ints("shape")?;
    if let Some(bad) = target.iter().find(|&&d| d < 0) {
        return Err(format!(
            "shape dimensions must be non-negative, found {bad}"
        ));
    }
    let target: Vec<usize> = target.iter().map(|&d| d as usize).collect();
    crate::types::checked_elements(&target)?;
    let shape = broadcast_shapes(&x.shape, &target).map_err(|_| {
        format!(
            "operand shape {:?} and shape {target:?} do not broadcast",
            x.shape
        )
    })?;
    let elem = match quant_axis(&x.elem) {
        Some(a) => {
            let moved = a + shape.len() - x.rank();
            if shape[moved] != x.shape[a] {
                reject_per_axis(&x.elem, "expand broadcasts the quantized axis")?;
            }
            with_quant_axis(&x.elem, moved)
        }
        None => x.elem.clone(),
    };
    Ok(vec![TensorType::new(shape, elem)])
}

pub fn eval_expand(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let ty = cx.result_type().clone();
    let map = broadcast_index_map(x.shape(), &ty.shape);
    Ok(vec![x.select(ty, map.into_iter())])
}

#[cfg(test)]
mod tests;
