//! Linear algebra and neural-network ops: convolutions, matrix products,
//! normalizations, softmax and pooling (the last three live in the `norm` and
//! `pool` submodules and are re-exported here, where the op table looks).
//!
//! Semantics are ONNX's (Conv, ConvTranspose, MatMul, Gemm, ...). Spatial ops
//! take NCHW inputs; `pads` is always [top, left, bottom, right]; `auto_pad`
//! does not exist here because the importer resolves it into `pads`.
//!
//! Invariants: sums accumulate in `f64` (or wrapping `i64` for integer
//! matmul/gemm) and every result element is rounded once, to the result
//! type, by `Tensor::from_f64`/`from_i64`. `infer` rejects every input `eval`
//! could not handle, so `eval` only indexes within bounds.

use crate::ops::{EvalCx, InferCx};
use crate::tensor::{Tensor, broadcast_index_map, broadcast_shapes};
use crate::types::{ElemType, TensorType};
use std::num::Wrapping;

mod norm;
mod pool;

pub use norm::{
    eval_batch_norm, eval_layer_norm, eval_softmax, infer_batch_norm, infer_layer_norm,
    infer_softmax,
};
pub use pool::{eval_global_pool, eval_pool2d, infer_global_pool, infer_pool2d};

// ---- shared checks ----

/// Requires a plain float element type (conv, pooling, normalization).
pub(crate) fn require_float(t: &TensorType, what: &str) -> Result<(), String> {
    if t.elem.is_float() {
        Ok(())
    } else {
        Err(format!(
            "{what} must have a float element type, found {}",
            t.elem
        ))
    }
}

/// Requires a plain float or integer element type (matmul, gemm); bool and
/// quantized types have no arithmetic here (quantized compute goes through
/// the `quant` dialect).
fn require_numeric(t: &TensorType, what: &str) -> Result<(), String> {
    if t.elem.is_float() || t.elem.is_int() {
        Ok(())
    } else {
        Err(format!(
            "{what} must have a float or integer element type, found {}",
            t.elem
        ))
    }
}

fn require_same_elem(a: &ElemType, b: &ElemType, what: &str) -> Result<(), String> {
    if a == b {
        Ok(())
    } else {
        Err(format!("{what} has element type {b}, expected {a}"))
    }
}

pub(crate) fn require_rank(t: &TensorType, rank: usize, what: &str) -> Result<(), String> {
    if t.rank() == rank {
        Ok(())
    } else {
        Err(format!("{what} rank must be {rank}, found {}", t.rank()))
    }
}

/// An integer-list attribute of exactly `len` entries, each at least `min`
/// and at most 2^40 (the largest dimension), so sizes computed from them
/// cannot overflow.
pub(crate) fn ints_attr(
    cx_ints: Result<&[i64], String>,
    name: &str,
    len: usize,
    min: i64,
) -> Result<Vec<usize>, String> {
    let v = cx_ints?;
    if v.len() != len {
        return Err(format!(
            "`{name}` must have {len} entries, found {}",
            v.len()
        ));
    }
    if let Some(bad) = v.iter().find(|&&x| x < min) {
        return Err(format!(
            "`{name}` entries must be at least {min}, found {bad}"
        ));
    }
    if let Some(bad) = v.iter().find(|&&x| x as u64 > crate::types::MAX_ELEMENTS as u64) {
        return Err(format!("`{name}` entries must be at most 2^40, found {bad}"));
    }
    Ok(v.iter().map(|&x| x as usize).collect())
}

/// Spatial attributes shared by conv and pooling, validated.
pub(crate) struct Window {
    pub strides: [usize; 2],
    /// [top, left, bottom, right].
    pub pads: [usize; 4],
    pub dilations: [usize; 2],
}

macro_rules! window_from {
    ($cx:expr) => {{
        let s = ints_attr($cx.ints("strides"), "strides", 2, 1)?;
        let p = ints_attr($cx.ints("pads"), "pads", 4, 0)?;
        let d = ints_attr($cx.ints("dilations"), "dilations", 2, 1)?;
        Window {
            strides: [s[0], s[1]],
            pads: [p[0], p[1], p[2], p[3]],
            dilations: [d[0], d[1]],
        }
    }};
}
pub(crate) use window_from;

/// ONNX's floor-mode output size of a sliding window, or an error when the
/// dilated kernel does not fit in the padded input.
pub(crate) fn conv_out_size(
    input: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    dim: &str,
) -> Result<usize, String> {
    // In u128: a dilation and a kernel of up to 2^40 each.
    let span = dilation as u128 * (k as u128).saturating_sub(1) + 1;
    let padded = input as u128 + pad as u128;
    if padded < span {
        return Err(format!(
            "the dilated kernel ({span}) is larger than the padded input ({padded}) along {dim}"
        ));
    }
    Ok(((padded - span) / stride.max(1) as u128 + 1) as usize)
}

fn check_groups(groups: i64, channels: usize, what: &str) -> Result<usize, String> {
    if groups < 1 {
        return Err(format!("groups must be at least 1, found {groups}"));
    }
    let g = groups as usize;
    if !channels.is_multiple_of(g) {
        return Err(format!(
            "groups {g} does not divide the {channels} {what} channels"
        ));
    }
    Ok(g)
}

fn check_bias(cx: &InferCx, i: usize, channels: usize, elem: &ElemType) -> Result<(), String> {
    if let Some(b) = cx.operand(i) {
        require_same_elem(elem, &b.elem, "bias")?;
        if b.shape != [channels] {
            return Err(format!(
                "bias shape must be [{channels}], found {:?}",
                b.shape
            ));
        }
    }
    Ok(())
}

// ---- conv2d ----

pub fn infer_conv2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, w) = (&cx.operands[0], &cx.operands[1]);
    require_rank(x, 4, "input")?;
    require_rank(w, 4, "weight")?;
    require_float(x, "input")?;
    require_same_elem(&x.elem, &w.elem, "weight")?;
    let win = window_from!(cx);
    if w.shape[2] == 0 || w.shape[3] == 0 {
        return Err(format!(
            "weight kernel dimensions must be non-zero, found {:?}",
            w.shape
        ));
    }
    let (c, m) = (x.shape[1], w.shape[0]);
    let g = check_groups(cx.int("groups")?, c, "input")?;
    check_groups(g as i64, m, "output")?;
    if w.shape[1] * g != c {
        return Err(format!(
            "weight expects {} input channels ({} per group x {g} groups), input has {c}",
            w.shape[1] * g,
            w.shape[1]
        ));
    }
    check_bias(cx, 2, m, &x.elem)?;
    let oh = conv_out_size(
        x.shape[2],
        w.shape[2],
        win.strides[0],
        win.pads[0] + win.pads[2],
        win.dilations[0],
        "H",
    )?;
    let ow = conv_out_size(
        x.shape[3],
        w.shape[3],
        win.strides[1],
        win.pads[1] + win.pads[3],
        win.dilations[1],
        "W",
    )?;
    Ok(vec![TensorType::new(
        vec![x.shape[0], m, oh, ow],
        x.elem.clone(),
    )])
}

pub fn eval_conv2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (x, w) = (cx.inputs[0], cx.inputs[1]);
    let win = window_from!(cx);
    let g = cx.int("groups")? as usize;
    let out_ty = cx.result_type().clone();
    let [n, m, oh, ow] = out_ty.shape[..] else {
        return Err("internal error: conv2d result is not 4-D".into());
    };
    let (c, h, wd) = (x.shape()[1], x.shape()[2], x.shape()[3]);
    let (cg, kh, kw) = (w.shape()[1], w.shape()[2], w.shape()[3]);
    let mg = m / g;
    let (xv, wv) = (x.to_f64(), w.to_f64());
    let bias = cx.input(2).map(|b| b.to_f64());
    let mut out = Vec::with_capacity(out_ty.num_elements());
    for b in 0..n {
        for oc in 0..m {
            let ic0 = (oc / mg) * cg;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = bias.as_ref().map_or(0.0, |bv| bv[oc]);
                    for ci in 0..cg {
                        for ky in 0..kh {
                            // Signed: the window may start in the top/left padding.
                            let iy = (y * win.strides[0] + ky * win.dilations[0]) as i64
                                - win.pads[0] as i64;
                            if iy < 0 || iy >= h as i64 {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = (xo * win.strides[1] + kx * win.dilations[1]) as i64
                                    - win.pads[1] as i64;
                                if ix < 0 || ix >= wd as i64 {
                                    continue;
                                }
                                let xi = ((b * c + ic0 + ci) * h + iy as usize) * wd + ix as usize;
                                let wi = ((oc * cg + ci) * kh + ky) * kw + kx;
                                acc += xv[xi] * wv[wi];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    Ok(vec![Tensor::from_f64(out_ty, out)])
}

// ---- conv_transpose2d ----

/// ONNX ConvTranspose's output size along spatial dimension `i` (0 = H,
/// 1 = W): the full output minus both pads.
fn conv_transpose_out(
    input: usize,
    k: usize,
    win: &Window,
    i: usize,
    op: usize,
) -> Result<usize, String> {
    // In i128: strides, dilations and sizes of up to 2^40 each.
    let (s, d) = (win.strides[i] as i128, win.dilations[i] as i128);
    let full = (input as i128 - 1) * s + d * (k as i128 - 1) + op as i128 + 1;
    let out = full - win.pads[i] as i128 - win.pads[i + 2] as i128;
    let dim = ["H", "W"][i];
    if out < 1 {
        return Err(format!(
            "the output size along {dim} would be {out}: the pads remove more than the full output ({full})"
        ));
    }
    if out > crate::types::MAX_ELEMENTS as i128 {
        return Err(format!("the output size along {dim} would be {out}, more than 2^40"));
    }
    Ok(out as usize)
}

pub fn infer_conv_transpose2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, w) = (&cx.operands[0], &cx.operands[1]);
    require_rank(x, 4, "input")?;
    require_rank(w, 4, "weight")?;
    require_float(x, "input")?;
    require_same_elem(&x.elem, &w.elem, "weight")?;
    let win = window_from!(cx);
    let op = ints_attr(cx.ints("output_padding"), "output_padding", 2, 0)?;
    for (i, &o) in op.iter().enumerate() {
        // ONNX: output_padding must be smaller than the stride or the dilation.
        if o >= win.strides[i].max(win.dilations[i]) {
            return Err(format!(
                "output_padding {o} must be smaller than the stride ({}) or the dilation ({})",
                win.strides[i], win.dilations[i]
            ));
        }
    }
    if w.shape[2] == 0 || w.shape[3] == 0 {
        return Err(format!(
            "weight kernel dimensions must be non-zero, found {:?}",
            w.shape
        ));
    }
    let c = x.shape[1];
    if w.shape[0] != c {
        return Err(format!(
            "weight has {} input channels (dimension 0), input has {c}",
            w.shape[0]
        ));
    }
    let g = check_groups(cx.int("groups")?, c, "input")?;
    let m = w.shape[1] * g;
    check_bias(cx, 2, m, &x.elem)?;
    if x.shape[2] == 0 || x.shape[3] == 0 {
        return Err("input spatial dimensions must be non-empty".into());
    }
    let oh = conv_transpose_out(x.shape[2], w.shape[2], &win, 0, op[0])?;
    let ow = conv_transpose_out(x.shape[3], w.shape[3], &win, 1, op[1])?;
    Ok(vec![TensorType::new(
        vec![x.shape[0], m, oh, ow],
        x.elem.clone(),
    )])
}

pub fn eval_conv_transpose2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (x, w) = (cx.inputs[0], cx.inputs[1]);
    let win = window_from!(cx);
    let g = cx.int("groups")? as usize;
    let out_ty = cx.result_type().clone();
    let [n, m, oh, ow] = out_ty.shape[..] else {
        return Err("internal error: conv_transpose2d result is not 4-D".into());
    };
    let (c, h, wd) = (x.shape()[1], x.shape()[2], x.shape()[3]);
    let (mg, kh, kw) = (w.shape()[1], w.shape()[2], w.shape()[3]);
    let cg = c / g;
    let (xv, wv) = (x.to_f64(), w.to_f64());
    let mut out = vec![0.0; out_ty.num_elements()];
    if let Some(bias) = cx.input(2) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = bias.get_f64((i / (oh * ow)) % m);
        }
    }
    // Scatter form: each input pixel adds its kernel-weighted copy to the
    // output at stride spacing; pads crop the full output.
    for b in 0..n {
        for ic in 0..c {
            let grp = ic / cg;
            for iy in 0..h {
                for ix in 0..wd {
                    let xval = xv[((b * c + ic) * h + iy) * wd + ix];
                    for j in 0..mg {
                        let oc = grp * mg + j;
                        for ky in 0..kh {
                            let y = (iy * win.strides[0] + ky * win.dilations[0]) as i64
                                - win.pads[0] as i64;
                            if y < 0 || y >= oh as i64 {
                                continue;
                            }
                            for kx in 0..kw {
                                let xo = (ix * win.strides[1] + kx * win.dilations[1]) as i64
                                    - win.pads[1] as i64;
                                if xo < 0 || xo >= ow as i64 {
                                    continue;
                                }
                                let wi = ((ic * mg + j) * kh + ky) * kw + kx;
                                out[((b * m + oc) * oh + y as usize) * ow + xo as usize] +=
                                    xval * wv[wi];
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(vec![Tensor::from_f64(out_ty, out)])
}

// ---- matmul and gemm ----

/// The arithmetic matmul and gemm need: `f64` for float types (rounded once
/// at the end), wrapping `i64` for integer types (wrapped to the type at the
/// end, as numpy's fixed-width integers do).
trait Acc: Copy {
    const ZERO: Self;
    fn mul_add(self, a: Self, b: Self) -> Self;
}
impl Acc for f64 {
    const ZERO: f64 = 0.0;
    fn mul_add(self, a: f64, b: f64) -> f64 {
        self + a * b
    }
}
impl Acc for i64 {
    const ZERO: i64 = 0;
    fn mul_add(self, a: i64, b: i64) -> i64 {
        self.wrapping_add(a.wrapping_mul(b))
    }
}

/// Shapes of a matmul after numpy's 1-D promotion: (batch_a, batch_b,
/// batch_out, m, k, n, result shape).
struct MatmulShapes {
    batch_a: Vec<usize>,
    batch_b: Vec<usize>,
    batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
    result: Vec<usize>,
}

fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<MatmulShapes, String> {
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "operands must have rank at least 1, found ranks {} and {}",
            a.len(),
            b.len()
        ));
    }
    // 1-D lhs becomes [1, k]; 1-D rhs becomes [k, 1]; the added dimension is
    // removed from the result.
    let (m, ka) = if a.len() == 1 {
        (1, a[0])
    } else {
        (a[a.len() - 2], a[a.len() - 1])
    };
    let (kb, n) = if b.len() == 1 {
        (b[0], 1)
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if ka != kb {
        return Err(format!(
            "inner dimensions differ: lhs {a:?} has {ka} columns, rhs {b:?} has {kb} rows"
        ));
    }
    let batch_a = a[..a.len().saturating_sub(2)].to_vec();
    let batch_b = b[..b.len().saturating_sub(2)].to_vec();
    let batch = broadcast_shapes(&batch_a, &batch_b)
        .map_err(|_| format!("batch dimensions of {a:?} and {b:?} do not broadcast"))?;
    let mut result = batch.clone();
    if a.len() > 1 {
        result.push(m);
    }
    if b.len() > 1 {
        result.push(n);
    }
    Ok(MatmulShapes {
        batch_a,
        batch_b,
        batch,
        m,
        k: ka,
        n,
        result,
    })
}

pub fn infer_matmul(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (a, b) = (&cx.operands[0], &cx.operands[1]);
    require_numeric(a, "lhs")?;
    require_same_elem(&a.elem, &b.elem, "rhs")?;
    let s = matmul_shapes(&a.shape, &b.shape)?;
    Ok(vec![TensorType::new(s.result, a.elem.clone())])
}

fn matmul_kernel<T: Acc>(s: &MatmulShapes, av: &[T], bv: &[T]) -> Vec<T> {
    let amap = broadcast_index_map(&s.batch_a, &s.batch);
    let bmap = broadcast_index_map(&s.batch_b, &s.batch);
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = Vec::with_capacity(amap.len() * m * n);
    for (ab, bb) in amap.iter().zip(&bmap) {
        let (ao, bo) = (ab * m * k, bb * k * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::ZERO;
                for p in 0..k {
                    acc = acc.mul_add(av[ao + i * k + p], bv[bo + p * n + j]);
                }
                out.push(acc);
            }
        }
    }
    out
}

pub fn eval_matmul(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (a, b) = (cx.inputs[0], cx.inputs[1]);
    let s = matmul_shapes(a.shape(), b.shape())?;
    let ty = cx.result_type().clone();
    Ok(vec![if ty.elem.is_float() {
        Tensor::from_f64(ty, matmul_kernel(&s, &a.to_f64(), &b.to_f64()))
    } else {
        Tensor::from_i64(ty, matmul_kernel(&s, &a.to_i64(), &b.to_i64()))
    }])
}

/// (m, k, n) of `op(a) @ op(b)`.
fn gemm_dims(
    a: &[usize],
    b: &[usize],
    ta: bool,
    tb: bool,
) -> Result<(usize, usize, usize), String> {
    let (m, ka) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
    let (kb, n) = if tb { (b[1], b[0]) } else { (b[0], b[1]) };
    if ka != kb {
        return Err(format!(
            "inner dimensions differ: op(a) is [{m}, {ka}], op(b) is [{kb}, {n}]"
        ));
    }
    Ok((m, ka, n))
}

pub fn infer_gemm(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (a, b) = (&cx.operands[0], &cx.operands[1]);
    require_rank(a, 2, "a")?;
    require_rank(b, 2, "b")?;
    require_numeric(a, "a")?;
    require_same_elem(&a.elem, &b.elem, "b")?;
    let (m, _, n) = gemm_dims(&a.shape, &b.shape, cx.bool("trans_a")?, cx.bool("trans_b")?)?;
    if let Some(c) = cx.operand(2) {
        require_same_elem(&a.elem, &c.elem, "c")?;
        // Unidirectional: c broadcasts to the result, never the other way.
        let ok = c.rank() <= 2 && broadcast_shapes(&c.shape, &[m, n]).is_ok_and(|s| s == [m, n]);
        if !ok {
            return Err(format!(
                "c shape {:?} does not broadcast to the result shape [{m}, {n}]",
                c.shape
            ));
        }
    }
    if a.elem.is_int() {
        for name in ["alpha", "beta"] {
            let v = cx.float(name)?;
            if v.fract() != 0.0 {
                return Err(format!("integer gemm needs an integral {name}, found {v}"));
            }
        }
    }
    Ok(vec![TensorType::new(vec![m, n], a.elem.clone())])
}

/// `alpha * op(a) @ op(b) + beta * c` in accumulator type `T`.
fn gemm_kernel<T: Acc + std::ops::Mul<Output = T> + std::ops::Add<Output = T>>(
    (a, a_shape): (&[T], &[usize]),
    (b, b_shape): (&[T], &[usize]),
    c: Option<(&[T], &[usize])>,
    (ta, tb): (bool, bool),
    (alpha, beta): (T, T),
    (m, k, n): (usize, usize, usize),
) -> Vec<T> {
    let cmap = c.map(|(_, cs)| broadcast_index_map(cs, &[m, n]));
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::ZERO;
            for p in 0..k {
                let av = if ta {
                    a[p * a_shape[1] + i]
                } else {
                    a[i * a_shape[1] + p]
                };
                let bv = if tb {
                    b[j * b_shape[1] + p]
                } else {
                    b[p * b_shape[1] + j]
                };
                acc = acc.mul_add(av, bv);
            }
            let mut v = alpha * acc;
            if let (Some((cv, _)), Some(map)) = (c, &cmap) {
                v = v + beta * cv[map[i * n + j]];
            }
            out.push(v);
        }
    }
    out
}

pub fn eval_gemm(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (a, b) = (cx.inputs[0], cx.inputs[1]);
    let t = (cx.bool("trans_a")?, cx.bool("trans_b")?);
    let dims = gemm_dims(a.shape(), b.shape(), t.0, t.1)?;
    let (alpha, beta) = (cx.float("alpha")?, cx.float("beta")?);
    let ty = cx.result_type().clone();
    let c = cx.input(2);
    Ok(vec![if ty.elem.is_float() {
        let cv = c.map(|c| c.to_f64());
        let cs = c.map(|c| (cv.as_deref().unwrap_or(&[]), c.shape()));
        Tensor::from_f64(
            ty,
            gemm_kernel(
                (&a.to_f64(), a.shape()),
                (&b.to_f64(), b.shape()),
                cs,
                t,
                (alpha, beta),
                dims,
            ),
        )
    } else {
        let wrap = |t: &Tensor| t.to_i64().into_iter().map(Wrapping).collect::<Vec<_>>();
        let cv = c.map(wrap);
        let cs = c.map(|c| (cv.as_deref().unwrap_or(&[]), c.shape()));
        // infer checked that alpha and beta are integral; integer gemm wraps
        // in the product by alpha/beta just as in the accumulation.
        let ab = (Wrapping(alpha as i64), Wrapping(beta as i64));
        let out = gemm_kernel(
            (&wrap(a), a.shape()),
            (&wrap(b), b.shape()),
            cs,
            t,
            ab,
            dims,
        );
        Tensor::from_i64(ty, out.into_iter().map(|w| w.0).collect())
    }])
}

impl Acc for Wrapping<i64> {
    const ZERO: Wrapping<i64> = Wrapping(0);
    fn mul_add(self, a: Self, b: Self) -> Self {
        self + a * b
    }
}

#[cfg(test)]
mod tests;
