//! Tensor types: element types (plain, quantized, fp8), static shapes and
//! sparse encodings.
//!
//! Invariants: shapes are static (every dimension known); a quantized element
//! type's storage is an integer or fp8 type and its expressed type a float
//! type; per-axis parameters have one (scale, zero point) pair per slice.
//! `Display` prints exactly the text syntax the parser reads.

use std::fmt;

/// A non-quantized scalar type: the one element-type enum of aoc, shared
/// with the runtime through `aoc-plan` (so the artifact's dtypes and the
/// IR's scalars cannot drift apart).
pub use aoc_plan::dtype::DType as Scalar;

/// Quantization parameters of a quantized element type.
#[derive(Clone, PartialEq, Debug)]
pub enum QuantParams {
    /// One scale and zero point for the whole tensor.
    PerTensor { scale: f64, zero_point: i64 },
    /// One (scale, zero point) per slice along `axis`.
    PerAxis { axis: usize, scales: Vec<f64>, zero_points: Vec<i64> },
}

/// `!quant.uniform<storage:expressed, params>`, as in MLIR's quant dialect.
#[derive(Clone, PartialEq, Debug)]
pub struct QuantType {
    pub storage: Scalar,
    pub expressed: Scalar,
    pub params: QuantParams,
}

impl QuantType {
    /// Scale and zero point for slice `i` along the quantized axis (or the
    /// per-tensor pair).
    pub fn params_at(&self, i: usize) -> (f64, i64) {
        match &self.params {
            QuantParams::PerTensor { scale, zero_point } => (*scale, *zero_point),
            QuantParams::PerAxis { scales, zero_points, .. } => (scales[i], zero_points[i]),
        }
    }

    pub fn axis(&self) -> Option<usize> {
        match &self.params {
            QuantParams::PerTensor { .. } => None,
            QuantParams::PerAxis { axis, .. } => Some(*axis),
        }
    }
}

/// The element type of a tensor.
#[derive(Clone, PartialEq, Debug)]
pub enum ElemType {
    Scalar(Scalar),
    Quant(Box<QuantType>),
}

impl ElemType {
    pub const F32: ElemType = ElemType::Scalar(Scalar::F32);
    pub const I64: ElemType = ElemType::Scalar(Scalar::I64);
    pub const I1: ElemType = ElemType::Scalar(Scalar::I1);

    /// The plain scalar type, or `None` for quantized types.
    pub fn scalar(&self) -> Option<Scalar> {
        match self {
            ElemType::Scalar(s) => Some(*s),
            ElemType::Quant(_) => None,
        }
    }

    /// The type values are stored as: the scalar itself, or a quantized
    /// type's storage type.
    pub fn storage(&self) -> Scalar {
        match self {
            ElemType::Scalar(s) => *s,
            ElemType::Quant(q) => q.storage,
        }
    }

    pub fn quant(&self) -> Option<&QuantType> {
        match self {
            ElemType::Scalar(_) => None,
            ElemType::Quant(q) => Some(q),
        }
    }

    pub fn is_float(&self) -> bool {
        matches!(self, ElemType::Scalar(s) if s.is_float())
    }

    pub fn is_int(&self) -> bool {
        matches!(self, ElemType::Scalar(s) if s.is_int())
    }

    pub fn is_bool(&self) -> bool {
        matches!(self, ElemType::Scalar(Scalar::I1))
    }
}

impl From<Scalar> for ElemType {
    fn from(s: Scalar) -> Self {
        ElemType::Scalar(s)
    }
}

/// A tensor's sparse encoding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    /// N:M structured sparsity: at most `n` non-zeros in every `m`
    /// consecutive elements along the reduction axis (`#sparse.nm<2, 4>`).
    NM { n: u32, m: u32 },
}

/// `tensor<1x3x224x224xf32>`, optionally with an encoding.
#[derive(Clone, PartialEq, Debug)]
pub struct TensorType {
    pub shape: Vec<usize>,
    pub elem: ElemType,
    pub encoding: Option<Encoding>,
}

impl TensorType {
    pub fn new(shape: impl Into<Vec<usize>>, elem: impl Into<ElemType>) -> TensorType {
        TensorType { shape: shape.into(), elem: elem.into(), encoding: None }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a rank-0 tensor). Saturates instead of
    /// overflowing; the verifier rejects types above [`MAX_ELEMENTS`].
    pub fn num_elements(&self) -> usize {
        self.shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// The same shape with another element type.
    pub fn with_elem(&self, elem: impl Into<ElemType>) -> TensorType {
        TensorType { shape: self.shape.clone(), elem: elem.into(), encoding: None }
    }

    /// The same element type with another shape.
    pub fn with_shape(&self, shape: impl Into<Vec<usize>>) -> TensorType {
        TensorType { shape: shape.into(), elem: self.elem.clone(), encoding: None }
    }
}

/// The most elements (and the largest dimension) a tensor type may have:
/// 2^40. Bigger shapes in user input are errors, so shape arithmetic never
/// overflows.
pub const MAX_ELEMENTS: usize = 1 << 40;

/// The element count of `shape`, or an error when it (or a dimension)
/// exceeds [`MAX_ELEMENTS`].
pub fn checked_elements(shape: &[usize]) -> Result<usize, String> {
    let too_big = || format!("shape {shape:?} has more than 2^40 elements");
    if shape.iter().any(|&d| d > MAX_ELEMENTS) {
        return Err(too_big());
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d).filter(|&n| n <= MAX_ELEMENTS))
        .ok_or_else(too_big)
}

/// Writes a float so that reading it back gives the same `f64`, always with
/// a `.` or an exponent so the lexer sees a float.
pub fn write_float(f: &mut impl fmt::Write, v: f64) -> fmt::Result {
    if v.is_nan() {
        return f.write_str("nan");
    }
    if v.is_infinite() {
        return f.write_str(if v > 0.0 { "inf" } else { "-inf" });
    }
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) { f.write_str(&s) } else { write!(f, "{s}.0") }
}

impl fmt::Display for QuantType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "!quant.uniform<{}:{}", self.storage, self.expressed)?;
        match &self.params {
            QuantParams::PerTensor { scale, zero_point } => {
                f.write_str(", ")?;
                write_float(f, *scale)?;
                if *zero_point != 0 {
                    write!(f, ":{zero_point}")?;
                }
            }
            QuantParams::PerAxis { axis, scales, zero_points } => {
                write!(f, ":{axis}, {{")?;
                for (i, (s, z)) in scales.iter().zip(zero_points).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_float(f, *s)?;
                    if *z != 0 {
                        write!(f, ":{z}")?;
                    }
                }
                f.write_str("}")?;
            }
        }
        f.write_str(">")
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElemType::Scalar(s) => write!(f, "{s}"),
            ElemType::Quant(q) => write!(f, "{q}"),
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encoding::NM { n, m } => write!(f, "#sparse.nm<{n}, {m}>"),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}", self.elem)?;
        if let Some(enc) = &self.encoding {
            write!(f, ", {enc}")?;
        }
        f.write_str(">")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_in_text_syntax() {
        let t = TensorType::new(vec![1, 3, 224, 224], Scalar::F32);
        assert_eq!(t.to_string(), "tensor<1x3x224x224xf32>");
        let q = QuantType {
            storage: Scalar::I8,
            expressed: Scalar::F32,
            params: QuantParams::PerTensor { scale: 0.0157, zero_point: -3 },
        };
        let t = TensorType::new(vec![4], ElemType::Quant(Box::new(q)));
        assert_eq!(t.to_string(), "tensor<4x!quant.uniform<i8:f32, 0.0157:-3>>");
        let q = QuantType {
            storage: Scalar::I8,
            expressed: Scalar::F32,
            params: QuantParams::PerAxis { axis: 0, scales: vec![0.1, 0.2], zero_points: vec![0, 1] },
        };
        assert_eq!(q.to_string(), "!quant.uniform<i8:f32:0, {0.1, 0.2:1}>");
        let mut t = TensorType::new(vec![8, 16], Scalar::F16);
        t.encoding = Some(Encoding::NM { n: 2, m: 4 });
        assert_eq!(t.to_string(), "tensor<8x16xf16, #sparse.nm<2, 4>>");
        assert_eq!(TensorType::new(vec![], Scalar::I1).to_string(), "tensor<i1>");
    }
}
