//! Integer NHWC convolution (`Step::QConv2d`): i8/u8 activations, i8
//! weights `[oc][kh][kw][c/group]`, exact i32 accumulation, and the
//! requantization `clamp(round_half_even(fma(acc, scale, shift)) + y_zero,
//! y_min, y_max)` per output channel.
//!
//! [`qconv2d_scalar`] is the portable implementation every executor agrees
//! with bit for bit (the GPU kernel does the same f32 operations): for each
//! output pixel and group the im2col row is gathered once as i32 (padding
//! reads as the input's zero point), then dotted with each of the group's
//! weight rows. Pixels are split across the pool's threads.
//!
//! [`qconv2d`] runs products with enough output pixels on the int8 GEMM
//! instead (`int8::gemm_u8s8`: AMX, AVX-512 VNNI, AVX2 or portable): the
//! im2col rows of a block of pixels as u8 (i8 inputs shifted by 128 and the
//! GEMM's zero point 128 taking it back), the group's weights packed per
//! call, the same requantization. Integer sums are exact (wrapping alike),
//! so both paths give the same bytes.
//!
//! Invariant: every slice length is checked against the geometry first, so
//! a bad plan is an error, never an out-of-bounds access.

use rayon::prelude::*;

use super::KernelError;
use super::int8::{Int8Level, PackedS8, gemm_u8s8, pack_b_s8};
use super::qdepthwise::{self, DepthwiseWeights};
use super::qdirect::{self, DirectWeights};
use crate::plan::{ConvGeom, QuantConv};

/// Output pixels below which the scalar loop runs (packing the weights
/// per call would cost more than it saves).
const GEMM_MIN_PIXELS: usize = 16;

/// Output pixels per block of the GEMM path (bounds its im2col buffer).
const BLOCK_PIXELS: usize = 1024;

/// The requantization of one accumulator (shared with the tests and, as a
/// specification, with the GPU kernel).
pub fn requantize(acc: i32, scale: f32, shift: f32, p: &QuantConv) -> i32 {
    let r = (acc as f32).mul_add(scale, shift).round_ties_even();
    // `as` saturates (NaN → 0); clamping before adding the zero point keeps
    // the sum in range.
    let lo = (p.y_min as i64 - p.y_zero as i64) as f32;
    let hi = (p.y_max as i64 - p.y_zero as i64) as f32;
    // max then min, not `clamp`: a crafted plan with crossed bounds gets
    // the upper one, never a panic (NaN stays NaN through both).
    let c = if r.is_nan() { r } else { r.max(lo).min(hi) };
    (c as i64 + p.y_zero as i64) as i32
}

/// The weights of a convolution packed for the int8 GEMM, one B per group
/// (made once, e.g. when a session loads).
#[derive(Clone, Debug)]
pub struct PackedQConv {
    groups: Vec<PackedS8>,
    /// The weights of the direct NHWC kernels, where they run (then
    /// `groups` is empty).
    direct: Option<DirectWeights>,
    /// The weights of the depthwise kernel, where it runs (then the other
    /// two are empty).
    depthwise: Option<DepthwiseWeights>,
}

/// Whether [`qconv2d`] runs `g` with `p` on the int8 GEMM: enough output
/// pixels, a non-empty window, and the input's zero point a u8 once i8
/// inputs are shifted by 128.
pub fn uses_gemm(g: &ConvGeom, p: &QuantConv) -> bool {
    let pixels = g.n.saturating_mul(g.oh).saturating_mul(g.ow);
    let taps = g.kh.saturating_mul(g.kw).saturating_mul(g.c);
    pixels >= GEMM_MIN_PIXELS as u64 && taps > 0 && pad_fits(p)
}

/// Whether the padding byte of the u8 operand (the input's zero point,
/// plus 128 for i8 inputs) is a u8.
fn pad_fits(p: &QuantConv) -> bool {
    (0..=255).contains(&(p.x_zero + if p.x_signed { 128 } else { 0 }))
}

/// Whether weights packed by [`pack_qconv`] are used for `g` with `p`
/// (the executor packs them at load then).
pub fn uses_packed(g: &ConvGeom, p: &QuantConv) -> bool {
    qdepthwise::applies(g) || uses_gemm(g, p) || (qdirect::best_level().is_some() && qdirect::applies(g) && pad_fits(p))
}

/// Packs the weights `w` (`[oc][kh][kw][c/group]`) of `g`: for the direct
/// NHWC kernels where this CPU has them and they take `g`, else for the
/// GEMM path.
pub fn pack_qconv(g: &ConvGeom, w: &[i8]) -> Result<PackedQConv, KernelError> {
    if qdepthwise::applies(g) {
        return Ok(PackedQConv { groups: Vec::new(), direct: None, depthwise: Some(qdepthwise::pack(g, w)?) });
    }
    match qdirect::best_level() {
        Some(level) if qdirect::applies(g) => pack_qconv_direct(g, w, level),
        _ => pack_qconv_gemm(g, w),
    }
}

/// [`pack_qconv`] for the direct kernels of `level` (tests, benchmarks).
pub fn pack_qconv_direct(g: &ConvGeom, w: &[i8], level: Int8Level) -> Result<PackedQConv, KernelError> {
    Ok(PackedQConv {
        groups: Vec::new(),
        direct: Some(qdirect::pack(g, w, level)?),
        depthwise: None,
    })
}

/// [`pack_qconv`] for the GEMM path.
pub fn pack_qconv_gemm(g: &ConvGeom, w: &[i8]) -> Result<PackedQConv, KernelError> {
    let err = |m: String| KernelError::new(format!("qconv2d: {m}"));
    let group = usize::try_from(g.group).map_err(|_| err("too many groups".into()))?;
    if group == 0 || !g.c.is_multiple_of(g.group) || !g.oc.is_multiple_of(g.group) {
        return Err(err(format!(
            "group {group} does not divide c {} and oc {}",
            g.c, g.oc
        )));
    }
    let kk = usize::try_from(g.kh * g.kw * (g.c / g.group))
        .map_err(|_| err("window too large".into()))?;
    let ocg = usize::try_from(g.oc / g.group).map_err(|_| err("too many channels".into()))?;
    if kk
        .checked_mul(ocg)
        .and_then(|v| v.checked_mul(group))
        .is_none_or(|need| need > w.len())
    {
        return Err(err(format!(
            "w holds {} elements, fewer than the geometry needs",
            w.len()
        )));
    }
    let mut bt = vec![0i8; kk * ocg];
    let mut groups = Vec::with_capacity(group);
    for gi in 0..group {
        // The group's B (`kk × ocg`) is its weight rows transposed.
        for o in 0..ocg {
            for (k, &v) in w[(gi * ocg + o) * kk..][..kk].iter().enumerate() {
                bt[k * ocg + o] = v;
            }
        }
        groups.push(pack_b_s8(kk, ocg, &bt, ocg)?);
    }
    Ok(PackedQConv {
        groups,
        direct: None,
        depthwise: None,
    })
}

/// Runs the convolution; `x`, `y` are raw bytes of the storage type;
/// `packed`: `w` packed by [`pack_qconv`] (packed here when the GEMM path
/// runs without it).
#[allow(clippy::too_many_arguments)]
pub fn qconv2d(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    w: &[i8],
    packed: Option<&PackedQConv>,
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    let c = check(g, x, w, comp, scale, shift, y)?;
    if c.pixels == 0 || c.oc == 0 {
        // Nothing to write; the blocked paths below assume some work.
        return Ok(());
    }
    if qdepthwise::applies(g) {
        let made;
        let dw = match packed.and_then(|pk| pk.depthwise.as_ref()) {
            Some(dw) => dw,
            None => {
                made = qdepthwise::pack(g, w)?;
                &made
            }
        };
        return qdepthwise::run(g, p, x, dw, comp, scale, shift, y);
    }
    if let Some(dw) = packed.and_then(|pk| pk.direct.as_ref())
        && pad_fits(p)
    {
        return qdirect::run(g, p, x, dw, comp, scale, shift, y);
    }
    if !uses_gemm(g, p) {
        return qconv2d_scalar(g, p, x, w, comp, scale, shift, y);
    }
    let made;
    let packed = match packed {
        Some(pk) => pk,
        None => {
            made = pack_qconv_gemm(g, w)?;
            &made
        }
    };
    qconv2d_gemm(g, p, x, packed, w, comp, scale, shift, y)
}

/// A convolution whose slices were checked against its geometry: the
/// extents both paths loop over and where its windows read.
struct Checked {
    oc: usize,
    group: usize,
    /// Output channels per group.
    ocg: usize,
    /// `kh·kw·cg`: one im2col row, one weight row.
    kk: usize,
    /// `n·oh·ow`.
    pixels: usize,
    win: Window,
}

/// Checks the slices against the geometry (see [`Checked`]).
#[allow(clippy::too_many_arguments)]
fn check(
    g: &ConvGeom,
    x: &[u8],
    w: &[i8],
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &[u8],
) -> Result<Checked, KernelError> {
    let err = |m: String| KernelError::new(format!("qconv2d: {m}"));
    let dims = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.kh, g.kw, g.group];
    if dims
        .iter()
        .chain(&g.stride)
        .chain(&g.dilation)
        .chain(&g.pads)
        .any(|&v| u32::try_from(v).is_err())
    {
        return Err(err("an extent, stride, dilation or pad is too large".into()));
    }
    let [n, h, wd, c, oh, ow, oc, kh, kw, group] = dims.map(|v| v as usize);
    if group == 0 || !c.is_multiple_of(group) || !oc.is_multiple_of(group) {
        return Err(err(format!(
            "group {group} does not divide c {c} and oc {oc}"
        )));
    }
    let kk = kh * kw * (c / group);
    let need = |a: &[usize]| a.iter().try_fold(1usize, |acc, &v| acc.checked_mul(v));
    let lens = [
        ("x", need(&[n, h, wd, c]), x.len()),
        ("w", need(&[oc, kk]), w.len()),
        ("y", need(&[n, oh, ow, oc]), y.len()),
        ("comp", Some(oc), comp.len()),
        ("scale", Some(oc), scale.len()),
        ("shift", Some(oc), shift.len()),
    ];
    for (name, want, have) in lens {
        match want {
            Some(wn) if wn <= have => {}
            _ => {
                return Err(err(format!(
                    "{name} holds {have} elements, fewer than the geometry needs"
                )));
            }
        }
    }
    Ok(Checked {
        oc,
        group,
        ocg: oc / group,
        kk,
        pixels: n * oh * ow,
        win: Window::new(g, [n, h, wd, c, oh, ow, oc, kh, kw, group]),
    })
}

/// Output channel `o`'s stored value from its accumulator `sum`: plus its
/// compensation `comp`, requantized with `scale`, `shift`, as the output's
/// type.
#[inline(always)]
fn output(p: &QuantConv, sum: i32, comp: i32, scale: f32, shift: f32) -> u8 {
    let v = requantize(sum.wrapping_add(comp), scale, shift, p);
    if p.y_signed { v as i8 as u8 } else { v as u8 }
}

/// One pixel's outputs of group `gi` (`sums`: its `ocg` accumulators) into
/// `out`, the pixel's `oc` bytes.
#[inline(always)]
fn output_row(p: &QuantConv, gi: usize, sums: &[i32], comp: &[i32], scale: &[f32], shift: &[f32], out: &mut [u8]) {
    let base = gi * sums.len();
    let n = sums.len();
    let (comp, scale, shift, out) = (&comp[base..base + n], &scale[base..base + n], &shift[base..base + n], &mut out[base..base + n]);
    // `requantize` with its bounds hoisted, so the loop vectorizes: after
    // the clamp the value is in range (NaN converts to 0 as there), and
    // the low byte of the sum is the stored u8 or i8.
    let lo = (p.y_min as i64 - p.y_zero as i64) as f32;
    let hi = (p.y_max as i64 - p.y_zero as i64) as f32;
    let zero = p.y_zero as i32;
    for o in 0..n {
        let r = (sums[o].wrapping_add(comp[o]) as f32).mul_add(scale[o], shift[o]).round_ties_even();
        // NaN gives 0 as `as` would; the select and the unchecked
        // conversion vectorize where `as`'s saturation does not.
        let c = if r.is_nan() { 0.0 } else { r.max(lo).min(hi) };
        // SAFETY: `c` is finite and within [lo, hi], inside i32.
        out[o] = (unsafe { c.to_int_unchecked::<i32>() } + zero) as u8;
    }
}

/// The outputs of group `gi` for consecutive pixels: `sums` holds `ocg`
/// accumulators per pixel, `out` the pixels' `oc` bytes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn output_rows(p: &QuantConv, gi: usize, ocg: usize, oc: usize, sums: &[i32], comp: &[i32], scale: &[f32], shift: &[f32], out: &mut [u8]) {
    for (s, o) in sums.chunks_exact(ocg).zip(out.chunks_exact_mut(oc)) {
        output_row(p, gi, s, comp, scale, shift, o);
    }
}

/// [`output_rows`] compiled with FMA and SSE4.1 (AVX2 vectors), where the
/// baseline build would call libm's `fmaf` and `rintf` per element. The
/// same operations, so the same bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,sse4.1")]
#[allow(clippy::too_many_arguments)]
unsafe fn output_rows_avx2(p: &QuantConv, gi: usize, ocg: usize, oc: usize, sums: &[i32], comp: &[i32], scale: &[f32], shift: &[f32], out: &mut [u8]) {
    output_rows(p, gi, ocg, oc, sums, comp, scale, shift, out)
}

/// [`output_rows`] on the best instructions this CPU has.
#[allow(clippy::too_many_arguments)]
pub(super) fn requantize_rows(p: &QuantConv, gi: usize, ocg: usize, oc: usize, sums: &[i32], comp: &[i32], scale: &[f32], shift: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static FAST: OnceLock<bool> = OnceLock::new();
        let fast = *FAST.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("sse4.1")
        });
        if fast {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { output_rows_avx2(p, gi, ocg, oc, sums, comp, scale, shift, out) };
        }
    }
    output_rows(p, gi, ocg, oc, sums, comp, scale, shift, out)
}

/// Pixels per parallel chunk of the requantization.
const REQUANT_PIXELS: usize = 64;

/// Where a convolution's windows read its NHWC input (extents from
/// [`check`]).
pub(super) struct Window {
    h: usize,
    w: usize,
    c: usize,
    cg: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    stride: [usize; 2],
    dilation: [usize; 2],
    /// Top, left.
    pads: [usize; 2],
}

impl Window {
    pub(super) fn new(g: &ConvGeom, [_, h, w, c, oh, ow, _, kh, kw, group]: [usize; 10]) -> Window {
        Window {
            h,
            w,
            c,
            cg: c / group,
            oh,
            ow,
            kh,
            kw,
            stride: g.stride.map(|v| v as usize),
            dilation: g.dilation.map(|v| v as usize),
            pads: [g.pads[0] as usize, g.pads[1] as usize],
        }
    }

    /// The im2col row of output pixel `pix` and group `gi` into `row`
    /// (`kh·kw·cg` values, tap-major): each input byte through `load`,
    /// `pad` where the window leaves the image.
    pub(super) fn gather<T: Copy>(
        &self,
        x: &[u8],
        pix: usize,
        gi: usize,
        row: &mut [T],
        pad: T,
        load: impl Fn(u8) -> T,
    ) {
        let Window {
            h,
            w,
            c,
            cg,
            oh,
            ow,
            kh,
            kw,
            ..
        } = *self;
        let (img, rest) = (pix / (oh * ow), pix % (oh * ow));
        let (oy, ox) = (rest / ow, rest % ow);
        for ky in 0..kh {
            let iy = (oy * self.stride[0] + ky * self.dilation[0])
                .checked_sub(self.pads[0])
                .filter(|&v| v < h);
            for kx in 0..kw {
                let ix = (ox * self.stride[1] + kx * self.dilation[1])
                    .checked_sub(self.pads[1])
                    .filter(|&v| v < w);
                let dst = &mut row[(ky * kw + kx) * cg..][..cg];
                match (iy, ix) {
                    (Some(iy), Some(ix)) => {
                        let src = &x[((img * h + iy) * w + ix) * c + gi * cg..][..cg];
                        for (d, &s) in dst.iter_mut().zip(src) {
                            *d = load(s);
                        }
                    }
                    _ => dst.fill(pad),
                }
            }
        }
    }
}

impl Window {
    /// [`Window::gather`] of bytes with `load = |s| s ^ flip`, faster: the
    /// taps of one window row that lie inside the image are one contiguous
    /// run of the NHWC input when the group spans every channel and the
    /// horizontal dilation is 1 (a 7×7 stem on 3 channels copies 21 bytes
    /// at a time instead of 3), and the flip runs over the whole row.
    pub(super) fn gather_u8(&self, x: &[u8], pix: usize, gi: usize, row: &mut [u8], pad: u8, flip: u8) {
        let Window { h, w, c, cg, oh, ow, kh, kw, .. } = *self;
        if cg != c || self.dilation[1] != 1 {
            return self.gather(x, pix, gi, row, pad, |s| s ^ flip);
        }
        let (img, rest) = (pix / (oh * ow), pix % (oh * ow));
        let (oy, ox) = (rest / ow, rest % ow);
        let row = &mut row[..kh * kw * c];
        // Taps kx in kx0..kx1 read columns bx + kx inside 0..w.
        let bx = (ox * self.stride[1]) as isize - self.pads[1] as isize;
        let kx0 = (-bx).clamp(0, kw as isize) as usize;
        let kx1 = (w as isize - bx).clamp(kx0 as isize, kw as isize) as usize;
        let raw_pad = pad ^ flip;
        for ky in 0..kh {
            let dst = &mut row[ky * kw * c..][..kw * c];
            let iy = (oy * self.stride[0] + ky * self.dilation[0]).checked_sub(self.pads[0]).filter(|&v| v < h);
            let Some(iy) = iy.filter(|_| kx0 < kx1) else {
                dst.fill(raw_pad);
                continue;
            };
            dst[..kx0 * c].fill(raw_pad);
            let start = ((img * h + iy) * w) as isize + bx + kx0 as isize;
            dst[kx0 * c..kx1 * c].copy_from_slice(&x[start as usize * c..][..(kx1 - kx0) * c]);
            dst[kx1 * c..].fill(raw_pad);
        }
        if flip != 0 {
            for v in row.iter_mut() {
                *v ^= flip;
            }
        }
    }
}

/// [`qconv2d`] on the int8 GEMM (see the module doc); the input's zero
/// point plus 128 for i8 inputs must be a u8.
#[allow(clippy::too_many_arguments)]
fn qconv2d_gemm(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    packed: &PackedQConv,
    w: &[i8],
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    let Checked {
        oc,
        group,
        ocg,
        kk,
        pixels,
        win,
    } = check(g, x, w, comp, scale, shift, y)?;
    if pixels == 0 || oc == 0 {
        return Ok(());
    }
    // i8 inputs as u8 shifted by 128; the GEMM takes the 128 back.
    let (flip, a_zero) = if p.x_signed { (0x80u8, 128) } else { (0, 0) };
    let pad = (p.x_zero + a_zero) as u8;
    let mut a = vec![0u8; BLOCK_PIXELS.min(pixels) * kk];
    let mut acc = vec![0i32; BLOCK_PIXELS.min(pixels) * ocg];
    if packed.groups.len() != group || packed.groups.iter().any(|b| b.k() != kk || b.n() != ocg) {
        return Err(KernelError::new(
            "qconv2d: the packed weights do not match the geometry".to_string(),
        ));
    }
    for (gi, b) in packed.groups.iter().enumerate() {
        for p0 in (0..pixels).step_by(BLOCK_PIXELS) {
            let rows = BLOCK_PIXELS.min(pixels - p0);
            a[..rows * kk]
                .par_chunks_mut(kk)
                .enumerate()
                .for_each(|(r, row)| win.gather_u8(x, p0 + r, gi, row, pad, flip));
            gemm_u8s8(
                rows,
                ocg,
                kk,
                &a[..rows * kk],
                kk,
                a_zero,
                b.as_ref(),
                &mut acc[..rows * ocg],
                ocg,
            )?;
            y[p0 * oc..(p0 + rows) * oc]
                .par_chunks_mut(oc * REQUANT_PIXELS)
                .zip(acc[..rows * ocg].par_chunks(ocg * REQUANT_PIXELS))
                .for_each(|(out, sums)| requantize_rows(p, gi, ocg, oc, sums, comp, scale, shift, out));
        }
    }
    Ok(())
}

/// [`qconv2d`] as plain loops over pixels (the specification).
#[allow(clippy::too_many_arguments)]
pub fn qconv2d_scalar(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    w: &[i8],
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
    let Checked {
        oc,
        group,
        ocg,
        kk,
        pixels,
        win,
    } = check(g, x, w, comp, scale, shift, y)?;
    if pixels == 0 || oc == 0 {
        return Ok(());
    }
    let load = |b: u8| if p.x_signed { b as i8 as i32 } else { b as i32 };
    y[..pixels * oc]
        .par_chunks_mut(oc)
        .enumerate()
        .for_each_init(
            || vec![0i32; kk],
            |row, (pix, out)| {
                for gi in 0..group {
                    win.gather(x, pix, gi, row, p.x_zero, load);
                    for o in gi * ocg..(gi + 1) * ocg {
                        let wr = &w[o * kk..][..kk];
                        let dot = row
                            .iter()
                            .zip(wr)
                            .fold(0i32, |a, (&xv, &wv)| a.wrapping_add(xv * wv as i32));
                        out[o] = output(p, dot, comp[o], scale[o], shift[o]);
                    }
                }
            },
        );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testdata::bytes;
    use crate::plan::QuantElem;

    fn geom(
        n: u64,
        hw: u64,
        c: u64,
        oc: u64,
        k: u64,
        stride: u64,
        pad: u64,
        dil: u64,
        group: u64,
    ) -> ConvGeom {
        let out = (hw + 2 * pad - dil * (k - 1) - 1) / stride + 1;
        ConvGeom {
            n,
            h: hw,
            w: hw + 1,
            c,
            oh: out,
            ow: (hw + 1 + 2 * pad - dil * (k - 1) - 1) / stride + 1,
            oc,
            kh: k,
            kw: k,
            stride: [stride; 2],
            dilation: [dil; 2],
            pads: [pad; 4],
            group,
        }
    }

    /// The parameters of the tests' cases: an output zero point and a clip
    /// inside the output type's range.
    fn quant(x_signed: bool, x_zero: i32, y_signed: bool) -> QuantConv {
        QuantConv {
            x_signed,
            x_zero,
            y_signed,
            y_zero: if y_signed { -3 } else { 7 },
            y_min: if y_signed { -100 } else { 0 },
            y_max: if y_signed { 127 } else { 200 },
            elem: QuantElem::Int8,
        }
    }

    /// The levels of the direct kernels this CPU runs (the others printed
    /// as skipped).
    fn direct_levels() -> Vec<Int8Level> {
        let all = [Int8Level::Amx, Int8Level::Avx512Vnni];
        for l in all.into_iter().filter(|&l| !qdirect::supports(l)) {
            println!("direct int8 convolution: level {l} skipped: this cpu lacks it");
        }
        all.into_iter().filter(|&l| qdirect::supports(l)).collect()
    }

    /// The GEMM path gives the scalar loops' bytes: i8 and u8 inputs with
    /// zero points at the ends of their ranges (padding reads them), groups,
    /// strides, dilation, 1×1 and 3×3, more pixels than one block, i8 and
    /// u8 outputs with clips.
    #[test]
    fn gemm_path_matches_the_scalar_loops() {
        let cases = [
            (geom(1, 9, 8, 16, 3, 1, 1, 1, 1), true, -128, true),
            (geom(2, 12, 6, 9, 3, 2, 1, 1, 3), false, 255, false),
            (geom(1, 35, 16, 24, 1, 1, 0, 1, 1), false, 0, true),
            (geom(1, 40, 4, 8, 3, 1, 2, 2, 2), true, 127, false),
            (geom(1, 7, 3, 5, 5, 1, 2, 1, 1), false, 128, false),
        ];
        for (i, (g, x_signed, x_zero, y_signed)) in cases.into_iter().enumerate() {
            let q = quant(x_signed, x_zero, y_signed);
            let kk = (g.kh * g.kw * g.c / g.group) as usize;
            let oc = g.oc as usize;
            let x = bytes((g.n * g.h * g.w * g.c) as usize, 1 + i as u32);
            let w: Vec<i8> = bytes(oc * kk, 100 + i as u32)
                .into_iter()
                .map(|b| b as i8)
                .collect();
            let comp: Vec<i32> = (0..oc).map(|o| (o as i32 * 977) % 5000 - 2500).collect();
            let scale: Vec<f32> = (0..oc).map(|o| 1.0 / (300.0 + 37.0 * o as f32)).collect();
            let shift: Vec<f32> = (0..oc).map(|o| (o as f32 - 2.0) * 0.75).collect();
            let len = (g.n * g.oh * g.ow) as usize * oc;
            assert!(
                len / oc >= GEMM_MIN_PIXELS,
                "case {i} is too small for the GEMM path"
            );
            let (mut fast, mut slow) = (vec![0u8; len], vec![1u8; len]);
            let packed = pack_qconv_gemm(&g, &w).unwrap();
            qconv2d_gemm(&g, &q, &x, &packed, &w, &comp, &scale, &shift, &mut fast).unwrap();
            let mut again = vec![2u8; len];
            qconv2d(&g, &q, &x, &w, None, &comp, &scale, &shift, &mut again).unwrap();
            assert_eq!(again, fast, "case {i}: packing on the fly");
            qconv2d_scalar(&g, &q, &x, &w, &comp, &scale, &shift, &mut slow).unwrap();
            assert_eq!(fast, slow, "case {i}: {g:?}");
            // The clip is reached both ways, so the comparison covers it.
            let lo = if y_signed {
                (q.y_min as i8) as u8
            } else {
                q.y_min as u8
            };
            assert!(slow.contains(&lo), "case {i}: no output at the lower clip");
        }
        let big = geom(1, 40, 8, 8, 3, 1, 1, 1, 1);
        assert!(
            big.oh * big.ow > BLOCK_PIXELS as u64,
            "one case spans two pixel blocks"
        );
    }

    /// The depthwise kernel gives the scalar loops' bytes: 3×3 and 5×5,
    /// strides 1 and 2, dilation 2, pads that make border pixels read the
    /// zero point, channel counts that leave vector tails, i8 and u8 inputs
    /// and outputs; packed at load and on the fly.
    #[test]
    fn depthwise_kernel_matches_the_scalar_loops() {
        let cases = [
            (geom(1, 9, 32, 32, 3, 1, 1, 1, 32), false, 3, false),
            (geom(2, 12, 19, 19, 3, 2, 1, 1, 19), true, -128, true),
            (geom(1, 11, 72, 72, 5, 2, 2, 1, 72), false, 255, true),
            (geom(1, 10, 8, 8, 3, 1, 2, 2, 8), true, 127, false),
            (geom(1, 6, 3, 3, 3, 1, 0, 1, 3), false, 0, false),
            // 1×1 and 2×2 windows (unused taps of the VNNI kernel's 4),
            // 40 channels (a 16-channel tail), no padding.
            (geom(1, 7, 40, 40, 1, 1, 0, 1, 40), true, 0, false),
            (geom(2, 9, 40, 40, 2, 1, 0, 1, 40), false, 200, true),
        ];
        for (i, (g, x_signed, x_zero, y_signed)) in cases.into_iter().enumerate() {
            assert!(qdepthwise::applies(&g), "case {i} is depthwise");
            let q = quant(x_signed, x_zero, y_signed);
            let (taps, oc) = ((g.kh * g.kw) as usize, g.oc as usize);
            let x = bytes((g.n * g.h * g.w * g.c) as usize, 31 + i as u32);
            let w: Vec<i8> = bytes(oc * taps, 300 + i as u32).into_iter().map(|b| b as i8).collect();
            let comp: Vec<i32> = (0..oc).map(|o| (o as i32 * 577) % 3000 - 1500).collect();
            let scale: Vec<f32> = (0..oc).map(|o| 1.0 / (40.0 + 13.0 * o as f32)).collect();
            let shift: Vec<f32> = (0..oc).map(|o| (o as f32 - 2.0) * 0.25).collect();
            let len = (g.n * g.oh * g.ow) as usize * oc;
            let mut slow = vec![1u8; len];
            qconv2d_scalar(&g, &q, &x, &w, &comp, &scale, &shift, &mut slow).unwrap();
            let packed = pack_qconv(&g, &w).unwrap();
            assert!(packed.depthwise.is_some(), "case {i}: packed for the depthwise kernel");
            let (mut fast, mut again) = (vec![0u8; len], vec![2u8; len]);
            qconv2d(&g, &q, &x, &w, Some(&packed), &comp, &scale, &shift, &mut fast).unwrap();
            qconv2d(&g, &q, &x, &w, None, &comp, &scale, &shift, &mut again).unwrap();
            assert_eq!(fast, slow, "case {i}: {g:?}");
            assert_eq!(again, slow, "case {i}: packing on the fly");
            // Every kernel this CPU has, whichever the dispatcher picks.
            let d = crate::kernels::conv::Dims::new(&g).unwrap();
            for k in qdepthwise::Kernel::ALL {
                if !k.is_supported() {
                    println!("depthwise int8 convolution: kernel {k:?} skipped: this cpu lacks it");
                    continue;
                }
                if !qdepthwise::takes(k, &d, &q, packed.depthwise.as_ref().unwrap()) {
                    continue;
                }
                let mut out = vec![3u8; len];
                qdepthwise::run_kernel(k, &d, &q, &x, packed.depthwise.as_ref().unwrap(), &comp, &scale, &shift, &mut out).unwrap();
                assert_eq!(out, slow, "case {i}: kernel {k:?}");
            }
        }
    }

    /// The direct NHWC kernels give the scalar loops' bytes at every level
    /// this CPU has: both modes (padded taps, and im2col for a 7×7 stem on
    /// 3 channels), channels not a multiple of 4 or 64, output channels
    /// not a multiple of 16, strides, dilation, asymmetric-looking pads,
    /// two images, rows shorter and longer than one block, i8 and u8
    /// inputs with zero points at the ends of their ranges.
    #[test]
    fn direct_kernels_match_the_scalar_loops() {
        let levels = direct_levels();
        let cases = [
            (geom(1, 9, 64, 64, 3, 1, 1, 1, 1), false, 3, false),
            (geom(2, 12, 6, 9, 3, 2, 1, 1, 1), true, -128, true),
            (geom(1, 35, 16, 24, 1, 1, 0, 1, 1), false, 0, true),
            (geom(1, 20, 3, 40, 7, 2, 3, 1, 1), false, 255, false),
            // A stem of i8 inputs over two images (32-byte window rows).
            (geom(2, 11, 3, 20, 7, 2, 3, 1, 1), true, -7, true),
            (geom(1, 17, 70, 33, 3, 1, 2, 2, 1), true, 127, false),
            (geom(1, 5, 128, 20, 1, 2, 0, 1, 1), true, 5, true),
            (geom(2, 3, 8, 16, 3, 1, 1, 1, 1), false, 128, false),
            // 1×1 stride 1 over two images of 7-pixel rows: blocks run
            // across rows and images.
            (geom(2, 7, 64, 40, 1, 1, 0, 1, 1), false, 9, true),
        ];
        for (i, (g, x_signed, x_zero, y_signed)) in cases.into_iter().enumerate() {
            let q = quant(x_signed, x_zero, y_signed);
            let kk = (g.kh * g.kw * g.c) as usize;
            let oc = g.oc as usize;
            let x = bytes((g.n * g.h * g.w * g.c) as usize, 7 + i as u32);
            let w: Vec<i8> = bytes(oc * kk, 200 + i as u32).into_iter().map(|b| b as i8).collect();
            let comp: Vec<i32> = (0..oc).map(|o| (o as i32 * 733) % 4000 - 2000).collect();
            let scale: Vec<f32> = (0..oc).map(|o| 1.0 / (200.0 + 41.0 * o as f32)).collect();
            let shift: Vec<f32> = (0..oc).map(|o| (o as f32 - 3.0) * 0.5).collect();
            let len = (g.n * g.oh * g.ow) as usize * oc;
            let mut slow = vec![1u8; len];
            qconv2d_scalar(&g, &q, &x, &w, &comp, &scale, &shift, &mut slow).unwrap();
            for &level in &levels {
                let packed = pack_qconv_direct(&g, &w, level).unwrap();
                let mut fast = vec![0u8; len];
                qconv2d(&g, &q, &x, &w, Some(&packed), &comp, &scale, &shift, &mut fast).unwrap();
                assert_eq!(fast, slow, "case {i} level {level}: {g:?}");
            }
            // Scales that are not finite (a crafted plan) take the
            // epilogue's NaN-masking form: NaN stores the zero point.
            let mut odd = scale.clone();
            odd[0] = f32::NAN;
            if oc > 1 {
                odd[1] = f32::INFINITY;
            }
            qconv2d_scalar(&g, &q, &x, &w, &comp, &odd, &shift, &mut slow).unwrap();
            for &level in &levels {
                let packed = pack_qconv_direct(&g, &w, level).unwrap();
                let mut fast = vec![0u8; len];
                qconv2d(&g, &q, &x, &w, Some(&packed), &comp, &odd, &shift, &mut fast).unwrap();
                assert_eq!(fast, slow, "case {i} level {level}, scales not finite: {g:?}");
            }
        }
    }

    /// A crafted plan may give a convolution no images, rows or output
    /// channels: every path writes nothing and returns. The direct kernels'
    /// task split used to divide by the zero task count (found by mutating
    /// plans).
    #[test]
    fn empty_problems_write_nothing_on_every_path() {
        let levels = direct_levels();
        let q = quant(false, 3, false);
        let dense = geom(1, 9, 64, 64, 3, 1, 1, 1, 1);
        let depthwise = geom(1, 9, 32, 32, 3, 1, 1, 1, 32);
        let empties = [
            ConvGeom { n: 0, ..dense },
            ConvGeom { oh: 0, ..dense },
            ConvGeom { ow: 0, ..dense },
            ConvGeom { oc: 0, ..dense },
            ConvGeom { n: 0, ..depthwise },
            ConvGeom { oh: 0, ..depthwise },
        ];
        for g in empties {
            let kk = (g.kh * g.kw * g.c / g.group) as usize;
            let oc = g.oc as usize;
            let x = bytes((g.n * g.h * g.w * g.c) as usize, 5);
            let w: Vec<i8> = bytes(oc * kk, 6).into_iter().map(|b| b as i8).collect();
            let (comp, scale, shift) = (vec![0i32; oc], vec![0.01f32; oc], vec![0.0f32; oc]);
            let mut y = vec![0u8; (g.n * g.oh * g.ow) as usize * oc];
            let mut packs = vec![None, Some(pack_qconv(&g, &w).unwrap())];
            if g.group == 1 {
                // Packing refuses no output channels; a crafted plan's
                // packing happens at load, from its own geometry.
                packs.extend(levels.iter().filter_map(|&l| pack_qconv_direct(&g, &w, l).ok().map(Some)));
            }
            for packed in &packs {
                qconv2d(&g, &q, &x, &w, packed.as_ref(), &comp, &scale, &shift, &mut y).unwrap();
            }
            assert!(y.is_empty(), "{g:?}");
        }
    }
}
