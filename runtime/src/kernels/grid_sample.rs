//! ONNX `GridSample` on NCHW f32 (`Step::GridSample`): nearest, bilinear
//! and bicubic (Keys, `a = -0.75`) sampling with zeros, border or
//! reflection padding, as `aoc_ir`'s `core.grid_sample` (which follows
//! `onnx/reference/ops/op_grid_sample.py`) defines it, computed in f32
//! as ONNX Runtime does.
//!
//! Per output pixel the taps of each axis (up to 4 indices and weights;
//! an index outside the image under `zeros` reads 0) are found once and
//! applied to every channel.
//!
//! Invariants: no panic on bad arguments (they return [`KernelError`]);
//! slices may be longer than needed; results do not depend on the thread
//! count (each output row of a plane is computed by one thread).

use rayon::prelude::*;

use super::KernelError;
use super::conv::{check_len, kerr, product};
use crate::plan::{GridMode, GridPadding};

/// Up to four taps of one axis: indices (`usize::MAX` reads zero) and
/// weights.
#[derive(Clone, Copy)]
struct Taps {
    idx: [usize; 4],
    w: [f32; 4],
    len: usize,
}

fn reflect(x: f32, lo: f32, hi: f32) -> f32 {
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

fn cubic(t: f32) -> [f32; 4] {
    let a = -0.75f32;
    let w = |x: f32| {
        let x = x.abs();
        if x <= 1.0 { ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0 } else { ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a }
    };
    [w(t + 1.0), w(t), w(1.0 - t), w(2.0 - t)]
}

fn taps(mode: GridMode, padding: GridPadding, align: bool, g: f32, len: usize) -> Taps {
    let lenf = len as f32;
    let mut x = if align { (g + 1.0) / 2.0 * (lenf - 1.0) } else { ((g + 1.0) * lenf - 1.0) / 2.0 };
    let (lo, hi) = if align { (0.0, lenf - 1.0) } else { (-0.5, lenf - 0.5) };
    if mode == GridMode::Nearest {
        x = x.round_ties_even();
    }
    // Cubic pads its taps only (as `core.grid_sample` says).
    if mode != GridMode::Cubic && (x < lo || x > hi) {
        match padding {
            GridPadding::Border => x = x.clamp(0.0, lenf - 1.0),
            GridPadding::Reflection => x = reflect(x, lo, hi),
            GridPadding::Zeros => {}
        }
    }
    let last = lenf - 1.0;
    let pixel = |i: f32| -> usize {
        match padding {
            GridPadding::Zeros if i >= 0.0 && i <= last => i as usize,
            GridPadding::Zeros => usize::MAX,
            GridPadding::Border => i.clamp(0.0, last) as usize,
            GridPadding::Reflection => reflect(i, lo, hi).trunc().clamp(0.0, last) as usize,
        }
    };
    let mut t = Taps { idx: [usize::MAX; 4], w: [0.0; 4], len: 0 };
    match mode {
        GridMode::Nearest => {
            t.idx[0] = pixel(x.trunc());
            t.w[0] = 1.0;
            t.len = 1;
        }
        GridMode::Linear => {
            let x0 = x.floor();
            let f = x - x0;
            t.idx[..2].copy_from_slice(&[pixel(x0), pixel(x0 + 1.0)]);
            t.w[..2].copy_from_slice(&[1.0 - f, f]);
            t.len = 2;
        }
        GridMode::Cubic => {
            let x0 = x.floor();
            t.w = cubic(x - x0);
            for k in 0..4 {
                t.idx[k] = pixel(x0 + k as f32 - 1.0);
            }
            t.len = 4;
        }
    }
    t
}

/// Samples `x` (`n × c × h × w`) at `grid` (`n × oh × ow × 2`) into `y`
/// (`n × c × oh × ow`).
#[allow(clippy::too_many_arguments)]
pub fn grid_sample(
    mode: GridMode,
    padding: GridPadding,
    align: bool,
    dims: [usize; 6],
    x: &[f32],
    grid: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let [n, c, h, w, oh, ow] = dims;
    let xlen = product("input", &[n, c, h, w])?;
    let glen = product("grid", &[n, oh, ow, 2])?;
    let ylen = product("output", &[n, c, oh, ow])?;
    check_len("input", xlen, x.len())?;
    check_len("grid", glen, grid.len())?;
    check_len("output", ylen, y.len())?;
    if ylen == 0 {
        return Ok(());
    }
    if h == 0 || w == 0 {
        return Err(kerr(format!("grid_sample of an empty image ({h}x{w})")));
    }
    y[..ylen].par_chunks_mut(ow).enumerate().for_each(|(r, yrow)| {
        let (plane, oy) = (r / oh, r % oh);
        let b = plane / c;
        let src = &x[plane * h * w..][..h * w];
        for (ox, out) in yrow.iter_mut().enumerate() {
            let gi = ((b * oh + oy) * ow + ox) * 2;
            let tx = taps(mode, padding, align, grid[gi], w);
            let ty = taps(mode, padding, align, grid[gi + 1], h);
            let mut acc = 0.0f32;
            for j in 0..ty.len {
                if ty.idx[j] == usize::MAX {
                    continue;
                }
                let row = &src[ty.idx[j] * w..][..w];
                let mut s = 0.0f32;
                for i in 0..tx.len {
                    if tx.idx[i] != usize::MAX {
                        s += tx.w[i] * row[tx.idx[i]];
                    }
                }
                acc += ty.w[j] * s;
            }
            *out = acc;
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_center_and_zeros_outside() {
        // 2×2 image; the grid's (0, 0) is the center: the mean.
        let x = [1.0, 2.0, 3.0, 4.0];
        let grid = [0.0, 0.0, -3.0, -3.0];
        let mut y = [0.0; 2];
        grid_sample(GridMode::Linear, GridPadding::Zeros, false, [1, 1, 2, 2, 1, 2], &x, &grid, &mut y).unwrap();
        assert_eq!(y, [2.5, 0.0]);
        grid_sample(GridMode::Linear, GridPadding::Border, false, [1, 1, 2, 2, 1, 2], &x, &grid, &mut y).unwrap();
        assert_eq!(y, [2.5, 1.0]);
    }

    #[test]
    fn short_buffers_are_errors() {
        let mut y = [0.0; 2];
        assert!(grid_sample(GridMode::Cubic, GridPadding::Reflection, true, [1, 1, 2, 2, 1, 2], &[0.0; 3], &[0.0; 4], &mut y).is_err());
    }
}
