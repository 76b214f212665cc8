//! The ABI between the x86-64 backend's generated pointwise kernels and the
//! runtime that calls them: the byte offsets of the math table's entries.
//!
//! A kernel blob has no relocations. The only outside code it reaches is
//! the runtime's `MathTable` (`aoc_runtime::jit`), whose address it gets as
//! its last argument; the code generator (`aoc_backend_x86::pointwise`)
//! loads each function pointer at the offset named here. The kernel's entry
//! is `extern "C" fn(args: *const *mut u8, row_start: u64, row_end: u64,
//! math: *const MathTable)`, `args` holding the operands' base pointers and
//! then the output's.
//!
//! Invariants: the table is `#[repr(C)]`, one 8-byte function pointer per
//! entry in the order below (the scalar entries, then the `f32x4` ones, then
//! scalar entries added later), so
//! entry `i` lies at `8·i`; the runtime's test
//! `jit_math_offsets_match_layout` checks every constant against the real
//! layout. Changing an offset or the order changes the ABI of every
//! artifact already written.

/// Byte offsets of the `MathTable` fields (`i32`, as Cranelift's load
/// offsets are).
pub const MATH_EXP_OFFSET: i32 = 0;
pub const MATH_LOG_OFFSET: i32 = 8;
pub const MATH_TANH_OFFSET: i32 = 16;
pub const MATH_ERF_OFFSET: i32 = 24;
pub const MATH_POW_OFFSET: i32 = 32;
pub const MATH_SIGMOID_OFFSET: i32 = 40;
pub const MATH_EXP4_OFFSET: i32 = 48;
pub const MATH_LOG4_OFFSET: i32 = 56;
pub const MATH_TANH4_OFFSET: i32 = 64;
pub const MATH_ERF4_OFFSET: i32 = 72;
pub const MATH_SIGMOID4_OFFSET: i32 = 80;
/// Scalar entries added after the vector ones (so earlier offsets, and
/// artifacts written before them, are unchanged).
pub const MATH_SIN_OFFSET: i32 = 88;
pub const MATH_COS_OFFSET: i32 = 96;
