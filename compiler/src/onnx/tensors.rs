//! ONNX element types and `TensorProto` payloads -> aoc types and tensors.
//!
//! Invariants: every error names the tensor; nothing here panics on
//! malformed data (lengths are checked before reading); values are stored as
//! the interpreter expects them (floats exactly representable in their type,
//! integers within their type's range).

use super::proto::{TensorProto, data_type as dt};
use aoc_ir::tensor::Data;
use aoc_ir::{Scalar, Tensor, TensorType};

/// Maps an ONNX element type to an aoc scalar, or an error naming `what`.
pub fn scalar_of(t: i32, what: &str) -> Result<Scalar, String> {
    Ok(match t {
        dt::FLOAT => Scalar::F32,
        dt::DOUBLE => Scalar::F64,
        dt::FLOAT16 => Scalar::F16,
        dt::BFLOAT16 => Scalar::BF16,
        dt::INT8 => Scalar::I8,
        dt::INT16 => Scalar::I16,
        dt::INT32 => Scalar::I32,
        dt::INT64 => Scalar::I64,
        dt::UINT8 => Scalar::U8,
        dt::UINT16 => Scalar::U16,
        dt::UINT32 => Scalar::U32,
        dt::UINT64 => Scalar::U64,
        dt::BOOL => Scalar::I1,
        dt::FLOAT8E4M3FN => Scalar::F8E4M3FN,
        dt::FLOAT8E5M2 => Scalar::F8E5M2,
        other => {
            return Err(format!(
                "{what} has unsupported element type {}",
                dt::name(other)
            ));
        }
    })
}

/// Decodes an fp8 bit pattern.
pub fn f8_to_f64(s: Scalar, bits: u8) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp_bits, mant_bits, bias) = match s {
        Scalar::F8E4M3FN => (4u32, 3u32, 7i32),
        _ => (5, 2, 15),
    };
    let exp = ((bits >> mant_bits) & ((1 << exp_bits) - 1)) as i32;
    let mant = (bits & ((1 << mant_bits) - 1)) as i32;
    let max_exp = (1 << exp_bits) - 1;
    match s {
        Scalar::F8E4M3FN if exp == max_exp && mant == 7 => return f64::NAN,
        Scalar::F8E5M2 if exp == max_exp => {
            return if mant == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        _ => {}
    }
    let m = mant as f64 / (1 << mant_bits) as f64;
    let v = if exp == 0 {
        m * 2f64.powi(1 - bias)
    } else {
        (1.0 + m) * 2f64.powi(exp - bias)
    };
    sign * v
}

fn take<const N: usize>(raw: &[u8], i: usize) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(&raw[i * N..(i + 1) * N]);
    b
}

/// Converts a `TensorProto` (with inline data) into a tensor. `what` names it
/// in messages.
pub fn tensor_from_proto(p: &TensorProto, what: &str) -> Result<Tensor, String> {
    let dtype = p.data_type.unwrap_or(0);
    let s = scalar_of(dtype, what)?;
    if p.data_location == Some(1) || !p.external_data.is_empty() {
        return Err(format!(
            "{what} keeps its data in an external file; import the model from its file (the data file beside it)"
        ));
    }
    let mut shape = Vec::with_capacity(p.dims.len());
    for &d in &p.dims {
        if d < 0 {
            return Err(format!("{what} has a negative dimension {d}"));
        }
        shape.push(d as usize);
    }
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("{what} is too large"))?;
    let ty = TensorType::new(shape, s);
    let data = if let Some(raw) = &p.raw_data {
        let width = (s.bits() as usize).max(8) / 8;
        if raw.len()
            != n.checked_mul(width)
                .ok_or_else(|| format!("{what} is too large"))?
        {
            return Err(format!(
                "{what}: raw_data has {} bytes, but {ty} needs {}",
                raw.len(),
                n * width
            ));
        }
        match s {
            Scalar::F32 => Data::F(
                (0..n)
                    .map(|i| f32::from_le_bytes(take(raw, i)) as f64)
                    .collect(),
            ),
            Scalar::F64 => Data::F((0..n).map(|i| f64::from_le_bytes(take(raw, i))).collect()),
            Scalar::F16 => Data::F(
                (0..n)
                    .map(|i| half::f16::from_le_bytes(take(raw, i)).to_f64())
                    .collect(),
            ),
            Scalar::BF16 => Data::F(
                (0..n)
                    .map(|i| half::bf16::from_le_bytes(take(raw, i)).to_f64())
                    .collect(),
            ),
            Scalar::F8E4M3FN | Scalar::F8E5M2 => {
                Data::F(raw.iter().map(|&b| f8_to_f64(s, b)).collect())
            }
            Scalar::I8 => Data::I(raw.iter().map(|&b| b as i8 as i64).collect()),
            Scalar::U8 => Data::I(raw.iter().map(|&b| b as i64).collect()),
            Scalar::I1 => Data::I(raw.iter().map(|&b| (b != 0) as i64).collect()),
            Scalar::I16 => Data::I(
                (0..n)
                    .map(|i| i16::from_le_bytes(take(raw, i)) as i64)
                    .collect(),
            ),
            Scalar::U16 => Data::I(
                (0..n)
                    .map(|i| u16::from_le_bytes(take(raw, i)) as i64)
                    .collect(),
            ),
            Scalar::I32 => Data::I(
                (0..n)
                    .map(|i| i32::from_le_bytes(take(raw, i)) as i64)
                    .collect(),
            ),
            Scalar::U32 => Data::I(
                (0..n)
                    .map(|i| u32::from_le_bytes(take(raw, i)) as i64)
                    .collect(),
            ),
            Scalar::I64 => Data::I((0..n).map(|i| i64::from_le_bytes(take(raw, i))).collect()),
            // The interpreter holds u64 in i64; values past i64::MAX wrap.
            Scalar::U64 => Data::I(
                (0..n)
                    .map(|i| u64::from_le_bytes(take(raw, i)) as i64)
                    .collect(),
            ),
        }
    } else {
        let check = |len: usize, field: &str| {
            if len == n {
                Ok(())
            } else {
                Err(format!(
                    "{what}: {field} has {len} values, but {ty} needs {n}"
                ))
            }
        };
        match s {
            Scalar::F32 => {
                check(p.float_data.len(), "float_data")?;
                Data::F(p.float_data.iter().map(|&x| x as f64).collect())
            }
            Scalar::F64 => {
                check(p.double_data.len(), "double_data")?;
                Data::F(p.double_data.clone())
            }
            Scalar::I64 => {
                check(p.int64_data.len(), "int64_data")?;
                Data::I(p.int64_data.clone())
            }
            Scalar::U32 | Scalar::U64 => {
                check(p.uint64_data.len(), "uint64_data")?;
                Data::I(p.uint64_data.iter().map(|&x| x as i64).collect())
            }
            Scalar::F16 | Scalar::BF16 | Scalar::F8E4M3FN | Scalar::F8E5M2 => {
                check(p.int32_data.len(), "int32_data")?;
                Data::F(
                    p.int32_data
                        .iter()
                        .map(|&b| match s {
                            Scalar::F16 => half::f16::from_bits(b as u16).to_f64(),
                            Scalar::BF16 => half::bf16::from_bits(b as u16).to_f64(),
                            _ => f8_to_f64(s, b as u8),
                        })
                        .collect(),
                )
            }
            Scalar::I32 | Scalar::I16 | Scalar::I8 | Scalar::U16 | Scalar::U8 | Scalar::I1 => {
                check(p.int32_data.len(), "int32_data")?;
                Data::I(
                    p.int32_data
                        .iter()
                        .map(|&x| aoc_ir::tensor::wrap_int(s, x as i64))
                        .collect(),
                )
            }
        }
    };
    Ok(Tensor { ty, data })
}
