//! `aoc_compiler`: the library behind the `aoc` command — the driver that
//! reads and writes files (`.air`, `.onnx`, `.safetensors`, `.npy`), the ONNX
//! importer, and diagnostics rendering.
//!
//! Invariant: this is the only crate that does file I/O or prints; the other
//! crates take data and return data and diagnostics.

pub mod artifact_io;
pub mod bench;
pub mod cli;
pub mod cpu;
pub mod driver;
pub mod gpu;
#[cfg(feature = "mlir")]
pub mod mlir;
pub mod npy;
pub mod onnx;
pub mod opt;
pub mod output;
pub mod prune;
pub mod quantize;
pub mod render;
pub mod run_check;
pub mod say;
pub mod sparsify;
pub mod weights;
