//! Epilogue fusion: a pointwise step right after a GEMM-shaped step that
//! rewrites the GEMM's output in place becomes that GEMM's epilogue
//! ([`GemmEpilogue`]: its kernel with the product as operand 0, the other
//! operands' strides over the `m × n` output), so the product is stored
//! once, finished.
//!
//! Invariants:
//! - Only a contiguous, one-batch, one-group output takes an epilogue, and
//!   only a step that reads that output at exactly the element it writes
//!   (no other operand may read it: it would see the unfinished value).
//! - Every other operand must be affine in (row, column) of the output
//!   ([`affine_over`]); otherwise the steps stay two launches.

use std::collections::HashMap;

use aoc_ir::types::Scalar;
use aoc_plan::plan::{Buf, Space, Step};

use super::overlaps;
use crate::expr::{Expr, PointwiseKernel};
use crate::kernels::GemmEpilogue;

/// The element strides `[row, col]` of a pointwise operand (`strides` over
/// `dims`) when the kernel's flat element index is `row · n + col` over an
/// `m × n` matrix: `None` unless that offset is affine in (row, col). Dims
/// the operand walks contiguously are merged first; then the
/// dims are split where their trailing product is `n` (a dim straddling the
/// split is cut in two when it divides), then each side must collapse to one
/// stride.
pub fn affine_over(dims: &[u64], strides: &[u64], m: u64, n: u64) -> Option<[u64; 2]> {
    if dims.iter().product::<u64>() != m * n || n == 0 || m == 0 {
        return None;
    }
    // Merge dims this operand walks contiguously (the lowering collapses
    // dims for the kernel's vector width, not along the matrix's rows, so
    // a dense operand may come as [24, 4096] for a 128 × 768 matrix).
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (&d, &s) in dims.iter().zip(strides) {
        match merged.last_mut() {
            Some((pd, ps)) if *ps == s * d => {
                *pd *= d;
                *ps = s;
            }
            _ => merged.push((d, s)),
        }
    }
    // Split into (dim, stride) lists for the row part and the column part.
    let mut col: Vec<(u64, u64)> = Vec::new();
    let mut row: Vec<(u64, u64)> = Vec::new();
    let mut need = n;
    for &(d, s) in merged.iter().rev() {
        if need == 1 {
            row.push((d, s));
        } else if need % d == 0 {
            col.push((d, s));
            need /= d;
        } else if d % need == 0 {
            col.push((need, s));
            row.push((d / need, s * need));
            need = 1;
        } else {
            return None;
        }
    }
    if need != 1 {
        return None;
    }
    // Innermost first in each list: collapse when each dim's stride is the
    // previous stride times the previous extent (unit dims are free).
    let collapse = |v: &[(u64, u64)]| -> Option<u64> {
        let v: Vec<(u64, u64)> = v.iter().copied().filter(|&(d, _)| d != 1).collect();
        let Some(&(_, s0)) = v.first() else { return Some(0) };
        let mut expect = s0;
        for &(d, s) in &v {
            if s != expect {
                return None;
            }
            expect = s * d;
        }
        Some(s0)
    };
    Some([collapse(&row)?, collapse(&col)?])
}

/// The contiguous `m × n` output of a GEMM-shaped step (one batch, one
/// group), the only form an epilogue is fused into.
pub(super) fn gemm_output(step: &Step) -> Option<(Buf, u64, u64)> {
    match step {
        Step::Gemm { c, m, n, ldc, .. } if ldc == n => Some((*c, *m, *n)),
        Step::Conv2d { y, geom, .. } if geom.group == 1 => Some((*y, geom.n * geom.oh * geom.ow, geom.oc)),
        Step::MatMul { c, batch: 1, m, n, c_strides, .. } if c_strides[1] == *n && c_strides[2] == 1 => Some((*c, *m, *n)),
        _ => None,
    }
}

/// What a pointwise step right after a GEMM writing `c` (`m × n`, row
/// major, contiguous) must be to become its epilogue, wherever it stores:
/// an f32 kernel over the `m × n` elements with one f32 operand reading
/// `c` at the element it writes and no other operand reading `c` (it
/// would see the value before the epilogue). Returns the kernel, its
/// output buffer, its operands, and which of them reads `c`.
fn product_reader<'k, 's>(
    c: &Buf,
    m: u64,
    n: u64,
    next: &'s Step,
    kernels: &HashMap<&str, &'k PointwiseKernel>,
) -> Option<(&'k PointwiseKernel, &'s Buf, &'s [Buf], usize)> {
    let Step::Pointwise { code, args, .. } = next else { return None };
    let k = *kernels.get(code.as_str())?;
    let (out, ins) = args.split_last()?;
    if k.out_dtype != Scalar::F32 || k.compute != crate::expr::Compute::F32 || ins.len() != k.operands.len() {
        return None;
    }
    if k.dims.iter().product::<u64>() != m * n {
        return None;
    }
    let dense = row_major(&k.dims);
    let me = ins.iter().zip(&k.operands).position(|(b, op)| b == c && op.strides == dense && op.dtype == Scalar::F32)?;
    if ins.iter().enumerate().any(|(i, b)| i != me && overlaps(b, c)) {
        return None;
    }
    Some((k, out, ins, me))
}

/// A pointwise step right after a GEMM writing `c` (`m × n`, row major,
/// contiguous) that rewrites `c` in place and reads it at the element it
/// writes becomes that GEMM's epilogue: returns the epilogue and the extra
/// buffers (its other operands, in order).
pub(super) fn fusable_epilogue(c: &Buf, m: u64, n: u64, next: &Step, kernels: &HashMap<&str, &PointwiseKernel>) -> Option<(GemmEpilogue, Vec<Buf>)> {
    let (k, out, ins, me) = product_reader(c, m, n, next, kernels)?;
    if out != c {
        return None;
    }
    as_epilogue(k, ins, me, m, n)
}

/// A pointwise step right after a GEMM-shaped `step` writing `c` (`m × n`,
/// row major, contiguous) that reads `c` at the element it writes but
/// stores into another buffer: the GEMM stores the finished values there
/// instead, and `c` is never written. That holds when no step after the
/// pointwise one (`later`) reads `c`, the output is an f32 `m × n` of the
/// same size that overlaps neither the GEMM's weight and bias nor another
/// operand of the epilogue (unless it is that operand itself, read at the
/// element it writes). This is what a layer whose epilogue the IR did not
/// fuse (a `sparse.matmul` and its bias, GELU or residual add) turns into.
///
/// The output may overlap the GEMM's A only for a kernel that reads A
/// through a half copy, never the f32 A itself (other blocks still read A
/// while one stores): the returned [`MovedEpilogue::over_a`] says so, and
/// the caller keeps the steps apart unless the kernel is such a one.
pub(super) fn moved_epilogue(
    step: &Step,
    (c, m, n): (&Buf, u64, u64),
    next: &Step,
    later: &[Step],
    kernels: &HashMap<&str, &PointwiseKernel>,
) -> Option<MovedEpilogue> {
    let (k, out, ins, me) = product_reader(c, m, n, next, kernels)?;
    if c.space != Space::Arena || out == c || out.len != c.len {
        return None;
    }
    let dense = row_major(&k.dims);
    let a = match step {
        Step::Gemm { a, .. } | Step::MatMul { a, .. } => *a,
        Step::Conv2d { x, .. } => *x,
        _ => return None,
    };
    let (mut over_a, mut over_other) = (false, false);
    step.clone().visit_bufs(|b, write| {
        if !write && (overlaps(b, out) || overlaps(b, c)) {
            if *b == a { over_a = true } else { over_other = true }
        }
    });
    if over_other {
        return None;
    }
    let same_element = |i: usize| ins[i] == *out && k.operands[i].strides == dense;
    if ins.iter().enumerate().any(|(i, b)| i != me && overlaps(b, out) && !same_element(i)) {
        return None;
    }
    // Byte by byte: the output may cover part of c.
    let after: Vec<Vec<(Buf, bool)>> = std::iter::once(vec![(*out, true)]).chain(later.iter().map(super::half::bufs_of)).collect();
    if super::half::read_later(&after, c) {
        return None;
    }
    let (epilogue, extra) = as_epilogue(k, ins, me, m, n)?;
    Some(MovedEpilogue { epilogue, extra, out: *out, over_a })
}

/// A layer norm (`step`) whose output `y` the next step quantizes alone
/// (a pointwise kernel of `y`, read at the element it writes, storing 8-bit
/// integers into a buffer that overlaps none of the layer norm's): the
/// quantization as a byte output of the layer norm. Returns it as an
/// epilogue of `y` alone, its output, and whether `y` must still be stored
/// (a later step reads it, or it is not an arena buffer).
pub(super) fn layer_norm_quant(step: &Step, next: &Step, later: &[Step], kernels: &HashMap<&str, &PointwiseKernel>) -> Option<(GemmEpilogue, Buf, bool)> {
    let Step::LayerNorm { x, gamma, beta, y, rows, cols, .. } = step else { return None };
    quantized_copy(y, rows * cols, &[Some(*x), *gamma, *beta], next, later, kernels)
}

/// [`layer_norm_quant`] for an attention step: the next step quantizes its
/// output `y` alone, densely (so each byte sits at its f32 element's
/// offset, whatever y's strides are).
pub(super) fn attention_quant(step: &Step, next: &Step, later: &[Step], kernels: &HashMap<&str, &PointwiseKernel>) -> Option<(GemmEpilogue, Buf, bool)> {
    let Step::Attention { q, k, v, mask, y, batch, heads, sq, dv, .. } = step else { return None };
    quantized_copy(y, batch * heads * sq * dv, &[Some(*q), Some(*k), Some(*v), *mask], next, later, kernels)
}

/// The step `next` quantizing `y` (`n` f32 elements, written whole by a
/// step reading `inputs`) alone and densely into 8-bit integers or e4m3 (its
/// output overlapping none of those buffers): the quantization as an
/// epilogue of y alone, its output, and whether `y` must still be stored.
fn quantized_copy(y: &Buf, n: u64, inputs: &[Option<Buf>], next: &Step, later: &[Step], kernels: &HashMap<&str, &PointwiseKernel>) -> Option<(GemmEpilogue, Buf, bool)> {
    let Step::Pointwise { code, args, .. } = next else { return None };
    let k = kernels.get(code.as_str())?;
    let (out, ins) = args.split_last()?;
    if ins.len() != 1 || ins[0] != *y || k.operands.len() != 1 || k.compute != crate::expr::Compute::F32 {
        return None;
    }
    if !matches!(k.out_dtype, Scalar::U8 | Scalar::I8 | Scalar::F8E4M3FN) || k.operands[0].dtype != Scalar::F32 || k.operands[0].strides != row_major(&k.dims) {
        return None;
    }
    if n == 0 || k.dims.iter().product::<u64>() != n || y.len != 4 * n || out.len != n {
        return None;
    }
    if inputs.iter().chain([&Some(*y)]).flatten().any(|b| overlaps(b, out)) {
        return None;
    }
    let after: Vec<Vec<(Buf, bool)>> = std::iter::once(vec![(*out, true)]).chain(later.iter().map(super::half::bufs_of)).collect();
    let keep_f32 = y.space != Space::Arena || super::half::read_later(&after, y);
    let (e, _) = as_epilogue(k, ins, 0, 1, n)?;
    Some((e, *out, keep_f32))
}

/// What [`moved_epilogue`] found.
pub(super) struct MovedEpilogue {
    pub epilogue: GemmEpilogue,
    /// The epilogue's other operands, in order.
    pub extra: Vec<Buf>,
    /// Where the GEMM stores instead of its product's buffer.
    pub out: Buf,
    /// Whether `out` overlaps the GEMM's A.
    pub over_a: bool,
}

/// Pointwise kernel `k` on `args` (its output last), the step right after
/// an 8-bit convolution (or the merged chain of steps after it: see
/// `merge::epilogue_chains`; `x` in, `y` of `m × n` out, stored as `own`:
/// 8-bit, or f32 for fp8 with a float result) becomes that convolution's
/// epilogue when it reads `y` at the element it writes (as `own`, the way
/// it was stored), its other operands are affine in (row, column), it
/// stores 8-bit integers, e4m3 or f32 densely, and the fusion changes
/// nothing another step could see: the output covers `y` or no later step
/// (`later`) reads `y`, no other operand reads `y`, and the output
/// overlaps neither the convolution's input (other blocks still read it
/// while one stores) nor another operand unless it is that operand itself
/// (an in-place residual add reads each element before writing it), and
/// the other operands start 16-byte aligned. Returns the epilogue, its
/// extra buffers, and the output, which the fused kernel writes instead of
/// `y`.
pub(super) fn q_epilogue(
    (x, y, own): (&Buf, &Buf, Scalar),
    (m, n): (u64, u64),
    k: &PointwiseKernel,
    args: &[Buf],
    later: &[Step],
) -> Option<(GemmEpilogue, Vec<Buf>, Buf)> {
    let (out, ins) = args.split_last()?;
    // The epilogue is evaluated on f32 values (an integer kernel stays apart).
    if k.compute != crate::expr::Compute::F32
        || crate::kernels::gemm_wgmma::stored_type(k.out_dtype).is_none()
        || ins.len() != k.operands.len()
    {
        return None;
    }
    let dense = row_major(&k.dims);
    let me = ins.iter().zip(&k.operands).position(|(b, op)| b == y && op.strides == dense && op.dtype == own)?;
    if ins.iter().enumerate().any(|(i, b)| i != me && overlaps(b, y)) {
        return None;
    }
    if overlaps(out, x) || ins.iter().enumerate().any(|(i, b)| i != me && overlaps(b, out) && b != out) {
        return None;
    }
    // Where `out` covers y (in place, or a wider output over it), later
    // readers of those bytes read the finished values.
    let covered = out.space == y.space && out.index == y.index && out.offset <= y.offset && y.offset + y.len <= out.offset + out.len;
    let read_later = !covered && read_before_written(y, later);
    if read_later {
        return None;
    }
    let (e, bufs) = as_epilogue(k, ins, me, m, n)?;
    // The kernel declares its epilogue operands 16-byte aligned.
    if bufs.iter().any(|b| b.offset % 16 != 0) {
        return None;
    }
    Some((e, bufs, *out))
}

/// Whether the first of `steps` that touches the bytes of `buf` reads
/// them: the arena reuses memory only after a buffer's last reader, so a
/// later buffer over the same bytes is written before it is read.
pub(super) fn read_before_written<'a>(buf: &Buf, steps: impl IntoIterator<Item = &'a Step>) -> bool {
    for s in steps {
        let (mut reads, mut writes) = (false, false);
        s.clone().visit_bufs(|b, w| {
            if overlaps(b, buf) {
                if w { writes = true } else { reads = true }
            }
        });
        if reads || writes {
            return reads;
        }
    }
    false
}

/// Row-major element strides of `dims`.
pub(super) fn row_major(dims: &[u64]) -> Vec<u64> {
    let mut strides = vec![0u64; dims.len()];
    let mut acc = 1;
    for (d, &e) in dims.iter().enumerate().rev() {
        strides[d] = acc;
        acc *= e;
    }
    strides
}

/// Kernel `k` (operands `ins`) as the epilogue of an `m × n` product that
/// operand `me` reads: that operand first, the others' strides over the
/// product (each must be affine), and their buffers in order.
pub(super) fn as_epilogue(k: &PointwiseKernel, ins: &[Buf], me: usize, m: u64, n: u64) -> Option<(GemmEpilogue, Vec<Buf>)> {
    let mut order = vec![me];
    order.extend((0..ins.len()).filter(|&i| i != me));
    let mut kernel = (*k).clone();
    kernel.name.clear();
    kernel.operands = order.iter().map(|&i| k.operands[i].clone()).collect();
    let remap: Vec<usize> = (0..ins.len()).map(|i| order.iter().position(|&o| o == i).unwrap()).collect();
    for e in &mut kernel.exprs {
        if let Expr::Load(op) = e {
            *op = remap[*op];
        }
    }
    let mut strides = Vec::new();
    for &i in &order[1..] {
        let [r, col] = affine_over(&k.dims, &k.operands[i].strides, m, n)?;
        strides.push([0, r, col]);
    }
    let bufs = order[1..].iter().map(|&i| ins[i]).collect();
    Some((GemmEpilogue { kernel, strides }, bufs))
}
