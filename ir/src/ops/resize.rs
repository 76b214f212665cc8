//! `core.resize`: ONNX `Resize` (opset 19) on static sizes, without
//! antialiasing and `axes` (the importer expands `axes` and
//! `keep_aspect_ratio_policy` into full-rank `sizes` and `scales`).
//!
//! It follows the ONNX reference evaluator (`onnx/reference/ops/op_resize.py`)
//! step for step, because that is what "ONNX semantics" means in practice:
//! - interpolation is separable: dimensions are resized one after another,
//!   first to last, each in `f64`, and a dimension whose scale is 1 (within
//!   `1e-9`), whose size is unchanged and whose roi is [0, 1] is skipped;
//! - the scale of a dimension is `scales[d]` when `scales` is given (ONNX uses
//!   the given scales, not `sizes / input`, in the coordinate mapping) and
//!   `sizes[d] / input[d]` otherwise;
//! - each output index maps to an input coordinate by
//!   `coordinate_transformation_mode`, takes 2 (nearest, linear) or 4 (cubic)
//!   neighbours — clamped to the edge — and their kernel weights;
//! - `tf_crop_and_resize` gives `extrapolation_value` where the coordinate
//!   falls outside the input.
//!
//! Invariant: results stay in `f64` across dimensions and are rounded once,
//! at the end, to the element type (integers: round half to even, then saturate, as ONNX's
//! `saturate_cast`).

use crate::attr::Attr;
use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

#[derive(Copy, Clone, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Copy, Clone, PartialEq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Copy, Clone, PartialEq)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// Every attribute, parsed and checked against the operand's rank.
struct Params {
    sizes: Vec<usize>,
    scales: Option<Vec<f64>>,
    mode: Mode,
    coord: Coord,
    nearest: Nearest,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f64,
    roi: Option<Vec<f64>>,
}

fn floats_opt(attrs: &crate::attr::Attrs, name: &str) -> Result<Option<Vec<f64>>, String> {
    match attrs.get(name) {
        None => Ok(None),
        Some(Attr::Floats(v)) => Ok(Some(v.clone())),
        Some(a) => Err(format!(
            "attribute `{name}` must be a float list, found {a}"
        )),
    }
}

macro_rules! params_from {
    ($cx:expr, $shape:expr) => {{
        let shape: &[usize] = $shape;
        let r = shape.len();
        let sizes = $cx.ints("sizes")?;
        if sizes.len() != r {
            return Err(format!("sizes must have {r} entries (the operand's rank), found {}", sizes.len()));
        }
        if let Some(bad) = sizes.iter().find(|&&d| d < 0) {
            return Err(format!("sizes must be non-negative, found {bad}"));
        }
        let sizes: Vec<usize> = sizes.iter().map(|&d| d as usize).collect();
        for d in 0..r {
            if shape[d] == 0 && sizes[d] > 0 {
                return Err(format!("dimension {d} is empty and cannot be resized to {}", sizes[d]));
            }
        }
        let scales = floats_opt($cx.attrs, "scales")?;
        if let Some(s) = &scales {
            if s.len() != r {
                return Err(format!("scales must have {r} entries (the operand's rank), found {}", s.len()));
            }
            if let Some(bad) = s.iter().find(|&&x| !(x > 0.0 && x.is_finite())) {
                return Err(format!("scales must be positive, found {bad}"));
            }
        }
        let mode = match $cx.str("mode")? {
            "nearest" => Mode::Nearest,
            "linear" => Mode::Linear,
            "cubic" => Mode::Cubic,
            m => return Err(format!("mode must be \"nearest\", \"linear\" or \"cubic\", found {m:?}")),
        };
        let coord = match $cx.str("coordinate_transformation_mode")? {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            m => return Err(format!("unknown coordinate_transformation_mode {m:?}")),
        };
        let nearest = match $cx.str("nearest_mode")? {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            m => return Err(format!("nearest_mode must be \"round_prefer_floor\", \"round_prefer_ceil\", \"floor\" or \"ceil\", found {m:?}")),
        };
        let roi = floats_opt($cx.attrs, "roi")?;
        if let Some(roi) = &roi {
            if roi.len() != 2 * r {
                return Err(format!("roi must have {} entries (2 x rank), found {}", 2 * r, roi.len()));
            }
        }
        if coord == Coord::TfCropAndResize && roi.is_none() {
            return Err("coordinate_transformation_mode \"tf_crop_and_resize\" needs `roi`".into());
        }
        Params {
            sizes,
            scales,
            mode,
            coord,
            nearest,
            cubic_a: $cx.float("cubic_coeff_a")?,
            exclude_outside: $cx.bool("exclude_outside")?,
            extrapolation: $cx.float("extrapolation_value")?,
            roi,
        }
    }};
}

pub fn infer_resize(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    let per_tensor = x
        .elem
        .quant()
        .is_some_and(|q| matches!(q.params, crate::types::QuantParams::PerTensor { .. }));
    if !(x.elem.is_float() || x.elem.is_int() || per_tensor) {
        return Err(format!(
            "operand must have a float, integer or per-tensor quantized element type, found {}",
            x.elem
        ));
    }
    let p = params_from!(cx, &x.shape);
    // Nearest resizing picks stored values, which commutes with the
    // dequantize; any other mode computes new values (dequantize first).
    if per_tensor && (p.mode != Mode::Nearest || p.coord == Coord::TfCropAndResize) {
        return Err(format!(
            "a quantized operand ({}) takes only `nearest` resizing without `tf_crop_and_resize`; dequantize it first",
            x.elem
        ));
    }
    Ok(vec![x.with_shape(p.sizes)])
}

/// `math.isclose` with its default tolerances.
fn isclose(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The input coordinate of output index `y`, or `None` where
/// `tf_crop_and_resize` extrapolates.
fn source_coord(
    p: &Params,
    y: f64,
    scale: f64,
    in_w: usize,
    out_w: usize,
    roi: (f64, f64),
) -> Option<f64> {
    let in_f = in_w as f64;
    // The reference compares the real-valued output width `scale * in`.
    let out_f = scale * in_f;
    Some(match p.coord {
        Coord::AlignCorners if out_f == 1.0 => 0.0,
        Coord::AlignCorners => y * (in_f - 1.0) / (out_f - 1.0),
        Coord::Asymmetric => y / scale,
        Coord::TfCropAndResize => {
            let x = if out_f == 1.0 {
                (roi.1 - roi.0) * (in_f - 1.0) / 2.0
            } else {
                y * (roi.1 - roi.0) * (in_f - 1.0) / (out_f - 1.0)
            } + roi.0 * (in_f - 1.0);
            if x < 0.0 || x > in_f - 1.0 {
                return None;
            }
            x
        }
        Coord::PytorchHalfPixel if out_f == 1.0 => -0.5,
        Coord::PytorchHalfPixel | Coord::HalfPixel => (y + 0.5) / scale - 0.5,
        Coord::HalfPixelSymmetric => {
            let adjustment = out_w as f64 / out_f;
            let offset = in_f / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
    })
}

/// Kernel weights for the neighbours of a coordinate whose distance past
/// its left neighbour is `ratio`, in (0, 1] (an exact integer coordinate
/// counts as ratio 1 from the pixel before it).
fn coeffs(p: &Params, ratio: f64) -> Vec<f64> {
    match p.mode {
        Mode::Nearest => {
            let right = if ratio == 1.0 {
                true
            } else {
                match p.nearest {
                    Nearest::RoundPreferFloor => ratio > 0.5,
                    Nearest::RoundPreferCeil => ratio >= 0.5,
                    Nearest::Floor => false,
                    Nearest::Ceil => true,
                }
            };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic => {
            let a = p.cubic_a;
            // Keys' kernel at distances 1 + r, r, 1 - r, 2 - r.
            let far = |t: f64| ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
            let near = |t: f64| ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
            vec![
                far(ratio + 1.0),
                near(ratio),
                near(1.0 - ratio),
                far(2.0 - ratio),
            ]
        }
    }
}

/// Resizes dimension `axis` of `data` (shape `shape`) to `out_w`.
fn resize_axis(
    p: &Params,
    data: &[f64],
    shape: &[usize],
    axis: usize,
    scale: f64,
    out_w: usize,
    roi: (f64, f64),
) -> Vec<f64> {
    let in_w = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    // Per output index: (input index, weight) pairs, or the extrapolation.
    let taps: Vec<Option<Vec<(usize, f64)>>> = (0..out_w)
        .map(|y| {
            let x = source_coord(p, y as f64, scale, in_w, out_w, roi)?;
            let xi = x.floor();
            let ratio = if x == xi { 1.0 } else { x - xi };
            let mut c = coeffs(p, ratio);
            let n = c.len() as i64;
            // The n neighbours nearest to x, ties to the left: the window
            // starts n/2 before floor(x) when x is an integer, else n/2 - 1.
            let pad = (n + 1) / 2;
            let xp = x + pad as f64;
            let fp = xp.floor();
            let start = fp as i64 + if xp == fp { -(n / 2) } else { -(n / 2) + 1 } - pad;
            let idx: Vec<i64> = (0..n).map(|k| start + k).collect();
            if p.exclude_outside {
                for (ck, &i) in c.iter_mut().zip(&idx) {
                    if i < 0 || i >= in_w as i64 {
                        *ck = 0.0;
                    }
                }
                let sum: f64 = c.iter().sum();
                let sum = if sum == 0.0 { 1.0 } else { sum };
                c.iter_mut().for_each(|ck| *ck /= sum);
            }
            Some(
                idx.iter()
                    .zip(c)
                    .map(|(&i, ck)| (i.clamp(0, in_w as i64 - 1) as usize, ck))
                    .collect(),
            )
        })
        .collect();
    let mut out = Vec::with_capacity(outer * out_w * inner);
    for o in 0..outer {
        for t in &taps {
            for j in 0..inner {
                out.push(match t {
                    None => p.extrapolation,
                    Some(t) => t
                        .iter()
                        .map(|&(i, ck)| ck * data[(o * in_w + i) * inner + j])
                        .sum(),
                });
            }
        }
    }
    out
}

pub fn eval_resize(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let p = params_from!(cx, x.shape());
    let ty = cx.result_type().clone();
    if ty.num_elements() == 0 {
        // Nothing to compute; resizing the other dimensions first could
        // build taps for a huge size that meets an empty one.
        return Ok(vec![Tensor::from_f64(ty, vec![])]);
    }
    let r = x.shape().len();
    let mut shape = x.shape().to_vec();
    let mut data = x.to_f64();
    for axis in 0..r {
        let scale = match &p.scales {
            Some(s) => s[axis],
            None => p.sizes[axis] as f64 / shape[axis] as f64,
        };
        let roi = p
            .roi
            .as_ref()
            .map_or((0.0, 1.0), |roi| (roi[axis], roi[axis + r]));
        let identity = isclose(scale, 1.0)
            && p.sizes[axis] == shape[axis]
            && roi.0 == 0.0
            && isclose(roi.1, 1.0);
        if identity || shape[axis] == 0 {
            // (An empty input dimension stays empty: infer allows it only then.)
            continue;
        }
        data = resize_axis(&p, &data, &shape, axis, scale, p.sizes[axis], roi);
        shape[axis] = p.sizes[axis];
    }
    let s = ty.elem.storage();
    let out = match s.int_range() {
        // ONNX's saturate_cast: round half to even, then clamp.
        Some((lo, hi)) => Tensor::from_i64(
            ty,
            data.iter()
                .map(|v| {
                    if v.is_nan() {
                        0
                    } else {
                        v.round_ties_even().clamp(lo as f64, hi as f64) as i64
                    }
                })
                .collect(),
        ),
        None => Tensor::from_f64(ty, data),
    };
    Ok(vec![out])
}

#[cfg(test)]
mod tests;
