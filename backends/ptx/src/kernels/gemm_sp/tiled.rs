//! The tiled, pipelined 2:4 sparse GEMM (`sparse.matmul` and 1×1
//! `sparse.conv2d` on sm_80+): [`gemm_sp_tiled`] writes one kernel
//! computing `y = x @ wᵀ (+ bias, relu, epilogue)` with
//! `mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32`, the 2:4 weight
//! as the sparse operand A (features are the instruction's M, activation
//! rows its N).
//!
//! Kernel ABI: parameters `x, values, meta, [bias], y, [e1 … ek]`.
//! - `x`: f16, `m × k` at row pitch `lda` elements (a half copy of the
//!   activation), 16-byte aligned, `lda` a multiple of 8.
//! - `values`, `meta`: the weight packed for the tile by [`pack_weight`](super::pack_weight)
//!   (`pack.rs`):
//!   `values` is `n_pad × k_pad/2` f16 (each feature's kept values in k
//!   order, padding zero), `meta` per 16-feature tile and k-tile of 32 the
//!   64 bytes the instruction's metadata operand takes, word `2q + p` for
//!   the lanes `4q + p` (sparsity selector 0: low half the indices of
//!   feature `q`, high half those of feature `q + 8`, half `p` of the
//!   k-tile), so each thread loads its metadata with one 32-bit shared
//!   load per fragment. `n_pad` is `n` rounded up to the tile's features,
//!   `k_pad` is `k` rounded up to its k step: the weight needs no bounds
//!   checks.
//! - `bias` (when `spec.bias`): f32, one per feature.
//! - `y`: f32, `y[r·ldc + f]` for row `r < m`, feature `f < n`; nothing else
//!   is written.
//! - `e1 … ek`: a [`GemmEpilogue`]'s operands, element `(r, f)` at
//!   `r·s1 + f·s2` (its batch stride unused).
//!
//! Launch: grid `[⌈n/bm⌉·⌈m/bn⌉, 1, 1]` (block x is the tile `(x / tiles_f,
//! x % tiles_f)`, so consecutive blocks share their activation rows in L2),
//! block `[32·warps, 1, 1]`, dynamic shared memory [`SpTile::smem_bytes`].
//!
//! Code shape (the dense `gemm_tc`'s, on the sparse instruction): block
//! tile `bm` features × `bn` rows × `bk` of k, warps of `bm/warps_m ×
//! bn/warps_n` as m16n8 fragments; `stages` shared-memory stages filled
//! with `cp.async` (16-byte chunks, zero fill through the source size for
//! rows past `m` and k past `k`) `stages − 1` k-tiles ahead, one barrier
//! per k-tile. A stage holds the values tile (`bm` rows of `bk/2`
//! halves), the activation tile (`bn` rows of `bk` halves), both rows
//! padded by 16 bytes so `ldmatrix` reads distinct banks, and the
//! metadata tile (`bm/16 · bk/32 · 64` bytes). Per k step of 32 a warp
//! loads each A fragment (16 features × 16 kept values) with one
//! `ldmatrix.x4`, each B fragment (8 rows × 32 k) with one `ldmatrix.x4`
//! (the four 8×8 matrices are b0 … b3), each fragment's metadata with one
//! 32-bit load, then issues `mi·ni` `mma.sp`.
//!
//! Invariants: sm_80 and newer; `k` a positive multiple of 32; `m`, `n`,
//! `k`, `lda`, `ldc` below 2^31; every loop over fragments and chunks is
//! unrolled at generation, so accumulators stay in registers; no load
//! leaves its tensor (invalid chunks read zero bytes from the tensor's
//! first element).

use super::super::gemm_epilogue::{self, EpiFn};
use super::super::{AMode, GemmEpilogue, GemmSpec, Geometry};
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;

/// A sparse product `y (m × n) = x (m × k) @ wᵀ (w: n × k, 2:4 along k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpGemmSpec {
    /// Activation rows.
    pub m: u64,
    /// Features (rows of the weight).
    pub n: u64,
    pub k: u64,
    /// Row pitch of `x`, in elements.
    pub lda: u64,
    /// Row pitch of `y`, in elements.
    pub ldc: u64,
    pub bias: bool,
    pub relu: bool,
}

/// The tiling of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpTile {
    /// Features per block.
    pub bm: u32,
    /// Activation rows per block.
    pub bn: u32,
    /// k per stage.
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    /// Blocks per multiprocessor the kernel is built for
    /// (`.minnctapersm`): 2 caps a 256-thread block at 128 registers so
    /// two share a Hopper multiprocessor (the 128×128 tile takes 158
    /// registers otherwise, without spills either way).
    pub min_blocks: u32,
}

const fn tile(bm: u32, bn: u32, bk: u32, warps_m: u32, warps_n: u32, stages: u32) -> SpTile {
    SpTile {
        bm,
        bn,
        bk,
        warps_m,
        warps_n,
        stages,
        min_blocks: 1,
    }
}

const fn two_per_sm(t: SpTile) -> SpTile {
    SpTile { min_blocks: 2, ..t }
}

/// Blocks that fill a large GPU once (an H200 has 132 multiprocessors).
const ENOUGH_BLOCKS: u64 = 132;

impl SpTile {
    /// The tiles [`choose_sp_tile`] picks from, largest first: 128×128
    /// with 8 warps of 64×32 (the dense kernel's), 128×64 and 64×64 with 4
    /// warps, all with k steps of 64 in 3 stages (87, 60 and 44 KiB).
    pub const ALL: [SpTile; 3] = [
        tile(128, 128, 64, 2, 4, 3),
        tile(128, 64, 64, 2, 2, 3),
        tile(64, 64, 64, 2, 2, 3),
    ];

    /// Hopper's 128×128 tile: [`SpTile::ALL`]'s first, two blocks per
    /// multiprocessor (2 × 87 KiB of its 228).
    pub const HOPPER: SpTile = two_per_sm(tile(128, 128, 64, 2, 4, 3));

    /// More tiles the GPU benchmarks time against [`SpTile::ALL`] (one
    /// block per multiprocessor, a deeper ring, shorter k steps), to pick
    /// the defaults by measurement.
    pub const CANDIDATES: [SpTile; 5] = [
        SpTile::HOPPER,
        tile(128, 128, 64, 2, 4, 4),
        tile(128, 128, 32, 2, 4, 4),
        two_per_sm(tile(128, 128, 32, 2, 4, 4)),
        tile(128, 128, 32, 2, 4, 6),
    ];

    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Row pitch of the values tile in shared memory, in bytes.
    fn pa(&self) -> u32 {
        self.bk + 16
    }

    /// Row pitch of the activation tile in shared memory, in bytes.
    fn pb(&self) -> u32 {
        2 * self.bk + 16
    }

    fn a_bytes(&self) -> u32 {
        self.bm * self.pa()
    }

    fn b_bytes(&self) -> u32 {
        self.bn * self.pb()
    }

    fn meta_bytes(&self) -> u32 {
        self.bm / 16 * self.bk / 32 * 64
    }

    fn stage_bytes(&self) -> u32 {
        self.a_bytes() + self.b_bytes() + self.meta_bytes()
    }

    /// Dynamic shared memory of a kernel with this tile.
    pub fn smem_bytes(&self) -> u32 {
        self.stages * self.stage_bytes()
    }

    /// Features of the padded weight for `n` features.
    pub fn n_pad(&self, n: u64) -> u64 {
        n.next_multiple_of(self.bm as u64)
    }

    /// k of the padded weight for reduction length `k`.
    pub fn k_pad(&self, k: u64) -> u64 {
        k.next_multiple_of(self.bk as u64)
    }

    /// Checks the tile is one the generator handles on `sm`: shared
    /// memory within 99 KiB (what sm_86 and sm_89 give a block, so sm_80
    /// code runs there too), or 227 KiB on Hopper.
    pub fn check(&self, sm: Sm) -> Result<(), String> {
        let t = *self;
        let ok = (1..=8).contains(&(t.warps_m * t.warps_n))
            && t.bm > 0
            && t.bn > 0
            && t.bm.is_multiple_of(16 * t.warps_m)
            && t.bn.is_multiple_of(8 * t.warps_n)
            && t.bk > 0
            && t.bk.is_multiple_of(32)
            && (2..=6).contains(&t.stages)
            && (1..=2).contains(&t.min_blocks);
        if !ok {
            return Err(format!("unsupported sparse tile {t:?}"));
        }
        let limit = match sm {
            Sm::Sm90 | Sm::Sm90a => sm.max_shared_per_block(),
            _ => 99 * 1024,
        };
        if t.smem_bytes() > limit {
            return Err(format!(
                "sparse tile {t:?} needs {} bytes of shared memory, more than {} KiB on {sm}",
                t.smem_bytes(),
                limit / 1024
            ));
        }
        Ok(())
    }

    /// Blocks of a launch of `spec` with this tile.
    pub fn blocks(&self, spec: &SpGemmSpec) -> u64 {
        spec.n.div_ceil(self.bm as u64) * spec.m.div_ceil(self.bn as u64)
    }
}

/// The tile [`gemm_sp_tiled`] uses on `sm`: the first of [`SpTile::ALL`]
/// that still gives a block per multiprocessor, else the smallest; on
/// Hopper the 128×128 tile is [`SpTile::HOPPER`].
pub fn choose_sp_tile(spec: &SpGemmSpec, sm: Sm) -> SpTile {
    let (small, big) = SpTile::ALL.split_last().unwrap();
    let t = big.iter().copied().find(|t| t.blocks(spec) >= ENOUGH_BLOCKS).unwrap_or(*small);
    match sm {
        Sm::Sm90 | Sm::Sm90a if t == SpTile::ALL[0] => SpTile::HOPPER,
        _ => t,
    }
}

const I31: u64 = i32::MAX as u64;

/// Appends kernel `name` computing `spec` with `tile` on `sm` (with an
/// optional pointwise epilogue); returns its launch. See the module doc.
pub fn gemm_sp_tiled(
    m: &mut ModuleText,
    name: &str,
    spec: &SpGemmSpec,
    tile: SpTile,
    sm: Sm,
    epi: Option<&GemmEpilogue>,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if !sm.has_mma_f16() || !sm.has_cp_async() {
        return Err(format!(
            "{name}: mma.sp needs sm_80 or newer, found {}",
            sm.name()
        ));
    }
    tile.check(sm)?;
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
    let threads = tile.threads();
    if s.m == 0 || s.n == 0 {
        m.func(format!(
            "define ptx_kernel void @{name}({}) {{\nentry:\n  ret void\n}}\n",
            sig.join(", ")
        ));
        return Ok(Geometry {
            grid: [1, 1, 1],
            block: [threads, 1, 1],
            smem: 0,
        });
    }
    declare(m);
    let mut g = Gen {
        b: Body::new(),
        s,
        t: tile,
        epi: epi_fn,
        tid: String::new(),
        acc: String::new(),
    };
    g.kernel();
    m.func(format!(
        "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{threads}\"{} {{\nentry:\n{}}}\n",
        sig.join(", "),
        if tile.min_blocks > 1 { format!(" \"nvvm.minctasm\"=\"{}\"", tile.min_blocks) } else { String::new() },
        g.b.into_text()
    ));
    Ok(Geometry {
        grid: [blocks as u32, 1, 1],
        block: [threads, 1, 1],
        smem: tile.smem_bytes(),
    })
}

fn declare(m: &mut ModuleText) {
    for d in [
        "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "declare float @llvm.maximum.f32(float, float)",
        "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
        "declare void @llvm.nvvm.cp.async.commit.group()",
        "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))",
    ] {
        m.declare(d);
    }
}

/// The sparse `mma` (selector 0) as inline PTX: LLVM has no intrinsic.
const MMA_SP: &str = "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9, $10, $11}, {$0, $1, $2, $3}, $12, 0x0;";

/// One 16-byte chunk a thread copies per stage: shared-memory byte offset
/// within the stage, global byte offset at k-tile 0 (i64) and per k-tile
/// step, and (activations only) the row-in-range predicate and k column.
struct Chunk {
    /// The kernel parameter it copies from.
    base: &'static str,
    smem: String,
    global: String,
    per_kt: u64,
    /// `Some((row_ok, k0))`: an activation chunk, valid while `row_ok` and
    /// `k0 + kt·bk < k`.
    act: Option<(String, String)>,
    /// The chunk exists (for chunk counts that do not divide the threads).
    exists: Option<String>,
}

struct Gen {
    b: Body,
    s: SpGemmSpec,
    t: SpTile,
    epi: Option<EpiFn>,
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

    /// m16 and n8 fragments per warp.
    fn frags(&self) -> (u32, u32) {
        let t = &self.t;
        (t.bm / t.warps_m / 16, t.bn / t.warps_n / 8)
    }

    fn acc_ptr(&mut self, i: u32) -> String {
        let (mi, ni) = self.frags();
        let acc = self.acc.clone();
        self.v(format!(
            "getelementptr inbounds [{} x float], ptr {acc}, i32 0, i32 {i}",
            mi * ni * 4
        ))
    }

    fn kernel(&mut self) {
        let (t, s) = (self.t, self.s);
        let (mi, ni) = self.frags();
        self.acc = self.v(format!("alloca [{} x float], align 4", mi * ni * 4));
        let ktp = self.v("alloca i32, align 4");
        let rsp = self.v("alloca i32, align 4");
        self.tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
        let bx = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
        let tiles_f = s.n.div_ceil(t.bm as u64);
        let ft = self.v(format!("urem i32 {bx}, {tiles_f}"));
        let rt = self.v(format!("udiv i32 {bx}, {tiles_f}"));
        let f0 = self.v(format!("mul i32 {ft}, {}", t.bm));
        let r0 = self.v(format!("mul i32 {rt}, {}", t.bn));
        let chunks = self.chunks(&f0, &r0);
        for i in 0..mi * ni * 4 {
            let p = self.acc_ptr(i);
            self.ins(format!("store float 0.0, ptr {p}, align 4"));
        }
        let ktiles = t.k_pad(s.k) / t.bk as u64;
        let sb = t.stage_bytes();
        // Prologue: k-tiles 0 … stages−2 into their stages (a commit per
        // stage, loaded or not, keeps the group count fixed).
        for st in 0..t.stages - 1 {
            if (st as u64) < ktiles {
                self.issue(&chunks, &st.to_string(), st * sb);
            }
            self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        }
        self.ins(format!("store i32 0, ptr {ktp}, align 4"));
        self.ins(format!("store i32 0, ptr {rsp}, align 4"));
        self.b.br("loop");
        self.b.place("loop");
        let kt = self.v(format!("load i32, ptr {ktp}, align 4"));
        let rs = self.v(format!("load i32, ptr {rsp}, align 4"));
        // Tile kt has landed (at most stages−2 younger groups pending) and
        // every warp is done with the stage the next load overwrites.
        self.ins(format!(
            "call void @llvm.nvvm.cp.async.wait.group(i32 {})",
            t.stages - 2
        ));
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        let nk = self.v(format!("add i32 {kt}, {}", t.stages - 1));
        let has = self.v(format!("icmp ult i32 {nk}, {ktiles}"));
        // The stage read last iteration: (rs + stages − 1) % stages.
        let z = self.v(format!("icmp eq i32 {rs}, 0"));
        let rm1 = self.v(format!("sub i32 {rs}, 1"));
        let ws = self.v(format!("select i1 {z}, i32 {}, i32 {rm1}", t.stages - 1));
        let woff = self.v(format!("mul i32 {ws}, {sb}"));
        self.b.cond_br(&has, "fill", "filled");
        self.b.place("fill");
        self.issue_at(&chunks, &nk, &woff);
        self.b.br("filled");
        self.b.place("filled");
        self.ins("call void @llvm.nvvm.cp.async.commit.group()");
        let roff = self.v(format!("mul i32 {rs}, {sb}"));
        self.compute(&roff);
        let rn = self.v(format!("add i32 {rs}, 1"));
        let wrap = self.v(format!("icmp eq i32 {rn}, {}", t.stages));
        let rn = self.v(format!("select i1 {wrap}, i32 0, i32 {rn}"));
        self.ins(format!("store i32 {rn}, ptr {rsp}, align 4"));
        let kn = self.v(format!("add i32 {kt}, 1"));
        self.ins(format!("store i32 {kn}, ptr {ktp}, align 4"));
        let more = self.v(format!("icmp ult i32 {kn}, {ktiles}"));
        self.b.cond_br(&more, "loop", "epilogue");
        self.b.place("epilogue");
        self.epilogue(&f0, &r0);
        self.ins("ret void");
    }

    /// This thread's chunks of a stage: the values tile (`bm` rows of
    /// `bk/16` chunks), the activation tile (`bn` rows of `bk/8`), the
    /// metadata tile (`bm/16` feature tiles of `bk/32 · 4` chunks, one
    /// contiguous run in global memory per feature tile).
    fn chunks(&mut self, f0: &str, r0: &str) -> Vec<Chunk> {
        let (t, s) = (self.t, self.s);
        let threads = t.threads();
        let tid = self.tid.clone();
        let k_pad = t.k_pad(s.k);
        let mut out = Vec::new();
        let a_per_row = t.bk / 16;
        let b_per_row = t.bk / 8;
        let m_per_ft = t.bk / 32 * 4;
        let kinds = [
            (t.bm * a_per_row, 0u8),
            (t.bn * b_per_row, 1),
            (t.bm / 16 * m_per_ft, 2),
        ];
        for (count, kind) in kinds {
            for i in 0..count.div_ceil(threads) {
                let c = self.v(format!("add i32 {tid}, {}", i * threads));
                let exists = (!count.is_multiple_of(threads) && (i + 1) * threads > count)
                    .then(|| self.v(format!("icmp ult i32 {c}, {count}")));
                let chunk = match kind {
                    0 => {
                        let row = self.v(format!("udiv i32 {c}, {a_per_row}"));
                        let col = self.v(format!("urem i32 {c}, {a_per_row}"));
                        let so = self.v(format!("mul i32 {row}, {}", t.pa()));
                        let co = self.v(format!("shl i32 {col}, 4"));
                        let so = self.v(format!("add i32 {so}, {co}"));
                        let f = self.v(format!("add i32 {f0}, {row}"));
                        let f = self.v(format!("zext i32 {f} to i64"));
                        let go = self.v(format!("mul i64 {f}, {}", k_pad));
                        let c64 = self.v(format!("zext i32 {co} to i64"));
                        let go = self.v(format!("add i64 {go}, {c64}"));
                        Chunk {
                            base: "%values",
                            smem: so,
                            global: go,
                            per_kt: t.bk as u64,
                            act: None,
                            exists,
                        }
                    }
                    1 => {
                        let row = self.v(format!("udiv i32 {c}, {b_per_row}"));
                        let col = self.v(format!("urem i32 {c}, {b_per_row}"));
                        let so = self.v(format!("mul i32 {row}, {}", t.pb()));
                        let co = self.v(format!("shl i32 {col}, 4"));
                        let so = self.v(format!("add i32 {so}, {co}"));
                        let so = self.v(format!("add i32 {so}, {}", t.a_bytes()));
                        let r = self.v(format!("add i32 {r0}, {row}"));
                        let ok = self.v(format!("icmp ult i32 {r}, {}", s.m));
                        let r = self.v(format!("zext i32 {r} to i64"));
                        let go = self.v(format!("mul i64 {r}, {}", s.lda * 2));
                        let c64 = self.v(format!("zext i32 {co} to i64"));
                        let go = self.v(format!("add i64 {go}, {c64}"));
                        let k0 = self.v(format!("shl i32 {col}, 3"));
                        Chunk {
                            base: "%x",
                            smem: so,
                            global: go,
                            per_kt: 2 * t.bk as u64,
                            act: Some((ok, k0)),
                            exists,
                        }
                    }
                    _ => {
                        let ftl = self.v(format!("udiv i32 {c}, {m_per_ft}"));
                        let rest = self.v(format!("urem i32 {c}, {m_per_ft}"));
                        let so = self.v(format!("mul i32 {ftl}, {}", m_per_ft * 16));
                        let ro = self.v(format!("shl i32 {rest}, 4"));
                        let so = self.v(format!("add i32 {so}, {ro}"));
                        let so = self.v(format!("add i32 {so}, {}", t.a_bytes() + t.b_bytes()));
                        let f16 = self.v(format!("lshr i32 {f0}, 4"));
                        let f16 = self.v(format!("add i32 {f16}, {ftl}"));
                        let f16 = self.v(format!("zext i32 {f16} to i64"));
                        let go = self.v(format!("mul i64 {f16}, {}", k_pad / 32 * 64));
                        let r64 = self.v(format!("zext i32 {ro} to i64"));
                        let go = self.v(format!("add i64 {go}, {r64}"));
                        Chunk {
                            base: "%meta",
                            smem: so,
                            global: go,
                            per_kt: (t.bk / 32 * 64) as u64,
                            act: None,
                            exists,
                        }
                    }
                };
                out.push(chunk);
            }
        }
        out
    }

    /// Copies k-tile `kt` (a constant) into the stage at `stage_off`.
    fn issue(&mut self, chunks: &[Chunk], kt: &str, stage_off: u32) {
        let off = stage_off.to_string();
        self.issue_at(chunks, kt, &off);
    }

    /// Copies k-tile `kt` (i32 value or constant) into the stage at byte
    /// `stage_off` (i32 value or constant) of shared memory.
    fn issue_at(&mut self, chunks: &[Chunk], kt: &str, stage_off: &str) {
        let kt64 = self.v(format!("zext i32 {kt} to i64"));
        for c in chunks {
            let step = self.v(format!("mul i64 {kt64}, {}", c.per_kt));
            let go = self.v(format!("add i64 {}, {step}", c.global));
            let so = self.v(format!("add i32 {}, {stage_off}", c.smem));
            let dst = self.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {so}"
            ));
            let (src, size) = match &c.act {
                None => {
                    let base = c.base;
                    (
                        self.v(format!(
                            "getelementptr inbounds i8, ptr addrspace(1) {base}, i64 {go}"
                        )),
                        "16".to_string(),
                    )
                }
                Some((row_ok, k0)) => {
                    let kk = self.v(format!("mul i32 {kt}, {}", self.t.bk));
                    let kk = self.v(format!("add i32 {kk}, {k0}"));
                    let kok = self.v(format!("icmp ult i32 {kk}, {}", self.s.k));
                    let ok = self.v(format!("and i1 {row_ok}, {kok}"));
                    let go = self.v(format!("select i1 {ok}, i64 {go}, i64 0"));
                    let src = self.v(format!(
                        "getelementptr inbounds i8, ptr addrspace(1) {}, i64 {go}",
                        c.base
                    ));
                    (src, self.v(format!("select i1 {ok}, i32 16, i32 0")))
                }
            };
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

    /// The `mma.sp` of the stage at byte `off` of shared memory.
    fn compute(&mut self, off: &str) {
        let t = self.t;
        let (mi, ni) = self.frags();
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let wm = self.v(format!("udiv i32 {warp}, {}", t.warps_n));
        let wn = self.v(format!("urem i32 {warp}, {}", t.warps_n));
        let (wf, wr) = (t.bm / t.warps_m, t.bn / t.warps_n);
        // A: lanes 0-15 address feature rows 0-15 at kept value 0, lanes
        // 16-31 the same rows at kept value 8 (a0 a1 a2 a3 = rows 0-7 /
        // 8-15 × values 0-7 / 8-15).
        let l15 = self.v(format!("and i32 {lane}, 15"));
        let l16 = self.v(format!("lshr i32 {lane}, 4"));
        let arow = self.v(format!("mul i32 {wm}, {wf}"));
        let arow = self.v(format!("add i32 {arow}, {l15}"));
        let abase = self.v(format!("mul i32 {arow}, {}", t.pa()));
        let a16 = self.v(format!("shl i32 {l16}, 4"));
        let abase = self.v(format!("add i32 {abase}, {a16}"));
        let abase = self.v(format!("add i32 {abase}, {off}"));
        // B: lanes 8j … 8j+7 address rows 0-7 at k 8j (matrix j is b_j).
        let l7 = self.v(format!("and i32 {lane}, 7"));
        let l8 = self.v(format!("lshr i32 {lane}, 3"));
        let brow = self.v(format!("mul i32 {wn}, {wr}"));
        let brow = self.v(format!("add i32 {brow}, {l7}"));
        let bbase = self.v(format!("mul i32 {brow}, {}", t.pb()));
        let b16 = self.v(format!("shl i32 {l8}, 4"));
        let bbase = self.v(format!("add i32 {bbase}, {b16}"));
        let bbase = self.v(format!("add i32 {bbase}, {}", t.a_bytes()));
        let bbase = self.v(format!("add i32 {bbase}, {off}"));
        // Metadata: word 2q + (lane & 1) of the fragment's 64 bytes.
        let q = self.v(format!("lshr i32 {lane}, 2"));
        let p = self.v(format!("and i32 {lane}, 1"));
        let word = self.v(format!("shl i32 {q}, 1"));
        let word = self.v(format!("or i32 {word}, {p}"));
        let word = self.v(format!("shl i32 {word}, 2"));
        let mft = self.v(format!("mul i32 {wm}, {}", wf / 16 * (t.bk / 32) * 64));
        let mbase = self.v(format!("add i32 {mft}, {word}"));
        let mbase = self.v(format!("add i32 {mbase}, {}", t.a_bytes() + t.b_bytes()));
        let mbase = self.v(format!("add i32 {mbase}, {off}"));
        let smem = |g: &mut Self, base: &str, o: u32| {
            let x = g.v(format!("add i32 {base}, {o}"));
            g.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {x}"
            ))
        };
        let ld4 = |g: &mut Self, ptr: &str| -> [String; 4] {
            let f = g.v(format!("call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3) {ptr})"));
            [0, 1, 2, 3].map(|i| g.v(format!("extractvalue {{ i32, i32, i32, i32 }} {f}, {i}")))
        };
        for kk in 0..t.bk / 32 {
            let mut af = Vec::new();
            let mut ef = Vec::new();
            for f in 0..mi {
                let pa = smem(self, &abase, f * 16 * t.pa() + kk * 32);
                af.push(ld4(self, &pa));
                let pm = smem(self, &mbase, (f * (t.bk / 32) + kk) * 64);
                ef.push(self.v(format!("load i32, ptr addrspace(3) {pm}, align 4")));
            }
            let mut bf = Vec::new();
            for r in 0..ni {
                let pb = smem(self, &bbase, r * 8 * t.pb() + kk * 64);
                bf.push(ld4(self, &pb));
            }
            for f in 0..mi {
                for r in 0..ni {
                    self.mma(
                        (f * ni + r) * 4,
                        &af[f as usize],
                        &bf[r as usize],
                        &ef[f as usize],
                    );
                }
            }
        }
    }

    /// `acc[base..base+4] += A·B` for one fragment.
    fn mma(&mut self, base: u32, a: &[String; 4], b: &[String; 4], e: &str) {
        let ptrs: Vec<String> = (0..4).map(|r| self.acc_ptr(base + r)).collect();
        let cs: Vec<String> = ptrs
            .iter()
            .map(|p| self.v(format!("load float, ptr {p}, align 4")))
            .collect();
        let mut args: Vec<String> = a
            .iter()
            .chain(b.iter())
            .map(|r| format!("i32 {r}"))
            .collect();
        args.push(format!("i32 {e}"));
        args.extend(cs.iter().map(|c| format!("float {c}")));
        let ty = "{ float, float, float, float }";
        let d = self.v(format!(
            "call {ty} asm sideeffect \"{MMA_SP}\", \"=f,=f,=f,=f,r,r,r,r,r,r,r,r,r,0,1,2,3\"({}) convergent",
            args.join(", ")
        ));
        for (r, p) in ptrs.iter().enumerate() {
            let x = self.v(format!("extractvalue {ty} {d}, {r}"));
            self.ins(format!("store float {x}, ptr {p}, align 4"));
        }
    }

    /// Bias, relu, the epilogue and the guarded stores. Accumulator `i`
    /// of fragment (f, r) is feature `q + 8·(i/2)`, row `2·tq + i%2` of
    /// that m16n8 tile (`q = lane/4`, `tq = lane%4`).
    fn epilogue(&mut self, f0: &str, r0: &str) {
        let (t, s) = (self.t, self.s);
        let (mi, ni) = self.frags();
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let wm = self.v(format!("udiv i32 {warp}, {}", t.warps_n));
        let wn = self.v(format!("urem i32 {warp}, {}", t.warps_n));
        let q = self.v(format!("lshr i32 {lane}, 2"));
        let tq = self.v(format!("and i32 {lane}, 3"));
        let col0 = self.v(format!("mul i32 {wm}, {}", t.bm / t.warps_m));
        let col0 = self.v(format!("add i32 {col0}, {f0}"));
        let col0 = self.v(format!("add i32 {col0}, {q}"));
        let row0 = self.v(format!("mul i32 {wn}, {}", t.bn / t.warps_n));
        let row0 = self.v(format!("add i32 {row0}, {r0}"));
        let tq2 = self.v(format!("shl i32 {tq}, 1"));
        let row0 = self.v(format!("add i32 {row0}, {tq2}"));
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &row0, &col0);
        // Per feature this thread holds: in range, its bias.
        let mut feats = Vec::new();
        for f in 0..mi * 2 {
            let col = self.v(format!("add i32 {col0}, {}", 8 * f));
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
        for r in 0..ni {
            for e in 0..2 {
                let row = self.v(format!("add i32 {row0}, {}", 8 * r + e));
                let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
                let r64 = self.v(format!("zext i32 {row} to i64"));
                let ro = self.v(format!("mul i64 {r64}, {}", s.ldc));
                for f in 0..mi {
                    for h in 0..2 {
                        let i = (f * ni + r) * 4 + h * 2 + e;
                        let ap = self.acc_ptr(i);
                        let x = self.v(format!("load float, ptr {ap}, align 4"));
                        let (fok, c64, bias) = feats[(2 * f + h) as usize].clone();
                        let x = gemm_epilogue::bias_relu(&mut self.b, x, bias.as_deref(), s.relu);
                        let ok = self.v(format!("and i1 {rok}, {fok}"));
                        let o = self.v(format!("add i64 {ro}, {c64}"));
                        let p =
                            self.v(format!("getelementptr float, ptr addrspace(1) %y, i64 {o}"));
                        let (l, j) = (self.b.label("st"), self.b.label("st.end"));
                        self.b.cond_br(&ok, &l, &j);
                        self.b.place(&l);
                        let y = match &self.epi {
                            None => x,
                            Some(_) => {
                                let (dr, dc) = ((8 * r + e) as u64, (16 * f + 8 * h) as u64);
                                gemm_epilogue::value(
                                    &mut self.b,
                                    self.epi.as_ref(),
                                    &x,
                                    &ebase,
                                    dr,
                                    dc,
                                )
                            }
                        };
                        self.ins(format!("store float {y}, ptr addrspace(1) {p}, align 4"));
                        self.b.br(&j);
                        self.b.place(&j);
                    }
                }
            }
        }
    }
}
