//! How a row kernel maps rows to threads, and the row-wide operations
//! built on that mapping. [`RowPlan`] gives each row a lane group (a power
//! of two up to a warp, several rows a block) or a whole block; [`Rows`]
//! holds a thread's indices under a plan; a thread's elements of a row are
//! loaded once into registers or streamed again each pass ([`Src`]),
//! folded, reduced over the group (butterfly, then across warps through
//! shared memory) and written back.
//!
//! Invariants:
//! - Lane groups never diverge before a shuffle: columns past a row's end
//!   and rows past the last read a clamped (valid) address and are masked
//!   to the reduction's identity; only stores are conditional.
//! - A block-wide row gives each reduced value its own 32-float slot of
//!   shared memory (`slot..`, never reused), so one barrier per reduction
//!   suffices; group reductions are butterflies, so every thread of a row
//!   ends with the row's result.
//! - [`RowPlan::checked`] refuses grids past 2^31 − 1 blocks and
//!   `rows · cols` past `i64::MAX`, so the i64 offsets cannot overflow.
//! - A value derived from an element ([`Kernel::memo`]) is computed once
//!   for a held element and once per pass for a streamed one.

use super::kernel::{BLOCK, GRID_MAX, Kernel, Op, WARP};
use crate::kernels::Geometry;

/// Rows up to this long get a lane group (at most a warp) each.
pub(super) const LANE_ROW_MAX: u64 = 1024;
/// Values per thread a block-wide row keeps in registers.
pub(super) const BLOCK_REGS: u64 = 16;

/// How the rows of a row kernel map to threads.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowPlan {
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
    pub(super) fn lanes(rows: u64, cols: u64, max_per: u64) -> Result<RowPlan, String> {
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
    pub(super) fn per_block(
        rows: u64,
        cols: u64,
        threads: u64,
        max_per: u64,
    ) -> Result<RowPlan, String> {
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
    pub(super) fn norm(rows: u64, cols: u64) -> Result<RowPlan, String> {
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

    pub(super) fn geometry(&self) -> Geometry {
        Geometry {
            grid: [self.grid as u32, 1, 1],
            block: [self.block as u32, 1, 1],
            smem: 0,
        }
    }
}

/// The per-thread values of a row kernel.
pub(super) struct Rows {
    plan: RowPlan,
    /// This thread's index in its row group (i64).
    pub(super) t: String,
    /// This thread's row, clamped to the last one (i64).
    pub(super) row: String,
    /// `row · cols` of this thread's row, clamped to the last row (i64).
    off: String,
    /// Whether the row exists (`None`: always).
    pub(super) row_ok: Option<String>,
    lane: String,
    warp: String,
    /// The cross-warp slots (32 floats each) of a block-wide row.
    smem: Option<String>,
}

impl Kernel<'_> {
    /// Thread indices of `plan`; `slots` cross-warp reductions at most.
    pub(super) fn rows(&mut self, plan: RowPlan, slots: u64) -> Rows {
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
    pub(super) fn row_src(&mut self, r: &Rows, p: &str) -> Src {
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
    pub(super) fn memo(
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
    pub(super) fn row_reduce(
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
    pub(super) fn row_write(
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
        match self.byte_in.clone() {
            Some((f, signed)) => {
                let a = self.v(format!("getelementptr i8, ptr addrspace(1) {p}, i64 {off}"));
                let b = self.v(format!("load i8, ptr addrspace(1) {a}, align 1"));
                let conv = if signed { "sitofp" } else { "uitofp" };
                let x = self.v(format!("{conv} i8 {b} to float"));
                self.v(format!("call float @{f}(float {x})"))
            }
            None => self.load(p, "i64", &off),
        }
    }

    fn row_store(&mut self, r: &Rows, p: &str, c: &str, ok: &Option<String>, val: &str) {
        let cond = self.both(ok, &r.row_ok);
        let off = r.off.clone();
        self.if_then(&cond, |k| {
            let o = k.v(format!("add i64 {off}, {c}"));
            let half = k.half.clone();
            let byte_out = k.byte_out.clone();
            if half.as_ref().is_none_or(|(h, _)| h.keep_f32) && byte_out.as_ref().is_none_or(|(_, _, keep)| *keep) {
                k.store(val, p, "i64", &o);
            }
            if let Some((h, hp)) = half {
                h.store(&mut k.b, val, &hp, &o);
            }
            if let Some((f, bp, _)) = byte_out {
                let y = k.v(format!("call i8 @{f}(float {val})"));
                let a = k.v(format!("getelementptr i8, ptr addrspace(1) {bp}, i64 {o}"));
                k.ins(format!("store i8 {y}, ptr addrspace(1) {a}, align 1"));
            }
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
pub(super) struct Elem {
    pub(super) c: String,
    ok: Option<String>,
    pub(super) x: String,
    memo: Vec<(&'static str, String)>,
}

/// Where a thread's elements of a row come from: registers filled by one
/// read (`Held`), or a pointer each pass reads again (`Stream`).
pub(super) enum Src {
    Held(Vec<Elem>),
    Stream(String),
}
