//! Tests of the nn ops. Expected values were computed independently with
//! numpy and the ONNX reference evaluator (onnx 1.23.2, float32) and pasted
//! as literals; the inputs are rebuilt here by the same formulas.

use crate::attr::{Attr, Attrs};
use crate::diag::Location;
use crate::interp::{NoWeights, eval_op, run};
use crate::module::Func;
use crate::ops::Opcode;
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};
use crate::verify::infer_op;

fn t(shape: &[usize], v: Vec<f64>) -> Tensor {
    Tensor::from_f64(TensorType::new(shape.to_vec(), Scalar::F32), v)
}

/// `f(i)` for i in 0..n.
fn seq(n: usize, f: impl Fn(f64) -> f64) -> Vec<f64> {
    (0..n).map(|i| f(i as f64)).collect()
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

fn attrs(list: &[(&str, Attr)]) -> Attrs {
    list.iter()
        .fold(Attrs::new(), |a, (n, v)| a.with(n, v.clone()))
}

/// Infers, then evaluates one op, as the verifier and interpreter do.
fn eval(op: Opcode, inputs: &[&Tensor], given: Attrs) -> Result<Tensor, String> {
    let attrs = op.info().complete_attrs(given)?;
    let tys: Vec<TensorType> = inputs.iter().map(|t| t.ty.clone()).collect();
    let out = infer_op(op, &tys, &attrs, None)?;
    Ok(eval_op(op, inputs, &attrs, &out, &NoWeights)?.remove(0))
}

fn infer_err(op: Opcode, shapes: &[&[usize]], given: Attrs) -> String {
    let attrs = op.info().complete_attrs(given).unwrap();
    let tys: Vec<TensorType> = shapes
        .iter()
        .map(|s| TensorType::new(s.to_vec(), Scalar::F32))
        .collect();
    infer_op(op, &tys, &attrs, None).unwrap_err()
}

#[track_caller]
fn check(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape);
    let g = got.to_f64();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 2e-6 * b.abs().max(1.0),
            "element {i}: got {a}, want {b}\n got {g:?}"
        );
    }
}

const CONV_GROUPED: &[f64] = &[
    -4.0, -4.0, 4.0, -1.0, 6.0, 5.5, 1.5, 6.5, -0.5, -1.5, -9.0, -2.5, 3.0, -4.5, -4.0, -6.0, 12.0,
    0.5, -2.0, 0.5, 17.0, -2.5, -5.0, -5.5, 7.0, 6.5, -9.5, 0.0, 6.5, 11.5, -10.0, -3.5, 3.0, 1.5,
    -0.5, -7.5,
];
const CONV_DW: &[f64] = &[
    -8.0, -10.0, -3.0, 4.0, 3.0, 4.0, -6.0, -11.0, -1.0, 1.0, 8.0, 9.0, -6.0, -11.0, -3.0, 2.0,
    9.0, 9.0, -6.0, -7.0, 0.0, 2.0, 5.0, -2.0, -2.0, 10.0, 9.0, 10.0, 11.0, 12.0, 10.0, 9.0, 9.0,
    9.0, 9.0, 10.0, 14.0, 9.0, 9.0, 9.0, 10.0, 9.0, 14.0, 9.0, 9.0, 10.0, 9.0, 8.0, 12.0, 11.0,
    -10.0, -9.5, -8.5, -10.0, -11.0, -10.5, -10.0, -8.0, -8.5, -10.0, -11.5, -12.0, -10.0, -8.0,
    -8.5, -10.0, -11.5, -12.0, -10.0, -9.5, -9.0, -10.0, -11.5, -10.5, -10.0,
];
const CONVT: &[f64] = &[
    12.0, 19.0, 5.0, 20.0, 7.0, 21.0, -12.0, 23.0, -1.0, 48.0, 1.0, 52.0, 3.0, 27.0, 21.0, 22.0,
    11.0, 23.0, 13.0, 24.0, -15.0, 29.0, 5.0, 60.0, 7.0, 64.0, 9.0, 33.0, 30.0, 25.0, 17.0, 26.0,
    19.0, 27.0, -18.0, 7.0, 30.0, 33.0, 33.0, 35.0, 36.0, 27.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    19.0, -10.0, 21.0, -11.0, 23.0, -12.0, 3.0, -1.0, 23.0, 12.0, 25.0, 16.0, 27.0, 15.0, 22.0,
    -13.0, 27.0, -14.0, 29.0, -15.0, 6.0, 5.0, 29.0, 24.0, 31.0, 28.0, 33.0, 21.0, 25.0, -16.0,
    33.0, -17.0, 35.0, -18.0, 9.0, 30.0, 25.0, 17.0, 26.0, 19.0, 27.0, -18.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, -10.0, 1.0, 1.0, 2.0, 3.0, 3.0, 18.0, 23.0, 11.0, 48.0, 13.0, 52.0, 15.0, 27.0,
    -13.0, 4.0, 7.0, 5.0, 9.0, 6.0, 27.0, 29.0, 17.0, 60.0, 19.0, 64.0, 21.0, 33.0, -16.0, 7.0,
    13.0, 8.0, 15.0, 9.0, 36.0, 25.0, -16.0, 33.0, -17.0, 35.0, -18.0, 9.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0,
];
// The ONNX reference adds bias[0] to every group's first channel when
// group > 1 (a bug in op_conv_transpose.py), so this one is its bias-free
// output plus the bias per channel.
const CONVT_G: &[f64] = &[
    1.5, 2.5, 2.5, 4.5, 3.5, 6.5, 4.5, 8.5, 3.5, 4.5, 6.5, 8.5, 9.5, 12.5, 12.5, 16.5, 24.5, 29.5,
    29.5, 35.5, 34.5, 41.5, 39.5, 47.5, 34.5, 39.5, 41.5, 47.5, 48.5, 55.5, 55.5, 63.5,
];
const MM_VEC_BATCHED: &[f64] = &[32.0, 38.0, 44.0, 50.0, 104.0, 110.0, 116.0, 122.0];
const MM_BCAST: &[f64] = &[
    -5.0, -2.0, -32.0, -20.0, 13.0, 16.0, 40.0, 52.0, 31.0, 34.0, 112.0, 124.0, -59.0, -38.0,
    -86.0, -56.0, 67.0, 88.0, 94.0, 124.0, 193.0, 214.0, 274.0, 304.0,
];
const MM_MAT_VEC: &[f64] = &[-2.0, -2.0];
const GEMM: &[f64] = &[-2.0, 9.0, 20.0, 31.0, -5.0, 10.5, 26.0, 41.5];
const GEMM_COLBIAS: &[f64] = &[-7.0, 11.0, 29.0, 47.0, -12.0, 15.0, 42.0, 69.0];
const MAXPOOL_CEIL: &[f64] = &[7.0, 9.0, 10.0, 17.0, 19.0, 20.0, 22.0, 24.0, 25.0];
const AVG_CEIL_PAD_INCL: &[f64] = &[
    1.7777777910232544,
    3.6666667461395264,
    3.1111111640930176,
    7.666666507720947,
    0.4444444477558136,
    9.666666984558105,
    8.44444465637207,
    13.666666984558105,
    9.777777671813965,
];
const AVG_CEIL_PAD_EXCL: &[f64] = &[
    4.0,
    5.5,
    7.0,
    11.5,
    0.4444444477558136,
    14.5,
    19.0,
    20.5,
    22.0,
];
const AVG_CEIL_EDGE: &[f64] = &[
    0.0, 0.75, 1.75, 2.5, 4.5, 10.5, 12.5, 14.0, 10.5, 22.5, 24.5, 26.0, 15.0, 31.5, 33.5, 35.0,
];
const MAX_DIL: &[f64] = &[8.0, 10.0, 11.0, 15.0, 18.0, 20.0, 23.0, 25.0];
const SOFTMAX_AX1: &[f64] = &[
    0.01587624102830887,
    0.01587624102830887,
    0.11731042712926865,
    0.11731042712926865,
    0.8668133616447449,
    0.8668133616447449,
    7.582560135332983e-10,
    9.357622912219837e-14,
    5.602796449011294e-09,
    2.06115369216775e-09,
    1.0,
    1.0,
];
const LOGSOFTMAX_AX1: &[f64] = &[
    -4.1429314613342285,
    -4.1429314613342285,
    -2.1429316997528076,
    -2.1429316997528076,
    -0.14293161034584045,
    -0.14293161034584045,
    -21.0,
    -30.0,
    -19.0,
    -20.0,
    0.0,
    0.0,
];
const BN: &[f64] = &[
    -0.9999949932098389,
    0.0,
    0.9999949932098389,
    1.9999899864196777,
    1.1920928955078125e-06,
    1.0,
    1.9999988079071045,
    2.999997615814209,
    -1.9999799728393555,
    -1.0,
    -2.002716064453125e-05,
    0.9999599456787109,
];
const LN: &[f64] = &[
    -1.3522450923919678,
    -1.190306305885315,
    -0.014183801598846912,
    1.1690306663513184,
    2.3522450923919678,
    6.070919036865234,
    -0.7223146557807922,
    -0.9446293115615845,
    -0.08347196877002716,
    0.6388427019119263,
    1.0,
    7.500831604003906,
];
const GAP: &[f64] = &[3.5, 11.5];
const GMP: &[f64] = &[7.0, 15.0];

#[test]
fn conv2d_grouped_strided_padded_dilated_with_bias() {
    let x = t(&[1, 4, 5, 5], seq(100, |i| ((i % 7.0) - 3.0) * 0.5));
    let w = t(&[6, 2, 3, 3], seq(108, |i| (i % 5.0) - 2.0));
    let b = t(&[6], vec![1.0, -1.0, 0.5, 0.0, 2.0, -2.0]);
    let a = attrs(&[
        ("groups", Attr::Int(2)),
        ("strides", ints(&[2, 1])),
        ("pads", ints(&[1, 0, 2, 1])),
        ("dilations", ints(&[1, 2])),
    ]);
    check(
        &eval(Opcode::Conv2d, &[&x, &w, &b], a).unwrap(),
        &[1, 6, 3, 2],
        CONV_GROUPED,
    );
}

#[test]
fn conv2d_depthwise_through_the_interpreter() {
    // Built as a function and run, to cover the builder and `interp::run`.
    let mut f = Func::new("dw");
    let xv = f.add_param(
        "x",
        TensorType::new(vec![1, 3, 4, 4], Scalar::F32),
        Location::default(),
    );
    let wv = f.add_param(
        "w",
        TensorType::new(vec![3, 1, 2, 2], Scalar::F32),
        Location::default(),
    );
    let bv = f.add_param(
        "b",
        TensorType::new(vec![3], Scalar::F32),
        Location::default(),
    );
    let a = attrs(&[("groups", Attr::Int(3)), ("pads", ints(&[1, 1, 1, 1]))]);
    let y = f
        .push_op(
            Opcode::Conv2d,
            &[xv, wv, bv],
            a,
            None,
            "y",
            Location::default(),
        )
        .unwrap();
    f.set_return(y);
    let x = t(&[1, 3, 4, 4], seq(48, |i| (i % 5.0) - 2.0));
    let w = t(
        &[3, 1, 2, 2],
        vec![1.0, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5],
    );
    let b = t(&[3], vec![0.0, 10.0, -10.0]);
    let out = run(&f, vec![x, w, b], &NoWeights).unwrap();
    check(&out[0], &[1, 3, 5, 5], CONV_DW);
}

#[test]
fn conv_transpose2d_stride_pads_output_padding() {
    let x = t(&[1, 2, 3, 3], seq(18, |i| i + 1.0));
    let w = t(&[2, 3, 3, 3], seq(54, |i| (i % 4.0) - 1.0));
    let a = attrs(&[
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 0, 0, 1])),
        ("output_padding", ints(&[1, 1])),
    ]);
    check(
        &eval(Opcode::ConvTranspose2d, &[&x, &w], a).unwrap(),
        &[1, 3, 7, 7],
        CONVT,
    );
}

#[test]
fn conv_transpose2d_grouped_dilated_with_bias() {
    let x = t(&[1, 2, 2, 2], seq(8, |i| i + 1.0));
    let w = t(&[2, 1, 2, 2], seq(8, |i| i + 1.0));
    let b = t(&[2], vec![0.5, -0.5]);
    let a = attrs(&[
        ("groups", Attr::Int(2)),
        ("strides", ints(&[1, 2])),
        ("dilations", ints(&[2, 1])),
    ]);
    check(
        &eval(Opcode::ConvTranspose2d, &[&x, &w, &b], a).unwrap(),
        &[1, 2, 4, 4],
        CONVT_G,
    );
}

#[test]
fn matmul_promotes_1d_and_broadcasts_batches() {
    let v = t(&[3], vec![1.0, 2.0, 3.0]);
    let m = t(&[2, 3, 4], seq(24, |i| i));
    check(
        &eval(Opcode::MatMul, &[&v, &m], Attrs::new()).unwrap(),
        &[2, 4],
        MM_VEC_BATCHED,
    );
    let a = t(&[2, 1, 2, 3], seq(12, |i| i));
    let b = t(&[3, 3, 2], seq(18, |i| i - 5.0));
    check(
        &eval(Opcode::MatMul, &[&a, &b], Attrs::new()).unwrap(),
        &[2, 3, 2, 2],
        MM_BCAST,
    );
    let a = t(&[2, 3], seq(6, |i| i));
    let v = t(&[3], vec![1.0, 0.0, -1.0]);
    check(
        &eval(Opcode::MatMul, &[&a, &v], Attrs::new()).unwrap(),
        &[2],
        MM_MAT_VEC,
    );
    // vector . vector is a scalar: 1*4 + 2*5 + 3*6.
    let u = t(&[3], vec![4.0, 5.0, 6.0]);
    let w = t(&[3], vec![1.0, 2.0, 3.0]);
    check(
        &eval(Opcode::MatMul, &[&w, &u], Attrs::new()).unwrap(),
        &[],
        &[32.0],
    );
    let e = infer_err(Opcode::MatMul, &[&[2, 3], &[4, 2]], Attrs::new());
    assert_eq!(
        e,
        "core.matmul: inner dimensions differ: lhs [2, 3] has 3 columns, rhs [4, 2] has 4 rows"
    );
    let e = infer_err(Opcode::MatMul, &[&[2, 2, 3], &[3, 3, 1]], Attrs::new());
    assert_eq!(
        e,
        "core.matmul: batch dimensions of [2, 2, 3] and [3, 3, 1] do not broadcast"
    );
}

#[test]
fn integer_matmul_wraps() {
    let ty = |s: &[usize]| TensorType::new(s.to_vec(), Scalar::I8);
    let a = Tensor::from_i64(ty(&[1, 2]), vec![100, 50]);
    let b = Tensor::from_i64(ty(&[2, 1]), vec![1, 2]);
    // 100 + 100 = 200 wraps to -56 in i8.
    let y = eval(Opcode::MatMul, &[&a, &b], Attrs::new()).unwrap();
    assert_eq!(y.to_i64(), vec![-56]);
    assert_eq!(y.ty.elem, Scalar::I8.into());
}

#[test]
fn gemm_transposes_scales_and_broadcasts_c() {
    let a = t(&[3, 2], seq(6, |i| i));
    let b = t(&[4, 3], seq(12, |i| i - 3.0));
    let c = t(&[4], vec![1.0, 2.0, 3.0, 4.0]);
    let at = attrs(&[
        ("trans_a", Attr::Bool(true)),
        ("trans_b", Attr::Bool(true)),
        ("alpha", Attr::Float(0.5)),
        ("beta", Attr::Float(2.0)),
    ]);
    check(
        &eval(Opcode::Gemm, &[&a, &b, &c], at).unwrap(),
        &[2, 4],
        GEMM,
    );
    // Same product untransposed, with a column bias [2, 1].
    let a2 = t(&[2, 3], vec![0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    let b2 = t(
        &[3, 4],
        vec![
            -3.0, 0.0, 3.0, 6.0, -2.0, 1.0, 4.0, 7.0, -1.0, 2.0, 5.0, 8.0,
        ],
    );
    let c2 = t(&[2, 1], vec![1.0, 2.0]);
    check(
        &eval(Opcode::Gemm, &[&a2, &b2, &c2], Attrs::new()).unwrap(),
        &[2, 4],
        GEMM_COLBIAS,
    );
    let e = infer_err(Opcode::Gemm, &[&[2, 3], &[3, 4], &[3, 4]], Attrs::new());
    assert_eq!(
        e,
        "core.gemm: c shape [3, 4] does not broadcast to the result shape [2, 4]"
    );
}

#[test]
fn max_pool_ceil_mode_and_dilation() {
    let mut v = seq(25, |i| i + 1.0);
    v[12] = -100.0;
    let x = t(&[1, 1, 5, 5], v);
    let a = attrs(&[
        ("kernel", ints(&[2, 2])),
        ("strides", ints(&[2, 2])),
        ("ceil_mode", Attr::Bool(true)),
    ]);
    check(
        &eval(Opcode::MaxPool2d, &[&x], a).unwrap(),
        &[1, 1, 3, 3],
        MAXPOOL_CEIL,
    );
    let a = attrs(&[
        ("kernel", ints(&[2, 2])),
        ("strides", ints(&[1, 2])),
        ("pads", ints(&[1, 0, 0, 1])),
        ("dilations", ints(&[2, 2])),
    ]);
    check(
        &eval(Opcode::MaxPool2d, &[&x], a).unwrap(),
        &[1, 1, 4, 2],
        MAX_DIL,
    );
}

#[test]
fn avg_pool_count_include_pad_and_ceil_mode() {
    let mut v = seq(25, |i| i + 1.0);
    v[12] = -100.0;
    let x = t(&[1, 1, 5, 5], v);
    let base = [
        ("kernel", ints(&[3, 3])),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 1, 1, 1])),
        ("ceil_mode", Attr::Bool(true)),
    ];
    let with = |incl: bool| {
        let mut a = attrs(&base);
        a.set("count_include_pad", Attr::Bool(incl));
        a
    };
    check(
        &eval(Opcode::AvgPool2d, &[&x], with(true)).unwrap(),
        &[1, 1, 3, 3],
        AVG_CEIL_PAD_INCL,
    );
    check(
        &eval(Opcode::AvgPool2d, &[&x], with(false)).unwrap(),
        &[1, 1, 3, 3],
        AVG_CEIL_PAD_EXCL,
    );
    // ceil_mode adds a last row and column that start inside the input; the
    // cells past the bottom/right padding are not counted, even with
    // count_include_pad.
    let x6 = t(&[1, 1, 6, 6], seq(36, |i| i));
    let a = attrs(&[
        ("kernel", ints(&[2, 2])),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 1, 0, 0])),
        ("ceil_mode", Attr::Bool(true)),
        ("count_include_pad", Attr::Bool(true)),
    ]);
    check(
        &eval(Opcode::AvgPool2d, &[&x6], a).unwrap(),
        &[1, 1, 4, 4],
        AVG_CEIL_EDGE,
    );
}

#[test]
fn pool_ceil_mode_drops_a_window_starting_in_the_right_padding() {
    // in 3, kernel 2, stride 2, pads 1/1: ceil((3 + 2 - 2) / 2) + 1 = 3, but
    // the third window would start at 4 - 1 = 3, past the input, so ONNX
    // drops it: 2 windows, over rows {-1, 0} and {1, 2}.
    let x = t(&[1, 1, 3, 3], seq(9, |i| i));
    let a = attrs(&[
        ("kernel", ints(&[2, 2])),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 1, 1, 1])),
        ("ceil_mode", Attr::Bool(true)),
    ]);
    check(
        &eval(Opcode::MaxPool2d, &[&x], a).unwrap(),
        &[1, 1, 2, 2],
        &[0.0, 2.0, 6.0, 8.0],
    );
}

#[test]
fn global_pools() {
    let x = t(&[1, 2, 2, 4], seq(16, |i| i));
    check(
        &eval(Opcode::GlobalAvgPool, &[&x], Attrs::new()).unwrap(),
        &[1, 2, 1, 1],
        GAP,
    );
    check(
        &eval(Opcode::GlobalMaxPool, &[&x], Attrs::new()).unwrap(),
        &[1, 2, 1, 1],
        GMP,
    );
    let e = infer_err(Opcode::GlobalAvgPool, &[&[2, 3]], Attrs::new());
    assert_eq!(
        e,
        "core.global_avg_pool: input rank must be at least 3, found 2"
    );
}

#[test]
fn softmax_and_log_softmax_on_a_middle_axis() {
    let x = t(
        &[2, 3, 2],
        vec![
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -1.0, 0.0, 1.0, 10.0, 20.0, 30.0,
        ],
    );
    let a = attrs(&[("axis", Attr::Int(1))]);
    check(
        &eval(Opcode::Softmax, &[&x], a.clone()).unwrap(),
        &[2, 3, 2],
        SOFTMAX_AX1,
    );
    check(
        &eval(Opcode::LogSoftmax, &[&x], a).unwrap(),
        &[2, 3, 2],
        LOGSOFTMAX_AX1,
    );
    // Stable for large inputs: no overflow to NaN.
    let big = t(&[2], vec![1000.0, 1000.0]);
    check(
        &eval(Opcode::Softmax, &[&big], Attrs::new()).unwrap(),
        &[2],
        &[0.5, 0.5],
    );
}

#[test]
fn batch_norm_and_layer_norm() {
    let x = t(&[1, 3, 2, 2], seq(12, |i| i));
    let p = |v: [f64; 3]| t(&[3], v.to_vec());
    let (s, b, m, v) = (
        p([1.0, 2.0, 0.5]),
        p([0.0, 1.0, -1.0]),
        p([1.0, 5.0, 9.0]),
        p([1.0, 4.0, 0.25]),
    );
    check(
        &eval(Opcode::BatchNorm, &[&x, &s, &b, &m, &v], Attrs::new()).unwrap(),
        &[1, 3, 2, 2],
        BN,
    );
    // Normalizes the last two dims; scale [1, 3] broadcasts to [2, 3].
    let x = t(
        &[2, 2, 3],
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 0.0, 0.0, 1.0, 1.0, 2.0, 8.0],
    );
    let sc = t(&[1, 3], vec![1.0, 2.0, 3.0]);
    let bi = t(&[2, 3], vec![0.0, 0.5, 1.0, 1.0, 1.0, 1.0]);
    let a = attrs(&[("axis", Attr::Int(-2))]);
    check(
        &eval(Opcode::LayerNorm, &[&x, &sc, &bi], a.clone()).unwrap(),
        &[2, 2, 3],
        LN,
    );
    let e = infer_err(Opcode::LayerNorm, &[&[2, 2, 3], &[2]], a);
    assert_eq!(
        e,
        "core.layer_norm: scale shape [2] does not broadcast to the normalized shape [2, 3]"
    );
    let e = infer_err(
        Opcode::BatchNorm,
        &[&[1, 3, 2], &[3], &[3], &[4], &[3]],
        Attrs::new(),
    );
    assert_eq!(e, "core.batch_norm: mean shape must be [3], found [4]");
}

#[test]
fn conv_infer_errors() {
    let none = Attrs::new;
    let e = infer_err(Opcode::Conv2d, &[&[1, 3, 8, 8], &[4, 3, 3]], none());
    assert_eq!(e, "core.conv2d: weight rank must be 4, found 3");
    let e = infer_err(Opcode::Conv2d, &[&[1, 3, 8, 8], &[4, 2, 3, 3]], none());
    assert_eq!(
        e,
        "core.conv2d: weight expects 2 input channels (2 per group x 1 groups), input has 3"
    );
    let e = infer_err(
        Opcode::Conv2d,
        &[&[1, 4, 8, 8], &[4, 1, 3, 3]],
        attrs(&[("groups", Attr::Int(3))]),
    );
    assert_eq!(
        e,
        "core.conv2d: groups 3 does not divide the 4 input channels"
    );
    let e = infer_err(
        Opcode::Conv2d,
        &[&[1, 4, 8, 8], &[3, 2, 3, 3]],
        attrs(&[("groups", Attr::Int(2))]),
    );
    assert_eq!(
        e,
        "core.conv2d: groups 2 does not divide the 3 output channels"
    );
    let e = infer_err(
        Opcode::Conv2d,
        &[&[1, 4, 8, 8], &[4, 4, 3, 3], &[5]],
        none(),
    );
    assert_eq!(e, "core.conv2d: bias shape must be [4], found [5]");
    let e = infer_err(Opcode::Conv2d, &[&[1, 4, 2, 8], &[4, 4, 3, 3]], none());
    assert_eq!(
        e,
        "core.conv2d: the dilated kernel (3) is larger than the padded input (2) along H"
    );
    let e = infer_err(
        Opcode::ConvTranspose2d,
        &[&[1, 4, 2, 2], &[3, 2, 3, 3]],
        none(),
    );
    assert_eq!(
        e,
        "core.conv_transpose2d: weight has 3 input channels (dimension 0), input has 4"
    );
    let e = infer_err(
        Opcode::MaxPool2d,
        &[&[1, 1, 4, 4]],
        attrs(&[("kernel", ints(&[2, 2])), ("pads", ints(&[2, 0, 0, 0]))]),
    );
    assert_eq!(
        e,
        "core.max_pool2d: pads [2, 0, 0, 0] must be smaller than the kernel [2, 2]"
    );
}
