//! The e-class analysis: every class knows its tensor type, the value of
//! small constants, and where it came from.
//!
//! Types come from the op table's `infer` hooks (`aoc_ir::verify::infer_op`);
//! values from its `eval` hooks (`aoc_ir::interp::eval_op`), so constant
//! folding covers every op the table has, new ones included.
//!
//! Invariants:
//! - `ty` is `None` only for classes made by an ill-typed node (a rule whose
//!   result does not type-check); extraction never picks such nodes.
//! - `value` is `Some` only for tensors of at most `fold_limit` elements, so
//!   large weights are never hashed or folded op by op. Rules that fold
//!   weights (BN folding, Winograd) read large constants with
//!   [`const_tensor`] and add their results with [`add_computed_const`]
//!   (in-memory payloads, memoized per rule and inputs), or with
//!   [`add_lazy_const`] when the values are costly and extraction may not
//!   keep them (computed on first use).
//! - Weights-file constants have values only when the pass loaded them
//!   (`ConstEntry::loaded`, filled through the pass's weight source when
//!   the function is converted).
//! - A class with a value holds a `Node::Const` (added by `modify`), which is
//!   how constant folding becomes visible to extraction.
//! - `origin` is the (creation order, location, value name) of the first
//!   original op of the class; merging keeps the earliest.

use super::node::{ConstId, Node};
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData};
use aoc_ir::interp::{NoWeights, eval_op, eval_op_with_epilogue};
use aoc_ir::tensor::Data;
use aoc_ir::ops::kind::{OpKind, Pointwise};
use aoc_ir::{Location, Opcode, Tensor, TensorType, Trait};
use egg::{DidMerge, EGraph, Id};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Default bound on the number of elements of a constant the analysis holds
/// and folds: large enough for shapes, scales and biases, small enough that
/// folding never copies a weight tensor.
pub const DEFAULT_FOLD_LIMIT: usize = 4096;

/// One entry of the constant side table.
#[derive(Clone, Debug)]
pub struct ConstEntry {
    pub ty: TensorType,
    /// The payload; an empty placeholder when `lazy` is set (read entries
    /// through [`TensorAnalysis::const_tensor`] and
    /// [`TensorAnalysis::payload`], which know both).
    pub value: ConstValue,
    /// The values of a `@file["key"]` payload, loaded through the pass's
    /// weight source when the pass folds weights (`None` otherwise, or when
    /// the source could not provide them).
    pub loaded: Option<Arc<Tensor>>,
    /// A computed constant whose values are computed on first use
    /// ([`add_lazy_const`]).
    pub lazy: Option<Arc<LazyTensor>>,
}

/// A tensor computed at most once, on first use: rules offering
/// alternatives with expensive constants (Winograd's transformed weights,
/// one per tile) add them lazily, so only the forms extraction keeps, and
/// small ones the analysis folds, are ever computed. Types depend only on
/// the entry's `ty`, so the cost model never forces a computation.
pub struct LazyTensor {
    ty: TensorType,
    cell: OnceLock<Option<Arc<Tensor>>>,
    compute: Box<dyn Fn() -> Option<Tensor> + Send + Sync>,
}

impl LazyTensor {
    /// The values; `None` when the computation failed or produced a tensor
    /// of another type.
    pub fn get(&self) -> Option<Arc<Tensor>> {
        self.cell
            .get_or_init(|| {
                let t = (self.compute)()?;
                (t.ty == self.ty && t.len() == self.ty.num_elements()).then(|| Arc::new(t))
            })
            .clone()
    }
}

impl std::fmt::Debug for LazyTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.cell.get() {
            None => "pending",
            Some(Some(_)) => "computed",
            Some(None) => "failed",
        };
        write!(f, "LazyTensor({}, {state})", self.ty)
    }
}

/// Where a class came from in the original function.
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    pub order: u32,
    pub loc: Location,
    pub name: String,
}

#[derive(Clone, Debug)]
pub struct ClassData {
    pub ty: Option<TensorType>,
    pub value: Option<Arc<Tensor>>,
    pub origin: Option<Origin>,
    /// Set when two classes of different types were merged (a rule that does
    /// not preserve types); the pass reports it.
    pub conflict: Option<(TensorType, TensorType)>,
    /// How many times the original function uses this value (as an operand
    /// or a result); 0 for classes rules created. Fusion rules absorb a
    /// producer only when it has exactly one use, so extraction never
    /// duplicates a convolution into two consumers.
    pub uses: u32,
}

/// The analysis state: parameter types and the constant side table.
#[derive(Clone, Debug)]
pub struct TensorAnalysis {
    pub params: Vec<TensorType>,
    pub consts: Vec<ConstEntry>,
    pub fold_limit: usize,
    /// Constants computed by rules (folded weights), by a key naming the
    /// rule and its inputs, so a rule that fires again on the same match in
    /// a later iteration adds no new node.
    pub computed: HashMap<String, ConstId>,
}

impl TensorAnalysis {
    pub fn new(params: Vec<TensorType>) -> TensorAnalysis {
        TensorAnalysis {
            params,
            consts: vec![],
            fold_limit: DEFAULT_FOLD_LIMIT,
            computed: HashMap::new(),
        }
    }

    /// Adds a constant to the side table.
    pub fn add_const(&mut self, ty: TensorType, value: ConstValue) -> ConstId {
        self.consts.push(ConstEntry {
            ty,
            value,
            loaded: None,
            lazy: None,
        });
        ConstId((self.consts.len() - 1) as u32)
    }

    /// The payload a constant is extracted with: its own, or the computed
    /// values of a lazy entry (computing them now). `None` when a lazy
    /// computation fails.
    pub fn payload(&self, c: ConstId) -> Option<ConstValue> {
        let e = self.consts.get(c.0 as usize)?;
        match &e.lazy {
            Some(l) => l.get().map(ConstValue::Tensor),
            None => Some(e.value.clone()),
        }
    }

    /// The full value of a side-table constant, whatever its size: inline
    /// payloads are evaluated, in-memory ones shared, weights-file ones
    /// available only when loaded.
    pub fn const_tensor(&self, c: ConstId) -> Option<Arc<Tensor>> {
        let e = self.consts.get(c.0 as usize)?;
        if let Some(l) = &e.lazy {
            return l.get();
        }
        match &e.value {
            ConstValue::Tensor(t) => Some(t.clone()),
            ConstValue::Weight(_) => e.loaded.clone(),
            ConstValue::Dense(_) => {
                let attrs = Attrs::new().with("value", Attr::Const(e.value.clone()));
                eval_op(
                    Opcode::Const,
                    &[],
                    &attrs,
                    std::slice::from_ref(&e.ty),
                    &NoWeights,
                )
                .ok()?
                .pop()
                .map(Arc::new)
            }
        }
    }

    /// The value of a side-table constant, when it is small enough to fold.
    fn const_value(&self, c: ConstId) -> Option<Arc<Tensor>> {
        let e = &self.consts[c.0 as usize];
        if e.ty.num_elements() > self.fold_limit {
            return None;
        }
        self.const_tensor(c)
    }
}

/// The full value of class `id` when it is a known constant of any size
/// (large folded weights and loaded weights included), for rules that fold
/// weights at compile time.
pub fn const_tensor(egraph: &Graph, id: Id) -> Option<Arc<Tensor>> {
    let class = &egraph[id];
    if let Some(v) = &class.data.value {
        return Some(v.clone());
    }
    class.nodes.iter().find_map(|n| match n {
        Node::Const(c) => egraph.analysis.const_tensor(*c),
        _ => None,
    })
}

/// A constant node holding the result of `compute`, memoized under `key`
/// (which must name the rule and identify its inputs, e.g. by their
/// `ConstId`s or canonical class ids). Returns `None` when `compute` fails
/// or returns a tensor whose type is not `ty`.
pub fn add_computed_const(
    egraph: &mut Graph,
    key: String,
    ty: &TensorType,
    compute: impl FnOnce() -> Option<Tensor>,
) -> Option<Id> {
    let c = match egraph.analysis.computed.get(&key) {
        Some(c) => *c,
        None => {
            let t = compute()?;
            if &t.ty != ty || t.len() != ty.num_elements() {
                return None;
            }
            let c = egraph
                .analysis
                .add_const(ty.clone(), ConstValue::Tensor(Arc::new(t)));
            egraph.analysis.computed.insert(key, c);
            c
        }
    };
    Some(egraph.add(Node::Const(c)))
}

/// As [`add_computed_const`], but `compute` runs only when the constant's
/// values are first needed (extraction chose it, a rule reads it, or it is
/// small enough for the analysis to fold). A computation that fails or
/// returns a tensor whose type is not `ty` then makes extraction fail, so
/// callers check what they can (shapes, element types) before adding.
pub fn add_lazy_const(
    egraph: &mut Graph,
    key: String,
    ty: &TensorType,
    compute: impl Fn() -> Option<Tensor> + Send + Sync + 'static,
) -> Id {
    let c = match egraph.analysis.computed.get(&key) {
        Some(c) => *c,
        None => {
            let lazy = LazyTensor {
                ty: ty.clone(),
                cell: OnceLock::new(),
                compute: Box::new(compute),
            };
            let c = egraph
                .analysis
                .add_const(ty.clone(), ConstValue::Dense(DenseData::Floats(vec![])));
            egraph.analysis.consts[c.0 as usize].lazy = Some(Arc::new(lazy));
            egraph.analysis.computed.insert(key, c);
            c
        }
    };
    egraph.add(Node::Const(c))
}

pub type Graph = EGraph<Node, TensorAnalysis>;

/// A tensor's values as an inline payload (for new constants).
pub fn dense_of(t: &Tensor) -> ConstValue {
    ConstValue::Dense(match &t.data {
        Data::F(v) => DenseData::Floats(v.clone()),
        Data::I(v) => DenseData::Ints(v.clone()),
    })
}

/// Infers the type of an op node from its children's classes.
pub fn infer_node(egraph: &Graph, node: &Node) -> Option<TensorType> {
    match node {
        Node::Param(i) => egraph.analysis.params.get(*i as usize).cloned(),
        Node::Const(c) => egraph
            .analysis
            .consts
            .get(c.0 as usize)
            .map(|e| e.ty.clone()),
        Node::Op(o) => {
            let attrs = o.attrs.as_ref()?;
            let types: Option<Vec<TensorType>> = o
                .children
                .iter()
                .map(|c| egraph[*c].data.ty.clone())
                .collect();
            let declared = attrs.declared.as_ref().map(|d| vec![d.ty.clone()]);
            let mut out =
                aoc_ir::verify::infer_op_with_epilogue(
                    o.opcode,
                    &types?,
                    &attrs.to_attrs(),
                    declared.as_deref(),
                    &attrs.steps(),
                )
                .ok()?;
            if out.len() == 1 { out.pop() } else { None }
        }
    }
}

impl egg::Analysis<Node> for TensorAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut Graph, enode: &Node, _id: Id) -> ClassData {
        let ty = infer_node(egraph, enode);
        let value = match (enode, &ty) {
            (Node::Const(c), Some(_)) => egraph.analysis.const_value(*c),
            (Node::Op(o), Some(t)) if t.num_elements() <= egraph.analysis.fold_limit => {
                fold(egraph, o, t)
            }
            _ => None,
        };
        ClassData {
            ty,
            value,
            origin: None,
            conflict: None,
            uses: 0,
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        let mut changed_a = false;
        match (&a.ty, &b.ty) {
            (None, Some(_)) => {
                a.ty = b.ty.clone();
                changed_a = true;
            }
            (Some(x), Some(y)) if x != y && a.conflict.is_none() => {
                a.conflict = Some((x.clone(), y.clone()));
                changed_a = true;
            }
            _ => {}
        }
        if a.conflict.is_none() && b.conflict.is_some() {
            a.conflict = b.conflict.clone();
            changed_a = true;
        }
        if a.value.is_none() && b.value.is_some() {
            a.value = b.value.clone();
            changed_a = true;
        }
        if b.uses > a.uses {
            a.uses = b.uses;
            changed_a = true;
        }
        let b_earlier = match (&a.origin, &b.origin) {
            (None, Some(_)) => true,
            (Some(x), Some(y)) => y.order < x.order,
            _ => false,
        };
        if b_earlier {
            a.origin = b.origin.clone();
            changed_a = true;
        }
        // b differs from the merged result unless it already had everything.
        let changed_b = b.ty.is_none() && a.ty.is_some() || b.value.is_none() && a.value.is_some();
        DidMerge(changed_a, changed_b)
    }

    /// Constant folding: a class whose value is known gets a constant node.
    fn modify(egraph: &mut Graph, id: Id) {
        let data = &egraph[id].data;
        let (Some(value), Some(ty)) = (data.value.clone(), data.ty.clone()) else {
            return;
        };
        if egraph[id].nodes.iter().any(|n| matches!(n, Node::Const(_))) {
            return;
        }
        let c = egraph.analysis.add_const(ty, dense_of(&value));
        let cid = egraph.add(Node::Const(c));
        egraph.union(id, cid);
    }
}

/// Evaluates an op whose operands are all known constants.
fn fold(egraph: &Graph, o: &super::node::OpNode, ty: &TensorType) -> Option<Arc<Tensor>> {
    let attrs = o.attrs.as_ref()?;
    if !o.opcode.info().has_trait(Trait::Pure) {
        return None;
    }
    // A dequantized constant stays a `quant.dequantize` of the integers: it
    // is the pattern the `qdq` rules turn into integer ops (a conv's int8
    // weight), and extraction would otherwise prefer the folded float copy
    // before `qdq` runs. The lowering still evaluates it at compile time
    // where a float op consumes it.
    if let OpKind::Pointwise(Pointwise::Dequantize) = o.opcode.kind() {
        return None;
    }
    let inputs: Vec<Arc<Tensor>> = o
        .children
        .iter()
        .map(|c| egraph[*c].data.value.clone())
        .collect::<Option<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().map(|t| t.as_ref()).collect();
    let mut out = eval_op_with_epilogue(
        o.opcode,
        &refs,
        &attrs.to_attrs(),
        std::slice::from_ref(ty),
        &NoWeights,
        &attrs.steps(),
    )
    .ok()?;
    if out.len() == 1 {
        out.pop().map(Arc::new)
    } else {
        None
    }
}
