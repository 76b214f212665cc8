//! Conversion between a function and an e-graph, and extraction back.
//!
//! Into the e-graph: every parameter, constant and op becomes a node; values
//! used several times are one class, so shared subgraphs stay shared; the
//! function's results are the roots (several results, several roots). Each
//! class remembers the location and name of the first op that made it.
//!
//! Back: a bottom-up fixpoint picks the cheapest node per class under a
//! `CostModel` (DAG cost: the own costs of the distinct classes a node
//! reaches, `choose`), skipping nodes whose type does not check; a
//! depth-first walk from the roots rebuilds the function in topological
//! order. New ops take the location of their class,
//! or of the op that uses them when their class is new.
//!
//! Invariants: the result has the same parameters, result types and name;
//! it has no cycles (checked while rebuilding); every op is built through
//! `Func::push_op`, so its attributes and types are checked again.

use super::analysis::{Graph, Origin, TensorAnalysis, infer_node};
use super::cost::{CostModel, CostNode};
use super::node::{AttrVal, ConstId, Node, OpAttrs};
use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::entity::EntityId;
use aoc_ir::interp::WeightSource;
use aoc_ir::{Func, Location, Opcode, TensorType, Trait, ValueId};
use egg::Id;
use std::collections::HashMap;
use std::sync::Arc;

/// A function's e-graph and the classes of its results.
pub struct FuncGraph {
    pub egraph: Graph,
    pub roots: Vec<Id>,
    /// Weights that could not be loaded (so rules cannot fold them).
    pub notes: Vec<String>,
}

/// Builds the e-graph of `func`. Errors (a reason to skip the function)
/// for what the language cannot hold yet: ops with several results or with
/// regions.
pub fn func_to_egraph(func: &Func, fold_limit: usize) -> Result<FuncGraph, String> {
    func_to_egraph_with(func, fold_limit, None)
}

/// As [`func_to_egraph`]; with `weights`, every `@file["key"]` constant's
/// values are loaded into the side table (`ConstEntry::loaded`) before its
/// node is added, so rules can fold weights and small weights fold like
/// inline constants. A weight that cannot be loaded is noted, not an error.
pub fn func_to_egraph_with(
    func: &Func,
    fold_limit: usize,
    weights: Option<&dyn WeightSource>,
) -> Result<FuncGraph, String> {
    func_to_egraph_selected(func, fold_limit, weights, None)
}

/// As [`func_to_egraph_with`], loading only the weights-file constants whose
/// result value is marked in `wanted` (indexed by `ValueId`; `None` loads
/// them all). Passes pass the constants their rules can consume (see
/// [`mark_constant_leaves`]), so a pass with nothing to fold loads nothing:
/// decoding a weight is the dominant cost of a folding pass.
pub fn func_to_egraph_selected(
    func: &Func,
    fold_limit: usize,
    weights: Option<&dyn WeightSource>,
    wanted: Option<&[bool]>,
) -> Result<FuncGraph, String> {
    let mut notes = Vec::new();
    let params: Vec<TensorType> = func.params().iter().map(|p| func.ty(*p).clone()).collect();
    let mut analysis = TensorAnalysis::new(params);
    analysis.fold_limit = fold_limit;
    let mut egraph = Graph::new(analysis);
    let mut ids: Vec<Option<Id>> = vec![None; func.values.len()];
    let mut order = 0u32;
    let mut mark = |egraph: &mut Graph, id: Id, loc: &Location, name: &str| {
        let data = &mut egraph[id].data;
        if data.origin.is_none() {
            data.origin = Some(Origin {
                order,
                loc: loc.clone(),
                name: name.to_string(),
            });
        }
        order += 1;
    };
    for (i, &p) in func.params().iter().enumerate() {
        let id = egraph.add(Node::Param(i as u32));
        mark(&mut egraph, id, &func.values[p].loc, func.name_of(p));
        ids[p.index()] = Some(id);
    }
    // Identical small constants and identical weight references share a
    // table entry; large inline payloads are never hashed.
    let mut const_keys: HashMap<(AttrVal, String), ConstId> = HashMap::new();
    for &op_id in &func.body.ops {
        let op = &func.ops[op_id];
        let name = op.opcode.name();
        if op.results.len() != 1 {
            return Err(format!(
                "{name} has {} results; the e-graph holds single-result ops only",
                op.results.len()
            ));
        }
        // An epilogue region is held as its decoded steps; no other op
        // takes a region yet.
        let steps = if op.opcode.info().has_trait(Trait::Epilogue) {
            aoc_ir::ops::fused::epilogue(func, op).map_err(|m| format!("{name}: {m}"))?
        } else if !op.regions.is_empty() {
            return Err(format!(
                "{name} has regions, which the e-graph does not hold yet"
            ));
        } else {
            vec![]
        };
        let result = op.results[0];
        let ty = func.ty(result).clone();
        let node = if op.opcode == Opcode::Const {
            let Some(Attr::Const(value)) = op.attrs.get("value") else {
                return Err("const without a `value` payload".to_string());
            };
            let small = match value {
                ConstValue::Weight(_) => true,
                ConstValue::Dense(d) => d.len() <= 64,
                ConstValue::Tensor(t) => t.len() <= 64,
            };
            let c = if small {
                let key = (
                    AttrVal::from_attr(&Attr::Const(value.clone())),
                    ty.to_string(),
                );
                *const_keys
                    .entry(key)
                    .or_insert_with(|| egraph.analysis.add_const(ty.clone(), value.clone()))
            } else {
                egraph.analysis.add_const(ty.clone(), value.clone())
            };
            let want = wanted.is_none_or(|m| m.get(result.index()).copied().unwrap_or(false));
            if let (ConstValue::Weight(w), Some(source), true) = (value, weights, want) {
                let entry = &mut egraph.analysis.consts[c.0 as usize];
                if entry.loaded.is_none() {
                    match source.load(&w.file, &w.key, &ty) {
                        Ok(t) => entry.loaded = Some(Arc::new(t)),
                        Err(m) => notes.push(format!("cannot fold {w}: {m}")),
                    }
                }
            }
            Node::Const(c)
        } else {
            let declared = op
                .opcode
                .info()
                .has_trait(Trait::DeclaredResult)
                .then(|| ty.clone());
            let attrs = OpAttrs::new(op.opcode, op.attrs.clone(), declared)?.with_epilogue(&steps);
            let children = op
                .operands
                .iter()
                .map(|v| {
                    ids[v.index()]
                        .ok_or_else(|| format!("{name}: operand used before its definition"))
                })
                .collect::<Result<Vec<Id>, String>>()?;
            Node::op(op.opcode, attrs, children)
        };
        let id = egraph.add(node);
        mark(&mut egraph, id, &op.loc, func.name_of(result));
        ids[result.index()] = Some(id);
    }
    let roots = func
        .results()
        .iter()
        .map(|v| {
            ids[v.index()].ok_or_else(|| format!("result %{} is not defined", func.name_of(*v)))
        })
        .collect::<Result<Vec<Id>, String>>()?;
    egraph.rebuild();
    // Original use counts, for fusion rules (see `ClassData::uses`).
    let mut uses = vec![0u32; func.values.len()];
    for &op_id in &func.body.ops {
        for v in &func.ops[op_id].operands {
            uses[v.index()] += 1;
        }
    }
    for v in func.results() {
        uses[v.index()] += 1;
    }
    for (i, id) in ids.iter().enumerate() {
        if let Some(id) = id {
            let id = egraph.find(*id);
            egraph[id].data.uses += uses[i];
        }
    }
    Ok(FuncGraph {
        egraph,
        roots,
        notes,
    })
}

/// Marks in `wanted` (indexed by `ValueId`) the constants `value` is
/// computed from, when it is computed from constants only (a `const`, or a
/// pure op whose operands all are, e.g. a reshaped weight). A value that
/// depends on a parameter marks nothing (and returns false): rules fold only
/// constant operands, and walking an activation's producers would load the
/// network.
pub fn mark_constant_leaves(func: &Func, value: ValueId, wanted: &mut [bool]) -> bool {
    // Collect first, mark only if the whole expression is constant.
    let mut leaves = Vec::new();
    let mut stack = vec![value];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        let Some(op) = func.def_op(v) else {
            return false; // a parameter (or a block argument)
        };
        let op = &func.ops[op];
        if op.opcode == Opcode::Const {
            leaves.push(v);
        } else if op.opcode.info().has_trait(Trait::Pure) && op.regions.is_empty() {
            stack.extend(op.operands.iter().copied());
        } else {
            return false;
        }
    }
    for v in leaves {
        if let Some(w) = wanted.get_mut(v.index()) {
            *w = true;
        }
    }
    true
}

/// The cost of one node on its own, or `None` when it must not be chosen
/// (its type does not check or differs from its class's).
fn own_cost(
    egraph: &Graph,
    class_ty: &TensorType,
    node: &Node,
    model: &dyn CostModel,
) -> Option<f64> {
    let ty = infer_node(egraph, node)?;
    if &ty != class_ty {
        return None;
    }
    let c = match node {
        Node::Param(_) => model.cost(&CostNode::Param(&ty)),
        Node::Const(_) => model.cost(&CostNode::Const(&ty)),
        Node::Op(o) => {
            let types: Vec<&TensorType> = o
                .children
                .iter()
                .map(|c| egraph[*c].data.ty.as_ref())
                .collect::<Option<_>>()?;
            let attrs = o.attrs.as_ref()?;
            model.cost(&CostNode::Op {
                opcode: o.opcode,
                attrs,
                operands: &types,
                result: &ty,
            })
        }
    };
    (c.is_finite() && c > 0.0).then_some(c)
}

/// The node of each class extraction takes: class id -> (cost, node), by
/// DAG cost under `model` (see [`super::choose`]).
pub fn choose(egraph: &Graph, model: &dyn CostModel) -> HashMap<Id, (f64, Node)> {
    super::choose::choose(egraph, |class, n| {
        let ty = egraph[class].data.ty.as_ref()?;
        own_cost(egraph, ty, n, model)
    })
}

/// Extracts the cheapest function from `fg`, shaped like `template` (same
/// name, parameters and result types).
pub fn extract(fg: &FuncGraph, model: &dyn CostModel, template: &Func) -> Result<Func, String> {
    let egraph = &fg.egraph;
    let best = choose(egraph, model);
    let mut func = Func::new(template.name.clone());
    func.loc = template.loc.clone();
    let params: Vec<ValueId> = template
        .params()
        .iter()
        .map(|&p| {
            let v = &template.values[p];
            func.add_param(&v.name, v.ty.clone(), v.loc.clone())
        })
        .collect();
    let mut memo: HashMap<Id, ValueId> = HashMap::new();
    let mut visiting: HashMap<Id, ()> = HashMap::new();
    let mut results = Vec::new();
    for &root in &fg.roots {
        let root = egraph.find(root);
        // (class, location inherited from the user, children done?)
        let mut stack: Vec<(Id, Location, bool)> =
            vec![(root, template.body.terminator_loc.clone(), false)];
        while let Some((id, inherited, expanded)) = stack.pop() {
            if memo.contains_key(&id) {
                continue;
            }
            let (_, node) = best
                .get(&id)
                .ok_or_else(|| format!("no well-typed form for class {id}"))?;
            let origin = egraph[id].data.origin.as_ref();
            let loc = origin.map_or(inherited.clone(), |o| {
                if o.loc == Location::default() {
                    inherited.clone()
                } else {
                    o.loc.clone()
                }
            });
            if !expanded {
                if visiting.insert(id, ()).is_some() {
                    return Err("extraction produced a cycle".to_string());
                }
                stack.push((id, inherited, true));
                for c in egg::Language::children(node).iter().rev() {
                    let c = egraph.find(*c);
                    if visiting.contains_key(&c) && !memo.contains_key(&c) {
                        return Err("extraction produced a cycle".to_string());
                    }
                    stack.push((c, loc.clone(), false));
                }
                continue;
            }
            visiting.remove(&id);
            let ty = egraph[id].data.ty.clone().ok_or("untyped class")?;
            let hint = origin.map_or_else(|| default_hint(node), |o| o.name.clone());
            let value = match node {
                Node::Param(i) => *params.get(*i as usize).ok_or("bad parameter index")?,
                Node::Const(c) => {
                    let entry = &egraph.analysis.consts[c.0 as usize];
                    // Lazy constants are computed here, for the chosen forms only.
                    let payload = egraph
                        .analysis
                        .payload(*c)
                        .ok_or("a computed constant could not be computed")?;
                    let attrs = Attrs::new().with("value", Attr::Const(payload));
                    func.push_op(
                        Opcode::Const,
                        &[],
                        attrs,
                        Some(vec![entry.ty.clone()]),
                        &hint,
                        loc,
                    )
                    .map_err(|d| d.message)?[0]
                }
                Node::Op(o) => {
                    let attrs = o.attrs.as_ref().ok_or("pattern node in the e-graph")?;
                    let operands: Vec<ValueId> =
                        o.children.iter().map(|c| memo[&egraph.find(*c)]).collect();
                    let declared = attrs.declared.as_ref().map(|d| vec![d.ty.clone()]);
                    func.push_op_with_epilogue(
                        o.opcode,
                        &operands,
                        attrs.to_attrs(),
                        declared,
                        &attrs.steps(),
                        &hint,
                        loc,
                    )
                    .map_err(|d| d.message)?[0]
                }
            };
            if func.ty(value) != &ty {
                return Err(format!(
                    "extracted %{} is {}, its class is {ty}",
                    func.name_of(value),
                    func.ty(value)
                ));
            }
            memo.insert(id, value);
        }
        results.push(memo[&root]);
    }
    func.set_return(results);
    func.result_names = template.result_names.clone();
    if func.result_types != template.result_types {
        return Err("extraction changed the function's result types".to_string());
    }
    Ok(func)
}

fn default_hint(node: &Node) -> String {
    match node {
        Node::Param(_) => "arg".to_string(),
        Node::Const(_) => "cst".to_string(),
        Node::Op(o) => o
            .opcode
            .name()
            .rsplit('.')
            .next()
            .unwrap_or("v")
            .to_string(),
    }
}
