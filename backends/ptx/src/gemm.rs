//! Tensor-core GEMM for f16 inputs: `C = A · B (+ bias) (relu)`, f32
//! accumulation, f32 or f16 output, batched over `gridDim.z`.
//!
//! Built only with the crate's `f16-gemm` feature: the compiler keeps
//! activations in f32 and does not call it yet; the crate's tests turn the
//! feature on.
//!
//! Kernel ABI (argument order):
//! `(ptr A, ptr B, ptr bias, ptr C, i32 m, i32 n, i32 k, i32 lda, i32 ldb,
//! i32 ldc, i64 batch_stride_a, i64 batch_stride_b, i64 batch_stride_c)`.
//! - `A` is m×k f16 row-major (row stride `lda` elements), `B` k×n f16
//!   row-major (`ldb`), `C` m×n row-major (`ldc`), f32 or f16 by entry;
//!   batch `z` uses `A + z·batch_stride_a` (elements) and likewise for B and
//!   C; `bias` is `n` f32 values added to every row, or null for none.
//! - Launch: block `(GemmTile::threads(), 1, 1)`; grid
//!   `(⌈n/bn⌉, ⌈m/bm⌉, batch)` ([`GemmTile::grid`]); dynamic shared memory
//!   [`GemmTile::smem_bytes`] (above 48 KiB the launcher must first raise
//!   `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
//! - Any m, n, k ≥ 0 work: out-of-range rows and columns of a tile are
//!   zero-filled on load and skipped on store. When `lda` and `ldb` are
//!   multiples of 8 and this batch's A and B start 16-byte aligned, tiles
//!   move with 16-byte `cp.async` (zero-filling through its source-size
//!   operand at the edges); otherwise with guarded 2-byte loads (correct,
//!   slow). The test is made once per block, and the k loop exists once per
//!   path, so neither path's addressing costs the other registers.
//!
//! Code shape: each block computes a `bm × bn` tile of C with
//! `warps_m × warps_n` warps, each warp a `bm/warps_m × bn/warps_n` sub-tile
//! as m16n8 fragments. K advances in `bk` steps through a `stages`-deep ring
//! of shared-memory buffers filled by `cp.async` (a `cp.async.wait_group`
//! and one barrier per step). Fragments come from shared memory through
//! `ldmatrix.x4` (A) and `ldmatrix.x4.trans` (B, stored k-major as it is in
//! global memory); rows are padded by 8 halves so the eight 16-byte rows an
//! `ldmatrix` reads fall in distinct banks. The epilogue adds the bias,
//! applies relu (NaN passes, as `max(x, 0)` in the reference), converts and
//! stores each element in range.
//!
//! Invariants: only sm_80 and newer (m16n8k16 f16 `mma.sync` and `cp.async`
//! exist there); every tile the checks accept compiles to straight-line
//! fragment code (all loops over fragments are unrolled at generation).

use crate::irtext::{Body, ModuleText};
use crate::llvm::ir_to_ptx;
use crate::target::Sm;

/// The element type of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmOut {
    F32,
    F16,
}

impl GemmOut {
    pub const ALL: [GemmOut; 2] = [GemmOut::F32, GemmOut::F16];

    fn name(self) -> &'static str {
        match self {
            GemmOut::F32 => "f32",
            GemmOut::F16 => "f16",
        }
    }
}

/// The tiling of one GEMM kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmTile {
    /// Rows of C per block.
    pub bm: u32,
    /// Columns of C per block.
    pub bn: u32,
    /// K per pipeline step.
    pub bk: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    /// Shared-memory buffers in the `cp.async` ring (2 = double buffering).
    pub stages: u32,
}

impl Default for GemmTile {
    /// 128×128×32, 4 warps of 64×64, 3 stages (56 KiB of shared memory).
    fn default() -> GemmTile {
        GemmTile {
            bm: 128,
            bn: 128,
            bk: 32,
            warps_m: 2,
            warps_n: 2,
            stages: 3,
        }
    }
}

impl GemmTile {
    /// Threads per block.
    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Row pitch of an A tile in shared memory, in halves (8 of padding).
    fn pitch_a(&self) -> u32 {
        self.bk + 8
    }

    /// Row pitch of a B tile in shared memory, in halves (8 of padding).
    fn pitch_b(&self) -> u32 {
        self.bn + 8
    }

    fn a_bytes(&self) -> u32 {
        self.bm * self.pitch_a() * 2
    }

    fn stage_bytes(&self) -> u32 {
        self.a_bytes() + self.bk * self.pitch_b() * 2
    }

    /// Dynamic shared memory per block, in bytes.
    pub fn smem_bytes(&self) -> u32 {
        self.stages * self.stage_bytes()
    }

    /// The grid for an m×n output and `batch` products.
    pub fn grid(&self, m: u32, n: u32, batch: u32) -> [u32; 3] {
        [n.div_ceil(self.bn), m.div_ceil(self.bm), batch]
    }

    /// The `.entry` name of one variant:
    /// `gemm_f16_128x128x32_w2x2_s3_f32_relu`.
    pub fn entry_name(&self, out: GemmOut, relu: bool) -> String {
        format!(
            "gemm_f16_{}x{}x{}_w{}x{}_s{}_{}{}",
            self.bm,
            self.bn,
            self.bk,
            self.warps_m,
            self.warps_n,
            self.stages,
            out.name(),
            if relu { "_relu" } else { "" }
        )
    }

    /// Checks the tile can be generated for `sm`.
    pub fn check(&self, sm: Sm) -> Result<(), String> {
        if !sm.has_mma_f16() || !sm.has_cp_async() {
            return Err(format!(
                "the tensor-core gemm needs sm_80 or newer (mma.sync m16n8k16, cp.async), target is {sm}"
            ));
        }
        let t = *self;
        if t.warps_m == 0 || t.warps_n == 0 || t.warps_m * t.warps_n > 32 {
            return Err(format!(
                "a block must have 1 to 32 warps, found {}x{}",
                t.warps_m, t.warps_n
            ));
        }
        if t.bm == 0 || !t.bm.is_multiple_of(16 * t.warps_m) {
            return Err(format!(
                "bm must be a positive multiple of 16 * warps_m = {}, found {}",
                16 * t.warps_m,
                t.bm
            ));
        }
        if t.bn == 0 || !t.bn.is_multiple_of(16 * t.warps_n) {
            return Err(format!(
                "bn must be a positive multiple of 16 * warps_n = {}, found {}",
                16 * t.warps_n,
                t.bn
            ));
        }
        if t.bk == 0 || !t.bk.is_multiple_of(16) {
            return Err(format!(
                "bk must be a positive multiple of 16, found {}",
                t.bk
            ));
        }
        if !(2..=8).contains(&t.stages) {
            return Err(format!("stages must be 2 to 8, found {}", t.stages));
        }
        let threads = t.threads();
        for (what, chunks) in [("a", t.bm * t.bk / 8), ("b", t.bk * t.bn / 8)] {
            if chunks % threads != 0 {
                return Err(format!(
                    "the {what} tile's {chunks} 16-byte chunks must divide evenly among {threads} threads"
                ));
            }
        }
        let acc = (t.bm / t.warps_m) * (t.bn / t.warps_n) / 32;
        if acc > 128 {
            return Err(format!(
                "a {}x{} warp tile needs {acc} accumulators per thread, at most 128 fit in registers",
                t.bm / t.warps_m,
                t.bn / t.warps_n
            ));
        }
        if t.smem_bytes() > sm.max_shared_per_block() {
            return Err(format!(
                "the tile needs {} bytes of shared memory, {sm} allows {}",
                t.smem_bytes(),
                sm.max_shared_per_block()
            ));
        }
        Ok(())
    }
}

/// The LLVM IR (text) of the GEMM module for `tile`: four entries, f32 and
/// f16 output, each without and with relu ([`GemmTile::entry_name`]).
pub fn gemm_f16_llvm(sm: Sm, tile: GemmTile) -> Result<String, String> {
    tile.check(sm)?;
    let mut m = ModuleText::new();
    for out in GemmOut::ALL {
        for relu in [false, true] {
            let f = gemm_function(&tile, out, relu, &mut m);
            m.func(f);
        }
    }
    Ok(m.finish())
}

/// The PTX of [`gemm_f16_llvm`].
pub fn gemm_f16_ptx(sm: Sm, tile: GemmTile) -> Result<String, String> {
    let ir = gemm_f16_llvm(sm, tile)?;
    ir_to_ptx(&ir, sm)
}

const DECLS: &[&str] = &[
    "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()",
    "declare i32 @llvm.smin.i32(i32, i32)",
    "declare i32 @llvm.smax.i32(i32, i32)",
    "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), ptr addrspace(1), i32)",
    "declare void @llvm.nvvm.cp.async.commit.group()",
    "declare void @llvm.nvvm.cp.async.wait.group(i32 immarg)",
    "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))",
    "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16(ptr addrspace(3))",
    "declare { float, float, float, float } @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, float, float, float, float)",
];

/// Per-thread values every part of the kernel uses.
struct Ctx {
    t: GemmTile,
    tid: String,
    bm0: String,
    bn0: String,
    /// Batch-shifted A, B and C.
    a: String,
    b: String,
    c: String,
    aligned: String,
    /// Byte offsets of this lane's `ldmatrix` row in an A / B stage.
    a_lane: String,
    b_lane: String,
    /// `[f32 x acc_count]` alloca.
    acc: String,
    /// Fragments per warp: m16 tiles, n8 tiles.
    mi: u32,
    ni: u32,
}

fn gemm_function(t: &GemmTile, out: GemmOut, relu: bool, m: &mut ModuleText) -> String {
    for d in DECLS {
        m.declare(d);
    }
    let mut b = Body::new();
    let wm_rows = t.bm / t.warps_m;
    let wn_cols = t.bn / t.warps_n;
    let (mi, ni) = (wm_rows / 16, wn_cols / 8);
    let nacc = mi * ni * 4;

    let acc = b.v(format!("alloca [{nacc} x float], align 4"));
    let biasv = b.v(format!("alloca [{} x float], align 4", ni * 2));
    let ktp = b.v("alloca i32, align 4");
    let tid = b.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
    let bx = b.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
    let by = b.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()");
    let bz = b.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()");
    let bm0 = b.v(format!("mul i32 {by}, {}", t.bm));
    let bn0 = b.v(format!("mul i32 {bx}, {}", t.bn));
    // Blocks past the edge (an over-provisioned grid, or m or n zero) leave
    // together, before any barrier.
    let mout = b.v(format!("icmp sge i32 {bm0}, %m"));
    let nout = b.v(format!("icmp sge i32 {bn0}, %n"));
    let gone = b.v(format!("or i1 {mout}, {nout}"));
    b.cond_br(&gone, "exit", "body");
    b.place("body");

    let lane = b.v(format!("and i32 {tid}, 31"));
    let warp = b.v(format!("lshr i32 {tid}, 5"));
    let wm = b.v(format!("udiv i32 {warp}, {}", t.warps_n));
    let wn = b.v(format!("urem i32 {warp}, {}", t.warps_n));
    let bz64 = b.v(format!("zext i32 {bz} to i64"));
    let shifted = |b: &mut Body, base: &str, stride: &str| {
        let off = b.v(format!("mul i64 {bz64}, {stride}"));
        b.v(format!(
            "getelementptr inbounds half, ptr addrspace(1) {base}, i64 {off}"
        ))
    };
    let a = shifted(&mut b, "%A", "%sa");
    let bp = shifted(&mut b, "%B", "%sb");
    let c = match out {
        GemmOut::F32 => {
            let off = b.v(format!("mul i64 {bz64}, %sc"));
            b.v(format!(
                "getelementptr inbounds float, ptr addrspace(1) %C, i64 {off}"
            ))
        }
        GemmOut::F16 => shifted(&mut b, "%C", "%sc"),
    };

    // The 16-byte path needs 16-byte aligned rows of A and B.
    let mut conds = Vec::new();
    for ld in ["%lda", "%ldb"] {
        let r = b.v(format!("and i32 {ld}, 7"));
        conds.push(b.v(format!("icmp eq i32 {r}, 0")));
    }
    for p in [&a, &bp] {
        let x = b.v(format!("ptrtoint ptr addrspace(1) {p} to i64"));
        let r = b.v(format!("and i64 {x}, 15"));
        conds.push(b.v(format!("icmp eq i64 {r}, 0")));
    }
    let mut aligned = conds[0].clone();
    for c in &conds[1..] {
        aligned = b.v(format!("and i1 {aligned}, {c}"));
    }

    // ldmatrix row addresses: lanes 0-15 give rows 0-15 of the first
    // 8 columns, lanes 16-31 the same rows 8 columns on (A: matrices
    // a0 a1 a2 a3 = rows 0-7/8-15 × k 0-7/8-15; B, transposed: b0 b1 of
    // n-tile j then of j+1).
    let l15 = b.v(format!("and i32 {lane}, 15"));
    let l16 = b.v(format!("lshr i32 {lane}, 4"));
    let a_row = b.v(format!("mul i32 {wm}, {wm_rows}"));
    let a_row = b.v(format!("add i32 {a_row}, {l15}"));
    let a_lane = b.v(format!("mul i32 {a_row}, {}", t.pitch_a() * 2));
    let a_col = b.v(format!("shl i32 {l16}, 4"));
    let a_lane = b.v(format!("add i32 {a_lane}, {a_col}"));
    let b_row = b.v(format!("mul i32 {l15}, {}", t.pitch_b() * 2));
    let b_col = b.v(format!("mul i32 {wn}, {}", wn_cols * 2));
    let b_lane = b.v(format!("add i32 {b_row}, {b_col}"));
    let b_lane = b.v(format!("add i32 {b_lane}, {}", t.a_bytes()));
    let b_lane = b.v(format!("add i32 {b_lane}, {a_col}"));

    for i in 0..nacc {
        let p = b.v(format!(
            "getelementptr inbounds [{nacc} x float], ptr {acc}, i32 0, i32 {i}"
        ));
        b.ins(format!("store float 0.0, ptr {p}, align 4"));
    }

    let cx = Ctx {
        t: *t,
        tid,
        bm0,
        bn0,
        a,
        b: bp,
        c,
        aligned,
        a_lane,
        b_lane,
        acc,
        mi,
        ni,
    };

    // k tiles, then the prologue: stages-1 tiles in flight, one commit
    // group each (empty groups keep the wait counts uniform).
    let kpos = b.v("icmp sgt i32 %k, 0");
    let kr = b.v(format!("add i32 %k, {}", t.bk - 1));
    let kt = b.v(format!("udiv i32 {kr}, {}", t.bk));
    let ktiles = b.v(format!("select i1 {kpos}, i32 {kt}, i32 0"));
    b.ins(format!("store i32 0, ptr {ktp}, align 4"));
    // The pipeline twice, one per load path, chosen once: a single loop
    // with both paths keeps the slow path's hoisted addresses alive in
    // registers the fast path needs.
    b.cond_br(&cx.aligned, "pipe.fast", "pipe.slow");
    for fast in [true, false] {
        b.place(if fast { "pipe.fast" } else { "pipe.slow" });
        pipeline(&mut b, &cx, fast, &ktiles, &ktp);
    }

    b.place("epilogue");
    b.ins("call void @llvm.nvvm.cp.async.wait.group(i32 0)");
    epilogue(&mut b, &cx, out, relu, &lane, &wm, &wn, &biasv);
    b.br("exit");
    b.place("exit");
    b.ins("ret void");

    format!(
        "define ptx_kernel void @{}(ptr addrspace(1) %A, ptr addrspace(1) %B, ptr addrspace(1) %bias, ptr addrspace(1) %C, i32 %m, i32 %n, i32 %k, i32 %lda, i32 %ldb, i32 %ldc, i64 %sa, i64 %sb, i64 %sc) \"nvvm.maxntid\"=\"{}\" {{\nentry:\n{}}}\n",
        t.entry_name(out, relu),
        t.threads(),
        b.into_text()
    )
}

/// The prologue (stages-1 tiles in flight, one commit group each: empty
/// groups keep the wait counts uniform) and the main loop: wait for tile
/// kt, prefetch tile kt+stages-1 into the buffer tile kt-1 used (free:
/// every warp passed the barrier after reading it), compute on tile kt.
/// Ends by branching to `epilogue`.
fn pipeline(b: &mut Body, cx: &Ctx, fast: bool, ktiles: &str, ktp: &str) {
    let t = &cx.t;
    for s in 0..t.stages - 1 {
        let has = b.v(format!("icmp slt i32 {s}, {ktiles}"));
        let ld = b.label("pro");
        let join = b.label("pro.join");
        b.cond_br(&has, &ld, &join);
        b.place(&ld);
        load_tile(
            b,
            cx,
            fast,
            &(s * t.stage_bytes()).to_string(),
            &s.to_string(),
        );
        b.br(&join);
        b.place(&join);
        b.ins("call void @llvm.nvvm.cp.async.commit.group()");
    }
    let any = b.v(format!("icmp sgt i32 {ktiles}, 0"));
    let lp = b.label("loop");
    b.cond_br(&any, &lp, "epilogue");

    b.place(&lp);
    let kt = b.v(format!("load i32, ptr {ktp}, align 4"));
    b.ins(format!(
        "call void @llvm.nvvm.cp.async.wait.group(i32 {})",
        t.stages - 2
    ));
    b.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    let nk = b.v(format!("add i32 {kt}, {}", t.stages - 1));
    let has = b.v(format!("icmp slt i32 {nk}, {ktiles}"));
    let ld = b.label("pre");
    let join = b.label("pre.join");
    b.cond_br(&has, &ld, &join);
    b.place(&ld);
    let ns = b.v(format!("urem i32 {nk}, {}", t.stages));
    let noff = b.v(format!("mul i32 {ns}, {}", t.stage_bytes()));
    load_tile(b, cx, fast, &noff, &nk);
    b.br(&join);
    b.place(&join);
    b.ins("call void @llvm.nvvm.cp.async.commit.group()");
    let cs = b.v(format!("urem i32 {kt}, {}", t.stages));
    let coff = b.v(format!("mul i32 {cs}, {}", t.stage_bytes()));
    compute(b, cx, &coff);
    let kt1 = b.v(format!("add i32 {kt}, 1"));
    b.ins(format!("store i32 {kt1}, ptr {ktp}, align 4"));
    let more = b.v(format!("icmp slt i32 {kt1}, {ktiles}"));
    b.cond_br(&more, &lp, "epilogue");
}

/// Moves k-tile `kt` of A and B into the stage at byte offset `stage_off`
/// of shared memory: `cp.async` on the fast (aligned) path, guarded loads
/// and 16-byte shared stores otherwise.
fn load_tile(b: &mut Body, cx: &Ctx, is_fast: bool, stage_off: &str, kt: &str) {
    let t = &cx.t;
    let k0 = b.v(format!("mul i32 {kt}, {}", t.bk));
    let sbase = b.v(format!(
        "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {stage_off}"
    ));
    {
        // A: bm rows of bk halves; B: bk rows of bn halves.
        let tiles = [
            (
                &cx.a,
                t.bm,
                t.bk,
                t.pitch_a(),
                0,
                &cx.bm0,
                &k0,
                "%m",
                "%k",
                "%lda",
            ),
            (
                &cx.b,
                t.bk,
                t.bn,
                t.pitch_b(),
                t.a_bytes(),
                &k0,
                &cx.bn0,
                "%k",
                "%n",
                "%ldb",
            ),
        ];
        for (src, rows, cols, pitch, smem_off, row0, col0, nrows, ncols, ld) in tiles {
            let per_row = cols / 8;
            let chunks = rows * per_row;
            for it in 0..chunks / t.threads() {
                let c = b.v(format!("add i32 {}, {}", cx.tid, it * t.threads()));
                let r = b.v(format!("udiv i32 {c}, {per_row}"));
                let cc = b.v(format!("urem i32 {c}, {per_row}"));
                let cc = b.v(format!("shl i32 {cc}, 3"));
                let gr = b.v(format!("add i32 {row0}, {r}"));
                let gc = b.v(format!("add i32 {col0}, {cc}"));
                let rowok = b.v(format!("icmp slt i32 {gr}, {nrows}"));
                let rem = b.v(format!("sub i32 {ncols}, {gc}"));
                // Element offset of the chunk in global memory (64-bit).
                let gr64 = b.v(format!("sext i32 {gr} to i64"));
                let ld64 = b.v(format!("sext i32 {ld} to i64"));
                let gc64 = b.v(format!("sext i32 {gc} to i64"));
                let off = b.v(format!("mul i64 {gr64}, {ld64}"));
                let off = b.v(format!("add i64 {off}, {gc64}"));
                let so = b.v(format!("mul i32 {r}, {}", pitch * 2));
                let so = b.v(format!("add i32 {so}, {smem_off}"));
                let cc2 = b.v(format!("shl i32 {cc}, 1"));
                let so = b.v(format!("add i32 {so}, {cc2}"));
                let dst = b.v(format!(
                    "getelementptr inbounds i8, ptr addrspace(3) {sbase}, i32 {so}"
                ));
                if is_fast {
                    let remc = b.v(format!("call i32 @llvm.smax.i32(i32 {rem}, i32 0)"));
                    let remc = b.v(format!("call i32 @llvm.smin.i32(i32 {remc}, i32 8)"));
                    let bytes = b.v(format!("shl i32 {remc}, 1"));
                    let bytes = b.v(format!("select i1 {rowok}, i32 {bytes}, i32 0"));
                    // With nothing to copy the source must still be a valid
                    // address: the matrix's first element.
                    let some = b.v(format!("icmp ne i32 {bytes}, 0"));
                    let off = b.v(format!("select i1 {some}, i64 {off}, i64 0"));
                    let p = b.v(format!(
                        "getelementptr inbounds half, ptr addrspace(1) {src}, i64 {off}"
                    ));
                    b.ins(format!(
                        "call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) {dst}, ptr addrspace(1) {p}, i32 {bytes})"
                    ));
                } else {
                    let mut v = "zeroinitializer".to_string();
                    for e in 0..8 {
                        let ok = b.v(format!("icmp sgt i32 {rem}, {e}"));
                        let ok = b.v(format!("and i1 {ok}, {rowok}"));
                        let oe = b.v(format!("add i64 {off}, {e}"));
                        let oe = b.v(format!("select i1 {ok}, i64 {oe}, i64 0"));
                        let p = b.v(format!(
                            "getelementptr inbounds half, ptr addrspace(1) {src}, i64 {oe}"
                        ));
                        let x = b.v(format!("load half, ptr addrspace(1) {p}, align 2"));
                        let x = b.v(format!("select i1 {ok}, half {x}, half 0xH0000"));
                        v = b.v(format!("insertelement <8 x half> {v}, half {x}, i32 {e}"));
                    }
                    b.ins(format!(
                        "store <8 x half> {v}, ptr addrspace(3) {dst}, align 16"
                    ));
                }
            }
        }
    }
}

/// One k-tile's tensor-core work on the stage at byte offset `stage_off`.
fn compute(b: &mut Body, cx: &Ctx, stage_off: &str) {
    let t = &cx.t;
    let nacc = cx.mi * cx.ni * 4;
    let a_base = b.v(format!("add i32 {stage_off}, {}", cx.a_lane));
    let b_base = b.v(format!("add i32 {stage_off}, {}", cx.b_lane));
    let halves = |b: &mut Body, f: &str, i: u32| {
        let r = b.v(format!("extractvalue {{ i32, i32, i32, i32 }} {f}, {i}"));
        b.v(format!("bitcast i32 {r} to <2 x half>"))
    };
    for kk in 0..t.bk / 16 {
        let mut afrag = Vec::new();
        for mi in 0..cx.mi {
            let off = b.v(format!(
                "add i32 {a_base}, {}",
                mi * 16 * t.pitch_a() * 2 + kk * 32
            ));
            let p = b.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {off}"
            ));
            let f = b.v(format!(
                "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3) {p})"
            ));
            afrag.push([0, 1, 2, 3].map(|i| halves(b, &f, i)));
        }
        let mut bfrag = Vec::new();
        for nj in 0..cx.ni / 2 {
            let off = b.v(format!(
                "add i32 {b_base}, {}",
                kk * 16 * t.pitch_b() * 2 + nj * 32
            ));
            let p = b.v(format!(
                "getelementptr inbounds i8, ptr addrspace(3) @aoc_smem, i32 {off}"
            ));
            let f = b.v(format!(
                "call {{ i32, i32, i32, i32 }} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16(ptr addrspace(3) {p})"
            ));
            let r = [0, 1, 2, 3].map(|i| halves(b, &f, i));
            bfrag.push([r[0].clone(), r[1].clone()]);
            bfrag.push([r[2].clone(), r[3].clone()]);
        }
        for (mi, af) in afrag.iter().enumerate() {
            for (ni, bf) in bfrag.iter().enumerate() {
                let base = (mi as u32 * cx.ni + ni as u32) * 4;
                let ptrs: Vec<String> = (0..4)
                    .map(|r| {
                        b.v(format!(
                            "getelementptr inbounds [{nacc} x float], ptr {}, i32 0, i32 {}",
                            cx.acc,
                            base + r
                        ))
                    })
                    .collect();
                let cs: Vec<String> = ptrs
                    .iter()
                    .map(|p| b.v(format!("load float, ptr {p}, align 4")))
                    .collect();
                let d = b.v(format!(
                    "call {{ float, float, float, float }} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half> {}, <2 x half> {}, <2 x half> {}, <2 x half> {}, <2 x half> {}, <2 x half> {}, float {}, float {}, float {}, float {})",
                    af[0], af[1], af[2], af[3], bf[0], bf[1], cs[0], cs[1], cs[2], cs[3]
                ));
                for (r, p) in ptrs.iter().enumerate() {
                    let x = b.v(format!(
                        "extractvalue {{ float, float, float, float }} {d}, {r}"
                    ));
                    b.ins(format!("store float {x}, ptr {p}, align 4"));
                }
            }
        }
    }
}

/// Bias, relu, conversion and guarded stores of this thread's fragments.
/// Accumulator `r` of fragment (mi, ni) is row `lane/4 + 8·(r/2)`, column
/// `2·(lane%4) + r%2` of that m16n8 tile.
#[allow(clippy::too_many_arguments)]
fn epilogue(
    b: &mut Body,
    cx: &Ctx,
    out: GemmOut,
    relu: bool,
    lane: &str,
    wm: &str,
    wn: &str,
    biasv: &str,
) {
    let t = &cx.t;
    let nb = cx.ni * 2;
    let nacc = cx.mi * cx.ni * 4;
    let g = b.v(format!("lshr i32 {lane}, 2"));
    let q = b.v(format!("and i32 {lane}, 3"));
    let q2 = b.v(format!("shl i32 {q}, 1"));
    let row0 = b.v(format!("mul i32 {wm}, {}", t.bm / t.warps_m));
    let row0 = b.v(format!("add i32 {row0}, {}", cx.bm0));
    let row0 = b.v(format!("add i32 {row0}, {g}"));
    let col0 = b.v(format!("mul i32 {wn}, {}", t.bn / t.warps_n));
    let col0 = b.v(format!("add i32 {col0}, {}", cx.bn0));
    let col0 = b.v(format!("add i32 {col0}, {q2}"));

    // Bias values of this thread's 2·ni columns (zero without bias).
    let bias_ptr = |b: &mut Body, j: u32| {
        b.v(format!(
            "getelementptr inbounds [{nb} x float], ptr {biasv}, i32 0, i32 {j}"
        ))
    };
    for j in 0..nb {
        let p = bias_ptr(b, j);
        b.ins(format!("store float 0.0, ptr {p}, align 4"));
    }
    let has_bias = b.v("icmp ne ptr addrspace(1) %bias, null");
    let lb = b.label("bias");
    let lj = b.label("bias.join");
    b.cond_br(&has_bias, &lb, &lj);
    b.place(&lb);
    for j in 0..nb {
        let col = b.v(format!("add i32 {col0}, {}", (j / 2) * 8 + j % 2));
        let ok = b.v(format!("icmp slt i32 {col}, %n"));
        let idx = b.v(format!("select i1 {ok}, i32 {col}, i32 0"));
        let p = b.v(format!(
            "getelementptr inbounds float, ptr addrspace(1) %bias, i32 {idx}"
        ));
        let x = b.v(format!("load float, ptr addrspace(1) {p}, align 4"));
        let x = b.v(format!("select i1 {ok}, float {x}, float 0.0"));
        let bp = bias_ptr(b, j);
        b.ins(format!("store float {x}, ptr {bp}, align 4"));
    }
    b.br(&lj);
    b.place(&lj);

    let ldc64 = b.v("sext i32 %ldc to i64");
    let (ty, size) = match out {
        GemmOut::F32 => ("float", 4),
        GemmOut::F16 => ("half", 2),
    };
    for mi in 0..cx.mi {
        for ni in 0..cx.ni {
            for r in 0..4 {
                let row = b.v(format!("add i32 {row0}, {}", mi * 16 + (r / 2) * 8));
                let col = b.v(format!("add i32 {col0}, {}", ni * 8 + r % 2));
                let rok = b.v(format!("icmp slt i32 {row}, %m"));
                let cok = b.v(format!("icmp slt i32 {col}, %n"));
                let ok = b.v(format!("and i1 {rok}, {cok}"));
                let st = b.label("st");
                let next = b.label("st.next");
                b.cond_br(&ok, &st, &next);
                b.place(&st);
                let ap = b.v(format!(
                    "getelementptr inbounds [{nacc} x float], ptr {}, i32 0, i32 {}",
                    cx.acc,
                    (mi * cx.ni + ni) * 4 + r
                ));
                let x = b.v(format!("load float, ptr {ap}, align 4"));
                let bp = bias_ptr(b, ni * 2 + r % 2);
                let bv = b.v(format!("load float, ptr {bp}, align 4"));
                let mut x = b.v(format!("fadd float {x}, {bv}"));
                if relu {
                    let neg = b.v(format!("fcmp olt float {x}, 0.0"));
                    x = b.v(format!("select i1 {neg}, float 0.0, float {x}"));
                }
                if out == GemmOut::F16 {
                    x = b.v(format!("fptrunc float {x} to half"));
                }
                let row64 = b.v(format!("sext i32 {row} to i64"));
                let col64 = b.v(format!("sext i32 {col} to i64"));
                let off = b.v(format!("mul i64 {row64}, {ldc64}"));
                let off = b.v(format!("add i64 {off}, {col64}"));
                let p = b.v(format!(
                    "getelementptr inbounds {ty}, ptr addrspace(1) {}, i64 {off}",
                    cx.c
                ));
                b.ins(format!(
                    "store {ty} {x}, ptr addrspace(1) {p}, align {size}"
                ));
                b.br(&next);
                b.place(&next);
            }
        }
    }
}
