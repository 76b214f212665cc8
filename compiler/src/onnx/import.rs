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

use super::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, attribute_type as at, type_proto,
};
use super::tensors::{scalar_of, tensor_from_proto};
use super::{ImportOptions, Imported};
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData, WeightRef};
use aoc_ir::module::{ValueDef, WeightsDecl, fresh_name};
use aoc_ir::tensor::Data;
use aoc_ir::{Diagnostic, Func, Location, Module, Opcode, Tensor, TensorType, ValueId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The oldest default-domain opset the importer accepts. Opsets 11 and 12
/// differ from 13 only in ops whose differences the handlers resolve
/// (attribute vs input axes, Softmax's 2-D coercion), and real exporters
/// still emit them.
pub const MIN_OPSET: i64 = 11;

/// An ONNX value during import.
#[derive(Clone, Debug)]
pub enum V {
    /// A constant known at import time.
    C(Rc<Tensor>),
    /// A value of the function being built.
    R(ValueId),
}

impl V {
    pub fn konst(t: Tensor) -> V {
        V::C(Rc::new(t))
    }
}

/// One node's view: its inputs (absent optional inputs are `None`) and
/// attributes.
pub struct Node<'a> {
    pub proto: &'a NodeProto,
    pub op_type: &'a str,
    pub name: String,
    pub inputs: Vec<Option<V>>,
    pub attrs: HashMap<&'a str, &'a AttributeProto>,
}

impl Node<'_> {
    pub fn input(&self, i: usize) -> Option<&V> {
        self.inputs.get(i).and_then(|v| v.as_ref())
    }
    pub fn n_outputs(&self) -> usize {
        self.proto.output.len()
    }
    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attrs.get(name).copied()
    }
    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }
    pub fn opt_int(&self, name: &str) -> Option<i64> {
        self.attr(name).and_then(|a| a.i)
    }
    pub fn float(&self, name: &str, default: f64) -> f64 {
        self.attr(name)
            .and_then(|a| a.f)
            .map_or(default, |f| f as f64)
    }
    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }
    pub fn floats(&self, name: &str) -> Option<Vec<f64>> {
        self.attr(name)
            .map(|a| a.floats.iter().map(|&f| f as f64).collect())
    }
    pub fn str(&self, name: &str, default: &str) -> String {
        self.attr(name)
            .and_then(|a| a.s.as_ref())
            .map_or(default.to_string(), |s| {
                String::from_utf8_lossy(s).into_owned()
            })
    }
}

/// The import state.
pub struct Cx<'a> {
    pub func: Func,
    pub opts: &'a ImportOptions,
    /// The default domain's opset version.
    pub opset: i64,
    env: HashMap<String, V>,
    weights: Vec<(String, Tensor)>,
    weight_keys: HashSet<String>,
    /// Materialized constants, by tensor identity (the `Rc` is kept so the
    /// address cannot be reused by another tensor).
    materialized: HashMap<usize, (Rc<Tensor>, ValueId)>,
    /// Names of constants (initializers and constant node outputs), by
    /// tensor identity: weight keys and value names come from them.
    const_names: HashMap<usize, (Rc<Tensor>, String)>,
    /// The current node's location and value-name hint.
    pub loc: Location,
    pub hint: String,
    /// The current node's op type, for messages.
    pub op_type: String,
}

pub type R<T> = Result<T, Diagnostic>;

impl<'a> Cx<'a> {
    /// An error at the current node.
    pub fn err(&self, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::error(msg.into(), self.loc.clone())
    }

    /// An error naming the current ONNX op.
    pub fn bad(&self, msg: impl std::fmt::Display) -> Diagnostic {
        self.err(format!("ONNX `{}`: {msg}", self.op_type))
    }

    pub fn ty(&self, v: &V) -> TensorType {
        match v {
            V::C(t) => t.ty.clone(),
            V::R(id) => self.func.ty(*id).clone(),
        }
    }

    pub fn shape(&self, v: &V) -> Vec<usize> {
        self.ty(v).shape
    }

    /// The IR value for `v`, materializing a constant on first use.
    pub fn val(&mut self, v: &V) -> R<ValueId> {
        match v {
            V::R(id) => Ok(*id),
            V::C(t) => {
                let key = Rc::as_ptr(t) as usize;
                if let Some((_, id)) = self.materialized.get(&key) {
                    return Ok(*id);
                }
                let hint = self.const_name(t).unwrap_or_else(|| self.hint.clone());
                let id = self.materialize(t, &hint)?;
                self.materialized.insert(key, (t.clone(), id));
                Ok(id)
            }
        }
    }

    /// The name a constant was given (initializer or node output).
    pub fn const_name(&self, t: &Rc<Tensor>) -> Option<String> {
        self.const_names
            .get(&(Rc::as_ptr(t) as usize))
            .map(|(_, n)| n.clone())
    }

    /// Names a constant, unless it already has a name.
    pub fn name_const(&mut self, t: &Rc<Tensor>, name: &str) {
        self.const_names
            .entry(Rc::as_ptr(t) as usize)
            .or_insert_with(|| (t.clone(), name.to_string()));
    }

    /// Emits a `const` op for `t`: inline when small, else a weight.
    pub fn materialize(&mut self, t: &Tensor, hint: &str) -> R<ValueId> {
        let value = if t.len() <= self.opts.inline_limit {
            match &t.data {
                Data::F(v) => ConstValue::Dense(DenseData::Floats(v.clone())),
                Data::I(v) => ConstValue::Dense(DenseData::Ints(v.clone())),
            }
        } else {
            let base = fresh_name(hint, |_| false);
            let key = fresh_name(&base, |n| self.weight_keys.contains(n));
            self.weight_keys.insert(key.clone());
            self.weights.push((key.clone(), t.clone()));
            ConstValue::Weight(WeightRef {
                file: self.opts.weights_name.clone(),
                key,
            })
        };
        let attrs = Attrs::new().with("value", Attr::Const(value));
        let r = self.func.push_op(
            Opcode::Const,
            &[],
            attrs,
            Some(vec![t.ty.clone()]),
            hint,
            self.loc.clone(),
        )?;
        Ok(r[0])
    }

    /// Builds `opcode` on `operands`; folds it when every operand is constant
    /// (except `quant.dequantize`, which keeps quantized weights visible).
    pub fn op(
        &mut self,
        opcode: Opcode,
        operands: &[V],
        attrs: Attrs,
        declared: Option<Vec<TensorType>>,
    ) -> R<Vec<V>> {
        let all_const = operands.iter().all(|v| matches!(v, V::C(_)));
        if all_const
            && opcode != Opcode::Dequantize
            && let Some(out) = super::fold::try_fold(opcode, operands, &attrs, declared.as_deref())
        {
            return Ok(out.into_iter().map(V::konst).collect());
        }
        let ids = operands
            .iter()
            .map(|v| self.val(v))
            .collect::<R<Vec<_>>>()?;
        let hint = self.hint.clone();
        let out = self
            .func
            .push_op(opcode, &ids, attrs, declared, &hint, self.loc.clone())?;
        Ok(out.into_iter().map(V::R).collect())
    }

    /// [`Cx::op`] for single-result ops.
    pub fn op1(&mut self, opcode: Opcode, operands: &[V], attrs: Attrs) -> R<V> {
        Ok(self.op(opcode, operands, attrs, None)?.remove(0))
    }

    pub fn reshape(&mut self, v: &V, shape: &[usize]) -> R<V> {
        if self.shape(v) == shape {
            return Ok(v.clone());
        }
        let s = shape.iter().map(|&d| d as i64).collect();
        self.op1(
            Opcode::Reshape,
            std::slice::from_ref(v),
            Attrs::new().with("shape", Attr::Ints(s)),
        )
    }

    /// Input `i`, or an error saying it is required.
    pub fn need<'n>(&self, n: &'n Node, i: usize) -> R<&'n V> {
        n.input(i)
            .ok_or_else(|| self.bad(format!("input {i} is required")))
    }

    /// Input `i` as a constant tensor, or an error naming `what`.
    pub fn const_input<'n>(&self, n: &'n Node, i: usize, what: &str) -> R<&'n Tensor> {
        match n.input(i) {
            Some(V::C(t)) => Ok(t),
            Some(V::R(_)) => Err(self.bad(format!(
                "`{what}` must be a constant (computed at import time)"
            ))),
            None => Err(self.bad(format!("`{what}` is required"))),
        }
    }

    /// Optional constant input `i` as integers.
    pub fn const_ints(&self, n: &Node, i: usize, what: &str) -> R<Option<Vec<i64>>> {
        match n.input(i) {
            None => Ok(None),
            Some(_) => Ok(Some(self.const_input(n, i, what)?.to_i64())),
        }
    }
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

/// Converts one ONNX attribute tensor or initializer, naming it in errors.
pub fn tensor_attr(t: &super::proto::TensorProto, what: &str, loc: &Location) -> R<Tensor> {
    tensor_from_proto(t, what).map_err(|m| Diagnostic::error(m, loc.clone()))
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

    let mut cx = Cx {
        func: Func::new("main"),
        opts,
        opset,
        env: HashMap::new(),
        weights: vec![],
        weight_keys: HashSet::new(),
        materialized: HashMap::new(),
        const_names: HashMap::new(),
        loc: top.clone(),
        hint: String::new(),
        op_type: String::new(),
    };

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
        cx.env.insert(name, V::C(t));
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
        if cx.env.contains_key(&name) {
            continue;
        }
        let ty = input_type(vi, &name, opts)?;
        let id = cx.func.add_param(&name, ty, Location::named(name.clone()));
        cx.env.insert(name, V::R(id));
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
                let v = cx.env.get(i).cloned().ok_or_else(|| {
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
        let outs = handler.call(&mut cx, &n)?;
        for (i, out_name) in node.output.iter().enumerate() {
            if out_name.is_empty() {
                continue;
            }
            match outs.get(i) {
                Some(v) => {
                    if let V::C(t) = v {
                        cx.name_const(t, out_name);
                    }
                    cx.env.insert(out_name.clone(), v.clone());
                }
                None if used.contains(out_name.as_str()) => {
                    return Err(cx.err(format!(
                        "ONNX `{op_type}`: output {i} (`{out_name}`) is unsupported, but the graph uses it"
                    )));
                }
                None => {}
            }
        }
    }

    // Results: each named exactly like its graph output.
    cx.loc = Location::default();
    let mut results: Vec<ValueId> = vec![];
    for out in &graph.output {
        let name = out.name.clone().unwrap_or_default();
        cx.loc = Location::named(name.clone());
        let v = cx
            .env
            .get(&name)
            .cloned()
            .ok_or_else(|| cx.err(format!("graph output `{name}` is never computed")))?;
        let want = fresh_name(&name, |_| false);
        // Free the wanted name if another value holds it.
        if let Some(holder) = cx.func.value_by_name(&want) {
            let is_ok_holder = matches!(v, V::R(id) if id == holder)
                && !matches!(cx.func.values[holder].def, ValueDef::Param(_))
                && !results.contains(&holder);
            if is_ok_holder {
                results.push(holder);
                continue;
            }
            if !matches!(cx.func.values[holder].def, ValueDef::Param(_))
                && !results.contains(&holder)
            {
                let fresh = cx.func.fresh_name(&format!("{want}_0"));
                cx.func.values[holder].name = fresh;
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
                    cx.func.values[id].name = n;
                    id
                }
            }
        };
        results.push(id);
    }
    cx.func.set_return(results);

    let mut module = Module::default();
    if !cx.weights.is_empty() {
        module.weights.push(WeightsDecl {
            name: opts.weights_name.clone(),
            path: opts.weights_path.clone(),
            loc: Location::default(),
        });
    }
    module.funcs.push(cx.func);
    Ok(Imported {
        module,
        weights: cx.weights,
    })
}
