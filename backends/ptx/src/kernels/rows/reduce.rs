//! `Step::Reduce` over the middle axis of `outer × len × inner`, in one of
//! three forms (the parent module's doc gives their launch geometry):
//! contiguous runs (`inner == 1`) as row kernels; one thread per output;
//! or, with few outputs, `len` split over the threads of a block and the
//! partial results combined through shared memory.
//!
//! Invariants:
//! - An empty reduction (`len == 0`) writes the CPU's empty result: 0
//!   (sum), NaN (mean), −∞ (max), +∞ (min).
//! - Max and min propagate NaN (`llvm.maximum` / `llvm.minimum`); mean is
//!   the reduced sum divided by `len`.
//! - In the split form every thread of a block reaches the barrier; only
//!   the final combination, by the first row of threads, is conditional.

use aoc_plan::plan::ReduceKind;

use super::kernel::{BLOCK, Kernel, Op, flat_geometry};
use super::row::{LANE_ROW_MAX, RowPlan};
use crate::irtext::{ModuleText, f32_lit};
use crate::kernels::Geometry;

/// Unrolled values per thread of a reduction (longer runs loop).
const REDUCE_REGS: u64 = 8;
/// Outputs below which a middle-axis reduction splits `len` over threads.
const SPLIT_BELOW: u64 = 1 << 16;

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
