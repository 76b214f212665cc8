//! The verifier: structural checks from the op table, shape and dtype
//! inference through each op's `infer` hook, SSA dominance, unique names and
//! return types. It runs after parsing and after every pass.
//!
//! Invariant: a module with no verifier errors can be printed, re-parsed and
//! interpreted without internal errors.

use crate::attr::{Attr, ConstValue};
use crate::diag::Diagnostic;
use crate::entity::EntityId;
use crate::module::{Block, Func, Module, OpId};
use crate::ops::control::{check_regions, control_of};
use crate::ops::fused::{check_epilogue, Step};
use crate::ops::kind::{Form, OpKind};
use crate::ops::{check_operand_count, InferCx, Opcode, Trait};
use crate::types::{checked_elements, TensorType};
use std::collections::HashSet;

/// Infers an op's result types from its operand types and (completed)
/// attributes. `declared` carries the written result types for ops whose
/// result type is not implied by their operands. Errors name the op.
pub fn infer_op(
    opcode: Opcode,
    operands: &[TensorType],
    attrs: &crate::attr::Attrs,
    declared: Option<&[TensorType]>,
) -> Result<Vec<TensorType>, String> {
    infer_op_with_epilogue(opcode, operands, attrs, declared, &[])
}

/// As [`infer_op`], for an op carrying an epilogue (`Trait::Epilogue`)
/// with these decoded steps.
pub fn infer_op_with_epilogue(
    opcode: Opcode,
    operands: &[TensorType],
    attrs: &crate::attr::Attrs,
    declared: Option<&[TensorType]>,
    epilogue: &[Step],
) -> Result<Vec<TensorType>, String> {
    check_operand_count(opcode, operands.len())?;
    check_sparse_operands(opcode, operands)?;
    if let Some(ts) = declared {
        for t in ts {
            checked_elements(&t.shape).map_err(|m| format!("{}: {m}", opcode.name()))?;
        }
    }
    let cx = InferCx { opcode, operands, attrs, declared, epilogue };
    let results = (opcode.info().infer)(&cx).map_err(|m| format!("{}: {m}", opcode.name()))?;
    for t in &results {
        checked_elements(&t.shape).map_err(|m| format!("{}: result {m}", opcode.name()))?;
    }
    Ok(results)
}

/// Only the weight (operand 1) of a sparse-form op takes a `#sparse.nm`
/// tensor: every other op would read it as dense, which it is in the
/// interpreter but not in storage or on the sparse kernels.
fn check_sparse_operands(opcode: Opcode, operands: &[TensorType]) -> Result<(), String> {
    let sparse_op = match opcode.kind() {
        OpKind::Conv(_, form) | OpKind::MatMul(form) | OpKind::Gemm(form) | OpKind::Pool(_, form) => form == Form::Sparse,
        OpKind::Constant
        | OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Activation(_)
        | OpKind::Pointwise(_)
        | OpKind::Norm(_)
        | OpKind::Attention
        | OpKind::Reduce(_)
        | OpKind::Movement(_)
        | OpKind::Resize
        | OpKind::GridSample
        | OpKind::Recurrent(_)
        | OpKind::Control(_) => false,
    };
    for (i, t) in operands.iter().enumerate() {
        if t.encoding.is_some() && !(sparse_op && i == 1) {
            return Err(format!(
                "{}: operand {i} is sparse ({t}); only the weight of sparse.matmul and sparse.conv2d takes a #sparse.nm tensor",
                opcode.name()
            ));
        }
    }
    Ok(())
}

/// Verifies every function; returns all errors found (empty when valid).
pub fn verify_module(module: &Module) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut names = HashSet::new();
    for w in &module.weights {
        if !names.insert(w.name.as_str()) {
            diags.push(Diagnostic::error(format!("weights @{} is declared twice", w.name), w.loc.clone()));
        }
    }
    let mut func_names = HashSet::new();
    for f in &module.funcs {
        if !func_names.insert(f.name.as_str()) {
            diags.push(Diagnostic::error(format!("function @{} is defined twice", f.name), f.loc.clone()));
        }
        verify_func(module, f, &mut diags);
    }
    diags
}

fn verify_func(module: &Module, f: &Func, diags: &mut Vec<Diagnostic>) {
    let mut names = HashSet::new();
    for (_, v) in f.values.iter() {
        if !names.insert(v.name.as_str()) {
            diags.push(Diagnostic::error(format!("value %{} is defined twice", v.name), v.loc.clone()));
        }
    }
    let mut defined = vec![false; f.values.len()];
    for &p in f.params() {
        defined[p.index()] = true;
        if let Err(m) = checked_elements(&f.ty(p).shape) {
            diags.push(Diagnostic::error(format!("parameter %{}: {m}", f.name_of(p)), f.values[p].loc.clone()));
        }
    }
    let mut seen_ops = HashSet::new();
    let mut anywhere = defined.clone();
    verify_block(module, f, &f.body, &mut defined, &mut anywhere, &mut seen_ops, diags);
    let rets = f.results();
    for &v in rets {
        if !defined[v.index()] {
            diags.push(Diagnostic::error(
                format!("return: %{} is not defined", f.name_of(v)),
                f.body.terminator_loc.clone(),
            ));
        }
    }
    if rets.len() != f.result_types.len() {
        diags.push(Diagnostic::error(
            format!("return: @{} declares {} results, returns {}", f.name, f.result_types.len(), rets.len()),
            f.body.terminator_loc.clone(),
        ));
    } else {
        for (i, (&v, want)) in rets.iter().zip(&f.result_types).enumerate() {
            if f.ty(v) != want {
                diags.push(Diagnostic::error(
                    format!("return: result {i} of @{} is declared {want}, returned value %{} is {}", f.name, f.name_of(v), f.ty(v)),
                    f.body.terminator_loc.clone(),
                ));
            }
        }
    }
}

/// Verifies the ops of `block` in order. `defined` marks the values
/// visible here (a control region sees only its own); `anywhere` marks
/// every value defined so far, for a clearer message.
fn verify_block(
    module: &Module,
    f: &Func,
    block: &Block,
    defined: &mut [bool],
    anywhere: &mut Vec<bool>,
    seen_ops: &mut HashSet<OpId>,
    diags: &mut Vec<Diagnostic>,
) {
    for &op_id in &block.ops {
        let op = &f.ops[op_id];
        let name = op.opcode.name();
        if !seen_ops.insert(op_id) {
            diags.push(Diagnostic::error(format!("{name}: op appears twice in the block"), op.loc.clone()));
            continue;
        }
        let mut ok = true;
        for &v in &op.operands {
            if !defined[v.index()] {
                let m = if anywhere[v.index()] {
                    format!("{name}: operand %{} is defined outside this region; a region reads only its arguments and its own values (pass it to the op that holds the region)", f.name_of(v))
                } else {
                    format!("{name}: operand %{} is used before its definition", f.name_of(v))
                };
                diags.push(Diagnostic::error(m, op.loc.clone()));
                ok = false;
            }
        }
        let takes_epilogue = op.opcode.info().has_trait(Trait::Epilogue);
        let control = control_of(op.opcode);
        // Control regions are isolated: verified in a scope of their own
        // arguments (module doc of `ops/control.rs`).
        if control.is_some() {
            for region in &op.regions {
                let mut inner = vec![false; f.values.len()];
                for &a in &region.args {
                    inner[a.index()] = true;
                    anywhere[a.index()] = true;
                }
                verify_block(module, f, region, &mut inner, anywhere, seen_ops, diags);
                for &v in &region.terminator {
                    if !inner[v.index()] {
                        diags.push(Diagnostic::error(
                            format!("yield: %{} is not defined in this region", f.name_of(v)),
                            region.terminator_loc.clone(),
                        ));
                        ok = false;
                    }
                }
            }
        }
        for &r in &op.results {
            defined[r.index()] = true;
            anywhere[r.index()] = true;
        }
        if !op.regions.is_empty() && !takes_epilogue && control.is_none() {
            diags.push(Diagnostic::error(format!("{name}: this op takes no regions"), op.loc.clone()));
            ok = false;
        }
        if !ok {
            continue;
        }
        // Attributes must already be complete and well-kinded.
        // Compare names and order only: values were checked by kind, and a
        // NaN payload is never `==` to itself.
        let names = |a: &crate::attr::Attrs| a.0.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        match op.opcode.info().complete_attrs(op.attrs.clone()) {
            Ok(full) if names(&full) == names(&op.attrs) => {}
            Ok(_) => diags.push(Diagnostic::error(
                format!("{name}: attributes are not in canonical order with defaults filled (internal error, please report)"),
                op.loc.clone(),
            )),
            Err(m) => {
                diags.push(Diagnostic::error(m, op.loc.clone()));
                continue;
            }
        }
        if let Some(Attr::Const(ConstValue::Weight(w))) = op.attrs.get("value")
            && module.weights_decl(&w.file).is_none()
        {
            diags.push(Diagnostic::error(
                format!("{name}: weights @{} is not declared (add `weights @{} = \"file.safetensors\"`)", w.file, w.file),
                op.loc.clone(),
            ));
            continue;
        }
        let operand_types: Vec<TensorType> = op.operands.iter().map(|v| f.ty(*v).clone()).collect();
        let actual: Vec<TensorType> = op.results.iter().map(|v| f.ty(*v).clone()).collect();
        let declared = op.opcode.info().has_trait(Trait::DeclaredResult).then_some(actual.as_slice());
        let steps = if takes_epilogue {
            match check_epilogue(f, op) {
                Ok(steps) => steps,
                Err((m, loc)) => {
                    diags.push(Diagnostic::error(format!("{name}: {m}"), loc));
                    continue;
                }
            }
        } else {
            vec![]
        };
        match infer_op_with_epilogue(op.opcode, &operand_types, &op.attrs, declared, &steps) {
            Err(m) => diags.push(Diagnostic::error(m, op.loc.clone())),
            Ok(inferred) => {
                if let Some(c) = control
                    && let Err((m, loc)) = check_regions(f, op, c)
                {
                    diags.push(Diagnostic::error(format!("{name}: {m}"), loc));
                }
                if inferred.len() != actual.len() {
                    diags.push(Diagnostic::error(
                        format!("{name}: expected {} results, found {}", inferred.len(), actual.len()),
                        op.loc.clone(),
                    ));
                } else {
                    for (want, got) in inferred.iter().zip(&actual) {
                        if want != got {
                            diags.push(Diagnostic::error(
                                format!("{name}: result type must be {want}, found {got}"),
                                op.loc.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
}
