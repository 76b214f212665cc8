//! Pointwise chains: two pointwise steps in a row, where the second reads
//! the first's output at the element it writes and nothing later reads
//! that output, become one kernel. A quantized graph's float glue
//! (dequantize → bias add → quantize → quantized residual add →
//! dequantize) is a chain of such steps; merged, it is one pass over memory,
//! and the whole chain can then be a GEMM's epilogue (`epilogue.rs`).
//!
//! Exactness: the merged kernel computes the same expressions in the same
//! order. Where the first kernel stored an integer or boolean, the value the
//! second kernel would have loaded back is rebuilt explicitly (truncated,
//! saturated, NaN to 0, as the store converts), so nothing rounds
//! differently.
//!
//! Invariants the merge checks (otherwise the steps stay two launches):
//! - the first step's output `t` is an arena buffer that no later step reads
//!   (or the second step writes it in place);
//! - the second step reads `t` through exactly one operand, densely, as the
//!   type it was stored;
//! - no operand of the merged kernel overlaps its output unless it is that
//!   output read densely at the element written (the in-place case);
//! - the plan has no control steps (a loop could read `t` again).

use std::collections::HashMap;

use aoc_ir::types::Scalar;
use aoc_plan::plan::{Buf, Space, Step};

use super::epilogue::{read_before_written, row_major};
use super::overlaps;
use crate::expr::{Binary, Compute, Expr, Operand, PointwiseKernel, Unary};

/// The most operands a merged kernel may take.
const MAX_OPERANDS: usize = 8;

/// Merges chains of pointwise steps in `steps` (with `origins`), adding the
/// merged kernels to `kernels`. Returns the number of steps removed.
pub fn merge_pointwise(steps: &mut Vec<Step>, origins: &mut Vec<String>, kernels: &mut Vec<PointwiseKernel>) -> usize {
    if steps.iter().any(Step::is_control) {
        return 0;
    }
    // A pair refused for a hazard may merge once the second step has merged
    // with its successors (their output sits elsewhere): repeat until
    // nothing changes.
    let before = steps.len();
    while merge_pass(steps, origins, kernels) > 0 {}
    before - steps.len()
}

/// One left-to-right pass of [`merge_pointwise`].
fn merge_pass(steps: &mut Vec<Step>, origins: &mut Vec<String>, kernels: &mut Vec<PointwiseKernel>) -> usize {
    let mut by_name: HashMap<String, usize> = kernels.iter().enumerate().map(|(i, k)| (k.name.clone(), i)).collect();
    let before = steps.len();
    let mut out: Vec<Step> = Vec::with_capacity(steps.len());
    let mut out_origins: Vec<String> = Vec::with_capacity(steps.len());
    for (i, (step, origin)) in steps.iter().zip(origins.iter()).enumerate() {
        let merged = out.last().and_then(|prev| {
            let Step::Pointwise { code: c1, args: a1, .. } = prev else { return None };
            let k1 = &kernels[*by_name.get(c1)?];
            match step {
                Step::Pointwise { code: c2, args: a2, .. } => {
                    let k2 = &kernels[*by_name.get(c2)?];
                    // A dequantize whose readers take its bytes goes later
                    // (`bytes.rs`): the step before keeps storing them.
                    if super::bytes::read_as_bytes(k2, a2, &steps[i + 1..]).is_some() {
                        return None;
                    }
                    merge_two((k1, a1), (k2, a2), [&steps[i + 1..], &[]], None)
                }
                // Not where the pointwise step may become the epilogue of
                // the step before it (a GEMM's, a convolution's).
                Step::Copy { .. } if !feeds_on(out.iter().rev().nth(1), a1) => merge_copy((k1, a1), step, &steps[i + 1..]),
                _ => None,
            }
        });
        match merged {
            Some((mut k, args)) => {
                k.name = format!("pwm_{:016x}", fingerprint(&k));
                let rows = k.rows();
                let code = k.name.clone();
                match by_name.get(&code) {
                    Some(&j) if kernels[j] == k => {}
                    Some(_) => return 0, // a fingerprint collision: leave the plan as it was
                    None => {
                        by_name.insert(code.clone(), kernels.len());
                        kernels.push(k);
                    }
                }
                *out.last_mut().unwrap() = Step::Pointwise { code, args, rows };
                let o = out_origins.last_mut().unwrap();
                o.push_str(" + ");
                o.push_str(origin);
            }
            None => {
                out.push(step.clone());
                out_origins.push(origin.clone());
            }
        }
    }
    *steps = out;
    *origins = out_origins;
    before - steps.len()
}

/// The pointwise steps from `steps[0]` on merged into one kernel for a
/// GEMM's epilogue, longest chain first: each candidate is the kernel, its
/// buffers (output last) and how many steps it covers. `y` is the GEMM's
/// output, which the epilogue consumes from registers: an operand reading
/// it may sit under the chain's output. `later` are the steps after
/// `steps`.
pub fn epilogue_chains(steps: &[Step], later: &[Step], y: &Buf, kernels: &HashMap<&str, &PointwiseKernel>) -> Vec<(PointwiseKernel, Vec<Buf>, usize)> {
    let mut chains: Vec<(PointwiseKernel, Vec<Buf>)> = Vec::new();
    let Some(Step::Pointwise { code, args, .. }) = steps.first() else { return Vec::new() };
    let Some(k) = kernels.get(code.as_str()) else { return Vec::new() };
    let mut cur = ((*k).clone(), args.clone());
    let mut n = 1;
    while let Some(Step::Pointwise { code, args, .. }) = steps.get(n) {
        let Some(k2) = kernels.get(code.as_str()) else { break };
        let Some(next) = merge_two((&cur.0, &cur.1), (k2, args), [&steps[n + 1..], later], Some(y)) else { break };
        chains.push(cur);
        cur = next;
        n += 1;
    }
    chains.push(cur);
    chains.into_iter().enumerate().map(|(i, (k, b))| (k, b, i + 1)).rev().collect()
}

/// The merged kernel of `k1` (buffers `a1`, output last) followed by `k2`
/// (`a2`), with its buffers; `later` are the steps after the second.
/// `exempt`, a buffer no launch will write (a GEMM's output consumed in
/// its epilogue), may overlap the output.
fn merge_two((k1, a1): (&PointwiseKernel, &[Buf]), (k2, a2): (&PointwiseKernel, &[Buf]), later: [&[Step]; 2], exempt: Option<&Buf>) -> Option<(PointwiseKernel, Vec<Buf>)> {
    let (t, ins1) = a1.split_last()?;
    let (u, ins2) = a2.split_last()?;
    if ins1.len() != k1.operands.len() || ins2.len() != k2.operands.len() {
        return None;
    }
    let count = |k: &PointwiseKernel| k.dims.iter().product::<u64>();
    // Integer kernels compute in i64, where the reload below does not apply.
    if count(k1) != count(k2) || k1.compute != Compute::F32 || k2.compute != Compute::F32 {
        return None;
    }
    // The second kernel reads t through one operand, densely, as stored.
    let dense2 = row_major(&k2.dims);
    let readers: Vec<usize> = ins2.iter().enumerate().filter(|(_, b)| overlaps(b, t)).map(|(j, _)| j).collect();
    let [me] = readers[..] else { return None };
    if ins2[me] != *t || k2.operands[me].strides != dense2 || k2.operands[me].dtype != k1.out_dtype {
        return None;
    }
    // t must be dead after the pair unless the second step writes it in place.
    if u != t {
        if t.space != Space::Arena || overlaps(u, t) || read_before_written(t, later[0].iter().chain(later[1])) {
            return None;
        }
    }
    let (d1, s1) = grouped(k1);
    let (d2, s2) = grouped(k2);
    let dims = refine(&d1, &d2)?;
    let mut operands: Vec<Operand> = Vec::new();
    let mut bufs: Vec<Buf> = Vec::new();
    let mut exprs: Vec<Expr> = Vec::new();
    // The first kernel as it is, over the common dims.
    let mut load1 = Vec::new();
    for ((op, st), b) in k1.operands.iter().zip(&s1).zip(ins1) {
        load1.push(add_operand(&mut operands, &mut bufs, op.dtype, restride(&d1, st, &dims)?, *b));
    }
    let mut at1 = Vec::with_capacity(k1.exprs.len());
    for e in &k1.exprs {
        let e = match *e {
            Expr::Load(j) => Expr::Load(load1[j]),
            e => e,
        };
        at1.push(push(&mut exprs, e));
    }
    let stored = reload(&mut exprs, at1[k1.result], k1.out_dtype)?;
    // The second, its load of t replaced by the first's stored value.
    let mut load2 = Vec::new();
    for (j, ((op, st), b)) in k2.operands.iter().zip(&s2).zip(ins2).enumerate() {
        load2.push(if j == me { None } else { Some(add_operand(&mut operands, &mut bufs, op.dtype, restride(&d2, st, &dims)?, *b)) });
    }
    let mut at2: Vec<usize> = Vec::with_capacity(k2.exprs.len());
    for e in &k2.exprs {
        let idx = match *e {
            Expr::Load(j) if j == me => stored,
            Expr::Load(j) => push(&mut exprs, Expr::Load(load2[j]?)),
            Expr::Const(c) => push(&mut exprs, Expr::Const(c)),
            Expr::Int(c) => push(&mut exprs, Expr::Int(c)),
            Expr::Unary(f, a) => push(&mut exprs, Expr::Unary(f, at2[a])),
            Expr::Binary(f, a, b) => push(&mut exprs, Expr::Binary(f, at2[a], at2[b])),
            Expr::Select(c, a, b) => push(&mut exprs, Expr::Select(at2[c], at2[a], at2[b])),
        };
        at2.push(idx);
    }
    if operands.len() > MAX_OPERANDS {
        return None;
    }
    // Hazards: an operand over the output must be the output itself, read
    // densely as the type it is written.
    let dense = row_major(&dims);
    for (op, b) in operands.iter().zip(&bufs) {
        if overlaps(b, u) && Some(b) != exempt && (b != u || op.strides != dense || op.dtype != k2.out_dtype) {
            return None;
        }
    }
    bufs.push(*u);
    let k = PointwiseKernel { name: String::new(), dims, operands, exprs, result: at2[k2.result], out_dtype: k2.out_dtype, compute: Compute::F32 };
    k.live_exprs().ok()?;
    Some((k, bufs))
}

/// Whether `before` is a step other than a pointwise one or a copy that
/// writes one of the inputs of the pointwise step with buffers `args`
/// (output last): the translation may run that step as its epilogue.
fn feeds_on(before: Option<&Step>, args: &[Buf]) -> bool {
    let Some(before) = before else { return false };
    if matches!(before, Step::Pointwise { .. } | Step::Copy { .. }) {
        return false;
    }
    let ins = &args[..args.len().saturating_sub(1)];
    let mut writes = false;
    before.clone().visit_bufs(|b, w| writes |= w && ins.iter().any(|i| overlaps(i, b)));
    writes
}

/// `k1` (buffers `a1`, output last) followed by `copy`, a strided copy of
/// its output `t` into a dense buffer (a layout change, a transpose, a
/// slice), as one kernel writing the copy's destination: where every
/// operand `k1` loads is laid out like its output, the element the copy
/// reads at `Σ i·src_strides` of `t` is computed from the operands'
/// elements at that same offset, so the kernel runs over the copy's shape
/// with the copy's source strides for each operand. `later` are the steps
/// after the copy; `t` must be dead there.
fn merge_copy((k1, a1): (&PointwiseKernel, &[Buf]), copy: &Step, later: &[Step]) -> Option<(PointwiseKernel, Vec<Buf>)> {
    let Step::Copy { src, dst, elem_size, shape, src_start, src_strides, dst_strides } = copy else { return None };
    let (t, ins) = a1.split_last()?;
    if ins.len() != k1.operands.len() || src != t || *elem_size != k1.out_dtype.size() || *src_start != 0 {
        return None;
    }
    if t.space != Space::Arena || overlaps(dst, t) || read_before_written(t, later) {
        return None;
    }
    // The destination is written whole and densely, as a kernel writes.
    let count: u64 = shape.iter().product();
    let dense_dst = row_major(shape);
    let unit_or = |dims: &[u64], s: &[u64], want: &[u64]| dims.iter().zip(s).zip(want).all(|((&d, a), b)| d == 1 || a == b);
    if count == 0 || dst.len != count * elem_size || !unit_or(shape, dst_strides, &dense_dst) {
        return None;
    }
    let src_strides: Vec<u64> = src_strides.iter().map(|&s| u64::try_from(s).ok()).collect::<Option<_>>()?;
    let live = k1.live_exprs().ok()?;
    let dense = row_major(&k1.dims);
    for (j, (op, b)) in k1.operands.iter().zip(ins).enumerate() {
        let used = k1.exprs.iter().zip(&live).any(|(e, &l)| l && *e == Expr::Load(j));
        if used && !unit_or(&k1.dims, &op.strides, &dense) || overlaps(b, dst) {
            return None;
        }
    }
    let operands = k1.operands.iter().map(|op| Operand { dtype: op.dtype, strides: src_strides.clone() }).collect();
    let k = PointwiseKernel { name: String::new(), dims: shape.clone(), operands, exprs: k1.exprs.clone(), result: k1.result, out_dtype: k1.out_dtype, compute: k1.compute };
    k.live_exprs().ok()?;
    let mut bufs = ins.to_vec();
    bufs.push(*dst);
    Some((k, bufs))
}

fn push(exprs: &mut Vec<Expr>, e: Expr) -> usize {
    exprs.push(e);
    exprs.len() - 1
}

/// Adds an operand (reusing an equal one) and returns its index.
fn add_operand(operands: &mut Vec<Operand>, bufs: &mut Vec<Buf>, dtype: Scalar, strides: Vec<u64>, b: Buf) -> usize {
    let op = Operand { dtype, strides };
    if let Some(j) = operands.iter().zip(bufs.iter()).position(|(o, c)| *o == op && *c == b) {
        return j;
    }
    operands.push(op);
    bufs.push(b);
    operands.len() - 1
}

/// The value a kernel loading what a store of `v` as `dtype` wrote would
/// see: f32 unchanged; integers truncated toward zero, saturated, NaN to 0;
/// booleans 1 or 0. `None` for a type kernels do not store.
fn reload(exprs: &mut Vec<Expr>, v: usize, dtype: Scalar) -> Option<usize> {
    let range = match dtype {
        Scalar::F32 => return Some(v),
        Scalar::I1 => {
            let (one, zero) = (push(exprs, Expr::Const(1.0)), push(exprs, Expr::Const(0.0)));
            return Some(push(exprs, Expr::Select(v, one, zero)));
        }
        Scalar::I8 => (-128.0, 127.0),
        Scalar::U8 => (0.0, 255.0),
        Scalar::I32 => (-2147483648.0, 2147483647.0),
        _ => return None,
    };
    let t = push(exprs, Expr::Unary(Unary::Trunc, v));
    let lo = push(exprs, Expr::Const(range.0));
    let hi = push(exprs, Expr::Const(range.1));
    let t = push(exprs, Expr::Binary(Binary::Max, t, lo));
    let t = push(exprs, Expr::Binary(Binary::Min, t, hi));
    let is_num = push(exprs, Expr::Binary(Binary::Equal, v, v));
    let zero = push(exprs, Expr::Const(0.0));
    Some(push(exprs, Expr::Select(is_num, t, zero)))
}

/// Kernel `k`'s dims with every pair of neighbours that all its operands
/// walk contiguously (and unit dims) merged, and each operand's strides
/// over them: the lowering cuts dims for its own reasons (a vector width),
/// and two kernels over the same elements may cut them differently.
fn grouped(k: &PointwiseKernel) -> (Vec<u64>, Vec<Vec<u64>>) {
    let keep: Vec<usize> = (0..k.dims.len()).filter(|&d| k.dims[d] != 1).collect();
    let mut dims: Vec<u64> = Vec::new();
    let mut strides: Vec<Vec<u64>> = vec![Vec::new(); k.operands.len()];
    for &d in &keep {
        let joins = !dims.is_empty() && k.operands.iter().zip(&strides).all(|(op, s)| *s.last().unwrap() == op.strides[d] * k.dims[d]);
        if joins {
            *dims.last_mut().unwrap() *= k.dims[d];
            for (op, s) in k.operands.iter().zip(&mut strides) {
                *s.last_mut().unwrap() = op.strides[d];
            }
        } else {
            dims.push(k.dims[d]);
            for (op, s) in k.operands.iter().zip(&mut strides) {
                s.push(op.strides[d]);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        strides.iter_mut().for_each(|s| s.push(0));
    }
    (dims, strides)
}

/// The coarsest dims that both `a` and `b` (row-major shapes of the same
/// element count) split into: the union of their inner products. `None`
/// when one's boundary does not divide the other's.
fn refine(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let inner = |d: &[u64]| -> Vec<u64> {
        let mut acc = 1u64;
        let mut v: Vec<u64> = d.iter().rev().map(|&e| { acc *= e; acc }).collect();
        v.dedup();
        v
    };
    let mut cuts: Vec<u64> = inner(a).into_iter().chain(inner(b)).filter(|&c| c > 1).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut dims = Vec::new();
    let mut prev = 1u64;
    for c in cuts {
        if c % prev != 0 {
            return None;
        }
        dims.push(c / prev);
        prev = c;
    }
    dims.reverse();
    if dims.is_empty() {
        dims.push(1);
    }
    Some(dims)
}

/// `strides` over `dims` as strides over `fine`, a refinement of `dims`.
fn restride(dims: &[u64], strides: &[u64], fine: &[u64]) -> Option<Vec<u64>> {
    let mut out = vec![0u64; fine.len()];
    let mut f = fine.len();
    for (&d, &s) in dims.iter().zip(strides).rev() {
        let mut covered = 1u64;
        while covered < d {
            f = f.checked_sub(1)?;
            out[f] = s * covered;
            covered *= fine[f];
        }
        if covered != d {
            return None;
        }
    }
    // Leading unit dims of `fine` (a scalar) read element 0.
    Some(out)
}

/// A stable hash of a kernel's contents (its name excluded).
fn fingerprint(k: &PointwiseKernel) -> u64 {
    let text = format!("{:?}|{:?}|{:?}|{}|{:?}", k.dims, k.operands, k.exprs, k.result, k.out_dtype);
    super::fnv(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refine_takes_every_boundary() {
        assert_eq!(refine(&[4096, 768], &[3145728]), Some(vec![4096, 768]));
        assert_eq!(refine(&[8, 6], &[4, 12]), Some(vec![4, 2, 6]));
        assert_eq!(refine(&[1, 4, 1, 3], &[12]), Some(vec![4, 3]));
        assert_eq!(refine(&[1], &[1]), Some(vec![1]));
        // 6 = 3·2 against 6 = 2·3: the inner 3 does not divide by 2's boundary.
        assert_eq!(refine(&[3, 2], &[2, 3]), None);
    }

    #[test]
    fn grouping_undoes_arbitrary_cuts() {
        // A dense kernel cut as [8, 4096] and a bias kernel over [256, 128]:
        // the first regroups to [32768], so the two meet at [256, 128].
        let dense = kernel("d", &[8, 4096], &[(Scalar::U8, vec![4096, 1])], vec![Expr::Load(0)], Scalar::F32);
        let bias = kernel("b", &[256, 128], &[(Scalar::F32, vec![128, 1]), (Scalar::F32, vec![0, 1])], vec![Expr::Load(0)], Scalar::F32);
        let (d1, s1) = grouped(&dense);
        assert_eq!((d1.clone(), s1.clone()), (vec![32768], vec![vec![1]]));
        let (d2, s2) = grouped(&bias);
        assert_eq!((d2.clone(), s2), (vec![256, 128], vec![vec![128, 1], vec![0, 1]]));
        let fine = refine(&d1, &d2).unwrap();
        assert_eq!(fine, vec![256, 128]);
        assert_eq!(restride(&d1, &s1[0], &fine), Some(vec![128, 1]));
        // Unit dims go; a transposed operand keeps its cut.
        let t = kernel("t", &[1, 4, 1, 3], &[(Scalar::F32, vec![0, 1, 0, 4])], vec![Expr::Load(0)], Scalar::F32);
        assert_eq!(grouped(&t), (vec![4, 3], vec![vec![1, 4]]));
    }

    #[test]
    fn restride_splits_dims() {
        // A dense [3145728] operand over [4096, 768].
        assert_eq!(restride(&[3145728], &[1], &[4096, 768]), Some(vec![768, 1]));
        // A bias broadcast over rows.
        assert_eq!(restride(&[4096, 768], &[0, 1], &[4096, 768]), Some(vec![0, 1]));
        // [8, 6] with strides [6, 1] over [4, 2, 6].
        assert_eq!(restride(&[8, 6], &[6, 1], &[4, 2, 6]), Some(vec![12, 6, 1]));
        // Unit dims vanish; a transposed operand keeps its strides.
        assert_eq!(restride(&[1, 4, 1, 3], &[0, 1, 0, 4], &[4, 3]), Some(vec![1, 4]));
    }

    fn arena(offset: u64, len: u64) -> Buf {
        Buf { space: Space::Arena, index: 0, offset, len }
    }

    fn kernel(name: &str, dims: &[u64], operands: &[(Scalar, Vec<u64>)], exprs: Vec<Expr>, out: Scalar) -> PointwiseKernel {
        let result = exprs.len() - 1;
        PointwiseKernel {
            name: name.into(),
            dims: dims.to_vec(),
            operands: operands.iter().map(|(d, s)| Operand { dtype: *d, strides: s.clone() }).collect(),
            exprs,
            result,
            out_dtype: out,
            compute: Compute::F32,
        }
    }

    /// Runs a kernel on f32-valued operands the way the backends do (loads
    /// as f32, the store converting to the output type).
    fn run(k: &PointwiseKernel, ins: &[Vec<f32>]) -> Vec<f32> {
        let total: u64 = k.dims.iter().product();
        (0..total)
            .map(|flat| {
                let mut idx = vec![0u64; k.dims.len()];
                let mut r = flat;
                for d in (0..k.dims.len()).rev() {
                    idx[d] = r % k.dims[d];
                    r /= k.dims[d];
                }
                let mut v: Vec<f32> = Vec::new();
                for e in &k.exprs {
                    let x = match *e {
                        Expr::Load(j) => ins[j][idx.iter().zip(&k.operands[j].strides).map(|(i, s)| i * s).sum::<u64>() as usize],
                        Expr::Const(c) => c,
                        Expr::Int(c) => c as f32,
                        Expr::Unary(f, a) => f.eval(v[a] as f64) as f32,
                        Expr::Binary(f, a, b) => f.eval(v[a] as f64, v[b] as f64) as f32,
                        Expr::Select(c, a, b) => if v[c] != 0.0 { v[a] } else { v[b] },
                    };
                    v.push(x);
                }
                let y = v[k.result];
                match k.out_dtype {
                    Scalar::U8 => if y.is_nan() { 0.0 } else { y.trunc().clamp(0.0, 255.0) },
                    _ => y,
                }
            })
            .collect()
    }

    #[test]
    fn quantize_then_dequantize_merges_exactly() {
        // t = quantize(x + bias) as u8 (scale 0.5, no rounding step, so the
        // store's truncation matters); y = t · 0.25.
        let q = kernel(
            "q",
            &[2, 4],
            &[(Scalar::F32, vec![4, 1]), (Scalar::F32, vec![0, 1])],
            vec![Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Add, 0, 1), Expr::Const(0.5), Expr::Binary(Binary::Div, 2, 3)],
            Scalar::U8,
        );
        let d = kernel("d", &[8], &[(Scalar::U8, vec![1])], vec![Expr::Load(0), Expr::Const(0.25), Expr::Binary(Binary::Mul, 0, 1)], Scalar::F32);
        let (x, bias, t, y) = (arena(0, 32), arena(32, 16), arena(64, 8), arena(128, 32));
        let (m, bufs) = merge_two((&q, &[x, bias, t]), (&d, &[t, y]), [&[], &[]], None).expect("merges");
        assert_eq!(bufs, vec![x, bias, y]);
        assert_eq!(m.dims, vec![2, 4]);
        let xs = vec![-3.0, 0.2, 1.3, 50.7, 200.0, f32::NAN, 7.9, 0.0];
        let bs = vec![0.5, 0.0, -0.1, 1.0];
        let tq = run(&q, &[xs.clone(), bs.clone()]);
        let want = run(&d, &[tq]);
        let got = run(&m, &[xs, bs]);
        assert_eq!(format!("{want:?}"), format!("{got:?}"));
    }

    /// A quantize over NCHW followed by its layout copy to NHWC is one
    /// kernel over the copy's shape, storing what the two steps stored;
    /// not where the intermediate is read later, an operand is broadcast
    /// or the copy does not write its destination densely.
    #[test]
    fn a_layout_copy_merges_into_its_producer() {
        let (n, c, hw) = (2u64, 3u64, 4u64);
        let q = kernel(
            "q",
            &[n * c * hw],
            &[(Scalar::F32, vec![1])],
            vec![Expr::Load(0), Expr::Const(0.25), Expr::Binary(Binary::Div, 0, 1), Expr::Unary(Unary::RoundEven, 2)],
            Scalar::U8,
        );
        let (x, t, y) = (arena(0, 96), arena(128, 24), arena(160, 24));
        // dst[n, hw, c] = t[n, c, hw]
        let copy = |dst: Buf, dst_strides: Vec<u64>| Step::Copy {
            src: t,
            dst,
            elem_size: 1,
            shape: vec![n, hw, c],
            src_start: 0,
            src_strides: vec![(c * hw) as i64, 1, hw as i64],
            dst_strides,
        };
        let (m, bufs) = merge_copy((&q, &[x, t]), &copy(y, vec![hw * c, c, 1]), &[]).expect("merges");
        assert_eq!(bufs, vec![x, y]);
        assert_eq!(m.dims, vec![n, hw, c]);
        let xs: Vec<f32> = (0..n * c * hw).map(|i| i as f32 * 0.37 - 3.0).collect();
        let ts = run(&q, std::slice::from_ref(&xs));
        let want: Vec<f32> = (0..n * hw * c)
            .map(|o| {
                let (b, p, ch) = (o / (hw * c), o / c % hw, o % c);
                ts[(b * c * hw + ch * hw + p) as usize]
            })
            .collect();
        assert_eq!(run(&m, &[xs]), want);
        // t read again later.
        let later = [Step::Pointwise { code: "q".into(), args: vec![t, x], rows: 1 }];
        assert!(merge_copy((&q, &[x, t]), &copy(y, vec![hw * c, c, 1]), &later).is_none());
        // A destination written with gaps.
        assert!(merge_copy((&q, &[x, t]), &copy(arena(160, 48), vec![2 * hw * c, 2 * c, 2]), &[]).is_none());
        // An operand broadcast along a dim of the producer.
        let b = kernel("b", &[n * c, hw], &[(Scalar::F32, vec![0, 1])], vec![Expr::Load(0)], Scalar::U8);
        assert!(merge_copy((&b, &[x, t]), &copy(y, vec![hw * c, c, 1]), &[]).is_none());
    }

    /// In a plan, the quantize and its copy merge into one step, but not
    /// where the step before writes the pointwise step's input (the
    /// translation may run the pointwise step as that step's epilogue).
    #[test]
    fn a_copy_after_a_possible_epilogue_stays() {
        let q = kernel("q", &[8], &[(Scalar::F32, vec![1])], vec![Expr::Load(0), Expr::Unary(Unary::RoundEven, 0)], Scalar::U8);
        let (x, t, y) = (arena(0, 32), arena(64, 8), arena(96, 8));
        let copy = Step::Copy { src: t, dst: y, elem_size: 1, shape: vec![2, 4], src_start: 0, src_strides: vec![1, 2], dst_strides: vec![4, 1] };
        let pw = Step::Pointwise { code: "q".into(), args: vec![x, t], rows: 1 };
        let run = |steps: Vec<Step>| {
            let (mut steps, mut origins, mut kernels) = (steps.clone(), vec![String::new(); steps.len()], vec![q.clone()]);
            merge_pointwise(&mut steps, &mut origins, &mut kernels);
            steps.iter().map(|s| s.kind()).collect::<Vec<_>>()
        };
        assert_eq!(run(vec![pw.clone(), copy.clone()]), vec!["pointwise"]);
        let fill = Step::Fill { dst: x, elem_size: 4, bits: 0 };
        assert_eq!(run(vec![fill, pw, copy]), vec!["fill", "pointwise", "copy"]);
    }

    #[test]
    fn live_or_shared_intermediates_stay_apart() {
        let a = kernel("a", &[8], &[(Scalar::F32, vec![1])], vec![Expr::Load(0), Expr::Unary(Unary::Relu, 0)], Scalar::F32);
        let b = kernel("b", &[8], &[(Scalar::F32, vec![1]), (Scalar::F32, vec![1])], vec![Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Add, 0, 1)], Scalar::F32);
        let (x, t, r, y) = (arena(0, 32), arena(32, 32), arena(64, 32), arena(96, 32));
        // t read again later: no merge.
        let later = [Step::Pointwise { code: "a".into(), args: vec![t, r], rows: 1 }];
        assert!(merge_two((&a, &[x, t]), (&b, &[t, r, y]), [&later, &[]], None).is_none());
        // t written first later: merge.
        let later = [Step::Pointwise { code: "a".into(), args: vec![r, t], rows: 1 }];
        assert!(merge_two((&a, &[x, t]), (&b, &[t, r, y]), [&later, &[]], None).is_some());
        // t read twice by the second kernel: no merge.
        assert!(merge_two((&a, &[x, t]), (&b, &[t, t, y]), [&[], &[]], None).is_none());
        // The output over the first kernel's input, in place: merge.
        assert!(merge_two((&a, &[x, t]), (&b, &[t, r, x]), [&[], &[]], None).is_some());
        // The output over part of an operand: no merge.
        assert!(merge_two((&a, &[x, t]), (&b, &[t, r, arena(16, 32)]), [&[], &[]], None).is_none());
        // An output buffer as the intermediate: no merge.
        let out = Buf { space: Space::Output, index: 0, offset: 0, len: 32 };
        assert!(merge_two((&a, &[x, out]), (&b, &[out, r, y]), [&[], &[]], None).is_none());
    }
}
