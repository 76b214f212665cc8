//! The kernel builder the index-mapping generators share. [`K`] writes one
//! `ptx_kernel` function: SSA text, entry-block allocas (promoted to
//! registers by `mem2reg`) for loop counters and accumulators, structured
//! loops and branches, byte-offset addressing of the pointer parameters, and
//! the grid-stride loop over work items. The free functions pick the launch
//! geometry, the offset type and the LLVM types of chunks.
//!
//! Invariants:
//! - [`K::finish`] gives every parameter `ptr addrspace(1) noalias`, all but
//!   the last `outputs` also `readonly` (so loads may use the non-coherent
//!   cache), and sets `nvvm.maxntid` to the block size of the launch the
//!   builder was made for; allocas come first, the body starts at `start:`.
//! - Offsets and item indices inside a loop body have type `K::ix`: `i32`
//!   only when [`index_type`] found every byte offset and item count below
//!   2^31; the grid-stride counter itself is always i64 and narrowed per
//!   item. Coordinates that may be negative are widened with `sext`.
//! - [`product`] refuses element counts whose 16-byte multiple exceeds
//!   `LIMIT` (2^56), so the generators' u64 and i128 size arithmetic cannot
//!   overflow.
//! - [`launch`] always gives a grid of at least 1 and at most 2^31 − 1
//!   blocks; the grid-stride loop covers any shortfall.

use std::fmt::Write as _;

use crate::irtext::{Body, ModuleText};
use crate::kernels::Geometry;

pub(super) const BLOCK: u64 = 256;
const MAX_GRID: u64 = (1 << 31) - 1;
/// Byte sizes above this are refused (far beyond any GPU's memory).
pub(super) const LIMIT: u128 = 1 << 56;

pub(super) fn launch(items: u64, block: u64) -> Geometry {
    let grid = items.div_ceil(block).clamp(1, MAX_GRID);
    Geometry {
        grid: [grid as u32, 1, 1],
        block: [block as u32, 1, 1],
        smem: 0,
    }
}

/// `i32` when `max` (the largest offset in bytes or item count) allows.
pub(super) fn index_type(max: u128) -> &'static str {
    if max + 64 < 1 << 31 { "i32" } else { "i64" }
}

/// The LLVM type moved by a chunk of `bytes` (a power of two ≤ 16).
pub(super) fn chunk_ty(bytes: u64) -> &'static str {
    match bytes {
        1 => "i8",
        2 => "i16",
        4 => "i32",
        8 => "i64",
        _ => "<4 x i32>",
    }
}

/// The zero constant of `ty`.
pub(super) fn zero(ty: &str) -> &'static str {
    match ty {
        "float" | "double" => "0.0",
        t if t.starts_with('<') => "zeroinitializer",
        _ => "0",
    }
}

/// The largest power of two up to 8 dividing `bytes`.
pub(super) fn unit_of(bytes: u64) -> u64 {
    1 << bytes.trailing_zeros().min(3)
}

pub(super) fn product(what: &str, dims: &[u64]) -> Result<u128, String> {
    let p = dims
        .iter()
        .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
        .filter(|&p| p * 16 <= LIMIT);
    p.ok_or_else(|| format!("{what} of shape {dims:?} is too large"))
}

/// The builder of one kernel: SSA text, entry-block allocas (promoted to
/// registers by `mem2reg`), and the launch it is written for.
pub(super) struct K<'m> {
    pub(super) m: &'m mut ModuleText,
    pub(super) b: Body,
    slots: String,
    nslot: u32,
    /// Type of offsets and item indices inside a loop body.
    pub(super) ix: &'static str,
    block: u64,
    pub(super) grid: u64,
}

impl<'m> K<'m> {
    pub(super) fn new(m: &'m mut ModuleText, ix: &'static str, g: Geometry) -> K<'m> {
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

    pub(super) fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    pub(super) fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    /// An entry-block alloca of `ty`, initialized here with `init`.
    pub(super) fn slot(&mut self, ty: &str, init: &str) -> String {
        let s = format!("%slot{}", self.nslot);
        self.nslot += 1;
        let _ = writeln!(self.slots, "  {s} = alloca {ty}, align 16");
        self.ins(format!("store {ty} {init}, ptr {s}"));
        s
    }

    /// A special register (`tid.x`, `ctaid.x`) as i64.
    pub(super) fn sreg(&mut self, r: &str) -> String {
        let f = format!("@llvm.nvvm.read.ptx.sreg.{r}");
        self.m.declare(&format!("declare i32 {f}()"));
        let x = self.v(format!("call i32 {f}()"));
        self.v(format!("zext i32 {x} to i64"))
    }

    /// `i` of type `ty` from `lo` while `i < hi` (unsigned), step `step`.
    pub(super) fn range(
        &mut self,
        ty: &str,
        lo: &str,
        hi: u64,
        step: u64,
        f: impl FnOnce(&mut Self, &str),
    ) {
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
    pub(super) fn items(&mut self, items: u64, f: impl FnOnce(&mut Self, &str)) {
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
    pub(super) fn narrow(&mut self, v: &str) -> String {
        if self.ix == "i32" {
            self.v(format!("trunc i64 {v} to i32"))
        } else {
            v.to_string()
        }
    }

    /// An `ix` value as i64 (sign-extended: coordinates may be negative).
    pub(super) fn widen(&mut self, v: &str) -> String {
        if self.ix == "i32" {
            self.v(format!("sext i32 {v} to i64"))
        } else {
            v.to_string()
        }
    }

    pub(super) fn if_(&mut self, c: &str, f: impl FnOnce(&mut Self)) {
        let (then, join) = (self.b.label("then"), self.b.label("join"));
        self.b.cond_br(c, &then, &join);
        self.b.place(&then);
        f(self);
        self.b.br(&join);
        self.b.place(&join);
    }

    pub(super) fn if_else(
        &mut self,
        c: &str,
        t: impl FnOnce(&mut Self),
        e: impl FnOnce(&mut Self),
    ) {
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
    pub(super) fn split(&mut self, v: &str, lens: &[u64]) -> Vec<String> {
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
    pub(super) fn lin(&mut self, base: i128, terms: &[(&str, i128)]) -> String {
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
    pub(super) fn at(&mut self, p: &str, ty: &str, off: &str) -> String {
        if off == "0" {
            return p.to_string();
        }
        self.v(format!(
            "getelementptr inbounds i8, ptr addrspace(1) {p}, {ty} {off}"
        ))
    }

    pub(super) fn load(&mut self, ty: &str, p: &str, align: u64) -> String {
        self.v(format!("load {ty}, ptr addrspace(1) {p}, align {align}"))
    }

    pub(super) fn store(&mut self, ty: &str, v: &str, p: &str, align: u64) {
        self.ins(format!(
            "store {ty} {v}, ptr addrspace(1) {p}, align {align}"
        ));
    }

    /// Whether every pointer in `ptrs` is a multiple of `bytes`.
    pub(super) fn aligned(&mut self, ptrs: &[&str], bytes: u64) -> String {
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
    pub(super) fn lanes_or_one(
        &mut self,
        ptrs: &[&str],
        lanes: u64,
        wide: impl Fn(&mut Self, u64),
    ) {
        if lanes == 1 {
            return wide(self, 1);
        }
        let ok = self.aligned(ptrs, lanes * 4);
        self.if_else(&ok, |k| wide(k, lanes), |k| wide(k, 1));
    }

    /// The `lanes` f32 at element `o` of `%bias`, or zeros without one.
    pub(super) fn bias(&mut self, bias: bool, o: &str, lanes: u64) -> String {
        if !bias {
            return zero(fty(lanes)).to_string();
        }
        let off = self.lin(0, &[(o, 4)]);
        let p = self.at("%bias", self.ix, &off);
        self.load(fty(lanes), &p, 4 * lanes)
    }

    /// The address in `%y` of item `i` of `lanes` floats.
    pub(super) fn item_ptr(&mut self, i: &str, lanes: u64) -> String {
        let off = self.lin(0, &[(i, (lanes * 4) as i128)]);
        self.at("%y", self.ix, &off)
    }

    /// A call of the overloaded intrinsic `llvm.{f}` on `args` of type `ty`.
    pub(super) fn call(&mut self, f: &str, ty: &str, args: &[&str]) -> String {
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
    pub(super) fn splat(&mut self, x: &str, lanes: u64) -> String {
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
    pub(super) fn finish(self, name: &str, params: &[&str], outputs: usize) -> String {
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
pub(super) fn fty(lanes: u64) -> &'static str {
    if lanes == 4 { "<4 x float>" } else { "float" }
}
