//! Quantized ops that no kernel of the target takes become what they mean:
//! their quantized operands dequantized, the float op, the clamp of the
//! requantize epilogue, and a quantize to the op's result type. They then
//! run on the float kernels, as native steps, instead of on the reference
//! interpreter.
//!
//! - Integer compute ops (`quant.conv2d`, `quant.matmul`, `quant.gemm`,
//!   `quant.add`, `quant.avg_pool2d`, `quant.global_avg_pool`) are defined
//!   exactly so (`aoc_ir::ops::quant_compute`), so the expansion computes
//!   their definition; only the kernels' float rounding differs, which moves
//!   a result by at most one step of its scale.
//! - Data movement, max pools and resizes on quantized values (what the
//!   `qdq` rules move Q/DQ pairs through): these commute with the monotone
//!   dequantize, so the expansion gives the same values.
//!
//! - Recurrent layers (`core.rnn`, `core.gru`, `core.lstm`) become GEMMs
//!   and pointwise ops (`recurrent.rs`).
//!
//! Ops inside `core.if`/`core.loop` regions expand the same way: [`expand`]
//! rebuilds every control op's regions with their ops expanded.
//!
//! The lowering asks [`expandable`] for an op that no lowering rule took,
//! and lowers again the function [`expand`] returns (see `lower`). The
//! integer kernels of issue-17 work replace these expansions where the
//! target has them; `aoc explain` shows the steps (`quant.dequantize`,
//! the float op, `quant.quantize`, each with the op's origin).

use std::collections::{HashMap, HashSet};

use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::module::{Block, Func, OpData, OpId, ValueId};
use aoc_ir::ops::fused;
use aoc_ir::ops::kind::{Cell, Form, OpKind, Pool};
use aoc_ir::ops::quant_compute::float_form;
use aoc_ir::{Opcode, TensorType, Trait};

fn quantized(t: &TensorType) -> bool {
    t.elem.quant().is_some()
}

/// What an op that no kernel takes expands into.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Expansion {
    /// Quantized operands or results: dequantize, this float op, quantize.
    Float(Opcode),
    /// A recurrent layer: its GEMMs and gates.
    Recurrent(Cell),
}

/// How `op` expands: the float op, when it has quantized operands or
/// results and a float form; the recurrent layers always.
pub(crate) fn expandable(func: &Func, op: &OpData) -> Option<Expansion> {
    if let OpKind::Recurrent(cell) = op.opcode.kind() {
        return Some(Expansion::Recurrent(cell));
    }
    let q_in = op.operands.iter().any(|&v| quantized(func.ty(v)));
    let q_out = op.results.iter().any(|&v| quantized(func.ty(v)));
    if op.results.len() != 1 || !(q_in || q_out) {
        return None;
    }
    if let Some(float) = float_form(op.opcode) {
        return Some(Expansion::Float(float));
    }
    match op.opcode.kind() {
        OpKind::Movement(_) | OpKind::Resize | OpKind::Pool(Pool::Max | Pool::GlobalMax, Form::Float) => {
            Some(Expansion::Float(op.opcode))
        }
        _ => None,
    }
}

/// `func` with every op of `which` replaced by its float expansion. Other
/// ops, parameters and result names are kept; the new values are named
/// after the op's result (`%y.dq0`, `%y.f`, `%y.clip`), and the quantize
/// that ends an expansion takes the result's own name.
pub(crate) fn expand(func: &Func, which: &HashSet<OpId>) -> Result<Func, String> {
    let mut f = Func::new(func.name.clone());
    f.loc = func.loc.clone();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for &p in func.params() {
        let v = f.add_param(func.name_of(p), func.ty(p).clone(), func.values[p].loc.clone());
        map.insert(p, v);
    }
    expand_ops(func, &mut f, &func.body.ops, &mut map, which)?;
    let results = func.results().iter().map(|v| map[v]).collect();
    f.set_return(results);
    f.result_names = func.result_names.clone();
    Ok(f)
}

/// Appends `ops` of `func` to `f`'s body, expanded where `which` says
/// ([`expand`]); `map` takes `func`'s values to `f`'s. A control op's
/// regions are rebuilt the same way: their ops are appended, then moved
/// out of the body into the new op's blocks.
fn expand_ops(func: &Func, f: &mut Func, ops: &[OpId], map: &mut HashMap<ValueId, ValueId>, which: &HashSet<OpId>) -> Result<(), String> {
    for &id in ops {
        let op = &func.ops[id];
        let operands: Vec<ValueId> = op.operands.iter().map(|v| map[v]).collect();
        if aoc_ir::ops::control::control_of(op.opcode).is_some() {
            let mut blocks = Vec::with_capacity(op.regions.len());
            for block in &op.regions {
                let args: Vec<ValueId> = block
                    .args
                    .iter()
                    .map(|&a| {
                        let v = f.new_region_arg(func.name_of(a), func.ty(a).clone(), func.values[a].loc.clone());
                        map.insert(a, v);
                        v
                    })
                    .collect();
                let start = f.body.ops.len();
                expand_ops(func, f, &block.ops, map, which)?;
                let inner = f.body.ops.split_off(start);
                let terminator = block.terminator.iter().map(|v| map[v]).collect();
                blocks.push(Block { args, ops: inner, terminator, terminator_loc: block.terminator_loc.clone() });
            }
            let results = op.results.iter().map(|&r| (func.name_of(r).to_string(), func.ty(r).clone())).collect();
            let new = f.push_region_op(op.opcode, operands, op.attrs.clone(), results, blocks, op.loc.clone());
            for (&r, &n) in op.results.iter().zip(&f.ops[new].results) {
                map.insert(r, n);
            }
            continue;
        }
        let expansion = if which.contains(&id) { expandable(func, op) } else { None };
        let float = match expansion {
            Some(Expansion::Recurrent(cell)) => {
                let base = func.name_of(op.results[0]).to_string();
                let outs = super::recurrent::expand_recurrent(f, op, cell, &operands, &base)?;
                for (&r, &n) in op.results.iter().zip(&outs) {
                    if f.ty(n) != func.ty(r) {
                        return Err(format!("{}: its expansion gives {}, not {}", op.opcode.name(), f.ty(n), func.ty(r)));
                    }
                    map.insert(r, n);
                }
                continue;
            }
            Some(Expansion::Float(float)) => Some(float),
            None => None,
        };
        let Some(float) = float else {
            let results = op.results.iter().map(|&r| (func.name_of(r).to_string(), func.ty(r).clone())).collect();
            let new = f.push_op_unchecked(op.opcode, operands, op.attrs.clone(), results, op.loc.clone());
            if !op.regions.is_empty() {
                fused::set_epilogue(f, new, &fused::epilogue(func, op)?)?;
            }
            for (&r, &n) in op.results.iter().zip(&f.ops[new].results) {
                map.insert(r, n);
            }
            continue;
        };
        let result = op.results[0];
        let base = func.name_of(result).to_string();
        let loc = op.loc.clone();
        let err = |d: aoc_ir::Diagnostic| format!("{}: expanding to {}: {}", op.opcode.name(), float.name(), d.message);
        let mut inputs = Vec::with_capacity(operands.len());
        for (i, &v) in operands.iter().enumerate() {
            inputs.push(if quantized(f.ty(v)) {
                f.push_op(Opcode::Dequantize, &[v], Attrs::new(), None, &format!("{base}.dq{i}"), loc.clone())
                    .map_err(err)?[0]
            } else {
                v
            });
        }
        // The float op takes the attributes its table entry has; the clamp
        // bounds are the requantize epilogue's.
        let info = float.info();
        let mut attrs = Attrs::new();
        for (name, value) in op.attrs.iter() {
            if info.attr_info(name).is_some() {
                attrs.set(name, value.clone());
            }
        }
        // A quant.matmul's bias is added after the product, as `core.add`.
        let (main, bias) = match (float, &inputs[..]) {
            (Opcode::MatMul, [a, b, c]) => (vec![*a, *b], Some(*c)),
            _ => (inputs, None),
        };
        let mut y = f.push_op(float, &main, attrs, None, &format!("{base}.f"), loc.clone()).map_err(err)?[0];
        if let Some(c) = bias {
            y = f.push_op(Opcode::Add, &[y, c], Attrs::new(), None, &format!("{base}.bias"), loc.clone()).map_err(err)?[0];
        }
        let bound = |name: &str| match op.attrs.get(name) {
            Some(Attr::Float(v)) if !v.is_nan() => Some(*v),
            _ => None,
        };
        if float_form(op.opcode).is_some() && (bound("clip_min").is_some() || bound("clip_max").is_some()) {
            let mut clip = Attrs::new();
            if let Some(v) = bound("clip_min") {
                clip.set("min", Attr::Float(v));
            }
            if let Some(v) = bound("clip_max") {
                clip.set("max", Attr::Float(v));
            }
            y = f.push_op(Opcode::Clip, &[y], clip, None, &format!("{base}.clip"), loc.clone()).map_err(err)?[0];
        }
        let want = func.ty(result).clone();
        let out = if quantized(&want) {
            f.push_op(Opcode::Quantize, &[y], Attrs::new(), Some(vec![want.clone()]), &base, loc.clone())
                .map_err(err)?[0]
        } else {
            y
        };
        if f.ty(out) != &want {
            return Err(format!(
                "{}: its float expansion gives {}, not {want}",
                op.opcode.name(),
                f.ty(out)
            ));
        }
        debug_assert!(!op.opcode.info().has_trait(Trait::Epilogue));
        map.insert(result, out);
    }
    Ok(())
}
