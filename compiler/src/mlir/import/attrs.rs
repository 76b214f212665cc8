//! Reading MLIR attributes through the C API: integer lists (`array<i64>`,
//! `array<i32>`, dense integers), numbers, strings, the `aoc.name` of an
//! argument, and the values of `dense`/`dense_resource` constants.

use super::R;
use crate::mlir::types;
use aoc_ir::types::{Scalar, TensorType};
use aoc_ir::Tensor;
use melior::ir::operation::{OperationLike, OperationRef};
use melior::ir::{Attribute, AttributeLike, Type, TypeLike};
use mlir_sys as sys;

pub(super) fn attr<'c, 'a>(op: &OperationRef<'c, 'a>, name: &str) -> Option<Attribute<'c>> {
    op.attribute(name).ok()
}

/// An integer list attribute: `array<i64: ...>`, `array<i32: ...>` or dense integers.
pub(super) fn ints_of(a: Attribute) -> Option<Vec<i64>> {
    let r = a.to_raw();
    unsafe {
        if sys::mlirAttributeIsADenseI64Array(r) {
            let n = sys::mlirDenseArrayGetNumElements(r);
            return Some((0..n).map(|i| sys::mlirDenseI64ArrayGetElement(r, i)).collect());
        }
        if sys::mlirAttributeIsADenseI32Array(r) {
            let n = sys::mlirDenseArrayGetNumElements(r);
            return Some((0..n).map(|i| sys::mlirDenseI32ArrayGetElement(r, i) as i64).collect());
        }
        if sys::mlirAttributeIsADenseIntElements(r) {
            let n = sys::mlirElementsAttrGetNumElements(r);
            return Some((0..n).map(|i| sys::mlirDenseElementsAttrGetInt64Value(r, i as isize)).collect());
        }
    }
    None
}

pub(super) fn number_of(a: Attribute) -> Option<f64> {
    let r = a.to_raw();
    unsafe {
        if sys::mlirAttributeIsAFloat(r) {
            return Some(sys::mlirFloatAttrGetValueDouble(r));
        }
        if sys::mlirAttributeIsAInteger(r) {
            return Some(sys::mlirIntegerAttrGetValueInt(r) as f64);
        }
        if sys::mlirAttributeIsABool(r) {
            return Some(sys::mlirBoolAttrGetValue(r) as i64 as f64);
        }
    }
    None
}

pub(super) fn string_of(a: Attribute) -> Option<String> {
    let r = a.to_raw();
    unsafe {
        if sys::mlirAttributeIsAString(r) {
            let s = sys::mlirStringAttrGetValue(r);
            let bytes = std::slice::from_raw_parts(s.data as *const u8, s.length);
            return Some(String::from_utf8_lossy(bytes).into_owned());
        }
    }
    None
}

/// `aoc.name` of entry `i` of an `arg_attrs`/`res_attrs` array.
pub(super) fn entry_name<'c, 'a>(op: &OperationRef<'c, 'a>, list: &str, i: usize) -> Option<String> {
    let a = attr(op, list)?;
    unsafe {
        let r = a.to_raw();
        if !sys::mlirAttributeIsAArray(r) || sys::mlirArrayAttrGetNumElements(r) <= i as isize {
            return None;
        }
        let d = sys::mlirArrayAttrGetElement(r, i as isize);
        if !sys::mlirAttributeIsADictionary(d) {
            return None;
        }
        let n = sys::mlirDictionaryAttrGetElementByName(d, melior::StringRef::new("aoc.name").to_raw());
        if n.ptr.is_null() {
            return None;
        }
        string_of(Attribute::from_raw(n))
    }
}

/// The values of a constant elements attribute (`dense` or
/// `dense_resource`) as a tensor of its type (`index` read as `i64`).
pub(super) fn tensor_of_elements(a: Attribute) -> R<Tensor> {
    let r = a.to_raw();
    let ty = unsafe { Type::from_raw(sys::mlirAttributeGetType(r)) };
    let elem_raw = unsafe { sys::mlirShapedTypeGetElementType(ty.to_raw()) };
    let is_index = unsafe { sys::mlirTypeIsAIndex(elem_raw) };
    let tt = if is_index {
        let rank = unsafe { sys::mlirShapedTypeGetRank(ty.to_raw()) };
        let shape = (0..rank).map(|i| unsafe { sys::mlirShapedTypeGetDimSize(ty.to_raw(), i as isize) as usize }).collect::<Vec<_>>();
        TensorType::new(shape, Scalar::I64)
    } else {
        types::tensor_of_mlir(ty)?
    };
    let n = tt.num_elements();
    let s = tt.elem.storage();
    unsafe {
        let dense = sys::mlirAttributeIsADenseElements(r);
        let resource = sys::mlirAttributeIsADenseResourceElements(r);
        if !dense && !resource {
            return Err(format!("constant {a} is not dense elements"));
        }
        if n > 0 && sys::mlirElementsAttrGetNumElements(r) as usize != n && !(dense && sys::mlirDenseElementsAttrIsSplat(r)) {
            return Err(format!("constant of {tt} holds the wrong number of values"));
        }
        let splat = dense && sys::mlirDenseElementsAttrIsSplat(r);
        let pos = |i: usize| if splat { 0 } else { i as isize };
        let t = match (s, dense) {
            (Scalar::F32, true) => Tensor::from_f64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetFloatValue(r, pos(i)) as f64).collect()),
            (Scalar::F32, false) => Tensor::from_f64(tt, (0..n).map(|i| sys::mlirDenseFloatResourceElementsAttrGetValue(r, i as isize) as f64).collect()),
            (Scalar::F64, true) => Tensor::from_f64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetDoubleValue(r, pos(i))).collect()),
            (Scalar::F64, false) => Tensor::from_f64(tt, (0..n).map(|i| sys::mlirDenseDoubleResourceElementsAttrGetValue(r, i as isize)).collect()),
            (Scalar::F16 | Scalar::BF16, true) => {
                let p = sys::mlirDenseElementsAttrGetRawData(r) as *const u16;
                let bits: Vec<u16> = (0..n).map(|i| *p.offset(pos(i))).collect();
                let vals = bits
                    .iter()
                    .map(|&b| if s == Scalar::F16 { half::f16::from_bits(b).to_f64() } else { half::bf16::from_bits(b).to_f64() })
                    .collect();
                Tensor::from_f64(tt, vals)
            }
            (Scalar::I1, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetBoolValue(r, pos(i)) as i64).collect()),
            (Scalar::I1, false) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseBoolResourceElementsAttrGetValue(r, i as isize) as i64).collect()),
            (Scalar::I8, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetInt8Value(r, pos(i)) as i64).collect()),
            (Scalar::I8, false) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseInt8ResourceElementsAttrGetValue(r, i as isize) as i64).collect()),
            (Scalar::U8, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetUInt8Value(r, pos(i)) as i64).collect()),
            (Scalar::I16, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetInt16Value(r, pos(i)) as i64).collect()),
            (Scalar::I16, false) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseInt16ResourceElementsAttrGetValue(r, i as isize) as i64).collect()),
            (Scalar::I32, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetInt32Value(r, pos(i)) as i64).collect()),
            (Scalar::I32, false) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseInt32ResourceElementsAttrGetValue(r, i as isize) as i64).collect()),
            (Scalar::I64, true) if is_index => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetIndexValue(r, pos(i)) as i64).collect()),
            (Scalar::I64, true) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseElementsAttrGetInt64Value(r, pos(i))).collect()),
            (Scalar::I64, false) => Tensor::from_i64(tt, (0..n).map(|i| sys::mlirDenseInt64ResourceElementsAttrGetValue(r, i as isize)).collect()),
            _ => return Err(format!("constants of {} are not supported", s.name())),
        };
        Ok(t)
    }
}

