//! Tests of `core.resize` on a small 3x4 image. Expected values come from the
//! ONNX reference evaluator (onnx 1.23.2, Resize-19, float32), pasted as
//! literals; its float32 `scales` and `roi` inputs are written here as
//! `x as f32 as f64`, which is what the importer stores.

use crate::attr::{Attr, Attrs};
use crate::interp::{NoWeights, eval_op};
use crate::ops::Opcode;
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};
use crate::verify::infer_op;

const IMAGE: [f64; 12] = [1.0, 2.0, 4.0, 8.0, 3.0, 0.0, -1.0, 5.0, 6.0, 7.0, 2.0, -3.0];

fn image() -> Tensor {
    Tensor::from_f64(
        TensorType::new(vec![1, 1, 3, 4], Scalar::F32),
        IMAGE.to_vec(),
    )
}

fn f32s(v: &[f64]) -> Attr {
    Attr::Floats(v.iter().map(|&x| x as f32 as f64).collect())
}

fn resize<const N: usize>(sizes: [i64; N], list: &[(&str, Attr)]) -> Result<Tensor, String> {
    let given = list.iter().fold(
        Attrs::new().with("sizes", Attr::Ints(sizes.to_vec())),
        |a, (n, v)| a.with(n, v.clone()),
    );
    let attrs = Opcode::Resize.info().complete_attrs(given)?;
    let x = image();
    let out = infer_op(Opcode::Resize, std::slice::from_ref(&x.ty), &attrs, None)?;
    Ok(eval_op(Opcode::Resize, &[&x], &attrs, &out, &NoWeights)?.remove(0))
}

fn s(v: &str) -> Attr {
    Attr::Str(v.to_string())
}

#[track_caller]
fn check(got: &Tensor, hw: [usize; 2], want: &[f64]) {
    assert_eq!(got.shape(), [1, 1, hw[0], hw[1]]);
    let g = got.to_f64();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
            "element {i}: got {a}, want {b}\n got {g:?}"
        );
    }
}

const LIN_HALF: &[f64] = &[
    1.0,
    1.5,
    2.3333332538604736,
    3.6666667461395264,
    6.0,
    8.0,
    1.7999999523162842,
    1.5,
    1.3333333730697632,
    1.8666666746139526,
    4.400000095367432,
    6.800000190734863,
    3.0,
    1.5,
    -0.1666666716337204,
    -0.8333333134651184,
    2.0,
    5.0,
    4.800000190734863,
    4.5,
    3.633333444595337,
    1.3666666746139526,
    0.5,
    0.20000000298023224,
    6.0,
    6.5,
    6.166666507720947,
    2.8333332538604736,
    -0.5,
    -3.0,
];
const LIN_ALIGN: &[f64] = &[
    1.0,
    1.600000023841858,
    2.4000000953674316,
    3.5999999046325684,
    5.599999904632568,
    8.0,
    2.0,
    1.399999976158142,
    1.100000023841858,
    1.399999976158142,
    3.5,
    6.5,
    3.0,
    1.2000000476837158,
    -0.20000000298023224,
    -0.800000011920929,
    1.399999976158142,
    5.0,
    4.5,
    3.9000000953674316,
    2.9000000953674316,
    1.100000023841858,
    0.699999988079071,
    1.0,
    6.0,
    6.599999904632568,
    6.0,
    3.0,
    4.440892098500626e-16,
    -3.0,
];
const LIN_DOWN_ASYM: &[f64] = &[
    1.0,
    2.6666667461395264,
    6.666666507720947,
    4.5,
    2.5,
    0.8333333134651184,
];
const NEAR_SCALES: &[f64] = &[
    1.0, 1.0, 2.0, 4.0, 4.0, 8.0, 1.0, 1.0, 2.0, 4.0, 4.0, 8.0, 3.0, 3.0, 0.0, -1.0, -1.0, 5.0,
    3.0, 3.0, 0.0, -1.0, -1.0, 5.0, 6.0, 6.0, 7.0, 2.0, 2.0, -3.0, 6.0, 6.0, 7.0, 2.0, 2.0, -3.0,
];
const NEAR_CEIL: &[f64] = &[1.0, 4.0, 8.0, 6.0, 2.0, -3.0];
const NEAR_RPF: &[f64] = &[
    1.0, 1.0, 2.0, 4.0, 4.0, 8.0, 1.0, 1.0, 2.0, 4.0, 4.0, 8.0, 3.0, 3.0, 0.0, -1.0, -1.0, 5.0,
    6.0, 6.0, 7.0, 2.0, 2.0, -3.0, 6.0, 6.0, 7.0, 2.0, 2.0, -3.0,
];
const NEAR_CEILMODE: &[f64] = &[
    1.0, 2.0, 4.0, 4.0, 8.0, 8.0, 3.0, 0.0, -1.0, -1.0, 5.0, 5.0, 3.0, 0.0, -1.0, -1.0, 5.0, 5.0,
    6.0, 7.0, 2.0, 2.0, -3.0, -3.0, 6.0, 7.0, 2.0, 2.0, -3.0, -3.0,
];
// The cubic cases come from the reference's own `_interpolate_nd` called
// with `cubic_coeff_a` as a Python float: its evaluator passes the attribute
// as np.float32, which makes numpy compute the kernel weights in float32
// (ONNX Runtime also uses float32 weights); aoc computes them in f64, as it
// does every sum. The difference is about 2e-6 relative.
const CUBIC_HALF: &[f64] = &[
    0.6878610849380493,
    1.2855000495910645,
    2.5743980407714844,
    3.845101833343506,
    6.598499774932861,
    8.618556022644043,
    1.6329166889190674,
    1.0346250534057617,
    0.711731493473053,
    1.184768557548523,
    4.733375072479248,
    7.895333290100098,
    3.2604167461395264,
    1.59375,
    -0.5081018805503845,
    -1.4293981790542603,
    1.90625,
    5.520833492279053,
    5.052916526794434,
    4.903500080108643,
    3.5514397621154785,
    1.038310170173645,
    -0.1615000069141388,
    -0.16304166615009308,
    6.167860984802246,
    7.484749794006348,
    7.124574184417725,
    3.6104259490966797,
    -1.2447500228881836,
    -4.293694496154785,
];
const CUBIC_EXCL: &[f64] = &[
    0.7634061574935913,
    1.330743670463562,
    2.4497292041778564,
    3.901685953140259,
    6.546060085296631,
    8.479642868041992,
    1.6054595708847046,
    1.2269535064697266,
    1.0269140005111694,
    1.6689814329147339,
    4.928007125854492,
    7.6476826667785645,
    3.1973683834075928,
    1.6470588445663452,
    -0.36342594027519226,
    -1.2615740299224854,
    2.117647171020508,
    5.3947367668151855,
    5.075608730316162,
    4.982879638671875,
    3.9845736026763916,
    1.2271801233291626,
    -0.052677787840366364,
    -0.3975844383239746,
    6.1407647132873535,
    7.150943279266357,
    7.032931327819824,
    3.2170684337615967,
    -1.172031044960022,
    -3.9873385429382324,
];
const CUBIC_PT: &[f64] = &[
    0.6931423544883728,
    1.2861328125,
    2.5680699348449707,
    3.8342738151550293,
    6.5888671875,
    8.61219596862793,
];
const LIN_SYM: &[f64] = &[
    1.0,
    1.730769157409668,
    3.0,
    5.076923370361328,
    8.0,
    1.8235294818878174,
    1.3506786823272705,
    1.5588234663009644,
    3.239819049835205,
    6.764705657958984,
    3.0,
    0.8076924085617065,
    -0.5,
    0.6153847575187683,
    5.0,
    4.764705657958984,
    4.291855335235596,
    2.441176414489746,
    0.6380090117454529,
    0.2941177785396576,
    6.0,
    6.730769157409668,
    4.5,
    0.653846025466919,
    -3.0,
];
const TF_CROP: &[f64] = &[
    -9.0,
    1.2400000095367432,
    -9.0,
    -9.0,
    0.6299998760223389,
    -9.0,
    -9.0,
    5.3899993896484375,
    -9.0,
];

#[test]
fn linear_in_three_coordinate_modes() {
    check(
        &resize([1, 1, 5, 6], &[("mode", s("linear"))]).unwrap(),
        [5, 6],
        LIN_HALF,
    );
    let a = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("align_corners")),
    ];
    check(&resize([1, 1, 5, 6], &a).unwrap(), [5, 6], LIN_ALIGN);
    let a = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("asymmetric")),
    ];
    check(&resize([1, 1, 2, 3], &a).unwrap(), [2, 3], LIN_DOWN_ASYM);
}

#[test]
fn linear_half_pixel_symmetric_uses_the_given_scales() {
    // 3 * 1.7 = 5.1 and 4 * 1.3 = 5.2: the sizes are floored, the mapping
    // uses the scales.
    let a = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("half_pixel_symmetric")),
        ("scales", f32s(&[1.0, 1.0, 1.7, 1.3])),
    ];
    check(&resize([1, 1, 5, 5], &a).unwrap(), [5, 5], LIN_SYM);
}

#[test]
fn nearest_modes() {
    let a = [
        ("coordinate_transformation_mode", s("asymmetric")),
        ("nearest_mode", s("floor")),
        ("scales", f32s(&[1.0, 1.0, 2.0, 1.5])),
    ];
    check(&resize([1, 1, 6, 6], &a).unwrap(), [6, 6], NEAR_SCALES);
    check(
        &resize([1, 1, 2, 3], &[("nearest_mode", s("round_prefer_ceil"))]).unwrap(),
        [2, 3],
        NEAR_CEIL,
    );
    check(&resize([1, 1, 5, 6], &[]).unwrap(), [5, 6], NEAR_RPF);
    check(
        &resize([1, 1, 5, 6], &[("nearest_mode", s("ceil"))]).unwrap(),
        [5, 6],
        NEAR_CEILMODE,
    );
}

#[test]
fn cubic_with_and_without_exclude_outside() {
    check(
        &resize([1, 1, 5, 6], &[("mode", s("cubic"))]).unwrap(),
        [5, 6],
        CUBIC_HALF,
    );
    let a = [
        ("mode", s("cubic")),
        ("exclude_outside", Attr::Bool(true)),
        ("cubic_coeff_a", Attr::Float(-0.5)),
    ];
    check(&resize([1, 1, 5, 6], &a).unwrap(), [5, 6], CUBIC_EXCL);
    // pytorch_half_pixel maps a size-1 output to coordinate -0.5.
    let a = [
        ("mode", s("cubic")),
        ("coordinate_transformation_mode", s("pytorch_half_pixel")),
    ];
    check(&resize([1, 1, 1, 6], &a).unwrap(), [1, 6], CUBIC_PT);
}

#[test]
fn tf_crop_and_resize_extrapolates() {
    let a = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("tf_crop_and_resize")),
        ("roi", f32s(&[0.0, 0.0, 0.2, -0.5, 1.0, 1.0, 0.9, 1.2])),
        ("extrapolation_value", Attr::Float(-9.0)),
    ];
    check(&resize([1, 1, 3, 3], &a).unwrap(), [3, 3], TF_CROP);
}

#[test]
fn integer_images_round_and_saturate() {
    // u8 linear upsampling of [0, 255, 100]: half_pixel x2 samples at
    // -0.25 (clamped), 0.25, 0.75, 1.25, 1.75, 2.25, giving
    // 0, 63.75, 191.25, 216.25, 138.75, 100, then rounded.
    let ty = TensorType::new(vec![3], Scalar::U8);
    let x = Tensor::from_i64(ty.clone(), vec![0, 255, 100]);
    let given = Attrs::new()
        .with("sizes", Attr::Ints(vec![6]))
        .with("mode", s("linear"));
    let attrs = Opcode::Resize.info().complete_attrs(given).unwrap();
    let out = infer_op(Opcode::Resize, &[ty], &attrs, None).unwrap();
    let y = eval_op(Opcode::Resize, &[&x], &attrs, &out, &NoWeights)
        .unwrap()
        .remove(0);
    assert_eq!(y.to_i64(), vec![0, 64, 191, 216, 139, 100]);
}

#[test]
fn resize_infer_errors() {
    let e = resize([1, 1, 5], &[]).map(|_| ()).unwrap_err();
    assert_eq!(
        e,
        "core.resize: sizes must have 4 entries (the operand's rank), found 3"
    );
    let e = resize([1, 1, 5, 6], &[("mode", s("bilinear"))])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        e,
        "core.resize: mode must be \"nearest\", \"linear\" or \"cubic\", found \"bilinear\""
    );
    let e = resize(
        [1, 1, 5, 6],
        &[("coordinate_transformation_mode", s("tf_crop_and_resize"))],
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(
        e,
        "core.resize: coordinate_transformation_mode \"tf_crop_and_resize\" needs `roi`"
    );
}
