//! `aoc-ir`: the IR every other part of aoc is built on.
//!
//! It owns tensor types (plain, quantized, fp8, sparse-encoded), the op table
//! (`ops`) from which everything op-specific derives, modules and functions,
//! the `.air` parser and printer, the verifier, diagnostics, and the reference
//! interpreter.
//!
//! Invariants:
//! - depends on no framework (no egg, LLVM, Cranelift or CUDA) and does no
//!   I/O: the driver reads files and hands text and weights in;
//! - the parser returns a module and a list of diagnostics; it never fails
//!   and never panics;
//! - print(parse(print(m))) == print(m), byte for byte.

pub mod bytes;
pub mod attr;
pub mod diag;
pub mod entity;
pub mod interp;
pub mod module;
pub mod opdocs;
pub mod ops;
pub mod parse;
pub mod print;
pub mod tensor;
pub mod types;
pub mod verify;
pub mod weights;

pub use attr::{Attr, AttrKind, Attrs, ConstValue, DenseData, WeightRef};
pub use diag::{Diagnostic, Location, Severity, Span};
pub use module::{Block, Func, Module, OpData, OpId, ValueData, ValueDef, ValueId, WeightsDecl};
pub use ops::{Opcode, OpInfo, Trait};
pub use tensor::{Data, Tensor};
pub use types::{ElemType, Encoding, QuantParams, QuantType, Scalar, TensorType};

/// Parses and verifies: the diagnostics of both, parse errors first (the
/// verifier does not run when parsing failed).
pub fn parse_and_verify(source: &str) -> (Module, Vec<Diagnostic>) {
    let (module, mut diags) = parse::parse(source);
    if diags.iter().all(|d| !d.is_error()) {
        diags.extend(verify::verify_module(&module));
    }
    (module, diags)
}
