//! Integer convolution and GEMM (`quant.conv2d`, `quant.gemm`) →
//! `Step::QConv2d`, when the target has integer kernels
//! ([`LowerOptions::int8`](super::LowerOptions)); `quant.add` →
//! `Step::QAdd` and a max pool of quantized values → `Step::QMaxPool`
//! where it has those ([`LowerOptions::int8_elementwise`](super::LowerOptions)).
//!
//! The IR defines these ops by their Q/DQ meaning (dequantize, compute in
//! float, clamp, quantize). The step computes the same in integers:
//! `acc = Σ x·w` over the stored values, and everything that depends only
//! on constants is folded here:
//! - `comp[o] = −x_zero · Σ_k w[o][k]` (then `Σ (x − x_zero)·w = acc +
//!   comp`), plus the bias's stored integers when its scale is `s_x·s_w[o]`
//!   and its zero point 0 (ONNX's rule for QLinearConv biases);
//! - `scale[o] = s_x·s_w[o] / s_y`, `shift[o] = bias[o] / s_y` for a bias of
//!   any other scale (0 otherwise);
//! - the clamp `[clip_min, clip_max]` becomes integer bounds: quantizing is
//!   monotone, so clamping before it equals clamping its result to the
//!   quantized bounds.
//!
//! It differs from the float definition only where the float sum's rounding
//! moves a value across a rounding boundary of the output (one step of the
//! output's scale), which is the stated tolerance of integer backends.
//!
//! fp8 (`LowerOptions::fp8_conv`): the same ops with e4m3 operands
//! (per-tensor activation, per-channel or per-tensor weight scales, zero
//! points 0) become `Step::QConv2d` with `QuantElem::E4M3` (`scale[o] =
//! s_x·s_w[o] / s_y`, `shift[o] = bias[o] / s_y`, `comp` zero: the kernel
//! accumulates in f32, so the bias is always a shift; the clip as e4m3
//! bounds) or, with a float result, `QuantElem::E4M3ToF32` (`s_y` = 1, the
//! clip in real values); one group and channels in multiples of 16, else
//! the float expansion.
//!
//! Conditions (anything else runs on the reference path): per-tensor
//! activation and result parameters with 8-bit integer storage, constant
//! i8 weights with zero points 0 (per tensor or per output channel).

use aoc_ir::module::OpData;
use aoc_ir::ops::Opcode;
use aoc_ir::ops::quant::dequantize_values;
use aoc_ir::types::{QuantParams, QuantType, Scalar, TensorType};
use aoc_ir::bytes::f64_to_f8;
use aoc_ir::tensor::round_f8;
use aoc_plan::plan::{ConvGeom, QuantAdd, QuantConv, QuantElem, QuantMatMul, QuantMean, QuantOperand, Step};

use aoc_ir::attr::{Attr, Attrs};

use super::nn::{Mat, boolean, float, geom, ints, u};
use super::{Lower, NHWC, Val, identity};

/// A per-tensor e4m3 type with zero point 0 and f32 expressed values, in
/// [`act_params`]' form: (unsigned, scale, 0, -448, 448).
fn e4m3_params(t: &TensorType) -> Option<(bool, f64, i64, i64, i64)> {
    let q = t.elem.quant()?;
    match q.params {
        QuantParams::PerTensor { scale, zero_point: 0 } if q.storage == Scalar::F8E4M3FN && q.expressed == Scalar::F32 => {
            Some((false, scale, 0, -E4M3_MAX, E4M3_MAX))
        }
        _ => None,
    }
}

/// The largest finite e4m3 value.
const E4M3_MAX: i64 = 448;

/// A per-tensor 8-bit quantized type: (signed, scale, zero point, lo, hi).
fn act_params(t: &TensorType) -> Option<(bool, f64, i64, i64, i64)> {
    let q = t.elem.quant()?;
    let signed = match q.storage {
        Scalar::I8 => true,
        Scalar::U8 => false,
        _ => return None,
    };
    if q.expressed != Scalar::F32 {
        return None;
    }
    let QuantParams::PerTensor { scale, zero_point } = q.params else {
        return None;
    };
    let (lo, hi) = q.storage.int_range()?;
    Some((signed, scale, zero_point, lo, hi))
}

/// [`act_params`] as the runtime's operand description.
fn operand((signed, scale, zero, _, _): (bool, f64, i64, i64, i64)) -> QuantOperand {
    QuantOperand { signed, zero: zero as i32, scale: scale as f32 }
}

/// The weight's per-output-channel scales (`oc` of them) when it is stored
/// as `storage` with zero points 0, per tensor or along `axis`.
fn weight_scales(q: &QuantType, storage: Scalar, oc: usize, axis: usize) -> Option<Vec<f64>> {
    if q.storage != storage || q.expressed != Scalar::F32 {
        return None;
    }
    match &q.params {
        QuantParams::PerTensor {
            scale,
            zero_point: 0,
        } => Some(vec![*scale; oc]),
        QuantParams::PerAxis {
            axis: a,
            scales,
            zero_points,
        } if *a == axis && zero_points.iter().all(|&z| z == 0) => Some(scales.clone()),
        _ => None,
    }
}

/// A GEMM of `m` rows by `k` by `n` as the 1×1 convolution the integer
/// step runs: `m` pixels of `k` channels in, `n` channels out.
fn gemm_geom(m: usize, k: usize, n: usize) -> ConvGeom {
    ConvGeom {
        n: 1,
        h: u(m),
        w: 1,
        c: u(k),
        oh: u(m),
        ow: 1,
        oc: u(n),
        kh: 1,
        kw: 1,
        stride: [1, 1],
        dilation: [1, 1],
        pads: [0; 4],
        group: 1,
    }
}

fn f32r(v: f64) -> f64 {
    v as f32 as f64
}

impl Lower<'_> {
    /// `quant.conv2d` and `quant.gemm` (see the module doc), in integers
    /// or, with e4m3 operands, in fp8 (`QuantElem::E4M3`).
    pub(crate) fn lower_qconv(&mut self, op: &OpData) -> Result<bool, String> {
        let attrs = Lower::attrs(op)?;
        let (x, w) = (op.operands[0], op.operands[1]);
        let (xt, wt, yt) = (
            self.ty(x).clone(),
            self.ty(w).clone(),
            self.ty(op.results[0]).clone(),
        );
        let fp8 = xt.elem.quant().is_some_and(|q| q.storage == Scalar::F8E4M3FN);
        let (on, params): (bool, fn(&TensorType) -> _) =
            if fp8 { (self.opts.fp8_conv, e4m3_params) } else { (self.opts.int8, act_params) };
        if !on {
            return Ok(false);
        }
        // An fp8 product with a float result: no requantization (scale
        // 1 in the formulas below), the clip in real values.
        let float_out = fp8 && yt.elem.quant().is_none();
        if float_out && yt.elem.storage() != Scalar::F32 {
            return Ok(false);
        }
        let yq = if float_out { Some((false, 1.0, 0, i32::MIN as i64, i32::MAX as i64)) } else { params(&yt) };
        let (Some(xq), Some(yq), Some(wq)) =
            (params(&xt), yq, wt.elem.quant().cloned())
        else {
            return Ok(false);
        };
        let Some(wc) = self.constant(w) else {
            return Ok(false);
        };
        // The stored integers, or the e4m3 bytes (as 0..=255).
        let wi: Vec<i64> = (0..wc.len())
            .map(|i| if fp8 { f64_to_f8(Scalar::F8E4M3FN, wc.get_f64(i)) as i64 } else { wc.get_f64(i) as i64 })
            .collect();
        // The geometry and the weight rows in [oc][kh][kw][c/group] order.
        let (g, rows, axis) = match op.opcode {
            Opcode::QuantConv2d => {
                if xt.rank() != 4 || wt.rank() != 4 || yt.rank() != 4 {
                    return Ok(false);
                }
                let [oc, cg, kh, kw] = [0, 1, 2, 3].map(|i| wt.shape[i]);
                let mut g = geom(&xt, [u(oc), 0, 0], [u(kh), u(kw)], &attrs);
                (g.oh, g.ow) = (u(yt.shape[2]), u(yt.shape[3]));
                let mut rows = Vec::with_capacity(wi.len());
                for o in 0..oc {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            for ci in 0..cg {
                                rows.push(wi[((o * cg + ci) * kh + ky) * kw + kx]);
                            }
                        }
                    }
                }
                (g, rows, 0)
            }
            Opcode::QuantGemm => {
                let (alpha, beta) = (float(&attrs, "alpha", 1.0), float(&attrs, "beta", 1.0));
                if xt.rank() != 2
                    || wt.rank() != 2
                    || boolean(&attrs, "trans_a")
                    || alpha != 1.0
                    || beta != 1.0
                {
                    return Ok(false);
                }
                let trans_b = boolean(&attrs, "trans_b");
                let (m, k) = (xt.shape[0], xt.shape[1]);
                let n = if trans_b { wt.shape[0] } else { wt.shape[1] };
                let rows: Vec<i64> = (0..n)
                    .flat_map(|o| (0..k).map(move |kk| (o, kk)))
                    .map(|(o, kk)| {
                        if trans_b {
                            wi[o * k + kk]
                        } else {
                            wi[kk * n + o]
                        }
                    })
                    .collect();
                let g = gemm_geom(m, k, n);
                (g, rows, if trans_b { 0 } else { 1 })
            }
            // A matmul by a constant 2-D weight is a GEMM over the rows of
            // its (row-major) left operand: [.., M, K] x [K, N].
            Opcode::QuantMatMul => {
                if xt.rank() < 2 || wt.rank() != 2 || xt.shape[xt.rank() - 1] != wt.shape[0] {
                    return Ok(false);
                }
                let (k, n) = (wt.shape[0], wt.shape[1]);
                let m: usize = xt.shape[..xt.rank() - 1].iter().product();
                let wi = &wi;
                let rows: Vec<i64> = (0..n).flat_map(|o| (0..k).map(move |kk| wi[kk * n + o])).collect();
                let g = gemm_geom(m, k, n);
                (g, rows, 1)
            }
            _ => return Ok(false),
        };
        let oc = g.oc as usize;
        let storage = if fp8 { Scalar::F8E4M3FN } else { Scalar::I8 };
        let Some(sw) = weight_scales(&wq, storage, oc, axis) else {
            return Ok(false);
        };
        // The fp8 kernel (wgmma only) reads 16-byte runs of one group's
        // channels; other shapes run as their float expansion.
        if fp8 && (g.group != 1 || !g.c.is_multiple_of(16)) {
            return Ok(false);
        }
        let (x_signed, sx, zx, _, _) = xq;
        let (y_signed, sy, zy, ylo, yhi) = yq;
        let kk = rows.len().checked_div(oc).unwrap_or(0);
        // comp, scale and shift per output channel.
        let mut comp: Vec<i64> = (0..oc)
            .map(|o| -zx * rows[o * kk..(o + 1) * kk].iter().sum::<i64>())
            .collect();
        let scale: Vec<f32> = (0..oc)
            .map(|o| (f32r(sx) * f32r(sw[o]) / f32r(sy)) as f32)
            .collect();
        let mut shift = vec![0f32; oc];
        if let Some(&bv) = op.operands.get(2) {
            let Some(bc) = self.constant(bv) else {
                return Ok(false);
            };
            if bc.len() != oc {
                return Ok(false);
            }
            match self.ty(bv).elem.quant().cloned() {
                // fp8 accumulates in f32: the bias is always a shift.
                Some(bq) if !fp8 && bq.storage.int_range().is_some() && integer_bias(&bq, sx, &sw) => {
                    for (o, c) in comp.iter_mut().enumerate() {
                        *c += bc.get_f64(o) as i64;
                    }
                }
                bq => {
                    let real = match bq {
                        Some(q) => dequantize_values(&bc, &q),
                        None => bc.to_f64(),
                    };
                    for (s, r) in shift.iter_mut().zip(real) {
                        *s = (r / f32r(sy)) as f32;
                    }
                }
            }
        }
        if !fp8 && (comp.iter().any(|&c| i32::try_from(c).is_err()) || kk as i64 * 255 * 128 > i32::MAX as i64) {
            return Ok(false);
        }
        let (y_min, y_max) = if float_out {
            match float_clip(&attrs) {
                Some(b) => b,
                None => return Ok(false),
            }
        } else if fp8 {
            match e4m3_clip(&attrs, sy) {
                Some(b) => b,
                None => return Ok(false),
            }
        } else {
            quantized_clip(&attrs, sy, zy, ylo, yhi)
        };
        let xb = if op.opcode == Opcode::QuantConv2d {
            self.materialize(x, &NHWC)?
        } else {
            self.materialize(x, &identity(xt.rank()))?
        };
        let wbytes: Vec<u8> = rows.iter().map(|&v| v as i8 as u8).collect();
        let wb = self.add_weight("qfilter", Scalar::I8, &[rows.len() as u64], wbytes);
        let comp_b = self.add_weight(
            "qcomp",
            Scalar::I32,
            &[g.oc],
            comp.iter()
                .flat_map(|&c| (c as i32).to_le_bytes())
                .collect(),
        );
        let scale_b = self.add_weight_f32("qscale", &[g.oc], &scale);
        let shift_b = self.add_weight_f32("qshift", &[g.oc], &shift);
        let y = self.alloc(&yt)?;
        self.push(Step::QConv2d {
            x: xb,
            w: wb,
            comp: comp_b,
            scale: scale_b,
            shift: shift_b,
            y,
            geom: g,
            q: QuantConv {
                x_signed,
                x_zero: zx as i32,
                y_signed,
                y_zero: zy as i32,
                y_min: y_min as i32,
                y_max: y_max as i32,
                elem: match (fp8, float_out) {
                    (true, true) => QuantElem::E4M3ToF32,
                    (true, false) => QuantElem::E4M3,
                    (false, _) => QuantElem::Int8,
                },
            },
        });
        let perm = if op.opcode == Opcode::QuantConv2d {
            NHWC.to_vec()
        } else {
            identity(yt.rank())
        };
        self.define(op.results[0], y, perm);
        Ok(true)
    }
}

impl Lower<'_> {
    /// `quant.add` with per-tensor 8-bit parameters → `Step::QAdd`: of two
    /// tensors of the result's shape, in the layout the first already has;
    /// or of one such tensor and one that repeats along it (after leading
    /// 1s, a suffix of the result's shape of at least 16 elements: a bias
    /// on the last axes), both in row-major order.
    pub(crate) fn lower_qadd(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.opts.int8_elementwise || op.operands.len() != 2 {
            return Ok(false);
        }
        let (mut a, mut b, r) = (op.operands[0], op.operands[1], op.results[0]);
        let yt = self.ty(r).clone();
        if self.ty(a).shape != yt.shape {
            // `a + b` is `b + a` in f32: the full operand goes first.
            std::mem::swap(&mut a, &mut b);
        }
        let (at, bt) = (self.ty(a).clone(), self.ty(b).clone());
        if at.shape != yt.shape {
            return Ok(false);
        }
        let params = |t: &TensorType| act_params(t).map(operand);
        let (Some(qa), Some(qb), Some(qy)) = (params(&at), params(&bt), params(&yt)) else {
            return Ok(false);
        };
        let attrs = Lower::attrs(op)?;
        let clip = |name: &str| opt_float(&attrs, name).map(|v| v as f32);
        let q = QuantAdd { a: qa, b: qb, y: qy, clip_min: clip("clip_min"), clip_max: clip("clip_max") };
        let n = yt.num_elements();
        let (ab, bb, perm, b_len) = if bt.shape == yt.shape {
            let perm = match self.val(a)? {
                Val::Mem { perm, .. } => perm,
                Val::Const(_) => match self.val(b)? {
                    Val::Mem { perm, .. } => perm,
                    Val::Const(_) => identity(yt.rank()),
                },
            };
            (self.materialize(a, &perm)?, self.materialize(b, &perm)?, perm, n)
        } else {
            let core: Vec<usize> = bt.shape.iter().copied().skip_while(|&d| d == 1).collect();
            let b_len: usize = core.iter().product();
            if bt.rank() > yt.rank() || !yt.shape.ends_with(&core) || b_len == 0 {
                return Ok(false);
            }
            let perm = identity(yt.rank());
            let ab = self.materialize(a, &perm)?;
            match self.constant(b) {
                // A short constant (a scalar, a few channels) is repeated
                // into a row of at least 64 that still divides the result,
                // so the kernel runs whole vectors.
                Some(c) if b_len < 64 => {
                    let reps = (1..=n / b_len).find(|&k| b_len * k >= 64 && n % (b_len * k) == 0).unwrap_or(1);
                    let row: Vec<u8> = (0..b_len * reps).map(|i| c.get_f64(i % b_len) as i64 as u8).collect();
                    let storage = if qb.signed { Scalar::I8 } else { Scalar::U8 };
                    let bb = self.add_weight("qadd_row", storage, &[row.len() as u64], row);
                    (ab, bb, perm, b_len * reps)
                }
                _ if b_len < 16 => return Ok(false),
                _ => (ab, self.materialize(b, &identity(bt.rank()))?, perm, b_len),
            }
        };
        let y = self.alloc(&yt)?;
        self.push(Step::QAdd { a: ab, b: bb, y, n: u(n), b_len: u(b_len), q });
        self.define(r, y, perm);
        Ok(true)
    }

    /// `quant.quantize` from f32 and `quant.dequantize` to f32 with
    /// per-tensor 8-bit parameters → `Step::Quantize` / `Step::Dequantize`,
    /// in the layout the operand already has.
    pub(crate) fn lower_qcast(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.opts.int8_elementwise || op.operands.len() != 1 {
            return Ok(false);
        }
        let (x, r) = (op.operands[0], op.results[0]);
        let (xt, yt) = (self.ty(x).clone(), self.ty(r).clone());
        let (float, quant) = match op.opcode {
            Opcode::Quantize => (&xt, &yt),
            Opcode::Dequantize => (&yt, &xt),
            _ => return Ok(false),
        };
        let Some(q) = act_params(quant).map(operand) else {
            return Ok(false);
        };
        if xt.shape != yt.shape || !super::nn::is_f32(float) {
            return Ok(false);
        }
        let perm = match self.val(x)? {
            Val::Mem { perm, .. } => perm,
            Val::Const(_) => identity(xt.rank()),
        };
        let xb = self.materialize(x, &perm)?;
        let y = self.alloc(&yt)?;
        let n = u(yt.num_elements());
        self.push(match op.opcode {
            Opcode::Quantize => Step::Quantize { x: xb, y, n, q },
            _ => Step::Dequantize { x: xb, y, n, q },
        });
        self.define(r, y, perm);
        Ok(true)
    }

    /// `core.max_pool2d` on a per-tensor 8-bit quantized tensor whose result
    /// has the same type parameters → `Step::QMaxPool` (the maximum of the
    /// stored values is the stored maximum).
    pub(crate) fn lower_qmax_pool(&mut self, op: &OpData) -> Result<bool, String> {
        let Some(Pool8 { x, xt, yt, xq, yq }) = self.pool8(op, self.opts.int8_max_pool) else {
            return Ok(false);
        };
        if xq != yq || xt.elem != yt.elem {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let k = ints(&attrs, "kernel");
        if k.len() != 2 {
            return Ok(false);
        }
        let geom = geom(&xt, [u(yt.shape[1]), u(yt.shape[2]), u(yt.shape[3])], [k[0] as u64, k[1] as u64], &attrs);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        self.push(Step::QMaxPool { x: xb, y, geom, ceil_mode: boolean(&attrs, "ceil_mode"), signed: xq.0 });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }
}

impl Lower<'_> {
    /// `quant.avg_pool2d` of a rank-4 per-tensor 8-bit tensor →
    /// `Step::QAvgPool` over its NHWC form.
    pub(crate) fn lower_qavg_pool(&mut self, op: &OpData) -> Result<bool, String> {
        let Some(Pool8 { x, xt, yt, xq, yq }) = self.pool8(op, self.opts.int8_elementwise) else {
            return Ok(false);
        };
        let attrs = Lower::attrs(op)?;
        let k = ints(&attrs, "kernel");
        if k.len() != 2 {
            return Ok(false);
        }
        let (y_min, y_max) = quantized_clip(&attrs, yq.1, yq.2, yq.3, yq.4);
        let q = QuantMean { x: operand(xq), y: operand(yq), y_min: y_min as i32, y_max: y_max as i32 };
        let geom = geom(&xt, [u(yt.shape[1]), u(yt.shape[2]), u(yt.shape[3])], [k[0] as u64, k[1] as u64], &attrs);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        let (ceil_mode, count_include_pad) = (boolean(&attrs, "ceil_mode"), boolean(&attrs, "count_include_pad"));
        self.push(Step::QAvgPool { x: xb, y, geom, ceil_mode, count_include_pad, q });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }

    /// `quant.global_avg_pool` of a rank-4 per-tensor 8-bit tensor →
    /// `Step::QGlobalAvgPool` over its NHWC form.
    pub(crate) fn lower_qglobal_avg_pool(&mut self, op: &OpData) -> Result<bool, String> {
        let Some(Pool8 { x, xt, yt, xq, yq }) = self.pool8(op, self.opts.int8_elementwise) else {
            return Ok(false);
        };
        let attrs = Lower::attrs(op)?;
        let (y_min, y_max) = quantized_clip(&attrs, yq.1, yq.2, yq.3, yq.4);
        let q = QuantMean { x: operand(xq), y: operand(yq), y_min: y_min as i32, y_max: y_max as i32 };
        let (n, c, hw) = (xt.shape[0], xt.shape[1], xt.shape[2] * xt.shape[3]);
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        self.push(Step::QGlobalAvgPool { x: xb, y, n: u(n), hw: u(hw), c: u(c), q });
        // N×C×1×1: the NHWC bytes are the NCHW bytes.
        self.define(op.results[0], y, identity(4));
        Ok(true)
    }
}

/// A pool of a rank-4 per-tensor 8-bit tensor into another: its operand,
/// both types and both types' parameters.
struct Pool8 {
    x: aoc_ir::module::ValueId,
    xt: TensorType,
    yt: TensorType,
    xq: (bool, f64, i64, i64, i64),
    yq: (bool, f64, i64, i64, i64),
}

impl Lower<'_> {
    /// `op` as a [`Pool8`], where the target runs its 8-bit step (`native`).
    fn pool8(&self, op: &OpData, native: bool) -> Option<Pool8> {
        if !native {
            return None;
        }
        let x = op.operands[0];
        let (xt, yt) = (self.ty(x).clone(), self.ty(op.results[0]).clone());
        let (xq, yq) = (act_params(&xt)?, act_params(&yt)?);
        (xt.rank() == 4).then_some(Pool8 { x, xt, yt, xq, yq })
    }
}

/// The clamp of an integer op's epilogue (`clip_min`, `clip_max`) as
/// bounds on the stored result (quantizing is monotone, so clamping before
/// it equals clamping its result), within the storage range `ylo..=yhi`.
/// Crossed bounds (`clip_min > clip_max`) give `clip_max` everywhere, as
/// the op's max-then-min does: both bounds become the upper one.
/// The op's clip as bounds on the e4m3 result: each bound divided by the
/// scale and rounded to e4m3 (saturating); `None` where one is not a whole
/// number (a clip far inside the range; the float expansion takes it).
fn e4m3_clip(attrs: &Attrs, sy: f64) -> Option<(i64, i64)> {
    let bound = |name: &str, dflt: i64| match opt_float(attrs, name) {
        None => Some(dflt),
        Some(c) => {
            let v = round_f8(Scalar::F8E4M3FN, (f32r(c) / f32r(sy)) as f32 as f64, true);
            (v.fract() == 0.0).then_some(v as i64)
        }
    };
    let (lo, hi) = (bound("clip_min", -E4M3_MAX)?, bound("clip_max", E4M3_MAX)?);
    Some((lo.min(hi), hi))
}

/// The op's clip in real values as the f32 result's bounds (`i32::MIN`,
/// `i32::MAX`: none); `None` where a bound is not a whole number in i32.
fn float_clip(attrs: &Attrs) -> Option<(i64, i64)> {
    let bound = |name: &str, dflt: i32| match opt_float(attrs, name) {
        None => Some(dflt as i64),
        Some(c) => (c.fract() == 0.0 && c.abs() < 2e9).then_some(c as i64),
    };
    let (lo, hi) = (bound("clip_min", i32::MIN)?, bound("clip_max", i32::MAX)?);
    Some((lo.min(hi), hi))
}

fn quantized_clip(attrs: &Attrs, sy: f64, zy: i64, ylo: i64, yhi: i64) -> (i64, i64) {
    let qbound = |v: f64| ((f32r(v) / f32r(sy)) as f32 as f64).round_ties_even() + zy as f64;
    let within = |v: f64| v.clamp(ylo as f64, yhi as f64) as i64;
    let y_min = opt_float(attrs, "clip_min").map_or(ylo, |c| within(qbound(c)));
    let y_max = opt_float(attrs, "clip_max").map_or(yhi, |c| within(qbound(c)));
    (y_min.min(y_max), y_max)
}

impl Lower<'_> {
    /// `quant.matmul` of two 8-bit activations (per-tensor parameters) →
    /// `Step::QMatMul`, batched with strides as the float MatMul (head
    /// views need no copy).
    pub(crate) fn lower_qmatmul(&mut self, op: &OpData) -> Result<bool, String> {
        if !self.opts.int8_elementwise || op.opcode != Opcode::QuantMatMul || op.operands.len() != 2 {
            return Ok(false);
        }
        let (a, b, r) = (op.operands[0], op.operands[1], op.results[0]);
        let (at, bt, yt) = (self.ty(a).clone(), self.ty(b).clone(), self.ty(r).clone());
        if at.rank() < 2 || bt.rank() < 2 || yt.rank() < 2 {
            return Ok(false);
        }
        let (Some(qa), Some(qb), Some(qy)) = (act_params(&at), act_params(&bt), act_params(&yt)) else {
            return Ok(false);
        };
        let (m, k, n) = (at.shape[at.rank() - 2], at.shape[at.rank() - 1], bt.shape[bt.rank() - 1]);
        if (k as i64) * 255 * 256 > i32::MAX as i64 {
            return Ok(false);
        }
        let out_batch = yt.shape[..yt.rank() - 2].to_vec();
        let Some(sa) = self.batch_strides(Mat::V(a), &out_batch)? else { return Ok(false) };
        let Some(sb) = self.batch_strides(Mat::V(b), &out_batch)? else { return Ok(false) };
        let attrs = Lower::attrs(op)?;
        let (y_signed, sy, zy, ylo, yhi) = qy;
        let (y_min, y_max) = quantized_clip(&attrs, sy, zy, ylo, yhi);
        let y = self.alloc(&yt)?;
        self.push(Step::QMatMul {
            a: sa.0,
            b: sb.0,
            y,
            batch: u(out_batch.iter().product()),
            m: u(m),
            n: u(n),
            k: u(k),
            a_strides: sa.1,
            b_strides: sb.1,
            y_strides: [u(m * n), u(n), 1],
            q: QuantMatMul {
                a: operand(qa),
                b: operand(qb),
                y_signed,
                y_zero: zy as i32,
                y_min: y_min as i32,
                y_max: y_max as i32,
                scale: (f32r(qa.1) * f32r(qb.1) / f32r(sy)) as f32,
            },
        });
        self.define(r, y, identity(yt.rank()));
        Ok(true)
    }
}

/// Whether a bias of type `bq` holds integers in the accumulator's units:
/// scale `s_x·s_w[o]` (to f32 rounding) and zero point 0 per channel.
fn integer_bias(bq: &QuantType, sx: f64, sw: &[f64]) -> bool {
    (0..sw.len()).all(|o| {
        let (s, z) = bq.params_at(if bq.axis().is_some() { o } else { 0 });
        let want = f32r(sx) * f32r(sw[o]);
        z == 0 && (f32r(s) - want).abs() <= want * 1e-6
    })
}

fn opt_float(attrs: &Attrs, name: &str) -> Option<f64> {
    match attrs.get(name) {
        Some(Attr::Float(v)) => Some(*v),
        _ => None,
    }
}
