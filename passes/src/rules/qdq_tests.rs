//! Tests of the `qdq` family: each rule fires on its pattern, leaves the
//! expected ops, and keeps the outputs exactly (tolerance 0, seeded random
//! inputs through the interpreter); conditions reject what they must; the
//! family's growth is bounded.

use crate::egraph::Rewrite;
use crate::testutil::*;
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData};
use aoc_ir::{
    ElemType, Func, Location, Opcode, QuantParams, QuantType, Scalar, TensorType, ValueId,
};

fn qtype(shape: &[usize], storage: Scalar, scale: f64, zp: i64) -> TensorType {
    let q = QuantType {
        storage,
        expressed: Scalar::F32,
        params: QuantParams::PerTensor {
            scale,
            zero_point: zp,
        },
    };
    TensorType::new(shape.to_vec(), ElemType::Quant(Box::new(q)))
}

fn per_axis(shape: &[usize], storage: Scalar, scales: Vec<f64>) -> TensorType {
    let zero_points = vec![0; scales.len()];
    let q = QuantType {
        storage,
        expressed: Scalar::F32,
        params: QuantParams::PerAxis {
            axis: 0,
            scales,
            zero_points,
        },
    };
    TensorType::new(shape.to_vec(), ElemType::Quant(Box::new(q)))
}

fn i8t(shape: &[usize], scale: f64, zp: i64) -> TensorType {
    qtype(shape, Scalar::I8, scale, zp)
}

fn quantize(f: &mut Func, x: ValueId, ty: TensorType) -> ValueId {
    f.push_op(
        Opcode::Quantize,
        &[x],
        Attrs::new(),
        Some(vec![ty]),
        "q",
        Location::named("q"),
    )
    .expect("a valid quantize")[0]
}

fn dq(f: &mut Func, x: ValueId) -> ValueId {
    op(f, Opcode::Dequantize, &[x], Attrs::new())
}

/// `dequantize(quantize(x))` to a per-tensor i8 type of `x`'s shape.
fn qdq(f: &mut Func, x: ValueId, scale: f64, zp: i64) -> ValueId {
    let shape = f.ty(x).shape.clone();
    let q = quantize(f, x, i8t(&shape, scale, zp));
    dq(f, q)
}

/// A quantized constant with deterministic pseudo-random stored values.
fn qconst(f: &mut Func, ty: TensorType, seed: i64) -> ValueId {
    let (lo, hi) = ty.elem.storage().int_range().expect("integer storage");
    let span = (hi - lo).min(255);
    let n = ty.num_elements() as i64;
    let v = (0..n)
        .map(|i| lo.max(-128) + (i * 37 + seed * 11) % span)
        .collect();
    let attrs = Attrs::new().with("value", Attr::Const(ConstValue::Dense(DenseData::Ints(v))));
    f.push_op(
        Opcode::Const,
        &[],
        attrs,
        Some(vec![ty]),
        "w",
        Location::named("w"),
    )
    .expect("a valid const")[0]
}

fn qdq_rules(names: &[&str]) -> Vec<Rewrite> {
    let r: Vec<Rewrite> = super::qdq::rules()
        .unwrap()
        .into_iter()
        .filter(|r| names.contains(&r.name.as_str()))
        .collect();
    assert_eq!(r.len(), names.len(), "missing rules among {names:?}");
    r
}

/// Optimizes `f` with the named rules; checks that `fired` fired, the ops
/// left are `expect`, and the outputs are exactly equal.
fn check(f: &Func, names: &[&str], fired: &str, expect: &[Opcode]) {
    check_any(f, names, fired, &[expect]);
}

/// As [`check`], where several results cost the same (a view before or
/// after a dequantize): the ops left are one of `expect`.
fn check_any(f: &Func, names: &[&str], fired: &str, expect: &[&[Opcode]]) {
    let (g, stats) = optimize(f, &qdq_rules(names));
    assert!(
        stats.applied.iter().any(|(r, n)| r == fired && *n > 0),
        "{fired} did not fire: {stats:?}"
    );
    let ops: Vec<Opcode> = opcodes(&g)
        .into_iter()
        .filter(|o| *o != Opcode::Const)
        .collect();
    assert!(expect.contains(&ops.as_slice()), "{fired}: {ops:?}, expected one of {expect:?}");
    assert_eq!(max_error(f, &g, 4), 0.0, "{fired}");
}

fn func1(shape: &[usize], body: impl Fn(&mut Func, ValueId) -> ValueId) -> Func {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(shape), Location::default());
    let y = body(&mut f, x);
    f.set_return(vec![y]);
    f
}

#[test]
fn identical_pairs_cancel_and_different_ones_requantize() {
    let f = func1(&[2, 5], |f, x| {
        let a = qdq(f, x, 0.02, 3);
        qdq(f, a, 0.02, 3)
    });
    check(
        &f,
        &["qdq-cancel"],
        "qdq-cancel",
        &[Opcode::Quantize, Opcode::Dequantize],
    );
    let f = func1(&[2, 5], |f, x| {
        let a = qdq(f, x, 0.02, 3);
        qdq(f, a, 0.05, -1)
    });
    check(
        &f,
        &["qdq-requantize"],
        "qdq-requantize",
        &[Opcode::Quantize, Opcode::Requantize, Opcode::Dequantize],
    );
}

#[test]
fn cancel_needs_an_exact_round_trip() {
    // i32 storage: (q - zp) * s / s is not exact in f32 for large q.
    let f = func1(&[4], |f, x| {
        let t = qtype(&[4], Scalar::I32, 1e-6, 0);
        let q = quantize(f, x, t.clone());
        let d = dq(f, q);
        let q2 = quantize(f, d, t);
        dq(f, q2)
    });
    let (g, _) = optimize(&f, &qdq_rules(&["qdq-cancel"]));
    assert_eq!(
        opcodes(&g)
            .iter()
            .filter(|o| **o == Opcode::Quantize)
            .count(),
        2
    );
}

#[test]
fn relu_before_a_range_starting_at_zero_is_dropped() {
    let f = func1(&[3, 4], |f, x| {
        let r = op(f, Opcode::Relu, &[x], Attrs::new());
        qdq(f, r, 0.02, -128)
    });
    check(
        &f,
        &["qdq-relu-redundant"],
        "qdq-relu-redundant",
        &[Opcode::Quantize, Opcode::Dequantize],
    );
    // zero point 0: negative values are representable, the relu stays
    let f = func1(&[3, 4], |f, x| {
        let r = op(f, Opcode::Relu, &[x], Attrs::new());
        qdq(f, r, 0.02, 0)
    });
    let (g, _) = optimize(&f, &qdq_rules(&["qdq-relu-redundant"]));
    assert!(opcodes(&g).contains(&Opcode::Relu));
}

/// `D` with its attributes, for each data-movement op the family covers.
fn movers() -> Vec<(&'static str, Opcode, Attrs)> {
    vec![
        ("reshape", Opcode::Reshape, ints("shape", &[1, 2, 12, 4])),
        ("transpose", Opcode::Transpose, ints("perm", &[0, 2, 3, 1])),
        ("flatten", Opcode::Flatten, Attrs::new()),
        (
            "slice",
            Opcode::Slice,
            ints("starts", &[1])
                .with("ends", Attr::Ints(vec![5]))
                .with("axes", Attr::Ints(vec![3])),
        ),
        (
            "max-pool2d",
            Opcode::MaxPool2d,
            ints("kernel", &[3, 3])
                .with("strides", Attr::Ints(vec![2, 2]))
                .with("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ),
    ]
}

#[test]
fn dequantize_moves_forward_through_data_movement() {
    for (stem, opcode, attrs) in movers() {
        // q -> dq -> D -> q (same type) -> dq  ==>  q -> D -> dq
        let f = func1(&[1, 2, 6, 8], |f, x| {
            let a = qdq(f, x, 0.03, 5);
            let d = op(f, opcode, &[a], attrs.clone());
            qdq(f, d, 0.03, 5)
        });
        let name = format!("dequantize-through-{stem}");
        let moved: &[Opcode] = &[Opcode::Quantize, opcode, Opcode::Dequantize];
        // A view (reshape, flatten) costs nothing on either side of the
        // dequantize, so the extraction may keep it after; every other
        // mover is cheaper on the 8-bit data.
        let kept: &[Opcode] = &[Opcode::Quantize, Opcode::Dequantize, opcode];
        let forms = if opcode.info().has_trait(aoc_ir::Trait::View) { vec![moved, kept] } else { vec![moved] };
        check_any(&f, &[&name, "qdq-cancel"], &name, &forms);
    }
}

#[test]
fn quantize_moves_backward_through_data_movement() {
    for (stem, opcode, attrs) in movers() {
        let f = func1(&[1, 2, 6, 8], |f, x| {
            let a = qdq(f, x, 0.03, 5);
            let d = op(f, opcode, &[a], attrs.clone());
            qdq(f, d, 0.03, 5)
        });
        let name = format!("quantize-through-{stem}");
        check(
            &f,
            &[&name, "qdq-cancel"],
            &name,
            &[Opcode::Quantize, opcode, Opcode::Dequantize],
        );
    }
}

#[test]
fn max_pool_moves_need_a_positive_scale() {
    let (_, opcode, attrs) = movers().pop().unwrap();
    let f = func1(&[1, 2, 6, 8], |f, x| {
        let a = qdq(f, x, -0.03, 0);
        let d = op(f, opcode, &[a], attrs.clone());
        qdq(f, d, -0.03, 0)
    });
    let rules = qdq_rules(&[
        "dequantize-through-max-pool2d",
        "quantize-through-max-pool2d",
        "qdq-cancel",
    ]);
    let (g, stats) = optimize(&f, &rules);
    assert!(stats.applied.is_empty(), "{stats:?}");
    assert_eq!(
        opcodes(&g)
            .iter()
            .filter(|o| **o == Opcode::Quantize)
            .count(),
        2
    );
}

fn concat_func(arity: usize, scales: &[f64]) -> Func {
    let mut f = Func::new("main");
    let parts: Vec<ValueId> = (0..arity)
        .map(|i| {
            let x = f.add_param("x", f32t(&[2, i + 1]), Location::default());
            qdq(&mut f, x, scales[i], 1)
        })
        .collect();
    let c = op(
        &mut f,
        Opcode::Concat,
        &parts,
        Attrs::new().with("axis", Attr::Int(1)),
    );
    let y = qdq(&mut f, c, scales[0], 1);
    f.set_return(vec![y]);
    f
}

#[test]
fn concat_of_equal_types_moves_both_ways() {
    for n in [2, 3] {
        let f = concat_func(n, &[0.02; 3]);
        let mut expect = vec![Opcode::Quantize; n];
        expect.extend([Opcode::Concat, Opcode::Dequantize]);
        let fwd = format!("dequantize-through-concat-{n}");
        check(&f, &[&fwd, "qdq-cancel"], &fwd, &expect);
        let bwd = format!("quantize-through-concat-{n}");
        check(&f, &[&bwd, "qdq-cancel"], &bwd, &expect);
    }
    // different scales: dequantize cannot move, but quantize can
    let f = concat_func(2, &[0.02, 0.04]);
    let (_, stats) = optimize(&f, &qdq_rules(&["dequantize-through-concat-2"]));
    assert!(stats.applied.is_empty(), "{stats:?}");
}

/// The float op, its operands built from `x`, for each integer-op rule stem.
fn int_case(f: &mut Func, stem: &str) -> ValueId {
    let p = |f: &mut Func, shape: &[usize]| {
        let x = f.add_param("x", f32t(shape), Location::default());
        qdq(f, x, 0.02, 0)
    };
    let w8 = |f: &mut Func, ty: TensorType| {
        let c = qconst(f, ty, 3);
        dq(f, c)
    };
    match stem {
        "conv2d" | "conv2d-no-bias" => {
            let x = p(f, &[1, 2, 5, 5]);
            let w = w8(
                f,
                per_axis(&[3, 2, 3, 3], Scalar::I8, vec![0.01, 0.02, 0.005]),
            );
            let mut ops = vec![x, w];
            if stem == "conv2d" {
                // int32 bias with scale s_x * s_w per output channel
                let b = qconst(
                    f,
                    per_axis(&[3], Scalar::I32, vec![0.0002, 0.0004, 0.0001]),
                    5,
                );
                ops.push(dq(f, b));
            }
            op(f, Opcode::Conv2d, &ops, ints("pads", &[1, 1, 1, 1]))
        }
        "matmul" => {
            let a = p(f, &[2, 3, 4]);
            let b = w8(f, i8t(&[4, 5], 0.01, 2));
            op(f, Opcode::MatMul, &[a, b], Attrs::new())
        }
        "gemm" | "gemm-no-c" => {
            let a = p(f, &[2, 4]);
            let b = w8(f, per_axis(&[3, 4], Scalar::I8, vec![0.01, 0.03, 0.02]));
            let mut ops = vec![a, b];
            if stem == "gemm" {
                let c = qconst(f, qtype(&[3], Scalar::I32, 0.0002, 0), 7);
                ops.push(dq(f, c));
            }
            op(
                f,
                Opcode::Gemm,
                &ops,
                Attrs::new().with("trans_b", Attr::Bool(true)),
            )
        }
        "add" => {
            let a = p(f, &[2, 3]);
            let b = p(f, &[3]);
            op(f, Opcode::Add, &[a, b], Attrs::new())
        }
        "avg-pool2d" => {
            let x = p(f, &[1, 2, 5, 5]);
            let a = ints("kernel", &[2, 2])
                .with("strides", Attr::Ints(vec![2, 2]))
                .with("pads", Attr::Ints(vec![0, 0, 1, 1]));
            op(f, Opcode::AvgPool2d, &[x], a)
        }
        "global-avg-pool" => {
            let x = p(f, &[1, 3, 4, 4]);
            op(f, Opcode::GlobalAvgPool, &[x], Attrs::new())
        }
        _ => panic!("no case for {stem}"),
    }
}

#[test]
fn dequantize_op_quantize_becomes_the_integer_op() {
    let cases = [
        ("conv2d", Opcode::QuantConv2d),
        ("conv2d-no-bias", Opcode::QuantConv2d),
        ("matmul", Opcode::QuantMatMul),
        ("gemm", Opcode::QuantGemm),
        ("gemm-no-c", Opcode::QuantGemm),
        ("add", Opcode::QuantAdd),
        ("avg-pool2d", Opcode::QuantAvgPool2d),
        ("global-avg-pool", Opcode::QuantGlobalAvgPool),
    ];
    for (stem, int_op) in cases {
        for (suffix, act) in [
            ("", None),
            ("-relu", Some((Opcode::Relu, Attrs::new()))),
            (
                "-clip",
                Some((
                    Opcode::Clip,
                    Attrs::new()
                        .with("min", Attr::Float(-0.1))
                        .with("max", Attr::Float(0.3)),
                )),
            ),
        ] {
            let mut f = Func::new("main");
            let mut y = int_case(&mut f, stem);
            let float_op = f.ops[f.def_op(y).unwrap()].opcode;
            let act = act.map(|(a, attrs)| {
                y = op(&mut f, a, &[y], attrs);
                a
            });
            // zero point 10: negative values stay representable, so the
            // relu is not redundant and must be the epilogue
            let out = qdq(&mut f, y, 0.004, 10);
            f.set_return(vec![out]);
            let name = format!("int-{stem}{suffix}");
            let (g, stats) = optimize(&f, &qdq_rules(&[&name]));
            assert!(
                stats.applied.iter().any(|(r, n)| *r == name && *n > 0),
                "{name} did not fire: {stats:?}"
            );
            let ops = opcodes(&g);
            assert!(
                ops.contains(&int_op) && !ops.contains(&float_op),
                "{name}: {ops:?}"
            );
            assert!(act.is_none_or(|a| !ops.contains(&a)), "{name}: {ops:?}");
            assert_eq!(max_error(&f, &g, 4), 0.0, "{name}");
        }
    }
}

#[test]
fn integer_op_epilogue_is_printed_as_clip_attributes() {
    let mut f = Func::new("main");
    let y = int_case(&mut f, "add");
    let r = op(&mut f, Opcode::Relu, &[y], Attrs::new());
    let out = qdq(&mut f, r, 0.004, 10);
    f.set_return(vec![out]);
    let (g, _) = optimize(&f, &qdq_rules(&["int-add-relu"]));
    let add = g
        .body
        .ops
        .iter()
        .map(|o| &g.ops[*o])
        .find(|o| o.opcode == Opcode::QuantAdd)
        .unwrap();
    assert_eq!(add.attrs.get("clip_min"), Some(&Attr::Float(0.0)));
    assert_eq!(add.attrs.get("clip_max"), None);
}

/// Growth: 20 quantized residual blocks (conv, relu, reshape round trip,
/// max-pool, add) stay within 6 nodes per original op and saturate; the
/// float convs and adds all become integer ops, exactly.
#[test]
fn qdq_growth_is_bounded() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 2, 4, 4]), Location::default());
    let mut h = qdq(&mut f, x, 0.02, 0);
    for i in 0..20 {
        let w = qconst(
            &mut f,
            per_axis(&[2, 2, 1, 1], Scalar::I8, vec![0.01, 0.02]),
            i,
        );
        let w = dq(&mut f, w);
        let c = op(&mut f, Opcode::Conv2d, &[h, w], Attrs::new());
        let r = op(&mut f, Opcode::Relu, &[c], Attrs::new());
        let a = qdq(&mut f, r, 0.02, -128);
        let s = op(&mut f, Opcode::Reshape, &[a], ints("shape", &[1, 2, 16]));
        let s = qdq(&mut f, s, 0.02, -128);
        let s = op(&mut f, Opcode::Reshape, &[s], ints("shape", &[1, 2, 4, 4]));
        let m = op(&mut f, Opcode::MaxPool2d, &[s], ints("kernel", &[1, 1]));
        let m = qdq(&mut f, m, 0.02, -128);
        let sum = op(&mut f, Opcode::Add, &[m, h], Attrs::new());
        h = qdq(&mut f, sum, 0.02, 0);
    }
    f.set_return(vec![h]);
    let n_ops = f.body.ops.len();
    let (g, stats) = optimize(&f, &super::qdq::rules().unwrap());
    assert_eq!(stats.stop_reason, "saturated");
    assert!(
        stats.nodes <= 6 * n_ops,
        "{} nodes for {n_ops} ops",
        stats.nodes
    );
    let ops = opcodes(&g);
    assert!(
        !ops.contains(&Opcode::Conv2d) && !ops.contains(&Opcode::Add),
        "{ops:?}"
    );
    assert_eq!(
        ops.iter().filter(|o| **o == Opcode::QuantConv2d).count(),
        20
    );
    assert_eq!(ops.iter().filter(|o| **o == Opcode::Quantize).count(), 1);
    assert_eq!(ops.iter().filter(|o| **o == Opcode::Dequantize).count(), 1);
    assert_eq!(max_error(&f, &g, 3), 0.0);
}

/// A nearest resize moves between a quantize and a dequantize (it picks
/// stored values), so the pair around it cancels; a linear resize computes
/// new values and stays in float between them.
#[test]
fn nearest_resizes_move_through_q_dq_and_linear_ones_do_not() {
    for (mode, moved) in [("nearest", true), ("linear", false)] {
        let f = func1(&[1, 2, 3, 3], |f, x| {
            let a = qdq(f, x, 0.02, 3);
            let attrs = Attrs::new().with("sizes", Attr::Ints(vec![1, 2, 6, 6])).with("mode", Attr::Str(mode.into()));
            let r = op(f, Opcode::Resize, &[a], attrs);
            qdq(f, r, 0.02, 3)
        });
        let (g, _) = optimize(&f, &super::qdq::rules().unwrap());
        let ops = opcodes(&g);
        assert_eq!(ops.iter().filter(|o| **o == Opcode::Quantize).count(), if moved { 1 } else { 2 }, "{mode}: {ops:?}");
        assert_eq!(max_error(&f, &g, 3), 0.0, "{mode}");
    }
}

/// Deep reuse: 64 blocks that each add the previous block's value to
/// itself all become integer adds. Tree cost doubles at every block (2^64
/// block costs at the end), which put the integer form's saving below the
/// last bit of the later blocks' costs: they stayed float.
#[test]
fn deep_reuse_keeps_integer_forms() {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 8]), Location::default());
    let mut h = qdq(&mut f, x, 0.02, 0);
    for _ in 0..64 {
        let s = op(&mut f, Opcode::Add, &[h, h], Attrs::new());
        h = qdq(&mut f, s, 0.02, 0);
    }
    f.set_return(vec![h]);
    let (g, _) = optimize(&f, &super::qdq::rules().unwrap());
    let ops = opcodes(&g);
    assert_eq!(ops.iter().filter(|o| **o == Opcode::QuantAdd).count(), 64, "{ops:?}");
    assert!(!ops.contains(&Opcode::Add), "{ops:?}");
    assert_eq!(max_error(&f, &g, 3), 0.0);
}

/// `F(dequantize(a), dequantize(w))` of e4m3 operands with no quantize
/// after it (an fp8 layer whose output stays float) becomes the quantized
/// product with the float result type, exactly; int8 operands never do
/// (their float-output form has no kernel).
#[test]
fn fp8_products_keep_a_float_result() {
    let cases = [
        ("conv2d-no-bias", Opcode::Conv2d, Opcode::QuantConv2d, vec![1, 16, 3, 3], vec![4, 16, 1, 1]),
        ("matmul", Opcode::MatMul, Opcode::QuantMatMul, vec![3, 16], vec![16, 4]),
        ("gemm-no-c", Opcode::Gemm, Opcode::QuantGemm, vec![3, 16], vec![16, 4]),
    ];
    for (stem, float_op, q_op, xs, ws) in cases {
        for storage in [Scalar::F8E4M3FN, Scalar::I8] {
            let mut f = Func::new("main");
            let x = f.add_param("x", f32t(&xs), Location::default());
            let xq = quantize(&mut f, x, qtype(&xs, storage, 0.02, 0));
            let xd = dq(&mut f, xq);
            // Weights on the e4m3 grid (and whole numbers for i8).
            let n: usize = ws.iter().product();
            let vals: Vec<f64> = (0..n).map(|i| ((i * 7 % 13) as f64 - 6.0) * 0.5).collect();
            let data = match storage {
                Scalar::I8 => DenseData::Ints(vals.iter().map(|v| (v * 2.0) as i64).collect()),
                _ => DenseData::Floats(vals),
            };
            let attrs = Attrs::new().with("value", Attr::Const(ConstValue::Dense(data)));
            let w = f
                .push_op(Opcode::Const, &[], attrs, Some(vec![qtype(&ws, storage, 0.01, 0)]), "w", Location::named("w"))
                .expect("a valid const")[0];
            let wd = dq(&mut f, w);
            let y = op(&mut f, float_op, &[xd, wd], Attrs::new());
            f.set_return(vec![y]);
            let name = format!("fp8-{stem}-float");
            let (g, stats) = optimize(&f, &qdq_rules(&[&name]));
            let fired = stats.applied.iter().any(|(r, n)| *r == name && *n > 0);
            let ops = opcodes(&g);
            if storage == Scalar::I8 {
                assert!(!ops.contains(&q_op), "{name} on int8: {ops:?}");
                continue;
            }
            assert!(fired, "{name} did not fire: {stats:?}");
            assert!(ops.contains(&q_op) && !ops.contains(&float_op), "{name}: {ops:?}");
            assert_eq!(max_error(&f, &g, 4), 0.0, "{name}");
        }
    }
}

/// `quantize(add(matmul(dequantize(x), dequantize(w)), dequantize(b)))`
/// (a linear layer, the bias on either side of the add) becomes
/// `quant.matmul(x, w, b)`, exactly.
#[test]
fn a_linear_layers_bias_joins_the_integer_matmul() {
    for rev in [false, true] {
        let mut f = Func::new("main");
        let x = f.add_param("x", f32t(&[3, 16]), Location::default());
        let xq = quantize(&mut f, x, qtype(&[3, 16], Scalar::I8, 0.02, 0));
        let xd = dq(&mut f, xq);
        let wv: Vec<i64> = (0..64).map(|i| (i * 7 % 13) as i64 - 6).collect();
        let attrs = Attrs::new().with("value", Attr::Const(ConstValue::Dense(DenseData::Ints(wv))));
        let w = f
            .push_op(Opcode::Const, &[], attrs, Some(vec![qtype(&[16, 4], Scalar::I8, 0.01, 0)]), "w", Location::named("w"))
            .expect("a valid const")[0];
        let wd = dq(&mut f, w);
        let battrs = Attrs::new().with("value", Attr::Const(ConstValue::Dense(DenseData::Ints(vec![500, -70, 0, 1234]))));
        let b = f
            .push_op(Opcode::Const, &[], battrs, Some(vec![qtype(&[4], Scalar::I32, 0.0002, 0)]), "b", Location::named("b"))
            .expect("a valid const")[0];
        let bd = dq(&mut f, b);
        let y = op(&mut f, Opcode::MatMul, &[xd, wd], Attrs::new());
        let s = if rev { op(&mut f, Opcode::Add, &[bd, y], Attrs::new()) } else { op(&mut f, Opcode::Add, &[y, bd], Attrs::new()) };
        let sq = quantize(&mut f, s, qtype(&[3, 4], Scalar::I8, 0.05, 3));
        let sd = dq(&mut f, sq);
        f.set_return(vec![sd]);
        let name = if rev { "int-matmul-bias-rev" } else { "int-matmul-bias" };
        let (g, stats) = optimize(&f, &qdq_rules(&[name]));
        assert!(stats.applied.iter().any(|(r, n)| *r == name && *n > 0), "{name} did not fire: {stats:?}");
        let ops = opcodes(&g);
        assert!(ops.contains(&Opcode::QuantMatMul) && !ops.contains(&Opcode::MatMul) && !ops.contains(&Opcode::Add), "{name}: {ops:?}");
        let qm = g.body.ops.iter().find(|&&o| g.ops[o].opcode == Opcode::QuantMatMul).unwrap();
        assert_eq!(g.ops[*qm].operands.len(), 3, "{name}");
        assert_eq!(max_error(&f, &g, 4), 0.0, "{name}");
    }
}
