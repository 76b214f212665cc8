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
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        if comp.len() < c || scale.len() < c || shift.len() < c {
            return Err(KernelError::new("qconv2d (depthwise): per-channel parameters are short".to_string()));
        }
        let ep = super::qdirect::Epilogue::new(p, comp, scale, shift, c);
        y[..d.y_len].par_chunks_mut(ow * c).enumerate().for_each(|(r, yrow)| {
            // SAFETY: the CPU has AVX-512 F/BW/VL; the row holds `ow·c`
            // bytes and the reads stay inside x and w (geometry checked).
            unsafe { dw_row_avx512(&d, p.x_signed, p.x_zero, x, &dw.w, r, &ep, yrow) }
        });
        return Ok(());
    }
    run_portable(&d, p, x, dw, comp, scale, shift, y);
    Ok(())
}

/// [`run`] without the AVX-512 row kernel (every CPU; tests call it
/// directly where the dispatcher would not).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_portable(
    d: &Dims,
    p: &QuantConv,
    x: &[u8],
    dw: &DepthwiseWeights,
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) {
    let (c, ow) = (d.c, d.ow);
    y[..d.y_len].par_chunks_mut(ow * c).enumerate().for_each_init(
        || vec![0i32; ow * c],
        |sums, (r, yrow)| {
            dw_row(d, p.x_signed, p.x_zero, x, &dw.w, r, sums);
            super::qconv::requantize_rows(p, 0, c, c, sums, comp, scale, shift, yrow);
        },
    );
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

/// Whether the AVX-512 row kernel runs here (F, BW and VL).
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    })
}

/// Output row `r` computed and requantized 16 channels at a time with the
/// sums in a register across the window's taps (the portable path keeps
/// them in memory); the same sums, so the same bytes.
///
/// # Safety
/// AVX-512 F/BW/VL; `yrow` holds the row's `ow·c` bytes; `x` and `w` hold
/// what the geometry reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_row_avx512(
    g: &Dims,
    signed: bool,
    x_zero: i32,
    x: &[u8],
    w: &[i32],
    r: usize,
    ep: &super::qdirect::Epilogue<'_>,
    yrow: &mut [u8],
) {
    use std::arch::x86_64::*;
    let (b, oy) = (r / g.oh, r % g.oh);
    let c = g.c;
    let by = g.base(oy, 0);
    let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
    let zero = _mm512_set1_epi32(x_zero);
    for ox in 0..g.ow {
        let bx = g.base(ox, 1);
        let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
        // Up to 64 channels (4 registers) per pass over the taps, so each
        // tap's addresses are worked out once per 64 channels.
        let mut o0 = 0;
        while o0 < c {
            let masks: [__mmask16; 4] = std::array::from_fn(|j| {
                let live = c.saturating_sub(o0 + 16 * j).min(16);
                if live == 16 { 0xffff } else { ((1u32 << live) - 1) as u16 }
            });
            let mut acc = [_mm512_setzero_si512(); 4];
            for ky in 0..g.kh {
                let row_in = (ky0..ky1).contains(&ky);
                let iy = (by + (ky * g.dilation[0]) as isize) as usize;
                for kx in 0..g.kw {
                    let t = ky * g.kw + kx;
                    let inside = row_in && (kx0..kx1).contains(&kx);
                    let at = if inside {
                        let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                        ((b * g.h + iy) * g.w + ix) * c + o0
                    } else {
                        0
                    };
                    for j in 0..4 {
                        if masks[j] == 0 {
                            break;
                        }
                        // SAFETY: tap t's weights hold c entries; masked
                        // lanes stay below c.
                        let wv = unsafe { _mm512_maskz_loadu_epi32(masks[j], w.as_ptr().add(t * c + o0 + 16 * j)) };
                        let xv = if inside {
                            // SAFETY: the tap is inside the image; its
                            // unmasked bytes lie in x.
                            let v = unsafe { _mm_maskz_loadu_epi8(masks[j], x.as_ptr().add(at + 16 * j).cast()) };
                            if signed { _mm512_cvtepi8_epi32(v) } else { _mm512_cvtepu8_epi32(v) }
                        } else {
                            zero
                        };
                        acc[j] = _mm512_add_epi32(acc[j], _mm512_mullo_epi32(xv, wv));
                    }
                }
            }
            for (j, a) in acc.iter().enumerate() {
                if masks[j] != 0 {
                    // SAFETY: the pixel's c bytes lie in the row.
                    unsafe { ep.store(*a, o0 + 16 * j, yrow.as_mut_ptr().add(ox * c)) };
                }
            }
            o0 += 64;
        }
    }
}
