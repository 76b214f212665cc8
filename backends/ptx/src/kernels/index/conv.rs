//! Direct convolutions that sum a few gathered neighbours per output, NHWC
//! f32: `Step::DepthwiseConv2d` and `Step::ConvTranspose2d`, and the
//! geometry checks they share.
//!
//! Invariants:
//! - A geometry is checked before any code is written: a non-zero window,
//!   strides and dilations of at least 1, spatial sizes, window, strides,
//!   dilations and pads within u32, tensor sizes within [`product`]'s
//!   limit, and output sizes that the forward (depthwise) or transposed
//!   formula allows.
//! - Depthwise adds the `x·w` products in the CPU's tap order `(ky, kx)`
//!   with a separate multiply and add (identical results); a tap outside the
//!   input reads pixel 0 (a valid address) and its product is dropped by a
//!   select; relu is `maxnum(acc, 0)` (NaN becomes 0, as `f32::max`).
//! - Transposed convolution is a gather: an output sums the taps whose input
//!   position `(o + pad − k·dilation) / stride` is exact and inside the
//!   input, so each output is written once by one thread (no atomics); it
//!   accumulates with `fma` (the CPU's GEMM sums in another order anyway).
//! - Offsets are 32-bit only when [`conv_index`] finds every byte offset and
//!   coordinate (including a window's reach past the padding) below 2^31.

use aoc_plan::plan::ConvGeom;

use super::builder::{BLOCK, K, fty, index_type, launch, product, zero};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::Geometry;

/// `(input + pads − span) / stride + 1`, or `None` when the window does not
/// fit (the CPU's `conv_out_size`).
fn conv_out(input: u64, k: u64, stride: u64, dilation: u64, pb: u64, pe: u64) -> Option<u128> {
    let span = dilation as u128 * (k as u128 - 1) + 1;
    let padded = input as u128 + pb as u128 + pe as u128;
    (padded >= span).then(|| (padded - span) / stride as u128 + 1)
}

fn check_conv(op: &str, g: &ConvGeom) -> Result<(), String> {
    if g.kh == 0 || g.kw == 0 {
        return Err(format!(
            "{op}: kernel size must be non-zero, found {}x{}",
            g.kh, g.kw
        ));
    }
    if g.stride.contains(&0) || g.dilation.contains(&0) {
        return Err(format!(
            "{op}: strides and dilations must be at least 1, found {:?} and {:?}",
            g.stride, g.dilation
        ));
    }
    let big = [
        g.h,
        g.w,
        g.kh,
        g.kw,
        g.stride[0],
        g.stride[1],
        g.dilation[0],
        g.dilation[1],
    ];
    if big.iter().chain(&g.pads).any(|&v| v > u32::MAX as u64) {
        return Err(format!("{op}: geometry value is too large"));
    }
    product(&format!("{op} input"), &[g.n, g.h, g.w, g.c])?;
    product(&format!("{op} output"), &[g.n, g.oh, g.ow, g.oc])?;
    product(&format!("{op} weight"), &[g.kh, g.kw, g.c.max(1), g.oc])?;
    Ok(())
}

/// The index type of a convolution: offsets and coordinates in bytes.
fn conv_index(g: &ConvGeom) -> &'static str {
    let x = g.n as u128 * g.h as u128 * g.w as u128 * g.c as u128;
    let y = g.n as u128 * g.oh as u128 * g.ow as u128 * g.oc as u128;
    let w = g.kh as u128 * g.kw as u128 * g.c.max(1) as u128 * g.oc as u128;
    let reach = |o: u64, s: u64, p: u64, k: u64, d: u64, i: u64| {
        o as u128 * s as u128 + p as u128 + k as u128 * d as u128 + i as u128
    };
    let cy = reach(g.oh, g.stride[0], g.pads[0], g.kh, g.dilation[0], g.h);
    let cx = reach(g.ow, g.stride[1], g.pads[1], g.kw, g.dilation[1], g.w);
    index_type(x.max(y).max(w).max(cy).max(cx) * 4)
}

/// `Step::DepthwiseConv2d` (NHWC, `group == c`, `oc == c · multiplier`,
/// output channel `o` reads input channel `o / multiplier`; `w` is `kh ×
/// kw × oc`). Parameters `(x, w, [bias], y)`.
pub fn depthwise_conv2d(
    m: &mut ModuleText,
    name: &str,
    geom: &ConvGeom,
    bias: bool,
    relu: bool,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let g = *geom;
    check_conv("depthwise_conv2d", &g)?;
    if g.group != g.c || g.c == 0 || !g.oc.is_multiple_of(g.c) {
        return Err(format!(
            "depthwise_conv2d: needs group == channels and output channels a multiple of them, found group {}, {} input and {} output channels",
            g.group, g.c, g.oc
        ));
    }
    let eh = conv_out(g.h, g.kh, g.stride[0], g.dilation[0], g.pads[0], g.pads[2]);
    let ew = conv_out(g.w, g.kw, g.stride[1], g.dilation[1], g.pads[1], g.pads[3]);
    if eh != Some(g.oh as u128) || ew != Some(g.ow as u128) {
        return Err(format!(
            "depthwise_conv2d: output size {}x{} does not match the geometry (expected {eh:?}x{ew:?})",
            g.oh, g.ow
        ));
    }
    let mult = g.oc / g.c;
    let ylen = g.n * g.oh * g.ow * g.oc;
    let lanes = if g.oc.is_multiple_of(4) && (mult <= 2 || mult.is_multiple_of(4)) {
        4
    } else {
        1
    };
    let geo = launch(ylen / lanes, BLOCK);
    let params: &[&str] = if bias {
        &["%x", "%w", "%bias", "%y"]
    } else {
        &["%x", "%w", "%y"]
    };
    let mut k = K::new(m, conv_index(&g), geo);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[g.n, g.oh, g.ow, g.oc / v]);
            let o = k.lin(0, &[(&p[3], v as i128)]);
            let ci = match (v, mult) {
                (_, 1) => o.clone(),
                (4, 2) => k.v(format!("lshr {ix} {o}, 1")),
                _ => k.v(format!("udiv {ix} {o}, {mult}")),
            };
            let mut acc = k.bias(bias, &o, v);
            let by = k.lin(-(g.pads[0] as i128), &[(&p[1], g.stride[0] as i128)]);
            let bx = k.lin(-(g.pads[1] as i128), &[(&p[2], g.stride[1] as i128)]);
            let img = k.lin(0, &[(&p[0], g.h as i128)]);
            for ky in 0..g.kh {
                let iy = k.lin((ky * g.dilation[0]) as i128, &[(&by, 1)]);
                let oky = k.v(format!("icmp ult {ix} {iy}, {}", g.h));
                let row = k.v(format!("add {ix} {img}, {iy}"));
                for kx in 0..g.kw {
                    let xx = k.lin((kx * g.dilation[1]) as i128, &[(&bx, 1)]);
                    let okx = k.v(format!("icmp ult {ix} {xx}, {}", g.w));
                    let ok = k.v(format!("and i1 {oky}, {okx}"));
                    let pix = k.lin(0, &[(&row, g.w as i128), (&xx, 1)]);
                    // A masked tap reads pixel 0 (valid) and is discarded.
                    let pix = k.v(format!("select i1 {ok}, {ix} {pix}, {ix} 0"));
                    let xo = k.lin(0, &[(&pix, (g.c * 4) as i128), (&ci, 4)]);
                    let xp = k.at("%x", ix, &xo);
                    let xv = match (v, mult) {
                        (1, _) => k.load("float", &xp, 4),
                        (_, 1) => k.load(ft, &xp, 16),
                        (_, 2) => {
                            let h = k.load("<2 x float>", &xp, 8);
                            k.v(format!("shufflevector <2 x float> {h}, <2 x float> poison, <4 x i32> <i32 0, i32 0, i32 1, i32 1>"))
                        }
                        _ => {
                            let s = k.load("float", &xp, 4);
                            k.splat(&s, 4)
                        }
                    };
                    let t = (ky * g.kw + kx) * g.oc;
                    let wo = k.lin((t * 4) as i128, &[(&o, 4)]);
                    let wp = k.at("%w", ix, &wo);
                    let wv = k.load(ft, &wp, 4 * v);
                    let prod = k.v(format!("fmul {ft} {xv}, {wv}"));
                    let sum = k.v(format!("fadd {ft} {acc}, {prod}"));
                    acc = k.v(format!("select i1 {ok}, {ft} {sum}, {ft} {acc}"));
                }
            }
            if relu {
                // `maximum` keeps NaN (maxnum would give 0).
                acc = k.call("maximum", ft, &[&acc, zero(ft)]);
            }
            let yp = k.item_ptr(i, v);
            k.store(ft, &acc, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        k.lanes_or_one(params, lanes, body);
    }
    let text = k.finish(name, params, 1);
    m.func(text);
    Ok(geo)
}

/// `Step::ConvTranspose2d` (NHWC; `geom` is the forward convolution turned
/// around, `w` is `group × (c/group) × kh × kw × (oc/group)`, pads crop).
/// Output `(oy, ox)` sums, over the taps `(ky, kx)` with `oy + pad_top −
/// ky·dilation = iy·stride` for an input row `iy` (and likewise across),
/// the products over the group's input channels. Parameters `(x, w,
/// [bias], y)`.
pub fn conv_transpose2d(
    m: &mut ModuleText,
    name: &str,
    geom: &ConvGeom,
    bias: bool,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let g = *geom;
    check_conv("conv_transpose2d", &g)?;
    if g.group == 0 || !g.c.is_multiple_of(g.group) || !g.oc.is_multiple_of(g.group) {
        return Err(format!(
            "conv_transpose2d: channels {} (input) and {} (output) must be multiples of group {}",
            g.c, g.oc, g.group
        ));
    }
    if g.h == 0 || g.w == 0 {
        return Err(format!(
            "conv_transpose2d: input spatial size must be non-zero, found {}x{}",
            g.h, g.w
        ));
    }
    for dim in 0..2 {
        let (input, kk, out) = ([g.h, g.w][dim], [g.kh, g.kw][dim], [g.oh, g.ow][dim]);
        let (s, d) = (g.stride[dim] as i128, g.dilation[dim] as i128);
        let full = (input as i128 - 1) * s + d * (kk as i128 - 1) + 1;
        let lo = full - (g.pads[dim] as i128 + g.pads[dim + 2] as i128);
        let hi = lo + s.max(d) - 1;
        if lo < 1 || (out as i128) < lo || (out as i128) > hi {
            return Err(format!(
                "conv_transpose2d: output {} must be between {lo} and {hi} for this geometry, found {out}",
                ["height", "width"][dim]
            ));
        }
    }
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let taps = g.kh * g.kw;
    let ylen = g.n * g.oh * g.ow * g.oc;
    let lanes = if mg.is_multiple_of(4) { 4 } else { 1 };
    let geo = launch(ylen / lanes, BLOCK);
    let params: &[&str] = if bias {
        &["%x", "%w", "%bias", "%y"]
    } else {
        &["%x", "%w", "%y"]
    };
    let mut k = K::new(m, conv_index(&g), geo);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[g.n, g.oh, g.ow, g.oc / v]);
            let o = k.lin(0, &[(&p[3], v as i128)]);
            let grp = k.v(format!("udiv {ix} {o}, {mg}"));
            let j = k.v(format!("urem {ix} {o}, {mg}"));
            let init = k.bias(bias, &o, v);
            let acc = k.slot(ft, &init);
            // Input row (or column) `t / stride` where `t = o + pad − k·dil`
            // is a non-negative multiple of the stride below `len · stride`.
            let src = |k: &mut K, o: &str, pad: u64, off: u64, s: u64, len: u64| {
                let t = k.lin(pad as i128 - off as i128, &[(o, 1)]);
                let nonneg = k.v(format!("icmp sge {ix} {t}, 0"));
                let r = k.v(format!("urem {ix} {t}, {s}"));
                let q = k.v(format!("udiv {ix} {t}, {s}"));
                let exact = k.v(format!("icmp eq {ix} {r}, 0"));
                let inside = k.v(format!("icmp ult {ix} {q}, {len}"));
                let ok = k.v(format!("and i1 {nonneg}, {exact}"));
                let ok = k.v(format!("and i1 {ok}, {inside}"));
                (ok, q)
            };
            for ky in 0..g.kh {
                let (oky, iy) = src(k, &p[1], g.pads[0], ky * g.dilation[0], g.stride[0], g.h);
                k.if_(&oky, |k| {
                    for kx in 0..g.kw {
                        let (okx, ixx) =
                            src(k, &p[2], g.pads[1], kx * g.dilation[1], g.stride[1], g.w);
                        k.if_(&okx, |k| {
                            let pix = k.lin(
                                0,
                                &[(&p[0], (g.h * g.w) as i128), (&iy, g.w as i128), (&ixx, 1)],
                            );
                            let xb =
                                k.lin(0, &[(&pix, (g.c * 4) as i128), (&grp, (cg * 4) as i128)]);
                            let t = ky * g.kw + kx;
                            let wb = k.lin(
                                (t * mg * 4) as i128,
                                &[(&grp, (cg * taps * mg * 4) as i128), (&j, 4)],
                            );
                            let ix = k.ix;
                            k.range(ix, "0", cg, 1, |k, ci| {
                                let xo = k.lin(0, &[(&xb, 1), (ci, 4)]);
                                let xp = k.at("%x", ix, &xo);
                                let xv = k.load("float", &xp, 4);
                                let xv = k.splat(&xv, v);
                                let wo = k.lin(0, &[(&wb, 1), (ci, (taps * mg * 4) as i128)]);
                                let wp = k.at("%w", ix, &wo);
                                let wv = k.load(ft, &wp, 4 * v);
                                let a = k.v(format!("load {ft}, ptr {acc}"));
                                let a = k.call("fma", ft, &[&xv, &wv, &a]);
                                k.ins(format!("store {ft} {a}, ptr {acc}"));
                            });
                        });
                    }
                });
            }
            let a = k.v(format!("load {ft}, ptr {acc}"));
            let yp = k.item_ptr(i, v);
            k.store(ft, &a, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        // `x` is read one float at a time.
        k.lanes_or_one(&params[1..], lanes, body);
    }
    let text = k.finish(name, params, 1);
    m.func(text);
    Ok(geo)
}
