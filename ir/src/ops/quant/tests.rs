//! Tests of the quant ops. Expected values were computed with ONNX's
//! reference `QuantizeLinear` / `DequantizeLinear` (opset 22) and pasted.

use crate::attr::{Attr, Attrs};
use crate::ops::Opcode;
use crate::ops::elementwise::tests::{assert_floats, assert_ints, ft, infer, run_one, ty};
use crate::tensor::Tensor;
use crate::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};

fn per_tensor(storage: Scalar, expressed: Scalar, scale: f64, zero_point: i64) -> ElemType {
    ElemType::Quant(Box::new(QuantType { storage, expressed, params: QuantParams::PerTensor { scale, zero_point } }))
}

fn per_axis(storage: Scalar, axis: usize, scales: &[f64], zero_points: &[i64]) -> ElemType {
    ElemType::Quant(Box::new(QuantType {
        storage,
        expressed: Scalar::F32,
        params: QuantParams::PerAxis { axis, scales: scales.to_vec(), zero_points: zero_points.to_vec() },
    }))
}

fn quantize(x: Tensor, elem: ElemType, saturate: bool) -> Result<Tensor, String> {
    let declared = TensorType::new(x.ty.shape.clone(), elem);
    run_one(Opcode::Quantize, vec![x], Attrs::new().with("saturate", Attr::Bool(saturate)), Some(vec![declared]))
}

fn dequantize(q: Tensor) -> Tensor {
    run_one(Opcode::Dequantize, vec![q], Attrs::new(), None).unwrap()
}

#[test]
fn quantize_rounds_half_to_even_and_saturates() {
    let x = || ft(&[8], Scalar::F32, &[2.5, 3.5, -2.5, -3.5, 1000.0, -1000.0, 0.49999997, f64::INFINITY]);
    // ONNX's reference turns +inf into -128 through an undefined float to
    // int32 cast; the spec says saturate, so +inf gives 127.
    let q = quantize(x(), per_tensor(Scalar::I8, Scalar::F32, 1.0, 0), true).unwrap();
    assert_ints(&q, &[2, 4, -2, -4, 127, -128, 0, 127]);
    let q = quantize(x(), per_tensor(Scalar::U8, Scalar::F32, 1.0, 10), true).unwrap();
    assert_ints(&q, &[12, 14, 8, 6, 255, 0, 10, 255]);
    // The quotient is rounded to f32 first: 0.3f / 0.1f = 3.0000002 -> 3.
    let x = ft(&[4], Scalar::F32, &[0.1, 0.25, -0.35, 0.3]);
    let q = quantize(x, per_tensor(Scalar::I8, Scalar::F32, 0.1, -3), true).unwrap();
    assert_ints(&q, &[-2, -1, -7, 0]);
}

#[test]
fn quantize_per_axis() {
    let x = ft(&[2, 3], Scalar::F32, &[0.5, 1.0, 2.5, -0.5, -7.0, 300.0]);
    let q = quantize(x, per_axis(Scalar::I8, 1, &[1.0, 2.0, 0.5], &[0, 1, -2]), true).unwrap();
    assert_ints(&q, &[0, 1, 3, 0, -3, 127]);
}

#[test]
fn quantize_f16_divides_in_f16() {
    let x = ft(&[3], Scalar::F16, &[0.3, 1.7, -2.2]);
    let q = quantize(x, per_tensor(Scalar::I8, Scalar::F16, 0.1, 0), true).unwrap();
    assert_ints(&q, &[3, 17, -22]);
}

#[test]
fn quantize_to_fp8() {
    let x = || ft(&[5], Scalar::F32, &[1.0, 900.0, -0.3, 0.1, 1000.0]);
    let q = quantize(x(), per_tensor(Scalar::F8E4M3FN, Scalar::F32, 2.0, 0), true).unwrap();
    assert_floats(&q, &[0.5, 448.0, -0.15625, 0.05078125, 448.0]);
    // Without saturation 450 still rounds to 448, 500 has no value: NaN.
    let q = quantize(x(), per_tensor(Scalar::F8E4M3FN, Scalar::F32, 2.0, 0), false).unwrap();
    assert_floats(&q, &[0.5, 448.0, -0.15625, 0.05078125, f64::NAN]);
}

#[test]
fn dequantize_matches_onnx() {
    let q = Tensor::from_i64(
        TensorType::new(vec![4], per_tensor(Scalar::I8, Scalar::F32, 0.1, -3)),
        vec![-128, -3, 0, 127],
    );
    let x = dequantize(q);
    assert_eq!(x.ty, ty(&[4], Scalar::F32));
    assert_floats(&x, &[-12.5, 0.0, 0.30000001192092896, 13.0]);

    let e = per_axis(Scalar::U8, 1, &[0.5, 0.25, 3.0], &[1, 2, 3]);
    let q = Tensor::from_i64(TensorType::new(vec![2, 3], e), vec![1, 2, 3, 4, 5, 6]);
    assert_floats(&dequantize(q), &[0.0, 0.0, 0.0, 1.5, 0.75, 9.0]);

    // f16 expressed: product in f32, then rounded to f16.
    let q = Tensor::from_i64(
        TensorType::new(vec![4], per_tensor(Scalar::I8, Scalar::F16, 0.1, -3)),
        vec![-128, -3, 0, 127],
    );
    assert_floats(&dequantize(q), &[-12.5, 0.0, 0.2998046875, 13.0]);

    // i32 storage: the stored value goes through f32 first, the rest in f64.
    let q = Tensor::from_i64(
        TensorType::new(vec![3], per_tensor(Scalar::I32, Scalar::F32, 0.1, 1)),
        vec![16777217, -5, 2147483647],
    );
    assert_floats(&dequantize(q), &[1677721.5, -0.6000000238418579, 214748368.0]);

    let q = Tensor::from_f64(
        TensorType::new(vec![3], per_tensor(Scalar::F8E4M3FN, Scalar::F32, 0.5, 0)),
        vec![448.0, -0.3125, 1.0],
    );
    assert_floats(&dequantize(q), &[224.0, -0.15625, 0.5]);
}

#[test]
fn requantize_is_dequantize_then_quantize() {
    let q = Tensor::from_i64(
        TensorType::new(vec![5], per_tensor(Scalar::I8, Scalar::F32, 0.1, -3)),
        vec![-128, -3, 0, 1, 127],
    );
    let out = TensorType::new(vec![5], per_tensor(Scalar::U8, Scalar::F32, 0.05, 128));
    let r = run_one(Opcode::Requantize, vec![q], Attrs::new(), Some(vec![out.clone()])).unwrap();
    assert_eq!(r.ty, out);
    assert_ints(&r, &[0, 128, 134, 136, 255]);
}

#[test]
fn infer_checks_quant_types() {
    let sat = || Attrs::new().with("saturate", Attr::Bool(true));
    let x = ty(&[2, 3], Scalar::F32);
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), None).unwrap_err();
    assert_eq!(e, "quant.quantize: the result type must be given");
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[ty(&[2, 3], Scalar::I8)])).unwrap_err();
    assert_eq!(e, "quant.quantize: result must have a quantized element type, found tensor<2x3xi8>");
    let e = infer(Opcode::Quantize, &[ty(&[2, 3], Scalar::I32)], sat(), Some(&[ty(&[2, 3], Scalar::I8)])).unwrap_err();
    assert_eq!(e, "quant.quantize: operand must be a float tensor, found tensor<2x3xi32>");
    let f16 = TensorType::new(vec![2, 3], per_tensor(Scalar::I8, Scalar::F16, 0.1, 0));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[f16])).unwrap_err();
    assert_eq!(e, "quant.quantize: result's expressed type must be f32 (the operand's), found f16");
    let shape = TensorType::new(vec![3, 2], per_tensor(Scalar::I8, Scalar::F32, 0.1, 0));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[shape])).unwrap_err();
    assert_eq!(e, "quant.quantize: result shape [3, 2] must equal the operand shape [2, 3]");
    let axis = TensorType::new(vec![2, 3], per_axis(Scalar::I8, 2, &[0.1, 0.2], &[0, 0]));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[axis])).unwrap_err();
    assert!(e.starts_with("quant.quantize: quantization axis 2 is out of range for rank 2"), "{e}");
    let count = TensorType::new(vec![2, 3], per_axis(Scalar::I8, 1, &[0.1, 0.2], &[0, 0]));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[count])).unwrap_err();
    assert!(e.starts_with("quant.quantize: per-axis quantization along axis 1 needs 3 scales"), "{e}");
    let fp8 = TensorType::new(vec![2, 3], per_tensor(Scalar::F8E4M3FN, Scalar::F32, 0.1, 1));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[fp8])).unwrap_err();
    assert!(e.starts_with("quant.quantize: zero point must be 0 for fp8 storage, found 1"), "{e}");
    let zp = TensorType::new(vec![2, 3], per_tensor(Scalar::U8, Scalar::F32, 0.1, -1));
    let e = infer(Opcode::Quantize, std::slice::from_ref(&x), sat(), Some(&[zp])).unwrap_err();
    assert!(e.starts_with("quant.quantize: zero point -1 is outside the range of u8"), "{e}");

    let e = infer(Opcode::Dequantize, std::slice::from_ref(&x), Attrs::new(), None).unwrap_err();
    assert_eq!(e, "quant.dequantize: operand must have a quantized element type, found tensor<2x3xf32>");
    let q = TensorType::new(vec![2, 3], per_axis(Scalar::I8, 0, &[0.1, 0.2], &[0, 0]));
    assert_eq!(infer(Opcode::Dequantize, std::slice::from_ref(&q), Attrs::new(), None).unwrap(), vec![x.clone()]);

    let other = TensorType::new(vec![2, 3], per_tensor(Scalar::I8, Scalar::BF16, 0.1, 0));
    let e = infer(Opcode::Requantize, std::slice::from_ref(&q), Attrs::new(), Some(&[other])).unwrap_err();
    assert_eq!(e, "quant.requantize: result's expressed type must be f32 (the operand's), found bf16");
    let e = infer(Opcode::Requantize, std::slice::from_ref(&q), Attrs::new(), None).unwrap_err();
    assert_eq!(e, "quant.requantize: the result type must be given");
}
