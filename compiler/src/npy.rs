//! `.npy` files <-> interpreter tensors (the inputs and outputs of `aoc run`).
//!
//! Supported dtypes: f64 f32 f16 i64 i32 i16 i8 u64 u32 u16 u8 bool, either
//! byte order, C order. numpy has no bf16 or fp8, so such tensors are written
//! as float32 (exactly: every bf16/fp8 value is an f32 value) and the writer
//! returns a note saying so; quantized tensors are written as their storage
//! integers.
//!
//! Invariant: reading never panics and never allocates more than the file
//! holds: the header's shape is checked against the file's size before any
//! data is read, so a hostile header cannot ask for terabytes.

use aoc_ir::tensor::{Data, Tensor};
use aoc_ir::types::{Scalar, TensorType};
use npyz::{DType, NpyFile, NpyHeader, Order, TypeChar, WriterBuilder};
use std::path::Path;

/// Reads a `.npy` file; its element type is the file's dtype.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    read_npy_bytes(&bytes).map_err(|m| format!("{}: {m}", path.display()))
}

/// Reads `.npy` bytes. Errors say what is wrong, without the file name.
pub fn read_npy_bytes(bytes: &[u8]) -> Result<Tensor, String> {
    if !bytes.starts_with(b"\x93NUMPY") {
        return Err("not a .npy file (it does not start with the numpy magic bytes)".to_string());
    }
    // npyz multiplies the shape's dimensions without overflow checks; check
    // the shape ourselves first.
    if let Some(shape) = shape_in_header(bytes) {
        // Zero dimensions included, no partial product may overflow (npyz
        // also computes strides); each element takes at least one byte.
        let mut bound: u64 = 1;
        for d in &shape {
            bound = bound
                .checked_mul((*d).max(1))
                .ok_or_else(|| format!("shape {shape:?} is too large"))?;
        }
        let n: u64 = if shape.contains(&0) { 0 } else { bound };
        if n > bytes.len() as u64 {
            return Err(format!(
                "truncated: shape {shape:?} needs more data than the file's {} bytes",
                bytes.len()
            ));
        }
    }
    let mut reader = bytes;
    let file =
        NpyHeader::from_reader(&mut reader).map_err(|e| format!("not a valid .npy file: {e}"))?;
    if file.order() == Order::Fortran {
        return Err(
            "fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)"
                .to_string(),
        );
    }
    let DType::Plain(ts) = file.dtype() else {
        return Err(format!(
            "unsupported dtype {} (structured arrays are not supported)",
            file.dtype().descr()
        ));
    };
    let scalar = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 8) => Scalar::F64,
        (TypeChar::Float, 4) => Scalar::F32,
        (TypeChar::Float, 2) => Scalar::F16,
        (TypeChar::Int, 8) => Scalar::I64,
        (TypeChar::Int, 4) => Scalar::I32,
        (TypeChar::Int, 2) => Scalar::I16,
        (TypeChar::Int, 1) => Scalar::I8,
        (TypeChar::Uint, 8) => Scalar::U64,
        (TypeChar::Uint, 4) => Scalar::U32,
        (TypeChar::Uint, 2) => Scalar::U16,
        (TypeChar::Uint, 1) => Scalar::U8,
        (TypeChar::Bool, 1) => Scalar::I1,
        _ => return Err(format!("unsupported dtype {ts}")),
    };
    let shape: Vec<usize> = file
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<_, _>>()?;
    let count = file.len();
    let width = (scalar.bits() as u64).div_ceil(8);
    let have = reader.len() as u64;
    let need = count.checked_mul(width).ok_or("shape is too large")?;
    if have < need {
        return Err(format!(
            "truncated: shape {shape:?} of {ts} needs {need} data bytes, the file holds {have}"
        ));
    }
    let file = NpyFile::with_header(file, &reader[..need as usize]);
    let bad = |e: std::io::Error| format!("cannot read the data: {e}");
    let data = match scalar {
        Scalar::F64 => Data::F(file.into_vec::<f64>().map_err(bad)?),
        Scalar::F32 => Data::F(
            file.into_vec::<f32>()
                .map_err(bad)?
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        Scalar::F16 => Data::F(
            file.into_vec::<half::f16>()
                .map_err(bad)?
                .into_iter()
                .map(|x| x.to_f64())
                .collect(),
        ),
        Scalar::I64 => Data::I(file.into_vec::<i64>().map_err(bad)?),
        Scalar::I32 => Data::I(
            file.into_vec::<i32>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::I16 => Data::I(
            file.into_vec::<i16>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::I8 => Data::I(
            file.into_vec::<i8>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::U64 => Data::I(
            file.into_vec::<u64>()
                .map_err(bad)?
                .into_iter()
                .map(|v| {
                    i64::try_from(v)
                        .map_err(|_| format!("u64 value {v} is beyond what aoc holds (2^63 - 1)"))
                })
                .collect::<Result<_, _>>()?,
        ),
        Scalar::U32 => Data::I(
            file.into_vec::<u32>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::U16 => Data::I(
            file.into_vec::<u16>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::U8 => Data::I(
            file.into_vec::<u8>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::I1 => Data::I(
            file.into_vec::<bool>()
                .map_err(bad)?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        Scalar::BF16 | Scalar::F8E4M3FN | Scalar::F8E5M2 => {
            unreachable!("not produced by the dtype match above")
        }
    };
    if data.len() != shape.iter().product::<usize>() {
        return Err(format!(
            "holds {} elements, its shape {shape:?} says {}",
            data.len(),
            count
        ));
    }
    Ok(Tensor {
        ty: TensorType::new(shape, scalar),
        data,
    })
}

/// Finds the `'shape': (a, b, ...)` tuple in a `.npy` header, if it can.
/// Used only to reject absurd shapes before npyz sees them.
fn shape_in_header(bytes: &[u8]) -> Option<Vec<u64>> {
    let end = bytes.len().min(64 * 1024);
    let header = String::from_utf8_lossy(&bytes[..end]);
    let at = header.find("shape")?;
    let rest = &header[at + 5..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<u64>().ok())
        .collect()
}

/// The scalar type a `.npy` file stores for element type storage `s`: the
/// same, except bf16 and fp8, which numpy lacks and which go as float32.
pub fn npy_scalar(s: Scalar) -> Scalar {
    match s {
        Scalar::BF16 | Scalar::F8E4M3FN | Scalar::F8E5M2 => Scalar::F32,
        s => s,
    }
}

/// The numpy name of a scalar type (for messages).
pub fn numpy_name(s: Scalar) -> &'static str {
    match s {
        Scalar::F64 => "float64",
        Scalar::F32 => "float32",
        Scalar::F16 => "float16",
        Scalar::BF16 => "bfloat16",
        Scalar::F8E4M3FN => "float8_e4m3fn",
        Scalar::F8E5M2 => "float8_e5m2",
        Scalar::I64 => "int64",
        Scalar::I32 => "int32",
        Scalar::I16 => "int16",
        Scalar::I8 => "int8",
        Scalar::U64 => "uint64",
        Scalar::U32 => "uint32",
        Scalar::U16 => "uint16",
        Scalar::U8 => "uint8",
        Scalar::I1 => "bool",
    }
}

/// Writes `t` to `path`. Returns a note when the dtype had to change (bf16
/// and fp8 are written as float32).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<Option<String>, String> {
    let (bytes, note) = npy_bytes(t).map_err(|m| format!("{}: {m}", path.display()))?;
    crate::output::write_file(path, &bytes)?;
    Ok(note.map(|n| format!("{}: {n}", path.display())))
}

/// Serializes `t` as `.npy` bytes, with a note when the dtype changed.
pub fn npy_bytes(t: &Tensor) -> Result<(Vec<u8>, Option<String>), String> {
    let storage = t.ty.elem.storage();
    let s = npy_scalar(storage);
    let note = (s != storage)
        .then(|| format!("{storage} values written as float32 (numpy has no {storage})"));
    let shape: Vec<u64> = t.ty.shape.iter().map(|&d| d as u64).collect();
    let mut out = Vec::new();
    let io = |e: std::io::Error| format!("cannot serialize: {e}");
    macro_rules! put {
        ($ty:ty, $conv:expr) => {{
            let mut w = npyz::WriteOptions::<$ty>::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut out)
                .begin_nd()
                .map_err(io)?;
            for i in 0..t.len() {
                let v: $ty = $conv(i);
                w.push(&v).map_err(io)?;
            }
            w.finish().map_err(io)?;
        }};
    }
    let f = |i: usize| t.get_f64(i);
    let n = |i: usize| t.get_i64(i);
    match s {
        Scalar::F64 => put!(f64, f),
        Scalar::F32 => put!(f32, |i| f(i) as f32),
        Scalar::F16 => put!(half::f16, |i| half::f16::from_f64(f(i))),
        Scalar::I64 | Scalar::U64 => {
            if s == Scalar::U64 {
                put!(u64, |i| n(i) as u64)
            } else {
                put!(i64, n)
            }
        }
        Scalar::I32 => put!(i32, |i| n(i) as i32),
        Scalar::I16 => put!(i16, |i| n(i) as i16),
        Scalar::I8 => put!(i8, |i| n(i) as i8),
        Scalar::U32 => put!(u32, |i| n(i) as u32),
        Scalar::U16 => put!(u16, |i| n(i) as u16),
        Scalar::U8 => put!(u8, |i| n(i) as u8),
        Scalar::I1 => put!(bool, |i| n(i) != 0),
        Scalar::BF16 | Scalar::F8E4M3FN | Scalar::F8E5M2 => {
            unreachable!("npy_scalar maps these to f32")
        }
    }
    Ok((out, note))
}

/// Converts a tensor read from a `.npy` file to the type `want` of the
/// parameter it binds: the file must hold `want`'s storage type (or float32
/// for bf16/fp8) and its shape. Errors say expected vs found.
pub fn conform(t: Tensor, want: &TensorType) -> Result<Tensor, String> {
    let storage = want.elem.storage();
    let file_s = t.ty.elem.storage();
    if t.ty.shape != want.shape || file_s != npy_scalar(storage) {
        return Err(format!(
            "expected {want} (a {} array of shape {:?}), found a {} array of shape {:?}",
            numpy_name(npy_scalar(storage)),
            want.shape,
            numpy_name(file_s),
            t.ty.shape
        ));
    }
    Ok(if storage == file_s {
        Tensor {
            ty: want.clone(),
            data: t.data,
        }
    } else {
        Tensor::from_f64(want.clone(), t.to_f64())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_supported_dtype() {
        for s in Scalar::ALL {
            let vals = match s {
                Scalar::I1 => vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
                _ if s.is_float() => vec![0.5, -2.0, 3.5, 0.0, 1.0, -0.125],
                _ if s.is_signed_int() => vec![-1.0, 2.0, -3.0, 4.0, 5.0, 127.0],
                _ => vec![1.0, 2.0, 3.0, 4.0, 5.0, 255.0],
            };
            let t = Tensor::from_f64(TensorType::new(vec![2, 3], s), vals.clone());
            let (bytes, note) = npy_bytes(&t).unwrap();
            assert_eq!(note.is_some(), npy_scalar(s) != s, "{s}");
            let back = read_npy_bytes(&bytes).unwrap();
            assert_eq!(back.ty, TensorType::new(vec![2, 3], npy_scalar(s)), "{s}");
            assert_eq!(back.to_f64(), vals, "{s}");
            assert_eq!(conform(back, &t.ty).unwrap(), t, "{s}");
        }
    }

    #[test]
    fn rejects_bad_files() {
        let t = Tensor::from_f64(
            TensorType::new(vec![4], Scalar::F32),
            vec![1.0, 2.0, 3.0, 4.0],
        );
        let (bytes, _) = npy_bytes(&t).unwrap();
        let e = read_npy_bytes(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        assert!(read_npy_bytes(b"hello").unwrap_err().contains("not a .npy"));
        assert!(read_npy_bytes(&bytes[..20]).is_err());
        // A header claiming an absurd shape.
        let text = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((text.len() as u16 + 1).to_le_bytes());
        b.extend(text.as_bytes());
        b.push(b'\n');
        assert!(read_npy_bytes(&b).unwrap_err().contains("too large"));
        let e = conform(t, &TensorType::new(vec![2, 2], Scalar::F32)).unwrap_err();
        assert_eq!(
            e,
            "expected tensor<2x2xf32> (a float32 array of shape [2, 2]), found a float32 array of shape [4]"
        );
    }

    #[test]
    fn fortran_order_is_rejected() {
        let text = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((text.len() as u16 + 1).to_le_bytes());
        b.extend(text.as_bytes());
        b.push(b'\n');
        b.extend([0u8; 16]);
        assert!(read_npy_bytes(&b).unwrap_err().contains("fortran"));
    }
}
