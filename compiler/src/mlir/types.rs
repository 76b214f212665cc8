//! Tensor types between aoc and MLIR: static ranked tensors of builtin
//! scalars or `!quant.uniform` (per tensor or per axis) element types,
//! built and read through MLIR's C API (no text round trip for quant
//! parameters, so scales come back bit for bit).
//!
//! Invariant: `to_aoc(to_mlir(t)) == t` for every type aoc has, sparse
//! encodings aside (exported dense).

use aoc_ir::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
use melior::Context;
use melior::ir::{Type, TypeLike};
use melior::ir::r#type::RankedTensorType;
use mlir_sys as sys;

/// The MLIR spelling of a scalar type (`ui8` for aoc's `u8`).
pub fn scalar_text(s: Scalar) -> String {
    let n = s.name();
    match n.strip_prefix('u') {
        Some(bits) => format!("ui{bits}"),
        None => n.to_string(),
    }
}

pub fn scalar<'c>(ctx: &'c Context, s: Scalar) -> Result<Type<'c>, String> {
    Type::parse(ctx, &scalar_text(s)).ok_or_else(|| format!("internal error: MLIR does not parse the type {}", s.name()))
}

/// The signless integer type MLIR quant types store `s` in, and whether
/// it is signed.
fn storage<'c>(ctx: &'c Context, s: Scalar) -> Result<(Type<'c>, bool), String> {
    let (bits, signed) = match s {
        Scalar::I8 => (8, true),
        Scalar::I16 => (16, true),
        Scalar::I32 => (32, true),
        Scalar::I64 => (64, true),
        Scalar::U8 => (8, false),
        Scalar::U16 => (16, false),
        Scalar::U32 => (32, false),
        // MLIR 22's quant dialect prints fp8 storage as an integer range it
        // then refuses to parse, so fp8-stored types do not export.
        other => return Err(format!("error: quantized types stored as {} are not supported by the MLIR export", other.name())),
    };
    Ok((Type::parse(ctx, &format!("i{bits}")).ok_or("internal error: integer type")?, signed))
}

fn storage_range(s: Scalar) -> (i64, i64) {
    match s {
        Scalar::I8 => (-128, 127),
        Scalar::I16 => (i16::MIN as i64, i16::MAX as i64),
        Scalar::I32 => (i32::MIN as i64, i32::MAX as i64),
        Scalar::U8 => (0, 255),
        Scalar::U16 => (0, u16::MAX as i64),
        Scalar::U32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// An element type in MLIR.
pub fn elem<'c>(ctx: &'c Context, e: &ElemType) -> Result<Type<'c>, String> {
    match e {
        ElemType::Scalar(s) => scalar(ctx, *s),
        ElemType::Quant(q) => {
            let (st, signed) = storage(ctx, q.storage)?;
            let ex = scalar(ctx, q.expressed)?;
            let flags = if signed { unsafe { sys::mlirQuantizedTypeGetSignedFlag() } } else { 0 };
            let (lo, hi) = storage_range(q.storage);
            let raw = match &q.params {
                QuantParams::PerTensor { scale, zero_point } => unsafe {
                    sys::mlirUniformQuantizedTypeGet(flags, st.to_raw(), ex.to_raw(), *scale, *zero_point, lo, hi)
                },
                QuantParams::PerAxis { axis, scales, zero_points } => unsafe {
                    let mut s = scales.clone();
                    let mut z = zero_points.clone();
                    sys::mlirUniformQuantizedPerAxisTypeGet(
                        flags,
                        st.to_raw(),
                        ex.to_raw(),
                        s.len() as isize,
                        s.as_mut_ptr(),
                        z.as_mut_ptr(),
                        *axis as i32,
                        lo,
                        hi,
                    )
                },
            };
            if raw.ptr.is_null() {
                return Err(format!("MLIR rejects the quantized type {q}"));
            }
            Ok(unsafe { Type::from_raw(raw) })
        }
    }
}

/// `tensor<...>` of `t` (sparse encodings are dropped: the values are dense).
pub fn tensor<'c>(ctx: &'c Context, t: &TensorType) -> Result<Type<'c>, String> {
    let dims: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    Ok(RankedTensorType::new(&dims, elem(ctx, &t.elem)?, None).into())
}

/// The aoc scalar of an MLIR builtin element type.
pub fn scalar_of(t: Type) -> Option<Scalar> {
    let text = t.to_string();
    Some(match text.as_str() {
        "f64" => Scalar::F64,
        "f32" => Scalar::F32,
        "f16" => Scalar::F16,
        "bf16" => Scalar::BF16,
        "f8E4M3FN" => Scalar::F8E4M3FN,
        "f8E5M2" => Scalar::F8E5M2,
        "i64" | "si64" => Scalar::I64,
        "i32" | "si32" => Scalar::I32,
        "i16" | "si16" => Scalar::I16,
        "i8" | "si8" => Scalar::I8,
        "ui64" => Scalar::U64,
        "ui32" => Scalar::U32,
        "ui16" => Scalar::U16,
        "ui8" => Scalar::U8,
        "i1" => Scalar::I1,
        _ => return None,
    })
}

/// The aoc element type of an MLIR element type, or what is wrong with it.
pub fn elem_of(t: Type) -> Result<ElemType, String> {
    if let Some(s) = scalar_of(t) {
        return Ok(ElemType::Scalar(s));
    }
    let raw = t.to_raw();
    unsafe {
        let per_tensor = sys::mlirTypeIsAUniformQuantizedType(raw);
        let per_axis = sys::mlirTypeIsAUniformQuantizedPerAxisType(raw);
        if !per_tensor && !per_axis {
            return Err(format!("element type {t} is not supported (aoc takes builtin floats and integers, and !quant.uniform)"));
        }
        let st = Type::from_raw(sys::mlirQuantizedTypeGetStorageType(raw));
        let ex = Type::from_raw(sys::mlirQuantizedTypeGetExpressedType(raw));
        let signed = sys::mlirQuantizedTypeIsSigned(raw);
        let storage = match (st.to_string().as_str(), signed) {
            ("i8", true) => Scalar::I8,
            ("i8", false) => Scalar::U8,
            ("i16", true) => Scalar::I16,
            ("i16", false) => Scalar::U16,
            ("i32", true) => Scalar::I32,
            ("i32", false) => Scalar::U32,
            ("f8E4M3FN", _) => Scalar::F8E4M3FN,
            ("f8E5M2", _) => Scalar::F8E5M2,
            _ => return Err(format!("quantized storage type of {t} is not supported")),
        };
        let expressed = scalar_of(ex).filter(|s| s.is_float()).ok_or_else(|| format!("expressed type of {t} is not a float type"))?;
        let params = if per_tensor {
            QuantParams::PerTensor {
                scale: sys::mlirUniformQuantizedTypeGetScale(raw),
                zero_point: sys::mlirUniformQuantizedTypeGetZeroPoint(raw),
            }
        } else {
            let n = sys::mlirUniformQuantizedPerAxisTypeGetNumDims(raw);
            QuantParams::PerAxis {
                axis: sys::mlirUniformQuantizedPerAxisTypeGetQuantizedDimension(raw) as usize,
                scales: (0..n).map(|i| sys::mlirUniformQuantizedPerAxisTypeGetScale(raw, i)).collect(),
                zero_points: (0..n).map(|i| sys::mlirUniformQuantizedPerAxisTypeGetZeroPoint(raw, i)).collect(),
            }
        };
        Ok(ElemType::Quant(Box::new(QuantType { storage, expressed, params })))
    }
}

/// The aoc type of an MLIR value type: a statically shaped ranked tensor.
pub fn tensor_of_mlir(t: Type) -> Result<TensorType, String> {
    let raw = t.to_raw();
    unsafe {
        if !sys::mlirTypeIsARankedTensor(raw) {
            return Err(format!("type {t} is not supported (aoc takes ranked tensors with static shapes)"));
        }
        if !sys::mlirShapedTypeHasStaticShape(raw) {
            return Err(format!("type {t} has dynamic dimensions (aoc takes static shapes)"));
        }
        if !sys::mlirRankedTensorTypeGetEncoding(raw).ptr.is_null() {
            return Err(format!("type {t} has an encoding, which aoc does not read"));
        }
        let rank = sys::mlirShapedTypeGetRank(raw);
        let shape: Vec<usize> = (0..rank).map(|i| sys::mlirShapedTypeGetDimSize(raw, i as isize) as usize).collect();
        aoc_ir::types::checked_elements(&shape)?;
        let elem = elem_of(Type::from_raw(sys::mlirShapedTypeGetElementType(raw)))?;
        Ok(TensorType { shape, elem, encoding: None })
    }
}
