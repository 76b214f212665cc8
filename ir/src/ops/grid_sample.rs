//! `core.grid_sample`: ONNX `GridSample` (opsets 16 and 20) on 4-D and
//! 5-D inputs: `x` is `N × C × H × W` (or `N × C × D × H × W`), `grid` is
//! `N × Ho × Wo × 2` (or `N × Do × Ho × Wo × 3`) holding normalized
//! `(x, y[, z])` sampling positions in `[-1, 1]`, the result is
//! `N × C × Ho × Wo` (or `N × C × Do × Ho × Wo`). Each axis is sampled
//! alike; volumetric sampling takes the product of three axes' taps.
//!
//! It follows the ONNX reference evaluator
//! (`onnx/reference/ops/op_grid_sample.py`) step for step:
//! - a position maps to pixel coordinates by `align_corners`
//!   (`(g + 1) / 2 · (len - 1)`, else `((g + 1) · len - 1) / 2`);
//!   `nearest` rounds it half to even;
//! - a coordinate outside the border (`[0, len - 1]` with
//!   `align_corners`, else `[-0.5, len - 0.5]`) is clamped to
//!   `[0, len - 1]` (`border`) or reflected into the border
//!   (`reflection`); `zeros` leaves it; `cubic` leaves it too and pads
//!   only its taps, as ONNX Runtime and PyTorch do (the reference
//!   evaluator clamps a `border` coordinate first, which moves the taps
//!   near the edge: ONNX Runtime is the oracle users compare with);
//! - `linear` takes the 2 × 2 pixels around it with weights `1 - t`, `t`;
//!   `cubic` the 4 × 4 with Keys' kernel (`a = -0.75`); each pixel index
//!   outside the image reads 0 (`zeros`), the clamped index (`border`) or
//!   the reflected one (`reflection`).
//!
//! The kernels (runtime `kernels/grid_sample.rs`, PTX
//! `kernels/index/grid_sample.rs`) compute the same in f32.
//!
//! Invariant: the hooks are total: any attribute strings and shapes give
//! a result or an error, never a panic (a one-pixel axis has an empty
//! reflection range; it reflects to its one pixel).

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// Interpolation.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// What a coordinate outside the image reads.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// The attributes, decoded (the lowering reads them too).
pub fn params(mode: &str, padding: &str) -> Result<(Mode, Padding), String> {
    let mode = match mode {
        "nearest" => Mode::Nearest,
        "linear" => Mode::Linear,
        "cubic" => Mode::Cubic,
        m => return Err(format!("mode must be `nearest`, `linear` or `cubic`, found `{m}`")),
    };
    let padding = match padding {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        p => return Err(format!("padding_mode must be `zeros`, `border` or `reflection`, found `{p}`")),
    };
    Ok((mode, padding))
}

pub fn infer_grid_sample(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, g) = (&cx.operands[0], &cx.operands[1]);
    params(cx.str("mode")?, cx.str("padding_mode")?)?;
    cx.bool("align_corners")?;
    if !x.elem.is_float() {
        return Err(format!("x must be a float tensor, found {}", x.elem));
    }
    if !g.elem.is_float() {
        return Err(format!("grid must be a float tensor, found {}", g.elem));
    }
    let r = x.rank();
    if r != 4 && r != 5 {
        return Err(format!("x must be N×C×H×W or N×C×D×H×W (rank 4 or 5), found rank {r}"));
    }
    if g.rank() != r || g.shape[r - 1] != r - 2 || g.shape[0] != x.shape[0] {
        return Err(format!(
            "grid must be N×{}×{} with N = {} (x's batch), found {:?}",
            if r == 4 { "Ho×Wo" } else { "Do×Ho×Wo" },
            r - 2,
            x.shape[0],
            g.shape
        ));
    }
    if x.shape[2..].contains(&0) {
        return Err(format!("x's spatial dimensions must not be empty, found {:?}", x.shape));
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend(&g.shape[1..r - 1]);
    Ok(vec![x.with_shape(shape)])
}

/// The pixel coordinate of normalized position `g` on an axis of `len`.
pub fn denormalize(g: f64, len: usize, align_corners: bool) -> f64 {
    let len = len as f64;
    if align_corners { (g + 1.0) / 2.0 * (len - 1.0) } else { ((g + 1.0) * len - 1.0) / 2.0 }
}

/// `x` reflected into `[lo, hi]` (the reference's `_gs_reflect`).
pub fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if !(range > 0.0) || !x.is_finite() {
        return if x.is_finite() { lo } else { x };
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 { lo + r } else { hi - r }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 { hi - r } else { lo + r }
    } else {
        x
    }
}

/// Keys' cubic weights of the taps at `-1, 0, 1, 2` for offset `t`.
pub fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let w = |x: f64| {
        let x = x.abs();
        if x <= 1.0 {
            ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        } else {
            ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        }
    };
    [w(t + 1.0), w(t), w(1.0 - t), w(2.0 - t)]
}

/// One axis's sampling of a coordinate: taps (index or `None` for a zero)
/// and weights.
fn taps(mode: Mode, padding: Padding, align: bool, coord: f64, len: usize) -> Vec<(Option<usize>, f64)> {
    let (lo, hi) = if align { (0.0, len as f64 - 1.0) } else { (-0.5, len as f64 - 0.5) };
    let mut x = coord;
    if mode == Mode::Nearest {
        x = x.round_ties_even();
    }
    // Cubic pads each tap, not the coordinate (ONNX Runtime and PyTorch;
    // the reference evaluator clamps a `border` coordinate first, which
    // moves the taps; the two agree for `zeros` and `reflection`).
    if mode != Mode::Cubic && (x < lo || x > hi) {
        match padding {
            Padding::Border => x = x.clamp(0.0, len as f64 - 1.0),
            Padding::Reflection => x = reflect(x, lo, hi),
            Padding::Zeros => {}
        }
    }
    let pixel = |i: f64| -> Option<usize> {
        let last = len as f64 - 1.0;
        match padding {
            Padding::Zeros => (i >= 0.0 && i <= last).then_some(i as usize),
            Padding::Border => Some(i.clamp(0.0, last.max(0.0)) as usize),
            Padding::Reflection => Some(reflect(i, lo, hi).trunc().clamp(0.0, last.max(0.0)) as usize),
        }
    };
    match mode {
        Mode::Nearest => vec![(pixel(x.trunc()), 1.0)],
        Mode::Linear => {
            let x0 = x.floor();
            let t = x - x0;
            vec![(pixel(x0), 1.0 - t), (pixel(x0 + 1.0), t)]
        }
        Mode::Cubic => {
            let x0 = x.floor();
            let w = cubic_weights(x - x0);
            (0..4).map(|k| (pixel(x0 + k as f64 - 1.0), w[k])).collect()
        }
    }
}

pub fn eval_grid_sample(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (x, g) = (cx.inputs[0], cx.inputs[1]);
    let (mode, padding) = params(cx.str("mode")?, cx.str("padding_mode")?)?;
    let align = cx.bool("align_corners")?;
    let ty = cx.result_types.first().ok_or("grid_sample: no result type")?.clone();
    let s = x.shape();
    // The spatial axes, depth first (1 and one tap for a 2-D image).
    let vol = s.len() == 5;
    let (n, c) = (s[0], s[1]);
    let (d, h, w) = if vol { (s[2], s[3], s[4]) } else { (1, s[2], s[3]) };
    let gs_ = g.shape();
    let (od, oh, ow) = if vol { (gs_[1], gs_[2], gs_[3]) } else { (1, gs_[1], gs_[2]) };
    let k = if vol { 3 } else { 2 };
    let (xs, gs) = (x.to_f64(), g.to_f64());
    let mut out = vec![0.0; ty.num_elements()];
    let opix = od * oh * ow;
    for b in 0..n {
        for p in 0..opix {
            let gi = (b * opix + p) * k;
            let tx = taps(mode, padding, align, denormalize(gs[gi], w, align), w);
            let ty_ = taps(mode, padding, align, denormalize(gs[gi + 1], h, align), h);
            let tz = if vol { taps(mode, padding, align, denormalize(gs[gi + 2], d, align), d) } else { vec![(Some(0), 1.0)] };
            for ch in 0..c {
                let vol_data = &xs[(b * c + ch) * d * h * w..][..d * h * w];
                let mut acc = 0.0;
                for &(zi, wz) in &tz {
                    let Some(zi) = zi else { continue };
                    let plane = &vol_data[zi * h * w..][..h * w];
                    let mut pl = 0.0;
                    for &(yi, wy) in &ty_ {
                        let Some(yi) = yi else { continue };
                        let mut row = 0.0;
                        for &(xi, wx) in &tx {
                            if let Some(xi) = xi {
                                row += wx * plane[yi * w + xi];
                            }
                        }
                        pl += wy * row;
                    }
                    acc += wz * pl;
                }
                out[(b * c + ch) * opix + p] = acc;
            }
        }
    }
    Ok(vec![Tensor::from_f64(ty, out)])
}
