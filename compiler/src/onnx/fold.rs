//! Import-time constant folding: an op of the table on constant operands,
//! evaluated with the reference interpreter's own hooks (`eval_op`), so a
//! folded value is exactly what running the op would give. When an op
//! cannot be folded (its hook returns an error), the importer emits it
//! instead and the failure, if any, shows when the model runs.
//!
//! Invariant: hooks never panic on any operands their `infer` accepts (an
//! error is a value), so folding runs them directly; a panic here is a bug
//! in a hook and reaches the fuzzers and the panic hook like any other.

use aoc_ir::attr::Attrs;
use aoc_ir::interp::{NoWeights, eval_op};
use aoc_ir::{Opcode, Tensor, TensorType};

/// The most elements a constant built at import time may have (64 Mi).
pub const FOLD_LIMIT: usize = 1 << 26;

/// Evaluates `opcode` on constant operands; `None` when any step fails.
pub fn try_fold(
    opcode: Opcode,
    tensors: &[&Tensor],
    attrs: &Attrs,
    declared: Option<&[TensorType]>,
) -> Option<Vec<Tensor>> {
    let attrs = opcode.info().complete_attrs(attrs.clone()).ok()?;
    let types: Vec<TensorType> = tensors.iter().map(|t| t.ty.clone()).collect();
    let result_types = aoc_ir::verify::infer_op(opcode, &types, &attrs, declared).ok()?;
    // Huge results stay ops: folding would allocate them at import time.
    if result_types.iter().any(|t| t.num_elements() > FOLD_LIMIT) {
        return None;
    }
    eval_op(opcode, tensors, &attrs, &result_types, &NoWeights).ok()
}
