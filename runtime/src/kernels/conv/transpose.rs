//! NHWC transposed convolution (ONNX ConvTranspose), over the weight layout
//! of `aoc_plan::pack::conv_transpose2d_pack_weights`:
//! a GEMM of the input pixels by the weights into a column buffer (one
//! column per output channel and kernel tap), then a gather of the columns
//! into the output rows they land on, parallel over output rows.
//!
//! Invariants: as in the parent module (no panic on bad arguments, slices
//! may be longer than needed, results independent of the thread count).

use rayon::prelude::*;

use super::{Dims, KernelError, check_len, kerr, multiversion, product};
use crate::kernels::gemm::{GemmOptions, gemm};
use crate::kernels::pack::{PackedB, pack_b};
use crate::plan::ConvGeom;

/// Column-buffer budget of [`conv_transpose2d`] in floats (4 MiB); a block
/// has at least one input row.
const COLUMN_FLOATS: usize = 1 << 20;

/// NHWC transposed convolution (ONNX ConvTranspose): `x` is `n × h × w × c`,
/// `y` is `n × oh × ow × oc`, `w` from
/// [`conv_transpose2d_pack_weights`](super::conv_transpose2d_pack_weights).
/// Input pixel `(iy, ix)` adds `x · w[.., ky, kx, ..]` at output
/// `(iy·stride + ky·dilation − pad_top, ix·stride + kx·dilation − pad_left)`;
/// outputs past the full result (ONNX's `output_padding`) get the bias only.
pub fn conv_transpose2d(
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let g = Dims::new(geom)?;
    g.check_groups()?;
    if g.h == 0 || g.w == 0 {
        return Err(kerr(format!(
            "input spatial size must be non-zero, found {}x{}",
            g.h, g.w
        )));
    }
    for dim in 0..2 {
        let (input, k, out) = ([g.h, g.w][dim], [g.kh, g.kw][dim], [g.oh, g.ow][dim]);
        let (s, d) = (g.stride[dim], g.dilation[dim]);
        let full = (input - 1) * s + d * (k - 1) + 1;
        let lo = full as isize - (g.pads[dim] + g.pads[dim + 2]) as isize;
        let hi = lo + s.max(d) as isize - 1;
        if lo < 1 || (out as isize) < lo || (out as isize) > hi {
            return Err(kerr(format!(
                "output {} must be between {lo} and {hi} for this geometry, found {out}",
                ["height", "width"][dim]
            )));
        }
    }
    check_len("input", g.x_len, x.len())?;
    check_len("output", g.y_len, y.len())?;
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let taps = g.kh * g.kw;
    let wcols = taps * mg;
    check_len("weight", product("weight", &[g.c, wcols])?, w.len())?;
    if let Some(b) = bias {
        check_len("bias", g.oc, b.len())?;
    }
    if g.y_len == 0 {
        return Ok(());
    }
    let y = &mut y[..g.y_len];
    y.par_chunks_mut(g.oc.max(1)).for_each(|px| match bias {
        Some(b) => px.copy_from_slice(&b[..g.oc]),
        None => px.fill(0.0),
    });
    if g.x_len == 0 {
        return Ok(());
    }
    let packed: Vec<PackedB> = (0..g.group)
        .map(|grp| {
            pack_b(
                cg,
                wcols,
                &w[grp * cg * wcols..(grp + 1) * cg * wcols],
                wcols,
            )
        })
        .collect::<Result<_, _>>()?;
    let ncol = g.group * wcols;
    let block = (COLUMN_FLOATS / (g.w * ncol).max(1)).clamp(1, g.h);
    let mut col = vec![0.0f32; block * g.w * ncol];
    let threads = rayon::current_num_threads();
    let opts = GemmOptions {
        threads,
        ..Default::default()
    };
    let (image, out_row) = (g.oh * g.ow * g.oc, g.ow * g.oc);
    for b in 0..g.n {
        let yimg = &mut y[b * image..(b + 1) * image];
        for iy0 in (0..g.h).step_by(block) {
            let rows = block.min(g.h - iy0);
            let pixels = rows * g.w;
            let x0 = (b * g.h + iy0) * g.w * g.c;
            for (grp, wg) in packed.iter().enumerate() {
                gemm(
                    pixels,
                    wcols,
                    cg,
                    &x[x0 + grp * cg..],
                    g.c,
                    wg.as_ref(),
                    &mut col[grp * wcols..],
                    ncol,
                    &opts,
                )?;
            }
            // Output rows these input rows reach.
            let first = (iy0 * g.stride[0]) as isize - g.pads[0] as isize;
            let last = ((iy0 + rows - 1) * g.stride[0] + (g.kh - 1) * g.dilation[0]) as isize
                - g.pads[0] as isize;
            let oy0 = first.max(0) as usize;
            let oy1 = ((last + 1).max(0) as usize).min(g.oh);
            if oy0 >= oy1 {
                continue;
            }
            let col = &col[..];
            yimg[oy0 * out_row..oy1 * out_row]
                .par_chunks_mut(out_row)
                .enumerate()
                .for_each(|(i, yrow)| {
                    transpose_gather_row(&g, col, iy0, rows, oy0 + i, yrow);
                });
        }
    }
    Ok(())
}

multiversion! {
    /// Adds to output row `oy` of one image every column-buffer entry (input
    /// rows `iy0 .. iy0 + rows`) that lands on it; the column buffer holds,
    /// per input pixel, `group × kh × kw × oc/group` products.
    fn transpose_gather_row(
        g: &Dims,
        col: &[f32],
        iy0: usize,
        rows: usize,
        oy: usize,
        yrow: &mut [f32],
    ) {
        let mg = g.oc / g.group;
        let wcols = g.kh * g.kw * mg;
        let ncol = g.group * wcols;
        let (s, d) = (g.stride, g.dilation);
        for ky in 0..g.kh {
            let t = (oy + g.pads[0]) as isize - (ky * d[0]) as isize;
            if t < 0 || !(t as usize).is_multiple_of(s[0]) {
                continue;
            }
            let iy = t as usize / s[0];
            if iy < iy0 || iy >= iy0 + rows {
                continue;
            }
            for ix in 0..g.w {
                let src = &col[((iy - iy0) * g.w + ix) * ncol..][..ncol];
                for kx in 0..g.kw {
                    let ox = (ix * s[1] + kx * d[1]) as isize - g.pads[1] as isize;
                    if ox < 0 || ox >= g.ow as isize {
                        continue;
                    }
                    let dst = &mut yrow[ox as usize * g.oc..][..g.oc];
                    for grp in 0..g.group {
                        let from = &src[grp * wcols + (ky * g.kw + kx) * mg..][..mg];
                        let to = &mut dst[grp * mg..(grp + 1) * mg];
                        for (o, v) in to.iter_mut().zip(from) {
                            *o += v;
                        }
                    }
                }
            }
        }
    }
}
