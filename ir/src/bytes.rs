//! Little-endian byte encodings of interpreter data, one per scalar type:
//! what safetensors files, artifacts' weights and the runtime's reference
//! fallback store. Quantized types use their storage integer; `i1` is one
//! byte per element; fp8 follows the OCP formats (E4M3FN, E5M2).

use crate::tensor::Data;
use crate::types::Scalar;

/// Decodes little-endian bytes of scalar type `s` into interpreter data.
pub fn decode(s: Scalar, bytes: &[u8]) -> Result<Data, String> {
    let width = (s.bits() as usize).div_ceil(8);
    if !bytes.len().is_multiple_of(width) {
        return Err(format!(
            "{} bytes is not a whole number of {s} elements",
            bytes.len()
        ));
    }
    let chunks = bytes.chunks_exact(width);
    fn arr<const N: usize>(c: &[u8]) -> [u8; N] {
        let mut a = [0; N];
        a.copy_from_slice(c);
        a
    }
    Ok(match s {
        Scalar::F64 => Data::F(chunks.map(|c| f64::from_le_bytes(arr(c))).collect()),
        Scalar::F32 => Data::F(chunks.map(|c| f32::from_le_bytes(arr(c)) as f64).collect()),
        Scalar::F16 => Data::F(
            chunks
                .map(|c| half::f16::from_le_bytes(arr(c)).to_f64())
                .collect(),
        ),
        Scalar::BF16 => Data::F(
            chunks
                .map(|c| half::bf16::from_le_bytes(arr(c)).to_f64())
                .collect(),
        ),
        Scalar::F8E4M3FN | Scalar::F8E5M2 => {
            Data::F(bytes.iter().map(|&b| f8_to_f64(s, b)).collect())
        }
        Scalar::I64 => Data::I(chunks.map(|c| i64::from_le_bytes(arr(c))).collect()),
        Scalar::I32 => Data::I(chunks.map(|c| i32::from_le_bytes(arr(c)) as i64).collect()),
        Scalar::I16 => Data::I(chunks.map(|c| i16::from_le_bytes(arr(c)) as i64).collect()),
        Scalar::I8 => Data::I(bytes.iter().map(|&b| b as i8 as i64).collect()),
        Scalar::U64 => Data::I(
            chunks
                .map(|c| {
                    let v = u64::from_le_bytes(arr(c));
                    i64::try_from(v)
                        .map_err(|_| format!("u64 value {v} is beyond what aoc holds (2^63 - 1)"))
                })
                .collect::<Result<_, _>>()?,
        ),
        Scalar::U32 => Data::I(chunks.map(|c| u32::from_le_bytes(arr(c)) as i64).collect()),
        Scalar::U16 => Data::I(chunks.map(|c| u16::from_le_bytes(arr(c)) as i64).collect()),
        Scalar::U8 => Data::I(bytes.iter().map(|&b| b as i64).collect()),
        Scalar::I1 => Data::I(bytes.iter().map(|&b| (b != 0) as i64).collect()),
    })
}

/// Encodes interpreter data as little-endian bytes of scalar type `s`.
pub fn encode(s: Scalar, data: &Data) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * (s.bits() as usize).div_ceil(8));
    let n = data.len();
    for i in 0..n {
        let (f, int) = match data {
            Data::F(v) => (v[i], v[i] as i64),
            Data::I(v) => (v[i] as f64, v[i]),
        };
        match s {
            Scalar::F64 => out.extend(f.to_le_bytes()),
            Scalar::F32 => out.extend((f as f32).to_le_bytes()),
            Scalar::F16 => out.extend(half::f16::from_f64(f).to_le_bytes()),
            Scalar::BF16 => out.extend(half::bf16::from_f64(f).to_le_bytes()),
            Scalar::F8E4M3FN | Scalar::F8E5M2 => out.push(f64_to_f8(s, f)),
            Scalar::I64 | Scalar::U64 => out.extend(int.to_le_bytes()),
            Scalar::I32 | Scalar::U32 => out.extend((int as i32).to_le_bytes()),
            Scalar::I16 | Scalar::U16 => out.extend((int as i16).to_le_bytes()),
            Scalar::I8 | Scalar::U8 => out.push(int as u8),
            Scalar::I1 => out.push((int != 0) as u8),
        }
    }
    out
}

/// (mantissa bits, exponent bias) of an fp8 type.
fn f8_layout(s: Scalar) -> (u32, i32) {
    match s {
        Scalar::F8E4M3FN => (3, 7),
        _ => (2, 15),
    }
}

/// Decodes one fp8 byte. E4M3FN has no infinities and one NaN pattern per
/// sign (`S.1111.111`); E5M2 follows IEEE (exponent all ones: inf or NaN).
pub fn f8_to_f64(s: Scalar, b: u8) -> f64 {
    let (mbits, bias) = f8_layout(s);
    let ebits = 7 - mbits;
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (b & ((1 << mbits) - 1)) as i32;
    let emax = (1 << ebits) - 1;
    match s {
        Scalar::F8E4M3FN if e == emax && m == (1 << mbits) - 1 => return f64::NAN,
        Scalar::F8E5M2 if e == emax => {
            return if m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        _ => {}
    }
    let mag = if e == 0 {
        m as f64 * crate::tensor::pow2(1 - bias - mbits as i32)
    } else {
        (1.0 + m as f64 / (1 << mbits) as f64) * crate::tensor::pow2(e - bias)
    };
    sign * mag
}

/// Encodes a value already representable in fp8 type `s` (the interpreter's
/// tensors hold only such values); others round to nearest, ties to even,
/// through [`crate::tensor::round_f8`] first.
pub fn f64_to_f8(s: Scalar, v: f64) -> u8 {
    let (mbits, bias) = f8_layout(s);
    let v = crate::tensor::round_f8(s, v, false);
    if v.is_nan() {
        return 0x7f;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    if v.is_infinite() {
        // Only E5M2 has infinities; E4M3FN rounding without saturation gives NaN.
        return sign | 0x7c;
    }
    let a = v.abs();
    if a == 0.0 {
        return sign;
    }
    // `a` is a normal f64, so its exponent field gives floor(log2(a)) exactly.
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let min_normal_exp = 1 - bias;
    let (efield, m) = if e < min_normal_exp {
        (
            0,
            (a / crate::tensor::pow2(min_normal_exp - mbits as i32)).round() as u32,
        )
    } else {
        (
            (e + bias) as u32,
            ((a / crate::tensor::pow2(e) - 1.0) * (1 << mbits) as f64).round() as u32,
        )
    };
    sign | ((efield << mbits) as u8) | (m as u8)
}

