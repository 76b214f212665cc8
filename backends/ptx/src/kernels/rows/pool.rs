//! `Step::Pool`: NHWC max and average pooling, one thread per output
//! element (channel fastest) in a grid-stride loop.
//!
//! Invariants:
//! - The output size must be the CPU's (`pool_out_size`, with its
//!   `ceil_mode` rule); other geometries are refused.
//! - Only taps inside the input are read: each window's tap ranges are
//!   computed first, so padding never wins a max (which propagates NaN) and
//!   nothing is read out of bounds.
//! - An average divides by the taps inside the input (`AvgExcludePad`) or
//!   inside the explicitly padded extent (`AvgIncludePad`; cells that
//!   `ceil_mode` adds are never counted).
//! - Arithmetic is 32-bit when every index and coordinate stays below
//!   2^30, 64-bit below 2^62; larger geometries are refused.

use aoc_plan::plan::{ConvGeom, PoolKind};

use super::kernel::{Kernel, Op, flat_geometry};
use crate::irtext::ModuleText;
use crate::kernels::{Geometry, HalfCopy};

/// A pool's output size along one dimension (the CPU's rule): the
/// convolution formula, rounded up with `ceil_mode`, where a last window
/// starting past the input and the leading padding is dropped.
fn pool_out_size(
    input: u64,
    k: u64,
    stride: u64,
    dilation: u64,
    pb: u64,
    pe: u64,
    ceil: bool,
) -> Option<u64> {
    let span = dilation.checked_mul(k - 1)?.checked_add(1)?;
    let padded = input.checked_add(pb)?.checked_add(pe)?;
    let room = padded.checked_sub(span)?;
    let floor = room / stride + 1;
    if !ceil {
        return Some(floor);
    }
    let mut out = floor + u64::from(!room.is_multiple_of(stride));
    if (out - 1) * stride >= input + pb {
        out -= 1;
    }
    Some(out)
}

/// NHWC pooling of `x` (`n × h × w × c`) into `y` (`n × oh × ow × c`) over
/// `kh × kw` windows: window `(oy, ox)` covers the taps
/// `(oy·sh − pad_top + ky·dh, ox·sw − pad_left + kx·dw)`; only taps inside
/// the input are read (padding never wins a max; max propagates NaN); an
/// average divides by the taps inside the input (`AvgExcludePad`) or inside
/// the explicitly padded extent (`AvgIncludePad`; cells `ceil_mode` adds
/// are never counted). `geom.oc == geom.c`, `group` is unused, and
/// `oh`/`ow` must be the sizes `ceil_mode` gives. Parameters `(x, y)`.
pub fn pool(
    m: &mut ModuleText,
    name: &str,
    kind: PoolKind,
    geom: &ConvGeom,
    ceil_mode: bool,
) -> Result<Geometry, String> {
    pool_with(m, name, kind, geom, ceil_mode, None)
}

/// `Step::QMaxPool`: [`pool`]'s max over 8-bit values (i8 when `signed`,
/// else u8), the stored maximum, bit for bit the CPU's `qmax_pool` (the
/// bytes convert to f32 exactly and back). Parameters `(x, y)`.
/// With channels in multiples of 4, `x` and `y` aligned to `align` bytes
/// (a power of two) and at most [`QMAX_TAPS`] window taps, a thread takes
/// up to 16 channels of an output pixel as one vector (as many as divide
/// both): the window's taps unrolled, each a vector load where it lies
/// inside the input, combined by an integer max (the same maximum).
pub fn qmax_pool(m: &mut ModuleText, name: &str, geom: &ConvGeom, ceil_mode: bool, signed: bool, align: u64) -> Result<Geometry, String> {
    let lanes = [16, 8, 4].into_iter().find(|l| geom.c.is_multiple_of(*l) && align.is_multiple_of(*l));
    match lanes {
        Some(l) if geom.kh * geom.kw <= QMAX_TAPS => qmax_pool_lanes(m, name, geom, ceil_mode, signed, l),
        _ => pool_elems(m, name, PoolKind::Max, geom, ceil_mode, None, Some(signed)),
    }
}

/// The most window taps [`qmax_pool`]'s vector form unrolls.
pub const QMAX_TAPS: u64 = 49;

/// [`qmax_pool`] with `lanes` channels a thread (`c % lanes == 0`): one
/// item per `lanes` channels of an output pixel.
fn qmax_pool_lanes(m: &mut ModuleText, name: &str, geom: &ConvGeom, ceil_mode: bool, signed: bool, lanes: u64) -> Result<Geometry, String> {
    let g = *geom;
    let mut k = Kernel::new(m, name)?;
    let (total, ty) = checked(geom, ceil_mode)?;
    let groups = g.c / lanes;
    let items = total / lanes;
    if items == 0 {
        return Ok(k.empty(2));
    }
    let vt = format!("<{lanes} x i8>");
    let max = format!("llvm.{}max.v{lanes}i8", if signed { "s" } else { "u" });
    k.m.declare(&format!("declare {vt} @{max}({vt}, {vt})"));
    // The type's least value: any tap inside the window beats it, and every
    // window has one (the output size rule).
    let least = if signed { -128 } else { 0 };
    k.grid_stride(items, |k, q64| {
        let q = if ty == "i32" { k.v(format!("trunc i64 {q64} to i32")) } else { q64.to_string() };
        let grp = k.v(format!("urem {ty} {q}, {groups}"));
        let ch = k.v(format!("mul {ty} {grp}, {lanes}"));
        let r = k.v(format!("udiv {ty} {q}, {groups}"));
        let ox = k.v(format!("urem {ty} {r}, {}", g.ow));
        let r2 = k.v(format!("udiv {ty} {r}, {}", g.ow));
        let oy = k.v(format!("urem {ty} {r2}, {}", g.oh));
        let img = k.v(format!("udiv {ty} {r2}, {}", g.oh));
        let sy = k.v(format!("mul {ty} {oy}, {}", g.stride[0]));
        let by = k.v(format!("sub {ty} {sy}, {}", g.pads[0]));
        let sx = k.v(format!("mul {ty} {ox}, {}", g.stride[1]));
        let bx = k.v(format!("sub {ty} {sx}, {}", g.pads[1]));
        let mut acc = format!("splat (i8 {least})");
        for ky in 0..g.kh {
            let iy = k.v(format!("add {ty} {by}, {}", ky * g.dilation[0]));
            let y_lo = k.v(format!("icmp sge {ty} {iy}, 0"));
            let y_hi = k.v(format!("icmp slt {ty} {iy}, {}", g.h));
            let y_in = k.v(format!("and i1 {y_lo}, {y_hi}"));
            let ih = k.v(format!("mul {ty} {img}, {}", g.h));
            let row = k.v(format!("add {ty} {ih}, {iy}"));
            let row = k.v(format!("mul {ty} {row}, {}", g.w));
            for kx in 0..g.kw {
                let ix = k.v(format!("add {ty} {bx}, {}", kx * g.dilation[1]));
                let x_lo = k.v(format!("icmp sge {ty} {ix}, 0"));
                let x_hi = k.v(format!("icmp slt {ty} {ix}, {}", g.w));
                let x_in = k.v(format!("and i1 {x_lo}, {x_hi}"));
                let inside = k.v(format!("and i1 {y_in}, {x_in}"));
                let cell = k.v(format!("add {ty} {row}, {ix}"));
                let off = k.v(format!("mul {ty} {cell}, {}", g.c));
                let off = k.v(format!("add {ty} {off}, {ch}"));
                // A tap outside reads the first vector and drops it.
                let off = k.v(format!("select i1 {inside}, {ty} {off}, {ty} 0"));
                let at = k.v(format!("getelementptr inbounds i8, ptr addrspace(1) %p0, {ty} {off}"));
                let v = k.v(format!("load {vt}, ptr addrspace(1) {at}, align {lanes}"));
                let m = k.v(format!("call {vt} @{max}({vt} {acc}, {vt} {v})"));
                acc = k.v(format!("select i1 {inside}, {vt} {m}, {vt} {acc}"));
            }
        }
        let o = k.v(format!("mul {ty} {q}, {lanes}"));
        let at = k.v(format!("getelementptr inbounds i8, ptr addrspace(1) %p1, {ty} {o}"));
        k.ins(format!("store {vt} {acc}, ptr addrspace(1) {at}, align {lanes}"));
    });
    k.finish(2);
    Ok(flat_geometry(items))
}

/// [`pool`] that also writes a [`HalfCopy`] of `y` through a third
/// parameter, when `half` asks for it (a max pool before a `wgmma`
/// convolution: ResNet's stem).
pub fn pool_with(
    m: &mut ModuleText,
    name: &str,
    kind: PoolKind,
    geom: &ConvGeom,
    ceil_mode: bool,
    half: Option<HalfCopy>,
) -> Result<Geometry, String> {
    pool_elems(m, name, kind, geom, ceil_mode, half, None)
}

/// [`pool_with`] over f32, or over bytes (`bytes: Some(signed)`).
fn pool_elems(
    m: &mut ModuleText,
    name: &str,
    kind: PoolKind,
    geom: &ConvGeom,
    ceil_mode: bool,
    half: Option<HalfCopy>,
    bytes: Option<bool>,
) -> Result<Geometry, String> {
    let params = 2 + usize::from(half.is_some());
    let g = *geom;
    let mut k = Kernel::new(m, name)?;
    let (total, ty) = checked(geom, ceil_mode)?;
    if total == 0 {
        return Ok(k.empty(params));
    }
    let (x, y) = ("%p0", "%p1");
    let op = match kind {
        PoolKind::Max => Op::Max,
        PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => Op::Sum,
    };
    k.grid_stride(total, |k, q64| {
        let q = if ty == "i32" {
            k.v(format!("trunc i64 {q64} to i32"))
        } else {
            q64.to_string()
        };
        let ch = k.v(format!("urem {ty} {q}, {}", g.c));
        let r = k.v(format!("udiv {ty} {q}, {}", g.c));
        let ox = k.v(format!("urem {ty} {r}, {}", g.ow));
        let r = k.v(format!("udiv {ty} {r}, {}", g.ow));
        let oy = k.v(format!("urem {ty} {r}, {}", g.oh));
        let img = k.v(format!("udiv {ty} {r}, {}", g.oh));
        // First tap's coordinates (may be negative).
        let sy = k.v(format!("mul {ty} {oy}, {}", g.stride[0]));
        let by = k.v(format!("sub {ty} {sy}, {}", g.pads[0]));
        let sx = k.v(format!("mul {ty} {ox}, {}", g.stride[1]));
        let bx = k.v(format!("sub {ty} {sx}, {}", g.pads[1]));
        let (ky0, ky1) = taps(k, ty, &by, g.dilation[0], g.kh, g.h);
        let (kx0, kx1) = taps(k, ty, &bx, g.dilation[1], g.kw, g.w);
        let acc = k.for_range(ty, &ky0, &ky1, "1", &[op.identity()], |k, ky, a| {
            let dy = k.v(format!("mul {ty} {ky}, {}", g.dilation[0]));
            let iy = k.v(format!("add {ty} {by}, {dy}"));
            let ih = k.v(format!("mul {ty} {img}, {}", g.h));
            let row = k.v(format!("add {ty} {ih}, {iy}"));
            let row = k.v(format!("mul {ty} {row}, {}", g.w));
            let a0 = a[0].clone();
            k.for_range(ty, &kx0, &kx1, "1", &[a0], |k, kx, a| {
                let dx = k.v(format!("mul {ty} {kx}, {}", g.dilation[1]));
                let ix = k.v(format!("add {ty} {bx}, {dx}"));
                let cell = k.v(format!("add {ty} {row}, {ix}"));
                let cc = k.v(format!("mul {ty} {cell}, {}", g.c));
                let off = k.v(format!("add {ty} {cc}, {ch}"));
                let v = match bytes {
                    None => k.load(x, ty, &off),
                    Some(signed) => {
                        let a = k.v(format!("getelementptr inbounds i8, ptr addrspace(1) {x}, {ty} {off}"));
                        let b = k.v(format!("load i8, ptr addrspace(1) {a}, align 1"));
                        let conv = if signed { "sitofp" } else { "uitofp" };
                        k.v(format!("{conv} i8 {b} to float"))
                    }
                };
                vec![k.combine(op, &a[0], &v)]
            })
        });
        let res = match kind {
            PoolKind::Max => acc[0].clone(),
            PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => {
                let (ny, nx) = if kind == PoolKind::AvgExcludePad {
                    let ny = k.v(format!("sub {ty} {ky1}, {ky0}"));
                    let nx = k.v(format!("sub {ty} {kx1}, {kx0}"));
                    (ny, nx)
                } else {
                    // Taps below `in + pad_end` (none lies before the
                    // leading padding): the CPU's tap range over the
                    // padded extent, whose first tap is always 0.
                    let ny = padded_taps(k, ty, &by, g.dilation[0], g.kh, g.h + g.pads[2]);
                    let nx = padded_taps(k, ty, &bx, g.dilation[1], g.kw, g.w + g.pads[3]);
                    (ny, nx)
                };
                let cnt = k.v(format!("mul {ty} {ny}, {nx}"));
                let cf = k.v(format!("uitofp {ty} {cnt} to float"));
                k.v(format!("fdiv float {}, {cf}", acc[0]))
            }
        };
        if let Some(signed) = bytes {
            // A window always has a tap (the output size rule), so `res`
            // is one of the bytes.
            let conv = if signed { "fptosi" } else { "fptoui" };
            let b = k.v(format!("{conv} float {res} to i8"));
            let a = k.v(format!("getelementptr inbounds i8, ptr addrspace(1) {y}, {ty} {q}"));
            k.ins(format!("store i8 {b}, ptr addrspace(1) {a}, align 1"));
            return;
        }
        match half {
            None => k.store(&res, y, ty, &q),
            Some(h) => {
                if h.keep_f32 {
                    k.store(&res, y, ty, &q);
                }
                let o = if ty == "i32" { k.v(format!("zext i32 {q} to i64")) } else { q.clone() };
                h.store(&mut k.b, &res, "%p2", &o);
            }
        }
    });
    k.finish(params);
    Ok(flat_geometry(total))
}

/// What every pool kernel checks of `geom` (the module doc's invariants:
/// `c == oc`, non-zero windows, strides and dilations, the CPU's output
/// size for `ceil_mode`) and the type of its arithmetic: the output's
/// element count and `i32` or `i64`.
fn checked(geom: &ConvGeom, ceil_mode: bool) -> Result<(u64, &'static str), String> {
    let g = *geom;
    if g.c != g.oc {
        return Err(format!(
            "pool output channels must equal the input's {}, found {}",
            g.c, g.oc
        ));
    }
    if g.kh == 0 || g.kw == 0 || g.stride.contains(&0) || g.dilation.contains(&0) {
        return Err(format!(
            "pool window {}x{}, strides {:?} and dilations {:?} must be non-zero",
            g.kh, g.kw, g.stride, g.dilation
        ));
    }
    // Per dimension (H, W): input, window, output, stride, dilation, pads.
    let dims = [(g.h, g.kh, g.oh, 0), (g.w, g.kw, g.ow, 1)];
    let dim = |&(i, kk, o, d): &(u64, u64, u64, usize)| {
        (
            i,
            kk,
            o,
            g.stride[d],
            g.dilation[d],
            g.pads[d],
            g.pads[d + 2],
        )
    };
    let want: Vec<Option<u64>> = dims
        .iter()
        .map(|d| {
            let (i, kk, _, s, dl, p0, p1) = dim(d);
            pool_out_size(i, kk, s, dl, p0, p1, ceil_mode)
        })
        .collect();
    match (want[0], want[1]) {
        (Some(eh), Some(ew)) if (eh, ew) == (g.oh, g.ow) => {}
        (Some(eh), Some(ew)) => {
            return Err(format!(
                "pool output size must be {eh}x{ew} for this geometry, found {}x{}",
                g.oh, g.ow
            ));
        }
        _ => {
            return Err(format!(
                "the pool window ({}x{}, dilation {:?}) is larger than the padded input ({}x{} with pads {:?})",
                g.kh, g.kw, g.dilation, g.h, g.w, g.pads
            ));
        }
    }
    let big = || format!("pool of {geom:?} is too large");
    let prod = |v: &[u64]| v.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
    let total = prod(&[g.n, g.oh, g.ow, g.c]).ok_or_else(big)?;
    let x_len = prod(&[g.n, g.h, g.w, g.c]).ok_or_else(big)?;
    if total == 0 {
        return Ok((0, "i32"));
    }
    // 32-bit arithmetic when every index and intermediate coordinate (at
    // most a window's reach past the padded extent) stays far below 2^31;
    // 64-bit while they stay far below 2^63.
    let reach = dims.iter().map(|d| {
        let (i, kk, o, s, dl, p0, p1) = dim(d);
        o as u128 * s as u128 + kk as u128 * dl as u128 + (i + p0 + p1) as u128
    });
    let most = reach
        .chain([total as u128, x_len as u128])
        .max()
        .unwrap_or(0);
    let ty = match most {
        m if m < 1 << 30 => "i32",
        m if m < 1 << 62 => "i64",
        _ => return Err(format!("pool of {geom:?} is too large")),
    };
    Ok((total, ty))
}

/// The taps `t` in `0..kk` whose coordinate `base + t·d` lies in
/// `0..len`, as a half-open range `(lo, hi)` with `lo ≤ hi` (the CPU's
/// `tap_range`); `base` is signed.
fn taps(k: &mut Kernel, ty: &str, base: &str, d: u64, kk: u64, len: u64) -> (String, String) {
    let neg = k.v(format!("icmp slt {ty} {base}, 0"));
    // lo = ⌈−base / d⌉ when base < 0.
    let nb = k.v(format!("sub {ty} 0, {base}"));
    let lo = ceil_div(k, ty, &nb, d);
    let lo = k.v(format!("select i1 {neg}, {ty} {lo}, {ty} 0"));
    let lo = k.umin(ty, &lo, &kk.to_string());
    let hi = padded_taps(k, ty, base, d, kk, len);
    let hi = k.call2(&format!("umax.{ty}"), ty, &hi, &lo);
    (lo, hi)
}

/// `min(kk, ⌈(end − base) / d⌉)` when `base < end`, else 0: the taps
/// `t < kk` whose coordinate `base + t·d` is below `end`.
fn padded_taps(k: &mut Kernel, ty: &str, base: &str, d: u64, kk: u64, end: u64) -> String {
    let inside = k.v(format!("icmp slt {ty} {base}, {end}"));
    let room = k.v(format!("sub {ty} {end}, {base}"));
    let n = ceil_div(k, ty, &room, d);
    let n = k.v(format!("select i1 {inside}, {ty} {n}, {ty} 0"));
    k.umin(ty, &n, &kk.to_string())
}

/// `⌈a / d⌉` for a non-negative `a` (any value where the caller discards
/// the result).
fn ceil_div(k: &mut Kernel, ty: &str, a: &str, d: u64) -> String {
    if d == 1 {
        return a.to_string();
    }
    let t = k.v(format!("add {ty} {a}, {}", d - 1));
    k.v(format!("udiv {ty} {t}, {d}"))
}
