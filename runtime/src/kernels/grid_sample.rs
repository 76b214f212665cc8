//! ONNX `GridSample` on NCHW and NCDHW f32 (`Step::GridSample`): nearest,
//! (bi/tri)linear and (bi/tri)cubic (Keys, `a = -0.75`) sampling with zeros, border or
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

/// Samples `x` (`n × c × h × w`, or `n × c × d × h × w` when
/// `volumetric`) at `grid` (`n × oh × ow × 2`, or `n × od × oh × ow × 3`)
/// into `y` (`n × c × oh × ow`, or `n × c × od × oh × ow`); `dims` is
/// `[n, c, d, h, w, od, oh, ow]` (`d`, `od` 1 for a 2-D image).
#[allow(clippy::too_many_arguments)]
pub fn grid_sample(
    mode: GridMode,
    padding: GridPadding,
    align: bool,
    volumetric: bool,
    dims: [usize; 8],
    x: &[f32],
    grid: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let [n, c, d, h, w, od, oh, ow] = dims;
    let k = if volumetric { 3 } else { 2 };
    if !volumetric && (d != 1 || od != 1) {
        return Err(kerr(format!("grid_sample: a 2-D image with depth {d} -> {od}")));
    }
    let xlen = product("input", &[n, c, d, h, w])?;
    let glen = product("grid", &[n, od, oh, ow, k])?;
    let ylen = product("output", &[n, c, od, oh, ow])?;
    check_len("input", xlen, x.len())?;
    check_len("grid", glen, grid.len())?;
    check_len("output", ylen, y.len())?;
    if ylen == 0 {
        return Ok(());
    }
    if d == 0 || h == 0 || w == 0 {
        return Err(kerr(format!("grid_sample of an empty image ({d}x{h}x{w})")));
    }
    let one = Taps { idx: [0, usize::MAX, usize::MAX, usize::MAX], w: [1.0, 0.0, 0.0, 0.0], len: 1 };
    y[..ylen].par_chunks_mut(ow).enumerate().for_each(|(r, yrow)| {
        // r = (plane · od + oz) · oh + oy
        let (plane, oz, oy) = (r / (od * oh), r / oh % od, r % oh);
        let b = plane / c;
        let src = &x[plane * d * h * w..][..d * h * w];
        for (ox, out) in yrow.iter_mut().enumerate() {
            let gi = (((b * od + oz) * oh + oy) * ow + ox) * k;
            let tx = taps(mode, padding, align, grid[gi], w);
            let ty = taps(mode, padding, align, grid[gi + 1], h);
            let tz = if volumetric { taps(mode, padding, align, grid[gi + 2], d) } else { one };
            let mut acc = 0.0f32;
            for l in 0..tz.len {
                if tz.idx[l] == usize::MAX {
                    continue;
                }
                let slice = &src[tz.idx[l] * h * w..][..h * w];
                let mut pl = 0.0f32;
                for j in 0..ty.len {
                    if ty.idx[j] == usize::MAX {
                        continue;
                    }
                    let row = &slice[ty.idx[j] * w..][..w];
                    let mut s = 0.0f32;
                    for i in 0..tx.len {
                        if tx.idx[i] != usize::MAX {
                            s += tx.w[i] * row[tx.idx[i]];
                        }
                    }
                    pl += ty.w[j] * s;
                }
                acc += tz.w[l] * pl;
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
        grid_sample(GridMode::Linear, GridPadding::Zeros, false, false, [1, 1, 1, 2, 2, 1, 1, 2], &x, &grid, &mut y).unwrap();
        assert_eq!(y, [2.5, 0.0]);
        grid_sample(GridMode::Linear, GridPadding::Border, false, false, [1, 1, 1, 2, 2, 1, 1, 2], &x, &grid, &mut y).unwrap();
        assert_eq!(y, [2.5, 1.0]);
    }

    #[test]
    fn short_buffers_are_errors() {
        let mut y = [0.0; 2];
        assert!(grid_sample(GridMode::Cubic, GridPadding::Reflection, true, false, [1, 1, 1, 2, 2, 1, 1, 2], &[0.0; 3], &[0.0; 4], &mut y).is_err());
    }
}
