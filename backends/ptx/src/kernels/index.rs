//! Index-mapping kernels: the data-movement steps of a plan (`Step::Copy`,
//! `Fill`, `Gather`, `Resize`) and the direct convolutions that sum a few
//! gathered neighbours (`DepthwiseConv2d`, `ConvTranspose2d`). Every shape
//! is baked in; the CPU kernels (`aoc_runtime::kernels::{copy, resize,
//! conv}`) are the reference.
//!
//! Kernels, parameters (global pointers, in this order) and launch geometry.
//! Unless said otherwise a kernel maps one *work item* to one thread,
//! consecutive threads to consecutive destination addresses, `block = 256`,
//! `grid = clamp(⌈items / 256⌉, 1, 2^31 − 1)`, `smem = 0`, and a
//! grid-stride loop covers any shortfall. An empty shape gives a kernel that
//! returns at once (grid 1).
//! - [`copy`] `(src, dst)`: elements move as opaque *units* (the largest
//!   power of two ≤ 8 dividing the element size). [`copy_plan`] drops
//!   length-1 dimensions, fixes each destination-stride-0 dimension at its
//!   last index (the last write wins, as in the CPU's loop), sorts the rest
//!   by decreasing destination stride, merges neighbours contiguous in both
//!   operands and picks a [`CopyForm`]:
//!   `Runs` (innermost dimension contiguous in the destination with source
//!   stride 1, or 0 to repeat one unit): an item is a chunk of up to 16
//!   bytes (`ld/st.global.v4`) when the run length, the start and the outer
//!   strides keep chunks aligned; `Transpose` (an outer dimension has
//!   source stride ±1 and both it and the innermost have at least 16
//!   elements): 32×32 tiles through static shared memory, a block of 256
//!   threads per tile, `grid = min(tiles, 2^31 − 1)`; `Elements`: a unit
//!   per item; `Sequential` (destinations that overlap other than through
//!   stride 0): one thread in row-major order (`grid = block = 1`), exactly
//!   the CPU's result.
//! - [`fill`] `(dst)`: items are 16-byte stores, then the tail's elements.
//! - [`gather`] `(data, indices, out, status)`: an item is a chunk of an
//!   output row (16 bytes when the row allows). An index outside
//!   `[-axis, axis)` writes zeros to its output rows and stores `1u32` to
//!   `status`; with an empty output (`outer · inner == 0`) the items are the
//!   indices, only checked (the CPU checks them too).
//! - [`resize`] `(x, y)`: NHWC f32, an item is 4 channels (`c % 4 == 0`)
//!   or 1. The taps of an axis come from tables computed here with the CPU's
//!   f64 formulas; axes of more than 4096 outputs compute them on the GPU in
//!   f64 with the same operations.
//! - [`depthwise_conv2d`] `(x, w, [bias], y)` and [`conv_transpose2d`]
//!   `(x, w, [bias], y)`: f32, an item is 4 output channels of a pixel where
//!   the channel layout allows (depthwise: `oc % 4 == 0` and a multiplier of
//!   1, 2 or a multiple of 4; transposed: `oc / group % 4 == 0`), else one
//!   output element. Transposed convolution is a gather: an output sums the
//!   taps whose input position exists (no atomics).
//!
//! Invariants:
//! - Only element alignment is assumed of a pointer. A 16-byte (or 8-, 4-
//!   byte chunk) path is taken when every offset is a multiple of the chunk
//!   by construction *and* a run-time test of the pointers passes (uniform
//!   across the grid); otherwise the same kernel runs its element path
//!   (grid-stride over the larger item count).
//! - Inputs are `noalias readonly` (read through the non-coherent cache):
//!   no output may overlap an input.
//! - Nothing is read out of bounds: a masked tap reads a valid address and
//!   drops the value; gather reads only rows whose index is in range.
//! - Arithmetic follows the CPU: depthwise adds the `x·w` products in the
//!   CPU's tap order without fused multiply-add (identical results), relu
//!   is `maxnum(acc, 0)` (NaN becomes 0, as `f32::max`); resize blends rows
//!   then columns with the CPU's `fy == 0` / `fx == 0` shortcuts (identical
//!   results); transposed convolution uses `fma` (the CPU's GEMM sums in
//!   another order anyway).
//! - Offsets are 32-bit when every byte offset and item count is below
//!   2^31, else 64-bit; wrapping partial sums are harmless because every
//!   final offset is in range.

use std::fmt::Write as _;

use aoc_runtime::plan::{ConvGeom, ResizeMode};

use super::Geometry;
use crate::irtext::{Body, ModuleText, check_entry_name, f32_lit};

const BLOCK: u64 = 256;
const MAX_GRID: u64 = (1 << 31) - 1;
/// Side of a transpose tile (elements); a block is `TILE × 8` threads.
const TILE: u64 = 32;
/// Axes with more outputs compute their resize taps on the GPU.
const TABLE_MAX: u64 = 4096;
/// Byte sizes above this are refused (far beyond any GPU's memory).
const LIMIT: u128 = 1 << 56;

fn launch(items: u64, block: u64) -> Geometry {
    let grid = items.div_ceil(block).clamp(1, MAX_GRID);
    Geometry {
        grid: [grid as u32, 1, 1],
        block: [block as u32, 1, 1],
        smem: 0,
    }
}

/// `i32` when `max` (the largest offset in bytes or item count) allows.
fn index_type(max: u128) -> &'static str {
    if max + 64 < 1 << 31 { "i32" } else { "i64" }
}

/// The LLVM type moved by a chunk of `bytes` (a power of two ≤ 16).
fn chunk_ty(bytes: u64) -> &'static str {
    match bytes {
        1 => "i8",
        2 => "i16",
        4 => "i32",
        8 => "i64",
        _ => "<4 x i32>",
    }
}

/// The zero constant of `ty`.
fn zero(ty: &str) -> &'static str {
    match ty {
        "float" | "double" => "0.0",
        t if t.starts_with('<') => "zeroinitializer",
        _ => "0",
    }
}

/// The largest power of two up to 8 dividing `bytes`.
fn unit_of(bytes: u64) -> u64 {
    1 << bytes.trailing_zeros().min(3)
}

fn product(what: &str, dims: &[u64]) -> Result<u128, String> {
    let p = dims
        .iter()
        .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
        .filter(|&p| p * 16 <= LIMIT);
    p.ok_or_else(|| format!("{what} of shape {dims:?} is too large"))
}

/// The builder of one kernel: SSA text, entry-block allocas (promoted to
/// registers by `mem2reg`), and the launch it is written for.
struct K<'m> {
    m: &'m mut ModuleText,
    b: Body,
    slots: String,
    nslot: u32,
    /// Type of offsets and item indices inside a loop body.
    ix: &'static str,
    block: u64,
    grid: u64,
}

impl<'m> K<'m> {
    fn new(m: &'m mut ModuleText, ix: &'static str, g: Geometry) -> K<'m> {
        K {
            m,
            b: Body::new(),
            slots: String::new(),
            nslot: 0,
            ix,
            block: g.block[0] as u64,
            grid: g.grid[0] as u64,
        }
    }

    fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    /// An entry-block alloca of `ty`, initialized here with `init`.
    fn slot(&mut self, ty: &str, init: &str) -> String {
        let s = format!("%slot{}", self.nslot);
        self.nslot += 1;
        let _ = writeln!(self.slots, "  {s} = alloca {ty}, align 16");
        self.ins(format!("store {ty} {init}, ptr {s}"));
        s
    }

    /// A special register (`tid.x`, `ctaid.x`) as i64.
    fn sreg(&mut self, r: &str) -> String {
        let f = format!("@llvm.nvvm.read.ptx.sreg.{r}");
        self.m.declare(&format!("declare i32 {f}()"));
        let x = self.v(format!("call i32 {f}()"));
        self.v(format!("zext i32 {x} to i64"))
    }

    /// `i` of type `ty` from `lo` while `i < hi` (unsigned), step `step`.
    fn range(&mut self, ty: &str, lo: &str, hi: u64, step: u64, f: impl FnOnce(&mut Self, &str)) {
        let s = self.slot(ty, lo);
        let (head, body, done) = (
            self.b.label("head"),
            self.b.label("body"),
            self.b.label("done"),
        );
        self.b.br(&head);
        self.b.place(&head);
        let i = self.v(format!("load {ty}, ptr {s}"));
        let more = self.v(format!("icmp ult {ty} {i}, {hi}"));
        self.b.cond_br(&more, &body, &done);
        self.b.place(&body);
        f(self, &i);
        let next = self.v(format!("add {ty} {i}, {step}"));
        self.ins(format!("store {ty} {next}, ptr {s}"));
        self.b.br(&head);
        self.b.place(&done);
    }

    /// The grid-stride loop over `items` work items; `f` gets the item as
    /// `ix`.
    fn items(&mut self, items: u64, f: impl FnOnce(&mut Self, &str)) {
        let t = self.sreg("tid.x");
        let c = self.sreg("ctaid.x");
        let base = self.v(format!("mul i64 {c}, {}", self.block));
        let first = self.v(format!("add i64 {base}, {t}"));
        let step = self.grid * self.block;
        self.range("i64", &first, items, step, |k, i| {
            let i = k.narrow(i);
            f(k, &i)
        });
    }

    /// An i64 value as `ix`.
    fn narrow(&mut self, v: &str) -> String {
        if self.ix == "i32" {
            self.v(format!("trunc i64 {v} to i32"))
        } else {
            v.to_string()
        }
    }

    /// An `ix` value as i64 (sign-extended: coordinates may be negative).
    fn widen(&mut self, v: &str) -> String {
        if self.ix == "i32" {
            self.v(format!("sext i32 {v} to i64"))
        } else {
            v.to_string()
        }
    }

    fn if_(&mut self, c: &str, f: impl FnOnce(&mut Self)) {
        let (then, join) = (self.b.label("then"), self.b.label("join"));
        self.b.cond_br(c, &then, &join);
        self.b.place(&then);
        f(self);
        self.b.br(&join);
        self.b.place(&join);
    }

    fn if_else(&mut self, c: &str, t: impl FnOnce(&mut Self), e: impl FnOnce(&mut Self)) {
        let (then, other, join) = (
            self.b.label("then"),
            self.b.label("else"),
            self.b.label("join"),
        );
        self.b.cond_br(c, &then, &other);
        self.b.place(&then);
        t(self);
        self.b.br(&join);
        self.b.place(&other);
        e(self);
        self.b.br(&join);
        self.b.place(&join);
    }

    /// The row-major multi-index of `v < Π lens` (the outermost non-unit
    /// dimension takes the quotient; unit dimensions are `0`).
    fn split(&mut self, v: &str, lens: &[u64]) -> Vec<String> {
        let ty = self.ix;
        let mut out = vec!["0".to_string(); lens.len()];
        let outer = lens.iter().position(|&l| l > 1);
        let mut rem = v.to_string();
        for d in (0..lens.len()).rev() {
            if lens[d] <= 1 {
                continue;
            }
            if Some(d) == outer {
                out[d] = rem;
                break;
            }
            out[d] = self.v(format!("urem {ty} {rem}, {}", lens[d]));
            rem = self.v(format!("udiv {ty} {rem}, {}", lens[d]));
        }
        out
    }

    /// `base + Σ v·s` in `ix` (a constant when no term remains).
    fn lin(&mut self, base: i128, terms: &[(&str, i128)]) -> String {
        let ty = self.ix;
        let mut acc: Option<String> = None;
        for &(v, s) in terms {
            if s == 0 || v == "0" {
                continue;
            }
            let t = if s == 1 {
                v.to_string()
            } else {
                self.v(format!("mul {ty} {v}, {s}"))
            };
            acc = Some(match acc {
                None => t,
                Some(a) => self.v(format!("add {ty} {a}, {t}")),
            });
        }
        match acc {
            None => base.to_string(),
            Some(a) if base == 0 => a,
            Some(a) => self.v(format!("add {ty} {a}, {base}")),
        }
    }

    /// Byte `off` (of type `ty`) into global pointer `p`.
    fn at(&mut self, p: &str, ty: &str, off: &str) -> String {
        if off == "0" {
            return p.to_string();
        }
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(1) {p}, {ty} {off}"
        ))
    }

    fn load(&mut self, ty: &str, p: &str, align: u64) -> String {
        self.v(format!("load {ty}, ptr addrspace(1) {p}, align {align}"))
    }

    fn store(&mut self, ty: &str, v: &str, p: &str, align: u64) {
        self.ins(format!(
            "store {ty} {v}, ptr addrspace(1) {p}, align {align}"
        ));
    }

    /// Whether every pointer in `ptrs` is a multiple of `bytes`.
    fn aligned(&mut self, ptrs: &[&str], bytes: u64) -> String {
        let mut acc: Option<String> = None;
        for p in ptrs {
            let x = self.v(format!("ptrtoint ptr addrspace(1) {p} to i64"));
            acc = Some(match acc {
                None => x,
                Some(a) => self.v(format!("or i64 {a}, {x}")),
            });
        }
        let all = acc.unwrap_or_else(|| "0".to_string());
        let low = self.v(format!("and i64 {all}, {}", bytes - 1));
        self.v(format!("icmp eq i64 {low}, 0"))
    }

    /// `wide(self, lanes)` when every pointer in `ptrs` is `lanes · 4`-byte
    /// aligned at run time, else `wide(self, 1)` (`lanes` 1: no test).
    fn lanes_or_one(&mut self, ptrs: &[&str], lanes: u64, wide: impl Fn(&mut Self, u64)) {
        if lanes == 1 {
            return wide(self, 1);
        }
        let ok = self.aligned(ptrs, lanes * 4);
        self.if_else(&ok, |k| wide(k, lanes), |k| wide(k, 1));
    }

    /// The `lanes` f32 at element `o` of `%bias`, or zeros without one.
    fn bias(&mut self, bias: bool, o: &str, lanes: u64) -> String {
        if !bias {
            return zero(fty(lanes)).to_string();
        }
        let off = self.lin(0, &[(o, 4)]);
        let p = self.at("%bias", self.ix, &off);
        self.load(fty(lanes), &p, 4 * lanes)
    }

    /// The address in `%y` of item `i` of `lanes` floats.
    fn item_ptr(&mut self, i: &str, lanes: u64) -> String {
        let off = self.lin(0, &[(i, (lanes * 4) as i128)]);
        self.at("%y", self.ix, &off)
    }

    /// A call of the overloaded intrinsic `llvm.{f}` on `args` of type `ty`.
    fn call(&mut self, f: &str, ty: &str, args: &[&str]) -> String {
        let suffix = match ty {
            "float" => "f32",
            "double" => "f64",
            "<4 x float>" => "v4f32",
            _ => "i64",
        };
        let params = vec![ty; args.len()].join(", ");
        self.m
            .declare(&format!("declare {ty} @llvm.{f}.{suffix}({params})"));
        let a: Vec<String> = args.iter().map(|a| format!("{ty} {a}")).collect();
        self.v(format!("call {ty} @llvm.{f}.{suffix}({})", a.join(", ")))
    }

    /// `x` (a float) as `lanes` lanes.
    fn splat(&mut self, x: &str, lanes: u64) -> String {
        if lanes == 1 {
            return x.to_string();
        }
        let v = self.v(format!(
            "insertelement <4 x float> poison, float {x}, i32 0"
        ));
        self.v(format!(
            "shufflevector <4 x float> {v}, <4 x float> poison, <4 x i32> zeroinitializer"
        ))
    }

    /// The function text; `params` are the pointers (`%x`) in order, all
    /// but the last `outputs` only read (`readonly` lets LLVM use the
    /// non-coherent cache: `ld.global.nc`).
    fn finish(self, name: &str, params: &[&str], outputs: usize) -> String {
        let ps: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let ro = if i + outputs < params.len() {
                    "readonly "
                } else {
                    ""
                };
                format!("ptr addrspace(1) noalias {ro}{p}")
            })
            .collect();
        format!(
            "define ptx_kernel void @{name}({}) \"nvvm.maxntid\"=\"{}\" {{\nentry:\n{}  br label %start\nstart:\n{}  ret void\n}}\n",
            ps.join(", "),
            self.block,
            self.slots,
            self.b.into_text()
        )
    }
}

/// The f32 vector type of `lanes` lanes (1 or 4).
fn fty(lanes: u64) -> &'static str {
    if lanes == 4 { "<4 x float>" } else { "float" }
}

/// One dimension of a planned copy: length and strides in units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyDim {
    pub len: u64,
    pub src: i64,
    pub dst: u64,
}

/// How a copy kernel maps threads to units (see the module doc).
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

/// Plans `Step::Copy` (see the module doc); errors for arguments the step
/// does not allow.
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

/// `Step::Fill` of `count` elements: every `elem_size`-byte element (1 to
/// 8) of `dst` set to the low bytes of `bits`, little endian. Parameters
/// `(dst)`.
pub fn fill(
    m: &mut ModuleText,
    name: &str,
    elem_size: u64,
    count: u64,
    bits: u64,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if !(1..=8).contains(&elem_size) {
        return Err(format!(
            "fill: element size must be between 1 and 8, found {elem_size}"
        ));
    }
    let es = elem_size;
    let bytes = product("fill", &[count, es])? as u64;
    let elem = &bits.to_le_bytes()[..es as usize];
    let ix = index_type(bytes as u128);
    if !es.is_power_of_two() {
        let g = launch(count, BLOCK);
        let mut k = K::new(m, ix, g);
        k.items(count, |k, i| {
            for (b, &byte) in elem.iter().enumerate() {
                let off = k.lin(b as i128, &[(i, es as i128)]);
                let p = k.at("%dst", ix, &off);
                k.store("i8", &(byte as i8).to_string(), &p, 1);
            }
        });
        let text = k.finish(name, &["%dst"], 1);
        m.func(text);
        return Ok(g);
    }
    let value = (bits & (u64::MAX >> (64 - 8 * es))) as i64;
    let value = match es {
        1 => (value as i8).to_string(),
        2 => (value as i16).to_string(),
        4 => (value as i32).to_string(),
        _ => value.to_string(),
    };
    let ety = chunk_ty(es);
    let pattern: Vec<u8> = elem.iter().copied().cycle().take(16).collect();
    let words: Vec<String> = pattern
        .chunks(4)
        .map(|w| format!("i32 {}", i32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    let pattern = format!("<{}>", words.join(", "));
    let (nvec, tail) = (bytes / 16, (bytes % 16) / es);
    let items = nvec.max(tail);
    let g = launch(items, BLOCK);
    let mut k = K::new(m, ix, g);
    if bytes > 0 {
        let ok = k.aligned(&["%dst"], 16);
        k.if_else(
            &ok,
            |k| {
                k.items(items, |k, i| {
                    let v = k.v(format!("icmp ult {ix} {i}, {nvec}"));
                    k.if_(&v, |k| {
                        let off = k.lin(0, &[(i, 16)]);
                        let p = k.at("%dst", ix, &off);
                        k.store("<4 x i32>", &pattern, &p, 16);
                    });
                    let t = k.v(format!("icmp ult {ix} {i}, {tail}"));
                    k.if_(&t, |k| {
                        let off = k.lin((nvec * 16) as i128, &[(i, es as i128)]);
                        let p = k.at("%dst", ix, &off);
                        k.store(ety, &value, &p, es);
                    });
                })
            },
            |k| {
                k.items(count, |k, i| {
                    let off = k.lin(0, &[(i, es as i128)]);
                    let p = k.at("%dst", ix, &off);
                    k.store(ety, &value, &p, es);
                })
            },
        );
    }
    let text = k.finish(name, &["%dst"], 1);
    m.func(text);
    Ok(g)
}

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

/// Where an output index of one resize axis reads (the CPU's `axis_taps`).
struct Tap {
    i0: u64,
    i1: u64,
    f: f32,
}

/// The f64 coordinate of output `o` before clamping (`None` for nearest).
fn coord(mode: ResizeMode, input: u64, out: u64, o: f64) -> Option<f64> {
    let (in_f, scale) = (input as f64, out as f64 / input as f64);
    match mode {
        ResizeMode::Nearest => None,
        ResizeMode::BilinearHalfPixel => Some((o + 0.5) / scale - 0.5),
        ResizeMode::BilinearAlignCorners => {
            let out_f = scale * in_f;
            Some(if out_f == 1.0 {
                0.0
            } else {
                o * (in_f - 1.0) / (out_f - 1.0)
            })
        }
        ResizeMode::BilinearAsymmetric => Some(o / scale),
    }
}

fn tap(mode: ResizeMode, input: u64, out: u64, o: u64) -> Tap {
    let (last, scale) = (input - 1, out as f64 / input as f64);
    match coord(mode, input, out, o as f64) {
        None => {
            let i = (((o as f64) / scale).floor().max(0.0) as u64).min(last);
            Tap {
                i0: i,
                i1: i,
                f: 0.0,
            }
        }
        Some(x) => {
            let x = x.clamp(0.0, last as f64);
            let i0 = (x.floor() as u64).min(last);
            Tap {
                i0,
                i1: (i0 + 1).min(last),
                f: (x - i0 as f64) as f32,
            }
        }
    }
}

fn f64_lit(x: f64) -> String {
    format!("0x{:016X}", x.to_bits())
}

/// The taps of output `o` of an axis (`tag` names its tables): `(i0, i1,
/// f)` as `ix`, `ix`, float.
fn resize_tap(
    k: &mut K,
    name: &str,
    tag: &str,
    mode: ResizeMode,
    input: u64,
    out: u64,
    o: &str,
) -> [String; 3] {
    let ix = k.ix;
    let last = input - 1;
    let nearest = mode == ResizeMode::Nearest;
    if out <= TABLE_MAX {
        let taps: Vec<Tap> = (0..out).map(|o| tap(mode, input, out, o)).collect();
        let get = |k: &mut K, field: &str, ty: &str, vals: Vec<String>| {
            let g = format!("@{name}.{tag}{field}");
            let items: Vec<String> = vals.iter().map(|v| format!("{ty} {v}")).collect();
            k.m.declare(&format!(
                "{g} = internal addrspace(1) constant [{out} x {ty}] [{}]",
                items.join(", ")
            ));
            let p = k.v(format!(
                "getelementptr inbounds {ty}, ptr addrspace(1) {g}, {ix} {o}"
            ));
            let x = k.load(ty, &p, 4);
            if ty == "i32" && ix == "i64" {
                k.v(format!("zext i32 {x} to i64"))
            } else {
                x
            }
        };
        let i0 = get(
            k,
            "i0",
            "i32",
            taps.iter().map(|t| t.i0.to_string()).collect(),
        );
        if nearest {
            return [i0.clone(), i0, "0.0".into()];
        }
        let i1 = get(
            k,
            "i1",
            "i32",
            taps.iter().map(|t| t.i1.to_string()).collect(),
        );
        let f = get(k, "f", "float", taps.iter().map(|t| f32_lit(t.f)).collect());
        return [i0, i1, f];
    }
    // The CPU's f64 operations, one by one (IEEE division and floor).
    let scale = out as f64 / input as f64;
    let of = k.v(format!("uitofp {ix} {o} to double"));
    let x = match mode {
        ResizeMode::Nearest => k.v(format!("fdiv double {of}, {}", f64_lit(scale))),
        ResizeMode::BilinearHalfPixel => {
            let a = k.v(format!("fadd double {of}, 0.5"));
            let d = k.v(format!("fdiv double {a}, {}", f64_lit(scale)));
            k.v(format!("fsub double {d}, 0.5"))
        }
        ResizeMode::BilinearAlignCorners => {
            let out_f = scale * input as f64;
            if out_f == 1.0 {
                "0.0".to_string()
            } else {
                let a = k.v(format!("fmul double {of}, {}", f64_lit(input as f64 - 1.0)));
                k.v(format!("fdiv double {a}, {}", f64_lit(out_f - 1.0)))
            }
        }
        ResizeMode::BilinearAsymmetric => k.v(format!("fdiv double {of}, {}", f64_lit(scale))),
    };
    let x = if nearest {
        k.call("floor", "double", &[&x])
    } else {
        let x = k.call("maxnum", "double", &[&x, "0.0"]);
        k.call("minnum", "double", &[&x, &f64_lit(last as f64)])
    };
    let fl = k.call("floor", "double", &[&x]);
    let fl = k.call("maxnum", "double", &[&fl, "0.0"]);
    let i = k.v(format!("fptoui double {fl} to i64"));
    let i0 = k.call("umin", "i64", &[&i, &last.to_string()]);
    let i0x = k.narrow(&i0);
    if nearest {
        return [i0x.clone(), i0x, "0.0".into()];
    }
    let i1 = k.v(format!("add i64 {i0}, 1"));
    let i1 = k.call("umin", "i64", &[&i1, &last.to_string()]);
    let i1 = k.narrow(&i1);
    let i0f = k.v(format!("uitofp i64 {i0} to double"));
    let d = k.v(format!("fsub double {x}, {i0f}"));
    let f = k.v(format!("fptrunc double {d} to float"));
    [i0x, i1, f]
}

/// `Step::Resize` of NHWC f32 `n × h × w × c` to `n × oh × ow × c`.
/// Parameters `(x, y)`.
#[allow(clippy::too_many_arguments)]
pub fn resize(
    m: &mut ModuleText,
    name: &str,
    mode: ResizeMode,
    n: u64,
    h: u64,
    w: u64,
    c: u64,
    oh: u64,
    ow: u64,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let ylen = product("resize output", &[n, oh, ow, c])? as u64;
    let xlen = product("resize input", &[n, h, w, c])? as u64;
    if ylen > 0 && (h == 0 || w == 0) {
        return Err(format!(
            "resize: an empty input ({h}x{w}) cannot be resized to {oh}x{ow}"
        ));
    }
    let lanes = if c.is_multiple_of(4) { 4 } else { 1 };
    let g = launch(ylen / lanes, BLOCK);
    let ix = index_type(xlen.max(ylen) as u128 * 4);
    let mut k = K::new(m, ix, g);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[n, oh, ow, c / v]);
            let [y0, y1, fy] = resize_tap(k, name, "y", mode, h, oh, &p[1]);
            let [x0, x1, fx] = resize_tap(k, name, "x", mode, w, ow, &p[2]);
            let ch = k.lin(0, &[(&p[3], v as i128)]);
            let img = k.lin(0, &[(&p[0], h as i128)]);
            let px = |k: &mut K, yy: &str, xx: &str| {
                let r = k.v(format!("add {ix} {img}, {yy}"));
                let e = k.lin(
                    0,
                    &[(&r, (w * c * 4) as i128), (xx, (c * 4) as i128), (&ch, 4)],
                );
                let ptr = k.at("%x", ix, &e);
                k.load(ft, &ptr, 4 * v)
            };
            let a00 = px(k, &y0, &x0);
            let out = if mode == ResizeMode::Nearest {
                a00
            } else {
                let a01 = px(k, &y0, &x1);
                let a10 = px(k, &y1, &x0);
                let a11 = px(k, &y1, &x1);
                let blend = |k: &mut K, a: &str, b: &str, f: &str| {
                    let fz = k.v(format!("fcmp oeq float {f}, 0.0"));
                    let fs = k.splat(f, v);
                    let d = k.v(format!("fsub {ft} {b}, {a}"));
                    let t = k.v(format!("fmul {ft} {fs}, {d}"));
                    let s = k.v(format!("fadd {ft} {a}, {t}"));
                    k.v(format!("select i1 {fz}, {ft} {a}, {ft} {s}"))
                };
                let r0 = blend(k, &a00, &a10, &fy);
                let r1 = blend(k, &a01, &a11, &fy);
                blend(k, &r0, &r1, &fx)
            };
            let yp = k.item_ptr(i, v);
            k.store(ft, &out, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        k.lanes_or_one(&["%x", "%y"], lanes, body);
    }
    let text = k.finish(name, &["%x", "%y"], 1);
    m.func(text);
    Ok(g)
}

/// `(input + pads − span) / stride + 1`, or `None` when the window does not
/// fit (the CPU's `conv_out_size`).
fn conv_out(input: u64, k: u64, stride: u64, dilation: u64, pb: u64, pe: u64) -> Option<u128> {
    let span = dilation as u128 * (k as u128 - 1) + 1;
    let padded = input as u128 + pb as u128 + pe as u128;
    (padded >= span).then(|| (padded - span) / stride as u128 + 1)
}

fn check_conv(op: &str, g: &ConvGeom) -> Result<(), String> {
    if g.kh == 0 || g.kw == 0 {
        return Err(format!(
            "{op}: kernel size must be non-zero, found {}x{}",
            g.kh, g.kw
        ));
    }
    if g.stride.contains(&0) || g.dilation.contains(&0) {
        return Err(format!(
            "{op}: strides and dilations must be at least 1, found {:?} and {:?}",
            g.stride, g.dilation
        ));
    }
    let big = [
        g.h,
        g.w,
        g.kh,
        g.kw,
        g.stride[0],
        g.stride[1],
        g.dilation[0],
        g.dilation[1],
    ];
    if big.iter().chain(&g.pads).any(|&v| v > u32::MAX as u64) {
        return Err(format!("{op}: geometry value is too large"));
    }
    product(&format!("{op} input"), &[g.n, g.h, g.w, g.c])?;
    product(&format!("{op} output"), &[g.n, g.oh, g.ow, g.oc])?;
    product(&format!("{op} weight"), &[g.kh, g.kw, g.c.max(1), g.oc])?;
    Ok(())
}

/// The index type of a convolution: offsets and coordinates in bytes.
fn conv_index(g: &ConvGeom) -> &'static str {
    let x = g.n as u128 * g.h as u128 * g.w as u128 * g.c as u128;
    let y = g.n as u128 * g.oh as u128 * g.ow as u128 * g.oc as u128;
    let w = g.kh as u128 * g.kw as u128 * g.c.max(1) as u128 * g.oc as u128;
    let reach = |o: u64, s: u64, p: u64, k: u64, d: u64, i: u64| {
        o as u128 * s as u128 + p as u128 + k as u128 * d as u128 + i as u128
    };
    let cy = reach(g.oh, g.stride[0], g.pads[0], g.kh, g.dilation[0], g.h);
    let cx = reach(g.ow, g.stride[1], g.pads[1], g.kw, g.dilation[1], g.w);
    index_type(x.max(y).max(w).max(cy).max(cx) * 4)
}

/// `Step::DepthwiseConv2d` (NHWC, `group == c`, `oc == c · multiplier`,
/// output channel `o` reads input channel `o / multiplier`; `w` is `kh ×
/// kw × oc`). Parameters `(x, w, [bias], y)`.
pub fn depthwise_conv2d(
    m: &mut ModuleText,
    name: &str,
    geom: &ConvGeom,
    bias: bool,
    relu: bool,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let g = *geom;
    check_conv("depthwise_conv2d", &g)?;
    if g.group != g.c || g.c == 0 || !g.oc.is_multiple_of(g.c) {
        return Err(format!(
            "depthwise_conv2d: needs group == channels and output channels a multiple of them, found group {}, {} input and {} output channels",
            g.group, g.c, g.oc
        ));
    }
    let eh = conv_out(g.h, g.kh, g.stride[0], g.dilation[0], g.pads[0], g.pads[2]);
    let ew = conv_out(g.w, g.kw, g.stride[1], g.dilation[1], g.pads[1], g.pads[3]);
    if eh != Some(g.oh as u128) || ew != Some(g.ow as u128) {
        return Err(format!(
            "depthwise_conv2d: output size {}x{} does not match the geometry (expected {eh:?}x{ew:?})",
            g.oh, g.ow
        ));
    }
    let mult = g.oc / g.c;
    let ylen = g.n * g.oh * g.ow * g.oc;
    let lanes = if g.oc.is_multiple_of(4) && (mult <= 2 || mult.is_multiple_of(4)) {
        4
    } else {
        1
    };
    let geo = launch(ylen / lanes, BLOCK);
    let params: &[&str] = if bias {
        &["%x", "%w", "%bias", "%y"]
    } else {
        &["%x", "%w", "%y"]
    };
    let mut k = K::new(m, conv_index(&g), geo);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[g.n, g.oh, g.ow, g.oc / v]);
            let o = k.lin(0, &[(&p[3], v as i128)]);
            let ci = match (v, mult) {
                (_, 1) => o.clone(),
                (4, 2) => k.v(format!("lshr {ix} {o}, 1")),
                _ => k.v(format!("udiv {ix} {o}, {mult}")),
            };
            let mut acc = k.bias(bias, &o, v);
            let by = k.lin(-(g.pads[0] as i128), &[(&p[1], g.stride[0] as i128)]);
            let bx = k.lin(-(g.pads[1] as i128), &[(&p[2], g.stride[1] as i128)]);
            let img = k.lin(0, &[(&p[0], g.h as i128)]);
            for ky in 0..g.kh {
                let iy = k.lin((ky * g.dilation[0]) as i128, &[(&by, 1)]);
                let oky = k.v(format!("icmp ult {ix} {iy}, {}", g.h));
                let row = k.v(format!("add {ix} {img}, {iy}"));
                for kx in 0..g.kw {
                    let xx = k.lin((kx * g.dilation[1]) as i128, &[(&bx, 1)]);
                    let okx = k.v(format!("icmp ult {ix} {xx}, {}", g.w));
                    let ok = k.v(format!("and i1 {oky}, {okx}"));
                    let pix = k.lin(0, &[(&row, g.w as i128), (&xx, 1)]);
                    // A masked tap reads pixel 0 (valid) and is discarded.
                    let pix = k.v(format!("select i1 {ok}, {ix} {pix}, {ix} 0"));
                    let xo = k.lin(0, &[(&pix, (g.c * 4) as i128), (&ci, 4)]);
                    let xp = k.at("%x", ix, &xo);
                    let xv = match (v, mult) {
                        (1, _) => k.load("float", &xp, 4),
                        (_, 1) => k.load(ft, &xp, 16),
                        (_, 2) => {
                            let h = k.load("<2 x float>", &xp, 8);
                            k.v(format!("shufflevector <2 x float> {h}, <2 x float> poison, <4 x i32> <i32 0, i32 0, i32 1, i32 1>"))
                        }
                        _ => {
                            let s = k.load("float", &xp, 4);
                            k.splat(&s, 4)
                        }
                    };
                    let t = (ky * g.kw + kx) * g.oc;
                    let wo = k.lin((t * 4) as i128, &[(&o, 4)]);
                    let wp = k.at("%w", ix, &wo);
                    let wv = k.load(ft, &wp, 4 * v);
                    let prod = k.v(format!("fmul {ft} {xv}, {wv}"));
                    let sum = k.v(format!("fadd {ft} {acc}, {prod}"));
                    acc = k.v(format!("select i1 {ok}, {ft} {sum}, {ft} {acc}"));
                }
            }
            if relu {
                acc = k.call("maxnum", ft, &[&acc, zero(ft)]);
            }
            let yp = k.item_ptr(i, v);
            k.store(ft, &acc, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        k.lanes_or_one(params, lanes, body);
    }
    let text = k.finish(name, params, 1);
    m.func(text);
    Ok(geo)
}

/// `Step::ConvTranspose2d` (NHWC; `geom` is the forward convolution turned
/// around, `w` is `group × (c/group) × kh × kw × (oc/group)`, pads crop).
/// Output `(oy, ox)` sums, over the taps `(ky, kx)` with `oy + pad_top −
/// ky·dilation = iy·stride` for an input row `iy` (and likewise across),
/// the products over the group's input channels. Parameters `(x, w,
/// [bias], y)`.
pub fn conv_transpose2d(
    m: &mut ModuleText,
    name: &str,
    geom: &ConvGeom,
    bias: bool,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    let g = *geom;
    check_conv("conv_transpose2d", &g)?;
    if g.group == 0 || !g.c.is_multiple_of(g.group) || !g.oc.is_multiple_of(g.group) {
        return Err(format!(
            "conv_transpose2d: channels {} (input) and {} (output) must be multiples of group {}",
            g.c, g.oc, g.group
        ));
    }
    if g.h == 0 || g.w == 0 {
        return Err(format!(
            "conv_transpose2d: input spatial size must be non-zero, found {}x{}",
            g.h, g.w
        ));
    }
    for dim in 0..2 {
        let (input, kk, out) = ([g.h, g.w][dim], [g.kh, g.kw][dim], [g.oh, g.ow][dim]);
        let (s, d) = (g.stride[dim] as i128, g.dilation[dim] as i128);
        let full = (input as i128 - 1) * s + d * (kk as i128 - 1) + 1;
        let lo = full - (g.pads[dim] as i128 + g.pads[dim + 2] as i128);
        let hi = lo + s.max(d) - 1;
        if lo < 1 || (out as i128) < lo || (out as i128) > hi {
            return Err(format!(
                "conv_transpose2d: output {} must be between {lo} and {hi} for this geometry, found {out}",
                ["height", "width"][dim]
            ));
        }
    }
    let (cg, mg) = (g.c / g.group, g.oc / g.group);
    let taps = g.kh * g.kw;
    let ylen = g.n * g.oh * g.ow * g.oc;
    let lanes = if mg.is_multiple_of(4) { 4 } else { 1 };
    let geo = launch(ylen / lanes, BLOCK);
    let params: &[&str] = if bias {
        &["%x", "%w", "%bias", "%y"]
    } else {
        &["%x", "%w", "%y"]
    };
    let mut k = K::new(m, conv_index(&g), geo);
    let body = |k: &mut K, v: u64| {
        let ft = fty(v);
        k.items(ylen / v, |k, i| {
            let ix = k.ix;
            let p = k.split(i, &[g.n, g.oh, g.ow, g.oc / v]);
            let o = k.lin(0, &[(&p[3], v as i128)]);
            let grp = k.v(format!("udiv {ix} {o}, {mg}"));
            let j = k.v(format!("urem {ix} {o}, {mg}"));
            let init = k.bias(bias, &o, v);
            let acc = k.slot(ft, &init);
            // Input row (or column) `t / stride` where `t = o + pad − k·dil`
            // is a non-negative multiple of the stride below `len · stride`.
            let src = |k: &mut K, o: &str, pad: u64, off: u64, s: u64, len: u64| {
                let t = k.lin(pad as i128 - off as i128, &[(o, 1)]);
                let nonneg = k.v(format!("icmp sge {ix} {t}, 0"));
                let r = k.v(format!("urem {ix} {t}, {s}"));
                let q = k.v(format!("udiv {ix} {t}, {s}"));
                let exact = k.v(format!("icmp eq {ix} {r}, 0"));
                let inside = k.v(format!("icmp ult {ix} {q}, {len}"));
                let ok = k.v(format!("and i1 {nonneg}, {exact}"));
                let ok = k.v(format!("and i1 {ok}, {inside}"));
                (ok, q)
            };
            for ky in 0..g.kh {
                let (oky, iy) = src(k, &p[1], g.pads[0], ky * g.dilation[0], g.stride[0], g.h);
                k.if_(&oky, |k| {
                    for kx in 0..g.kw {
                        let (okx, ixx) =
                            src(k, &p[2], g.pads[1], kx * g.dilation[1], g.stride[1], g.w);
                        k.if_(&okx, |k| {
                            let pix = k.lin(
                                0,
                                &[(&p[0], (g.h * g.w) as i128), (&iy, g.w as i128), (&ixx, 1)],
                            );
                            let xb =
                                k.lin(0, &[(&pix, (g.c * 4) as i128), (&grp, (cg * 4) as i128)]);
                            let t = ky * g.kw + kx;
                            let wb = k.lin(
                                (t * mg * 4) as i128,
                                &[(&grp, (cg * taps * mg * 4) as i128), (&j, 4)],
                            );
                            let ix = k.ix;
                            k.range(ix, "0", cg, 1, |k, ci| {
                                let xo = k.lin(0, &[(&xb, 1), (ci, 4)]);
                                let xp = k.at("%x", ix, &xo);
                                let xv = k.load("float", &xp, 4);
                                let xv = k.splat(&xv, v);
                                let wo = k.lin(0, &[(&wb, 1), (ci, (taps * mg * 4) as i128)]);
                                let wp = k.at("%w", ix, &wo);
                                let wv = k.load(ft, &wp, 4 * v);
                                let a = k.v(format!("load {ft}, ptr {acc}"));
                                let a = k.call("fma", ft, &[&xv, &wv, &a]);
                                k.ins(format!("store {ft} {a}, ptr {acc}"));
                            });
                        });
                    }
                });
            }
            let a = k.v(format!("load {ft}, ptr {acc}"));
            let yp = k.item_ptr(i, v);
            k.store(ft, &a, &yp, 4 * v);
        })
    };
    if ylen > 0 {
        // `x` is read one float at a time.
        k.lanes_or_one(&params[1..], lanes, body);
    }
    let text = k.finish(name, params, 1);
    m.func(text);
    Ok(geo)
}
