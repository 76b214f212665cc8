//! Control flow: `core.if` and `core.loop`, ops that hold regions of
//! ordinary ops (MLIR's `scf.if`/`scf.while`, ONNX's `If` and `Loop`).
//!
//! Regions are isolated from above: a region reads only its own arguments
//! and the values its ops define; whatever it needs from outside is an
//! operand of the op, bound to an argument. So an op's operands are all it
//! depends on — passes, the e-graph and the lowering see a control op's
//! dependencies without walking its bodies — and a region is verified,
//! interpreted and lowered on its own.
//!
//! - `core.if %cond, %inputs...`: two regions (then, else), each taking one
//!   argument per input (same types) and yielding the results.
//! - `core.loop %max_trip, %cond, %inputs... {carried = N}`: one region
//!   taking `(iter: tensor<i64>, cond: tensor<i1>, carried..., captured...)`
//!   and yielding `(cond: tensor<i1>, carried..., scan elements...)`; the
//!   results are the carried values' last values, then each scan element
//!   stacked along a new first axis. Static shapes: a scan result's first
//!   dimension is the number of iterations the loop must run; a loop that
//!   stops after another count is an error at run time.
//!
//! The op table's `infer` hooks check operands and declared results; what
//! depends on the regions (arity, argument and yield types) is checked by
//! [`check_regions`], which the verifier runs. The table's `eval` hook
//! cannot see regions: the interpreter runs these ops itself
//! (`interp::run_control`).
//!
//! Invariant: no loop runs more than its `max_iterations` (at most
//! [`MAX_LOOP_ITERATIONS`]) iterations in the interpreter or the runtime;
//! one that would is an error, never a hang.

use super::kind::Control;
use super::{EvalCx, InferCx, Opcode};
use crate::diag::Location;
use crate::module::{Block, Func, OpData};
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};

/// The most iterations a `core.loop` may run (in the interpreter and the
/// runtime), and its `max_iterations` default; more is an error naming the
/// loop.
pub const MAX_LOOP_ITERATIONS: i64 = 1 << 24;

fn scalar(s: Scalar) -> TensorType {
    TensorType::new(vec![], s)
}

fn declared<'a>(cx: &'a InferCx) -> Result<&'a [TensorType], String> {
    cx.declared.ok_or_else(|| "the result types must be given".to_string())
}

/// `cond` must be one `i1` element (any rank: ONNX writes `[]` or `[1]`).
fn check_flag(t: Option<&TensorType>, what: &str, want: Scalar) -> Result<(), String> {
    match t {
        Some(t) if t.elem.storage() == want && t.elem.quant().is_none() && t.num_elements() == 1 && t.encoding.is_none() => Ok(()),
        Some(t) => Err(format!("{what} must be one {} element, found {t}", want.name())),
        None => Err(format!("{what} is missing")),
    }
}

pub fn infer_if(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    check_flag(cx.operand(0), "the condition", Scalar::I1)?;
    Ok(declared(cx)?.to_vec())
}

pub fn infer_loop(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    check_flag(cx.operand(0), "the trip count `max_trip`", Scalar::I64)?;
    check_flag(cx.operand(1), "the condition", Scalar::I1)?;
    let carried = carried_count(cx.int("carried")?, cx.operands.len() - 2)?;
    max_iterations(cx.int("max_iterations")?)?;
    let results = declared(cx)?;
    if results.len() < carried {
        return Err(format!("{carried} carried values need at least {carried} results, found {}", results.len()));
    }
    for (i, (r, init)) in results.iter().zip(&cx.operands[2..2 + carried]).enumerate() {
        if r != init {
            return Err(format!("result {i} (carried value {i}) must be {init}, the type of its initial value, found {r}"));
        }
    }
    for (i, r) in results.iter().enumerate().skip(carried) {
        if r.rank() == 0 {
            return Err(format!("result {i} (a scan output) must have a leading iteration axis, found {r}"));
        }
    }
    Ok(results.to_vec())
}

/// The `max_iterations` attribute, checked.
pub fn max_iterations(n: i64) -> Result<i64, String> {
    if (1..=MAX_LOOP_ITERATIONS).contains(&n) {
        Ok(n)
    } else {
        Err(format!("`max_iterations = {n}` must be between 1 and {MAX_LOOP_ITERATIONS}"))
    }
}

/// The `carried` attribute as a count of the `inputs` operands.
pub fn carried_count(carried: i64, inputs: usize) -> Result<usize, String> {
    usize::try_from(carried)
        .ok()
        .filter(|&n| n <= inputs)
        .ok_or_else(|| format!("`carried = {carried}` must be between 0 and the number of inputs, {inputs}"))
}

/// The table's `eval` hook: the regions are not visible here.
pub fn eval_by_interpreter(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err(format!("{} runs its regions: evaluate it through the interpreter (`aoc_ir::interp`), not alone", cx.opcode.name()))
}

/// The control op `opcode` is, if any.
pub fn control_of(opcode: Opcode) -> Option<Control> {
    match opcode.kind() {
        super::OpKind::Control(c) => Some(c),
        _ => None,
    }
}

/// The region-dependent checks of a control op whose operands and results
/// passed `infer`: region count, argument types against the operands,
/// yield types against the results. Errors carry the offending region's
/// location where it has one.
pub fn check_regions(f: &Func, op: &OpData, control: Control) -> Result<(), (String, Location)> {
    let here = |m: String| (m, op.loc.clone());
    let tys = |vs: &[crate::module::ValueId]| vs.iter().map(|&v| f.ty(v).clone()).collect::<Vec<_>>();
    let operands = tys(&op.operands);
    let results = tys(&op.results);
    let region_loc = |b: &Block| if b.terminator_loc.span.is_some() { b.terminator_loc.clone() } else { op.loc.clone() };
    let check_args = |b: &Block, which: &str, want: &[TensorType]| -> Result<(), (String, Location)> {
        let got = tys(&b.args);
        if got.len() != want.len() {
            return Err(here(format!("the {which} region takes {} arguments, found {}", want.len(), got.len())));
        }
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            if g != w {
                return Err((format!("argument {i} of the {which} region must be {w}, found {g}"), f.values[b.args[i]].loc.clone()));
            }
        }
        Ok(())
    };
    let check_yields = |b: &Block, which: &str, want: &[TensorType]| -> Result<(), (String, Location)> {
        let got = tys(&b.terminator);
        if got.len() != want.len() {
            return Err((format!("the {which} region must yield {} values, found {}", want.len(), got.len()), region_loc(b)));
        }
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            if g != w {
                return Err((format!("value {i} the {which} region yields must be {w}, found {g}"), region_loc(b)));
            }
        }
        Ok(())
    };
    match control {
        Control::If => {
            let [then, els] = op.regions.as_slice() else {
                return Err(here(format!("takes two regions (then, else), found {}", op.regions.len())));
            };
            for (b, which) in [(then, "then"), (els, "else")] {
                check_args(b, which, &operands[1..])?;
                check_yields(b, which, &results)?;
            }
            Ok(())
        }
        Control::Loop => {
            let [body] = op.regions.as_slice() else {
                return Err(here(format!("takes one region (the body), found {}", op.regions.len())));
            };
            let n = match op.attrs.get("carried") {
                Some(crate::attr::Attr::Int(n)) => carried_count(*n, operands.len().saturating_sub(2)).map_err(here)?,
                _ => 0,
            };
            let mut args = vec![scalar(Scalar::I64), scalar(Scalar::I1)];
            args.extend_from_slice(&operands[2..]);
            check_args(body, "body", &args)?;
            let mut yields = vec![scalar(Scalar::I1)];
            yields.extend_from_slice(&results[..n.min(results.len())]);
            for r in &results[n.min(results.len())..] {
                yields.push(TensorType { shape: r.shape.get(1..).unwrap_or(&[]).to_vec(), ..r.clone() });
            }
            check_yields(body, "body", &yields)
        }
    }
}
