//! Tests of the shape and data-movement ops. Expected values were computed
//! with numpy and the ONNX reference evaluator (onnx 1.23.2) and pasted as
//! literals.

use crate::attr::{Attr, Attrs};
use crate::interp::{NoWeights, eval_op};
use crate::ops::Opcode;
use crate::tensor::Tensor;
use crate::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
use crate::verify::infer_op;

fn t(shape: &[usize], n: usize) -> Tensor {
    Tensor::from_f64(
        TensorType::new(shape.to_vec(), Scalar::F32),
        (0..n).map(|i| i as f64).collect(),
    )
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

fn attrs(list: &[(&str, Attr)]) -> Attrs {
    list.iter()
        .fold(Attrs::new(), |a, (n, v)| a.with(n, v.clone()))
}

fn eval(op: Opcode, inputs: &[&Tensor], given: Attrs) -> Result<Tensor, String> {
    let attrs = op.info().complete_attrs(given)?;
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty.clone()).collect();
    let out = infer_op(op, &tys, &attrs, None)?;
    Ok(eval_op(op, inputs, &attrs, &out, &NoWeights)?.remove(0))
}

fn infer(op: Opcode, tys: &[TensorType], given: Attrs) -> Result<TensorType, String> {
    let attrs = op.info().complete_attrs(given)?;
    infer_op(op, tys, &attrs, None).map(|mut v| v.remove(0))
}

#[track_caller]
fn check(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape);
    assert_eq!(got.to_f64(), want);
}

/// i8 quantized along `axis` with one scale per slice.
fn per_axis(shape: &[usize], axis: usize) -> TensorType {
    let n = shape[axis];
    let q = QuantType {
        storage: Scalar::I8,
        expressed: Scalar::F32,
        params: QuantParams::PerAxis {
            axis,
            scales: vec![0.5; n],
            zero_points: vec![0; n],
        },
    };
    TensorType::new(shape.to_vec(), ElemType::Quant(Box::new(q)))
}

#[test]
fn slice_negative_steps_clamping_and_sentinels() {
    let x = t(&[4, 5], 20);
    let a = attrs(&[
        ("starts", ints(&[-1, 100])),
        ("ends", ints(&[i64::MIN, 0])),
        ("axes", ints(&[0, 1])),
        ("steps", ints(&[-2, -1])),
    ]);
    check(
        &eval(Opcode::Slice, &[&x], a).unwrap(),
        &[2, 4],
        &[19.0, 18.0, 17.0, 16.0, 9.0, 8.0, 7.0, 6.0],
    );
    let a = attrs(&[
        ("starts", ints(&[1, -100])),
        ("ends", ints(&[i64::MAX, 3])),
        ("axes", ints(&[-1, 0])),
        ("steps", ints(&[2, 1])),
    ]);
    check(
        &eval(Opcode::Slice, &[&x], a).unwrap(),
        &[3, 2],
        &[1.0, 3.0, 6.0, 8.0, 11.0, 13.0],
    );
    // Default axes (0, 1, ...) and steps; an empty range gives a 0-sized dim.
    let a = attrs(&[("starts", ints(&[0, 3])), ("ends", ints(&[4, 1]))]);
    check(&eval(Opcode::Slice, &[&x], a).unwrap(), &[4, 0], &[]);
    let a = attrs(&[
        ("starts", ints(&[0])),
        ("ends", ints(&[1])),
        ("steps", ints(&[0])),
    ]);
    assert_eq!(
        eval(Opcode::Slice, &[&x], a).unwrap_err(),
        "core.slice: steps must be non-zero"
    );
}

#[test]
fn pad_reflect_edge_wrap_and_constant_crop() {
    let x = t(&[2, 3], 6);
    let with = |mode: &str| {
        attrs(&[
            ("pads", ints(&[1, 2, 1, 2])),
            ("mode", Attr::Str(mode.into())),
        ])
    };
    #[rustfmt::skip]
    let cases: [(&str, [f64; 28]); 3] = [
        ("reflect", [5.0, 4.0, 3.0, 4.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 5.0, 4.0, 3.0, 4.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0]),
        ("edge", [0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0, 5.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0, 5.0]),
        ("wrap", [4.0, 5.0, 3.0, 4.0, 5.0, 3.0, 4.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 4.0, 5.0, 3.0, 4.0, 5.0, 3.0, 4.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0]),
    ];
    for (mode, want) in cases {
        check(
            &eval(Opcode::Pad, &[&x], with(mode)).unwrap(),
            &[4, 7],
            &want,
        );
    }
    // Pads larger than the dimension repeat the pattern, as numpy does.
    let z = Tensor::from_f64(TensorType::new(vec![3], Scalar::F32), vec![1.0, 2.0, 3.0]);
    let big = |mode: &str| attrs(&[("pads", ints(&[5, 4])), ("mode", Attr::Str(mode.into()))]);
    check(
        &eval(Opcode::Pad, &[&z], big("reflect")).unwrap(),
        &[12],
        &[2.0, 1.0, 2.0, 3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0, 2.0, 3.0],
    );
    check(
        &eval(Opcode::Pad, &[&z], big("wrap")).unwrap(),
        &[12],
        &[2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0],
    );
    // Negative pads crop: drop column 0, add a row of 9 at the bottom.
    let a = attrs(&[("pads", ints(&[0, -1, 1, 0])), ("value", Attr::Float(9.0))]);
    check(
        &eval(Opcode::Pad, &[&x], a).unwrap(),
        &[3, 2],
        &[1.0, 2.0, 4.0, 5.0, 9.0, 9.0],
    );
    let a = attrs(&[("pads", ints(&[0, -4, 0, 0]))]);
    assert_eq!(
        eval(Opcode::Pad, &[&x], a).unwrap_err(),
        "core.pad: pads -4 and 0 crop more than the 3 elements of dimension 1"
    );
}

#[test]
fn gather_negative_indices_and_out_of_range() {
    let x = t(&[4, 5], 20);
    let idx = Tensor::from_i64(TensorType::new(vec![2, 2], Scalar::I64), vec![-1, 0, 2, -5]);
    let y = eval(
        Opcode::Gather,
        &[&x, &idx],
        attrs(&[("axis", Attr::Int(1))]),
    )
    .unwrap();
    check(
        &y,
        &[4, 2, 2],
        &[
            4.0, 0.0, 2.0, 0.0, 9.0, 5.0, 7.0, 5.0, 14.0, 10.0, 12.0, 10.0, 19.0, 15.0, 17.0, 15.0,
        ],
    );
    let bad = Tensor::from_i64(TensorType::new(vec![1], Scalar::I32), vec![-6]);
    let e = eval(
        Opcode::Gather,
        &[&x, &bad],
        attrs(&[("axis", Attr::Int(1))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.gather: index -6 is out of range for dimension 1 of size 5"
    );
    // Scalar indices remove the axis.
    let s = Tensor::from_i64(TensorType::new(vec![], Scalar::I32), vec![2]);
    check(
        &eval(Opcode::Gather, &[&x, &s], Attrs::new()).unwrap(),
        &[5],
        &[10.0, 11.0, 12.0, 13.0, 14.0],
    );
}

#[test]
fn transpose_reshape_flatten_concat_expand() {
    let x = t(&[2, 3, 4], 24);
    let y = eval(
        Opcode::Transpose,
        &[&x],
        attrs(&[("perm", ints(&[2, 0, 1]))]),
    )
    .unwrap();
    #[rustfmt::skip]
    let want = [0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 1.0, 5.0, 9.0, 13.0, 17.0, 21.0, 2.0, 6.0, 10.0, 14.0, 18.0, 22.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0];
    check(&y, &[4, 2, 3], &want);
    let r = eval(Opcode::Reshape, &[&x], attrs(&[("shape", ints(&[6, 4]))])).unwrap();
    assert_eq!((r.shape(), r.to_f64()), (&[6, 4][..], x.to_f64()));
    for (axis, shape) in [(-1, [6, 4]), (3, [24, 1]), (0, [1, 24]), (-3, [1, 24])] {
        let f = eval(Opcode::Flatten, &[&x], attrs(&[("axis", Attr::Int(axis))])).unwrap();
        assert_eq!(f.shape(), shape, "axis {axis}");
    }
    let a = t(&[2, 1], 2);
    let b = t(&[2, 2], 4);
    let c = eval(
        Opcode::Concat,
        &[&a, &b, &a],
        attrs(&[("axis", Attr::Int(-1))]),
    )
    .unwrap();
    check(&c, &[2, 4], &[0.0, 0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 1.0]);
    // [2, 1] against [3, 1, 4] broadcasts to [3, 2, 4].
    let e = eval(Opcode::Expand, &[&a], attrs(&[("shape", ints(&[3, 1, 4]))])).unwrap();
    assert_eq!(e.shape(), [3, 2, 4]);
    assert_eq!(e.to_f64()[..8], [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    // Fewer dims than the operand is allowed too.
    assert_eq!(
        eval(Opcode::Expand, &[&b], attrs(&[("shape", ints(&[1]))]))
            .unwrap()
            .shape(),
        [2, 2]
    );
}

#[test]
fn shape_infer_errors() {
    let f32t = |s: &[usize]| TensorType::new(s.to_vec(), Scalar::F32);
    let e = infer(
        Opcode::Transpose,
        &[f32t(&[2, 3, 4])],
        attrs(&[("perm", ints(&[0, 0, 1]))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.transpose: perm [0, 0, 1] is not a permutation of 0..3"
    );
    let e = infer(
        Opcode::Transpose,
        &[f32t(&[2, 3])],
        attrs(&[("perm", ints(&[1, 0, 2]))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.transpose: perm [1, 0, 2] is not a permutation of 0..2"
    );
    let e = infer(
        Opcode::Reshape,
        &[f32t(&[2, 3])],
        attrs(&[("shape", ints(&[4, 2]))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.reshape: shape [4, 2] has 8 elements, operand [2, 3] has 6"
    );
    let e = infer(
        Opcode::Concat,
        &[f32t(&[2, 3]), f32t(&[3, 3])],
        attrs(&[("axis", Attr::Int(1))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.concat: operand 1 has shape [3, 3], which differs from [2, 3] outside axis 1"
    );
    let e = infer(
        Opcode::Flatten,
        &[f32t(&[2, 3])],
        attrs(&[("axis", Attr::Int(3))]),
    )
    .unwrap_err();
    assert_eq!(e, "core.flatten: axis 3 is out of range [-2, 2]");
    let e = infer(
        Opcode::Expand,
        &[f32t(&[2, 3])],
        attrs(&[("shape", ints(&[4, 1]))]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.expand: operand shape [2, 3] and shape [4, 1] do not broadcast"
    );
    let idx = TensorType::new(vec![2], Scalar::I16);
    let e = infer(Opcode::Gather, &[f32t(&[4]), idx], Attrs::new()).unwrap_err();
    assert_eq!(e, "core.gather: indices must be i32 or i64, found i16");
}

#[test]
fn quantized_types_carry_through() {
    // Per-tensor: values and type unchanged.
    let q = QuantType {
        storage: Scalar::U8,
        expressed: Scalar::F32,
        params: QuantParams::PerTensor {
            scale: 0.1,
            zero_point: 128,
        },
    };
    let ty = TensorType::new(vec![2, 2], ElemType::Quant(Box::new(q)));
    let x = Tensor::from_i64(ty.clone(), vec![1, 2, 3, 255]);
    let y = eval(Opcode::Transpose, &[&x], attrs(&[("perm", ints(&[1, 0]))])).unwrap();
    assert_eq!(
        (y.ty.elem.clone(), y.to_i64()),
        (ty.elem.clone(), vec![1, 3, 2, 255])
    );
    let p = eval(
        Opcode::Pad,
        &[&x],
        attrs(&[("pads", ints(&[0, 1, 0, 0])), ("value", Attr::Float(128.0))]),
    )
    .unwrap();
    assert_eq!(p.to_i64(), vec![128, 1, 2, 128, 3, 255]);
    // Per-axis: transpose moves the axis; gather and expand remap it.
    let pa = per_axis(&[2, 3, 4], 1);
    let out = infer(
        Opcode::Transpose,
        std::slice::from_ref(&pa),
        attrs(&[("perm", ints(&[2, 0, 1]))]),
    )
    .unwrap();
    assert_eq!(out.elem.quant().unwrap().axis(), Some(2));
    let idx = TensorType::new(vec![5, 6], Scalar::I64);
    let out = infer(Opcode::Gather, &[pa.clone(), idx.clone()], Attrs::new()).unwrap();
    assert_eq!(
        (out.shape.clone(), out.elem.quant().unwrap().axis()),
        (vec![5, 6, 3, 4], Some(2))
    );
    let out = infer(
        Opcode::Expand,
        std::slice::from_ref(&pa),
        attrs(&[("shape", ints(&[7, 1, 1, 1]))]),
    )
    .unwrap();
    assert_eq!(out.elem.quant().unwrap().axis(), Some(2));
    // ... and ops that would change the quantized axis reject the type.
    let e = infer(
        Opcode::Reshape,
        std::slice::from_ref(&pa),
        attrs(&[("shape", ints(&[6, 4]))]),
    )
    .unwrap_err();
    assert!(
        e.starts_with("core.reshape: per-axis quantized element type"),
        "{e}"
    );
    let e = infer(
        Opcode::Gather,
        &[pa.clone(), idx],
        attrs(&[("axis", Attr::Int(1))]),
    )
    .unwrap_err();
    assert!(e.ends_with("gather indexes the quantized axis"), "{e}");
    let a = attrs(&[
        ("starts", ints(&[1])),
        ("ends", ints(&[3])),
        ("axes", ints(&[1])),
    ]);
    assert!(infer(Opcode::Slice, std::slice::from_ref(&pa), a).is_err());
    let a = attrs(&[
        ("starts", ints(&[1])),
        ("ends", ints(&[3])),
        ("axes", ints(&[2])),
    ]);
    assert_eq!(
        infer(Opcode::Slice, std::slice::from_ref(&pa), a)
            .unwrap()
            .elem,
        pa.elem
    );
}
