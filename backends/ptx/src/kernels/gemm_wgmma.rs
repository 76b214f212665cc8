//! Hopper GEMM on `wgmma` (sm_90a only): [`gemm_wgmma`] writes one kernel
//! computing a plain (batch 1) [`GemmSpec`] `C = A·B (+ bias) (relu)
//! (epilogue)` with `wgmma.mma_async` m64nNk16 (f16 or bf16 inputs, f32
//! accumulation), both operands read by the tensor cores straight from
//! shared memory through matrix descriptors. [`qconv_wgmma`] is the same
//! pipeline on bytes (m64nNk32, u8/s8 by s8, s32 accumulation) for int8
//! convolutions, with a requantizing epilogue (`quant.rs`); the layouts
//! below are then the same in bytes (a k-tile is 128 bytes of k).
//!
//! Operands:
//! - A: f16/bf16 (the precision's type), `m × k`, element `(i, kk)` at
//!   `a[i·row + kk]` (`spec.a = Strided { row, col: 1 }`); `row` must be a
//!   multiple of 8 and A 16-byte aligned (`spec.aligned16`), so that every
//!   8-element run of a row is one 16-byte `cp.async` (pad the scratch rows
//!   of a converted activation to a multiple of 8). Or an implicit
//!   convolution (`spec.a = Conv(g)`, [`AMode::Conv`]'s rows and columns):
//!   A is then the NHWC input `x` itself in the half type, dense, one
//!   group, `g.c` a multiple of 8 so that each 16-byte chunk is 8 channels
//!   of one filter tap; a chunk whose tap lies in the padding, or past k,
//!   is zero-filled through `cp.async`'s source size.
//! - B: f16/bf16 packed by [`pack_b`] for the kernel's tile ([`WgTile`],
//!   [`choose_wg_tile`]); `spec.b_strides` are not used. [`packed_b_offset`]
//!   is the layout: block `(kt, nt)` of `64 × bn` (k-tile `kt`, n-tile `nt`)
//!   is the contiguous run of `64·bn` elements at `(nt·ktiles + kt)·64·bn`,
//!   holding the tile exactly as shared memory wants it: `bn` rows (one per
//!   column `n`) of 64 k-elements (128 bytes), the 16-byte chunk `c = kk/8`
//!   of row `nr` stored at chunk position `c ^ (nr % 8)` (the 128-byte
//!   swizzle), zero past `k` and `n`.
//! - C: f32, element `(i, j)` at `c[i·c_strides[1] + j]`; bias `f32[n]`.
//!
//! Kernel ABI (as `gemm_tc`): parameters `a, b, [bias], c, [e1 … ek]`
//! (bias only when `spec.bias` is `Some`; `e1 … ek` with a [`GemmEpilogue`]
//! of `k` extra operands, read at `i·s1 + j·s2`). Launch: grid
//! `[⌈m/128⌉·⌈n/bn⌉, 1, 1]`, block `[256, 1, 1]`, dynamic shared memory
//! [`WgTile::smem_bytes`] (up to 193 KiB: the launcher raises the limit).
//! An empty product (`m` or `n` zero) returns at once (grid `[1, 1, 1]`,
//! no shared memory); `k = 0` writes `relu(bias)` (or 0).
//!
//! Code shape: a block of two warpgroups computes a `128 × bn` tile of C,
//! warpgroup `w` rows `64w … 64w+63`, all `bn` columns, as one
//! `m64n{bn}k16` accumulator (`bn/2` f32 registers per thread). Shared
//! memory is a ring of `stages` stages (1024-byte aligned), each the A tile
//! (128 rows × 64 k, 16 KiB) then the B tile (`bn` rows × 64 k), both
//! K-major with the 128-byte swizzle: row `r` at byte `128·r`, its 16-byte
//! chunk `c` at `16·(c ^ (r % 8))`. That is wgmma's canonical
//! `SWIZZLE_128B` K-major layout (descriptor: start address >> 4, leading
//! offset 1 (unused when K fits the swizzle width), stride offset 1024 B
//! between 8-row groups, mode 1 in bits 62-63); the k16 step `s` of a
//! k-tile starts `32·s` bytes in, as CUTLASS and DeepGEMM address it. The
//! swizzle keeps both the `cp.async` stores (8 threads per 128-byte row)
//! and the tensor cores' reads free of bank conflicts.
//!
//! Every thread both copies and multiplies (no producer warpgroup: with
//! `cp.async` the copies are 12 instructions per thread and k-tile, the
//! warps are free while `wgmma` runs asynchronously, and a producer
//! warpgroup would need `setmaxnreg` and mbarriers to pay for itself).
//! Pipeline, k-tile `t` in stage `t % stages`: wait for this thread's
//! copies of tile `t` (`cp.async.wait_group stages-3`), `fence.proxy.async`
//! (the copies are generic-proxy writes that `wgmma` reads through the
//! async proxy), barrier; `cp.async` of tile `t + stages-2` into the stage
//! of tile `t-2` (one commit group per k-tile, empty past k); then
//! `wgmma.fence`, four `wgmma`, `commit_group`, `wait_group 1`, which
//! leaves tile `t`'s multiplies running while the next iteration waits and
//! copies. Tile `t-2`'s stage is free at the barrier of `t`: every thread
//! has passed its `wait_group 1` of iteration `t-1`. A's rows past `m` and
//! its k tail are zero-filled through `cp.async`'s source size; B needs
//! none (packed with zeros). The `wgmma` inline assembly takes and returns
//! the accumulators as tied operands, and so do the fence and the waits,
//! so LLVM cannot move accumulator reads or writes across them.
//!
//! fp8 (e4m3 [`qconv_wgmma`]) promotes: Hopper's fp8 tensor cores add
//! their products with fewer mantissa bits than f32, so a k loop that
//! keeps the whole sum in the `wgmma` accumulators loses precision with
//! k (on the H200: rare e4m3 outputs tens of steps off at K = 576). As
//! cuBLAS (without fast accumulation) and DeepGEMM do, each k-tile's four
//! `wgmma` (k = 128 e4m3 products) accumulate into scratch registers
//! started fresh (scale-d 0 on the first); after the tile's `wait_group
//! 0` the scratch is added into the f32 accumulators with ordinary f32
//! adds. One k-tile per promotion is the finest the pipeline allows (its
//! commit group) and what DeepSeek-V3 found enough (128 products); the
//! adds cost `bn/2` `add.f32` per thread and tile, a few percent of the
//! tile's tensor-core time. The wait is 0, not 1: the loop overlaps the
//! running tile with the next tile's `cp.async` wait, barrier and copies
//! (moved between the commit and the wait) instead; ptxas serializes the
//! `wgmma` of a loop that reads one scratch set while another is in
//! flight (two sets alternating across a `wait_group 1`: 'non wgmma
//! instructions reading accumulator registers'). The sums and the
//! scratch are two sets of `bn/2` registers, so fp8 tiles are at most
//! [`FP8_MAX_BN`] wide. int8 sums are exact in s32 and keep the plain
//! pipeline. The CTA barrier of each tile keeps the two warpgroups in
//! step, so both promote while the tensor cores wait (taking turns on
//! named barriers, one promoting under the other's `wgmma`, measured
//! slower on the H200: docs/performance.md). [`KLoop::Pairs`]
//! ([`qconv_wgmma_with`]) promotes every second k-tile (256 products),
//! the second tile's `wgmma` chained on the first's in flight: half the
//! drains, for a sum twice as long in the tensor cores' own precision;
//! [`choose_kloop`] takes it where the k-tiles pair and the tile has five
//! stages ([`choose_q_tile`] gives fp8 five where they pair).
//!
//! Blocks are ordered in groups of [`GROUP`] tile rows (block `x` is tile
//! row `g·GROUP + (x mod (GROUP·ntn)) mod gsz`, column
//! `(x mod (GROUP·ntn)) / gsz`), so that the blocks resident at one time
//! share A and B panels in L2.
//!
//! The epilogue is `gemm_tc`'s: `+ bias[j]`, relu as `max(x, 0)` (NaN
//! becomes 0), then the [`GemmEpilogue`] expression `@{name}_epi`, stored
//! where `i < m, j < n` (pairs as 8-byte stores where aligned); the
//! expression runs inside the store's guard, so its operands are read
//! only at elements that exist. Accumulator register `4q + 2h + e` of a
//! thread (lane `l` of warp `w` in its warpgroup) is row `16w + l/4 + 8h`,
//! column `8q + 2(l % 4) + e` of the warpgroup's tile.

mod epilogue;
mod mainloop;
mod quant;

pub use quant::{FP8_MAX_BN, KLoop, choose_kloop, choose_q_tile, pack_weights_wg, packed_weights_wg_len, qconv_wgmma, qconv_wgmma_tile, qconv_wgmma_with, stored_type, supports};

use super::gemm_epilogue::{self, EpiFn};
use super::{AMode, ConvGeom, GemmEpilogue, GemmSpec, Geometry, HalfCopy};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;
use aoc_ir::types::Scalar;
use aoc_plan::plan::{QuantConv, QuantElem};

/// The multiply precision of [`gemm_wgmma`]; accumulation is f32 always.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WgPrecision {
    F16,
    Bf16,
}

impl WgPrecision {
    pub const ALL: [WgPrecision; 2] = [WgPrecision::F16, WgPrecision::Bf16];

    /// The `wgmma` input type suffix.
    fn ptx(self) -> &'static str {
        match self {
            WgPrecision::F16 => "f16",
            WgPrecision::Bf16 => "bf16",
        }
    }
}

/// What the tensor cores multiply: halves with f32 accumulators, or bytes
/// of a quantized convolution ([`qconv_wgmma`]): integers (A u8 or s8, B
/// s8) with s32 accumulators, or e4m3 by e4m3 with f32 accumulators (the
/// step's `q.elem`), and a requantizing epilogue. Shared memory is laid
/// out the same in bytes: a k-tile is one 128-byte swizzle row (64 halves
/// or 128 bytes), a `wgmma` k step 32 bytes of it (k16 or k32).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Operands {
    Half(WgPrecision),
    /// The requantization (and the bytes' element type, `q.elem`) and the
    /// stored type (8-bit, or f32 through an epilogue).
    Quant(QuantConv, Scalar),
}

impl Operands {
    /// Bytes of an element of A and B.
    fn bytes(self) -> u32 {
        match self {
            Operands::Half(_) => 2,
            Operands::Quant(..) => 1,
        }
    }

    /// Elements of k per k-tile.
    fn bk(self) -> u32 {
        ROW / self.bytes()
    }

    /// Elements per 16-byte chunk.
    fn chunk(self) -> u32 {
        16 / self.bytes()
    }

    /// The LLVM type of an element's bits.
    fn elem(self) -> &'static str {
        match self {
            Operands::Half(_) => "i16",
            Operands::Quant(..) => "i8",
        }
    }

    /// The accumulators' LLVM type and inline-assembly constraint.
    fn acc(self) -> (&'static str, &'static str) {
        match self {
            Operands::Half(_) => ("float", "f"),
            Operands::Quant(q, _) => match q.elem {
                QuantElem::Int8 => ("i32", "r"),
                QuantElem::E4M3 | QuantElem::E4M3ToF32 => ("float", "f"),
            },
        }
    }
}

/// The tiling of one kernel: `128 × bn` block tiles, k steps of one
/// 128-byte row, a ring of `stages` shared-memory stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgTile {
    pub bn: u32,
    pub stages: u32,
}

/// Rows of a block tile (two warpgroups of m64).
pub const BM: u32 = 128;
/// K of one k-tile of halves (one 128-byte swizzle row).
pub const BK: u32 = 64;
/// Bytes of one k-tile row.
const ROW: u32 = 128;
/// Threads of a block.
pub const THREADS: u32 = 256;
/// Bytes of one A tile in shared memory.
const A_BYTES: u32 = BM * ROW;
/// Slack for aligning the ring to 1024 bytes at run time.
const ALIGN: u32 = 1024;
/// Tile rows per block group (see the module doc).
pub const GROUP: u64 = 16;
/// Most dynamic shared memory of an sm_90 block.
const SMEM_MAX: u32 = 227 * 1024;

impl WgTile {
    /// 128×256, four stages (193 KiB): the throughput tile.
    pub const WIDE: WgTile = WgTile { bn: 256, stages: 4 };
    /// 128×128, four stages (129 KiB): for products with few 128×256 tiles.
    pub const NARROW: WgTile = WgTile { bn: 128, stages: 4 };

    fn b_bytes(&self) -> u32 {
        self.bn * ROW
    }

    fn stage_bytes(&self) -> u32 {
        A_BYTES + self.b_bytes()
    }

    /// Dynamic shared memory of a kernel with this tile, in bytes.
    pub fn smem_bytes(&self) -> u32 {
        self.stages * self.stage_bytes() + ALIGN
    }

    /// Whether two blocks of this tile fit in one multiprocessor's shared
    /// memory (228 KiB, 1 KiB of it reserved per block).
    pub fn pairs(&self) -> bool {
        2 * (self.smem_bytes() + 1024) <= 228 * 1024
    }

    /// Checks the tile is one the generator handles: `bn` a multiple of 32
    /// up to 256 (wgmma's N, and whole 16-byte B chunks per thread), 3 to
    /// 8 stages within sm_90's 227 KiB.
    pub fn check(&self) -> Result<(), String> {
        let t = *self;
        if t.bn == 0 || t.bn > 256 || !t.bn.is_multiple_of(32) || !(3..=8).contains(&t.stages) {
            return Err(format!("unsupported wgmma tile {t:?}"));
        }
        if t.smem_bytes() > SMEM_MAX {
            return Err(format!(
                "wgmma tile {t:?} needs {} bytes of shared memory, more than 227 KiB",
                t.smem_bytes()
            ));
        }
        Ok(())
    }
}

/// Multiprocessors of an H200 (one block of these tiles each).
const SMS: u64 = 132;

/// The longest k [`choose_wg_tile`] pairs blocks on a multiprocessor for.
const PAIRED_MAX_K: u64 = 1024;

/// The tile [`gemm_wgmma`] uses: 128×`bn` with four stages, `bn` of 256,
/// 192 or 128, whichever fills the last wave of blocks best (blocks over
/// whole waves of [`SMS`]), the widest among near ties. `--tune` on an
/// H200 picked the same for BERT-base at batch 32: 256 for n = 3072 (384
/// blocks, 0.97 of three waves), 192 for n = 768 (128 blocks in one wave,
/// where 256 gives 96 and 128 gives 192 blocks, 0.73 of a wave's slots
/// either way).
///
/// A short k loop (k ≤ [`PAIRED_MAX_K`]) with at least a full wave of
/// 128×128 tiles at two blocks per multiprocessor takes 128×128 with three
/// stages instead (97 KiB of shared memory, so two blocks share a
/// multiprocessor and one's epilogue runs under the other's products):
/// BERT-base's first FFN GEMM at batch 32 (4096×3072×768, GELU epilogue)
/// ran in 73 µs against 110 with 128×256 on an H200, the whole model 2.36
/// ms against 2.82 (four stages: 2.65; 128×192×3: 2.81).
///
/// Tiles no wider than `n` needs (64 for ResNet's 64-channel
/// convolutions); and where even the widest of those leaves more than
/// half the multiprocessors idle, 128×64 (ResNet-50's last stage at batch
/// 32, 13 tile rows: 104 blocks).
pub fn choose_wg_tile(spec: &GemmSpec) -> WgTile {
    let ntm = spec.m.div_ceil(BM as u64);
    let blocks = |bn: u32| ntm * spec.n.div_ceil(bn as u64);
    // Widths that leave no 64-column quarter of the tile empty.
    let widths: Vec<u32> = [256u32, 192, 128, 64]
        .into_iter()
        .filter(|&bn| bn == 64 || (bn as u64) < spec.n + 64)
        .collect();
    let widest = widths[0];
    if widest >= 128 && spec.k <= PAIRED_MAX_K && blocks(128) >= 2 * SMS {
        return WgTile { bn: 128, stages: 3 };
    }
    // Far fewer blocks than multiprocessors: the narrowest tile (with
    // widths a factor of two or less apart, no wider one would give every
    // multiprocessor a block).
    if blocks(widest) < SMS / 2 {
        return WgTile { bn: 64, stages: 4 };
    }
    let fill = |bn: u32| {
        let b = blocks(bn);
        b as f64 / (b.div_ceil(SMS).max(1) * SMS) as f64
    };
    let mut best = widest;
    for &bn in widths.iter().filter(|&&bn| bn != 64 && bn < widest) {
        if fill(bn) > fill(best) + 0.05 {
            best = bn;
        }
    }
    WgTile {
        bn: best,
        stages: 4,
    }
}

/// k-tiles (of `bk` elements) and n-tiles of `spec` under `tile`.
fn tiles(spec: &GemmSpec, tile: WgTile, bk: u32) -> (u64, u64) {
    (spec.k.div_ceil(bk as u64), spec.n.div_ceil(tile.bn as u64))
}

/// Elements of B packed by [`pack_b`] for `tile`.
pub fn packed_b_len(spec: &GemmSpec, tile: WgTile) -> usize {
    let (kt, nt) = tiles(spec, tile, BK);
    (kt * nt * (BK * tile.bn) as u64) as usize
}

/// Where [`pack_b`] puts `B[kk][nn]`: see the module doc.
pub fn packed_b_offset(spec: &GemmSpec, tile: WgTile, kk: u64, nn: u64) -> usize {
    packed_offset(spec, tile, Operands::Half(WgPrecision::F16), kk, nn)
}

/// The element offset of `B[kk][nn]` in B packed for `tile` with elements
/// of `p`: blocks of `bk × bn`, rows of one 128-byte swizzle row each.
fn packed_offset(spec: &GemmSpec, tile: WgTile, p: Operands, kk: u64, nn: u64) -> usize {
    let (ktiles, _) = tiles(spec, tile, p.bk());
    let (bn, bk, ch) = (tile.bn as u64, p.bk() as u64, p.chunk() as u64);
    let (kt, kr, nt, nr) = (kk / bk, kk % bk, nn / bn, nn % bn);
    let block = (nt * ktiles + kt) * bk * bn;
    let chunk = (kr / ch) ^ (nr % 8);
    (block + nr * bk + chunk * ch + kr % ch) as usize
}

/// B (`k × n` row major, f16/bf16 bits) in the layout the kernel of
/// `tile` reads, zero-padded to whole tiles. Panics unless
/// `b_kn.len() == k·n` (a caller's bug).
pub fn pack_b(spec: &GemmSpec, tile: WgTile, b_kn: &[u16]) -> Vec<u16> {
    let (k, n) = (spec.k, spec.n);
    assert_eq!(b_kn.len() as u64, k * n, "pack_b: B must hold k·n elements");
    let mut out = vec![0u16; packed_b_len(spec, tile)];
    for kk in 0..k {
        for nn in 0..n {
            out[packed_b_offset(spec, tile, kk, nn)] = b_kn[(kk * n + nn) as usize];
        }
    }
    out
}

/// Appends kernel `name` computing `spec` with `wgmma` in `prec` (tile from
/// [`choose_wg_tile`]) and an optional pointwise epilogue; see the module
/// doc for the ABI and the layouts.
pub fn gemm_wgmma(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: WgPrecision,
    epi: Option<&GemmEpilogue>,
    sm: Sm,
) -> Result<Geometry, String> {
    gemm_wgmma_tile(m, name, spec, prec, epi, sm, choose_wg_tile(spec))
}

const I31: u64 = i32::MAX as u64;

/// [`gemm_wgmma`] with an explicit tile (for tuning and tests); B must be
/// packed for the same tile.
pub fn gemm_wgmma_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: WgPrecision,
    epi: Option<&GemmEpilogue>,
    sm: Sm,
    tile: WgTile,
) -> Result<Geometry, String> {
    gemm_wgmma_with(m, name, spec, prec, epi, sm, tile, None)
}

/// [`gemm_wgmma_tile`] that also writes a [`HalfCopy`] of C through one
/// more parameter after all others, when `half` asks for it (C must then
/// be dense: `c_strides[1] == n`).
#[allow(clippy::too_many_arguments)]
pub fn gemm_wgmma_with(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: WgPrecision,
    epi: Option<&GemmEpilogue>,
    sm: Sm,
    tile: WgTile,
    half: Option<HalfCopy>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if half.is_some() && spec.c_strides[1] != spec.n {
        return Err("a half copy of C needs a dense C".to_string());
    }
    if sm != Sm::Sm90a {
        return Err(format!(
            "the wgmma gemm needs sm_90a (wgmma.mma_async), target is {sm}"
        ));
    }
    tile.check()?;
    let (row, conv) = check_spec(spec)?;
    if let Some(e) = epi {
        // Batch 1 (checked above): the batch stride never counts.
        gemm_epilogue::check(spec, e)?;
    }
    // The epilogue's operands `%e1 …` after C; its helper is defined also
    // for the empty kernel.
    let (mut sig, epi_fn) = gemm_epilogue::params(m, name, spec, epi)?;
    if half.is_some() {
        sig.push("ptr addrspace(1) noalias %h".to_string());
    }
    let p = Operands::Half(prec);
    write(m, name, &sig, spec, p, tile, (row, conv), (epi_fn, Vec::new()), half, KLoop::Lockstep)
}

/// Writes kernel `name` with parameters `sig` (checked: `spec`, `tile`,
/// the epilogue) and returns its geometry.
#[allow(clippy::too_many_arguments)]
fn write(
    m: &mut ModuleText,
    name: &str,
    sig: &[String],
    spec: &GemmSpec,
    p: Operands,
    tile: WgTile,
    (row, conv): (u64, Option<ConvGeom>),
    (epi, epi_ops): (Option<EpiFn>, Vec<(&'static str, u64)>),
    half: Option<HalfCopy>,
    kloop: KLoop,
) -> Result<Geometry, String> {
    let (ktiles, ntn) = tiles(spec, tile, p.bk());
    let ntm = spec.m.div_ceil(BM as u64);
    if ntm * ntn > I31 {
        return Err(format!(
            "gemm {}x{} needs {} blocks of {BM}x{}, more than a grid holds",
            spec.m,
            spec.n,
            ntm * ntn,
            tile.bn
        ));
    }
    let empty = spec.m == 0 || spec.n == 0;
    let body = if empty {
        "  ret void\n".to_string()
    } else {
        declare(m);
        let mut g = Gen {
            b: Body::new(),
            s: spec,
            p,
            t: tile,
            row,
            conv,
            ktiles,
            ntm,
            ntn,
            epi,
            epi_ops,
            ahead: Vec::new(),
            half,
            kloop,
            acc: String::new(),
            scratch: String::new(),
            tid: String::new(),
            bm0: String::new(),
            bn0: String::new(),
        };
        g.kernel();
        g.b.into_text()
    };
    // Where two blocks fit in shared memory, ask ptxas to fit them in the
    // registers too (at most 128 per thread): the pairing is what lets
    // one block's epilogue run under the other's products, and a heavy
    // epilogue (an int8 requantization with a merged GELU chain took 140)
    // would otherwise silently leave one block per multiprocessor. Not for
    // fp8, whose promotion keeps two sets of accumulators: 128 registers
    // would spill them.
    let promoted = matches!(p, Operands::Quant(q, _) if q.elem != QuantElem::Int8);
    let pair = if tile.pairs() && !promoted { " \"nvvm.minctasm\"=\"2\"" } else { "" };
    m.func(format!(
        "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{THREADS}\"{pair} {{\nentry:\n{body}}}\n",
        sig.join(", ")
    ));
    Ok(Geometry {
        grid: [if empty { 1 } else { (ntm * ntn) as u32 }, 1, 1],
        block: [THREADS, 1, 1],
        smem: if empty { 0 } else { tile.smem_bytes() },
    })
}

/// Checks what the kernel supports; returns A's row stride (0 for an
/// implicit convolution) and the convolution.
fn check_spec(s: &GemmSpec) -> Result<(u64, Option<ConvGeom>), String> {
    if s.batch != 1 {
        return Err(format!("the wgmma gemm takes batch 1, found {}", s.batch));
    }
    if s.m > I31 || s.n > I31 || s.k > I31 {
        return Err(format!(
            "gemm {}x{}x{} is too large for one kernel",
            s.m, s.n, s.k
        ));
    }
    if s.c_strides[2] != 1 && s.n > 1 {
        return Err(format!(
            "the wgmma gemm needs C with unit column stride, found {}",
            s.c_strides[2]
        ));
    }
    if !s.aligned16 {
        return Err("the wgmma gemm needs 16-byte aligned operands".to_string());
    }
    let (row, col) = match s.a {
        AMode::Conv(g) => {
            check_conv(s, &g)?;
            return Ok((0, Some(g)));
        }
        AMode::Strided { row, col, .. } => (row, col),
    };
    if (col != 1 && s.k > 1) || (!row.is_multiple_of(8) && s.m > 1) {
        return Err(format!(
            "the wgmma gemm needs A in rows of unit column stride with a row stride that is a multiple of 8 (found row {row}, col {col})"
        ));
    }
    Ok((if s.m > 1 { row } else { 0 }, None))
}

/// An implicit convolution the kernel reads: one group whose channels
/// come in 16-byte runs (`c` a multiple of 8, so every chunk is 8
/// channels of one tap), image positions within i32 (element offsets are
/// i64).
fn check_conv(s: &GemmSpec, g: &ConvGeom) -> Result<(), String> {
    if g.group != 1 || !g.c.is_multiple_of(8) || g.c == 0 {
        return Err(format!(
            "the wgmma convolution needs one group of channels in multiples of 8 (found {} channels in {} groups)",
            g.c, g.group
        ));
    }
    let expect = (g.n * g.oh * g.ow, g.kh * g.kw * g.c);
    if (s.m, s.k) != expect {
        return Err(format!(
            "internal error: a convolution GEMM of {}x{} for a geometry of {}x{}",
            s.m, s.k, expect.0, expect.1
        ));
    }
    let dims = [
        g.h,
        g.w,
        g.oh * g.stride[0],
        g.ow * g.stride[1],
        g.kh * g.dilation[0],
        g.kw * g.dilation[1],
    ];
    if dims.iter().any(|&d| d > I31 / 4) {
        return Err("the convolution is too large for one wgmma kernel".to_string());
    }
    Ok(())
}

fn declare(m: &mut ModuleText) {
    for d in [
        "@aoc_wg_smem = external addrspace(3) global [0 x i8], align 1024",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare i32 @llvm.smin.i32(i32, i32)",
        "declare i32 @llvm.smax.i32(i32, i32)",
        "declare float @llvm.maxnum.f32(float, float)",
        "declare float @llvm.maximum.f32(float, float)",
        "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    ] {
        m.declare(d);
    }
}

/// What the kernel's parts share.
struct Gen<'a> {
    b: Body,
    s: &'a GemmSpec,
    p: Operands,
    t: WgTile,
    /// A's row stride (elements), for a strided A.
    row: u64,
    /// An implicit convolution's geometry: A is its NHWC input.
    conv: Option<ConvGeom>,
    ktiles: u64,
    ntm: u64,
    ntn: u64,
    /// The epilogue's helper and its operands' strides `[b, i, j]`.
    epi: Option<EpiFn>,
    /// The int8 kernel's epilogue operands' LLVM types and sizes: its
    /// helper takes them as values (`quant`'s stores); empty elsewhere.
    epi_ops: Vec<(&'static str, u64)>,
    /// The entry-block slots of those operands' vectors, one each.
    ahead: Vec<String>,
    /// Stores of C also write a half copy through `%h`.
    half: Option<HalfCopy>,
    /// How an fp8 k loop's warpgroups go through it.
    kloop: KLoop,
    acc: String,
    /// The scratch accumulators of a promoted (fp8) k loop.
    scratch: String,
    tid: String,
    bm0: String,
    bn0: String,
}

impl Gen<'_> {
    fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    /// Accumulator registers per thread.
    fn nacc(&self) -> u32 {
        self.t.bn / 2
    }

    fn kernel(&mut self) {
        let t = self.t;
        let nacc = self.nacc();
        let (acc, _) = self.p.acc();
        self.acc = self.v(format!("alloca [{nacc} x {acc}], align 4"));
        let promoted = self.promoted();
        if promoted {
            self.scratch = self.v(format!("alloca [{nacc} x float], align 4"));
        }
        let ktp = self.v("alloca i32, align 4");
        // Entry-block slots (promoted to registers) for the int8
        // epilogue's operands loaded a run ahead (`quant`'s stores).
        let ops = self.epi_ops.clone();
        let width = match self.p {
            Operands::Quant(q, _) => quant::run_width(q),
            Operands::Half(_) => 16,
        };
        self.ahead = ops.iter().map(|(ty, _)| self.v(format!("alloca <{width} x {ty}>, align 16"))).collect();
        self.tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
        let bx = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
        // Grouped raster order (module doc).
        let (ntm, ntn) = (self.ntm, self.ntn);
        let per = GROUP * ntn;
        let gid = self.v(format!("udiv i32 {bx}, {per}"));
        let first = self.v(format!("mul i32 {gid}, {GROUP}"));
        let left = self.v(format!("sub i32 {ntm}, {first}"));
        let gsz = self.v(format!("call i32 @llvm.smin.i32(i32 {left}, i32 {GROUP})"));
        let r = self.v(format!("urem i32 {bx}, {per}"));
        let mi = self.v(format!("urem i32 {r}, {gsz}"));
        let mt = self.v(format!("add i32 {first}, {mi}"));
        let nt = self.v(format!("udiv i32 {r}, {gsz}"));
        self.bm0 = self.v(format!("mul i32 {mt}, {BM}"));
        self.bn0 = self.v(format!("mul i32 {nt}, {}", t.bn));
        for i in 0..nacc {
            let p = self.acc_ptr(i);
            let zero = if acc == "float" { "0.0" } else { "0" };
            self.ins(format!("store {acc} {zero}, ptr {p}, align 4"));
            // The scratch's first values go into a wgmma with scale-d 0,
            // which ignores them.
            if promoted {
                let p = self.scratch_ptr(i);
                self.ins(format!("store float 0.0, ptr {p}, align 4"));
            }
        }
        if self.ktiles > 0 {
            self.mainloop(&nt, &ktp);
        }
        match self.p {
            Operands::Half(_) => self.epilogue(),
            Operands::Quant(q, out) => self.requantize(q, out),
        }
        self.ins("ret void");
    }

    fn scratch_ptr(&mut self, i: u32) -> String {
        let (nacc, sc) = (self.nacc(), self.scratch.clone());
        self.v(format!("getelementptr inbounds [{nacc} x float], ptr {sc}, i32 0, i32 {i}"))
    }

    fn acc_ptr(&mut self, i: u32) -> String {
        let (nacc, acc, (ty, _)) = (self.nacc(), self.acc.clone(), self.p.acc());
        self.v(format!(
            "getelementptr inbounds [{nacc} x {ty}], ptr {acc}, i32 0, i32 {i}"
        ))
    }
}
