//! Integer NHWC convolution (`Step::QConv2d`): i8/u8 activations, i8
//! weights `[oc][kh][kw][c/group]`, exact i32 accumulation, and the
//! requantization `clamp(round_half_even(fma(acc, scale, shift)) + y_zero,
//! y_min, y_max)` per output channel.
//!
//! This is the portable implementation every executor agrees with bit for
//! bit (the GPU kernel does the same f32 operations): for each output pixel
//! and group the im2col row is gathered once as i32 (padding reads as the
//! input's zero point), then dotted with each of the group's weight rows.
//! Pixels are split across the pool's threads.
//!
//! Invariant: every slice length is checked against the geometry first, so
//! a bad plan is an error, never an out-of-bounds access.

use rayon::prelude::*;

use super::KernelError;
use crate::plan::{ConvGeom, QuantConv};

/// The requantization of one accumulator (shared with the tests and, as a
/// specification, with the GPU kernel).
pub fn requantize(acc: i32, scale: f32, shift: f32, p: &QuantConv) -> i32 {
    let r = (acc as f32).mul_add(scale, shift).round_ties_even();
    // `as` saturates (NaN → 0); clamping before adding the zero point keeps
    // the sum in range.
    let lo = (p.y_min as i64 - p.y_zero as i64) as f32;
    let hi = (p.y_max as i64 - p.y_zero as i64) as f32;
    (r.clamp(lo, hi) as i64 + p.y_zero as i64) as i32
}

/// Runs the convolution; `x`, `y` are raw bytes of the storage type.
#[allow(clippy::too_many_arguments)]
pub fn qconv2d(
    g: &ConvGeom,
    p: &QuantConv,
    x: &[u8],
    w: &[i8],
    comp: &[i32],
    scale: &[f32],
    shift: &[f32],
    y: &mut [u8],
) -> Result<(), KernelError> {
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
    let (cg, ocg) = (c / group, oc / group);
    let kk = kh * kw * cg;
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
    let pixels = n * oh * ow;
    if pixels == 0 || oc == 0 {
        return Ok(());
    }
    let [sh, sw] = g.stride.map(|v| v as usize);
    let [dh, dw] = g.dilation.map(|v| v as usize);
    let (pt, pl) = (g.pads[0] as usize, g.pads[1] as usize);
    let load = |b: u8| if p.x_signed { b as i8 as i32 } else { b as i32 };
    let store = |v: i32| if p.y_signed { v as i8 as u8 } else { v as u8 };
    y[..pixels * oc]
        .par_chunks_mut(oc)
        .enumerate()
        .for_each_init(
            || vec![0i32; kk],
            |row, (pix, out)| {
                let (img, rest) = (pix / (oh * ow), pix % (oh * ow));
                let (oy, ox) = (rest / ow, rest % ow);
                for gi in 0..group {
                    // Gather the im2col row of this pixel and group.
                    for ky in 0..kh {
                        let iy = (oy * sh + ky * dh).checked_sub(pt).filter(|&v| v < h);
                        for kx in 0..kw {
                            let ix = (ox * sw + kx * dw).checked_sub(pl).filter(|&v| v < wd);
                            let dst = &mut row[(ky * kw + kx) * cg..][..cg];
                            match (iy, ix) {
                                (Some(iy), Some(ix)) => {
                                    let src = &x[((img * h + iy) * wd + ix) * c + gi * cg..][..cg];
                                    for (d, &s) in dst.iter_mut().zip(src) {
                                        *d = load(s);
                                    }
                                }
                                _ => dst.fill(p.x_zero),
                            }
                        }
                    }
                    for o in gi * ocg..(gi + 1) * ocg {
                        let wr = &w[o * kk..][..kk];
                        let dot = row
                            .iter()
                            .zip(wr)
                            .fold(0i32, |a, (&xv, &wv)| a.wrapping_add(xv * wv as i32));
                        out[o] =
                            store(requantize(dot.wrapping_add(comp[o]), scale[o], shift[o], p));
                    }
                }
            },
        );
    Ok(())
}
