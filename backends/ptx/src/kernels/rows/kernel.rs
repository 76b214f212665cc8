//! The function builder of the row kernels. [`Kernel`] writes one
//! `ptx_kernel` with pointer parameters `%p0, %p1, …` and provides what
//! every row kernel is made of: f32 loads and stores at element offsets
//! (global, or the kernel's static shared array), the reduction operators
//! [`Op`] with their identities, warp butterflies, barriers, counted loops
//! that carry f32 accumulators as phis, and the grid-stride loop (launched
//! with [`flat_geometry`]).
//!
//! Invariants:
//! - The kernel's name is checked (a C identifier) before anything is
//!   written; its parameters are `ptr addrspace(1) noalias`.
//! - `cur` always names the basic block being written, so the phis of a
//!   loop name their real predecessors; values a loop names before they are
//!   written derive their names from the loop's (unique) label.
//! - [`Kernel::butterfly`] shuffles with the full mask: every lane of the
//!   warp must reach it, so callers mask values, never the shuffle.
//! - A kernel has at most one static shared array, `@{name}.smem`.

use aoc_plan::plan::ReduceKind;

use crate::irtext::{Body, ModuleText, check_entry_name, f32_lit};
use crate::kernels::{Geometry, HalfCopy};

pub(super) const WARP: u64 = 32;
/// Threads per block of the kernels over many independent rows/outputs.
pub(super) const BLOCK: u64 = 256;
pub(super) const GRID_MAX: u64 = i32::MAX as u64;

/// How two values combine in a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Sum,
    /// Maximum ignoring NaN (`maxnum`): the softmax row maximum.
    MaxNum,
    /// Maximum and minimum propagating NaN.
    Max,
    Min,
}

impl Op {
    pub(super) fn of(kind: ReduceKind) -> Op {
        match kind {
            ReduceKind::Sum | ReduceKind::Mean => Op::Sum,
            ReduceKind::Max => Op::Max,
            ReduceKind::Min => Op::Min,
        }
    }

    pub(super) fn identity(self) -> String {
        f32_lit(match self {
            Op::Sum => 0.0,
            Op::MaxNum | Op::Max => f32::NEG_INFINITY,
            Op::Min => f32::INFINITY,
        })
    }
}

/// One kernel function being written.
pub(super) struct Kernel<'m> {
    pub(super) m: &'m mut ModuleText,
    pub(super) b: Body,
    name: String,
    /// The basic block being written (phis name their predecessors).
    cur: String,
    /// Row stores also write a half copy through this parameter.
    pub(super) half: Option<(HalfCopy, String)>,
    /// Row stores also write `@fn(value)` as a byte through this parameter
    /// (a quantization after the kernel), and the f32 value only where the
    /// flag says.
    pub(super) byte_out: Option<(String, String, bool)>,
    /// Row loads read bytes (signed or not) and dequantize each through
    /// `@fn` (an input passed as its 8-bit form).
    pub(super) byte_in: Option<(String, bool)>,
}

impl<'m> Kernel<'m> {
    pub(super) fn new(m: &'m mut ModuleText, name: &str) -> Result<Kernel<'m>, String> {
        check_entry_name(name)?;
        Ok(Kernel {
            m,
            b: Body::new(),
            name: name.to_string(),
            cur: "entry".to_string(),
            half: None,
            byte_out: None,
            byte_in: None,
        })
    }

    pub(super) fn v(&mut self, rhs: impl AsRef<str>) -> String {
        self.b.v(rhs)
    }

    pub(super) fn ins(&mut self, text: impl AsRef<str>) {
        self.b.ins(text)
    }

    fn place(&mut self, label: &str) {
        self.b.place(label);
        self.cur = label.to_string();
    }

    /// Ends the body and adds the kernel with `params` pointer parameters.
    pub(super) fn finish(mut self, params: usize) {
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
    pub(super) fn empty(self, params: usize) -> Geometry {
        self.finish(params);
        Geometry {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            smem: 0,
        }
    }

    /// A static shared array of `floats` f32 for this kernel; its name.
    pub(super) fn shared(&mut self, floats: u64) -> String {
        let g = format!("@{}.smem", self.name);
        self.m.declare(&format!(
            "{g} = internal addrspace(3) global [{floats} x float] undef, align 4"
        ));
        g
    }

    /// `%x` of a special register (i32).
    pub(super) fn sreg(&mut self, r: &str) -> String {
        self.m
            .declare(&format!("declare i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"));
        self.v(format!("call i32 @llvm.nvvm.read.ptx.sreg.{r}.x()"))
    }

    /// A two-operand intrinsic `@llvm.{f}` on `ty`.
    pub(super) fn call2(&mut self, f: &str, ty: &str, a: &str, b: &str) -> String {
        self.m
            .declare(&format!("declare {ty} @llvm.{f}({ty}, {ty})"));
        self.v(format!("call {ty} @llvm.{f}({ty} {a}, {ty} {b})"))
    }

    pub(super) fn umin(&mut self, ty: &str, a: &str, b: &str) -> String {
        self.call2(&format!("umin.{ty}"), ty, a, b)
    }

    /// The f32 at element `off` (of type `ty`) of global `p`, or of the
    /// shared array `p` when `ty` is `"shared"` (32-bit offsets).
    pub(super) fn load(&mut self, p: &str, ty: &str, off: &str) -> String {
        let (a, space) = self.elem(p, ty, off);
        self.v(format!("load float, ptr addrspace({space}) {a}, align 4"))
    }

    pub(super) fn store(&mut self, val: &str, p: &str, ty: &str, off: &str) {
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

    pub(super) fn barrier(&mut self) {
        self.m
            .declare("declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)");
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    }

    pub(super) fn combine(&mut self, op: Op, a: &str, b: &str) -> String {
        match op {
            Op::Sum => self.v(format!("fadd float {a}, {b}")),
            Op::MaxNum => self.call2("maxnum.f32", "float", a, b),
            Op::Max => self.call2("maximum.f32", "float", a, b),
            Op::Min => self.call2("minimum.f32", "float", a, b),
        }
    }

    /// `ok ? v : identity(op)` (just `v` without a condition).
    pub(super) fn masked(&mut self, ok: &Option<String>, v: &str, op: Op) -> String {
        match ok {
            Some(c) => self.v(format!("select i1 {c}, float {v}, float {}", op.identity())),
            None => v.to_string(),
        }
    }

    /// `a && b` for optional conditions (`None` is true).
    pub(super) fn both(&mut self, a: &Option<String>, b: &Option<String>) -> Option<String> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.v(format!("and i1 {a}, {b}"))),
            (Some(c), None) | (None, Some(c)) => Some(c.clone()),
            (None, None) => None,
        }
    }

    /// Butterfly over aligned groups of `lanes` lanes (a power of two ≤ 32):
    /// afterwards every lane of a group holds the group's result.
    pub(super) fn butterfly(&mut self, ops: &[Op], vals: &mut [String], lanes: u64) {
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
    pub(super) fn if_then(&mut self, cond: &Option<String>, body: impl FnOnce(&mut Self)) {
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
    pub(super) fn for_range(
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
    pub(super) fn grid_stride(&mut self, total: u64, body: impl FnOnce(&mut Self, &str)) {
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

/// A grid-stride kernel over `total` items: 256 threads a block.
pub(super) fn flat_geometry(total: u64) -> Geometry {
    Geometry {
        grid: [total.div_ceil(BLOCK).clamp(1, GRID_MAX) as u32, 1, 1],
        block: [BLOCK as u32, 1, 1],
        smem: 0,
    }
}
