//! `aoc-passes`: the pass infrastructure and the equality-saturation
//! optimizer.
//!
//! - `pass`, `registry`, `pipeline`, `manager`: the `Pass` trait, the one list
//!   of passes, pipeline text, and the pass manager (`run_pipeline`).
//! - `egraph`: the egg bridge (language derived from the op table, analysis,
//!   conversion, extraction by cost model, bounded saturation).
//! - `rules`: the built-in rule families, one file each; `rules_file`: the
//!   user's rules files.
//! - `passes`: the built-in passes.
//! - `lower`: an optimized function to a plan of runtime steps and
//!   pointwise kernels (shared by the x86 and PTX backends); `memplan`: the
//!   arena placement it uses and the checker every plan passes.
//!
//! Invariants: only this crate knows egg; it does no I/O (printed IR, timing
//! and statistics come back in the `PipelineReport`); every pass leaves IR the
//! verifier accepts, which the manager checks after every pass unless told
//! not to (`PipelineOptions::verify_each`).

pub mod kernel_expr;
pub mod lower;
pub mod egraph;
pub mod manager;
#[cfg(test)]
mod manager_tests;
pub mod memplan;
pub mod pass;
pub mod passes;
pub mod pipeline;
pub mod registry;
pub mod rules;
pub mod rules_file;
#[cfg(test)]
mod rules_file_tests;
#[cfg(test)]
mod testutil;

pub use egraph::Rewrite;
pub use manager::{PipelineOptions, PipelineReport, run_pipeline};
pub use pass::{Pass, PassContext, PassDef, PassStats};
pub use registry::{PassEntry, registry};
pub use rules_file::load_rules;
