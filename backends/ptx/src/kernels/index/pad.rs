//! A half copy of an NHWC activation with its channels padded with zeros
//! to a multiple of 8, so that the `wgmma` convolution reads every pixel
//! in 16-byte runs (a stem's 3 input channels become 8).
//!
//! Invariants:
//! - One work item per pixel: its `c` f32 values are read, rounded to
//!   f16/bf16 ([`HalfCopy::bits`]), followed by `cp − c` zeros, and stored
//!   as `cp / 8` 16-byte vectors (the copy's rows are `2·cp` bytes, a
//!   multiple of 16, and its base is 16-byte aligned: a scratch slot).
//! - `rows = 0` gives a kernel that returns at once (grid 1).

use super::builder::{BLOCK, K, index_type, launch, product};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::{Geometry, HalfCopy};

/// Channels [`pad_half`] pads to at most (the loop over them is unrolled).
pub const PAD_MAX: u64 = 64;

/// `dst[p][ci] = half(x[p][ci])` for `ci < c`, 0 for `c ≤ ci < cp`, over
/// `rows` pixels; `x` is f32 `rows × c`, `dst` 16-bit `rows × cp`.
/// Parameters `(x, dst)`.
pub fn pad_half(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    c: u64,
    cp: u64,
    bf16: bool,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if c == 0 || c > cp || !cp.is_multiple_of(8) || cp > PAD_MAX {
        return Err(format!(
            "pad_half: {c} channels cannot be padded to {cp} (a multiple of 8 up to {PAD_MAX})"
        ));
    }
    let bytes = product("pad_half", &[rows, cp, 2])?.max(product("pad_half", &[rows, c, 4])?);
    let ix = index_type(bytes);
    let g = launch(rows, BLOCK);
    let mut k = K::new(m, ix, g);
    let h = HalfCopy {
        bf16,
        keep_f32: false,
    };
    k.items(rows, |k, p| {
        let mut lanes = Vec::new();
        for ci in 0..c {
            let off = k.lin((ci * 4) as i128, &[(p, (c * 4) as i128)]);
            let at = k.at("%x", ix, &off);
            let x = k.load("float", &at, 4);
            lanes.push(h.bits(&mut k.b, &x));
        }
        lanes.resize(cp as usize, "0".to_string());
        for (v, chunk) in lanes.chunks(8).enumerate() {
            let mut vec = "poison".to_string();
            for (j, lane) in chunk.iter().enumerate() {
                vec = k.v(format!(
                    "insertelement <8 x i16> {vec}, i16 {lane}, i32 {j}"
                ));
            }
            let off = k.lin((v * 16) as i128, &[(p, (cp * 2) as i128)]);
            let at = k.at("%dst", ix, &off);
            k.store("<8 x i16>", &vec, &at, 16);
        }
    });
    let text = k.finish(name, &["%x", "%dst"], 1);
    m.func(text);
    Ok(g)
}
