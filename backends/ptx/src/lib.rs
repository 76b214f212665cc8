//! The PTX backend: kernel templates → LLVM IR (text) → PTX, through
//! inkwell and LLVM's NVPTX backend.
//!
//! - [`pointwise`]: fused pointwise kernels from
//!   [`aoc_passes::kernel_expr::PointwiseKernel`] (the description the x86
//!   backend compiles too);
//! - `gemm` (feature `f16-gemm`): tensor-core GEMM for f16 activations (f16
//!   inputs, f32 accumulation, `mma.sync` m16n8k16, `ldmatrix`, `cp.async`
//!   pipeline) with a bias/relu epilogue; the compiler does not call it
//!   (activations are f32 in memory, `kernels::gemm_tc` converts A while
//!   staging), so only the tests build it;
//! - [`target`]: the architectures (`sm_70` … `sm_90a`) and their features.
//!
//! Invariants:
//! - This is the only crate that links LLVM; it does no I/O and launches
//!   nothing (the CUDA runtime in `aoc-runtime` loads the PTX).
//! - Generation is deterministic: the same kernels give the same PTX text.
//! - Kernels keep the names they are given as PTX `.entry` names; the
//!   kernel ABIs (argument order, launch geometry) are stated in each
//!   generator's module doc.

pub use aoc_passes::kernel_expr as expr;

pub mod compile;
#[cfg(feature = "f16-gemm")]
pub mod gemm;
mod irtext;
pub mod kernels;
mod llvm;
pub mod pointwise;
pub mod target;
pub mod translate;

pub use irtext::ModuleText;
#[cfg(feature = "f16-gemm")]
pub use gemm::{GemmOut, GemmTile, gemm_f16_llvm, gemm_f16_ptx};
pub use llvm::{ir_parts_to_ptx, ir_to_ptx, join_ptx};
pub use pointwise::{compile_ptx, pointwise_llvm};
pub use target::Sm;

/// The version of the LLVM this backend is linked with (`22.1.x`).
pub fn llvm_version() -> String {
    let (major, minor, patch) = inkwell::support::get_llvm_version();
    format!("{major}.{minor}.{patch}")
}
