//! Shape and data-movement ONNX ops.
//!
//! The table's shape ops take static attributes, so every ONNX shape-like
//! input (Reshape's shape, Slice's bounds, Pad's amounts, Expand's shape,
//! Resize's scales/sizes, Split/Squeeze/Unsqueeze axes) must be a constant
//! at import time — which it is after folding, for exported models.
//! Split becomes one `core.slice` per output; Squeeze/Unsqueeze become
//! `core.reshape`.

use super::context::{Cx, Node, R, V};
use aoc_ir::Opcode;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;

fn norm_axes(cx: &Cx, axes: &[i64], rank: usize) -> R<Vec<usize>> {
    axes.iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<Result<_, _>>()
        .map_err(|m| cx.bad(m))
}

/// `Reshape`: resolves 0 (copy, unless `allowzero`) and -1 (inferred).
pub fn reshape(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let spec = cx.const_input(n, 1, "shape")?.to_i64();
    let input = cx.shape(&x);
    let allowzero = n.int("allowzero", 0) != 0;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return Err(cx.bad("the shape has more than one -1")),
            0 if !allowzero => {
                let d = *input.get(i).ok_or_else(|| {
                    cx.bad(format!(
                        "shape entry {i} is 0, but the input has rank {}",
                        input.len()
                    ))
                })?;
                out.push(d);
            }
            d if d < 0 => return Err(cx.bad(format!("invalid shape entry {d}"))),
            d => out.push(d as usize),
        }
    }
    let total: usize = input.iter().product();
    if let Some(i) = infer_at {
        let known: usize = out
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, d)| *d)
            .product();
        if known == 0 || !total.is_multiple_of(known) {
            return Err(cx.bad(format!("cannot reshape {input:?} to {spec:?}")));
        }
        out[i] = total / known;
    }
    let shape = out.iter().map(|&d| d as i64).collect();
    Ok(vec![cx.op1(
        Opcode::Reshape,
        &[x],
        Attrs::new().with("shape", Attr::Ints(shape)),
    )?])
}

pub fn transpose(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let rank = cx.shape(&x).len() as i64;
    let perm = n.ints("perm").unwrap_or_else(|| (0..rank).rev().collect());
    Ok(vec![cx.op1(
        Opcode::Transpose,
        &[x],
        Attrs::new().with("perm", Attr::Ints(perm)),
    )?])
}

pub fn flatten(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    Ok(vec![cx.op1(
        Opcode::Flatten,
        &[x],
        Attrs::new().with("axis", Attr::Int(n.int("axis", 1))),
    )?])
}

pub fn concat(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let inputs: Vec<V> = n.inputs.iter().flatten().cloned().collect();
    let axis = n
        .opt_int("axis")
        .ok_or_else(|| cx.bad("attribute `axis` is required"))?;
    Ok(vec![cx.op1(
        Opcode::Concat,
        &inputs,
        Attrs::new().with("axis", Attr::Int(axis)),
    )?])
}

/// `Slice` with constant starts/ends/axes/steps inputs.
/// `Slice`: before opset 10, `starts`, `ends` and `axes` are attributes.
pub fn slice(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    if cx.opset < 10 {
        let need = |name: &str| n.ints(name).ok_or_else(|| cx.bad(format!("attribute `{name}` is required")));
        let mut attrs = Attrs::new()
            .with("starts", Attr::Ints(need("starts")?))
            .with("ends", Attr::Ints(need("ends")?));
        if let Some(axes) = n.ints("axes") {
            attrs.set("axes", Attr::Ints(axes));
        }
        return Ok(vec![cx.op1(Opcode::Slice, &[x], attrs)?]);
    }
    let starts = cx.const_input(n, 1, "starts")?.to_i64();
    let ends = cx.const_input(n, 2, "ends")?.to_i64();
    let mut attrs = Attrs::new()
        .with("starts", Attr::Ints(starts))
        .with("ends", Attr::Ints(ends));
    if let Some(axes) = cx.const_ints(n, 3, "axes")? {
        attrs.set("axes", Attr::Ints(axes));
    }
    if let Some(steps) = cx.const_ints(n, 4, "steps")? {
        attrs.set("steps", Attr::Ints(steps));
    }
    Ok(vec![cx.op1(Opcode::Slice, &[x], attrs)?])
}

/// `Pad` (opset 11+: pads, constant_value and, since 18, axes inputs;
/// before 11, `pads` and `value` are attributes).
pub fn pad(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    if cx.opset < 11 {
        let pads = n.ints("pads").ok_or_else(|| cx.bad("attribute `pads` is required"))?;
        let attrs = Attrs::new()
            .with("pads", Attr::Ints(pads))
            .with("mode", Attr::Str(n.str("mode", "constant")))
            .with("value", Attr::Float(n.float("value", 0.0)));
        return Ok(vec![cx.op1(Opcode::Pad, &[x], attrs)?]);
    }
    let rank = cx.shape(&x).len();
    let given = cx.const_input(n, 1, "pads")?.to_i64();
    let value = match n.input(2) {
        None => 0.0,
        Some(V::C(t)) if t.len() == 1 => t.get_f64(0),
        Some(V::C(t)) if t.is_empty() => 0.0,
        Some(_) => return Err(cx.bad("`constant_value` must be a constant scalar")),
    };
    let pads = match cx.const_ints(n, 3, "axes")? {
        None => given,
        Some(axes) => {
            let axes = norm_axes(cx, &axes, rank)?;
            if given.len() != 2 * axes.len() {
                return Err(cx.bad(format!(
                    "pads must have {} entries for {} axes",
                    2 * axes.len(),
                    axes.len()
                )));
            }
            let mut full = vec![0; 2 * rank];
            for (i, &a) in axes.iter().enumerate() {
                full[a] = given[i];
                full[a + rank] = given[i + axes.len()];
            }
            full
        }
    };
    let attrs = Attrs::new()
        .with("pads", Attr::Ints(pads))
        .with("mode", Attr::Str(n.str("mode", "constant")))
        .with("value", Attr::Float(value));
    Ok(vec![cx.op1(Opcode::Pad, &[x], attrs)?])
}

pub fn gather(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let data = cx.need(n, 0)?.clone();
    let idx = cx.need(n, 1)?.clone();
    Ok(vec![cx.op1(
        Opcode::Gather,
        &[data, idx],
        Attrs::new().with("axis", Attr::Int(n.int("axis", 0))),
    )?])
}

pub fn expand(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.const_input(n, 1, "shape")?.to_i64();
    Ok(vec![cx.op1(
        Opcode::Expand,
        &[x],
        Attrs::new().with("shape", Attr::Ints(shape)),
    )?])
}

/// `Split` -> one `core.slice` per output.
pub fn split(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let axis = normalize_axis(n.int("axis", 0), shape.len()).map_err(|m| cx.bad(m))?;
    let dim = shape[axis] as i64;
    let outputs = n.n_outputs();
    let sizes = if cx.opset >= 13 {
        cx.const_ints(n, 1, "split")?
    } else {
        n.ints("split")
    };
    let sizes = match sizes {
        Some(s) if !s.is_empty() => s,
        _ => {
            let parts = n.opt_int("num_outputs").unwrap_or(outputs as i64);
            if parts <= 0 {
                return Err(cx.bad("the number of outputs must be positive"));
            }
            if n.opt_int("num_outputs").is_some() {
                // Opset 18: ceil-sized chunks, the last one smaller.
                let chunk = (dim + parts - 1) / parts;
                (0..parts)
                    .map(|i| (dim - i * chunk).clamp(0, chunk))
                    .collect()
            } else {
                if dim % parts != 0 {
                    return Err(cx.bad(format!(
                        "dimension {dim} does not split into {parts} equal parts"
                    )));
                }
                vec![dim / parts; parts as usize]
            }
        }
    };
    if sizes.iter().sum::<i64>() != dim || sizes.iter().any(|&s| s < 0) {
        return Err(cx.bad(format!(
            "split sizes {sizes:?} do not add up to dimension {dim}"
        )));
    }
    let mut start = 0;
    let mut out = vec![];
    for s in sizes {
        let attrs = Attrs::new()
            .with("starts", Attr::Ints(vec![start]))
            .with("ends", Attr::Ints(vec![start + s]))
            .with("axes", Attr::Ints(vec![axis as i64]));
        out.push(cx.op1(Opcode::Slice, std::slice::from_ref(&x), attrs)?);
        start += s;
    }
    Ok(out)
}

fn axes_of(cx: &Cx, n: &Node) -> R<Option<Vec<i64>>> {
    if cx.opset >= 13 {
        cx.const_ints(n, 1, "axes")
    } else {
        Ok(n.ints("axes"))
    }
}

pub fn squeeze(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let axes = match axes_of(cx, n)? {
        Some(a) => norm_axes(cx, &a, shape.len())?,
        None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| shape[a] != 1) {
        return Err(cx.bad(format!("cannot squeeze dimension {a} of size {}", shape[a])));
    }
    let out: Vec<usize> = (0..shape.len())
        .filter(|i| !axes.contains(i))
        .map(|i| shape[i])
        .collect();
    Ok(vec![cx.reshape_op(&x, &out)?])
}

pub fn unsqueeze(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let axes = axes_of(cx, n)?.ok_or_else(|| cx.bad("`axes` is required"))?;
    let rank = shape.len() + axes.len();
    let mut axes = norm_axes(cx, &axes, rank)?;
    axes.sort();
    let mut out = vec![];
    let mut src = shape.iter();
    for i in 0..rank {
        if axes.contains(&i) {
            out.push(1);
        } else {
            out.push(*src.next().ok_or_else(|| cx.bad("repeated axes"))?);
        }
    }
    Ok(vec![cx.reshape_op(&x, &out)?])
}

/// `Resize` with constant scales or sizes (and roi for
/// `tf_crop_and_resize`); `axes` and `keep_aspect_ratio_policy` resolved.
/// `Upsample` (opsets 7 to 9, deprecated in 10) and `Resize` of opset 10:
/// scales only (an attribute before opset 9, else the second input), the
/// source coordinate `x_out / scale` (asymmetric), nearest rounding down.
pub fn upsample(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let scales = if n.op_type == "Upsample" && cx.opset < 9 {
        n.floats("scales").ok_or_else(|| cx.bad("attribute `scales` is required"))?
    } else {
        cx.const_input(n, 1, "scales")?.to_f64()
    };
    if scales.len() != shape.len() {
        return Err(cx.bad(format!(
            "scales has {} entries, expected {} (the input's rank)",
            scales.len(),
            shape.len()
        )));
    }
    let mode = match n.str("mode", "nearest").as_str() {
        "nearest" => "nearest",
        "linear" | "bilinear" => "linear",
        other => return Err(cx.bad(format!("unknown mode `{other}` (nearest or linear)"))),
    };
    let sizes = shape
        .iter()
        .zip(&scales)
        .map(|(&d, &s)| (d as f64 * s).floor() as i64)
        .collect();
    let attrs = Attrs::new()
        .with("sizes", Attr::Ints(sizes))
        .with("scales", Attr::Floats(scales))
        .with("mode", Attr::Str(mode.to_string()))
        .with("coordinate_transformation_mode", Attr::Str("asymmetric".to_string()))
        .with("nearest_mode", Attr::Str("floor".to_string()));
    Ok(vec![cx.op1(Opcode::Resize, &[x], attrs)?])
}

/// `Resize` (opset 11+; opset 10's form is [`upsample`]'s).
pub fn resize(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    if cx.opset < 11 {
        return upsample(cx, n);
    }
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let r = shape.len();
    if n.int("antialias", 0) != 0 {
        return Err(cx.bad("antialias = 1 is unsupported"));
    }
    let axes = match n.ints("axes") {
        Some(a) => norm_axes(cx, &a, r)?,
        None => (0..r).collect(),
    };
    let floats = |cx: &Cx, i: usize, what: &str| -> R<Option<Vec<f64>>> {
        match n.input(i) {
            None => Ok(None),
            Some(V::C(t)) if t.is_empty() => Ok(None),
            Some(V::C(t)) => Ok(Some(t.to_f64())),
            Some(V::R(_)) => Err(cx.bad(format!(
                "`{what}` must be a constant (computed at import time)"
            ))),
        }
    };
    let roi = floats(cx, 1, "roi")?;
    let scales_in = floats(cx, 2, "scales")?;
    let sizes_in = floats(cx, 3, "sizes")?;
    let mode = n.str("mode", "nearest");
    let ctm = n.str("coordinate_transformation_mode", "half_pixel");
    let mut attrs = Attrs::new();
    let (sizes, scales): (Vec<i64>, Option<Vec<f64>>) = if let Some(sc) = scales_in {
        if sc.len() != axes.len() {
            return Err(cx.bad(format!(
                "scales has {} entries, expected {}",
                sc.len(),
                axes.len()
            )));
        }
        let mut full = vec![1.0; r];
        for (i, &a) in axes.iter().enumerate() {
            full[a] = sc[i];
        }
        let sizes = (0..r)
            .map(|i| (full[i] * shape[i] as f64).floor() as i64)
            .collect();
        (sizes, Some(full))
    } else if let Some(sz) = sizes_in {
        if sz.len() != axes.len() {
            return Err(cx.bad(format!(
                "sizes has {} entries, expected {}",
                sz.len(),
                axes.len()
            )));
        }
        let mut full: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        for (i, &a) in axes.iter().enumerate() {
            full[a] = sz[i] as i64;
        }
        match n.str("keep_aspect_ratio_policy", "stretch").as_str() {
            "stretch" => (full, None),
            policy @ ("not_larger" | "not_smaller") => {
                let ratios = axes.iter().map(|&a| full[a] as f64 / shape[a] as f64);
                let scale = if policy == "not_larger" {
                    ratios.fold(f64::INFINITY, f64::min)
                } else {
                    ratios.fold(0.0, f64::max)
                };
                let mut sc = vec![1.0; r];
                let mut out: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                for &a in &axes {
                    sc[a] = scale;
                    out[a] = (scale * shape[a] as f64 + 0.5) as i64;
                }
                (out, Some(sc))
            }
            other => return Err(cx.bad(format!("unknown keep_aspect_ratio_policy `{other}`"))),
        }
    } else {
        return Err(cx.bad("one of `scales` and `sizes` is required"));
    };
    attrs.set("sizes", Attr::Ints(sizes));
    if let Some(s) = scales {
        attrs.set("scales", Attr::Floats(s));
    }
    attrs.set("mode", Attr::Str(mode));
    if ctm == "tf_crop_and_resize" {
        let roi = roi.ok_or_else(|| cx.bad("`roi` is required for tf_crop_and_resize"))?;
        let k = axes.len();
        if roi.len() != 2 * k {
            return Err(cx.bad(format!("roi has {} entries, expected {}", roi.len(), 2 * k)));
        }
        let mut full = [vec![0.0; r], vec![1.0; r]].concat();
        for (i, &a) in axes.iter().enumerate() {
            full[a] = roi[i];
            full[a + r] = roi[i + k];
        }
        attrs.set("roi", Attr::Floats(full));
    }
    attrs.set("coordinate_transformation_mode", Attr::Str(ctm));
    attrs.set(
        "nearest_mode",
        Attr::Str(n.str("nearest_mode", "round_prefer_floor")),
    );
    attrs.set(
        "cubic_coeff_a",
        Attr::Float(n.float("cubic_coeff_a", -0.75)),
    );
    attrs.set(
        "exclude_outside",
        Attr::Bool(n.int("exclude_outside", 0) != 0),
    );
    attrs.set(
        "extrapolation_value",
        Attr::Float(n.float("extrapolation_value", 0.0)),
    );
    Ok(vec![cx.op1(Opcode::Resize, &[x], attrs)?])
}

impl Cx<'_> {
    /// A `core.reshape` even when the shape is unchanged (Squeeze and
    /// Unsqueeze still produce a new value).
    fn reshape_op(&mut self, v: &V, shape: &[usize]) -> R<V> {
        let s = shape.iter().map(|&d| d as i64).collect();
        self.op1(
            Opcode::Reshape,
            std::slice::from_ref(v),
            Attrs::new().with("shape", Attr::Ints(s)),
        )
    }
}
