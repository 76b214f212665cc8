//! The graph walk: turns a decoded `ModelProto` into one `func @main`.
//!
//! Each ONNX value is either a known constant (`V::C`, kept as a tensor
//! until an op that cannot be folded needs it, then materialized as a
//! `const`) or an IR value (`V::R`). Every op the handlers build goes
//! through [`Cx::op`], which folds it when all its operands are constant;
//! so Shape/Gather/Concat chains collapse to constants without a separate
//! pass.
//!
//! Invariants: every op gets the location of the node it came from; every
//! error is a diagnostic at that location (never a panic); the function's
//! results carry exactly the (sanitized) graph output names.

use super::context::{Cx, Node, R, V, tensor_attr};
use super::proto::{GraphProto, ModelProto, NodeProto, attribute_type as at, type_proto};
use super::tensors::scalar_of;
use super::{ImportOptions, Imported};
use aoc_ir::attr::Attrs;
use aoc_ir::module::{ValueDef, WeightsDecl, fresh_name};
use aoc_ir::{Diagnostic, Location, Module, Opcode, TensorType, ValueId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The oldest default-domain opset the importer accepts. Opsets 7 to 12
/// differ from 13 only in ops whose differences the handlers resolve
/// (attributes that later became inputs: Slice, Pad, Clip, Dropout, the
/// axes of Squeeze and the reductions; Upsample and Resize-10's
/// asymmetric scaling; BatchNormalization's `spatial`; Softmax's 2-D
/// coercion), and real exporters still emit them. Before 7, binary ops
/// broadcast only with an explicit attribute.
pub const MIN_OPSET: i64 = 7;

/// A warning when a graph output's declared shape contradicts the computed
/// one (a fixed dimension that differs, or another rank); symbolic and
/// missing dimensions match anything. ONNX Runtime warns the same way and
/// uses the computed shape, as aoc does.
fn declared_shape_mismatch(vi: &super::proto::ValueInfoProto, name: &str, got: &TensorType) -> Option<String> {
    use super::proto::tensor_shape_proto::dimension::Value as D;
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return None;
    };
    let sp = tt.shape.as_ref()?;
    let declared: Vec<String> = sp
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(D::DimValue(v)) => v.to_string(),
            Some(D::DimParam(p)) => p.clone(),
            None => "?".to_string(),
        })
        .collect();
    // A negative dim_value (exporters write -1) is an unknown dimension.
    let differs = sp.dim.len() != got.shape.len()
        || sp.dim.iter().zip(&got.shape).any(|(d, &g)| matches!(&d.value, Some(D::DimValue(v)) if *v >= 0 && *v != g as i64));
    differs.then(|| {
        let dims: Vec<String> = got.shape.iter().map(|d| d.to_string()).collect();
        format!(
            "graph output `{name}` is declared with shape [{}], but the model computes [{}]; the computed shape is used",
            declared.join(", "),
            dims.join(", ")
        )
    })
}

/// Builds the element type and static shape of a graph input.
fn input_type(
    vi: &super::proto::ValueInfoProto,
    name: &str,
    opts: &ImportOptions,
) -> Result<TensorType, Diagnostic> {
    let loc = Location::named(name);
    let err = |m: String| Diagnostic::error(m, loc.clone());
    let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        Some(_) => {
            return Err(err(format!(
                "input `{name}` is not a dense tensor (sequences, maps, optionals and sparse tensors are unsupported)"
            )));
        }
        None => return Err(err(format!("input `{name}` has no type"))),
    };
    let s = scalar_of(tt.elem_type.unwrap_or(0), &format!("input `{name}`")).map_err(err)?;
    if let Some((_, shape)) = opts.input_shapes.iter().find(|(n, _)| n == name) {
        if let Some(sp) = &tt.shape
            && sp.dim.len() != shape.len()
        {
            return Err(err(format!(
                "--input-shape {name} gives {} dimensions, but the model's input has {}",
                shape.len(),
                sp.dim.len()
            )));
        }
        return Ok(TensorType::new(shape.clone(), s));
    }
    let Some(sp) = &tt.shape else {
        return Err(err(format!(
            "input `{name}` has no shape; give one with --input-shape {name}=1x3x224x224"
        )));
    };
    let mut shape = vec![];
    let mut symbolic = vec![];
    use super::proto::tensor_shape_proto::dimension::Value as D;
    for (i, d) in sp.dim.iter().enumerate() {
        match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => shape.push(*v as usize),
            Some(D::DimParam(p)) if !p.is_empty() => symbolic.push(format!("`{p}`")),
            _ => symbolic.push(format!("`?` (dimension {i})")),
        }
    }
    if !symbolic.is_empty() {
        let example = sp
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(v)) if *v >= 0 => v.to_string(),
                _ => "1".to_string(),
            })
            .collect::<Vec<_>>()
            .join("x");
        return Err(err(format!(
            "input `{name}` has symbolic dimensions {}; fix them with --input-shape {name}={example}",
            symbolic.join(", ")
        )));
    }
    Ok(TensorType::new(shape, s))
}

pub fn import_graph(model: &ModelProto, opts: &ImportOptions) -> R<Imported> {
    let top = Location::default();
    let mut opset = None;
    for o in &model.opset_import {
        if matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
            opset = o.version;
        }
    }
    let opset = opset.ok_or_else(|| {
        Diagnostic::error(
            "the model imports no default-domain (ai.onnx) opset",
            top.clone(),
        )
    })?;
    if opset < MIN_OPSET {
        return Err(Diagnostic::error(
            format!(
                "the model uses ONNX opset {opset}; aoc imports opset {MIN_OPSET} and newer (convert it with onnx.version_converter)"
            ),
            top,
        ));
    }
    let graph: &GraphProto = model
        .graph
        .as_ref()
        .ok_or_else(|| Diagnostic::error("the model has no graph", top.clone()))?;

    let mut cx = Cx::new(opts, opset);
    // ONNX value name -> value.
    let mut env: HashMap<String, V> = HashMap::new();

    // Initializers are constants (also when a graph input of the same name
    // lists them: that input only gives a default).
    for init in &graph.initializer {
        let name = init.name.clone().unwrap_or_default();
        let t = Rc::new(tensor_attr(
            init,
            &format!("initializer `{name}`"),
            &Location::named(name.clone()),
        )?);
        cx.name_const(&t, &name);
        env.insert(name, V::C(t));
    }
    if let Some(s) = graph.sparse_initializer.first() {
        let name = s
            .values
            .as_ref()
            .and_then(|v| v.name.clone())
            .unwrap_or_default();
        return Err(Diagnostic::error(
            format!("sparse initializer `{name}` is unsupported"),
            Location::named(name),
        ));
    }
    for vi in &graph.input {
        let name = vi.name.clone().unwrap_or_default();
        if env.contains_key(&name) {
            continue;
        }
        let ty = input_type(vi, &name, opts)?;
        let id = cx.func.add_param(&name, ty, Location::named(name.clone()));
        env.insert(name, V::R(id));
    }
    for (name, _) in &opts.input_shapes {
        if !graph
            .input
            .iter()
            .any(|vi| vi.name.as_deref() == Some(name))
        {
            let names: Vec<&str> = graph
                .input
                .iter()
                .filter_map(|v| v.name.as_deref())
                .collect();
            return Err(Diagnostic::error(
                format!(
                    "--input-shape names `{name}`, but the model's inputs are: {}",
                    names.join(", ")
                ),
                top,
            ));
        }
    }

    // Which values are consumed, so handlers can refuse optional outputs
    // they do not compute only when something reads them.
    let mut used: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(|s| s.as_str()))
        .collect();
    used.extend(graph.output.iter().filter_map(|o| o.name.as_deref()));

    for (index, node) in graph.node.iter().enumerate() {
        import_node(&mut cx, &mut env, &used, node, index, opset)?;
    }

    // Results: each named exactly like its graph output.
    cx.loc = Location::default();
    let mut results: Vec<ValueId> = vec![];
    let mut result_names: Vec<Option<String>> = vec![];
    let mut warnings = vec![];
    let mut seen_outputs = std::collections::HashSet::new();
    for out in &graph.output {
        let name = out.name.clone().unwrap_or_default();
        cx.loc = Location::named(name.clone());
        if !seen_outputs.insert(name.clone()) {
            return Err(cx.err(format!(
                "graph output `{name}` is listed twice; output names must be unique (onnx.checker and ONNX Runtime reject this model)"
            )));
        }
        let v = env
            .get(&name)
            .cloned()
            .ok_or_else(|| cx.err(format!("graph output `{name}` is never computed")))?;
        let computed = match &v {
            V::C(t) => t.ty.clone(),
            V::R(id) => cx.func.ty(*id).clone(),
        };
        if let Some(w) = declared_shape_mismatch(out, &name, &computed) {
            warnings.push(w);
        }
        let want = fresh_name(&name, |_| false);
        // Free the wanted name if another value holds it.
        if let Some(holder) = cx.func.value_by_name(&want) {
            let is_ok_holder = matches!(v, V::R(id) if id == holder)
                && !matches!(cx.func.values[holder].def, ValueDef::Param(_))
                && !results.contains(&holder);
            if is_ok_holder {
                results.push(holder);
                result_names.push((cx.func.name_of(holder) != name).then(|| name.clone()));
                continue;
            }
            if !matches!(cx.func.values[holder].def, ValueDef::Param(_))
                && !results.contains(&holder)
            {
                let fresh = cx.func.fresh_name(&format!("{want}_0"));
                cx.func.rename(holder, fresh);
            }
        }
        let id = match v {
            V::C(t) => cx.materialize(&t, &want)?,
            V::R(id) => {
                let is_param = matches!(cx.func.values[id].def, ValueDef::Param(_));
                if is_param || results.contains(&id) {
                    cx.func.push_op(
                        Opcode::Identity,
                        &[id],
                        Attrs::new(),
                        None,
                        &want,
                        cx.loc.clone(),
                    )?[0]
                } else {
                    // An op result: renaming it keeps the graph free of copies.
                    let n = cx.func.fresh_name(&want);
                    cx.func.rename(id, n);
                    id
                }
            }
        };
        results.push(id);
        // The model's own name, where the IR's had to differ.
        result_names.push((cx.func.name_of(id) != name).then(|| name.clone()));
    }
    cx.func.set_return(results);
    if result_names.iter().any(Option::is_some) {
        cx.func.result_names = result_names;
    }

    let (func, weights) = cx.finish();
    let mut module = Module::default();
    if !weights.is_empty() {
        module.weights.push(WeightsDecl {
            name: opts.weights_name.clone(),
            path: opts.weights_path.clone(),
            loc: Location::default(),
        });
    }
    module.funcs.push(func);
    Ok(Imported { module, weights, warnings })
}

/// Imports one node into `cx`, reading its inputs from `env` and adding
/// its outputs there. `used` holds the value names something reads.
fn import_node(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    index: usize,
    opset: i64,
) -> R<()> {
    let op_type = node.op_type.as_deref().unwrap_or("");
    let name = match node.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("{op_type}_{index}"),
    };
    cx.loc = Location::named(name.clone());
    cx.hint = node
        .output
        .iter()
        .find(|o| !o.is_empty())
        .cloned()
        .unwrap_or_else(|| name.clone());
    cx.op_type = op_type.to_string();
    let domain = node.domain.as_deref().unwrap_or("");
    if op_type == "If" && matches!(domain, "" | "ai.onnx") {
        return import_if(cx, env, used, node, &name, opset);
    }
    let handler = if matches!(domain, "" | "ai.onnx") {
        super::handler(op_type)
    } else {
        None
    };
    let Some(handler) = handler else {
        let dom = if matches!(domain, "" | "ai.onnx") {
            String::new()
        } else {
            format!(", domain `{domain}`")
        };
        return Err(cx.err(format!(
            "unsupported ONNX op `{op_type}` (node `{name}`{dom}, opset {opset})"
        )));
    };
    let mut inputs = vec![];
    for i in &node.input {
        if i.is_empty() {
            inputs.push(None);
        } else {
            let v = env.get(i).cloned().ok_or_else(|| {
                cx.err(format!(
                    "input `{i}` of node `{name}` is not defined before it"
                ))
            })?;
            inputs.push(Some(v));
        }
    }
    while matches!(inputs.last(), Some(None)) {
        inputs.pop();
    }
    let attrs = node
        .attribute
        .iter()
        .map(|a| (a.name.as_deref().unwrap_or(""), a))
        .collect();
    if let Some(a) = node
        .attribute
        .iter()
        .find(|a| a.ref_attr_name.is_some() || a.r#type == Some(at::GRAPH))
    {
        return Err(cx.err(format!(
            "ONNX `{op_type}`: attribute `{}` (a graph or a function reference) is unsupported",
            a.name.as_deref().unwrap_or("")
        )));
    }
    let n = Node {
        proto: node,
        op_type,
        name: name.clone(),
        inputs,
        attrs,
    };
    let outs = handler.call(cx, &n)?;
    for (i, out_name) in node.output.iter().enumerate() {
        if out_name.is_empty() {
            continue;
        }
        match outs.get(i) {
            Some(v) => {
                if let V::C(t) = v {
                    cx.name_const(t, out_name);
                }
                env.insert(out_name.clone(), v.clone());
            }
            None if used.contains(out_name.as_str()) => {
                return Err(cx.err(format!(
                    "ONNX `{op_type}`: output {i} (`{out_name}`) is unsupported, but the graph uses it"
                )));
            }
            None => {}
        }
    }
    Ok(())
}

/// `If` whose condition is known at import time (a constant, or computed
/// from shapes): the chosen branch's nodes are imported in place, reading
/// the enclosing graph's values, and its outputs become the node's. A
/// condition computed at run time needs control flow in the IR, which aoc
/// does not have yet: an error naming the node.
fn import_if(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
) -> R<()> {
    let cond = node.input.first().and_then(|i| env.get(i)).cloned();
    let take_then = match cond {
        Some(V::C(t)) if t.len() == 1 => t.get_f64(0) != 0.0,
        Some(V::C(_)) => return Err(cx.err(format!("ONNX `If` (node `{name}`): the condition must hold one element"))),
        Some(V::R(_)) => {
            return Err(cx.err(format!(
                "unsupported ONNX op `If` with a condition computed at run time (node `{name}`, opset {opset}); only an `If` whose condition is known at import time is imported (its branch inlined)"
            )));
        }
        None => return Err(cx.err(format!("ONNX `If` (node `{name}`): the condition is missing or not defined before it"))),
    };
    let branch = if take_then { "then_branch" } else { "else_branch" };
    let graph = node
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(branch))
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| cx.err(format!("ONNX `If` (node `{name}`): attribute `{branch}` (a graph) is missing")))?;
    for init in &graph.initializer {
        let key = init.name.clone().unwrap_or_default();
        let t = Rc::new(tensor_attr(init, &format!("initializer `{key}`"), &Location::named(key.clone()))?);
        env.insert(key, V::C(t));
    }
    let mut inner: HashSet<&str> = used.clone();
    inner.extend(graph.node.iter().flat_map(|n| n.input.iter().map(|s| s.as_str())));
    inner.extend(graph.output.iter().filter_map(|o| o.name.as_deref()));
    for (index, n) in graph.node.iter().enumerate() {
        import_node(cx, env, &inner, n, index, opset)?;
    }
    if graph.output.len() != node.output.len() {
        return Err(cx.err(format!(
            "ONNX `If` (node `{name}`): `{branch}` has {} outputs, the node {}",
            graph.output.len(),
            node.output.len()
        )));
    }
    for (out, inner_out) in node.output.iter().zip(&graph.output) {
        let key = inner_out.name.as_deref().unwrap_or("");
        let v = env
            .get(key)
            .cloned()
            .ok_or_else(|| cx.err(format!("ONNX `If` (node `{name}`): `{branch}` output `{key}` is never computed")))?;
        if !out.is_empty() {
            env.insert(out.clone(), v);
        }
    }
    Ok(())
}
