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
//! Where the CPU has AVX-512 VNNI and VBMI, windows up to 4 taps wide run
//! on `vpdpbusd` instead ([`Kernel::Vnni`]): for each window row, the up to
//! 4 taps of 16 channels are interleaved by one `vpermb` into 16 lanes of 4
//! bytes, so one instruction adds 4 products per channel (a 3×3 window is
//! 3 of them, against 9 widening multiplies and adds); i8 inputs are
//! shifted to u8 (`x ^ 0x80`) with `128·Σw` taken back per channel.
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

/// Depthwise weights, tap-major and widened: `w[t·c + ch]`; for windows
/// up to 4 taps wide also the VNNI kernel's form.
#[derive(Clone, Debug)]
pub struct DepthwiseWeights {
    c: usize,
    taps: usize,
    w: Vec<i32>,
    /// Per window row `ky` and channel (padded to 16), the row's taps as 4
    /// bytes (unused ones 0): `w4[(ky·cpad + ch)·4 + kx]`. Empty when the
    /// window is wider than 4.
    w4: Vec<i8>,
    /// Per channel, the sum of its taps (the i8 inputs' shift).
    wsum: Vec<i32>,
}

/// The kernels of this module, for tests and benchmarks that pick one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `vpdpbusd` on 4 interleaved taps (AVX-512 VNNI and VBMI).
    Vnni,
    /// Widened products, 16 channels per register (AVX-512 F/BW/VL).
    Avx512,
    /// The loops the compiler vectorizes (every CPU).
    Portable,
}

impl Kernel {
    pub const ALL: [Kernel; 3] = [Kernel::Vnni, Kernel::Avx512, Kernel::Portable];

    /// Whether this CPU runs the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => avx512(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Vnni => vnni(),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512 | Kernel::Vnni => false,
        }
    }
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
    let (kh, kw) = (g.kh as usize, g.kw as usize);
    let cpad = c.next_multiple_of(16);
    let mut w4 = Vec::new();
    if kw <= 4 {
        w4 = vec![0i8; kh * cpad * 4];
        for ch in 0..c {
            for ky in 0..kh {
                for kx in 0..kw {
                    w4[(ky * cpad + ch) * 4 + kx] = w[ch * taps + ky * kw + kx];
                }
            }
        }
    }
    let wsum = (0..c).map(|ch| w[ch * taps..][..taps].iter().map(|&v| v as i32).sum()).collect();
    Ok(DepthwiseWeights { c, taps, w: out, w4, wsum })
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
    let best = Kernel::ALL.into_iter().find(|&k| k.is_supported() && takes(k, &d, p, dw)).unwrap_or(Kernel::Portable);
    run_kernel(best, &d, p, x, dw, comp, scale, shift, y)
}

/// Whether kernel `k` takes this convolution (the VNNI kernel: windows up
/// to 4 taps wide, at most 8 rows, and a padding byte that is a u8).
pub fn takes(k: Kernel, d: &Dims, p: &QuantConv, dw: &DepthwiseWeights) -> bool {
    match k {
        Kernel::Vnni => !dw.w4.is_empty() && d.kh <= 8 && d.kw <= 4 && (0..=255).contains(&(p.x_zero + if p.x_signed { 128 } else { 0 })),
        Kernel::Avx512 | Kernel::Portable => true,
    }
}

/// The convolution on kernel `k` (refused when this CPU lacks it or it
/// does not take the geometry); slices checked against `d` by the caller.
#[allow(clippy::too_many_arguments)]
pub fn run_kernel(
    k: Kernel,
    d: &Dims,
    p: &QuantConv,
    x: &[u8],
    dw: &DepthwiseWeights,
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    if dw.c != d.c || dw.taps != d.kh * d.kw {
        return Err(KernelError::new("qconv2d (depthwise): the packed weights do not match the geometry".to_string()));
    }
    if !k.is_supported() || !takes(k, d, p, dw) {
        return Err(KernelError::new(format!("qconv2d (depthwise): kernel {k:?} does not run here")));
    }
    let (c, ow) = (d.c, d.ow);
    if d.y_len == 0 {
        return Ok(());
    }
    if comp.len() < c || scale.len() < c || shift.len() < c {
        return Err(KernelError::new("qconv2d (depthwise): per-channel parameters are short".to_string()));
    }
    match k {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni => {
            let shift_in = if p.x_signed { 128 } else { 0 };
            let off: Vec<i32> = (0..c).map(|o| comp[o].wrapping_sub(dw.wsum[o].wrapping_mul(shift_in))).collect();
            let ep = super::qdirect::Epilogue::new(p, &off, scale, shift, c);
            let pad = (p.x_zero + shift_in) as u8;
            y[..d.y_len].par_chunks_mut(ow * c).enumerate().for_each(|(r, yrow)| {
                // SAFETY: the CPU has AVX-512 F/BW/VL, VNNI and VBMI; the
                // row holds `ow·c` bytes and the reads stay inside x and
                // w4 (geometry checked, `kh <= 8`).
                unsafe {
                    if p.x_signed {
                        dw_row_vnni::<true>(d, x, &dw.w4, pad, r, &ep, yrow)
                    } else {
                        dw_row_vnni::<false>(d, x, &dw.w4, pad, r, &ep, yrow)
                    }
                }
            });
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => {
            let ep = super::qdirect::Epilogue::new(p, comp, scale, shift, c);
            y[..d.y_len].par_chunks_mut(ow * c).enumerate().for_each(|(r, yrow)| {
                // SAFETY: the CPU has AVX-512 F/BW/VL; the row holds `ow·c`
                // bytes and the reads stay inside x and w (geometry checked).
                unsafe { dw_row_avx512(d, p.x_signed, p.x_zero, x, &dw.w, r, &ep, yrow) }
            });
        }
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Vnni | Kernel::Avx512 => unreachable!("refused above: not supported"),
        Kernel::Portable => run_portable(d, p, x, dw, comp, scale, shift, y),
    }
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

/// Whether the VNNI kernel runs here (AVX-512 F/BW/VL, VNNI, VBMI).
#[cfg(target_arch = "x86_64")]
fn vnni() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        avx512() && std::arch::is_x86_feature_detected!("avx512vnni") && std::arch::is_x86_feature_detected!("avx512vbmi")
    })
}

/// Output row `r` on `vpdpbusd`: for 16 channels at a time (parameters
/// and each window row's weights held in registers across the row's
/// pixels), each window row's up to 4 taps are loaded as 16 bytes each
/// (the padding byte outside the image; i8 inputs flipped to u8 when
/// `SIGNED`) and interleaved by `vpermb` into 4 bytes per channel. Window
/// rows outside the image add the padding byte's products, worked out once
/// per row; pixels whose window lies inside the image horizontally take
/// a path without per-tap tests.
///
/// # Safety
/// AVX-512 F/BW/VL, VNNI and VBMI; `g.kh <= 8`, `g.kw <= 4`; `w4` as
/// packed by [`pack`]; `yrow` holds the row's `ow·c` bytes; `x` what the
/// geometry reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_row_vnni<const SIGNED: bool>(
    g: &Dims,
    x: &[u8],
    w4: &[i8],
    pad: u8,
    r: usize,
    ep: &super::qdirect::Epilogue<'_>,
    yrow: &mut [u8],
) {
    use std::arch::x86_64::*;
    let (b, oy) = (r / g.oh, r % g.oh);
    let (c, kh, kw) = (g.c, g.kh, g.kw);
    let cpad = c.next_multiple_of(16);
    let by = g.base(oy, 0);
    let (ky0, ky1) = tap_range(by, g.dilation[0], kh, g.h);
    // The pixels whose window lies inside the image horizontally.
    let (sw, dwl) = (g.stride[1], g.dilation[1]);
    let pl = g.pads[1];
    let span = (kw - 1) * dwl;
    let ox_lo = pl.div_ceil(sw).min(g.ow);
    let ox_hi = if g.w + pl > span { ((g.w + pl - span - 1) / sw + 1).min(g.ow).max(ox_lo) } else { ox_lo };
    // Byte 4i + k of the product's operand is channel i of tap k: byte
    // 16k + i of the four taps side by side.
    let idx: [u8; 64] = std::array::from_fn(|j| (16 * (j % 4) + j / 4) as u8);
    let row_step = g.dilation[0] * g.w * c;
    // SAFETY: the CPU has the features (caller); loads and stores as the
    // comments say.
    unsafe {
        let idx = _mm512_loadu_si512(idx.as_ptr().cast());
        let padv = _mm_set1_epi8(pad as i8);
        let pad_row = _mm512_permutexvar_epi8(idx, _mm512_broadcast_i32x4(padv));
        let flip = _mm_set1_epi8(i8::MIN);
        // Row ky0's first byte of the image row, channel 0.
        let row0 = x.as_ptr().add((b * g.h + (by + (ky0 * g.dilation[0]) as isize) as usize) * g.w * c);
        let mut c0 = 0;
        while c0 < c {
            let ch = ep.channels(c0);
            let live = (c - c0).min(16);
            let mask: __mmask16 = if live == 16 { 0xffff } else { (1u16 << live) - 1 };
            let mut wv = [_mm512_setzero_si512(); 8];
            for (ky, v) in wv.iter_mut().enumerate().take(kh) {
                // SAFETY: w4 holds kh·cpad·4 bytes; c0 + 16 <= cpad.
                *v = _mm512_loadu_si512(w4.as_ptr().add((ky * cpad + c0) * 4).cast());
            }
            // The window rows outside the image.
            let mut init = _mm512_setzero_si512();
            for (ky, &wk) in wv.iter().enumerate().take(kh) {
                if !(ky0..ky1).contains(&ky) {
                    init = _mm512_dpbusd_epi32(init, pad_row, wk);
                }
            }
            let load = |at: *const u8| {
                // SAFETY: a tap inside the image; the masked bytes are
                // channels below c.
                let t = _mm_maskz_loadu_epi8(mask, at.cast());
                if SIGNED { _mm_xor_si128(t, flip) } else { t }
            };
            let interleave = |t: [__m128i; 4]| {
                let four = _mm512_inserti32x4::<3>(
                    _mm512_inserti32x4::<2>(_mm512_inserti32x4::<1>(_mm512_zextsi128_si512(t[0]), t[1]), t[2]),
                    t[3],
                );
                _mm512_permutexvar_epi8(idx, four)
            };
            let out = yrow.as_mut_ptr().add(c0);
            for ox in 0..g.ow {
                let bx = g.base(ox, 1);
                let mut acc = init;
                if (ox_lo..ox_hi).contains(&ox) {
                    let mut at = row0.add(bx as usize * c + c0);
                    for &wk in &wv[ky0..ky1] {
                        let t: [__m128i; 4] = std::array::from_fn(|kx| if kx < kw { load(at.add(kx * dwl * c)) } else { _mm_setzero_si128() });
                        acc = _mm512_dpbusd_epi32(acc, interleave(t), wk);
                        at = at.add(row_step);
                    }
                } else {
                    let (kx0, kx1) = tap_range(bx, dwl, kw, g.w);
                    let mut at = row0.add(c0);
                    for &wk in &wv[ky0..ky1] {
                        let t: [__m128i; 4] = std::array::from_fn(|kx| {
                            if kx >= kw {
                                _mm_setzero_si128()
                            } else if (kx0..kx1).contains(&kx) {
                                load(at.add((bx + (kx * dwl) as isize) as usize * c))
                            } else {
                                padv
                            }
                        });
                        acc = _mm512_dpbusd_epi32(acc, interleave(t), wk);
                        at = at.add(row_step);
                    }
                }
                // SAFETY: the pixel's live channels lie in the row.
                ep.store_with(&ch, acc, out.add(ox * c));
            }
            c0 += 16;
        }
    }
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
