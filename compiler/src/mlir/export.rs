//! `.air` to MLIR: each function becomes a `func.func` of TOSA ops, built
//! operation by operation with melior's `OperationBuilder`, then verified
//! by MLIR before it is printed.
//!
//! What maps where (docs/mlir.md has the table): pointwise ops to TOSA
//! elementwise ops (float division to `arith.divf` and square root to
//! `math.sqrt`, which TOSA lacks); activations, normalizations and
//! reductions to short TOSA compositions; convolutions and pools to their
//! NHWC TOSA ops between transposes; matmuls to 3-D `tosa.matmul` between
//! reshapes; quantize/dequantize to `quant.qcast`/`quant.dcast`; an
//! integer op (`quant.conv2d`, ...) to exactly what it means — dequantize,
//! the float op, clamp, quantize; a fused op to its core and its epilogue
//! region's ops. Constants become `tosa.const` with `dense` values, or
//! `dense_resource` blobs above a size; quantized constants are their
//! stored integers behind a `quant.scast`.
//!
//! Invariant: the exported function computes what the aoc function
//! computes (same op order; only compositions round differently), and
//! nothing but MLIR-verified text leaves here.

use super::Mlir;
use super::types;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::interp::WeightSource;
use aoc_ir::ops::kind::{Activation, Conv, Form, Movement, Norm, OpKind, Pointwise, Pool, Reduce, Unary, Binary};
use aoc_ir::types::{ElemType, Scalar, TensorType};
use aoc_ir::{Func, Module, OpId, Opcode, Tensor, ValueId};
use melior::Context;
use melior::ir::attribute::{DenseElementsAttribute, StringAttribute, TypeAttribute};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::r#type::FunctionType;
use melior::ir::RegionLike;
use melior::ir::{Attribute, Block, BlockRef, Identifier, Location, Region, Type, TypeLike, Value};
use std::collections::HashMap;

/// What `aoc export --format mlir` may choose.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Constants of more bytes than this become `dense_resource` blobs
    /// (printed once, in the file's resource section) instead of `dense`.
    pub resource_above: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions { resource_above: 1 << 20 }
    }
}

/// Exports `module` as MLIR text. `file` and `source` (the `.air` text)
/// give the ops' `file:line:col` locations; `weights` provides the
/// constants the module keeps in weights files.
pub fn export_module(
    module: &Module,
    weights: &dyn WeightSource,
    file: &str,
    source: Option<&str>,
    opts: &ExportOptions,
) -> Result<String, String> {
    let m = Mlir::new();
    let ctx = &m.ctx;
    let mmod = melior::ir::Module::new(Location::new(ctx, file, 1, 1));
    for f in &module.funcs {
        let mut cx = Ex { ctx, file, source, weights, opts, block: None, vals: HashMap::new(), resources: 0 };
        cx.func(&mmod, f).map_err(|e| {
            let d = m.take_diagnostics();
            if d.is_empty() { e } else { format!("{e}\n{d}") }
        })?;
    }
    if !mmod.as_operation().verify() {
        return Err(format!(
            "error: the MLIR module aoc built does not verify; this is a bug in the exporter, please report it\n{}",
            m.take_diagnostics()
        ));
    }
    // With locations: `loc(...)` carries each op's `.air` line and name.
    let flags = melior::ir::operation::OperationPrintingFlags::new().enable_debug_info(true, false);
    let text = mmod.as_operation().to_string_with_flags(flags).map_err(internal)?;
    Ok(format!("{}\n", text.trim_end()))
}

/// A value being built, with its aoc type (shapes drive every composition).
#[derive(Clone)]
struct V<'c, 'a> {
    v: Value<'c, 'a>,
    t: TensorType,
}

struct Ex<'c, 'a, 'w> {
    ctx: &'c Context,
    file: &'w str,
    source: Option<&'w str>,
    weights: &'w dyn WeightSource,
    opts: &'w ExportOptions,
    block: Option<BlockRef<'c, 'a>>,
    vals: HashMap<ValueId, V<'c, 'a>>,
    resources: usize,
}

type R<T> = Result<T, String>;

fn internal(what: impl std::fmt::Display) -> String {
    format!("error: internal error in the MLIR exporter: {what} (please report)")
}

/// A float as MLIR attribute text (always with a `.`; infinities as the
/// type's largest finite value, which is what clamps need).
fn flt(v: f64, s: Scalar) -> String {
    let v = if v.is_infinite() {
        let max = match s {
            Scalar::F16 => 65504.0,
            Scalar::BF16 => 3.3895313892515355e38,
            Scalar::F64 => f64::MAX,
            _ => f32::MAX as f64,
        };
        max.copysign(v)
    } else {
        v
    };
    format!("{v:.17e}")
}

fn mlir_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:02X}")),
        }
    }
    out.push('"');
    out
}

fn ints(attrs: &Attrs, name: &str) -> Vec<i64> {
    match attrs.get(name) {
        Some(Attr::Ints(v)) => v.clone(),
        _ => vec![],
    }
}

fn int(attrs: &Attrs, name: &str, default: i64) -> i64 {
    match attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

fn float(attrs: &Attrs, name: &str) -> Option<f64> {
    match attrs.get(name) {
        Some(Attr::Float(v)) => Some(*v),
        _ => None,
    }
}

fn boolean(attrs: &Attrs, name: &str) -> bool {
    matches!(attrs.get(name), Some(Attr::Bool(true)))
}

fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let y = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            if x == 1 { y } else { x }
        })
        .collect()
}

fn norm_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 { (axis + rank as i64).max(0) as usize } else { axis as usize }
}

impl<'c, 'a, 'w> Ex<'c, 'a, 'w> {
    fn block(&self) -> BlockRef<'c, 'a> {
        self.block.expect("a function body is being built")
    }

    fn attr(&self, text: &str) -> R<Attribute<'c>> {
        Attribute::parse(self.ctx, text).ok_or_else(|| internal(format!("MLIR does not parse the attribute `{text}`")))
    }

    fn loc(&self, l: &aoc_ir::Location) -> Location<'c> {
        let base = match (l.span, self.source) {
            (Some(span), Some(src)) if (span.start as usize) <= src.len() => {
                let (line, col) = aoc_ir::diag::line_col(src, span.start as usize);
                Location::new(self.ctx, self.file, line, col)
            }
            _ => Location::unknown(self.ctx),
        };
        match &l.name {
            Some(n) => Location::name(self.ctx, n, base),
            None => base,
        }
    }

    /// Appends one operation and returns its results.
    fn emit(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        results: &[Type<'c>],
        attrs: &[(&str, Attribute<'c>)],
        loc: Location<'c>,
    ) -> R<Vec<Value<'c, 'a>>> {
        let attrs: Vec<(Identifier<'c>, Attribute<'c>)> =
            attrs.iter().map(|(n, a)| (Identifier::new(self.ctx, n), *a)).collect();
        let op = OperationBuilder::new(name, loc)
            .add_operands(operands)
            .add_results(results)
            .add_attributes(&attrs)
            .build()
            .map_err(|e| internal(format!("{name}: {e}")))?;
        let op = self.block().append_operation(op);
        (0..op.result_count())
            .map(|i| op.result(i).map(Into::into).map_err(|e| internal(e)))
            .collect()
    }

    /// One op with one result of type `t`.
    fn op1(&self, name: &str, operands: &[&V<'c, 'a>], t: TensorType, attrs: &[(&str, Attribute<'c>)], loc: Location<'c>) -> R<V<'c, 'a>> {
        let ty = types::tensor(self.ctx, &t)?;
        let ops: Vec<Value<'c, 'a>> = operands.iter().map(|v| v.v).collect();
        let r = self.emit(name, &ops, &[ty], attrs, loc)?;
        Ok(V { v: r[0], t })
    }

    // ------------------------------------------------------------ constants

    /// `tosa.const` holding `t` (quantized: its stored integers, then
    /// `quant.scast` to the quantized type).
    fn konst(&mut self, t: &Tensor, hint: &str, loc: Location<'c>) -> R<V<'c, 'a>> {
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
    fn resource(&mut self, ty: Type<'c>, hint: &str, bytes: Vec<u8>) -> R<Attribute<'c>> {
        unsafe extern "C" fn free(user: *mut std::ffi::c_void, _: *const std::ffi::c_void, _: usize, _: usize) {
            drop(unsafe { Box::from_raw(user as *mut Vec<u8>) });
        }
        self.resources += 1;
        let name: String = hint.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
        let name = format!("{}_{}", if name.is_empty() { "w" } else { &name }, self.resources);
        let boxed = Box::new(bytes);
        let (ptr, len) = (boxed.as_ptr() as *mut std::ffi::c_void, boxed.len());
        let user = Box::into_raw(boxed) as *mut std::ffi::c_void;
        let raw = unsafe {
            mlir_sys::mlirUnmanagedDenseResourceElementsAttrGet(
                ty.to_raw(),
                melior::StringRef::new(&name).to_raw(),
                ptr,
                len,
                16,
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
    fn splat(&mut self, value: f64, s: Scalar, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        self.konst(&Tensor::splat(TensorType::new(shape.to_vec(), s), value), "c", loc)
    }

    /// `tosa.const_shape` of `dims`.
    fn shape_const(&self, dims: &[i64], loc: Location<'c>) -> R<Value<'c, 'a>> {
        let text = format!(
            "dense<[{}]> : tensor<{}xindex>",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            dims.len()
        );
        let ty = Type::parse(self.ctx, &format!("!tosa.shape<{}>", dims.len())).ok_or_else(|| internal("!tosa.shape"))?;
        Ok(self.emit("tosa.const_shape", &[], &[ty], &[("values", self.attr(&text)?)], loc)?[0])
    }

    // ------------------------------------------------------------ shapes

    fn reshape(&self, x: &V<'c, 'a>, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.shape == shape {
            return Ok(x.clone());
        }
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let s = self.shape_const(&dims, loc)?;
        let ty = types::tensor(self.ctx, &x.t.with_shape(shape.to_vec()))?;
        let r = self.emit("tosa.reshape", &[x.v, s], &[ty], &[], loc)?;
        Ok(V { v: r[0], t: x.t.with_shape(shape.to_vec()) })
    }

    fn transpose(&self, x: &V<'c, 'a>, perm: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let shape: Vec<usize> = perm.iter().map(|&p| x.t.shape[p]).collect();
        let text = format!("array<i32: {}>", perm.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "));
        self.op1("tosa.transpose", &[x], x.t.with_shape(shape), &[("perms", self.attr(&text)?)], loc)
    }

    /// `x` with ones prepended up to `rank` (TOSA broadcasts equal ranks only).
    fn to_rank(&self, x: &V<'c, 'a>, rank: usize, loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.rank() >= rank {
            return Ok(x.clone());
        }
        let mut shape = vec![1; rank - x.t.rank()];
        shape.extend(&x.t.shape);
        self.reshape(x, &shape, loc)
    }

    /// `x` broadcast to `shape` (reshape, then `tosa.tile`).
    fn expand(&self, x: &V<'c, 'a>, shape: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
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

    fn unary(&self, name: &str, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        self.op1(name, &[x], x.t.clone(), &[], loc)
    }

    /// A broadcasting TOSA binary op; `elem` is the result element type.
    fn binary(&mut self, name: &str, a: &V<'c, 'a>, b: &V<'c, 'a>, elem: ElemType, loc: Location<'c>) -> R<V<'c, 'a>> {
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

    fn arith(&mut self, name: &str, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let elem = a.t.elem.clone();
        self.binary(name, a, b, elem, loc)
    }

    fn mul_scalar(&mut self, x: &V<'c, 'a>, k: f64, loc: Location<'c>) -> R<V<'c, 'a>> {
        let c = self.splat(k, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.arith("tosa.mul", x, &c, loc)
    }

    fn add_scalar(&mut self, x: &V<'c, 'a>, k: f64, loc: Location<'c>) -> R<V<'c, 'a>> {
        let c = self.splat(k, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.arith("tosa.add", x, &c, loc)
    }

    /// Division: `arith.divf` on operands broadcast to one shape (exact,
    /// where a reciprocal and a product would round twice); `tosa.intdiv`
    /// for integers.
    fn div(&mut self, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        if !a.t.elem.is_float() {
            return self.arith("tosa.intdiv", a, b, loc);
        }
        let shape = broadcast(&a.t.shape, &b.t.shape);
        let a = self.expand(a, &shape, loc)?;
        let b = self.expand(b, &shape, loc)?;
        self.op1("arith.divf", &[&a, &b], a.t.clone(), &[], loc)
    }

    fn clamp(&self, x: &V<'c, 'a>, lo: Option<f64>, hi: Option<f64>, loc: Location<'c>) -> R<V<'c, 'a>> {
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

    fn select(&mut self, c: &V<'c, 'a>, a: &V<'c, 'a>, b: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let shape = broadcast(&broadcast(&c.t.shape, &a.t.shape), &b.t.shape);
        let (c, a, b) = (self.to_rank(c, shape.len(), loc)?, self.to_rank(a, shape.len(), loc)?, self.to_rank(b, shape.len(), loc)?);
        let t = TensorType { shape, elem: a.t.elem.clone(), encoding: None };
        self.op1("tosa.select", &[&c, &a, &b], t, &[], loc)
    }

    /// `x >= 0 ? x : x * slope`.
    fn leaky(&mut self, x: &V<'c, 'a>, slope: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        let zero = self.splat(0.0, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        let ge = self.binary("tosa.greater_equal", x, &zero, ElemType::I1, loc)?;
        let neg = self.arith("tosa.mul", x, slope, loc)?;
        self.select(&ge, x, &neg, loc)
    }

    fn scalar_fn(&mut self, u: Unary, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
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
        };
        self.unary(name, x, loc)
    }

    fn binary_fn(&mut self, b: Binary, x: &V<'c, 'a>, y: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
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

    fn activation(&mut self, a: Activation, attrs: &Attrs, x: &V<'c, 'a>, extra: Option<&V<'c, 'a>>, loc: Location<'c>) -> R<V<'c, 'a>> {
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

    // ------------------------------------------------------------ reductions

    /// `tosa.reduce_*` over each of `axes` (kept as size 1).
    fn reduce(&self, name: &str, x: &V<'c, 'a>, axes: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let mut v = x.clone();
        for &a in axes {
            let mut shape = v.t.shape.clone();
            shape[a] = 1;
            v = self.op1(name, &[&v], v.t.with_shape(shape), &[("axis", self.attr(&format!("{a} : i32"))?)], loc)?;
        }
        Ok(v)
    }

    fn mean(&mut self, x: &V<'c, 'a>, axes: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let s = self.reduce("tosa.reduce_sum", x, axes, loc)?;
        let n: usize = axes.iter().map(|&a| x.t.shape[a]).product();
        let c = self.splat(n as f64, x.t.elem.storage(), &vec![1; x.t.rank()], loc)?;
        self.div(&s, &c, loc)
    }

    fn softmax(&mut self, x: &V<'c, 'a>, axis: usize, log: bool, loc: Location<'c>) -> R<V<'c, 'a>> {
        let m = self.reduce("tosa.reduce_max", x, &[axis], loc)?;
        let d = self.arith("tosa.sub", x, &m, loc)?;
        let e = self.unary("tosa.exp", &d, loc)?;
        let s = self.reduce("tosa.reduce_sum", &e, &[axis], loc)?;
        if log {
            let l = self.unary("tosa.log", &s, loc)?;
            self.arith("tosa.sub", &d, &l, loc)
        } else {
            self.div(&e, &s, loc)
        }
    }

    // ------------------------------------------------------------ compute

    /// Numpy-style matmul of ranks >= 2 as 3-D `tosa.matmul`.
    fn matmul(&mut self, a: &V<'c, 'a>, b: &V<'c, 'a>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let zp = self.splat(0.0, a.t.elem.storage(), &[1], loc)?;
        let (ra, rb) = (a.t.rank(), b.t.rank());
        if ra < 2 || rb < 2 {
            return Err("error: matmuls of 1-D operands are not supported by the MLIR export".into());
        }
        let (m, k, n) = (a.t.shape[ra - 2], a.t.shape[ra - 1], b.t.shape[rb - 1]);
        let elem = a.t.elem.clone();
        let r = if rb == 2 {
            let batch: usize = a.t.shape[..ra - 2].iter().product();
            let a3 = self.reshape(a, &[1, batch * m, k], loc)?;
            let b3 = self.reshape(b, &[1, k, n], loc)?;
            self.op1("tosa.matmul", &[&a3, &b3, &zp, &zp], TensorType { shape: vec![1, batch * m, n], elem, encoding: None }, &[], loc)?
        } else {
            let batch_shape = broadcast(&a.t.shape[..ra - 2], &b.t.shape[..rb - 2]);
            let batch: usize = batch_shape.iter().product();
            let mut sa = batch_shape.clone();
            sa.extend([m, k]);
            let mut sb = batch_shape.clone();
            sb.extend([k, n]);
            let a3 = self.expand(a, &sa, loc)?;
            let b3 = self.expand(b, &sb, loc)?;
            let a3 = self.reshape(&a3, &[batch, m, k], loc)?;
            let b3 = self.reshape(&b3, &[batch, k, n], loc)?;
            self.op1("tosa.matmul", &[&a3, &b3, &zp, &zp], TensorType { shape: vec![batch, m, n], elem, encoding: None }, &[], loc)?
        };
        self.reshape(&r, out, loc)
    }

    fn gemm(&mut self, attrs: &Attrs, a: &V<'c, 'a>, b: &V<'c, 'a>, c: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let a = if boolean(attrs, "trans_a") { self.transpose(a, &[1, 0], loc)? } else { a.clone() };
        let b = if boolean(attrs, "trans_b") { self.transpose(b, &[1, 0], loc)? } else { b.clone() };
        let mut y = self.matmul(&a, &b, out, loc)?;
        let alpha = float(attrs, "alpha").unwrap_or(1.0);
        if alpha != 1.0 {
            y = self.mul_scalar(&y, alpha, loc)?;
        }
        if let Some(c) = c {
            let beta = float(attrs, "beta").unwrap_or(1.0);
            let c = if beta != 1.0 { self.mul_scalar(c, beta, loc)? } else { c.clone() };
            y = self.arith("tosa.add", &y, &c, loc)?;
        }
        Ok(y)
    }

    /// TOSA pads `[top, bottom, left, right]` giving exactly `out` rows and
    /// columns (TOSA wants the window arithmetic to divide evenly; aoc
    /// floors, or ceils for `ceil_mode`): the bottom and right pads are
    /// adjusted, and an input with rows no window reads is cropped first.
    #[allow(clippy::too_many_arguments)]
    fn window(
        &self,
        x: &V<'c, 'a>,
        kernel: [usize; 2],
        strides: [usize; 2],
        dil: [usize; 2],
        pads: &[i64],
        out: [usize; 2],
        loc: Location<'c>,
    ) -> R<(V<'c, 'a>, [i64; 4])> {
        // x is NHWC here.
        let mut tosa = [0i64; 4];
        let mut crop = [x.t.shape[1], x.t.shape[2]];
        for d in 0..2 {
            let size = x.t.shape[1 + d] as i64;
            let begin = pads.get(d).copied().unwrap_or(0);
            let span = (kernel[d] as i64 - 1) * dil[d] as i64 + 1;
            let end = (out[d] as i64 - 1) * strides[d] as i64 + span - size - begin;
            if end < 0 {
                crop[d] = (size + end) as usize;
                tosa[2 * d + 1] = 0;
            } else {
                tosa[2 * d + 1] = end;
            }
            tosa[2 * d] = begin;
        }
        let x = if crop != [x.t.shape[1], x.t.shape[2]] {
            let shape = vec![x.t.shape[0], crop[0], crop[1], x.t.shape[3]];
            let start = self.shape_const(&[0, 0, 0, 0], loc)?;
            let size = self.shape_const(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), loc)?;
            let t = x.t.with_shape(shape);
            let ty = types::tensor(self.ctx, &t)?;
            V { v: self.emit("tosa.slice", &[x.v, start, size], &[ty], &[], loc)?[0], t }
        } else {
            x.clone()
        };
        Ok((x, tosa))
    }

    fn arr(&self, v: &[i64]) -> R<Attribute<'c>> {
        self.attr(&format!("array<i64: {}>", v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")))
    }

    fn acc(&self, s: Scalar) -> R<Attribute<'c>> {
        let t = if s.is_float() { s.name().to_string() } else { "i32".to_string() };
        Ok(TypeAttribute::new(Type::parse(self.ctx, &t).ok_or_else(|| internal("acc type"))?).into())
    }

    /// `core.conv2d` (NCHW, OIHW) as `tosa.conv2d` or `tosa.depthwise_conv2d`.
    fn conv(&mut self, attrs: &Attrs, x: &V<'c, 'a>, w: &V<'c, 'a>, b: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        if x.t.rank() != 4 {
            return Err("error: only 2-D convolutions (rank-4 tensors) map to TOSA".into());
        }
        let s = x.t.elem.storage();
        let groups = int(attrs, "groups", 1) as usize;
        let (cin, cout, kh, kw) = (x.t.shape[1], w.t.shape[0], w.t.shape[2], w.t.shape[3]);
        let strides = ints(attrs, "strides");
        let dil = ints(attrs, "dilations");
        let pads = ints(attrs, "pads");
        let xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        let st = [strides[0] as usize, strides[1] as usize];
        let dl = [dil[0] as usize, dil[1] as usize];
        let (xs, pad) = self.window(&xs, [kh, kw], st, dl, &[pads[0], pads[1]], [out[2], out[3]], loc)?;
        let bias = match b {
            Some(b) => b.clone(),
            None => self.splat(0.0, s, &[cout], loc)?,
        };
        let zp = self.splat(0.0, s, &[1], loc)?;
        let nhwc = vec![out[0], out[2], out[3], out[1]];
        let t = x.t.with_shape(nhwc);
        let common = [
            ("pad", self.arr(&pad)?),
            ("stride", self.arr(&strides)?),
            ("dilation", self.arr(&dil)?),
            ("acc_type", self.acc(s)?),
        ];
        let y = if groups == 1 {
            let wt = self.transpose(w, &[0, 2, 3, 1], loc)?;
            self.op1("tosa.conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &common, loc)?
        } else if groups == cin && cout % cin == 0 && w.t.shape[1] == 1 {
            let mult = cout / cin;
            let wr = self.reshape(w, &[cin, mult, kh, kw], loc)?;
            let wt = self.transpose(&wr, &[2, 3, 0, 1], loc)?;
            self.op1("tosa.depthwise_conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &common, loc)?
        } else {
            return Err(format!("error: grouped convolutions (groups = {groups}, not depthwise) are not supported by the MLIR export"));
        };
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    fn conv_transpose(&mut self, attrs: &Attrs, x: &V<'c, 'a>, w: &V<'c, 'a>, b: Option<&V<'c, 'a>>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        let s = x.t.elem.storage();
        if int(attrs, "groups", 1) != 1 || ints(attrs, "dilations").iter().any(|&d| d != 1) {
            return Err("error: grouped or dilated transposed convolutions are not supported by the MLIR export".into());
        }
        let pads = ints(attrs, "pads");
        let op = ints(attrs, "output_padding");
        let out_pad = [-pads[0], -pads[2] + op.first().copied().unwrap_or(0), -pads[1], -pads[3] + op.get(1).copied().unwrap_or(0)];
        let xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        let wt = self.transpose(w, &[1, 2, 3, 0], loc)?;
        let cout = wt.t.shape[0];
        let bias = match b {
            Some(b) => b.clone(),
            None => self.splat(0.0, s, &[cout], loc)?,
        };
        let zp = self.splat(0.0, s, &[1], loc)?;
        let t = x.t.with_shape(vec![out[0], out[2], out[3], out[1]]);
        let attrs = [("out_pad", self.arr(&out_pad)?), ("stride", self.arr(&ints(attrs, "strides"))?), ("acc_type", self.acc(s)?)];
        let y = self.op1("tosa.transpose_conv2d", &[&xs, &wt, &bias, &zp, &zp], t, &attrs, loc)?;
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    fn pool(&mut self, p: Pool, attrs: &Attrs, x: &V<'c, 'a>, out: &[usize], loc: Location<'c>) -> R<V<'c, 'a>> {
        match p {
            Pool::GlobalAvg | Pool::GlobalMax => {
                let axes: Vec<usize> = (2..x.t.rank()).collect();
                return if p == Pool::GlobalAvg { self.mean(x, &axes, loc) } else { self.reduce("tosa.reduce_max", x, &axes, loc) };
            }
            Pool::Max | Pool::Avg => {}
        }
        if x.t.rank() != 4 {
            return Err("error: only 2-D pools (rank-4 tensors) map to TOSA".into());
        }
        if ints(attrs, "dilations").iter().any(|&d| d != 1) {
            return Err("error: dilated pools are not supported by TOSA".into());
        }
        let k = ints(attrs, "kernel");
        let strides = ints(attrs, "strides");
        let mut pads = ints(attrs, "pads");
        let mut xs = self.transpose(x, &[0, 2, 3, 1], loc)?;
        if p == Pool::Avg && boolean(attrs, "count_include_pad") && pads.iter().any(|&p| p != 0) {
            // TOSA leaves padding out of the count: pad explicitly with zeros.
            let padding = [0, 0, pads[0], pads[2], pads[1], pads[3], 0, 0];
            let sh = self.shape_const(&padding, loc)?;
            let pc = self.splat(0.0, xs.t.elem.storage(), &[1], loc)?;
            let shape = vec![xs.t.shape[0], xs.t.shape[1] + (pads[0] + pads[2]) as usize, xs.t.shape[2] + (pads[1] + pads[3]) as usize, xs.t.shape[3]];
            let t = xs.t.with_shape(shape);
            let ty = types::tensor(self.ctx, &t)?;
            xs = V { v: self.emit("tosa.pad", &[xs.v, sh, pc.v], &[ty], &[], loc)?[0], t };
            pads = vec![0, 0, 0, 0];
        }
        let (xs, pad) = self.window(&xs, [k[0] as usize, k[1] as usize], [strides[0] as usize, strides[1] as usize], [1, 1], &[pads[0], pads[1]], [out[2], out[3]], loc)?;
        let t = x.t.with_shape(vec![out[0], out[2], out[3], out[1]]);
        let common = [("kernel", self.arr(&k)?), ("stride", self.arr(&strides)?), ("pad", self.arr(&pad)?)];
        let y = if p == Pool::Max {
            self.op1("tosa.max_pool2d", &[&xs], t, &common, loc)?
        } else {
            let s = x.t.elem.storage();
            let zp = self.splat(0.0, s, &[1], loc)?;
            let mut attrs = common.to_vec();
            attrs.push(("acc_type", self.acc(s)?));
            self.op1("tosa.avg_pool2d", &[&xs, &zp, &zp], t, &attrs, loc)?
        };
        self.transpose(&y, &[0, 3, 1, 2], loc)
    }

    // ------------------------------------------------------------ quant

    fn dcast(&self, x: &V<'c, 'a>, loc: Location<'c>) -> R<V<'c, 'a>> {
        match &x.t.elem {
            ElemType::Quant(q) => {
                let t = x.t.with_elem(q.expressed);
                self.op1("quant.dcast", &[x], t, &[], loc)
            }
            ElemType::Scalar(_) => Ok(x.clone()),
        }
    }

    fn qcast(&self, x: &V<'c, 'a>, t: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        self.op1("quant.qcast", &[x], t.clone(), &[], loc)
    }

    // ------------------------------------------------------------ functions

    fn func(&mut self, mmod: &'a melior::ir::Module<'c>, f: &Func) -> R<()> {
        let ctx = self.ctx;
        let floc = self.loc(&f.loc);
        let mut args = vec![];
        for &p in f.params() {
            args.push((types::tensor(ctx, f.ty(p))?, self.loc(&f.values[p].loc)));
        }
        let results: Vec<Type<'c>> = f.result_types.iter().map(|t| types::tensor(ctx, t)).collect::<R<_>>()?;
        let arg_types: Vec<Type<'c>> = args.iter().map(|a| a.0).collect();
        let fty = FunctionType::new(ctx, &arg_types, &results);
        let names = (0..f.params().len()).map(|i| format!("{{aoc.name = {}}}", mlir_string(f.param_name(i)))).collect::<Vec<_>>();
        let rnames = (0..f.results().len()).map(|i| format!("{{aoc.name = {}}}", mlir_string(f.result_name(i)))).collect::<Vec<_>>();
        let region = Region::new();
        region.append_block(Block::new(&args));
        let op = OperationBuilder::new("func.func", floc)
            .add_attributes(&[
                (Identifier::new(ctx, "sym_name"), StringAttribute::new(ctx, &f.name).into()),
                (Identifier::new(ctx, "function_type"), TypeAttribute::new(fty.into()).into()),
                (Identifier::new(ctx, "arg_attrs"), self.attr(&format!("[{}]", names.join(", ")))?),
                (Identifier::new(ctx, "res_attrs"), self.attr(&format!("[{}]", rnames.join(", ")))?),
            ])
            .add_regions([region])
            .build()
            .map_err(internal)?;
        let op = mmod.body().append_operation(op);
        let block = op.region(0).map_err(internal)?.first_block().ok_or_else(|| internal("func.func without a block"))?;
        self.block = Some(block);
        for (i, &p) in f.params().iter().enumerate() {
            let v: Value<'c, 'a> = block.argument(i).map_err(internal)?.into();
            self.vals.insert(p, V { v, t: f.ty(p).clone() });
        }
        for &op in &f.body.ops {
            self.op(f, op)?;
        }
        let rets: Vec<Value<'c, 'a>> = f.results().iter().map(|r| self.val(*r).map(|v| v.v)).collect::<R<_>>()?;
        self.emit("func.return", &rets, &[], &[], self.loc(&f.body.terminator_loc))?;
        Ok(())
    }

    fn val(&self, v: ValueId) -> R<V<'c, 'a>> {
        self.vals.get(&v).cloned().ok_or_else(|| internal(format!("value {v:?} used before it was exported")))
    }

    /// Exports one op, recording its results.
    fn op(&mut self, f: &Func, id: OpId) -> R<()> {
        let op = &f.ops[id];
        let loc = self.loc(&op.loc);
        let at = {
            let mut s = op.opcode.name().to_string();
            if let (Some(span), Some(src)) = (op.loc.span, self.source) {
                let (l, c) = aoc_ir::diag::line_col(src, (span.start as usize).min(src.len()));
                s = format!("{}:{l}:{c}: {s}", self.file);
            }
            s
        };
        let operands: Vec<V<'c, 'a>> = op.operands.iter().map(|&v| self.val(v)).collect::<R<_>>()?;
        let out = f.ty(op.results[0]).clone();
        let attrs = &op.attrs;
        let unsupported = |why: &str| Err(format!("error: {}: not supported by the MLIR export ({why})", at));
        let need = |i: usize| operands.get(i).cloned().ok_or_else(|| internal(format!("{} without operand {i}", op.opcode.name())));
        let result = match op.opcode.kind() {
            OpKind::Constant => {
                let t = aoc_ir::interp::eval_op(Opcode::Const, &[], attrs, std::slice::from_ref(&out), self.weights)
                    .map_err(|m| format!("error: {}: {m}", at))?
                    .remove(0);
                let hint = match attrs.get("value") {
                    Some(Attr::Const(aoc_ir::ConstValue::Weight(w))) => w.key.clone(),
                    _ => f.name_of(op.results[0]).to_string(),
                };
                self.konst(&t, &hint, loc)?
            }
            OpKind::Unary(u) => self.scalar_fn(u, &need(0)?, loc)?,
            OpKind::Binary(b) => self.binary_fn(b, &need(0)?, &need(1)?, loc)?,
            OpKind::Activation(a) => self.activation(a, attrs, &need(0)?, operands.get(1), loc)?,
            OpKind::Pointwise(p) => match p {
                Pointwise::Cast => {
                    let x = need(0)?;
                    let x = if x.t.elem.is_float() && !out.elem.is_float() { self.scalar_fn(Unary::Trunc, &x, loc)? } else { x };
                    self.op1("tosa.cast", &[&x], out.clone(), &[], loc)?
                }
                Pointwise::Where => self.select(&need(0)?, &need(1)?, &need(2)?, loc)?,
                Pointwise::Quantize => self.qcast(&need(0)?, &out, loc)?,
                Pointwise::Dequantize => self.dcast(&need(0)?, loc)?,
                Pointwise::Requantize => {
                    let d = self.dcast(&need(0)?, loc)?;
                    self.qcast(&d, &out, loc)?
                }
                Pointwise::BatchNorm => {
                    let x = need(0)?;
                    let mut shape = vec![1; x.t.rank()];
                    shape[1] = x.t.shape[1];
                    let p: Vec<V> = (1..5).map(|i| self.reshape(&need(i)?, &shape, loc)).collect::<R<_>>()?;
                    let d = self.arith("tosa.sub", &x, &p[2], loc)?;
                    let v = self.add_scalar(&p[3], float(attrs, "epsilon").unwrap_or(1e-5), loc)?;
                    let sd = self.unary("math.sqrt", &v, loc)?;
                    let n = self.div(&d, &sd, loc)?;
                    let n = self.arith("tosa.mul", &n, &p[0], loc)?;
                    self.arith("tosa.add", &n, &p[1], loc)?
                }
                Pointwise::QuantAdd => {
                    let a = self.dcast(&need(0)?, loc)?;
                    let b = self.dcast(&need(1)?, loc)?;
                    let s = self.arith("tosa.add", &a, &b, loc)?;
                    self.requant(attrs, &s, &out, loc)?
                }
                Pointwise::Fused => {
                    let first = need(0)?;
                    self.epilogue(f, id, first, &op.operands[1..])?
                }
            },
            OpKind::Norm(n) => {
                let x = need(0)?;
                let r = x.t.rank();
                match n {
                    Norm::Softmax | Norm::LogSoftmax => {
                        let axis = norm_axis(int(attrs, "axis", -1), r);
                        self.softmax(&x, axis, n == Norm::LogSoftmax, loc)?
                    }
                    Norm::LayerNorm => {
                        let axis = norm_axis(int(attrs, "axis", -1), r);
                        let axes: Vec<usize> = (axis..r).collect();
                        let m = self.mean(&x, &axes, loc)?;
                        let d = self.arith("tosa.sub", &x, &m, loc)?;
                        let sq = self.arith("tosa.mul", &d, &d, loc)?;
                        let var = self.mean(&sq, &axes, loc)?;
                        let var = self.add_scalar(&var, float(attrs, "epsilon").unwrap_or(1e-5), loc)?;
                        let sd = self.unary("math.sqrt", &var, loc)?;
                        let y = self.div(&d, &sd, loc)?;
                        let y = self.arith("tosa.mul", &y, &need(1)?, loc)?;
                        match operands.get(2) {
                            Some(b) => self.arith("tosa.add", &y, b, loc)?,
                            None => y,
                        }
                    }
                }
            }
            OpKind::Conv(c, form) => {
                let (x, w) = (need(0)?, need(1)?);
                match (c, form) {
                    (Conv::Winograd, _) => return unsupported("Winograd weights are pre-transformed; export before the optimizer runs"),
                    (Conv::Direct, Form::Float) => self.conv(attrs, &x, &w, operands.get(2), &out.shape, loc)?,
                    (Conv::Transposed, Form::Float) => self.conv_transpose(attrs, &x, &w, operands.get(2), &out.shape, loc)?,
                    (Conv::Direct, Form::Fused) => {
                        let has_bias = boolean(attrs, "bias");
                        let acc = self.conv(attrs, &x, &w, if has_bias { operands.get(2) } else { None }, &out.shape, loc)?;
                        let rest = if has_bias { 3 } else { 2 };
                        self.epilogue(f, id, acc, &op.operands[rest.min(op.operands.len())..])?
                    }
                    (Conv::Direct, Form::Quant) => {
                        let xd = self.dcast(&x, loc)?;
                        let wd = self.dcast(&w, loc)?;
                        let bd = match operands.get(2) {
                            Some(b) => Some(self.dcast(b, loc)?),
                            None => None,
                        };
                        let acc = self.conv(attrs, &xd, &wd, bd.as_ref(), &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                    (Conv::Transposed, _) => return unsupported("fused or integer transposed convolutions"),
                }
            }
            OpKind::MatMul(form) => {
                let (a, b) = (need(0)?, need(1)?);
                match form {
                    Form::Float => self.matmul(&a, &b, &out.shape, loc)?,
                    Form::Fused => {
                        let acc = self.matmul(&a, &b, &out.shape, loc)?;
                        self.epilogue(f, id, acc, &op.operands[2..])?
                    }
                    Form::Quant => {
                        let (ad, bd) = (self.dcast(&a, loc)?, self.dcast(&b, loc)?);
                        let acc = self.matmul(&ad, &bd, &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                }
            }
            OpKind::Gemm(form) => {
                let (a, b) = (need(0)?, need(1)?);
                match form {
                    Form::Float => self.gemm(attrs, &a, &b, operands.get(2), &out.shape, loc)?,
                    Form::Fused => {
                        let has_c = boolean(attrs, "bias");
                        let acc = self.gemm(attrs, &a, &b, if has_c { operands.get(2) } else { None }, &out.shape, loc)?;
                        let rest = if has_c { 3 } else { 2 };
                        self.epilogue(f, id, acc, &op.operands[rest.min(op.operands.len())..])?
                    }
                    Form::Quant => {
                        let (ad, bd) = (self.dcast(&a, loc)?, self.dcast(&b, loc)?);
                        let cd = match operands.get(2) {
                            Some(c) => Some(self.dcast(c, loc)?),
                            None => None,
                        };
                        let acc = self.gemm(attrs, &ad, &bd, cd.as_ref(), &out.shape, loc)?;
                        self.requant(attrs, &acc, &out, loc)?
                    }
                }
            }
            OpKind::Attention => {
                let (q, kt, v) = (need(0)?, need(1)?, need(2)?);
                let mut sshape = q.t.shape.clone();
                let r = sshape.len();
                sshape[r - 1] = kt.t.shape[kt.t.rank() - 1];
                let scores = self.matmul(&q, &kt, &sshape, loc)?;
                let scores = self.epilogue(f, id, scores, &op.operands[3..])?;
                let p = self.softmax(&scores, r - 1, false, loc)?;
                self.matmul(&p, &v, &out.shape, loc)?
            }
            OpKind::Pool(p, form) => {
                let x = need(0)?;
                match form {
                    Form::Float => self.pool(p, attrs, &x, &out.shape, loc)?,
                    Form::Quant => {
                        let xd = self.dcast(&x, loc)?;
                        let y = self.pool(p, attrs, &xd, &out.shape, loc)?;
                        self.requant(attrs, &y, &out, loc)?
                    }
                    Form::Fused => return unsupported("fused pools"),
                }
            }
            OpKind::Reduce(r) => {
                let x = need(0)?;
                let axes: Vec<usize> = ints(attrs, "axes").iter().map(|&a| norm_axis(a, x.t.rank())).collect();
                let y = if axes.is_empty() {
                    self.unary("tosa.identity", &x, loc)?
                } else {
                    match r {
                        Reduce::Sum => self.reduce("tosa.reduce_sum", &x, &axes, loc)?,
                        Reduce::Max => self.reduce("tosa.reduce_max", &x, &axes, loc)?,
                        Reduce::Min => self.reduce("tosa.reduce_min", &x, &axes, loc)?,
                        Reduce::Mean => self.mean(&x, &axes, loc)?,
                    }
                };
                self.reshape(&y, &out.shape, loc)?
            }
            OpKind::Movement(m) => {
                let x = need(0)?;
                match m {
                    Movement::Identity => self.unary("tosa.identity", &x, loc)?,
                    Movement::Reshape => {
                        let y = self.reshape(&x, &out.shape, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                    Movement::Transpose => {
                        let perm: Vec<usize> = ints(attrs, "perm").iter().map(|&p| p as usize).collect();
                        let y = self.transpose(&x, &perm, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                    Movement::Concat => {
                        let axis = norm_axis(int(attrs, "axis", 0), x.t.rank());
                        let refs: Vec<&V> = operands.iter().collect();
                        self.op1("tosa.concat", &refs, out.clone(), &[("axis", self.attr(&format!("{axis} : i32"))?)], loc)?
                    }
                    Movement::Slice => match self.slice(attrs, &x, &out, loc) {
                        Err(e) if e.is_empty() => return unsupported("slice steps other than 1"),
                        r => r?,
                    },
                    Movement::Pad => {
                        let mode = match attrs.get("mode") {
                            Some(Attr::Str(s)) => s.as_str(),
                            _ => "constant",
                        };
                        let pads = ints(attrs, "pads");
                        if mode != "constant" {
                            return unsupported("only constant padding maps to tosa.pad");
                        }
                        if pads.iter().any(|&p| p < 0) {
                            return unsupported("negative pads");
                        }
                        let r = x.t.rank();
                        let padding: Vec<i64> = (0..r).flat_map(|d| [pads[d], pads[r + d]]).collect();
                        let sh = self.shape_const(&padding, loc)?;
                        let pc = self.splat(float(attrs, "value").unwrap_or(0.0), x.t.elem.storage(), &[1], loc)?;
                        let ty = types::tensor(self.ctx, &out)?;
                        V { v: self.emit("tosa.pad", &[x.v, sh, pc.v], &[ty], &[], loc)?[0], t: out.clone() }
                    }
                    Movement::Gather => self.gather(attrs, &x, &need(1)?, &out, loc)?,
                    Movement::Expand => {
                        let y = self.expand(&x, &out.shape, loc)?;
                        if y.v == x.v { self.unary("tosa.identity", &x, loc)? } else { y }
                    }
                }
            }
            OpKind::Resize => return unsupported("interpolating resizes; TOSA's resize takes other parameters"),
        };
        if result.t.shape != out.shape {
            return Err(internal(format!("{}: exported shape {:?}, expected {:?}", at, result.t.shape, out.shape)));
        }
        self.vals.insert(op.results[0], result);
        Ok(())
    }

    /// The requantize epilogue of an integer op: clamp, then quantize.
    fn requant(&mut self, attrs: &Attrs, y: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let (lo, hi) = (float(attrs, "clip_min"), float(attrs, "clip_max"));
        let y = if lo.is_some() || hi.is_some() {
            let (lo, hi) = match (lo, hi) {
                (Some(l), Some(h)) if l > h => (Some(h), Some(h)),
                p => p,
            };
            self.clamp(y, lo, hi, loc)?
        } else {
            y.clone()
        };
        self.qcast(&y, out, loc)
    }

    /// The epilogue region of op `id` applied to `acc`; its other block
    /// arguments stand for `rest`.
    fn epilogue(&mut self, f: &Func, id: OpId, acc: V<'c, 'a>, rest: &[ValueId]) -> R<V<'c, 'a>> {
        let op = &f.ops[id];
        let Some(region) = op.regions.first() else { return Ok(acc) };
        if let Some(&a0) = region.args.first() {
            self.vals.insert(a0, acc.clone());
        }
        for (i, &a) in region.args.iter().enumerate().skip(1) {
            let v = rest.get(i - 1).ok_or_else(|| internal("epilogue argument without an operand"))?;
            let v = self.val(*v)?;
            self.vals.insert(a, v);
        }
        for &rop in &region.ops {
            self.op(f, rop)?;
        }
        match region.terminator.first() {
            Some(&y) => self.val(y),
            None => Ok(acc),
        }
    }

    fn slice(&mut self, attrs: &Attrs, x: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let r = x.t.rank();
        let starts = ints(attrs, "starts");
        let axes: Vec<usize> = match attrs.get("axes") {
            Some(Attr::Ints(a)) => a.iter().map(|&a| norm_axis(a, r)).collect(),
            _ => (0..starts.len()).collect(),
        };
        let steps = ints(attrs, "steps");
        if steps.iter().any(|&s| s != 1) {
            return Err(String::new());
        }
        let mut start = vec![0i64; r];
        for (i, &a) in axes.iter().enumerate() {
            let d = x.t.shape[a] as i64;
            let s = starts[i];
            start[a] = if s < 0 { (s + d).max(0) } else { s.min(d) };
        }
        let st = self.shape_const(&start, loc)?;
        let sz = self.shape_const(&out.shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), loc)?;
        let ty = types::tensor(self.ctx, out)?;
        Ok(V { v: self.emit("tosa.slice", &[x.v, st, sz], &[ty], &[], loc)?[0], t: out.clone() })
    }

    /// `core.gather` as 3-D `tosa.gather`: data `[P, A, Q]`, indices `[P, W]`.
    fn gather(&mut self, attrs: &Attrs, data: &V<'c, 'a>, idx: &V<'c, 'a>, out: &TensorType, loc: Location<'c>) -> R<V<'c, 'a>> {
        let r = data.t.rank();
        let axis = norm_axis(int(attrs, "axis", 0), r);
        let p: usize = data.t.shape[..axis].iter().product();
        let a = data.t.shape[axis];
        let q: usize = data.t.shape[axis + 1..].iter().product();
        let w = idx.t.num_elements();
        let d3 = self.reshape(data, &[p, a, q], loc)?;
        let i32t = idx.t.with_elem(Scalar::I32);
        let mut i = if idx.t.elem.storage() == Scalar::I32 { idx.clone() } else { self.op1("tosa.cast", &[idx], i32t, &[], loc)? };
        // Negative indices count from the end.
        let zero = self.splat(0.0, Scalar::I32, &vec![1; i.t.rank()], loc)?;
        let neg = self.binary("tosa.greater", &zero, &i, ElemType::I1, loc)?;
        let size = self.splat(a as f64, Scalar::I32, &vec![1; i.t.rank()], loc)?;
        let wrapped = self.arith("tosa.add", &i, &size, loc)?;
        i = self.select(&neg, &wrapped, &i, loc)?;
        let i2 = self.reshape(&i, &[1, w], loc)?;
        let i2 = self.expand(&i2, &[p, w], loc)?;
        let t = data.t.with_shape(vec![p, w, q]);
        let g = self.op1("tosa.gather", &[&d3, &i2], t, &[], loc)?;
        self.reshape(&g, &out.shape, loc)
    }
}
