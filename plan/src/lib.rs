//! aoc-plan: the contract between the aoc compiler and its runtime — every
//! byte one writes and the other reads.
//!
//! - [`artifact`]: the `.aoc` file (docs/artifact.md): header, section
//!   table, CRC-32, the JSON [`Manifest`](artifact::Manifest), the dtypes
//!   ([`DType`]); [`ArtifactWriter`](artifact::ArtifactWriter) builds one,
//!   [`Artifact`](artifact::Artifact) maps and validates one.
//! - [`plan`]: the CPU plan schema (the manifest's `plan` for x86-64
//!   targets): `Step`s over `Buf`s.
//! - [`gpu_plan`]: the GPU plan schema (`sm_*` targets): launches and host
//!   items.
//! - [`pack`]: the packed weight layouts the compiler stores and the CPU
//!   kernels read (GEMM panels, convolution and Winograd weights).
//! - [`jit_abi`]: what generated x86-64 code and the runtime agree on to
//!   call each other (the math table's offsets).
//!
//! The compiler side (`aoc-passes`, `aoc-backend-x86`, `aoc-backend-ptx`)
//! depends on this crate to write artifacts; `aoc-runtime` depends on it to
//! read them and re-exports its modules at their old paths
//! (`aoc_runtime::{artifact, plan, gpu_plan}`). Neither side keeps a second
//! copy of a schema, a layout or an offset.
//!
//! Invariants:
//! - The runtime reads exactly what the compiler writes: both go through
//!   these types and functions, so a field, a layout or an offset changes in
//!   one place, for both sides at once.
//! - This crate depends only on serde, serde_json and memmap2 — never on
//!   `aoc-ir`, `aoc-runtime`, egg, LLVM, Cranelift or CUDA
//!   (`tests/crate_boundaries.rs` checks the manifests), so a deployment that
//!   links the runtime pulls in nothing of the compiler.
//! - It holds data and checks, no kernels: nothing here runs a model.
//! - A bad artifact is an error from [`Artifact::open`](artifact::Artifact::open),
//!   never a crash later; the writer never emits a file the reader refuses.
//!
//! ```
//! use aoc_plan::artifact::{Artifact, ArtifactWriter};
//! use aoc_plan::plan::Plan;
//!
//! let plan = Plan { steps: vec![], origins: vec![] };
//! let mut w = ArtifactWriter::new("x86-64");
//! w.input("x", "f32", &[2])
//!     .output("y", "f32", &[2])
//!     .plan(serde_json::to_value(&plan).unwrap())
//!     .add_weight_f32("w", &[2], &[1.0, 2.0]);
//! let art = Artifact::from_bytes(w.to_bytes().unwrap()).unwrap();
//! assert_eq!(art.weight_f32("w").unwrap(), &[1.0, 2.0]);
//! let back: Plan = serde_json::from_value(art.manifest().plan.clone()).unwrap();
//! assert_eq!(back, plan);
//! ```

pub mod artifact;
mod float_json;
pub mod gpu_plan;
pub mod jit_abi;
pub mod pack;
pub mod plan;

pub mod dtype;
pub use dtype::DType;
