//! Importer unit tests on models built in Rust with the `proto` messages.

use super::proto::*;
use super::*;
use aoc_ir::attr::{Attr, ConstValue, DenseData};
use aoc_ir::{Opcode, Scalar, TensorType};

fn tensor_info(name: &str, elem: i32, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    use tensor_shape_proto::{Dimension, dimension::Value as D};
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Ok(v) => D::DimValue(*v),
                Err(p) => D::DimParam(p.to_string()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

fn f32_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    tensor_info(
        name,
        data_type::FLOAT,
        &dims.iter().map(|&d| Ok(d)).collect::<Vec<_>>(),
    )
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        domain: None,
        attribute: attrs,
    }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INT),
        i: Some(i),
        ..Default::default()
    }
}

fn i64_init(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type::INT64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type::FLOAT),
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    }
}

fn model(opset: i64, graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        producer_name: None,
        graph: Some(graph),
    }
    .encode_to_vec()
}

fn ops(m: &Imported) -> Vec<Opcode> {
    let f = &m.module.funcs[0];
    f.body.ops.iter().map(|&o| f.ops[o].opcode).collect()
}

fn run(m: &Imported, inputs: Vec<Tensor>) -> Vec<Tensor> {
    assert!(
        aoc_ir::verify::verify_module(&m.module).is_empty(),
        "{:?}",
        aoc_ir::verify::verify_module(&m.module)
    );
    aoc_ir::interp::run(m.module.entry().unwrap(), inputs, &m.weight_source()).unwrap()
}

#[test]
fn garbage_and_truncated_bytes_are_errors() {
    let e = import_model(b"\xff\xff\xff\xffgarbage", &ImportOptions::default()).unwrap_err();
    assert!(
        e.message.starts_with("not a valid ONNX model:"),
        "{}",
        e.message
    );
    let bytes = model(
        17,
        GraphProto {
            node: vec![node("Relu", "r", &["x"], &["y"], vec![])],
            input: vec![f32_input("x", &[2])],
            output: vec![f32_input("y", &[2])],
            ..Default::default()
        },
    );
    for len in 0..bytes.len() {
        // Every prefix either imports or fails with a message; none panics.
        let _ = import_model(&bytes[..len], &ImportOptions::default());
    }
    assert!(import_model(&bytes, &ImportOptions::default()).is_ok());
}

#[test]
fn old_opsets_and_unsupported_ops_are_named() {
    let g = |op: &str| GraphProto {
        node: vec![node(op, "nms_1", &["x"], &["y"], vec![])],
        input: vec![f32_input("x", &[2])],
        output: vec![f32_input("y", &[2])],
        ..Default::default()
    };
    let e = import_model(&model(6, g("Relu")), &ImportOptions::default()).unwrap_err();
    assert!(e.message.contains("opset 6"), "{}", e.message);
    assert!(import_model(&model(9, g("Relu")), &ImportOptions::default()).is_ok());
    let e = import_model(
        &model(17, g("NonMaxSuppression")),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "unsupported ONNX op `NonMaxSuppression` (node `nms_1`, opset 17)"
    );
    assert_eq!(e.loc.name.as_deref(), Some("nms_1"));
}

#[test]
fn symbolic_dims_need_input_shapes() {
    let bytes = model(
        17,
        GraphProto {
            node: vec![node("Relu", "", &["x"], &["y"], vec![])],
            input: vec![tensor_info(
                "x",
                data_type::FLOAT,
                &[Err("batch"), Ok(3), Err("height")],
            )],
            output: vec![f32_input("y", &[])],
            ..Default::default()
        },
    );
    let e = import_model(&bytes, &ImportOptions::default()).unwrap_err();
    assert_eq!(
        e.message,
        "input `x` has symbolic dimensions `batch`, `height`; fix them with --input-shape x=1x3x1"
    );
    let opts = ImportOptions {
        input_shapes: vec![("x".into(), vec![2, 3, 4])],
        ..Default::default()
    };
    let m = import_model(&bytes, &opts).unwrap();
    let f = &m.module.funcs[0];
    assert_eq!(
        f.ty(f.params()[0]),
        &TensorType::new(vec![2, 3, 4], Scalar::F32)
    );
    // The op is located at "<op_type>_<index>" when the node has no name.
    assert_eq!(f.ops[f.body.ops[0]].loc.name.as_deref(), Some("Relu_0"));
}

#[test]
fn shape_chains_fold_to_a_static_reshape() {
    // Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): x 2x3x4 -> 2x12.
    let bytes = model(
        17,
        GraphProto {
            node: vec![
                node("Shape", "s", &["x"], &["shape"], vec![]),
                node(
                    "Gather",
                    "g",
                    &["shape", "zero"],
                    &["batch"],
                    vec![int_attr("axis", 0)],
                ),
                node("Unsqueeze", "u", &["batch", "axes"], &["batch1"], vec![]),
                node(
                    "Concat",
                    "c",
                    &["batch1", "minus1"],
                    &["target"],
                    vec![int_attr("axis", 0)],
                ),
                node("Reshape", "r", &["x", "target"], &["out:0"], vec![]),
            ],
            initializer: vec![
                i64_init("zero", &[], &[0]),
                i64_init("axes", &[1], &[0]),
                i64_init("minus1", &[1], &[-1]),
            ],
            input: vec![f32_input("x", &[2, 3, 4])],
            output: vec![f32_input("out:0", &[2, 12])],
            ..Default::default()
        },
    );
    let m = import_model(&bytes, &ImportOptions::default()).unwrap();
    assert_eq!(ops(&m), vec![Opcode::Reshape]);
    let f = &m.module.funcs[0];
    let op = &f.ops[f.body.ops[0]];
    assert_eq!(op.attrs.get("shape"), Some(&Attr::Ints(vec![2, 12])));
    // The result carries the sanitized output name.
    assert_eq!(f.name_of(f.results()[0]), "out_0");
    assert!(m.module.weights.is_empty());
}

/// ONNX Runtime's quantizer wraps a float shape computation in Q/DQ
/// (MobileViT's `Mul` of a dimension by the patch size): the dequantized
/// scalar folds, so the Reshape after it is still static.
#[test]
fn a_shape_computation_through_q_dq_folds() {
    // Reshape(x, Concat(Unsqueeze(Cast(DQ(Q(Cast(Gather(Shape(x), 0)) * 3)))), [-1])): 2x3x4 -> 6x4.
    let bytes = model(
        17,
        GraphProto {
            node: vec![
                node("Shape", "s", &["x"], &["shape"], vec![]),
                node("Gather", "g", &["shape", "zero"], &["batch"], vec![int_attr("axis", 0)]),
                node("Cast", "cf", &["batch"], &["bf"], vec![int_attr("to", data_type::FLOAT as i64)]),
                node("Mul", "m", &["bf", "three"], &["rows"], vec![]),
                node("QuantizeLinear", "q", &["rows", "qs", "qz"], &["rows.q"], vec![]),
                node("DequantizeLinear", "dq", &["rows.q", "qs", "qz"], &["rows.dq"], vec![]),
                node("Cast", "ci", &["rows.dq"], &["ri"], vec![int_attr("to", data_type::INT64 as i64)]),
                node("Unsqueeze", "u", &["ri", "axes"], &["r1"], vec![]),
                node("Concat", "c", &["r1", "minus1"], &["target"], vec![int_attr("axis", 0)]),
                node("Reshape", "r", &["x", "target"], &["y"], vec![]),
            ],
            initializer: vec![
                i64_init("zero", &[], &[0]),
                f32_init("three", &[], &[3.0]),
                f32_init("qs", &[], &[0.5]),
                TensorProto { name: Some("qz".into()), dims: vec![], data_type: Some(data_type::UINT8), raw_data: Some(vec![0]), ..Default::default() },
                i64_init("axes", &[1], &[0]),
                i64_init("minus1", &[1], &[-1]),
            ],
            input: vec![f32_input("x", &[2, 3, 4])],
            output: vec![f32_input("y", &[6, 4])],
            ..Default::default()
        },
    );
    let m = import_model(&bytes, &ImportOptions::default()).unwrap();
    assert_eq!(ops(&m), vec![Opcode::Reshape]);
    let f = &m.module.funcs[0];
    assert_eq!(f.ops[f.body.ops[0]].attrs.get("shape"), Some(&Attr::Ints(vec![6, 4])));
}

#[test]
fn the_models_own_input_and_output_names_are_kept() {
    // `serving:0` and `out:0` are not SSA names; `out_0` is what `out:0`
    // would be sanitized to, so the two must stay apart.
    let bytes = model(
        17,
        GraphProto {
            node: vec![
                node("Relu", "r", &["serving:0"], &["out:0"], vec![]),
                node("Neg", "n", &["serving:0"], &["out_0"], vec![]),
            ],
            input: vec![f32_input("serving:0", &[2])],
            output: vec![f32_input("out:0", &[2]), f32_input("out_0", &[2])],
            ..Default::default()
        },
    );
    let m = import_model(&bytes, &ImportOptions::default()).unwrap();
    let f = &m.module.funcs[0];
    assert_eq!(f.param_name(0), "serving:0");
    assert_eq!((f.result_name(0), f.result_name(1)), ("out:0", "out_0"));
    assert_eq!(f.param_index("serving:0"), Some(0));
    // Printed and parsed back, the names stay.
    let text = aoc_ir::print::print_module(&m.module);
    assert!(text.contains("loc(\"serving:0\")") && text.contains("loc(\"out:0\")"), "{text}");
    let (back, diags) = aoc_ir::parse::parse(&text);
    assert!(diags.is_empty(), "{diags:?}");
    let g = &back.funcs[0];
    assert_eq!((g.param_name(0), g.result_name(0), g.result_name(1)), ("serving:0", "out:0", "out_0"));
    assert_eq!(aoc_ir::print::print_module(&back), text);
    let x = Tensor::from_f64(TensorType::new(vec![2], Scalar::F32), vec![-1.0, 2.0]);
    let out = run(&m, vec![x]);
    assert_eq!((out[0].to_f64(), out[1].to_f64()), (vec![0.0, 2.0], vec![1.0, -2.0]));
}

#[test]
fn outputs_are_named_and_inputs_returned_through_identity() {
    let bytes = model(
        17,
        GraphProto {
            node: vec![node("Add", "add", &["x", "b"], &["sum"], vec![])],
            initializer: vec![f32_init("b", &[2], &[10.0, 20.0])],
            input: vec![f32_input("x", &[2])],
            output: vec![
                f32_input("sum", &[2]),
                f32_input("x_out", &[2]),
                f32_input("x", &[2]),
            ],
            ..Default::default()
        },
    );
    let bytes = {
        // "x_out" is produced by an Identity of the input.
        let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
        m.graph
            .as_mut()
            .unwrap()
            .node
            .push(node("Identity", "id", &["x"], &["x_out"], vec![]));
        m.encode_to_vec()
    };
    let m = import_model(&bytes, &ImportOptions::default()).unwrap();
    let f = &m.module.funcs[0];
    let names: Vec<&str> = f.results().iter().map(|&v| f.name_of(v)).collect();
    assert_eq!(names, vec!["sum", "x_out", "x_1"]);
    assert_eq!(
        ops(&m),
        vec![
            Opcode::Const,
            Opcode::Add,
            Opcode::Identity,
            Opcode::Identity
        ]
    );
    let x = Tensor::from_f64(TensorType::new(vec![2], Scalar::F32), vec![1.0, 2.0]);
    let out = run(&m, vec![x.clone()]);
    assert_eq!(out[0].to_f64(), vec![11.0, 22.0]);
    assert_eq!(out[1], x);
    // The small initializer stays inline.
    let c = &f.ops[f.body.ops[0]];
    assert_eq!(
        c.attrs.get("value"),
        Some(&Attr::Const(ConstValue::Dense(DenseData::Floats(vec![
            10.0, 20.0
        ]))))
    );
}

#[test]
fn large_initializers_become_weights_and_int8_weights_stay_quantized() {
    let w: Vec<i8> = (0..20).map(|i| i as i8 - 10).collect();
    let wq = TensorProto {
        name: Some("w.q".into()),
        dims: vec![20],
        data_type: Some(data_type::INT8),
        raw_data: Some(w.iter().map(|&b| b as u8).collect()),
        ..Default::default()
    };
    let bytes = model(
        17,
        GraphProto {
            node: vec![
                node("DequantizeLinear", "dq", &["w.q", "s"], &["w"], vec![]),
                node("Add", "add", &["x", "w"], &["y"], vec![]),
            ],
            initializer: vec![wq, f32_init("s", &[], &[0.5])],
            input: vec![f32_input("x", &[20])],
            output: vec![f32_input("y", &[20])],
            ..Default::default()
        },
    );
    let m = import_model(&bytes, &ImportOptions::default()).unwrap();
    assert_eq!(
        ops(&m),
        vec![Opcode::Const, Opcode::Dequantize, Opcode::Add]
    );
    assert_eq!(m.module.weights.len(), 1);
    assert_eq!(m.weights.len(), 1);
    assert_eq!(m.weights[0].0, "w.q");
    assert_eq!(
        m.weights[0].1.ty.to_string(),
        "tensor<20x!quant.uniform<i8:f32, 0.5>>"
    );
    let x = Tensor::from_f64(TensorType::new(vec![20], Scalar::F32), vec![1.0; 20]);
    let out = run(&m, vec![x]);
    assert_eq!(out[0].get_f64(0), 1.0 + (-10.0 * 0.5));
    assert_eq!(out[0].get_f64(19), 1.0 + (9.0 * 0.5));
}

#[test]
fn tensor_protos_decode_every_layout() {
    let half = TensorProto {
        dims: vec![2],
        data_type: Some(data_type::FLOAT16),
        int32_data: vec![0x3c00, 0xc000],
        ..Default::default()
    };
    let t = tensor_from_proto_bytes(&half.encode_to_vec()).unwrap();
    assert_eq!(t.ty.to_string(), "tensor<2xf16>");
    assert_eq!(t.to_f64(), vec![1.0, -2.0]);
    let f8 = TensorProto {
        dims: vec![3],
        data_type: Some(data_type::FLOAT8E4M3FN),
        raw_data: Some(vec![0x38, 0x7f, 0x01]),
        ..Default::default()
    };
    let t = tensor_from_proto_bytes(&f8.encode_to_vec()).unwrap();
    let v = t.to_f64();
    assert_eq!(v[0], 1.0);
    assert!(v[1].is_nan());
    assert_eq!(v[2], 2f64.powi(-9));
    let short = TensorProto {
        dims: vec![3],
        data_type: Some(data_type::FLOAT),
        raw_data: Some(vec![0; 8]),
        ..Default::default()
    };
    assert_eq!(
        tensor_from_proto_bytes(&short.encode_to_vec()).unwrap_err(),
        "tensor ``: raw_data has 8 bytes, but tensor<3xf32> needs 12"
    );
    let s = TensorProto {
        dims: vec![1],
        data_type: Some(data_type::STRING),
        ..Default::default()
    };
    assert_eq!(
        tensor_from_proto_bytes(&s.encode_to_vec()).unwrap_err(),
        "tensor `` has unsupported element type STRING"
    );
}

/// One node over initializers (so the importer folds it), output `y`.
fn folded(op: &str, inputs: &[&str], inits: Vec<TensorProto>, attrs: Vec<AttributeProto>) -> Result<Imported, Diagnostic> {
    let bytes = model(
        17,
        GraphProto {
            node: vec![node(op, "n", inputs, &["y"], attrs)],
            initializer: inits,
            output: vec![f32_input("y", &[])],
            ..Default::default()
        },
    );
    import_model(&bytes, &ImportOptions::default())
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INTS),
        ints: v.to_vec(),
        ..Default::default()
    }
}

// Folding calls the op table's hooks directly (no catch_unwind): each case
// below once panicked (or aborted) inside a hook, and must now import or
// fail with a diagnostic.

#[test]
fn folding_a_pad_with_extreme_pads_is_an_error() {
    // 5 + i64::MIN + i64::MAX = 4 elements: the sum fits, the index
    // arithmetic did not (an overflow panic in eval).
    let e = folded(
        "Pad",
        &["x", "pads"],
        vec![f32_init("x", &[5], &[1.0; 5]), i64_init("pads", &[2], &[i64::MIN, i64::MAX])],
        vec![],
    )
    .unwrap_err();
    assert!(e.message.contains("pads must be within ±2^40"), "{}", e.message);
    // Large but ordinary pads still fold.
    let m = folded(
        "Pad",
        &["x", "pads"],
        vec![f32_init("x", &[2], &[1.0, 2.0]), i64_init("pads", &[2], &[1, -1])],
        vec![],
    )
    .unwrap();
    assert_eq!(run(&m, vec![])[0].to_f64(), [0.0, 1.0]);
}

#[test]
fn folding_a_backward_slice_of_an_empty_tensor_gives_an_empty_tensor() {
    // A negative step over an empty dimension clamped with `d - 1 = -1` as
    // the upper bound (a panic in `clamp`).
    let m = folded(
        "Slice",
        &["x", "starts", "ends", "axes", "steps"],
        vec![
            f32_init("x", &[0, 3], &[]),
            i64_init("starts", &[1], &[-1]),
            i64_init("ends", &[1], &[i64::MIN]),
            i64_init("axes", &[1], &[0]),
            i64_init("steps", &[1], &[-1]),
        ],
        vec![],
    )
    .unwrap();
    assert_eq!(run(&m, vec![])[0].ty.shape, [0, 3]);
}

#[test]
fn folding_a_conv_with_extreme_pads_is_an_error() {
    // pads of i64::MAX overflowed the padded size (a panic in infer).
    let e = folded(
        "Conv",
        &["x", "w"],
        vec![f32_init("x", &[1, 1, 2, 2], &[1.0; 4]), f32_init("w", &[1, 1, 1, 1], &[1.0])],
        vec![ints_attr("pads", &[i64::MAX, 0, i64::MAX, 0])],
    )
    .unwrap_err();
    assert!(e.message.contains("at most 2^40"), "{}", e.message);
}

#[test]
fn folding_a_resize_to_an_empty_result_builds_nothing() {
    // sizes [2^39, 0]: nothing to compute, but resizing dimension 0 first
    // built 2^39 taps (an allocation failure, which aborts).
    let sizes = TensorProto {
        name: Some("sizes".into()),
        dims: vec![2],
        data_type: Some(data_type::INT64),
        int64_data: vec![1 << 39, 0],
        ..Default::default()
    };
    let m = folded("Resize", &["x", "", "", "sizes"], vec![f32_init("x", &[1, 0], &[]), sizes], vec![]).unwrap();
    assert_eq!(run(&m, vec![])[0].ty.shape, [1 << 39, 0]);
}

/// Duplicate output names are refused (onnx.checker and ONNX Runtime
/// refuse them); a declared output shape the graph contradicts is a
/// warning, and the computed shape is used.
#[test]
fn duplicate_outputs_are_refused_and_wrong_declared_shapes_warned() {
    let graph = |outputs: Vec<ValueInfoProto>| GraphProto {
        node: vec![node("Relu", "relu", &["x"], &["y"], vec![])],
        input: vec![f32_input("x", &[2, 3])],
        output: outputs,
        ..Default::default()
    };
    let dup = model(17, graph(vec![f32_input("y", &[2, 3]), f32_input("y", &[2, 3])]));
    let e = import_model(&dup, &ImportOptions::default()).map(|_| ()).unwrap_err();
    assert!(e.message.contains("graph output `y` is listed twice"), "{}", e.message);
    let ok = import_model(&model(17, graph(vec![f32_input("y", &[2, 3])])), &ImportOptions::default()).unwrap();
    assert!(ok.warnings.is_empty(), "{:?}", ok.warnings);
    for unknown in [tensor_info("y", 1, &[Err("batch"), Ok(3)]), tensor_info("y", 1, &[Ok(-1), Ok(3)])] {
        let ok = import_model(&model(17, graph(vec![unknown])), &ImportOptions::default()).unwrap();
        assert!(ok.warnings.is_empty(), "{:?}", ok.warnings);
    }
    for wrong in [f32_input("y", &[2, 4]), f32_input("y", &[6])] {
        let m = import_model(&model(17, graph(vec![wrong])), &ImportOptions::default()).unwrap();
        assert_eq!(m.warnings.len(), 1);
        assert!(m.warnings[0].contains("graph output `y` is declared with shape") && m.warnings[0].contains("computes [2, 3]"), "{:?}", m.warnings);
        let f = &m.module.funcs[0];
        assert_eq!(f.ty(f.results()[0]).shape, vec![2, 3]);
    }
}

/// An `If` whose condition is a graph input becomes `core.if`: the
/// branches are regions that take the enclosing graph's `x` as an operand;
/// both run in the interpreter. Branches that disagree in type are an
/// error naming the node.
#[test]
fn if_with_a_run_time_condition_is_a_region_op() {
    let branch = |out: &str, op: &str, attrs: Vec<AttributeProto>| GraphProto {
        node: vec![node(op, &format!("{out}_{}", op.to_lowercase()), &["x"], &[out], attrs)],
        output: vec![f32_input(out, &[2])],
        ..Default::default()
    };
    let attr = |name: &str, g: GraphProto| AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::GRAPH),
        g: Some(g),
        ..Default::default()
    };
    let graph = |other: GraphProto| GraphProto {
        node: vec![node(
            "If",
            "choose",
            &["c"],
            &["y"],
            vec![attr("then_branch", branch("a", "Relu", vec![])), attr("else_branch", other)],
        )],
        input: vec![f32_input("x", &[2]), tensor_info("c", data_type::BOOL, &[])],
        output: vec![f32_input("y", &[2])],
        ..Default::default()
    };
    let m = import_model(&model(13, graph(branch("b", "Neg", vec![]))), &ImportOptions::default()).unwrap();
    assert!(aoc_ir::verify::verify_module(&m.module).is_empty());
    let f = &m.module.funcs[0];
    let op = &f.ops[f.body.ops[0]];
    assert_eq!((op.opcode, op.operands.len(), op.regions.len()), (Opcode::If, 2, 2));
    let x = Tensor::from_f64(TensorType::new(vec![2], Scalar::F32), vec![-1.0, 2.0]);
    for (c, want) in [(1, [0.0, 2.0]), (0, [1.0, -2.0])] {
        let c = Tensor::from_i64(TensorType::new(vec![], Scalar::I1), vec![c]);
        let y = aoc_ir::interp::run(f, vec![x.clone(), c], &aoc_ir::interp::NoWeights).unwrap();
        assert_eq!(y[0].to_f64(), want);
    }
    let to_f16 = AttributeProto { name: Some("to".into()), r#type: Some(attribute_type::INT), i: Some(10), ..Default::default() };
    let e = import_model(&model(13, graph(branch("b", "Cast", vec![to_f16]))), &ImportOptions::default()).unwrap_err();
    assert!(
        e.message.contains("`If` (node `choose`)") && e.message.contains("tensor<2xf32> in then_branch and tensor<2xf16> in else_branch"),
        "{}",
        e.message
    );
}

fn str_attr(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::STRING),
        s: Some(s.as_bytes().to_vec()),
        ..Default::default()
    }
}

#[test]
fn scatter_and_top_k_refusals_name_the_node() {
    let i64_input = |name: &str, dims: &[i64]| {
        tensor_info(name, data_type::INT64, &dims.iter().map(|&d| Ok(d)).collect::<Vec<_>>())
    };
    // Run-time indices with reduction mul.
    let g = GraphProto {
        node: vec![node("ScatterElements", "sc_1", &["x", "i", "u"], &["y"], vec![str_attr("reduction", "mul")])],
        input: vec![f32_input("x", &[3]), i64_input("i", &[2]), f32_input("u", &[2])],
        output: vec![f32_input("y", &[3])],
        ..Default::default()
    };
    let e = import_model(&model(18, g), &ImportOptions::default()).unwrap_err();
    assert!(e.message.contains("reduction `mul` needs constant indices"), "{}", e.message);
    assert_eq!(e.loc.name.as_deref(), Some("sc_1"));
    // A constant index outside the axis.
    let g = GraphProto {
        node: vec![node("ScatterElements", "sc_2", &["x", "i", "u"], &["y"], vec![])],
        input: vec![f32_input("x", &[3]), f32_input("u", &[2])],
        initializer: vec![i64_init("i", &[2], &[0, 3])],
        output: vec![f32_input("y", &[3])],
        ..Default::default()
    };
    let e = import_model(&model(13, g), &ImportOptions::default()).unwrap_err();
    assert!(e.message.contains("index 3 is out of range for axis 0 of size 3"), "{}", e.message);
    // TopK with k past the axis.
    let g = GraphProto {
        node: vec![node("TopK", "tk_1", &["x", "k"], &["v", "i"], vec![])],
        input: vec![f32_input("x", &[3])],
        initializer: vec![i64_init("k", &[1], &[4])],
        output: vec![f32_input("v", &[4]), i64_input("i", &[4])],
        ..Default::default()
    };
    let e = import_model(&model(11, g), &ImportOptions::default()).unwrap_err();
    assert!(e.message.contains("k must be in 1..=3"), "{}", e.message);
    assert_eq!(e.loc.name.as_deref(), Some("tk_1"));
}

#[test]
fn non_zero_folds_when_constant_and_is_refused_at_run_time() {
    let i64_input = |name: &str, dims: &[i64]| {
        tensor_info(name, data_type::INT64, &dims.iter().map(|&d| Ok(d)).collect::<Vec<_>>())
    };
    // A constant input folds to its indices, rank × count.
    let g = GraphProto {
        node: vec![node("NonZero", "nz_1", &["c"], &["y"], vec![])],
        initializer: vec![f32_init("c", &[2, 3], &[0.0, 1.0, 0.0, 2.0, 0.0, f32::NAN])],
        output: vec![i64_input("y", &[2, 3])],
        ..Default::default()
    };
    let m = import_model(&model(13, g), &ImportOptions::default()).unwrap();
    let y = run(&m, vec![]);
    assert_eq!(y[0].shape(), &[2, 3]);
    assert_eq!(y[0].to_i64(), vec![0, 1, 1, 1, 0, 2]);
    // A run-time input: the output's shape depends on its values.
    let g = GraphProto {
        node: vec![node("NonZero", "nz_2", &["x"], &["y"], vec![])],
        input: vec![f32_input("x", &[4])],
        output: vec![i64_input("y", &[1, 4])],
        ..Default::default()
    };
    let e = import_model(&model(13, g), &ImportOptions::default()).unwrap_err();
    assert!(e.message.contains("depends on its values"), "{}", e.message);
    assert_eq!(e.loc.name.as_deref(), Some("nz_2"));
}

#[test]
fn grid_sample_and_scan_refusals_name_the_node() {
    let gs = |name: &str, x: &[i64], attrs: Vec<AttributeProto>| GraphProto {
        node: vec![node("GridSample", name, &["x", "g"], &["y"], attrs)],
        input: vec![f32_input("x", x), f32_input("g", &[1, 2, 2, 2])],
        output: vec![f32_input("y", &[1, 1, 2, 2])],
        ..Default::default()
    };
    let cases: [(GraphProto, &str); 4] = [
        (gs("gs_1", &[1, 1, 2, 2], vec![str_attr("mode", "area")]), "unknown mode `area`"),
        (gs("gs_1", &[1, 1, 2, 2], vec![str_attr("padding_mode", "wrap")]), "unknown padding_mode `wrap`"),
        (gs("gs_1", &[1, 1, 2, 2], vec![int_attr("align_corners", 2)]), "align_corners must be 0 or 1, found 2"),
        (gs("gs_1", &[1, 2, 2], vec![]), "only 4-D (N×C×H×W) and 5-D"),
    ];
    for (g, want) in cases {
        let e = import_model(&model(20, g), &ImportOptions::default()).unwrap_err();
        assert!(e.message.contains(want), "{}", e.message);
        assert_eq!(e.loc.name.as_deref(), Some("gs_1"));
    }
    // Scan: a bad direction, a bad count of scan inputs, unequal lengths.
    let body = GraphProto {
        node: vec![node("Add", "add", &["s", "e"], &["s2"], vec![]), node("Identity", "id", &["s2"], &["o"], vec![])],
        input: vec![f32_input("s", &[2]), f32_input("e", &[2])],
        output: vec![f32_input("s2", &[2]), f32_input("o", &[2])],
        ..Default::default()
    };
    let scan = |attrs: Vec<AttributeProto>, xs: &[i64]| {
        let mut a = vec![AttributeProto {
            name: Some("body".into()),
            r#type: Some(attribute_type::GRAPH),
            g: Some(body.clone()),
            ..Default::default()
        }];
        a.extend(attrs);
        GraphProto {
            node: vec![node("Scan", "scan_1", &["s0", "x"], &["s", "y"], a)],
            input: vec![f32_input("s0", &[2]), f32_input("x", xs)],
            output: vec![f32_input("s", &[2]), f32_input("y", &[3, 2])],
            ..Default::default()
        }
    };
    let cases: [(GraphProto, &str); 4] = [
        (scan(vec![int_attr("num_scan_inputs", 1), ints_attr("scan_input_directions", &[2])], &[3, 2]), "must be 0 (forward) or 1 (reverse), found 2"),
        (scan(vec![int_attr("num_scan_inputs", 3)], &[3, 2]), "`num_scan_inputs` is 3, the node has 2 inputs"),
        (scan(vec![], &[3, 2]), "attribute `num_scan_inputs` is required"),
        (scan(vec![int_attr("num_scan_inputs", 1), ints_attr("scan_input_axes", &[2])], &[3, 2]), "scan input 0"),
    ];
    for (g, want) in cases {
        let e = import_model(&model(16, g), &ImportOptions::default()).unwrap_err();
        assert!(e.message.contains(want), "{}", e.message);
        assert_eq!(e.loc.name.as_deref(), Some("scan_1"));
    }
    // A working Scan runs to the running sums.
    let m = import_model(&model(16, scan(vec![int_attr("num_scan_inputs", 1)], &[3, 2])), &ImportOptions::default()).unwrap();
    let s0 = Tensor::from_f64(TensorType::new(vec![2], Scalar::F32), vec![1.0, 0.0]);
    let x = Tensor::from_f64(TensorType::new(vec![3, 2], Scalar::F32), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = run(&m, vec![s0, x]);
    assert_eq!(y[0].to_f64(), vec![10.0, 12.0]);
    assert_eq!(y[1].to_f64(), vec![2.0, 2.0, 5.0, 6.0, 10.0, 12.0]);
}

/// A weight stored as external data (`location`, `offset`, `length` into a
/// file beside the model) is read from the model's folder; a missing file,
/// a range past the file's end, a location outside the folder and a model
/// imported from bytes alone are errors naming the tensor.
#[test]
fn external_data_is_read_from_the_models_folder() {
    let dir = std::env::temp_dir().join(format!("aoc-external-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 8 bytes of padding, then w = [1, 2, 3, 4] as f32.
    let mut data = vec![0xAAu8; 8];
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        data.extend(v.to_le_bytes());
    }
    std::fs::write(dir.join("w.bin"), &data).unwrap();
    let entry = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    let bytes = |location: &str, offset: &str, length: &str| {
        let w = TensorProto {
            name: Some("w".into()),
            dims: vec![4],
            data_type: Some(data_type::FLOAT),
            data_location: Some(1),
            external_data: vec![entry("location", location), entry("offset", offset), entry("length", length)],
            ..Default::default()
        };
        model(
            17,
            GraphProto {
                node: vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
                initializer: vec![w],
                input: vec![f32_input("x", &[4])],
                output: vec![f32_input("y", &[4])],
                ..Default::default()
            },
        )
    };
    let opts = ImportOptions { model_dir: Some(dir.clone()), ..Default::default() };
    let m = import_model(&bytes("w.bin", "8", "16"), &opts).unwrap();
    let x = Tensor::from_f64(TensorType::new(vec![4], Scalar::F32), vec![10.0; 4]);
    assert_eq!(run(&m, vec![x])[0].to_f64(), vec![11.0, 12.0, 13.0, 14.0]);
    let err = |b: Vec<u8>, o: &ImportOptions| import_model(&b, o).err().expect("an error").message;
    for (b, want) in [
        (bytes("missing.bin", "0", "16"), "cannot be read"),
        (bytes("w.bin", "16", "16"), "past its end"),
        (bytes("../w.bin", "0", "16"), "inside the model's folder"),
        (bytes("/etc/w.bin", "0", "16"), "inside the model's folder"),
        (bytes("w.bin", "eight", "16"), "not a byte count"),
    ] {
        let m = err(b, &opts);
        assert!(m.contains("tensor `w`") && m.contains(want), "{m}");
    }
    let m = err(bytes("w.bin", "8", "16"), &ImportOptions::default());
    assert!(m.contains("`w`") && m.contains("external file"), "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flag attribute (`keepdims`, `ceil_mode`, ...) other than 0 or 1 is
/// refused: ONNX Runtime reads `ceil_mode = -1` as floor and aoc read it as
/// ceil, so the same model gave two answers (found by mutating models and
/// comparing with ONNX Runtime).
#[test]
fn flag_attributes_must_be_zero_or_one() {
    let pool = |attrs: Vec<AttributeProto>| GraphProto {
        node: vec![node("MaxPool", "mp_1", &["x"], &["y"], attrs)],
        input: vec![f32_input("x", &[1, 1, 8, 8])],
        output: vec![f32_input("y", &[1, 1, 4, 4])],
        ..Default::default()
    };
    let k = || ints_attr("kernel_shape", &[2, 2]);
    let s = || ints_attr("strides", &[2, 2]);
    for v in [-1, 2] {
        let e = import_model(&model(17, pool(vec![k(), s(), int_attr("ceil_mode", v)])), &ImportOptions::default()).unwrap_err();
        assert!(e.message.contains(&format!("attribute `ceil_mode` must be 0 or 1, found {v}")), "{}", e.message);
        assert_eq!(e.loc.name.as_deref(), Some("mp_1"));
    }
    for v in [0, 1] {
        import_model(&model(17, pool(vec![k(), s(), int_attr("ceil_mode", v)])), &ImportOptions::default()).unwrap();
    }
}

/// MeanVarianceNormalization of two neighbouring f32 values: the function
/// body's `E[x²] − E[x]²` rounds to −9.5e-7 here, so its root was NaN; the
/// centered form stays finite (the f32 mean rounds onto one of the two, so
/// the pair is not exactly ∓1).
#[test]
fn mean_variance_normalization_of_a_tiny_spread_is_finite() {
    let (a, b) = (2.626_540_4f32, 2.626_540_7f32);
    let g = GraphProto {
        node: vec![node("MeanVarianceNormalization", "mvn", &["x"], &["y"], vec![ints_attr("axes", &[0])])],
        input: vec![f32_input("x", &[2, 1])],
        output: vec![f32_input("y", &[2, 1])],
        ..Default::default()
    };
    let m = import_model(&model(13, g), &ImportOptions::default()).unwrap();
    let x = Tensor::from_f64(TensorType::new(vec![2, 1], Scalar::F32), vec![a as f64, b as f64]);
    let y = run(&m, vec![x]).remove(0).to_f64();
    assert!(y.iter().all(|v| v.is_finite()), "{y:?}");
    assert!(y[0] < 0.0 && y.iter().all(|v| v.abs() <= 1.5), "{y:?}");
}
