//! Element types, shared by the compiler (as `aoc_ir::Scalar`) and the
//! runtime (as `aoc_runtime::artifact::DType`).

use std::fmt;

/// An element type: the IR's non-quantized scalar types (`aoc_ir::Scalar` is
/// this enum) and the dtypes of an artifact's tensors (names as the text
/// IR writes them).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3FN,
    F8E5M2,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    I1,
}

impl DType {
    /// Every scalar type, in the order the docs list them.
    pub const ALL: [DType; 15] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F8E4M3FN,
        DType::F8E5M2,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::I1,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3FN => "f8E4M3FN",
            DType::F8E5M2 => "f8E5M2",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U64 => "u64",
            DType::U32 => "u32",
            DType::U16 => "u16",
            DType::U8 => "u8",
            DType::I1 => "i1",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The same as [`DType::from_name`] (the artifact reader's spelling).
    pub fn parse(name: &str) -> Option<DType> {
        DType::from_name(name)
    }

    /// Bytes per element in an artifact's storage (an `i1` takes a byte).
    pub fn size(self) -> u64 {
        (self.bits() as u64).div_ceil(8)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F64 | DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3FN | DType::F8E5M2
        )
    }

    pub fn is_int(self) -> bool {
        !self.is_float() && self != DType::I1
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::I16 | DType::I8)
    }

    pub fn is_bool(self) -> bool {
        self == DType::I1
    }

    /// Size of one element in bits.
    pub fn bits(self) -> u32 {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 64,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 16,
            DType::F8E4M3FN | DType::F8E5M2 | DType::I8 | DType::U8 => 8,
            DType::I1 => 1,
        }
    }

    /// Inclusive value range of an integer type (i1 is 0..=1).
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::I64 => (i64::MIN, i64::MAX),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            DType::U64 => (0, i64::MAX),
            DType::U32 => (0, u32::MAX as i64),
            DType::U16 => (0, u16::MAX as i64),
            DType::U8 => (0, u8::MAX as i64),
            DType::I1 => (0, 1),
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::DType;

    #[test]
    fn names_round_trip_and_sizes_are_bytes() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
            assert_eq!(d.size() * 8, (d.bits() as u64).max(8));
        }
        assert_eq!(DType::I1.size(), 1);
        assert_eq!(DType::BF16.size(), 2);
    }
}
