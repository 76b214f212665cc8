//! A convolution's filter rows unfolded into channels, for 8-bit
//! convolutions whose input has too few channels for the `wgmma` kernel's
//! 16-byte chunks (a stem's 3): each output column's `kw` horizontal taps
//! of `c` channels become one pixel of `kw·c` channels, padded to `cp`, a
//! multiple of 16. The convolution then runs on the unfolded input with a
//! `kh × 1` window ([`unfold_w_geom`]) and reads whole 16-byte chunks;
//! the weights are unfolded the same way (`(kx, ci)` → channel
//! `kx·c + ci`, zeros after).
//!
//! Invariants:
//! - One work item per `(n, y, ox)` of the input rows and output columns:
//!   byte `kx·c + ci` of the item is `x[n][y][ox·sw + kx·dw − pl][ci]`,
//!   or `fill` where that column is in the padding, and the bytes from
//!   `kw·c` to `cp` are `fill`; stored as `cp / 16` 16-byte vectors (rows
//!   of `cp` bytes at a 16-byte aligned base: a scratch region).
//! - A padded tap reads column 0 (a valid address) and drops the value.
//! - `fill` is the input's zero point, so a padded tap adds nothing to the
//!   convolution, as its own padding does; the padded channels meet zero
//!   weights.

use super::builder::{BLOCK, K, index_type, launch, product};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::{ConvGeom, Geometry};

/// The most channels an unfolded pixel may have (its bytes are unrolled).
pub const UNFOLD_MAX: u64 = 64;

/// `kw·c` rounded up to 16: the unfolded pixel's channels, if at most
/// [`UNFOLD_MAX`].
pub fn unfolded_channels(g: &ConvGeom) -> Option<u64> {
    let cp = g.kw.checked_mul(g.c)?.div_ceil(16) * 16;
    (g.c > 0 && g.kw > 0 && cp <= UNFOLD_MAX).then_some(cp)
}

/// The geometry of `g` on its input unfolded to `cp` channels: the same
/// output, a `kh × 1` window with unit horizontal stride and dilation
/// over `ow` columns, no horizontal padding.
pub fn unfold_w_geom(g: &ConvGeom, cp: u64) -> ConvGeom {
    ConvGeom {
        w: g.ow,
        c: cp,
        kw: 1,
        stride: [g.stride[0], 1],
        dilation: [g.dilation[0], 1],
        pads: [g.pads[0], 0, g.pads[2], 0],
        ..*g
    }
}

/// The OHWI weights `w` of `g` (`oc × kh × kw × c` bytes) unfolded for
/// [`unfold_w_geom`]`(g, cp)`: `oc × kh × cp`, zeros past `kw·c`.
pub fn unfold_w_weights(g: &ConvGeom, cp: u64, w: &[u8]) -> Vec<u8> {
    let row = (g.kw * g.c) as usize;
    let mut out = vec![0u8; (g.oc * g.kh * cp) as usize];
    for (r, taps) in w.chunks_exact(row.max(1)).enumerate().take((g.oc * g.kh) as usize) {
        out[r * cp as usize..][..row].copy_from_slice(taps);
    }
    out
}

/// The kernel of the module doc for convolution `g` (one group), `cp`
/// from [`unfolded_channels`]. Parameters `(x, dst)`: `x` is `n × h × w ×
/// c` bytes, `dst` `n × h × ow × cp`.
pub fn unfold_w(m: &mut ModuleText, name: &str, g: &ConvGeom, cp: u64, fill: u8) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if unfolded_channels(g) != Some(cp) || g.group != 1 {
        return Err(format!(
            "unfold_w: a {}x{} window on {} channels (group {}) does not unfold into {cp} channels (a multiple of 16 up to {UNFOLD_MAX})",
            g.kh, g.kw, g.c, g.group
        ));
    }
    let rows = g.n * g.h;
    let items = product("unfold_w", &[rows, g.ow])?;
    let bytes = product("unfold_w", &[rows, g.ow, cp])?.max(product("unfold_w", &[rows, g.w, g.c])?);
    let ix = index_type(bytes.max(items));
    let gm = launch(items as u64, BLOCK);
    let mut k = K::new(m, ix, gm);
    let fill = fill as i8;
    k.items(items as u64, |k, p| {
        let at = k.split(p, &[rows, g.ow]);
        let (row, ox) = (at[0].clone(), at[1].clone());
        let base = k.lin(0, &[(&row, (g.w * g.c) as i128)]);
        let mut lanes = Vec::new();
        for kx in 0..g.kw {
            // Column ox·sw + kx·dw − pl, in range or the padding.
            let col = k.lin((kx * g.dilation[1]) as i128 - g.pads[1] as i128, &[(&ox, g.stride[1] as i128)]);
            let ty = k.ix;
            let lo = k.v(format!("icmp sge {ty} {col}, 0"));
            let hi = k.v(format!("icmp slt {ty} {col}, {}", g.w));
            let inside = k.v(format!("and i1 {lo}, {hi}"));
            let safe = k.v(format!("select i1 {inside}, {ty} {col}, {ty} 0"));
            let px = k.v(format!("mul {ty} {safe}, {}", g.c));
            let px = k.v(format!("add {ty} {base}, {px}"));
            for ci in 0..g.c {
                let off = k.v(format!("add {ty} {px}, {ci}"));
                let src = k.at("%x", ty, &off);
                let byte = k.load("i8", &src, 1);
                lanes.push(k.v(format!("select i1 {inside}, i8 {byte}, i8 {fill}")));
            }
        }
        lanes.resize(cp as usize, fill.to_string());
        for (v, chunk) in lanes.chunks(16).enumerate() {
            let mut vec = "poison".to_string();
            for (j, lane) in chunk.iter().enumerate() {
                vec = k.v(format!("insertelement <16 x i8> {vec}, i8 {lane}, i32 {j}"));
            }
            let off = k.lin((v * 16) as i128, &[(p, cp as i128)]);
            let ty = k.ix;
            let dst = k.at("%dst", ty, &off);
            k.store("<16 x i8>", &vec, &dst, 16);
        }
    });
    let text = k.finish(name, &["%x", "%dst"], 1);
    m.func(text);
    Ok(gm)
}
