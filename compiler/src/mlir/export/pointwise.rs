//! The exporter's TOSA vocabulary: constants (`tosa.const`, `dense` or
//! `dense_resource`, quantized ones behind `quant.scast`), shapes
//! (`tosa.const_shape`, reshape, transpose, broadcasting by rank and
//! `tosa.tile`) and pointwise ops with their compositions (activations,
//! division, clamps).

use super::{Ex, R, V, broadcast, flt, float, internal};
use crate::mlir::types;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::kind::{Activation, Binary, Unary};
use aoc_ir::types::{ElemType, Scalar, TensorType};
use aoc_ir::Tensor;
use melior::ir::attribute::DenseElementsAttribute;
use melior::ir::{Attribute, Location, Type, TypeLike, Value};

impl<'c, 'a, 'w> Ex<'c, 'a, 'w> {
    // ------------------------------------------------------------ constants

    /// `tosa.const` holding `t` (quantized: its stored integers, then
    /// `quant.scast` to the quantized type).
    pub(super) fn konst(&mut self, t: &Tensor, hint: &str, loc: Location<'c>) -> R<V<'c, 'a>> {
        if let ElemType::Quant(q) = &t.ty.elem {
            let raw = Tensor { ty: t.ty.with_elem(q.storage), data: t.data.clone() };
            let c = self.konst(&raw, hint, loc)?;
            return self.op1("quant.scast", &[&c], t.ty.clone(), &[], loc);
        }
        let s = t.ty.elem.storage();
        let ty = types::tensor(self.ctx, &t.ty)?;
        let n = t.len();
        let bytes: Vec<u8> = match s {
            Scalar::F64 => t.to_f64().iter().flat_map(|x| x.to_le_bytes()).collect(),
            Scalar::F32 => t.to_f64().iter().flat_map(|x| (*x as f32).to_le_bytes()).collect(),
            Scalar::F16 => t.to_f64().iter().flat_map(|x| half::f16::from_f64(*x).to_le_bytes()).collect(),
            Scalar::BF16 => t.to_f64().iter().flat_map(|x| half::bf16::from_f64(*x).to_le_bytes()).collect(),
            Scalar::I64 | Scalar::U64 => t.to_i64().iter().flat_map(|x| x.to_le_bytes()).collect(),
            Scalar::I32 | Scalar::U32 => t.to_i64().iter().flat_map(|x| (*x as i32).to_le_bytes()).collect(),
            Scalar::I16 | Scalar::U16 => t.to_i64().iter().flat_map(|x| (*x as i16).to_le_bytes()).collect(),
            Scalar::I8 | Scalar::U8 => t.to_i64().iter().map(|x| *x as u8).collect(),
            Scalar::I1 => vec![],
            Scalar::F8E4M3FN | Scalar::F8E5M2 => {
                return Err(format!("error: constants of {} are not supported by the MLIR export", s.name()));
            }
        };
        let value: Attribute<'c> = if s == Scalar::I1 {
            let v: Vec<i32> = t.to_i64().iter().map(|&x| (x != 0) as i32).collect();
            DenseElementsAttribute::bool_values(ty, &v).into()
        } else if n > 1 && bytes.len() > self.opts.resource_above {
            self.resource(ty, hint, bytes)?
        } else if n > 0 && t.to_f64().iter().all(|x| x.to_bits() == t.get_f64(0).to_bits()) {
            // A splat prints as one value.
            let w = bytes.len() / n;
            DenseElementsAttribute::raw_buffer(ty, &bytes[..w]).into()
        } else {
            DenseElementsAttribute::raw_buffer(ty, &bytes).into()
        };
        let r = self.emit("tosa.const", &[], &[ty], &[("values", value)], loc)?;
        Ok(V { v: r[0], t: t.ty.clone() })
    }

    /// A `dense_resource` attribute owning `bytes` (freed with the context).
    pub(super) fn resource(&mut self, ty: Type<'c>, hint: &str, bytes: Vec<u8>) -> R<Attribute<'c>> {
        unsafe extern "C" fn free(user: *mut std::ffi::c_void, _: *const std::ffi::c_void, _: usize, _: usize) {
            drop(unsafe { Box::from_raw(user as *mut Vec<u64>) });
        }
        self.resources += 1;
        let name: String = hint.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
        let name = format!("{}_{}", if name.is_empty() { "w" } else { &name }, self.resources);
        // Held as u64 words, so the blob is 8-byte aligned as MLIR asks.
        let len = bytes.len();
        let mut words = vec![0u64; len.div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_ne_bytes(b);
        }
        let boxed = Box::new(words);
        let ptr = boxed.as_ptr() as *mut std::ffi::c_void;
        let user = Box::into_raw(boxed) as *mut std::ffi::c_void;
        let raw = unsafe {
            mlir_sys::mlirUnmanagedDenseResourceElementsAttrGet(
                ty.to_raw(),
                melior::StringRef::new(&name).to_raw(),
                ptr,
                len,
                8,
                false,
                Some(free),
                user,
            )
        };
        if raw.ptr.is_null() {
            return Err(internal("MLIR refused a dense_resource attribute"));
        }
        Ok(unsafe { Attribute::from_raw(raw) })
    }

    /// A constant of `shape` (all ones but where given) filled with `value`.
    pub(super) fn splat(&mut self, value: f64, s: Scalar, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        self.konst(&Tensor::splat(TensorType::new(shape.to_vec(), s), value), "c", loc)
    }

    /// `tosa.const_shape` of `dims`.
    pub(super) fn shape_const(&self, dims: &[i64], loc: Location<'c>) -> R<Value<'c, 'a>> {
        let text = format!(
            "dense<[{}]> : tensor<{}xindex>",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            dims.len()
        );
        let ty = Type::parse(self.ctx, &format!("!tosa.shape<{}>", dims.len())).ok_or_else(|| internal("!tosa.shape"))?;
        Ok(self.emit("tosa.const_shape", &[], &[ty], &[("values", self.attr(&text)?)], loc)?[0])
    }

    // ------------------------------------------------------------ shapes

    pub(super) fn reshape(&self, x: &V<'c, 'a>, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.shape == shape {
            return Ok(x.clone());
        }
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let s = self.shape_const(&dims, loc)?;
        let ty = types::tensor(self.ctx, &x.t.with_shape(shape.to_vec()))?;
        let r = self.emit("tosa.reshape", &[x.v, s], &[ty], &[], loc)?;
        Ok(V { v: r[0], t: x.t.with_shape(shape.to_vec()) })
    }

    pub(super) fn transpose(&self, x: &V<'c, 'a>, perm: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let shape: Vec<usize> = perm.iter().map(|&p| x.t.shape[p]).collect();
        let text = format!("array<i32: {}>", perm.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "));
        self.op1("tosa.transpose", &[x], x.t.with_shape(shape), &[("perms", self.attr(&text)?)], loc)
    }

    /// `x` with ones prepended up to `rank` (TOSA broadcasts equal ranks only).
    pub(super) fn to_rank(&self, x: &V<'c, 'a>, rank: usize, loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.rank() >= rank {
            return Ok(x.clone());
        }
        let mut shape = vec![1; rank - x.t.rank()];
        shape.extend(&x.t.shape);
        self.reshape(x, &shape, loc)
    }

    /// `x` broadcast to `shape` (reshape, then `tosa.tile`).
    pub(super) fn expand(&self, x: &V<'c, 'a>, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let x = self.to_rank(x, shape.len(), loc)?;
        if x.t.shape == shape {
            return Ok(x);
        }
        let mult: Vec<i64> = x.t.shape.iter().zip(shape).map(|(&a, &b)| if a == b { 1 } else { b as i64 }).collect();
        let m = self.shape_const(&mult, loc)?;
        let t = x.t.with_shape(shape.to_vec());
        let ty = types::tensor(self.ctx, &t)?;
        Ok(V { v: self.emit("tosa.tile", &[x.v, m], &[ty], &[], loc)?[0], t })
    }

    // ------------------------------------------------------------ pointwise

    pub(super) fn unary(&self, name: &str, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        self.op1(name, &[x], x.t.clone(), &[], loc)
    }

    /// A broadcasting TOSA binary op; `elem` is the result element type.
    pub(super) fn binary(&mut self, name: &str, a: &V<'c, 'a>, b: &V<'c, 'a>, elem: ElemType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let shape = broadcast(&a.t.shape, &b.t.shape);
        let a = self.to_rank(a, shape.len(), loc)?;
        let b = self.to_rank(b, shape.len(), loc)?;
        let t = TensorType { shape, elem, encoding: None };
        if name == "tosa.mul" {
            let shift = self.splat(0.0, Scalar::I8, &[1], loc)?;
            return self.op1(name, &[&a, &b, &shift], t, &[], loc);
        }
        self.op1(name, &[&a, &b], t, &[], loc)
    }

    pub(super) fn arith(&mut self, name: &str, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let elem = a.t.elem.clone();
        self.binary(name, a, b, elem, loc)
    }

    pub(super) fn mul_scalar(&mut self, x: &V<'c, 'a>, k: f64, loc: Location<'c>) -> R<V<'c, 'a>> {
        let c = self.splat(k, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.arith("tosa.mul", x, &c, loc)
    }

    pub(super) fn add_scalar(&mut self, x: &V<'c, 'a>, k: f64, loc: Location<'c>) -> R<V<'c, 'a>> {
        let c = self.splat(k, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.arith("tosa.add", x, &c, loc)
    }

    /// Division: `arith.divf` on operands broadcast to one shape (exact,
    /// where a reciprocal and a product would round twice); `tosa.intdiv`
    /// for integers.
    pub(super) fn div(&mut self, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        if !a.t.elem.is_float() {
            return self.arith("tosa.intdiv", a, b, loc);
        }
        let shape = broadcast(&a.t.shape, &b.t.shape);
        let a = self.expand(a, &shape, loc)?;
        let b = self.expand(b, &shape, loc)?;
        self.op1("arith.divf", &[&a, &b], a.t.clone(), &[], loc)
    }

    pub(super) fn clamp(&self, x: &V<'c, 'a>, lo: Option<f64>, hi: Option<f64>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let s = x.t.elem.storage();
        let (lo, hi) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
        let (lo, hi) = if s.is_float() {
            (format!("{} : {}", flt(lo, s), s.name()), format!("{} : {}", flt(hi, s), s.name()))
        } else {
            let (min, max) = match s {
                Scalar::I8 => (-128.0, 127.0),
                Scalar::I16 => (i16::MIN as f64, i16::MAX as f64),
                Scalar::I32 => (i32::MIN as f64, i32::MAX as f64),
                _ => (i64::MIN as f64, i64::MAX as f64),
            };
            let t = types::scalar_text(s);
            (format!("{} : {t}", lo.clamp(min, max) as i64), format!("{} : {t}", hi.clamp(min, max) as i64))
        };
        self.op1("tosa.clamp", &[x], x.t.clone(), &[("min_val", self.attr(&lo)?), ("max_val", self.attr(&hi)?)], loc)
    }

    pub(super) fn select(&mut self, c: &V<'c, 'a>, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let shape = broadcast(&broadcast(&c.t.shape, &a.t.shape), &b.t.shape);
        let (c, a, b) = (self.to_rank(c, shape.len(), loc)?, self.to_rank(a, shape.len(), loc)?, self.to_rank(b, shape.len(), loc)?);
        let t = TensorType { shape, elem: a.t.elem.clone(), encoding: None };
        self.op1("tosa.select", &[&c, &a, &b], t, &[], loc)
    }

    /// `x >= 0 ? x : x * slope`.
    pub(super) fn leaky(&mut self, x: &V<'c, 'a>, slope: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let zero = self.splat(0.0, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        let ge = self.binary("tosa.greater_equal", x, &zero, ElemType::I1, loc)?;
        let neg = self.arith("tosa.mul", x, slope, loc)?;
        self.select(&ge, x, &neg, loc)
    }

    pub(super) fn scalar_fn(&mut self, u: Unary, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let name = match u {
            Unary::Neg => {
                let zp = self.splat(0.0, x.t.elem.storage(), &[1], loc)?;
                return self.op1("tosa.negate", &[x, &zp, &zp], x.t.clone(), &[], loc);
            }
            Unary::Relu => return self.clamp(x, Some(0.0), None, loc),
            Unary::Trunc => {
                let zero = self.splat(0.0, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
                let neg = self.binary("tosa.greater", &zero, x, ElemType::I1, loc)?;
                let c = self.unary("tosa.ceil", x, loc)?;
                let f = self.unary("tosa.floor", x, loc)?;
                return self.select(&neg, &c, &f, loc);
            }
            Unary::Abs => "tosa.abs",
            Unary::Exp => "tosa.exp",
            Unary::Log => "tosa.log",
            Unary::Sqrt => "math.sqrt",
            Unary::Rsqrt => "tosa.rsqrt",
            Unary::Reciprocal => "tosa.reciprocal",
            Unary::Erf => "tosa.erf",
            Unary::Tanh => "tosa.tanh",
            Unary::Sigmoid => "tosa.sigmoid",
            Unary::Floor => "tosa.floor",
            Unary::Ceil => "tosa.ceil",
            Unary::RoundEven => "math.roundeven",
            Unary::Sin => "tosa.sin",
            Unary::Cos => "tosa.cos",
        };
        self.unary(name, x, loc)
    }

    pub(super) fn binary_fn(&mut self, b: Binary, x: &V<'c, 'a>, y: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        match b {
            Binary::Add => self.arith("tosa.add", x, y, loc),
            Binary::Sub => self.arith("tosa.sub", x, y, loc),
            Binary::Mul => self.arith("tosa.mul", x, y, loc),
            Binary::Div => self.div(x, y, loc),
            Binary::Max => self.arith("tosa.maximum", x, y, loc),
            Binary::Min => self.arith("tosa.minimum", x, y, loc),
            Binary::Pow => self.arith("tosa.pow", x, y, loc),
            Binary::Equal => self.binary("tosa.equal", x, y, ElemType::I1, loc),
            Binary::Greater => self.binary("tosa.greater", x, y, ElemType::I1, loc),
            Binary::Less => self.binary("tosa.greater", y, x, ElemType::I1, loc),
        }
    }

    pub(super) fn activation(&mut self, a: Activation, attrs: &Attrs, x: &V<'c, 'a>, extra: Option<&V<'c, 'a>>, loc: Location<'c>) -> R<V<'c, 'a>> {
        match a {
            Activation::Gelu => {
                let inner = if matches!(attrs.get("approximate"), Some(Attr::Str(s)) if s == "tanh") {
                    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                    let x2 = self.arith("tosa.mul", x, x, loc)?;
                    let x3 = self.arith("tosa.mul", &x2, x, loc)?;
                    let k = self.mul_scalar(&x3, 0.044715, loc)?;
                    let s = self.arith("tosa.add", x, &k, loc)?;
                    let s = self.mul_scalar(&s, (2.0 / std::f64::consts::PI).sqrt(), loc)?;
                    self.unary("tosa.tanh", &s, loc)?
                } else {
                    let s = self.mul_scalar(x, std::f64::consts::FRAC_1_SQRT_2, loc)?;
                    self.unary("tosa.erf", &s, loc)?
                };
                let one = self.add_scalar(&inner, 1.0, loc)?;
                let h = self.mul_scalar(x, 0.5, loc)?;
                self.arith("tosa.mul", &h, &one, loc)
            }
            Activation::Silu => {
                let s = self.unary("tosa.sigmoid", x, loc)?;
                self.arith("tosa.mul", x, &s, loc)
            }
            Activation::HardSigmoid | Activation::HardSwish => {
                let (alpha, beta) = match a {
                    Activation::HardSigmoid => (float(attrs, "alpha").unwrap_or(0.2), float(attrs, "beta").unwrap_or(0.5)),
                    _ => (1.0 / 6.0, 0.5),
                };
                let s = self.mul_scalar(x, alpha, loc)?;
                let s = self.add_scalar(&s, beta, loc)?;
                let s = self.clamp(&s, Some(0.0), Some(1.0), loc)?;
                if a == Activation::HardSwish { self.arith("tosa.mul", x, &s, loc) } else { Ok(s) }
            }
            Activation::LeakyRelu => {
                let alpha = float(attrs, "alpha").unwrap_or(0.01);
                let slope = self.splat(alpha, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
                self.leaky(x, &slope, loc)
            }
            Activation::Clip => self.clamp(x, float(attrs, "min"), float(attrs, "max"), loc),
            Activation::Prelu => {
                let slope = extra.ok_or_else(|| internal("prelu without a slope"))?.clone();
                self.leaky(x, &slope, loc)
            }
        }
    }

}
