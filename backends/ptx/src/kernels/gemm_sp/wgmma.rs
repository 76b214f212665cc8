//! The Hopper 2:4 sparse GEMM (sm_90a only): [`gemm_sp_wgmma`] writes one
//! kernel computing `y = x @ wᵀ (+ bias, relu, epilogue)` with
//! `wgmma.mma_async.sp.sync.aligned.m64n{bn}k32.f32.f16.f16`, the 2:4
//! weight as the sparse operand A: the product is `yᵀ = w · xᵀ`, features
//! are the instruction's M, activation rows its N, and both operands are
//! read by the tensor cores from shared memory through descriptors, as in
//! the dense `gemm_wgmma` (same swizzle, same ring, same warpgroups).
//!
//! Kernel ABI: `gemm_sp_tiled`'s (`x, values, meta, [bias], y, [e1 … ek]`)
//! on a weight packed by [`pack_weight`](super::pack_weight) for
//! [`SpWgTile`] (`n_pad` a multiple of [`BM`], `k_pad` of [`BK`]): `values`
//! is `n_pad × k_pad/2` f16 row-major, `meta` per 16 features and k32
//! step the 16 words the instruction's metadata operand takes (word
//! `2q + p` for lanes `4q + p`: the low half the indices of feature `q`,
//! the high half those of feature `q + 8`, half `p` of the k32 step).
//! That is `mma.sp` m16n8k32's layout, which is also `wgmma.sp`'s for
//! f16 with sparsity selector 0: warp `w` of a warpgroup reads the
//! metadata of the m64 tile's features `16w … 16w+15` (PTX ISA, "sparse
//! wgmma metadata", f16/bf16).
//! `x` is f16 `m × k` at row pitch `lda` (a multiple of 8, 16-byte
//! aligned), `y` f32 `y[r·ldc + f]`.
//!
//! Launch: grid `[⌈n/128⌉·⌈m/bn⌉, 1, 1]` in `gemm_wgmma`'s grouped order
//! ([`GROUP`] feature tiles per group), block `[256, 1, 1]`, dynamic
//! shared memory [`SpWgTile::smem_bytes`].
//!
//! Code shape: a block of two warpgroups computes 128 features × `bn`
//! rows, warpgroup `g` features `64g … 64g+63`, as one `m64n{bn}`
//! accumulator (`bn/2` f32 registers per thread). A k-tile is 128 of k:
//! its stage in the ring (1024-byte aligned) holds
//! - the values tile: 128 features × 64 kept halves, one 128-byte row per
//!   feature with the 128-byte swizzle (16-byte chunk `c` of row `r` at
//!   `c ^ (r % 8)`), exactly the dense kernel's A tile: the sparse
//!   operand's descriptor describes the compressed m64 × k16 matrix of
//!   each k32 step, which starts 32 bytes further into the rows;
//! - the activation tile: two 128-byte-swizzled halves of `bn` rows × 64
//!   k (k 0–63, then 64–127), K-major like the dense B tile; k32 step `s`
//!   reads half `s / 2` starting `64·(s % 2)` bytes into its rows;
//! - the metadata tile: per 16 features the 4 k32 steps' 64 bytes (2 KiB).
//!
//! Every thread copies with `cp.async` (activation rows past `m` and k
//! past `k` zero-filled through the source size; the weight is padded)
//! and every thread multiplies, with the dense kernel's pipeline:
//! `stages − 2` k-tiles in flight, one barrier per k-tile, four `wgmma.sp`
//! per k-tile committed as one group, `wgmma.wait_group 1` so the tile's
//! products run while the next one is waited for and copied. Each
//! thread's metadata word of a k32 step is read from shared memory
//! before `wgmma.fence`; the four steps' descriptors, metadata words and
//! scale-d pass through one empty assembly statement before the fence,
//! so no instruction between the fence and the wgmmas defines one of
//! their inputs (ptxas would serialize the wgmmas; the PTX tests check
//! it does not).
//!
//! A running `wgmma.sp` reads its metadata register, and ptxas does not
//! keep that register from being reused as it does the accumulators: so
//! the loop body is two k-tiles, and each tile's metadata words are
//! inputs of the `wait_group 1` that retires it (the next tile's, or the
//! final `wait_group 0`). Live until then, the two tiles' words sit in
//! distinct registers, and neither the next tile's metadata loads nor the
//! copies' address arithmetic land in the registers of the tile in
//! flight (they did, with one body per k-tile: wrong sums on the H200 for
//! every product past a few k-tiles).
//!
//! The epilogue: accumulator register `4j + 2h + e` of lane `l` of warp
//! `w` in warpgroup `g` is feature `f0 + 64g + 16w + l/4 + 8h`, row `r0 +
//! 8j + 2(l % 4) + e`. That fragment runs across y's rows (features are
//! the instruction's M), so a thread's neighbours in y are other lanes'.
//! With [`SpWgTile::staged`] (the default tiles) the accumulators go
//! through shared memory first: after every copy has landed and a
//! barrier, each thread writes its fragment into an f32 tile of `bn` rows
//! × 128 features at the ring's start (rows `STAGING_PITCH` bytes
//! apart, padded so that one store's 4 rows × 8 features hit 32 banks), a
//! second barrier, then warp `w` takes rows `w, w + 8, …` and lane `l`
//! features `4l … 4l + 3` of each: one 16-byte shared load, `+ bias[f]`,
//! relu, the [`GemmEpilogue`] expression, one 16-byte store of y and one
//! 8-byte store of the half copy, so a warp writes 512 contiguous bytes
//! of a row (element by element, each guarded, where `n` or `ldc` is not
//! a multiple of 4). Without it, each thread stores its fragment as it
//! lies: one f32 (and one half) per store, 8 features of 4 rows per
//! warp store. Either way only `row < m` and `f < n` are stored.
//!
//! Invariants: sm_90a only; `k` a positive multiple of 32; `m`, `n`, `k`,
//! `lda`, `ldc` below 2^31; no load leaves its tensor (zero-filled
//! chunks read 0 bytes at the tensor's start); the accumulators pass
//! through every `wgmma`, fence and wait as tied inline-assembly operands.

use super::super::gemm_epilogue::{self, EpiFn};
use super::super::{AMode, GemmEpilogue, GemmSpec, Geometry, HalfCopy};
use super::tiled::SpGemmSpec;
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;

/// Features per block (two warpgroups of m64).
pub const BM: u32 = 128;
/// k per k-tile (64 kept halves: one 128-byte row of values).
pub const BK: u32 = 128;
/// Threads of a block.
const THREADS: u32 = 256;
/// Bytes of the values tile of a stage.
const A_BYTES: u32 = BM * 128;
/// Bytes of the metadata tile of a stage: 64 bytes per 16 features and
/// k32 step.
const META_BYTES: u32 = BM / 16 * (BK / 32) * 64;
/// Slack for aligning the ring to 1024 bytes at run time.
const ALIGN: u32 = 1024;
/// Feature tiles per block group (as `gemm_wgmma`'s `GROUP`).
pub const GROUP: u64 = 16;
/// Most dynamic shared memory of an sm_90 block.
const SMEM_MAX: u32 = 227 * 1024;
/// Bytes per row of the staged epilogue's f32 tile: 128 features and 4
/// floats of padding, so that the rows one fragment store covers (rows
/// `2·(lane % 4)`, 8 apart in banks) fall in distinct banks.
const STAGING_PITCH: u32 = (BM + 4) * 4;
/// Multiprocessors of an H200.
const SMS: u64 = 132;

/// The tiling of one kernel: 128 features × `bn` activation rows, k-tiles
/// of [`BK`], a ring of `stages` stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpWgTile {
    pub bn: u32,
    pub stages: u32,
    /// The epilogue goes through shared memory (module doc): whole rows
    /// of y per warp, four features per thread, vector stores. Without
    /// it each thread stores its accumulator fragment as it lies, one
    /// element per store.
    pub staged: bool,
}

impl SpWgTile {
    /// 128×128, four stages (201 KiB): the throughput tile.
    pub const WIDE: SpWgTile = SpWgTile { bn: 128, stages: 4, staged: true };
    /// 128×64, six stages (205 KiB): for products with few 128×128 tiles.
    pub const NARROW: SpWgTile = SpWgTile { bn: 64, stages: 6, staged: true };
    /// 128×192, three stages (199 KiB): fewer, longer blocks where the
    /// 128×128 tile leaves the last wave of blocks partly empty.
    pub const TALL: SpWgTile = SpWgTile { bn: 192, stages: 3, staged: true };
    /// Tiles the GPU check times (to pick the defaults by measurement):
    /// besides the three above, 128×128 in three stages, and the 128×128
    /// and 128×192 tiles with the fragment epilogue.
    /// (128×64 in three stages, two blocks per multiprocessor, is left
    /// out: ptxas serialized its wgmmas when one loop body held one
    /// k-tile.)
    pub const CANDIDATES: [SpWgTile; 6] = [
        SpWgTile::WIDE,
        SpWgTile::NARROW,
        SpWgTile { bn: 128, stages: 3, staged: true },
        SpWgTile::TALL,
        SpWgTile { staged: false, ..SpWgTile::WIDE },
        SpWgTile { staged: false, ..SpWgTile::TALL },
    ];

    /// Bytes of the activation tile of a stage (two halves of `bn` rows
    /// of 128 bytes).
    fn b_bytes(&self) -> u32 {
        self.bn * 256
    }

    fn stage_bytes(&self) -> u32 {
        A_BYTES + self.b_bytes() + META_BYTES
    }

    /// Dynamic shared memory of a kernel with this tile, in bytes.
    pub fn smem_bytes(&self) -> u32 {
        self.stages * self.stage_bytes() + ALIGN
    }

    /// Features of the padded weight for `n` features.
    pub fn n_pad(&self, n: u64) -> u64 {
        n.next_multiple_of(BM as u64)
    }

    /// k of the padded weight for reduction length `k`.
    pub fn k_pad(&self, k: u64) -> u64 {
        k.next_multiple_of(BK as u64)
    }

    /// Blocks of a launch of `spec` with this tile.
    pub fn blocks(&self, spec: &SpGemmSpec) -> u64 {
        spec.n.div_ceil(BM as u64) * spec.m.div_ceil(self.bn as u64)
    }

    /// Checks the tile is one the generator handles: `bn` 64, 128, 192 or
    /// 256 (whole 16-byte activation chunks per thread, wgmma's N), 3 to
    /// 8 stages within sm_90's 227 KiB.
    pub fn check(&self) -> Result<(), String> {
        let t = *self;
        if t.bn == 0 || t.bn > 256 || !t.bn.is_multiple_of(64) || !(3..=8).contains(&t.stages) {
            return Err(format!("unsupported wgmma.sp tile {t:?}"));
        }
        if t.staged && t.bn * STAGING_PITCH > t.stages * t.stage_bytes() {
            return Err(format!("wgmma.sp tile {t:?}: its staged epilogue does not fit the ring"));
        }
        if t.smem_bytes() > SMEM_MAX {
            return Err(format!(
                "wgmma.sp tile {t:?} needs {} bytes of shared memory, more than 227 KiB",
                t.smem_bytes()
            ));
        }
        Ok(())
    }
}

/// [`SpWgTile::TALL`]'s dense-equivalent rate over [`SpWgTile::WIDE`]'s once both
/// fill the GPU: 754–776 against 853–878 TFLOP/s at 8192³ on an H200
/// (`gemm_sp.py --wgmma --time`, docs/performance.md).
const TALL_RATE: f64 = 0.88;

/// The tile [`gemm_sp_wgmma`] uses: [`SpWgTile::NARROW`] when the 128×128
/// tile gives fewer than half the multiprocessors a block; else
/// [`SpWgTile::TALL`] where its fuller waves outweigh its slower rate (BERT's
/// 4096 × 768 products: 192 blocks of 128×128 are two waves of 132, the
/// second 45% full; 132 blocks of 128×192 are one), else
/// [`SpWgTile::WIDE`].
pub fn choose_sp_wg_tile(spec: &SpGemmSpec) -> SpWgTile {
    let wide = SpWgTile::WIDE;
    if wide.blocks(spec) < SMS / 2 {
        return SpWgTile::NARROW;
    }
    // The share of the launch's waves that blocks occupy.
    let fill = |t: SpWgTile| {
        let b = t.blocks(spec);
        b as f64 / (b.div_ceil(SMS) * SMS) as f64
    };
    if fill(SpWgTile::TALL) * TALL_RATE > fill(wide) {
        SpWgTile::TALL
    } else {
        wide
    }
}

const I31: u64 = i32::MAX as u64;

/// Appends kernel `name` computing `spec` with `tile` (with an optional
/// pointwise epilogue); returns its launch. See the module doc.
pub fn gemm_sp_wgmma(
    m: &mut ModuleText,
    name: &str,
    spec: &SpGemmSpec,
    tile: SpWgTile,
    sm: Sm,
    epi: Option<&GemmEpilogue>,
) -> Result<Geometry, String> {
    gemm_sp_wgmma_with(m, name, spec, tile, sm, epi, None)
}

/// [`gemm_sp_wgmma`] that also writes a [`HalfCopy`] of y (dense, `m × n`)
/// through one more parameter after all others, for the next layer's
/// `wgmma` A operand; with `keep_f32` false it stores only the copy.
pub fn gemm_sp_wgmma_with(
    m: &mut ModuleText,
    name: &str,
    spec: &SpGemmSpec,
    tile: SpWgTile,
    sm: Sm,
    epi: Option<&GemmEpilogue>,
    half: Option<HalfCopy>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if half.is_some() && spec.ldc != spec.n {
        return Err(format!("{name}: a half copy of y needs a dense y"));
    }
    if sm != Sm::Sm90a {
        return Err(format!("{name}: wgmma.sp needs sm_90a, target is {sm}"));
    }
    tile.check()?;
    let s = *spec;
    if s.k == 0 || !s.k.is_multiple_of(32) {
        return Err(format!(
            "{name}: the reduction length {} must be a positive multiple of 32",
            s.k
        ));
    }
    if [s.m, s.n, s.k, s.lda, s.ldc].iter().any(|&v| v > I31)
        || s.lda < s.k
        || !s.lda.is_multiple_of(8)
        || s.ldc < s.n
    {
        return Err(format!("{name}: unsupported sparse product {s:?}"));
    }
    let blocks = tile.blocks(&s);
    if blocks > I31 {
        return Err(format!(
            "{name}: {}x{} needs {blocks} blocks, more than a launch holds",
            s.m, s.n
        ));
    }
    // The epilogue's operands index C as a GEMM's do: (batch 0, row, feature).
    let as_gemm = GemmSpec {
        batch: 1,
        m: s.m,
        n: s.n,
        k: s.k,
        a: AMode::Strided {
            batch: 0,
            row: s.lda,
            col: 1,
        },
        b_strides: [0, s.n, 1],
        c_strides: [0, s.ldc, 1],
        bias: s.bias.then_some(0),
        relu: s.relu,
        aligned16: true,
    };
    let mut sig: Vec<String> = ["x", "values", "meta"]
        .iter()
        .map(|p| format!("ptr addrspace(1) noalias readonly %{p}"))
        .collect();
    if s.bias {
        sig.push("ptr addrspace(1) noalias readonly %bias".to_string());
    }
    sig.push("ptr addrspace(1) noalias %y".to_string());
    let epi_fn = match epi {
        Some(e) => {
            gemm_epilogue::check(&as_gemm, e)?;
            sig.extend(
                (1..=e.strides.len()).map(|k| format!("ptr addrspace(1) noalias readonly %e{k}")),
            );
            let f = format!("{name}_epi");
            crate::pointwise::define_epilogue(m, &f, e)?;
            Some((f, e.strides.clone()))
        }
        None => None,
    };
    if half.is_some() {
        sig.push("ptr addrspace(1) noalias %h".to_string());
    }
    if s.m == 0 || s.n == 0 {
        m.func(format!(
            "define ptx_kernel void @{name}({}) {{\nentry:\n  ret void\n}}\n",
            sig.join(", ")
        ));
        return Ok(Geometry {
            grid: [1, 1, 1],
            block: [THREADS, 1, 1],
            smem: 0,
        });
    }
    declare(m);
    let mut g = Gen {
        b: Body::new(),
        s,
        t: tile,
        epi: epi_fn,
        half,
        tid: String::new(),
        acc: String::new(),
    };
    g.kernel();
    m.func(format!(
        "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{THREADS}\" {{\nentry:\n{}}}\n",
        sig.join(", "),
        g.b.into_text()
    ));
    Ok(Geometry {
        grid: [blocks as u32, 1, 1],
        block: [THREADS, 1, 1],
        smem: tile.smem_bytes(),
    })
}

fn declare(m: &mut ModuleText) {
    for d in [
        "@aoc_wg_smem = external addrspace(3) global [0 x i8], align 1024",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare i32 @llvm.smin.i32(i32, i32)",
        "declare float @llvm.maximum.f32(float, float)",
        "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    ] {
        m.declare(d);
    }
}

/// One 16-byte chunk a thread copies per k-tile: its byte offset within a
/// stage, its global byte offset at k-tile 0 (i64) and per k-tile, and
/// (activations only) the row-in-range predicate and the chunk's k column.
struct Chunk {
    base: &'static str,
    smem: String,
    global: String,
    per_kt: u64,
    act: Option<(String, String)>,
    /// The chunk exists (the metadata tile has fewer chunks than threads).
    exists: Option<String>,
}

struct Gen {
    b: Body,
    s: SpGemmSpec,
    t: SpWgTile,
    epi: Option<EpiFn>,
    /// Stores of y also write a half copy through `%h`.
    half: Option<HalfCopy>,
    tid: String,
    acc: String,
}

impl Gen {
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

    fn acc_ptr(&mut self, i: u32) -> String {
        let (n, acc) = (self.nacc(), self.acc.clone());
        self.v(format!(
            "getelementptr inbounds [{n} x float], ptr {acc}, i32 0, i32 {i}"
        ))
    }

    fn smem(&mut self, off: &str) -> String {
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(3) @aoc_wg_smem, i32 {off}"
        ))
    }

    fn kernel(&mut self) {
        let (t, s) = (self.t, self.s);
        let nacc = self.nacc();
        self.acc = self.v(format!("alloca [{nacc} x float], align 4"));
        let ktp = self.v("alloca i32, align 4");
        self.tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
        let bx = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
        // Grouped raster order: GROUP feature tiles share their rows' x.
        let ntf = s.n.div_ceil(BM as u64);
        let ntr = s.m.div_ceil(t.bn as u64);
        let per = GROUP * ntr;
        let gid = self.v(format!("udiv i32 {bx}, {per}"));
        let first = self.v(format!("mul i32 {gid}, {GROUP}"));
        let left = self.v(format!("sub i32 {ntf}, {first}"));
        let gsz = self.v(format!("call i32 @llvm.smin.i32(i32 {left}, i32 {GROUP})"));
        let r = self.v(format!("urem i32 {bx}, {per}"));
        let fi = self.v(format!("urem i32 {r}, {gsz}"));
        let ft = self.v(format!("add i32 {first}, {fi}"));
        let rt = self.v(format!("udiv i32 {r}, {gsz}"));
        let f0 = self.v(format!("mul i32 {ft}, {BM}"));
        let r0 = self.v(format!("mul i32 {rt}, {}", t.bn));
        for i in 0..nacc {
            let p = self.acc_ptr(i);
            self.ins(format!("store float 0.0, ptr {p}, align 4"));
        }
        self.mainloop(&f0, &r0, &ktp);
        if t.staged {
            self.epilogue_staged(&f0, &r0);
        } else {
            self.epilogue(&f0, &r0);
        }
        self.ins("ret void");
    }

    /// This thread's chunks of a k-tile (module doc): 4 of values, `bn/16`
    /// of activations, at most one of metadata; `ring` is the byte offset
    /// of the aligned ring from `@aoc_wg_smem`.
    fn chunks(&mut self, f0: &str, r0: &str, ring: &str) -> Vec<Chunk> {
        let (t, s) = (self.t, self.s);
        let tid = self.tid.clone();
        let k_pad = t.k_pad(s.k);
        let mut out = Vec::new();
        // Values: rows tid/8 + 32i, chunk c = tid % 8 at c ^ (row % 8).
        let c = self.v(format!("and i32 {tid}, 7"));
        let vr = self.v(format!("lshr i32 {tid}, 3"));
        let sw = self.v(format!("and i32 {vr}, 7"));
        let sw = self.v(format!("xor i32 {c}, {sw}"));
        let sw = self.v(format!("shl i32 {sw}, 4"));
        let c16 = self.v(format!("shl i32 {c}, 4"));
        let c16 = self.v(format!("zext i32 {c16} to i64"));
        for i in 0..BM * 8 / THREADS {
            let row = self.v(format!("add i32 {vr}, {}", 32 * i));
            let so = self.v(format!("shl i32 {row}, 7"));
            let so = self.v(format!("add i32 {so}, {sw}"));
            let so = self.v(format!("add i32 {so}, {ring}"));
            let f = self.v(format!("add i32 {f0}, {row}"));
            let f = self.v(format!("zext i32 {f} to i64"));
            // A row of values is k_pad/2 halves: k_pad bytes.
            let go = self.v(format!("mul i64 {f}, {k_pad}"));
            let go = self.v(format!("add i64 {go}, {c16}"));
            out.push(Chunk {
                base: "%values",
                smem: so,
                global: go,
                per_kt: 128,
                act: None,
                exists: None,
            });
        }
        // Activations: rows tid/16 + 16i, 16-byte chunk cc = tid % 16 of
        // the row's 256 bytes: half cc/8, chunk cc % 8 at (cc % 8) ^ (row % 8).
        let cc = self.v(format!("and i32 {tid}, 15"));
        let ar = self.v(format!("lshr i32 {tid}, 4"));
        let half = self.v(format!("lshr i32 {cc}, 3"));
        let hoff = self.v(format!("mul i32 {half}, {}", t.bn * 128));
        let ch = self.v(format!("and i32 {cc}, 7"));
        let sw = self.v(format!("and i32 {ar}, 7"));
        let sw = self.v(format!("xor i32 {ch}, {sw}"));
        let sw = self.v(format!("shl i32 {sw}, 4"));
        let k0 = self.v(format!("shl i32 {cc}, 3"));
        let cb = self.v(format!("shl i32 {cc}, 4"));
        let cb = self.v(format!("zext i32 {cb} to i64"));
        for i in 0..t.bn * 16 / THREADS {
            let row = self.v(format!("add i32 {ar}, {}", 16 * i));
            let so = self.v(format!("shl i32 {row}, 7"));
            let so = self.v(format!("add i32 {so}, {sw}"));
            let so = self.v(format!("add i32 {so}, {hoff}"));
            let so = self.v(format!("add i32 {so}, {}", A_BYTES));
            let so = self.v(format!("add i32 {so}, {ring}"));
            let rr = self.v(format!("add i32 {r0}, {row}"));
            let ok = self.v(format!("icmp ult i32 {rr}, {}", s.m));
            let rr = self.v(format!("zext i32 {rr} to i64"));
            let go = self.v(format!("mul i64 {rr}, {}", s.lda * 2));
            let go = self.v(format!("add i64 {go}, {cb}"));
            out.push(Chunk {
                base: "%x",
                smem: so,
                global: go,
                per_kt: 2 * BK as u64,
                act: Some((ok, k0.clone())),
                exists: None,
            });
        }
        // Metadata: chunk tid (< 128) is chunk tid % 16 of the 256 bytes
        // of 16-feature tile tid / 16 (its 4 k32 steps, contiguous in
        // `meta`, which holds each 16-feature tile's k32 steps in a row).
        let mc = META_BYTES / 16;
        let exists = self.v(format!("icmp ult i32 {tid}, {mc}"));
        let f16 = self.v(format!("lshr i32 {tid}, 4"));
        let within = self.v(format!("and i32 {tid}, 15"));
        let so = self.v(format!("shl i32 {tid}, 4"));
        let so = self.v(format!("add i32 {so}, {}", A_BYTES + t.b_bytes()));
        let so = self.v(format!("add i32 {so}, {ring}"));
        let ftile = self.v(format!("lshr i32 {f0}, 4"));
        let ftile = self.v(format!("add i32 {ftile}, {f16}"));
        let ftile = self.v(format!("select i1 {exists}, i32 {ftile}, i32 0"));
        let ftile = self.v(format!("zext i32 {ftile} to i64"));
        let go = self.v(format!("mul i64 {ftile}, {}", k_pad / 32 * 64));
        let wb = self.v(format!("shl i32 {within}, 4"));
        let wb = self.v(format!("zext i32 {wb} to i64"));
        let go = self.v(format!("add i64 {go}, {wb}"));
        out.push(Chunk {
            base: "%meta",
            smem: so,
            global: go,
            per_kt: (BK / 32 * 64) as u64,
            act: None,
            exists: Some(exists),
        });
        out
    }

    /// `cp.async` (not committed) of k-tile `kt` (i32 value or constant)
    /// into the stage at byte `stage` (i32 value or constant).
    fn issue(&mut self, chunks: &[Chunk], kt: &str, stage: &str) {
        let kt64 = self.v(format!("zext i32 {kt} to i64"));
        for c in chunks {
            let step = self.v(format!("mul i64 {kt64}, {}", c.per_kt));
            let go = self.v(format!("add i64 {}, {step}", c.global));
            let so = self.v(format!("add i32 {}, {stage}", c.smem));
            let dst = self.smem(&so);
            let (go, size) = match &c.act {
                None => (go, "16".to_string()),
                Some((row_ok, k0)) => {
                    let kk = self.v(format!("mul i32 {kt}, {BK}"));
                    let kk = self.v(format!("add i32 {kk}, {k0}"));
                    let kok = self.v(format!("icmp ult i32 {kk}, {}", self.s.k));
                    let ok = self.v(format!("and i1 {row_ok}, {kok}"));
                    let go = self.v(format!("select i1 {ok}, i64 {go}, i64 0"));
                    (go, self.v(format!("select i1 {ok}, i32 16, i32 0")))
                }
            };
            let src = self.v(format!(
                "getelementptr inbounds i8, ptr addrspace(1) {}, i64 {go}",
                c.base
            ));
            let text = format!(
                "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {src}, i32 {size})"
            );
            match &c.exists {
                None => self.ins(text),
                Some(e) => {
                    let (l, j) = (self.b.label("cp"), self.b.label("cp.end"));
                    self.b.cond_br(e, &l, &j);
                    self.b.place(&l);
                    self.ins(text);
                    self.b.br(&j);
                    self.b.place(&j);
                }
            }
        }
    }

    /// The byte offset of k-tile `kt`'s stage within the ring.
    fn stage_of(&mut self, kt: &str) -> String {
        let j = self.v(format!("urem i32 {kt}, {}", self.t.stages));
        self.v(format!("mul i32 {j}, {}", self.t.stage_bytes()))
    }

    /// Prologue and k loop (module doc).
    fn mainloop(&mut self, f0: &str, r0: &str, ktp: &str) {
        let t = self.t;
        let ktiles = t.k_pad(self.s.k) / BK as u64;
        let base = self.v("ptrtoint ptr addrspace(3) @aoc_wg_smem to i32");
        let abs = self.v(format!("add i32 {base}, {}", ALIGN - 1));
        let abs = self.v(format!("and i32 {abs}, {}", !(ALIGN - 1) as i32));
        let ring = self.v(format!("sub i32 {abs}, {base}"));
        let chunks = self.chunks(f0, r0, &ring);
        let tid = self.tid.clone();
        let wg = self.v(format!("lshr i32 {tid}, 7"));
        let a_wg = self.v(format!("mul i32 {wg}, {}", 64 * 128));
        // This thread's metadata word within a stage's metadata tile:
        // 16-feature tile 4g + w (= tid / 32), word 2q + (lane & 1).
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let q = self.v(format!("lshr i32 {lane}, 2"));
        let p = self.v(format!("and i32 {lane}, 1"));
        let word = self.v(format!("shl i32 {q}, 1"));
        let word = self.v(format!("or i32 {word}, {p}"));
        let word = self.v(format!("shl i32 {word}, 2"));
        let mt = self.v(format!("mul i32 {warp}, {}", BK / 32 * 64));
        let moff = self.v(format!("add i32 {mt}, {word}"));
        let moff = self.v(format!("add i32 {moff}, {}", A_BYTES + t.b_bytes()));
        let moff = self.v(format!("add i32 {moff}, {ring}"));
        for j in 0..t.stages - 2 {
            if (j as u64) < ktiles {
                let st = (j * t.stage_bytes()).to_string();
                self.issue(&chunks, &j.to_string(), &st);
            }
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        // The metadata words of the tile in flight, kept live until the
        // wait that retires it (module doc: the loop body is two k-tiles).
        let nm = (BK / 32) as usize;
        let mlive = self.v(format!("alloca [{nm} x i32], align 4"));
        let mptr = |g: &mut Self, i: usize| g.v(format!("getelementptr inbounds [{nm} x i32], ptr {mlive}, i32 0, i32 {i}"));
        for i in 0..nm {
            let p = mptr(self, i);
            self.ins(format!("store i32 0, ptr {p}, align 4"));
        }
        let load_m = |g: &mut Self| -> Vec<String> {
            (0..nm)
                .map(|i| {
                    let p = mptr(g, i);
                    g.v(format!("load i32, ptr {p}, align 4"))
                })
                .collect()
        };
        let store_m = |g: &mut Self, m: &[String]| {
            for (i, x) in m.iter().enumerate() {
                let p = mptr(g, i);
                g.ins(format!("store i32 {x}, ptr {p}, align 4"));
            }
        };
        let (l_loop, l_odd, l_drain) = (self.b.label("loop"), self.b.label("loop.odd"), self.b.label("drain"));
        self.b.br(&l_loop);
        self.b.place(&l_loop);
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        let prev = load_m(self);
        let ma = self.k_tile(&chunks, &kt, &prev, &abs, &a_wg, &moff, ktiles);
        store_m(self, &ma);
        let k1 = self.v(format!("add i32 {kt}, 1"));
        let more = self.v(format!("icmp ult i32 {k1}, {ktiles}"));
        self.b.cond_br(&more, &l_odd, &l_drain);
        self.b.place(&l_odd);
        let mb = self.k_tile(&chunks, &k1, &ma, &abs, &a_wg, &moff, ktiles);
        store_m(self, &mb);
        let k2 = self.v(format!("add i32 {kt}, 2"));
        self.ins(format!("store i32 {k2}, ptr {ktp}, align 4"));
        let more = self.v(format!("icmp ult i32 {k2}, {ktiles}"));
        self.b.cond_br(&more, &l_loop, &l_drain);
        self.b.place(&l_drain);
        let last = load_m(self);
        let extra: Vec<(&str, String)> = last.iter().map(|e| ("r", format!("i32 {e}"))).collect();
        let accs = self.load_acc();
        let accs = self.tied("wgmma.wait_group.sync.aligned 0;", &accs, &extra);
        self.store_acc(&accs);
    }

    /// One k-tile of the loop (module doc): wait for its copies, the
    /// barrier, the copies of tile `kt + stages − 2`, its metadata words
    /// and four `wgmma.sp`, committed; then `wait_group 1`, which retires
    /// the previous tile, whose metadata words `prev` it takes as inputs
    /// (they stay in their registers until then). Returns this tile's
    /// metadata words as the wgmmas read them.
    #[allow(clippy::too_many_arguments)]
    fn k_tile(
        &mut self,
        chunks: &[Chunk],
        kt: &str,
        prev: &[String],
        abs: &str,
        a_wg: &str,
        moff: &str,
        ktiles: u64,
    ) -> Vec<String> {
        let t = self.t;
        // Descriptor bits other than the address: leading byte offset 16
        // (>> 4 = 1), stride byte offset 1024 (>> 4 = 64), 128-byte swizzle.
        let bits: u64 = (1 << 16) | (64 << 32) | (1 << 62);
        self.ins(format!(
            "call void @llvm.nvvm.cp.async.wait.group(i32 {})",
            t.stages - 3
        ));
        self.ins("call void asm sideeffect \"fence.proxy.async.shared::cta;\", \"~{memory}\"() convergent");
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        let far = self.v(format!("add i32 {kt}, {}", t.stages - 2));
        let has_far = self.v(format!("icmp ult i32 {far}, {ktiles}"));
        let fstage = self.stage_of(&far);
        let (l_copy, l_end) = (self.b.label("copy"), self.b.label("copy.end"));
        self.b.cond_br(&has_far, &l_copy, &l_end);
        self.b.place(&l_copy);
        self.issue(chunks, &far, &fstage);
        self.b.br(&l_end);
        self.b.place(&l_end);
        self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        let cstage = self.stage_of(kt);
        let a = self.v(format!("add i32 {abs}, {cstage}"));
        let a = self.v(format!("add i32 {a}, {a_wg}"));
        let bsm = self.v(format!("add i32 {abs}, {cstage}"));
        let bsm = self.v(format!("add i32 {bsm}, {A_BYTES}"));
        let desc = |g: &mut Self, addr: &str| {
            let x = g.v(format!("lshr i32 {addr}, 4"));
            let x = g.v(format!("and i32 {x}, 16383"));
            let x = g.v(format!("zext i32 {x} to i64"));
            g.v(format!("or i64 {x}, {}", bits as i64))
        };
        let da = desc(self, &a);
        let db = desc(self, &bsm);
        // Metadata words of the four k32 steps, read before the fence.
        let mbase = self.v(format!("add i32 {moff}, {cstage}"));
        let metas: Vec<String> = (0..BK / 32)
            .map(|s| {
                let o = self.v(format!("add i32 {mbase}, {}", 64 * s));
                let ptr = self.smem(&o);
                self.v(format!("load i32, ptr addrspace(3) {ptr}, align 4"))
            })
            .collect();
        // Every step's descriptors, computed here and pinned with the
        // metadata through one empty assembly statement before the fence:
        // no instruction between the fence and the wgmmas defines one of
        // their inputs (ptxas serializes the wgmmas otherwise).
        let mut ins: Vec<(&str, String)> = Vec::new();
        for s in 0..BK / 32 {
            // Values: 32 bytes per k32 step (>> 4 = 2). Activations: half
            // s / 2 (bn rows of 128 bytes further), 64 bytes in for odd s.
            let a = self.v(format!("add i64 {da}, {}", 2 * s));
            let boff = (s / 2) * t.bn * 128 / 16 + 4 * (s % 2);
            let b = self.v(format!("add i64 {db}, {boff}"));
            ins.push(("l", a));
            ins.push(("l", b));
        }
        ins.extend(metas.iter().map(|e| ("r", e.clone())));
        // Scale-d 1 (D = A·B + D), a register the wgmma's predicate is set from.
        ins.push(("r", "1".to_string()));
        let pinned = self.pin(&ins);
        let mut accs = self.load_acc();
        accs = self.tied("wgmma.fence.sync.aligned;", &accs, &[]);
        for s in 0..(BK / 32) as usize {
            let (a, b, e) = (&pinned[2 * s], &pinned[2 * s + 1], &pinned[8 + s]);
            accs = self.wgmma_sp(&accs, a, b, e, &pinned[12]);
        }
        self.ins("call void asm sideeffect \"wgmma.commit_group.sync.aligned;\", \"~{memory}\"() convergent");
        let extra: Vec<(&str, String)> = prev.iter().map(|e| ("r", format!("i32 {e}"))).collect();
        accs = self.tied("wgmma.wait_group.sync.aligned 1;", &accs, &extra);
        self.store_acc(&accs);
        pinned[8..8 + (BK / 32) as usize].to_vec()
    }

    /// `values` (constraint `l` for i64, `r` for i32, and the value)
    /// through an empty assembly statement: the same values, defined by
    /// it, so their computation stays before it.
    fn pin(&mut self, values: &[(&str, String)]) -> Vec<String> {
        let ty_of = |c: &str| if c == "l" { "i64" } else { "i32" };
        let ty = format!("{{ {} }}", values.iter().map(|(c, _)| ty_of(c)).collect::<Vec<_>>().join(", "));
        let mut cons: Vec<String> = values.iter().map(|(c, _)| format!("={c}")).collect();
        cons.extend((0..values.len()).map(|i| i.to_string()));
        let args: Vec<String> = values.iter().map(|(c, v)| format!("{} {v}", ty_of(c))).collect();
        let r = self.v(format!("call {ty} asm sideeffect \"\", \"{}\"({}) convergent", cons.join(","), args.join(", ")));
        (0..values.len()).map(|i| self.v(format!("extractvalue {ty} {r}, {i}"))).collect()
    }

    fn load_acc(&mut self) -> Vec<String> {
        (0..self.nacc())
            .map(|i| {
                let p = self.acc_ptr(i);
                self.v(format!("load float, ptr {p}, align 4"))
            })
            .collect()
    }

    fn store_acc(&mut self, accs: &[String]) {
        for (i, x) in accs.iter().enumerate() {
            let p = self.acc_ptr(i as u32);
            self.ins(format!("store float {x}, ptr {p}, align 4"));
        }
    }

    /// Inline assembly `text` that takes the accumulators and gives them
    /// back in the same registers (operands `$0 … $(n-1)`), with `extra`
    /// inputs `(constraint, typed value)` as `$n …`.
    fn tied(&mut self, text: &str, accs: &[String], extra: &[(&str, String)]) -> Vec<String> {
        let n = accs.len();
        let ty = format!("{{ {} }}", vec!["float"; n].join(", "));
        let mut cons: Vec<String> = vec!["=f".to_string(); n];
        cons.extend(extra.iter().map(|(c, _)| c.to_string()));
        cons.extend((0..n).map(|i| i.to_string()));
        cons.push("~{memory}".to_string());
        let args: Vec<String> = extra
            .iter()
            .map(|(_, v)| v.clone())
            .chain(accs.iter().map(|a| format!("float {a}")))
            .collect();
        let r = self.v(format!(
            "call {ty} asm sideeffect \"{text}\", \"{}\"({}) convergent",
            cons.join(","),
            args.join(", ")
        ));
        (0..n)
            .map(|i| self.v(format!("extractvalue {ty} {r}, {i}")))
            .collect()
    }

    /// One `wgmma.mma_async.sp` m64n{bn}k32 (sparsity selector 0, scale-d
    /// from the i32 `one`: 1 for D = A·B + D) accumulating into `accs`.
    fn wgmma_sp(&mut self, accs: &[String], da: &str, db: &str, e: &str, one: &str) -> Vec<String> {
        let n = accs.len();
        let regs: Vec<String> = (0..n).map(|i| format!("${i}")).collect();
        let text = format!(
            "{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, ${}, 0;\\0Awgmma.mma_async.sp.sync.aligned.m64n{}k32.f32.f16.f16 {{{}}}, ${}, ${}, ${}, 0, p, 1, 1, 0, 0;\\0A}}",
            n + 3,
            self.t.bn,
            regs.join(", "),
            n,
            n + 1,
            n + 2
        );
        let extra = [
            ("l", format!("i64 {da}")),
            ("l", format!("i64 {db}")),
            ("r", format!("i32 {e}")),
            ("r", format!("i32 {one}")),
        ];
        self.tied(&text, accs, &extra)
    }

    /// Bias, relu, the epilogue and the guarded stores (module doc).
    fn epilogue(&mut self, f0: &str, r0: &str) {
        let s = self.s;
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let q = self.v(format!("lshr i32 {lane}, 2"));
        let tq = self.v(format!("and i32 {lane}, 3"));
        // warp = 4g + w, so 64g + 16w = 16·warp.
        let col0 = self.v(format!("shl i32 {warp}, 4"));
        let col0 = self.v(format!("add i32 {col0}, {f0}"));
        let col0 = self.v(format!("add i32 {col0}, {q}"));
        let tq2 = self.v(format!("shl i32 {tq}, 1"));
        let row0 = self.v(format!("add i32 {r0}, {tq2}"));
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &row0, &col0);
        let mut feats = Vec::new();
        for h in 0..2 {
            let col = self.v(format!("add i32 {col0}, {}", 8 * h));
            let ok = self.v(format!("icmp ult i32 {col}, {}", s.n));
            let c64 = self.v(format!("zext i32 {col} to i64"));
            let bias = s.bias.then(|| {
                let o = self.v(format!("select i1 {ok}, i64 {c64}, i64 0"));
                let p = self.v(format!(
                    "getelementptr float, ptr addrspace(1) %bias, i64 {o}"
                ));
                self.v(format!("load float, ptr addrspace(1) {p}, align 4"))
            });
            feats.push((ok, c64, bias));
        }
        for j in 0..self.t.bn / 8 {
            for e in 0..2 {
                let row = self.v(format!("add i32 {row0}, {}", 8 * j + e));
                let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
                let r64 = self.v(format!("zext i32 {row} to i64"));
                let ro = self.v(format!("mul i64 {r64}, {}", s.ldc));
                for h in 0..2u32 {
                    let ap = self.acc_ptr(4 * j + 2 * h + e);
                    let x = self.v(format!("load float, ptr {ap}, align 4"));
                    let (fok, c64, bias) = feats[h as usize].clone();
                    let x = gemm_epilogue::bias_relu(&mut self.b, x, bias.as_deref(), s.relu);
                    let ok = self.v(format!("and i1 {rok}, {fok}"));
                    let o = self.v(format!("add i64 {ro}, {c64}"));
                    let p = self.v(format!("getelementptr float, ptr addrspace(1) %y, i64 {o}"));
                    let (l, jl) = (self.b.label("st"), self.b.label("st.end"));
                    self.b.cond_br(&ok, &l, &jl);
                    self.b.place(&l);
                    let y = match &self.epi {
                        None => x,
                        Some(_) => gemm_epilogue::value(
                            &mut self.b,
                            self.epi.as_ref(),
                            &x,
                            &ebase,
                            (8 * j + e) as u64,
                            (8 * h) as u64,
                        ),
                    };
                    if self.half.is_none_or(|h| h.keep_f32) {
                        self.ins(format!("store float {y}, ptr addrspace(1) {p}, align 4"));
                    }
                    if let Some(h) = self.half {
                        let bits = h.bits(&mut self.b, &y);
                        let hp = self.v(format!("getelementptr i16, ptr addrspace(1) %h, i64 {o}"));
                        self.ins(format!("store i16 {bits}, ptr addrspace(1) {hp}, align 2"));
                    }
                    self.b.br(&jl);
                    self.b.place(&jl);
                }
            }
        }
    }

    /// The staged epilogue (module doc): the accumulators into an f32
    /// tile of `bn` rows × 128 features at the ring's start, a barrier,
    /// then warp `w` finishes rows `w, w + 8, …`, lane `l` features
    /// `4l … 4l + 3` of each: bias, relu, the epilogue expression, one
    /// 16-byte store of y and one 8-byte store of the half copy where `n`
    /// and `ldc` are multiples of 4, else element by element.
    fn epilogue_staged(&mut self, f0: &str, r0: &str) {
        let s = self.s;
        let tid = self.tid.clone();
        let base = self.v("ptrtoint ptr addrspace(3) @aoc_wg_smem to i32");
        let abs = self.v(format!("add i32 {base}, {}", ALIGN - 1));
        let abs = self.v(format!("and i32 {abs}, {}", !(ALIGN - 1) as i32));
        let ring = self.v(format!("sub i32 {abs}, {base}"));
        // Every copy has landed and every wgmma has read its operands (each
        // warpgroup waited for its own; the barrier covers the other one)
        // before the ring is overwritten.
        self.ins("call void @llvm.nvvm.cp.async.wait.group(i32 0)");
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        // Fragment register 4j + 2h + e: feature 16·warp + q + 8h, row
        // 8j + 2(lane % 4) + e (module doc).
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let q = self.v(format!("lshr i32 {lane}, 2"));
        let tq = self.v(format!("and i32 {lane}, 3"));
        let col = self.v(format!("shl i32 {warp}, 4"));
        let col = self.v(format!("add i32 {col}, {q}"));
        let row = self.v(format!("shl i32 {tq}, 1"));
        let at = self.v(format!("mul i32 {row}, {STAGING_PITCH}"));
        let c4 = self.v(format!("shl i32 {col}, 2"));
        let at = self.v(format!("add i32 {at}, {c4}"));
        let at = self.v(format!("add i32 {at}, {ring}"));
        let accs = self.load_acc();
        for j in 0..self.t.bn / 8 {
            for h in 0..2 {
                for e in 0..2 {
                    let off = (8 * j + e) * STAGING_PITCH + 32 * h;
                    let o = self.v(format!("add i32 {at}, {off}"));
                    let p = self.smem(&o);
                    let x = &accs[(4 * j + 2 * h + e) as usize];
                    self.ins(format!("store float {x}, ptr addrspace(3) {p}, align 4"));
                }
            }
        }
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        // Reading back: this thread's four features and first row.
        let f4 = self.v(format!("shl i32 {lane}, 2"));
        let fcol = self.v(format!("add i32 {f0}, {f4}"));
        let row0 = self.v(format!("add i32 {r0}, {warp}"));
        let rd = self.v(format!("mul i32 {warp}, {STAGING_PITCH}"));
        let l16 = self.v(format!("shl i32 {lane}, 4"));
        let rd = self.v(format!("add i32 {rd}, {l16}"));
        let rd = self.v(format!("add i32 {rd}, {ring}"));
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &row0, &fcol);
        let vec = s.n.is_multiple_of(4) && s.ldc.is_multiple_of(4);
        let mut feats = Vec::new();
        for i in 0..4 {
            let f = self.v(format!("add i32 {fcol}, {i}"));
            let ok = self.v(format!("icmp ult i32 {f}, {}", s.n));
            let f64 = self.v(format!("zext i32 {f} to i64"));
            let bias = s.bias.then(|| {
                let o = self.v(format!("select i1 {ok}, i64 {f64}, i64 0"));
                let p = self.v(format!("getelementptr float, ptr addrspace(1) %bias, i64 {o}"));
                self.v(format!("load float, ptr addrspace(1) {p}, align 4"))
            });
            feats.push((ok, f64, bias));
        }
        for it in 0..self.t.bn / 8 {
            let r = self.v(format!("add i32 {row0}, {}", 8 * it));
            let rok = self.v(format!("icmp ult i32 {r}, {}", s.m));
            // A vector row is stored whole or not at all: with n a
            // multiple of 4, feature 4l is in range exactly when 4l + 3 is.
            let ok = if vec { self.v(format!("and i1 {rok}, {}", feats[0].0)) } else { rok };
            let (l, jl) = (self.b.label("row"), self.b.label("row.end"));
            self.b.cond_br(&ok, &l, &jl);
            self.b.place(&l);
            let o = self.v(format!("add i32 {rd}, {}", 8 * it * STAGING_PITCH));
            let p = self.smem(&o);
            let v = self.v(format!("load <4 x float>, ptr addrspace(3) {p}, align 16"));
            let r64 = self.v(format!("zext i32 {r} to i64"));
            let ro = self.v(format!("mul i64 {r64}, {}", s.ldc));
            let ys: Vec<String> = (0..4)
                .map(|i| {
                    let x = self.v(format!("extractelement <4 x float> {v}, i32 {i}"));
                    let x = gemm_epilogue::bias_relu(&mut self.b, x, feats[i].2.as_deref(), s.relu);
                    match &self.epi {
                        None => x,
                        Some(_) => gemm_epilogue::value(&mut self.b, self.epi.as_ref(), &x, &ebase, (8 * it) as u64, i as u64),
                    }
                })
                .collect();
            if vec {
                let o = self.v(format!("add i64 {ro}, {}", feats[0].1));
                self.store_quad(&ys, &o);
            } else {
                for (i, y) in ys.iter().enumerate() {
                    let (fok, f64, _) = feats[i].clone();
                    let (le, je) = (self.b.label("st"), self.b.label("st.end"));
                    self.b.cond_br(&fok, &le, &je);
                    self.b.place(&le);
                    let o = self.v(format!("add i64 {ro}, {f64}"));
                    self.store_one(y, &o);
                    self.b.br(&je);
                    self.b.place(&je);
                }
            }
            self.b.br(&jl);
            self.b.place(&jl);
        }
    }

    /// Stores finished value `y` at element `o` (i64) of y and of its
    /// half copy, as the tile's outputs say.
    fn store_one(&mut self, y: &str, o: &str) {
        if self.half.is_none_or(|h| h.keep_f32) {
            let p = self.v(format!("getelementptr float, ptr addrspace(1) %y, i64 {o}"));
            self.ins(format!("store float {y}, ptr addrspace(1) {p}, align 4"));
        }
        if let Some(h) = self.half {
            h.store(&mut self.b, y, "%h", o);
        }
    }

    /// Stores four finished values at elements `o … o + 3` (`o` a
    /// multiple of 4) of y (16 bytes) and of its half copy (8 bytes).
    fn store_quad(&mut self, ys: &[String], o: &str) {
        if self.half.is_none_or(|h| h.keep_f32) {
            let mut v = "poison".to_string();
            for (i, y) in ys.iter().enumerate() {
                v = self.v(format!("insertelement <4 x float> {v}, float {y}, i32 {i}"));
            }
            let p = self.v(format!("getelementptr float, ptr addrspace(1) %y, i64 {o}"));
            self.ins(format!("store <4 x float> {v}, ptr addrspace(1) {p}, align 16"));
        }
        if let Some(h) = self.half {
            let mut v = "poison".to_string();
            for (i, y) in ys.iter().enumerate() {
                let bits = h.bits(&mut self.b, y);
                v = self.v(format!("insertelement <4 x i16> {v}, i16 {bits}, i32 {i}"));
            }
            let p = self.v(format!("getelementptr i16, ptr addrspace(1) %h, i64 {o}"));
            self.ins(format!("store <4 x i16> {v}, ptr addrspace(1) {p}, align 8"));
        }
    }
}
