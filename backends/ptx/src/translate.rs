//! A lowered plan (`aoc_passes::lower`) → the GPU launch plan
//! ([`aoc_plan::gpu_plan::GpuPlan`]) and one LLVM module holding every
//! kernel the launches name.
//!
//! Each step becomes one launch of a kernel specialized for its shapes
//! (`kernels::*`), or of the generated pointwise kernel it names; a
//! `Step::Reference` (an op without a GPU kernel) becomes a host item.
//! Identical specializations share one kernel: a kernel's name is its
//! generator's name and a hash of its arguments.
//!
//! Precision: `fp32` runs GEMMs and convolutions on the CUDA cores;
//! `tf32`, `fp16` and `bf16` on tensor cores (sm_80+; activations stay f32
//! in memory and are rounded while staged, constant weights are stored in
//! the half type). Everything else computes in f32 at every precision.
//!
//! Invariants:
//! - The launch list runs the steps in plan order; buffers are the plan's.
//! - Every kernel a launch names is defined exactly once in the module.

use std::collections::HashMap;
use std::fmt::Debug;

use aoc_passes::lower::{Lowered, WeightBlob};
use aoc_plan::gpu_plan::{Arg, GpuItem, GpuPlan, Launch};
use aoc_plan::plan::{Buf, PoolKind, Space, Step};

use crate::expr::{Bin, Expr, Operand, PointwiseKernel, Un};
use crate::irtext::ModuleText;
use crate::kernels::gemm_simt::SimtTile;
use crate::kernels::gemm_tc::{ENOUGH_BLOCKS, TcPrecision, TcTile, choose_tile, gemm_tc_with};
use crate::kernels::attention::{self, AttentionSpec, AttnPrecision};
use crate::kernels::gemm_s8::{self, QConvSpec};
use crate::kernels::gemm_wgmma::{WgPrecision, WgTile, choose_wg_tile, gemm_wgmma_tile, gemm_wgmma_with, pack_b, packed_b_len};
use aoc_ir::types::Scalar;
use crate::kernels::{AMode, ConvGeom, GemmEpilogue, GemmSpec, Geometry, HalfCopy, gemm_simt, index, rows};
use crate::pointwise::{add_to_module, is_vectorized, work_items};
use crate::target::Sm;

/// Arithmetic of GEMMs and convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "fp32" => Precision::Fp32,
            "tf32" => Precision::Tf32,
            "fp16" => Precision::Fp16,
            "bf16" => Precision::Bf16,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

/// One candidate kernel for a tuned launch.
pub struct TuneCandidate {
    /// The tile, as `aoc explain` and the cache name it (`128x64x16`).
    pub label: String,
    /// A PTX module holding only this kernel.
    pub ptx: String,
    pub kernel: String,
    pub geometry: Geometry,
    /// Bytes of each pointer argument, in order.
    pub arg_bytes: Vec<u64>,
}

/// Measures candidates on a GPU (`aoc compile --tune`). `key` names the
/// problem (target, precision, kind, shapes, strides, alignment), so an
/// implementation may cache its answer under it.
pub trait Tuner {
    /// The index of the fastest candidate.
    fn pick(&mut self, key: &str, candidates: &[TuneCandidate]) -> Result<usize, String>;
}

/// What [`translate`] produced.
pub struct Translated {
    pub plan: GpuPlan,
    /// LLVM IR text of the module with every kernel.
    pub llvm: String,
    /// The same module in parts for parallel code generation
    /// (`llvm::ir_parts_to_ptx`).
    pub llvm_parts: Vec<String>,
    /// Distinct kernels in the module.
    pub kernels: usize,
}

/// The buffers of a GEMM-shaped step.
struct GemmBufs {
    a: Buf,
    b: Buf,
    bias: Option<Buf>,
    c: Buf,
}

struct Tr<'a, 't> {
    sm: Sm,
    tuner: Option<&'t mut dyn Tuner>,
    precision: Precision,
    m: ModuleText,
    /// Kernel name → its launch geometry (generated once).
    made: HashMap<String, Geometry>,
    pointwise: HashMap<&'a str, &'a PointwiseKernel>,
    weights: &'a mut Vec<WeightBlob>,
    /// Weights-section offset of each blob, in order.
    weight_offsets: Vec<u64>,
    /// Weights derived from others (half copies, packed layouts), by the
    /// source's offset and the derivation's name.
    derived: HashMap<(u64, String), Buf>,
    items: Vec<GpuItem>,
    origins: Vec<String>,
    /// Start of the scratch region after the lowering's arena, and the
    /// most any launch uses of it (launches run in order on one stream).
    scratch_at: u64,
    scratch_len: u64,
    /// The half copy of an activation each scratch slot holds, until a
    /// launch writes that activation, and when it was made (for choosing
    /// which copy to replace).
    halves: [Option<(HalfKey, usize)>; HALF_SLOTS],
    /// Bytes of each half-copy slot: half the largest activation.
    slot_bytes: u64,
    /// Recent launches whose kernels can also write a half copy of their
    /// output for a later `wgmma` GEMM, while that output stands (oldest
    /// first).
    producers: Vec<Producer>,
    /// Producers remade to write a half copy beside their f32 output,
    /// which they stop storing at the end unless a launch reads it.
    copied: Vec<Copied>,
    /// Each step's buffers (written or not), and the index of the step
    /// being translated.
    step_bufs: Vec<Vec<(Buf, bool)>>,
    step_at: usize,
}

/// A half copy of an f32 activation: the buffer, its row stride, rows and
/// columns (elements), and the half type. The copy is dense (`rows ×
/// cols`).
type HalfKey = (Buf, u64, u64, u64, Scalar);

/// Scratch slots for half copies: a ResNet bottleneck keeps its input's
/// copy (read again by the downsampling convolution) while the copies of
/// its two inner activations come and go.
const HALF_SLOTS: usize = 3;

/// A launch whose kernel can write a [`HalfCopy`] of its f32 output.
struct Producer {
    item: usize,
    out: Buf,
    remake: Remake,
}

/// A producer writing a half copy of its f32 output `out` (the copy's
/// `HalfCopy` keeps the f32 stores): whether a launch since it read `out`,
/// and whether a launch overwrote `out` (later reads are of other values).
struct Copied {
    item: usize,
    out: Buf,
    remake: Remake,
    half: HalfCopy,
    f32_read: bool,
    closed: bool,
}

/// Producers [`Tr`] remembers: a ResNet bottleneck's downsampling
/// convolution runs between the one that writes its last convolution's
/// input and that convolution.
const PRODUCERS: usize = 4;

/// How to make a producer's kernel again, with the copy.
enum Remake {
    /// `(rows, cols, epsilon bits, gamma, beta)`
    LayerNorm((u64, u64, u32, bool, bool)),
    Attention(AttentionSpec, AttnPrecision),
    Wgmma(GemmSpec, WgPrecision, WgTile, Option<GemmEpilogue>),
    Pool(PoolKind, ConvGeom, bool),
}

/// Parts a module is split into for code generation: the same on every
/// machine (so the PTX is), enough for the cores of a GPU host.
const CODEGEN_PARTS: usize = 8;

/// `wgmma` pays for its conversion launch once the 128×128 tiles cover
/// the GPU about once (an H200 has 132 multiprocessors).
const WGMMA_MIN_TILES: u64 = 128;

/// Convolutions go to `wgmma` from this many 128×64 tiles on: with the
/// producers writing half copies of their outputs, a network of them
/// pays one conversion at its start. ResNet-50 at batch 32 has 104 in its
/// last stage; at batch 1 none qualifies (its `mma.sync` tiles of 64 rows
/// fill the GPU better).
const WGMMA_MIN_CONV_TILES: u64 = 96;

/// The `wgmma` tiles `--tune` times: 128×`bn` with `stages` k-tiles of 64
/// in flight (three stages of 128×128 or less fit two blocks per
/// multiprocessor).
const WGMMA_CANDIDATES: [WgTile; 8] = [
    WgTile { bn: 256, stages: 3 },
    WgTile { bn: 256, stages: 4 },
    WgTile { bn: 192, stages: 4 },
    WgTile { bn: 128, stages: 3 },
    WgTile { bn: 128, stages: 4 },
    WgTile { bn: 128, stages: 6 },
    WgTile { bn: 64, stages: 3 },
    WgTile { bn: 64, stages: 4 },
];

/// Converting A costs about `6·m·k` bytes of traffic (f32 read, half
/// write) and saves about `2·m·n·k·(1/240 − 1/550)` TFLOP-seconds on an
/// H200 (mma.sync against wgmma rates): worth it from `n ≈ 430` on.
/// ResNet-50's early 1×1 convolutions (n ≤ 256) measured slower with it.
const WGMMA_MIN_N: u64 = 512;

/// The f32 activation the `wgmma` GEMM `spec` reads through a half copy,
/// as `(row stride, rows, columns)`: a plain A (see [`a_rows`]) itself, or
/// the whole NHWC input of a convolution the kernel reads implicitly (one
/// group, one pixel per row), its channels padded with zeros to a multiple
/// of 8 in the copy where they are not (`columns > row stride`: a stem's
/// 3 channels become 8).
fn wgmma_activation(spec: &GemmSpec) -> Option<(u64, u64, u64)> {
    match (a_rows(spec), spec.a) {
        (Some(lda), _) => Some((lda, spec.m, spec.k)),
        (None, AMode::Conv(g)) if g.group == 1 && g.c > 0 && g.c.next_multiple_of(8) <= index::PAD_MAX.max(g.c) => {
            Some((g.c, g.n * g.h * g.w, g.c.next_multiple_of(8)))
        }
        _ => None,
    }
}

/// The row stride of A when it is a plain row-major matrix with unit column
/// stride: a strided A, or the NHWC input of a 1×1, stride-1, unpadded,
/// ungrouped convolution (its rows are the pixels).
fn a_rows(spec: &GemmSpec) -> Option<u64> {
    match spec.a {
        AMode::Strided { row, col: 1, .. } => Some(row),
        AMode::Conv(g)
            if g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pads == [0; 4] && g.group == 1 && g.dilation == [1, 1] =>
        {
            Some(g.c)
        }
        _ => None,
    }
}

/// The k loop a split-k part keeps at least: shorter parts spend more on
/// their extra partial sums than they gain in parallelism.
const SPLIT_MIN_K: u64 = 512;

/// Into how many parts a tensor-core GEMM's k loop is split, when it
/// should be: a single product whose tiles leave most of the GPU idle
/// and whose k loop is long (BERT-base's second FFN GEMM at batch 1,
/// 128×768×3072: 96 blocks of 16×64 each walking 24 k-steps). Each part
/// writes its partial product to the scratch; one pointwise launch adds
/// them, with the bias, relu and epilogue. Parts are even and keep
/// [`SPLIT_MIN_K`] of k (a multiple of 64); the most of them whose
/// blocks stay under three waves of the GPU.
fn split_k(spec: &GemmSpec) -> Option<u64> {
    let plain = spec.batch == 1
        && matches!(spec.a, AMode::Strided { .. })
        && spec.c_strides[1] == spec.n
        && spec.c_strides[2] == 1
        && spec.m > 0
        && spec.n > 0;
    if !plain {
        return None;
    }
    let t = choose_tile(spec);
    let blocks = spec.m.div_ceil(t.bm as u64) * spec.n.div_ceil(t.bn as u64);
    if blocks >= ENOUGH_BLOCKS {
        return None;
    }
    (2..=8u64)
        .filter(|&s| {
            let part = spec.k / s;
            spec.k.is_multiple_of(s) && part.is_multiple_of(64) && part >= SPLIT_MIN_K && blocks * (s - 1) < 3 * ENOUGH_BLOCKS
        })
        .max()
}

/// The pointwise kernel that finishes a split-k GEMM `m × n` in `parts`:
/// the sum of the partial products (operands `0..parts`, row-major
/// `m × n`), then the bias (next operand, one per column), relu, and the
/// epilogue's expression (its further operands next, at its strides).
fn split_k_sum(parts: u64, m: u64, n: u64, bias: bool, relu: bool, epi: Option<&GemmEpilogue>) -> PointwiseKernel {
    let mut operands = vec![Operand { dtype: Scalar::F32, strides: vec![n, 1] }; parts as usize];
    if bias {
        operands.push(Operand { dtype: Scalar::F32, strides: vec![0, 1] });
    }
    let mut k = PointwiseKernel {
        name: String::new(),
        dims: vec![m, n],
        operands,
        exprs: vec![],
        result: 0,
        out_dtype: Scalar::F32,
    };
    let mut acc = k.push(Expr::Load(0));
    for p in 1..k.operands.len() {
        let x = k.push(Expr::Load(p));
        acc = k.push(Expr::Binary(Bin::Add, acc, x));
    }
    if relu {
        acc = k.push(Expr::Unary(Un::Relu, acc));
    }
    if let Some(e) = epi {
        // The epilogue's operand 0 is the product; its operand `j ≥ 1`
        // becomes ours after the parts and the bias.
        let first = k.operands.len();
        for (st, op) in e.strides.iter().zip(&e.kernel.operands[1..]) {
            k.operands.push(Operand { dtype: op.dtype, strides: vec![st[1], st[2]] });
        }
        let mut at = Vec::with_capacity(e.kernel.exprs.len());
        for x in &e.kernel.exprs {
            let i = match *x {
                Expr::Load(0) => acc,
                Expr::Load(j) => k.push(Expr::Load(first + j - 1)),
                Expr::Const(c) => k.push(Expr::Const(c)),
                Expr::Unary(u, a) => k.push(Expr::Unary(u, at[a])),
                Expr::Binary(b, a, c) => k.push(Expr::Binary(b, at[a], at[c])),
                Expr::Select(c, a, b) => k.push(Expr::Select(at[c], at[a], at[b])),
            };
            at.push(i);
        }
        acc = at[e.kernel.result];
        k.out_dtype = e.kernel.out_dtype;
    }
    k.result = acc;
    k.name = format!("splitk_{:016x}", fnv(&format!("{:?}", (&k.dims, &k.operands, &k.exprs, k.result, k.out_dtype))));
    k
}

/// The buffers of `step`, each with whether the step writes it.
fn bufs_of(step: &Step) -> Vec<(Buf, bool)> {
    let mut bufs = Vec::new();
    step.clone().visit_bufs(|b, write| bufs.push((*b, write)));
    bufs
}

/// Whether one of `steps` (their buffers, in order) reads a byte of the
/// arena range `a` that no earlier one of them overwrote; always for a
/// range outside the arena (an output must be written).
fn read_later(steps: &[Vec<(Buf, bool)>], a: &Buf) -> bool {
    if a.space != Space::Arena {
        return true;
    }
    // The byte ranges of `a` still holding its values.
    let mut live = vec![(a.offset, a.offset + a.len)];
    for s in steps {
        let mut read = false;
        let mut written = Vec::new();
        for &(b, write) in s.iter().filter(|(b, _)| b.space == Space::Arena) {
            let (lo, hi) = (b.offset, b.offset + b.len);
            if write {
                written.push((lo, hi));
            } else if live.iter().any(|&(l, h)| lo < h && l < hi) {
                read = true;
            }
        }
        if read {
            return true;
        }
        for (lo, hi) in written {
            live = live
                .into_iter()
                .flat_map(|(l, h)| [(l, h.min(lo)), (l.max(hi), h)])
                .filter(|(l, h)| l < h)
                .collect();
        }
        if live.is_empty() {
            return false;
        }
    }
    false
}

/// Bytes of a scratch slot that holds a half copy of any activation of
/// `steps` (their buffers): half the largest activation buffer a step
/// names (arena, input or output), in 256-byte units.
fn half_slot_bytes(steps: &[Vec<(Buf, bool)>]) -> u64 {
    let most = steps.iter().flatten().filter(|(b, _)| b.space != Space::Weights).map(|(b, _)| b.len).max().unwrap_or(0);
    (most / 2).div_ceil(256) * 256
}

/// The tuning key's mark of a GEMM's epilogue: candidates are timed with
/// it (a GELU's math or a residual's reads change which tile wins).
fn epi_key(e: Option<&GemmEpilogue>) -> String {
    e.map_or(String::new(), |e| format!("|epi{:016x}", fnv(&format!("{e:?}"))))
}

/// A tuned launch's pointer sizes: `args`, then the epilogue's operands.
fn with_extras(args: &[u64], epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Vec<u64> {
    let mut all = args.to_vec();
    all.extend(epi.iter().flat_map(|(_, extra)| extra.iter().map(|b| b.len)));
    all
}

/// FNV-1a of the text: stable across runs and platforms (unlike `std`'s
/// hasher), so the same model gives the same kernel names.
fn fnv(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Little-endian f32 `bytes` as f16 (or bf16) bits, rounded to nearest
/// even (NaN stays NaN, overflow goes to infinity).
fn half_bits(bytes: &[u8], bf16: bool) -> Vec<u16> {
    let convert: fn(f32) -> u16 = if bf16 { |x| half::bf16::from_f32(x).to_bits() } else { |x| half::f16::from_f32(x).to_bits() };
    bytes.chunks_exact(4).map(|c| convert(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
}

fn overlaps(a: &Buf, b: &Buf) -> bool {
    a.space == b.space && a.index == b.index && a.offset < b.offset + b.len && b.offset < a.offset + a.len
}

fn aligned16(bufs: &[&Buf]) -> bool {
    bufs.iter().all(|b| b.offset % 16 == 0)
}

impl<'a> Tr<'a, '_> {
    /// Generates kernel `kind` with arguments `key` once; returns its name
    /// and geometry.
    fn kernel(
        &mut self,
        kind: &str,
        key: impl Debug,
        generate: impl FnOnce(&mut ModuleText, &str) -> Result<Geometry, String>,
    ) -> Result<(String, Geometry), String> {
        let name = format!("{kind}_{:016x}", fnv(&format!("{key:?}")));
        if let Some(g) = self.made.get(&name) {
            return Ok((name, *g));
        }
        let g = generate(&mut self.m, &name)?;
        self.made.insert(name.clone(), g);
        Ok((name, g))
    }

    fn launch(&mut self, (kernel, g): (String, Geometry), args: Vec<Arg>, origin: &str) {
        // A launch that writes an activation the scratch holds a half copy
        // of makes that copy stale.
        for h in &mut self.halves {
            if let Some(((src, ..), _)) = *h
                && args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &src)))
            {
                *h = None;
            }
        }
        // A producer whose output this launch overwrites made its last copy.
        self.producers.retain(|p| !args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &p.out))));
        for c in self.copied.iter_mut().filter(|c| !c.closed) {
            c.f32_read |= args.iter().any(|a| matches!(a, Arg::In(b) if overlaps(b, &c.out)));
            c.closed = args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &c.out)));
        }
        self.items.push(GpuItem::Launch(Launch { kernel, grid: g.grid, block: g.block, smem: g.smem, args }));
        self.origins.push(origin.to_string());
    }

    /// Records the launch just made as a [`Producer`] of `out`.
    fn produced(&mut self, out: Buf, remake: Remake) {
        let item = self.items.len() - 1;
        self.producers.push(Producer { item, out, remake });
        if self.producers.len() > PRODUCERS {
            self.producers.remove(0);
        }
    }

    /// Whether a launch from item `from` on reads or writes the scratch
    /// slot `slot` (a host step may touch anything).
    fn touched(&self, slot: usize, from: usize) -> bool {
        let region = self.slot_buf(slot, self.slot_bytes);
        self.items[from..].iter().any(|it| match it {
            GpuItem::Launch(l) => l.args.iter().any(|x| matches!(x, Arg::In(b) | Arg::Out(b) if overlaps(b, &region))),
            GpuItem::Host { .. } => true,
        })
    }

    /// Scratch slot `slot`'s first `len` bytes.
    fn slot_buf(&self, slot: usize, len: u64) -> Buf {
        Buf { space: Space::Arena, index: 0, offset: self.scratch_at + slot as u64 * self.slot_bytes, len }
    }

    /// Makes a remembered producer of exactly `a` (dense, `a.len` bytes of
    /// f32) also write its half copy into one of `slots` (best first) that
    /// no launch since it has read or written; the slot it did, if any.
    fn copy_from_producer(&mut self, a: &Buf, dense: bool, half: Scalar, slots: &[usize], len: u64) -> Result<Option<usize>, String> {
        let Some(pi) = self.producers.iter().rposition(|p| p.out == *a).filter(|_| dense) else { return Ok(None) };
        let item = self.producers[pi].item;
        let Some(&slot) = slots.iter().find(|&&s| !self.touched(s, item)) else { return Ok(None) };
        let to = self.slot_buf(slot, len);
        let p = self.producers.remove(pi);
        // The f32 stores stay until the end of the translation shows that
        // no launch read them ([`Tr::drop_unread_f32`]).
        let half = HalfCopy { bf16: half == Scalar::BF16, keep_f32: true };
        self.remake(p.item, &p.remake, half)?;
        if let Some(GpuItem::Launch(l)) = self.items.get_mut(p.item) {
            l.args.push(Arg::Out(to));
        }
        let f32_read = a.space != Space::Arena
            || self.items[p.item + 1..].iter().any(|it| match it {
                GpuItem::Launch(l) => l.args.iter().any(|x| matches!(x, Arg::In(b) if overlaps(b, a))),
                GpuItem::Host { .. } => true,
            });
        self.copied.push(Copied { item: p.item, out: *a, remake: p.remake, half, f32_read, closed: false });
        Ok(Some(slot))
    }

    /// Makes the kernel of launch `item` again from `remake`, writing the
    /// half copy `h`.
    fn remake(&mut self, item: usize, remake: &Remake, h: HalfCopy) -> Result<(), String> {
        let sm = self.sm;
        let (kernel, g) = match remake {
            Remake::LayerNorm(q) => {
                let q = *q;
                self.kernel("layer_norm", (q, h), |m, n| {
                    rows::layer_norm_with(m, n, q.0, q.1, f32::from_bits(q.2), q.3, q.4, Some(h))
                })?
            }
            Remake::Attention(spec, ap) => {
                let (spec, ap) = (*spec, *ap);
                self.kernel("attention", (&spec, ap, h), |m, n| attention::attention_with(m, n, &spec, ap, sm, Some(h)))?
            }
            Remake::Wgmma(spec, wp, tile, e) => {
                let (spec, wp, tile, e) = (*spec, *wp, *tile, e.clone());
                self.kernel("gemm_wgmma", (&spec, wp, tile, e.as_ref(), h), |m, n| {
                    gemm_wgmma_with(m, n, &spec, wp, e.as_ref(), sm, tile, Some(h))
                })?
            }
            Remake::Pool(kind, geom, ceil) => {
                let (kind, geom, ceil) = (*kind, *geom, *ceil);
                self.kernel("pool", (kind, &geom, ceil, h), |m, n| rows::pool_with(m, n, kind, &geom, ceil, Some(h)))?
            }
        };
        let Some(GpuItem::Launch(l)) = self.items.get_mut(item) else {
            return Err("internal error: a producer is not a launch".to_string());
        };
        l.kernel = kernel;
        (l.grid, l.block, l.smem) = (g.grid, g.block, g.smem);
        Ok(())
    }

    /// Producers whose f32 output no launch read (every reader took the
    /// half copy) store only the copy.
    fn drop_unread_f32(&mut self) -> Result<(), String> {
        for c in std::mem::take(&mut self.copied) {
            if !c.f32_read {
                self.remake(c.item, &c.remake, HalfCopy { keep_f32: false, ..c.half })?;
            }
        }
        Ok(())
    }

    /// A half-precision copy of the f32 weight at `b` (made once).
    fn half_weight(&mut self, b: &Buf) -> Result<Buf, String> {
        let bf16 = self.precision == Precision::Bf16;
        let dtype = if bf16 { aoc_ir::types::Scalar::BF16 } else { aoc_ir::types::Scalar::F16 };
        self.derived_weight(b, self.precision.name(), dtype, |bytes| {
            half_bits(bytes, bf16).into_iter().flat_map(|h| h.to_le_bytes()).collect()
        })
    }

    /// A new weight blob made from the one starting at `b` by `make` (once
    /// per blob and `suffix`): half copies, kernel-specific layouts.
    fn derived_weight(
        &mut self,
        b: &Buf,
        suffix: &str,
        dtype: aoc_ir::types::Scalar,
        make: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> Result<Buf, String> {
        if b.space != Space::Weights {
            return Err("internal error: a weight operand is not in the weights".to_string());
        }
        let key = (b.offset, suffix.to_string());
        if let Some(h) = self.derived.get(&key) {
            return Ok(*h);
        }
        let i = self
            .weight_offsets
            .iter()
            .position(|&o| o == b.offset)
            .ok_or("internal error: a weight operand does not start a weight blob")?;
        let blob = &self.weights[i];
        let bytes = make(&blob.bytes);
        let end = self.weight_offsets.last().map_or(0, |&o| o + self.weights.last().unwrap().bytes.len() as u64);
        let offset = end.div_ceil(64) * 64;
        let len = bytes.len() as u64;
        let name = format!("{}.{suffix}", blob.name);
        let count = len * 8 / dtype.bits() as u64;
        let shape = if count == blob.shape.iter().product::<u64>() { blob.shape.clone() } else { vec![count] };
        self.weights.push(WeightBlob { name, dtype, shape, bytes });
        self.weight_offsets.push(offset);
        let h = Buf { space: Space::Weights, index: 0, offset, len };
        self.derived.insert(key, h);
        Ok(h)
    }

    /// A GEMM-shaped step: on tensor cores when the precision asks and the
    /// GPU has them, else on the CUDA cores; `epi` is a fused epilogue and
    /// its extra buffers.
    fn gemm(&mut self, spec: GemmSpec, bufs: GemmBufs, b_const: bool, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let (a, b, bias, c) = (&a, &b, bias.as_ref(), &c);
        let tc = match self.precision {
            Precision::Fp32 => None,
            Precision::Tf32 => Some(TcPrecision::Tf32),
            Precision::Fp16 => Some(TcPrecision::F16),
            Precision::Bf16 => Some(TcPrecision::Bf16),
        };
        let tc = tc.filter(|_| self.sm.has_mma_f16());
        if let Some(p) = tc
            && b_const
            && let Some(wg) = self.wgmma_form(&spec, p, c, bias)
        {
            return self.gemm_wgmma(spec, wg, GemmBufs { a: *a, b: *b, bias: bias.copied(), c: *c }, origin, epi);
        }
        let (b, b_half) = match tc {
            Some(TcPrecision::F16 | TcPrecision::Bf16) if b_const => (self.half_weight(b)?, true),
            _ => (*b, false),
        };
        if let Some(p) = tc
            && let Some(parts) = split_k(&spec)
        {
            return self.gemm_split_k(spec, p, parts, GemmBufs { a: *a, b, bias: bias.copied(), c: *c }, b_half, origin, epi);
        }
        let mut spec = spec;
        let mut bufs = vec![a, &b, c];
        bufs.extend(bias);
        spec.aligned16 = aligned16(&bufs);
        let sm = self.sm;
        let mut arg_bytes = vec![a.len, b.len];
        arg_bytes.extend(bias.map(|x| x.len));
        arg_bytes.push(c.len);
        let e = epi.map(|(e, _)| e);
        let k = match (tc, self.tuner.is_some()) {
            (Some(p), tuned) => {
                let t = if tuned {
                    let tiles: Vec<TcTile> = TcTile::ALL.into_iter().filter(|t| t.check(p).is_ok()).collect();
                    let kind = format!("gemm_tc|{p:?}|{b_half}{}", epi_key(e));
                    let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |m, n, t| {
                        gemm_tc_with(m, n, &spec, p, b_half, sm, Some(*t), e)
                    })?;
                    Some(tiles[pick])
                } else {
                    None
                };
                self.kernel("gemm_tc", (&spec, p, b_half, t, e), |m, n| gemm_tc_with(m, n, &spec, p, b_half, sm, t, e))?
            }
            (None, tuned) => {
                let t = if tuned {
                    let tiles: Vec<SimtTile> = SimtTile::CANDIDATES.into_iter().filter(|t| t.check().is_ok()).collect();
                    let kind = format!("gemm_f32{}", epi_key(e));
                    let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |m, n, t| {
                        gemm_simt::gemm_f32_with(m, n, &spec, *t, e)
                    })?;
                    tiles[pick]
                } else {
                    gemm_simt::pick_tile(&spec)
                };
                self.kernel("gemm_f32", (&spec, t, e), |m, n| gemm_simt::gemm_f32_with(m, n, &spec, t, e))?
            }
        };
        let mut args = vec![Arg::In(*a), Arg::In(b)];
        args.extend(bias.map(|x| Arg::In(*x)));
        args.push(Arg::Out(*c));
        if let Some((_, extra)) = epi {
            args.extend(extra.iter().map(|b| Arg::In(*b)));
        }
        self.launch(k, args, origin);
        Ok(())
    }

    /// A tensor-core GEMM in `parts` slices of k ([`split_k`]): one batched
    /// launch writes each slice's product to the scratch, one pointwise
    /// launch sums them into C with the bias, relu and epilogue.
    #[allow(clippy::too_many_arguments)]
    fn gemm_split_k(
        &mut self,
        spec: GemmSpec,
        p: TcPrecision,
        parts: u64,
        bufs: GemmBufs,
        b_half: bool,
        origin: &str,
        epi: Option<&(GemmEpilogue, Vec<Buf>)>,
    ) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let AMode::Strided { row, col, .. } = spec.a else {
            return Err("internal error: split-k of a convolution".to_string());
        };
        let (m, n, part) = (spec.m, spec.n, spec.k / parts);
        let slice = m * n * 4;
        let scratch = Buf { space: Space::Arena, index: 0, offset: self.scratch_at, len: parts * slice };
        self.scratch_len = self.scratch_len.max(scratch.len);
        // The partial sums overwrite whatever half copies the scratch held.
        self.halves = [None; HALF_SLOTS];
        let sliced = GemmSpec {
            batch: parts,
            k: part,
            a: AMode::Strided { batch: part * col, row, col },
            b_strides: [part * spec.b_strides[1], spec.b_strides[1], spec.b_strides[2]],
            c_strides: [m * n, n, 1],
            bias: None,
            relu: false,
            aligned16: aligned16(&[&a, &b, &scratch]),
            ..spec
        };
        let sm = self.sm;
        let k = self.kernel("gemm_tc", (&sliced, p, b_half, None::<TcTile>, None::<&GemmEpilogue>), |mt, nm| {
            gemm_tc_with(mt, nm, &sliced, p, b_half, sm, None, None)
        })?;
        self.launch(k, vec![Arg::In(a), Arg::In(b), Arg::Out(scratch)], origin);
        let sum = split_k_sum(parts, m, n, bias.is_some(), spec.relu, epi.map(|(e, _)| e));
        let mut ins: Vec<Buf> = (0..parts)
            .map(|i| Buf { offset: scratch.offset + i * slice, len: slice, ..scratch })
            .collect();
        ins.extend(bias);
        if let Some((_, extra)) = epi {
            ins.extend(extra.iter().copied());
        }
        ins.push(c);
        self.launch_pointwise(sum, &ins, origin)
    }

    /// The precision `wgmma` runs `spec` in, when it should: sm_90a, a
    /// plain GEMM with a constant B, k a multiple of 8 (the half copy of A
    /// is then dense with 16-byte rows), C with unit column stride, and
    /// enough rows and columns to fill most of the GPU with 128-row tiles;
    /// or a convolution the kernel reads implicitly ([`wgmma_activation`])
    /// with enough tiles of 128 × 64.
    fn wgmma_form(&self, spec: &GemmSpec, p: TcPrecision, c: &Buf, bias: Option<&Buf>) -> Option<WgPrecision> {
        let wp = match p {
            TcPrecision::F16 => WgPrecision::F16,
            TcPrecision::Bf16 => WgPrecision::Bf16,
            TcPrecision::Tf32 => return None,
        };
        let (_, _, cols) = wgmma_activation(spec)?;
        // k of the product the kernel computes (a padded convolution's).
        let k = match spec.a {
            AMode::Conv(g) if a_rows(spec).is_none() => g.kh * g.kw * cols,
            _ => spec.k,
        };
        let common = self.sm == Sm::Sm90a
            && spec.batch == 1
            && k >= 64
            && k.is_multiple_of(8)
            && spec.c_strides[2] == 1
            && aligned16(&[c].into_iter().chain(bias).collect::<Vec<_>>());
        let wide = spec.n >= WGMMA_MIN_N && spec.m.div_ceil(128) * spec.n.div_ceil(128) >= WGMMA_MIN_TILES;
        let conv = matches!(spec.a, AMode::Conv(_))
            && spec.n >= 64
            && spec.m.div_ceil(128) * spec.n.div_ceil(64) >= WGMMA_MIN_CONV_TILES;
        (common && (wide || conv)).then_some(wp)
    }

    /// A GEMM on `wgmma`: A is converted into a half scratch buffer at the
    /// end of the arena (one pointwise launch), B is packed for the
    /// kernel's tile at compile time.
    fn gemm_wgmma(&mut self, spec: GemmSpec, p: WgPrecision, bufs: GemmBufs, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let (lda, rows, cols) = wgmma_activation(&spec).ok_or("internal error: wgmma on an A it cannot read")?;
        let k = spec.k;
        let half = if p == WgPrecision::Bf16 { Scalar::BF16 } else { Scalar::F16 };
        // GEMMs on one activation (attention's Q, K and V projections, a
        // bottleneck's first and downsampling convolutions) share its copy.
        let key = (a, lda, rows, cols, half);
        let scratch = self.half_copy(key, origin)?;
        let epi = self.epilogue_from_halves(epi, half);
        let epi = epi.as_ref();
        let mut spec = spec;
        // The padded channels' weights are zeros (rows of B inserted below).
        let mut pad = None;
        match spec.a {
            _ if a_rows(&spec).is_some() => spec.a = AMode::Strided { batch: 0, row: k, col: 1 },
            AMode::Conv(g) if g.c != cols => {
                pad = Some((g.c, cols, g.kh * g.kw));
                spec.a = AMode::Conv(ConvGeom { c: cols, ..g });
                spec.k = g.kh * g.kw * cols;
            }
            _ => {}
        }
        spec.aligned16 = true;
        let tile = if self.tuner.is_some() {
            let tiles: Vec<WgTile> = WGMMA_CANDIDATES.into_iter().filter(|t| t.check().is_ok()).collect();
            let b_bytes = tiles.iter().map(|&t| packed_b_len(&spec, t) as u64 * 2).max().unwrap_or(0);
            let mut arg_bytes = vec![scratch.len, b_bytes];
            arg_bytes.extend(bias.map(|x| x.len));
            arg_bytes.push(c.len);
            let sm = self.sm;
            let e = epi.map(|(e, _)| e);
            let kind = format!("gemm_wgmma|{p:?}{}", epi_key(e));
            let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |mt, nm, t| {
                gemm_wgmma_tile(mt, nm, &spec, p, e, sm, *t)
            })?;
            tiles[pick]
        } else {
            choose_wg_tile(&spec)
        };
        let bf16 = p == WgPrecision::Bf16;
        let suffix = format!("wg{}x{}.{}{}", tile.bn, tile.stages, if bf16 { "bf16" } else { "f16" }, pad.map_or(String::new(), |(_, cp, _)| format!(".c{cp}")));
        let packed = self.derived_weight(&b, &suffix, half, |bytes| {
            let mut bits = half_bits(bytes, bf16);
            if let Some((c, cp, taps)) = pad {
                // Row (tap, ci) of B moves to row tap·cp + ci.
                let n = spec.n as usize;
                let mut padded = vec![0u16; (taps * cp) as usize * n];
                for (r, row) in bits.chunks(n).enumerate() {
                    let (tap, ci) = (r as u64 / c, r as u64 % c);
                    let at = (tap * cp + ci) as usize * n;
                    padded[at..at + n].copy_from_slice(row);
                }
                bits = padded;
            }
            pack_b(&spec, tile, &bits).into_iter().flat_map(|v| v.to_le_bytes()).collect()
        })?;
        let sm = self.sm;
        let e = epi.map(|(e, _)| e);
        let kern = self.kernel("gemm_wgmma", (&spec, p, tile, e), |mt, nm| gemm_wgmma_tile(mt, nm, &spec, p, e, sm, tile))?;
        let mut args = vec![Arg::In(scratch), Arg::In(packed)];
        args.extend(bias.map(Arg::In));
        args.push(Arg::Out(c));
        if let Some((_, extra)) = epi {
            args.extend(extra.iter().map(|b| Arg::In(*b)));
        }
        self.launch(kern, args, origin);
        if spec.c_strides[1] == spec.n {
            self.produced(c, Remake::Wgmma(spec, p, tile, e.cloned()));
        }
        Ok(())
    }

    /// `epi` reading, in place of each extra operand that a scratch slot
    /// holds a half copy of (in `half`), that copy: a residual added in a
    /// GEMM's epilogue is read at half the bytes, and its producer may stop
    /// storing it as f32.
    fn epilogue_from_halves(&self, epi: Option<&(GemmEpilogue, Vec<Buf>)>, half: Scalar) -> Option<(GemmEpilogue, Vec<Buf>)> {
        let (mut e, mut extra) = epi.cloned()?;
        for (i, b) in extra.iter_mut().enumerate() {
            let held = self.halves.iter().enumerate().find_map(|(slot, h)| match h {
                // A dense copy: element `o` of the copy is element `o` of `b`.
                Some(((src, lda, rows, cols, t), _)) if src == b && *t == half && lda == cols && b.len == rows * cols * 4 => {
                    Some(self.slot_buf(slot, rows * cols * 2))
                }
                _ => None,
            });
            if let Some(copy) = held {
                *b = copy;
                e.kernel.operands[i + 1].dtype = half;
            }
        }
        Some((e, extra))
    }

    /// The scratch buffer holding the half copy `key` of an activation for
    /// a `wgmma` GEMM: the slot that already holds it, or a free slot
    /// filled by the launch just made (when it produced the activation and
    /// can write the copy too) or by a conversion launch.
    fn half_copy(&mut self, key: HalfKey, origin: &str) -> Result<Buf, String> {
        let (a, lda, rows, cols, half) = key;
        let len = rows * cols * 2;
        if len > self.slot_bytes {
            return Err("internal error: a half copy larger than its scratch slot".to_string());
        }
        if let Some(slot) = self.halves.iter().position(|h| h.is_some_and(|(k, _)| k == key)) {
            return Ok(self.slot_buf(slot, len));
        }
        let order = self.slot_order();
        let dense = lda == cols && a.len == rows * cols * 4;
        let slot = match self.copy_from_producer(&a, dense, half, &order, len)? {
            Some(slot) => slot,
            None if cols > lda => {
                let slot = order[0];
                let to = self.slot_buf(slot, len);
                let bf16 = half == Scalar::BF16;
                let kern = self.kernel("pad_half", (rows, lda, cols, bf16), |m, n| index::pad_half(m, n, rows, lda, cols, bf16))?;
                self.launch(kern, vec![Arg::In(a), Arg::Out(to)], origin);
                slot
            }
            None => {
                let cast = PointwiseKernel {
                    name: format!("cvt_{:016x}", fnv(&format!("{rows}|{cols}|{lda}|{half:?}"))),
                    // One flat dimension when A is dense: the widest vector form.
                    dims: if lda == cols { vec![rows * cols] } else { vec![rows, cols] },
                    operands: vec![crate::expr::Operand { dtype: Scalar::F32, strides: if lda == cols { vec![1] } else { vec![lda, 1] } }],
                    exprs: vec![Expr::Load(0)],
                    result: 0,
                    out_dtype: half,
                };
                let slot = order[0];
                let to = self.slot_buf(slot, len);
                self.launch_pointwise(cast, &[a, to], origin)?;
                slot
            }
        };
        self.scratch_len = self.scratch_len.max(slot as u64 * self.slot_bytes + len);
        self.halves[slot] = Some((key, self.items.len()));
        Ok(self.slot_buf(slot, len))
    }

    /// The scratch slots in the order a new half copy takes them: empty
    /// ones, then those whose activation no later step reads, then the
    /// oldest copies.
    fn slot_order(&self) -> Vec<usize> {
        let later = &self.step_bufs[(self.step_at + 1).min(self.step_bufs.len())..];
        let rank = |slot: usize| match self.halves[slot] {
            None => (0, 0),
            Some(((src, ..), made)) => (1 + read_later(later, &src) as usize, made),
        };
        let mut order: Vec<usize> = (0..HALF_SLOTS).collect();
        order.sort_by_key(|&s| rank(s));
        order
    }

    /// Asks the tuner which of `tiles` runs `spec` fastest; a tile the
    /// generator refuses for this problem is left out.
    fn tune<T: Debug>(
        &mut self,
        kind: &str,
        spec: &GemmSpec,
        tiles: &[T],
        arg_bytes: &[u64],
        generate: impl Fn(&mut ModuleText, &str, &T) -> Result<Geometry, String>,
    ) -> Result<usize, String> {
        let mut cands = Vec::new();
        let mut index = Vec::new();
        for (i, t) in tiles.iter().enumerate() {
            let mut m = ModuleText::new();
            let name = format!("tune_{i}");
            let Ok(geometry) = generate(&mut m, &name, t) else { continue };
            let ptx = crate::llvm::ir_to_ptx(&m.finish(), self.sm)?;
            cands.push(TuneCandidate { label: format!("{t:?}"), ptx, kernel: name, geometry, arg_bytes: arg_bytes.to_vec() });
            index.push(i);
        }
        if cands.is_empty() {
            return Err(format!("no tile fits {spec:?}"));
        }
        let key = format!("{}|{kind}|{spec:?}", self.sm);
        let tuner = self.tuner.as_mut().expect("tune is called with a tuner");
        let pick = tuner.pick(&key, &cands)?;
        index.get(pick).copied().ok_or_else(|| format!("the tuner picked candidate {pick} of {}", cands.len()))
    }

    fn step(&mut self, step: &Step, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        // The GPU lowering keeps clips and GELU pointwise steps
        // (`LowerOptions::GPU.step_activations` is false).
        if let Step::Gemm { clip: Some(_), .. }
        | Step::Gemm { gelu: true, .. }
        | Step::Conv2d { clip: Some(_), .. }
        | Step::DepthwiseConv2d { clip: Some(_), .. } = step
        {
            return Err(format!("{origin}: a clip or GELU inside a GEMM or convolution step has no GPU kernel"));
        }
        match step {
            Step::Gemm { a, b, bias, c, m, n, k, lda, ldc, relu, .. } => {
                let spec = GemmSpec {
                    batch: 1,
                    m: *m,
                    n: *n,
                    k: *k,
                    a: AMode::Strided { batch: 0, row: *lda, col: 1 },
                    b_strides: [0, *n, 1],
                    c_strides: [0, *ldc, 1],
                    bias: bias.map(|_| 0),
                    relu: *relu,
                    aligned16: false,
                };
                self.gemm(spec, GemmBufs { a: *a, b: *b, bias: *bias, c: *c }, true, origin, epi)
            }
            Step::MatMul { a, b, c, batch, m, n, k, a_strides, b_strides, c_strides } => {
                let spec = GemmSpec {
                    batch: *batch,
                    m: *m,
                    n: *n,
                    k: *k,
                    a: AMode::Strided { batch: a_strides[0], row: a_strides[1], col: a_strides[2] },
                    b_strides: *b_strides,
                    c_strides: *c_strides,
                    bias: None,
                    relu: false,
                    aligned16: false,
                };
                self.gemm(spec, GemmBufs { a: *a, b: *b, bias: None, c: *c }, b.space == Space::Weights, origin, epi)
            }
            Step::Conv2d { x, w, bias, y, geom, relu, .. } => {
                let g = geom.group.max(1);
                let (cg, ocg) = (geom.c / g, geom.oc / g);
                let k = geom.kh * geom.kw * cg;
                let spec = GemmSpec {
                    batch: g,
                    m: geom.n * geom.oh * geom.ow,
                    n: ocg,
                    k,
                    a: AMode::Conv(*geom),
                    b_strides: [k * ocg, ocg, 1],
                    c_strides: [ocg, geom.oc, 1],
                    bias: bias.map(|_| ocg),
                    relu: *relu,
                    aligned16: false,
                };
                self.gemm(spec, GemmBufs { a: *x, b: *w, bias: *bias, c: *y }, true, origin, epi)
            }
            Step::WinogradConv2d { .. } => {
                Err("internal error: the GPU lowering produced a Winograd step".to_string())
            }
            Step::DepthwiseConv2d { x, w, bias, y, geom, relu, .. } => {
                let (geom, has_bias, relu) = (*geom, bias.is_some(), *relu);
                let k = self.kernel("dwconv", (&geom, has_bias, relu), |m, n| {
                    index::depthwise_conv2d(m, n, &geom, has_bias, relu)
                })?;
                let mut args = vec![Arg::In(*x), Arg::In(*w)];
                args.extend(bias.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                Ok(())
            }
            Step::ConvTranspose2d { x, w, bias, y, geom } => {
                let (geom, has_bias) = (*geom, bias.is_some());
                let k = self.kernel("convt", (&geom, has_bias), |m, n| index::conv_transpose2d(m, n, &geom, has_bias))?;
                let mut args = vec![Arg::In(*x), Arg::In(*w)];
                args.extend(bias.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                Ok(())
            }
            Step::Pool { kind, x, y, geom, ceil_mode } => {
                let (kind, geom, ceil) = (*kind, *geom, *ceil_mode);
                let k = self.kernel("pool", (kind, &geom, ceil), |m, n| rows::pool(m, n, kind, &geom, ceil))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                self.produced(*y, Remake::Pool(kind, geom, ceil));
                Ok(())
            }
            Step::Reduce { kind, x, y, outer, len, inner } => {
                let (kind, o, l, i) = (*kind, *outer, *len, *inner);
                let k = self.kernel("reduce", (kind, o, l, i), |m, n| rows::reduce(m, n, kind, o, l, i))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::Resize { mode, x, y, n, h, w, c, oh, ow } => {
                let p = (*mode, *n, *h, *w, *c, *oh, *ow);
                let k = self.kernel("resize", p, |m, name| index::resize(m, name, p.0, p.1, p.2, p.3, p.4, p.5, p.6))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::Copy { src, dst, elem_size, shape, src_start, src_strides, dst_strides } => {
                let key = (elem_size, shape, src_start, src_strides, dst_strides);
                let k = self.kernel("copy", key, |m, n| {
                    index::copy(m, n, *elem_size, shape, *src_start, src_strides, dst_strides)
                })?;
                self.launch(k, vec![Arg::In(*src), Arg::Out(*dst)], origin);
                Ok(())
            }
            Step::Fill { dst, elem_size, bits } => {
                if *elem_size == 0 || dst.len % elem_size != 0 {
                    return Err(format!("a fill of {} bytes in {elem_size}-byte elements", dst.len));
                }
                let (es, count, bits) = (*elem_size, dst.len / elem_size, *bits);
                let k = self.kernel("fill", (es, count, bits), |m, n| index::fill(m, n, es, count, bits))?;
                self.launch(k, vec![Arg::Out(*dst)], origin);
                Ok(())
            }
            Step::Gather { data, indices, out, elem_size, outer, axis, inner, count } => {
                let p = (*elem_size, *outer, *axis, *inner, *count);
                let k = self.kernel("gather", p, |m, n| index::gather(m, n, p.0, p.1, p.2, p.3, p.4))?;
                self.launch(k, vec![Arg::In(*data), Arg::In(*indices), Arg::Out(*out), Arg::Status], origin);
                Ok(())
            }
            Step::Softmax { x, y, rows: r, cols, log } => {
                let p = (*r, *cols, *log);
                let k = self.kernel("softmax", p, |m, n| rows::softmax(m, n, p.0, p.1, p.2))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::LayerNorm { x, gamma, beta, y, rows: r, cols, epsilon } => {
                let p = (*r, *cols, epsilon.to_bits(), gamma.is_some(), beta.is_some());
                let k = self.kernel("layer_norm", p, |m, n| {
                    rows::layer_norm(m, n, p.0, p.1, f32::from_bits(p.2), p.3, p.4)
                })?;
                let mut args = vec![Arg::In(*x)];
                args.extend(gamma.map(Arg::In));
                args.extend(beta.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                self.produced(*y, Remake::LayerNorm(p));
                Ok(())
            }
            Step::Attention {
                q, k, v, mask, y, batch, heads, sq, sk, d, dv, q_strides, k_strides, v_strides, mask_strides, y_strides, scale,
            } => {
                let spec = AttentionSpec {
                    batch: *batch,
                    heads: *heads,
                    sq: *sq,
                    sk: *sk,
                    d: *d,
                    dv: *dv,
                    q: *q_strides,
                    k: *k_strides,
                    v: *v_strides,
                    y: *y_strides,
                    mask: mask.map(|_| *mask_strides),
                    scale: *scale,
                    aligned16: aligned16(&[q, k, v, y].into_iter().chain(mask.as_ref()).collect::<Vec<_>>()),
                };
                let p = match self.precision {
                    _ if !self.sm.has_mma_f16() => AttnPrecision::F32,
                    Precision::Fp32 | Precision::Tf32 => AttnPrecision::F32,
                    Precision::Fp16 => AttnPrecision::F16,
                    Precision::Bf16 => AttnPrecision::Bf16,
                };
                let sm = self.sm;
                let kern = self.kernel("attention", (&spec, p), |m, n| attention::attention(m, n, &spec, p, sm))?;
                let mut args = vec![Arg::In(*q), Arg::In(*k), Arg::In(*v)];
                args.extend(mask.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(kern, args, origin);
                self.produced(*y, Remake::Attention(spec, p));
                Ok(())
            }
            Step::QConv2d { x, w, comp, scale, shift, y, geom, q } => {
                let spec = QConvSpec { geom: *geom, q: *q };
                let need = geom.oc * geom.kh * geom.kw * geom.c.checked_div(geom.group).unwrap_or(0);
                if w.len != need {
                    return Err(format!("internal error: qconv2d weights hold {} bytes, the geometry needs {need}", w.len));
                }
                let packed = self.derived_weight(w, "s8pack", aoc_ir::types::Scalar::I8, |bytes| {
                    let ohwi: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
                    gemm_s8::pack_weights(&spec, &ohwi).into_iter().map(|v| v as u8).collect()
                })?;
                // The kernel moves x, w and y in 16-byte chunks; the arena and
                // the weights align every tensor, only a view inside one could
                // break it.
                if !aligned16(&[x, &packed, y]) {
                    return Err("the integer convolution's input or output starts inside a tensor at an offset that is not a multiple of 16 bytes, which its GPU kernel cannot read; please report the model".to_string());
                }
                let sm = self.sm;
                let kern = self.kernel("qconv_s8", spec, |m, n| gemm_s8::qconv_s8(m, n, &spec, sm))?;
                let args = [x, &packed, comp, scale, shift].into_iter().map(|b| Arg::In(*b)).chain([Arg::Out(*y)]).collect();
                self.launch(kern, args, origin);
                Ok(())
            }
            Step::Pointwise { code, args, .. } => self.pointwise(code, args, origin),
            Step::Reference { .. } => {
                self.halves = [None; HALF_SLOTS];
                for c in &mut self.copied {
                    c.f32_read = true;
                }
                self.items.push(GpuItem::Host { step: step.clone() });
                self.origins.push(origin.to_string());
                Ok(())
            }
        }
    }

    fn pointwise(&mut self, code: &str, bufs: &[Buf], origin: &str) -> Result<(), String> {
        let k = *self
            .pointwise
            .get(code)
            .ok_or_else(|| format!("internal error: step names kernel `{code}`, which the lowering did not make"))?;
        if bufs.len() != k.operands.len() + 1 {
            return Err(format!("internal error: kernel `{code}` takes {} buffers", k.operands.len() + 1));
        }
        self.launch_pointwise(k.clone(), bufs, origin)
    }

    /// Launches pointwise kernel `k` (generated once) on `bufs`, its
    /// operands then its output.
    fn launch_pointwise(&mut self, k: PointwiseKernel, bufs: &[Buf], origin: &str) -> Result<(), String> {
        // The vector form needs 16-byte aligned buffers; a trailing unit
        // dimension forces the scalar form where one is not.
        let mut k = k;
        if is_vectorized(&k) && !aligned16(&bufs.iter().collect::<Vec<_>>()) {
            k.name.push_str("_unaligned");
            k.dims.push(1);
            for op in &mut k.operands {
                op.strides.push(0);
            }
        }
        let total: u64 = k.dims.iter().product();
        let items = work_items(&k);
        let name = k.name.clone();
        if !self.made.contains_key(&name) {
            add_to_module(&k, &mut self.m)?;
            let block = 256u64;
            // The kernel strides over the grid; 2^20 blocks is plenty.
            let grid = items.div_ceil(block).clamp(1, 1 << 20);
            self.made.insert(name.clone(), Geometry { grid: [grid as u32, 1, 1], block: [block as u32, 1, 1], smem: 0 });
        }
        let g = self.made[&name];
        let mut args: Vec<Arg> = bufs[..bufs.len() - 1].iter().map(|b| Arg::In(*b)).collect();
        args.push(Arg::Out(bufs[bufs.len() - 1]));
        args.push(Arg::U64(total));
        self.launch((name, g), args, origin);
        Ok(())
    }
}

/// The element strides `[row, col]` of a pointwise operand (`strides` over
/// `dims`) when the kernel's flat element index is `row · n + col` over an
/// `m × n` matrix: `None` unless that offset is affine in (row, col). Dims
/// the operand walks contiguously are merged first; then the
/// dims are split where their trailing product is `n` (a dim straddling the
/// split is cut in two when it divides), then each side must collapse to one
/// stride.
pub fn affine_over(dims: &[u64], strides: &[u64], m: u64, n: u64) -> Option<[u64; 2]> {
    if dims.iter().product::<u64>() != m * n || n == 0 || m == 0 {
        return None;
    }
    // Merge dims this operand walks contiguously (the lowering collapses
    // dims for the kernel's vector width, not along the matrix's rows, so
    // a dense operand may come as [24, 4096] for a 128 × 768 matrix).
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (&d, &s) in dims.iter().zip(strides) {
        match merged.last_mut() {
            Some((pd, ps)) if *ps == s * d => {
                *pd *= d;
                *ps = s;
            }
            _ => merged.push((d, s)),
        }
    }
    // Split into (dim, stride) lists for the row part and the column part.
    let mut col: Vec<(u64, u64)> = Vec::new();
    let mut row: Vec<(u64, u64)> = Vec::new();
    let mut need = n;
    for &(d, s) in merged.iter().rev() {
        if need == 1 {
            row.push((d, s));
        } else if need % d == 0 {
            col.push((d, s));
            need /= d;
        } else if d % need == 0 {
            col.push((need, s));
            row.push((d / need, s * need));
            need = 1;
        } else {
            return None;
        }
    }
    if need != 1 {
        return None;
    }
    // Innermost first in each list: collapse when each dim's stride is the
    // previous stride times the previous extent (unit dims are free).
    let collapse = |v: &[(u64, u64)]| -> Option<u64> {
        let v: Vec<(u64, u64)> = v.iter().copied().filter(|&(d, _)| d != 1).collect();
        let Some(&(_, s0)) = v.first() else { return Some(0) };
        let mut expect = s0;
        for &(d, s) in &v {
            if s != expect {
                return None;
            }
            expect = s * d;
        }
        Some(s0)
    };
    Some([collapse(&row)?, collapse(&col)?])
}

/// The contiguous `m × n` output of a GEMM-shaped step (one batch, one
/// group), the only form an epilogue is fused into.
fn gemm_output(step: &Step) -> Option<(Buf, u64, u64)> {
    match step {
        Step::Gemm { c, m, n, ldc, .. } if ldc == n => Some((*c, *m, *n)),
        Step::Conv2d { y, geom, .. } if geom.group == 1 => Some((*y, geom.n * geom.oh * geom.ow, geom.oc)),
        Step::MatMul { c, batch: 1, m, n, c_strides, .. } if c_strides[1] == *n && c_strides[2] == 1 => Some((*c, *m, *n)),
        _ => None,
    }
}

/// A pointwise step right after a GEMM writing `c` (`m × n`, row major,
/// contiguous) that rewrites `c` in place and reads it at the element it
/// writes becomes that GEMM's epilogue: returns the epilogue and the extra
/// buffers (its other operands, in order).
fn fusable_epilogue(c: &Buf, m: u64, n: u64, next: &Step, kernels: &HashMap<&str, &PointwiseKernel>) -> Option<(GemmEpilogue, Vec<Buf>)> {
    let Step::Pointwise { code, args, .. } = next else { return None };
    let k = kernels.get(code.as_str())?;
    let (out, ins) = args.split_last()?;
    if out != c || k.out_dtype != aoc_ir::types::Scalar::F32 || ins.len() != k.operands.len() {
        return None;
    }
    // The operand that reads c where the kernel writes: row-major strides.
    let mut row_major = vec![0u64; k.dims.len()];
    let mut acc = 1;
    for (d, &e) in k.dims.iter().enumerate().rev() {
        row_major[d] = acc;
        acc *= e;
    }
    let me = ins.iter().zip(&k.operands).position(|(b, op)| b == c && op.strides == row_major && op.dtype == aoc_ir::types::Scalar::F32)?;
    // No other operand may read c (it would see the value before the epilogue).
    if ins.iter().enumerate().any(|(i, b)| i != me && overlaps(b, c)) {
        return None;
    }
    let mut order = vec![me];
    order.extend((0..ins.len()).filter(|&i| i != me));
    let mut kernel = (*k).clone();
    kernel.name.clear();
    kernel.operands = order.iter().map(|&i| k.operands[i].clone()).collect();
    let remap: Vec<usize> = (0..ins.len()).map(|i| order.iter().position(|&o| o == i).unwrap()).collect();
    for e in &mut kernel.exprs {
        if let Expr::Load(op) = e {
            *op = remap[*op];
        }
    }
    let mut strides = Vec::new();
    for &i in &order[1..] {
        let [r, col] = affine_over(&k.dims, &k.operands[i].strides, m, n)?;
        strides.push([0, r, col]);
    }
    let bufs = order[1..].iter().map(|&i| ins[i]).collect();
    Some((GemmEpilogue { kernel, strides }, bufs))
}

/// Translates `lowered` for `sm` at `precision`. Half-precision weight
/// copies are appended to `lowered.weights`.
pub fn translate(lowered: &mut Lowered, sm: Sm, precision: Precision) -> Result<Translated, String> {
    translate_tuned(lowered, sm, precision, None)
}

/// [`translate`], choosing each GEMM's tile by measurement when `tuner` is
/// given (otherwise by the generators' cost models).
pub fn translate_tuned(
    lowered: &mut Lowered,
    sm: Sm,
    precision: Precision,
    tuner: Option<&mut dyn Tuner>,
) -> Result<Translated, String> {
    if precision != Precision::Fp32 && !sm.has_mma_f16() {
        return Err(format!(
            "--precision {} needs tensor cores with mma.sync (sm_80 or newer); {sm} has none: use --precision fp32",
            precision.name()
        ));
    }
    let mut offsets = Vec::new();
    let mut end = 0u64;
    for w in &lowered.weights {
        let o = end.div_ceil(64) * 64;
        offsets.push(o);
        end = o + w.bytes.len() as u64;
    }
    let kernels = std::mem::take(&mut lowered.kernels);
    let steps = lowered.plan.steps.clone();
    let origins = lowered.plan.origins.clone();
    let step_bufs: Vec<Vec<(Buf, bool)>> = steps.iter().map(bufs_of).collect();
    let mut tr = Tr {
        sm,
        tuner,
        precision,
        m: ModuleText::new(),
        made: HashMap::new(),
        pointwise: kernels.iter().map(|k| (k.name.as_str(), k)).collect(),
        weights: &mut lowered.weights,
        weight_offsets: offsets,
        derived: HashMap::new(),
        items: Vec::new(),
        origins: Vec::new(),
        scratch_at: lowered.arena_bytes.div_ceil(256) * 256,
        scratch_len: 0,
        halves: [None; HALF_SLOTS],
        slot_bytes: half_slot_bytes(&step_bufs),
        producers: Vec::new(),
        copied: Vec::new(),
        step_bufs,
        step_at: 0,
    };
    let mut i = 0;
    while i < steps.len() {
        let (step, origin) = (&steps[i], &origins[i]);
        tr.step_at = i;
        let fused = gemm_output(step)
            .zip(steps.get(i + 1))
            .and_then(|((c, m, n), next)| fusable_epilogue(&c, m, n, next, &tr.pointwise));
        tr.step(step, origin, fused.as_ref()).map_err(|e| format!("{origin}: {e}"))?;
        i += if fused.is_some() { 2 } else { 1 };
    }
    tr.drop_unread_f32()?;
    // Kernels a launch stopped naming (a producer remade with a half copy).
    let used: std::collections::HashSet<String> = tr
        .items
        .iter()
        .filter_map(|i| match i {
            GpuItem::Launch(l) => Some(l.kernel.clone()),
            GpuItem::Host { .. } => None,
        })
        .collect();
    tr.m.retain_kernels(|k| used.contains(k));
    let n = used.len();
    if tr.scratch_len > 0 {
        lowered.arena_bytes = tr.scratch_at + tr.scratch_len;
    }
    let plan = GpuPlan { items: tr.items, origins: tr.origins };
    let llvm_parts = tr.m.split(CODEGEN_PARTS);
    let llvm = tr.m.finish();
    lowered.kernels = kernels;
    Ok(Translated { plan, llvm, llvm_parts, kernels: n })
}
