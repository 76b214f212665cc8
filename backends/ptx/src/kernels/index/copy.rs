//! `Step::Copy`: [`copy_plan`] normalizes a strided copy and picks a
//! [`CopyForm`]; [`copy`] emits the kernel of that form (the parent
//! module's doc describes the forms and their launch geometry).
//!
//! Invariants:
//! - The plan keeps the step's meaning exactly. Elements move as opaque
//!   units; length-1 dimensions are dropped; a destination dimension of
//!   stride 0 is fixed at its last index (the last write wins, as in the
//!   CPU's loop); the rest are sorted by decreasing destination stride and
//!   neighbours contiguous in both operands are merged. Destinations that
//!   still overlap give `Sequential`, one thread writing in the CPU's
//!   row-major order.
//! - A `Runs` chunk is chosen only when the run length, the start and every
//!   outer stride are multiples of it; the kernel also tests the pointers at
//!   run time and otherwise takes its one-unit-per-item path.
//! - Transpose tiles are `TILE × (TILE + 1)` units of static shared memory
//!   (the extra column spreads a column's units over the banks). The tile
//!   loop is uniform across a block and only loads and stores are
//!   conditional, so every thread reaches both barriers of every tile.
//! - Source offsets may run backwards (negative strides), but
//!   [`copy_plan`] refuses any that reach before the start of the source.

use super::builder::{BLOCK, K, LIMIT, chunk_ty, index_type, launch, unit_of};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::Geometry;

/// Side of a transpose tile (elements); a block is `TILE × 8` threads.
const TILE: u64 = 32;

/// One dimension of a planned copy: length and strides in units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyDim {
    pub len: u64,
    pub src: i64,
    pub dst: u64,
}

/// How a copy kernel maps threads to units (see the `kernels::index`
/// module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyForm {
    Empty,
    /// Item `k` is the `k`-th `chunk`-byte piece of the destination's
    /// innermost runs (the source's innermost stride is 1, or 0: one unit
    /// repeated).
    Runs {
        chunk: u64,
    },
    /// Tiles over dimension `q` (source stride ±1) and the innermost one.
    Transpose {
        q: usize,
    },
    Elements,
    Sequential,
}

/// The plan of a [`copy`] kernel, exposed so that tests (and `aoc explain`)
/// can see which form a copy takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyPlan {
    /// Bytes per unit (1, 2, 4 or 8).
    pub unit: u64,
    /// Source start, in units.
    pub start: i64,
    /// Dimensions in visiting order (outermost first), lengths above 1.
    pub dims: Vec<CopyDim>,
    pub form: CopyForm,
    /// `i32` or `i64`.
    pub index: &'static str,
}

impl CopyPlan {
    fn units(&self) -> u64 {
        self.dims.iter().map(|d| d.len).product()
    }

    /// Transpose tiles: `(rest, tiles along q, tiles along the last)`.
    fn tiles(&self, q: usize) -> (u64, u64, u64) {
        let n = self.dims.len();
        let rest = (0..n - 1)
            .filter(|&d| d != q)
            .map(|d| self.dims[d].len)
            .product();
        let t = |l: u64| l.div_ceil(TILE);
        (rest, t(self.dims[q].len), t(self.dims[n - 1].len))
    }

    /// The launch geometry.
    pub fn geometry(&self) -> Geometry {
        match self.form {
            CopyForm::Empty => launch(0, BLOCK),
            CopyForm::Sequential => launch(1, 1),
            CopyForm::Runs { chunk } => launch(self.units() / (chunk / self.unit), BLOCK),
            CopyForm::Elements => launch(self.units(), BLOCK),
            CopyForm::Transpose { q } => {
                let (r, a, b) = self.tiles(q);
                launch(r * a * b * BLOCK, BLOCK)
            }
        }
    }
}

/// Plans `Step::Copy` (see the `kernels::index` module doc); errors for
/// arguments the step does not allow.
pub fn copy_plan(
    elem_size: u64,
    shape: &[u64],
    src_start: u64,
    src_strides: &[i64],
    dst_strides: &[u64],
) -> Result<CopyPlan, String> {
    let rank = shape.len();
    if elem_size == 0 {
        return Err("copy: element size must be at least 1, found 0".into());
    }
    if src_strides.len() != rank || dst_strides.len() != rank {
        return Err(format!(
            "copy of rank {rank} needs {rank} source and destination strides, found {} and {}",
            src_strides.len(),
            dst_strides.len()
        ));
    }
    let unit = unit_of(elem_size);
    let per = (elem_size / unit) as i128;
    let mut plan = CopyPlan {
        unit,
        start: 0,
        dims: Vec::new(),
        form: CopyForm::Empty,
        index: "i32",
    };
    if shape.contains(&0) {
        return Ok(plan);
    }
    let too_large = || format!("copy of shape {shape:?} is too large");
    let start = src_start as i128 * per;
    let (mut lo, mut hi, mut dhi, mut total) = (start, start, 0i128, per);
    let mut dims = Vec::new();
    // Every product and partial sum stays below LIMIT (checked), so none
    // of the arithmetic below can overflow.
    let mul = |a: i128, b: i128| {
        a.checked_mul(b)
            .filter(|x| x.abs() * unit as i128 <= LIMIT as i128)
            .ok_or_else(too_large)
    };
    for d in (0..rank).filter(|&d| shape[d] > 1) {
        let n = shape[d] as i128 - 1;
        let (s, t) = (src_strides[d] as i128 * per, dst_strides[d] as i128 * per);
        total = mul(total, n + 1)?;
        let ns = mul(n, s)?;
        if ns < 0 {
            lo += ns
        } else {
            hi += ns
        }
        dhi += mul(n, t)?;
        if [lo, hi, dhi]
            .iter()
            .any(|x| x.abs() * unit as i128 > LIMIT as i128)
        {
            return Err(too_large());
        }
        dims.push(CopyDim {
            len: shape[d],
            src: s as i64,
            dst: t as u64,
        });
    }
    if per > 1 {
        // An element of several units: an innermost dimension over them.
        dims.push(CopyDim {
            len: per as u64,
            src: 1,
            dst: 1,
        });
        hi += per - 1;
        dhi += per - 1;
    }
    if lo < 0 {
        return Err(format!(
            "copy: source strides reach element {}, before the start of the source",
            lo / per
        ));
    }
    plan.index = index_type((hi.max(dhi).max(total) * unit as i128) as u128 + 16);
    // A destination dimension of stride 0 keeps the write of its last index.
    let mut start = start as i64;
    let mut vis: Vec<CopyDim> = Vec::new();
    for d in &dims {
        if d.dst == 0 {
            start += (d.len as i64 - 1) * d.src;
        } else {
            vis.push(*d);
        }
    }
    vis.sort_by_key(|d| std::cmp::Reverse(d.dst));
    let mut span = 0u64;
    let nested = vis.iter().rev().all(|d| {
        let ok = d.dst > span;
        span += (d.len - 1) * d.dst;
        ok
    });
    if !nested {
        plan.start = start_of(src_start, per);
        plan.dims = dims;
        plan.form = CopyForm::Sequential;
        return Ok(plan);
    }
    // Merge neighbours contiguous in both operands.
    let mut merged: Vec<CopyDim> = Vec::new();
    for d in vis.into_iter().rev() {
        match merged.last_mut() {
            Some(i) if d.dst == i.dst * i.len && d.src == i.src * i.len as i64 => i.len *= d.len,
            _ => merged.push(d),
        }
    }
    merged.reverse();
    plan.start = start;
    plan.form = copy_form(unit, start, &merged);
    plan.dims = merged;
    Ok(plan)
}

fn start_of(src_start: u64, per: i128) -> i64 {
    (src_start as i128 * per) as i64
}

fn copy_form(unit: u64, start: i64, dims: &[CopyDim]) -> CopyForm {
    let Some(&last) = dims.last() else {
        return CopyForm::Elements;
    };
    let outer = &dims[..dims.len() - 1];
    if last.dst == 1 && (last.src == 1 || last.src == 0) {
        let mut w = 16;
        while w > unit {
            let src_ok = |s: i64| last.src == 0 || (s.unsigned_abs() * unit).is_multiple_of(w);
            if (last.len * unit).is_multiple_of(w)
                && src_ok(start)
                && outer
                    .iter()
                    .all(|d| (d.dst * unit).is_multiple_of(w) && src_ok(d.src))
            {
                return CopyForm::Runs { chunk: w };
            }
            w /= 2;
        }
        return CopyForm::Elements;
    }
    // Tiles pay off when both sides fill most of a 32-wide tile.
    match outer.iter().rposition(|d| d.src.unsigned_abs() == 1) {
        Some(q) if last.dst == 1 && last.len >= 16 && outer[q].len >= 16 => {
            CopyForm::Transpose { q }
        }
        _ => CopyForm::Elements,
    }
}

/// `Step::Copy`: for every index `i` of `shape`, `dst[Σ i·dst_strides] =
/// src[src_start + Σ i·src_strides]` in `elem_size`-byte elements.
/// Parameters `(src, dst)`; geometry from [`CopyPlan::geometry`].
pub fn copy(
    m: &mut ModuleText,
    name: &str,
    elem_size: u64,
    shape: &[u64],
    src_start: u64,
    src_strides: &[i64],
    dst_strides: &[u64],
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let p = copy_plan(elem_size, shape, src_start, src_strides, dst_strides)?;
    let g = p.geometry();
    let mut k = K::new(m, p.index, g);
    match p.form {
        CopyForm::Empty => {}
        CopyForm::Elements | CopyForm::Sequential => copy_units(&mut k, &p),
        CopyForm::Runs { chunk } => {
            let splat = p.dims[p.dims.len() - 1].src == 0;
            let ptrs: &[&str] = if splat { &["%dst"] } else { &["%src", "%dst"] };
            let ok = k.aligned(ptrs, chunk);
            k.if_else(&ok, |k| copy_runs(k, &p, chunk), |k| copy_units(k, &p));
        }
        CopyForm::Transpose { q } => copy_transpose(&mut k, name, &p, q),
    }
    let text = k.finish(name, &["%src", "%dst"], 1);
    m.func(text);
    Ok(g)
}

/// The byte-offset terms `(index, stride)` of `idx` over `dims` in the
/// source and in the destination.
fn byte_terms<'a>(idx: &'a [String], dims: &[CopyDim], u: u64) -> [Vec<(&'a str, i128)>; 2] {
    let (mut s, mut d) = (Vec::new(), Vec::new());
    for (v, dim) in idx.iter().zip(dims) {
        s.push((v.as_str(), dim.src as i128 * u as i128));
        d.push((v.as_str(), dim.dst as i128 * u as i128));
    }
    [s, d]
}

/// One unit per item, in the plan's visiting order.
fn copy_units(k: &mut K, p: &CopyPlan) {
    let u = p.unit;
    let ty = chunk_ty(u);
    let lens: Vec<u64> = p.dims.iter().map(|d| d.len).collect();
    k.items(p.units(), |k, i| {
        let idx = k.split(i, &lens);
        let ix = k.ix;
        let [src, dst] = byte_terms(&idx, &p.dims, u);
        let s = k.lin(p.start as i128 * u as i128, &src);
        let d = k.lin(0, &dst);
        let sp = k.at("%src", ix, &s);
        let x = k.load(ty, &sp, u);
        let dp = k.at("%dst", ix, &d);
        k.store(ty, &x, &dp, u);
    });
}

/// One `chunk`-byte piece of an innermost run per item.
fn copy_runs(k: &mut K, p: &CopyPlan, chunk: u64) {
    let (u, n) = (p.unit, p.dims.len());
    let per = chunk / u;
    let splat = p.dims[n - 1].src == 0;
    let mut lens: Vec<u64> = p.dims.iter().map(|d| d.len).collect();
    lens[n - 1] /= per;
    let ty = chunk_ty(chunk);
    k.items(p.units() / per, |k, i| {
        let idx = k.split(i, &lens);
        let ix = k.ix;
        let [mut src, mut dst] = byte_terms(&idx[..n - 1], &p.dims, u);
        dst.push((&idx[n - 1], chunk as i128));
        if !splat {
            src.push((&idx[n - 1], chunk as i128));
        }
        let s = k.lin(p.start as i128 * u as i128, &src);
        let d = k.lin(0, &dst);
        let sp = k.at("%src", ix, &s);
        let x = if splat {
            let x = k.load(chunk_ty(u), &sp, u);
            splat_bytes(k, &x, u, chunk)
        } else {
            k.load(ty, &sp, chunk)
        };
        let dp = k.at("%dst", ix, &d);
        k.store(ty, &x, &dp, chunk);
    });
}

/// A `chunk`-byte value holding unit `x` (`u` bytes) repeated.
fn splat_bytes(k: &mut K, x: &str, u: u64, chunk: u64) -> String {
    let wide = chunk.min(8);
    let mut v = x.to_string();
    if wide > u {
        let (from, to) = (chunk_ty(u), chunk_ty(wide));
        let rep: u64 = (0..wide / u).map(|j| 1u64 << (8 * u * j)).sum();
        let z = k.v(format!("zext {from} {x} to {to}"));
        v = k.v(format!("mul {to} {z}, {}", rep as i64));
    }
    if chunk == 16 {
        let h = k.v(format!("bitcast i64 {v} to <2 x i32>"));
        v = k.v(format!(
            "shufflevector <2 x i32> {h}, <2 x i32> poison, <4 x i32> <i32 0, i32 1, i32 0, i32 1>"
        ));
    }
    v
}

/// 32×32 tiles of (dimension `q`, innermost dimension) through shared
/// memory: loads walk `q` (contiguous in the source), stores walk the
/// innermost dimension (contiguous in the destination).
fn copy_transpose(k: &mut K, name: &str, p: &CopyPlan, q: usize) {
    let (u, n) = (p.unit, p.dims.len());
    let ty = chunk_ty(u);
    let (rq, lc) = (p.dims[q], p.dims[n - 1]);
    let rest: Vec<CopyDim> = (0..n - 1).filter(|&d| d != q).map(|d| p.dims[d]).collect();
    let rest_lens: Vec<u64> = rest.iter().map(|d| d.len).collect();
    let (nrest, tq, tc) = p.tiles(q);
    let tile = format!("@{name}.tile");
    k.m.declare(&format!(
        "{tile} = internal addrspace(3) global [{} x {ty}] undef, align 8",
        TILE * (TILE + 1)
    ));
    k.m.declare("declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)");
    let tid = k.sreg("tid.x");
    let tid = k.narrow(&tid);
    let ix = k.ix;
    let tx = k.v(format!("and {ix} {tid}, {}", TILE - 1));
    let ty8 = k.v(format!("lshr {ix} {tid}, 5"));
    let first = k.sreg("ctaid.x");
    let grid = k.grid;
    k.range("i64", &first, nrest * tq * tc, grid, |k, t| {
        let t = k.narrow(t);
        let tiles = k.split(&t, &[nrest, tq, tc]);
        let ri = k.split(&tiles[0], &rest_lens);
        let [sterms, dterms] = byte_terms(&ri, &rest, u);
        let sb = k.lin(p.start as i128 * u as i128, &sterms);
        let db = k.lin(0, &dterms);
        let r0 = k.lin(0, &[(&tiles[1], TILE as i128)]);
        let c0 = k.lin(0, &[(&tiles[2], TILE as i128)]);
        for phase in 0..2 {
            for j in 0..TILE / 8 {
                // Load phase: lanes along q; store phase: along the last.
                let yl = k.lin(8 * j as i128, &[(&ty8, 1)]);
                let (rl, cl) = if phase == 0 { (&tx, &yl) } else { (&yl, &tx) };
                let r = k.v(format!("add {ix} {r0}, {rl}"));
                let c = k.v(format!("add {ix} {c0}, {cl}"));
                let okr = k.v(format!("icmp ult {ix} {r}, {}", rq.len));
                let okc = k.v(format!("icmp ult {ix} {c}, {}", lc.len));
                let ok = k.v(format!("and i1 {okr}, {okc}"));
                let (rl, cl) = (rl.clone(), cl.clone());
                k.if_(&ok, |k| {
                    let slot = k.lin(0, &[(&cl, (TILE + 1) as i128), (&rl, 1)]);
                    let sp = k.v(format!(
                        "getelementptr inbounds {ty}, ptr addrspace(3) {tile}, {ix} {slot}"
                    ));
                    if phase == 0 {
                        let terms = [
                            (r.as_str(), rq.src as i128 * u as i128),
                            (c.as_str(), lc.src as i128 * u as i128),
                        ];
                        let off = k.lin(0, &terms);
                        let off = k.v(format!("add {ix} {sb}, {off}"));
                        let gp = k.at("%src", ix, &off);
                        let x = k.load(ty, &gp, u);
                        k.ins(format!("store {ty} {x}, ptr addrspace(3) {sp}, align {u}"));
                    } else {
                        let x = k.v(format!("load {ty}, ptr addrspace(3) {sp}, align {u}"));
                        let terms = [
                            (r.as_str(), rq.dst as i128 * u as i128),
                            (c.as_str(), u as i128),
                        ];
                        let off = k.lin(0, &terms);
                        let off = k.v(format!("add {ix} {db}, {off}"));
                        let gp = k.at("%dst", ix, &off);
                        k.store(ty, &x, &gp, u);
                    }
                });
            }
            k.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        }
    });
}
