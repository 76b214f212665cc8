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
use aoc_ir::module::{OpId, ValueDef, WeightsDecl, fresh_name};
use aoc_ir::types::Scalar;
use aoc_ir::{Diagnostic, Location, Module, Opcode, Tensor, TensorType, ValueId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

mod scan;

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
        if let Some((_, vals)) = opts.input_values.iter().find(|(n, _)| *n == name) {
            // Fixed by --input-value: a constant, not a parameter.
            let count = ty.num_elements();
            if vals.len() != count {
                return Err(Diagnostic::error(
                    format!("--input-value {name} gives {} values, but the input ({ty}) holds {count}", vals.len()),
                    Location::named(name.clone()),
                ));
            }
            let t = Rc::new(Tensor::from_f64(ty, vals.clone()));
            cx.name_const(&t, &name);
            env.insert(name, V::C(t));
            continue;
        }
        let id = cx.func.add_param(&name, ty, Location::named(name.clone()));
        env.insert(name, V::R(id));
    }
    let fixed = opts.input_shapes.iter().map(|(n, _)| (n, "--input-shape")).chain(opts.input_values.iter().map(|(n, _)| (n, "--input-value")));
    for (name, flag) in fixed {
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
                    "{flag} names `{name}`, but the model's inputs are: {}",
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

/// Integer attributes ONNX defines as flags. Another value is refused:
/// ONNX Runtime reads some as `== 1` and aoc's handlers as `!= 0`, so
/// accepting it would give a model two meanings.
const FLAGS: &[&str] = &[
    "allowzero", "antialias", "ceil_mode", "count_include_pad", "detect_negative", "detect_positive",
    "exclude_outside", "exclusive", "fmod", "input_forget", "keepdims", "largest", "linear_before_reset",
    "noop_with_empty_axes", "reverse", "saturate", "select_last_index", "sorted", "spatial", "training_mode",
    "transA", "transB", "upper",
];

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
    if op_type == "Loop" && matches!(domain, "" | "ai.onnx") {
        return import_loop(cx, env, used, node, &name, opset);
    }
    if op_type == "Scan" && matches!(domain, "" | "ai.onnx") {
        return scan::import_scan(cx, env, used, node, &name, opset);
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
    if let Some((flag, v)) = node.attribute.iter().find_map(|a| {
        let name = a.name.as_deref().unwrap_or("");
        let v = a.i?;
        (FLAGS.contains(&name) && v != 0 && v != 1).then_some((name, v))
    }) {
        return Err(cx.err(format!("ONNX `{op_type}`: attribute `{flag}` must be 0 or 1, found {v}")));
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
        Some(V::R(c)) => return import_if_region(cx, env, used, node, name, opset, c),
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

/// A subgraph imported as a region: its ops (taken out of the function's
/// body), the values it yields, its fixed arguments, and the outer values
/// it reads paired with the arguments that stand for them (regions are
/// isolated: `aoc_ir::ops::control`).
struct Region {
    ops: Vec<OpId>,
    yields: Vec<ValueId>,
    args: Vec<ValueId>,
    captures: Vec<(ValueId, ValueId)>,
}

/// Imports `graph` (attribute `what` of node `name`) as a region whose
/// first arguments are its graph inputs, of types `fixed`. `shape_yields`
/// may rewrite each yielded value before the region closes.
#[allow(clippy::too_many_arguments)]
fn import_region(
    cx: &mut Cx,
    env: &HashMap<String, V>,
    used: &HashSet<&str>,
    graph: &GraphProto,
    fixed: &[TensorType],
    name: &str,
    what: &str,
    opset: i64,
    shape_yields: &dyn Fn(&mut Cx, usize, V) -> R<V>,
) -> R<Region> {
    if graph.input.len() != fixed.len() {
        return Err(cx.err(format!("ONNX node `{name}`: `{what}` takes {} inputs, expected {}", graph.input.len(), fixed.len())));
    }
    let bind = |_: &mut Cx, args: &[ValueId]| Ok(args.iter().map(|&a| V::R(a)).collect());
    let names: Vec<String> = graph.input.iter().map(|vi| vi.name.clone().unwrap_or_default()).collect();
    import_region_with(cx, env, used, graph, fixed, &names, name, what, opset, &bind, shape_yields)
}

/// [`import_region`] where the graph's inputs are what `bind` makes of the
/// region's arguments (of types `fixed`, named `arg_names`): ops it builds
/// belong to the region (`Scan` slices its scan inputs there).
#[allow(clippy::too_many_arguments)]
fn import_region_with(
    cx: &mut Cx,
    env: &HashMap<String, V>,
    used: &HashSet<&str>,
    graph: &GraphProto,
    fixed: &[TensorType],
    arg_names: &[String],
    name: &str,
    what: &str,
    opset: i64,
    bind: &dyn Fn(&mut Cx, &[ValueId]) -> R<Vec<V>>,
    shape_yields: &dyn Fn(&mut Cx, usize, V) -> R<V>,
) -> R<Region> {
    let mut inner_env = env.clone();
    let mut args = vec![];
    for (i, ty) in fixed.iter().enumerate() {
        let key = arg_names.get(i).cloned().unwrap_or_else(|| format!("arg{i}"));
        args.push(cx.func.new_region_arg(&key, ty.clone(), Location::named(key.clone())));
    }
    for init in &graph.initializer {
        let key = init.name.clone().unwrap_or_default();
        let t = Rc::new(tensor_attr(init, &format!("initializer `{key}`"), &Location::named(key.clone()))?);
        inner_env.insert(key, V::C(t));
    }
    let mut inner: HashSet<&str> = used.clone();
    inner.extend(graph.node.iter().flat_map(|n| n.input.iter().map(|s| s.as_str())));
    inner.extend(graph.output.iter().filter_map(|o| o.name.as_deref()));
    let saved = cx.take_materialized();
    let start = cx.func.body.ops.len();
    let loc = cx.loc.clone();
    let hint = cx.hint.clone();
    let op_type = cx.op_type.clone();
    let mut result = (|| -> R<Vec<ValueId>> {
        let bound = bind(cx, &args)?;
        if bound.len() != graph.input.len() {
            return Err(cx.err(format!("ONNX node `{name}`: `{what}` takes {} inputs, expected {}", graph.input.len(), bound.len())));
        }
        for (vi, v) in graph.input.iter().zip(bound) {
            let key = vi.name.clone().unwrap_or_default();
            // An initializer of the same name is the value, as before.
            if !graph.initializer.iter().any(|t| t.name.as_deref() == Some(key.as_str())) {
                inner_env.insert(key, v);
            }
        }
        for (index, n) in graph.node.iter().enumerate() {
            import_node(cx, &mut inner_env, &inner, n, index, opset)?;
        }
        cx.loc = loc.clone();
        cx.hint = hint.clone();
        cx.op_type = op_type.clone();
        let mut yields = vec![];
        for (i, o) in graph.output.iter().enumerate() {
            let key = o.name.as_deref().unwrap_or("");
            let v = inner_env
                .get(key)
                .cloned()
                .ok_or_else(|| cx.err(format!("ONNX node `{name}`: `{what}` output `{key}` is never computed")))?;
            let v = shape_yields(cx, i, v)?;
            yields.push(cx.val(&v)?);
        }
        Ok(yields)
    })();
    cx.loc = loc;
    cx.hint = hint;
    cx.op_type = op_type;
    cx.restore_materialized(saved);
    let ops: Vec<OpId> = cx.func.body.ops.drain(start..).collect();
    let mut yields = std::mem::take(result.as_mut().map_err(|e| e.clone())?);
    // Outer values the region reads become arguments.
    let mut defined: HashSet<ValueId> = args.iter().copied().collect();
    let mut captures: Vec<(ValueId, ValueId)> = vec![];
    let mut capture = |cx: &mut Cx, v: ValueId, defined: &HashSet<ValueId>| -> ValueId {
        if defined.contains(&v) {
            return v;
        }
        if let Some(&(_, a)) = captures.iter().find(|(o, _)| *o == v) {
            return a;
        }
        let ty = cx.func.ty(v).clone();
        let hint = cx.func.name_of(v).to_string();
        let a = cx.func.new_region_arg(&hint, ty, cx.func.values[v].loc.clone());
        captures.push((v, a));
        a
    };
    for &op in &ops {
        let operands = cx.func.ops[op].operands.clone();
        let mapped: Vec<ValueId> = operands.iter().map(|&v| capture(cx, v, &defined)).collect();
        cx.func.ops[op].operands = mapped;
        defined.extend(cx.func.ops[op].results.iter().copied());
    }
    for y in yields.iter_mut() {
        *y = capture(cx, *y, &defined);
    }
    Ok(Region { ops, yields, args, captures })
}

/// The region's block, its arguments being its fixed ones and then one per
/// value of `captures` (an argument it does not read where it captured
/// nothing).
fn region_block(cx: &mut Cx, r: Region, captures: &[ValueId], loc: &Location) -> aoc_ir::module::Block {
    let mut args = r.args;
    for &c in captures {
        let a = match r.captures.iter().find(|(o, _)| *o == c) {
            Some(&(_, a)) => a,
            None => {
                let hint = cx.func.name_of(c).to_string();
                let ty = cx.func.ty(c).clone();
                cx.func.new_region_arg(&hint, ty, loc.clone())
            }
        };
        args.push(a);
    }
    aoc_ir::module::Block { args, ops: r.ops, terminator: r.yields, terminator_loc: loc.clone() }
}

fn graph_attr<'n>(cx: &Cx, node: &'n NodeProto, op: &str, name: &str, key: &str) -> R<&'n GraphProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(key))
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| cx.err(format!("ONNX `{op}` (node `{name}`): attribute `{key}` (a graph) is missing")))
}

/// Binds the node's outputs to the op's results.
fn bind_outputs(cx: &Cx, env: &mut HashMap<String, V>, node: &NodeProto, op: OpId) {
    for (out, &r) in node.output.iter().zip(&cx.func.ops[op].results) {
        if !out.is_empty() {
            env.insert(out.clone(), V::R(r));
        }
    }
}

fn result_names(node: &NodeProto, types: Vec<TensorType>) -> Vec<(String, TensorType)> {
    types
        .into_iter()
        .enumerate()
        .map(|(i, t)| (node.output.get(i).filter(|o| !o.is_empty()).cloned().unwrap_or_else(|| format!("out{i}")), t))
        .collect()
}

/// `If` with a condition computed at run time: `core.if`, the branches as
/// its regions.
#[allow(clippy::too_many_arguments)]
fn import_if_region(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
    cond: ValueId,
) -> R<()> {
    let loc = cx.loc.clone();
    let keep = |_: &mut Cx, _: usize, v: V| Ok(v);
    let then_g = graph_attr(cx, node, "If", name, "then_branch")?;
    let else_g = graph_attr(cx, node, "If", name, "else_branch")?;
    // A branch that does not import for these shapes is often one the
    // model never takes with them (a sample-rate switch): say how to fold it.
    const FOLD_HINT: &str = "if the condition depends on an input that is fixed in practice (a sample rate, a mode flag), `aoc import --input-value NAME=VALUE` makes it a constant and folds the branch away";
    let hint = |mut d: Diagnostic, which: &str| {
        d.message = format!("{} (in the {which} of `If` node `{name}`, whose condition is known only at run time; {FOLD_HINT})", d.message);
        d
    };
    let then = import_region(cx, env, used, then_g, &[], name, "then_branch", opset, &keep).map_err(|d| hint(d, "then_branch"))?;
    let other = import_region(cx, env, used, else_g, &[], name, "else_branch", opset, &keep).map_err(|d| hint(d, "else_branch"))?;
    if then.yields.len() != node.output.len() || other.yields.len() != node.output.len() {
        return Err(cx.err(format!(
            "ONNX `If` (node `{name}`): the branches yield {} and {} values, the node has {} outputs",
            then.yields.len(),
            other.yields.len(),
            node.output.len()
        )));
    }
    let mut types = vec![];
    for (i, (&a, &b)) in then.yields.iter().zip(&other.yields).enumerate() {
        let (ta, tb) = (cx.func.ty(a).clone(), cx.func.ty(b).clone());
        if ta != tb {
            return Err(cx.err(format!(
                "ONNX `If` (node `{name}`): output {i} is {ta} in then_branch and {tb} in else_branch; aoc needs one static type ({FOLD_HINT})"
            )));
        }
        types.push(ta);
    }
    let mut captures: Vec<ValueId> = then.captures.iter().map(|c| c.0).collect();
    for (c, _) in &other.captures {
        if !captures.contains(c) {
            captures.push(*c);
        }
    }
    let then_block = region_block(cx, then, &captures, &loc);
    let else_block = region_block(cx, other, &captures, &loc);
    let mut operands = vec![cond];
    operands.extend(&captures);
    let named = result_names(node, types);
    let op = cx.func.push_region_op(Opcode::If, operands, Attrs::new(), named, vec![then_block, else_block], loc);
    bind_outputs(cx, env, node, op);
    Ok(())
}

/// `Loop`: `core.loop`, the body as its region; an absent trip count is no
/// bound, an absent condition is true. Scan outputs need a trip count known
/// at import time (their first dimension).
fn import_loop(
    cx: &mut Cx,
    env: &mut HashMap<String, V>,
    used: &HashSet<&str>,
    node: &NodeProto,
    name: &str,
    opset: i64,
) -> R<()> {
    let loc = cx.loc.clone();
    let input = |i: usize| -> R<Option<V>> {
        match node.input.get(i).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(k) => env
                .get(k)
                .cloned()
                .map(Some)
                .ok_or_else(|| cx.err(format!("input `{k}` of node `{name}` is not defined before it"))),
        }
    };
    let max_trip = input(0)?;
    let cond = input(1)?;
    let mut init = vec![];
    for i in 2..node.input.len().max(2) {
        init.push(input(i)?.ok_or_else(|| cx.err(format!("ONNX `Loop` (node `{name}`): loop-carried input {} is missing", i - 2)))?);
    }
    let scalar = |s: Scalar| TensorType::new(vec![], s);
    let one = |cx: &mut Cx, v: Option<V>, s: Scalar, default: Tensor, what: &str| -> R<V> {
        let v = v.unwrap_or_else(|| V::konst(default));
        let ty = cx.ty(&v);
        if ty.num_elements() != 1 || ty.elem.storage() != s {
            return Err(cx.err(format!("ONNX `Loop` (node `{name}`): {what} must be one {} element, found {ty}", s.name())));
        }
        cx.reshape(&v, &[])
    };
    let trip = one(cx, max_trip, Scalar::I64, Tensor::from_i64(scalar(Scalar::I64), vec![i64::MAX]), "the trip count M")?;
    let cond = one(cx, cond, Scalar::I1, Tensor::from_i64(scalar(Scalar::I1), vec![1]), "the condition")?;
    let body_g = graph_attr(cx, node, "Loop", name, "body")?;
    let carried_types: Vec<TensorType> = init.iter().map(|v| cx.ty(v)).collect();
    let mut fixed = vec![scalar(Scalar::I64), scalar(Scalar::I1)];
    fixed.extend(carried_types.iter().cloned());
    let n = init.len();
    let check = |cx: &mut Cx, i: usize, v: V| -> R<V> {
        let ty = cx.ty(&v);
        if i == 0 {
            if ty.num_elements() != 1 {
                return Err(cx.err(format!("ONNX `Loop` (node `{name}`): the body's condition output must hold one element, found {ty}")));
            }
            return cx.reshape(&v, &[]);
        }
        if i <= n && ty != carried_types[i - 1] {
            return Err(cx.err(format!(
                "ONNX `Loop` (node `{name}`): loop-carried value {} starts as {} and the body yields {ty}; aoc needs one static type",
                i - 1,
                carried_types[i - 1]
            )));
        }
        Ok(v)
    };
    let body = import_region(cx, env, used, body_g, &fixed, name, "body", opset, &check)?;
    if body.yields.len() < 1 + n || node.output.len() != body.yields.len() - 1 {
        return Err(cx.err(format!(
            "ONNX `Loop` (node `{name}`): the body yields {} values, expected the condition, {n} carried values and one per scan output ({} outputs)",
            body.yields.len(),
            node.output.len()
        )));
    }
    let scans: Vec<TensorType> = body.yields[1 + n..].iter().map(|&y| cx.func.ty(y).clone()).collect();
    let mut types = carried_types.clone();
    if !scans.is_empty() {
        let rows = match &trip {
            V::C(t) if t.get_i64(0) != i64::MAX && t.get_i64(0) >= 0 => t.get_i64(0) as usize,
            _ => {
                return Err(cx.err(format!(
                    "ONNX `Loop` (node `{name}`, opset {opset}): scan outputs need a trip count known at import time (their first dimension; shapes are static)"
                )));
            }
        };
        for s in scans {
            let mut shape = vec![rows];
            shape.extend(&s.shape);
            types.push(TensorType { shape, ..s });
        }
    }
    let captures: Vec<ValueId> = body.captures.iter().map(|c| c.0).collect();
    let block = region_block(cx, body, &captures, &loc);
    let mut operands = vec![cx.val(&trip)?, cx.val(&cond)?];
    for v in &init {
        operands.push(cx.val(v)?);
    }
    operands.extend(&captures);
    let attrs = Attrs::new().with("carried", aoc_ir::attr::Attr::Int(n as i64));
    let attrs = Opcode::Loop.info().complete_attrs(attrs).map_err(|m| cx.err(m))?;
    let named = result_names(node, types);
    let op = cx.func.push_region_op(Opcode::Loop, operands, attrs, named, vec![block], loc);
    bind_outputs(cx, env, node, op);
    Ok(())
}
