//! Fused ops: a core op (conv2d, matmul, gemm, attention, or nothing for
//! `core.fused_pointwise`) followed by an ordered chain of pointwise ops, the
//! *epilogue*, held as the op's region:
//!
//! ```text
//! %y = core.fused_conv2d %x, %w, %b, %r {bias = true} ({
//! ^bb0(%acc: tensor<1x8x4x4xf32>, %e0: tensor<1x8x4x4xf32>):
//!   %s = core.add %acc, %e0 : tensor<1x8x4x4xf32>
//!   %y0 = core.relu %s : tensor<1x8x4x4xf32>
//!   yield %y0 : tensor<1x8x4x4xf32>
//! }) : tensor<1x8x4x4xf32>
//! ```
//!
//! Region shape (checked by [`check_epilogue`], which the verifier runs):
//! block argument 0 is the core's result (for `fused_pointwise`, the first
//! operand; for attention, the scores); the other arguments stand for the
//! op's operands after the core's, in order, with their types. Each op of
//! the region is a pointwise op of the step vocabulary whose operands are
//! the running value (argument 0, then the previous op's result) and, for
//! a binary op, the next unused argument, on either side; the region
//! yields the last value. No region means no steps.
//!
//! Passes and backends see the region decoded as a list of [`Step`]s
//! ([`epilogue`]), and build one with [`set_epilogue`]; the op table's
//! `infer` and `eval` hooks get the steps in their context.
//!
//! The old string form, `epilogue = "add; relu; clip(0.0, 6.0)"`, is still
//! read by the parser and converted to a region ([`parse_epilogue`]); step
//! syntax there: the mnemonic without `core.`, attributes as arguments in
//! table order when any differs from its default (`leaky_relu(0.1)`,
//! `clip(0.0, _)`), and `r` forms (`rsub`) for a binary step whose extra
//! operand is the left-hand side.
//!
//! Invariant (what backends and the `fuse` rules rely on): a fused op means
//! exactly its unfused graph. `infer` and `eval` run the core op's hooks and
//! then each step's own hooks on the intermediate types, so every step
//! rounds to its element type as the separate op would, and a fused op is
//! bit-identical to the ops it replaces in the interpreter.

use crate::attr::{Attr, AttrDefault, AttrKind, Attrs};
use crate::diag::Location;
use crate::interp::eval_op;
use crate::module::{Block, Func, OpData, OpId, ValueData, ValueDef, ValueId};
use crate::ops::{EvalCx, InferCx, Opcode, Trait};
use crate::tensor::Tensor;
use crate::types::{TensorType, write_float};
use crate::verify::infer_op;

/// Pointwise ops an epilogue step may be: unary ones (attributes become
/// arguments) and binary ones (one extra operand each).
const UNARY: &[&str] = &[
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "erf",
    "tanh",
    "sigmoid",
    "floor",
    "ceil",
    "relu",
    "gelu",
    "silu",
    "hard_sigmoid",
    "hard_swish",
    "leaky_relu",
    "clip",
];
const BINARY: &[&str] = &["add", "sub", "mul", "div", "max", "min", "pow", "prelu"];

/// One epilogue step.
#[derive(Clone, PartialEq, Debug)]
pub enum Step {
    /// `acc = op(acc)` with these (complete) attributes.
    Unary { opcode: Opcode, attrs: Attrs },
    /// `acc = op(acc, extra)`, or `op(extra, acc)` when `reversed`.
    Binary { opcode: Opcode, reversed: bool },
}

impl Step {
    /// The step computing `opcode` (a pointwise op of the step vocabulary)
    /// with `attrs`; `None` for ops an epilogue cannot hold.
    pub fn unary(opcode: Opcode, attrs: Attrs) -> Option<Step> {
        let name = opcode.name().strip_prefix("core.")?;
        if !UNARY.contains(&name) {
            return None;
        }
        let attrs = opcode.info().complete_attrs(attrs).ok()?;
        Some(Step::Unary { opcode, attrs })
    }

    /// The step `opcode(acc, extra)` (or reversed); `None` for ops an
    /// epilogue cannot hold.
    pub fn binary(opcode: Opcode, reversed: bool) -> Option<Step> {
        let name = opcode.name().strip_prefix("core.")?;
        BINARY
            .contains(&name)
            .then_some(Step::Binary { opcode, reversed })
    }

    /// Whether the step takes an extra operand.
    pub fn takes_operand(&self) -> bool {
        matches!(self, Step::Binary { .. })
    }

    fn text(&self) -> String {
        match self {
            Step::Binary { opcode, reversed } => {
                let name = opcode.name().trim_start_matches("core.");
                if *reversed {
                    format!("r{name}")
                } else {
                    name.to_string()
                }
            }
            Step::Unary { opcode, attrs } => {
                let info = opcode.info();
                let mut s = info.name.trim_start_matches("core.").to_string();
                let all_default = info.attrs.iter().all(|a| match attrs.get(a.name) {
                    Some(v) => info.is_default(a.name, v),
                    None => matches!(a.default, AttrDefault::Optional),
                });
                if !all_default {
                    let args: Vec<String> = info
                        .attrs
                        .iter()
                        .map(|a| match attrs.get(a.name) {
                            Some(Attr::Float(x)) => {
                                let mut t = String::new();
                                let _ = write_float(&mut t, *x);
                                t
                            }
                            Some(Attr::Str(v)) => v.clone(),
                            Some(other) => other.to_string(),
                            None => "_".to_string(),
                        })
                        .collect();
                    s.push('(');
                    s.push_str(&args.join(", "));
                    s.push(')');
                }
                s
            }
        }
    }
}

/// Parses an epilogue string; errors name the offending step.
pub fn parse_epilogue(text: &str) -> Result<Vec<Step>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(vec![]);
    }
    text.split(';').map(|s| parse_step(s.trim())).collect()
}

fn parse_step(s: &str) -> Result<Step, String> {
    let (name, args) = match s.find('(') {
        Some(i) if s.ends_with(')') => (s[..i].trim(), Some(&s[i + 1..s.len() - 1])),
        Some(_) => return Err(format!("epilogue step `{s}` must end with `)`")),
        None => (s, None),
    };
    let op = |n: &str| Opcode::from_name(&format!("core.{n}"));
    if UNARY.contains(&name) {
        let opcode = op(name).ok_or_else(|| format!("unknown epilogue step `{name}`"))?;
        let info = opcode.info();
        let mut attrs = Attrs::new();
        if let Some(args) = args {
            let args: Vec<&str> = args.split(',').map(str::trim).collect();
            if args.len() != info.attrs.len() {
                return Err(format!(
                    "epilogue step `{name}` takes {} arguments, found {}",
                    info.attrs.len(),
                    args.len()
                ));
            }
            for (a, text) in info.attrs.iter().zip(args) {
                if text == "_" {
                    if !matches!(a.default, AttrDefault::Optional) {
                        return Err(format!(
                            "epilogue step `{name}`: `{}` cannot be absent",
                            a.name
                        ));
                    }
                    continue;
                }
                let v = match a.kind {
                    AttrKind::Float => Attr::Float(text.parse::<f64>().map_err(|_| {
                        format!("epilogue step `{name}`: `{text}` is not a number")
                    })?),
                    AttrKind::Str => Attr::Str(text.to_string()),
                    k => {
                        return Err(format!(
                            "epilogue step `{name}`: {} arguments are not supported",
                            k.name()
                        ));
                    }
                };
                attrs.set(a.name, v);
            }
        }
        return Step::unary(opcode, attrs).ok_or_else(|| format!("bad epilogue step `{s}`"));
    }
    if args.is_some() {
        return Err(format!("epilogue step `{name}` takes no arguments"));
    }
    let (base, reversed) = match name.strip_prefix('r') {
        Some(b) if BINARY.contains(&b) && !BINARY.contains(&name) => (b, true),
        _ => (name, false),
    };
    if BINARY.contains(&base) {
        let opcode = op(base).ok_or_else(|| format!("unknown epilogue step `{name}`"))?;
        return Ok(Step::Binary { opcode, reversed });
    }
    Err(format!(
        "unknown epilogue step `{name}` (expected one of: {}, {}, or an `r` form of a binary step)",
        UNARY.join(", "),
        BINARY.join(", ")
    ))
}

/// The canonical text of an epilogue (what `parse_epilogue` reads back).
pub fn print_epilogue(steps: &[Step]) -> String {
    steps.iter().map(Step::text).collect::<Vec<_>>().join("; ")
}

/// How many extra operands an epilogue takes.
pub fn operand_count(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.takes_operand()).count()
}

/// What a fused op computes before its epilogue.
#[derive(Copy, Clone, PartialEq, Debug)]
enum Core {
    /// `core.fused_pointwise`: the first operand itself.
    None,
    Conv2d,
    Gemm,
    MatMul,
    /// `core.attention`: `matmul(q, k^T)`, score steps, softmax, `matmul(., v)`.
    Attention,
}

/// The core op with its attributes (taken from the fused op's own) and how
/// many leading operands it takes.
fn core_of(
    core: Core,
    attrs: &Attrs,
    n_operands: usize,
) -> Result<Option<(Opcode, Attrs, usize)>, String> {
    let copy = |names: &[&str]| {
        let mut a = Attrs::new();
        for n in names {
            if let Some(v) = attrs.get(n) {
                a.set(n, v.clone());
            }
        }
        a
    };
    let bias = matches!(attrs.get("bias"), Some(Attr::Bool(true)));
    let core = match core {
        Core::Conv2d => Some((
            Opcode::Conv2d,
            copy(&["strides", "pads", "dilations", "groups"]),
            2 + bias as usize,
        )),
        Core::Gemm => Some((
            Opcode::Gemm,
            copy(&["alpha", "beta", "trans_a", "trans_b"]),
            2 + bias as usize,
        )),
        Core::MatMul | Core::Attention => Some((Opcode::MatMul, Attrs::new(), 2)),
        Core::None => None,
    };
    if let Some((_, _, n)) = &core
        && n_operands < *n
    {
        return Err(format!(
            "expected at least {n} operands, found {n_operands}"
        ));
    }
    Ok(core)
}

impl Core {
    fn of(opcode: Opcode) -> Option<Core> {
        Some(match opcode {
            Opcode::FusedPointwise => Core::None,
            Opcode::FusedConv2d => Core::Conv2d,
            Opcode::FusedGemm => Core::Gemm,
            Opcode::FusedMatMul => Core::MatMul,
            Opcode::Attention => Core::Attention,
            _ => return None,
        })
    }
}

/// Whether `opcode` carries an epilogue region (`Trait::Epilogue`).
pub fn takes_epilogue(opcode: Opcode) -> bool {
    opcode.info().has_trait(Trait::Epilogue)
}

/// What an epilogue region of `opcode` with these operands and (complete)
/// attributes receives: the type of its argument 0 (the core's result, the
/// scores of attention, the first operand of `fused_pointwise`) and the index
/// of the first operand its other arguments stand for.
pub fn region_inputs(
    opcode: Opcode,
    operands: &[TensorType],
    attrs: &Attrs,
) -> Result<(TensorType, usize), String> {
    let core = Core::of(opcode).ok_or_else(|| format!("{} takes no epilogue", opcode.name()))?;
    match core_of(core, attrs, operands.len())? {
        None => Ok((
            operands.first().ok_or("expected at least one operand")?.clone(),
            1,
        )),
        Some((op, core_attrs, n)) => {
            let core_attrs = op.info().complete_attrs(core_attrs)?;
            let t = infer_op(op, &operands[..n], &core_attrs, None)?
                .pop()
                .ok_or("the core op has no result")?;
            let first = if core == Core::Attention { n + 1 } else { n };
            if operands.len() < first {
                return Err("attention takes q, k^T and v".to_string());
            }
            Ok((t, first))
        }
    }
}

/// The steps of `op`'s epilogue region (none without a region), its chain
/// structure checked; [`check_epilogue`] also checks its types.
pub fn epilogue(f: &Func, op: &OpData) -> Result<Vec<Step>, String> {
    decode(f, op)
        .map(|steps| steps.into_iter().map(|(s, _)| s).collect())
        .map_err(|(m, _)| m)
}

/// The decoded steps with the region op each came from; errors carry the
/// location of the offending region op (or of `op`).
fn decode(f: &Func, op: &OpData) -> Result<Vec<(Step, OpId)>, (String, Location)> {
    let here = |m: String| (m, op.loc.clone());
    let region = match op.regions.as_slice() {
        [] => return Ok(vec![]),
        [r] => r,
        rs => {
            return Err(here(format!(
                "takes one region (its epilogue), found {}",
                rs.len()
            )));
        }
    };
    let (&first, extras) = region.args.split_first().ok_or_else(|| {
        here("the epilogue region takes the core's result as its first argument".to_string())
    })?;
    let name = |v: ValueId| format!("%{}", f.name_of(v));
    let mut acc = first;
    let mut next = 0usize;
    let mut steps = Vec::with_capacity(region.ops.len());
    for &id in &region.ops {
        let o = &f.ops[id];
        let at = |m: String| (m, o.loc.clone());
        let mnemonic = o.opcode.name();
        if !o.regions.is_empty() {
            return Err(at(format!("{mnemonic}: an epilogue op takes no regions")));
        }
        if o.results.len() != 1 {
            return Err(at(format!("{mnemonic}: an epilogue op has one result")));
        }
        let step = match o.operands.as_slice() {
            [a] if *a == acc => Step::unary(o.opcode, o.attrs.clone()).ok_or_else(|| {
                at(format!(
                    "{mnemonic} cannot be an epilogue step (unary steps: {})",
                    UNARY.join(", ")
                ))
            })?,
            [a, b] => {
                let extra = extras.get(next).copied();
                let reversed = match (extra, *a == acc, *b == acc) {
                    (Some(e), true, false) if *b == e => false,
                    (Some(e), false, true) if *a == e => true,
                    _ => {
                        let want = extra.map_or("no argument is left".to_string(), |e| {
                            format!("the next argument is {}", name(e))
                        });
                        return Err(at(format!(
                            "{mnemonic}: a binary epilogue op takes the running value {} and the next unused region argument ({want})",
                            name(acc)
                        )));
                    }
                };
                next += 1;
                Step::binary(o.opcode, reversed).ok_or_else(|| {
                    at(format!(
                        "{mnemonic} cannot be an epilogue step (binary steps: {})",
                        BINARY.join(", ")
                    ))
                })?
            }
            _ => {
                return Err(at(format!(
                    "{mnemonic}: an epilogue op takes the running value {} (and, if binary, the next region argument)",
                    name(acc)
                )));
            }
        };
        steps.push((step, id));
        acc = o.results[0];
    }
    if let Some(&unused) = extras.get(next) {
        return Err(here(format!(
            "epilogue region argument {} is not used (each argument after the first is taken by one binary op, in order)",
            name(unused)
        )));
    }
    if region.terminator != [acc] {
        return Err((
            format!("the epilogue region must yield its last value {}", name(acc)),
            region.terminator_loc.clone(),
        ));
    }
    Ok(steps)
}

/// The epilogue's steps, with the region checked against the op: one
/// argument per operand after the core's, argument and result types as the
/// operands and each step's inference give them. The verifier runs this.
pub fn check_epilogue(f: &Func, op: &OpData) -> Result<Vec<Step>, (String, Location)> {
    let steps = decode(f, op)?;
    let Some(region) = op.regions.first() else {
        return Ok(vec![]);
    };
    let here = |m: String| (m, op.loc.clone());
    let operands: Vec<TensorType> = op.operands.iter().map(|v| f.ty(*v).clone()).collect();
    let (mut acc, first) = region_inputs(op.opcode, &operands, &op.attrs).map_err(here)?;
    let want_args = 1 + operands.len() - first.min(operands.len());
    if region.args.len() != want_args {
        return Err(here(format!(
            "the epilogue region takes {want_args} arguments (the core's result, then one per operand after the core's), found {}",
            region.args.len()
        )));
    }
    for (i, &a) in region.args.iter().enumerate() {
        let want = if i == 0 { &acc } else { &operands[first + i - 1] };
        if f.ty(a) != want {
            return Err((
                format!("epilogue region argument %{} must be {want}, found {}", f.name_of(a), f.ty(a)),
                f.values[a].loc.clone(),
            ));
        }
    }
    let mut extra = region.args[1..].iter();
    for (step, id) in &steps {
        let o = &f.ops[*id];
        let types: Vec<TensorType> = match step {
            Step::Unary { .. } => vec![acc.clone()],
            Step::Binary { reversed, .. } => {
                let e = f.ty(*extra.next().expect("decode matched each binary op to an argument")).clone();
                if *reversed { vec![e, acc.clone()] } else { vec![acc.clone(), e] }
            }
        };
        let attrs = match step {
            Step::Unary { attrs, .. } => attrs.clone(),
            Step::Binary { .. } => Attrs::new(),
        };
        let out = infer_op(o.opcode, &types, &attrs, None)
            .map_err(|m| (m, o.loc.clone()))?
            .pop()
            .ok_or_else(|| ("a step has no result".to_string(), o.loc.clone()))?;
        let got = f.ty(o.results[0]);
        if got != &out {
            return Err((
                format!("{}: result type must be {out}, found {got}", o.opcode.name()),
                o.loc.clone(),
            ));
        }
        acc = out;
    }
    Ok(steps.into_iter().map(|(s, _)| s).collect())
}

/// Replaces `op`'s epilogue region with one computing `steps` (no region
/// when there are none). New values are named after the op's result.
pub fn set_epilogue(f: &mut Func, op: OpId, steps: &[Step]) -> Result<(), String> {
    if steps.is_empty() {
        f.ops[op].regions.clear();
        return Ok(());
    }
    let data = &f.ops[op];
    let (opcode, loc) = (data.opcode, data.loc.clone());
    let operands: Vec<TensorType> = data.operands.iter().map(|v| f.ty(*v).clone()).collect();
    let base = data
        .results
        .first()
        .map_or("epi".to_string(), |&r| f.name_of(r).to_string());
    let (acc_ty, first) = region_inputs(opcode, &operands, &data.attrs)?;
    let need = operand_count(steps);
    if operands.len() - first.min(operands.len()) != need {
        return Err(format!(
            "{}: the epilogue takes {need} extra operands, found {}",
            opcode.name(),
            operands.len().saturating_sub(first)
        ));
    }
    let mut block = Block { terminator_loc: loc.clone(), ..Block::default() };
    let arg_types = std::iter::once(acc_ty).chain(operands[first..].iter().cloned());
    for (index, ty) in arg_types.enumerate() {
        let hint = if index == 0 { format!("{base}.acc") } else { format!("{base}.e{}", index - 1) };
        let name = f.fresh_name(&hint);
        let v = f.values.push(ValueData {
            name,
            ty,
            def: ValueDef::RegionArg { op, region: 0, index },
            loc: loc.clone(),
        });
        block.args.push(v);
    }
    let mut acc = block.args[0];
    let mut extra = block.args[1..].to_vec().into_iter();
    for step in steps {
        let (opcode, attrs, operands) = match step {
            Step::Unary { opcode, attrs } => (*opcode, attrs.clone(), vec![acc]),
            Step::Binary { opcode, reversed } => {
                let e = extra.next().ok_or("the epilogue takes more operands than are given")?;
                (*opcode, Attrs::new(), if *reversed { vec![e, acc] } else { vec![acc, e] })
            }
        };
        let types: Vec<TensorType> = operands.iter().map(|v| f.ty(*v).clone()).collect();
        let ty = infer_op(opcode, &types, &attrs, None)?
            .pop()
            .ok_or("a step has no result")?;
        let id = f.ops.push(OpData {
            opcode,
            operands,
            results: vec![],
            attrs,
            regions: vec![],
            loc: loc.clone(),
        });
        let name = f.fresh_name(&format!("{base}.{}", opcode.name().trim_start_matches("core.")));
        let v = f.values.push(ValueData { name, ty, def: ValueDef::Result(id, 0), loc: loc.clone() });
        f.ops[id].results.push(v);
        block.ops.push(id);
        acc = v;
    }
    block.terminator = vec![acc];
    f.ops[op].regions = vec![block];
    Ok(())
}

pub fn infer_fused_pointwise(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    infer_fused(cx, Core::None)
}
pub fn infer_fused_conv2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    infer_fused(cx, Core::Conv2d)
}
pub fn infer_fused_gemm(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    infer_fused(cx, Core::Gemm)
}
pub fn infer_fused_matmul(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    infer_fused(cx, Core::MatMul)
}
pub fn infer_attention(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    infer_fused(cx, Core::Attention)
}
pub fn eval_fused_pointwise(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    eval_fused(cx, Core::None)
}
pub fn eval_fused_conv2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    eval_fused(cx, Core::Conv2d)
}
pub fn eval_fused_gemm(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    eval_fused(cx, Core::Gemm)
}
pub fn eval_fused_matmul(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    eval_fused(cx, Core::MatMul)
}
pub fn eval_attention(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    eval_fused(cx, Core::Attention)
}

/// The types after each step, starting from `acc`.
fn infer_steps(
    steps: &[Step],
    mut acc: TensorType,
    extra: &[TensorType],
) -> Result<TensorType, String> {
    let mut next = extra.iter();
    for s in steps {
        acc = match s {
            Step::Unary { opcode, attrs } => {
                infer_op(*opcode, std::slice::from_ref(&acc), attrs, None)?
            }
            Step::Binary { opcode, reversed } => {
                let e = next
                    .next()
                    .ok_or("the epilogue takes more operands than are given")?
                    .clone();
                let pair = if *reversed { [e, acc] } else { [acc, e] };
                infer_op(*opcode, &pair, &Attrs::new(), None)?
            }
        }
        .pop()
        .ok_or("a step has no result")?;
    }
    Ok(acc)
}

fn eval_steps(
    steps: &[Step],
    mut acc: Tensor,
    extra: &[&Tensor],
    cx: &EvalCx,
) -> Result<Tensor, String> {
    let mut next = extra.iter();
    for s in steps {
        let (opcode, attrs, inputs): (Opcode, Attrs, Vec<&Tensor>) = match s {
            Step::Unary { opcode, attrs } => (*opcode, attrs.clone(), vec![&acc]),
            Step::Binary { opcode, reversed } => {
                let e = *next
                    .next()
                    .ok_or("the epilogue takes more operands than are given")?;
                (
                    *opcode,
                    Attrs::new(),
                    if *reversed {
                        vec![e, &acc]
                    } else {
                        vec![&acc, e]
                    },
                )
            }
        };
        let types: Vec<TensorType> = inputs.iter().map(|t| t.ty.clone()).collect();
        let ty = infer_op(opcode, &types, &attrs, None)?;
        let out = eval_op(opcode, &inputs, &attrs, &ty, cx.weights)?
            .pop()
            .ok_or("a step has no result")?;
        acc = out;
    }
    Ok(acc)
}

/// `infer` of every fused op: the core's inference, then each step's.
fn infer_fused(cx: &InferCx, core: Core) -> Result<Vec<TensorType>, String> {
    let steps = cx.epilogue;
    let (acc, extra) = match core_of(core, cx.attrs, cx.operands.len())? {
        None => {
            let first = cx
                .operand(0)
                .ok_or("expected at least one operand")?
                .clone();
            (first, &cx.operands[1..])
        }
        Some((opcode, attrs, n)) => {
            let attrs = opcode.info().complete_attrs(attrs)?;
            let mut t = infer_op(opcode, &cx.operands[..n], &attrs, None)?
                .pop()
                .ok_or("the core op has no result")?;
            if core == Core::Attention {
                t = attention_tail(cx.operands, n, t, steps)?;
                return Ok(vec![t]);
            }
            (t, &cx.operands[n..])
        }
    };
    let need = operand_count(steps);
    if extra.len() != need {
        return Err(format!(
            "the epilogue takes {need} extra operands, found {}",
            extra.len()
        ));
    }
    Ok(vec![infer_steps(steps, acc, extra)?])
}

/// Attention after its first matmul: score steps, softmax over the last
/// dimension, matmul with `v` (operand 2); the score steps' operands follow
/// `v`.
fn attention_tail(
    operands: &[TensorType],
    n: usize,
    scores: TensorType,
    steps: &[Step],
) -> Result<TensorType, String> {
    let v = operands.get(n).ok_or("attention takes q, k^T and v")?;
    let extra = &operands[n + 1..];
    let need = operand_count(steps);
    if extra.len() != need {
        return Err(format!(
            "the score steps take {need} extra operands, found {}",
            extra.len()
        ));
    }
    let s = infer_steps(steps, scores, extra)?;
    let p = infer_op(Opcode::Softmax, &[s], &softmax_attrs(), None)?
        .pop()
        .ok_or("softmax has no result")?;
    infer_op(Opcode::MatMul, &[p, v.clone()], &Attrs::new(), None)?
        .pop()
        .ok_or("matmul has no result".to_string())
}

fn softmax_attrs() -> Attrs {
    Attrs::new().with("axis", Attr::Int(-1))
}

/// `eval` of every fused op: the core's evaluation, then each step's.
fn eval_fused(cx: &EvalCx, core: Core) -> Result<Vec<Tensor>, String> {
    let steps = cx.epilogue;
    let out = match core_of(core, cx.attrs, cx.inputs.len())? {
        None => {
            let first = cx.input(0).ok_or("expected at least one operand")?.clone();
            eval_steps(steps, first, &cx.inputs[1..], cx)?
        }
        Some((opcode, attrs, n)) => {
            let attrs = opcode.info().complete_attrs(attrs)?;
            let types: Vec<TensorType> = cx.inputs[..n].iter().map(|t| t.ty.clone()).collect();
            let ty = infer_op(opcode, &types, &attrs, None)?;
            let first = eval_op(opcode, &cx.inputs[..n], &attrs, &ty, cx.weights)?
                .pop()
                .ok_or("the core op has no result")?;
            if core == Core::Attention {
                let v = cx.input(n).ok_or("attention takes q, k^T and v")?;
                let s = eval_steps(steps, first, &cx.inputs[n + 1..], cx)?;
                let sm = softmax_attrs();
                let pty = infer_op(Opcode::Softmax, std::slice::from_ref(&s.ty), &sm, None)?;
                let p = eval_op(Opcode::Softmax, &[&s], &sm, &pty, cx.weights)?
                    .pop()
                    .ok_or("softmax has no result")?;
                let oty = infer_op(
                    Opcode::MatMul,
                    &[p.ty.clone(), v.ty.clone()],
                    &Attrs::new(),
                    None,
                )?;
                eval_op(Opcode::MatMul, &[&p, v], &Attrs::new(), &oty, cx.weights)?
                    .pop()
                    .ok_or("matmul has no result")?
            } else {
                eval_steps(steps, first, &cx.inputs[n..], cx)?
            }
        }
    };
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::Func;
    use crate::types::Scalar;
    use crate::{Location, Module};

    #[test]
    fn epilogues_round_trip_through_text() {
        for text in [
            "add; relu",
            "clip(0.0, 6.0); rsub; gelu(tanh)",
            "leaky_relu(0.1); clip(_, 6.0)",
            "hard_sigmoid(0.2, 0.6)",
            "",
        ] {
            assert_eq!(print_epilogue(&parse_epilogue(text).unwrap()), text);
        }
        // defaults print without arguments
        assert_eq!(
            print_epilogue(&parse_epilogue("gelu(none); leaky_relu(0.01)").unwrap()),
            "gelu; leaky_relu"
        );
        assert!(
            parse_epilogue("frobnicate")
                .unwrap_err()
                .contains("unknown epilogue step `frobnicate`")
        );
        assert!(
            parse_epilogue("clip(1.0)")
                .unwrap_err()
                .contains("takes 2 arguments, found 1")
        );
        assert!(
            parse_epilogue("relu(x")
                .unwrap_err()
                .contains("must end with")
        );
        assert!(
            parse_epilogue("add(1.0)")
                .unwrap_err()
                .contains("takes no arguments")
        );
    }

    fn f32t(shape: &[usize]) -> TensorType {
        TensorType::new(shape.to_vec(), Scalar::F32)
    }

    const REGION_FORM: &str = "func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %z: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %f = core.fused_pointwise %x, %y, %z ({
  ^bb0(%f.acc: tensor<2x3xf32>, %f.e0: tensor<3xf32>, %f.e1: tensor<2x3xf32>):
    %f.add = core.add %f.acc, %f.e0 : tensor<2x3xf32>
    %f.relu = core.relu %f.add : tensor<2x3xf32>
    %f.sub = core.sub %f.e1, %f.relu : tensor<2x3xf32>
    yield %f.sub : tensor<2x3xf32>
  }) : tensor<2x3xf32>
  return %f : tensor<2x3xf32>
}
";

    /// fused_pointwise(x, y, z) with `add; relu; rsub` equals
    /// z - relu(x + y), bit for bit; the old string form is read and
    /// becomes the same region, which prints and re-parses unchanged.
    #[test]
    fn fused_pointwise_means_its_region() {
        let legacy = "func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %z: tensor<2x3xf32>) -> tensor<2x3xf32> {\n  %f = core.fused_pointwise %x, %y, %z {epilogue = \"add; relu; rsub\"} : tensor<2x3xf32>\n  return %f : tensor<2x3xf32>\n}\n";
        let (m, d) = crate::parse_and_verify(legacy);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(crate::print::print_module(&m), REGION_FORM);
        let (m2, d) = crate::parse_and_verify(REGION_FORM);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(crate::print::print_module(&m2), REGION_FORM);
        let f = &m2.funcs[0];
        let op = &f.ops[f.body.ops[0]];
        assert_eq!(print_epilogue(&epilogue(f, op).unwrap()), "add; relu; rsub");
        let x = Tensor::from_f64(f32t(&[2, 3]), vec![1.0, -2.0, 0.1, 4.0, -0.5, 3.0]);
        let y = Tensor::from_f64(f32t(&[3]), vec![0.5, 0.5, 0.2]);
        let z = Tensor::from_f64(f32t(&[2, 3]), vec![10.0; 6]);
        let out = crate::interp::run(f, vec![x, y, z], &crate::interp::NoWeights).unwrap();
        let want: Vec<f64> = [1.5f32, 0.0, 0.1f32 + 0.2f32, 4.5, 0.0, 3.2]
            .iter()
            .map(|v| (10.0f32 - v.max(0.0)) as f64)
            .collect();
        assert_eq!(out[0].to_f64(), want);
    }

    /// Each way a region can fail to be an epilogue gets its own message at
    /// the op that breaks it.
    #[test]
    fn malformed_epilogue_regions_are_rejected() {
        let cases: &[(&str, &str, &str)] = &[
            ("%f.sub = core.sub %f.e1, %f.relu", "%f.sub = core.sub %f.e1, %f.acc", "takes the running value %f.relu"),
            ("%f.relu = core.relu %f.add", "%f.relu = core.softmax %f.add", "cannot be an epilogue step"),
            ("%f.add = core.add %f.acc, %f.e0", "%f.add = core.add %f.acc, %f.e1", "the next argument is %f.e0"),
            ("yield %f.sub", "yield %f.relu", "must yield its last value %f.sub"),
            ("%f.e0: tensor<3xf32>", "%f.e0: tensor<2x3xf32>", "argument %f.e0 must be tensor<3xf32>"),
            ("%f.relu = core.relu %f.add : tensor<2x3xf32>", "%f.relu = core.relu %f.add : tensor<2x3xf16>", "core.relu: result type must be tensor<2x3xf32>"),
        ];
        for (from, to, want) in cases {
            assert!(REGION_FORM.contains(from), "{from}");
            let src = REGION_FORM.replacen(from, to, 1);
            let (_, d) = crate::parse_and_verify(&src);
            let messages: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
            assert!(messages.iter().any(|m| m.contains(want)), "{to}: {messages:?}");
            assert!(d.iter().all(|d| d.loc.span.is_some()), "{to}: located");
        }
        // an unused argument
        let src = REGION_FORM.replacen("%f.sub = core.sub %f.e1, %f.relu", "%f.sub = core.neg %f.relu", 1);
        let (_, d) = crate::parse_and_verify(&src);
        assert!(d.iter().any(|d| d.message.contains("argument %f.e1 is not used")), "{d:?}");
        // both forms at once
        let src = REGION_FORM.replacen("%x, %y, %z ({", "%x, %y, %z {epilogue = \"add; relu; rsub\"} ({", 1);
        let (_, d) = crate::parse_and_verify(&src);
        assert!(d.iter().any(|d| d.message.contains("both as a region and as the string")), "{d:?}");
        // regions on an op that takes none
        let src = "func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = core.relu %x ({\n  ^bb0(%a: tensor<4xf32>):\n    yield %a : tensor<4xf32>\n  }) : tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n";
        let (_, d) = crate::parse_and_verify(src);
        assert!(d.iter().any(|d| d.message.contains("core.relu: this op takes no regions")), "{d:?}");
    }

    #[test]
    fn operand_counts_are_checked() {
        let mut f = Func::new("main");
        let x = f.add_param("x", f32t(&[1, 2, 4, 4]), Location::default());
        let w = f.add_param("w", f32t(&[3, 2, 1, 1]), Location::default());
        let steps = parse_epilogue("add; relu").unwrap();
        let e = f
            .push_op_with_epilogue(Opcode::FusedConv2d, &[x, w], Attrs::new(), None, &steps, "y", Location::default())
            .unwrap_err();
        assert!(e.message.contains("takes 1 extra operands, found 0"), "{}", e.message);
        let steps = parse_epilogue("relu").unwrap();
        let y = f
            .push_op_with_epilogue(Opcode::FusedConv2d, &[x, w], Attrs::new(), None, &steps, "y", Location::default())
            .unwrap();
        assert_eq!(f.ty(y[0]), &f32t(&[1, 3, 4, 4]));
        let op = f.def_op(y[0]).unwrap();
        assert_eq!(f.ops[op].regions.len(), 1);
        assert_eq!(epilogue(&f, &f.ops[op]).unwrap(), steps);
        f.set_return(y);
        let mut m = Module::default();
        m.funcs.push(f);
        assert!(crate::verify::verify_module(&m).is_empty());
        let text = crate::print::print_module(&m);
        assert!(text.contains("%y.relu = core.relu %y.acc : tensor<1x3x4x4xf32>"), "{text}");
    }
}
