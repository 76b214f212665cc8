//! Lowering of an optimized function to a CPU [`Plan`]: every op becomes
//! calls of runtime kernels ([`Step`]s) and generated pointwise kernels
//! ([`PointwiseKernel`]s), over buffers that the memory planner later places
//! in one arena.
//!
//! Layouts. Every value has a physical dimension order `perm` (physical
//! dimension `i` is logical dimension `perm[i]`; the identity is the IR's own
//! order). Convolutions, pools and resizes produce NHWC (`[0, 2, 3, 1]`);
//! pointwise kernels, copies and global pools read any layout through
//! strides; a transpose only relabels `perm` (no copy). An op that needs a
//! particular layout asks [`Lower::materialize`], which copies only when the
//! layouts differ. So a chain of convolutions and pointwise ops stays NHWC
//! and pays for layout changes only at its ends.
//!
//! Buffers. While lowering, a step's [`Buf`] names a *virtual* buffer:
//! `space = Arena`, `index` = the buffer number, `offset` relative to that
//! buffer. `finish` places virtual buffers (arena offsets from lifetimes,
//! inputs, outputs, weights) and rewrites every `Buf` to its real space.
//!
//! Constants (and ops whose operands are all constants) are evaluated at
//! compile time with the reference interpreter; a constant an op reads is
//! stored in the weights in the form the op's kernel wants (packed GEMM
//! panels, depthwise filters, folded batch-norm scale and shift).
//!
//! An op without a native kernel is an error naming it, unless
//! `LowerOptions::reference_fallback` (`aoc compile --reference-fallback`,
//! for development) makes it a `Step::Reference`, run by the interpreter
//! inside the runtime's `reference` feature; `LowerReport` counts those so
//! `aoc compile` can say so.

mod attention;
mod control;
mod expand;
mod grid_sample;
mod memory;
mod nn;
mod pointwise;
mod quant;
mod recurrent;
mod reference;
mod shape;
mod winograd;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::diag::Diagnostic;
use aoc_ir::interp::{WeightSource, eval_op};
use aoc_ir::module::{Func, OpData, OpId, ValueId};
use aoc_ir::ops::Opcode;
use aoc_ir::ops::kind::{Conv, Form, Movement, Norm, OpKind, Pool};
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use aoc_plan::plan::{Buf, Plan, Space, Step};

use crate::kernel_expr::PointwiseKernel;

/// What the lowering produced.
pub struct Lowered {
    pub plan: Plan,
    /// Generated kernels, each named by a `Step::Pointwise`.
    pub kernels: Vec<PointwiseKernel>,
    /// Weights in the order of the weights section (offsets in the plan
    /// follow this order, each 64-byte aligned).
    pub weights: Vec<WeightBlob>,
    pub arena_bytes: u64,
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
    pub report: LowerReport,
}

/// A tensor stored in the artifact.
pub struct WeightBlob {
    pub name: String,
    pub dtype: Scalar,
    pub shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

/// An input or output of the compiled function.
#[derive(Clone, Debug)]
pub struct IoSpec {
    pub name: String,
    pub dtype: Scalar,
    pub shape: Vec<u64>,
}

/// Statistics `aoc compile` prints.
#[derive(Clone, Debug, Default)]
pub struct LowerReport {
    /// Steps per kind, in first-seen order.
    pub steps: Vec<(String, usize)>,
    /// Ops that run on the reference interpreter, with counts.
    pub reference_ops: Vec<(String, usize)>,
    /// Layout changes (copies) inserted.
    pub layout_copies: usize,
    pub weight_bytes: u64,
    /// Sum of the sizes of all intermediate buffers, before sharing.
    pub unshared_bytes: u64,
}

/// NCHW → NHWC as a physical order.
pub(crate) const NHWC: [usize; 4] = [0, 2, 3, 1];

/// A value's place during lowering.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// Known at compile time.
    Const(Arc<Tensor>),
    /// In a buffer (a virtual `Buf`), with a physical order.
    Mem { buf: Buf, perm: Vec<usize> },
}

/// Where a virtual buffer finally lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Home {
    Arena,
    Input(u32),
    Output(u32),
    /// Offset in the weights section.
    Weights(u64),
}

pub(crate) struct VirtualBuf {
    pub home: Home,
    pub size: u64,
}

/// Lowering state for one function.
pub(crate) struct Lower<'a> {
    pub opts: LowerOptions,
    pub func: &'a Func,
    weights_src: &'a dyn WeightSource,
    pub vals: HashMap<ValueId, Val>,
    pub bufs: Vec<VirtualBuf>,
    pub steps: Vec<Step>,
    pub origins: Vec<String>,
    pub kernels: Vec<PointwiseKernel>,
    kernel_names: HashMap<String, String>,
    pub weights: Vec<WeightBlob>,
    weights_len: u64,
    /// The weights stored so far by a hash of their contents: (index in
    /// `weights`, offset). A blob equal to a stored one is stored once (a
    /// recurrent layer's per-step GEMMs pack the same matrix).
    weight_offsets: HashMap<u64, Vec<(usize, u64)>>,
    pub report: LowerReport,
    /// Origin string of the op being lowered.
    pub origin: String,
    /// Uses of each value (operands and returns), for peepholes that fold
    /// an op into its only user.
    pub uses: HashMap<ValueId, usize>,
    /// The op being lowered.
    current: Option<OpId>,
    /// Quantized ops no rule took that expand into float ops
    /// (`expand.rs`): the function is lowered again with them expanded.
    to_expand: HashSet<OpId>,
}

/// Lowers `func` (verified, optimized) to a plan.
/// What the target's kernels want from the lowering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LowerOptions {
    pub weights: WeightForm,
    /// Lower `core.winograd_conv2d` to `Step::WinogradConv2d` (the CPU has
    /// the kernel; without it the op runs on the reference path).
    pub winograd: bool,
    /// Lower `core.attention` (scalar scale, optional additive mask) to one
    /// `Step::Attention` over strided operands instead of matmul, softmax,
    /// matmul; head dimensions up to this many elements (0: never).
    pub fused_attention_max_dim: u64,
    /// Lower `quant.conv2d` and `quant.gemm` to integer `Step::QConv2d`
    /// (else they run on the reference path).
    pub int8: bool,
    /// Lower e4m3 (`f8E4M3FN`) `quant.conv2d`, `quant.gemm` and matmuls
    /// by a constant weight, with one group and channels (K) in multiples
    /// of 16, to `Step::QConv2d` with `QuantElem::E4M3` (the GPU's fp8
    /// `wgmma` kernel, sm_90a); otherwise they run as their float expansion.
    pub fp8_conv: bool,
    /// Compile e4m3 `quant.quantize`/`quant.dequantize` (per-tensor or per
    /// axis, zero points 0) as pointwise kernels that load and store e4m3
    /// bytes (the GPU's `cvt` e4m3 conversions, sm_89 and newer).
    pub fp8_elementwise: bool,
    /// Lower `quant.add`, `quant.quantize`/`dequantize`, quantized global
    /// average pools and activation×activation `quant.matmul` to the CPU's
    /// 8-bit steps; otherwise they are generated pointwise code and float
    /// expansions.
    pub int8_elementwise: bool,
    /// Lower max pools of quantized values with equal parameters to
    /// `Step::QMaxPool` (the stored maximum; both backends have it), else
    /// a dequantize–pool–quantize expansion.
    pub int8_max_pool: bool,
    /// Apply an epilogue's leading GELU (erf form; matmul) or clip (matmul,
    /// convolution, depthwise convolution) in the `Gemm`, `Conv2d` or
    /// `DepthwiseConv2d` step itself instead of a pointwise step after it.
    pub step_activations: bool,
    /// Run ops without a native kernel on the reference interpreter
    /// (`Step::Reference`, a development aid: slow, and the runtime needs
    /// its `reference` feature). Off by default: such an op is an error
    /// that names it.
    pub reference_fallback: bool,
}

/// How constant GEMM and convolution weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightForm {
    /// The CPU micro-kernels' packed panels (`aoc_plan::pack::pack_b`).
    Packed,
    /// Plain row-major matrices: `Step::Gemm`'s B is `k × n`; `Step::Conv2d`'s
    /// weights are, per group, the `(kh·kw·cg) × ocg` matrix (rows in
    /// `kh, kw, c` order), groups back to back (the GPU kernels read these).
    Plain,
}

impl LowerOptions {
    /// The CPU backend's choices (its attention kernel takes any head size).
    pub const CPU: LowerOptions =
        LowerOptions { weights: WeightForm::Packed, winograd: true, fused_attention_max_dim: u64::MAX, int8: true, fp8_conv: false, fp8_elementwise: true, int8_elementwise: true, int8_max_pool: true, step_activations: true, reference_fallback: false };
    /// The GPU backend's choices.
    pub const GPU: LowerOptions =
        LowerOptions { weights: WeightForm::Plain, winograd: false, fused_attention_max_dim: 128, int8: true, fp8_conv: false, fp8_elementwise: false, int8_elementwise: false, int8_max_pool: true, step_activations: false, reference_fallback: false };
}

pub fn lower(func: &Func, weights: &dyn WeightSource, opts: &LowerOptions) -> Result<Lowered, Diagnostic> {
    match lower_once(func, weights, opts)? {
        Ok(lowered) => Ok(lowered),
        Err(which) => {
            // Quantized ops without a kernel: lower their float expansion.
            let expanded = expand::expand(func, &which).map_err(|m| Diagnostic::error(m, func.loc.clone()))?;
            match lower_once(&expanded, weights, opts)? {
                Ok(lowered) => Ok(lowered),
                Err(_) => Err(Diagnostic::error(
                    "internal error: an expanded op needs expanding again (please report)",
                    func.loc.clone(),
                )),
            }
        }
    }
}

/// One lowering of `func`: the plan, or the quantized ops to expand first.
fn lower_once(func: &Func, weights: &dyn WeightSource, opts: &LowerOptions) -> Result<Result<Lowered, HashSet<OpId>>, Diagnostic> {
    let mut lw = Lower {
        opts: *opts,
        func,
        weights_src: weights,
        vals: HashMap::new(),
        bufs: Vec::new(),
        steps: Vec::new(),
        origins: Vec::new(),
        kernels: Vec::new(),
        kernel_names: HashMap::new(),
        weights: Vec::new(),
        weights_len: 0,
        weight_offsets: HashMap::new(),
        report: LowerReport::default(),
        origin: String::new(),
        uses: HashMap::new(),
        current: None,
        to_expand: HashSet::new(),
    };
    count_uses(func, &func.body, &mut lw.uses);
    let mut inputs = Vec::new();
    for (i, &p) in func.params().iter().enumerate() {
        let ty = func.ty(p);
        let size = bytes_of(ty).map_err(|m| Diagnostic::error(m, func.values[p].loc.clone()))?;
        let id = lw.new_buf(Home::Input(i as u32), size);
        lw.vals.insert(
            p,
            Val::Mem {
                buf: vbuf(id, 0, size),
                perm: identity(ty.rank()),
            },
        );
        inputs.push(io_spec(func.param_name(i), ty));
    }
    for &op_id in &func.body.ops {
        let op = &func.ops[op_id];
        lw.origin = match (&op.loc.name, op.results.first()) {
            (Some(n), _) => format!("{} loc(\"{n}\")", op.opcode.name()),
            (None, Some(&r)) => format!("{} %{}", op.opcode.name(), func.name_of(r)),
            (None, None) => op.opcode.name().to_string(),
        };
        lw.current = Some(op_id);
        lw.lower_op(op)
            .map_err(|m| Diagnostic::error(format!("cannot compile {}: {m}", op.opcode.name()), op.loc.clone()))?;
    }
    if !lw.to_expand.is_empty() {
        return Ok(Err(lw.to_expand));
    }
    let mut outputs = Vec::new();
    let results: Vec<ValueId> = func.results().to_vec();
    for (i, &r) in results.iter().enumerate() {
        let ty = func.ty(r).clone();
        lw.origin = format!("return value {i}");
        lw.bind_output(i as u32, r, &ty)
            .map_err(|m| Diagnostic::error(format!("cannot compile the result %{}: {m}", func.name_of(r)), func.loc.clone()))?;
        outputs.push(io_spec(func.result_name(i), &ty));
    }
    memory::finish(lw, inputs, outputs).map(Ok).map_err(|m| Diagnostic::error(m, func.loc.clone()))
}

/// Counts the uses of values in `block` and the regions below it. A
/// control region's arguments stand for the op's operands (or a loop's
/// state): they count no uses, so no peephole writes into them in place.
fn count_uses(func: &Func, block: &aoc_ir::module::Block, uses: &mut HashMap<ValueId, usize>) {
    for &op in &block.ops {
        let data = &func.ops[op];
        for &v in &data.operands {
            *uses.entry(v).or_default() += 1;
        }
        if aoc_ir::ops::control::control_of(data.opcode).is_some() {
            for region in &data.regions {
                count_uses(func, region, uses);
                for &a in &region.args {
                    uses.remove(&a);
                }
            }
        }
    }
    for &v in &block.terminator {
        *uses.entry(v).or_default() += 1;
    }
}

/// A type in few words for messages: shape and storage, `(quantized)` for
/// quantized ones (their parameters can be long).
fn brief(ty: &TensorType) -> String {
    let dims: Vec<String> = ty.shape.iter().map(|d| d.to_string()).collect();
    let q = if ty.elem.quant().is_some() { " (quantized)" } else { "" };
    format!("{} {}{q}", dims.join("x"), ty.elem.storage())
}

fn io_spec(name: &str, ty: &TensorType) -> IoSpec {
    IoSpec {
        name: name.to_string(),
        dtype: ty.elem.storage(),
        shape: ty.shape.iter().map(|&d| d as u64).collect(),
    }
}

/// Bytes of a tensor of type `ty` in the runtime (one byte per `i1`).
pub(crate) fn bytes_of(ty: &TensorType) -> Result<u64, String> {
    let width = elem_size(ty.elem.storage());
    (ty.num_elements() as u64)
        .checked_mul(width)
        .ok_or_else(|| format!("{ty} is too large"))
}

pub(crate) fn elem_size(s: Scalar) -> u64 {
    (s.bits() as u64).div_ceil(8)
}

pub(crate) fn identity(rank: usize) -> Vec<usize> {
    (0..rank).collect()
}

/// Whether a tensor of logical `shape` has the same bytes in physical
/// orders `a` and `b`: they order the dimensions longer than 1 alike (an
/// NHWC `n×c×1×1` is its NCHW self).
pub(crate) fn same_bytes(shape: &[usize], a: &[usize], b: &[usize]) -> bool {
    let long = |p: &[usize]| -> Vec<usize> { p.iter().copied().filter(|&d| shape.get(d).is_some_and(|&n| n != 1)).collect() };
    a == b || (a.len() == b.len() && long(a) == long(b))
}

/// A virtual buffer reference.
pub(crate) fn vbuf(id: u32, offset: u64, len: u64) -> Buf {
    Buf {
        space: Space::Arena,
        index: id,
        offset,
        len,
    }
}

/// Row-major strides of `shape`, in elements.
pub(crate) fn row_major(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Element strides of each *logical* dimension of a tensor of logical
/// `shape` stored in physical order `perm`.
pub(crate) fn logical_strides(shape: &[usize], perm: &[usize]) -> Vec<u64> {
    let phys: Vec<u64> = perm.iter().map(|&d| shape[d] as u64).collect();
    let ps = row_major(&phys);
    let mut ls = vec![0u64; shape.len()];
    for (i, &d) in perm.iter().enumerate() {
        ls[d] = ps[i];
    }
    ls
}

impl<'a> Lower<'a> {
    pub fn new_buf(&mut self, home: Home, size: u64) -> u32 {
        self.bufs.push(VirtualBuf { home, size });
        (self.bufs.len() - 1) as u32
    }

    /// A fresh arena buffer for a tensor of type `ty`.
    pub fn alloc(&mut self, ty: &TensorType) -> Result<Buf, String> {
        let size = bytes_of(ty)?;
        let id = self.new_buf(Home::Arena, size);
        self.report.unshared_bytes += size;
        Ok(vbuf(id, 0, size))
    }

    pub fn push(&mut self, step: Step) {
        let kind = step.kind();
        match self.report.steps.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => self.report.steps.push((kind.to_string(), 1)),
        }
        self.steps.push(step);
        self.origins.push(self.origin.clone());
    }

    /// Stores `bytes` in the weights section and returns its buffer.
    pub fn add_weight(&mut self, hint: &str, dtype: Scalar, shape: &[u64], bytes: Vec<u8>) -> Buf {
        let len = bytes.len() as u64;
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (dtype.name(), shape, &bytes).hash(&mut h);
            h.finish()
        };
        let same = self.weight_offsets.get(&key).and_then(|v| {
            v.iter().find(|&&(i, _)| {
                let w = &self.weights[i];
                w.dtype == dtype && w.shape == shape && w.bytes == bytes
            })
        });
        if let Some(&(_, offset)) = same {
            let id = self.new_buf(Home::Weights(offset), len);
            return vbuf(id, 0, len);
        }
        let offset = self.weights_len.div_ceil(64) * 64;
        self.weight_offsets.entry(key).or_default().push((self.weights.len(), offset));
        self.weights_len = offset + len;
        self.report.weight_bytes += len;
        let name = format!("w{}.{}", self.weights.len(), hint);
        self.weights.push(WeightBlob {
            name,
            dtype,
            shape: shape.to_vec(),
            bytes,
        });
        let id = self.new_buf(Home::Weights(offset), len);
        vbuf(id, 0, len)
    }

    pub fn add_weight_f32(&mut self, hint: &str, shape: &[u64], values: &[f32]) -> Buf {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_weight(hint, Scalar::F32, shape, bytes)
    }

    /// A constant tensor stored as-is (row major, its own storage type).
    pub fn add_tensor(&mut self, hint: &str, t: &Tensor) -> Buf {
        let s = t.ty.elem.storage();
        let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        self.add_weight(hint, s, &shape, aoc_ir::bytes::encode(s, &t.data))
    }

    pub fn val(&self, v: ValueId) -> Result<Val, String> {
        self.vals
            .get(&v)
            .cloned()
            .ok_or_else(|| format!("internal error: %{} has no place (please report)", self.func.name_of(v)))
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.func.ty(v)
    }

    /// The constant value of `v`, if known at compile time.
    pub fn constant(&self, v: ValueId) -> Option<Arc<Tensor>> {
        match self.vals.get(&v) {
            Some(Val::Const(t)) => Some(t.clone()),
            _ => None,
        }
    }

    /// `v` in a buffer with physical order `perm` (copying if needed;
    /// constants are stored as weights first).
    pub fn materialize(&mut self, v: ValueId, perm: &[usize]) -> Result<Buf, String> {
        let ty = self.ty(v).clone();
        let (src, src_perm) = match self.val(v)? {
            Val::Const(t) => {
                let b = self.add_tensor("const", &t);
                (b, identity(ty.rank()))
            }
            Val::Mem { buf, perm } => (buf, perm),
        };
        if same_bytes(&ty.shape, &src_perm, perm) {
            return Ok(src);
        }
        let dst = self.alloc(&ty)?;
        self.copy_to_layout(src, &src_perm, dst, perm, &ty);
        self.report.layout_copies += 1;
        // Remember the copy so later readers in this layout reuse it.
        if ty.rank() > 0 {
            self.vals.insert(v, Val::Mem { buf: dst, perm: perm.to_vec() });
        }
        Ok(dst)
    }

    /// Copies a tensor of logical type `ty` from `src` (order `src_perm`)
    /// to `dst` (order `dst_perm`).
    pub fn copy_to_layout(&mut self, src: Buf, src_perm: &[usize], dst: Buf, dst_perm: &[usize], ty: &TensorType) {
        let shape = &ty.shape;
        let sl = logical_strides(shape, src_perm);
        let dl = logical_strides(shape, dst_perm);
        // Iterate in the destination's physical order (sequential writes).
        let order: Vec<usize> = dst_perm.to_vec();
        self.push(Step::Copy {
            src,
            dst,
            elem_size: elem_size(ty.elem.storage()),
            shape: order.iter().map(|&d| shape[d] as u64).collect(),
            src_start: 0,
            src_strides: order.iter().map(|&d| sl[d] as i64).collect(),
            dst_strides: order.iter().map(|&d| dl[d]).collect(),
        });
    }

    /// Deduplicates generated kernels: identical bodies share one blob.
    pub fn add_kernel(&mut self, mut k: PointwiseKernel) -> String {
        k.name = String::new();
        let key = format!("{k:?}");
        if let Some(name) = self.kernel_names.get(&key) {
            return name.clone();
        }
        let name = format!("pw{}", self.kernels.len());
        k.name = name.clone();
        self.kernel_names.insert(key, name.clone());
        self.kernels.push(k);
        name
    }

    /// Reads an attribute with the op table's default filled in.
    pub fn attrs(op: &OpData) -> Result<Attrs, String> {
        op.opcode.info().complete_attrs(op.attrs.clone())
    }

    fn lower_op(&mut self, op: &OpData) -> Result<(), String> {
        // Compile-time evaluation: constants and ops over constants.
        if op.opcode == Opcode::Const {
            let ty = self.ty(op.results[0]).clone();
            let t = match op.attrs.get("value") {
                Some(Attr::Const(ConstValue::Tensor(t))) => t.clone(),
                _ => Arc::new(
                    eval_op(op.opcode, &[], &op.attrs, &[ty], self.weights_src)?
                        .pop()
                        .ok_or("const produced nothing")?,
                ),
            };
            self.vals.insert(op.results[0], Val::Const(t));
            return Ok(());
        }
        let consts: Option<Vec<Arc<Tensor>>> = op.operands.iter().map(|&v| self.constant(v)).collect();
        if let Some(consts) = consts
            && !op.operands.is_empty()
            && aoc_ir::ops::control::control_of(op.opcode).is_none()
        {
            let refs: Vec<&Tensor> = consts.iter().map(|t| t.as_ref()).collect();
            let tys: Vec<TensorType> = op.results.iter().map(|&r| self.ty(r).clone()).collect();
            let out = eval_op(op.opcode, &refs, &op.attrs, &tys, self.weights_src)?;
            for (&r, t) in op.results.iter().zip(out) {
                self.vals.insert(r, Val::Const(Arc::new(t)));
            }
            return Ok(());
        }
        let done = match op.opcode.kind() {
            OpKind::Constant => unreachable_const(),
            OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Activation(_)
            | OpKind::Pointwise(_)
            | OpKind::Movement(Movement::Identity) => self.lower_pointwise(op)?,
            // Sparse weights were decompressed when loaded: the dense kernels.
            OpKind::Conv(Conv::Direct, Form::Float | Form::Fused | Form::Sparse) => self.lower_conv(op)?,
            OpKind::Conv(Conv::Transposed, Form::Float) => self.lower_conv_transpose(op)?,
            OpKind::Conv(Conv::Winograd, Form::Float) => self.opts.winograd && self.lower_winograd(op)?,
            OpKind::Conv(Conv::Direct, Form::Quant) | OpKind::Gemm(Form::Quant) => self.lower_qconv(op)?,
            OpKind::MatMul(Form::Quant) => self.lower_qconv(op)? || self.lower_qmatmul(op)?,
            OpKind::MatMul(Form::Float | Form::Fused) => self.lower_matmul(op)?,
            OpKind::MatMul(Form::Sparse) => self.lower_sparse_matmul(op)?,
            OpKind::Gemm(Form::Float | Form::Fused) => self.lower_gemm(op)?,
            OpKind::Attention => self.lower_attention(op)?,
            OpKind::Norm(Norm::LayerNorm) => self.lower_layer_norm(op)?,
            OpKind::Norm(Norm::Softmax | Norm::LogSoftmax) => self.lower_softmax(op)?,
            OpKind::Pool(p @ (Pool::Max | Pool::Avg), Form::Float) => self.lower_pool(op, p)?,
            OpKind::Pool(p @ (Pool::GlobalAvg | Pool::GlobalMax), Form::Float) => self.lower_global_pool(op, p)?,
            OpKind::Pool(Pool::GlobalAvg, Form::Quant) => self.lower_qglobal_avg_pool(op)?,
            OpKind::Pool(Pool::Avg, Form::Quant) => self.lower_qavg_pool(op)?,
            OpKind::Reduce(r) => self.lower_reduce(op, r)?,
            OpKind::Movement(Movement::Reshape) => self.lower_reshape(op)?,
            OpKind::Movement(Movement::Transpose) => self.lower_transpose(op)?,
            OpKind::Movement(Movement::Concat) => self.lower_concat(op)?,
            OpKind::Movement(Movement::Slice) => self.lower_slice(op)?,
            OpKind::Movement(Movement::Pad) => self.lower_pad(op)?,
            OpKind::Movement(Movement::Gather) => self.lower_gather(op)?,
            OpKind::Movement(Movement::Expand) => self.lower_expand(op)?,
            OpKind::Resize => self.lower_resize(op)?,
            OpKind::GridSample => self.lower_grid_sample(op)?,
            // Expanded into GEMMs and pointwise ops (`recurrent.rs`).
            OpKind::Recurrent(_) => false,
            OpKind::Control(c) => self.lower_control(op, c)?,
            // No kernels yet for these forms: the reference path (the
            // integer kernels arrive with the quantization work).
            OpKind::Conv(Conv::Transposed | Conv::Winograd, Form::Fused | Form::Quant | Form::Sparse)
            | OpKind::Gemm(Form::Sparse)
            | OpKind::Pool(_, Form::Fused | Form::Quant | Form::Sparse) => false,
        };
        if !done {
            if let Some(id) = self.current
                && expand::expandable(self.func, op).is_some()
            {
                // A placeholder: this lowering is redone with the op expanded.
                self.to_expand.insert(id);
                return self.lower_reference(op);
            }
            if !self.opts.reference_fallback {
                let types: Vec<String> = op.operands.iter().map(|&v| brief(self.ty(v))).collect();
                return Err(format!(
                    "no native kernel for it on this target (operands: {}); `--reference-fallback` runs it on the reference interpreter instead (a development aid: slow)",
                    types.join(", ")
                ));
            }
            self.lower_reference(op)?;
        }
        Ok(())
    }

    /// Makes result `r` of the function land in output `index`.
    fn bind_output(&mut self, index: u32, r: ValueId, ty: &TensorType) -> Result<(), String> {
        let size = bytes_of(ty)?;
        let out = self.new_buf(Home::Output(index), size);
        let dst = vbuf(out, 0, size);
        match self.val(r)? {
            Val::Mem { buf, perm }
                if same_bytes(&ty.shape, &perm, &identity(ty.rank()))
                    && buf.offset == 0
                    && self.bufs[buf.index as usize].home == Home::Arena
                    && self.bufs[buf.index as usize].size == size =>
            {
                // Retarget: the producer writes the output directly.
                self.bufs[buf.index as usize].home = Home::Output(index);
                self.bufs.pop();
            }
            Val::Mem { buf, perm } => self.copy_to_layout(buf, &perm, dst, &identity(ty.rank()), ty),
            Val::Const(t) => {
                let w = self.add_tensor("result", &t);
                self.copy_to_layout(w, &identity(ty.rank()), dst, &identity(ty.rank()), ty);
            }
        }
        Ok(())
    }

    /// The value a result takes: `buf` in order `perm`.
    pub fn define(&mut self, r: ValueId, buf: Buf, perm: Vec<usize>) {
        self.vals.insert(r, Val::Mem { buf, perm });
    }
}

fn unreachable_const() -> bool {
    // `const` is handled before the match; reaching here would be a bug in
    // this function, and lowering it through the reference path is harmless.
    false
}
