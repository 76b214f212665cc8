//! aoc-backend-x86: lowers an optimized module to a CPU plan (calls into the
//! runtime's micro-kernels) plus pointwise kernels generated with Cranelift,
//! and packs both with the weights into an `.aoc` artifact.
pub use aoc_passes::kernel_expr as expr;
pub use aoc_passes::lower;
pub mod pointwise;
pub mod compile;
