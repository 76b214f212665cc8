//! Int8 tensor-core NHWC implicit-GEMM convolution (and GEMM, as a 1×1
//! convolution) with s32 accumulation and a requantizing epilogue:
//! [`qconv_s8`] writes one kernel computing a [`QConvSpec`] with
//! `mma.sync.aligned.m16n8k32.row.col.s32.{s8|u8}.s8.s32` (the plan's
//! `Step::QConv2d`).
//!
//! Semantics, per group `g` (`cg = c/group`, `ocg = oc/group`, `K =
//! kh·kw·cg`), for output row `i = (img·oh + oy)·ow + ox` and channel
//! `o = g·ocg + j`:
//! - `acc = Σ_k x_k · w[o][k] + comp[o]` in s32 (wrapping), with `x_k` for
//!   `k = (ky·kw + kx)·cg + ci` the byte
//!   `x[img][oy·sh − pad_top + ky·dh][ox·sw − pad_left + kx·dw][g·cg + ci]`
//!   (i8 when `x_signed`, else u8), or `x_zero` where that position is in
//!   the padding;
//! - `v = fma(acc as f32, scale[o], shift[o])` (one rounding,
//!   `fma.rn.f32`, as Rust's `(acc as f32).mul_add(scale, shift)`; `acc as
//!   f32` rounds to nearest even), `r = v.round_ties_even()`
//!   (`cvt.rni.f32.f32`);
//! - `y[i·oc + o] = (r.clamp(lo, hi) as i64 + y_zero) as i32` with `lo = (y_min −
//!   y_zero) as f32`, `hi = (y_max − y_zero) as f32`, the conversion
//!   saturating with NaN → 0 (`cvt.rzi.s64.f32`): bit for bit
//!   `aoc_runtime::kernels::qconv::requantize`, stored as one
//!   byte (i8 when `y_signed`, else u8).
//!
//! Kernel ABI: parameters `x, w, comp, scale, shift, y`: `x` the NHWC
//! input bytes, `w` the weights as [`pack_weights`] lays them out
//! ([`packed_len`] bytes), `comp` i32[oc], `scale` and `shift` f32[oc],
//! `y` the NHWC output bytes (`n·oh·ow·oc`). `x`, `w` and `y` must be
//! 16-byte aligned (whole tensors: arena, weights and inputs are 256-byte
//! aligned), `comp`, `scale`, `shift` 4-byte aligned.
//! Launch: grid `[group·⌈M/bm⌉·⌈ocg/bn⌉, 1, 1]` with `M = n·oh·ow` (block
//! x is group `x / tiles`, then tile `(t / ⌈ocg/bn⌉, t % ⌈ocg/bn⌉)`, so
//! consecutive blocks share their A rows), block `[32·warps, 1, 1]`,
//! dynamic shared memory `stages·(bm + bn)·64` bytes (the [`Geometry`]
//! says it; at most 64 KiB). An empty output (`M` or `oc` zero) gives a
//! kernel that returns at once, grid `[1, 1, 1]`; `K = 0` stores the
//! requantized `comp`.
//!
//! Weights ([`pack_weights`]): OHWI rows of `K` bytes padded with zeros to
//! `Kp = ⌈K/16⌉·16`, so every row is 16-byte aligned and moves with 16-byte
//! `cp.async` (where `K % 16 == 0` the packed layout is the OHWI bytes
//! unchanged). Row `o` starts at byte `o·Kp`.
//!
//! Tiles ([`choose_tile`]): 128×128 (8 warps of 64×32), 128×64 (4 warps
//! of 64×32) or 64×64 (4 warps of 32×32), k steps of 64 bytes: the first
//! whose rows and columns do not exceed `M` and `ocg` rounded up to 64 and
//! that still gives at least 132 blocks (one per H200 multiprocessor),
//! else 64×64.
//!
//! Code shape: shared memory is a ring of `stages` (4 on Hopper, 3
//! elsewhere: 48 KiB for 128×128, so two blocks share an sm_86
//! multiprocessor) each holding the A tile (`bm` rows of 64 bytes of k)
//! then the B tile (`bn` rows of 64 bytes of k). A row's four 16-byte
//! units lie in the order `u ^ ((row >> 1) & 3)`, so the 8 rows of an
//! `ldmatrix` 8×8 b16 block (8 rows × 16 bytes) and the 16-byte stores of
//! 8 consecutive threads hit distinct banks without padding. Fragments:
//! A as m16n8k32 wants it is `ldmatrix.x4` of rows 0-7/8-15 × bytes
//! 0-15/16-31; B (`n` rows of k bytes, the "col" operand) is
//! `ldmatrix.x4` (no `.trans`) of n rows 0-7 × bytes 0-15/16-31 and n
//! rows 8-15 likewise (two n8 tiles). B always moves with `cp.async` (zero
//! fill past `Kp` and past `ocg`). A moves with 16-byte `cp.async` when
//! `cg % 16 == 0` (16 channels of one tap; a padding chunk is stored as
//! `x_zero` bytes by the thread instead, since `cp.async` fills zeros), else
//! through registers: as 4-byte words when `cg % 4 == 0`, loaded while
//! the previous k-tile is multiplied, else byte by byte (the stem's `c =
//! 3`) after its MMAs (16 byte loads per chunk held across them spilled),
//! and stored into the next stage after the MMAs. K-tile `t`: barrier,
//! `cp.async` of k-tile `t + stages − 1` into the stage of `t − 1` (one
//! commit group per k-tile, empty past k), register loads of tile `t + 1`,
//! the MMAs of tile `t`, the register chunks' stores, and a wait until
//! this thread's copies of tile `t + 1` have landed. The 64×64 tile runs
//! under a budget of 144 registers (`.maxnreg`), the others under ptxas's
//! choice (see `S8Tile::max_regs`).
//!
//! Epilogue: each thread holds, per m16n8 fragment, two adjacent channels
//! of rows `g` and `g + 8`; with `oc` and `ocg` multiples of 4, lanes
//! `q`, `q ^ 1` swap halves through `shfl.sync.bfly` so each stores 4
//! consecutive bytes of one row (`st.global.b32`); with both even, 2-byte
//! stores; else bytes. Only elements with `i < M`, `j < ocg` are written.
//!
//! Invariants: sm_80 and newer; every loop over fragments and chunks is
//! unrolled at generation; loads outside the tensors never happen
//! (addresses of absent elements are clamped to the first element, their
//! values replaced); 32-bit tile arithmetic (`M`, `oc`, `K`, the grid below
//! 2^31, checked); byte offsets into x, w and y in i32 where a bound on
//! every offset formed fits (`offset_bounds`), else i64. The requantized
//! value is computed for every accumulator (stores are guarded), so
//! `comp`, `scale`, `shift` are read at channel 0 for absent columns.

mod load;
mod mma;

use super::{ConvGeom, Geometry};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;
use aoc_plan::plan::QuantConv;

/// An int8 convolution with its requantization (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QConvSpec {
    pub geom: ConvGeom,
    /// Storage, zero points and clamp (the plan step's, as they are).
    pub q: QuantConv,
}

impl QConvSpec {
    /// Channels per group (0 for no groups: refused by `check_spec`).
    fn cg(&self) -> u64 {
        self.geom.c.checked_div(self.geom.group).unwrap_or(0)
    }

    fn ocg(&self) -> u64 {
        self.geom.oc.checked_div(self.geom.group).unwrap_or(0)
    }

    /// Rows of the product: `n·oh·ow`.
    fn m(&self) -> u64 {
        let g = &self.geom;
        g.n * g.oh * g.ow
    }

    /// The reduction length `kh·kw·cg`.
    fn k(&self) -> u64 {
        let g = &self.geom;
        g.kh * g.kw * self.cg()
    }

    /// A packed weight row: `K` rounded up to 16.
    fn kp(&self) -> u64 {
        self.k().next_multiple_of(16)
    }
}

/// The tiling of one kernel (k steps are always 64 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct S8Tile {
    pub bm: u32,
    pub bn: u32,
    pub warps_m: u32,
    pub warps_n: u32,
}

const fn tile(bm: u32, bn: u32, warps_m: u32, warps_n: u32) -> S8Tile {
    S8Tile {
        bm,
        bn,
        warps_m,
        warps_n,
    }
}

/// Bytes of k per k-tile (one shared-memory row).
const BK: u32 = 64;

impl S8Tile {
    /// The tiles [`choose_tile`] picks from, largest first.
    pub const ALL: [S8Tile; 3] = [
        tile(128, 128, 2, 4),
        tile(128, 64, 2, 2),
        tile(64, 64, 2, 2),
    ];

    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Bytes of one ring stage: the A tile, then the B tile.
    pub fn stage_bytes(&self) -> u32 {
        (self.bm + self.bn) * BK
    }

    /// Stages of the ring on `sm`: four on Hopper, three elsewhere.
    pub fn stages(sm: Sm) -> u32 {
        if matches!(sm, Sm::Sm90 | Sm::Sm90a) {
            4
        } else {
            3
        }
    }

    /// The register budget (`.maxnreg`) of a kernel with this tile: 144
    /// for tiles with 32 accumulators per thread (64×64), where ptxas for
    /// sm_90 otherwise picked 96 registers and spilled a few bytes (and
    /// 128 spilled the byte path on sm_86); none for the others (64
    /// accumulators: ptxas takes 128 for 8 warps, up to ~210 for 4 with
    /// no spills, where a cap of 128 spilled).
    fn max_regs(&self) -> Option<u32> {
        let accs = self.bm * self.bn / self.threads();
        (accs <= 32).then_some(144)
    }

    /// Dynamic shared memory of a kernel with this tile on `sm`.
    pub fn smem_bytes(&self, sm: Sm) -> u32 {
        S8Tile::stages(sm) * self.stage_bytes()
    }

    /// Checks the tile is one the generator handles: warps of whole
    /// m16 × (pairs of n8) fragments, and 16-byte chunks that spread evenly
    /// over the threads.
    pub fn check(&self) -> Result<(), String> {
        let t = *self;
        let threads = t.threads();
        let ok = (1..=8).contains(&(t.warps_m * t.warps_n))
            && t.bm > 0
            && t.bn > 0
            && t.bm.is_multiple_of(16 * t.warps_m)
            && t.bn.is_multiple_of(16 * t.warps_n)
            && (t.bm * 4).is_multiple_of(threads)
            && (t.bn * 4).is_multiple_of(threads)
            && t.smem_bytes(Sm::Sm90) <= 99 * 1024;
        if ok {
            Ok(())
        } else {
            Err(format!("unsupported int8 tensor-core tile {t:?}"))
        }
    }
}

/// Blocks that fill a large GPU once (an H200 has 132 multiprocessors).
const ENOUGH_BLOCKS: u64 = 132;

/// The tile [`qconv_s8`] uses for `spec` (see the module doc).
pub fn choose_tile(spec: &QConvSpec) -> S8Tile {
    let (m, n, groups) = (spec.m(), spec.ocg(), spec.geom.group);
    let blocks = |t: &S8Tile| {
        groups.saturating_mul(
            m.div_ceil(t.bm as u64)
                .saturating_mul(n.div_ceil(t.bn as u64)),
        )
    };
    S8Tile::ALL
        .iter()
        .find(|t| {
            t.bm as u64 <= m.next_multiple_of(64)
                && t.bn as u64 <= n.next_multiple_of(64)
                && blocks(t) >= ENOUGH_BLOCKS
        })
        .copied()
        .unwrap_or(S8Tile::ALL[2])
}

/// Bytes of the packed weights of `spec`: `oc` rows of `Kp = ⌈K/16⌉·16`.
pub fn packed_len(spec: &QConvSpec) -> usize {
    (spec.geom.oc * spec.kp()) as usize
}

/// The weights in the kernel's layout: each OHWI row of `K` bytes
/// (`[oc][kh][kw][c/group]`) followed by zeros up to `Kp` bytes. Panics when
/// `ohwi` does not hold `oc·K` bytes or `spec`'s groups do not divide its
/// channels (the caller's validation).
pub fn pack_weights(spec: &QConvSpec, ohwi: &[i8]) -> Vec<i8> {
    let g = &spec.geom;
    assert!(
        g.group > 0 && g.c.is_multiple_of(g.group) && g.oc.is_multiple_of(g.group),
        "pack_weights: bad groups in {g:?}"
    );
    let (k, kp) = (spec.k() as usize, spec.kp() as usize);
    assert_eq!(ohwi.len(), g.oc as usize * k, "pack_weights: weight length");
    let mut out = vec![0i8; packed_len(spec)];
    if k > 0 {
        for (o, row) in ohwi.chunks_exact(k).enumerate() {
            out[o * kp..o * kp + k].copy_from_slice(row);
        }
    }
    out
}

/// Appends kernel `name` computing `spec` (tile from [`choose_tile`]). See
/// the module doc for the ABI.
pub fn qconv_s8(
    m: &mut ModuleText,
    name: &str,
    spec: &QConvSpec,
    sm: Sm,
) -> Result<Geometry, String> {
    qconv_s8_tile(m, name, spec, sm, choose_tile(spec))
}

const I31: u64 = i32::MAX as u64;

/// [`qconv_s8`] with an explicit tile (for tuning and tests).
pub fn qconv_s8_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &QConvSpec,
    sm: Sm,
    t: S8Tile,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if !sm.has_mma_f16() || !sm.has_cp_async() {
        return Err(format!(
            "the int8 tensor-core convolution needs sm_80 or newer (mma.sync m16n8k32, cp.async), target is {sm}"
        ));
    }
    t.check()?;
    check_spec(spec)?;
    let tiles = spec.m().div_ceil(t.bm as u64) * spec.ocg().div_ceil(t.bn as u64);
    let blocks = tiles * spec.geom.group;
    if blocks > I31 {
        return Err(format!(
            "int8 convolution {}x{} ({} groups) needs {blocks} blocks of {}x{}, more than a grid holds",
            spec.m(),
            spec.ocg(),
            spec.geom.group,
            t.bm,
            t.bn
        ));
    }
    let sig = (0..6)
        .map(|i| {
            let ro = if i < 5 { " readonly" } else { "" };
            format!("ptr addrspace(1) noalias{ro} %p{i}")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let empty = spec.m() == 0 || spec.geom.oc == 0;
    let regs = match t.max_regs() {
        Some(r) => format!(" \"nvvm.maxnreg\"=\"{r}\""),
        None => String::new(),
    };
    let body = if empty {
        "  ret void\n".to_string()
    } else {
        declare(m, spec.q.x_signed);
        let mut g = Gen::new(spec, t, sm);
        g.kernel();
        g.b.into_text()
    };
    m.func(format!(
        "define ptx_kernel void @{name}({sig}) \"nvvm.maxntid\"=\"{}\"{regs} {{\nentry:\n{body}}}\n",
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
            grid: [blocks as u32, 1, 1],
            block: [t.threads(), 1, 1],
            smem: t.smem_bytes(sm),
        }
    })
}

/// Rejects specs the kernel cannot compute: groups that do not divide the
/// channels, values that do not fit their bytes, sizes past 32 bits.
fn check_spec(s: &QConvSpec) -> Result<(), String> {
    let g = &s.geom;
    let fits = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.kh, g.kw]
        .iter()
        .chain(&g.stride)
        .chain(&g.dilation)
        .chain(&g.pads)
        .all(|&v| v <= I31);
    if g.group == 0 || !g.c.is_multiple_of(g.group) || !g.oc.is_multiple_of(g.group) || !fits {
        return Err(format!("int8 convolution with a bad geometry {g:?}"));
    }
    let big = [
        g.n.checked_mul(g.oh),
        g.n.checked_mul(g.oh).and_then(|v| v.checked_mul(g.ow)),
    ];
    let kk = g.kh.checked_mul(g.kw).and_then(|v| v.checked_mul(s.cg()));
    if big.iter().chain([&kk]).any(|v| v.is_none_or(|v| v > I31))
        || s.kp() > I31
        || g.oc.checked_mul(s.kp()).is_none()
    {
        return Err(format!(
            "int8 convolution {g:?} is too large for one kernel"
        ));
    }
    let x_range = if s.q.x_signed { -128..=127 } else { 0..=255 };
    let y_range = if s.q.y_signed { -128..=127 } else { 0..=255 };
    if !x_range.contains(&s.q.x_zero) {
        return Err(format!(
            "int8 convolution: x_zero {} does not fit the input type",
            s.q.x_zero
        ));
    }
    if s.q.y_min > s.q.y_max || !y_range.contains(&s.q.y_min) || !y_range.contains(&s.q.y_max) {
        return Err(format!(
            "int8 convolution: output range [{}, {}] does not fit the output type",
            s.q.y_min, s.q.y_max
        ));
    }
    Ok(())
}

/// Bounds on the magnitude of every offset the kernel forms into x, w
/// and y (None: past u64). x: `((img·h + iy)·w + ix)·c + ch` with `img ≤
/// (M + 127) / (oh·ow)` (rows past `M` in the last tile), `iy` in `[−pad_top, hy)` for `hy`
/// the larger of `h` and the last tap's row + 1, likewise `ix`, `ch < c`.
/// Offsets of k past `K` may exceed it: they wrap (no `nsw`) and are never
/// used. w: `(oc + bn)·Kp + 64`. y: `(M + bm)·oc + oc`.
fn offset_bounds(s: &QConvSpec) -> (Option<u64>, Option<u64>, Option<u64>) {
    let g = &s.geom;
    let span = |o: u64, st: u64, k: u64, d: u64, pad: u64, ext: u64| -> Option<u64> {
        let last = o
            .checked_sub(1)?
            .checked_mul(st)?
            .checked_add(k.checked_sub(1)?.checked_mul(d)?)?;
        ext.max(last.checked_add(1)?).checked_add(pad)
    };
    let hy = span(g.oh, g.stride[0], g.kh, g.dilation[0], g.pads[0], g.h);
    let wx = span(g.ow, g.stride[1], g.kw, g.dilation[1], g.pads[1], g.w);
    let x = (|| {
        // Image indices of rows up to M + 127, and one more for iy.
        let img = (s.m() + 127).checked_div(g.oh * g.ow)?;
        let rows = img.checked_add(2)?.checked_mul(hy?)?;
        rows.checked_mul(wx?.checked_add(1)?)?
            .checked_mul(g.c.max(1))
    })();
    let w = (|| g.oc.checked_add(128)?.checked_mul(s.kp())?.checked_add(64))();
    let y = (|| s.m().checked_add(129)?.checked_mul(g.oc))();
    (x, w, y)
}

fn declare(m: &mut ModuleText, x_signed: bool) {
    for d in [
        "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare float @llvm.fma.f32(float, float, float)",
        "declare float @llvm.roundeven.f32(float)",
        "declare i64 @llvm.fptosi.sat.i64.f32(float)",
        "declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)",
        "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))",
    ] {
        m.declare(d);
    }
    m.declare(&format!(
        "declare {{ i32, i32, i32, i32 }} @llvm.nvvm.mma.m16n8k32.row.col.{}(i32, i32, i32, i32, i32, i32, i32, i32, i32, i32)",
        mma_suffix(x_signed)
    ));
}

/// The intrinsic suffix of the multiply: `s8` (both signed) or `u8.s8`.
fn mma_suffix(x_signed: bool) -> &'static str {
    if x_signed { "s8" } else { "u8.s8" }
}

/// How A (the im2col rows of x) reaches shared memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum APath {
    /// 16-byte `cp.async` of 16 channels of one tap (`cg % 16 == 0`).
    Async,
    /// Through registers in words of `1` or `4` bytes (each within one
    /// tap: `cg` is a multiple of the width).
    Staged(u32),
}

/// One 16-byte chunk of a thread: tile row `r` and unit `u` (bytes
/// `16u .. 16u + 16` of the k-tile), i32 values.
struct Pos {
    r: String,
    u: String,
}

/// The row of an A chunk: in range (i1), the element offset of its pixel
/// at tap (0, 0) plus the group's first channel (may lie in the padding),
/// and that pixel's `(iy, ix)`.
struct ARow {
    ok: String,
    off: String,
    iy: String,
    ix: String,
}

/// What every part of the kernel shares.
struct Gen<'a> {
    b: Body,
    s: &'a QConvSpec,
    t: S8Tile,
    stages: u32,
    apath: APath,
    apos: Vec<Pos>,
    bpos: Vec<Pos>,
    arow: Vec<ARow>,
    /// Per B chunk: row in range, the byte offset of its packed row.
    brow: Vec<(String, String)>,
    /// Per A chunk (staged path): the alloca holding its 16 bytes.
    aslot: Vec<String>,
    acc: String,
    tid: String,
    /// The offset types of x, w and y: i32 where every offset the kernel
    /// forms (in the padding and past the edges too) fits, else i64.
    xt: &'static str,
    wt: &'static str,
    yt: &'static str,
    /// The group (i32), the tile's first row and column.
    grp: String,
    bm0: String,
    bn0: String,
}

impl<'a> Gen<'a> {
    fn new(s: &'a QConvSpec, t: S8Tile, sm: Sm) -> Gen<'a> {
        let cg = s.cg();
        let apath = if cg.is_multiple_of(16) {
            APath::Async
        } else if cg.is_multiple_of(4) {
            APath::Staged(4)
        } else {
            APath::Staged(1)
        };
        let (xb, wb, yb) = offset_bounds(s);
        let ty = |b: Option<u64>| {
            if b.is_some_and(|b| b <= I31) {
                "i32"
            } else {
                "i64"
            }
        };
        Gen {
            xt: ty(xb),
            wt: ty(wb),
            yt: ty(yb),
            b: Body::new(),
            s,
            t,
            stages: S8Tile::stages(sm),
            apath,
            apos: Vec::new(),
            bpos: Vec::new(),
            arow: Vec::new(),
            brow: Vec::new(),
            aslot: Vec::new(),
            acc: String::new(),
            tid: String::new(),
            grp: String::new(),
            bm0: String::new(),
            bn0: String::new(),
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

    /// m16 and n8 fragments per warp.
    fn frags(&self) -> (u32, u32) {
        let t = &self.t;
        (t.bm / t.warps_m / 16, t.bn / t.warps_n / 8)
    }

    fn nacc(&self) -> u32 {
        let (mi, ni) = self.frags();
        mi * ni * 4
    }

    fn acc_ptr(&mut self, i: u32) -> String {
        let (nacc, acc) = (self.nacc(), self.acc.clone());
        self.v(format!(
            "getelementptr inbounds [{nacc} x i32], ptr {acc}, i32 0, i32 {i}"
        ))
    }

    /// Runs `f` only where `cond` holds.
    fn guarded(&mut self, cond: &str, f: impl FnOnce(&mut Self)) {
        let (l, j) = (self.b.label("then"), self.b.label("endif"));
        self.b.cond_br(cond, &l, &j);
        self.b.place(&l);
        f(self);
        self.b.br(&j);
        self.b.place(&j);
    }

    /// Runs `f` where `cond` holds, else `e`.
    fn if_else(&mut self, cond: &str, f: impl FnOnce(&mut Self), e: impl FnOnce(&mut Self)) {
        let (l, r, j) = (
            self.b.label("then"),
            self.b.label("else"),
            self.b.label("endif"),
        );
        self.b.cond_br(cond, &l, &r);
        self.b.place(&l);
        f(self);
        self.b.br(&j);
        self.b.place(&r);
        e(self);
        self.b.br(&j);
        self.b.place(&j);
    }

    /// The kernel: block coordinates, per-chunk row data, the k loop, the
    /// epilogue.
    fn kernel(&mut self) {
        let (t, s) = (self.t, self.s);
        let nacc = self.nacc();
        self.acc = self.v(format!("alloca [{nacc} x i32], align 4"));
        let ktp = self.v("alloca i32, align 4");
        self.tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
        let bx = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
        let ntn = s.ocg().div_ceil(t.bn as u64);
        let tiles = s.m().div_ceil(t.bm as u64) * ntn;
        self.grp = self.v(format!("udiv i32 {bx}, {tiles}"));
        let tt = self.v(format!("urem i32 {bx}, {tiles}"));
        let mt = self.v(format!("udiv i32 {tt}, {ntn}"));
        let nt = self.v(format!("urem i32 {tt}, {ntn}"));
        self.bm0 = self.v(format!("mul i32 {mt}, {}", t.bm));
        self.bn0 = self.v(format!("mul i32 {nt}, {}", t.bn));
        self.apos = self.positions(t.bm);
        self.bpos = self.positions(t.bn);
        if self.apath != APath::Async {
            for _ in 0..self.apos.len() {
                let a = self.v("alloca <4 x i32>, align 16");
                self.aslot.push(a);
            }
        }
        self.rows();
        for i in 0..nacc {
            let p = self.acc_ptr(i);
            self.ins(format!("store i32 0, ptr {p}, align 4"));
        }
        let ktiles = s.kp().div_ceil(BK as u64);
        if ktiles > 0 {
            self.mainloop(ktiles, &ktp);
        }
        self.epilogue();
        self.ins("ret void");
    }
}
