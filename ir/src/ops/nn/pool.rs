//! Pooling: 2-D max and average pooling over NCHW, and global pooling over
//! every dimension after the first two.
//!
//! Output size follows ONNX: `(in + pad_begin + pad_end - span) / stride + 1`
//! with `span = dilation * (kernel - 1) + 1`, rounded down, or up with
//! `ceil_mode`, where a window that would start past the input and the left
//! padding is dropped (ONNX and PyTorch's rule, so the last window always
//! starts inside the input or the left padding).
//!
//! Window `o` covers the taps `o * stride - pad_begin + i * dilation`. Max
//! pooling looks only at taps inside the input (padding never wins).
//! Average pooling divides by the taps inside the input, or with
//! `count_include_pad` by the taps inside the explicitly padded extent
//! `[-pad_begin, in + pad_end)` — the cells `ceil_mode` adds beyond it are
//! never counted, as in ONNX Runtime and PyTorch. (The ONNX Python reference
//! shifts its windows when `ceil_mode` needs two or more extra cells, which
//! happens only with strides of 3 or more; we follow the runtimes there.)

use super::{Window, conv_out_size, ints_attr, require_float, require_rank, window_from};
use crate::ops::{EvalCx, InferCx, Opcode};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// The output size along spatial dimension `i` (0 = H, 1 = W).
fn pool_out_size(
    input: usize,
    k: usize,
    win: &Window,
    i: usize,
    ceil: bool,
) -> Result<usize, String> {
    let (s, d, pb, pe) = (
        win.strides[i],
        win.dilations[i],
        win.pads[i],
        win.pads[i + 2],
    );
    let floor = conv_out_size(input, k, s, pb + pe, d, ["H", "W"][i])?;
    if !ceil {
        return Ok(floor);
    }
    let span = d * (k - 1) + 1;
    let rem = (input + pb + pe - span) % s;
    let mut out = if rem == 0 { floor } else { floor + 1 };
    // The last window must start inside the input or the left padding.
    if (out - 1) * s >= input + pb {
        out -= 1;
    }
    Ok(out)
}

struct PoolAttrs {
    kernel: [usize; 2],
    win: Window,
    ceil: bool,
}

macro_rules! pool_attrs {
    ($cx:expr) => {{
        let k = ints_attr($cx.ints("kernel"), "kernel", 2, 1)?;
        PoolAttrs {
            kernel: [k[0], k[1]],
            win: window_from!($cx),
            ceil: $cx.bool("ceil_mode")?,
        }
    }};
}

fn out_hw(x: &[usize], p: &PoolAttrs) -> Result<[usize; 2], String> {
    let h = pool_out_size(x[2], p.kernel[0], &p.win, 0, p.ceil)?;
    let w = pool_out_size(x[3], p.kernel[1], &p.win, 1, p.ceil)?;
    Ok([h, w])
}

pub fn infer_pool2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    require_rank(x, 4, "input")?;
    // Max pooling only compares, so integer images are fine (ONNX allows
    // int8/uint8), and so are per-tensor quantized ones with integer storage
    // (the `qdq` pass moves dequantize past max-pool); averaging needs a
    // float type.
    let quant_ok = x
        .elem
        .quant()
        .is_some_and(|q| q.axis().is_none() && q.storage.is_int());
    if !(cx.opcode == Opcode::MaxPool2d && (x.elem.is_int() || quant_ok)) {
        require_float(x, "input")?;
    }
    let p = pool_attrs!(cx);
    // As ONNX Runtime requires: a pad at least as large as the kernel would
    // make windows of padding only.
    for (i, &pad) in p.win.pads.iter().enumerate() {
        if pad >= p.kernel[i % 2] {
            return Err(format!(
                "pads {:?} must be smaller than the kernel {:?}",
                p.win.pads, p.kernel
            ));
        }
    }
    let [h, w] = out_hw(&x.shape, &p)?;
    Ok(vec![x.with_shape(vec![x.shape[0], x.shape[1], h, w])])
}

pub fn eval_pool2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let p = pool_attrs!(cx);
    // The table routes only max_pool2d and avg_pool2d here.
    let is_max = cx.opcode == Opcode::MaxPool2d;
    let include_pad = !is_max && cx.bool("count_include_pad")?;
    let [n, c, h, w] = x.shape()[..] else {
        return Err("internal error: pool input is not 4-D".into());
    };
    let [oh, ow] = out_hw(x.shape(), &p)?;
    let (s, d, pads) = (p.win.strides, p.win.dilations, p.win.pads);
    let xv = x.to_f64();
    // Taps of output position `o` along one dimension, as (coordinate,
    // inside the input, inside the padded extent).
    let taps = |o: usize, dim: usize, len: usize| {
        (0..p.kernel[dim]).map(move |i| {
            let at = (o * s[dim] + i * d[dim]) as i64 - pads[dim] as i64;
            let inside = at >= 0 && at < len as i64;
            let in_padded = at < (len + pads[dim + 2]) as i64;
            (at, inside, in_padded)
        })
    };
    let mut out = Vec::with_capacity(n * c * oh * ow);
    for plane in 0..n * c {
        let base = plane * h * w;
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut acc, mut count, mut padded_count) =
                    (if is_max { f64::NEG_INFINITY } else { 0.0 }, 0usize, 0usize);
                for (y, yin, ypad) in taps(oy, 0, h) {
                    for (xx, xin, xpad) in taps(ox, 1, w) {
                        if ypad && xpad {
                            padded_count += 1;
                        }
                        if !(yin && xin) {
                            continue;
                        }
                        let v = xv[base + y as usize * w + xx as usize];
                        count += 1;
                        // NaN propagates through max, as numpy's max does.
                        acc = if is_max {
                            if v.is_nan() || acc.is_nan() {
                                f64::NAN
                            } else {
                                acc.max(v)
                            }
                        } else {
                            acc + v
                        };
                    }
                }
                if count == 0 {
                    return Err(format!(
                        "the pooling window at ({oy}, {ox}) covers no input element"
                    ));
                }
                out.push(match (is_max, include_pad) {
                    (true, _) => acc,
                    (false, true) => acc / padded_count as f64,
                    (false, false) => acc / count as f64,
                });
            }
        }
    }
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), out)])
}

pub fn infer_global_pool(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let x = &cx.operands[0];
    if x.rank() < 3 {
        return Err(format!("input rank must be at least 3, found {}", x.rank()));
    }
    require_float(x, "input")?;
    let mut shape = x.shape.clone();
    if shape[2..].contains(&0) {
        return Err(format!(
            "spatial dimensions must be non-empty, found {shape:?}"
        ));
    }
    shape[2..].iter_mut().for_each(|d| *d = 1);
    Ok(vec![x.with_shape(shape)])
}

pub fn eval_global_pool(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let x = cx.inputs[0];
    let is_max = cx.opcode == Opcode::GlobalMaxPool;
    let inner: usize = x.shape()[2..].iter().product();
    let out = x
        .to_f64()
        .chunks(inner)
        .map(|plane| {
            if is_max {
                plane.iter().fold(f64::NEG_INFINITY, |a, &v| {
                    if v.is_nan() || a.is_nan() {
                        f64::NAN
                    } else {
                        a.max(v)
                    }
                })
            } else {
                plane.iter().sum::<f64>() / inner as f64
            }
        })
        .collect();
    Ok(vec![Tensor::from_f64(cx.result_type().clone(), out)])
}
