//! Row-wise kernels of a plan, all f32 with every shape baked in:
//! softmax and log-softmax (`Step::Softmax`), layer normalization
//! (`Step::LayerNorm`), reductions over the middle axis (`Step::Reduce`)
//! and NHWC pooling (`Step::Pool`). The CPU kernels
//! (`aoc_runtime::kernels::{norm, pool}`) are the reference: the formulas
//! below are theirs operation by operation, so results differ only by the
//! order in which sums are added (and exp/log, which are a few ulp on both).
//!
//! Kernels, parameters (global f32 pointers, in this order) and launch
//! geometry (a one-dimensional grid and block; `smem` is always 0, the few
//! bytes of shared memory are static):
//! - [`softmax`] `(x, y)` and [`layer_norm`] `(x, [gamma], [beta], y)` over
//!   a `rows × cols` row-major matrix. Rows of at most 1024 columns: a group
//!   of `g = min(32, next_pow2(cols))` lanes per row (a warp or an aligned
//!   part of one), `block = min(256, ⌈rows·g / 32⌉·32)`,
//!   `grid = ⌈rows / (block / g)⌉`; each lane keeps its `⌈cols / g⌉` values
//!   in registers, so `x` is read once. Longer rows: a block per row
//!   (`grid = rows`), `block = clamp(⌈cols / 16⌉ rounded up to 32, 128,
//!   1024)`; up to 16 values per thread in registers (cols ≤ 16384), else
//!   three passes over the row (it stays in L1/L2).
//! - [`reduce`] `(x, y)`, `y[o][i] = reduce_l x[o][l][i]`. `inner == 1`
//!   (contiguous runs): lane groups as above over `len` (a block of 512
//!   per output when `len > 1024` and `outer < 2048`); the group's first
//!   lane writes. `inner > 1`: with enough outputs (`outer·inner ≥ 2^16`, or
//!   `len < 8`) one thread per output, consecutive threads on consecutive
//!   `i`, `block = 256`, `grid = min(⌈outer·inner / 256⌉, 2^31 − 1)` with a
//!   grid-stride loop; with few outputs `len` is split `by` ways (a power of
//!   two up to 64) over a `bx × by` block (`bx = min(next_pow2(inner),
//!   256 / by)`, `grid = outer·⌈inner / bx⌉`), partial results meet in
//!   shared memory. `len == 0` writes the empty result (0, NaN, −∞, +∞).
//! - [`pool`] `(x, y)`: one thread per output element (channel fastest),
//!   `block = 256`, `grid = min(⌈n·oh·ow·c / 256⌉, 2^31 − 1)`, grid-stride.
//!
//! Invariants:
//! - Lane groups never diverge before a shuffle: loads past a row's end or
//!   of rows past the last one read a clamped (valid) address and are
//!   masked to the reduction's identity; only stores are conditional. Every
//!   block size is a multiple of 32 wherever shuffles are used.
//! - Group reductions are butterflies, so every lane of a group ends with
//!   the same value; a block's warps combine through shared memory, one
//!   slot per reduction (no slot is reused, so one barrier each).
//! - NaN: softmax's row maximum ignores NaN (as the CPU's `v > m`), the sum
//!   then carries it; reduce max/min and max pooling propagate NaN
//!   (`llvm.maximum`/`llvm.minimum`). A zero extent gives a kernel that
//!   returns at once (grid 1); `x` and `y` must not overlap.
//! - Offsets are 64-bit, except pooling, which uses 32-bit arithmetic when
//!   every index and coordinate fits. Grids are exact (no row loop), so a
//!   generator refuses shapes that would need more than 2^31 − 1 blocks
//!   (far past any GPU's memory).

use aoc_runtime::plan::{ConvGeom, PoolKind, ReduceKind};

use super::Geometry;
use crate::irtext::{Body, ModuleText, check_entry_name, f32_lit};
use crate::pointwise::math::{self, MathFn};

const WARP: u64 = 32;
/// Threads per block of the kernels over many independent rows/outputs.
const BLOCK: u64 = 256;
/// Rows up to this long get a lane group (at most a warp) each.
const LANE_ROW_MAX: u64 = 1024;
/// Values per thread a block-wide row keeps in registers.
const BLOCK_REGS: u64 = 16;
/// Unrolled values per thread of a reduction (longer runs loop).
const REDUCE_REGS: u64 = 8;
const GRID_MAX: u64 = i32::MAX as u64;
/// Outputs below which a middle-axis reduction splits `len` over threads.
const SPLIT_BELOW: u64 = 1 << 16;

/// How two values combine in a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Sum,
    /// Maximum ignoring NaN (`maxnum`): the softmax row maximum.
    MaxNum,
    /// Maximum and minimum propagating NaN.
    Max,
    Min,
}

impl Op {
    fn of(kind: ReduceKind) -> Op {
        match kind {
            ReduceKind::Sum | ReduceKind::Mean => Op::Sum,
            ReduceKind::Max => Op::Max,
            ReduceKind::Min => Op::Min,
        }
    }

    fn identity(self) -> String {
        f32_lit(match self {
            Op::Sum => 0.0,
            Op::MaxNum | Op::Max => f32::NEG_INFINITY,
            Op::Min => f32::INFINITY,
        })
    }
}

/// One kernel function being written.
struct Kernel<'m> {
    m: &'m mut ModuleText,
    b: Body,
    name: String,
    /// The basic block being written (phis name their predecessors).
    cur: String,
}

impl<'m> Kernel<'m> {
    fn new(m: &'m mut ModuleText, name: &str) -> Result<Kernel<'m>, String> {
        check_entry_name(name)?;
        Ok(Kernel {
            m,
            b: Body::new(),
            name: name.to_string(),
            cur: "entry".to_string(),
        })
    }

    fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    fn place(&mut self, label: &str) {
        self.b.place(label);
        self.cur = label.to_string();
    }

    /// Ends the body and adds the kernel with `params` pointer parameters.
    fn finish(mut self, params: usize) {
        self.ins("ret void");
        let ps: Vec<String> = (0..params)
            .map(|i| format!("ptr addrspace(1) noalias %p{i}"))
            .collect();
        let text = format!(
            "define ptx_kernel void @{}({}) {{\nentry:\n{}}}\n",
            self.name,
            ps.join(", "),
            self.b.into_text()
        );
        self.m.func(text);
    }

    /// A kernel that returns at once.
    fn empty(self, params: usize) -> Geometry {
        self.finish(params);
        Geometry {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            smem: 0,
        }
    }

    /// A static shared array of `floats` f32 for this kernel; its name.
    fn shared(&mut self, floats: u64) -> String {
        let g = format!("@{}.smem", self.name);
        self.m.declare(&format!(
            "{g} = internal addrspace(3) global [{floats} x float] undef, align 4"
        ));
        g
    }

    /// `%x` of a special register (i32).
    fn sreg(&mut self, r: &str) -> String {
        self.m
            .declare(&format!("declare i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"));
        self.v(format!("call i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"))
    }

    /// A two-operand intrinsic `@llvm.{f}` on `ty`.
    fn call2(&mut self, f: &str, ty: &str, a: &str, b: &str) -> String {
        self.m
            .declare(&format!("declare {ty} @llvm.{f}({ty}, {ty})"));
        self.v(format!("call {ty} @llvm.{f}({ty} {a}, {ty} {b})"))
    }

    fn umin(&mut self, ty: &str, a: &str, b: &str) -> String {
        self.call2(&format!("umin.{ty}"), ty, a, b)
    }

    /// The f32 at element `off` (of type `ty`) of global `p`, or of the
    /// shared array `p` when `ty` is `"shared"` (32-bit offsets).
    fn load(&mut self, p: &str, ty: &str, off: &str) -> String {
        let (a, space) = self.elem(p, ty, off);
        self.v(format!("load float, ptr addrspace({space}) {a}, align 4"))
    }

    fn store(&mut self, val: &str, p: &str, ty: &str, off: &str) {
        let (a, space) = self.elem(p, ty, off);
        self.ins(format!(
            "store float {val}, ptr addrspace({space}) {a}, align 4"
        ));
    }

    fn elem(&mut self, p: &str, ty: &str, off: &str) -> (String, u32) {
        let (ty, space) = if ty == "shared" { ("i32", 3) } else { (ty, 1) };
        let a = format!("getelementptr inbounds float, ptr addrspace({space}) {p}, {ty} {off}");
        (self.v(a), space)
    }

    fn barrier(&mut self) {
        self.m
            .declare("declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)");
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    }

    fn combine(&mut self, op: Op, a: &str, b: &str) -> String {
        match op {
            Op::Sum => self.v(format!("fadd float {a}, {b}")),
            Op::MaxNum => self.call2("maxnum.f32", "float", a, b),
            Op::Max => self.call2("maximum.f32", "float", a, b),
            Op::Min => self.call2("minimum.f32", "float", a, b),
        }
    }

    /// `ok ? v : identity(op)` (just `v` without a condition).
    fn masked(&mut self, ok: &Option<String>, v: &str, op: Op) -> String {
        match ok {
            Some(c) => self.v(format!("select i1 {c}, float {v}, float {}", op.identity())),
            None => v.to_string(),
        }
    }

    /// `a && b` for optional conditions (`None` is true).
    fn both(&mut self, a: &Option<String>, b: &Option<String>) -> Option<String> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.v(format!("and i1 {a}, {b}"))),
            (Some(c), None) | (None, Some(c)) => Some(c.clone()),
            (None, None) => None,
        }
    }

    /// Butterfly over aligned groups of `lanes` lanes (a power of two ≤ 32):
    /// afterwards every lane of a group holds the group's result.
    fn butterfly(&mut self, ops: &[Op], vals: &mut [String], lanes: u64) {
        self.m
            .declare("declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)");
        let mut k = lanes / 2;
        while k >= 1 {
            for (op, v) in ops.iter().zip(vals.iter_mut()) {
                let o = self.v(format!(
                    "call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float {v}, i32 {k}, i32 31)"
                ));
                *v = self.combine(*op, v, &o);
            }
            k /= 2;
        }
    }

    /// Runs `body` when `cond` holds (always without a condition).
    fn if_then(&mut self, cond: &Option<String>, body: impl FnOnce(&mut Self)) {
        let Some(c) = cond else {
            body(self);
            return;
        };
        let then = self.b.label("then");
        let join = self.b.label("join");
        self.b.cond_br(c, &then, &join);
        self.place(&then);
        body(self);
        self.b.br(&join);
        self.place(&join);
    }

    /// `for (i = start; i < end; i += step)` on unsigned `ty` values, with
    /// f32 accumulators starting at `init`: `body(i, accs)` returns their
    /// next values; returns their final values.
    fn for_range(
        &mut self,
        ty: &str,
        start: &str,
        end: &str,
        step: &str,
        init: &[String],
        body: impl FnOnce(&mut Self, &str, &[String]) -> Vec<String>,
    ) -> Vec<String> {
        let pre = self.cur.clone();
        let lp = self.b.label("loop");
        let latch = self.b.label("latch");
        let done = self.b.label("done");
        let any = self.v(format!("icmp ult {ty} {start}, {end}"));
        self.b.cond_br(&any, &lp, &done);
        self.place(&lp);
        // Values the phis name before they are written get names derived
        // from the loop's (unique) label.
        let i = format!("%{lp}.i");
        self.ins(format!(
            "{i} = phi {ty} [ {start}, %{pre} ], [ %{lp}.n, %{latch} ]"
        ));
        let accs: Vec<String> = (0..init.len()).map(|a| format!("%{lp}.a{a}")).collect();
        for (a, x) in accs.iter().zip(init) {
            self.ins(format!(
                "{a} = phi float [ {x}, %{pre} ], [ {a}.next, %{latch} ]"
            ));
        }
        let next = body(self, &i, &accs);
        assert_eq!(next.len(), init.len(), "one next value per accumulator");
        self.b.br(&latch);
        self.place(&latch);
        for (a, r) in accs.iter().zip(&next) {
            self.ins(format!("{a}.next = bitcast float {r} to float"));
        }
        self.ins(format!("%{lp}.n = add {ty} {i}, {step}"));
        let more = self.v(format!("icmp ult {ty} %{lp}.n, {end}"));
        self.b.cond_br(&more, &lp, &done);
        self.place(&done);
        accs.iter()
            .zip(init)
            .map(|(a, x)| self.v(format!("phi float [ {x}, %{pre} ], [ {a}.next, %{latch} ]")))
            .collect()
    }

    /// A grid-stride loop over `0..total`; `body` gets the i64 index.
    fn grid_stride(&mut self, total: u64, body: impl FnOnce(&mut Self, &str)) {
        let mut r = Vec::new();
        for s in ["tid", "ctaid", "ntid", "nctaid"] {
            let x = self.sreg(s);
            r.push(self.v(format!("zext i32 {x} to i64")));
        }
        let base = self.v(format!("mul i64 {}, {}", r[1], r[2]));
        let start = self.v(format!("add i64 {base}, {}", r[0]));
        let step = self.v(format!("mul i64 {}, {}", r[2], r[3]));
        self.for_range("i64", &start, &total.to_string(), &step, &[], |k, q, _| {
            body(k, q);
            Vec::new()
        });
    }
}

/// How the rows of a row kernel map to threads.
#[derive(Clone, Copy, Debug)]
struct RowPlan {
    rows: u64,
    cols: u64,
    /// Threads per row: a power of two ≤ 32, or the whole block.
    g: u64,
    block: u64,
    grid: u64,
    /// Values per thread kept in registers, or `None`: loop over the row.
    per: Option<u64>,
}

impl RowPlan {
    /// A lane group per row, as many rows per block as fit in 256 threads.
    fn lanes(rows: u64, cols: u64, max_per: u64) -> Result<RowPlan, String> {
        let g = cols.next_power_of_two().min(WARP);
        let block = if rows >= BLOCK / g {
            BLOCK
        } else {
            (rows * g).next_multiple_of(WARP)
        };
        let per = cols.div_ceil(g);
        RowPlan::checked(RowPlan {
            rows,
            cols,
            g,
            block,
            grid: rows.div_ceil(block / g),
            per: (per <= max_per).then_some(per),
        })
    }

    /// A block of `threads` (a multiple of 32) per row.
    fn per_block(rows: u64, cols: u64, threads: u64, max_per: u64) -> Result<RowPlan, String> {
        let per = cols.div_ceil(threads);
        RowPlan::checked(RowPlan {
            rows,
            cols,
            g: threads,
            block: threads,
            grid: rows,
            per: (per <= max_per).then_some(per),
        })
    }

    /// The plan for softmax and layer norm rows.
    fn norm(rows: u64, cols: u64) -> Result<RowPlan, String> {
        if cols <= LANE_ROW_MAX {
            RowPlan::lanes(rows, cols, LANE_ROW_MAX)
        } else {
            let t = cols
                .div_ceil(BLOCK_REGS)
                .next_multiple_of(WARP)
                .clamp(128, 1024);
            RowPlan::per_block(rows, cols, t, BLOCK_REGS)
        }
    }

    fn checked(p: RowPlan) -> Result<RowPlan, String> {
        if p.grid > GRID_MAX {
            return Err(format!("{} rows need more than 2^31-1 blocks", p.rows));
        }
        if p.rows
            .checked_mul(p.cols)
            .is_none_or(|n| n > i64::MAX as u64)
        {
            return Err(format!("{}x{} is too large", p.rows, p.cols));
        }
        Ok(p)
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            grid: [self.grid as u32, 1, 1],
            block: [self.block as u32, 1, 1],
            smem: 0,
        }
    }
}

/// The per-thread values of a row kernel.
struct Rows {
    plan: RowPlan,
    /// This thread's index in its row group (i64).
    t: String,
    /// This thread's row, clamped to the last one (i64).
    row: String,
    /// `row · cols` of this thread's row, clamped to the last row (i64).
    off: String,
    /// Whether the row exists (`None`: always).
    row_ok: Option<String>,
    lane: String,
    warp: String,
    /// The cross-warp slots (32 floats each) of a block-wide row.
    smem: Option<String>,
}

impl Kernel<'_> {
    /// Thread indices of `plan`; `slots` cross-warp reductions at most.
    fn rows(&mut self, plan: RowPlan, slots: u64) -> Rows {
        let tid = self.sreg("tid");
        let ctaid = self.sreg("ctaid");
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let block_row = self.v(format!("zext i32 {ctaid} to i64"));
        let (t, row, row_ok) = if plan.g == plan.block {
            let t = self.v(format!("zext i32 {tid} to i64"));
            (t, block_row, None)
        } else {
            let per_block = plan.block / plan.g;
            let grp = self.v(format!("lshr i32 {tid}, {}", plan.g.trailing_zeros()));
            let t = self.v(format!("and i32 {tid}, {}", plan.g - 1));
            let t = self.v(format!("zext i32 {t} to i64"));
            let grp = self.v(format!("zext i32 {grp} to i64"));
            let first = self.v(format!("mul i64 {block_row}, {per_block}"));
            let row = self.v(format!("add i64 {first}, {grp}"));
            if plan.rows.is_multiple_of(per_block) {
                (t, row, None)
            } else {
                let ok = self.v(format!("icmp ult i64 {row}, {}", plan.rows));
                let row = self.umin("i64", &row, &(plan.rows - 1).to_string());
                (t, row, Some(ok))
            }
        };
        let off = self.v(format!("mul i64 {row}, {}", plan.cols));
        let smem = (plan.g > WARP).then(|| self.shared(slots * WARP));
        Rows {
            plan,
            t,
            row,
            off,
            row_ok,
            lane,
            warp,
            smem,
        }
    }

    /// Reduces `vals` over the row group into every thread of it, using
    /// cross-warp slots `slot..` of a block-wide row.
    fn reduce_group(&mut self, r: &Rows, vals: &[(Op, String)], slot: u64) -> Vec<String> {
        let ops: Vec<Op> = vals.iter().map(|(o, _)| *o).collect();
        let mut vs: Vec<String> = vals.iter().map(|(_, v)| v.clone()).collect();
        self.butterfly(&ops, &mut vs, r.plan.g.min(WARP));
        let Some(smem) = &r.smem else {
            return vs;
        };
        let lane0 = Some(self.v(format!("icmp eq i32 {}, 0", r.lane)));
        let warp = r.warp.clone();
        let partial = vs.clone();
        self.if_then(&lane0, |k| {
            for (i, v) in partial.iter().enumerate() {
                let idx = k.v(format!("add i32 {warp}, {}", (slot + i as u64) * WARP));
                k.store(v, smem, "shared", &idx);
            }
        });
        self.barrier();
        // Every warp combines the warps' partials the same way, each
        // aligned group of `nwp` lanes holding all of them.
        let nw = r.plan.g / WARP;
        let nwp = nw.next_power_of_two();
        let idx = self.v(format!("and i32 {}, {}", r.lane, nwp - 1));
        let ok = (nw != nwp).then(|| self.v(format!("icmp ult i32 {idx}, {nw}")));
        for (i, v) in vs.iter_mut().enumerate() {
            let at = self.v(format!("add i32 {idx}, {}", (slot + i as u64) * WARP));
            let x = self.load(smem, "shared", &at);
            *v = self.masked(&ok, &x, ops[i]);
        }
        self.butterfly(&ops, &mut vs, nwp);
        vs
    }

    /// This thread's elements of the row of `p`: loaded now into registers
    /// (columns `t + g·j`, clamped to the row, `j < per`), or streamed.
    fn row_src(&mut self, r: &Rows, p: &str) -> Src {
        let Some(per) = r.plan.per else {
            return Src::Stream(p.to_string());
        };
        let (g, cols) = (r.plan.g, r.plan.cols);
        let held = (0..per)
            .map(|j| {
                let mut c = r.t.clone();
                if j > 0 {
                    c = self.v(format!("add i64 {c}, {}", g * j));
                }
                let mut ok = None;
                if g * (j + 1) > cols {
                    ok = Some(self.v(format!("icmp ult i64 {c}, {cols}")));
                    c = self.umin("i64", &c, &(cols - 1).to_string());
                }
                let x = self.row_load(r, p, &c);
                Elem {
                    c,
                    ok,
                    x,
                    memo: Vec::new(),
                }
            })
            .collect();
        Src::Held(held)
    }

    /// `e[key]`, computed by `f` the first time (each pass when streamed).
    fn memo(
        &mut self,
        e: &mut Elem,
        key: &'static str,
        f: impl FnOnce(&mut Self, &Elem) -> String,
    ) -> String {
        if let Some((_, v)) = e.memo.iter().find(|(k, _)| *k == key) {
            return v.clone();
        }
        let v = f(self, e);
        e.memo.push((key, v.clone()));
        v
    }

    /// Folds `f(e)` (a value per op) over this thread's elements, then
    /// reduces over the row group through slots `slot..`.
    fn row_reduce(
        &mut self,
        r: &Rows,
        src: &mut Src,
        ops: &[Op],
        slot: u64,
        f: impl Fn(&mut Self, &mut Elem) -> Vec<String>,
    ) -> Vec<String> {
        let mut acc: Vec<String> = ops.iter().map(|o| o.identity()).collect();
        match src {
            Src::Held(es) => {
                for e in es.iter_mut() {
                    let vs = f(self, e);
                    for (i, op) in ops.iter().enumerate() {
                        let v = self.masked(&e.ok, &vs[i], *op);
                        acc[i] = self.combine(*op, &acc[i], &v);
                    }
                }
            }
            Src::Stream(p) => {
                acc = self.row_loop(r, &acc, |k, c, a| {
                    let mut e = k.stream_elem(r, p, c);
                    let vs = f(k, &mut e);
                    (0..ops.len())
                        .map(|i| k.combine(ops[i], &a[i], &vs[i]))
                        .collect()
                });
            }
        }
        let vals: Vec<(Op, String)> = ops.iter().copied().zip(acc).collect();
        self.reduce_group(r, &vals, slot)
    }

    /// Writes `f(e)` at this thread's elements of row `p`.
    fn row_write(
        &mut self,
        r: &Rows,
        src: &mut Src,
        p: &str,
        f: impl Fn(&mut Self, &mut Elem) -> String,
    ) {
        match src {
            Src::Held(es) => {
                for e in es.iter_mut() {
                    let v = f(self, e);
                    self.row_store(r, p, &e.c.clone(), &e.ok.clone(), &v);
                }
            }
            Src::Stream(px) => {
                self.row_loop(r, &[], |k, c, _| {
                    let mut e = k.stream_elem(r, px, c);
                    let v = f(k, &mut e);
                    k.row_store(r, p, c, &None, &v);
                    Vec::new()
                });
            }
        }
    }

    fn stream_elem(&mut self, r: &Rows, p: &str, c: &str) -> Elem {
        let x = self.row_load(r, p, c);
        Elem {
            c: c.to_string(),
            ok: None,
            x,
            memo: Vec::new(),
        }
    }

    /// Element `c` of this thread's row of `p`.
    fn row_load(&mut self, r: &Rows, p: &str, c: &str) -> String {
        let off = self.v(format!("add i64 {}, {c}", r.off));
        self.load(p, "i64", &off)
    }

    fn row_store(&mut self, r: &Rows, p: &str, c: &str, ok: &Option<String>, val: &str) {
        let cond = self.both(ok, &r.row_ok);
        let off = r.off.clone();
        self.if_then(&cond, |k| {
            let o = k.v(format!("add i64 {off}, {c}"));
            k.store(val, p, "i64", &o);
        });
    }

    /// Loops over this thread's columns of the row (`t, t+g, …`).
    fn row_loop(
        &mut self,
        r: &Rows,
        init: &[String],
        body: impl FnOnce(&mut Self, &str, &[String]) -> Vec<String>,
    ) -> Vec<String> {
        let (t, cols, g) = (r.t.clone(), r.plan.cols.to_string(), r.plan.g.to_string());
        self.for_range("i64", &t, &cols, &g, init, body)
    }
}

/// One element of a thread's row: its column, whether it is inside the row
/// (`None`: always), its value, and values derived from it so far.
struct Elem {
    c: String,
    ok: Option<String>,
    x: String,
    memo: Vec<(&'static str, String)>,
}

/// Where a thread's elements of a row come from: registers filled by one
/// read (`Held`), or a pointer each pass reads again (`Stream`).
enum Src {
    Held(Vec<Elem>),
    Stream(String),
}

/// Softmax (`log`: log-softmax) over each `cols`-long row of the row-major
/// `rows × cols` matrix `x` into `y`: `y = exp(x − max) / Σ exp(x − max)`,
/// or `(x − max) − ln Σ exp(x − max)`. Parameters `(x, y)`.
pub fn softmax(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    log: bool,
) -> Result<Geometry, String> {
    let mut k = Kernel::new(m, name)?;
    if rows == 0 || cols == 0 {
        return Ok(k.empty(2));
    }
    let plan = RowPlan::norm(rows, cols)?;
    math::define(k.m, MathFn::Exp);
    if log {
        math::define(k.m, MathFn::Log);
    }
    let r = k.rows(plan, 2);
    let mut src = k.row_src(&r, "%p0");
    let mx = k.row_reduce(&r, &mut src, &[Op::MaxNum], 0, |_, e| vec![e.x.clone()]);
    let d = |k: &mut Kernel, e: &mut Elem| {
        k.memo(e, "d", |k, e| k.v(format!("fsub float {}, {}", e.x, mx[0])))
    };
    let exp = |k: &mut Kernel, e: &mut Elem| {
        let d = d(k, e);
        k.memo(e, "e", |k, _| {
            k.v(format!("call float @aoc.exp(float {d})"))
        })
    };
    let s = k.row_reduce(&r, &mut src, &[Op::Sum], 1, |k, e| vec![exp(k, e)]);
    if log {
        let ls = k.v(format!("call float @aoc.log(float {})", s[0]));
        k.row_write(&r, &mut src, "%p1", |k, e| {
            let d = d(k, e);
            k.v(format!("fsub float {d}, {ls}"))
        });
    } else {
        let inv = k.v(format!("fdiv float 1.0, {}", s[0]));
        k.row_write(&r, &mut src, "%p1", |k, e| {
            let x = exp(k, e);
            k.v(format!("fmul float {x}, {inv}"))
        });
    }
    k.finish(2);
    Ok(plan.geometry())
}

/// Layer normalization of each `cols`-long row of the row-major `rows ×
/// cols` matrix `x` into `y`: `(x − mean) / sqrt(var + epsilon) · gamma +
/// beta` with the population variance, computed as the CPU kernel does: a
/// first mean `m0`, deviations `d = x − m0`, `δ = Σd / n`,
/// `var = max((Σd² − (Σd)²/n) / n, 0)`, `y = (d − δ)·rstd·gamma + beta`.
/// Parameters `(x, gamma, beta, y)`, `gamma`/`beta` only when asked for
/// (`cols` values each; absent they mean 1 and 0).
pub fn layer_norm(
    m: &mut ModuleText,
    name: &str,
    rows: u64,
    cols: u64,
    epsilon: f32,
    gamma: bool,
    beta: bool,
) -> Result<Geometry, String> {
    let mut k = Kernel::new(m, name)?;
    let params = 2 + usize::from(gamma) + usize::from(beta);
    if rows == 0 || cols == 0 {
        return Ok(k.empty(params));
    }
    let plan = RowPlan::norm(rows, cols)?;
    let r = k.rows(plan, 3);
    let pg = gamma.then_some("%p1");
    let pb = beta.then(|| format!("%p{}", 1 + usize::from(gamma)));
    let n = f32_lit(cols as f32);
    let mut src = k.row_src(&r, "%p0");
    let s = k.row_reduce(&r, &mut src, &[Op::Sum], 0, |_, e| vec![e.x.clone()]);
    let m0 = k.v(format!("fdiv float {}, {n}", s[0]));
    let d = |k: &mut Kernel, e: &mut Elem| {
        k.memo(e, "d", |k, e| k.v(format!("fsub float {}, {m0}", e.x)))
    };
    let sums = k.row_reduce(&r, &mut src, &[Op::Sum, Op::Sum], 1, |k, e| {
        let d = d(k, e);
        vec![d.clone(), k.v(format!("fmul float {d}, {d}"))]
    });
    let (sd, sd2) = (&sums[0], &sums[1]);
    let delta = k.v(format!("fdiv float {sd}, {n}"));
    let q = k.v(format!("fmul float {sd}, {sd}"));
    let q = k.v(format!("fdiv float {q}, {n}"));
    let q = k.v(format!("fsub float {sd2}, {q}"));
    let var = k.v(format!("fdiv float {q}, {n}"));
    // `maxnum`, as Rust's `max`, also turns a NaN variance into 0.
    let var = k.call2("maxnum.f32", "float", &var, "0.0");
    let ve = k.v(format!("fadd float {var}, {}", f32_lit(epsilon)));
    k.m.declare("declare float @llvm.sqrt.f32(float)");
    let sq = k.v(format!("call float @llvm.sqrt.f32(float {ve})"));
    let rstd = k.v(format!("fdiv float 1.0, {sq}"));
    k.row_write(&r, &mut src, &format!("%p{}", params - 1), |k, e| {
        let d = d(k, e);
        let t = k.v(format!("fsub float {d}, {delta}"));
        let mut o = k.v(format!("fmul float {t}, {rstd}"));
        if let Some(pg) = pg {
            let gv = k.load(pg, "i64", &e.c);
            o = k.v(format!("fmul float {o}, {gv}"));
        }
        if let Some(pb) = &pb {
            let bv = k.load(pb, "i64", &e.c);
            o = k.v(format!("fadd float {o}, {bv}"));
        }
        o
    });
    k.finish(params);
    Ok(plan.geometry())
}

/// `y[o][i] = reduce_l x[o][l][i]` for `x` of `outer × len × inner` and `y`
/// of `outer × inner`; an empty reduction gives 0 (sum), NaN (mean), −∞
/// (max) or +∞ (min); max and min propagate NaN; mean is the sum divided
/// by `len`. Parameters `(x, y)`.
pub fn reduce(
    m: &mut ModuleText,
    name: &str,
    kind: ReduceKind,
    outer: u64,
    len: u64,
    inner: u64,
) -> Result<Geometry, String> {
    let mut k = Kernel::new(m, name)?;
    let too_big = || format!("reduction of {outer}x{len}x{inner} is too large");
    let outputs = outer.checked_mul(inner).ok_or_else(too_big)?;
    let total = outputs.checked_mul(len).ok_or_else(too_big)?;
    if total > i64::MAX as u64 {
        return Err(too_big());
    }
    if outputs == 0 {
        return Ok(k.empty(2));
    }
    let (x, y) = ("%p0", "%p1");
    let op = Op::of(kind);
    let finish = |k: &mut Kernel, acc: &str| {
        if kind == ReduceKind::Mean {
            k.v(format!("fdiv float {acc}, {}", f32_lit(len as f32)))
        } else {
            acc.to_string()
        }
    };
    if len == 0 {
        let v = match kind {
            ReduceKind::Mean => f32_lit(f32::NAN),
            _ => op.identity(),
        };
        k.grid_stride(outputs, |k, q| k.store(&v, y, "i64", q));
        k.finish(2);
        return Ok(flat_geometry(outputs));
    }
    if inner == 1 {
        // Contiguous runs: a row kernel over `outer × len`.
        let plan = if len <= LANE_ROW_MAX || outer >= 2048 {
            RowPlan::lanes(outer, len, REDUCE_REGS)?
        } else {
            RowPlan::per_block(outer, len, 512, REDUCE_REGS)?
        };
        let r = k.rows(plan, 1);
        let mut src = k.row_src(&r, x);
        let acc = k.row_reduce(&r, &mut src, &[op], 0, |_, e| vec![e.x.clone()]);
        let res = finish(&mut k, &acc[0]);
        let first = Some(k.v(format!("icmp eq i64 {}, 0", r.t)));
        let cond = k.both(&first, &r.row_ok);
        k.if_then(&cond, |k| k.store(&res, y, "i64", &r.row));
        k.finish(2);
        return Ok(plan.geometry());
    }
    // `x[base + l·inner]` folded over `l = from, from + step, … < len`.
    let column = |k: &mut Kernel, base: &str, from: &str, step: u64| {
        let (len, step) = (len.to_string(), step.to_string());
        k.for_range("i64", from, &len, &step, &[op.identity()], |k, l, a| {
            let lo = k.v(format!("mul i64 {l}, {inner}"));
            let off = k.v(format!("add i64 {base}, {lo}"));
            let v = k.load(x, "i64", &off);
            vec![k.combine(op, &a[0], &v)]
        })
        .remove(0)
    };
    // Split `len` over `by` threads when there are few outputs.
    let mut by = 1u64;
    while by < 64 && outputs * by < SPLIT_BELOW && by * 8 <= len {
        by *= 2;
    }
    if by == 1 {
        k.grid_stride(outputs, |k, q| {
            let o = k.v(format!("udiv i64 {q}, {inner}"));
            let i = k.v(format!("urem i64 {q}, {inner}"));
            let ob = k.v(format!("mul i64 {o}, {}", len * inner));
            let base = k.v(format!("add i64 {ob}, {i}"));
            let acc = column(k, &base, "0", 1);
            let res = finish(k, &acc);
            k.store(&res, y, "i64", q);
        });
        k.finish(2);
        return Ok(flat_geometry(outputs));
    }
    // Blocks of `bx × by` threads: `bx` consecutive outputs of one `o`.
    let bx = inner.next_power_of_two().min(BLOCK / by);
    let tiles = inner.div_ceil(bx);
    // Few outputs: `outer · tiles ≤ outer · inner < 2^16`.
    let grid = outer * tiles;
    let smem = k.shared(bx * by);
    let tid = k.sreg("tid");
    let ctaid = k.sreg("ctaid");
    let tx = k.v(format!("and i32 {tid}, {}", bx - 1));
    let ty = k.v(format!("lshr i32 {tid}, {}", bx.trailing_zeros()));
    let b = k.v(format!("zext i32 {ctaid} to i64"));
    let o = k.v(format!("udiv i64 {b}, {tiles}"));
    let tile = k.v(format!("urem i64 {b}, {tiles}"));
    let i0 = k.v(format!("mul i64 {tile}, {bx}"));
    let tx64 = k.v(format!("zext i32 {tx} to i64"));
    let i = k.v(format!("add i64 {i0}, {tx64}"));
    let (ic, i_ok) = if inner.is_multiple_of(bx) {
        (i.clone(), None)
    } else {
        let ok = k.v(format!("icmp ult i64 {i}, {inner}"));
        (k.umin("i64", &i, &(inner - 1).to_string()), Some(ok))
    };
    let ob = k.v(format!("mul i64 {o}, {}", len * inner));
    let base = k.v(format!("add i64 {ob}, {ic}"));
    let ty64 = k.v(format!("zext i32 {ty} to i64"));
    let acc = column(&mut k, &base, &ty64, by);
    k.store(&acc, &smem, "shared", &tid);
    k.barrier();
    let first = Some(k.v(format!("icmp eq i32 {ty}, 0")));
    let cond = k.both(&first, &i_ok);
    k.if_then(&cond, |k| {
        let mut r = k.load(&smem, "shared", &tx);
        for j in 1..by {
            let at = k.v(format!("add i32 {tx}, {}", j * bx));
            let v = k.load(&smem, "shared", &at);
            r = k.combine(op, &r, &v);
        }
        let res = finish(k, &r);
        let oo = k.v(format!("mul i64 {o}, {inner}"));
        let off = k.v(format!("add i64 {oo}, {i}"));
        k.store(&res, y, "i64", &off);
    });
    k.finish(2);
    Ok(Geometry {
        grid: [grid as u32, 1, 1],
        block: [(bx * by) as u32, 1, 1],
        smem: 0,
    })
}

/// A grid-stride kernel over `total` items: 256 threads a block.
fn flat_geometry(total: u64) -> Geometry {
    Geometry {
        grid: [total.div_ceil(BLOCK).clamp(1, GRID_MAX) as u32, 1, 1],
        block: [BLOCK as u32, 1, 1],
        smem: 0,
    }
}

/// A pool's output size along one dimension (the CPU's rule): the
/// convolution formula, rounded up with `ceil_mode`, where a last window
/// starting past the input and the leading padding is dropped.
fn pool_out_size(
    input: u64,
    k: u64,
    stride: u64,
    dilation: u64,
    pb: u64,
    pe: u64,
    ceil: bool,
) -> Option<u64> {
    let span = dilation.checked_mul(k - 1)?.checked_add(1)?;
    let padded = input.checked_add(pb)?.checked_add(pe)?;
    let room = padded.checked_sub(span)?;
    let floor = room / stride + 1;
    if !ceil {
        return Some(floor);
    }
    let mut out = floor + u64::from(!room.is_multiple_of(stride));
    if (out - 1) * stride >= input + pb {
        out -= 1;
    }
    Some(out)
}

/// NHWC pooling of `x` (`n × h × w × c`) into `y` (`n × oh × ow × c`) over
/// `kh × kw` windows: window `(oy, ox)` covers the taps
/// `(oy·sh − pad_top + ky·dh, ox·sw − pad_left + kx·dw)`; only taps inside
/// the input are read (padding never wins a max; max propagates NaN); an
/// average divides by the taps inside the input (`AvgExcludePad`) or inside
/// the explicitly padded extent (`AvgIncludePad`; cells `ceil_mode` adds
/// are never counted). `geom.oc == geom.c`, `group` is unused, and
/// `oh`/`ow` must be the sizes `ceil_mode` gives. Parameters `(x, y)`.
pub fn pool(
    m: &mut ModuleText,
    name: &str,
    kind: PoolKind,
    geom: &ConvGeom,
    ceil_mode: bool,
) -> Result<Geometry, String> {
    let g = *geom;
    let mut k = Kernel::new(m, name)?;
    if g.c != g.oc {
        return Err(format!(
            "pool output channels must equal the input's {}, found {}",
            g.c, g.oc
        ));
    }
    if g.kh == 0 || g.kw == 0 || g.stride.contains(&0) || g.dilation.contains(&0) {
        return Err(format!(
            "pool window {}x{}, strides {:?} and dilations {:?} must be non-zero",
            g.kh, g.kw, g.stride, g.dilation
        ));
    }
    // Per dimension (H, W): input, window, output, stride, dilation, pads.
    let dims = [(g.h, g.kh, g.oh, 0), (g.w, g.kw, g.ow, 1)];
    let dim = |&(i, kk, o, d): &(u64, u64, u64, usize)| {
        (
            i,
            kk,
            o,
            g.stride[d],
            g.dilation[d],
            g.pads[d],
            g.pads[d + 2],
        )
    };
    let want: Vec<Option<u64>> = dims
        .iter()
        .map(|d| {
            let (i, kk, _, s, dl, p0, p1) = dim(d);
            pool_out_size(i, kk, s, dl, p0, p1, ceil_mode)
        })
        .collect();
    match (want[0], want[1]) {
        (Some(eh), Some(ew)) if (eh, ew) == (g.oh, g.ow) => {}
        (Some(eh), Some(ew)) => {
            return Err(format!(
                "pool output size must be {eh}x{ew} for this geometry, found {}x{}",
                g.oh, g.ow
            ));
        }
        _ => {
            return Err(format!(
                "the pool window ({}x{}, dilation {:?}) is larger than the padded input ({}x{} with pads {:?})",
                g.kh, g.kw, g.dilation, g.h, g.w, g.pads
            ));
        }
    }
    let big = || format!("pool of {geom:?} is too large");
    let prod = |v: &[u64]| v.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
    let total = prod(&[g.n, g.oh, g.ow, g.c]).ok_or_else(big)?;
    let x_len = prod(&[g.n, g.h, g.w, g.c]).ok_or_else(big)?;
    if total == 0 {
        return Ok(k.empty(2));
    }
    // 32-bit arithmetic when every index and intermediate coordinate (at
    // most a window's reach past the padded extent) stays far below 2^31;
    // 64-bit while they stay far below 2^63.
    let reach = dims.iter().map(|d| {
        let (i, kk, o, s, dl, p0, p1) = dim(d);
        o as u128 * s as u128 + kk as u128 * dl as u128 + (i + p0 + p1) as u128
    });
    let most = reach
        .chain([total as u128, x_len as u128])
        .max()
        .unwrap_or(0);
    let ty = match most {
        m if m < 1 << 30 => "i32",
        m if m < 1 << 62 => "i64",
        _ => return Err(format!("pool of {geom:?} is too large")),
    };
    let (x, y) = ("%p0", "%p1");
    let op = match kind {
        PoolKind::Max => Op::Max,
        PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => Op::Sum,
    };
    k.grid_stride(total, |k, q64| {
        let q = if ty == "i32" {
            k.v(format!("trunc i64 {q64} to i32"))
        } else {
            q64.to_string()
        };
        let ch = k.v(format!("urem {ty} {q}, {}", g.c));
        let r = k.v(format!("udiv {ty} {q}, {}", g.c));
        let ox = k.v(format!("urem {ty} {r}, {}", g.ow));
        let r = k.v(format!("udiv {ty} {r}, {}", g.ow));
        let oy = k.v(format!("urem {ty} {r}, {}", g.oh));
        let img = k.v(format!("udiv {ty} {r}, {}", g.oh));
        // First tap's coordinates (may be negative).
        let sy = k.v(format!("mul {ty} {oy}, {}", g.stride[0]));
        let by = k.v(format!("sub {ty} {sy}, {}", g.pads[0]));
        let sx = k.v(format!("mul {ty} {ox}, {}", g.stride[1]));
        let bx = k.v(format!("sub {ty} {sx}, {}", g.pads[1]));
        let (ky0, ky1) = taps(k, ty, &by, g.dilation[0], g.kh, g.h);
        let (kx0, kx1) = taps(k, ty, &bx, g.dilation[1], g.kw, g.w);
        let acc = k.for_range(ty, &ky0, &ky1, "1", &[op.identity()], |k, ky, a| {
            let dy = k.v(format!("mul {ty} {ky}, {}", g.dilation[0]));
            let iy = k.v(format!("add {ty} {by}, {dy}"));
            let ih = k.v(format!("mul {ty} {img}, {}", g.h));
            let row = k.v(format!("add {ty} {ih}, {iy}"));
            let row = k.v(format!("mul {ty} {row}, {}", g.w));
            let a0 = a[0].clone();
            k.for_range(ty, &kx0, &kx1, "1", &[a0], |k, kx, a| {
                let dx = k.v(format!("mul {ty} {kx}, {}", g.dilation[1]));
                let ix = k.v(format!("add {ty} {bx}, {dx}"));
                let cell = k.v(format!("add {ty} {row}, {ix}"));
                let cc = k.v(format!("mul {ty} {cell}, {}", g.c));
                let off = k.v(format!("add {ty} {cc}, {ch}"));
                let v = k.load(x, ty, &off);
                vec![k.combine(op, &a[0], &v)]
            })
        });
        let res = match kind {
            PoolKind::Max => acc[0].clone(),
            PoolKind::AvgExcludePad | PoolKind::AvgIncludePad => {
                let (ny, nx) = if kind == PoolKind::AvgExcludePad {
                    let ny = k.v(format!("sub {ty} {ky1}, {ky0}"));
                    let nx = k.v(format!("sub {ty} {kx1}, {kx0}"));
                    (ny, nx)
                } else {
                    // Taps below `in + pad_end` (none lies before the
                    // leading padding): the CPU's tap range over the
                    // padded extent, whose first tap is always 0.
                    let ny = padded_taps(k, ty, &by, g.dilation[0], g.kh, g.h + g.pads[2]);
                    let nx = padded_taps(k, ty, &bx, g.dilation[1], g.kw, g.w + g.pads[3]);
                    (ny, nx)
                };
                let cnt = k.v(format!("mul {ty} {ny}, {nx}"));
                let cf = k.v(format!("uitofp {ty} {cnt} to float"));
                k.v(format!("fdiv float {}, {cf}", acc[0]))
            }
        };
        k.store(&res, y, ty, &q);
    });
    k.finish(2);
    Ok(flat_geometry(total))
}

/// The taps `t` in `0..kk` whose coordinate `base + t·d` lies in
/// `0..len`, as a half-open range `(lo, hi)` with `lo ≤ hi` (the CPU's
/// `tap_range`); `base` is signed.
fn taps(k: &mut Kernel, ty: &str, base: &str, d: u64, kk: u64, len: u64) -> (String, String) {
    let neg = k.v(format!("icmp slt {ty} {base}, 0"));
    // lo = ⌈−base / d⌉ when base < 0.
    let nb = k.v(format!("sub {ty} 0, {base}"));
    let lo = ceil_div(k, ty, &nb, d);
    let lo = k.v(format!("select i1 {neg}, {ty} {lo}, {ty} 0"));
    let lo = k.umin(ty, &lo, &kk.to_string());
    let hi = padded_taps(k, ty, base, d, kk, len);
    let hi = k.call2(&format!("umax.{ty}"), ty, &hi, &lo);
    (lo, hi)
}

/// `min(kk, ⌈(end − base) / d⌉)` when `base < end`, else 0: the taps
/// `t < kk` whose coordinate `base + t·d` is below `end`.
fn padded_taps(k: &mut Kernel, ty: &str, base: &str, d: u64, kk: u64, end: u64) -> String {
    let inside = k.v(format!("icmp slt {ty} {base}, {end}"));
    let room = k.v(format!("sub {ty} {end}, {base}"));
    let n = ceil_div(k, ty, &room, d);
    let n = k.v(format!("select i1 {inside}, {ty} {n}, {ty} 0"));
    k.umin(ty, &n, &kk.to_string())
}

/// `⌈a / d⌉` for a non-negative `a` (any value where the caller discards
/// the result).
fn ceil_div(k: &mut Kernel, ty: &str, a: &str, d: u64) -> String {
    if d == 1 {
        return a.to_string();
    }
    let t = k.v(format!("add {ty} {a}, {}", d - 1));
    k.v(format!("udiv {ty} {t}, {d}"))
}
