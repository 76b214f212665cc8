//! Direct NHWC integer convolution for AVX-512 VNNI and AMX: no im2col
//! matrix and no packing of A. The same sums and the same requantization
//! as `qconv::qconv2d_scalar`, so the same bytes.
//!
//! The input is first copied once into a padded buffer `xp`
//! (`n × hp × wp × cp` bytes): i8 inputs shifted to u8 (`x ^ 0x80`, the
//! sums corrected by `128·Σw`), the border filled with the zero point, the
//! channels padded to `cp` (a multiple of 4 for VNNI, 64 for AMX; the
//! padded channels have zero weights). Then for tap `t = (ky, kx)` and an
//! output pixel `(n, oy, ox)` the `cp` bytes the weights of that tap
//! multiply start at `((n·hp + oy·sh + ky·dh)·wp + ox·sw + kx·dw)·cp`:
//! consecutive output pixels of one row are `sw·cp` bytes apart, which is
//! the row stride of an AMX A tile and the step between VNNI broadcasts.
//!
//! Convolutions whose window is small and whose channels are few (a 7×7
//! stem on 3 channels) would waste most of a padded tap; they gather
//! im2col rows of `kh·kw·c` bytes instead and run as a 1×1 convolution on
//! them ([`Mode::Im2col`]), each window row one 32-byte copy from a padded
//! copy of the input where its taps fit.
//!
//! The weights are packed once ([`pack`]) as a `k × oc` B of the int8 GEMM
//! (`int8::pack_b_s8`, `k = taps·cp`), 16-channel panels whose 64-byte rows
//! hold 4 consecutive k of 16 channels: the operand of `vpdpbusd` and of an
//! AMX B tile alike.
//!
//! Work is split over the pool's threads by blocks of output pixels, each
//! block running every output channel.

use rayon::prelude::*;

use super::KernelError;
use super::int8::{Int8Level, PackedS8, pack_b_s8};
use crate::plan::{ConvGeom, QuantConv};

/// Pixels of one VNNI register block (14 rows × 2 panels of zmm
/// accumulators).
const VNNI_MR: usize = 14;
/// Pixels of one AMX A tile.
const AMX_ROWS: usize = 16;

/// How the A operand is formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The padded input, one tap at a time.
    Direct,
    /// Gathered im2col rows, as a 1×1 convolution.
    Im2col,
}

/// Weights packed for the direct kernels of one level.
#[derive(Clone, Debug)]
pub struct DirectWeights {
    level: Int8Level,
    mode: Mode,
    /// Bytes per tap of A (channels padded).
    cp: usize,
    /// Taps of A: `kh·kw` (direct) or 1 (im2col).
    taps: usize,
    b: PackedS8,
}

/// The level the direct kernels run on here, if any: AMX, else AVX-512
/// VNNI (with the AVX-512 BW/VL the epilogue uses).
pub fn best_level() -> Option<Int8Level> {
    [Int8Level::Amx, Int8Level::Avx512Vnni]
        .into_iter()
        .find(|&l| supports(l))
}

/// Whether the direct kernels can run on `level` on this CPU.
pub fn supports(level: Int8Level) -> bool {
    let bw_vl = {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    };
    matches!(level, Int8Level::Amx | Int8Level::Avx512Vnni)
        && level.is_supported()
        && Int8Level::Avx512Vnni.is_supported()
        && bw_vl
}

/// Whether the direct kernels take `g`: one group (grouped and depthwise
/// convolutions keep the GEMM path) and a non-empty window.
pub fn applies(g: &ConvGeom) -> bool {
    g.group == 1 && g.kh * g.kw * g.c > 0 && g.oc > 0
}

/// Packs `w` (`[oc][kh][kw][c]`) of `g` for `level`.
pub fn pack(g: &ConvGeom, w: &[i8], level: Int8Level) -> Result<DirectWeights, KernelError> {
    let err = |m: String| KernelError::new(format!("qconv2d: {m}"));
    if !applies(g) {
        return Err(err("the direct kernels take one group and a non-empty window".into()));
    }
    let size = |v: u64| usize::try_from(v).map_err(|_| err("extent too large".into()));
    let (c, oc, taps) = (size(g.c)?, size(g.oc)?, size(g.kh * g.kw)?);
    let kk = taps * c;
    if oc.checked_mul(kk).is_none_or(|need| need > w.len()) {
        return Err(err(format!(
            "w holds {} elements, fewer than the geometry needs",
            w.len()
        )));
    }
    let q = if level == Int8Level::Amx { 64 } else { 4 };
    let (mode, cp, taps_a) = if kk.next_multiple_of(q) < taps * c.next_multiple_of(q) {
        (Mode::Im2col, kk.next_multiple_of(q), 1)
    } else {
        (Mode::Direct, c.next_multiple_of(q), taps)
    };
    let k = cp * taps_a;
    // B row r = tap·cp + channel (direct) or the im2col index (im2col);
    // padded rows stay zero.
    let mut bt = vec![0i8; k * oc];
    for o in 0..oc {
        for t in 0..taps {
            for ch in 0..c {
                let r = match mode {
                    Mode::Direct => t * cp + ch,
                    Mode::Im2col => t * c + ch,
                };
                bt[r * oc + o] = w[o * kk + t * c + ch];
            }
        }
    }
    Ok(DirectWeights {
        level,
        mode,
        cp,
        taps: taps_a,
        b: pack_b_s8(k, oc, &bt, oc)?,
    })
}

/// The convolution on the direct kernels; slices as for
/// `qconv::qconv2d` (lengths checked there against `g`).
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    dw: &DirectWeights,
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    if !supports(dw.level) {
        return Err(KernelError::new(format!(
            "qconv2d: int8 level {} is not supported by this cpu",
            dw.level
        )));
    }
    let [n, h, w, c, oh, ow, oc, kh, kw] = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.kh, g.kw].map(|v| v as usize);
    let [sh, sw] = g.stride.map(|v| v as usize);
    let [dh, dwl] = g.dilation.map(|v| v as usize);
    let [pt, pl] = [g.pads[0] as usize, g.pads[1] as usize];
    if dw.b.n() != oc || dw.b.k() != dw.cp * dw.taps {
        return Err(KernelError::new(
            "qconv2d: the packed weights do not match the geometry".to_string(),
        ));
    }
    let a_zero = if p.x_signed { 128 } else { 0 };
    let flip = if p.x_signed { 0x80u8 } else { 0 };
    let pad = (p.x_zero + a_zero) as u8;
    let cp = dw.cp;
    // The A source as an image (`n × hp × wp × cp`), with the strides,
    // dilations and byte offsets of its taps.
    let (hp, wp, st, taps) = match dw.mode {
        Mode::Direct => {
            let hp = (h + pt).max((oh - 1) * sh + (kh - 1) * dh + 1);
            let wp = (w + pl).max((ow - 1) * sw + (kw - 1) * dwl + 1);
            let taps: Vec<usize> = (0..kh * kw)
                .map(|t| ((t / kw) * dh * wp + (t % kw) * dwl) * cp)
                .collect();
            (hp, wp, [sh, sw], taps)
        }
        Mode::Im2col => (oh, ow, [1, 1], vec![0]),
    };
    // Slack after the image: a partial block reads whole tiles (in wide
    // rows, below, up to a padded row further).
    let slack = (AMX_ROWS.max(VNNI_MR) * st[1] + wp) * cp + 64;
    // Where every position of the padded image is an input pixel (no
    // spatial padding) or an im2col row, each byte the kernels read is
    // either written below or multiplied by a zero weight row (padded
    // channels, the slack of a partial block), so the buffer keeps what
    // it held instead of being filled with the padding byte first.
    let fill = dw.mode == Mode::Direct && (hp != h || wp != w);
    with_padded(n * hp * wp * cp + slack, pad, fill, |xp| {
    match dw.mode {
        Mode::Direct => {
            xp[..n * hp * wp * cp]
                .par_chunks_mut(wp * cp)
                .enumerate()
                .for_each(|(row, dst)| {
                    let (img, yy) = (row / hp, row % hp);
                    let Some(iy) = yy.checked_sub(pt).filter(|&v| v < h) else {
                        return;
                    };
                    let src = &x[(img * h + iy) * w * c..][..w * c];
                    if cp == c && flip == 0 {
                        dst[pl * cp..][..w * c].copy_from_slice(src);
                        return;
                    }
                    for (ix, src) in src.chunks_exact(c).enumerate() {
                        let d = &mut dst[(ix + pl) * cp..][..c];
                        for (d, &s) in d.iter_mut().zip(src) {
                            *d = s ^ flip;
                        }
                    }
                });
        }
        Mode::Im2col if dwl == 1 && kw * c <= 32 && (kh - 1) * kw * c + 32 <= cp => {
            // A window row's taps are `kw·c` consecutive bytes of a padded
            // copy of the input, so each is one 32-byte copy (a 7×7 stem
            // on 3 channels: 21 bytes); the excess is overwritten by the
            // next window row's copy, or after the last meets B's zero
            // rows.
            let hi = (h + pt).max((oh - 1) * sh + (kh - 1) * dh + 1);
            let wi = (w + pl).max((ow - 1) * sw + kw);
            let mut xin = vec![pad; n * hi * wi * c + 32];
            for (r, src) in x[..n * h * w * c].chunks_exact(w * c).enumerate() {
                let (img, iy) = (r / h, r % h);
                let dst = &mut xin[((img * hi + iy + pt) * wi + pl) * c..][..w * c];
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = v ^ flip;
                }
            }
            xp[..n * oh * ow * cp].par_chunks_mut(ow * cp).enumerate().for_each(|(r, out)| {
                let (img, oy) = (r / oh, r % oh);
                for (ox, row) in out.chunks_exact_mut(cp).enumerate() {
                    for ky in 0..kh {
                        let at = ((img * hi + oy * sh + ky * dh) * wi + ox * sw) * c;
                        row[ky * kw * c..][..32].copy_from_slice(&xin[at..at + 32]);
                    }
                }
            });
        }
        Mode::Im2col => {
            let win = super::qconv::Window::new(g, [n, h, w, c, oh, ow, oc, kh, kw, 1]);
            xp[..n * oh * ow * cp]
                .par_chunks_mut(cp)
                .enumerate()
                .for_each(|(pix, row)| win.gather_u8(x, pix, 0, &mut row[..kh * kw * c], pad, flip));
        }
    }
    // Per channel: the compensation less a_zero·Σw (the shift of i8 inputs).
    let off: Vec<i32> = (0..oc)
        .map(|o| comp[o].wrapping_sub(dw.b.col_sums()[o].wrapping_mul(a_zero)))
        .collect();
    let ep = Epilogue::new(p, &off, scale, shift, oc);
    let seg_len = if dw.level == Int8Level::Amx { AMX_ROWS } else { VNNI_MR };
    // Where consecutive output pixels read consecutive `cp`-byte rows of
    // `xp` across output rows and images too (im2col rows; a 1×1 stride-1
    // convolution without padding, e.g. a GEMM of `m` rows as `m × 1`
    // pixels), the output is one long row: blocks fill whole tiles
    // instead of stopping at each row's end (a 7-pixel row would use 7 of
    // 16 AMX tile rows).
    let linear = dw.mode == Mode::Im2col || (taps.len() == 1 && st == [1, 1] && hp == oh && wp == ow);
    // Stride 1 on AMX: output pixel (oy, ox) reads the padded image from
    // `oy·wp + ox` on, so an image's output rows laid side by side at the
    // padded width are one wide row whose blocks read `cp`-byte rows in
    // order; the `wp − ow` positions between output rows are computed and
    // dropped. Taken where it needs fewer blocks (a 7×7 map: 4 blocks of
    // 16 for 63 positions instead of 7 blocks of 7 pixels).
    let wide = !linear
        && dw.level == Int8Level::Amx
        && st == [1, 1]
        && (oh * wp).div_ceil(seg_len) < oh * ow.div_ceil(seg_len);
    let (rows, ow, oh, hp, wp, wide) = if linear {
        (1, n * oh * ow, 1, 1, n * hp * wp, None)
    } else if wide {
        (n, oh * wp, 1, hp, wp, Some([ow, oh * ow]))
    } else {
        (n * oh, ow, oh, hp, wp, None)
    };
    // Blocks: runs of up to seg_len output pixels of one row.
    let per_row = ow.div_ceil(seg_len);
    let segs: Vec<(usize, usize, usize)> = (0..rows)
        .flat_map(|r| (0..per_row).map(move |s| (r, s * seg_len, seg_len.min(ow - s * seg_len))))
        .collect();
    let src = Source {
        xp,
        hp,
        wp,
        cp,
        oh,
        ow,
        st,
        taps: &taps,
        wide,
    };
    let b = dw.b.data();
    let bstride = dw.b.k().div_ceil(4).next_multiple_of(16) * 64;
    let y_addr = y.as_mut_ptr() as usize;
    let per_task = if dw.level == Int8Level::Amx { 2 } else { 1 };
    let tasks = segs.len().div_ceil(per_task);
    let threads = rayon::current_num_threads();
    // Several blocks per task, so AMX configures its tiles rarely.
    let chunk = tasks.div_ceil(threads * 8).max(1);
    let pixel_tasks = tasks.div_ceil(chunk);
    // Few pixel blocks (a 7×7 map, a GEMM of few rows) and many output
    // channels: split the channels too (in pairs of 16-channel panels),
    // so every thread has work.
    let panels = oc.div_ceil(16);
    let groups = if pixel_tasks >= 4 * threads { 1 } else { (4 * threads).div_ceil(pixel_tasks).min(panels.div_ceil(2)).max(1) };
    let per_group = panels.div_ceil(groups).next_multiple_of(2);
    let groups = panels.div_ceil(per_group);
    (0..pixel_tasks * groups).into_par_iter().for_each(|job| {
        let (ti, gi) = (job / groups, job % groups);
        let range = ti * chunk * per_task..((ti + 1) * chunk * per_task).min(segs.len());
        let pr = gi * per_group..((gi + 1) * per_group).min(panels);
        // SAFETY: the level is supported (checked above); every block
        // writes only the output channels `pr` of the output pixels of its
        // own segments, which no other task writes; reads stay inside xp
        // (its slack covers the rows of a partial block) and inside the
        // packed B.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            match dw.level {
                Int8Level::Amx => amx_blocks(&src, &segs[range], pr, b, bstride, &ep, y_addr as *mut u8),
                _ => vnni_blocks(&src, &segs[range], pr, b, bstride, &ep, y_addr as *mut u8),
            }
        }
    });
    });
    Ok(())
}

thread_local! {
    /// The calling thread's padded-input buffer, kept between calls so a
    /// run does not page in a fresh allocation per convolution.
    static PADDED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` bytes: the thread's buffer, or a fresh one when it is
/// in use; all set to `pad` when `fill`, else holding the buffer's earlier
/// contents (new bytes set to `pad`).
fn with_padded(len: usize, pad: u8, fill: bool, f: impl FnOnce(&mut [u8])) {
    PADDED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if fill {
                buf.clear();
            }
            buf.resize(len, pad);
            f(&mut buf[..]);
            // Do not keep more than 64 MiB alive between runs.
            if buf.capacity() > 64 << 20 {
                *buf = Vec::new();
            }
        }
        Err(_) => f(&mut vec![pad; len]),
    })
}

/// Where the kernels read A.
struct Source<'a> {
    xp: &'a [u8],
    hp: usize,
    wp: usize,
    cp: usize,
    oh: usize,
    ow: usize,
    /// Strides of the output grid in the source.
    st: [usize; 2],
    /// Byte offset of each tap from a pixel's window origin.
    taps: &'a [usize],
    /// Rows are images laid out at the padded width (`run`'s wide rows):
    /// the real output width and pixels per image.
    wide: Option<[usize; 2]>,
}

impl Source<'_> {
    /// The window origin of output pixel `ox` of output row `r` (`n·oh`
    /// rows); pixel `p` as the output's row-major index `r·ow + ox`.
    fn origin(&self, r: usize, ox: usize) -> (*const u8, usize) {
        let (img, oy) = (r / self.oh, r % self.oh);
        let at = ((img * self.hp + oy * self.st[0]) * self.wp + ox * self.st[1]) * self.cp;
        // SAFETY: `at` lies inside the image part of xp.
        (unsafe { self.xp.as_ptr().add(at) }, r * self.ow + ox)
    }

    /// The output pixel of position `i` of the block from `ox` in row
    /// `r`, or `None` for a position between wide rows' output rows.
    #[inline]
    fn out_pixel(&self, r: usize, ox: usize, i: usize) -> Option<usize> {
        match self.wide {
            None => Some(r * self.ow + ox + i),
            Some([ow, per_image]) => {
                let (q, x) = ((ox + i) / self.wp, (ox + i) % self.wp);
                (x < ow).then_some(r * per_image + q * ow + x)
            }
        }
    }
}

/// The requantization of 16 channels' sums, as `qconv::requantize`
/// (`off` is added to the sums first; `lo`/`hi` are the clamp less the
/// zero point).
pub(super) struct Epilogue<'a> {
    off: &'a [i32],
    scale: &'a [f32],
    shift: &'a [f32],
    lo: f32,
    hi: f32,
    zero: i32,
    oc: usize,
    /// Every scale and shift is finite, so no sum requantizes to NaN and
    /// the NaN lanes need no mask.
    finite: bool,
}

impl<'a> Epilogue<'a> {
    /// The epilogue of `p` (its clamp less the zero point) for `oc`
    /// channels.
    pub(super) fn new(p: &QuantConv, off: &'a [i32], scale: &'a [f32], shift: &'a [f32], oc: usize) -> Epilogue<'a> {
        let lo = (p.y_min as i64 - p.y_zero as i64) as f32;
        let hi = (p.y_max as i64 - p.y_zero as i64) as f32;
        let finite = scale[..oc].iter().chain(&shift[..oc]).all(|v| v.is_finite());
        Epilogue { off, scale, shift, lo, hi, zero: p.y_zero, oc, finite }
    }
}

/// One 16-channel group's requantization parameters in registers
/// ([`Epilogue::channels`]), loaded once per block instead of per pixel.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Channels {
    off: std::arch::x86_64::__m512i,
    scale: std::arch::x86_64::__m512,
    shift: std::arch::x86_64::__m512,
    /// The live channels (below `oc`).
    mask: std::arch::x86_64::__mmask16,
}

#[cfg(target_arch = "x86_64")]
impl Epilogue<'_> {
    /// The parameters of channels `o0..o0+16` (those below `oc`; `o0 <
    /// oc`).
    ///
    /// # Safety
    /// AVX-512 F.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(super) unsafe fn channels(&self, o0: usize) -> Channels {
        use std::arch::x86_64::*;
        let live = (self.oc - o0).min(16);
        let mask: __mmask16 = if live == 16 { 0xffff } else { (1u16 << live) - 1 };
        // SAFETY: the masked loads touch channels below oc.
        unsafe {
            Channels {
                off: _mm512_maskz_loadu_epi32(mask, self.off.as_ptr().add(o0)),
                scale: _mm512_maskz_loadu_ps(mask, self.scale.as_ptr().add(o0)),
                shift: _mm512_maskz_loadu_ps(mask, self.shift.as_ptr().add(o0)),
                mask,
            }
        }
    }

    /// Stores the requantized sums `acc` of the channels `ch` of one pixel
    /// at `out` (the group's first channel of that pixel).
    ///
    /// Clamping to the integer bounds before rounding gives what rounding
    /// first does (rounding is monotone and keeps integers), so one
    /// conversion with round-to-nearest-even does both.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; `out` holds the live channels' bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(super) unsafe fn store_with(&self, ch: &Channels, acc: std::arch::x86_64::__m512i, out: *mut u8) {
        use std::arch::x86_64::*;
        const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, ch.off)), ch.scale, ch.shift);
        let cl = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(self.lo)), _mm512_set1_ps(self.hi));
        // `as` makes NaN 0 in `requantize`: the ordered lanes only.
        let v = if self.finite {
            _mm512_cvt_roundps_epi32::<RNE>(cl)
        } else {
            _mm512_maskz_cvt_roundps_epi32::<RNE>(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(f, f), cl)
        };
        let v = _mm512_add_epi32(v, _mm512_set1_epi32(self.zero));
        // SAFETY: the masked store touches the live channels only.
        unsafe { _mm_mask_storeu_epi8(out.cast(), ch.mask, _mm512_cvtepi32_epi8(v)) };
    }

    /// Stores channels `o0..o0+16` (those below `oc`) of one pixel from
    /// the sums `acc` at `out` (the pixel's first channel).
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; `out` holds `oc` bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(super) unsafe fn store(&self, acc: std::arch::x86_64::__m512i, o0: usize, out: *mut u8) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let ch = self.channels(o0);
            self.store_with(&ch, acc, out.add(o0));
        }
    }
}

/// The VNNI kernel over blocks of up to `VNNI_MR` pixels: 2 panels (32
/// channels) at a time in 28 zmm accumulators.
///
/// # Safety
/// AVX-512 F/BW/VL and VNNI; `y` holds the output; see the call in [`run`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vnni_blocks(
    src: &Source<'_>,
    segs: &[(usize, usize, usize)],
    panels: std::ops::Range<usize>,
    b: &[i8],
    bstride: usize,
    ep: &Epilogue<'_>,
    y: *mut u8,
) {
    for &(r, ox0, len) in segs {
        let mut rows = [std::ptr::null::<u8>(); VNNI_MR];
        let (first, pix) = src.origin(r, ox0);
        let step = src.st[1] * src.cp;
        for (i, row) in rows.iter_mut().enumerate() {
            // Rows past the segment repeat its last pixel (results dropped).
            // SAFETY: inside xp (the slack covers the repeats' reads).
            *row = unsafe { first.add(i.min(len - 1) * step) };
        }
        let mut p = panels.start;
        while p < panels.end {
            // SAFETY: forwarded; panels p (and p + 1) exist.
            unsafe {
                if p + 1 < panels.end {
                    vnni_tile::<2>(src, &rows, len, b.as_ptr().cast::<u8>().add(p * bstride), bstride, ep, p * 16, y.add(pix * ep.oc));
                    p += 2;
                } else {
                    vnni_tile::<1>(src, &rows, len, b.as_ptr().cast::<u8>().add(p * bstride), bstride, ep, p * 16, y.add(pix * ep.oc));
                    p += 1;
                }
            }
        }
    }
}

/// One VNNI block: `VNNI_MR` pixels (`len` of them stored) × `NP` panels.
///
/// # Safety
/// As for [`vnni_blocks`]; `b` is panel `o0/16`'s first row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn vnni_tile<const NP: usize>(
    src: &Source<'_>,
    rows: &[*const u8; VNNI_MR],
    len: usize,
    b: *const u8,
    bstride: usize,
    ep: &Epilogue<'_>,
    o0: usize,
    y: *mut u8,
) {
    use std::arch::x86_64::*;
    let groups = src.cp / 4;
    // SAFETY: every A read is 4 bytes of a tap inside xp, every B read a
    // 64-byte row of the panel; stores as in `Epilogue::store`.
    unsafe {
        let mut acc = [[_mm512_setzero_si512(); NP]; VNNI_MR];
        let mut brow = b;
        for &toff in src.taps {
            for q in 0..groups {
                let mut bv = [_mm512_setzero_si512(); NP];
                for (j, v) in bv.iter_mut().enumerate() {
                    *v = _mm512_loadu_si512(brow.add(j * bstride).cast());
                }
                for i in 0..VNNI_MR {
                    let a = _mm512_set1_epi32(rows[i].add(toff + 4 * q).cast::<i32>().read_unaligned());
                    for j in 0..NP {
                        acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a, bv[j]);
                    }
                }
                brow = brow.add(64);
            }
        }
        for (i, row) in acc.iter().enumerate().take(len) {
            for (j, &v) in row.iter().enumerate() {
                ep.store(v, o0 + 16 * j, y.add(i * ep.oc));
            }
        }
    }
}

/// A block of the AMX kernel whose sums wait in a scratch buffer for
/// their epilogue: two segments (row, first position, positions) × `np`
/// panels from panel `p`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Pending {
    segs: [(usize, usize, usize); 2],
    p: usize,
    np: usize,
}

/// A 32 × 32 block of i32 sums as the tiles store it (rows of 128 bytes).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Scratch([[i32; 32]; 32]);

/// The AMX kernel: blocks of two 16-pixel segments (tmm4, tmm5) × two
/// panels (tmm6, tmm7) into four i32 tiles (tmm0–3), stored to a scratch
/// block and requantized with AVX-512. The epilogue of each block runs
/// after the next block's tile products are issued (two scratch blocks in
/// turn), so the vector units requantize while the tile unit multiplies;
/// each block's channel parameters are loaded once, not per pixel. With
/// one depth step (a 1×1 convolution on up to 64 channels) the A tiles
/// serve every panel of a pixel pair and are loaded once.
///
/// # Safety
/// AMX int8 and AVX-512 F/BW/VL; see the call in [`run`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn amx_blocks(
    src: &Source<'_>,
    segs: &[(usize, usize, usize)],
    panels: std::ops::Range<usize>,
    b: &[i8],
    bstride: usize,
    ep: &Epilogue<'_>,
    y: *mut u8,
) {
    use super::amx::{Asm, TileOps};
    let mut scratch = [Scratch([[0; 32]; 32]); 2];
    let stride = src.st[1] * src.cp;
    let steps_per_tap = src.cp / 64;
    let single = src.taps.len() * steps_per_tap == 1;
    let ops = &mut Asm;
    let mut pending: Option<(usize, Pending)> = None;
    let mut slot = 0;
    // SAFETY: AMX is supported (checked by the caller); tile reads stay
    // inside xp (slack) and the packed B, tile stores inside scratch.
    unsafe {
        super::amx::begin();
        for pair in segs.chunks(2) {
            let (a0, _) = src.origin(pair[0].0, pair[0].1);
            let seg1 = pair.get(1).copied().unwrap_or((pair[0].0, pair[0].1, 0));
            let (a1, _) = src.origin(seg1.0, seg1.1);
            if single {
                ops.load::<4>(a0.add(src.taps[0]), stride);
                ops.load::<5>(a1.add(src.taps[0]), stride);
            }
            for p in panels.clone().step_by(2) {
                let two = p + 1 < panels.end;
                ops.zero::<0>();
                ops.zero::<2>();
                if two {
                    ops.zero::<1>();
                    ops.zero::<3>();
                }
                let mut brow = b.as_ptr().cast::<u8>().add(p * bstride);
                for &toff in src.taps {
                    for s in 0..steps_per_tap {
                        if !single {
                            ops.load::<4>(a0.add(toff + 64 * s), stride);
                            ops.load::<5>(a1.add(toff + 64 * s), stride);
                        }
                        ops.load::<6>(brow, 64);
                        ops.dot::<false, 0, 4, 6>();
                        ops.dot::<false, 2, 5, 6>();
                        if two {
                            ops.load::<7>(brow.add(bstride), 64);
                            ops.dot::<false, 1, 4, 7>();
                            ops.dot::<false, 3, 5, 7>();
                        }
                        brow = brow.add(16 * 64);
                    }
                }
                if let Some((at, blk)) = pending.take() {
                    amx_epilogue(&scratch[at], &blk, src, ep, y);
                }
                let sc = scratch[slot].0.as_mut_ptr().cast::<u8>();
                ops.store::<0>(sc, 128);
                ops.store::<2>(sc.add(16 * 128), 128);
                if two {
                    ops.store::<1>(sc.add(64), 128);
                    ops.store::<3>(sc.add(16 * 128 + 64), 128);
                }
                let np = if two { 2 } else { 1 };
                pending = Some((slot, Pending { segs: [pair[0], seg1], p, np }));
                slot ^= 1;
            }
        }
        if let Some((at, blk)) = pending {
            amx_epilogue(&scratch[at], &blk, src, ep, y);
        }
        super::amx::end();
    }
}

/// Requantizes and stores one block's sums.
///
/// # Safety
/// AVX-512 F/BW/VL; the block's pixels and channels lie in `y`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn amx_epilogue(sc: &Scratch, blk: &Pending, src: &Source<'_>, ep: &Epilogue<'_>, y: *mut u8) {
    use std::arch::x86_64::*;
    // SAFETY: forwarded from the caller; the loads read the scratch block.
    unsafe {
        let o0 = blk.p * 16;
        let ch0 = ep.channels(o0);
        let ch1 = if blk.np == 2 { ep.channels(o0 + 16) } else { ch0 };
        for (half, &(r, ox, len)) in blk.segs.iter().enumerate() {
            for i in 0..len {
                let Some(pix) = src.out_pixel(r, ox, i) else { continue };
                let row = &sc.0[16 * half + i];
                let out = y.add(pix * ep.oc + o0);
                ep.store_with(&ch0, _mm512_loadu_si512(row.as_ptr().cast()), out);
                if blk.np == 2 {
                    ep.store_with(&ch1, _mm512_loadu_si512(row.as_ptr().add(16).cast()), out.add(16));
                }
            }
        }
    }
}
