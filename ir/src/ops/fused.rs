//! Fused ops: a core op (conv2d, matmul, gemm, attention, or nothing for
//! `core.fused_pointwise`) followed by an ordered list of pointwise steps,
//! the *epilogue*, written as one string attribute:
//! `epilogue = "add; relu; clip(0.0, 6.0)"`.
//!
//! Step syntax: a step is the mnemonic of a pointwise op without `core.`,
//! with the op's attributes as arguments in table order when any differs
//! from its default (`leaky_relu(0.1)`, `clip(0.0, _)` where `_` is an absent
//! bound, `gelu(tanh)`). Binary steps (`add`, `sub`, `mul`, `div`, `max`,
//! `min`, `pow`, `prelu`) take the next unused extra operand of the op as
//! their right-hand side; the `r` forms (`rsub`, `rdiv`, ...) take it as the
//! left-hand side. Extra operands are the op's operands after the core's.
//!
//! Invariant (what backends and the `fuse` rules rely on): a fused op means
//! exactly its unfused graph. `infer` and `eval` run the core op's hooks and
//! then each step's own hooks on the intermediate types, so every step
//! rounds to its element type as the separate op would, and a fused op is
//! bit-identical to the ops it replaces in the interpreter.

use crate::attr::{Attr, AttrDefault, AttrKind, Attrs};
use crate::interp::eval_op;
use crate::ops::{EvalCx, InferCx, Opcode};
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

fn epilogue_of(attrs: &Attrs) -> Result<Vec<Step>, String> {
    match attrs.get("epilogue") {
        Some(Attr::Str(s)) => parse_epilogue(s),
        Some(a) => Err(format!("attribute `epilogue` must be a string, found {a}")),
        None => Ok(vec![]),
    }
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
    let steps = epilogue_of(cx.attrs)?;
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
                t = attention_tail(cx.operands, n, t, &steps)?;
                return Ok(vec![t]);
            }
            (t, &cx.operands[n..])
        }
    };
    let need = operand_count(&steps);
    if extra.len() != need {
        return Err(format!(
            "the epilogue takes {need} extra operands, found {}",
            extra.len()
        ));
    }
    Ok(vec![infer_steps(&steps, acc, extra)?])
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
    let steps = epilogue_of(cx.attrs)?;
    let out = match core_of(core, cx.attrs, cx.inputs.len())? {
        None => {
            let first = cx.input(0).ok_or("expected at least one operand")?.clone();
            eval_steps(&steps, first, &cx.inputs[1..], cx)?
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
                let s = eval_steps(&steps, first, &cx.inputs[n + 1..], cx)?;
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
                eval_steps(&steps, first, &cx.inputs[n..], cx)?
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

    /// fused_pointwise(x, y){"add; relu; rsub"} equals relu(x + y) then
    /// z - that, bit for bit, and the text round-trips.
    #[test]
    fn fused_pointwise_means_its_steps() {
        let src = "func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %z: tensor<2x3xf32>) -> tensor<2x3xf32> {\n  %f = core.fused_pointwise %x, %y, %z {epilogue = \"add; relu; rsub\"} : tensor<2x3xf32>\n  return %f : tensor<2x3xf32>\n}\n";
        let (m, d) = crate::parse_and_verify(src);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(crate::print::print_module(&m), src);
        let x = Tensor::from_f64(f32t(&[2, 3]), vec![1.0, -2.0, 0.1, 4.0, -0.5, 3.0]);
        let y = Tensor::from_f64(f32t(&[3]), vec![0.5, 0.5, 0.2]);
        let z = Tensor::from_f64(f32t(&[2, 3]), vec![10.0; 6]);
        let out =
            crate::interp::run(&m.funcs[0], vec![x, y, z], &crate::interp::NoWeights).unwrap();
        let want: Vec<f64> = [1.5f32, 0.0, 0.1f32 + 0.2f32, 4.5, 0.0, 3.2]
            .iter()
            .map(|v| (10.0f32 - v.max(0.0)) as f64)
            .collect();
        assert_eq!(out[0].to_f64(), want);
    }

    #[test]
    fn operand_counts_are_checked() {
        let mut f = Func::new("main");
        let x = f.add_param("x", f32t(&[1, 2, 4, 4]), Location::default());
        let w = f.add_param("w", f32t(&[3, 2, 1, 1]), Location::default());
        let attrs = Attrs::new().with("epilogue", Attr::Str("add; relu".into()));
        let e = f
            .push_op(
                Opcode::FusedConv2d,
                &[x, w],
                attrs,
                None,
                "y",
                Location::default(),
            )
            .unwrap_err();
        assert!(
            e.message.contains("takes 1 extra operands, found 0"),
            "{}",
            e.message
        );
        let attrs = Attrs::new().with("epilogue", Attr::Str("relu".into()));
        let y = f
            .push_op(
                Opcode::FusedConv2d,
                &[x, w],
                attrs,
                None,
                "y",
                Location::default(),
            )
            .unwrap();
        assert_eq!(f.ty(y[0]), &f32t(&[1, 3, 4, 4]));
        f.set_return(y);
        let mut m = Module::default();
        m.funcs.push(f);
        assert!(crate::verify::verify_module(&m).is_empty());
    }
}
