//! Convolutions, pooling, matrix products, normalizations, reductions and
//! grid sampling.
//!
//! The table's spatial ops are 2-D (NCHW). 1-D ONNX convolutions and pools
//! run as 2-D ones over a height of 1 (reshape in, reshape out), which is
//! exact. `auto_pad` and ConvTranspose's `output_shape` are resolved to
//! explicit pads here, following the ONNX operator definitions.

use super::context::{Cx, Node, R, V};
use aoc_ir::Opcode;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// Spatial attributes of a conv or pool node, lifted to 2-D.
struct Spatial {
    /// 1 for a 1-D op (run with a leading height of 1), 2 for 2-D.
    dims: usize,
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    /// [begin_h, begin_w, end_h, end_w]
    pads: Vec<i64>,
}

fn lift(v: Vec<i64>, dims: usize, fill: i64) -> Vec<i64> {
    if dims == 1 {
        [vec![fill], v].concat()
    } else {
        v
    }
}

/// Reads kernel/strides/dilations/pads and resolves `auto_pad` for a forward
/// (conv or pool) window over `spatial` input sizes.
fn spatial(cx: &Cx, n: &Node, spatial_in: &[usize], kernel: Vec<i64>) -> R<Spatial> {
    let d = spatial_in.len();
    if d != 1 && d != 2 {
        return Err(cx.bad(format!(
            "only 1-D and 2-D windows are supported, found {d}-D"
        )));
    }
    let strides = n.ints("strides").unwrap_or_else(|| vec![1; d]);
    let dilations = n.ints("dilations").unwrap_or_else(|| vec![1; d]);
    if kernel.len() != d || strides.len() != d || dilations.len() != d {
        return Err(cx.bad(format!(
            "kernel, strides and dilations must have {d} entries"
        )));
    }
    let auto = n.str("auto_pad", "NOTSET");
    let pads = match auto.as_str() {
        "NOTSET" => n.ints("pads").unwrap_or_else(|| vec![0; 2 * d]),
        "VALID" => vec![0; 2 * d],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * d];
            for i in 0..d {
                let input = spatial_in[i] as i64;
                let out = (input + strides[i] - 1) / strides[i];
                let extent = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + extent - input).max(0);
                let small = total / 2;
                let (b, e) = if auto == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                p[i] = b;
                p[i + d] = e;
            }
            p
        }
        other => return Err(cx.bad(format!("unknown auto_pad `{other}`"))),
    };
    if pads.len() != 2 * d {
        return Err(cx.bad(format!("pads must have {} entries", 2 * d)));
    }
    let pads = if d == 1 {
        vec![0, pads[0], 0, pads[1]]
    } else {
        pads
    };
    Ok(Spatial {
        dims: d,
        kernel: lift(kernel, d, 1),
        strides: lift(strides, d, 1),
        dilations: lift(dilations, d, 1),
        pads,
    })
}

/// Reshapes a rank-3 (N, C, L) value to (N, C, 1, L) for a 1-D op.
fn to_2d(cx: &mut Cx, v: &V) -> R<V> {
    let s = cx.shape(v);
    cx.reshape(v, &[s[0], s[1], 1, s[2]])
}

fn from_2d(cx: &mut Cx, v: &V) -> R<V> {
    let s = cx.shape(v);
    cx.reshape(v, &[s[0], s[1], s[3]])
}

pub fn conv(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let w = cx.need(n, 1)?.clone();
    let (xs, ws) = (cx.shape(&x), cx.shape(&w));
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(cx.bad(format!(
            "input and weight must both be rank 3 or 4, found {} and {}",
            xs.len(),
            ws.len()
        )));
    }
    let kernel = ws[2..].iter().map(|&k| k as i64).collect();
    let sp = spatial(cx, n, &xs[2..], kernel)?;
    let (x, w) = if sp.dims == 1 {
        (to_2d(cx, &x)?, to_2d(cx, &w)?)
    } else {
        (x, w)
    };
    let mut operands = vec![x, w];
    if let Some(b) = n.input(2) {
        operands.push(b.clone());
    }
    let attrs = Attrs::new()
        .with("strides", ints(&sp.strides))
        .with("pads", ints(&sp.pads))
        .with("dilations", ints(&sp.dilations))
        .with("groups", Attr::Int(n.int("group", 1)));
    let y = cx.op1(Opcode::Conv2d, &operands, attrs)?;
    Ok(vec![if sp.dims == 1 { from_2d(cx, &y)? } else { y }])
}

pub fn conv_transpose(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let w = cx.need(n, 1)?.clone();
    let (xs, ws) = (cx.shape(&x), cx.shape(&w));
    if xs.len() < 3 || xs.len() > 4 || ws.len() != xs.len() {
        return Err(cx.bad(format!(
            "input and weight must both be rank 3 or 4, found {} and {}",
            xs.len(),
            ws.len()
        )));
    }
    let d = xs.len() - 2;
    let kernel: Vec<i64> = ws[2..].iter().map(|&k| k as i64).collect();
    let strides = n.ints("strides").unwrap_or_else(|| vec![1; d]);
    let dilations = n.ints("dilations").unwrap_or_else(|| vec![1; d]);
    let mut out_pad = n.ints("output_padding").unwrap_or_else(|| vec![0; d]);
    if strides.len() != d || dilations.len() != d || out_pad.len() != d {
        return Err(cx.bad(format!(
            "strides, dilations and output_padding must have {d} entries"
        )));
    }
    let auto = n.str("auto_pad", "NOTSET");
    let output_shape = n
        .ints("output_shape")
        .map(|v| v[v.len().saturating_sub(d)..].to_vec());
    let mut pads = n.ints("pads").unwrap_or_else(|| vec![0; 2 * d]);
    if auto == "VALID" {
        pads = vec![0; 2 * d];
    }
    let target = match (&output_shape, auto.as_str()) {
        (Some(s), _) => Some(s.clone()),
        (None, "SAME_UPPER" | "SAME_LOWER") => {
            Some((0..d).map(|i| xs[2 + i] as i64 * strides[i]).collect())
        }
        _ => None,
    };
    if let Some(target) = target {
        if target.len() != d {
            return Err(cx.bad(format!("output_shape must have {d} spatial entries")));
        }
        for i in 0..d {
            let full = strides[i] * (xs[2 + i] as i64 - 1)
                + out_pad[i]
                + (kernel[i] - 1) * dilations[i]
                + 1;
            let total = full - target[i];
            if total < 0 {
                // The wanted output is larger than the full one: grow the
                // bottom/right edge, as extra output padding does.
                out_pad[i] -= total;
                pads[i] = 0;
                pads[i + d] = 0;
                continue;
            }
            let half = total / 2;
            let (b, e) = if auto == "SAME_UPPER" {
                (half, total - half)
            } else {
                (total - half, half)
            };
            pads[i] = b;
            pads[i + d] = e;
        }
    }
    if pads.len() != 2 * d {
        return Err(cx.bad(format!("pads must have {} entries", 2 * d)));
    }
    let (x, w) = if d == 1 {
        (to_2d(cx, &x)?, to_2d(cx, &w)?)
    } else {
        (x, w)
    };
    let pads = if d == 1 {
        vec![0, pads[0], 0, pads[1]]
    } else {
        pads
    };
    let mut operands = vec![x, w];
    if let Some(b) = n.input(2) {
        operands.push(b.clone());
    }
    let attrs = Attrs::new()
        .with("strides", ints(&lift(strides, d, 1)))
        .with("pads", ints(&pads))
        .with("dilations", ints(&lift(dilations, d, 1)))
        .with("output_padding", ints(&lift(out_pad, d, 0)))
        .with("groups", Attr::Int(n.int("group", 1)));
    let y = cx.op1(Opcode::ConvTranspose2d, &operands, attrs)?;
    Ok(vec![if d == 1 { from_2d(cx, &y)? } else { y }])
}

pub fn matmul(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let a = cx.need(n, 0)?.clone();
    let b = cx.need(n, 1)?.clone();
    Ok(vec![cx.op1(Opcode::MatMul, &[a, b], Attrs::new())?])
}

pub fn gemm(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let mut operands = vec![cx.need(n, 0)?.clone(), cx.need(n, 1)?.clone()];
    if let Some(c) = n.input(2) {
        operands.push(c.clone());
    }
    let attrs = Attrs::new()
        .with("alpha", Attr::Float(n.float("alpha", 1.0)))
        .with("beta", Attr::Float(n.float("beta", 1.0)))
        .with("trans_a", Attr::Bool(n.int("transA", 0) != 0))
        .with("trans_b", Attr::Bool(n.int("transB", 0) != 0));
    Ok(vec![cx.op1(Opcode::Gemm, &operands, attrs)?])
}

pub fn batch_norm(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    if n.int("training_mode", 0) != 0 {
        return Err(cx.bad("training mode is unsupported"));
    }
    // Opsets 7 and 8: `spatial = 0` normalizes each (channel, position)
    // with its own statistics; `momentum` matters in training only.
    if cx.opset < 9 && n.int("spatial", 1) == 0 {
        return Err(cx.bad("spatial = 0 (statistics per channel and position) is unsupported"));
    }
    let operands = (0..5)
        .map(|i| cx.need(n, i).cloned())
        .collect::<R<Vec<V>>>()?;
    let attrs = Attrs::new().with("epsilon", Attr::Float(n.float("epsilon", 1e-5f32 as f64)));
    Ok(vec![cx.op1(Opcode::BatchNorm, &operands, attrs)?])
}

/// Output 0 is `core.layer_norm`; Mean and InvStdDev, when asked for, are
/// computed beside it.
pub fn layer_norm(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let mut operands = vec![cx.need(n, 0)?.clone(), cx.need(n, 1)?.clone()];
    if let Some(b) = n.input(2) {
        operands.push(b.clone());
    }
    let x = operands[0].clone();
    let epsilon = n.float("epsilon", 1e-5f32 as f64);
    let attrs = Attrs::new()
        .with("axis", Attr::Int(n.int("axis", -1)))
        .with("epsilon", Attr::Float(epsilon));
    let y = cx.op1(Opcode::LayerNorm, &operands, attrs)?;
    let wants_stats = n.proto.output.iter().skip(1).any(|o| !o.is_empty());
    if !wants_stats {
        return Ok(vec![y]);
    }
    // Mean and InvStdDev, as the ONNX function body computes them, in the
    // stash type (float32 unless told otherwise).
    let rank = cx.shape(&x).len();
    let axis = normalize_axis(n.int("axis", -1), rank).map_err(|m| cx.bad(m))?;
    let stash = super::tensors::scalar_of(n.int("stash_type", 1) as i32, "stash_type")
        .map_err(|m| cx.bad(m))?;
    let x = if cx.ty(&x).elem.scalar() == Some(stash) {
        x
    } else {
        cx.op1(
            Opcode::Cast,
            &[x],
            Attrs::new().with("to", Attr::Type(stash)),
        )?
    };
    let reduce = Attrs::new()
        .with("axes", Attr::Ints((axis as i64..rank as i64).collect()))
        .with("keepdims", Attr::Bool(true));
    let mean = cx.op1(Opcode::ReduceMean, std::slice::from_ref(&x), reduce.clone())?;
    let d = cx.op1(Opcode::Sub, &[x, mean.clone()], Attrs::new())?;
    let dd = cx.op1(Opcode::Mul, &[d.clone(), d], Attrs::new())?;
    let var = cx.op1(Opcode::ReduceMean, &[dd], reduce)?;
    let eps = super::elementwise::scalar_like(cx, &var, epsilon);
    let var_eps = cx.op1(Opcode::Add, &[var, eps], Attrs::new())?;
    let std = cx.op1(Opcode::Sqrt, &[var_eps], Attrs::new())?;
    let inv = cx.op1(Opcode::Reciprocal, &[std], Attrs::new())?;
    Ok(vec![y, mean, inv])
}

/// MaxPool/AveragePool (the Indices output is unsupported).
pub fn pool(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let xs = cx.shape(&x);
    if xs.len() < 3 {
        return Err(cx.bad(format!("input rank must be 3 or 4, found {}", xs.len())));
    }
    let kernel = n
        .ints("kernel_shape")
        .ok_or_else(|| cx.bad("attribute `kernel_shape` is required"))?;
    let sp = spatial(cx, n, &xs[2..], kernel)?;
    let x = if sp.dims == 1 { to_2d(cx, &x)? } else { x };
    let mut attrs = Attrs::new()
        .with("kernel", ints(&sp.kernel))
        .with("strides", ints(&sp.strides))
        .with("pads", ints(&sp.pads))
        .with("dilations", ints(&sp.dilations))
        .with("ceil_mode", Attr::Bool(n.int("ceil_mode", 0) != 0));
    let opcode = if n.op_type == "MaxPool" {
        Opcode::MaxPool2d
    } else {
        attrs.set(
            "count_include_pad",
            Attr::Bool(n.int("count_include_pad", 0) != 0),
        );
        Opcode::AvgPool2d
    };
    let y = cx.op1(opcode, &[x], attrs)?;
    Ok(vec![if sp.dims == 1 { from_2d(cx, &y)? } else { y }])
}

pub fn global_pool(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let opcode = if n.op_type == "GlobalAveragePool" {
        Opcode::GlobalAvgPool
    } else {
        Opcode::GlobalMaxPool
    };
    Ok(vec![cx.op1(opcode, &[x], Attrs::new())?])
}

/// The Reduce* family. Axes come from the attribute before ReduceSum-13 and
/// the others' opset 18, from the second input after; an empty list means
/// every axis unless `noop_with_empty_axes`.
pub fn reduce(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let rank = cx.shape(&x).len();
    let axes_from_input = if n.op_type == "ReduceSum" {
        cx.opset >= 13
    } else {
        cx.opset >= 18
    };
    let axes = if axes_from_input {
        cx.const_ints(n, 1, "axes")?
    } else {
        n.ints("axes")
    };
    let axes = axes.unwrap_or_default();
    let keepdims = n.int("keepdims", 1) != 0;
    let axes: Vec<i64> = if axes.is_empty() {
        if n.int("noop_with_empty_axes", 0) != 0 {
            return Ok(vec![x]);
        }
        (0..rank as i64).collect()
    } else {
        let mut v = axes
            .iter()
            .map(|&a| normalize_axis(a, rank).map(|a| a as i64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| cx.bad(m))?;
        v.sort();
        v.dedup();
        v
    };
    let attrs = Attrs::new()
        .with("axes", Attr::Ints(axes))
        .with("keepdims", Attr::Bool(keepdims));
    let (pre, opcode, post): (Option<Opcode>, Opcode, Option<Opcode>) = match n.op_type {
        "ReduceSum" => (None, Opcode::ReduceSum, None),
        "ReduceMean" => (None, Opcode::ReduceMean, None),
        "ReduceMax" => (None, Opcode::ReduceMax, None),
        "ReduceMin" => (None, Opcode::ReduceMin, None),
        "ReduceSumSquare" => (Some(Opcode::Mul), Opcode::ReduceSum, None),
        "ReduceL1" => (Some(Opcode::Abs), Opcode::ReduceSum, None),
        "ReduceL2" => (Some(Opcode::Mul), Opcode::ReduceSum, Some(Opcode::Sqrt)),
        "ReduceLogSum" => (None, Opcode::ReduceSum, Some(Opcode::Log)),
        "ReduceLogSumExp" => (Some(Opcode::Exp), Opcode::ReduceSum, Some(Opcode::Log)),
        other => {
            return Err(cx.bad(format!(
                "internal error: `{other}` is not a reduction (please report)"
            )));
        }
    };
    let x = match pre {
        Some(Opcode::Mul) => cx.op1(Opcode::Mul, &[x.clone(), x], Attrs::new())?,
        Some(op) => cx.op1(op, &[x], Attrs::new())?,
        None => x,
    };
    let y = cx.op1(opcode, &[x], attrs)?;
    let y = match post {
        Some(op) => cx.op1(op, &[y], Attrs::new())?,
        None => y,
    };
    Ok(vec![y])
}

/// `GridSample` (opset 16: `bilinear`/`nearest`/`bicubic`; opset 20:
/// `linear`/`nearest`/`cubic`) on 4-D and 5-D inputs: `core.grid_sample`.
pub fn grid_sample(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let grid = cx.need(n, 1)?.clone();
    let default = if cx.opset >= 20 { "linear" } else { "bilinear" };
    let mode = match n.str("mode", default).as_str() {
        "bilinear" | "linear" => "linear",
        "bicubic" | "cubic" => "cubic",
        "nearest" => "nearest",
        m => return Err(cx.bad(format!("node `{}`: unknown mode `{m}` (bilinear/linear, nearest or bicubic/cubic)", n.name))),
    };
    let padding = n.str("padding_mode", "zeros");
    if !matches!(padding.as_str(), "zeros" | "border" | "reflection") {
        return Err(cx.bad(format!("node `{}`: unknown padding_mode `{padding}` (zeros, border or reflection)", n.name)));
    }
    let align = match n.int("align_corners", 0) {
        0 => false,
        1 => true,
        a => return Err(cx.bad(format!("node `{}`: align_corners must be 0 or 1, found {a}", n.name))),
    };
    let rank = cx.ty(&x).rank();
    if rank != 4 && rank != 5 {
        return Err(cx.bad(format!(
            "node `{}`: only 4-D (N×C×H×W) and 5-D (N×C×D×H×W) inputs are supported, found rank {rank}",
            n.name
        )));
    }
    let attrs = Attrs::new()
        .with("mode", Attr::Str(mode.into()))
        .with("padding_mode", Attr::Str(padding))
        .with("align_corners", Attr::Bool(align));
    Ok(vec![cx.op1(Opcode::GridSample, &[x, grid], attrs)?])
}
