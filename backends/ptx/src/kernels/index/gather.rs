//! `Step::Gather`: rows of `data` selected by i64 indices (negative ones
//! count from the end of the axis) copied to `out`, with out-of-range
//! indices reported through `status`.
//!
//! Invariants:
//! - Only rows whose index is in `[-axis, axis)` are read. An index outside
//!   writes zeros to its output rows and stores `1u32` to `status`; the
//!   kernel never stores anything else there.
//! - An item is a chunk of an output row: the largest power of two up to 16
//!   bytes dividing the row, used only after a run-time test that `data`
//!   and `out` are aligned to it; otherwise the element's unit.
//! - With an empty output (`outer · inner == 0`) the items are the indices,
//!   only checked, as the CPU checks them.
//! - Source offsets are i64 whatever `ix` is: they come from a 64-bit index.

use super::builder::{BLOCK, K, chunk_ty, index_type, launch, product, unit_of, zero};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::Geometry;

/// `Step::Gather`: `out[o, j, i] = data[o, indices[j], i]` for `data` of
/// `outer × axis × inner` elements of `elem_size` bytes and `count` i64
/// indices (negative ones count from the end). Parameters `(data, indices,
/// out, status)`.
pub fn gather(
    m: &mut ModuleText,
    name: &str,
    elem_size: u64,
    outer: u64,
    axis: u64,
    inner: u64,
    count: u64,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if elem_size == 0 {
        return Err("gather: element size must be at least 1, found 0".into());
    }
    let row = product("gather row", &[inner, elem_size])? as u64;
    let out_bytes = product("gather output", &[outer, count, row])? as u64;
    product("gather data", &[outer, axis, row])?;
    product("gather indices", &[count, 8])?;
    if axis > i64::MAX as u64 {
        return Err(format!("gather: axis of {axis} is too large"));
    }
    let unit = unit_of(elem_size);
    let params = ["%data", "%indices", "%out", "%status"];
    if out_bytes == 0 {
        // Nothing to write; the indices are still checked, as on the CPU.
        let g = launch(count, BLOCK);
        let mut k = K::new(m, index_type(count as u128 * 8), g);
        k.items(count, |k, j| {
            let (ok, _) = gather_index(k, j, axis);
            let bad = k.v(format!("xor i1 {ok}, true"));
            k.if_(&bad, |k| {
                k.ins("store i32 1, ptr addrspace(1) %status, align 4")
            });
        });
        let text = k.finish(name, &params, 2);
        m.func(text);
        return Ok(g);
    }
    // The unit (a power of two dividing the element size) divides the row.
    let chunk = (1u64 << row.trailing_zeros().min(4)).max(unit);
    let rows = outer * count;
    let g = launch(out_bytes / chunk, BLOCK);
    let ix = index_type(out_bytes as u128 + (count as u128) * 8);
    let mut k = K::new(m, ix, g);
    let body = |k: &mut K, c: u64| {
        k.items(out_bytes / c, |k, i| {
            let ix = k.ix;
            let rc = k.split(i, &[rows, row / c]);
            let oj = k.split(&rc[0], &[outer, count]);
            let (ok, n) = gather_index(k, &oj[1], axis);
            let d = k.lin(0, &[(&rc[0], row as i128), (&rc[1], c as i128)]);
            let dp = k.at("%out", ix, &d);
            let ty = chunk_ty(c);
            k.if_else(
                &ok,
                |k| {
                    let o = k.widen(&oj[0]);
                    let cw = k.widen(&rc[1]);
                    let r = k.v(format!("mul i64 {o}, {axis}"));
                    let r = k.v(format!("add i64 {r}, {n}"));
                    let s = k.v(format!("mul i64 {r}, {row}"));
                    let cb = k.v(format!("mul i64 {cw}, {c}"));
                    let s = k.v(format!("add i64 {s}, {cb}"));
                    let sp = k.at("%data", "i64", &s);
                    let x = k.load(ty, &sp, c);
                    k.store(ty, &x, &dp, c);
                },
                |k| {
                    k.store(ty, zero(ty), &dp, c);
                    k.ins("store i32 1, ptr addrspace(1) %status, align 4");
                },
            );
        })
    };
    if chunk > unit {
        let ok = k.aligned(&["%data", "%out"], chunk);
        k.if_else(&ok, |k| body(k, chunk), |k| body(k, unit));
    } else {
        body(&mut k, unit);
    }
    let text = k.finish(name, &params, 2);
    m.func(text);
    Ok(g)
}

/// Loads index `j` and returns (in range, the index from the start as i64).
fn gather_index(k: &mut K, j: &str, axis: u64) -> (String, String) {
    let ix = k.ix;
    let off = k.lin(0, &[(j, 8)]);
    let p = k.at("%indices", ix, &off);
    let x = k.load("i64", &p, 8);
    let neg = k.v(format!("icmp slt i64 {x}, 0"));
    let add = k.v(format!("select i1 {neg}, i64 {axis}, i64 0"));
    let n = k.v(format!("add i64 {x}, {add}"));
    let ok = k.v(format!("icmp ult i64 {n}, {axis}"));
    (ok, n)
}
