//! Tests of the reductions. Expected values computed with numpy
//! (`np.sum(..., dtype=x.dtype)` and friends) and pasted.

use crate::attr::{Attr, Attrs};
use crate::ops::Opcode;
use crate::ops::elementwise::tests::{assert_floats, assert_ints, ft, infer, it, run_one, ty};
use crate::tensor::Tensor;
use crate::types::Scalar;

fn reduce(op: Opcode, x: Tensor, axes: &[i64], keepdims: bool) -> Result<Tensor, String> {
    let attrs = Attrs::new().with("axes", Attr::Ints(axes.to_vec())).with("keepdims", Attr::Bool(keepdims));
    run_one(op, vec![x], attrs, None)
}

/// `np.arange(12).reshape(2, 3, 2) * 0.5 - 2` in f32.
fn x() -> Tensor {
    let v: Vec<f64> = (0..12).map(|i| i as f64 * 0.5 - 2.0).collect();
    ft(&[2, 3, 2], Scalar::F32, &v)
}

#[test]
fn float_reductions() {
    let y = reduce(Opcode::ReduceSum, x(), &[0, -1], true).unwrap();
    assert_eq!(y.ty, ty(&[1, 3, 1], Scalar::F32));
    assert_floats(&y, &[-1.0, 3.0, 7.0]);
    let y = reduce(Opcode::ReduceMean, x(), &[1], false).unwrap();
    assert_eq!(y.ty, ty(&[2, 2], Scalar::F32));
    assert_floats(&y, &[-1.0, -0.5, 2.0, 2.5]);
    let y = reduce(Opcode::ReduceMax, x(), &[2], false).unwrap();
    assert_floats(&y, &[-1.5, -0.5, 0.5, 1.5, 2.5, 3.5]);
    let y = reduce(Opcode::ReduceMin, x(), &[0], false).unwrap();
    assert_floats(&y, &[-2.0, -1.5, -1.0, -0.5, 0.0, 0.5]);
    // Every axis, to a scalar: sum of -2 .. 3.5 step 0.5 is 9.
    let y = reduce(Opcode::ReduceSum, x(), &[0, 1, 2], false).unwrap();
    assert_eq!(y.ty, ty(&[], Scalar::F32));
    assert_floats(&y, &[9.0]);
    // No axes: nothing is reduced.
    assert_eq!(reduce(Opcode::ReduceMean, x(), &[], true).unwrap(), x());
    // Mean rounds once to f32: (0.1f + 0.2f) / 2 in f64, then to f32.
    let y = reduce(Opcode::ReduceMean, ft(&[2], Scalar::F32, &[0.1, 0.2]), &[0], false).unwrap();
    assert_floats(&y, &[0.15000000596046448]);
}

#[test]
fn max_and_min_propagate_nan() {
    let x = ft(&[2, 2], Scalar::F32, &[1.0, f64::NAN, 3.0, 4.0]);
    assert_floats(&reduce(Opcode::ReduceMax, x.clone(), &[1], false).unwrap(), &[f64::NAN, 4.0]);
    assert_floats(&reduce(Opcode::ReduceMin, x, &[0], false).unwrap(), &[1.0, f64::NAN]);
}

#[test]
fn reductions_over_zero_elements() {
    let x = || ft(&[2, 0], Scalar::F32, &[]);
    assert_floats(&reduce(Opcode::ReduceSum, x(), &[1], false).unwrap(), &[0.0, 0.0]);
    let nan = f64::NAN;
    assert_floats(&reduce(Opcode::ReduceMean, x(), &[1], false).unwrap(), &[nan, nan]);
    let inf = f64::INFINITY;
    assert_floats(&reduce(Opcode::ReduceMax, x(), &[1], true).unwrap(), &[-inf, -inf]);
    assert_floats(&reduce(Opcode::ReduceMin, x(), &[-1], false).unwrap(), &[inf, inf]);
    assert_ints(&reduce(Opcode::ReduceMax, it(&[0], Scalar::I8, &[]), &[0], false).unwrap(), &[-128]);
    // Reducing the non-empty axis of an empty tensor gives an empty tensor.
    let y = reduce(Opcode::ReduceSum, x(), &[0], false).unwrap();
    assert_eq!(y.ty, ty(&[0], Scalar::F32));
}

#[test]
fn integer_reductions_wrap() {
    let x = || it(&[2, 3], Scalar::I8, &[100, 100, -50, 127, 1, 0]);
    assert_ints(&reduce(Opcode::ReduceSum, x(), &[1], false).unwrap(), &[-106, -128]);
    // numpy: the i8 sum 227 wraps to -29, then -29 / 2 truncates to -14.
    assert_ints(&reduce(Opcode::ReduceMean, x(), &[0], false).unwrap(), &[-14, 50, -25]);
    assert_ints(&reduce(Opcode::ReduceMax, x(), &[0, 1], false).unwrap(), &[127]);
    assert_ints(&reduce(Opcode::ReduceMin, x(), &[1], true).unwrap(), &[-50, 0]);
    let b = it(&[2, 2], Scalar::I1, &[1, 0, 0, 0]);
    assert_ints(&reduce(Opcode::ReduceMax, b.clone(), &[1], false).unwrap(), &[1, 0]);
    assert_ints(&reduce(Opcode::ReduceMin, b, &[0], false).unwrap(), &[0, 0]);
}

#[test]
fn infer_checks_axes() {
    let attrs = |axes: &[i64]| Attrs::new().with("axes", Attr::Ints(axes.to_vec()));
    let x = ty(&[2, 3, 4], Scalar::F32);
    let e = infer(Opcode::ReduceSum, std::slice::from_ref(&x), attrs(&[1, -2]), None).unwrap_err();
    assert_eq!(e, "core.reduce_sum: axis -2 is reduced twice (`axes` = [1, -2])");
    let e = infer(Opcode::ReduceMax, std::slice::from_ref(&x), attrs(&[3]), None).unwrap_err();
    assert_eq!(e, "core.reduce_max: axis 3 is out of range for rank 3");
    let e = infer(Opcode::ReduceSum, &[ty(&[2], Scalar::I1)], attrs(&[0]), None).unwrap_err();
    assert_eq!(e, "core.reduce_sum: operand must be a numeric tensor (float or integer), found tensor<2xi1>");
    let r = infer(Opcode::ReduceMean, std::slice::from_ref(&x), attrs(&[-1, 0]), None).unwrap();
    assert_eq!(r, vec![ty(&[1, 3, 1], Scalar::F32)]);
}
