//! `Scan` (opset 9 and newer) imported as a `core.loop`, so both backends
//! run it as they run `Loop`: the trip count is the scan length (static),
//! the condition stays true, the state variables are the loop-carried
//! values, and the body's region first takes each scan input's element of
//! this iteration with a `core.gather` along its scan axis (index `i`, or
//! `len - 1 - i` for a reverse direction), then runs the `Scan` body.
//! `core.loop` stacks scan outputs along a new first axis in iteration
//! order; a reverse output direction reverses that axis afterwards and a
//! non-zero output axis moves it with a transpose.
//!
//! The opset-8 form (a batch axis first, optional `sequence_lens`) runs one
//! such loop per batch element, stacked; ragged `sequence_lens` are
//! refused.

use super::{R, V, graph_attr, import_region_with, region_block};
use super::{Cx, NodeProto};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::types::Scalar;
use aoc_ir::{Opcode, Tensor, TensorType, ValueId};
use std::collections::{HashMap, HashSet};

/// Imports one `Scan` node as a `core.loop` plus the reversals and
/// transposes of its scan outputs.
pub(super) fn import_scan(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
) -> R<()> {
    let bad = |cx: &Cx, msg: String| cx.err(format!("ONNX `Scan` (node `{name}`, opset {opset}): {msg}"));
    let attr = |k: &str| node.attribute.iter().find(|a| a.name.as_deref() == Some(k));
    let m = attr("num_scan_inputs")
        .and_then(|a| a.i)
        .ok_or_else(|| bad(cx, "attribute `num_scan_inputs` is required".into()))?;
    let mut inputs = vec![];
    for (i, k) in node.input.iter().enumerate() {
        if k.is_empty() && opset < 9 && i == 0 {
            // Opset 8's optional `sequence_lens`; `scan8` reads the node.
            inputs.push(V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![0])));
            continue;
        }
        if k.is_empty() {
            return Err(bad(cx, format!("input {i} is missing (Scan has no optional inputs from opset 9)")));
        }
        let v = env.get(k).cloned().ok_or_else(|| cx.err(format!("input `{k}` of node `{name}` is not defined before it")))?;
        inputs.push(v);
    }
    if m < 1 || m as usize > inputs.len() {
        return Err(bad(cx, format!("`num_scan_inputs` is {m}, the node has {} inputs", inputs.len())));
    }
    let m = m as usize;
    let n = inputs.len() - m;
    let (states, scans) = inputs.split_at(n);
    let ints = |cx: &Cx, k: &str, len: usize| -> R<Vec<i64>> {
        match attr(k) {
            None => Ok(vec![0; len]),
            Some(a) if a.ints.len() == len => Ok(a.ints.clone()),
            Some(a) => Err(bad(cx, format!("attribute `{k}` has {} values, expected {len}", a.ints.len()))),
        }
    };
    let directions = |cx: &Cx, k: &str, len: usize| -> R<Vec<bool>> {
        ints(cx, k, len)?
            .into_iter()
            .map(|d| match d {
                0 => Ok(false),
                1 => Ok(true),
                d => Err(bad(cx, format!("`{k}` values must be 0 (forward) or 1 (reverse), found {d}"))),
            })
            .collect()
    };
    if opset < 9 {
        return scan8(cx, env, used, node, name, opset, n, states, scans);
    }
    let in_axes = ints(cx, "scan_input_axes", m)?;
    let in_reverse = directions(cx, "scan_input_directions", m)?;
    let k = node.output.len().saturating_sub(n);
    let out_axes = ints(cx, "scan_output_axes", k)?;
    let out_reverse = directions(cx, "scan_output_directions", k)?;
    let dirs = Dirs { in_axes, in_reverse, out_axes, out_reverse };
    let outs = scan_loop(cx, env, used, node, name, opset, states, scans, &dirs, &result_names_of(node))?;
    for (o, v) in node.output.iter().zip(outs) {
        if !o.is_empty() {
            env.insert(o.clone(), v);
        }
    }
    Ok(())
}

/// The opset-8 form: every input has a batch axis first (the scan axis is
/// the one after it), `directions` says which scan inputs run backwards,
/// and `sequence_lens` must be absent or the full length for every batch
/// element (a shorter sequence would make its outputs ragged). Each batch
/// element is its own loop; the results are stacked along the batch axis.
#[allow(clippy::too_many_arguments)]
fn scan8(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
    n: usize,
    states: &[V],
    scans: &[V],
) -> R<()> {
    let bad = |cx: &Cx, msg: String| cx.err(format!("ONNX `Scan` (node `{name}`, opset {opset}): {msg}"));
    // Opset 8's first input is `sequence_lens`, then the states.
    let seq_lens = node.input.first().filter(|k| !k.is_empty()).and_then(|k| env.get(k)).cloned();
    if n == 0 {
        return Err(bad(cx, "input 0 (sequence_lens, possibly empty) is missing".into()));
    }
    let (states, n) = (&states[1..], n - 1);
    let batch = match states.first().or(scans.first()) {
        Some(v) if cx.ty(v).rank() > 0 => cx.ty(v).shape[0],
        _ => return Err(bad(cx, "inputs need a batch axis".into())),
    };
    for (i, v) in states.iter().chain(scans).enumerate() {
        let t = cx.ty(v);
        if t.rank() == 0 || t.shape[0] != batch {
            return Err(bad(cx, format!("input {} is {t}; every input needs the batch axis of {batch}", i + 1)));
        }
    }
    let len = scans.first().map(|v| cx.ty(v)).filter(|t| t.rank() > 1).map(|t| t.shape[1]);
    let Some(len) = len else {
        return Err(bad(cx, "scan inputs need a batch and a scan axis".into()));
    };
    if let Some(l) = seq_lens {
        match &l {
            V::C(t) if t.to_i64().iter().all(|&x| x == len as i64) => {}
            _ => {
                return Err(bad(
                    cx,
                    format!("`sequence_lens` must be absent or a constant {len} for every batch element (ragged sequences are not supported)"),
                ));
            }
        }
    }
    let m = scans.len();
    let in_reverse: Vec<bool> = match node.attribute.iter().find(|a| a.name.as_deref() == Some("directions")) {
        None => vec![false; m],
        Some(a) if a.ints.len() == m && a.ints.iter().all(|&d| d == 0 || d == 1) => a.ints.iter().map(|&d| d == 1).collect(),
        Some(a) => return Err(bad(cx, format!("attribute `directions` must hold {m} values of 0 or 1, found {:?}", a.ints))),
    };
    let k = node.output.len().saturating_sub(n);
    let dirs = Dirs { in_axes: vec![0; m], in_reverse, out_axes: vec![0; k], out_reverse: vec![false; k] };
    let names = result_names_of(node);
    let mut per_batch: Vec<Vec<V>> = vec![];
    for b in 0..batch {
        let pick = |cx: &mut Cx, v: &V| -> R<V> {
            let i = V::konst(Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![b as i64]));
            cx.op1(Opcode::Gather, &[v.clone(), i], Attrs::new().with("axis", Attr::Int(0)))
        };
        let st = states.iter().map(|v| pick(cx, v)).collect::<R<Vec<_>>>()?;
        let sc = scans.iter().map(|v| pick(cx, v)).collect::<R<Vec<_>>>()?;
        let names: Vec<String> = names.iter().map(|s| if batch > 1 { format!("{s}_b{b}") } else { s.clone() }).collect();
        per_batch.push(scan_loop(cx, env, used, node, name, opset, &st, &sc, &dirs, &names)?);
    }
    for (j, o) in node.output.iter().enumerate() {
        let mut parts = vec![];
        for outs in &per_batch {
            let v = outs.get(j).cloned().ok_or_else(|| bad(cx, format!("output {j} is not produced by the body")))?;
            let mut shape = vec![1];
            shape.extend(cx.shape(&v));
            parts.push(cx.reshape(&v, &shape)?);
        }
        let v = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            cx.op1(Opcode::Concat, &parts, Attrs::new().with("axis", Attr::Int(0)))?
        };
        if !o.is_empty() {
            env.insert(o.clone(), v);
        }
    }
    Ok(())
}

/// The axes and directions of a `Scan`'s inputs and outputs.
struct Dirs {
    in_axes: Vec<i64>,
    in_reverse: Vec<bool>,
    out_axes: Vec<i64>,
    out_reverse: Vec<bool>,
}

fn result_names_of(node: &NodeProto) -> Vec<String> {
    node.output.iter().enumerate().map(|(i, o)| if o.is_empty() { format!("out{i}") } else { o.clone() }).collect()
}

/// One `core.loop` scanning `scans` with state variables `states`; the
/// values of the node's outputs (states, then scan outputs).
#[allow(clippy::too_many_arguments)]
fn scan_loop(
    cx: &mut Cx,
    env: &HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
    states: &[V],
    scans: &[V],
    d: &Dirs,
    names: &[String],
) -> R<Vec<V>> {
    let loc = cx.loc.clone();
    let bad = |cx: &Cx, msg: String| cx.err(format!("ONNX `Scan` (node `{name}`, opset {opset}): {msg}"));
    let (n, in_axes, in_reverse) = (states.len(), &d.in_axes, &d.in_reverse);
    // The scan axis of each input and the common length.
    let mut axes = vec![];
    let mut len: Option<usize> = None;
    for (j, x) in scans.iter().enumerate() {
        let ty = cx.ty(x);
        if ty.rank() == 0 {
            return Err(bad(cx, format!("scan input {j} is a scalar; it needs an axis to scan")));
        }
        let a = normalize_axis(in_axes[j], ty.rank()).map_err(|e| bad(cx, format!("scan input {j}: {e}")))?;
        let l = ty.shape[a];
        if let Some(l0) = len.filter(|&l0| l0 != l) {
            return Err(bad(cx, format!("scan input {j} has length {l} along axis {a}, scan input 0 has {l0}")));
        }
        len = Some(l);
        axes.push(a);
    }
    let len = len.unwrap_or(0);
    let scalar = |s: Scalar| TensorType::new(vec![], s);
    let carried: Vec<TensorType> = states.iter().map(|v| cx.ty(v)).collect();
    let mut fixed = vec![scalar(Scalar::I64), scalar(Scalar::I1)];
    fixed.extend(carried.iter().cloned());
    let bind = |cx: &mut Cx, args: &[ValueId]| -> R<Vec<V>> {
        let mut out: Vec<V> = args[2..].iter().map(|&a| V::R(a)).collect();
        let i = V::R(args[0]);
        let last = V::konst(Tensor::from_i64(scalar(Scalar::I64), vec![len as i64 - 1]));
        let back = if in_reverse.iter().any(|&r| r) {
            Some(cx.op1(Opcode::Sub, &[last, i.clone()], Attrs::new())?)
        } else {
            None
        };
        for (j, x) in scans.iter().enumerate() {
            let idx = match (&back, in_reverse[j]) {
                (Some(b), true) => b.clone(),
                _ => i.clone(),
            };
            let attrs = Attrs::new().with("axis", Attr::Int(axes[j] as i64));
            out.push(cx.op1(Opcode::Gather, &[x.clone(), idx], attrs)?);
        }
        Ok(out)
    };
    let check = |cx: &mut Cx, i: usize, v: V| -> R<V> {
        let ty = cx.ty(&v);
        if i < n && ty != carried[i] {
            return Err(bad(
                cx,
                format!("state variable {i} starts as {} and the body yields {ty}; aoc needs one static type", carried[i]),
            ));
        }
        Ok(v)
    };
    let body_g = graph_attr(cx, node, "Scan", name, "body")?;
    let mut arg_names = vec!["iter".to_string(), "cond".to_string()];
    arg_names.extend(body_g.input.iter().take(n).map(|vi| vi.name.clone().unwrap_or_default()));
    let mut body = import_region_with(cx, env, used, body_g, &fixed, &arg_names, name, "body", opset, &bind, &check)?;
    if body.yields.len() < n || node.output.len() != body.yields.len() {
        return Err(bad(
            cx,
            format!(
                "the body yields {} values and the node has {} outputs; both must be the {n} state variables and then one per scan output",
                body.yields.len(),
                node.output.len()
            ),
        ));
    }
    let k = body.yields.len() - n;
    let (out_axes, out_reverse) = (&d.out_axes, &d.out_reverse);
    let mut types = carried.clone();
    for &y in &body.yields[n..] {
        let s = cx.func.ty(y).clone();
        let mut shape = vec![len];
        shape.extend(&s.shape);
        types.push(TensorType { shape, ..s });
    }
    let mut out_b = vec![];
    for (j, t) in types[n..].iter().enumerate() {
        out_b.push(normalize_axis(out_axes[j], t.rank()).map_err(|e| bad(cx, format!("scan output {j}: {e}")))?);
    }
    // The condition `core.loop` reads after each iteration: always true.
    body.yields.insert(0, body.args[1]);
    let captures: Vec<ValueId> = body.captures.iter().map(|c| c.0).collect();
    let block = region_block(cx, body, &captures, &loc);
    let trip = V::konst(Tensor::from_i64(scalar(Scalar::I64), vec![len as i64]));
    let cond = V::konst(Tensor::from_i64(scalar(Scalar::I1), vec![1]));
    let mut operands = vec![cx.val(&trip)?, cx.val(&cond)?];
    for v in states {
        operands.push(cx.val(v)?);
    }
    operands.extend(&captures);
    let attrs = Attrs::new().with("carried", Attr::Int(n as i64));
    let attrs = Opcode::Loop.info().complete_attrs(attrs).map_err(|e| cx.err(e))?;
    // Scan outputs get their final names after the reversal and transpose.
    let mut named: Vec<(String, TensorType)> = names.iter().cloned().zip(types.iter().cloned()).collect();
    for (j, (nm, _)) in named.iter_mut().enumerate().skip(n) {
        if out_reverse[j - n] || out_b[j - n] != 0 {
            nm.push_str("_stacked");
        }
    }
    let op = cx.func.push_region_op(Opcode::Loop, operands, attrs, named, vec![block], loc);
    let results = cx.func.ops[op].results.clone();
    let mut outs: Vec<V> = results[..n].iter().map(|&r| V::R(r)).collect();
    for j in 0..k {
        let mut v = V::R(results[n + j]);
        let rank = types[n + j].rank();
        if out_reverse[j] && len > 1 {
            let attrs = Attrs::new()
                .with("starts", Attr::Ints(vec![-1]))
                .with("ends", Attr::Ints(vec![-(len as i64) - 1]))
                .with("axes", Attr::Ints(vec![0]))
                .with("steps", Attr::Ints(vec![-1]));
            v = cx.op1(Opcode::Slice, &[v], attrs)?;
        }
        let b = out_b[j];
        if b != 0 {
            let mut perm: Vec<i64> = (1..=b as i64).collect();
            perm.push(0);
            perm.extend(b as i64 + 1..rank as i64);
            v = cx.op1(Opcode::Transpose, &[v], Attrs::new().with("perm", Attr::Ints(perm)))?;
        }
        outs.push(v);
    }
    Ok(outs)
}
