//! 8-bit kernels of the quantized path besides the convolutions:
//! `quant.add` ([`qadd`], the residual add of every quantized ResNet) and
//! the max pool of stored integers ([`qmax_pool2d`]).
//!
//! [`qadd`] computes the op's Q/DQ definition in f32, operation for
//! operation as the generated pointwise kernel and the interpreter's f32
//! path do (convert, subtract the zero point, multiply by the scale, add,
//! clamp, divide by the result's scale, round half to even, add its zero
//! point, saturate): no fused multiply-add, an IEEE division, so every ISA
//! level gives the same bytes as [`qadd_one`], the scalar specification.
//! AVX-512 does 16 elements per step, AVX2 8, the rest the scalar loop.
//!
//! [`qmax_pool2d`] is [`super::pool::pool2d`]'s max on stored values: the
//! maximum of dequantized values is the dequantized maximum (scales are
//! positive), so when the result has the input's parameters the stored
//! maximum is exact. Padding never wins (a window of only padding, which
//! valid geometries cannot make, gives the storage's lowest value).
//!
//! [`qglobal_avg_pool`] is `quant.global_avg_pool` exactly as the
//! interpreter computes it: every stored byte's dequantized value (a
//! 256-entry table of f32 products), summed per channel in f64 in pixel
//! order, divided by the pixel count, rounded to f32, quantized. The f64
//! sums are exact (f32 addends whose exponents differ by at most 9 bits),
//! so the result is bit for bit the interpreter's. [`qavg_pool2d`]
//! (`quant.avg_pool2d`) does the same per window, with
//! [`super::pool::pool2d`]'s taps and counts.
//!
//! Invariants: slice lengths are checked first (an error, never an
//! out-of-bounds access); each output element is computed by one thread,
//! so results do not depend on the thread count.

use rayon::prelude::*;

use super::KernelError;
use super::conv::{Dims, kerr, multiversion, tap_range};
use super::pool::pool_dims;
use crate::plan::{ConvGeom, QuantAdd, QuantMean, QuantOperand};

/// Elements per parallel task of [`qadd`].
const CHUNK: usize = 16 * 1024;

/// The storage range of an 8-bit operand.
fn range(signed: bool) -> (f32, f32) {
    if signed { (-128.0, 127.0) } else { (0.0, 255.0) }
}

#[inline(always)]
fn load(v: u8, signed: bool) -> f32 {
    if signed { v as i8 as f32 } else { v as f32 }
}

#[inline(always)]
fn dequantize_one(v: u8, p: &QuantOperand) -> f32 {
    (load(v, p.signed) - p.zero as f32) * p.scale
}

/// One element of `quant.add` (the specification every path matches).
pub fn qadd_one(q: &QuantAdd, a: u8, b: u8) -> u8 {
    let mut d = dequantize_one(a, &q.a) + dequantize_one(b, &q.b);
    if let Some(lo) = q.clip_min {
        d = d.max(lo);
    }
    if let Some(hi) = q.clip_max {
        d = d.min(hi);
    }
    let (lo, hi) = range(q.y.signed);
    let t = ((d / q.y.scale).round_ties_even() + q.y.zero as f32).max(lo).min(hi);
    // In range and integral: the cast is exact (i8 values as their byte).
    t as i32 as u8
}

/// `y[i] = quant.add(a[i], b[i % b_len])` for `i < n` (see the module
/// doc); `b_len` divides `n`.
pub fn qadd(q: &QuantAdd, n: usize, b_len: usize, a: &[u8], b: &[u8], y: &mut [u8]) -> Result<(), KernelError> {
    if b_len == 0 && n > 0 || b_len > 0 && !n.is_multiple_of(b_len) {
        return Err(kerr(format!("quant.add: the broadcast operand's {b_len} elements do not divide the result's {n}")));
    }
    for (name, need, len) in [("lhs", n, a.len()), ("rhs", b_len, b.len()), ("output", n, y.len())] {
        if len < need {
            return Err(kerr(format!("quant.add: {name} needs {need} bytes, found {len}")));
        }
    }
    let (lo, hi) = range(q.y.signed);
    if ![q.a.scale, q.b.scale, q.y.scale].iter().all(|s| s.is_finite() && *s > 0.0) || (q.y.zero as f32) < lo || (q.y.zero as f32) > hi {
        return Err(kerr(format!("quant.add: scales must be positive and finite and the zero point in range, found {q:?}")));
    }
    if b_len == n {
        y[..n].par_chunks_mut(CHUNK).enumerate().for_each(|(i, ys)| {
            let o = i * CHUNK;
            qadd_span(q, &a[o..o + ys.len()], &b[o..o + ys.len()], ys);
        });
        return Ok(());
    }
    // Rows of `b_len`, several per task.
    let per_task = (CHUNK / b_len.max(1)).max(1) * b_len;
    y[..n].par_chunks_mut(per_task).enumerate().for_each(|(i, ys)| {
        for (j, yr) in ys.chunks_exact_mut(b_len).enumerate() {
            let o = i * per_task + j * b_len;
            qadd_span(q, &a[o..o + b_len], &b[..b_len], yr);
        }
    });
    Ok(())
}

/// [`qadd`] over one span, at the best level this CPU has.
fn qadd_span(q: &QuantAdd, a: &[u8], b: &[u8], y: &mut [u8]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F; the slices are equally long.
            done = unsafe { x86::qadd_avx512(q, a, b, y) };
        } else if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2; the slices are equally long.
            done = unsafe { x86::qadd_avx2(q, a, b, y) };
        }
    }
    for i in done..y.len() {
        y[i] = qadd_one(q, a[i], b[i]);
    }
}

/// One element of `quant.quantize` to 8 bits (the interpreter's rule: the
/// f32 quotient rounded half to even, plus the zero point, saturated; NaN
/// gives the zero point).
pub fn quantize_one(q: &QuantOperand, x: f32) -> u8 {
    let (lo, hi) = range(q.signed);
    let z = q.zero as f32;
    let t = if x.is_nan() { z } else { ((x / q.scale).round_ties_even() + z).max(lo).min(hi) };
    t as i32 as u8
}

/// `y[i] = quantize(x[i])` for `i < n`.
pub fn quantize(q: &QuantOperand, n: usize, x: &[f32], y: &mut [u8]) -> Result<(), KernelError> {
    check_cast("quant.quantize", q, n, x.len(), y.len())?;
    y[..n].par_chunks_mut(CHUNK).enumerate().for_each(|(i, ys)| {
        let xs = &x[i * CHUNK..][..ys.len()];
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F; equal lengths.
            done = unsafe { x86::quantize_avx512(q, xs, ys) };
        }
        for j in done..ys.len() {
            ys[j] = quantize_one(q, xs[j]);
        }
    });
    Ok(())
}

/// Channels per parallel task of [`qglobal_avg_pool`].
const MEAN_CHANNELS: usize = 256;

/// `quant.global_avg_pool` of `n` NHWC images of `hw` pixels × `c` 8-bit
/// channels into `n × c` 8-bit means (see the module docs).
pub fn qglobal_avg_pool(q: &QuantMean, [n, hw, c]: [usize; 3], x: &[u8], y: &mut [u8]) -> Result<(), KernelError> {
    let need_x = n.checked_mul(hw).and_then(|v| v.checked_mul(c));
    let need_y = n.checked_mul(c);
    let (Some(need_x), Some(need_y)) = (need_x, need_y) else {
        return Err(kerr(format!("global average pool: {n}×{hw}×{c} overflows")));
    };
    for (name, need, len) in [("input", need_x, x.len()), ("output", need_y, y.len())] {
        if len < need {
            return Err(kerr(format!("global average pool: {name} needs {need} bytes, found {len}")));
        }
    }
    if need_y == 0 {
        return Ok(());
    }
    let lut = dequantized_table(&q.x);
    let chunks = c.div_ceil(MEAN_CHANNELS);
    y[..need_y].par_chunks_mut(c).enumerate().for_each(|(b, ys)| {
        ys.par_chunks_mut(MEAN_CHANNELS).enumerate().with_min_len((chunks / 2).max(1)).for_each(|(k, yk)| {
            let c0 = k * MEAN_CHANNELS;
            let mut acc = [0f64; MEAN_CHANNELS];
            let acc = &mut acc[..yk.len()];
            for p in 0..hw {
                let row = &x[(b * hw + p) * c + c0..][..yk.len()];
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a += lut[v as usize];
                }
            }
            for (o, &a) in yk.iter_mut().zip(acc.iter()) {
                *o = stored_mean(q, a, hw);
            }
        });
    });
    Ok(())
}

/// The dequantized value of each stored byte, in f64 (exact: f32 products).
fn dequantized_table(x: &QuantOperand) -> [f64; 256] {
    let (z, s) = (x.zero as f32, x.scale);
    std::array::from_fn(|b| {
        let v = if x.signed { b as u8 as i8 as f32 } else { b as f32 };
        ((v - z) * s) as f64
    })
}

/// The stored mean of `count` dequantized values summing to `sum`: the f64
/// quotient rounded to f32, quantized, clamped to `[y_min, y_max]` (max
/// then min: crossed bounds give the upper one, as the op does).
fn stored_mean(q: &QuantMean, sum: f64, count: usize) -> u8 {
    let stored = quantize_one(&q.y, (sum / count as f64) as f32);
    let v = if q.y.signed { stored as i8 as i32 } else { stored as i32 };
    v.max(q.y_min).min(q.y_max) as u8
}

/// [`pool_dims`] of an 8-bit pool (`what` in its errors), with `x` and `y`
/// checked to hold its input and output bytes.
fn byte_pool_dims(what: &str, geom: &ConvGeom, ceil_mode: bool, x: &[u8], y: &[u8]) -> Result<Dims, KernelError> {
    let g = pool_dims(geom, ceil_mode)?;
    for (name, need, len) in [("input", g.x_len, x.len()), ("output", g.y_len, y.len())] {
        if len < need {
            return Err(kerr(format!("{what}: {name} needs {need} bytes, found {len}")));
        }
    }
    Ok(g)
}

/// `quant.avg_pool2d` of 8-bit NHWC `x` into 8-bit NHWC `y`, geometry as
/// [`super::pool::pool2d`] (the same taps and counts): per window, the f64
/// sum of the dequantized values, divided by the count of taps inside the
/// input (inside the padded extent with `include_pad`), rounded to f32,
/// quantized and clamped, as [`qglobal_avg_pool`] does: the interpreter's
/// bytes. (The sums are exact: at most a few thousand f32 addends whose
/// exponents differ by at most 8 bits.)
pub fn qavg_pool2d(geom: &ConvGeom, ceil_mode: bool, include_pad: bool, q: &QuantMean, x: &[u8], y: &mut [u8]) -> Result<(), KernelError> {
    let g = byte_pool_dims("average pool", geom, ceil_mode, x, y)?;
    if g.y_len == 0 {
        return Ok(());
    }
    let lut = dequantized_table(&q.x);
    y[..g.y_len].par_chunks_mut(g.ow * g.c).enumerate().for_each(|(r, yrow)| qavg_row(&g, x, r, yrow, include_pad, q, &lut));
    Ok(())
}

/// Output row `r` (flat over `n·oh`) of [`qavg_pool2d`].
fn qavg_row(g: &Dims, x: &[u8], r: usize, yrow: &mut [u8], include_pad: bool, q: &QuantMean, lut: &[f64; 256]) {
    let (b, oy) = (r / g.oh, r % g.oh);
    let c = g.c;
    let by = g.base(oy, 0);
    let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
    let (py0, py1) = tap_range(by + g.pads[0] as isize, g.dilation[0], g.kh, g.h + g.pads[0] + g.pads[2]);
    let mut acc = vec![0f64; c];
    for (ox, out) in yrow.chunks_exact_mut(c).enumerate() {
        let bx = g.base(ox, 1);
        let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
        let (px0, px1) = tap_range(bx + g.pads[1] as isize, g.dilation[1], g.kw, g.w + g.pads[1] + g.pads[3]);
        let count = if include_pad { (py1 - py0) * (px1 - px0) } else { (ky1 - ky0) * (kx1 - kx0) };
        acc.fill(0.0);
        for ky in ky0..ky1 {
            let iy = (by + (ky * g.dilation[0]) as isize) as usize;
            for kx in kx0..kx1 {
                let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                let xs = &x[((b * g.h + iy) * g.w + ix) * c..][..c];
                for (a, &v) in acc.iter_mut().zip(xs) {
                    *a += lut[v as usize];
                }
            }
        }
        for (o, &a) in out.iter_mut().zip(acc.iter()) {
            *o = stored_mean(q, a, count);
        }
    }
}

/// `y[i] = (x[i] − zero)·scale` in f32 for `i < n`.
pub fn dequantize(q: &QuantOperand, n: usize, x: &[u8], y: &mut [f32]) -> Result<(), KernelError> {
    check_cast("quant.dequantize", q, n, x.len(), y.len())?;
    y[..n].par_chunks_mut(CHUNK).enumerate().for_each(|(i, ys)| {
        dequantize_span(q, &x[i * CHUNK..][..ys.len()], ys);
    });
    Ok(())
}

multiversion! {
    /// [`dequantize`] over one span (vectorized by the compiler; the same
    /// two f32 operations per element on every level).
    fn dequantize_span(q: &QuantOperand, x: &[u8], y: &mut [f32]) {
        let (z, s) = (q.zero as f32, q.scale);
        if q.signed {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (v as i8 as f32 - z) * s;
            }
        } else {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (v as f32 - z) * s;
            }
        }
    }
}

fn check_cast(op: &str, q: &QuantOperand, n: usize, from: usize, to: usize) -> Result<(), KernelError> {
    if from < n || to < n {
        return Err(kerr(format!("{op}: {n} elements, but the input holds {from} and the output {to}")));
    }
    let (lo, hi) = range(q.signed);
    if !(q.scale.is_finite() && q.scale > 0.0) || (q.zero as f32) < lo || (q.zero as f32) > hi {
        return Err(kerr(format!("{op}: the scale must be positive and finite and the zero point in range, found {q:?}")));
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::range;
    use crate::plan::QuantAdd;

    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

    /// Whole blocks of 16; returns how many elements it wrote.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `a`, `b` and `y` are equally long.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn qadd_avx512(q: &QuantAdd, a: &[u8], b: &[u8], y: &mut [u8]) -> usize {
        let (za, sa) = (_mm512_set1_ps(q.a.zero as f32), _mm512_set1_ps(q.a.scale));
        let (zb, sb) = (_mm512_set1_ps(q.b.zero as f32), _mm512_set1_ps(q.b.scale));
        let (sy, zy) = (_mm512_set1_ps(q.y.scale), _mm512_set1_ps(q.y.zero as f32));
        let (lo, hi) = range(q.y.signed);
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let cmin = match q.clip_min {
            Some(v) => Some(_mm512_set1_ps(v)),
            None => None,
        };
        let cmax = match q.clip_max {
            Some(v) => Some(_mm512_set1_ps(v)),
            None => None,
        };
        let n = y.len() / 16 * 16;
        let mut i = 0;
        while i < n {
            // SAFETY: i + 16 <= n <= each slice's length.
            let (va, vb) = unsafe { (_mm_loadu_si128(a.as_ptr().add(i).cast()), _mm_loadu_si128(b.as_ptr().add(i).cast())) };
            let va = if q.a.signed { _mm512_cvtepi8_epi32(va) } else { _mm512_cvtepu8_epi32(va) };
            let vb = if q.b.signed { _mm512_cvtepi8_epi32(vb) } else { _mm512_cvtepu8_epi32(vb) };
            let (xa, xb) = (_mm512_cvtepi32_ps(va), _mm512_cvtepi32_ps(vb));
            let da = _mm512_mul_ps(_mm512_sub_ps(xa, za), sa);
            let db = _mm512_mul_ps(_mm512_sub_ps(xb, zb), sb);
            let mut d = _mm512_add_ps(da, db);
            if let Some(c) = cmin {
                d = _mm512_max_ps(d, c);
            }
            if let Some(c) = cmax {
                d = _mm512_min_ps(d, c);
            }
            let t = _mm512_add_ps(_mm512_roundscale_ps::<NEAREST>(_mm512_div_ps(d, sy)), zy);
            let t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
            // In range: truncating each i32 to its low byte is the value.
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t));
            // SAFETY: as for the loads.
            unsafe { _mm_storeu_si128(y.as_mut_ptr().add(i).cast(), bytes) };
            i += 16;
        }
        n
    }

    /// [`super::quantize_one`] on whole blocks of 16; returns how many
    /// elements it wrote.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `x` and `y` are equally long.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn quantize_avx512(q: &crate::plan::QuantOperand, x: &[f32], y: &mut [u8]) -> usize {
        let (lo, hi) = range(q.signed);
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let (s, z) = (_mm512_set1_ps(q.scale), _mm512_set1_ps(q.zero as f32));
        let n = y.len() / 16 * 16;
        let mut i = 0;
        while i < n {
            // SAFETY: i + 16 <= n <= each slice's length.
            let v = unsafe { _mm512_loadu_ps(x.as_ptr().add(i)) };
            let t = _mm512_add_ps(_mm512_roundscale_ps::<NEAREST>(_mm512_div_ps(v, s)), z);
            let t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
            // NaN lanes take the zero point.
            let t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), z, t);
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t));
            // SAFETY: as for the load.
            unsafe { _mm_storeu_si128(y.as_mut_ptr().add(i).cast(), bytes) };
            i += 16;
        }
        n
    }

    /// Whole blocks of 8; returns how many elements it wrote.
    ///
    /// # Safety
    /// The CPU has AVX2; `a`, `b` and `y` are equally long.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn qadd_avx2(q: &QuantAdd, a: &[u8], b: &[u8], y: &mut [u8]) -> usize {
        let (za, sa) = (_mm256_set1_ps(q.a.zero as f32), _mm256_set1_ps(q.a.scale));
        let (zb, sb) = (_mm256_set1_ps(q.b.zero as f32), _mm256_set1_ps(q.b.scale));
        let (sy, zy) = (_mm256_set1_ps(q.y.scale), _mm256_set1_ps(q.y.zero as f32));
        let (lo, hi) = range(q.y.signed);
        let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        let cmin = match q.clip_min {
            Some(v) => Some(_mm256_set1_ps(v)),
            None => None,
        };
        let cmax = match q.clip_max {
            Some(v) => Some(_mm256_set1_ps(v)),
            None => None,
        };
        let n = y.len() / 8 * 8;
        let mut i = 0;
        while i < n {
            // SAFETY: i + 8 <= n <= each slice's length.
            let (va, vb) = unsafe { (_mm_loadl_epi64(a.as_ptr().add(i).cast()), _mm_loadl_epi64(b.as_ptr().add(i).cast())) };
            let va = if q.a.signed { _mm256_cvtepi8_epi32(va) } else { _mm256_cvtepu8_epi32(va) };
            let vb = if q.b.signed { _mm256_cvtepi8_epi32(vb) } else { _mm256_cvtepu8_epi32(vb) };
            let (xa, xb) = (_mm256_cvtepi32_ps(va), _mm256_cvtepi32_ps(vb));
            let da = _mm256_mul_ps(_mm256_sub_ps(xa, za), sa);
            let db = _mm256_mul_ps(_mm256_sub_ps(xb, zb), sb);
            let mut d = _mm256_add_ps(da, db);
            if let Some(c) = cmin {
                d = _mm256_max_ps(d, c);
            }
            if let Some(c) = cmax {
                d = _mm256_min_ps(d, c);
            }
            let t = _mm256_add_ps(_mm256_round_ps::<NEAREST>(_mm256_div_ps(d, sy)), zy);
            let t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
            let v = _mm256_cvtps_epi32(t);
            // In range, so the saturating packs keep every value.
            let w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let bytes = if q.y.signed { _mm_packs_epi16(w, w) } else { _mm_packus_epi16(w, w) };
            // SAFETY: as for the loads.
            unsafe { _mm_storel_epi64(y.as_mut_ptr().add(i).cast(), bytes) };
            i += 8;
        }
        n
    }
}

/// NHWC max pool of 8-bit values `x` (`n × h × w × c`) into `y` (`n × oh
/// × ow × c`), signed or not; geometry as [`super::pool::pool2d`].
pub fn qmax_pool2d(geom: &ConvGeom, ceil_mode: bool, signed: bool, x: &[u8], y: &mut [u8]) -> Result<(), KernelError> {
    let g = byte_pool_dims("max pool", geom, ceil_mode, x, y)?;
    if g.y_len == 0 {
        return Ok(());
    }
    // i8 values compare as u8 once their sign bit is flipped: pools run on
    // flipped bytes and flip back.
    let flip = if signed { 0x80u8 } else { 0 };
    y[..g.y_len].par_chunks_mut(g.ow * g.c).enumerate().for_each(|(r, yrow)| qmax_row(&g, x, r, yrow, flip));
    Ok(())
}

multiversion! {
    /// Output row `r` (flat over `n·oh`) of [`qmax_pool2d`] on bytes with
    /// `flip` applied (see there).
    fn qmax_row(g: &Dims, x: &[u8], r: usize, yrow: &mut [u8], flip: u8) {
        let (b, oy) = (r / g.oh, r % g.oh);
        let c = g.c;
        let by = g.base(oy, 0);
        let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
        for (ox, out) in yrow.chunks_exact_mut(c).enumerate() {
            let bx = g.base(ox, 1);
            let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
            out.fill(0);
            for ky in ky0..ky1 {
                let iy = (by + (ky * g.dilation[0]) as isize) as usize;
                for kx in kx0..kx1 {
                    let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                    let xs = &x[((b * g.h + iy) * g.w + ix) * c..][..c];
                    for (o, &v) in out.iter_mut().zip(xs) {
                        *o = (*o).max(v ^ flip);
                    }
                }
            }
            for v in out.iter_mut() {
                *v ^= flip;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testdata::bytes;
    use crate::kernels::pool::pool2d;
    use crate::plan::PoolKind;


    fn operand(signed: bool, zero: i32, scale: f32) -> QuantOperand {
        QuantOperand { signed, zero, scale }
    }

    /// Channel blocks and images split as the parallel loop does: each
    /// channel's mean equals that channel pooled on its own (gathered
    /// into a one-channel tensor), for u8 and i8 with a clamp; short
    /// buffers are errors.
    #[test]
    fn global_average_pool_channels_are_independent() {
        let (n, hw, c) = (2usize, 7usize, 600usize);
        let x = bytes(n * hw * c, 5);
        for (signed, y_min, y_max) in [(false, 0, 255), (true, -20, 90)] {
            let q = QuantMean { x: operand(signed, if signed { -3 } else { 120 }, 0.037), y: operand(signed, 4, 0.011), y_min, y_max };
            let mut y = vec![0u8; n * c];
            qglobal_avg_pool(&q, [n, hw, c], &x, &mut y).unwrap();
            for b in 0..n {
                for ch in [0, 1, 255, 256, 257, 511, 512, 599] {
                    let col: Vec<u8> = (0..hw).map(|p| x[(b * hw + p) * c + ch]).collect();
                    let mut one = [0u8; 1];
                    qglobal_avg_pool(&q, [1, hw, 1], &col, &mut one).unwrap();
                    assert_eq!(y[b * c + ch], one[0], "image {b} channel {ch}");
                }
            }
            assert!(y.iter().any(|&v| v != y[0]), "all outputs equal: the test data is too flat");
            assert!(qglobal_avg_pool(&q, [n, hw, c], &x[1..], &mut y).is_err());
            assert!(qglobal_avg_pool(&q, [n, hw, c], &x, &mut y[1..]).is_err());
        }
    }

    /// The vector paths agree with the scalar definition byte for byte,
    /// for every signedness, with and without clamps, on lengths that
    /// leave tails; and the scalar definition is the f64 Q/DQ formula to
    /// within one step (f32 rounding of the scaled sum).
    #[test]
    fn qadd_matches_its_definition() {
        let levels = [("avx512f", std::arch::is_x86_feature_detected!("avx512f")), ("avx2", std::arch::is_x86_feature_detected!("avx2"))];
        for (name, has) in levels {
            if !has {
                println!("skipped {name}: this CPU lacks it");
            }
        }
        let cases = [
            QuantAdd { a: operand(false, 3, 0.041), b: operand(false, 120, 0.058), y: operand(false, 7, 0.07), clip_min: Some(0.0), clip_max: None },
            QuantAdd { a: operand(true, -5, 0.02), b: operand(false, 0, 0.013), y: operand(true, 2, 0.03), clip_min: None, clip_max: Some(1.5) },
            QuantAdd { a: operand(true, 0, 0.5), b: operand(true, 0, 0.25), y: operand(false, 128, 0.011), clip_min: Some(-0.5), clip_max: Some(0.5) },
        ];
        for (k, q) in cases.iter().enumerate() {
            for n in [0usize, 7, 16, 33, 100_003] {
                let (a, b) = (bytes(n, 1 + k as u32), bytes(n, 99 + n as u32));
                let mut y = vec![0u8; n];
                qadd(q, n, n, &a, &b, &mut y).unwrap();
                // Each vector level this CPU has, called directly (the
                // dispatcher only runs the best one).
                #[cfg(target_arch = "x86_64")]
                for (level, has) in levels {
                    if !has {
                        continue;
                    }
                    let mut yl = vec![0u8; n];
                    // SAFETY: the CPU has the level; equal lengths.
                    let done = unsafe {
                        if level == "avx512f" { x86::qadd_avx512(q, &a, &b, &mut yl) } else { x86::qadd_avx2(q, &a, &b, &mut yl) }
                    };
                    for i in 0..done {
                        assert_eq!(yl[i], qadd_one(q, a[i], b[i]), "{level}: case {k}, n {n}, element {i}");
                    }
                }
                for i in 0..n {
                    let want = qadd_one(q, a[i], b[i]);
                    assert_eq!(y[i], want, "case {k}, n {n}, element {i}");
                    let deq = |v: u8, p: &QuantOperand| (if p.signed { v as i8 as f64 } else { v as f64 } - p.zero as f64) * p.scale as f64;
                    let mut d = deq(a[i], &q.a) + deq(b[i], &q.b);
                    d = d.max(q.clip_min.map_or(f64::MIN, f64::from)).min(q.clip_max.map_or(f64::MAX, f64::from));
                    let (lo, hi) = range(q.y.signed);
                    let exact = ((d / q.y.scale as f64).round() + q.y.zero as f64).clamp(lo as f64, hi as f64);
                    let got = if q.y.signed { want as i8 as f64 } else { want as f64 };
                    assert!((got - exact).abs() <= 1.0, "case {k}: {got} vs {exact}");
                }
            }
        }
    }

    /// A `b` repeated along `a` (a bias on the last axis): each row is the
    /// elementwise add of that row and `b`.
    #[test]
    fn qadd_broadcasts_rows() {
        let q = QuantAdd { a: operand(false, 100, 0.02), b: operand(true, 1, 0.03), y: operand(false, 90, 0.025), clip_min: None, clip_max: None };
        for (rows, b_len) in [(3usize, 37usize), (129, 256), (1, 16)] {
            let n = rows * b_len;
            let (a, b) = (bytes(n, 5), bytes(b_len, 6));
            let mut y = vec![0u8; n];
            qadd(&q, n, b_len, &a, &b, &mut y).unwrap();
            for i in 0..n {
                assert_eq!(y[i], qadd_one(&q, a[i], b[i % b_len]), "{rows}x{b_len}, element {i}");
            }
        }
    }

    /// Quantize and dequantize: the vector path is the scalar rule, which
    /// is the interpreter's (f64 quotient rounded to f32 is the f32
    /// quotient), NaN to the zero point, ±inf and huge values saturated.
    #[test]
    fn quantize_and_dequantize_match_their_definitions() {
        let mut x: Vec<f32> = bytes(1000, 9).iter().zip(bytes(1000, 10)).map(|(&a, b)| (a as f32 - 128.0) * 0.037 + b as f32 * 1e-3).collect();
        x.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.0, -0.0, 0.025, 0.075]);
        for q in [operand(false, 3, 0.05), operand(true, -7, 0.02), operand(false, 128, 0.011)] {
            let mut y = vec![0u8; x.len()];
            quantize(&q, x.len(), &x, &mut y).unwrap();
            for (i, (&v, &got)) in x.iter().zip(&y).enumerate() {
                assert_eq!(got, quantize_one(&q, v), "{q:?} element {i} ({v})");
                let (lo, hi) = range(q.signed);
                let want = if v.is_nan() { q.zero as f64 } else { ((v as f64 / q.scale as f64) as f32 as f64).round_ties_even() + q.zero as f64 }.clamp(lo as f64, hi as f64);
                assert_eq!(load(got, q.signed) as f64, want, "{q:?} element {i} ({v})");
            }
            let mut back = vec![0f32; y.len()];
            dequantize(&q, y.len(), &y, &mut back).unwrap();
            for (&b, &d) in y.iter().zip(&back) {
                assert_eq!(d, (load(b, q.signed) - q.zero as f32) * q.scale);
            }
        }
        assert!(quantize(&operand(false, 300, 0.1), 1, &[0.0], &mut [0]).is_err());
    }

    #[test]
    fn qadd_refuses_short_slices_and_bad_scales() {
        let q = QuantAdd { a: operand(false, 0, 0.1), b: operand(false, 0, 0.1), y: operand(false, 0, 0.1), clip_min: None, clip_max: None };
        let mut y = vec![0u8; 4];
        assert!(qadd(&q, 5, 5, &[0; 5], &[0; 5], &mut y).unwrap_err().to_string().contains("output needs 5"));
        assert!(qadd(&q, 4, 3, &[0; 4], &[0; 4], &mut y).unwrap_err().to_string().contains("do not divide"));
        let bad = QuantAdd { y: operand(false, 0, 0.0), ..q };
        assert!(qadd(&bad, 4, 4, &[0; 4], &[0; 4], &mut y).is_err());
    }

    /// The integer max pool is the float pool of the dequantized values,
    /// quantized back (exact), for u8 and i8, with padding, strides and
    /// `ceil_mode`.
    #[test]
    fn qmax_pool_is_the_float_pool_on_stored_values() {
        for signed in [false, true] {
            for (h, w, c, k, s, p, ceil) in [(9, 11, 70, 3, 2, 1, false), (8, 8, 3, 3, 2, 0, true), (5, 7, 64, 3, 1, 1, true)] {
                let mut g = ConvGeom { n: 2, h, w, c, oh: 0, ow: 0, oc: c, kh: k, kw: k, stride: [s, s], dilation: [1, 1], pads: [p; 4], group: 1 };
                let out = |len: u64| {
                    let span = len + 2 * p - k;
                    if ceil { span.div_ceil(s) + 1 } else { span / s + 1 }
                };
                (g.oh, g.ow) = (out(h), out(w));
                let x = bytes((2 * h * w * c) as usize, (h * c) as u32 + signed as u32);
                let mut y = vec![0u8; (2 * g.oh * g.ow * c) as usize];
                qmax_pool2d(&g, ceil, signed, &x, &mut y).unwrap();
                let xf: Vec<f32> = x.iter().map(|&v| load(v, signed)).collect();
                let mut yf = vec![0f32; y.len()];
                pool2d(PoolKind::Max, &g, ceil, &xf, &mut yf).unwrap();
                for (i, (&got, &want)) in y.iter().zip(&yf).enumerate() {
                    assert_eq!(load(got, signed), want, "signed {signed}, {h}x{w}x{c}, element {i}");
                }
            }
        }
    }
}
