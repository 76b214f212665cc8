//! NHWC pooling and middle-axis reductions of the CPU executor.
//!
//! [`pool2d`] follows ONNX Runtime and PyTorch (as the IR interpreter does):
//! window `o` covers the taps `o·stride + t·dilation − pad_begin`; only taps
//! inside the input are read (padding never wins a max); an average divides
//! by the taps inside the input, or with padding counted by the taps inside
//! the explicitly padded extent `[−pad_begin, in + pad_end)` — cells that
//! `ceil_mode` adds beyond it are never counted. (The ONNX Python reference
//! shifts its windows when `ceil_mode` needs two or more extra cells; the
//! runtimes and the IR interpreter do not.) Max propagates NaN.
//!
//! [`reduce_middle`] reduces `outer × len × inner` over the middle axis.
//!
//! Invariants: no panic on bad arguments (they return [`KernelError`]);
//! slices may be longer than needed; each output element is computed by one
//! thread in a fixed order, so results do not depend on the thread count.

use rayon::prelude::*;

use super::KernelError;
use super::conv::{Dims, check_len, conv_out_size, kerr, multiversion, product, tap_range};
use crate::plan::{ConvGeom, PoolKind, ReduceKind};

/// The output size of a pool along one dimension: the convolution formula,
/// rounded up with `ceil_mode`, where a last window that would start past
/// the input and the left padding is dropped.
fn pool_out_size(
    input: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil_mode: bool,
) -> Option<usize> {
    let floor = conv_out_size(input, k, stride, dilation, pad_begin, pad_end)?;
    if !ceil_mode {
        return Some(floor);
    }
    let span = dilation * (k - 1) + 1;
    let mut out = floor + usize::from(!(input + pad_begin + pad_end - span).is_multiple_of(stride));
    if (out - 1) * stride >= input + pad_begin {
        out -= 1;
    }
    Some(out)
}

/// NHWC pooling of `x` (`n × h × w × c`) into `y` (`n × oh × ow × c`) over
/// `kh × kw` windows (`geom.oc == geom.c`; `group` unused). `ceil_mode` only
/// decides the output size, which is checked.
pub fn pool2d(
    kind: PoolKind,
    geom: &ConvGeom,
    ceil_mode: bool,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let g = pool_dims(geom, ceil_mode)?;
    check_len("input", g.x_len, x.len())?;
    check_len("output", g.y_len, y.len())?;
    if g.y_len == 0 {
        return Ok(());
    }
    y[..g.y_len]
        .par_chunks_mut(g.ow * g.c)
        .enumerate()
        .for_each(|(r, yrow)| pool_row(kind, &g, x, r, yrow));
    Ok(())
}

/// The checked geometry of a pool (any element type): channels in equal
/// channels out, and the output size the window, strides, padding and
/// `ceil_mode` give.
pub(crate) fn pool_dims(geom: &ConvGeom, ceil_mode: bool) -> Result<Dims, KernelError> {
    let g = Dims::new(geom)?;
    if g.oc != g.c {
        return Err(kerr(format!(
            "pool output channels must equal the input's {}, found {}",
            g.c, g.oc
        )));
    }
    let eh = pool_out_size(
        g.h,
        g.kh,
        g.stride[0],
        g.dilation[0],
        g.pads[0],
        g.pads[2],
        ceil_mode,
    );
    let ew = pool_out_size(
        g.w,
        g.kw,
        g.stride[1],
        g.dilation[1],
        g.pads[1],
        g.pads[3],
        ceil_mode,
    );
    match (eh, ew) {
        (Some(eh), Some(ew)) if (eh, ew) == (g.oh, g.ow) => {}
        (Some(eh), Some(ew)) => {
            return Err(kerr(format!(
                "output size must be {eh}x{ew} for this geometry, found {}x{}",
                g.oh, g.ow
            )));
        }
        _ => {
            return Err(kerr(format!(
                "the window ({}x{}, dilation {:?}) is larger than the padded input ({}x{} with pads {:?})",
                g.kh, g.kw, g.dilation, g.h, g.w, g.pads
            )));
        }
    }
    Ok(g)
}

/// `max` that propagates NaN from either side (as the IR interpreter and
/// numpy do), written as a select so it vectorizes.
#[inline(always)]
fn max_nan(a: f32, v: f32) -> f32 {
    if v > a || v.is_nan() { v } else { a }
}

/// `min` that propagates NaN from either side.
#[inline(always)]
fn min_nan(a: f32, v: f32) -> f32 {
    if v < a || v.is_nan() { v } else { a }
}

multiversion! {
    /// Output row `r` (flat over `n·oh`) of a pool.
    fn pool_row(kind: PoolKind, g: &Dims, x: &[f32], r: usize, yrow: &mut [f32]) {
        let (b, oy) = (r / g.oh, r % g.oh);
        let c = g.c;
        let by = g.base(oy, 0);
        let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
        // Taps inside the padded extent: shift coordinates by the top pad.
        let (py0, py1) = tap_range(by + g.pads[0] as isize, g.dilation[0], g.kh, g.h + g.pads[0] + g.pads[2]);
        for (ox, out) in yrow.chunks_exact_mut(c).enumerate() {
            let bx = g.base(ox, 1);
            let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
            let (px0, px1) = tap_range(bx + g.pads[1] as isize, g.dilation[1], g.kw, g.w + g.pads[1] + g.pads[3]);
            let divisor = match kind {
                PoolKind::Max => 1.0,
                PoolKind::AvgExcludePad => ((ky1 - ky0) * (kx1 - kx0)) as f32,
                PoolKind::AvgIncludePad => ((py1 - py0) * (px1 - px0)) as f32,
            };
            let taps = ((ky0, ky1), (kx0, kx1));
            let mut c0 = 0;
            while c0 < c {
                // Blocks of 64 down to 1 channels, each a fixed-size
                // accumulator in registers (16 channels are one block of
                // 16, not 16 lanes of a 64-wide loop).
                let at = (b, by, bx);
                c0 += crate::kernels::block_call!(c - c0, pool_block(kind, g, x, at, taps, c0, divisor, out));
            }
        }
    }
}

/// Channels `c0 .. c0 + N` of one output pixel of a pool: `at` is (image,
/// top-left input coordinate), `taps` the valid tap ranges, `divisor` the
/// average's count.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pool_block<const N: usize>(
    kind: PoolKind,
    g: &Dims,
    x: &[f32],
    (b, by, bx): (usize, isize, isize),
    ((ky0, ky1), (kx0, kx1)): ((usize, usize), (usize, usize)),
    c0: usize,
    divisor: f32,
    out: &mut [f32],
) {
    let c = g.c;
    let init = match kind {
        PoolKind::Max => f32::NEG_INFINITY,
        PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => 0.0,
    };
    let mut acc = [init; N];
    for ky in ky0..ky1 {
        let iy = (by + (ky * g.dilation[0]) as isize) as usize;
        for kx in kx0..kx1 {
            let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
            let Some(xs) = x[((b * g.h + iy) * g.w + ix) * c + c0..].first_chunk::<N>() else {
                continue;
            };
            match kind {
                PoolKind::Max => {
                    for i in 0..N {
                        acc[i] = max_nan(acc[i], xs[i]);
                    }
                }
                PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => {
                    for i in 0..N {
                        acc[i] += xs[i];
                    }
                }
            }
        }
    }
    let Some(dst) = out[c0..].first_chunk_mut::<N>() else {
        return;
    };
    match kind {
        PoolKind::Max => *dst = acc,
        PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => {
            for (d, a) in dst.iter_mut().zip(&acc) {
                *d = a / divisor;
            }
        }
    }
}

/// Most floats of one output row a reduction task keeps as its running
/// result (stays in L1 while the `len` input rows stream past).
const REDUCE_PIECE: usize = 1024;

/// `y[o, i] = reduce_l x[o, l, i]` for `x` of `outer × len × inner` and `y`
/// of `outer × inner`. An empty reduction gives 0 (sum), NaN (mean), −∞
/// (max) or +∞ (min); max and min propagate NaN.
pub fn reduce_middle(
    kind: ReduceKind,
    outer: usize,
    len: usize,
    inner: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    check_len("input", product("input", &[outer, len, inner])?, x.len())?;
    let ylen = product("output", &[outer, inner])?;
    check_len("output", ylen, y.len())?;
    if ylen == 0 {
        return Ok(());
    }
    let y = &mut y[..ylen];
    if inner == 1 {
        // One contiguous run per output; a few hundred outputs per task.
        let per = (4096 / len.max(1)).clamp(1, 256);
        y.par_chunks_mut(per).enumerate().for_each(|(i, ys)| {
            for (j, out) in ys.iter_mut().enumerate() {
                let o = i * per + j;
                *out = reduce_run(kind, &x[o * len..(o + 1) * len]);
            }
        });
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    // Split rows into pieces only as much as the threads need.
    let piece = if outer >= threads {
        inner.min(REDUCE_PIECE)
    } else {
        inner
            .div_ceil(threads.div_ceil(outer))
            .next_multiple_of(16)
            .min(REDUCE_PIECE)
    };
    y.par_chunks_mut(inner).enumerate().for_each(|(o, yrow)| {
        let xo = &x[o * len * inner..(o + 1) * len * inner];
        yrow.par_chunks_mut(piece).enumerate().for_each(|(p, ys)| {
            reduce_cols(kind, xo, len, inner, p * piece, ys);
        });
    });
    Ok(())
}

multiversion! {
    /// Reduces one contiguous run (`inner == 1`) with 16 independent lanes,
    /// so the loop vectorizes.
    fn reduce_run_into(kind: ReduceKind, xs: &[f32], out: &mut f32) {
        const L: usize = 16;
        let init = match kind {
            ReduceKind::Sum | ReduceKind::Mean => 0.0,
            ReduceKind::Max => f32::NEG_INFINITY,
            ReduceKind::Min => f32::INFINITY,
        };
        let mut lanes = [init; L];
        let chunks = xs.chunks_exact(L);
        let tail = chunks.remainder();
        let combine = |a: f32, v: f32| match kind {
            ReduceKind::Sum | ReduceKind::Mean => a + v,
            ReduceKind::Max => max_nan(a, v),
            ReduceKind::Min => min_nan(a, v),
        };
        for ch in chunks {
            if let Some(ch) = ch.first_chunk::<L>() {
                for i in 0..L {
                    lanes[i] = combine(lanes[i], ch[i]);
                }
            }
        }
        for (i, &v) in tail.iter().enumerate() {
            lanes[i] = combine(lanes[i], v);
        }
        // Pairwise tree over the lanes.
        let mut width = L;
        while width > 1 {
            width /= 2;
            for i in 0..width {
                lanes[i] = combine(lanes[i], lanes[i + width]);
            }
        }
        *out = match kind {
            ReduceKind::Mean => lanes[0] / xs.len() as f32,
            ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min => lanes[0],
        };
    }
}

fn reduce_run(kind: ReduceKind, xs: &[f32]) -> f32 {
    let mut out = 0.0;
    reduce_run_into(kind, xs, &mut out);
    out
}

multiversion! {
    /// Reduces columns `i0 .. i0 + ys.len()` of the `len × inner` matrix
    /// `xo` over its rows into `ys`.
    fn reduce_cols(kind: ReduceKind, xo: &[f32], len: usize, inner: usize, i0: usize, ys: &mut [f32]) {
        let init = match kind {
            ReduceKind::Sum | ReduceKind::Mean => 0.0,
            ReduceKind::Max => f32::NEG_INFINITY,
            ReduceKind::Min => f32::INFINITY,
        };
        ys.fill(init);
        let cols = ys.len();
        for l in 0..len {
            let xs = &xo[l * inner + i0..][..cols];
            match kind {
                ReduceKind::Sum | ReduceKind::Mean => {
                    for (a, &v) in ys.iter_mut().zip(xs) {
                        *a += v;
                    }
                }
                ReduceKind::Max => {
                    for (a, &v) in ys.iter_mut().zip(xs) {
                        *a = max_nan(*a, v);
                    }
                }
                ReduceKind::Min => {
                    for (a, &v) in ys.iter_mut().zip(xs) {
                        *a = min_nan(*a, v);
                    }
                }
            }
        }
        if kind == ReduceKind::Mean {
            let n = len as f32;
            for a in ys.iter_mut() {
                *a /= n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Pools and reductions against naive f64 loops and hand-checked values.

    use super::super::conv_tests::{assert_close, geom, in_pool, values};
    use super::*;

    /// Reference pool (ONNX Runtime semantics, see the module doc).
    fn ref_pool(kind: PoolKind, g: &ConvGeom, x: &[f32]) -> Vec<f64> {
        let u = |v: u64| v as usize;
        let (n, h, w, c, oh, ow) = (u(g.n), u(g.h), u(g.w), u(g.c), u(g.oh), u(g.ow));
        let mut y = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let (mut acc, mut inside, mut padded) = (0.0f64, 0, 0);
                        let mut max = f64::NEG_INFINITY;
                        for ky in 0..u(g.kh) {
                            for kx in 0..u(g.kw) {
                                let iy = (oy * u(g.stride[0]) + ky * u(g.dilation[0])) as i64
                                    - g.pads[0] as i64;
                                let ix = (ox * u(g.stride[1]) + kx * u(g.dilation[1])) as i64
                                    - g.pads[1] as i64;
                                if iy < (h + u(g.pads[2])) as i64 && ix < (w + u(g.pads[3])) as i64
                                {
                                    padded += 1;
                                }
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                let v =
                                    x[((b * h + iy as usize) * w + ix as usize) * c + ch] as f64;
                                inside += 1;
                                acc += v;
                                max = max.max(v);
                            }
                        }
                        y.push(match kind {
                            PoolKind::Max => max,
                            PoolKind::AvgExcludePad => acc / inside as f64,
                            PoolKind::AvgIncludePad => acc / padded as f64,
                        });
                    }
                }
            }
        }
        y
    }

    const KINDS: [PoolKind; 3] = [
        PoolKind::Max,
        PoolKind::AvgExcludePad,
        PoolKind::AvgIncludePad,
    ];

    #[test]
    fn pool_matches_reference_with_ceil_mode_pads_and_dilation() {
        // (input nhwc, kernel, stride, dilation, pads).
        type Case = ([u64; 4], [u64; 2], [u64; 2], [u64; 2], [u64; 4]);
        let cases: [Case; 6] = [
            ([1, 5, 7, 3], [3, 3], [2, 2], [1, 1], [1, 0, 1, 1]),
            // Every channel block size: 127 = 64 + 32 + 16 + 8 + 4 + 2 + 1.
            ([1, 5, 6, 127], [3, 3], [2, 2], [1, 1], [1; 4]),
            ([2, 5, 7, 3], [2, 3], [2, 2], [2, 1], [0, 1, 1, 2]),
            ([1, 6, 6, 70], [3, 3], [2, 2], [1, 1], [1; 4]),
            ([1, 4, 9, 5], [3, 2], [3, 3], [1, 1], [0; 4]),
            ([1, 8, 8, 2], [2, 2], [2, 2], [1, 1], [0; 4]),
        ];
        for (nhwc, k, s, d, p) in cases {
            for ceil_mode in [false, true] {
                let size = |i: usize| {
                    let (input, pb, pe) = (nhwc[1 + i], p[i], p[i + 2]);
                    let span = d[i] * (k[i] - 1) + 1;
                    let num = input + pb + pe - span;
                    let mut o = num / s[i] + 1;
                    if ceil_mode && num % s[i] != 0 {
                        o += 1;
                        if (o - 1) * s[i] >= input + pb {
                            o -= 1;
                        }
                    }
                    o
                };
                let g = geom(nhwc, [size(0), size(1), nhwc[3]], k, s, d, p, 1);
                let x = values((g.n * g.h * g.w * g.c) as usize, 5);
                let ylen = (g.n * g.oh * g.ow * g.c) as usize;
                for kind in KINDS {
                    let want = ref_pool(kind, &g, &x);
                    for threads in [1, 3] {
                        let mut y = vec![f32::NAN; ylen];
                        in_pool(threads, || pool2d(kind, &g, ceil_mode, &x, &mut y)).unwrap();
                        let what = format!("{kind:?} {nhwc:?} ceil={ceil_mode} threads={threads}");
                        assert_close(&y, &want, &what);
                    }
                }
            }
        }
    }

    #[test]
    fn pool_divisors_hand_checked() {
        let run = |kind, g: &ConvGeom, ceil, x: &[f32]| {
            let mut y = vec![0.0f32; (g.oh * g.ow * g.c) as usize];
            pool2d(kind, g, ceil, x, &mut y).unwrap();
            y
        };
        // 3x3 of 1..9, 3x3 windows, stride 2, pads 1: window (0,0) holds
        // 1+2+4+5 = 12 in 4 input cells of 9 padded ones; window (1,1)
        // 5+6+8+9 = 28, also 4 of 9.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let g = geom([1, 3, 3, 1], [2, 2, 1], [3, 3], [2, 2], [1, 1], [1; 4], 1);
        let y = run(PoolKind::AvgIncludePad, &g, false, &x);
        assert_close(
            &y,
            &[12.0 / 9.0, 16.0 / 9.0, 24.0 / 9.0, 28.0 / 9.0],
            "include",
        );
        let y = run(PoolKind::AvgExcludePad, &g, false, &x);
        assert_eq!(y, [3.0, 4.0, 6.0, 7.0]);
        assert_eq!(run(PoolKind::Max, &g, false, &x), [5.0, 6.0, 8.0, 9.0]);
        // A row [1..5], 1x3 windows, stride 2, right pad 1, ceil_mode: three
        // windows; the last covers column 4 (input), 5 (padding) and 6
        // (added by ceil_mode, never counted).
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0];
        let g = geom(
            [1, 1, 5, 1],
            [1, 3, 1],
            [1, 3],
            [1, 2],
            [1, 1],
            [0, 0, 0, 1],
            1,
        );
        assert_eq!(run(PoolKind::AvgIncludePad, &g, true, &x), [2.0, 4.0, 2.5]);
        assert_eq!(run(PoolKind::AvgExcludePad, &g, true, &x), [2.0, 4.0, 5.0]);
        assert_eq!(run(PoolKind::Max, &g, true, &x), [3.0, 5.0, 5.0]);
        // NaN wins a max.
        let x = [1.0f32, f32::NAN, 3.0, 4.0, 5.0];
        assert!(run(PoolKind::Max, &g, true, &x)[0].is_nan());
    }

    #[test]
    fn pool_rejects_bad_sizes() {
        // 6x6, 3x3 windows, stride 2: 2x2 outputs, 3x3 with ceil_mode.
        let g = geom([1, 6, 6, 2], [2, 2, 2], [3, 3], [2, 2], [1, 1], [0; 4], 1);
        let x = [0.0f32; 72];
        let mut y = [0.0f32; 8];
        let err = |r: Result<(), KernelError>| r.unwrap_err().to_string();
        assert!(pool2d(PoolKind::Max, &g, false, &x, &mut y).is_ok());
        assert_eq!(
            err(pool2d(PoolKind::Max, &g, true, &x, &mut y)),
            "output size must be 3x3 for this geometry, found 2x2"
        );
        assert_eq!(
            err(pool2d(PoolKind::Max, &g, false, &x[..71], &mut y)),
            "input needs 72 floats, found 71"
        );
        assert_eq!(
            err(pool2d(PoolKind::Max, &g, false, &x, &mut y[..7])),
            "output needs 8 floats, found 7"
        );
        let mut bad = g;
        bad.oc = 3;
        assert_eq!(
            err(pool2d(PoolKind::Max, &bad, false, &x, &mut y)),
            "pool output channels must equal the input's 2, found 3"
        );
    }

    /// Reference middle-axis reduction in f64.
    fn ref_reduce(kind: ReduceKind, outer: usize, len: usize, inner: usize, x: &[f32]) -> Vec<f64> {
        let mut y = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                let vals = (0..len).map(|l| x[(o * len + l) * inner + i] as f64);
                y.push(match kind {
                    ReduceKind::Sum => vals.sum(),
                    ReduceKind::Mean => vals.sum::<f64>() / len as f64,
                    ReduceKind::Max => vals.fold(f64::NEG_INFINITY, f64::max),
                    ReduceKind::Min => vals.fold(f64::INFINITY, f64::min),
                });
            }
        }
        y
    }

    const REDUCE_KINDS: [ReduceKind; 4] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
    ];

    #[test]
    fn reduce_middle_matches_reference() {
        for (outer, len, inner) in [
            (3, 5, 1),
            (4, 1000, 1),
            (2, 7, 37),
            (1, 10, 3000),
            (5, 49, 64),
        ] {
            let x = values(outer * len * inner, 9);
            for kind in REDUCE_KINDS {
                let want = ref_reduce(kind, outer, len, inner, &x);
                for threads in [1, 3] {
                    let mut y = vec![f32::NAN; outer * inner];
                    in_pool(threads, || {
                        reduce_middle(kind, outer, len, inner, &x, &mut y)
                    })
                    .unwrap();
                    let what = format!("{kind:?} {outer}x{len}x{inner} threads={threads}");
                    assert_close(&y, &want, &what);
                }
            }
        }
    }

    #[test]
    fn reduce_middle_hand_checked() {
        // 1 × 3 × 2: columns [1, 3, 5] and [2, 4, 6].
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let run = |kind, inner: usize| {
            let mut y = vec![0.0f32; 6 / (3 * inner) * inner];
            reduce_middle(kind, 6 / (3 * inner), 3, inner, &x, &mut y).unwrap();
            y
        };
        assert_eq!(run(ReduceKind::Sum, 2), [9.0, 12.0]);
        assert_eq!(run(ReduceKind::Mean, 2), [3.0, 4.0]);
        assert_eq!(run(ReduceKind::Max, 2), [5.0, 6.0]);
        assert_eq!(run(ReduceKind::Min, 2), [1.0, 2.0]);
        // inner == 1: runs [1, 2, 3] and [4, 5, 6].
        assert_eq!(run(ReduceKind::Mean, 1), [2.0, 5.0]);
        assert_eq!(run(ReduceKind::Max, 1), [3.0, 6.0]);
        let mut y = [0.0f32; 2];
        reduce_middle(
            ReduceKind::Max,
            2,
            3,
            1,
            &[1.0, f32::NAN, 0.0, 4.0, 5.0, 6.0],
            &mut y,
        )
        .unwrap();
        assert!(y[0].is_nan() && y[1] == 6.0);
        let mut y = [7.0f32; 4];
        reduce_middle(ReduceKind::Sum, 2, 0, 2, &[], &mut y).unwrap();
        assert_eq!(y, [0.0; 4]);
        assert_eq!(
            reduce_middle(ReduceKind::Sum, 2, 3, 2, &x[..5], &mut y)
                .unwrap_err()
                .to_string(),
            "input needs 12 floats, found 5"
        );
    }
}
