//! Depthwise integer convolution in NHWC (`Step::QConv2d` with one group
//! per channel and one output channel per group: MobileNet's 3×3 and 5×5
//! layers), channels in vector lanes.
//!
//! The GEMM path would run a 9-deep product per channel and the scalar
//! path gathers an im2col row per channel; here each output pixel keeps
//! `c` i32 sums and every tap adds `x[c]·w[tap][c]` for a whole row of
//! channels at once (the weights widened to i32 and laid out tap-major at
//! load, [`pack`]), which the compiler vectorizes on every ISA level
//! (`multiversion!`: AVX-512, AVX2, portable). A tap outside the image
//! adds `x_zero·w`, which is what reading the padding as the input's zero
//! point gives, so the sums are exactly `qconv2d_scalar`'s and the
//! requantization is the shared one: the same bytes.
//!
//! Sums cannot overflow: `kh·kw·255·128` stays below 2^31 for windows of
//! up to 65,000 taps, which [`applies`] requires.

use rayon::prelude::*;

use super::KernelError;
use super::conv::{Dims, multiversion, tap_range};
use crate::plan::{ConvGeom, QuantConv};

/// Most taps a window may have here (see the module doc).
const MAX_TAPS: u64 = 65_000;

/// Whether `g` is a depthwise convolution this kernel takes.
pub fn applies(g: &ConvGeom) -> bool {
    g.c > 0 && g.group == g.c && g.oc == g.c && g.kh * g.kw > 0 && g.kh * g.kw <= MAX_TAPS
}

/// Depthwise weights, tap-major and widened: `w[t·c + ch]`.
#[derive(Clone, Debug)]
pub struct DepthwiseWeights {
    c: usize,
    taps: usize,
    w: Vec<i32>,
}

/// Packs `w` (`[c][kh][kw][1]`) of `g`.
pub fn pack(g: &ConvGeom, w: &[i8]) -> Result<DepthwiseWeights, KernelError> {
    let err = |m: String| KernelError::new(format!("qconv2d (depthwise): {m}"));
    if !applies(g) {
        return Err(err("not a depthwise convolution with one output channel per group".into()));
    }
    let (c, taps) = (g.c as usize, (g.kh * g.kw) as usize);
    if c.checked_mul(taps).is_none_or(|need| need > w.len()) {
        return Err(err(format!("w holds {} elements, fewer than the geometry needs", w.len())));
    }
    let mut out = vec![0i32; taps * c];
    for ch in 0..c {
        for t in 0..taps {
            out[t * c + ch] = w[ch * taps + t] as i32;
        }
    }
    Ok(DepthwiseWeights { c, taps, w: out })
}

/// The convolution (slices already checked against `g` by the caller).
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    dw: &DepthwiseWeights,
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    let d = Dims::new(g)?;
    if dw.c != d.c || dw.taps != d.kh * d.kw {
        return Err(KernelError::new("qconv2d (depthwise): the packed weights do not match the geometry".to_string()));
    }
    let (c, ow) = (d.c, d.ow);
    if d.y_len == 0 {
        return Ok(());
    }
    y[..d.y_len].par_chunks_mut(ow * c).enumerate().for_each_init(
        || vec![0i32; ow * c],
        |sums, (r, yrow)| {
            dw_row(&d, p.x_signed, p.x_zero, x, &dw.w, r, sums);
            super::qconv::requantize_rows(p, 0, c, c, sums, comp, scale, shift, yrow);
        },
    );
    Ok(())
}

multiversion! {
    /// The sums of output row `r` (flat over `n·oh`): `ow·c` of them.
    fn dw_row(g: &Dims, signed: bool, x_zero: i32, x: &[u8], w: &[i32], r: usize, sums: &mut [i32]) {
        let (b, oy) = (r / g.oh, r % g.oh);
        let c = g.c;
        let by = g.base(oy, 0);
        let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
        for (ox, acc) in sums.chunks_exact_mut(c).enumerate() {
            let bx = g.base(ox, 1);
            let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
            acc.fill(0);
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    let wt = &w[(ky * g.kw + kx) * c..][..c];
                    if !(ky0..ky1).contains(&ky) || !(kx0..kx1).contains(&kx) {
                        for (a, &wv) in acc.iter_mut().zip(wt) {
                            *a = a.wrapping_add(x_zero.wrapping_mul(wv));
                        }
                        continue;
                    }
                    let iy = (by + (ky * g.dilation[0]) as isize) as usize;
                    let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                    let xs = &x[((b * g.h + iy) * g.w + ix) * c..][..c];
                    if signed {
                        for ((a, &xv), &wv) in acc.iter_mut().zip(xs).zip(wt) {
                            *a = a.wrapping_add((xv as i8 as i32).wrapping_mul(wv));
                        }
                    } else {
                        for ((a, &xv), &wv) in acc.iter_mut().zip(xs).zip(wt) {
                            *a = a.wrapping_add((xv as i32).wrapping_mul(wv));
                        }
                    }
                }
            }
        }
    }
}
