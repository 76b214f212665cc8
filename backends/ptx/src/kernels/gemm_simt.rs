//! fp32 GEMM on the CUDA cores (no tensor cores) for a [`GemmSpec`]:
//! batched strided products (`Step::Gemm`, `Step::MatMul`) and NHWC
//! implicit-GEMM convolution with groups (`Step::Conv2d`,
//! [`AMode::Conv`](super::AMode::Conv)).
//!
//! Kernel ABI of [`gemm_f32`]: parameters `(a, b, [bias,] c)`, f32 global
//! pointers, `bias` only when `spec.bias` is `Some`. `C_b[i][j] =
//! Σ_kk A_b[i][kk]·B_b[kk][j] (+ bias[b·s + j])`, then `max(x, 0)` with
//! relu, for `b < batch`, `i < m`, `j < n`; no other element of `c` is
//! written (C may be a strided view inside a larger tensor).
//! [`gemm_f32_with`] with a [`GemmEpilogue`] of `K` extra operands takes
//! `(a, b, [bias,] c, e1, …, eK)` and stores `f(x, e1[o1], …, eK[oK])`
//! instead of `x` (the value after bias and relu), `f` being the
//! epilogue's expression and `ok = b·s0 + i·s1 + j·s2` with
//! `[s0, s1, s2] = epi.strides[k − 1]`; the `ek` are only read, at those
//! offsets of the stored elements, may overlap each other and A, B or
//! bias, but not the elements of C the kernel writes.
//! Launch: block `(256, 1, 1)` ([`SimtTile::threads`]), grid
//! `(tiles_m · tiles_n, 1, min(batch, 65535))` for the `bm × bn` tile
//! [`pick_tile`] chooses (a block at `z` runs batches `z, z + 65535, …`),
//! dynamic shared memory [`SimtTile::smem_bytes`] (≤ 48 KiB). An empty
//! product (batch, m or n zero) is a kernel that returns at once, launched
//! as one block of 32.
//!
//! Code shape: a block computes a `bm × bn` tile of C, each thread a
//! `tm × tn` register tile whose rows (columns) come in groups of up to
//! four consecutive ones, so that the inner loop reads them from shared
//! memory with conflict-free 16-byte loads and does `tm·tn` `fma.rn.f32`
//! per k. K advances by `bk`: the next k-tile is loaded from global memory
//! into registers while the current one is multiplied out of shared
//! memory, then stored into the other of two shared buffers (one barrier
//! per k-tile; the loop does two k-tiles per iteration so that buffer
//! offsets are constants). Both operands sit in shared memory k-major
//! (`[kk][row]`, `[kk][col]`, rows padded by 4 floats against bank
//! conflicts of the transposing stores). Small tiles split each k-tile
//! among `ks` thread groups whose sums meet in shared memory at the end,
//! which keeps 4×4 register tiles (and 256 threads) on small outputs.
//!
//! Loads: 16 bytes wide where four consecutive elements are contiguous and
//! aligned (`spec.aligned16`, unit stride along k or along the rows /
//! columns, extents and other strides multiples of 4), scalar otherwise,
//! with consecutive threads along the smaller stride. Out-of-range and
//! padding elements read as zero through a clamped address (no branch);
//! guards the shape makes unnecessary are not emitted, and the partial
//! k-tile is the first one, so only the prologue checks k. The
//! convolution gather keeps per loaded row the offset of its top-left tap
//! and derives each column's tap offset once per k-tile.
//!
//! Epilogue: accumulators start from the bias, so the end is relu, the
//! pointwise epilogue (a call of the helper `@{name}_epi` that
//! `pointwise::define_epilogue` writes and the optimizer inlines, inside
//! the store's guard, so that its operands are read for elements in range
//! only) and guarded (16-byte where C allows) stores. Blocks are ordered
//! in groups of 8 row tiles so that blocks running together share A and B
//! in L2.
//!
//! Invariants:
//! - Everything is a constant; only the pointers are passed.
//! - Offsets are i32 when every index the kernel forms for an element in
//!   range fits, i64 otherwise; an out-of-range element's offset is
//!   replaced by 0 before the address is formed.
//! - The epilogue runs once per stored element, on the full sum (after the
//!   k groups' reduction); its offsets are i64 whatever the index type.
//!   Without an epilogue the code is exactly that of `gemm_f32_tile`.
//! - Relu is `max(x, 0)` with Rust's `f32::max` NaN rule, as the CPU
//!   kernels: NaN becomes 0 (`llvm.maxnum` → `max.f32`).
//! - The summation order is fixed (bias, then k ascending per group, then
//!   groups in order): results are deterministic, and differ from the CPU
//!   kernels' by rounding only.
//!
//! Modules: `tile` (the tile, its limits and the cost model that picks
//! it), `problem` (the spec validated and normalized, the index width),
//! `emit` (the kernel's skeleton: block order, k pipeline, inner product),
//! `load` (the operands' global → register → shared path) and `epilogue`
//! (the C side: bias start, k-group reduction, relu, the pointwise
//! epilogue and stores).

mod emit;
mod epilogue;
mod load;
mod problem;
mod tile;

pub use tile::{SimtTile, pick_tile};

use super::{GemmEpilogue, GemmSpec, Geometry};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::pointwise::define_epilogue;
use emit::Gen;
use problem::{ASrc, Problem};

/// The largest grid.z.
const MAX_Z: u64 = 65535;

const DECLS: &[&str] = &[
    "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()",
    "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    "declare float @llvm.fma.f32(float, float, float)",
    "declare float @llvm.maxnum.f32(float, float)",
        "declare float @llvm.maximum.f32(float, float)",
];

/// Appends the kernel `@{name}` computing `spec` with the tile
/// [`pick_tile`] chooses; see the module doc for its ABI and launch.
pub fn gemm_f32(m: &mut ModuleText, name: &str, spec: &GemmSpec) -> Result<Geometry, String> {
    gemm_f32_tile(m, name, spec, pick_tile(spec))
}

/// [`gemm_f32`] with a given tile (for tests and tuning).
pub fn gemm_f32_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    tile: SimtTile,
) -> Result<Geometry, String> {
    gemm_f32_with(m, name, spec, tile, None)
}

/// [`gemm_f32_tile`] with a pointwise epilogue applied to every element of
/// C before it is stored: the kernel takes `epi.strides.len()` more
/// pointers after C (see the module doc), and the helper
/// `@{name}_epi` is defined for it. Without an epilogue the code is that
/// of [`gemm_f32_tile`].
pub fn gemm_f32_with(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    tile: SimtTile,
    epi: Option<&GemmEpilogue>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    tile.check()?;
    let mut params = if spec.bias.is_some() {
        "ptr addrspace(1) noalias readonly %pa, ptr addrspace(1) noalias readonly %pb, ptr addrspace(1) noalias readonly %pbias, ptr addrspace(1) noalias %pc"
    } else {
        "ptr addrspace(1) noalias readonly %pa, ptr addrspace(1) noalias readonly %pb, ptr addrspace(1) noalias %pc"
    }
    .to_string();
    let epi_fn = epi.map(|e| {
        for k in 1..=e.strides.len() {
            params.push_str(&format!(", ptr addrspace(1) noalias readonly %pe{k}"));
        }
        format!("{name}_epi")
    });
    // The helper is defined once everything else is known to be valid
    // (also for the empty kernel, which does not call it: an invalid
    // epilogue is an error whatever the shape).
    let define_epi = |m: &mut ModuleText| match (epi, &epi_fn) {
        (Some(e), Some(f)) => define_epilogue(m, f, e),
        _ => Ok(()),
    };
    let epi_strides = epi.map_or(&[][..], |e| &e.strides[..]);
    let Some(p) = Problem::new(spec, epi_strides)? else {
        define_epi(m)?;
        m.func(format!(
            "define ptx_kernel void @{name}({params}) {{\nentry:\n  ret void\n}}\n"
        ));
        return Ok(Geometry {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            smem: 0,
        });
    };
    let (bm, bn) = (u64::from(tile.bm), u64::from(tile.bn));
    let blocks = p.m.div_ceil(bm) * p.n.div_ceil(bn);
    if blocks > i32::MAX as u64 || p.batch > i32::MAX as u64 {
        return Err(format!(
            "gemm_f32: {} blocks of {bm}x{bn} over {} batches exceed the grid",
            blocks, p.batch
        ));
    }
    let it = match p.max_index(&tile) {
        x if x < (1 << 31) - 1 => "i32",
        x if x < 1 << 62 => "i64",
        _ => return Err("gemm_f32: the operands are too large to index".into()),
    };
    define_epi(m)?;
    for d in DECLS {
        m.declare(d);
    }
    let mut g = Gen {
        b: Body::new(),
        p: &p,
        t: tile,
        it,
        epi: epi_fn,
    };
    let body = g.kernel();
    // A scalar convolution gather keeps three values per loaded row
    // (offset, top-left input corner) in registers; under the caps of
    // `min_blocks` that spills, so ptxas gets a free hand there.
    let scalar_conv = matches!(p.a, ASrc::Conv(_)) && !g.operands()[0].vec;
    // With an epilogue, ptxas (CUDA 13) fills the `min_blocks` budget and
    // spills around the tail, where without a hint it stays well below it
    // (at most 80 registers for register tiles below 8×8: more blocks per
    // multiprocessor, no spills). The 8×8 tile keeps its hint: without
    // it, it takes ~135 registers, one block per multiprocessor.
    let min_blocks = if scalar_conv {
        Some(1)
    } else if epi.is_some() && tile.tm * tile.tn < 64 {
        None
    } else {
        Some(tile.min_blocks())
    };
    let hint = min_blocks.map_or(String::new(), |n| format!(" \"nvvm.minctasm\"=\"{n}\""));
    m.func(format!(
        "define ptx_kernel void @{name}({params}) \"nvvm.maxntid\"=\"{}\"{hint} {{\nentry:\n{body}}}\n",
        tile.threads(),
    ));
    Ok(Geometry {
        grid: [blocks as u32, 1, p.batch.min(MAX_Z) as u32],
        block: [tile.threads(), 1, 1],
        smem: tile.smem_bytes(),
    })
}
