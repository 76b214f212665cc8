//! The importer's state and what handlers see: [`Cx`] (the function being
//! built, the constants seen, the weights collected, the current node's
//! location) and [`Node`] (one ONNX node's inputs and attributes).
//!
//! Each ONNX value is either a known constant (`V::C`, kept as a tensor
//! until an op that cannot be folded needs it, then materialized as a
//! `const`) or an IR value (`V::R`). Every op the handlers build goes
//! through [`Cx::op`], which folds it when all its operands are constant;
//! so Shape/Gather/Concat chains collapse to constants without a separate
//! pass.
//!
//! Invariants: every op gets the location of the current node; every error
//! is a diagnostic at that location (never a panic).

use super::ImportOptions;
use super::proto::{AttributeProto, NodeProto};
use super::tensors::tensor_from_proto;
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData, WeightRef};
use aoc_ir::module::fresh_name;
use aoc_ir::tensor::Data;
use aoc_ir::{Diagnostic, Func, Location, Opcode, Tensor, TensorType, ValueId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

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
    /// Weights collected so far: key -> tensor, in first-use order.
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
    /// The state before the first node: an empty `func @main`.
    pub fn new(opts: &'a ImportOptions, opset: i64) -> Cx<'a> {
        Cx {
            func: Func::new("main"),
            opts,
            opset,
            weights: vec![],
            weight_keys: HashSet::new(),
            materialized: HashMap::new(),
            const_names: HashMap::new(),
            loc: Location::default(),
            hint: String::new(),
            op_type: String::new(),
        }
    }

    /// The function built and the weights it refers to (key -> tensor, in
    /// first-use order).
    pub fn finish(self) -> (Func, Vec<(String, Tensor)>) {
        (self.func, self.weights)
    }

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

    /// Forgets the constants materialized so far and returns them, for a
    /// region: a constant it needs is materialized inside it (its regions
    /// are isolated), and nothing it defines is reused outside
    /// ([`Cx::restore_materialized`] after it).
    pub fn take_materialized(&mut self) -> HashMap<usize, (Rc<Tensor>, ValueId)> {
        std::mem::take(&mut self.materialized)
    }

    pub fn restore_materialized(&mut self, saved: HashMap<usize, (Rc<Tensor>, ValueId)>) {
        self.materialized = saved;
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
    /// (except `quant.dequantize` of a tensor, which keeps quantized weights
    /// visible; a dequantized scalar is arithmetic, such as a shape
    /// computation that ONNX Runtime's quantizer wrapped in Q/DQ, and a
    /// `Reshape` after it needs the value).
    pub fn op(
        &mut self,
        opcode: Opcode,
        operands: &[V],
        attrs: Attrs,
        declared: Option<Vec<TensorType>>,
    ) -> R<Vec<V>> {
        let constants: Option<Vec<&Tensor>> = operands
            .iter()
            .map(|v| match v {
                V::C(t) => Some(&**t),
                V::R(_) => None,
            })
            .collect();
        if let Some(tensors) = constants
            && (opcode != Opcode::Dequantize || tensors.iter().all(|t| t.ty.rank() == 0))
            && let Some(out) = super::fold::try_fold(opcode, &tensors, &attrs, declared.as_deref())
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

    /// `opcode` on one operand, without attributes.
    pub fn un(&mut self, opcode: Opcode, x: &V) -> R<V> {
        self.op1(opcode, std::slice::from_ref(x), Attrs::new())
    }

    /// `opcode` on two operands, without attributes.
    pub fn bin(&mut self, opcode: Opcode, a: &V, b: &V) -> R<V> {
        self.op1(opcode, &[a.clone(), b.clone()], Attrs::new())
    }

    /// `where(cond, a, b)`.
    pub fn select(&mut self, cond: &V, a: &V, b: &V) -> R<V> {
        self.op1(Opcode::Where, &[cond.clone(), a.clone(), b.clone()], Attrs::new())
    }

    pub fn transpose(&mut self, v: &V, perm: &[usize]) -> R<V> {
        let p = perm.iter().map(|&d| d as i64).collect();
        self.op1(Opcode::Transpose, std::slice::from_ref(v), Attrs::new().with("perm", Attr::Ints(p)))
    }

    /// `reduce(x)` over `axes`, kept as size-1 dimensions.
    pub fn reduce_keep(&mut self, opcode: Opcode, x: &V, axes: &[usize]) -> R<V> {
        let attrs = Attrs::new()
            .with("axes", Attr::Ints(axes.iter().map(|&a| a as i64).collect()))
            .with("keepdims", Attr::Bool(true));
        self.op1(opcode, std::slice::from_ref(x), attrs)
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

/// Converts one ONNX attribute tensor or initializer, naming it in errors.
pub fn tensor_attr(t: &super::proto::TensorProto, what: &str, loc: &Location) -> R<Tensor> {
    tensor_from_proto(t, what).map_err(|m| Diagnostic::error(m, loc.clone()))
}
