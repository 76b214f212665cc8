//! 2:4 sparse tensor-core GEMMs on `mma.sp` (sm_80+). Two generators:
//! - [`tiled::gemm_sp_tiled`] (re-exported here): the kernel the compiler
//!   uses, tiled and pipelined like the dense `gemm_tc` (cp.async stages,
//!   `ldmatrix`, metadata loaded once per k-tile in the instruction's
//!   layout), on the weight packed by [`pack_weight`] (`pack.rs`);
//! - [`wgmma::gemm_sp_wgmma`] (re-exported here): the sm_90a kernel on
//!   `wgmma.mma_async.sp`, the dense `gemm_wgmma` pipeline with the
//!   compressed weight as the sparse A operand, on the same packing
//!   ([`pack_weight`]) padded to its tile;
//! - [`gemm_sp_f16`] (below): the correctness-first reference kernel on
//!   aoc's stored form, fragments straight from global memory. It pins the
//!   fragment and metadata layouts the tiled kernel also follows (both
//!   run on the host with `mma.sp` emulated, and on a GPU through
//!   `tests/gpu_checks/gemm_sp.py`).
//!
//! [`gemm_sp_f16`] writes one kernel computing `y = x @ wᵀ` with
//! `mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32`, the 2:4 weight
//! as the sparse operand A.
//!
//! Semantics: `x` is `m × k` f16 row-major (the activations), `w` the
//! `n × k` 2:4 weight (`n` output features), `y` is `m × n` f32 row-major:
//! `y[i][j] = Σ_k x[i][k] · w[j][k]`, products exact in f32, sums in f32
//! in the tensor core's order.
//!
//! Kernel ABI: parameters `x, values, meta, y`. `values` is the weight's
//! stored form as `aoc_ir::ops::sparse::compress` writes it (`n × k/2`
//! f16: each row's kept values in order), `meta` its indices (2 bits per
//! kept value, from the low bit up, rows one after another), which for
//! `k % 32 == 0` is exactly the instruction's metadata: the 32-bit word
//! `meta[j·k/32 + t]` holds row `j`'s sixteen indices of k-tile `t`, the
//! low half for compressed columns 0–7 and the high half for 8–15. A
//! thread of quad `q` with selector 0 (lanes `4q`, `4q + 1`, `p = lane & 1`)
//! passes half `p` of row `q`'s word in its low 16 bits and half `p` of
//! row `q + 8`'s in its high 16 bits (PTX ISA, "sparse mma metadata
//! m16n8k32 f16"). All four must be 4-byte aligned.
//! Launch: grid `[⌈n/16⌉, 1, ⌈m/128⌉]`, block `[128, 1, 1]`, no shared
//! memory: each warp computes a 16 (features) × 32 (rows) tile of `yᵀ` as
//! four m16n8 products sharing their A fragment and metadata, the four
//! warps of a block consecutive row tiles.
//!
//! Code shape: correctness first. Every operand fragment is loaded from
//! global memory as 32-bit words (two f16) straight into the registers
//! the instruction reads, four `mma.sp` per k-tile of 32 (one A and
//! metadata load for them), no shared memory, no pipelining; rows past `m` and features past `n` load zeros (their
//! metadata a valid pattern) and are not stored. It is the sparse operand's
//! layout and metadata checked end to end; [`tiled`] is the fast kernel on
//! the same fragments.
//!
//! Invariants: sm_80 and newer; `k` a positive multiple of 32, `n` below
//! 2^31 (feature indices in i32); offsets in i64; the kernel never reads
//! outside its tensors (an empty product is a kernel that returns at once).

mod pack;
pub mod tiled;
pub mod wgmma;

pub use pack::{EMPTY_META, PackedSparse, SparsePadding, pack_weight};
pub use tiled::{SpGemmSpec, SpTile, choose_sp_tile, gemm_sp_tiled};
pub use wgmma::{SpWgTile, choose_sp_wg_tile, gemm_sp_wgmma, gemm_sp_wgmma_with};

use super::Geometry;
use crate::irtext::{Body, ModuleText, check_entry_name};
use crate::target::Sm;

/// A 2:4 sparse product `y (m × n) = x (m × k) @ wᵀ (w: n × k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseGemmSpec {
    pub m: u64,
    pub n: u64,
    pub k: u64,
}

const WARPS: u32 = 4;

/// Tiles of 8 activation rows per warp: each k-step's A fragment and
/// metadata feed NT products.
const NT: u32 = 4;

/// Writes the kernel `name` for `spec` on `sm`; returns its launch.
pub fn gemm_sp_f16(m: &mut ModuleText, name: &str, spec: &SparseGemmSpec, sm: Sm) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if !sm.has_mma_f16() {
        return Err(format!("{name}: mma.sp needs sm_80 or newer, found {}", sm.name()));
    }
    let SparseGemmSpec { m: rows, n, k } = *spec;
    if k == 0 || !k.is_multiple_of(32) {
        return Err(format!("{name}: the reduction length {k} must be a positive multiple of 32"));
    }
    let grid = [n.div_ceil(16).max(1), rows.div_ceil((8 * NT * WARPS) as u64).max(1)];
    if n > i32::MAX as u64 || grid[1] > 65535 {
        return Err(format!("{name}: {rows}x{n} needs a grid of {grid:?} blocks, more than a launch holds"));
    }
    let params = "ptr addrspace(1) noalias readonly %x, ptr addrspace(1) noalias readonly %values, ptr addrspace(1) noalias readonly %meta, ptr addrspace(1) noalias %y";
    if rows == 0 || n == 0 {
        // Nothing to compute, and nothing any thread may read.
        m.func(format!("define ptx_kernel void @{name}({params}) {{\nentry:\n  ret void\n}}\n"));
        return Ok(Geometry { grid: [1, 1, 1], block: [32 * WARPS, 1, 1], smem: 0 });
    }
    let mut b = Body::new();
    m.declare("declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
    m.declare("declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
    m.declare("declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()");
    let tid = b.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
    let bx = b.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()");
    let by = b.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()");
    let lane = b.v(format!("and i32 {tid}, 31"));
    let warp = b.v(format!("lshr i32 {tid}, 5"));
    let q = b.v(format!("lshr i32 {lane}, 2"));
    let tq = b.v(format!("and i32 {lane}, 3"));
    let half = b.v(format!("and i32 {lane}, 1"));
    let wide = |b: &mut Body, v: &str| b.v(format!("zext i32 {v} to i64"));
    // Feature rows fa, fb of A; activation row r of B; output rows of D.
    let m0 = b.v(format!("shl i32 {bx}, 4"));
    let fa = b.v(format!("add i32 {m0}, {q}"));
    let fb = b.v(format!("add i32 {fa}, 8"));
    // This warp's NT tiles of 8 activation rows: n0 + 8·nt + q.
    let n0 = b.v(format!("mul i32 {by}, {}", 8 * NT * WARPS));
    let wn = b.v(format!("mul i32 {warp}, {}", 8 * NT));
    let n0 = b.v(format!("add i32 {n0}, {wn}"));
    let (fa64, fb64) = (wide(&mut b, &fa), wide(&mut b, &fb));
    let fa_ok = b.v(format!("icmp ult i64 {fa64}, {n}"));
    let fb_ok = b.v(format!("icmp ult i64 {fb64}, {n}"));
    // Clamped rows, so every address lies inside its tensor.
    let fa_c = b.v(format!("select i1 {fa_ok}, i64 {fa64}, i64 0"));
    let fb_c = b.v(format!("select i1 {fb_ok}, i64 {fb64}, i64 0"));
    let tq64 = wide(&mut b, &tq);
    let (kw_v, kw_x, tiles) = (k / 4, k / 2, k / 32);
    // Word offsets at k-tile 0: values row·k/4 + tq (+4 for columns 8-15),
    // x row·k/2 + tq (+4j), meta row·k/32.
    let va = b.v(format!("mul i64 {fa_c}, {kw_v}"));
    let va = b.v(format!("add i64 {va}, {tq64}"));
    let vb = b.v(format!("mul i64 {fb_c}, {kw_v}"));
    let vb = b.v(format!("add i64 {vb}, {tq64}"));
    let mut xrows = vec![];
    for nt in 0..NT {
        let r = b.v(format!("add i32 {n0}, {}", 8 * nt));
        let r = b.v(format!("add i32 {r}, {q}"));
        let r64 = wide(&mut b, &r);
        let ok = b.v(format!("icmp ult i64 {r64}, {rows}"));
        let rc = b.v(format!("select i1 {ok}, i64 {r64}, i64 0"));
        let xr = b.v(format!("mul i64 {rc}, {kw_x}"));
        let xr = b.v(format!("add i64 {xr}, {tq64}"));
        xrows.push((xr, ok));
    }
    let ma = b.v(format!("mul i64 {fa_c}, {tiles}"));
    let mb = b.v(format!("mul i64 {fb_c}, {tiles}"));
    let shift = b.v(format!("shl i32 {half}, 4"));
    b.br("loop");
    b.place("loop");
    let t = "%t";
    let next_t = "%t.next";
    let accs: Vec<Vec<String>> = (0..NT).map(|nt| (0..4).map(|i| format!("%c{nt}_{i}")).collect()).collect();
    let next: Vec<Vec<String>> = (0..NT).map(|nt| (0..4).map(|i| format!("%d{nt}_{i}")).collect()).collect();
    b.ins(format!("{t} = phi i64 [ 0, %entry ], [ {next_t}, %loop ]"));
    for (cs, ns) in accs.iter().zip(&next) {
        for (c, nx) in cs.iter().zip(ns) {
            b.ins(format!("{c} = phi float [ 0.0, %entry ], [ {nx}, %loop ]"));
        }
    }
    // A 32-bit word of `ptr` (its row clamped in range), or `empty`.
    let load = |b: &mut Body, ptr: &str, word: &str, ok: &str, empty: u32| {
        let p = b.v(format!("getelementptr inbounds i32, ptr addrspace(1) {ptr}, i64 {word}"));
        let v = b.v(format!("load i32, ptr addrspace(1) {p}, align 4"));
        b.v(format!("select i1 {ok}, i32 {v}, i32 {empty}"))
    };
    // A (once for the NT products): rows fa, fb; compressed columns 2tq
    // (+8) of k-tile t.
    let t8 = b.v(format!("shl i64 {t}, 3"));
    let wa = b.v(format!("add i64 {va}, {t8}"));
    let wb = b.v(format!("add i64 {vb}, {t8}"));
    let wa4 = b.v(format!("add i64 {wa}, 4"));
    let wb4 = b.v(format!("add i64 {wb}, 4"));
    let a0 = load(&mut b, "%values", &wa, &fa_ok, 0);
    let a1 = load(&mut b, "%values", &wb, &fb_ok, 0);
    let a2 = load(&mut b, "%values", &wa4, &fa_ok, 0);
    let a3 = load(&mut b, "%values", &wb4, &fb_ok, 0);
    // Metadata: half `lane & 1` of rows fa (low) and fb (high).
    let mwa = b.v(format!("add i64 {ma}, {t}"));
    let mwb = b.v(format!("add i64 {mb}, {t}"));
    let ea = load(&mut b, "%meta", &mwa, &fa_ok, EMPTY_META);
    let eb = load(&mut b, "%meta", &mwb, &fb_ok, EMPTY_META);
    let ea = b.v(format!("lshr i32 {ea}, {shift}"));
    let ea = b.v(format!("and i32 {ea}, 65535"));
    let eb = b.v(format!("lshr i32 {eb}, {shift}"));
    let eb = b.v(format!("shl i32 {eb}, 16"));
    let e = b.v(format!("or i32 {ea}, {eb}"));
    let t16 = b.v(format!("shl i64 {t}, 4"));
    let ty = "{ float, float, float, float }";
    let text = "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9, $10, $11}, {$0, $1, $2, $3}, $12, 0x0;";
    for (nt, (xr, ok)) in xrows.iter().enumerate() {
        // B: row n0 + 8·nt + q, k = 32t + 2tq + 8j.
        let xw = b.v(format!("add i64 {xr}, {t16}"));
        let mut args: Vec<String> = [&a0, &a1, &a2, &a3].iter().map(|a| format!("i32 {a}")).collect();
        for j in 0..4 {
            let w = b.v(format!("add i64 {xw}, {}", 4 * j));
            let v = load(&mut b, "%x", &w, ok, 0);
            args.push(format!("i32 {v}"));
        }
        args.push(format!("i32 {e}"));
        args.extend(accs[nt].iter().map(|c| format!("float {c}")));
        let d = b.v(format!(
            "call {ty} asm sideeffect \"{text}\", \"=f,=f,=f,=f,r,r,r,r,r,r,r,r,r,0,1,2,3\"({}) convergent",
            args.join(", ")
        ));
        for (i, nx) in next[nt].iter().enumerate() {
            b.ins(format!("{nx} = extractvalue {ty} {d}, {i}"));
        }
    }
    b.ins(format!("{next_t} = add i64 {t}, 1"));
    let more = b.v(format!("icmp ult i64 {next_t}, {tiles}"));
    b.cond_br(&more, "loop", "store");
    b.place("store");
    // D[f][row] of tile nt: d0, d1 at feature fa, rows n0 + 8·nt + 2tq
    // (+1); d2, d3 at fb.
    let tq2 = b.v(format!("shl i32 {tq}, 1"));
    for (nt, ns) in next.iter().enumerate() {
        let c0 = b.v(format!("add i32 {n0}, {}", 8 * nt));
        let c0 = b.v(format!("add i32 {c0}, {tq2}"));
        for (i, (feat, fok)) in [(&fa64, &fa_ok), (&fa64, &fa_ok), (&fb64, &fb_ok), (&fb64, &fb_ok)].into_iter().enumerate() {
            let row = b.v(format!("add i32 {c0}, {}", i % 2));
            let row = wide(&mut b, &row);
            let rok = b.v(format!("icmp ult i64 {row}, {rows}"));
            let ok = b.v(format!("and i1 {rok}, {fok}"));
            let (yes, no) = (b.label("st"), b.label("skip"));
            b.cond_br(&ok, &yes, &no);
            b.place(&yes);
            let off = b.v(format!("mul i64 {row}, {n}"));
            let off = b.v(format!("add i64 {off}, {feat}"));
            let p = b.v(format!("getelementptr inbounds float, ptr addrspace(1) %y, i64 {off}"));
            b.ins(format!("store float {}, ptr addrspace(1) {p}, align 4", ns[i]));
            b.br(&no);
            b.place(&no);
        }
    }
    b.ins("ret void");
    m.func(format!(
        "define ptx_kernel void @{name}({params}) \"nvvm.maxntid\"=\"{}\" {{\nentry:\n{}}}\n",
        32 * WARPS,
        b.into_text()
    ));
    Ok(Geometry { grid: [grid[0] as u32, 1, grid[1] as u32], block: [32 * WARPS, 1, 1], smem: 0 })
}
