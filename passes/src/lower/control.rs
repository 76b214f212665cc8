//! Control flow (`core.if`, `core.loop`) as flat plan steps: an `If` step
//! that jumps over the then branch to the else branch, an `Else` that jumps
//! to the `EndIf`; a `Loop` head, the body's steps and an `EndLoop` that
//! jumps back. Bodies are planned with the parent: their values get
//! virtual buffers like any other, and the memory planner keeps every
//! buffer a loop body shares with the code around it live over the whole
//! loop (`memory.rs`).
//!
//! Each branch copies what it yields into the if's result buffers; a loop's
//! carried values live in buffers of their own (the initial values copied
//! in before the head) that `EndLoop` overwrites with the yields.
//! An if whose condition is a compile-time constant lowers its chosen
//! region in place (no steps of its own).
//!
//! Values a region computes are visible only inside it: the place of every
//! value (`Lower::vals`) is restored after a region, so a layout copy made
//! inside a branch is never read outside it.

use aoc_ir::module::{Block, OpData};
use aoc_ir::ops::control::{MAX_LOOP_ITERATIONS, carried_count};
use aoc_ir::ops::kind::Control;
use aoc_ir::attr::Attr;
use aoc_ir::types::{Scalar, TensorType};
use aoc_plan::plan::{Buf, Step};

use super::{Lower, Val, identity};

impl Lower<'_> {
    pub(crate) fn lower_control(&mut self, op: &OpData, c: Control) -> Result<bool, String> {
        match c {
            Control::If => self.lower_if(op)?,
            Control::Loop => self.lower_loop(op)?,
        }
        Ok(true)
    }

    /// Lowers the ops of `block` after binding its arguments to `args`, and
    /// returns the places of the values it yields.
    fn lower_region(&mut self, block: &Block, args: Vec<Val>) -> Result<Vec<Val>, String> {
        for (&a, v) in block.args.iter().zip(args) {
            self.vals.insert(a, v);
        }
        let outer_origin = self.origin.clone();
        let outer_current = self.current.take();
        for &id in &block.ops {
            let inner = &self.func.ops[id];
            self.origin = match (&inner.loc.name, inner.results.first()) {
                (Some(n), _) => format!("{} loc(\"{n}\")", inner.opcode.name()),
                (None, Some(&r)) => format!("{} %{}", inner.opcode.name(), self.func.name_of(r)),
                (None, None) => inner.opcode.name().to_string(),
            };
            // An op that expands (a recurrent layer, a quantized op
            // without a kernel) is expanded inside its region too
            // (`expand.rs` rebuilds regions).
            self.current = Some(id);
            self.lower_op(inner).map_err(|m| format!("in its region, {}: {m}", self.origin))?;
        }
        self.origin = outer_origin;
        self.current = outer_current;
        block.terminator.iter().map(|&v| self.val(v)).collect()
    }

    /// `v` (a place) in a buffer in row-major order.
    fn row_major_buf(&mut self, v: Val, ty: &TensorType) -> Result<Buf, String> {
        Ok(match v {
            Val::Mem { buf, perm } if perm == identity(ty.rank()) => buf,
            Val::Mem { buf, perm } => {
                let dst = self.alloc(ty)?;
                self.copy_to_layout(buf, &perm, dst, &identity(ty.rank()), ty);
                dst
            }
            Val::Const(t) => self.add_tensor("const", &t),
        })
    }

    /// Copies `v` into `dst` (row major).
    fn store(&mut self, v: Val, dst: Buf, ty: &TensorType) {
        let (src, perm) = match v {
            Val::Mem { buf, perm } => (buf, perm),
            Val::Const(t) => (self.add_tensor("const", &t), identity(ty.rank())),
        };
        if src != dst {
            self.copy_to_layout(src, &perm, dst, &identity(ty.rank()), ty);
        }
    }

    fn lower_if(&mut self, op: &OpData) -> Result<(), String> {
        let args: Vec<Val> = op.operands[1..].iter().map(|&v| self.val(v)).collect::<Result<_, _>>()?;
        let [then, els] = op.regions.as_slice() else {
            return Err("an if takes two regions".to_string());
        };
        let saved = self.vals.clone();
        if let Some(c) = self.constant(op.operands[0]) {
            // Known at compile time: the chosen region, in place.
            let region = if c.len() == 1 && c.get_f64(0) != 0.0 { then } else { els };
            let out = self.lower_region(region, args)?;
            self.vals = saved;
            for (&r, v) in op.results.iter().zip(out) {
                self.vals.insert(r, v);
            }
            return Ok(());
        }
        let cond = self.materialize(op.operands[0], &identity(self.ty(op.operands[0]).rank()))?;
        let types: Vec<TensorType> = op.results.iter().map(|&r| self.ty(r).clone()).collect();
        let results: Vec<Buf> = types.iter().map(|t| self.alloc(t)).collect::<Result<_, _>>()?;
        let head = self.steps.len();
        self.push(Step::If { cond, else_at: 0 });
        let mut else_step = head;
        for (k, region) in [then, els].into_iter().enumerate() {
            let out = self.lower_region(region, args.clone())?;
            for ((v, &dst), ty) in out.into_iter().zip(&results).zip(&types) {
                self.store(v, dst, ty);
            }
            self.vals = saved.clone();
            if k == 0 {
                else_step = self.steps.len();
                self.push(Step::Else { end_at: 0 });
                self.steps[head] = Step::If { cond, else_at: else_step as u64 + 1 };
            }
        }
        let end = self.steps.len() as u64;
        self.push(Step::EndIf {});
        self.steps[else_step] = Step::Else { end_at: end };
        for ((&r, buf), ty) in op.results.iter().zip(results).zip(&types) {
            self.define(r, buf, identity(ty.rank()));
        }
        Ok(())
    }

    fn lower_loop(&mut self, op: &OpData) -> Result<(), String> {
        let [body] = op.regions.as_slice() else {
            return Err("a loop takes one region".to_string());
        };
        let carried = match op.attrs.get("carried") {
            Some(Attr::Int(n)) => carried_count(*n, op.operands.len() - 2)?,
            _ => 0,
        };
        let scalar = |s: Scalar| TensorType::new(vec![], s);
        // The trip count and condition: absent when a constant says "no
        // bound" / "true".
        let trip = match self.constant(op.operands[0]) {
            Some(t) if t.len() == 1 && t.get_i64(0) == i64::MAX => None,
            _ => Some(self.materialize(op.operands[0], &identity(self.ty(op.operands[0]).rank()))?),
        };
        let cond = match self.constant(op.operands[1]) {
            Some(t) if t.len() == 1 && t.get_f64(0) != 0.0 => None,
            _ => Some(self.materialize(op.operands[1], &identity(self.ty(op.operands[1]).rank()))?),
        };
        let iter = self.alloc(&scalar(Scalar::I64))?;
        let cond_in = self.alloc(&scalar(Scalar::I1))?;
        let mut state = Vec::with_capacity(carried);
        for &v in &op.operands[2..2 + carried] {
            let ty = self.ty(v).clone();
            let buf = self.alloc(&ty)?;
            let init = self.val(v)?;
            self.store(init, buf, &ty);
            state.push(buf);
        }
        let types: Vec<TensorType> = op.results.iter().map(|&r| self.ty(r).clone()).collect();
        let scan_rows = (types.len() > carried).then(|| types[carried].shape[0] as u64);
        let scan_out: Vec<Buf> = types[carried..].iter().map(|t| self.alloc(t)).collect::<Result<_, _>>()?;
        let head = self.steps.len();
        self.push(Step::Loop { trip, cond, iter, cond_in, end_at: 0, scan_rows });
        let saved = self.vals.clone();
        let mut args = vec![Val::Mem { buf: iter, perm: vec![] }, Val::Mem { buf: cond_in, perm: vec![] }];
        for (buf, &v) in state.iter().zip(&op.operands[2..2 + carried]) {
            args.push(Val::Mem { buf: *buf, perm: identity(self.ty(v).rank()) });
        }
        for &v in &op.operands[2 + carried..] {
            args.push(self.val(v)?);
        }
        let out = self.lower_region(body, args)?;
        let yield_types: Vec<TensorType> = body.terminator.iter().map(|&v| self.ty(v).clone()).collect();
        let mut out = out.into_iter().zip(yield_types);
        let (c, cty) = out.next().ok_or("the body yields no condition")?;
        let cond_out = self.row_major_buf(c, &cty)?;
        let mut pairs = Vec::new();
        for (k, (v, ty)) in out.enumerate() {
            let from = self.row_major_buf(v, &ty)?;
            let to = if k < carried { state[k] } else { scan_out[k - carried] };
            pairs.push([from, to]);
        }
        let scans = pairs.split_off(carried);
        self.vals = saved;
        let end = self.steps.len() as u64;
        self.push(Step::EndLoop {
            start_at: head as u64,
            trip,
            iter,
            cond_in,
            cond_out,
            carried: pairs,
            scans,
            scan_rows,
            max_iterations: match op.attrs.get("max_iterations") {
                Some(Attr::Int(n)) => aoc_ir::ops::control::max_iterations(*n)? as u64,
                _ => MAX_LOOP_ITERATIONS as u64,
            },
        });
        if let Some(Step::Loop { end_at, .. }) = self.steps.get_mut(head) {
            *end_at = end;
        }
        for (i, &r) in op.results.iter().enumerate() {
            let buf = if i < carried { state[i] } else { scan_out[i - carried] };
            self.define(r, buf, identity(types[i].rank()));
        }
        Ok(())
    }
}
