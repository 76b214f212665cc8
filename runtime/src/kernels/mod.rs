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
//! - `avx512`, `avx2`, `scalar`: one register-tile micro-kernel per level.
//!
//! Invariants: the public API never panics on bad arguments (it returns
//! [`GemmError`]); every level computes the same function, so results differ
//! only by floating-point rounding of the summation order.

pub mod detect;
pub mod gemm;
pub mod pack;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

#[cfg(test)]
mod tests;

pub use detect::Isa;
pub use gemm::{GemmError, GemmOptions, gemm};
pub use pack::{PANEL_WIDTH, PackedB, PackedBRef, pack_b};
