//! The importer's compositions: what MLIR has as one op and aoc builds
//! from several (argmax, rescale, round-half-even casts, tables), and the
//! operands aoc handles specially (zero points, linalg destinations,
//! `tensor.pad` values).

use super::attrs::{attr, number_of};
use super::{Imp, M, R, key, opname};
use crate::onnx::context::V;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::types::{Scalar, TensorType};
use aoc_ir::{Opcode, Tensor};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationLike, OperationRef};
use melior::ir::{RegionLike, ValueLike};
use mlir_sys as sys;

impl<'x, 'o> Imp<'x, 'o> {
    /// The constant a `tensor.pad` region yields (defined outside the
    /// region, or an `arith.constant` inside it).
    pub(super) fn pad_value<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>) -> R<f64> {
        let bad = || self.err("`tensor.pad` must yield a constant");
        let region = op.region(0).map_err(|_| bad())?;
        let block = region.first_block().ok_or_else(bad)?;
        let y = block.terminator().ok_or_else(bad)?;
        let v = y.operand(0).map_err(|_| bad())?;
        if let Some(M::T(V::C(t))) = self.vals.get(&key(v)) {
            return Ok(t.get_f64(0));
        }
        let raw = v.to_raw();
        unsafe {
            if sys::mlirValueIsAOpResult(raw) {
                let owner = melior::ir::OperationRef::from_raw(sys::mlirOpResultGetOwner(raw));
                if opname(&owner) == "arith.constant"
                    && let Some(a) = attr(&owner, "value")
                    && let Some(x) = number_of(a)
                {
                    return Ok(x);
                }
            }
        }
        Err(bad())
    }

    /// Zero-point operands `idx` must be constant zeros (aoc's integer
    /// types carry their zero points in the type instead).
    pub(super) fn zero_points<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, idx: &[usize]) -> R<()> {
        for &i in idx {
            if i < op.operand_count() {
                let z = self.const_operand(op, i, "zero point")?;
                if z.to_f64().iter().any(|&x| x != 0.0) {
                    return Err(self.err(format!("`{}` with a non-zero zero point operand is not supported (use !quant.uniform types)", opname(op))));
                }
            }
        }
        Ok(())
    }

    /// The operands of a TOSA compute op: `(operand, zero-point operand)`
    /// pairs. Float operands come as they are (their zero points must be
    /// 0). Integer ones (TOSA's quantized arithmetic, on plain integers or
    /// on `!quant.uniform` storage) come as their stored integers in f64
    /// less their zero point — exact, as products of 8- and 16-bit
    /// integers summed in f64 stay integers well below 2^53 — with the
    /// type to turn the op's result back into.
    pub(super) fn int_compute<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, operands: &[(usize, Option<usize>)]) -> R<(Vec<V>, Option<TensorType>)> {
        let first = self.t(op, operands[0].0)?;
        if !is_integer(&self.ty(&first)) {
            let zps: Vec<usize> = operands.iter().filter_map(|o| o.1).collect();
            self.zero_points(op, &zps)?;
            return operands.iter().map(|o| self.t(op, o.0)).collect::<R<Vec<_>>>().map(|v| (v, None));
        }
        let out = self.result_type(op, 0)?;
        if !is_integer(&out) {
            return Err(self.err(format!("`{}` on integers must produce integers", opname(op))));
        }
        let mut vs = vec![];
        for &(i, zp) in operands {
            let x = self.t(op, i)?;
            let x = self.storage_f64(&x)?;
            let z = match zp {
                Some(z) if z < op.operand_count() => self.const_operand(op, z, "zero point")?.get_f64(0),
                _ => 0.0,
            };
            vs.push(if z != 0.0 {
                let zt = V::konst(Tensor::from_f64(TensorType::new(vec![], Scalar::F64), vec![z]));
                self.op1(Opcode::Sub, &[x, zt], Attrs::new())?
            } else {
                x
            });
        }
        Ok((vs, Some(out)))
    }

    /// An integer compute op's f64 result turned back into its type.
    pub(super) fn int_result(&mut self, y: V, int: Option<TensorType>) -> R<V> {
        match int {
            Some(t) => self.storage_to(&y, &t),
            None => Ok(y),
        }
    }

    /// The stored integers of `x` as f64: a cast for integer tensors; for a
    /// `!quant.uniform` tensor `round(dequantize(x) / scale) + zero_point`,
    /// exact (the dequantized value is within 2^-24 of an integer times
    /// the scale).
    pub(super) fn storage_f64(&mut self, x: &V) -> R<V> {
        let t = self.ty(x);
        let Some(q) = t.elem.quant().cloned() else { return self.cast(x, Scalar::F64) };
        let d = self.op1(Opcode::Dequantize, std::slice::from_ref(x), Attrs::new())?;
        let d = self.cast(&d, Scalar::F64)?;
        let (s, z) = self.quant_params(&q, t.rank());
        let d = self.op1(Opcode::Div, &[d, s], Attrs::new())?;
        let r = self.round_even(&d)?;
        self.op1(Opcode::Add, &[r, z], Attrs::new())
    }

    /// f64 integers `v` as a tensor of type `t`: a cast, or for a quantized
    /// type `quantize((v - zero_point) * scale)`, which stores `v` again.
    pub(super) fn storage_to(&mut self, v: &V, t: &TensorType) -> R<V> {
        let Some(q) = t.elem.quant().cloned() else {
            let s = t.elem.scalar().ok_or_else(|| self.err("an integer result type was expected"))?;
            return self.cast(v, s);
        };
        let (s, z) = self.quant_params(&q, t.rank());
        let d = self.op1(Opcode::Sub, &[v.clone(), z], Attrs::new())?;
        let d = self.op1(Opcode::Mul, &[d, s], Attrs::new())?;
        let d = self.cast(&d, q.expressed)?;
        self.declared(Opcode::Quantize, &[d], Attrs::new(), t.clone())
    }

    /// A quantized type's scales and zero points as f64 constants that
    /// broadcast against a tensor of rank `rank`.
    fn quant_params(&self, q: &aoc_ir::types::QuantType, rank: usize) -> (V, V) {
        use aoc_ir::types::QuantParams;
        match &q.params {
            QuantParams::PerTensor { scale, zero_point } => (
                V::konst(Tensor::from_f64(TensorType::new(vec![], Scalar::F64), vec![*scale])),
                V::konst(Tensor::from_f64(TensorType::new(vec![], Scalar::F64), vec![*zero_point as f64])),
            ),
            QuantParams::PerAxis { axis, scales, zero_points } => {
                let mut shape = vec![1; rank];
                if *axis < rank {
                    shape[*axis] = scales.len();
                }
                (
                    V::konst(Tensor::from_f64(TensorType::new(shape.clone(), Scalar::F64), scales.clone())),
                    V::konst(Tensor::from_f64(TensorType::new(shape, Scalar::F64), zero_points.iter().map(|&z| z as f64).collect())),
                )
            }
        }
    }

    /// A linalg op's result: `y` plus its `outs` operand `i` unless that is
    /// `tensor.empty` or zeros.
    pub(super) fn accumulate<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, i: usize, y: V) -> R<V> {
        let Ok(v) = op.operand(i) else { return Ok(y) };
        match self.get(v)? {
            M::Empty(_) => Ok(y),
            M::T(V::C(t)) if t.to_f64().iter().all(|&x| x == 0.0) => Ok(y),
            M::T(init) => self.op1(Opcode::Add, &[init, y], Attrs::new()),
            M::Shape(_) => Err(self.err("a shape where a tensor was expected")),
        }
    }

    /// A max pool's result combined with its `outs` operand (usually -inf).
    pub(super) fn max_into<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, i: usize, y: V) -> R<V> {
        let Ok(v) = op.operand(i) else { return Ok(y) };
        match self.get(v)? {
            M::Empty(_) => Ok(y),
            M::T(V::C(t)) if t.to_f64().iter().all(|&x| x == f64::NEG_INFINITY || x <= -3.0e38) => Ok(y),
            M::T(init) => self.op1(Opcode::Max, &[init, y], Attrs::new()),
            M::Shape(_) => Err(self.err("a shape where a tensor was expected")),
        }
    }

    /// Round half to even, from floor (TOSA casts float to integer so;
    /// aoc's cast truncates): `r = floor(x + 0.5)`, minus one where `x`
    /// was exactly halfway and `r` is odd.
    pub(super) fn round_even(&mut self, x: &V) -> R<V> {
        let t = self.ty(x);
        let half = self.splat(0.5, &t, &[]);
        let two = self.splat(2.0, &t, &[]);
        let one = self.splat(1.0, &t, &[]);
        let zero = self.splat(0.0, &t, &[]);
        let s = self.op1(Opcode::Add, &[x.clone(), half.clone()], Attrs::new())?;
        let r = self.op1(Opcode::Floor, std::slice::from_ref(&s), Attrs::new())?;
        let tie = self.op1(Opcode::Equal, &[r.clone(), s], Attrs::new())?;
        let h = self.op1(Opcode::Div, &[r.clone(), two.clone()], Attrs::new())?;
        let hf = self.op1(Opcode::Floor, &[h], Attrs::new())?;
        let even = self.op1(Opcode::Mul, &[hf, two], Attrs::new())?;
        let odd = self.op1(Opcode::Sub, &[r.clone(), even], Attrs::new())?;
        let fix = self.op1(Opcode::Where, &[tie, odd, zero], Attrs::new())?;
        let _ = one;
        self.op1(Opcode::Sub, &[r, fix], Attrs::new())
    }

    /// `tosa.argmax`: the first index of the maximum along `axis`.
    pub(super) fn argmax(&mut self, x: &V, axis: usize, want: &TensorType) -> R<V> {
        let t = self.ty(x);
        let n = t.shape[axis];
        let m = self.op1(Opcode::ReduceMax, std::slice::from_ref(x), Attrs::new().with("axes", Attr::Ints(vec![axis as i64])).with("keepdims", Attr::Bool(true)))?;
        let eq = self.op1(Opcode::Equal, &[x.clone(), m], Attrs::new())?;
        let mut ishape = vec![1; t.rank()];
        ishape[axis] = n;
        let iota = V::konst(Tensor::from_i64(TensorType::new(ishape, Scalar::I64), (0..n as i64).collect()));
        let big = V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![n as i64]));
        let sel = self.op1(Opcode::Where, &[eq, iota, big], Attrs::new())?;
        let i = self.op1(Opcode::ReduceMin, &[sel], Attrs::new().with("axes", Attr::Ints(vec![axis as i64])).with("keepdims", Attr::Bool(false)))?;
        let s = want.elem.scalar().ok_or_else(|| self.err("`tosa.argmax` to a quantized type"))?;
        self.cast(&i, s)
    }

    /// `p >> shift` on i64 values, with `den = 2^shift`: a floor division.
    /// aoc's integer division truncates, so step down where it rounded a
    /// negative quotient up.
    fn shift_right(&mut self, p: V, den: V) -> R<V> {
        let q = self.op1(Opcode::Div, &[p.clone(), den.clone()], Attrs::new())?;
        let back = self.op1(Opcode::Mul, &[q.clone(), den], Attrs::new())?;
        let over = self.op1(Opcode::Greater, &[back, p], Attrs::new())?;
        let i = |v: i64| V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![v]));
        let one = self.op1(Opcode::Where, &[over, i(1), i(0)], Attrs::new())?;
        self.op1(Opcode::Sub, &[q, one], Attrs::new())
    }

    /// `tosa.mul` of i32 tensors with a shift: `(a * b + 2^(shift-1)) >> shift`.
    pub(super) fn mul_shift<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>, shift: i64) -> R<V> {
        let want = self.result_type(op, 0)?;
        let (a, b) = (self.t(op, 0)?, self.t(op, 1)?);
        if want.elem != aoc_ir::types::ElemType::Scalar(Scalar::I32) || !(1..=62).contains(&shift) {
            return Err(self.err("`tosa.mul` with a shift takes i32 operands and a shift in [1, 62]"));
        }
        let (a, b) = (self.cast(&a, Scalar::I64)?, self.cast(&b, Scalar::I64)?);
        let i = |v: i64| V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![v]));
        let p = self.op1(Opcode::Mul, &[a, b], Attrs::new())?;
        let p = self.op1(Opcode::Add, &[p, i(1 << (shift - 1))], Attrs::new())?;
        let q = self.shift_right(p, i(1 << shift))?;
        let y = self.cast(&q, Scalar::I32)?;
        self.expect(y, &want)
    }

    /// `tosa.rescale` with constant parameters, exactly as TOSA's
    /// `apply_scale_32` computes it, in i64:
    /// `clamp(((x - in_zp) * multiplier + round) >> shift) + out_zp`.
    pub(super) fn rescale<'c, 'a>(&mut self, op: &OperationRef<'c, 'a>) -> R<V> {
        let x = self.t(op, 0)?;
        let mult = self.const_operand(op, 1, "multiplier")?;
        let shift = self.const_operand(op, 2, "shift")?;
        let izp = self.const_operand(op, 3, "input zero point")?.get_f64(0);
        let ozp = self.const_operand(op, 4, "output zero point")?.get_f64(0);
        if attr(op, "input_unsigned").and_then(number_of).unwrap_or(0.0) != 0.0 || attr(op, "output_unsigned").and_then(number_of).unwrap_or(0.0) != 0.0 {
            return Err(self.err("`tosa.rescale` with unsigned inputs or outputs is not supported"));
        }
        let want = self.result_type(op, 0)?;
        if !is_integer(&want) || !is_integer(&self.ty(&x)) {
            return Err(self.err("`tosa.rescale` takes and gives integers"));
        }
        // TOSA's apply_scale_32 in i64 (|value * multiplier| < 2^62):
        // (value * multiplier + round) >> shift, with round = 2^(shift-1),
        // moved 2^30 away from zero under DOUBLE_ROUND where shift > 31.
        let shifts = shift.to_i64();
        if shifts.iter().any(|&s| !(1..=62).contains(&s)) {
            return Err(self.err("`tosa.rescale` shifts must be in [1, 62]"));
        }
        let double = attr(op, "rounding_mode").is_some_and(|a| a.to_string().contains("DOUBLE_ROUND"));
        let per = |v: Vec<i64>| {
            let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
            V::konst(Tensor::from_i64(TensorType::new(shape, Scalar::I64), v))
        };
        let xf = self.storage_f64(&x)?;
        let xi = self.cast(&xf, Scalar::I64)?;
        let d = self.op1(Opcode::Sub, &[xi, per(vec![izp as i64])], Attrs::new())?;
        let p = self.op1(Opcode::Mul, &[d.clone(), per(mult.to_i64())], Attrs::new())?;
        let p = self.op1(Opcode::Add, &[p, per(shifts.iter().map(|&s| 1i64 << (s - 1)).collect())], Attrs::new())?;
        let p = if double && shifts.iter().any(|&s| s > 31) {
            let adj: Vec<i64> = shifts.iter().map(|&s| if s > 31 { 1i64 << 30 } else { 0 }).collect();
            let below = self.op1(Opcode::Less, &[d, per(vec![0])], Attrs::new())?;
            let a = self.op1(Opcode::Where, &[below, per(adj.iter().map(|a| -a).collect()), per(adj)], Attrs::new())?;
            self.op1(Opcode::Add, &[p, a], Attrs::new())?
        } else {
            p
        };
        let q = self.shift_right(p, per(shifts.iter().map(|&s| 1i64 << s).collect()))?;
        let p = self.op1(Opcode::Add, &[q, per(vec![ozp as i64])], Attrs::new())?;
        let p = self.cast(&p, Scalar::F64)?;
        let (lo, hi) = match want.elem.storage() {
            Scalar::I8 => (-128.0, 127.0),
            Scalar::I16 => (-32768.0, 32767.0),
            Scalar::I32 => (i32::MIN as f64, i32::MAX as f64),
            Scalar::U8 => (0.0, 255.0),
            s => return Err(self.err(format!("`tosa.rescale` to {} is not supported", s.name()))),
        };
        let p = self.op1(Opcode::Clip, &[p], Attrs::new().with("min", Attr::Float(lo)).with("max", Attr::Float(hi)))?;
        let y = self.storage_to(&p, &want)?;
        self.expect(y, &want)
    }
}

/// Whether `t` holds integers: a plain integer type or a quantized one
/// with integer storage.
fn is_integer(t: &TensorType) -> bool {
    t.elem.is_int() || t.elem.quant().is_some_and(|q| q.storage.is_int())
}
