//! CPU micro-kernels of the runtime: the fp32 GEMM `C (+)= A·B` that the
//! x86-64 backend calls for matmul, gemm and implicit-GEMM convolution.
//!
//! Layout of the module:
//! - [`detect`]: the instruction-set levels ([`Isa`]) and their run-time
//!   detection (cached once per process);
//! - [`pack`]: the packed-panel layout of the right-hand matrix B (packed at
//!   compile time into the artifact) and the run-time packing of A;
//! - [`gemm`]: the public entry [`gemm()`], argument checking, cache blocking,
//!   edge tiles, the fused epilogue and the split over threads;
//! - `avx512`, `avx2`, `scalar`: one register-tile micro-kernel per level;
//! - [`conv`]: NHWC convolution (implicit GEMM), depthwise and transposed
//!   convolution, and their compile-time weight packing;
//! - [`pool`]: NHWC max/average pooling and middle-axis reductions;
//! - [`resize`]: NHWC nearest and bilinear resize;
//! - [`winograd`]: NHWC Winograd F(2×2, 3×3) / F(4×4, 3×3) convolution
//!   over per-point GEMMs, and the packing of its transformed weights;
//! - [`copy`]: strided copy (transposes, slices, expand), fill and gather;
//! - [`norm`]: softmax, layer normalization and the vectorizable f32 exp;
//!   [`act`]: activations applied in other kernels' epilogues (GELU);
//! - [`batched`]: batched matmul of two activations over [`gemm()`];
//! - [`attention`]: fused scaled dot-product attention over strided
//!   operands; [`qconv`]: integer (i8/u8) convolution with requantization.
//! - [`int8`]: the u8×s8→i32 GEMM of quantized operators (AVX-512 VNNI,
//!   AVX2, scalar) and the requantization epilogue; [`bf16`]: the bf16 GEMM
//!   (AVX-512 BF16, AVX2, scalar); [`amx`]: their AMX tile levels; the
//!   private `grouped` module is the packed layout and driver they share.
//!
//! Invariants: the public API never panics on bad arguments (it returns
//! [`GemmError`]); every level computes the same function, so results differ
//! only by floating-point rounding of the summation order.

pub mod act;
pub mod amx;
pub mod attention;
pub mod batched;
pub mod bf16;
pub mod conv;
pub mod copy;
pub mod detect;
pub mod gemm;
pub mod grid_sample;
mod grouped;
pub mod int8;
pub mod norm;
pub mod pack;
pub mod pool;
pub mod qconv;
pub mod qdepthwise;
pub mod qelem;
pub mod qmatmul;
pub mod qdirect;
pub mod resize;
pub mod winograd;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

#[cfg(test)]
mod attention_tests;
#[cfg(test)]
mod conv_tests;
#[cfg(test)]
mod int8_tests;
#[cfg(test)]
mod misc_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testdata;

pub use detect::Isa;
pub use gemm::{GemmError, GemmOptions, SharedAPart, gemm, gemm_shared_a};

/// The width of the next block of a loop over `rest` (at least 1) channels
/// in fixed-size blocks of 64 down to 1: the largest power of two not above
/// `rest` or 64. Each width is a const generic of the block kernel, so a
/// tail of 4 channels costs one 4-wide block, not 4 lanes of a 64-wide one.
pub(crate) fn block_width(rest: usize) -> usize {
    debug_assert!(rest > 0);
    1 << rest.min(64).ilog2()
}

/// Runs `block::<N>(args)` on the next block of `rest` channels, `N` being
/// [`block_width`]`(rest)`, and gives `N` (by which the caller's loop
/// advances).
macro_rules! block_call {
    ($rest:expr, $block:ident($($arg:expr),* $(,)?)) => {{
        let n = $crate::kernels::block_width($rest);
        match n {
            64 => $block::<64>($($arg),*),
            32 => $block::<32>($($arg),*),
            16 => $block::<16>($($arg),*),
            8 => $block::<8>($($arg),*),
            4 => $block::<4>($($arg),*),
            2 => $block::<2>($($arg),*),
            _ => $block::<1>($($arg),*),
        }
        n
    }};
}
pub(crate) use block_call;

/// The error of every kernel: a message naming the expectation.
pub type KernelError = GemmError;
pub use pack::{PANEL_WIDTH, PackedB, PackedBRef, pack_b};
