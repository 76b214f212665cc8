//! aoc-runtime: loads a compiled `.aoc` artifact, validates it, allocates
//! its arena and runs it: CPU artifacts on threads with the micro-kernels
//! (`exec`), GPU artifacts through CUDA graphs (`cuda`, feature `cuda`).
//!
//! What an artifact holds — the format, the plan schemas, the weight
//! layouts, the JIT offsets — is defined in `aoc-plan`, the crate the
//! compiler writes through; `artifact`, `plan` and `gpu_plan` are its
//! modules, re-exported here.
//!
//! Invariants:
//! - In its default features this crate links neither LLVM nor Cranelift nor
//!   `aoc-ir`: a deployment needs the runtime and the artifact, nothing else.
//! - Every artifact is validated before use (magic, version, checksum,
//!   section table, manifest schema, every range, CPU features).
//! - A bad artifact is an error naming the file, never a crash.
// The compiler/runtime contract lives in aoc-plan; re-exported here so the
// runtime's API keeps its paths (`aoc_runtime::plan::Step`, ...).
pub use aoc_plan::{artifact, gpu_plan, plan};
pub mod jit;
pub mod kernels;
pub mod exec;
pub mod capi;
#[cfg(feature = "cuda")]
pub mod cuda;
