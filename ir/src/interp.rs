//! The reference interpreter: runs a function op by op through each op's
//! `eval` hook. It is the numeric oracle for passes and backends, so it is
//! written to be obviously right, not fast.
//!
//! Invariant: it runs only verified modules; a failure inside an op is
//! reported as a diagnostic at that op, never a panic.

use crate::attr::Attrs;
use crate::diag::Diagnostic;
use crate::entity::EntityId;
use crate::module::{Block, Func, OpData, ValueId};
use crate::ops::control::{MAX_LOOP_ITERATIONS, control_of};
use crate::ops::kind::Control;
use crate::types::Scalar;
use std::collections::HashMap;
use crate::ops::fused::{self, Step};
use crate::ops::{EvalCx, Opcode};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// Where `const @file["key"]` payloads come from. The driver implements it
/// over memory-mapped safetensors files (library crates do no I/O).
pub trait WeightSource {
    /// Loads tensor `key` of the weights file declared as `@file`, checked
    /// against `ty`.
    fn load(&self, file: &str, key: &str, ty: &TensorType) -> Result<Tensor, String>;
}

/// A weight source for modules without external weights.
pub struct NoWeights;

impl WeightSource for NoWeights {
    fn load(&self, file: &str, key: &str, _ty: &TensorType) -> Result<Tensor, String> {
        Err(format!("no weights are loaded, so @{file}[\"{key}\"] is unavailable"))
    }
}

/// Evaluates one op on concrete inputs (the importer folds constants with it).
pub fn eval_op(
    opcode: Opcode,
    inputs: &[&Tensor],
    attrs: &Attrs,
    result_types: &[TensorType],
    weights: &dyn WeightSource,
) -> Result<Vec<Tensor>, String> {
    eval_op_with_epilogue(opcode, inputs, attrs, result_types, weights, &[])
}

/// As [`eval_op`], for an op carrying an epilogue with these decoded steps.
pub fn eval_op_with_epilogue(
    opcode: Opcode,
    inputs: &[&Tensor],
    attrs: &Attrs,
    result_types: &[TensorType],
    weights: &dyn WeightSource,
    epilogue: &[Step],
) -> Result<Vec<Tensor>, String> {
    // A result the allocator cannot hold is an error, not an abort.
    for ty in result_types {
        crate::tensor::check_alloc(ty).map_err(|m| format!("{}: {m}", opcode.name()))?;
    }
    let cx = EvalCx { opcode, inputs, attrs, result_types, weights, epilogue };
    let out = (opcode.info().eval)(&cx).map_err(|m| format!("{}: {m}", opcode.name()))?;
    if out.len() != result_types.len() {
        return Err(format!(
            "internal error: {} produced {} results, expected {} (please report)",
            opcode.name(),
            out.len(),
            result_types.len()
        ));
    }
    for (t, ty) in out.iter().zip(result_types) {
        if t.ty.shape != ty.shape || t.ty.elem != ty.elem || t.len() != ty.num_elements() {
            return Err(format!(
                "internal error: {} produced {} with {} elements, expected {ty} (please report)",
                opcode.name(),
                t.ty,
                t.len()
            ));
        }
    }
    Ok(out)
}

/// Runs `func` on `inputs` (one per parameter, in order). Values are dropped
/// after their last use.
pub fn run(func: &Func, inputs: Vec<Tensor>, weights: &dyn WeightSource) -> Result<Vec<Tensor>, Diagnostic> {
    run_observed(func, inputs, weights, &mut |_| {})
}

/// As [`run`], calling `done(n)` after each of the body's ops with the
/// number evaluated so far (for a progress bar).
pub fn run_observed(
    func: &Func,
    inputs: Vec<Tensor>,
    weights: &dyn WeightSource,
    done: &mut dyn FnMut(usize),
) -> Result<Vec<Tensor>, Diagnostic> {
    let params = func.params();
    if inputs.len() != params.len() {
        return Err(Diagnostic::error(
            format!("@{} takes {} inputs, {} given", func.name, params.len(), inputs.len()),
            func.loc.clone(),
        ));
    }
    let mut env: Vec<Option<Tensor>> = vec![None; func.values.len()];
    for (&p, t) in params.iter().zip(inputs) {
        let want = func.ty(p);
        if t.ty.shape != want.shape || t.ty.elem != want.elem {
            return Err(Diagnostic::error(
                format!("input %{} must be {want}, found {}", func.name_of(p), t.ty),
                func.values[p].loc.clone(),
            ));
        }
        env[p.index()] = Some(t);
    }

    // Last use of each value, so memory stays bounded on large models.
    let mut last_use = vec![usize::MAX; func.values.len()];
    for (pos, &op) in func.body.ops.iter().enumerate() {
        for &v in &func.ops[op].operands {
            last_use[v.index()] = pos;
        }
    }
    for &v in func.results() {
        last_use[v.index()] = usize::MAX;
    }

    for (pos, &op_id) in func.body.ops.iter().enumerate() {
        let op = &func.ops[op_id];
        let inputs: Vec<&Tensor> = op
            .operands
            .iter()
            .map(|v| {
                env[v.index()].as_ref().ok_or_else(|| {
                    Diagnostic::error(
                        format!("internal error: %{} has no value (please report)", func.name_of(*v)),
                        op.loc.clone(),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let outputs = eval_in_func(func, op, &inputs, weights)?;
        for (&r, t) in op.results.iter().zip(outputs) {
            env[r.index()] = Some(t);
        }
        for &v in &op.operands {
            if last_use[v.index()] == pos {
                env[v.index()] = None;
            }
        }
        done(pos + 1);
    }
    func.results()
        .iter()
        .map(|v| {
            env[v.index()].clone().ok_or_else(|| {
                Diagnostic::error(format!("internal error: result %{} has no value", func.name_of(*v)), func.loc.clone())
            })
        })
        .collect()
}

/// Evaluates one op of `func` on `inputs`: through the op table's hook, or,
/// for a control op, by running its regions.
fn eval_in_func(func: &Func, op: &OpData, inputs: &[&Tensor], weights: &dyn WeightSource) -> Result<Vec<Tensor>, Diagnostic> {
    if let Some(c) = control_of(op.opcode) {
        return run_control(func, op, c, inputs, weights);
    }
    let result_types: Vec<TensorType> = op.results.iter().map(|r| func.ty(*r).clone()).collect();
    let steps = fused::epilogue(func, op).map_err(|m| Diagnostic::error(m, op.loc.clone()))?;
    eval_op_with_epilogue(op.opcode, inputs, &op.attrs, &result_types, weights, &steps).map_err(|m| Diagnostic::error(m, op.loc.clone()))
}

/// Runs a region of `func` on its arguments and returns what it yields.
fn run_region(func: &Func, block: &Block, args: Vec<Tensor>, weights: &dyn WeightSource) -> Result<Vec<Tensor>, Diagnostic> {
    let mut env: HashMap<ValueId, Tensor> = block.args.iter().copied().zip(args).collect();
    let get = |env: &HashMap<ValueId, Tensor>, v: ValueId, loc: &crate::diag::Location| -> Result<Tensor, Diagnostic> {
        env.get(&v).cloned().ok_or_else(|| {
            Diagnostic::error(format!("internal error: %{} has no value in its region (please report)", func.name_of(v)), loc.clone())
        })
    };
    for &op_id in &block.ops {
        let op = &func.ops[op_id];
        let inputs: Vec<Tensor> = op.operands.iter().map(|&v| get(&env, v, &op.loc)).collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outputs = eval_in_func(func, op, &refs, weights)?;
        env.extend(op.results.iter().copied().zip(outputs));
    }
    block.terminator.iter().map(|&v| get(&env, v, &block.terminator_loc)).collect()
}

/// `core.if` and `core.loop` (`ops/control.rs`): choose or repeat a region.
fn run_control(func: &Func, op: &OpData, c: Control, inputs: &[&Tensor], weights: &dyn WeightSource) -> Result<Vec<Tensor>, Diagnostic> {
    let name = op.opcode.name();
    let err = |m: String| Diagnostic::error(format!("{name}: {m}"), op.loc.clone());
    let flag = |i: usize| inputs.get(i).filter(|t| t.len() == 1).map(|t| t.get_f64(0) != 0.0);
    match c {
        Control::If => {
            let cond = flag(0).ok_or_else(|| err("the condition must hold one element".into()))?;
            let region = op.regions.get(if cond { 0 } else { 1 }).ok_or_else(|| err("a region is missing".into()))?;
            run_region(func, region, inputs[1..].iter().map(|t| (*t).clone()).collect(), weights)
        }
        Control::Loop => {
            let body = op.regions.first().ok_or_else(|| err("the body is missing".into()))?;
            let max = inputs.first().filter(|t| t.len() == 1).map(|t| t.get_i64(0)).ok_or_else(|| err("the trip count must hold one element".into()))?;
            let mut cond = flag(1).ok_or_else(|| err("the condition must hold one element".into()))?;
            let carried = match op.attrs.get("carried") {
                Some(crate::attr::Attr::Int(n)) => crate::ops::control::carried_count(*n, inputs.len() - 2).map_err(err)?,
                _ => 0,
            };
            let mut values: Vec<Tensor> = inputs[2..2 + carried].iter().map(|t| (*t).clone()).collect();
            let captured: Vec<Tensor> = inputs[2 + carried..].iter().map(|t| (*t).clone()).collect();
            let scan_types: Vec<TensorType> = op.results[carried..].iter().map(|&r| func.ty(r).clone()).collect();
            let mut scans: Vec<Vec<Tensor>> = vec![vec![]; scan_types.len()];
            let bound = match op.attrs.get("max_iterations") {
                Some(crate::attr::Attr::Int(n)) => crate::ops::control::max_iterations(*n).map_err(err)?,
                _ => MAX_LOOP_ITERATIONS,
            };
            let mut i: i64 = 0;
            while i < max && cond {
                if i >= bound {
                    return Err(err(format!("the loop did not stop within {bound} iterations (`max_iterations`)")));
                }
                let mut args = vec![
                    Tensor::from_i64(TensorType::new(vec![], Scalar::I64), vec![i]),
                    Tensor::from_i64(TensorType::new(vec![], Scalar::I1), vec![cond as i64]),
                ];
                args.extend(values.iter().cloned());
                args.extend(captured.iter().cloned());
                let mut out = run_region(func, body, args, weights)?.into_iter();
                cond = out.next().is_some_and(|t| t.len() == 1 && t.get_f64(0) != 0.0);
                values = out.by_ref().take(carried).collect();
                for (s, t) in scans.iter_mut().zip(out) {
                    s.push(t);
                }
                i += 1;
            }
            for (j, (ty, elems)) in scan_types.iter().zip(scans).enumerate() {
                if ty.shape.first().copied() != Some(elems.len()) {
                    return Err(err(format!(
                        "the loop ran {} iterations, but scan output {j} is declared for {} ({ty}); shapes are static, so the count must match",
                        elems.len(),
                        ty.shape.first().copied().unwrap_or(0)
                    )));
                }
                let stacked = if crate::tensor::holds_floats(&ty.elem) {
                    Tensor::from_f64(ty.clone(), elems.iter().flat_map(|t| t.to_f64()).collect())
                } else {
                    Tensor::from_i64(ty.clone(), elems.iter().flat_map(|t| t.to_i64()).collect())
                };
                values.push(stacked);
            }
            Ok(values)
        }
    }
}

/// Weights held in memory, keyed by (weights-file name, tensor key). The
/// ONNX importer produces these; tests use them.
#[derive(Default, Clone, Debug)]
pub struct MapWeights(pub std::collections::HashMap<(String, String), Tensor>);

impl WeightSource for MapWeights {
    fn load(&self, file: &str, key: &str, ty: &TensorType) -> Result<Tensor, String> {
        let t = self
            .0
            .get(&(file.to_string(), key.to_string()))
            .ok_or_else(|| format!("weights @{file} has no tensor \"{key}\""))?;
        if t.ty.shape != ty.shape || t.ty.elem != ty.elem {
            return Err(format!("weight \"{key}\" is {}, but the constant declares {ty}", t.ty));
        }
        Ok(t.clone())
    }
}
