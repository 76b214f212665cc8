//! Direct (non-GEMM) convolutions over NHWC, parallel over output rows and
//! vectorized over channels, each inner loop compiled per instruction-set
//! level by `multiversion!`:
//! - depthwise convolution (`group == c`, any channel multiplier);
//! - convolutions with many narrow groups (fewer than 16 outputs per group,
//!   ResNeXt-style), where per-group GEMMs would spend their time unfolding
//!   and packing a few channels at a time.
//!
//! Invariants: as in the parent module (no panic on bad arguments, slices
//! may be longer than needed, results independent of the thread count).

use rayon::prelude::*;

use super::{Dims, KernelError, check_len, kerr, multiversion, product, tap_range, with_scratch};
use crate::kernels::act::Post;
use crate::kernels::pack::{PANEL_WIDTH, packed_len};
use crate::plan::ConvGeom;

/// NHWC depthwise convolution (`group == c`, `oc == c · multiplier`; output
/// channel `o` reads input channel `o / multiplier`) with `w` from
/// [`depthwise_pack_weights`](super::depthwise_pack_weights).
pub fn depthwise_conv2d(
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: impl Into<Post>,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let post = post.into();
    let g = Dims::new(geom)?;
    if g.group != g.c || g.c == 0 || g.oc % g.c != 0 {
        return Err(kerr(format!(
            "depthwise convolution needs group == channels and output channels a multiple of them, found group {}, {} input and {} output channels",
            g.group, g.c, g.oc
        )));
    }
    g.check_conv_out()?;
    check_len("input", g.x_len, x.len())?;
    check_len("output", g.y_len, y.len())?;
    check_len("weight", product("weight", &[g.kh, g.kw, g.oc])?, w.len())?;
    if let Some(b) = bias {
        check_len("bias", g.oc, b.len())?;
    }
    let row = g.ow * g.oc;
    if g.y_len == 0 {
        return Ok(());
    }
    if narrow_pays(&g) {
        let wrep = repeated_taps(&g, w);
        y[..g.y_len]
            .par_chunks_mut(row)
            .enumerate()
            .for_each(|(r, yrow)| depthwise_row_narrow(&g, x, &wrep, bias, post, r, yrow));
        return Ok(());
    }
    y[..g.y_len]
        .par_chunks_mut(row)
        .enumerate()
        .for_each(|(r, yrow)| depthwise_row(&g, x, w, bias, post, r, yrow));
    Ok(())
}

/// Whether [`depthwise_row_narrow`] serves this convolution: multiplier 1,
/// unit stride along W and fewer channels than one 16-lane vector (a
/// GhostNet's 2 to 12), where the per-pixel loop spends its time on
/// indexing and channel tails rather than multiply-adds.
fn narrow_pays(g: &Dims) -> bool {
    g.oc == g.c && g.c < 16 && g.stride[1] == 1
}

/// Each tap's `c` weights repeated for every output column: `kh·kw` rows
/// of `ow·c` floats, so a tap's contribution to an output row is one
/// multiply-add of two contiguous runs.
fn repeated_taps(g: &Dims, w: &[f32]) -> Vec<f32> {
    let row = g.ow * g.c;
    let mut out = vec![0.0f32; g.kh * g.kw * row];
    for (t, dst) in out.chunks_exact_mut(row.max(1)).enumerate() {
        for px in dst.chunks_exact_mut(g.c) {
            px.copy_from_slice(&w[t * g.c..(t + 1) * g.c]);
        }
    }
    out
}

multiversion! {
    /// Output row `r` (flat over `n·oh`) of a depthwise convolution that
    /// [`narrow_pays`] accepts. With unit stride along W, tap `(ky, kx)`
    /// reads, for the output columns whose input column is inside the
    /// image, one contiguous run of input row `iy`, so the row accumulates
    /// tap by tap as whole-row multiply-adds (`wrep` from
    /// [`repeated_taps`]). Each output starts at its bias and adds the taps
    /// in the per-pixel loop's order, so results are the same bits.
    fn depthwise_row_narrow(
        g: &Dims,
        x: &[f32],
        wrep: &[f32],
        bias: Option<&[f32]>,
        post: Post,
        r: usize,
        yrow: &mut [f32],
    ) {
        let (b, oy) = (r / g.oh, r % g.oh);
        let (c, ow) = (g.c, g.ow);
        let yrow = &mut yrow[..ow * c];
        match bias {
            Some(bias) => {
                for px in yrow.chunks_exact_mut(c) {
                    px.copy_from_slice(&bias[..c]);
                }
            }
            None => yrow.fill(0.0),
        }
        let by = g.base(oy, 0);
        let ky = tap_range(by, g.dilation[0], g.kh, g.h);
        let bx = g.base(0, 1);
        for ky in ky.0..ky.1 {
            let iy = (by + (ky * g.dilation[0]) as isize) as usize;
            let xrow = &x[(b * g.h + iy) * g.w * c..][..g.w * c];
            for kx in 0..g.kw {
                // Output column ox reads input column ox + off.
                let off = bx + (kx * g.dilation[1]) as isize;
                let lo = (-off).max(0) as usize;
                let hi = (g.w as isize - off).clamp(0, ow as isize) as usize;
                if lo >= hi {
                    continue;
                }
                let n = (hi - lo) * c;
                let xs = &xrow[(lo as isize + off) as usize * c..][..n];
                let ws = &wrep[((ky * g.kw + kx) * ow + lo) * c..][..n];
                let ys = &mut yrow[lo * c..][..n];
                for ((y, &xv), &wv) in ys.iter_mut().zip(xs).zip(ws) {
                    *y += xv * wv;
                }
            }
        }
        for v in yrow.iter_mut() {
            *v = post.apply(*v);
        }
    }
}

/// One output pixel of a depthwise convolution with multiplier 1, channels
/// `c0 .. c0 + N`: the accumulators (N ≤ 64 floats: at most 4 zmm) stay in
/// registers across the taps. `at` is (image, top-left input coordinate),
/// `ky`, `kx` the valid tap ranges.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn depthwise_block<const N: usize>(
    g: &Dims,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    (b, by, bx): (usize, isize, isize),
    (ky, kx): ((usize, usize), (usize, usize)),
    c0: usize,
    out: &mut [f32],
) {
    let mut acc = [0.0f32; N];
    if let Some(bias) = bias.and_then(|bs| bs[c0..].first_chunk::<N>()) {
        acc = *bias;
    }
    for ky in ky.0..ky.1 {
        let iy = (by + (ky * g.dilation[0]) as isize) as usize;
        for kx in kx.0..kx.1 {
            let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
            let xs = &x[((b * g.h + iy) * g.w + ix) * g.c + c0..];
            let ws = &w[(ky * g.kw + kx) * g.oc + c0..];
            if let (Some(xs), Some(ws)) = (xs.first_chunk::<N>(), ws.first_chunk::<N>()) {
                for i in 0..N {
                    acc[i] += xs[i] * ws[i];
                }
            }
        }
    }
    if let Some(out) = out[c0..].first_chunk_mut::<N>() {
        for i in 0..N {
            out[i] = post.apply(acc[i]);
        }
    }
}

multiversion! {
    /// Output row `r` (flat over `n·oh`) of a depthwise convolution.
    fn depthwise_row(
        g: &Dims,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        post: Post,
        r: usize,
        yrow: &mut [f32],
    ) {
        let (b, oy) = (r / g.oh, r % g.oh);
        let (c, oc) = (g.c, g.oc);
        let mult = oc / c;
        let by = g.base(oy, 0);
        let ky = tap_range(by, g.dilation[0], g.kh, g.h);
        for (ox, out) in yrow.chunks_exact_mut(oc).enumerate() {
            let bx = g.base(ox, 1);
            let kx = tap_range(bx, g.dilation[1], g.kw, g.w);
            let (at, taps) = ((b, by, bx), (ky, kx));
            let mut c0 = 0;
            while c0 < oc {
                let rem = oc - c0;
                if mult == 1 {
                    // Blocks of 64 down to 1 channels: a tail of 4 costs
                    // one 4-wide block, not the general loop below.
                    c0 += crate::kernels::block_call!(rem, depthwise_block(g, x, w, bias, post, at, taps, c0, out));
                    continue;
                }
                // Multipliers above 1: output `o` reads input channel
                // `o / mult`.
                let len = rem.min(64);
                let mut acc = [0.0f32; 64];
                if let Some(bias) = bias {
                    acc[..len].copy_from_slice(&bias[c0..c0 + len]);
                }
                for ky in ky.0..ky.1 {
                    let iy = (by + (ky * g.dilation[0]) as isize) as usize;
                    for kx in kx.0..kx.1 {
                        let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                        let xp = &x[((b * g.h + iy) * g.w + ix) * c..][..c];
                        let wt = &w[(ky * g.kw + kx) * oc + c0..][..len];
                        for i in 0..len {
                            acc[i] += xp[(c0 + i) / mult] * wt[i];
                        }
                    }
                }
                for (o, &a) in out[c0..c0 + len].iter_mut().zip(&acc) {
                    *o = post.apply(a);
                }
                c0 += len;
            }
        }
    }
}

/// Weights of a narrow-group convolution rearranged for [`grouped_rows`]:
/// `kh × kw × (c/group) × oc`, entry `[t][ci][o]` the weight of output `o`
/// for input channel `ci` of its group at tap `t`, read from the packed
/// per-group panels.
pub(super) fn grouped_weights(g: &Dims, w_packed: &[f32]) -> Vec<f32> {
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let kdim = g.kh * g.kw * cg;
    let per = packed_len(kdim, mg);
    let mut out = vec![0.0f32; kdim * g.oc];
    for (r, row) in out.chunks_exact_mut(g.oc).enumerate() {
        for (o, v) in row.iter_mut().enumerate() {
            let (grp, j) = (o / mg, o % mg);
            let panel = j / PANEL_WIDTH;
            *v = w_packed[grp * per + (panel * kdim + r) * PANEL_WIDTH + j % PANEL_WIDTH];
        }
    }
    out
}

/// Output rows `oy0 ..` of image `b` (as many as `yrows` holds) of a
/// convolution with many narrow groups. The input rows their windows need
/// are first expanded so that entry `[ix][ci][o]` holds input channel `ci`
/// of output `o`'s group (each value repeated `oc/group` times); every tap
/// is then a multiply-add of two contiguous runs over the output channels,
/// whatever the group width. A block of rows shares its expanded rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn grouped_rows(
    g: &Dims,
    x: &[f32],
    wt: &[f32],
    src_of: &[usize],
    bias: Option<&[f32]>,
    post: Post,
    (b, oy0): (usize, usize),
    yrows: &mut [f32],
) {
    let cg = g.c / g.group;
    let row = g.ow * g.oc;
    let rows = yrows.len() / row;
    let first = g.base(oy0, 0).max(0) as usize;
    let last = g.base(oy0 + rows - 1, 0) + ((g.kh - 1) * g.dilation[0]) as isize;
    let end = ((last + 1).max(0) as usize).min(g.h);
    let erow = g.w * cg * g.oc;
    with_scratch(end.saturating_sub(first) * erow, |e| {
        for (iy, ex) in (first..end).zip(e.chunks_exact_mut(erow.max(1))) {
            let xrow = &x[(b * g.h + iy) * g.w * g.c..][..g.w * g.c];
            expand_row(xrow, g.c, cg, src_of, ex);
        }
        for (i, yrow) in yrows.chunks_exact_mut(row).enumerate() {
            let by = g.base(oy0 + i, 0);
            let (ky0, ky1) = tap_range(by, g.dilation[0], g.kh, g.h);
            // Expanded row of tap ky0.
            let e0 = (by + (ky0 * g.dilation[0]) as isize) as usize - first;
            grouped_accumulate(g, e, wt, bias, post, e0, ky0, ky1, yrow);
        }
    });
}

multiversion! {
    /// Expands one input row (pixels of `c` channels) for [`grouped_rows`]:
    /// `ex[ix][ci][o] = xrow[ix][src_of[o] + ci]`.
    fn expand_row(xrow: &[f32], c: usize, cg: usize, src_of: &[usize], ex: &mut [f32]) {
        let oc = src_of.len();
        // `src_of` comes from `conv2d` and is always in range; the check makes
        // the unchecked reads below sound whatever the caller passes.
        if src_of.iter().any(|&s| s + cg > c) {
            return;
        }
        for (xp, ep) in xrow.chunks_exact(c).zip(ex.chunks_exact_mut(cg * oc)) {
            for (ci, eo) in ep.chunks_exact_mut(oc).enumerate() {
                for (d, &src) in eo.iter_mut().zip(src_of) {
                    // SAFETY: `src + ci < c == xp.len()` (checked above).
                    *d = unsafe { *xp.get_unchecked(src + ci) };
                }
            }
        }
    }
}

multiversion! {
    /// The multiply-adds of one output row of [`grouped_rows`]: tap row
    /// `ky0` reads expanded row `e0`, each further tap row `dilation` later.
    fn grouped_accumulate(
        g: &Dims,
        e: &[f32],
        wt: &[f32],
        bias: Option<&[f32]>,
        post: Post,
        e0: usize,
        ky0: usize,
        ky1: usize,
        yrow: &mut [f32],
    ) {
        let oc = g.oc;
        for (ox, out) in yrow.chunks_exact_mut(oc).enumerate() {
            let bx = g.base(ox, 1);
            let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
            let taps = (ky0, ky1, kx0, kx1);
            let mut o0 = 0;
            while o0 < oc {
                // Blocks of 64 down to 1 output channels, each a fixed-size
                // accumulator (ResNeXt's 16 channels are one block of 16).
                let at = (e0, bx, o0);
                o0 += crate::kernels::block_call!(oc - o0, grouped_block(g, e, wt, bias, post, at, taps, out));
            }
        }
    }
}

/// Output channels `o0 .. o0 + N` of one output pixel of
/// [`grouped_accumulate`]: `at` is (expanded row of tap row `ky0`, left
/// input column, `o0`), `taps` the valid tap ranges `(ky0, ky1, kx0, kx1)`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn grouped_block<const N: usize>(
    g: &Dims,
    e: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    post: Post,
    (e0, bx, o0): (usize, isize, usize),
    (ky0, ky1, kx0, kx1): (usize, usize, usize, usize),
    out: &mut [f32],
) {
    let (cg, oc) = (g.c / g.group, g.oc);
    let erow = g.w * cg * oc;
    let mut acc = [0.0f32; N];
    for ky in ky0..ky1 {
        for kx in kx0..kx1 {
            let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
            let ep = &e[(e0 + (ky - ky0) * g.dilation[0]) * erow + ix * cg * oc..][..cg * oc];
            let wp = &wt[(ky * g.kw + kx) * cg * oc..][..cg * oc];
            for (er, wr) in ep.chunks_exact(oc).zip(wp.chunks_exact(oc)) {
                if let (Some(er), Some(wr)) = (er[o0..].first_chunk::<N>(), wr[o0..].first_chunk::<N>()) {
                    for l in 0..N {
                        acc[l] += er[l] * wr[l];
                    }
                }
            }
        }
    }
    if let Some(dst) = out[o0..].first_chunk_mut::<N>() {
        for (l, d) in dst.iter_mut().enumerate() {
            let v = acc[l] + bias.map_or(0.0, |b| b[o0 + l]);
            *d = post.apply(v);
        }
    }
}
