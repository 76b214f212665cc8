//! NHWC convolutions of the CPU executor, with the compile-time packing of
//! their weights:
//! - [`conv2d`]: 1×1 stride-1 unpadded convolutions are one GEMM per group
//!   over the activations in place (`x` is already the `(n·h·w) × c`
//!   matrix); every other convolution is an implicit GEMM: blocks of output
//!   pixels are unfolded (im2col) into a small per-thread scratch and
//!   multiplied by the packed weights with bias, relu and clip fused into the GEMM
//!   epilogue. Blocks run in parallel in the current rayon pool.
//!   Convolutions with many narrow groups (fewer than 16 outputs per group)
//!   run directly instead (`direct.rs`), and on AVX-512 one-group
//!   convolutions with few output channels (U-Net's 8, a stem's 16 at
//!   stride 2) run with output pixels in the vector lanes over a padded
//!   planar copy of the input (`planar.rs`), where the GEMM would leave
//!   most of each 16-wide panel idle; `planar_pays` counts both paths'
//!   work.
//! - [`depthwise_conv2d`] (`direct.rs`): a direct loop, parallel over output
//!   rows and vectorized over channels (compiled once per instruction-set
//!   level).
//! - [`conv_transpose2d`] (`transpose.rs`): a GEMM of the input pixels by the
//!   weights into a column buffer (one column per output channel and kernel
//!   tap), then a gather of those columns into the output, parallel over
//!   output rows.
//!
//! This file also holds what the convolution-family kernels share: tap
//! ranges, per-thread scratch and the `multiversion!` macro. The checked
//! geometry (`Dims`, i.e. `aoc_plan::pack::ConvDims`) and the weight packing
//! live in aoc-plan, the compiler's side of the layouts.
//!
//! Invariants: the functions never panic on bad arguments (they return
//! [`KernelError`]); slices may be longer than the geometry needs (only the
//! prefix is read or written); every output element is computed by one
//! thread in a fixed order, so results do not depend on the thread count.
//! Coordinates follow ONNX: output `o`, tap `t` reads input
//! `o·stride + t·dilation − pad_begin`, out-of-range taps read zero.

use std::cell::RefCell;

use rayon::prelude::*;

use super::KernelError;
pub use super::act::Post;
use super::gemm::{GemmError, GemmOptions, gemm};
use super::pack::{PackedBRef, packed_len};
use crate::plan::ConvGeom;

mod direct;
#[cfg(target_arch = "x86_64")]
mod planar;
mod transpose;

// The weight layouts and the checked geometry are the contract with the
// compiler (aoc-plan); the kernels here read what they define.
pub(crate) use aoc_plan::pack::{ConvDims as Dims, conv_out_size, product};
pub use aoc_plan::pack::{
    conv_transpose2d_pack_weights, conv2d_pack_weights, depthwise_pack_weights,
};

pub use direct::depthwise_conv2d;
use direct::{grouped_rows, grouped_weights};
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) use planar::{bands as planar_bands, conv2d_planar, planar_pays};
pub use transpose::conv_transpose2d;

/// Defines a function whose body is compiled three times (AVX-512, AVX2 +
/// FMA, baseline) and picks the copy for [`super::Isa::best`] at each call,
/// so that plain loops over channels auto-vectorize at the machine's width.
/// The arithmetic is the same in every copy (no fused multiply-add is
/// introduced: Rust does not contract `a * b + c`), so results are identical
/// across levels.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            #[allow(clippy::too_many_arguments)]
            fn v512($($arg: $ty),*) {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            fn v256($($arg: $ty),*) {
                body($($arg),*)
            }
            match $crate::kernels::Isa::best() {
                // SAFETY: `Isa::best` returns a level only if the CPU has it.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx512 => unsafe { v512($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx2 => unsafe { v256($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;

/// A kernel error with `message`.
pub(crate) fn kerr(message: String) -> KernelError {
    GemmError::new(message)
}

/// Checks that a slice of `found` floats holds the `need` a tensor needs.
pub(crate) fn check_len(name: &str, need: usize, found: usize) -> Result<(), KernelError> {
    if found < need {
        return Err(kerr(format!("{name} needs {need} floats, found {found}")));
    }
    Ok(())
}

/// The taps `t` in `0..k` whose coordinate `base + t·dilation` lies in
/// `0..len`, as a half-open range (empty when none does).
#[inline]
pub(crate) fn tap_range(base: isize, dilation: usize, k: usize, len: usize) -> (usize, usize) {
    let lo = if base < 0 {
        base.unsigned_abs().div_ceil(dilation)
    } else {
        0
    };
    let hi = if base >= len as isize {
        0
    } else {
        (len as isize - base) as usize
    }
    .div_ceil(dilation);
    (lo.min(k), hi.min(k).max(lo.min(k)))
}

/// Im2col scratch budget in floats per block (1 MiB); a block has at least
/// `MIN_BLOCK_ROWS` rows whatever the depth.
const SCRATCH_FLOATS: usize = 1 << 18;
const MIN_BLOCK_ROWS: usize = 16;

thread_local! {
    /// Per-thread scratch (im2col blocks, transposed-convolution columns).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a scratch of `len` floats (contents unspecified): the
/// thread's buffer, or a fresh one when it is in use (a rayon thread that
/// waits inside a nested parallel call may start another block).
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

/// NHWC convolution `y = post(conv(x, w) + bias)` (relu and/or clip, see
/// [`Post`]; a `bool` is a relu or nothing) with `w` from
/// [`conv2d_pack_weights`]; `x` is `n × h × w × c`, `y` is
/// `n × oh × ow × oc`, `bias` has `oc` values.
pub fn conv2d(
    geom: &ConvGeom,
    x: &[f32],
    w_packed: &[f32],
    bias: Option<&[f32]>,
    post: impl Into<Post>,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let post = post.into();
    let g = Dims::new(geom)?;
    g.check_groups()?;
    g.check_conv_out()?;
    check_len("input", g.x_len, x.len())?;
    check_len("output", g.y_len, y.len())?;
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let kdim = product("weight", &[g.kh, g.kw, cg])?;
    let per = packed_len(kdim, mg);
    if Some(w_packed.len()) != per.checked_mul(g.group) {
        return Err(kerr(format!(
            "packed weights must hold {} groups of {per} floats, found {}",
            g.group,
            w_packed.len()
        )));
    }
    if let Some(b) = bias {
        check_len("bias", g.oc, b.len())?;
    }
    let m = g.n * g.oh * g.ow;
    if m == 0 || g.oc == 0 {
        return Ok(());
    }
    let (x, y) = (&x[..g.x_len], &mut y[..g.y_len]);
    let threads = rayon::current_num_threads();
    let weights = |grp: usize| PackedBRef::new(kdim, mg, &w_packed[grp * per..(grp + 1) * per]);
    let opts = |grp: usize, threads: usize| GemmOptions {
        bias: bias.map(|b| &b[grp * mg..(grp + 1) * mg]),
        relu: post.relu,
        clip: post.clip,
        threads,
        ..Default::default()
    };
    if g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pads == [0; 4] {
        // oh == h and ow == w: the input is the (n·h·w) × c matrix A, the
        // group's channels a column range of it.
        for grp in 0..g.group {
            gemm(
                m,
                mg,
                cg,
                &x[grp * cg..],
                g.c,
                weights(grp)?,
                &mut y[grp * mg..],
                g.oc,
                &opts(grp, threads),
            )?;
        }
        return Ok(());
    }
    if g.group > 1 && mg < super::PANEL_WIDTH && direct_grouped_pays(&g) {
        // Many narrow groups (ResNeXt-style): per-group GEMMs would spend
        // their time unfolding and packing a few channels at a time.
        let wt = grouped_weights(&g, w_packed);
        // First input channel of each output's group.
        let src_of: Vec<usize> = (0..g.oc).map(|o| o / mg * cg).collect();
        // Blocks of output rows of one image sharing their expanded input
        // rows: as many as fit the scratch budget, but enough blocks for
        // every thread.
        let erow = g.w * cg * g.oc;
        let span = (g.kh - 1) * g.dilation[0] + 1;
        let fit = (SCRATCH_FLOATS / erow.max(1)).saturating_sub(span) / g.stride[0] + 1;
        let spread = (g.n * g.oh).div_ceil(threads).div_ceil(g.n).max(1);
        let block = fit.min(spread).min(g.oh).max(1);
        let image = g.oh * g.ow * g.oc;
        y.par_chunks_mut(image).enumerate().for_each(|(b, yimg)| {
            yimg.par_chunks_mut(block * g.ow * g.oc)
                .enumerate()
                .for_each(|(i, yrows)| {
                    grouped_rows(&g, x, &wt, &src_of, bias, post, (b, i * block), yrows)
                });
        });
        return Ok(());
    }
    // Few output channels: pixels in the vector lanes (`planar.rs`).
    #[cfg(target_arch = "x86_64")]
    if planar::planar_pays(&g) {
        return planar::conv2d_planar(&g, x, w_packed, bias, post, y, threads);
    }
    // Implicit GEMM over blocks of output pixels: enough blocks to occupy
    // every thread, each small enough that its unfolded rows stay in cache.
    let budget_rows = (SCRATCH_FLOATS / kdim.max(1)).max(MIN_BLOCK_ROWS);
    let rows = m
        .div_ceil(threads)
        .min(budget_rows)
        .max(MIN_BLOCK_ROWS)
        .min(m);
    let blocks = m.div_ceil(rows);
    // Few blocks (small images): the GEMMs split their columns instead.
    let inner = (threads / blocks).max(1);
    y.par_chunks_mut(rows * g.oc)
        .enumerate()
        .try_for_each(|(bi, ychunk)| {
            let p0 = bi * rows;
            let rows = ychunk.len() / g.oc;
            with_scratch(rows * kdim, |a| {
                for grp in 0..g.group {
                    im2col(&g, x, grp, p0, rows, a);
                    gemm(
                        rows,
                        mg,
                        kdim,
                        a,
                        kdim,
                        weights(grp)?,
                        &mut ychunk[grp * mg..],
                        g.oc,
                        &opts(grp, inner),
                    )?;
                }
                Ok(())
            })
        })
}

/// Whether `grouped_rows` (each input value expanded once per output of
/// its group, then contiguous multiply-adds over the output channels)
/// does less work than per-group im2col and GEMMs, counting an element
/// copied and a 16-lane multiply-add alike. Narrow groups of many
/// channels favour it (ResNeXt's 32 groups of 4: the GEMMs would fill a
/// quarter of each 16-wide panel); a few groups of 8 on a strided layer
/// do not (RegNet's first block: the expansion would copy each of the
/// 16 384 input values 8 times, 8.7× the per-group GEMMs' work; measured
/// 0.109 ms against 0.02).
pub(super) fn direct_grouped_pays(g: &Dims) -> bool {
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let (kk, px) = (g.kh * g.kw, g.n * g.oh * g.ow);
    let direct = g.n * g.h * g.w * g.c * mg + px * g.oc * kk * cg / 16;
    let gemm = px * kk * g.c + px * kk * cg * g.group * mg.div_ceil(16);
    direct < gemm
}

/// Unfolds output pixels `p0 .. p0 + rows` (flat over `n·oh·ow`) of group
/// `grp` into `a`: row `r` holds the `kh·kw·c/group` input values of pixel
/// `p0 + r`'s window in `(kh, kw, c)` order, zero where the window leaves
/// the input.
fn im2col(g: &Dims, x: &[f32], grp: usize, p0: usize, rows: usize, a: &mut [f32]) {
    let cg = g.c / g.group;
    let kdim = g.kh * g.kw * cg;
    let c0 = grp * cg;
    let plane = g.oh * g.ow;
    // One group with unit W dilation: a window row is one contiguous run of
    // the input row, copied at once.
    let contiguous = g.group == 1 && g.dilation[1] == 1;
    for (r, dst) in a[..rows * kdim].chunks_exact_mut(kdim).enumerate() {
        let p = p0 + r;
        let (b, rem) = (p / plane, p % plane);
        let (oy, ox) = (rem / g.ow, rem % g.ow);
        let (by, bx) = (g.base(oy, 0), g.base(ox, 1));
        let (kx0, kx1) = tap_range(bx, g.dilation[1], g.kw, g.w);
        for (ky, drow) in dst.chunks_exact_mut(g.kw * cg).enumerate() {
            let iy = by + (ky * g.dilation[0]) as isize;
            if iy < 0 || iy >= g.h as isize {
                drow.fill(0.0);
                continue;
            }
            let xrow = (b * g.h + iy as usize) * g.w * g.c;
            drow[..kx0 * cg].fill(0.0);
            drow[kx1 * cg..].fill(0.0);
            if contiguous {
                if kx0 < kx1 {
                    let ix0 = (bx + kx0 as isize) as usize;
                    let src = xrow + ix0 * g.c;
                    drow[kx0 * cg..kx1 * cg].copy_from_slice(&x[src..src + (kx1 - kx0) * g.c]);
                }
                continue;
            }
            for kx in kx0..kx1 {
                let ix = (bx + (kx * g.dilation[1]) as isize) as usize;
                let src = xrow + ix * g.c + c0;
                drow[kx * cg..(kx + 1) * cg].copy_from_slice(&x[src..src + cg]);
            }
        }
    }
}
