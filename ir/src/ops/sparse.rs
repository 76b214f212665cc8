//! The sparse dialect: N:M structured sparsity (`#sparse.nm<n, m>`), the
//! form NVIDIA's sparse tensor cores read at 2:4.
//!
//! A sparse weight's *rows* are its slices along axis 0 (a convolution's
//! output channels, OIHW; a `sparse.matmul` weight's output features,
//! `[N, K]`), each flattened row-major: that is the reduction axis, and the
//! encoding says every `m` consecutive elements of a row hold at most `n`
//! non-zeros. The interpreter holds a sparse tensor densely (its zeros
//! included), so `sparse.matmul` and `sparse.conv2d` are exactly the dense
//! ops on the decompressed weight. Stored (in `.safetensors`), a sparse
//! tensor is its kept values (`[rows, len / m * n]`) plus the index of each
//! kept value within its group ([`compress`], [`decompress`]).
//!
//! Invariants: [`prune`] keeps, in every group, the `n` largest magnitudes
//! (ties to the lower index), so compressing a weight that already has the
//! pattern changes nothing; every function here checks its shapes and
//! returns an error, never panics.

use crate::ops::{EvalCx, InferCx, nn};
use crate::tensor::{Data, Tensor};
use crate::types::{Encoding, TensorType};

/// `(n, m)` of a tensor type's `#sparse.nm<n, m>` encoding.
pub fn nm(t: &TensorType) -> Option<(usize, usize)> {
    t.encoding.map(|Encoding::NM { n, m }| (n as usize, m as usize))
}

/// `(rows, row length)`: axis 0 and the product of the others.
pub fn rows(shape: &[usize]) -> (usize, usize) {
    match shape.split_first() {
        Some((&r, rest)) => (r, rest.iter().product()),
        None => (1, 1),
    }
}

/// The type with the encoding dropped (the decompressed weight).
pub fn dense_type(t: &TensorType) -> TensorType {
    TensorType { encoding: None, ..t.clone() }
}

/// Checks that `t` can carry `#sparse.nm<n, m>`: rank at least 2 and a row
/// length that is a multiple of `m`.
pub fn check_encodable(t: &TensorType, n: usize, m: usize, what: &str) -> Result<(), String> {
    if t.rank() < 2 {
        return Err(format!("{what} with #sparse.nm<{n}, {m}> must have rank 2 or more, found {}", t.rank()));
    }
    let (_, len) = rows(&t.shape);
    if len % m != 0 {
        return Err(format!(
            "{what}'s reduction length {len} (the product of {:?}) is not a multiple of {m}, as #sparse.nm<{n}, {m}> needs",
            &t.shape[1..]
        ));
    }
    Ok(())
}

/// Whether element `i` of `d` is non-zero.
fn nonzero(d: &Data, i: usize) -> bool {
    match d {
        Data::F(v) => v[i] != 0.0,
        Data::I(v) => v[i] != 0,
    }
}

fn magnitude(d: &Data, i: usize) -> f64 {
    match d {
        Data::F(v) => v[i].abs(),
        Data::I(v) => (v[i] as f64).abs(),
    }
}

/// The flat indices [`prune`] keeps: in every group of `m` consecutive
/// elements of a row, the `n` largest magnitudes (NaN counts as largest,
/// ties to the lower index), in ascending order.
pub fn kept_indices(t: &Tensor, n: usize, m: usize) -> Result<Vec<usize>, String> {
    let (r, len) = rows(t.shape());
    if m == 0 || n > m || len % m != 0 {
        return Err(format!("cannot group a row of {len} elements by {n}:{m}"));
    }
    let mut kept = Vec::with_capacity(r * len / m * n);
    let mut group: Vec<usize> = Vec::with_capacity(m);
    for g in 0..r * len / m {
        group.clear();
        group.extend(g * m..(g + 1) * m);
        // Stable: equal magnitudes keep index order; NaN counts as largest.
        let key = |i: usize| {
            let m = magnitude(&t.data, i);
            if m.is_nan() { f64::INFINITY } else { m }
        };
        group.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
        let mut chosen: Vec<usize> = group[..n].to_vec();
        chosen.sort_unstable();
        kept.extend(chosen);
    }
    Ok(kept)
}

/// `t` with all but the `n` largest magnitudes of every `m` along the
/// reduction axis set to zero, typed `#sparse.nm<n, m>`.
pub fn prune(t: &Tensor, n: usize, m: usize) -> Result<Tensor, String> {
    check_encodable(&t.ty, n, m, "the weight")?;
    let kept = kept_indices(t, n, m)?;
    let mut keep = vec![false; t.len()];
    for i in kept {
        keep[i] = true;
    }
    let data = match &t.data {
        Data::F(v) => Data::F(v.iter().zip(&keep).map(|(&x, &k)| if k { x } else { 0.0 }).collect()),
        Data::I(v) => Data::I(v.iter().zip(&keep).map(|(&x, &k)| if k { x } else { 0 }).collect()),
    };
    let ty = TensorType { encoding: Some(Encoding::NM { n: n as u32, m: m as u32 }), ..t.ty.clone() };
    Ok(Tensor { ty, data })
}

/// Checks that a tensor typed `#sparse.nm<n, m>` has the pattern.
pub fn check_pattern(t: &Tensor) -> Result<(), String> {
    let Some((n, m)) = nm(&t.ty) else { return Ok(()) };
    check_encodable(&t.ty, n, m, "the tensor")?;
    let (_, len) = rows(t.shape());
    for g in 0..t.len() / m {
        let count = (g * m..(g + 1) * m).filter(|&i| nonzero(&t.data, i)).count();
        if count > n {
            let (row, col) = (g * m / len, g * m % len);
            return Err(format!(
                "{} has {count} non-zeros in elements {col}..{} of row {row}, more than #sparse.nm<{n}, {m}> allows",
                t.ty,
                col + m
            ));
        }
    }
    Ok(())
}

/// Bits of one stored index within a group of `m` (2 for 2:4).
pub fn index_bits(m: usize) -> usize {
    (usize::BITS - (m.max(2) - 1).leading_zeros()) as usize
}

/// The stored values' shape of a sparse type: `[rows, len / m * n]`.
pub fn values_shape(t: &TensorType) -> Option<Vec<usize>> {
    let (n, m) = nm(t)?;
    let (r, len) = rows(&t.shape);
    Some(vec![r, len / m * n])
}

/// The metadata's length in bytes: one index of [`index_bits`] per kept
/// value, packed from the low bit up.
pub fn meta_len(t: &TensorType) -> Option<usize> {
    let (_, m) = nm(t)?;
    let v = values_shape(t)?;
    Some((v[0] * v[1] * index_bits(m)).div_ceil(8))
}

/// A sparse tensor's stored form: its kept values (`values_shape`, the
/// encoding dropped) and the packed index of each within its group.
pub fn compress(t: &Tensor) -> Result<(Tensor, Vec<u8>), String> {
    let Some((n, m)) = nm(&t.ty) else {
        return Err(format!("{} has no #sparse.nm encoding", t.ty));
    };
    check_pattern(t)?;
    let kept = kept_indices(t, n, m)?;
    let shape = values_shape(&t.ty).unwrap_or_default();
    let values = t.select(TensorType { shape, ..dense_type(&t.ty) }, kept.iter().copied());
    let bits = index_bits(m);
    let mut meta = vec![0u8; meta_len(&t.ty).unwrap_or(0)];
    for (j, &i) in kept.iter().enumerate() {
        let idx = i % m;
        for b in 0..bits {
            if idx >> b & 1 == 1 {
                let bit = j * bits + b;
                meta[bit / 8] |= 1 << (bit % 8);
            }
        }
    }
    Ok((values, meta))
}

/// The dense tensor of type `ty` (a `#sparse.nm` type) from its stored
/// values and metadata; errors when they do not fit the type (sizes,
/// indices repeated or out of order within a group).
pub fn decompress(ty: &TensorType, values: &Tensor, meta: &[u8]) -> Result<Tensor, String> {
    let (Some((n, m)), Some(shape), Some(mlen)) = (nm(ty), values_shape(ty), meta_len(ty)) else {
        return Err(format!("{ty} has no #sparse.nm encoding"));
    };
    if values.shape() != shape {
        return Err(format!("the stored values of {ty} must have shape {shape:?}, found {:?}", values.shape()));
    }
    if meta.len() != mlen {
        return Err(format!("the metadata of {ty} must be {mlen} bytes, found {}", meta.len()));
    }
    let bits = index_bits(m);
    let total = ty.num_elements();
    let mut at = Vec::with_capacity(values.len());
    for j in 0..values.len() {
        let mut idx = 0;
        for b in 0..bits {
            let bit = j * bits + b;
            idx |= ((meta[bit / 8] >> (bit % 8)) as usize & 1) << b;
        }
        let (group, slot) = (j / n, j % n);
        let prev = if slot > 0 { Some(at[j - 1] % m) } else { None };
        if idx >= m || prev.is_some_and(|p| idx <= p) {
            return Err(format!("the metadata of {ty} is corrupt at group {group}: indices must increase and be below {m}"));
        }
        at.push(group * m + idx);
    }
    let data = match &values.data {
        Data::F(v) => {
            let mut d = vec![0.0; total];
            for (&i, &x) in at.iter().zip(v) {
                d[i] = x;
            }
            Data::F(d)
        }
        Data::I(v) => {
            let mut d = vec![0; total];
            for (&i, &x) in at.iter().zip(v) {
                d[i] = x;
            }
            Data::I(d)
        }
    };
    Ok(Tensor { ty: ty.clone(), data })
}

/// The weight operand's `(n, m)`, required of `sparse.matmul` and
/// `sparse.conv2d`.
fn sparse_weight(w: &TensorType) -> Result<(usize, usize), String> {
    let (n, m) = nm(w).ok_or_else(|| format!("weight must have a #sparse.nm encoding, found {w}"))?;
    check_encodable(w, n, m, "weight")?;
    Ok((n, m))
}

// ---- sparse.compress ----

pub fn infer_compress(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    if x.encoding.is_some() {
        return Err(format!("operand is already sparse ({x})"));
    }
    let (n, m) = (cx.int("n")?, cx.int("m")?);
    if !(1..=64).contains(&m) || n < 1 || n > m {
        return Err(format!("pattern {n}:{m} must satisfy 0 < n <= m <= 64"));
    }
    check_encodable(x, n as usize, m as usize, "operand")?;
    let ty = TensorType { encoding: Some(Encoding::NM { n: n as u32, m: m as u32 }), ..x.clone() };
    Ok(vec![ty])
}

pub fn eval_compress(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (n, m) = (cx.int("n")? as usize, cx.int("m")? as usize);
    Ok(vec![prune(cx.inputs[0], n, m)?])
}

// ---- sparse.matmul: x @ wᵀ (+ bias) ----

pub fn infer_matmul(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, w) = (&cx.operands[0], &cx.operands[1]);
    sparse_weight(w)?;
    nn::require_rank(w, 2, "weight")?;
    nn::require_float(x, "input")?;
    if x.encoding.is_some() {
        return Err("input must be dense".into());
    }
    if x.elem != w.elem {
        return Err(format!("weight has element type {}, expected {}", w.elem, x.elem));
    }
    let Some((&k, batch)) = x.shape.split_last() else {
        return Err("input must have rank 1 or more".into());
    };
    let (nout, wk) = (w.shape[0], w.shape[1]);
    if wk != k {
        return Err(format!("weight is [{nout}, {wk}] (features x reduction), but the input's last dimension is {k}"));
    }
    if let Some(b) = cx.operand(2)
        && (b.elem != x.elem || b.shape != [nout] || b.encoding.is_some())
    {
        return Err(format!("bias must be tensor<{nout}x{}>, found {b}", x.elem));
    }
    let mut shape = batch.to_vec();
    shape.push(nout);
    Ok(vec![TensorType::new(shape, x.elem.clone())])
}

pub fn eval_matmul(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (x, w) = (cx.inputs[0], cx.inputs[1]);
    check_pattern(w)?;
    let (nout, k) = (w.shape()[0], w.shape()[1]);
    let (xv, wv) = (x.to_f64(), w.to_f64());
    let bias = cx.input(2).map(|b| b.to_f64());
    // Rows from the result (k may be 0: each output is then its bias).
    let ty = cx.result_type();
    let rows = ty.num_elements().checked_div(nout).unwrap_or(0);
    if rows * nout != ty.num_elements() || xv.len() != rows * k || wv.len() != nout * k || bias.as_ref().is_some_and(|b| b.len() < nout) {
        return Err(format!(
            "operands disagree with the result {ty}: input holds {} values for {rows} rows of {k}, weight {} for {nout}x{k}",
            xv.len(),
            wv.len()
        ));
    }
    let mut out = Vec::with_capacity(rows * nout);
    for r in 0..rows {
        let xr = &xv[r * k..(r + 1) * k];
        for j in 0..nout {
            let wr = &wv[j * k..(j + 1) * k];
            let acc = xr.iter().zip(wr).fold(0.0, |a, (&p, &q)| p.mul_add(q, a));
            out.push(acc + bias.as_ref().map_or(0.0, |b| b[j]));
        }
    }
    Ok(vec![Tensor::from_f64(ty.clone(), out)])
}

// ---- sparse.conv2d: core.conv2d on the decompressed weight ----

pub fn infer_conv2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    sparse_weight(&cx.operands[1])?;
    if cx.operands[0].encoding.is_some() {
        return Err("input must be dense".into());
    }
    let mut operands = cx.operands.to_vec();
    operands[1] = dense_type(&operands[1]);
    let dense = InferCx { operands: &operands, ..*cx };
    nn::infer_conv2d(&dense)
}

pub fn eval_conv2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    check_pattern(cx.inputs[1])?;
    let w = Tensor { ty: dense_type(&cx.inputs[1].ty), data: cx.inputs[1].data.clone() };
    let mut inputs = cx.inputs.to_vec();
    inputs[1] = &w;
    nn::eval_conv2d(&EvalCx { inputs: &inputs, ..*cx })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Encoding, Scalar};

    fn pseudo(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 33) % 17) as f64 - 8.0
            })
            .collect()
    }

    #[test]
    fn compress_then_decompress_gives_the_pruned_tensor() {
        for (n, m, shape) in [(2, 4, vec![6, 8]), (2, 4, vec![4, 3, 2, 2]), (1, 4, vec![3, 12]), (3, 8, vec![2, 16])] {
            let ty = TensorType::new(shape.clone(), Scalar::F32);
            let t = Tensor::from_f64(ty.clone(), pseudo(ty.num_elements(), 7));
            let p = prune(&t, n, m).unwrap();
            check_pattern(&p).unwrap();
            let (values, meta) = compress(&p).unwrap();
            assert_eq!(values.shape(), values_shape(&p.ty).unwrap().as_slice());
            assert_eq!(meta.len(), meta_len(&p.ty).unwrap());
            assert_eq!(decompress(&p.ty, &values, &meta).unwrap(), p, "{n}:{m} {shape:?}");
            // Pruning keeps the largest magnitudes: every dropped value is
            // at most every kept one of its group.
            let (tv, pv) = (t.to_f64(), p.to_f64());
            for g in 0..tv.len() / m {
                let kept: Vec<f64> = (g * m..(g + 1) * m).filter(|&i| pv[i] != 0.0).map(|i| tv[i].abs()).collect();
                let min_kept = kept.iter().cloned().fold(f64::INFINITY, f64::min);
                let dropped = (g * m..(g + 1) * m).filter(|&i| pv[i] == 0.0).map(|i| tv[i].abs()).fold(0.0, f64::max);
                assert!(kept.len() <= n && (kept.len() < n || dropped <= min_kept), "group {g}");
            }
            // Compressing what has the pattern changes nothing.
            assert_eq!(prune(&p, n, m).unwrap(), p);
        }
    }

    #[test]
    fn two_four_uses_two_bits_per_kept_value() {
        let ty = TensorType { encoding: Some(Encoding::NM { n: 2, m: 4 }), ..TensorType::new(vec![64, 128], Scalar::F16) };
        assert_eq!(index_bits(4), 2);
        assert_eq!(values_shape(&ty), Some(vec![64, 64]));
        assert_eq!(meta_len(&ty), Some(64 * 64 * 2 / 8));
    }

    #[test]
    fn bad_stored_forms_are_errors() {
        let ty = TensorType { encoding: Some(Encoding::NM { n: 2, m: 4 }), ..TensorType::new(vec![1, 4], Scalar::F32) };
        let values = Tensor::from_f64(TensorType::new(vec![1, 2], Scalar::F32), vec![1.0, 2.0]);
        // Indices 1 then 1: not increasing.
        let err = decompress(&ty, &values, &[0b0101]).unwrap_err();
        assert!(err.contains("corrupt"), "{err}");
        assert!(decompress(&ty, &values, &[]).unwrap_err().contains("must be 1 bytes"));
        let short = Tensor::from_f64(TensorType::new(vec![1, 1], Scalar::F32), vec![1.0]);
        assert!(decompress(&ty, &short, &[0b0100]).unwrap_err().contains("must have shape [1, 2]"));
        // Indices 0 and 2 place the values there.
        let t = decompress(&ty, &values, &[0b1000]).unwrap();
        assert_eq!(t.to_f64(), vec![1.0, 0.0, 2.0, 0.0]);
        let dense = Tensor { ty: ty.clone(), data: Data::F(vec![1.0, 2.0, 3.0, 0.0]) };
        assert!(check_pattern(&dense).unwrap_err().contains("3 non-zeros"));
        assert!(compress(&dense).is_err());
    }
}
