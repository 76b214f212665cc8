//! The implicit-im2col index arithmetic that the tensor-core convolutions
//! ([`super::gemm_tc`] with [`super::AMode::Conv`], [`super::gemm_s8`])
//! share: a GEMM row as an output pixel and its input origin, a GEMM
//! column `kk = (ky·kw + kx)·cg + ci` as a filter tap, and their element
//! offsets in the NHWC input. Free functions over the kernel's [`Body`],
//! in an offset type `ty` (`i32` where the caller proved every offset
//! fits, else `i64`), so both generators emit the same text.

use super::ConvGeom;
use crate::irtext::Body;

/// The i32 value `v` as an offset of type `ty` (i32: itself).
pub(crate) fn widen(b: &mut Body, v: &str, ty: &str, signed: bool) -> String {
    match (ty, signed) {
        ("i32", _) => v.to_string(),
        (_, true) => b.v(format!("sext i32 {v} to {ty}")),
        (_, false) => b.v(format!("zext i32 {v} to {ty}")),
    }
}

/// GEMM row `row` (i32, `(img·oh + oy)·ow + ox`) of group `grp` (already
/// of type `ty`): the input origin `iy = oy·sh − pad_top`,
/// `ix = ox·sw − pad_left` (i32, negative in the padding) and the offset
/// `((img·h + iy)·w + ix)·c + grp·cg` of its channel 0 (negative in the
/// padding). Returns (iy, ix, offset).
pub(crate) fn pixel(
    b: &mut Body,
    g: &ConvGeom,
    row: &str,
    grp: &str,
    ty: &str,
) -> (String, String, String) {
    let cg = g.c.checked_div(g.group).unwrap_or(0);
    let img = b.v(format!("udiv i32 {row}, {}", g.oh * g.ow));
    let pix = b.v(format!("urem i32 {row}, {}", g.oh * g.ow));
    let oy = b.v(format!("udiv i32 {pix}, {}", g.ow));
    let ox = b.v(format!("urem i32 {pix}, {}", g.ow));
    let iy = b.v(format!("mul i32 {oy}, {}", g.stride[0]));
    let iy = b.v(format!("sub i32 {iy}, {}", g.pads[0]));
    let ix = b.v(format!("mul i32 {ox}, {}", g.stride[1]));
    let ix = b.v(format!("sub i32 {ix}, {}", g.pads[1]));
    let imgx = widen(b, &img, ty, false);
    let iyx = widen(b, &iy, ty, true);
    let ixx = widen(b, &ix, ty, true);
    let o = b.v(format!("mul {ty} {imgx}, {}", g.h));
    let o = b.v(format!("add {ty} {o}, {iyx}"));
    let o = b.v(format!("mul {ty} {o}, {}", g.w));
    let o = b.v(format!("add {ty} {o}, {ixx}"));
    let o = b.v(format!("mul {ty} {o}, {}", g.c));
    let ob = b.v(format!("mul {ty} {grp}, {cg}"));
    let off = b.v(format!("add {ty} {o}, {ob}"));
    (iy, ix, off)
}

/// The tap of GEMM column `kk` (i32) for a pixel with input origin
/// (`iy0`, `ix0`): `ky·dh`, `kx·dw`, `ci`, and whether the input row and
/// column `iy0 + ky·dh`, `ix0 + kx·dw` lie in the image. Returns (dy, dx,
/// ci, y in, x in).
pub(crate) fn tap(
    b: &mut Body,
    g: &ConvGeom,
    kk: &str,
    iy0: &str,
    ix0: &str,
) -> (String, String, String, String, String) {
    let cg = g.c.checked_div(g.group).unwrap_or(0);
    let ky = b.v(format!("udiv i32 {kk}, {}", g.kw * cg));
    let r = b.v(format!("urem i32 {kk}, {}", g.kw * cg));
    let kx = b.v(format!("udiv i32 {r}, {cg}"));
    let ci = b.v(format!("urem i32 {r}, {cg}"));
    let dy = b.v(format!("mul i32 {ky}, {}", g.dilation[0]));
    let dx = b.v(format!("mul i32 {kx}, {}", g.dilation[1]));
    let y = b.v(format!("add i32 {iy0}, {dy}"));
    let x = b.v(format!("add i32 {ix0}, {dx}"));
    let yin = b.v(format!("icmp ult i32 {y}, {}", g.h));
    let xin = b.v(format!("icmp ult i32 {x}, {}", g.w));
    (dy, dx, ci, yin, xin)
}

/// The offset (type `ty`) of tap (`dy`, `dx`, `ci`) from [`tap`] past its
/// pixel's offset `pix_off`: `pix_off + (dy·w + dx)·c + ci`.
pub(crate) fn tap_offset(
    b: &mut Body,
    g: &ConvGeom,
    [dy, dx, ci]: [&str; 3],
    pix_off: &str,
    ty: &str,
) -> String {
    let dyx = widen(b, dy, ty, false);
    let dxx = widen(b, dx, ty, false);
    let cix = widen(b, ci, ty, false);
    let o = b.v(format!("mul {ty} {dyx}, {}", g.w));
    let o = b.v(format!("add {ty} {o}, {dxx}"));
    let o = b.v(format!("mul {ty} {o}, {}", g.c));
    let o = b.v(format!("add {ty} {o}, {cix}"));
    b.v(format!("add {ty} {pix_off}, {o}"))
}
