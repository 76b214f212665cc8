//! Bytes read in place of their dequantization: a dequantize step (a
//! pointwise kernel of one 8-bit operand, densely, giving f32) whose
//! output only kernels that can dequantize as they load read (an
//! attention's q, k and v; a layer norm's input) goes from the plan, and
//! those kernels read its 8-bit input instead, each element through the
//! same dequantization (`attention::attention_bytes`,
//! `rows::layer_norm_bytes`). The f32 tensor, four times the bytes, is
//! never stored or loaded, and the step that wrote the bytes keeps them
//! (a GEMM stores its requantized bytes rather than dequantizing them in
//! its epilogue).
//!
//! Invariants, checked per dequantize step:
//! - its f32 output is an arena buffer, and every step that reads it
//!   before anything overwrites it is such a reader, naming the whole
//!   buffer as that operand and no other of its operands over it; nothing
//!   after the first overwrite reads what is left of it;
//! - no step up to the last reader writes over the bytes, and no reader's
//!   output overlaps them (the GPU memory plan keeps the bytes live that
//!   long: `aoc_passes::lower::memory`);
//! - plans with control flow are left alone (a loop could read the f32
//!   tensor again).

use std::collections::HashMap;

use aoc_ir::types::Scalar;
use aoc_plan::plan::{Buf, Space, Step};

use super::epilogue::{as_epilogue, row_major};
use super::half::{bufs_of, read_later};
use super::overlaps;
use crate::expr::{Compute, PointwiseKernel};
use crate::kernels::GemmEpilogue;

/// An operand a reader step takes as bytes: the step, which operand
/// (attention: 0 q, 1 k, 2 v; layer norm: 0 x), the bytes, and their
/// dequantization (an epilogue of the byte alone).
#[derive(Clone, Debug)]
pub(super) struct ByteInput {
    pub step: usize,
    pub operand: usize,
    pub bytes: Buf,
    pub dq: GemmEpilogue,
}

/// A reader's operands that may be read as bytes, as (operand number,
/// buffer), and its other buffers (read or written).
type ReaderBufs = (Vec<(usize, Buf)>, Vec<Buf>);

/// The [`ReaderBufs`] of `step`, if it is a reader that can take bytes.
fn byte_operands(step: &Step) -> Option<ReaderBufs> {
    match step {
        Step::Attention { q, k, v, mask, y, .. } => Some((vec![(0, *q), (1, *k), (2, *v)], mask.iter().copied().chain([*y]).collect())),
        Step::LayerNorm { x, gamma, beta, y, .. } => Some((vec![(0, *x)], gamma.iter().chain(beta).copied().chain([*y]).collect())),
        _ => None,
    }
}

/// Whether the pointwise step of kernel `k` on `args` is a dequantize
/// step whose output `later` reads only through readers that can take its
/// bytes (module doc): those readers' indices in `later` and operands.
/// For plans without control flow only (both callers check the plan once).
pub(super) fn read_as_bytes(k: &PointwiseKernel, args: &[Buf], later: &[Step]) -> Option<Vec<(usize, usize)>> {
    let [bytes, out] = args else { return None };
    let n = k.dims.iter().product::<u64>();
    if k.operands.len() != 1 || !matches!(k.operands[0].dtype, Scalar::U8 | Scalar::I8) || k.operands[0].strides != row_major(&k.dims) {
        return None;
    }
    if k.out_dtype != Scalar::F32 || k.compute != Compute::F32 || n == 0 || bytes.len != n || out.len != 4 * n {
        return None;
    }
    if out.space != Space::Arena || overlaps(out, bytes) {
        return None;
    }
    let mut readers = Vec::new();
    let mut end = later.len();
    for (j, s) in later.iter().enumerate() {
        let bufs = bufs_of(s);
        if bufs.iter().any(|(b, w)| *w && overlaps(b, out)) {
            end = j;
            break;
        }
        if !bufs.iter().any(|(b, _)| overlaps(b, out)) {
            continue;
        }
        let (ops, others) = byte_operands(s)?;
        if ops.iter().any(|(_, b)| b != out && overlaps(b, out)) || others.iter().any(|b| overlaps(b, out) || overlaps(b, bytes)) {
            return None;
        }
        readers.extend(ops.iter().filter(|(_, b)| b == out).map(|(o, _)| (j, *o)));
    }
    let &(last, _) = readers.last()?;
    let rest: Vec<Vec<(Buf, bool)>> = later[end..].iter().map(bufs_of).collect();
    if read_later(&rest, out) || later[..=last].iter().any(|s| bufs_of(s).iter().any(|(b, w)| *w && overlaps(b, bytes))) {
        return None;
    }
    Some(readers)
}

/// Removes every dequantize step of `steps` whose bytes its readers take
/// instead ([`read_as_bytes`]), its origin appended to its first
/// reader's; returns what the readers (by their new indices) read as bytes.
pub(super) fn drop_dequantize_steps(steps: &mut Vec<Step>, origins: &mut Vec<String>, kernels: &HashMap<&str, &PointwiseKernel>) -> Vec<ByteInput> {
    if steps.iter().any(Step::is_control) {
        return Vec::new();
    }
    // (old reader index, operand, bytes, dequantization); removed steps.
    let mut found: Vec<(usize, usize, Buf, GemmEpilogue)> = Vec::new();
    let mut removed = vec![false; steps.len()];
    let mut first_reader: Vec<(usize, usize)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let Step::Pointwise { code, args, .. } = s else { continue };
        let Some(k) = kernels.get(code.as_str()) else { continue };
        let Some(readers) = read_as_bytes(k, args, &steps[i + 1..]) else { continue };
        let Some((dq, _)) = as_epilogue(k, &args[..1], 0, 1, args[0].len) else { continue };
        removed[i] = true;
        first_reader.push((i, i + 1 + readers[0].0));
        found.extend(readers.into_iter().map(|(j, op)| (i + 1 + j, op, args[0], dq.clone())));
    }
    if found.is_empty() {
        return Vec::new();
    }
    // New index of each kept step; the removed steps' origins go to their
    // first readers.
    let mut new_index = vec![0usize; steps.len()];
    let mut next = 0;
    for (i, r) in removed.iter().enumerate() {
        new_index[i] = next;
        next += usize::from(!r);
    }
    for (i, reader) in first_reader {
        let o = origins[i].clone();
        origins[reader].push_str(" + ");
        origins[reader].push_str(&o);
    }
    let mut keep = removed.iter().map(|r| !r);
    steps.retain(|_| keep.next().unwrap_or(true));
    let mut keep = removed.iter().map(|r| !r);
    origins.retain(|_| keep.next().unwrap_or(true));
    found.into_iter().map(|(step, operand, bytes, dq)| ByteInput { step: new_index[step], operand, bytes, dq }).collect()
}
