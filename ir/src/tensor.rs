//! Tensor values for the reference interpreter.
//!
//! Every float type is held as `f64` values that are exactly representable in
//! the element type (each op rounds its results to the type); every integer,
//! bool and quantized-integer type is held as `i64` values within the type's
//! range. fp8-stored quantized values are floats. Simple, slow and exact: this
//! is the numeric oracle, not a fast path.

use crate::types::{ElemType, Scalar, TensorType};

#[derive(Clone, PartialEq, Debug)]
pub enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Tensor {
    pub ty: TensorType,
    pub data: Data,
}

/// Whether a tensor of type `ty` can be allocated (the interpreter holds
/// 8 bytes per element): `Err` naming the type and size when the allocator
/// refuses, so a huge tensor is an error rather than an abort. The probe
/// allocation is released at once.
pub fn check_alloc(ty: &TensorType) -> Result<(), String> {
    let n = ty.num_elements();
    let bytes = (n as u128) * 8;
    let refuse = || {
        format!("cannot allocate {ty}: {n} elements ({:.1} GiB) do not fit in memory", bytes as f64 / (1u128 << 30) as f64)
    };
    // More than the machine has is refused outright: with overcommit the
    // allocator may grant it and the process die when it is touched.
    if physical_memory().is_some_and(|total| bytes > total as u128) {
        return Err(refuse());
    }
    let mut probe: Vec<f64> = Vec::new();
    probe.try_reserve_exact(n).map_err(|_| refuse())
}

/// Total physical memory in bytes (Linux's `/proc/meminfo`), read once.
pub fn physical_memory() -> Option<u64> {
    static TOTAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// Whether an element type is held as floats (`Data::F`).
pub fn holds_floats(elem: &ElemType) -> bool {
    elem.storage().is_float()
}

impl Tensor {
    /// Builds a tensor from float values, rounding each to the element type
    /// (or, for integer types, truncating toward zero and wrapping).
    pub fn from_f64(ty: TensorType, values: Vec<f64>) -> Tensor {
        debug_assert_eq!(values.len(), ty.num_elements());
        let s = ty.elem.storage();
        let data = if s.is_float() {
            Data::F(values.into_iter().map(|v| round_to(s, v)).collect())
        } else {
            Data::I(values.into_iter().map(|v| wrap_int(s, float_to_int(v))).collect())
        };
        Tensor { ty, data }
    }

    /// Builds a tensor from integer values, wrapping each to the element
    /// type's range (or converting, for float types).
    pub fn from_i64(ty: TensorType, values: Vec<i64>) -> Tensor {
        debug_assert_eq!(values.len(), ty.num_elements());
        let s = ty.elem.storage();
        let data = if s.is_float() {
            Data::F(values.into_iter().map(|v| round_to(s, v as f64)).collect())
        } else {
            Data::I(values.into_iter().map(|v| wrap_int(s, v)).collect())
        };
        Tensor { ty, data }
    }

    /// A tensor filled with `value`.
    pub fn splat(ty: TensorType, value: f64) -> Tensor {
        let n = ty.num_elements();
        Tensor::from_f64(ty, vec![value; n])
    }

    pub fn shape(&self) -> &[usize] {
        &self.ty.shape
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element `i` (row-major) as `f64`.
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            Data::F(v) => v[i],
            Data::I(v) => v[i] as f64,
        }
    }

    /// Element `i` (row-major) as `i64` (floats truncate toward zero).
    pub fn get_i64(&self, i: usize) -> i64 {
        match &self.data {
            Data::F(v) => float_to_int(v[i]),
            Data::I(v) => v[i],
        }
    }

    /// All elements as `f64`.
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Data::F(v) => v.clone(),
            Data::I(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// All elements as `i64`.
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Data::F(v) => v.iter().map(|&x| float_to_int(x)).collect(),
            Data::I(v) => v.clone(),
        }
    }

    /// Gathers elements by flat index into a tensor of type `ty` (used by
    /// data-movement ops, which never change values).
    pub fn select(&self, ty: TensorType, indices: impl Iterator<Item = usize>) -> Tensor {
        let data = match &self.data {
            Data::F(v) => Data::F(indices.map(|i| v[i]).collect()),
            Data::I(v) => Data::I(indices.map(|i| v[i]).collect()),
        };
        Tensor { ty, data }
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat index `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// Numpy broadcasting of two shapes, or an error naming both.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// For each flat index of `out_shape`, the flat index into a tensor of
/// `in_shape` that broadcasts to it.
pub fn broadcast_index_map(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n = out_shape.len();
    let off = n - in_shape.len();
    let in_strides = strides(in_shape);
    let total: usize = out_shape.iter().product();
    let mut map = Vec::with_capacity(total);
    for flat in 0..total {
        let idx = unravel(flat, out_shape);
        let mut src = 0;
        for d in 0..in_shape.len() {
            if in_shape[d] != 1 {
                src += idx[d + off] * in_strides[d];
            }
        }
        map.push(src);
    }
    map
}

/// Truncates toward zero; NaN becomes 0 and infinities saturate (ONNX leaves
/// these undefined; this choice is deterministic).
pub fn float_to_int(v: f64) -> i64 {
    if v.is_nan() { 0 } else { v.trunc() as i64 }
}

/// Wraps an integer into the range of integer type `s` (two's complement),
/// as numpy does; `i1` becomes 0 or 1 (non-zero is true).
pub fn wrap_int(s: Scalar, v: i64) -> i64 {
    match s {
        Scalar::I64 | Scalar::U64 => v,
        Scalar::I32 => v as i32 as i64,
        Scalar::I16 => v as i16 as i64,
        Scalar::I8 => v as i8 as i64,
        Scalar::U32 => v as u32 as i64,
        Scalar::U16 => v as u16 as i64,
        Scalar::U8 => v as u8 as i64,
        Scalar::I1 => (v != 0) as i64,
        _ => v,
    }
}

/// Rounds `v` to the nearest value of float type `s` (ties to even). fp8
/// conversions saturate to the largest finite value (ONNX's default
/// `saturate = 1`); use [`round_f8`] to choose.
pub fn round_to(s: Scalar, v: f64) -> f64 {
    match s {
        Scalar::F64 => v,
        Scalar::F32 => v as f32 as f64,
        Scalar::F16 => half::f16::from_f64(v).to_f64(),
        Scalar::BF16 => half::bf16::from_f64(v).to_f64(),
        Scalar::F8E4M3FN | Scalar::F8E5M2 => round_f8(s, v, true),
        _ => v,
    }
}

/// Rounds to an fp8 type, ties to even. `F8E4M3FN` has no infinities (its
/// only special value is NaN, max 448); `F8E5M2` is IEEE-like (max 57344).
/// With `saturate`, out-of-range finite values and infinities clamp to the
/// largest finite value (as ONNX's saturating cast does); without it they
/// become NaN (E4M3FN) or infinity (E5M2).
pub fn round_f8(s: Scalar, v: f64, saturate: bool) -> f64 {
    let (mant_bits, min_exp, max) = match s {
        Scalar::F8E4M3FN => (3, -6, 448.0),
        Scalar::F8E5M2 => (2, -14, 57344.0),
        _ => return v,
    };
    if v.is_nan() {
        return f64::NAN;
    }
    // ONNX rounds via float32 first.
    let v = v as f32 as f64;
    if v.is_infinite() {
        return match (saturate, s) {
            (true, _) => max * v.signum(),
            (false, Scalar::F8E4M3FN) => f64::NAN,
            (false, _) => v,
        };
    }
    let a = v.abs();
    if a == 0.0 {
        return v;
    }
    // Spacing of representable values around `a` (a normal f64: its
    // exponent field is floor(log2(a)) exactly).
    let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(min_exp);
    let ulp = pow2(e - mant_bits);
    // Dividing by a power of two is exact, so ties are seen exactly.
    let rounded = (a / ulp).round_ties_even() * ulp;
    let out = if rounded > max {
        match (saturate, s) {
            (true, _) => max,
            (false, Scalar::F8E4M3FN) => return f64::NAN,
            (false, _) => {
                // E5M2 rounds to infinity only past the halfway point above max.
                if a >= max + pow2(15 - mant_bits - 1) { f64::INFINITY } else { max }
            }
        }
    } else {
        rounded
    };
    out.copysign(v)
}

/// 2^k for a normal f64 exponent `k` (−1022 ≤ k ≤ 1023), exactly, without
/// `powi`'s loop (fp8 rounding runs per element of large tensors).
pub(crate) fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
        assert!(broadcast_shapes(&[2, 3], &[4]).is_err());
        assert_eq!(broadcast_index_map(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_index_map(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn fp8_rounding() {
        assert_eq!(round_f8(Scalar::F8E4M3FN, 448.0, true), 448.0);
        assert_eq!(round_f8(Scalar::F8E4M3FN, 1000.0, true), 448.0);
        assert!(round_f8(Scalar::F8E4M3FN, 1000.0, false).is_nan());
        assert_eq!(round_f8(Scalar::F8E4M3FN, 1.0625, true), 1.0); // tie to even
        assert_eq!(round_f8(Scalar::F8E4M3FN, 1.1875, true), 1.25); // tie to even (1.125 odd)
        assert_eq!(round_f8(Scalar::F8E5M2, -3.0, true), -3.0);
        assert_eq!(round_f8(Scalar::F8E4M3FN, 2f64.powi(-9), true), 2f64.powi(-9)); // smallest subnormal
        assert_eq!(wrap_int(Scalar::I8, 200), -56);
    }

    /// fp8 rounding, which takes the exponent from the bits and builds
    /// powers of two directly, gives the nearest finite fp8 value (ties to
    /// the even code) for every in-range value of a sweep of f32 bit
    /// patterns and at every tie, by a search over the type's decoded
    /// codes, in both types, saturating or not; and the encoding of each
    /// rounded value decodes back to it. (Out-of-range values: the tests
    /// above.)
    #[test]
    fn fp8_rounding_is_the_nearest_code() {
        fn nearest(s: Scalar, v: f64) -> Option<f64> {
            let a = (v as f32 as f64).abs();
            let mut best: Option<(f64, u8)> = None;
            for code in 0u8..0x80 {
                let x = crate::bytes::f8_to_f64(s, code);
                if !x.is_finite() {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((y, c)) => (x - a).abs() < (y - a).abs() || ((x - a).abs() == (y - a).abs() && code % 2 == 0 && c % 2 == 1),
                };
                if better {
                    best = Some((x, code));
                }
            }
            let max = if s == Scalar::F8E4M3FN { 448.0 } else { 57344.0 };
            (a <= max).then(|| best.map(|(x, _)| x.copysign(v))).flatten()
        }
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for s in [Scalar::F8E4M3FN, Scalar::F8E5M2] {
            // The sweep, and every tie: the midpoints between neighbouring
            // codes (exact in f32), both signs.
            let codes: Vec<f64> = (0u8..0x80).map(|c| crate::bytes::f8_to_f64(s, c)).filter(|x| x.is_finite()).collect();
            let ties = codes.windows(2).flat_map(|w| [(w[0] + w[1]) / 2.0, -(w[0] + w[1]) / 2.0]).map(|x| (x as f32).to_bits());
            for bits in (0..=u32::MAX).step_by(4099).chain(ties) {
                let v = f32::from_bits(bits) as f64;
                let want = nearest(s, v);
                for sat in [false, true] {
                    let got = round_f8(s, v, sat);
                    if let Some(want) = want {
                        assert!(same(got, want), "{s:?} {v:e} (bits {bits:#x}) saturate {sat}: {got:e}, expected {want:e}");
                    }
                    if got.is_finite() {
                        let b = crate::bytes::f64_to_f8(s, got);
                        assert!(same(crate::bytes::f8_to_f64(s, b), got), "{s:?} {got:e} encodes to {b:#04x}");
                    }
                }
            }
        }
    }
}
