//! Elementwise ops, fused pointwise chains, epilogues, batch-norm,
//! quantize/dequantize and casts as generated [`PointwiseKernel`]s.
//!
//! The kernel iterates over the output in its physical order; every operand
//! is read through strides, so operands may be broadcast and may sit in a
//! different layout than the output (an NCHW bias over an NHWC activation
//! costs nothing). Single-element constants become immediates.
//!
//! Element types: values are f32 inside a kernel. Arithmetic ops are
//! compiled when the result is f32; casts, comparisons, `where` and the
//! quantization ops also when they produce or read 8-bit, 32-bit or boolean
//! integers. Arithmetic, comparisons, `where` and casts whose operands and
//! result are all integers (any width) or bool compile to integer kernels
//! ([`Compute::I64`]): exact, wrapping as the interpreter does. Anything
//! else (f64, f16, fp8, float math on 64-bit integers) is left to the
//! reference path, which is exact.

use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::module::{OpData, ValueId};
use aoc_ir::ops::Opcode;
use aoc_ir::ops::kind::{Activation, Movement, OpKind, Pointwise, ScalarOp};
use aoc_ir::ops::fused::Step as EpiStep;
use aoc_ir::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
use aoc_plan::plan::{Buf, Space, Step};

use super::{Home, Lower, Val, bytes_of, identity, logical_strides};
use crate::kernel_expr::{Binary, Compute, Expr, Operand, PointwiseKernel, Unary};

/// Element types a kernel may load or store.
fn kernel_type(s: Scalar) -> bool {
    matches!(s, Scalar::F32 | Scalar::I8 | Scalar::U8 | Scalar::I32 | Scalar::I1)
}

/// A kernel being built: the output's logical shape and physical order,
/// and per operand its strides over the output's *logical* dimensions.
pub(crate) struct KernelBuilder {
    shape: Vec<usize>,
    perm: Vec<usize>,
    operands: Vec<(Scalar, Vec<u64>)>,
    pub exprs: Vec<Expr>,
    pub args: Vec<Buf>,
    pub compute: Compute,
}

impl KernelBuilder {
    pub fn new(shape: &[usize], perm: &[usize]) -> KernelBuilder {
        KernelBuilder {
            shape: shape.to_vec(),
            perm: perm.to_vec(),
            operands: Vec::new(),
            exprs: Vec::new(),
            args: Vec::new(),
            compute: Compute::F32,
        }
    }

    pub fn push(&mut self, e: Expr) -> usize {
        self.exprs.push(e);
        self.exprs.len() - 1
    }

    pub fn c(&mut self, v: f32) -> usize {
        self.push(Expr::Const(v))
    }
    pub fn un(&mut self, u: Unary, x: usize) -> usize {
        self.push(Expr::Unary(u, x))
    }
    pub fn bin(&mut self, b: Binary, x: usize, y: usize) -> usize {
        self.push(Expr::Binary(b, x, y))
    }

    /// Adds an operand of logical `shape` (broadcast against the output)
    /// stored in `buf` with physical order `perm`; returns its load.
    pub fn operand(&mut self, buf: Buf, dtype: Scalar, shape: &[usize], perm: &[usize]) -> usize {
        let ls = logical_strides(shape, perm);
        let r = self.shape.len();
        let off = r - shape.len();
        let strides: Vec<u64> = (0..r)
            .map(|d| {
                if d < off {
                    return 0;
                }
                let e = d - off;
                if shape[e] == 1 && self.shape[d] != 1 { 0 } else { ls[e] }
            })
            .collect();
        self.operands.push((dtype, strides));
        self.args.push(buf);
        let k = self.operands.len() - 1;
        self.push(Expr::Load(k))
    }

    /// The finished kernel writing `result` into `out` (dtype `out_dtype`,
    /// the builder's shape and order), with collapsed dimensions.
    pub fn finish(mut self, result: usize, out: Buf, out_dtype: Scalar) -> (PointwiseKernel, Vec<Buf>) {
        let dims: Vec<u64> = self.perm.iter().map(|&d| self.shape[d] as u64).collect();
        let mut strides: Vec<Vec<u64>> = self
            .operands
            .iter()
            .map(|(_, s)| self.perm.iter().map(|&d| s[d]).collect())
            .collect();
        // Drop unit dimensions, then merge neighbours that are contiguous for
        // every operand (the output is row major, so always contiguous).
        let keep: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] != 1).collect();
        let mut d2: Vec<u64> = keep.iter().map(|&i| dims[i]).collect();
        for s in strides.iter_mut() {
            *s = keep.iter().map(|&i| s[i]).collect();
        }
        let mut i = 0;
        while i + 1 < d2.len() {
            if strides.iter().all(|s| s[i] == s[i + 1] * d2[i + 1]) {
                d2[i] *= d2[i + 1];
                d2.remove(i + 1);
                for s in strides.iter_mut() {
                    s[i] = s[i + 1];
                    s.remove(i + 1);
                }
            } else {
                i += 1;
            }
        }
        if d2.is_empty() {
            d2.push(1);
            for s in strides.iter_mut() {
                s.push(0);
            }
        }
        // A long single dimension becomes rows × cols so the executor can
        // split it over threads (rows are its unit of work).
        if d2.len() == 1
            && d2[0] >= 8192
            && let Some(c) = (64..=4096u64).rev().find(|c| c % 4 == 0 && d2[0] % c == 0)
        {
            let n = d2[0];
            d2 = vec![n / c, c];
            for s in strides.iter_mut() {
                *s = vec![s[0] * c, s[0]];
            }
        }
        let operands = self
            .operands
            .iter()
            .zip(strides)
            .map(|((dtype, _), strides)| Operand { dtype: *dtype, strides })
            .collect();
        self.args.push(out);
        let k = PointwiseKernel {
            name: String::new(),
            dims: d2,
            operands,
            exprs: self.exprs,
            result,
            out_dtype,
            compute: self.compute,
        };
        (k, self.args)
    }
}

impl Lower<'_> {
    /// Loads value `v` into kernel `kb`: a one-element constant becomes an
    /// immediate, a larger one a weight, a buffer an operand.
    pub(crate) fn load(&mut self, kb: &mut KernelBuilder, v: ValueId) -> Result<usize, String> {
        let ty = self.ty(v).clone();
        let s = ty.elem.storage();
        // (Which ops may read which types is `lower_pointwise`'s decision;
        // every integer converts on load, e4m3 bytes with `fp8_elementwise`.)
        if !(kernel_type(s) || !s.is_float() && matches!(ty.elem, ElemType::Scalar(_)) || self.opts.fp8_elementwise && s == Scalar::F8E4M3FN) {
            return Err(format!("element type {s}"));
        }
        match self.val(v)? {
            Val::Const(t) if t.len() == 1 && kb.compute == Compute::I64 => Ok(kb.push(Expr::Int(t.get_i64(0)))),
            Val::Const(t) if t.len() == 1 => Ok(kb.c(t.get_f64(0) as f32)),
            Val::Const(t) => {
                let buf = self.add_tensor("pointwise", &t);
                Ok(kb.operand(buf, s, &ty.shape, &identity(ty.rank())))
            }
            Val::Mem { buf, perm } => Ok(kb.operand(buf, s, &ty.shape, &perm)),
        }
    }

    /// Output order of a pointwise op: the order of its first buffer
    /// operand of the result's shape (so NHWC chains stay NHWC).
    fn pointwise_perm(&self, op: &OpData, out: &TensorType) -> Vec<usize> {
        for &v in &op.operands {
            if let Some(Val::Mem { perm, .. }) = self.vals.get(&v)
                && self.ty(v).shape == out.shape
            {
                return perm.clone();
            }
        }
        identity(out.rank())
    }

    /// `relu(x)` where `x` is the output of the step just emitted, a kernel
    /// with a relu flag, and this is its only use: set the flag instead of
    /// running another pass over memory.
    fn fold_relu(&mut self, op: &OpData) -> bool {
        let x = op.operands[0];
        if op.opcode != Opcode::Relu || self.uses.get(&x) != Some(&1) {
            return false;
        }
        let Some(Val::Mem { buf, perm }) = self.vals.get(&x).cloned() else { return false };
        let folded = match self.steps.last_mut() {
            Some(Step::WinogradConv2d { y, relu, .. } | Step::Conv2d { y, relu, .. } | Step::DepthwiseConv2d { y, relu, .. })
                if *y == buf && !*relu =>
            {
                *relu = true;
                true
            }
            Some(Step::Gemm { c, relu, .. }) if *c == buf && !*relu => {
                *relu = true;
                true
            }
            _ => false,
        };
        if folded {
            self.define(op.results[0], buf, perm);
        }
        folded
    }

    pub(crate) fn lower_pointwise(&mut self, op: &OpData) -> Result<bool, String> {
        if self.fold_relu(op) {
            return Ok(true);
        }
        let native = match op.opcode.kind() {
            OpKind::Pointwise(Pointwise::QuantAdd) => self.lower_qadd(op)?,
            OpKind::Pointwise(Pointwise::Quantize | Pointwise::Dequantize) => self.lower_qcast(op)?,
            _ => false,
        };
        if native {
            return Ok(true);
        }
        let r = op.results[0];
        let out_ty = self.ty(r).clone();
        let out_s = out_ty.elem.storage();
        // Ops whose results may be integers (or i1); the others compute floats.
        let int_ok = matches!(
            op.opcode.kind(),
            OpKind::Pointwise(
                Pointwise::Cast
                    | Pointwise::Where
                    | Pointwise::Quantize
                    | Pointwise::Dequantize
                    | Pointwise::Requantize
                    | Pointwise::QuantAdd
            ) | OpKind::Binary(Binary::Equal | Binary::Less | Binary::Greater)
                | OpKind::Movement(Movement::Identity)
        );
        // A cast of f32 values to i64 is exact (the kernels compute in f32,
        // so other i64 results are not: those stay off the kernels).
        let f32_to_i64 = matches!(op.opcode.kind(), OpKind::Pointwise(Pointwise::Cast))
            && out_s == Scalar::I64
            && op.operands.iter().all(|&v| self.ty(v).elem.storage() == Scalar::F32);
        // Integer in, integer out: an exact integer kernel.
        let plain_int = |t: &TensorType| matches!(t.elem, ElemType::Scalar(s) if !s.is_float());
        let int_kernel = matches!(
            op.opcode.kind(),
            OpKind::Pointwise(Pointwise::Cast | Pointwise::Where)
                | OpKind::Binary(_)
                | OpKind::Unary(Unary::Neg | Unary::Abs)
                | OpKind::Movement(Movement::Identity)
        ) && plain_int(&out_ty)
            && op.operands.iter().all(|&v| plain_int(self.ty(v)));
        // e4m3 bytes only for the quantization ops (`fp8_elementwise`).
        let fp8_ok = self.opts.fp8_elementwise
            && matches!(op.opcode.kind(), OpKind::Pointwise(Pointwise::Quantize | Pointwise::Dequantize | Pointwise::Requantize));
        let ok_type = |s: Scalar| kernel_type(s) || (fp8_ok && s == Scalar::F8E4M3FN);
        if !int_kernel {
            if !(ok_type(out_s) || f32_to_i64) || (!int_ok && out_s != Scalar::F32) {
                return Ok(false);
            }
            // A cast of integers to f32 loads them whatever their width
            // (rounding to nearest, as the interpreter does).
            let int_to_f32 = matches!(op.opcode.kind(), OpKind::Pointwise(Pointwise::Cast)) && out_s == Scalar::F32;
            for &v in &op.operands {
                let ok = ok_type(self.ty(v).elem.storage()) || int_to_f32 && plain_int(self.ty(v));
                if !ok {
                    return Ok(false);
                }
            }
        }
        let perm = self.pointwise_perm(op, &out_ty);
        let mut kb = KernelBuilder::new(&out_ty.shape, &perm);
        if int_kernel {
            kb.compute = Compute::I64;
        }
        let attrs = Lower::attrs(op)?;
        let result = match op.opcode.kind() {
            OpKind::Pointwise(Pointwise::Fused) => {
                let steps = epilogue(self.func, op)?;
                let first = self.load(&mut kb, op.operands[0])?;
                let extras = op.operands[1..].to_vec();
                self.emit_steps(&mut kb, first, &steps, &extras)?
            }
            OpKind::Pointwise(Pointwise::BatchNorm) => match self.batch_norm(&mut kb, op, &attrs)? {
                Some(x) => x,
                None => return Ok(false),
            },
            OpKind::Pointwise(Pointwise::Quantize | Pointwise::Dequantize | Pointwise::Requantize) => {
                // The e4m3 store saturates; without `saturate` the op
                // gives NaN out of range (the reference path has that).
                if out_s == Scalar::F8E4M3FN && matches!(attrs.get("saturate"), Some(Attr::Bool(false))) {
                    return Ok(false);
                }
                let x = self.load(&mut kb, op.operands[0])?;
                let in_ty = self.ty(op.operands[0]).clone();
                let mid = match &in_ty.elem {
                    ElemType::Quant(q) => match dequantize(self, &mut kb, x, q, &in_ty)? {
                        Some(m) => m,
                        None => return Ok(false),
                    },
                    ElemType::Scalar(_) => x,
                };
                match &out_ty.elem {
                    ElemType::Quant(q) => match quantize(self, &mut kb, mid, q, &out_ty)? {
                        Some(y) => y,
                        None => return Ok(false),
                    },
                    ElemType::Scalar(_) => mid,
                }
            }
            // Its definition: dequantize both, add in f32, clamp, quantize.
            OpKind::Pointwise(Pointwise::QuantAdd) => {
                let mut v = Vec::new();
                for &x in &op.operands[..2] {
                    let t = self.ty(x).clone();
                    let ElemType::Quant(q) = &t.elem else { return Ok(false) };
                    let l = self.load(&mut kb, x)?;
                    match dequantize(self, &mut kb, l, q, &t)? {
                        Some(d) => v.push(d),
                        None => return Ok(false),
                    }
                }
                let mut sum = kb.bin(Binary::Add, v[0], v[1]);
                if let Some(lo) = float_attr(&attrs, "clip_min") {
                    let c = kb.c(lo);
                    sum = kb.bin(Binary::Max, sum, c);
                }
                if let Some(hi) = float_attr(&attrs, "clip_max") {
                    let c = kb.c(hi);
                    sum = kb.bin(Binary::Min, sum, c);
                }
                let ElemType::Quant(q) = &out_ty.elem else { return Ok(false) };
                match quantize(self, &mut kb, sum, q, &out_ty)? {
                    Some(y) => y,
                    None => return Ok(false),
                }
            }
            OpKind::Pointwise(Pointwise::Cast) => {
                let x = self.load(&mut kb, op.operands[0])?;
                // An integer kernel's store to bool is `x != 0` already.
                if out_s == Scalar::I1 && !int_kernel {
                    let zero = kb.c(0.0);
                    let one = kb.c(1.0);
                    let eq = kb.bin(Binary::Equal, x, zero);
                    kb.push(Expr::Select(eq, zero, one))
                } else {
                    x
                }
            }
            // Compressing is a compile-time step on constant weights.
            OpKind::Pointwise(Pointwise::SparseCompress) => return Ok(false),
            OpKind::Pointwise(Pointwise::Where) => {
                let c = self.load(&mut kb, op.operands[0])?;
                let a = self.load(&mut kb, op.operands[1])?;
                let b = self.load(&mut kb, op.operands[2])?;
                kb.push(Expr::Select(c, a, b))
            }
            OpKind::Movement(_)
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Activation(_)
            | OpKind::Constant
            | OpKind::Norm(_)
            | OpKind::Conv(..)
            | OpKind::MatMul(_)
            | OpKind::Gemm(_)
            | OpKind::Attention
            | OpKind::Pool(..)
            | OpKind::Reduce(_)
            | OpKind::Resize
            | OpKind::GridSample
            | OpKind::Recurrent(_)
            | OpKind::Control(_) => {
                let x = self.load(&mut kb, op.operands[0])?;
                let y = match op.operands.get(1) {
                    Some(&v) => Some(self.load(&mut kb, v)?),
                    None => None,
                };
                match emit_op(&mut kb, op.opcode, &attrs, x, y)? {
                    Some(e) => e,
                    None => return Ok(false),
                }
            }
        };
        if !kb.exprs.iter().all(|e| kb.compute.supports(e)) {
            return Ok(false);
        }
        let dst = match self.reusable_operand(op, &out_ty, &perm) {
            Some(buf) => buf,
            None => self.alloc(&out_ty)?,
        };
        let (k, args) = kb.finish(result, dst, out_s);
        let rows = k.rows();
        let code = self.add_kernel(k);
        self.push(Step::Pointwise { code, args, rows });
        self.define(r, dst, perm);
        Ok(true)
    }

    /// The buffer of an operand that a quantized add may write its result
    /// over: the operand's only use, a whole arena buffer of the result's
    /// shape, bytes and order, so each element is read and then written at
    /// the same place by the same work item. It saves the arena a buffer,
    /// and lets the GPU fuse the add into the int8 convolution before it
    /// (the add's output then never overlaps that convolution's input).
    fn reusable_operand(&self, op: &OpData, out_ty: &TensorType, perm: &[usize]) -> Option<Buf> {
        if !matches!(op.opcode.kind(), OpKind::Pointwise(Pointwise::QuantAdd)) {
            return None;
        }
        let bytes = bytes_of(out_ty).ok()?;
        op.operands.iter().find_map(|&v| {
            let Some(Val::Mem { buf, perm: p }) = self.vals.get(&v) else { return None };
            let whole = buf.offset == 0 && buf.len == bytes && self.bufs[buf.index as usize].size == bytes;
            let arena = buf.space == Space::Arena && matches!(self.bufs[buf.index as usize].home, Home::Arena);
            let t = self.ty(v);
            let same = t.shape == out_ty.shape && p.as_slice() == perm && bytes_of(t).ok() == Some(bytes);
            (self.uses.get(&v) == Some(&1) && whole && arena && same).then_some(*buf)
        })
    }

    /// Applies epilogue `steps` in place to `acc` (a tensor of logical
    /// type `ty` in order `perm`), reading `extras` in order.
    pub(crate) fn epilogue_in_place(
        &mut self,
        acc: Buf,
        ty: &TensorType,
        perm: &[usize],
        steps: &[EpiStep],
        extras: &[ValueId],
    ) -> Result<(), String> {
        if steps.is_empty() {
            return Ok(());
        }
        let mut kb = KernelBuilder::new(&ty.shape, perm);
        let x = kb.operand(acc, Scalar::F32, &ty.shape, perm);
        let result = self.emit_steps(&mut kb, x, steps, extras)?;
        let (k, args) = kb.finish(result, acc, Scalar::F32);
        let rows = k.rows();
        let code = self.add_kernel(k);
        self.push(Step::Pointwise { code, args, rows });
        Ok(())
    }

    /// Applies epilogue `steps` to the core result `acc` (type `acc_ty`,
    /// order `perm`): in place when the result has the core's shape, else
    /// (an extra operand broadcasts the core result up) into a new buffer.
    /// Returns the result's buffer and order.
    pub(crate) fn epilogue_to(
        &mut self,
        acc: Buf,
        acc_ty: &TensorType,
        perm: &[usize],
        out_ty: &TensorType,
        steps: &[EpiStep],
        extras: &[ValueId],
    ) -> Result<(Buf, Vec<usize>), String> {
        if acc_ty.shape == out_ty.shape {
            self.epilogue_in_place(acc, acc_ty, perm, steps, extras)?;
            return Ok((acc, perm.to_vec()));
        }
        let out_perm = if out_ty.rank() == perm.len() { perm.to_vec() } else { identity(out_ty.rank()) };
        let mut kb = KernelBuilder::new(&out_ty.shape, &out_perm);
        let x = kb.operand(acc, Scalar::F32, &acc_ty.shape, perm);
        let result = self.emit_steps(&mut kb, x, steps, extras)?;
        let dst = self.alloc(out_ty)?;
        let (k, args) = kb.finish(result, dst, Scalar::F32);
        let rows = k.rows();
        let code = self.add_kernel(k);
        self.push(Step::Pointwise { code, args, rows });
        Ok((dst, out_perm))
    }

    /// Emits epilogue steps on `acc`; binary steps take the next extra.
    pub(crate) fn emit_steps(
        &mut self,
        kb: &mut KernelBuilder,
        mut acc: usize,
        steps: &[EpiStep],
        extras: &[ValueId],
    ) -> Result<usize, String> {
        let mut next = extras.iter();
        for s in steps {
            acc = match s {
                EpiStep::Unary { opcode, attrs } => emit_op(kb, *opcode, attrs, acc, None)?
                    .ok_or_else(|| format!("epilogue step {} has no kernel", opcode.name()))?,
                EpiStep::Binary { opcode, reversed } => {
                    let &v = next.next().ok_or("epilogue has more binary steps than operands")?;
                    let y = self.load(kb, v)?;
                    let (a, b) = if *reversed { (y, acc) } else { (acc, y) };
                    emit_op(kb, *opcode, &Attrs::new(), a, Some(b))?
                        .ok_or_else(|| format!("epilogue step {} has no kernel", opcode.name()))?
                }
            };
        }
        Ok(acc)
    }

    /// Inference batch-norm with constant statistics: `x · a + b` per
    /// channel (axis 1), `a` and `b` folded now.
    fn batch_norm(&mut self, kb: &mut KernelBuilder, op: &OpData, attrs: &Attrs) -> Result<Option<usize>, String> {
        let stats: Option<Vec<_>> = op.operands[1..].iter().map(|&v| self.constant(v)).collect();
        let Some(stats) = stats else { return Ok(None) };
        let eps = match attrs.get("epsilon") {
            Some(Attr::Float(e)) => *e,
            _ => 1e-5,
        };
        let x_ty = self.ty(op.operands[0]).clone();
        if x_ty.rank() < 2 {
            return Ok(None);
        }
        let c = x_ty.shape[1];
        let (g, b, m, v) = (stats[0].to_f64(), stats[1].to_f64(), stats[2].to_f64(), stats[3].to_f64());
        if [&g, &b, &m, &v].iter().any(|s| s.len() != c) {
            return Ok(None);
        }
        let a: Vec<f32> = (0..c).map(|i| (g[i] / (v[i] + eps).sqrt()) as f32).collect();
        let sh: Vec<f32> = (0..c).map(|i| (b[i] - m[i] * (a[i] as f64)) as f32).collect();
        let mut pshape = vec![1usize; x_ty.rank()];
        pshape[1] = c;
        let pshape64: Vec<u64> = pshape.iter().map(|&d| d as u64).collect();
        let ab = self.add_weight_f32("bn_scale", &pshape64, &a);
        let bb = self.add_weight_f32("bn_shift", &pshape64, &sh);
        let x = self.load(kb, op.operands[0])?;
        let id = identity(pshape.len());
        let av = kb.operand(ab, Scalar::F32, &pshape, &id);
        let bv = kb.operand(bb, Scalar::F32, &pshape, &id);
        let t = kb.bin(Binary::Mul, x, av);
        Ok(Some(kb.bin(Binary::Add, t, bv)))
    }
}

/// A fused op's epilogue steps, decoded from its region.
pub(crate) fn epilogue(func: &aoc_ir::Func, op: &OpData) -> Result<Vec<EpiStep>, String> {
    aoc_ir::ops::fused::epilogue(func, op)
}

pub(crate) fn float_attr(attrs: &Attrs, name: &str) -> Option<f32> {
    match attrs.get(name) {
        Some(Attr::Float(v)) => Some(*v as f32),
        Some(Attr::Int(v)) => Some(*v as f32),
        _ => None,
    }
}

/// One elementwise op of kind unary, binary, activation (or identity) on
/// loaded values; `None` when the kind has no kernel form here.
fn emit_op(kb: &mut KernelBuilder, opcode: Opcode, attrs: &Attrs, x: usize, y: Option<usize>) -> Result<Option<usize>, String> {
    let two = |y: Option<usize>| y.ok_or_else(|| format!("{} needs two operands", opcode.name()));
    if let OpKind::Movement(Movement::Identity) | OpKind::Pointwise(Pointwise::Cast) = opcode.kind() {
        return Ok(Some(x));
    }
    let Some(f) = opcode.kind().scalar_op() else { return Ok(None) };
    let e = match f {
        ScalarOp::Unary(u) => kb.un(u, x),
        // x² as x·x: one rounding either way, so exactly the interpreter's
        // pow, without a call to the general power.
        ScalarOp::Binary(Binary::Pow) if matches!(y.map(|y| kb.exprs[y]), Some(Expr::Const(2.0) | Expr::Int(2))) => {
            kb.bin(Binary::Mul, x, x)
        }
        ScalarOp::Binary(b) => kb.bin(b, x, two(y)?),
        ScalarOp::Activation(a) => activation(kb, a, attrs, x, y)?,
    };
    Ok(Some(e))
}

/// An activation as its composition of scalar functions (the interpreter's
/// definition in `aoc_ir::ops::elementwise`, in f32).
fn activation(kb: &mut KernelBuilder, act: Activation, attrs: &Attrs, x: usize, y: Option<usize>) -> Result<usize, String> {
    Ok(match act {
        Activation::Gelu => {
            let approx = matches!(attrs.get("approximate"), Some(Attr::Str(s)) if s == "tanh");
            let half = kb.c(0.5);
            let one = kb.c(1.0);
            let inner = if approx {
                // tanh(√(2/π)·(x + 0.044715·x³))
                let k = kb.c((2.0f64 / std::f64::consts::PI).sqrt() as f32);
                let c = kb.c(0.044715);
                let x2 = kb.bin(Binary::Mul, x, x);
                let x3 = kb.bin(Binary::Mul, x2, x);
                let t = kb.bin(Binary::Mul, c, x3);
                let s = kb.bin(Binary::Add, x, t);
                let u = kb.bin(Binary::Mul, k, s);
                kb.un(Unary::Tanh, u)
            } else {
                let r = kb.c(std::f32::consts::FRAC_1_SQRT_2);
                let u = kb.bin(Binary::Mul, x, r);
                kb.un(Unary::Erf, u)
            };
            let p = kb.bin(Binary::Add, one, inner);
            let hx = kb.bin(Binary::Mul, half, x);
            kb.bin(Binary::Mul, hx, p)
        }
        Activation::Silu => {
            let s = kb.un(Unary::Sigmoid, x);
            kb.bin(Binary::Mul, x, s)
        }
        Activation::HardSigmoid | Activation::HardSwish => {
            let (alpha, beta) = if act == Activation::HardSwish {
                (1.0 / 6.0, 0.5)
            } else {
                (float_attr(attrs, "alpha").unwrap_or(0.2), float_attr(attrs, "beta").unwrap_or(0.5))
            };
            let a = kb.c(alpha);
            let b = kb.c(beta);
            let zero = kb.c(0.0);
            let one = kb.c(1.0);
            let t = kb.bin(Binary::Mul, a, x);
            let t = kb.bin(Binary::Add, t, b);
            let t = kb.bin(Binary::Min, t, one);
            let hs = kb.bin(Binary::Max, t, zero);
            if act == Activation::HardSwish { kb.bin(Binary::Mul, x, hs) } else { hs }
        }
        Activation::LeakyRelu => {
            let alpha = float_attr(attrs, "alpha").unwrap_or(0.01);
            let a = kb.c(alpha);
            let zero = kb.c(0.0);
            let neg = kb.bin(Binary::Less, x, zero);
            let ax = kb.bin(Binary::Mul, a, x);
            kb.push(Expr::Select(neg, ax, x))
        }
        Activation::Clip => {
            let mut v = x;
            if let Some(lo) = float_attr(attrs, "min") {
                let c = kb.c(lo);
                v = kb.bin(Binary::Max, v, c);
            }
            if let Some(hi) = float_attr(attrs, "max") {
                let c = kb.c(hi);
                v = kb.bin(Binary::Min, v, c);
            }
            v
        }
        Activation::Prelu => {
            let s = y.ok_or("core.prelu needs two operands")?;
            let zero = kb.c(0.0);
            let neg = kb.bin(Binary::Less, x, zero);
            let sx = kb.bin(Binary::Mul, s, x);
            kb.push(Expr::Select(neg, sx, x))
        }
    })
}

/// Per-element (scale, zero point) of `q` over a tensor of type `ty`: two
/// immediates per tensor, or two weights broadcast along the axis.
fn quant_params(lw: &mut Lower<'_>, kb: &mut KernelBuilder, q: &QuantType, ty: &TensorType) -> (usize, usize) {
    match &q.params {
        QuantParams::PerTensor { scale, zero_point } => (kb.c(*scale as f32), kb.c(*zero_point as f32)),
        QuantParams::PerAxis { axis, scales, zero_points } => {
            let mut shape = vec![1usize; ty.rank()];
            shape[*axis] = scales.len();
            let s64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            let sv: Vec<f32> = scales.iter().map(|&s| s as f32).collect();
            let zv: Vec<f32> = zero_points.iter().map(|&z| z as f32).collect();
            let sb = lw.add_weight_f32("q_scale", &s64, &sv);
            let zb = lw.add_weight_f32("q_zero", &s64, &zv);
            let id = identity(shape.len());
            let s = kb.operand(sb, Scalar::F32, &shape, &id);
            let z = kb.operand(zb, Scalar::F32, &shape, &id);
            (s, z)
        }
    }
}

/// Whether `q` is e4m3 with f32 expressed values and zero points 0, and
/// the target's kernels load and store e4m3 (`fp8_elementwise`).
fn e4m3_kernel(lw: &Lower<'_>, q: &QuantType) -> bool {
    let zero = match &q.params {
        QuantParams::PerTensor { zero_point, .. } => *zero_point == 0,
        QuantParams::PerAxis { zero_points, .. } => zero_points.iter().all(|&z| z == 0),
    };
    lw.opts.fp8_elementwise && q.storage == Scalar::F8E4M3FN && q.expressed == Scalar::F32 && zero
}

/// `(q − zp) · scale` in f32 (an e4m3 operand loads as its value); `None`
/// for other fp8 storage.
fn dequantize(lw: &mut Lower<'_>, kb: &mut KernelBuilder, x: usize, q: &QuantType, ty: &TensorType) -> Result<Option<usize>, String> {
    let int = q.storage.int_range().is_some() && q.expressed == Scalar::F32 && q.storage.bits() <= 16;
    if !int && !e4m3_kernel(lw, q) {
        return Ok(None);
    }
    let (s, z) = quant_params(lw, kb, q, ty);
    let d = kb.bin(Binary::Sub, x, z);
    Ok(Some(kb.bin(Binary::Mul, d, s)))
}

/// `clamp(round_even(x / scale) + zp)`; to e4m3 `x / scale`, which the
/// e4m3 store rounds to nearest even and saturates (the op's definition
/// with `saturate`, as the interpreter computes it: the quotient in f32,
/// then one rounding); `None` for other fp8 storage.
fn quantize(lw: &mut Lower<'_>, kb: &mut KernelBuilder, x: usize, q: &QuantType, ty: &TensorType) -> Result<Option<usize>, String> {
    if e4m3_kernel(lw, q) {
        let (s, _) = quant_params(lw, kb, q, ty);
        return Ok(Some(kb.bin(Binary::Div, x, s)));
    }
    let Some((lo, hi)) = q.storage.int_range() else { return Ok(None) };
    if q.expressed != Scalar::F32 || q.storage.bits() > 16 {
        return Ok(None);
    }
    let (s, z) = quant_params(lw, kb, q, ty);
    let t = kb.bin(Binary::Div, x, s);
    let t = kb.un(Unary::RoundEven, t);
    let t = kb.bin(Binary::Add, t, z);
    let lo = kb.c(lo as f32);
    let hi = kb.c(hi as f32);
    let t = kb.bin(Binary::Max, t, lo);
    Ok(Some(kb.bin(Binary::Min, t, hi)))
}
