//! Winograd convolution F(m×m, 3×3), m = 2 or 4, of the CPU executor
//! (`Step::WinogradConv2d`), with the compile-time packing of its
//! transformed weights (Lavin & Gray, "Fast Algorithms for Convolutional
//! Neural Networks").
//!
//! Semantics are those of `core.winograd_conv2d`: a 3×3, stride-1,
//! dilation-1, ungrouped NHWC convolution whose weights arrive already
//! transformed, `U = G g Gᵀ`, laid out `[m+2, m+2, oc, c]` (the `winograd`
//! pass computes it at compile time). With `a = m + 2` and `ξ` one of the
//! `a²` transform points:
//! - output pixels are cut into `m × m` tiles; tile `(ty, tx)` reads the
//!   `a × a` input patch at `(ty·m − pad_top, tx·m − pad_left)`, zero
//!   outside the input;
//! - input transform `V = Bᵀ d B` per tile and channel, written to a scratch
//!   laid out `[ξ][tile][c]`;
//! - for each `ξ` one GEMM `M[ξ] = V[ξ] · U[ξ]` (`tiles × c` by `c × oc`),
//!   `U[ξ]` packed by [`pack_b`](crate::kernels::pack_b) at compile time
//!   ([`winograd_pack_weights`]);
//! - output transform `Y = Aᵀ M A` per tile and output channel, plus the
//!   bias, then relu, written to `y` with the tiles past the output's edge
//!   clipped.
//!
//! Tiles go in blocks of whole tile rows of one image (so a block writes a
//! contiguous range of `y`), sized so that its `V` and `M` stay in cache
//! (a 2 MiB budget) and the blocks balance over the threads; blocks run in
//! parallel in the current rayon pool, and when there are fewer blocks than
//! threads the GEMMs split their columns instead.
//!
//! Numerics: f32 throughout; F(2×2) is within ~1e-5 of a direct convolution
//! for values of order 1, F(4×4) within ~1e-4 (its transforms have entries
//! up to 8 and 5).
//!
//! Invariants: the public functions never panic on bad arguments (they
//! return [`KernelError`]); slices may be longer than the geometry needs;
//! every output element is computed by one thread in a fixed order (the
//! GEMM's depth order does not depend on its row count or split), so
//! results do not depend on the thread count.

use std::cell::RefCell;

use rayon::prelude::*;

use super::KernelError;
use super::conv::{Dims, check_len, kerr, multiversion, product};
use super::gemm::{GemmOptions, gemm};
use super::pack::{PackedBRef, packed_len};
use crate::plan::ConvGeom;
use aoc_plan::pack::winograd_side as side;

// The packed layout of the transformed weights is the contract with the
// compiler, defined in aoc-plan.
pub use aoc_plan::pack::{winograd_pack_weights, winograd_packed_len};

/// Scratch budget of one block's `V` and `M`, in floats (2 MiB: an L2 or
/// two; larger blocks also amortize the GEMMs' packing and set-up).
const SCRATCH_FLOATS: usize = 1 << 19;
/// Fewest tiles per block whatever the channel counts (the GEMMs need rows).
const MIN_BLOCK_TILES: usize = 32;
/// The fixed cost of a block, in tiles (measured: a block of 7 tiles runs
/// at about half the speed per tile of one of 28).
const BLOCK_OVERHEAD_TILES: usize = 8;

/// NHWC Winograd convolution `y = relu?(conv3x3(x, w) + bias)` with tile
/// `m` = `tile` (2 or 4) and `w` given as [`winograd_pack_weights`] of its
/// transform. `geom` must be 3×3, stride 1, dilation 1, one group; `x` is
/// `n × h × w × c`, `y` is `n × oh × ow × oc`, `bias` has `oc` values.
pub fn winograd_conv2d(
    geom: &ConvGeom,
    tile: usize,
    x: &[f32],
    u_packed: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    y: &mut [f32],
) -> Result<(), KernelError> {
    run(geom, tile, x, u_packed, bias, relu, y, None)
}

/// [`winograd_conv2d`] with the tile rows per block forced (tests).
#[allow(clippy::too_many_arguments)]
fn run(
    geom: &ConvGeom,
    tile: usize,
    x: &[f32],
    u_packed: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    y: &mut [f32],
    rows_per_block: Option<usize>,
) -> Result<(), KernelError> {
    let g = Dims::new(geom)?;
    let a = side(tile)?;
    if (g.kh, g.kw) != (3, 3) || g.stride != [1, 1] || g.dilation != [1, 1] || g.group != 1 {
        return Err(kerr(format!(
            "winograd convolution needs a 3x3 kernel, stride 1, dilation 1 and one group, \
             found {}x{}, strides {:?}, dilations {:?}, group {}",
            g.kh, g.kw, g.stride, g.dilation, g.group
        )));
    }
    g.check_conv_out()?;
    check_len("input", g.x_len, x.len())?;
    check_len("output", g.y_len, y.len())?;
    let want = winograd_packed_len(tile, g.c, g.oc)?;
    if u_packed.len() != want {
        return Err(kerr(format!(
            "packed transformed weights must hold {want} floats, found {}",
            u_packed.len()
        )));
    }
    if let Some(b) = bias {
        check_len("bias", g.oc, b.len())?;
    }
    if g.y_len == 0 {
        return Ok(());
    }
    let xi_n = a * a;
    let (th, tw) = (g.oh.div_ceil(tile), g.ow.div_ceil(tile));
    // A block's scratch (V and M of at most every tile, the patch and the
    // pass buffer) is below this; checking it once keeps `block` from
    // overflowing.
    let channels =
        g.c.checked_add(g.oc)
            .ok_or_else(|| kerr("channel counts are too large".into()))?;
    product("winograd scratch", &[xi_n, th * tw + 2, channels])?;
    let threads = rayon::current_num_threads();
    let fit_tiles = (SCRATCH_FLOATS / (xi_n * (g.c + g.oc)).max(1)).max(MIN_BLOCK_TILES);
    let fit = (fit_tiles / tw).clamp(1, th);
    // Tile rows per block: within the cache budget, the fewest rounds of
    // blocks over the threads, a block costing its tiles plus a fixed
    // overhead (set-up, GEMMs of fewer rows); larger blocks win ties.
    let cost =
        |r: usize| (g.n * th.div_ceil(r)).div_ceil(threads) * (r * tw + BLOCK_OVERHEAD_TILES);
    let best = (1..=fit).rev().min_by_key(|&r| cost(r)).unwrap_or(1);
    let rows = rows_per_block.unwrap_or(best).clamp(1, th);
    let blocks = g.n * th.div_ceil(rows);
    let inner = (threads / blocks).max(1);
    let (x, y) = (&x[..g.x_len], &mut y[..g.y_len]);
    let cx = Cx {
        g: &g,
        tile,
        x,
        u: u_packed,
        bias: bias.map(|b| &b[..g.oc]),
        relu,
        threads: inner,
    };
    let image = g.oh * g.ow * g.oc;
    y.par_chunks_mut(image)
        .enumerate()
        .try_for_each(|(b, yimg)| {
            yimg.par_chunks_mut(rows * tile * g.ow * g.oc)
                .enumerate()
                .try_for_each(|(i, ychunk)| cx.block(b, i * rows, ychunk))
        })
}

/// What every block of one call shares.
struct Cx<'a> {
    g: &'a Dims,
    tile: usize,
    x: &'a [f32],
    u: &'a [f32],
    bias: Option<&'a [f32]>,
    relu: bool,
    /// Threads each GEMM may use.
    threads: usize,
}

impl Cx<'_> {
    /// Computes the output rows in `ychunk` of image `b`, which start at
    /// tile row `ty0`.
    fn block(&self, b: usize, ty0: usize, ychunk: &mut [f32]) -> Result<(), KernelError> {
        let (g, tile) = (self.g, self.tile);
        let (a, c, oc) = (tile + 2, g.c, g.oc);
        let xi_n = a * a;
        let tw = g.ow.div_ceil(tile);
        let trows = (ychunk.len() / (g.ow * oc)).div_ceil(tile);
        let nt = trows * tw;
        let per = packed_len(c, oc);
        let (vlen, mlen) = (xi_n * nt * c, xi_n * nt * oc);
        let len = vlen + mlen + xi_n * c + xi_n * c.max(oc);
        with_scratch(len, |s| {
            let (v, rest) = s.split_at_mut(vlen);
            let (m, rest) = rest.split_at_mut(mlen);
            let (d, tmp) = rest.split_at_mut(xi_n * c);
            input_transform(g, tile, self.x, b, ty0, trows, v, d, tmp);
            let opts = GemmOptions {
                threads: self.threads,
                ..GemmOptions::default()
            };
            for xi in 0..xi_n {
                gemm(
                    nt,
                    oc,
                    c,
                    &v[xi * nt * c..(xi + 1) * nt * c],
                    c,
                    PackedBRef::new(c, oc, &self.u[xi * per..(xi + 1) * per])?,
                    &mut m[xi * nt * oc..(xi + 1) * nt * oc],
                    oc,
                    &opts,
                )?;
            }
            output_transform(g, tile, m, self.bias, self.relu, trows, ychunk, tmp);
            Ok(())
        })
    }
}

thread_local! {
    /// Per-thread scratch of the blocks (V, M, patch, pass buffer).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a scratch of `len` floats (contents unspecified): the
/// thread's buffer, or a fresh one when it is in use (a thread waiting in a
/// GEMM split over the pool may start another block).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

multiversion! {
    /// Input transform of tile rows `ty0 .. ty0 + trows` of image `b`:
    /// `v[ξ][t][..c] = (Bᵀ d B)[ξ]` for local tile `t = row · tw + col`.
    /// `d` (`a²·c` floats) holds a patch that crosses the input's edge;
    /// `tmp` (`a²·c`) the first pass.
    fn input_transform(
        g: &Dims,
        tile: usize,
        x: &[f32],
        b: usize,
        ty0: usize,
        trows: usize,
        v: &mut [f32],
        d: &mut [f32],
        tmp: &mut [f32],
    ) {
        if g.c == 0 {
            return;
        }
        let at = Block { g, b, ty0, trows };
        match tile {
            2 => input_tiles::<F2>(&at, x, v, d, tmp),
            _ => input_tiles::<F4>(&at, x, v, d, tmp),
        }
    }
}

multiversion! {
    /// Output transform of a block of `trows` tile rows: `Aᵀ M A` per tile
    /// from `m` (`[ξ][t][oc]`), plus bias, relu, into the block's output
    /// rows `yc` (clipped at the output's edges). `tmp` holds at least
    /// `(a + 1)·tile·oc` floats.
    fn output_transform(
        g: &Dims,
        tile: usize,
        m: &[f32],
        bias: Option<&[f32]>,
        relu: bool,
        trows: usize,
        yc: &mut [f32],
        tmp: &mut [f32],
    ) {
        let at = Block { g, b: 0, ty0: 0, trows };
        match tile {
            2 => output_tiles::<F2>(&at, m, bias, relu, yc, tmp),
            _ => output_tiles::<F4>(&at, m, bias, relu, yc, tmp),
        }
    }
}

/// Where a block lies: image `b`, tile rows `ty0 .. ty0 + trows`.
struct Block<'a> {
    g: &'a Dims,
    b: usize,
    ty0: usize,
    trows: usize,
}

/// [`input_transform`] by the transforms of `W`.
#[inline(always)]
fn input_tiles<W: Minimal>(at: &Block, x: &[f32], v: &mut [f32], d: &mut [f32], tmp: &mut [f32]) {
    let (g, c, a) = (at.g, at.g.c, W::A);
    let tw = g.ow.div_ceil(W::M);
    let nt = at.trows * tw;
    let (pt, pl) = (g.pads[0] as isize, g.pads[1] as isize);
    for r in 0..at.trows {
        let y0 = ((at.ty0 + r) * W::M) as isize - pt;
        for tx in 0..tw {
            let x0 = (tx * W::M) as isize - pl;
            let t = r * tw + tx;
            let inside = y0 >= 0
                && x0 >= 0
                && y0 + a as isize <= g.h as isize
                && x0 + a as isize <= g.w as isize;
            // The patch in place (rows `w·c` apart) or copied with zeros.
            let (src, rs): (&[f32], usize) = if inside {
                let base = ((at.b * g.h + y0 as usize) * g.w + x0 as usize) * c;
                (&x[base..], g.w * c)
            } else {
                gather_patch(g, x, at.b, y0, x0, a, d);
                (&*d, a * c)
            };
            // Along H: tmp[j][i] = Σ_k Bᵀ[i][k] d[k][j].
            for j in 0..a {
                W::bt(&src[j * c..], rs, &mut tmp[j * a * c..], c, c);
            }
            // Along W: V[i·a + j][t] = Σ_k Bᵀ[j][k] tmp[k][i].
            for i in 0..a {
                W::bt(
                    &tmp[i * c..],
                    a * c,
                    &mut v[(i * a * nt + t) * c..],
                    nt * c,
                    c,
                );
            }
        }
    }
}

/// [`output_transform`] by the transforms of `W`.
#[inline(always)]
fn output_tiles<W: Minimal>(
    blk: &Block,
    m: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    yc: &mut [f32],
    tmp: &mut [f32],
) {
    let (oc, ow, a, tile) = (blk.g.oc, blk.g.ow, W::A, W::M);
    let tw = ow.div_ceil(tile);
    let nt = blk.trows * tw;
    let out_rows = yc.len() / (ow * oc);
    let (tmp, edge) = tmp.split_at_mut(a * tile * oc);
    let edge = &mut edge[..tile * oc];
    for r in 0..blk.trows {
        for tx in 0..tw {
            let t = r * tw + tx;
            // Along the first axis: tmp[k][i] = Σ_l Aᵀ[i][l] M[l·a + k][t].
            for k in 0..a {
                W::at(
                    &m[(k * nt + t) * oc..],
                    a * nt * oc,
                    &mut tmp[k * tile * oc..],
                    oc,
                    oc,
                );
            }
            // Along the second: Y[i][j] = Σ_k Aᵀ[j][k] tmp[k][i], the
            // tile's pixels of row `i` side by side (through `edge` where
            // the tile crosses the right edge).
            let cols = tile.min(ow - tx * tile);
            for i in 0..tile.min(out_rows.saturating_sub(r * tile)) {
                let dst = ((r * tile + i) * ow + tx * tile) * oc;
                let src = &tmp[i * oc..];
                let out = if cols == tile {
                    let o = &mut yc[dst..dst + tile * oc];
                    W::at(src, tile * oc, o, oc, oc);
                    o
                } else {
                    W::at(src, tile * oc, edge, oc, oc);
                    let o = &mut yc[dst..dst + cols * oc];
                    o.copy_from_slice(&edge[..cols * oc]);
                    o
                };
                for px in out.chunks_exact_mut(oc) {
                    if let Some(bias) = bias {
                        for (y, &bv) in px.iter_mut().zip(bias) {
                            *y += bv;
                        }
                    }
                    if relu {
                        for y in px.iter_mut() {
                            *y = super::act::max_nan(*y, 0.0);
                        }
                    }
                }
            }
        }
    }
}

/// Binds `$name`s to the vectors of `$n` floats at `$s[k·$st ..]`,
/// `k = 0, 1, ...` (each range checked once, before the loop).
macro_rules! rows {
    ($s:expr, $st:expr, $n:expr; $($name:ident = $k:literal),+) => {
        $(let $name = &$s[$k * $st..$k * $st + $n];)+
    };
}

/// Binds `$name`s to disjoint mutable vectors of `$n` floats at
/// `$o[k·$st ..]`, `k = 0, 1, ...` in order (`$st >= $n`).
macro_rules! rows_mut {
    ($o:expr, $st:expr, $n:expr; $($name:ident),+) => {
        let rest: &mut [f32] = $o;
        $(
            let ($name, rest) = rest.split_at_mut($st.min(rest.len()));
            let $name = &mut $name[..$n];
        )+
        let _ = rest;
    };
}

/// The transforms of one F(M×M, 3×3), `A = M + 2`, applied element by
/// element to columns of vectors (channels run along the vectors): the
/// sources are `A` vectors of `n` floats `st` apart, the results vectors of
/// `n` floats `ost` apart.
trait Minimal {
    /// Transform size `a = m + 2`.
    const A: usize;
    /// Output tile `m`.
    const M: usize;
    /// `o[i] = Σ_k Bᵀ[i][k] · s[k]` for `i < A`.
    fn bt(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize);
    /// `o[i] = Σ_k Aᵀ[i][k] · s[k]` for `i < M`.
    fn at(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize);
}

/// F(2×2, 3×3).
struct F2;
/// F(4×4, 3×3).
struct F4;

impl Minimal for F2 {
    const A: usize = 4;
    const M: usize = 2;

    /// Rows `d0 − d2`, `d1 + d2`, `d2 − d1`, `d1 − d3`.
    #[inline(always)]
    fn bt(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize) {
        rows!(s, st, n; s0 = 0, s1 = 1, s2 = 2, s3 = 3);
        rows_mut!(o, ost, n; o0, o1, o2, o3);
        for i in 0..n {
            let (d0, d1, d2, d3) = (s0[i], s1[i], s2[i], s3[i]);
            o0[i] = d0 - d2;
            o1[i] = d1 + d2;
            o2[i] = d2 - d1;
            o3[i] = d1 - d3;
        }
    }

    /// Rows `m0 + m1 + m2`, `m1 − m2 − m3`.
    #[inline(always)]
    fn at(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize) {
        rows!(s, st, n; s0 = 0, s1 = 1, s2 = 2, s3 = 3);
        rows_mut!(o, ost, n; o0, o1);
        for i in 0..n {
            o0[i] = s0[i] + s1[i] + s2[i];
            o1[i] = s1[i] - s2[i] - s3[i];
        }
    }
}

impl Minimal for F4 {
    const A: usize = 6;
    const M: usize = 4;

    /// Rows `4d0 − 5d2 + d4`, `−4d1 − 4d2 + d3 + d4`, `4d1 − 4d2 − d3 +
    /// d4`, `−2d1 − d2 + 2d3 + d4`, `2d1 − d2 − 2d3 + d4`, `4d1 − 5d3 + d5`,
    /// sharing the common sums.
    #[inline(always)]
    fn bt(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize) {
        rows!(s, st, n; s0 = 0, s1 = 1, s2 = 2, s3 = 3, s4 = 4, s5 = 5);
        rows_mut!(o, ost, n; o0, o1, o2, o3, o4, o5);
        for i in 0..n {
            let (d0, d1, d2, d3, d4, d5) = (s0[i], s1[i], s2[i], s3[i], s4[i], s5[i]);
            let (p, q) = (d4 - 4.0 * d2, d3 - 4.0 * d1);
            let (r, u) = (d4 - d2, 2.0 * (d3 - d1));
            o0[i] = 4.0 * d0 - 5.0 * d2 + d4;
            o1[i] = p + q;
            o2[i] = p - q;
            o3[i] = r + u;
            o4[i] = r - u;
            o5[i] = 4.0 * d1 - 5.0 * d3 + d5;
        }
    }

    /// Rows `m0 + m1 + m2 + m3 + m4`, `m1 − m2 + 2m3 − 2m4`, `m1 + m2 +
    /// 4m3 + 4m4`, `m1 − m2 + 8m3 − 8m4 + m5`, sharing the common sums.
    #[inline(always)]
    fn at(s: &[f32], st: usize, o: &mut [f32], ost: usize, n: usize) {
        rows!(s, st, n; s0 = 0, s1 = 1, s2 = 2, s3 = 3, s4 = 4, s5 = 5);
        rows_mut!(o, ost, n; o0, o1, o2, o3);
        for i in 0..n {
            let (a, b) = (s1[i] + s2[i], s1[i] - s2[i]);
            let (c, d) = (s3[i] + s4[i], s3[i] - s4[i]);
            o0[i] = s0[i] + a + c;
            o1[i] = b + 2.0 * d;
            o2[i] = a + 4.0 * c;
            o3[i] = b + 8.0 * d + s5[i];
        }
    }
}

/// Copies the `a × a` patch of image `b` at input `(y0, x0)` into `d`
/// (`[a][a][c]`), zero where it leaves the input.
#[inline(always)]
fn gather_patch(g: &Dims, x: &[f32], b: usize, y0: isize, x0: isize, a: usize, d: &mut [f32]) {
    let c = g.c;
    // Columns j0..j1 of the patch lie inside the input's width.
    let j0 = (-x0).clamp(0, a as isize) as usize;
    let j1 = (g.w as isize - x0).clamp(j0 as isize, a as isize) as usize;
    for (i, drow) in d[..a * a * c].chunks_exact_mut(a * c).enumerate() {
        let iy = y0 + i as isize;
        if iy < 0 || iy >= g.h as isize || j0 == j1 {
            drow.fill(0.0);
            continue;
        }
        drow[..j0 * c].fill(0.0);
        drow[j1 * c..].fill(0.0);
        let src = ((b * g.h + iy as usize) * g.w + (x0 + j0 as isize) as usize) * c;
        drow[j0 * c..j1 * c].copy_from_slice(&x[src..src + (j1 - j0) * c]);
    }
}

#[cfg(test)]
#[path = "winograd_tests.rs"]
mod tests;
