//! `aoc export --format onnx`: a module's entry function as an ONNX model
//! (opset 17), so a pruned or sparsified model goes back to the training
//! framework for fine-tuning.
//!
//! Every constant becomes an initializer (a `#sparse.nm` weight
//! decompressed: ONNX has no 2:4 type), ops whose operands are all
//! constants are folded into initializers, quantized values travel as
//! QuantizeLinear/DequantizeLinear pairs (the Q/DQ form `aoc quantize`
//! writes) and `sparse.*` ops become the dense ops on their weight.
//!
//! Invariants: the model means what the interpreter computes (the tests run
//! it with ONNX Runtime against the interpreter); an op with no ONNX form
//! here is an error naming it and its location, never a partial model.

use std::collections::{HashMap, HashSet};

use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::interp::{WeightSource, eval_op};
use aoc_ir::module::{Func, Module, OpData, ValueId};
use aoc_ir::ops::kind::{Activation, Binary, Conv, Form, Movement, Norm, OpKind, Pointwise, Pool, Reduce, Unary};
use aoc_ir::types::{ElemType, QuantParams, QuantType, Scalar};
use aoc_ir::{Tensor, TensorType};
use prost::Message;

use super::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, attribute_type, data_type, tensor_shape_proto, type_proto,
};

/// The opset the exported model imports.
pub const OPSET: i64 = 17;

/// ONNX's data type of a storage scalar.
fn onnx_type(s: Scalar) -> Option<i32> {
    Some(match s {
        Scalar::F32 => data_type::FLOAT,
        Scalar::F64 => data_type::DOUBLE,
        Scalar::F16 => data_type::FLOAT16,
        Scalar::BF16 => data_type::BFLOAT16,
        Scalar::F8E4M3FN => data_type::FLOAT8E4M3FN,
        Scalar::F8E5M2 => data_type::FLOAT8E5M2,
        Scalar::I8 => data_type::INT8,
        Scalar::U8 => data_type::UINT8,
        Scalar::I16 => data_type::INT16,
        Scalar::U16 => data_type::UINT16,
        Scalar::I32 => data_type::INT32,
        Scalar::U32 => data_type::UINT32,
        Scalar::I64 => data_type::INT64,
        Scalar::U64 => data_type::UINT64,
        Scalar::I1 => data_type::BOOL,
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

fn attr_i(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(attribute_type::INT), i: Some(i), ..Default::default() }
}
fn attr_f(name: &str, f: f64) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(attribute_type::FLOAT), f: Some(f as f32), ..Default::default() }
}
fn attr_is(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(attribute_type::INTS), ints: v.to_vec(), ..Default::default() }
}

fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(attribute_type::STRING), s: Some(v.as_bytes().to_vec()), ..Default::default() }
}

/// A string attribute (the op table's default when the model omits it:
/// the attributes are completed).
fn string(attrs: &Attrs, name: &str) -> String {
    match attrs.get(name) {
        Some(Attr::Str(s)) => s.clone(),
        _ => String::new(),
    }
}
fn floats(attrs: &Attrs, name: &str) -> Option<Vec<f64>> {
    match attrs.get(name) {
        Some(Attr::Floats(v)) => Some(v.clone()),
        _ => None,
    }
}
fn ints(attrs: &Attrs, name: &str) -> Vec<i64> {
    match attrs.get(name) {
        Some(Attr::Ints(v)) => v.clone(),
        _ => vec![],
    }
}
fn int(attrs: &Attrs, name: &str, default: i64) -> i64 {
    match attrs.get(name) {
        Some(Attr::Int(i)) => *i,
        _ => default,
    }
}
fn float(attrs: &Attrs, name: &str) -> Option<f64> {
    match attrs.get(name) {
        Some(Attr::Float(f)) => Some(*f),
        Some(Attr::Int(i)) => Some(*i as f64),
        _ => None,
    }
}
fn boolean(attrs: &Attrs, name: &str) -> bool {
    matches!(attrs.get(name), Some(Attr::Bool(true)))
}

fn value_info(name: &str, t: &TensorType) -> Result<ValueInfoProto, String> {
    let s = t.elem.storage();
    let elem = onnx_type(s).ok_or_else(|| format!("ONNX has no element type for {s}"))?;
    let dim = t
        .shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension { value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)) })
        .collect();
    Ok(ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(elem), shape: Some(TensorShapeProto { dim }) })),
        }),
    })
}

/// A tensor as an initializer (its storage values, little-endian raw data).
fn tensor_proto(name: &str, t: &Tensor) -> Result<TensorProto, String> {
    let s = t.ty.elem.storage();
    let elem = onnx_type(s).ok_or_else(|| format!("ONNX has no element type for {s}"))?;
    Ok(TensorProto {
        dims: t.ty.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(elem),
        name: Some(name.to_string()),
        raw_data: Some(aoc_ir::bytes::encode(s, &t.data)),
        ..Default::default()
    })
}

struct Ex<'a> {
    func: &'a Func,
    weights: &'a dyn WeightSource,
    graph: GraphProto,
    names: HashMap<ValueId, String>,
    consts: HashMap<ValueId, Tensor>,
    taken: HashSet<String>,
}

impl Ex<'_> {
    fn fresh(&mut self, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut k = 1;
        while !self.taken.insert(name.clone()) {
            name = format!("{hint}_{k}");
            k += 1;
        }
        name
    }

    fn initializer(&mut self, hint: &str, t: &Tensor) -> Result<String, String> {
        let name = self.fresh(hint);
        self.graph.initializer.push(tensor_proto(&name, t)?);
        Ok(name)
    }

    fn node(&mut self, op_type: &str, inputs: Vec<String>, hint: &str, attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(hint);
        self.graph.node.push(NodeProto {
            input: inputs,
            output: vec![out.clone()],
            name: Some(format!("{out}.{op_type}")),
            op_type: Some(op_type.to_string()),
            attribute: attrs,
            ..Default::default()
        });
        out
    }

    fn f32_const(&mut self, hint: &str, shape: Vec<usize>, v: Vec<f64>) -> Result<String, String> {
        self.initializer(hint, &Tensor::from_f64(TensorType::new(shape, Scalar::F32), v))
    }

    fn i64_const(&mut self, hint: &str, v: &[i64]) -> Result<String, String> {
        self.initializer(hint, &Tensor::from_i64(TensorType::new(vec![v.len()], Scalar::I64), v.to_vec()))
    }

    /// Scale and zero-point initializers of a quantized type (and its axis).
    fn qparams(&mut self, hint: &str, q: &QuantType) -> Result<(String, String, Option<usize>), String> {
        let (scales, zps, axis) = match &q.params {
            QuantParams::PerTensor { scale, zero_point } => (vec![*scale], vec![*zero_point], None),
            QuantParams::PerAxis { axis, scales, zero_points } => (scales.clone(), zero_points.clone(), Some(*axis)),
        };
        let shape = if axis.is_some() { vec![scales.len()] } else { vec![] };
        let s = self.initializer(&format!("{hint}.scale"), &Tensor::from_f64(TensorType::new(shape.clone(), q.expressed), scales))?;
        let z = self.initializer(&format!("{hint}.zero_point"), &Tensor::from_i64(TensorType::new(shape, q.storage), zps))?;
        Ok((s, z, axis))
    }

    fn dequantize(&mut self, x: &str, q: &QuantType, hint: &str) -> Result<String, String> {
        let (s, z, axis) = self.qparams(hint, q)?;
        let attrs = axis.map(|a| vec![attr_i("axis", a as i64)]).unwrap_or_default();
        Ok(self.node("DequantizeLinear", vec![x.to_string(), s, z], hint, attrs))
    }

    fn quantize(&mut self, x: &str, q: &QuantType, hint: &str) -> Result<String, String> {
        let (s, z, axis) = self.qparams(hint, q)?;
        let attrs = axis.map(|a| vec![attr_i("axis", a as i64)]).unwrap_or_default();
        Ok(self.node("QuantizeLinear", vec![x.to_string(), s, z], hint, attrs))
    }

    /// Folds an op whose operands are all constants; Q/DQ ops stay, so
    /// quantized weights remain integer initializers behind a
    /// DequantizeLinear.
    fn fold(&mut self, op: &OpData) -> Result<bool, String> {
        if let OpKind::Pointwise(Pointwise::Quantize | Pointwise::Dequantize | Pointwise::Requantize) = op.opcode.kind() {
            return Ok(false);
        }
        let mut inputs = vec![];
        for v in &op.operands {
            match self.consts.get(v) {
                Some(t) => inputs.push(t.clone()),
                None => return Ok(false),
            }
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let tys: Vec<TensorType> = op.results.iter().map(|&r| self.func.ty(r).clone()).collect();
        let out = eval_op(op.opcode, &refs, &op.attrs, &tys, self.weights)?;
        for (&r, t) in op.results.iter().zip(out) {
            let name = self.initializer(self.func.name_of(r), &t)?;
            self.names.insert(r, name);
            self.consts.insert(r, t);
        }
        Ok(true)
    }

    fn op(&mut self, op: &OpData) -> Result<(), String> {
        if op.opcode.kind() == OpKind::Constant || self.fold(op)? {
            return Ok(());
        }
        let f = self.func;
        // With the op table's defaults, so none is repeated here.
        let a = &op.opcode.info().complete_attrs(op.attrs.clone())?;
        let r = op.results[0];
        let hint = f.name_of(r).to_string();
        let out_ty = f.ty(r).clone();
        let x: Vec<String> = op
            .operands
            .iter()
            .map(|v| self.names.get(v).cloned().ok_or_else(|| format!("operand %{} has no ONNX value", f.name_of(*v))))
            .collect::<Result<_, _>>()?;
        let unsupported = |what: &str| Err(format!("{} has no ONNX form in aoc export yet ({what})", op.opcode.name()));
        let name = match op.opcode.kind() {
            OpKind::Constant => return unsupported("a constant is an initializer"),
            OpKind::Recurrent(_) => return unsupported("recurrent layers are not exported yet"),
            OpKind::Control(_) => return unsupported("control flow is not exported yet"),
            OpKind::Unary(u) => {
                let t = match u {
                    Unary::Neg => "Neg",
                    Unary::Abs => "Abs",
                    Unary::Exp => "Exp",
                    Unary::Log => "Log",
                    Unary::Sqrt => "Sqrt",
                    Unary::Reciprocal => "Reciprocal",
                    Unary::Erf => "Erf",
                    Unary::Tanh => "Tanh",
                    Unary::Sigmoid => "Sigmoid",
                    Unary::Floor => "Floor",
                    Unary::Ceil => "Ceil",
                    Unary::RoundEven => "Round",
                    Unary::Relu => "Relu",
                    Unary::Sin => "Sin",
                    Unary::Cos => "Cos",
                    Unary::Rsqrt => {
                        let s = self.node("Sqrt", x.clone(), &format!("{hint}.sqrt"), vec![]);
                        let y = self.node("Reciprocal", vec![s], &hint, vec![]);
                        return self.define(r, y);
                    }
                    Unary::Trunc => return unsupported("trunc"),
                };
                self.node(t, x, &hint, vec![])
            }
            OpKind::Binary(b) => {
                let t = match b {
                    Binary::Add => "Add",
                    Binary::Sub => "Sub",
                    Binary::Mul => "Mul",
                    Binary::Div => "Div",
                    Binary::Max => "Max",
                    Binary::Min => "Min",
                    Binary::Pow => "Pow",
                    Binary::Equal => "Equal",
                    Binary::Less => "Less",
                    Binary::Greater => "Greater",
                };
                self.node(t, x, &hint, vec![])
            }
            OpKind::Activation(act) => match act {
                Activation::LeakyRelu => self.node("LeakyRelu", x, &hint, vec![attr_f("alpha", float(a, "alpha").unwrap_or(0.01))]),
                Activation::HardSigmoid => self.node(
                    "HardSigmoid",
                    x,
                    &hint,
                    vec![attr_f("alpha", float(a, "alpha").unwrap_or(0.2)), attr_f("beta", float(a, "beta").unwrap_or(0.5))],
                ),
                Activation::HardSwish => self.node("HardSwish", x, &hint, vec![]),
                Activation::Prelu => self.node("PRelu", x, &hint, vec![]),
                Activation::Silu => {
                    let s = self.node("Sigmoid", x.clone(), &format!("{hint}.sigmoid"), vec![]);
                    self.node("Mul", vec![x[0].clone(), s], &hint, vec![])
                }
                Activation::Clip => {
                    let lo = match float(a, "min") {
                        Some(v) => self.f32_const(&format!("{hint}.min"), vec![], vec![v])?,
                        None => String::new(),
                    };
                    let hi = match float(a, "max") {
                        Some(v) => self.f32_const(&format!("{hint}.max"), vec![], vec![v])?,
                        None => String::new(),
                    };
                    self.node("Clip", vec![x[0].clone(), lo, hi], &hint, vec![])
                }
                Activation::Gelu => {
                    // 0.5 · x · (1 + erf(x / √2)), or with `tanh`
                    // 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))); Gelu is opset 20.
                    let one = self.f32_const(&format!("{hint}.one"), vec![], vec![1.0])?;
                    let half = self.f32_const(&format!("{hint}.half"), vec![], vec![0.5])?;
                    let e = match string(a, "approximate").as_str() {
                        "none" => {
                            let c = self.f32_const(&format!("{hint}.rsqrt2"), vec![], vec![std::f64::consts::FRAC_1_SQRT_2])?;
                            let s = self.node("Mul", vec![x[0].clone(), c], &format!("{hint}.s"), vec![]);
                            self.node("Erf", vec![s], &format!("{hint}.erf"), vec![])
                        }
                        "tanh" => {
                            let k = self.f32_const(&format!("{hint}.k"), vec![], vec![0.044715])?;
                            let c = self.f32_const(&format!("{hint}.c"), vec![], vec![(2.0 / std::f64::consts::PI).sqrt()])?;
                            let x2 = self.node("Mul", vec![x[0].clone(), x[0].clone()], &format!("{hint}.x2"), vec![]);
                            let x3 = self.node("Mul", vec![x2, x[0].clone()], &format!("{hint}.x3"), vec![]);
                            let kx3 = self.node("Mul", vec![x3, k], &format!("{hint}.kx3"), vec![]);
                            let inner = self.node("Add", vec![x[0].clone(), kx3], &format!("{hint}.inner"), vec![]);
                            let s = self.node("Mul", vec![inner, c], &format!("{hint}.s"), vec![]);
                            self.node("Tanh", vec![s], &format!("{hint}.tanh"), vec![])
                        }
                        other => return unsupported(&format!("approximate = {other}")),
                    };
                    let p = self.node("Add", vec![e, one], &format!("{hint}.p"), vec![]);
                    let h = self.node("Mul", vec![x[0].clone(), half], &format!("{hint}.h"), vec![]);
                    self.node("Mul", vec![h, p], &hint, vec![])
                }
            },
            OpKind::Pointwise(p) => match p {
                Pointwise::Cast => {
                    let to = onnx_type(out_ty.elem.storage()).ok_or("cast to a type ONNX lacks")?;
                    self.node("Cast", x, &hint, vec![attr_i("to", to as i64)])
                }
                // ONNX Runtime has no boolean Where: (c ∧ a) ∨ (¬c ∧ b).
                Pointwise::Where if out_ty.elem.storage() == Scalar::I1 => {
                    let ca = self.node("And", vec![x[0].clone(), x[1].clone()], &format!("{hint}.ca"), vec![]);
                    let nc = self.node("Not", vec![x[0].clone()], &format!("{hint}.nc"), vec![]);
                    let nb = self.node("And", vec![nc, x[2].clone()], &format!("{hint}.nb"), vec![]);
                    self.node("Or", vec![ca, nb], &hint, vec![])
                }
                Pointwise::Where => self.node("Where", x, &hint, vec![]),
                Pointwise::BatchNorm => {
                    self.node("BatchNormalization", x, &hint, vec![attr_f("epsilon", float(a, "epsilon").unwrap_or(1e-5))])
                }
                Pointwise::Quantize => {
                    let ElemType::Quant(q) = &out_ty.elem else { return unsupported("an unquantized result") };
                    self.quantize(&x[0], q, &hint)?
                }
                Pointwise::Dequantize => {
                    let ElemType::Quant(q) = &f.ty(op.operands[0]).elem else { return unsupported("an unquantized operand") };
                    self.dequantize(&x[0], q, &hint)?
                }
                Pointwise::Requantize => {
                    let (ElemType::Quant(qi), ElemType::Quant(qo)) = (&f.ty(op.operands[0]).elem, &out_ty.elem) else {
                        return unsupported("unquantized types");
                    };
                    let d = self.dequantize(&x[0], qi, &format!("{hint}.dq"))?;
                    self.quantize(&d, qo, &hint)?
                }
                Pointwise::QuantAdd => return unsupported("integer ops: export the Q/DQ model aoc quantize writes"),
                Pointwise::Fused => return unsupported("fused ops: export the model before aoc opt"),
                Pointwise::SparseCompress => return unsupported("a compress of a non-constant"),
            },
            OpKind::Norm(n) => match n {
                Norm::Softmax => self.node("Softmax", x, &hint, vec![attr_i("axis", int(a, "axis", -1))]),
                Norm::LogSoftmax => self.node("LogSoftmax", x, &hint, vec![attr_i("axis", int(a, "axis", -1))]),
                Norm::LayerNorm => self.node(
                    "LayerNormalization",
                    x,
                    &hint,
                    vec![attr_i("axis", int(a, "axis", -1)), attr_f("epsilon", float(a, "epsilon").unwrap_or(1e-5))],
                ),
            },
            OpKind::Conv(c, form) => {
                let conv_attrs = |with_group: bool| {
                    let mut v = vec![attr_is("strides", &ints(a, "strides")), attr_is("pads", &ints(a, "pads")), attr_is("dilations", &ints(a, "dilations"))];
                    if with_group {
                        v.push(attr_i("group", int(a, "groups", 1)));
                    }
                    v
                };
                match (c, form) {
                    // The sparse weight's initializer is dense already.
                    (Conv::Direct, Form::Float | Form::Sparse) => self.node("Conv", x, &hint, conv_attrs(true)),
                    (Conv::Transposed, Form::Float) => {
                        let mut v = conv_attrs(true);
                        v.push(attr_is("output_padding", &ints(a, "output_padding")));
                        self.node("ConvTranspose", x, &hint, v)
                    }
                    (Conv::Winograd, _) => return unsupported("Winograd weights: export the model before aoc opt"),
                    (Conv::Direct | Conv::Transposed, Form::Fused) => return unsupported("fused ops: export the model before aoc opt"),
                    (Conv::Direct | Conv::Transposed, Form::Quant) | (Conv::Transposed, Form::Sparse) => {
                        return unsupported("integer ops: export the Q/DQ model aoc quantize writes");
                    }
                }
            }
            OpKind::MatMul(form) => match form {
                Form::Float => self.node("MatMul", x, &hint, vec![]),
                Form::Sparse => {
                    // x @ wᵀ (+ b) on the dense weight.
                    let wt = self.node("Transpose", vec![x[1].clone()], &format!("{hint}.wT"), vec![attr_is("perm", &[1, 0])]);
                    if x.len() > 2 {
                        let m = self.node("MatMul", vec![x[0].clone(), wt], &format!("{hint}.mm"), vec![]);
                        self.node("Add", vec![m, x[2].clone()], &hint, vec![])
                    } else {
                        self.node("MatMul", vec![x[0].clone(), wt], &hint, vec![])
                    }
                }
                Form::Fused => return unsupported("fused ops: export the model before aoc opt"),
                Form::Quant => return unsupported("integer ops: export the Q/DQ model aoc quantize writes"),
            },
            OpKind::Gemm(form) => match form {
                Form::Float => self.node(
                    "Gemm",
                    x,
                    &hint,
                    vec![
                        attr_f("alpha", float(a, "alpha").unwrap_or(1.0)),
                        attr_f("beta", float(a, "beta").unwrap_or(1.0)),
                        attr_i("transA", boolean(a, "trans_a") as i64),
                        attr_i("transB", boolean(a, "trans_b") as i64),
                    ],
                ),
                Form::Fused => return unsupported("fused ops: export the model before aoc opt"),
                Form::Quant | Form::Sparse => return unsupported("integer ops: export the Q/DQ model aoc quantize writes"),
            },
            OpKind::Attention => return unsupported("fused attention: export the model before aoc opt"),
            OpKind::Pool(p, form) => {
                if form != Form::Float {
                    return unsupported("integer or fused pools");
                }
                let window = |extra: Vec<AttributeProto>| {
                    let mut v = vec![
                        attr_is("kernel_shape", &ints(a, "kernel")),
                        attr_is("strides", &ints(a, "strides")),
                        attr_is("pads", &ints(a, "pads")),
                        attr_i("ceil_mode", boolean(a, "ceil_mode") as i64),
                    ];
                    v.extend(extra);
                    v
                };
                match p {
                    Pool::Max => {
                        let v = window(vec![attr_is("dilations", &ints(a, "dilations"))]);
                        self.node("MaxPool", x, &hint, v)
                    }
                    Pool::Avg => {
                        if ints(a, "dilations").iter().any(|&d| d != 1) {
                            return unsupported("dilated average pools (opset 19)");
                        }
                        let v = window(vec![attr_i("count_include_pad", boolean(a, "count_include_pad") as i64)]);
                        self.node("AveragePool", x, &hint, v)
                    }
                    Pool::GlobalAvg => self.node("GlobalAveragePool", x, &hint, vec![]),
                    Pool::GlobalMax => self.node("GlobalMaxPool", x, &hint, vec![]),
                }
            }
            OpKind::Reduce(red) => {
                let axes = ints(a, "axes");
                let keep = attr_i("keepdims", boolean(a, "keepdims") as i64);
                match red {
                    Reduce::Sum => {
                        let ax = self.i64_const(&format!("{hint}.axes"), &axes)?;
                        self.node("ReduceSum", vec![x[0].clone(), ax], &hint, vec![keep])
                    }
                    Reduce::Mean => self.node("ReduceMean", x, &hint, vec![attr_is("axes", &axes), keep]),
                    Reduce::Max => self.node("ReduceMax", x, &hint, vec![attr_is("axes", &axes), keep]),
                    Reduce::Min => self.node("ReduceMin", x, &hint, vec![attr_is("axes", &axes), keep]),
                }
            }
            OpKind::Movement(mv) => match mv {
                Movement::Identity => self.node("Identity", x, &hint, vec![]),
                Movement::Reshape => {
                    let dims: Vec<i64> = out_ty.shape.iter().map(|&d| d as i64).collect();
                    let s = self.i64_const(&format!("{hint}.shape"), &dims)?;
                    self.node("Reshape", vec![x[0].clone(), s], &hint, vec![])
                }
                Movement::Expand => {
                    let dims: Vec<i64> = out_ty.shape.iter().map(|&d| d as i64).collect();
                    let s = self.i64_const(&format!("{hint}.shape"), &dims)?;
                    self.node("Expand", vec![x[0].clone(), s], &hint, vec![])
                }
                Movement::Transpose => self.node("Transpose", x, &hint, vec![attr_is("perm", &ints(a, "perm"))]),
                Movement::Concat => self.node("Concat", x, &hint, vec![attr_i("axis", int(a, "axis", 0))]),
                Movement::Gather => self.node("Gather", x, &hint, vec![attr_i("axis", int(a, "axis", 0))]),
                Movement::Slice => {
                    let mut inputs = vec![x[0].clone()];
                    for key in ["starts", "ends", "axes", "steps"] {
                        if a.get(key).is_some() {
                            inputs.push(self.i64_const(&format!("{hint}.{key}"), &ints(a, key))?);
                        } else {
                            inputs.push(String::new());
                        }
                    }
                    while inputs.last().is_some_and(|s| s.is_empty()) {
                        inputs.pop();
                    }
                    self.node("Slice", inputs, &hint, vec![])
                }
                Movement::Pad => {
                    let mode = string(a, "mode");
                    if !matches!(mode.as_str(), "constant" | "reflect" | "edge") {
                        return unsupported(&format!("{mode} padding (opset 19)"));
                    }
                    let pads = self.i64_const(&format!("{hint}.pads"), &ints(a, "pads"))?;
                    let mut inputs = vec![x[0].clone(), pads];
                    if mode == "constant" {
                        let ElemType::Scalar(s) = out_ty.elem else { return unsupported("padding a quantized tensor") };
                        let v = Tensor::from_f64(TensorType::new(vec![], s), vec![float(a, "value").unwrap_or(0.0)]);
                        inputs.push(self.initializer(&format!("{hint}.value"), &v)?);
                    }
                    self.node("Pad", inputs, &hint, vec![attr_s("mode", &mode)])
                }
            },
            OpKind::Resize => {
                let sizes = ints(a, "sizes");
                let mut attrs = vec![
                    attr_s("mode", &string(a, "mode")),
                    attr_s("coordinate_transformation_mode", &string(a, "coordinate_transformation_mode")),
                    attr_s("nearest_mode", &string(a, "nearest_mode")),
                    attr_f("cubic_coeff_a", float(a, "cubic_coeff_a").unwrap_or(-0.75)),
                    attr_i("exclude_outside", boolean(a, "exclude_outside") as i64),
                ];
                if let Some(v) = float(a, "extrapolation_value") {
                    attrs.push(attr_f("extrapolation_value", v));
                }
                let roi = match floats(a, "roi") {
                    Some(v) => self.f32_const(&format!("{hint}.roi"), vec![v.len()], v)?,
                    None => String::new(),
                };
                // Explicit scales take part in the coordinate mapping, and
                // ONNX then derives the size from them: floor(in · scale),
                // in f32 as ONNX Runtime computes it.
                let inputs = match floats(a, "scales") {
                    Some(sc) => {
                        let in_shape = &f.ty(op.operands[0]).shape;
                        let agree = in_shape.len() == sc.len()
                            && in_shape.iter().zip(&sc).zip(&sizes).all(|((&i, &s), &o)| (i as f32 * s as f32).floor() as i64 == o);
                        if !agree {
                            return unsupported("scales that do not give its sizes as floor(input × scale)");
                        }
                        let s = self.f32_const(&format!("{hint}.scales"), vec![sc.len()], sc)?;
                        vec![x[0].clone(), roi, s]
                    }
                    None => {
                        let s = self.i64_const(&format!("{hint}.sizes"), &sizes)?;
                        vec![x[0].clone(), roi, String::new(), s]
                    }
                };
                self.node("Resize", inputs, &hint, attrs)
            }
            OpKind::GridSample => {
                // Opset 16's GridSample: 4-D, `bilinear` and `bicubic`.
                if out_ty.rank() != 4 {
                    return unsupported("volumetric (5-D) sampling (opset 20)");
                }
                let mode = match string(a, "mode").as_str() {
                    "linear" => "bilinear".to_string(),
                    "cubic" => "bicubic".to_string(),
                    m => m.to_string(),
                };
                let attrs = vec![
                    attr_s("mode", &mode),
                    attr_s("padding_mode", &string(a, "padding_mode")),
                    attr_i("align_corners", boolean(a, "align_corners") as i64),
                ];
                self.node("GridSample", x, &hint, attrs)
            }
        };
        self.define(r, name)
    }

    fn define(&mut self, r: ValueId, name: String) -> Result<(), String> {
        self.names.insert(r, name);
        Ok(())
    }
}

/// The entry function of `module` as ONNX model bytes.
pub fn export_onnx(module: &Module, weights: &dyn WeightSource, model_name: &str) -> Result<Vec<u8>, String> {
    let func = module.entry().ok_or_else(|| format!("error: {model_name} has no function"))?;
    let mut ex = Ex {
        func,
        weights,
        graph: GraphProto { name: Some(func.name.clone()), ..Default::default() },
        names: HashMap::new(),
        consts: HashMap::new(),
        taken: HashSet::new(),
    };
    // External names first, so internal values never take them.
    let outputs: Vec<String> = (0..func.results().len()).map(|i| func.result_name(i).to_string()).collect();
    for (i, &p) in func.params().iter().enumerate() {
        let name = ex.fresh(func.param_name(i));
        ex.graph.input.push(value_info(&name, func.ty(p)).map_err(|m| format!("error: input {name}: {m}"))?);
        ex.names.insert(p, name);
    }
    for o in &outputs {
        if !ex.taken.insert(o.clone()) {
            return Err(format!("error: {model_name}: output `{o}` has the name of an input or another output; ONNX needs distinct names"));
        }
    }
    for &id in &func.body.ops {
        let op = &func.ops[id];
        let at = |m: String| {
            let value = op.results.first().map(|&r| format!(" %{}", func.name_of(r))).unwrap_or_default();
            let loc = op.loc.name.as_deref().map(|n| format!(" (loc \"{n}\")")).unwrap_or_default();
            format!("error: {model_name}: {}{value}{loc}: {m}", op.opcode.name())
        };
        if op.opcode.kind() == OpKind::Constant {
            let r = op.results[0];
            // A sparse weight's initializer is dense (ONNX has no N:M
            // type): the interpreter holds it with its zeros.
            let t = eval_op(op.opcode, &[], &op.attrs, &[func.ty(r).clone()], weights).map_err(at)?.remove(0);
            let name = ex.initializer(func.name_of(r), &t).map_err(at)?;
            ex.names.insert(r, name);
            ex.consts.insert(r, t);
            continue;
        }
        ex.op(op).map_err(at)?;
    }
    for (i, &r) in func.results().iter().enumerate() {
        let ty = func.ty(r);
        let from = ex.names.get(&r).cloned().ok_or_else(|| format!("error: {model_name}: result {i} has no ONNX value"))?;
        ex.graph.node.push(NodeProto {
            input: vec![from],
            output: vec![outputs[i].clone()],
            name: Some(format!("{}.output", outputs[i])),
            op_type: Some("Identity".to_string()),
            ..Default::default()
        });
        let ty = aoc_ir::ops::sparse::dense_type(ty);
        ex.graph.output.push(value_info(&outputs[i], &ty).map_err(|m| format!("error: output {}: {m}", outputs[i]))?);
    }
    // Initializers only folds read (a constant behind a folded op) go.
    let used: HashSet<&str> = ex.graph.node.iter().flat_map(|n| n.input.iter().map(String::as_str)).collect();
    let kept: Vec<TensorProto> =
        ex.graph.initializer.iter().filter(|t| t.name.as_deref().is_some_and(|n| used.contains(n))).cloned().collect();
    ex.graph.initializer = kept;
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(OPSET) }],
        producer_name: Some("aoc".to_string()),
        graph: Some(ex.graph),
    };
    Ok(model.encode_to_vec())
}
