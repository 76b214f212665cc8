//! Direct convolution with output pixels in the vector lanes, for layers
//! with few output channels (U-Net's 8 and 16, a segmentation stem's 16 at
//! stride 2), where the implicit GEMM of `conv2d` puts channels in the
//! lanes and leaves most of each 16-wide panel idle, after unfolding every
//! window (im2col) to read it once.
//!
//! Each band of output rows (one per thread, smaller where the scratch
//! budget asks) first copies the input rows it reads into zero-padded
//! *planes* in its thread's scratch, one per input channel and stride
//! phase: phase `(py, px)` holds the padded input's
//! rows `py, py + sy, ...` and columns `px, px + sx, ...`. Tap `(ky, kx)`
//! of output `(oy, ox)` then reads element `(oy + ky·dy / sy, ox + kx·dx /
//! sx)` of phase `(ky·dy mod sy, kx·dx mod sx)`: with output positions
//! numbered `oy·pw + ox` at the planes' width `pw`, every tap reads a
//! contiguous run of its plane, so a block of 48 consecutive positions is
//! three unaligned vector loads per tap and input channel, each multiplied
//! into 8 output channels' accumulators by a broadcast weight (the packed
//! GEMM weights, whose 16-float rows hold one tap's outputs). Positions
//! with `ox ≥ ow` are computed and dropped; `planar_pays` weighs that
//! waste against the GEMM's idle lanes.
//!
//! Each output sums its taps in the GEMM's row order `(ky, kx, c)`, starts
//! from zero and adds the bias last, then relu and clip. A tap whose rows
//! lie in the padding for a whole block is skipped: it would add products
//! of zero to a sum that starts at `+0`, which leaves every bit unchanged,
//! so results do not depend on how the positions are cut into blocks or
//! threads.
//!
//! AVX-512 only: [`planar_pays`] refuses other levels, which keep the
//! implicit GEMM.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::{Dims, KernelError, kerr, tap_range, with_scratch};
use crate::kernels::Isa;
use crate::kernels::act::Post;
use crate::kernels::pack::PANEL_WIDTH;

/// Vectors of 16 positions per block.
const V: usize = 3;
/// Output positions per block.
const BLOCK: usize = 16 * V;
/// Output channels per register tile (`V·OB` = 24 accumulators).
const OB: usize = 8;
/// The most floats of one band's planes (4 MiB, a per-thread scratch like
/// the implicit GEMM's unfolded blocks): taller images run in several
/// bands of output rows.
const MAX_PLANE_FLOATS: usize = 1 << 20;
/// Least work (vector multiply-adds) per task before the rows are split
/// over threads: below it, a second worker costs more than it saves.
const MIN_TASK_FMAS: usize = 12_000;

/// The planes of one band of `rows` output rows and where each tap reads
/// them: plane row `i` of phase `(py, px)` is padded input row
/// `(r0 + i)·sy + py` for the band's first output row `r0`.
pub(super) struct Planes {
    /// Stride phases (`sy·sx`) and floats per plane.
    phases: usize,
    plane: usize,
    /// Rows and columns of a plane (`pw` is the positions' row width).
    ph: usize,
    pw: usize,
    /// Per tap `(ky, kx)`: first float of its run in channel 0's planes
    /// (phase plane plus offset).
    taps: Vec<usize>,
}

impl Planes {
    pub(super) fn new(g: &Dims, rows: usize) -> Planes {
        let [sy, sx] = g.stride;
        let [dy, dx] = g.dilation;
        let ph = rows + (g.kh - 1) * dy / sy;
        let pw = g.ow + (g.kw - 1) * dx / sx;
        // The last block may start anywhere in the band's last row and
        // reads BLOCK positions past it at the largest offset.
        let max_off = ((g.kh - 1) * dy / sy) * pw + (g.kw - 1) * dx / sx;
        let plane = (ph * pw).max(rows * pw + BLOCK + max_off);
        let mut taps = Vec::with_capacity(g.kh * g.kw);
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let phase = (ky * dy % sy) * sx + kx * dx % sx;
                taps.push(phase * plane + (ky * dy / sy) * pw + kx * dx / sx);
            }
        }
        Planes {
            phases: sy * sx,
            plane,
            ph,
            pw,
            taps,
        }
    }

    /// Floats of one band's planes.
    fn len(&self, g: &Dims) -> usize {
        g.c * self.phases * self.plane
    }
}

/// How `conv2d_planar` cuts an image: bands of `rows` output rows (the
/// last may be shorter), run in parallel when `parallel`; `None` when even
/// one row's planes pass the scratch budget.
pub(crate) fn bands(g: &Dims, threads: usize) -> Option<(usize, bool)> {
    let kdim = g.kh * g.kw * g.c;
    let one = Planes::new(g, 1);
    // Vector multiply-adds per output row, for the split.
    let row_work = one.pw.div_ceil(16) * kdim * g.oc.div_ceil(OB) * OB;
    let tasks = (g.n * g.oh * row_work / MIN_TASK_FMAS).clamp(1, threads.max(1));
    // Images run in parallel too: bands split an image only for the tasks
    // the images do not fill.
    let mut rows = g.oh.div_ceil(tasks.div_ceil(g.n));
    // Each further row adds a row to every plane.
    let per_row = g.c * one.phases * one.pw;
    if one.len(g) > MAX_PLANE_FLOATS {
        return None;
    }
    rows = rows.min(1 + (MAX_PLANE_FLOATS - one.len(g)) / per_row);
    Some((rows, tasks > 1))
}

/// Whether the planar kernel serves this convolution: an AVX-512 CPU, one
/// group, and less work than the implicit GEMM, counted in 16-lane
/// multiply-adds. The GEMM does one per pixel, tap row element and panel
/// of 16 outputs (idle lanes included) and unfolds each pixel's window as
/// one copy per contiguous run (about 40 multiply-adds' time each, plus a
/// sixteenth per element). The planar kernel does one per 16 positions,
/// tap row element and output, 15% slower per multiply-add (more loads per
/// product than the GEMM's 14×32 tile), plus its plane copy (1.25 per
/// element, 2 with stride phases: a gather; bands repeat the rows their
/// taps share) and the write-back (0.5 per output). Calibrated on this
/// repository's zoo at one thread (U-Net's 32×32×16 → 8: 22-30 against
/// 60 µs; DeepLab's 32×32×16 → 16×16×24 at stride 2, which the count
/// keeps on the GEMM: 23 against 19-21 µs), counting the bands of 2
/// threads whatever the pool's
/// size: the choice, and so every result's bits, must not depend on the
/// thread count.
pub(crate) fn planar_pays(g: &Dims) -> bool {
    if Isa::best() != Isa::Avx512 || g.group != 1 {
        return false;
    }
    let Some((rows, _)) = bands(g, 2) else {
        return false;
    };
    let p = Planes::new(g, rows);
    let kdim = g.kh * g.kw * g.c;
    let px = g.n * g.oh * g.ow;
    let runs = if g.dilation[1] == 1 { g.kh } else { g.kh * g.kw };
    let gemm = px * kdim * g.oc.div_ceil(PANEL_WIDTH) + px * (runs * 40 + kdim / 16);
    let fmas = g.n * (g.oh * p.pw).div_ceil(16) * kdim * g.oc.div_ceil(OB) * OB;
    let fill = g.n * g.oh.div_ceil(rows) * p.len(g) * if p.phases > 1 { 8 } else { 5 } / 4;
    let planar = fmas + fmas * 3 / 20 + fill + px * g.oc / 2;
    planar < gemm
}

/// The convolution of `conv2d` (one group, packed weights `w`) on the
/// planar kernel; the caller has checked the geometry and slice lengths.
/// Each band of output rows copies its own planes into its thread's
/// scratch, so a band's thread reads only what it wrote.
pub(crate) fn conv2d_planar(
    g: &Dims,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    y: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    if !Isa::Avx512.is_supported() {
        return Err(kerr("planar convolution needs AVX-512F".to_string()));
    }
    let Some((rows, parallel)) = bands(g, threads) else {
        return Err(kerr(format!(
            "planar convolution: one row's planes pass the scratch budget ({} × {} × {} input)",
            g.h, g.w, g.c
        )));
    };
    let p = Planes::new(g, rows);
    let (image, ximage) = (g.oh * g.ow * g.oc, g.h * g.w * g.c);
    let band_len = rows * g.ow * g.oc;
    let run = |b: usize, (i, yrows): (usize, &mut [f32])| {
        with_scratch(p.len(g), |planes| {
            // SAFETY: the CPU has AVX-512F (checked above); `Planes::new`
            // sized the planes for every block of the band's rows, `w`
            // holds the packed panels of `kh·kw·c` rows (`conv2d` checked
            // its length) and `yrows` whole output rows.
            unsafe {
                fill_planes(g, &p, &x[b * ximage..][..ximage], i * rows, planes);
                rows_avx512(g, &p, planes, w, bias, post, i * rows, yrows);
            }
        })
    };
    let y = &mut y[..g.n * image];
    if parallel {
        y.par_chunks_mut(image).enumerate().for_each(|(b, yimg)| {
            yimg.par_chunks_mut(band_len).enumerate().for_each(|t| run(b, t))
        });
    } else {
        for (b, yimg) in y.chunks_mut(image).enumerate() {
            yimg.chunks_mut(band_len).enumerate().for_each(|t| run(b, t));
        }
    }
    Ok(())
}

/// Copies the rows of one NHWC image `x` that the band from output row
/// `r0` reads into its zero-padded phase planes: per plane row, the
/// padding zeroed and the input columns copied 16 at a time, by 16 × 16
/// transposes in registers where the columns are consecutive pixels
/// (`sx = 1`) of a multiple of 16 channels, else by gathers (`vgatherdps`,
/// one channel at a stride of `sx·c`).
///
/// # Safety
/// The CPU supports AVX-512F; `x` holds one `h × w × c` image and
/// `planes` the `Planes::len` floats of `p`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_planes(g: &Dims, p: &Planes, x: &[f32], r0: usize, planes: &mut [f32]) {
    let [sy, sx] = g.stride;
    let (pt, pl) = (g.pads[0], g.pads[1]);
    // Element offsets of 16 columns `sx` apart (the geometry is bounded,
    // and a plane row's columns lie inside one input row).
    let step = (sx * g.c) as i32;
    let idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(step),
    );
    let cstride = p.phases * p.plane;
    for phase in 0..p.phases {
        let (py, px) = (phase / sx, phase % sx);
        // Plane columns j whose input column j·sx + px − pl is inside.
        let j0 = pl.saturating_sub(px).div_ceil(sx).min(p.pw);
        let j1 = (g.w + pl).saturating_sub(px).div_ceil(sx).clamp(j0, p.pw);
        for ci in 0..g.c {
            let plane = &mut planes[ci * cstride + phase * p.plane..][..p.plane];
            let (body, tail) = plane.split_at_mut(p.ph * p.pw);
            tail.fill(0.0);
            for (i, prow) in body.chunks_exact_mut(p.pw).enumerate() {
                let iy = ((r0 + i) * sy + py) as isize - pt as isize;
                if iy < 0 || iy >= g.h as isize {
                    prow.fill(0.0);
                } else {
                    prow[..j0].fill(0.0);
                    prow[j1..].fill(0.0);
                }
            }
        }
        if j0 == j1 {
            continue;
        }
        let ix0 = j0 * sx + px - pl;
        for i in 0..p.ph {
            let iy = ((r0 + i) * sy + py) as isize - pt as isize;
            if iy < 0 || iy >= g.h as isize {
                continue;
            }
            let src = &x[(iy as usize * g.w + ix0) * g.c..];
            // Columns 16 at a time, every channel of them while their
            // input pixels are in L1.
            for k in (j0..j1).step_by(16) {
                let len = 16.min(j1 - k);
                let m: __mmask16 = if len == 16 { !0 } else { (1u16 << len) - 1 };
                if sx == 1 && g.c.is_multiple_of(16) {
                    let at = phase * p.plane + i * p.pw + k;
                    // SAFETY: the `len` pixels from column ix0 + k − j0
                    // lie inside the row (`src`), and each channel's plane
                    // row holds `len` floats from `at` (`Planes::new`).
                    unsafe {
                        let px0 = src.as_ptr().add((k - j0) * g.c);
                        for ci0 in (0..g.c).step_by(16) {
                            let out = planes.as_mut_ptr().add(ci0 * cstride + at);
                            transpose_16(px0.add(ci0), g.c, len, out, cstride, m);
                        }
                    }
                    continue;
                }
                for ci in 0..g.c {
                    let dst = &mut planes[ci * cstride + phase * p.plane + i * p.pw + k..][..len];
                    // SAFETY: lane l < len reads input column
                    // ix0 + (k − j0 + l)·sx < w of this row, inside `src`;
                    // masked lanes read nothing.
                    unsafe {
                        let base = src.as_ptr().add((k - j0) * sx * g.c + ci);
                        let v = _mm512_mask_i32gather_ps::<4>(
                            _mm512_setzero_ps(),
                            m,
                            idx,
                            base.cast(),
                        );
                        _mm512_mask_storeu_ps(dst.as_mut_ptr(), m, v);
                    }
                }
            }
        }
    }
}

/// Copies `len ≤ 16` pixels' 16 channels (pixel `l`'s at `x + l·c`) into
/// 16 channel rows (channel `q`'s at `out + q·cstride`) through an
/// in-register 16 × 16 transpose: 64 shuffles for 256 floats, against 16
/// gathers that each touch 16 cache lines.
///
/// # Safety
/// AVX-512F; `x` holds the `len` pixels' 16 floats each, every channel row
/// the lanes of mask `m` (the first `len`).
#[inline(always)]
unsafe fn transpose_16(x: *const f32, c: usize, len: usize, out: *mut f32, cstride: usize, m: __mmask16) {
    // SAFETY: as for this function.
    unsafe {
        let r: [__m512; 16] = std::array::from_fn(|l| {
            if l < len {
                _mm512_loadu_ps(x.add(l * c))
            } else {
                _mm512_setzero_ps()
            }
        });
        // Within each 128-bit lane L: a[2p], a[2p + 1] interleave rows 2p
        // and 2p + 1; b[4q + j] holds rows 4q..4q + 3 of column 4L + j.
        let a: [__m512; 16] = std::array::from_fn(|t| {
            let (p, hi) = (t / 2, t % 2 == 1);
            if hi {
                _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1])
            } else {
                _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1])
            }
        });
        let b: [__m512; 16] = std::array::from_fn(|t| {
            let (q, j) = (t / 4, t % 4);
            let (x, y) = (a[4 * q + j / 2], a[4 * q + 2 + j / 2]);
            if j % 2 == 0 {
                _mm512_shuffle_ps::<0x44>(x, y)
            } else {
                _mm512_shuffle_ps::<0xEE>(x, y)
            }
        });
        for j in 0..4 {
            let u01 = _mm512_shuffle_f32x4::<0x44>(b[j], b[4 + j]);
            let u23 = _mm512_shuffle_f32x4::<0xEE>(b[j], b[4 + j]);
            let v01 = _mm512_shuffle_f32x4::<0x44>(b[8 + j], b[12 + j]);
            let v23 = _mm512_shuffle_f32x4::<0xEE>(b[8 + j], b[12 + j]);
            // Column 4L + j: lane L of b[j], b[4 + j], b[8 + j], b[12 + j].
            let cols = [
                _mm512_shuffle_f32x4::<0x88>(u01, v01),
                _mm512_shuffle_f32x4::<0xDD>(u01, v01),
                _mm512_shuffle_f32x4::<0x88>(u23, v23),
                _mm512_shuffle_f32x4::<0xDD>(u23, v23),
            ];
            for (l, col) in cols.into_iter().enumerate() {
                _mm512_mask_storeu_ps(out.add((4 * l + j) * cstride), m, col);
            }
        }
    }
}

/// The band of output rows from `r0` of one image (`yrows` holds its
/// whole rows) from the band's planes.
///
/// # Safety
/// The CPU supports AVX-512F; the arguments are as `conv2d_planar` passes
/// them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_avx512(
    g: &Dims,
    p: &Planes,
    planes: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    r0: usize,
    yrows: &mut [f32],
) {
    let (oc, ow, c, pw) = (g.oc, g.ow, g.c, p.pw);
    let nrows = yrows.len() / (ow * oc);
    let kdim = g.kh * g.kw * c;
    let cstride = p.phases * p.plane;
    let (sy, dy, pt) = (g.stride[0], g.dilation[0], g.pads[0] as isize);
    // The taps along H that read an input row for some output of a block
    // (a range: the union over the rows of each row's range, which may
    // hold a tap reading padding only, at no cost to the result).
    let span = |base_lo: isize, base_hi: isize| {
        (
            tap_range(base_hi, dy, g.kh, g.h).0,
            tap_range(base_lo, dy, g.kh, g.h).1,
        )
    };
    // Per tap row element k = (ky·kw + kx)·c + ci: its first float in the
    // planes (channel ci's phase plane plus the tap's offset).
    let xoff: Vec<usize> = p
        .taps
        .iter()
        .flat_map(|&t| (0..c).map(move |ci| t + ci * cstride))
        .collect();
    // Positions of the band, numbered from its first row.
    let q_end = nrows * pw;
    let (lo, hi) = bounds(post);
    // Per position of a block: its first output float in `yrows`, or
    // `usize::MAX` for a dropped one (ox ≥ ow, or past the rows).
    let mut dst = [usize::MAX; BLOCK];
    let mut q0 = 0;
    while q0 < q_end {
        // Output rows this block touches, and the taps along H that read
        // an input row for at least one of them.
        let (ra, rb) = (q0 / pw, ((q0 + BLOCK - 1) / pw).min(nrows - 1));
        let (ky0, ky1) = span(((r0 + ra) * sy) as isize - pt, ((r0 + rb) * sy) as isize - pt);
        let (mut oy, mut ox) = (ra, q0 % pw);
        for (pos, d) in dst.iter_mut().enumerate() {
            *d = if q0 + pos < q_end && ox < ow {
                (oy * ow + ox) * oc
            } else {
                usize::MAX
            };
            ox += 1;
            if ox == pw {
                (oy, ox) = (oy + 1, 0);
            }
        }
        for o0 in (0..oc).step_by(OB) {
            let wpanel = (o0 / PANEL_WIDTH) * kdim * PANEL_WIDTH + o0 % PANEL_WIDTH;
            let nb = OB.min(oc - o0);
            // SAFETY: the planes hold every position q0 + BLOCK past each
            // tap's offset (`Planes::new`), and the packed panel holds
            // `kdim` rows of 16 floats, zero past `oc`, so o0 + OB ≤ 16·⌈oc/16⌉.
            unsafe {
                let (k0, k1) = (ky0 * g.kw * c, ky1.max(ky0) * g.kw * c);
                let mut acc = block_sums(
                    &xoff[k0..k1],
                    planes.as_ptr().add(q0),
                    w.as_ptr().add(wpanel + k0 * PANEL_WIDTH),
                );
                for (o, acc) in acc.iter_mut().enumerate() {
                    let b = match bias {
                        Some(b) if o0 + o < oc => b[o0 + o],
                        _ => 0.0,
                    };
                    for a in acc.iter_mut() {
                        // As the GEMM's epilogue: the bound first, so NaN is kept.
                        let mut r = _mm512_add_ps(*a, _mm512_set1_ps(b));
                        if let Some(lo) = lo {
                            r = _mm512_max_ps(_mm512_set1_ps(lo), r);
                        }
                        if let Some(hi) = hi {
                            r = _mm512_min_ps(_mm512_set1_ps(hi), r);
                        }
                        *a = r;
                    }
                }
                // Positions to NHWC: each vector's 8 × 16 block transposed
                // in registers, then one masked store of `nb` floats per
                // live position.
                let m = (1u16 << nb) - 1;
                let out = yrows.as_mut_ptr();
                for v in 0..V {
                    let r: [__m512; OB] = std::array::from_fn(|o| acc[o][v]);
                    let pos = &dst[16 * v..16 * v + 16];
                    store_transposed(r, pos, o0, m, out);
                }
            }
        }
        q0 += BLOCK;
    }
}

/// The block's sums: for each tap row element (its first float `x +
/// off` in the planes, its 16 packed weights from `w` on), the block's
/// `V` position vectors times the weights of `OB` outputs.
///
/// # Safety
/// AVX-512F; `x + off` holds `16·V` floats for each `off`, `w` a packed
/// row of 16 floats for each.
#[inline(always)]
unsafe fn block_sums(xoff: &[usize], x: *const f32, w: *const f32) -> [[__m512; V]; OB] {
    // SAFETY: AVX-512F, as for this function.
    let mut acc = [[unsafe { _mm512_setzero_ps() }; V]; OB];
    let mut wp = w;
    for &off in xoff {
        // SAFETY: as for this function.
        unsafe {
            let xp = x.add(off);
            let mut xv = [_mm512_setzero_ps(); V];
            for (v, xv) in xv.iter_mut().enumerate() {
                *xv = _mm512_loadu_ps(xp.add(16 * v));
            }
            for (o, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*wp.add(o));
                for (a, &xv) in acc.iter_mut().zip(&xv) {
                    *a = _mm512_fmadd_ps(wv, xv, *a);
                }
            }
            wp = wp.add(PANEL_WIDTH);
        }
    }
    acc
}

/// Stores 8 vectors `r[o]` (output channel `o0 + o` of 16 consecutive
/// positions) as each position's 8 channels at `out + pos[i] + o0`, the
/// first lanes of mask `m` only; positions at `usize::MAX` are dropped.
///
/// # Safety
/// AVX-512F; every live position's `m` lanes lie inside `out`'s rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_transposed(r: [__m512; OB], pos: &[usize], o0: usize, m: u16, out: *mut f32) {
    // Within each 128-bit lane L (positions 4L..4L+3): s[j] holds
    // channels 0..3 of position 4L + j, s[4 + j] channels 4..7.
    let t = [
        _mm512_unpacklo_ps(r[0], r[1]),
        _mm512_unpackhi_ps(r[0], r[1]),
        _mm512_unpacklo_ps(r[2], r[3]),
        _mm512_unpackhi_ps(r[2], r[3]),
        _mm512_unpacklo_ps(r[4], r[5]),
        _mm512_unpackhi_ps(r[4], r[5]),
        _mm512_unpacklo_ps(r[6], r[7]),
        _mm512_unpackhi_ps(r[6], r[7]),
    ];
    let s = [
        _mm512_shuffle_ps::<0x44>(t[0], t[2]),
        _mm512_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm512_shuffle_ps::<0x44>(t[1], t[3]),
        _mm512_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm512_shuffle_ps::<0x44>(t[4], t[6]),
        _mm512_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm512_shuffle_ps::<0x44>(t[5], t[7]),
        _mm512_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    let store = |z: __m512, lo: usize, hi: usize| {
        // SAFETY: as for this function; a masked lane is not accessed.
        unsafe {
            if lo != usize::MAX {
                _mm512_mask_storeu_ps(out.add(lo + o0), m, z);
            }
            if hi != usize::MAX {
                _mm512_mask_storeu_ps(out.wrapping_add(hi + o0).wrapping_sub(8), m << 8, z);
            }
        }
    };
    for j in 0..4 {
        let (a, b) = (s[j], s[4 + j]);
        // Lanes [a0, b0, a1, b1]: positions j (low half) and 4 + j.
        let u = _mm512_shuffle_f32x4::<0xD8>(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0x44>(a, b),
        );
        // Lanes [a2, b2, a3, b3]: positions 8 + j and 12 + j.
        let w = _mm512_shuffle_f32x4::<0xD8>(
            _mm512_shuffle_f32x4::<0xEE>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        );
        store(u, pos[j], pos[4 + j]);
        store(w, pos[8 + j], pos[12 + j]);
    }
}

/// The lower and upper bounds `post` applies after the bias (relu is a
/// lower bound of 0, then the clip's), as the GEMM's tile epilogue takes
/// them: `max(lo, x)` then `min(hi, x)`.
fn bounds(post: Post) -> (Option<f32>, Option<f32>) {
    let relu = post.relu.then_some(0.0f32);
    match post.clip {
        Some([lo, hi]) => (Some(relu.map_or(lo, |r| r.max(lo))), Some(hi)),
        None => (relu, None),
    }
}
