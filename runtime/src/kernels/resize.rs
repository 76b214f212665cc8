//! NHWC resize of the CPU executor (`Step::Resize`): nearest ("asymmetric"
//! coordinates, "floor" rounding) and bilinear with the `half_pixel`,
//! `align_corners` and `asymmetric` coordinate transforms of ONNX Resize.
//!
//! Coordinates are computed in f64 exactly as the IR interpreter (which
//! follows `onnx/reference/ops/op_resize.py`) computes them, with
//! `scale = out / in`: `half_pixel` maps `o` to `(o + 0.5) / scale − 0.5`,
//! `align_corners` to `o · (in − 1) / (scale·in − 1)` (0 for one output),
//! `asymmetric` to `o / scale`. Bilinear clamps the source coordinate to
//! `[0, in − 1]` (equivalent to ONNX's clamping of the neighbours to the
//! edge), then blends rows first and columns second, in f32.
//!
//! Invariants: no panic on bad arguments (they return [`KernelError`]);
//! slices may be longer than needed; results do not depend on the thread
//! count (each output row is computed by one thread).

use rayon::prelude::*;

use super::KernelError;
use super::conv::{check_len, kerr, multiversion, product};
use crate::plan::ResizeMode;

/// Where output index `o` of an axis reads: neighbours `i0`, `i1` and the
/// weight `f` of `i1` (nearest: `i0 == i1`, `f == 0`).
#[derive(Clone, Copy, Debug)]
struct Tap {
    i0: usize,
    i1: usize,
    f: f32,
}

/// The taps of every output index of an axis of `input` → `out` elements.
fn axis_taps(mode: ResizeMode, input: usize, out: usize) -> Vec<Tap> {
    let (in_f, scale) = (input as f64, out as f64 / input as f64);
    let last = input - 1;
    (0..out)
        .map(|o| {
            let o = o as f64;
            let x = match mode {
                ResizeMode::Nearest => {
                    let i = ((o / scale).floor().max(0.0) as usize).min(last);
                    return Tap {
                        i0: i,
                        i1: i,
                        f: 0.0,
                    };
                }
                ResizeMode::BilinearHalfPixel => (o + 0.5) / scale - 0.5,
                ResizeMode::BilinearAlignCorners => {
                    // The reference compares the real-valued size scale·in.
                    let out_f = scale * in_f;
                    if out_f == 1.0 {
                        0.0
                    } else {
                        o * (in_f - 1.0) / (out_f - 1.0)
                    }
                }
                ResizeMode::BilinearAsymmetric => o / scale,
            };
            let x = x.clamp(0.0, last as f64);
            let i0 = (x.floor() as usize).min(last);
            Tap {
                i0,
                i1: (i0 + 1).min(last),
                f: (x - i0 as f64) as f32,
            }
        })
        .collect()
}

/// Resizes `x` (`n × h × w × c`) to `y` (`n × oh × ow × c`).
#[allow(clippy::too_many_arguments)]
pub fn resize(
    mode: ResizeMode,
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let xlen = product("input", &[n, h, w, c])?;
    let ylen = product("output", &[n, oh, ow, c])?;
    check_len("input", xlen, x.len())?;
    check_len("output", ylen, y.len())?;
    if ylen == 0 {
        return Ok(());
    }
    if h == 0 || w == 0 {
        return Err(kerr(format!(
            "an empty input ({h}x{w}) cannot be resized to {oh}x{ow}"
        )));
    }
    let (ty, tx) = (axis_taps(mode, h, oh), axis_taps(mode, w, ow));
    let x = &x[..xlen];
    y[..ylen]
        .par_chunks_mut(ow * c)
        .enumerate()
        .for_each_init(Vec::new, |tmp, (r, yrow)| {
            let (b, oy) = (r / oh, r % oh);
            let t = ty[oy];
            let row = |i: usize| &x[(b * h + i) * w * c..][..w * c];
            resize_row(row(t.i0), row(t.i1), t.f, &tx, c, tmp, yrow);
        });
    Ok(())
}

multiversion! {
    /// One output row: blends input rows `r0`, `r1` with weight `fy` of
    /// `r1` into `tmp`, then the columns of `tmp` by `tx` into `yrow`.
    fn resize_row(
        r0: &[f32],
        r1: &[f32],
        fy: f32,
        tx: &[Tap],
        c: usize,
        tmp: &mut Vec<f32>,
        yrow: &mut [f32],
    ) {
        let src: &[f32] = if fy == 0.0 {
            r0
        } else {
            tmp.clear();
            tmp.extend(r0.iter().zip(r1).map(|(&a, &b)| a + fy * (b - a)));
            tmp
        };
        // A few channels (a segmentation map's classes): fixed-size pixels,
        // not a loop of `c` iterations per output pixel.
        match c {
            1 => return blend_columns::<1>(src, tx, yrow),
            2 => return blend_columns::<2>(src, tx, yrow),
            3 => return blend_columns::<3>(src, tx, yrow),
            4 => return blend_columns::<4>(src, tx, yrow),
            8 => return blend_columns::<8>(src, tx, yrow),
            _ => {}
        }
        for (out, t) in yrow.chunks_exact_mut(c).zip(tx) {
            let a = &src[t.i0 * c..][..c];
            if t.f == 0.0 {
                out.copy_from_slice(a);
                continue;
            }
            let b = &src[t.i1 * c..][..c];
            for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
                *o = a + t.f * (b - a);
            }
        }
    }
}

/// The column pass of [`resize_row`] for `C` channels: the same blend per
/// element, in the same order.
#[inline(always)]
fn blend_columns<const C: usize>(src: &[f32], tx: &[Tap], yrow: &mut [f32]) {
    for (out, t) in yrow.chunks_exact_mut(C).zip(tx) {
        let (Some(out), Some(a)) = (out.first_chunk_mut::<C>(), src[t.i0 * C..].first_chunk::<C>()) else {
            return;
        };
        if t.f == 0.0 {
            *out = *a;
            continue;
        }
        let Some(b) = src[t.i1 * C..].first_chunk::<C>() else {
            return;
        };
        for i in 0..C {
            out[i] = a[i] + t.f * (b[i] - a[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Resize against an f64 reference written from the ONNX reference
    //! (neighbours clamped to the edge, separable) and hand-checked values.

    use super::super::conv_tests::{assert_close, in_pool, values};
    use super::*;

    /// ONNX's 1-D taps: coordinate, then floor and its right neighbour
    /// clamped to the edge, with weights `1 − r`, `r`.
    fn ref_axis(mode: ResizeMode, input: usize, out: usize, o: usize) -> [(usize, f64); 2] {
        let (inf, scale) = (input as f64, out as f64 / input as f64);
        let o = o as f64;
        let x = match mode {
            ResizeMode::Nearest => o / scale,
            ResizeMode::BilinearHalfPixel => (o + 0.5) / scale - 0.5,
            ResizeMode::BilinearAlignCorners if out == 1 => 0.0,
            ResizeMode::BilinearAlignCorners => o * (inf - 1.0) / (out as f64 - 1.0),
            ResizeMode::BilinearAsymmetric => o / scale,
        };
        let f = x.floor();
        let clamp = |i: f64| i.clamp(0.0, inf - 1.0) as usize;
        match mode {
            ResizeMode::Nearest => [(clamp(f), 1.0), (0, 0.0)],
            _ => [(clamp(f), 1.0 - (x - f)), (clamp(f + 1.0), x - f)],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn ref_resize(
        mode: ResizeMode,
        [n, h, w, c]: [usize; 4],
        oh: usize,
        ow: usize,
        x: &[f32],
    ) -> Vec<f64> {
        let mut y = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let mut acc = 0.0;
                        for (iy, wy) in ref_axis(mode, h, oh, oy) {
                            for (ix, wx) in ref_axis(mode, w, ow, ox) {
                                acc += wy * wx * x[((b * h + iy) * w + ix) * c + ch] as f64;
                            }
                        }
                        y.push(acc);
                    }
                }
            }
        }
        y
    }

    const MODES: [ResizeMode; 4] = [
        ResizeMode::Nearest,
        ResizeMode::BilinearHalfPixel,
        ResizeMode::BilinearAlignCorners,
        ResizeMode::BilinearAsymmetric,
    ];

    #[test]
    fn resize_matches_reference() {
        // Up in one axis, down in the other, odd sizes, single outputs.
        for (shape, oh, ow) in [
            ([2, 5, 7, 3], 9, 4),
            ([1, 3, 4, 17], 7, 11),
            ([1, 4, 3, 2], 1, 6),
            // The fixed-size pixels of 1, 4 and 8 channels.
            ([1, 3, 5, 1], 8, 9),
            ([2, 4, 4, 4], 16, 16),
            ([1, 5, 3, 8], 6, 7),
        ] {
            let [n, h, w, c] = shape;
            let x = values(n * h * w * c, 3);
            for mode in MODES {
                let want = ref_resize(mode, shape, oh, ow, &x);
                for threads in [1, 3] {
                    let mut y = vec![f32::NAN; n * oh * ow * c];
                    in_pool(threads, || resize(mode, n, h, w, c, oh, ow, &x, &mut y)).unwrap();
                    assert_close(&y, &want, &format!("{mode:?} {shape:?} threads={threads}"));
                }
            }
        }
    }

    #[test]
    fn resize_hand_checked() {
        // [0, 1] to 4 columns.
        let run = |mode| {
            let mut y = [0.0f32; 4];
            resize(mode, 1, 1, 2, 1, 1, 4, &[0.0, 1.0], &mut y).unwrap();
            y
        };
        // half_pixel: -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
        assert_eq!(run(ResizeMode::BilinearHalfPixel), [0.0, 0.25, 0.75, 1.0]);
        assert_close(
            &run(ResizeMode::BilinearAlignCorners),
            &[0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0],
            "align_corners",
        );
        assert_eq!(run(ResizeMode::BilinearAsymmetric), [0.0, 0.5, 1.0, 1.0]);
        assert_eq!(run(ResizeMode::Nearest), [0.0, 0.0, 1.0, 1.0]);
        // Nearest downsampling 5 -> 2 reads floor(o · 5 / 2): 0 and 2.
        let mut y = [0.0f32; 2];
        resize(
            ResizeMode::Nearest,
            1,
            1,
            5,
            1,
            1,
            2,
            &[10.0, 11.0, 12.0, 13.0, 14.0],
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [10.0, 12.0]);
    }

    #[test]
    fn resize_rejects_bad_lengths() {
        let mut y = [0.0f32; 8];
        let r = resize(ResizeMode::Nearest, 1, 2, 2, 1, 2, 4, &[0.0; 3], &mut y);
        assert_eq!(r.unwrap_err().to_string(), "input needs 4 floats, found 3");
        let r = resize(ResizeMode::Nearest, 1, 2, 2, 1, 3, 4, &[0.0; 4], &mut y);
        assert_eq!(
            r.unwrap_err().to_string(),
            "output needs 12 floats, found 8"
        );
        let r = resize(ResizeMode::Nearest, 1, 0, 2, 1, 2, 4, &[], &mut y);
        assert_eq!(
            r.unwrap_err().to_string(),
            "an empty input (0x2) cannot be resized to 2x4"
        );
    }
}
