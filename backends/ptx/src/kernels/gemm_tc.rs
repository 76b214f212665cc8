//! Tensor-core GEMM and NHWC implicit-GEMM convolution for the reduced
//! precisions (`--precision fp16|bf16|tf32`): [`gemm_tc`] writes one kernel
//! computing a [`GemmSpec`] with `mma.sync` (m16n8k16 f16/bf16, m16n8k8
//! tf32) and f32 accumulation.
//!
//! Kernel ABI: parameters `a, b, [bias], c, [e1 … ek]` (bias only when
//! `spec.bias` is `Some`; `e1 … ek` only with a [`GemmEpilogue`] of `k`
//! extra operands, [`gemm_tc_with`]). A, bias and C are f32; B is
//! f16/bf16 when `b_half` (weights converted at compile time, same strides
//! in elements) and f32 otherwise; each `e` has its operand's element type.
//! Launch: grid `[⌈m/bm⌉·⌈n/bn⌉, 1, min(batch, 65535)]` (block x is the
//! tile `(x / ⌈n/bn⌉, x % ⌈n/bn⌉)`, so consecutive blocks share their A
//! rows in L2; batches past 65535 loop over `b += 65535`), block
//! `[32·warps, 1, 1]`, dynamic shared memory as the kernel's [`Geometry`]
//! says (by `Layout`; at most [`TcTile::smem_bytes`], 94 KiB, and at
//! most 46 KiB for a 128×128 tile below Hopper, so two blocks share an
//! sm_86 multiprocessor). An empty product (`batch`, `m` or `n`
//! zero) gives a kernel that returns at once, grid `[1, 1, 1]`; `k = 0`
//! writes `relu(bias)` (or 0).
//!
//! Tiles ([`choose_tile`]): 128×128, 128×64 or 64×64 with k steps of 32
//! while they give a block per multiprocessor, else a latency tile 16×64
//! with k steps of 128. Batch-1 layers with few rows and long k (ResNet-50's
//! last stage, a classifier) stay latency-bound: they would need a split of
//! k across blocks, which one kernel writing only C cannot reduce.
//!
//! Where the time goes (H200, f16, 4096³ at 240 TFLOP/s against cuBLAS's
//! 760-780; `mma.sync` alone peaks at 640 there): a 128×128 k-tile reads
//! 16 KiB of f32 A and 8 KiB of half B from L2 for 1 MFLOP, so 240 TFLOP/s
//! moves 5.6 TB/s out of L2, likely its limit (deeper pipelines and more
//! warps stopped helping there; 8192³, at 225, misses L2 more). The next
//! steps cut those bytes per flop: f16 A (converted once,
//! or by the producer), 128×256 tiles with `RingA` (117 KiB, Hopper only),
//! thread-block clusters sharing tiles, and then `wgmma`.
//!
//! Code shape: block tile `bm × bn`, k in steps of `bk`, warps of
//! `bm/warps_m × bn/warps_n` as m16n8 fragments. Shared memory holds A
//! tiles as `bm` rows of `bk` elements (k contiguous) and B tiles as `bk`
//! rows of `bn` (n contiguous), rows padded by 16 bytes (32 for tf32 B)
//! so fragment reads hit distinct banks. A (and f32 B) reach shared memory through
//! registers, since `cp.async` cannot convert: while the warps multiply
//! k-tile `t`, each thread already holds its loads of tile `t+1` in
//! registers and converts and stores them after the MMAs (f32 → f16/bf16
//! round to nearest even, `cvt.rna.tf32.f32` for tf32); half B with
//! 16-byte rows moves with `cp.async` (zero fill through the source size),
//! other half B through registers unconverted. `Layout` says where the
//! tiles lie: two stages of A and B (`Pairs`), or, for `cp.async` B under
//! a tile with k steps of 32, two of A and a ring of 3 or 4 B stages filled
//! that many k-tiles ahead less one (`Ring`), or on Hopper for a strided
//! A under 128×128 a ring of 3 stages that also holds A's f32 tiles as
//! `cp.async` copied them, each thread converting its own chunks once
//! they have landed (`RingA`), so A's loads have two k-tiles to arrive.
//! One barrier per k-tile. Fragments come from `ldmatrix` (A always:
//! a tf32 8×4 block is an 8×8 b16 block; f16/bf16 B with `.trans`) or, for
//! tf32 B, from 32-bit shared loads. Global loads are 16 bytes where the
//! strides allow it (two for a chunk of 8): A rows with unit column
//! stride, 8 (or 4) consecutive channels of one input pixel for a
//! convolution whose channels per group are a multiple of 8 (or 4), B rows
//! or columns with unit stride; anything else is loaded element by element.
//!
//! The epilogue adds `bias[b·s + j]`, applies relu as `max(x, 0)` (NaN
//! becomes 0, as the CPU kernel's `f32::max`), then, with a
//! [`GemmEpilogue`], replaces the value `v` by its expression
//! `@{name}_epi(v, e1, o1, …)` with `ok = b·s0 + i·s1 + j·s2` (the
//! operand's strides), and stores each element with `b < batch, i < m,
//! j < n` at `c[b·cb + i·cr + j·cc]` (pairs as 8-byte stores where
//! aligned); nothing else of C is written. The expression is evaluated
//! inside the store's bounds guard, once per stored element, so its
//! operands are read only at elements that exist; they must not overlap C
//! (they are `noalias`, and would be read after some of C was written).
//!
//! Invariants: sm_80 and newer only; every loop over fragments and chunks
//! is unrolled at generation, so the kernel keeps accumulators and staged
//! loads in registers; out-of-range elements load as zero (k tail, m and n
//! edges, convolution padding) and their addresses are clamped to the
//! operand's first element, so no load leaves the tensors.

mod mma;
mod ring;
mod stage;

use super::gemm_epilogue::{self, EpiFn};
use super::{AMode, GemmEpilogue, GemmSpec, Geometry};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;

/// The multiply precision of [`gemm_tc`]; accumulation is f32 always.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcPrecision {
    F16,
    Bf16,
    Tf32,
}

impl TcPrecision {
    pub const ALL: [TcPrecision; 3] = [TcPrecision::F16, TcPrecision::Bf16, TcPrecision::Tf32];

    /// Bytes of one element in shared memory.
    fn size(self) -> u32 {
        if self == TcPrecision::Tf32 { 4 } else { 2 }
    }

    /// The LLVM type of one element in shared memory.
    fn ty(self) -> &'static str {
        match self {
            TcPrecision::F16 => "half",
            TcPrecision::Bf16 => "bfloat",
            TcPrecision::Tf32 => "i32",
        }
    }

    /// K of one `mma`.
    fn mma_k(self) -> u32 {
        if self == TcPrecision::Tf32 { 8 } else { 16 }
    }
}

/// The tiling of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
}

const fn tile(bm: u32, bn: u32, bk: u32, warps_m: u32, warps_n: u32) -> TcTile {
    TcTile {
        bm,
        bn,
        bk,
        warps_m,
        warps_n,
    }
}

impl TcTile {
    /// The tiles [`choose_tile`] picks from: 128×128 with 8 warps of
    /// 64×32, 128×64 and 64×64 with 4 warps, all with k steps of 32; and
    /// for too few blocks (latency-bound: few rows, or small products)
    /// 16×64 with k steps of 128, 4 warps of 16×16, which keeps more
    /// loads in flight per block and takes a quarter of the k iterations.
    /// The last is always the latency tile. (128×256 with 8 warps of 64×64
    /// ran slower on an H200: 178 TFLOP/s at 4096³ against 220, 160 on
    /// BERT's FFN against 195.)
    pub const ALL: [TcTile; 4] = [
        tile(128, 128, 32, 2, 4),
        tile(128, 64, 32, 2, 2),
        tile(64, 64, 32, 2, 2),
        tile(16, 64, 128, 1, 4),
    ];

    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Row pitch of A in shared memory, in elements (16 bytes of padding).
    fn pa(&self, p: TcPrecision) -> u32 {
        self.bk + 16 / p.size()
    }

    /// Row pitch of B in shared memory, in elements: 16 bytes of padding
    /// (8-row `ldmatrix.trans` reads in distinct banks), 32 for tf32
    /// (32-bit reads of rows `q` and columns `g` in distinct banks).
    fn pb(&self, _p: TcPrecision) -> u32 {
        self.bn + 8
    }

    fn a_bytes(&self, p: TcPrecision) -> u32 {
        self.bm * self.pa(p) * p.size()
    }

    fn b_bytes(&self, p: TcPrecision) -> u32 {
        self.bk * self.pb(p) * p.size()
    }

    fn stage_bytes(&self, p: TcPrecision) -> u32 {
        self.a_bytes(p) + self.b_bytes(p)
    }

    /// Stages of the `cp.async` ring of half B ([`Layout::Ring`]) on `sm`:
    /// for the throughput tiles (k steps of 32) 4 on Hopper, so three B
    /// tiles are in flight while one is multiplied, and 3 elsewhere, so
    /// that two 128×128 blocks still share the 100 KiB of an sm_86
    /// multiprocessor; none for the latency tile, which keeps two stages
    /// of A and B.
    fn ring(&self, sm: Sm) -> u32 {
        match (self.bk <= 32, sm) {
            (false, _) => 0,
            (true, Sm::Sm90 | Sm::Sm90a) => RING_MAX,
            (true, _) => 3,
        }
    }

    /// Whether [`Layout::RingA`] serves this tile: 128×128 and larger.
    /// (On an H200 it ran 4096³ at 240 TFLOP/s against 217 with [`Layout::Ring`]
    /// and 215 before either, but 128×64 and 64×64 slower than `Ring`:
    /// two blocks of 128×64 fit a multiprocessor instead of three; and
    /// mixed on ResNet-50's convolutions, 1×1 at 56² faster but 3×3 at
    /// 28² slower, so it takes strided A only.)
    fn ring_a(&self) -> bool {
        self.bm >= 128 && self.bn >= 128 && self.bk <= 32
    }

    /// Bytes of one f32 A tile as `cp.async` leaves it ([`Layout::RingA`]).
    fn raw_bytes(&self) -> u32 {
        self.bm * self.bk * 4
    }

    /// Shared memory of each layout (`ring` stages for the rings).
    fn layout_bytes(&self, p: TcPrecision, l: Layout, ring: u32) -> u32 {
        match l {
            Layout::Pairs => 2 * self.stage_bytes(p),
            Layout::Ring => 2 * self.a_bytes(p) + ring * self.b_bytes(p),
            Layout::RingA => 2 * self.a_bytes(p) + ring * (self.raw_bytes() + self.b_bytes(p)),
        }
    }

    /// Dynamic shared memory of a kernel with this tile, in bytes: the
    /// most it takes on any path and target (a kernel's [`Geometry`]
    /// gives its own).
    pub fn smem_bytes(&self, p: TcPrecision) -> u32 {
        let mut most = self.layout_bytes(p, Layout::Pairs, 0);
        if self.ring(Sm::Sm90) > 0 && p != TcPrecision::Tf32 {
            most = most.max(self.layout_bytes(p, Layout::Ring, self.ring(Sm::Sm90)));
            if self.ring_a() {
                most = most.max(self.layout_bytes(p, Layout::RingA, RING_A));
            }
        }
        most
    }

    /// Checks the tile is one the generator handles.
    pub fn check(&self, p: TcPrecision) -> Result<(), String> {
        let t = *self;
        let threads = t.threads();
        let ok = (1..=8).contains(&(t.warps_m * t.warps_n))
            && t.bm.is_multiple_of(16 * t.warps_m)
            && t.bn.is_multiple_of(16 * t.warps_n)
            && t.bk.is_multiple_of(16)
            && t.bm > 0
            && t.bn > 0
            && t.bk > 0
            // Every chunk mapping puts a whole number of tile rows or
            // columns on the block's threads.
            && threads.is_multiple_of(t.bm)
            && threads.is_multiple_of(t.bn)
            && threads.is_multiple_of(t.bk);
        if !ok {
            return Err(format!("unsupported tensor-core tile {t:?}"));
        }
        if t.smem_bytes(p) > 99 * 1024 {
            return Err(format!(
                "tile {t:?} needs {} bytes of shared memory, more than 99 KiB",
                t.smem_bytes(p)
            ));
        }
        Ok(())
    }
}

/// The most stages of the half-B ring ([`TcTile::ring`]).
const RING_MAX: u32 = 4;

/// Stages of [`Layout::RingA`]: 128×128 then takes 94 KiB, so two blocks
/// share a Hopper multiprocessor.
const RING_A: u32 = 3;

/// How shared memory is laid out and filled, per kernel.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Layout {
    /// Two stages, each A then B; the k-tile after the current one is
    /// loaded (into registers or with `cp.async`) while the current one is
    /// multiplied.
    Pairs,
    /// Two stages of A (through registers, as in `Pairs`), then a ring of
    /// [`TcTile::ring`] B stages filled with `cp.async` that many k-tiles
    /// ahead less one: for half B with 16-byte rows under a tile with a
    /// ring (on `sm`).
    Ring,
    /// On Hopper, for a strided A in 16-byte chunks under a large tile
    /// ([`TcTile::ring_a`]): two stages of
    /// converted A, then a ring of [`RING_A`] stages, each the f32 A tile
    /// as `cp.async` left it and the half B tile, filled that many
    /// k-tiles ahead less one; each thread converts its own chunks of A
    /// (shared f32 → registers → shared f16/bf16) once they have landed.
    /// A's loads then have two k-tiles to arrive instead of one.
    RingA,
}

/// Blocks that fill a large GPU once (an H200 has 132 multiprocessors).
pub const ENOUGH_BLOCKS: u64 = 132;

/// The tile [`gemm_tc`] uses: the first of [`TcTile::ALL`]`[..3]` that
/// fits the matrix and still gives a block per multiprocessor, else the
/// latency tile `ALL[3]`. (Measured on an H200 with f32 A and half B: 128×128
/// ran 4096³ at 218 TFLOP/s against 150 for 128×64; the latency tile ran
/// BERT's 128×768×768 in 7.8 µs against 12.8 for 32×64 with k steps of 32,
/// and ResNet-50's 7×7×512 3×3 convolution at batch 1 in 30 µs against 60.)
pub fn choose_tile(spec: &GemmSpec) -> TcTile {
    pick_tile(spec, |_| true)
}

/// [`choose_tile`] among the throughput tiles that pass `fits`.
fn pick_tile(spec: &GemmSpec, fits: impl Fn(&TcTile) -> bool) -> TcTile {
    let blocks = |t: &TcTile| {
        spec.m.div_ceil(t.bm as u64) * spec.n.div_ceil(t.bn as u64) * spec.batch.max(1)
    };
    let (latency, throughput) = TcTile::ALL.split_last().unwrap();
    throughput
        .iter()
        .copied()
        .find(|t| {
            // A tile twice the matrix's size (rounded to 64) wastes half its
            // work.
            fits(t)
                && t.bm as u64 <= spec.m.next_multiple_of(64)
                && t.bn as u64 <= spec.n.next_multiple_of(64)
                && blocks(t) >= ENOUGH_BLOCKS
        })
        .unwrap_or(*latency)
}

/// Appends kernel `name` computing `spec` on the tensor cores in `prec`
/// (tile from [`choose_tile`]); `b_half`: B holds f16/bf16 (the precision's
/// type) instead of f32. See the module doc for the ABI.
pub fn gemm_tc(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: TcPrecision,
    b_half: bool,
    sm: Sm,
) -> Result<Geometry, String> {
    gemm_tc_with(m, name, spec, prec, b_half, sm, None, None)
}

/// [`gemm_tc`] with an explicit tile (for tuning and tests).
pub fn gemm_tc_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: TcPrecision,
    b_half: bool,
    sm: Sm,
    t: TcTile,
) -> Result<Geometry, String> {
    gemm_tc_with(m, name, spec, prec, b_half, sm, Some(t), None)
}

/// [`gemm_tc`] with a tile (`None`: the one [`gemm_tc`] picks) and a
/// pointwise epilogue applied to every element of C before it is stored:
/// the kernel then takes `epi.strides.len()` more pointers after C, in
/// operand order, and the helper `@{name}_epi` is defined for it (see the
/// module doc). Without an epilogue the code is that of [`gemm_tc_tile`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_tc_with(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    prec: TcPrecision,
    b_half: bool,
    sm: Sm,
    tile: Option<TcTile>,
    epi: Option<&GemmEpilogue>,
) -> Result<Geometry, String> {
    let t = tile.unwrap_or_else(|| pick_tile(spec, |t| t.check(prec).is_ok()));
    check_entry_name(name)?;
    if !sm.has_mma_f16() || !sm.has_cp_async() {
        return Err(format!(
            "the tensor-core gemm needs sm_80 or newer (mma.sync m16n8k16, cp.async), target is {sm}"
        ));
    }
    if prec == TcPrecision::Tf32 && b_half {
        return Err("a tf32 gemm takes B as f32 (b_half must be false)".to_string());
    }
    t.check(prec)?;
    check_spec(spec)?;
    if let Some(e) = epi {
        gemm_epilogue::check(spec, e)?;
    }
    let empty = spec.batch == 0 || spec.m == 0 || spec.n == 0;
    let tiles = spec.m.div_ceil(t.bm as u64) * spec.n.div_ceil(t.bn as u64);
    if tiles > I31 {
        return Err(format!(
            "gemm {}x{} needs {tiles} blocks of {}x{}, more than a grid holds",
            spec.m, spec.n, t.bm, t.bn
        ));
    }
    // The epilogue's operands `%e1 …` after C; its helper is defined also
    // for the empty kernel.
    let (sig, epi_fn) = gemm_epilogue::params(m, name, spec, epi)?;
    let mut smem = 0;
    let body = if empty {
        "  ret void\n".to_string()
    } else {
        declare(m, prec);
        let mut g = Gen::new(spec, prec, b_half, t, sm);
        g.epi = epi_fn;
        g.kernel();
        smem = t.layout_bytes(prec, g.layout, g.ring);
        g.b.into_text()
    };
    m.func(format!(
        "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{}\" {{\nentry:\n{body}}}\n",
        sig.join(", "),
        t.threads()
    ));
    Ok(if empty {
        Geometry {
            grid: [1, 1, 1],
            block: [t.threads(), 1, 1],
            smem: 0,
        }
    } else {
        Geometry {
            grid: [tiles as u32, 1, spec.batch.min(MAX_Z) as u32],
            block: [t.threads(), 1, 1],
            smem,
        }
    })
}

const MAX_Z: u64 = 65535;
const I31: u64 = i32::MAX as u64;

/// Rejects specs whose indices would not fit the kernel's 32-bit tile
/// arithmetic, and convolutions that contradict their geometry.
fn check_spec(s: &GemmSpec) -> Result<(), String> {
    if s.m > I31 || s.n > I31 || s.k > I31 || s.batch > I31 {
        return Err(format!(
            "gemm {}x{}x{} (batch {}) is too large for one kernel",
            s.m, s.n, s.k, s.batch
        ));
    }
    if let AMode::Conv(g) = s.a {
        let cg = g.c.checked_div(g.group).unwrap_or(0);
        let fits = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.kh, g.kw]
            .iter()
            .chain(&g.stride)
            .chain(&g.dilation)
            .chain(&g.pads)
            .all(|&v| v <= I31);
        if g.group == 0
            || !g.c.is_multiple_of(g.group)
            || s.batch != g.group
            || s.m != g.n * g.oh * g.ow
            || s.k != g.kh * g.kw * cg
            || !fits
        {
            return Err(format!(
                "convolution gemm {}x{}x{} (batch {}) does not match its geometry {g:?}",
                s.m, s.n, s.k, s.batch
            ));
        }
    }
    Ok(())
}

fn declare(m: &mut ModuleText, p: TcPrecision) {
    for d in [
        "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()",
        "declare i32 @llvm.smin.i32(i32, i32)",
        "declare i32 @llvm.smax.i32(i32, i32)",
        "declare float @llvm.maxnum.f32(float, float)",
        "declare float @llvm.maximum.f32(float, float)",
        "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.all()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))",
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16(ptr addrspace(3))",
    ] {
        m.declare(d);
    }
    m.declare(match p {
        TcPrecision::F16 => {
            "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, float, float, float, float)"
        }
        TcPrecision::Bf16 => {
            "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32, i32, i32, i32, i32, i32, float, float, float, float)"
        }
        TcPrecision::Tf32 => {
            "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k8.row.col.tf32(i32, i32, i32, i32, i32, i32, float, float, float, float)"
        }
    });
    if p == TcPrecision::Tf32 {
        m.declare("declare i32 @llvm.nvvm.f2tf32.rna(float)");
    }
}

/// Where one thread's chunks of an operand tile lie: the tile is `rows ×
/// cols`, a chunk is `w` elements along rows (`vec_rows`) or columns, and
/// consecutive threads take consecutive chunks along rows (`lane_rows`) or
/// columns.
#[derive(Clone, Copy)]
struct Map {
    rows: u32,
    cols: u32,
    w: u32,
    vec_rows: bool,
    lane_rows: bool,
}

impl Map {
    fn new(rows: u32, cols: u32, w: u32, vec_rows: bool, lane_rows: bool) -> Map {
        Map {
            rows,
            cols,
            w,
            vec_rows,
            lane_rows,
        }
    }
}

/// One chunk of a thread: tile coordinates (i32 values) of its first
/// element, and whether the chunk exists (None: always).
struct Pos {
    r: String,
    c: String,
    exists: Option<String>,
}

/// How an operand tile moves from global to shared memory.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// Chunks of `w` elements loaded into registers (f32, or i16 for half
    /// B), converted and stored after the MMAs.
    Staged,
    /// Half B chunks of 8 with `cp.async` (16-byte rows).
    Async,
}

/// How A and B of `s` move under tile `t`: their chunk maps and B's path.
/// 16-byte global loads need aligned pointers and strides that keep every
/// chunk aligned (a multiple of 4 f32 or 8 halves, or an extent of 1).
fn plan(s: &GemmSpec, t: &TcTile, b_half: bool) -> (Map, Map, Path) {
    let al = s.aligned16;
    let keeps = |st: u64, ext: u64, q: u64| st.is_multiple_of(q) || ext <= 1;
    // Chunks of 8 unless 4 divide the extent and 8 does not (no tail then).
    let width = |len: u64| {
        if len.is_multiple_of(8) || !len.is_multiple_of(4) {
            8
        } else {
            4
        }
    };
    let amap = match s.a {
        AMode::Conv(g) => {
            // A chunk is channels of one pixel: it must not cross a group.
            let cg = g.c / g.group;
            let w = if !al || !cg.is_multiple_of(4) {
                1
            } else {
                width(cg)
            };
            Map::new(t.bm, t.bk, w, false, false)
        }
        AMode::Strided { batch, row, col } => {
            let vec =
                al && (col == 1 || s.k <= 1) && keeps(row, s.m, 4) && keeps(batch, s.batch, 4);
            let w = if vec { width(s.k) } else { 1 };
            // Column-major A: consecutive threads down a column.
            Map::new(t.bm, t.bk, w, false, w == 1 && row == 1 && col != 1)
        }
    };
    let [sb, sk, sn] = s.b_strides;
    let q = if b_half { 8 } else { 4 };
    let rowvec = al && (sn == 1 || s.n <= 1) && keeps(sk, s.k, q) && keeps(sb, s.batch, q);
    let colvec =
        !b_half && al && (sk == 1 || s.k <= 1) && keeps(sn, s.n, 4) && keeps(sb, s.batch, 4);
    let (bk, bn) = (t.bk, t.bn);
    if rowvec && b_half {
        (amap, Map::new(bk, bn, 8, false, false), Path::Async)
    } else if rowvec {
        (
            amap,
            Map::new(bk, bn, width(s.n), false, false),
            Path::Staged,
        )
    } else if colvec {
        // Along k, consecutive threads on consecutive columns (2-byte
        // shared stores of a warp fall in distinct banks).
        (
            amap,
            Map::new(bk, bn, width(s.k), true, false),
            Path::Staged,
        )
    } else {
        (
            amap,
            Map::new(bk, bn, 1, false, sk == 1 && sn != 1),
            Path::Staged,
        )
    }
}

/// The row of an A chunk: in range (i1), the element offset of its first
/// column (strided) or of its pixel at tap (0, 0), which may lie in the
/// padding (convolution), and for a convolution that pixel's `(iy, ix)`.
#[derive(Clone)]
struct ARow {
    ok: String,
    off: String,
    yx: Option<(String, String)>,
}

/// What every part of the kernel shares.
struct Gen<'a> {
    b: Body,
    s: &'a GemmSpec,
    p: TcPrecision,
    b_half: bool,
    t: TcTile,
    amap: Map,
    bmap: Map,
    bpath: Path,
    layout: Layout,
    /// B stages of [`Layout::Ring`].
    ring: u32,
    /// Per-thread chunk positions of A and B.
    apos: Vec<Pos>,
    bpos: Vec<Pos>,
    /// Allocas holding the staged loads, one per chunk.
    aslot: Vec<String>,
    bslot: Vec<String>,
    /// Per A chunk: its row's data.
    arow: Vec<ARow>,
    /// Per B chunk: column in range, the column's element offset.
    bcol: Vec<(String, String)>,
    acc: String,
    tid: String,
    bm0: String,
    bn0: String,
    /// Batch index (i64).
    bz: String,
    /// The epilogue's helper and its operands' strides `[b, i, j]`.
    epi: Option<EpiFn>,
}

impl<'a> Gen<'a> {
    fn new(s: &'a GemmSpec, p: TcPrecision, b_half: bool, t: TcTile, sm: Sm) -> Gen<'a> {
        let (amap, bmap, bpath) = plan(s, &t, b_half);
        let ring = t.ring(sm);
        // A strided A in whole 16-byte chunks.
        let a16 = amap.w >= 4 && matches!(s.a, AMode::Strided { .. });
        let hopper = matches!(sm, Sm::Sm90 | Sm::Sm90a);
        let (layout, ring) = match bpath == Path::Async && ring > 0 {
            false => (Layout::Pairs, 0),
            true if hopper && a16 && t.ring_a() => (Layout::RingA, RING_A),
            true => (Layout::Ring, ring),
        };
        Gen {
            b: Body::new(),
            s,
            p,
            b_half,
            t,
            amap,
            bmap,
            bpath,
            layout,
            ring,
            apos: Vec::new(),
            bpos: Vec::new(),
            aslot: Vec::new(),
            bslot: Vec::new(),
            arow: Vec::new(),
            bcol: Vec::new(),
            acc: String::new(),
            tid: String::new(),
            bm0: String::new(),
            bn0: String::new(),
            bz: String::new(),
            epi: None,
        }
    }

    fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    fn and(&mut self, x: &str, y: &str) -> String {
        self.v(format!("and i1 {x}, {y}"))
    }

    fn nacc(&self) -> u32 {
        let (mi, ni) = self.frags();
        mi * ni * 4
    }

    /// m16 and n8 fragments per warp.
    fn frags(&self) -> (u32, u32) {
        let t = &self.t;
        (t.bm / t.warps_m / 16, t.bn / t.warps_n / 8)
    }

    /// The loaded type of one chunk of A or B.
    fn chunk_ty(&self, is_a: bool) -> String {
        let (w, e) = if is_a {
            (self.amap.w, "float")
        } else {
            (self.bmap.w, if self.b_half { "i16" } else { "float" })
        };
        format!("<{w} x {e}>")
    }

    fn acc_ptr(&mut self, i: u32) -> String {
        let (nacc, acc) = (self.nacc(), self.acc.clone());
        self.v(format!(
            "getelementptr inbounds [{nacc} x float], ptr {acc}, i32 0, i32 {i}"
        ))
    }

    /// Runs `f` only where `cond` holds (always for None).
    fn guarded(&mut self, cond: Option<String>, f: impl FnOnce(&mut Self)) {
        match cond {
            None => f(self),
            Some(c) => {
                let (l, j) = (self.b.label("chunk"), self.b.label("chunk.end"));
                self.b.cond_br(&c, &l, &j);
                self.b.place(&l);
                f(self);
                self.b.br(&j);
                self.b.place(&j);
            }
        }
    }
}
