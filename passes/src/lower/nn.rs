//! Compute-heavy ops: convolutions (NHWC, weights packed now), matrix
//! products (B packed now when constant), attention, normalizations,
//! pools, reductions and resize.

use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::module::{OpData, ValueId};
use aoc_ir::ops::Opcode;
use aoc_ir::ops::kind::{Pool, Reduce};
use aoc_ir::ops::fused::Step as EpiStep;
use aoc_ir::types::{Scalar, TensorType};
use aoc_plan::pack::{conv, pack_b};
use aoc_plan::plan::{ConvGeom, PoolKind, ReduceKind, ResizeMode, Step};

use super::pointwise::{epilogue, float_attr};
use super::{Lower, NHWC, Val, WeightForm, identity, logical_strides};

pub(super) fn ints(attrs: &Attrs, name: &str) -> Vec<i64> {
    match attrs.get(name) {
        Some(Attr::Ints(v)) => v.clone(),
        _ => vec![],
    }
}
pub(super) fn int(attrs: &Attrs, name: &str, default: i64) -> i64 {
    match attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}
pub(super) fn boolean(attrs: &Attrs, name: &str) -> bool {
    matches!(attrs.get(name), Some(Attr::Bool(true)))
}
pub(super) fn float(attrs: &Attrs, name: &str, default: f64) -> f64 {
    match attrs.get(name) {
        Some(Attr::Float(v)) => *v,
        _ => default,
    }
}
fn pair(v: &[i64], default: u64) -> [u64; 2] {
    match v {
        [a, b] => [*a as u64, *b as u64],
        _ => [default, default],
    }
}
fn quad(v: &[i64]) -> [u64; 4] {
    match v {
        [a, b, c, d] => [*a as u64, *b as u64, *c as u64, *d as u64],
        _ => [0; 4],
    }
}
pub(super) fn u(v: usize) -> u64 {
    v as u64
}
pub(crate) fn f32s(t: &aoc_ir::tensor::Tensor) -> Vec<f32> {
    t.to_f64().into_iter().map(|v| v as f32).collect()
}
pub(crate) fn is_f32(ty: &TensorType) -> bool {
    ty.elem.storage() == Scalar::F32 && ty.elem.quant().is_none()
}

/// NHWC geometry of a 4-D convolution-like op over input `x`: output
/// channels and size `out` (`[oc, oh, ow]`), kernel `k`; strides,
/// dilations, pads and groups from its (completed) attributes.
pub(super) fn geom(x: &TensorType, out: [u64; 3], k: [u64; 2], attrs: &Attrs) -> ConvGeom {
    ConvGeom {
        n: u(x.shape[0]),
        c: u(x.shape[1]),
        h: u(x.shape[2]),
        w: u(x.shape[3]),
        oc: out[0],
        oh: out[1],
        ow: out[2],
        kh: k[0],
        kw: k[1],
        stride: pair(&ints(attrs, "strides"), 1),
        dilation: pair(&ints(attrs, "dilations"), 1),
        pads: quad(&ints(attrs, "pads")),
        group: int(attrs, "groups", 1) as u64,
    }
}

/// A matrix operand: an IR value, or an intermediate buffer in the
/// identity order with its type.
#[derive(Clone, Copy)]
pub(crate) enum Mat<'t> {
    V(ValueId),
    B(aoc_plan::plan::Buf, &'t TensorType),
}

/// An activation a GEMM step applies in its epilogue.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    None,
    Relu,
    Clip([f32; 2]),
    Gelu,
}

impl Lower<'_> {
    fn mat_ty(&self, m: Mat) -> TensorType {
        match m {
            Mat::V(v) => self.ty(v).clone(),
            Mat::B(_, t) => t.clone(),
        }
    }
    fn mat_const(&self, m: Mat) -> Option<std::sync::Arc<aoc_ir::tensor::Tensor>> {
        match m {
            Mat::V(v) => self.constant(v),
            Mat::B(..) => None,
        }
    }
    fn mat_val(&self, m: Mat) -> Result<Val, String> {
        match m {
            Mat::V(v) => self.val(v),
            Mat::B(buf, t) => Ok(Val::Mem { buf, perm: identity(t.rank()) }),
        }
    }
    fn mat_identity(&mut self, m: Mat) -> Result<aoc_plan::plan::Buf, String> {
        match m {
            Mat::V(v) => {
                let r = self.ty(v).rank();
                self.materialize(v, &identity(r))
            }
            Mat::B(buf, _) => Ok(buf),
        }
    }

    fn all_f32(&self, op: &OpData) -> bool {
        op.operands.iter().chain(&op.results).all(|&v| is_f32(self.ty(v)))
    }

    /// A bias operand as f32 values: `Some(None)` when there is none,
    /// `None` when it is not a compile-time constant (the caller then
    /// leaves the op to the reference path).
    pub(crate) fn const_bias(&self, b: Option<ValueId>) -> Option<Option<Vec<f32>>> {
        match b {
            None => Some(None),
            Some(b) => self.constant(b).map(|t| Some(f32s(&t))),
        }
    }

    /// Splits a fused op's epilogue: a leading `relu` goes into the kernel.
    fn split_relu(steps: Vec<EpiStep>) -> (bool, Vec<EpiStep>) {
        match steps.first() {
            Some(EpiStep::Unary { opcode: Opcode::Relu, .. }) => (true, steps[1..].to_vec()),
            _ => (false, steps),
        }
    }

    /// The activation a GEMM applies itself, split off the front of the
    /// epilogue: relu, or where the target's steps have them a clip with
    /// both bounds or GELU in its erf form.
    fn split_act(&self, steps: Vec<EpiStep>) -> (Act, Vec<EpiStep>) {
        match steps.first() {
            Some(EpiStep::Unary { opcode: Opcode::Relu, .. }) => (Act::Relu, steps[1..].to_vec()),
            Some(EpiStep::Unary { opcode: Opcode::Gelu, attrs })
                if self.opts.step_activations
                    && !matches!(attrs.get("approximate"), Some(Attr::Str(s)) if s != "none") =>
            {
                (Act::Gelu, steps[1..].to_vec())
            }
            _ => match self.split_clip(&steps) {
                Some(c) => (Act::Clip(c), steps[1..].to_vec()),
                None => (Act::None, steps),
            },
        }
    }

    /// `[lo, hi]` when the epilogue starts with a clip that has both
    /// bounds and the target's steps apply clips.
    fn split_clip(&self, steps: &[EpiStep]) -> Option<[f32; 2]> {
        match steps.first() {
            Some(EpiStep::Unary { opcode: Opcode::Clip, attrs }) if self.opts.step_activations => {
                Some([float_attr(attrs, "min")?, float_attr(attrs, "max")?])
            }
            _ => None,
        }
    }

    /// A constant `k × n` (row major) GEMM operand B in the target's form.
    fn gemm_weights(&mut self, k: usize, n: usize, b_kn: &[f32]) -> Result<aoc_plan::plan::Buf, String> {
        Ok(match self.opts.weights {
            WeightForm::Packed => {
                let packed = pack_b(k, n, b_kn, n).map_err(|e| e.to_string())?;
                self.add_weight_f32("gemm_packed", &[packed.as_slice().len() as u64], packed.as_slice())
            }
            WeightForm::Plain => self.add_weight_f32("gemm_b", &[k as u64, n as u64], b_kn),
        })
    }

    /// Convolution weights (`oc × cg × kh × kw`) in the target's form.
    fn conv_weights(&mut self, geom: &ConvGeom, w: &[f32]) -> Result<aoc_plan::plan::Buf, String> {
        Ok(match self.opts.weights {
            WeightForm::Packed => {
                let packed = conv::conv2d_pack_weights(geom, w).map_err(|e| e.to_string())?;
                self.add_weight_f32("conv_packed", &[packed.len() as u64], &packed)
            }
            WeightForm::Plain => {
                let plain = conv2d_plain_weights(geom, w);
                self.add_weight_f32("conv_w", &[plain.len() as u64], &plain)
            }
        })
    }

    pub(crate) fn lower_conv(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let (x, w) = (op.operands[0], op.operands[1]);
        let (xt, wt, yt) = (self.ty(x).clone(), self.ty(w).clone(), self.ty(op.results[0]).clone());
        if xt.rank() != 4 || wt.rank() != 4 {
            return Ok(false);
        }
        let Some(wc) = self.constant(w) else { return Ok(false) };
        let fused = op.opcode == Opcode::FusedConv2d;
        let has_bias = if fused { boolean(&attrs, "bias") } else { op.operands.len() > 2 };
        let bias_v = has_bias.then(|| op.operands[2]);
        let extras: Vec<ValueId> = op.operands[2 + has_bias as usize..].to_vec();
        let Some(bias) = self.const_bias(bias_v) else { return Ok(false) };
        let (relu, rest) = Lower::split_relu(epilogue(self.func, op)?);
        let clip = self.split_clip(&rest);
        let rest = if clip.is_some() { rest[1..].to_vec() } else { rest };
        let (kh, kw) = (u(wt.shape[2]), u(wt.shape[3]));
        let mut geom = geom(&xt, [u(wt.shape[0]), 0, 0], [kh, kw], &attrs);
        // The convolution's own output; the epilogue may broadcast it up.
        let out_dim = |i: u64, k: u64, d: u64, s: u64, p0: u64, p1: u64| (i + p0 + p1 - d * (k - 1) - 1) / s + 1;
        let (stride, dilation, pads) = (geom.stride, geom.dilation, geom.pads);
        geom.oh = out_dim(geom.h, kh, dilation[0], stride[0], pads[0], pads[2]);
        geom.ow = out_dim(geom.w, kw, dilation[1], stride[1], pads[1], pads[3]);
        let group = geom.group;
        let core_ty = TensorType::new(vec![xt.shape[0], wt.shape[0], geom.oh as usize, geom.ow as usize], Scalar::F32);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&core_ty)?;
        let wv = f32s(&wc);
        let bias_buf = bias.map(|b| self.add_weight_f32("bias", &[geom.oc], &b));
        let depthwise = group > 1 && group == geom.c && geom.oc % geom.c == 0;
        if depthwise {
            let packed = conv::depthwise_pack_weights(&geom, &wv).map_err(|e| e.to_string())?;
            let wb = self.add_weight_f32("dw_filter", &[geom.kh, geom.kw, geom.oc], &packed);
            self.push(Step::DepthwiseConv2d { x: xb, w: wb, bias: bias_buf, y, geom, relu, clip });
        } else {
            let wb = self.conv_weights(&geom, &wv)?;
            self.push(Step::Conv2d { x: xb, w: wb, bias: bias_buf, y, geom, relu, clip });
        }
        let (out, perm) = self.epilogue_to(y, &core_ty, &NHWC, &yt, &rest, &extras)?;
        self.define(op.results[0], out, perm);
        Ok(true)
    }

    pub(crate) fn lower_conv_transpose(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let (x, w) = (op.operands[0], op.operands[1]);
        let (xt, wt, yt) = (self.ty(x).clone(), self.ty(w).clone(), self.ty(op.results[0]).clone());
        if xt.rank() != 4 {
            return Ok(false);
        }
        let Some(wc) = self.constant(w) else { return Ok(false) };
        let Some(bias) = self.const_bias(op.operands.get(2).copied()) else { return Ok(false) };
        let out = [u(yt.shape[1]), u(yt.shape[2]), u(yt.shape[3])];
        let geom = geom(&xt, out, [u(wt.shape[2]), u(wt.shape[3])], &attrs);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        let packed = conv::conv_transpose2d_pack_weights(&geom, &f32s(&wc)).map_err(|e| e.to_string())?;
        let wb = self.add_weight_f32("convt_filter", &[packed.len() as u64], &packed);
        let bias_buf = bias.map(|b| self.add_weight_f32("bias", &[geom.oc], &b));
        self.push(Step::ConvTranspose2d { x: xb, w: wb, bias: bias_buf, y, geom });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }

    /// `out = a · b` for logical `a [.., m, k]`, `b [.., k, n]` into a new
    /// buffer of type `yt` (identity order); `b` constant and 2-D (or with
    /// unit batch dimensions) becomes a packed GEMM. Returns the buffer, or
    /// `None` when the shapes need the reference path.
    fn matmul_into(&mut self, a: Mat, b: Mat, yt: &TensorType, act_bias: (Act, Option<Vec<f32>>)) -> Result<Option<aoc_plan::plan::Buf>, String> {
        let (at, bt) = (self.mat_ty(a), self.mat_ty(b));
        if at.rank() < 2 || bt.rank() < 2 {
            return Ok(None);
        }
        let (m, k) = (at.shape[at.rank() - 2], at.shape[at.rank() - 1]);
        let n = bt.shape[bt.rank() - 1];
        let out_batch: Vec<usize> = yt.shape[..yt.rank() - 2].to_vec();
        let a_batch = &at.shape[..at.rank() - 2];
        let b_batch = &bt.shape[..bt.rank() - 2];
        let (act, bias) = act_bias;
        let (relu, gelu) = (act == Act::Relu, act == Act::Gelu);
        let clip = match act {
            Act::Clip(c) => Some(c),
            _ => None,
        };
        if let Some(bc) = self.mat_const(b)
            && b_batch.iter().all(|&d| d == 1)
            && a_batch.iter().product::<usize>() == out_batch.iter().product::<usize>()
        {
            let bb = self.gemm_weights(k, n, &f32s(&bc))?;
            let ab = self.mat_identity(a)?;
            let y = self.alloc(yt)?;
            let bias = bias.map(|v| self.add_weight_f32("bias", &[n as u64], &v));
            let rows = (out_batch.iter().product::<usize>() * m) as u64;
            self.push(Step::Gemm { a: ab, b: bb, bias, c: y, m: rows, n: u(n), k: u(k), lda: u(k), ldc: u(n), relu, clip, gelu });
            return Ok(Some(y));
        }
        if act != Act::None || bias.is_some() {
            return Ok(None);
        }
        // Batched product with strides; each operand's batch dimensions
        // must fold to one stride (or broadcast as 0).
        let batch: usize = out_batch.iter().product();
        let Some(sa) = self.batch_strides(a, &out_batch)? else { return Ok(None) };
        let Some(sb) = self.batch_strides(b, &out_batch)? else { return Ok(None) };
        let y = self.alloc(yt)?;
        self.push(Step::MatMul {
            a: sa.0,
            b: sb.0,
            c: y,
            batch: u(batch),
            m: u(m),
            n: u(n),
            k: u(k),
            a_strides: sa.1,
            b_strides: sb.1,
            c_strides: [u(m * n), u(n), 1],
        });
        Ok(Some(y))
    }

    /// The buffer of a matrix operand and its `[batch, row, col]` strides
    /// when its batch dimensions (broadcast against `out_batch`) fold into
    /// one stride. Copies to the identity order when they do not.
    pub(crate) fn batch_strides(&mut self, v: Mat, out_batch: &[usize]) -> Result<Option<(aoc_plan::plan::Buf, [u64; 3])>, String> {
        let ty = self.mat_ty(v);
        let r = ty.rank();
        for attempt in 0..2 {
            let (buf, perm) = match self.mat_val(v)? {
                Val::Const(t) => (self.add_tensor("matmul", &t), identity(r)),
                Val::Mem { buf, perm } => (buf, perm),
            };
            let ls = logical_strides(&ty.shape, &perm);
            let off = out_batch.len() + 2 - r;
            // (size, stride) of each batch dimension, broadcast ones → 0.
            let dims: Vec<(usize, u64)> = (0..out_batch.len())
                .map(|d| {
                    if d < off {
                        (out_batch[d], 0)
                    } else {
                        let e = d - off;
                        if ty.shape[e] == 1 { (out_batch[d], 0) } else { (ty.shape[e], ls[e]) }
                    }
                })
                .filter(|&(s, _)| s != 1)
                .collect();
            // Fold: all strides 0 (broadcast), or contiguous chain.
            let folded = if dims.iter().all(|&(_, s)| s == 0) {
                Some(0)
            } else if dims.iter().all(|&(_, s)| s != 0) {
                let ok = dims.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0 as u64);
                ok.then(|| dims.last().map_or(0, |d| d.1))
            } else {
                None
            };
            if let Some(bs) = folded {
                return Ok(Some((buf, [bs, ls[r - 2], ls[r - 1]])));
            }
            if attempt == 0 {
                self.mat_identity(v)?;
            }
        }
        Ok(None)
    }

    pub(crate) fn lower_matmul(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let full_ty = self.ty(op.results[0]).clone();
        let (at, bt) = (self.ty(op.operands[0]).clone(), self.ty(op.operands[1]).clone());
        if at.rank() < 2 || bt.rank() < 2 {
            return Ok(false);
        }
        let mut core = aoc_ir::tensor::broadcast_shapes(&at.shape[..at.rank() - 2], &bt.shape[..bt.rank() - 2])?;
        core.push(at.shape[at.rank() - 2]);
        core.push(bt.shape[bt.rank() - 1]);
        let yt = TensorType::new(core, Scalar::F32);
        let steps = if op.opcode == Opcode::FusedMatMul { epilogue(self.func, op)? } else { vec![] };
        let extras: Vec<ValueId> = op.operands[2..].to_vec();
        // A leading `add` of a constant row vector of n becomes the bias.
        let n = *yt.shape.last().unwrap_or(&1);
        let (bias, steps, extras) = match (steps.first(), extras.first()) {
            (Some(EpiStep::Binary { opcode: Opcode::Add, reversed: false }), Some(&e))
                if self.constant(e).is_some_and(|t| t.len() == n && self.ty(e).shape.last() == Some(&n)) =>
            {
                let bias = self.constant(e).map(|t| f32s(&t));
                (bias, steps[1..].to_vec(), extras[1..].to_vec())
            }
            _ => (None, steps, extras),
        };
        let (act, steps) = if bias.is_some() { self.split_act(steps) } else { (Act::None, steps) };
        let (a, b) = (Mat::V(op.operands[0]), Mat::V(op.operands[1]));
        let try_fused = self.matmul_into(a, b, &yt, (act, bias.clone()))?;
        let (y, steps, extras) = match try_fused {
            Some(y) => (y, steps, extras),
            None => {
                // Not a packed GEMM: plain product, the whole epilogue after.
                let Some(y) = self.matmul_into(a, b, &yt, (Act::None, None))? else {
                    return Ok(false);
                };
                let all = if op.opcode == Opcode::FusedMatMul { epilogue(self.func, op)? } else { vec![] };
                (y, all, op.operands[2..].to_vec())
            }
        };
        let (out, perm) = self.epilogue_to(y, &yt, &identity(yt.rank()), &full_ty, &steps, &extras)?;
        self.define(op.results[0], out, perm);
        Ok(true)
    }

    /// `sparse.matmul` (`x @ wᵀ + b`, `w` a constant `[N, K]` 2:4 weight):
    /// the weight, decompressed when it was loaded, goes into the dense
    /// packed panel, so it runs as a dense GEMM with the bias in its
    /// epilogue. No sparse kernel here: a 2:4 CPU kernel reading metadata
    /// gathers A's columns, which costs more than the half of the FMAs it
    /// saves (docs/sparsity.md); `aoc explain` says so.
    pub(crate) fn lower_sparse_matmul(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let (x, w) = (op.operands[0], op.operands[1]);
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let Some(wc) = self.constant(w) else { return Ok(false) };
        let Some(bias) = self.const_bias(op.operands.get(2).copied()) else { return Ok(false) };
        let (n, k) = (wc.shape()[0], wc.shape()[1]);
        let wv = f32s(&wc);
        let mut b_kn = vec![0f32; k * n];
        for j in 0..n {
            for i in 0..k {
                b_kn[i * n + j] = wv[j * k + i];
            }
        }
        let bb = self.gemm_weights(k, n, &b_kn)?;
        let ab = self.materialize(x, &identity(xt.rank()))?;
        let y = self.alloc(&yt)?;
        let bias = bias.map(|b| self.add_weight_f32("bias", &[n as u64], &b));
        let rows = xt.num_elements().checked_div(k).unwrap_or(0);
        self.push(Step::Gemm { a: ab, b: bb, bias, c: y, m: u(rows), n: u(n), k: u(k), lda: u(k), ldc: u(n), relu: false, clip: None, gelu: false });
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }

    pub(crate) fn lower_gemm(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let (a, b) = (op.operands[0], op.operands[1]);
        let (at, bt, full_ty) = (self.ty(a).clone(), self.ty(b).clone(), self.ty(op.results[0]).clone());
        let Some(bc) = self.constant(b) else { return Ok(false) };
        let (m, k) = if boolean(&attrs, "trans_a") { (at.shape[1], at.shape[0]) } else { (at.shape[0], at.shape[1]) };
        let n = if boolean(&attrs, "trans_b") { bt.shape[0] } else { bt.shape[1] };
        let yt = TensorType::new(vec![m, n], Scalar::F32);
        let alpha = float(&attrs, "alpha", 1.0);
        let beta = float(&attrs, "beta", 1.0);
        // B as k × n, scaled by alpha, at compile time.
        let bv = bc.to_f64();
        let mut b_kn = vec![0f32; k * n];
        for i in 0..k {
            for j in 0..n {
                let v = if boolean(&attrs, "trans_b") { bv[j * k + i] } else { bv[i * n + j] };
                b_kn[i * n + j] = (alpha * v) as f32;
            }
        }
        let fused = op.opcode == Opcode::FusedGemm;
        let has_c = if fused { boolean(&attrs, "bias") } else { op.operands.len() > 2 };
        let extras: Vec<ValueId> = op.operands[2 + has_c as usize..].to_vec();
        let mut steps = if fused { epilogue(self.func, op)? } else { vec![] };
        let mut bias = None;
        let mut c_val = None;
        if has_c {
            let c = op.operands[2];
            match self.constant(c) {
                Some(t) if t.len() == n || t.len() == 1 => {
                    let v = t.to_f64();
                    bias = Some((0..n).map(|j| (beta * v[if v.len() == 1 { 0 } else { j }]) as f32).collect::<Vec<_>>());
                }
                _ => c_val = Some(c),
            }
        }
        let relu = if bias.is_some() || !has_c {
            let (r, s) = Lower::split_relu(steps);
            steps = s;
            r
        } else {
            false
        };
        if c_val.is_some() && relu {
            return Ok(false);
        }
        let a_buf = if boolean(&attrs, "trans_a") {
            // Aᵀ: copy into a fresh m × k buffer.
            let src = self.materialize(a, &identity(2))?;
            let dst = self.alloc(&TensorType::new(vec![m, k], Scalar::F32))?;
            self.push(Step::Copy {
                src,
                dst,
                elem_size: 4,
                shape: vec![u(m), u(k)],
                src_start: 0,
                src_strides: vec![1, m as i64],
                dst_strides: vec![u(k), 1],
            });
            dst
        } else {
            self.materialize(a, &identity(2))?
        };
        let bb = self.gemm_weights(k, n, &b_kn)?;
        let bias_buf = bias.map(|v| self.add_weight_f32("bias", &[u(n)], &v));
        let y = self.alloc(&yt)?;
        self.push(Step::Gemm { a: a_buf, b: bb, bias: bias_buf, c: y, m: u(m), n: u(n), k: u(k), lda: u(k), ldc: u(n), relu, clip: None, gelu: false });
        if let Some(c) = c_val {
            // y += beta · C (C broadcast), as a pointwise step first.
            let mut pre = vec![];
            let mut pre_extras = vec![];
            if beta != 1.0 {
                return Ok(false);
            }
            pre.push(EpiStep::Binary { opcode: Opcode::Add, reversed: false });
            pre_extras.push(c);
            pre.extend(steps);
            pre_extras.extend(extras);
            let (out, perm) = self.epilogue_to(y, &yt, &identity(2), &full_ty, &pre, &pre_extras)?;
            self.define(op.results[0], out, perm);
        } else {
            let (out, perm) = self.epilogue_to(y, &yt, &identity(2), &full_ty, &steps, &extras)?;
            self.define(op.results[0], out, perm);
        }
        Ok(true)
    }

    /// softmax(steps(q · kt)) · v, score matrix in the arena.
    pub(crate) fn lower_attention(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        if self.lower_attention_fused(op)? {
            return Ok(true);
        }
        let (q, kt, v) = (op.operands[0], op.operands[1], op.operands[2]);
        let (qt, ktt, yt) = (self.ty(q).clone(), self.ty(kt).clone(), self.ty(op.results[0]).clone());
        let r = yt.rank();
        if r < 2 || qt.rank() != r || ktt.rank() != r {
            return Ok(false);
        }
        let sk = ktt.shape[r - 1];
        let mut st = yt.shape.clone();
        st[r - 1] = sk;
        let scores_ty = TensorType::new(st.clone(), Scalar::F32);
        let Some(scores) = self.matmul_into(Mat::V(q), Mat::V(kt), &scores_ty, (Act::None, None))? else { return Ok(false) };
        let steps = epilogue(self.func, op)?;
        self.epilogue_in_place(scores, &scores_ty, &identity(r), &steps, &op.operands[3..].to_vec())?;
        let probs = self.alloc(&scores_ty)?;
        let rows: usize = st[..r - 1].iter().product();
        self.push(Step::Softmax { x: scores, y: probs, rows: u(rows), cols: u(sk), log: false });
        let p = Mat::B(probs, &scores_ty);
        let Some(y) = self.matmul_into(p, Mat::V(v), &yt, (Act::None, None))? else { return Ok(false) };
        self.define(op.results[0], y, identity(r));
        Ok(true)
    }

    pub(crate) fn lower_layer_norm(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let xt = self.ty(x).clone();
        let axis = aoc_ir::ops::normalize_axis(int(&attrs, "axis", -1), xt.rank())?;
        let cols: usize = xt.shape[axis..].iter().product();
        let rows: usize = xt.shape[..axis].iter().product();
        let mut params = Vec::new();
        for i in 1..3 {
            match op.operands.get(i) {
                None => params.push(None),
                Some(&p) => {
                    let Some(t) = self.constant(p) else { return Ok(false) };
                    let map = aoc_ir::tensor::broadcast_index_map(t.shape(), &xt.shape[axis..]);
                    let v = t.to_f64();
                    let full: Vec<f32> = map.into_iter().map(|j| v[j] as f32).collect();
                    params.push(Some(self.add_weight_f32("ln", &[u(cols)], &full)));
                }
            }
        }
        let xb = self.materialize(x, &identity(xt.rank()))?;
        let y = self.alloc(&xt)?;
        let epsilon = float(&attrs, "epsilon", 1e-5) as f32;
        self.push(Step::LayerNorm { x: xb, gamma: params[0], beta: params[1], y, rows: u(rows), cols: u(cols), epsilon });
        self.define(op.results[0], y, identity(xt.rank()));
        Ok(true)
    }

    pub(crate) fn lower_softmax(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let xt = self.ty(x).clone();
        let r = xt.rank();
        if r == 0 {
            return Ok(false);
        }
        let axis = aoc_ir::ops::normalize_axis(int(&attrs, "axis", -1), r)?;
        // Physical order with the softmax axis last.
        let mut perm: Vec<usize> = (0..r).filter(|&d| d != axis).collect();
        perm.push(axis);
        let xb = self.materialize(x, &perm)?;
        let y = self.alloc(&xt)?;
        let cols = xt.shape[axis];
        let rows = xt.num_elements() / cols.max(1);
        self.push(Step::Softmax { x: xb, y, rows: u(rows), cols: u(cols), log: op.opcode == Opcode::LogSoftmax });
        self.define(op.results[0], y, perm);
        Ok(true)
    }

    pub(crate) fn lower_pool(&mut self, op: &OpData, pool: Pool) -> Result<bool, String> {
        if !self.all_f32(op) {
            return match pool {
                Pool::Max => self.lower_qmax_pool(op),
                Pool::Avg | Pool::GlobalAvg | Pool::GlobalMax => Ok(false),
            };
        }
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        if xt.rank() != 4 || pair(&ints(&attrs, "dilations"), 1) != [1, 1] {
            return Ok(false);
        }
        let k = ints(&attrs, "kernel");
        if k.len() != 2 {
            return Ok(false);
        }
        let kind = match pool {
            Pool::Max => PoolKind::Max,
            Pool::Avg if boolean(&attrs, "count_include_pad") => PoolKind::AvgIncludePad,
            Pool::Avg => PoolKind::AvgExcludePad,
            Pool::GlobalAvg | Pool::GlobalMax => return Ok(false),
        };
        // Dilations are 1 (checked above) and pools have no groups.
        let geom = geom(&xt, [u(yt.shape[1]), u(yt.shape[2]), u(yt.shape[3])], [k[0] as u64, k[1] as u64], &attrs);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        self.push(Step::Pool { kind, x: xb, y, geom, ceil_mode: boolean(&attrs, "ceil_mode") });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }

    pub(crate) fn lower_global_pool(&mut self, op: &OpData, pool: Pool) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        if xt.rank() < 3 {
            return Ok(false);
        }
        let kind = match pool {
            Pool::GlobalMax => ReduceKind::Max,
            Pool::GlobalAvg => ReduceKind::Mean,
            Pool::Max | Pool::Avg => return Ok(false),
        };
        let (n, c) = (xt.shape[0], xt.shape[1]);
        let hw: usize = xt.shape[2..].iter().product();
        let nhwc: Vec<usize> = std::iter::once(0).chain(2..xt.rank()).chain(std::iter::once(1)).collect();
        let (xb, outer, len, inner) = match self.val(x)? {
            Val::Mem { buf, perm } if perm == nhwc => (buf, n, hw, c),
            _ => (self.materialize(x, &identity(xt.rank()))?, n * c, hw, 1),
        };
        let y = self.alloc(&yt)?;
        self.push(Step::Reduce { kind, x: xb, y, outer: u(outer), len: u(len), inner: u(inner) });
        // n × 1 × … × c and n × c × 1 × … are the same bytes.
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }

    pub(crate) fn lower_reduce(&mut self, op: &OpData, reduce: Reduce) -> Result<bool, String> {
        if !self.all_f32(op) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let r = xt.rank();
        let mut axes: Vec<usize> = ints(&attrs, "axes")
            .iter()
            .map(|&a| aoc_ir::ops::normalize_axis(a, r))
            .collect::<Result<_, _>>()?;
        if axes.is_empty() {
            axes = (0..r).collect();
        }
        axes.sort_unstable();
        axes.dedup();
        let kind = match reduce {
            Reduce::Sum => ReduceKind::Sum,
            Reduce::Mean => ReduceKind::Mean,
            Reduce::Max => ReduceKind::Max,
            Reduce::Min => ReduceKind::Min,
        };
        // The reduced axes must be one run of physical dimensions: read x
        // in its own layout when they are (an NHWC activation's H and W, a
        // squeeze-and-excitation mean), else in the IR's order.
        let (xb, perm) = match self.val(x)? {
            Val::Mem { buf, perm } if physical_run(&perm, &axes).is_some() => (buf, perm),
            _ => {
                // In the IR's order, or, where the axes are apart there
                // (MeanVarianceNormalization's [0, 2, 3]), copied with the
                // kept axes first and the reduced ones last.
                let order: Vec<usize> = if physical_run(&identity(r), &axes).is_some() {
                    identity(r)
                } else {
                    (0..r).filter(|d| !axes.contains(d)).chain(axes.iter().copied()).collect()
                };
                (self.materialize(x, &order)?, order)
            }
        };
        let (p0, p1) = physical_run(&perm, &axes).ok_or("reduce: axes not contiguous")?;
        let phys: Vec<usize> = perm.iter().map(|&d| xt.shape[d]).collect();
        let outer: usize = phys[..p0].iter().product();
        let len: usize = phys[p0..p1].iter().product();
        let inner: usize = phys[p1..].iter().product();
        let y = self.alloc(&yt)?;
        self.push(Step::Reduce { kind, x: xb, y, outer: u(outer), len: u(len), inner: u(inner) });
        // The kept dimensions stay in x's physical order (with keepdims the
        // reduced ones are 1 wherever they sit).
        let y_perm: Vec<usize> = if yt.rank() == r {
            perm
        } else {
            perm.iter()
                .filter(|d| !axes.contains(d))
                .map(|&d| d - axes.iter().filter(|&&a| a < d).count())
                .collect()
        };
        self.define(op.results[0], y, y_perm);
        Ok(true)
    }

    pub(crate) fn lower_resize(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.all_f32(op) {
            return self.resize_as_gather(op);
        }
        let attrs = Lower::attrs(op)?;
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        if xt.rank() != 4 || xt.shape[..2] != yt.shape[..2] {
            return Ok(false);
        }
        let s = |n: &str| match attrs.get(n) {
            Some(Attr::Str(s)) => s.clone(),
            _ => String::new(),
        };
        let (mode, ctm, nearest) = (s("mode"), s("coordinate_transformation_mode"), s("nearest_mode"));
        // Scales must be exactly out/in for the coordinate formulas the
        // kernel uses (it derives them from the sizes).
        if let Some(Attr::Floats(sc)) = attrs.get("scales")
            && sc.len() == 4
            && (0..4).any(|i| (sc[i] * xt.shape[i] as f64 - yt.shape[i] as f64).abs() > 1e-6 * sc[i].max(1.0))
        {
            return Ok(false);
        }
        let mode = match (mode.as_str(), ctm.as_str(), nearest.as_str()) {
            ("nearest", "asymmetric", "floor") => ResizeMode::Nearest,
            ("linear", "half_pixel", _) => ResizeMode::BilinearHalfPixel,
            ("linear", "align_corners", _) => ResizeMode::BilinearAlignCorners,
            ("linear", "asymmetric", _) => ResizeMode::BilinearAsymmetric,
            _ => return self.resize_as_gather(op),
        };
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        self.push(Step::Resize {
            mode,
            x: xb,
            y,
            n: u(xt.shape[0]),
            c: u(xt.shape[1]),
            h: u(xt.shape[2]),
            w: u(xt.shape[3]),
            oh: u(yt.shape[2]),
            ow: u(yt.shape[3]),
        });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }

    /// A nearest-neighbour resize of the spatial axes (batch and channels
    /// kept), any coordinate mode and rounding, any element type: one
    /// gather of the flattened spatial axes, whose source index of each
    /// output pixel is computed at compile time by the interpreter's own
    /// `core.resize` on a tensor holding each pixel's index, so it is
    /// exactly the interpreter's mapping.
    fn resize_as_gather(&mut self, op: &OpData) -> Result<bool, String> {
        let attrs = Lower::attrs(op)?;
        if !matches!(attrs.get("mode"), Some(Attr::Str(m)) if m == "nearest")
            || matches!(attrs.get("coordinate_transformation_mode"), Some(Attr::Str(c)) if c == "tf_crop_and_resize")
        {
            return Ok(false);
        }
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        if xt.rank() < 3 || xt.shape[..2] != yt.shape[..2] {
            return Ok(false);
        }
        let hw: usize = xt.shape[2..].iter().product();
        let ohw: usize = yt.shape[2..].iter().product();
        if hw == 0 || hw >= 1 << 24 {
            return Ok(false);
        }
        let mut one = vec![1usize, 1];
        one.extend_from_slice(&xt.shape[2..]);
        let index_ty = TensorType::new(one, Scalar::F32);
        let index = aoc_ir::Tensor::from_f64(index_ty, (0..hw).map(|i| i as f64).collect());
        let mut sizes = vec![1i64, 1];
        sizes.extend(yt.shape[2..].iter().map(|&d| d as i64));
        let mut map_attrs = attrs.clone();
        map_attrs.set("sizes", Attr::Ints(sizes.clone()));
        if let Some(Attr::Floats(sc)) = attrs.get("scales")
            && sc.len() >= 2
            && (sc[0] != 1.0 || sc[1] != 1.0)
        {
            return Ok(false);
        }
        let out_ty = TensorType::new(sizes.iter().map(|&d| d as usize).collect::<Vec<usize>>(), Scalar::F32);
        let Ok(mut mapped) = aoc_ir::interp::eval_op(Opcode::Resize, &[&index], &map_attrs, std::slice::from_ref(&out_ty), &aoc_ir::interp::NoWeights) else {
            return Ok(false);
        };
        let Some(mapped) = mapped.pop() else { return Ok(false) };
        let src = mapped.to_f64();
        if src.len() != ohw || src.iter().any(|&s| s.fract() != 0.0 || s < 0.0 || s >= hw as f64) {
            return Ok(false);
        }
        let bytes: Vec<u8> = src.iter().flat_map(|&s| (s as i64).to_le_bytes()).collect();
        let indices = self.add_weight("resize_idx", Scalar::I64, &[ohw as u64], bytes);
        let data = self.materialize(x, &identity(xt.rank()))?;
        let y = self.alloc(&yt)?;
        self.push(Step::Gather {
            data,
            indices,
            out: y,
            elem_size: super::elem_size(xt.elem.storage()),
            outer: u(xt.shape[0] * xt.shape[1]),
            axis: u(hw),
            inner: 1,
            count: u(ohw),
        });
        self.define(op.results[0], y, identity(yt.rank()));
        Ok(true)
    }
}

/// Convolution weights `oc × cg × kh × kw` as [`WeightForm::Plain`]: per
/// group `g`, the `(kh·kw·cg) × ocg` matrix whose row `(ky·kw + kx)·cg + ci`,
/// column `j` is `w[g·ocg + j][ci][ky][kx]`.
fn conv2d_plain_weights(geom: &ConvGeom, w: &[f32]) -> Vec<f32> {
    let (kh, kw) = (geom.kh as usize, geom.kw as usize);
    let group = geom.group as usize;
    let (cg, ocg) = (geom.c as usize / group, geom.oc as usize / group);
    let k = kh * kw * cg;
    let mut out = vec![0.0; group * k * ocg];
    for g in 0..group {
        for j in 0..ocg {
            for ci in 0..cg {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let src = (((g * ocg + j) * cg + ci) * kh + ky) * kw + kx;
                        let row = (ky * kw + kx) * cg + ci;
                        out[(g * k + row) * ocg + j] = w[src];
                    }
                }
            }
        }
    }
    out
}

/// The physical positions `p0..p1` of logical `axes` (sorted, distinct)
/// under order `perm`, when they are one contiguous run.
fn physical_run(perm: &[usize], axes: &[usize]) -> Option<(usize, usize)> {
    let mut pos: Vec<usize> = axes
        .iter()
        .map(|a| perm.iter().position(|d| d == a))
        .collect::<Option<_>>()?;
    pos.sort_unstable();
    let (p0, p1) = (*pos.first()?, *pos.last()? + 1);
    (p1 - p0 == pos.len()).then_some((p0, p1))
}
