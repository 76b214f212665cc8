//! Tests of the elementwise ops. Expected values were computed with ONNX's
//! reference implementation (`onnx.reference`, numpy 2, f32 inputs) and
//! pasted as literals.

use crate::attr::{Attr, Attrs};
use crate::diag::Location;
use crate::interp::{self, NoWeights};
use crate::module::{Func, Module};
use crate::ops::Opcode;
use crate::tensor::{Data, Tensor};
use crate::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
use crate::verify;

/// Builds a one-op function over `inputs`, verifies it and runs it in the
/// interpreter. Errors (from building or running) come back as messages.
pub(crate) fn run_one(
    op: Opcode,
    inputs: Vec<Tensor>,
    attrs: Attrs,
    declared: Option<Vec<TensorType>>,
) -> Result<Tensor, String> {
    let mut f = Func::new("t");
    let params: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| f.add_param(&format!("x{i}"), t.ty.clone(), Location::default()))
        .collect();
    let r = f.push_op(op, &params, attrs, declared, "y", Location::default()).map_err(|d| d.message)?;
    f.set_return(r);
    let module = Module { weights: vec![], funcs: vec![f] };
    let diags = verify::verify_module(&module);
    assert!(diags.is_empty(), "verifier: {diags:?}");
    let mut out = interp::run(&module.funcs[0], inputs, &NoWeights).map_err(|d| d.message)?;
    Ok(out.remove(0))
}

/// Infers `op`'s result types from operand types alone (attributes
/// completed with defaults).
pub(crate) fn infer(
    op: Opcode,
    operands: &[TensorType],
    attrs: Attrs,
    declared: Option<&[TensorType]>,
) -> Result<Vec<TensorType>, String> {
    let attrs = op.info().complete_attrs(attrs)?;
    verify::infer_op(op, operands, &attrs, declared)
}

pub(crate) fn ty(shape: &[usize], s: Scalar) -> TensorType {
    TensorType::new(shape.to_vec(), s)
}

/// A tensor from float values, rounded to `s`.
pub(crate) fn ft(shape: &[usize], s: Scalar, v: &[f64]) -> Tensor {
    Tensor::from_f64(ty(shape, s), v.to_vec())
}

/// A tensor from integer values (wrapped to `s`).
pub(crate) fn it(shape: &[usize], s: Scalar, v: &[i64]) -> Tensor {
    Tensor::from_i64(ty(shape, s), v.to_vec())
}

/// Exact float comparison, NaN equal to NaN, sign of zero ignored.
pub(crate) fn assert_floats(t: &Tensor, want: &[f64]) {
    let Data::F(got) = &t.data else { panic!("expected floats, got {:?}", t.data) };
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w || (g.is_nan() && w.is_nan()), "element {i}: got {g:?}, want {w:?} (all: {got:?})");
    }
}

/// Float comparison within a relative tolerance (for transcendental ops,
/// where ONNX's reference computes in f32 and we compute in f64).
fn assert_close(t: &Tensor, want: &[f64], rel: f64) {
    let Data::F(got) = &t.data else { panic!("expected floats, got {:?}", t.data) };
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= rel * w.abs().max(1e-30) || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g:?}, want {w:?}");
    }
}

pub(crate) fn assert_ints(t: &Tensor, want: &[i64]) {
    assert_eq!(t.data, Data::I(want.to_vec()));
}

const X: [f64; 8] = [-2.5, -1.0, -0.3, 0.0, 0.7, 1.5, 3.0, 6.5];

fn unary(op: Opcode, attrs: Attrs) -> Tensor {
    run_one(op, vec![ft(&[8], Scalar::F32, &X)], attrs, None).unwrap()
}

#[test]
fn activations_match_onnx_reference() {
    let none = Attrs::new;
    // Rounded-step ops match ONNX's f32 results exactly.
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::HardSwish, none()), &[
        -0.20833328366279602, -0.3333333134651184, -0.13500000536441803, 0.0,
        0.43166667222976685, 1.125, 3.0, 6.5]);
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::HardSigmoid, none()), &[
        0.0, 0.30000001192092896, 0.4399999976158142, 0.5, 0.6399999856948853, 0.800000011920929, 1.0, 1.0]);
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::LeakyRelu, none().with("alpha", Attr::Float(0.1))), &[
        -0.25, -0.10000000149011612, -0.030000001192092896, 0.0, 0.699999988079071, 1.5, 3.0, 6.5]);
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::Reciprocal, none()), &[
        -0.4000000059604645, -1.0, -3.3333332538604736, f64::INFINITY,
        1.4285714626312256, 0.6666666865348816, 0.3333333432674408, 0.1538461595773697]);
    assert_floats(&unary(Opcode::Floor, none()), &[-3.0, -1.0, -1.0, 0.0, 0.0, 1.0, 3.0, 6.0]);
    assert_floats(&unary(Opcode::Ceil, none()), &[-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, 3.0, 7.0]);
    let clip = none().with("min", Attr::Float(-1.0)).with("max", Attr::Float(2.0));
    assert_floats(
        &unary(Opcode::Clip, clip),
        &[-1.0, -1.0, -0.30000001192092896, 0.0, 0.699999988079071, 1.5, 2.0, 2.0],
    );
    let clip_lo = none().with("min", Attr::Float(-1.0));
    assert_floats(
        &unary(Opcode::Clip, clip_lo),
        &[-1.0, -1.0, -0.30000001192092896, 0.0, 0.699999988079071, 1.5, 3.0, 6.5],
    );
    assert_floats(&unary(Opcode::Clip, none()), &X.map(|v| v as f32 as f64));

    // Transcendental ops: ONNX's reference rounds each f32 step; we round
    // once from f64, so allow an ulp or two of f32.
    let rel = 3e-7;
    // Gelu: exact f64 values (math.erf, np.tanh) rounded to f32. ONNX's
    // reference evaluates the function body in f32, which loses digits to
    // cancellation in `1 + erf(x)` for negative x (-0.0155241787 at -2.5).
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::Gelu, none()), &[
        -0.015524162910878658, -0.15865525603294373, -0.11462657898664474, 0.0,
        0.5306254029273987, 1.3997892141342163, 2.995950222015381, 6.5]);
    #[rustfmt::skip]
    assert_floats(&unary(Opcode::Gelu, none().with("approximate", Attr::Str("tanh".into()))), &[
        -0.015084265731275082, -0.15880800783634186, -0.11462908238172531, 0.0,
        0.5305701494216919, 1.3995715379714966, 2.9963626861572266, 6.5]);
    #[rustfmt::skip]
    assert_close(&unary(Opcode::Sigmoid, none()), &[
        0.07585818320512772, 0.26894140243530273, 0.4255574643611908, 0.5,
        0.6681877970695496, 0.8175745010375977, 0.9525741338729858, 0.998498797416687], rel);
    #[rustfmt::skip]
    assert_close(&unary(Opcode::Erf, none()), &[
        -0.9995930194854736, -0.8427007794380188, -0.3286267817020416, 0.0,
        0.6778011918067932, 0.9661051630973816, 0.9999778866767883, 1.0], rel);
    #[rustfmt::skip]
    assert_close(&unary(Opcode::Exp, none()), &[
        0.0820850059390068, 0.3678794205188751, 0.740818202495575, 1.0,
        2.0137526988983154, 4.481688976287842, 20.08553695678711, 665.1416625976562], rel);
    #[rustfmt::skip]
    assert_close(&unary(Opcode::Tanh, none()), &[
        -0.9866142868995667, -0.7615941762924194, -0.29131263494491577, 0.0,
        0.6043677926063538, 0.9051482081413269, 0.9950547814369202, 0.9999954700469971], rel);
    #[rustfmt::skip]
    assert_close(&unary(Opcode::Silu, none()), &[
        -0.189645454287529, -0.2689414322376251, -0.12766724824905396, 0.0,
        0.46773141622543335, 1.2263617515563965, 2.857722282409668, 6.4902424812316895], rel);
}

#[test]
fn f16_results_round_to_f16() {
    // 1/3 in f16 is 0.333251953125 (numpy: np.float16(1)/np.float16(3)).
    let y = run_one(Opcode::Reciprocal, vec![ft(&[1], Scalar::F16, &[3.0])], Attrs::new(), None).unwrap();
    assert_floats(&y, &[0.333251953125]);
    assert_eq!(y.ty, ty(&[1], Scalar::F16));
}

#[test]
fn integer_unary_ops_wrap() {
    let x = || it(&[4], Scalar::I8, &[-128, -5, 0, 127]);
    assert_ints(&run_one(Opcode::Neg, vec![x()], Attrs::new(), None).unwrap(), &[-128, 5, 0, -127]);
    assert_ints(&run_one(Opcode::Abs, vec![x()], Attrs::new(), None).unwrap(), &[-128, 5, 0, 127]);
    assert_ints(&run_one(Opcode::Relu, vec![x()], Attrs::new(), None).unwrap(), &[0, 0, 0, 127]);
    let clip = Attrs::new().with("min", Attr::Float(-4.0)).with("max", Attr::Float(100.0));
    let y = run_one(Opcode::Clip, vec![it(&[5], Scalar::I8, &[-128, -5, 0, 5, 127])], clip, None).unwrap();
    assert_ints(&y, &[-4, -4, 0, 5, 100]);
}

fn binary(op: Opcode, a: Tensor, b: Tensor) -> Result<Tensor, String> {
    run_one(op, vec![a, b], Attrs::new(), None)
}

#[test]
fn binary_ops_broadcast() {
    let a = || ft(&[1, 3], Scalar::F32, &[1.5, -2.0, 3.25]);
    let b = || ft(&[2, 1], Scalar::F32, &[2.0, 0.1]);
    let y = binary(Opcode::Add, a(), b()).unwrap();
    assert_eq!(y.ty, ty(&[2, 3], Scalar::F32));
    assert_floats(&y, &[3.5, 0.0, 5.25, 1.600000023841858, -1.899999976158142, 3.3499999046325684]);
    let y = binary(Opcode::Sub, a(), b()).unwrap();
    assert_floats(&y, &[-0.5, -4.0, 1.25, 1.399999976158142, -2.0999999046325684, 3.1500000953674316]);
    let y = binary(Opcode::Mul, a(), b()).unwrap();
    assert_floats(&y, &[3.0, -4.0, 6.5, 0.15000000596046448, -0.20000000298023224, 0.32500001788139343]);
    let y = binary(Opcode::Div, a(), b()).unwrap();
    assert_floats(&y, &[0.75, -1.0, 1.625, 15.0, -20.0, 32.5]);
    // (-2)^0.1 is NaN; the others within f32 pow's error.
    let y = binary(Opcode::Pow, a(), b()).unwrap();
    assert_close(&y, &[2.25, 4.0, 10.5625, 1.041379690170288, f64::NAN, 1.1250927448272705], 1e-7);
}

#[test]
fn integer_arithmetic_wraps_and_division_truncates() {
    let y = binary(Opcode::Div, it(&[5], Scalar::I8, &[7, -7, 7, -7, -128]), it(&[5], Scalar::I8, &[2, 2, -2, -2, -1]));
    assert_ints(&y.unwrap(), &[3, -3, -3, 3, -128]);
    let y = binary(Opcode::Add, it(&[3], Scalar::I8, &[100, -100, 127]), it(&[3], Scalar::I8, &[100, -100, 1]));
    assert_ints(&y.unwrap(), &[-56, 56, -128]);
    let y = binary(Opcode::Mul, it(&[3], Scalar::U8, &[16, 200, 3]), it(&[3], Scalar::U8, &[16, 2, 3]));
    assert_ints(&y.unwrap(), &[0, 144, 9]);
    let y = binary(Opcode::Sub, it(&[2], Scalar::U8, &[1, 0]), it(&[2], Scalar::U8, &[2, 255]));
    assert_ints(&y.unwrap(), &[255, 1]);
    let e = binary(Opcode::Div, it(&[2], Scalar::I32, &[1, 2]), it(&[2], Scalar::I32, &[1, 0])).unwrap_err();
    assert_eq!(e, "core.div: division by zero");
    let y = binary(Opcode::Max, it(&[3], Scalar::I64, &[i64::MIN, 5, -3]), it(&[1], Scalar::I64, &[0]));
    assert_ints(&y.unwrap(), &[0, 5, 0]);
}

#[test]
fn max_and_min_propagate_nan() {
    let nan = f64::NAN;
    let a = || ft(&[4], Scalar::F32, &[1.0, nan, 3.0, -0.5]);
    let b = || ft(&[4], Scalar::F32, &[nan, 2.0, 1.0, -0.25]);
    assert_floats(&binary(Opcode::Max, a(), b()).unwrap(), &[nan, nan, 3.0, -0.25]);
    assert_floats(&binary(Opcode::Min, a(), b()).unwrap(), &[nan, nan, 1.0, -0.5]);
    assert_floats(
        &run_one(Opcode::Relu, vec![ft(&[2], Scalar::F32, &[nan, -1.0])], Attrs::new(), None).unwrap(),
        &[nan, 0.0],
    );
}

#[test]
fn pow_mixes_element_types() {
    let y = binary(Opcode::Pow, it(&[3], Scalar::I32, &[2, 3, -2]), ft(&[3], Scalar::F32, &[0.5, 2.0, 3.0])).unwrap();
    assert_eq!(y.ty, ty(&[3], Scalar::I32));
    assert_ints(&y, &[1, 9, -8]);
    let y = binary(Opcode::Pow, ft(&[3], Scalar::F32, &[2.0, 3.0, -2.0]), it(&[3], Scalar::I64, &[-1, 2, 3])).unwrap();
    assert_floats(&y, &[0.5, 9.0, -8.0]);
    let y = binary(Opcode::Pow, it(&[4], Scalar::I32, &[2, 3, -2, 7]), it(&[4], Scalar::I32, &[31, 2, 3, 0])).unwrap();
    assert_ints(&y, &[-2147483648, 9, -8, 1]);
}

#[test]
fn prelu_comparisons_and_where() {
    let x = ft(&[2, 2], Scalar::F32, &[-1.0, 2.0, -3.0, 0.0]);
    let slope = ft(&[2], Scalar::F32, &[0.25, 0.5]);
    assert_floats(&binary(Opcode::Prelu, x, slope).unwrap(), &[-0.25, 2.0, -0.75, 0.0]);

    let y = binary(Opcode::Equal, it(&[3], Scalar::I32, &[1, 2, 3]), it(&[1], Scalar::I32, &[2])).unwrap();
    assert_eq!(y.ty, ty(&[3], Scalar::I1));
    assert_ints(&y, &[0, 1, 0]);
    let a = || ft(&[3], Scalar::F32, &[1.0, f64::NAN, 3.0]);
    assert_ints(&binary(Opcode::Less, a(), ft(&[3], Scalar::F32, &[2.0, 1.0, 3.0])).unwrap(), &[1, 0, 0]);
    assert_ints(&binary(Opcode::Greater, a(), ft(&[3], Scalar::F32, &[2.0, 1.0, 2.0])).unwrap(), &[0, 0, 1]);
    let y = binary(Opcode::Equal, it(&[2], Scalar::I1, &[1, 0]), it(&[2], Scalar::I1, &[1, 1])).unwrap();
    assert_ints(&y, &[1, 0]);

    let c = it(&[2, 1], Scalar::I1, &[1, 0]);
    let x = ft(&[3], Scalar::F32, &[1.0, 2.0, 3.0]);
    let yv = ft(&[2, 1], Scalar::F32, &[10.0, 20.0]);
    let y = run_one(Opcode::Where, vec![c, x, yv], Attrs::new(), None).unwrap();
    assert_eq!(y.ty, ty(&[2, 3], Scalar::F32));
    assert_floats(&y, &[1.0, 2.0, 3.0, 20.0, 20.0, 20.0]);
}

fn cast(x: Tensor, to: Scalar, saturate: bool) -> Tensor {
    let attrs = Attrs::new().with("to", Attr::Type(to)).with("saturate", Attr::Bool(saturate));
    run_one(Opcode::Cast, vec![x], attrs, None).unwrap()
}

#[test]
fn cast_follows_onnx() {
    let x = || ft(&[8], Scalar::F32, &[-1.7, -0.5, 0.0, 0.5, 1.7, 300.6, -129.9, 70000.0]);
    // Truncate toward zero, then wrap.
    assert_ints(&cast(x(), Scalar::I8, true), &[-1, 0, 0, 0, 1, 44, 127, 112]);
    assert_ints(&cast(x(), Scalar::U8, true), &[255, 0, 0, 0, 1, 44, 127, 112]);
    // To bool: non-zero (NaN included) is true.
    assert_ints(&cast(ft(&[4], Scalar::F32, &[0.0, 0.5, -0.0, f64::NAN]), Scalar::I1, true), &[0, 1, 0, 1]);
    // Round to nearest even in f16 (the first is a tie), overflow to inf,
    // underflow to 0.
    let y = cast(
        ft(&[4], Scalar::F32, &[1.0 + 2f64.powi(-10) + 2f64.powi(-11), 3.0029296875, 70000.0, 1e-8]),
        Scalar::F16,
        true,
    );
    assert_floats(&y, &[1.001953125, 3.00390625, f64::INFINITY, 0.0]);
    let y = cast(ft(&[3], Scalar::F32, &[1.00390625, 1.01171875, 3.3]), Scalar::BF16, true);
    assert_floats(&y, &[1.0, 1.015625, 3.296875]);
    // fp8, saturating or not.
    let f8 = || ft(&[4], Scalar::F32, &[1000.0, -1000.0, 1.0625, 0.3]);
    assert_floats(&cast(f8(), Scalar::F8E4M3FN, true), &[448.0, -448.0, 1.0, 0.3125]);
    assert_floats(&cast(f8(), Scalar::F8E4M3FN, false), &[f64::NAN, f64::NAN, 1.0, 0.3125]);
    let y = cast(ft(&[4], Scalar::F32, &[1e6, -1e6, 57344.0, 3.3]), Scalar::F8E5M2, false);
    assert_floats(&y, &[f64::INFINITY, f64::NEG_INFINITY, 57344.0, 3.5]);
    // Integers wrap; bools become 0/1; large integers round in f16.
    assert_ints(&cast(it(&[3], Scalar::I32, &[200, -129, 1000]), Scalar::I8, true), &[-56, 127, -24]);
    assert_floats(&cast(it(&[2], Scalar::I1, &[1, 0]), Scalar::F32, true), &[1.0, 0.0]);
    assert_floats(
        &cast(it(&[3], Scalar::I64, &[2049, 65519, 70000]), Scalar::F16, true),
        &[2048.0, 65504.0, f64::INFINITY],
    );
}

fn quant_i8() -> ElemType {
    ElemType::Quant(Box::new(QuantType {
        storage: Scalar::I8,
        expressed: Scalar::F32,
        params: QuantParams::PerTensor { scale: 0.5, zero_point: 0 },
    }))
}

#[test]
fn infer_rejects_bad_operands() {
    let none = Attrs::new;
    let f32_4 = ty(&[4], Scalar::F32);
    let e = infer(Opcode::Add, &[f32_4.clone(), ty(&[4], Scalar::I32)], none(), None).unwrap_err();
    assert_eq!(e, "core.add: operand element types must match, found f32 and i32");
    let e = infer(Opcode::Mul, &[ty(&[2, 3], Scalar::F32), f32_4.clone()], none(), None).unwrap_err();
    assert_eq!(e, "core.mul: shapes [2, 3] and [4] do not broadcast");
    let e = infer(Opcode::Exp, &[ty(&[4], Scalar::I8)], none(), None).unwrap_err();
    assert_eq!(e, "core.exp: operand must be a float tensor, found tensor<4xi8>");
    let q = TensorType::new(vec![4], quant_i8());
    let e = infer(Opcode::Relu, std::slice::from_ref(&q), none(), None).unwrap_err();
    assert!(e.starts_with("core.relu: operand must be a numeric tensor"), "{e}");
    let e = infer(Opcode::Add, &[q.clone(), q.clone()], none(), None).unwrap_err();
    assert!(e.contains("found tensor<4x!quant.uniform<i8:f32, 0.5>>"), "{e}");
    let e = infer(Opcode::Add, &[ty(&[4], Scalar::I1), ty(&[4], Scalar::I1)], none(), None).unwrap_err();
    assert!(e.starts_with("core.add: lhs must be a numeric tensor"), "{e}");
    let e =
        infer(Opcode::Cast, std::slice::from_ref(&q), none().with("to", Attr::Type(Scalar::F32)), None).unwrap_err();
    assert_eq!(e, "core.cast: operand must not be quantized, found tensor<4x!quant.uniform<i8:f32, 0.5>>");
    let e = infer(Opcode::Where, &[f32_4.clone(), f32_4.clone(), f32_4.clone()], none(), None).unwrap_err();
    assert_eq!(e, "core.where: condition must be an i1 tensor, found tensor<4xf32>");
    let e =
        infer(Opcode::Where, &[ty(&[4], Scalar::I1), f32_4.clone(), ty(&[4], Scalar::F16)], none(), None).unwrap_err();
    assert_eq!(e, "core.where: operand element types must match, found f32 and f16");
    let e = infer(Opcode::Prelu, &[ty(&[3], Scalar::F32), ty(&[2, 3], Scalar::F32)], none(), None).unwrap_err();
    assert_eq!(e, "core.prelu: slope shape [2, 3] must broadcast to the operand shape [3]");
    let e =
        infer(Opcode::Gelu, std::slice::from_ref(&f32_4), none().with("approximate", Attr::Str("erf".into())), None)
            .unwrap_err();
    assert_eq!(e, "core.gelu: attribute `approximate` must be \"none\" or \"tanh\", found \"erf\"");

    // What they accept.
    let r = infer(Opcode::Less, &[ty(&[2, 1], Scalar::I64), ty(&[3], Scalar::I64)], none(), None).unwrap();
    assert_eq!(r, vec![ty(&[2, 3], Scalar::I1)]);
    let r = infer(Opcode::Pow, &[ty(&[3], Scalar::F16), ty(&[], Scalar::I32)], none(), None).unwrap();
    assert_eq!(r, vec![ty(&[3], Scalar::F16)]);
    let r = infer(Opcode::Identity, std::slice::from_ref(&q), none(), None).unwrap();
    assert_eq!(r, vec![q]);
}

#[test]
fn identity_passes_quantized_values_through() {
    let q = TensorType::new(vec![3], quant_i8());
    let x = Tensor::from_i64(q.clone(), vec![-128, 0, 127]);
    let y = run_one(Opcode::Identity, vec![x.clone()], Attrs::new(), None).unwrap();
    assert_eq!(y, x);
}
