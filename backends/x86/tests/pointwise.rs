//! Generated pointwise kernels, end to end: build a `PointwiseKernel` by
//! hand, compile it with Cranelift for every x86 level, load it with the
//! runtime's JIT loader, run it and compare with values computed here.
//! Levels the CPU lacks (AVX-512 on most build machines) are compiled but not
//! run, and the test says so on stderr. The math functions' tests are in
//! `pointwise_math.rs`.

mod common;

use aoc_backend_x86::expr::{Binary, Expr, PointwiseKernel, Unary};
use aoc_backend_x86::pointwise::{X86Level, compile_pointwise, pointwise_asm, pointwise_clif};
use aoc_ir::ops::elementwise::{fmax_nan, fmin_nan};
use aoc_ir::types::Scalar;
use common::*;

type UnaryF32 = fn(f32) -> f32;
type BinaryF32 = fn(f32, f32) -> f32;
type CompareF32 = fn(f32, f32) -> bool;

#[test]
fn relu_mul_add_broadcast_any_col_count() {
    // out = relu(a * b + c), c one value per row; the col counts cover the
    // scalar tail alone, vectors alone and both.
    for cols in [1u64, 3, 4, 5, 8, 13] {
        let dims = [3, cols];
        let mut k = kernel(
            &dims,
            &[
                (Scalar::F32, contiguous(&dims)),
                (Scalar::F32, contiguous(&dims)),
                (Scalar::F32, vec![1, 0]),
            ],
            Scalar::F32,
        );
        let (a, b, c) = (
            k.push(Expr::Load(0)),
            k.push(Expr::Load(1)),
            k.push(Expr::Load(2)),
        );
        let m = k.push(Expr::Binary(Binary::Mul, a, b));
        let s = k.push(Expr::Binary(Binary::Add, m, c));
        k.push(Expr::Unary(Unary::Relu, s));
        let k = finish(k);
        let n = (3 * cols) as usize;
        let av: Vec<f32> = (0..n).map(|i| (i as f32 - 10.0) * 0.37).collect();
        let bv: Vec<f32> = (0..n).map(|i| 1.5 - i as f32 * 0.11).collect();
        let cv = [0.5f32, -1.0, 2.0];
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let v = av[i] * bv[i] + cv[i / cols as usize];
                if v < 0.0 { 0.0 } else { v }
            })
            .collect();
        check_f32(&k, &[bytes(&av), bytes(&bv), bytes(&cv)], &want);
    }
}

#[test]
fn transposed_4d_operand() {
    // a is stored as a contiguous 5x4x3x2 tensor and read transposed:
    // out[i][j][k][l] = a[l][k][j][i] - b[i][j][k][l].
    let dims = [2u64, 3, 4, 5];
    let mut k = kernel(
        &dims,
        &[
            (Scalar::F32, vec![1, 2, 6, 24]),
            (Scalar::F32, contiguous(&dims)),
        ],
        Scalar::F32,
    );
    let (a, b) = (k.push(Expr::Load(0)), k.push(Expr::Load(1)));
    k.push(Expr::Binary(Binary::Sub, a, b));
    let k = finish(k);
    let av: Vec<f32> = (0..120).map(|i| i as f32 * 1.5).collect();
    let bv: Vec<f32> = (0..120).map(|i| (i % 7) as f32).collect();
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for kk in 0..4 {
                for l in 0..5 {
                    let ai = ((l * 4 + kk) * 3 + j) * 2 + i;
                    let bi = ((i * 3 + j) * 4 + kk) * 5 + l;
                    want.push(av[ai] - bv[bi]);
                }
            }
        }
    }
    check_f32(&k, &[bytes(&av), bytes(&bv)], &want);
}

#[test]
fn middle_dimension_broadcast() {
    // y is a 2x1x5 tensor broadcast over the middle dimension of 2x3x5:
    // rows split by division, and the row stride of y is 0 inside a batch.
    let dims = [2u64, 3, 5];
    let mut k = kernel(
        &dims,
        &[
            (Scalar::F32, contiguous(&dims)),
            (Scalar::F32, vec![5, 0, 1]),
        ],
        Scalar::F32,
    );
    let (x, y) = (k.push(Expr::Load(0)), k.push(Expr::Load(1)));
    k.push(Expr::Binary(Binary::Mul, x, y));
    let k = finish(k);
    let xv: Vec<f32> = (0..30).map(|i| i as f32 + 0.5).collect();
    let yv: Vec<f32> = (0..10).map(|i| 1.0 + i as f32 * 0.25).collect();
    let want: Vec<f32> = (0..30)
        .map(|e| {
            let (n, c) = (e / 15, e % 5);
            xv[e] * yv[n * 5 + c]
        })
        .collect();
    check_f32(&k, &[bytes(&xv), bytes(&yv)], &want);
}

#[test]
fn dequantize_i8_with_per_row_scale_and_per_col_zero_point() {
    // out = (q - zp[col]) * scale[row]: i8 and i32 loads (scalar loop), a
    // hoisted stride-0 f32 load, exact results.
    let dims = [3u64, 9];
    let mut k = kernel(
        &dims,
        &[
            (Scalar::I8, contiguous(&dims)),
            (Scalar::F32, vec![1, 0]),
            (Scalar::I32, vec![0, 1]),
        ],
        Scalar::F32,
    );
    let (q, s, z) = (
        k.push(Expr::Load(0)),
        k.push(Expr::Load(1)),
        k.push(Expr::Load(2)),
    );
    let d = k.push(Expr::Binary(Binary::Sub, q, z));
    k.push(Expr::Binary(Binary::Mul, d, s));
    let k = finish(k);
    let qv: Vec<i8> = (0..27).map(|i| (i * 37 % 256 - 128) as i8).collect();
    let sv = [0.125f32, 2.0, -0.5];
    let zv: Vec<i32> = (0..9).map(|i| i - 4).collect();
    let want: Vec<f32> = (0..27)
        .map(|e| (qv[e] as f32 - zv[e % 9] as f32) * sv[e / 9])
        .collect();
    assert_eq!(qv[0], -128);
    check_f32(&k, &[bytes(&qv), bytes(&sv), bytes(&zv)], &want);
}

#[test]
fn loads_convert_every_dtype_to_f32() {
    fn check(dtype: Scalar, data: Vec<u8>, want: &[f32]) {
        let dims = [want.len() as u64];
        let mut k = kernel(&dims, &[(dtype, vec![1])], Scalar::F32);
        k.push(Expr::Load(0));
        check_f32(&finish(k), &[data], want);
    }
    check(
        Scalar::I8,
        bytes(&[-128i8, -1, 0, 127]),
        &[-128.0, -1.0, 0.0, 127.0],
    );
    check(
        Scalar::U8,
        bytes(&[0u8, 1, 200, 255]),
        &[0.0, 1.0, 200.0, 255.0],
    );
    check(
        Scalar::I16,
        bytes(&[-32768i16, -3, 32767]),
        &[-32768.0, -3.0, 32767.0],
    );
    check(Scalar::U16, bytes(&[0u16, 65535]), &[0.0, 65535.0]);
    // 2^24 + 1 rounds to nearest even.
    check(
        Scalar::I32,
        bytes(&[-7i32, 16_777_217, i32::MIN]),
        &[-7.0, 16_777_216.0, -2147483648.0],
    );
    check(Scalar::U32, bytes(&[u32::MAX, 5]), &[4294967296.0, 5.0]);
    check(
        Scalar::I64,
        bytes(&[-(1i64 << 40), 3]),
        &[-1099511627776.0, 3.0],
    );
    check(
        Scalar::U64,
        bytes(&[u64::MAX, 9]),
        &[18446744073709551616.0, 9.0],
    );
    check(
        Scalar::F64,
        bytes(&[0.1f64, -1e300, 2.5]),
        &[0.1f32, f32::NEG_INFINITY, 2.5],
    );
    check(
        Scalar::BF16,
        bytes(&[0x3fc0u16, 0xc120, 0x0000]),
        &[1.5, -10.0, 0.0],
    );
    check(
        Scalar::I1,
        bytes(&[0u8, 1, 0, 1, 1]),
        &[0.0, 1.0, 0.0, 1.0, 1.0],
    );
}

#[test]
fn stores_truncate_and_saturate_to_every_dtype() {
    let x = [-1.7f32, 2.5, 300.6, -1e10, f32::NAN, 0.0, 65535.9, 1e20];
    fn run<T: Elem>(out_dtype: Scalar, x: &[f32]) -> Vec<Vec<T>> {
        let dims = [x.len() as u64];
        let mut k = kernel(&dims, &[(Scalar::F32, vec![1])], out_dtype);
        k.push(Expr::Load(0));
        let k = finish(k);
        let init = vec![0u8; x.len() * T::SIZE];
        run_all(&k, &[bytes(x)], &init, (0, 1))
            .into_iter()
            .map(|(_, out)| values::<T>(&out))
            .collect()
    }
    for got in run::<i8>(Scalar::I8, &x) {
        assert_eq!(got, [-1, 2, 127, -128, 0, 0, 127, 127]);
    }
    for got in run::<u8>(Scalar::U8, &x) {
        assert_eq!(got, [0, 2, 255, 0, 0, 0, 255, 255]);
    }
    for got in run::<i16>(Scalar::I16, &x) {
        assert_eq!(got, [-1, 2, 300, -32768, 0, 0, 32767, 32767]);
    }
    for got in run::<u16>(Scalar::U16, &x) {
        assert_eq!(got, [0, 2, 300, 0, 0, 0, 65535, 65535]);
    }
    for got in run::<i32>(Scalar::I32, &x) {
        assert_eq!(got, [-1, 2, 300, i32::MIN, 0, 0, 65535, i32::MAX]);
    }
    for got in run::<u32>(Scalar::U32, &x) {
        assert_eq!(got, [0, 2, 300, 0, 0, 0, 65535, u32::MAX]);
    }
    for got in run::<i64>(Scalar::I64, &x) {
        assert_eq!(got, [-1, 2, 300, -10_000_000_000, 0, 0, 65535, i64::MAX]);
    }
    for got in run::<u64>(Scalar::U64, &x) {
        assert_eq!(got, [0, 2, 300, 0, 0, 0, 65535, u64::MAX]);
    }
    for got in run::<u8>(Scalar::I1, &x) {
        // NaN converts to true, as in C and numpy.
        assert_eq!(got, [1, 1, 1, 1, 1, 0, 1, 1]);
    }
    for got in run::<f64>(Scalar::F64, &x) {
        for (g, w) in got.iter().zip(x) {
            assert!(g.to_bits() == (w as f64).to_bits() || (g.is_nan() && w.is_nan()));
        }
    }
    // bf16: round to nearest, ties to even (1 + 2^-8 -> 1.0, 1 + 3·2^-8 ->
    // 1 + 2^-6), NaN stays NaN, infinity stays infinity.
    let y = [
        1.0f32,
        2.5,
        -1.7,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        f32::NAN,
        f32::INFINITY,
    ];
    for got in run::<u16>(Scalar::BF16, &y) {
        assert_eq!(&got[..5], [0x3f80, 0x4020, 0xbfda, 0x3f80, 0x3f82]);
        assert!(
            got[5] & 0x7f80 == 0x7f80 && got[5] & 0x7f != 0,
            "{:#x}",
            got[5]
        );
        assert_eq!(got[6], 0x7f80);
    }
}

/// e4m3 (`f8E4M3FN`) loads and stores: every one of the 256 bytes loads
/// as its exact value (`aoc_ir::bytes::f8_to_f64`; both NaN codes as NaN),
/// and f32 values store as `aoc_ir::bytes::f64_to_f8` of their saturating
/// rounding (`round_f8`): every midpoint between two neighbouring codes
/// (ties to even) and the values just beside it, subnormals, ±0, the
/// largest finite value and past it (saturating), infinities, NaN, and a
/// sweep of f32 bit patterns.
#[test]
fn e4m3_loads_are_exact_and_stores_round_to_nearest_even() {
    use aoc_ir::bytes::{f8_to_f64, f64_to_f8};
    use aoc_ir::tensor::round_f8;
    let e4m3 = Scalar::F8E4M3FN;
    // Loads.
    let codes: Vec<u8> = (0..=255).collect();
    let dims = [codes.len() as u64];
    let mut k = kernel(&dims, &[(e4m3, vec![1])], Scalar::F32);
    k.push(Expr::Load(0));
    let k = finish(k);
    for (_, out) in run_all(&k, &[codes.clone()], &vec![0u8; codes.len() * 4], (0, 1)) {
        for (&c, got) in codes.iter().zip(values::<f32>(&out)) {
            let want = f8_to_f64(e4m3, c);
            assert!((got as f64).to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "code {c:#04x}: {got}, expected {want}");
        }
    }
    // Stores.
    let finite: Vec<f32> = (0..=0x7eu8).map(|c| f8_to_f64(e4m3, c) as f32).collect();
    let mut x: Vec<f32> = Vec::new();
    for w in finite.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        x.extend([mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1), w[0]]);
    }
    x.extend([0.0, 448.0, 464.0, 465.0, 479.0, 480.0, 1e6, f32::MAX, f32::INFINITY, f32::NAN, 2f32.powi(-10), 2f32.powi(-11), 1e-30]);
    let mut seed = 0x9e37_79b9u32;
    for _ in 0..20000 {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        // Exponents around e4m3's range, any mantissa.
        let bits = (seed & 0x807f_ffff) | ((110 + (seed >> 23) % 40) << 23);
        x.push(f32::from_bits(bits));
    }
    let negated: Vec<f32> = x.iter().map(|v| -v).collect();
    x.extend(negated);
    let dims = [x.len() as u64];
    let mut k = kernel(&dims, &[(Scalar::F32, vec![1])], e4m3);
    k.push(Expr::Load(0));
    let k = finish(k);
    for (_, out) in run_all(&k, &[bytes(&x)], &vec![0u8; x.len()], (0, 1)) {
        for (&v, &got) in x.iter().zip(&out) {
            let want = f64_to_f8(e4m3, round_f8(e4m3, v as f64, true));
            assert_eq!(got, want, "{v:e} ({:#010x}): {got:#04x}, expected {want:#04x}", v.to_bits());
        }
    }
}

#[test]
fn quantize_f32_to_i8_rounds_half_even_and_clamps() {
    // out = clamp(round_even(x / 0.5) + (-1), -128, 127) stored as i8.
    let dims = [2u64, 6];
    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::I8);
    let x = k.push(Expr::Load(0));
    let s = k.push(Expr::Const(0.5));
    let d = k.push(Expr::Binary(Binary::Div, x, s));
    let r = k.push(Expr::Unary(Unary::RoundEven, d));
    let zp = k.push(Expr::Const(-1.0));
    let q = k.push(Expr::Binary(Binary::Add, r, zp));
    let lo = k.push(Expr::Const(-128.0));
    let hi = k.push(Expr::Const(127.0));
    let q = k.push(Expr::Binary(Binary::Max, q, lo));
    k.push(Expr::Binary(Binary::Min, q, hi));
    let k = finish(k);
    let xv = [
        1.25f32, -1.25, 0.75, 1000.0, -1000.0, 0.2, 3.75, -0.0, 63.4, -63.75, 0.25, -0.25,
    ];
    let want: Vec<i8> = xv
        .iter()
        .map(|&v| ((v / 0.5).round_ties_even() - 1.0).clamp(-128.0, 127.0) as i8)
        .collect();
    assert_eq!(&want[..5], [1, -3, 1, 127, -128]);
    for (level, out) in run_all(&k, &[bytes(&xv)], &[0u8; 12], (0, 2)) {
        assert_eq!(values::<i8>(&out), want, "{level:?}");
    }
}

#[test]
fn row_range_writes_only_its_rows() {
    // out = 2x over 5 rows of 6; the buffer has a guard zone after it.
    let dims = [5u64, 6];
    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
    let x = k.push(Expr::Load(0));
    let two = k.push(Expr::Const(2.0));
    k.push(Expr::Binary(Binary::Mul, x, two));
    let k = finish(k);
    let xv: Vec<f32> = (0..30).map(|i| i as f32).collect();
    let init = bytes(&[-7.0f32; 30 + 8]);
    // (range, rows written): a range past the end is clamped to the row
    // count; an empty or reversed range writes nothing.
    for ((start, end), written) in [
        ((1, 3), 1..3),
        ((3, 100), 3..5),
        ((4, 2), 0..0),
        ((0, 0), 0..0),
    ] {
        for (level, out) in run_all(&k, &[bytes(&xv)], &init, (start, end)) {
            let got: Vec<f32> = values(&out);
            for (i, g) in got.iter().enumerate() {
                let want = if i < 30 && written.contains(&(i / 6)) {
                    2.0 * i as f32
                } else {
                    -7.0
                };
                assert_eq!(*g, want, "{level:?} rows {start}..{end}: element {i}");
            }
        }
    }
}

#[test]
fn rounding_matches_std_bit_for_bit() {
    let xs = [
        -2.5f32,
        -1.5,
        -0.5,
        -0.0,
        0.0,
        0.5,
        1.5,
        2.5,
        0.49999997,
        -0.49999997,
        8388607.5,
        -8388607.5,
        8388609.0,
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -1e-40,
        3.7,
        -3.7,
    ];
    let ops: [(Unary, UnaryF32); 4] = [
        (Unary::Floor, f32::floor),
        (Unary::Ceil, f32::ceil),
        (Unary::Trunc, f32::trunc),
        (Unary::RoundEven, f32::round_ties_even),
    ];
    let dims = [1u64, xs.len() as u64];
    for (op, f) in ops {
        let want: Vec<f32> = xs.iter().map(|&x| f(x)).collect();
        // f32 input: vector loop; f64 input: scalar loop.
        for (dtype, data) in [
            (Scalar::F32, bytes(&xs)),
            (Scalar::F64, bytes(&xs.map(|x| x as f64))),
        ] {
            let mut k = kernel(&dims, &[(dtype, contiguous(&dims))], Scalar::F32);
            let x = k.push(Expr::Load(0));
            k.push(Expr::Unary(op, x));
            check_f32(&finish(k), &[data], &want);
        }
    }
}

#[test]
fn max_min_relu_propagate_nan_and_keep_first_on_ties() {
    let nan = f32::NAN;
    let a = [1.0f32, -2.0, nan, 3.0, -0.0, 0.0, nan, -5.0, 0.0];
    let b = [2.0f32, -3.0, 1.0, nan, 0.0, -0.0, nan, -5.0, 7.0];
    let dims = [1u64, a.len() as u64];
    let ops: [(&str, BinaryF32); 3] = [
        ("max", |x, y| fmax_nan(x as f64, y as f64) as f32),
        ("min", |x, y| fmin_nan(x as f64, y as f64) as f32),
        ("relu", |x, _| fmax_nan(x as f64, 0.0) as f32),
    ];
    for (name, f) in ops {
        let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
        for dtype in [Scalar::F32, Scalar::F64] {
            let enc = |v: &[f32]| match dtype {
                Scalar::F32 => bytes(v),
                _ => bytes(&v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
            };
            let mut k = kernel(
                &dims,
                &[(dtype, contiguous(&dims)), (dtype, contiguous(&dims))],
                Scalar::F32,
            );
            let (x, y) = (k.push(Expr::Load(0)), k.push(Expr::Load(1)));
            k.push(match name {
                "max" => Expr::Binary(Binary::Max, x, y),
                "min" => Expr::Binary(Binary::Min, x, y),
                _ => Expr::Unary(Unary::Relu, x),
            });
            check_f32(&finish(k), &[enc(&a), enc(&b)], &want);
        }
    }
    // Spot checks of the reference semantics themselves.
    assert_eq!(fmax_nan(-0.0, 0.0).to_bits(), (-0.0f64).to_bits());
    assert!(fmax_nan(3.0, f64::NAN).is_nan());
}

#[test]
fn comparisons_and_select() {
    let nan = f32::NAN;
    let a = [1.0f32, 2.0, 3.0, nan, -0.0, 4.0, 5.0];
    let b = [2.0f32, 2.0, 1.0, 1.0, 0.0, nan, 6.0];
    let c = [0.0f32, 1.0, -0.0, nan, 2.0, 0.0, -3.0];
    let dims = [a.len() as u64];
    let one = |t: bool| if t { 1.0 } else { 0.0 };
    let cases: [(Binary, CompareF32); 3] = [
        (Binary::Equal, |x, y| x == y),
        (Binary::Less, |x, y| x < y),
        (Binary::Greater, |x, y| x > y),
    ];
    for (op, f) in cases {
        let mut k = kernel(
            &dims,
            &[(Scalar::F32, vec![1]), (Scalar::F32, vec![1])],
            Scalar::F32,
        );
        let (x, y) = (k.push(Expr::Load(0)), k.push(Expr::Load(1)));
        k.push(Expr::Binary(op, x, y));
        let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| one(f(x, y))).collect();
        check_f32(&finish(k), &[bytes(&a), bytes(&b)], &want);
    }
    // select(c, a, b) = c != 0 ? a : b (NaN counts as nonzero).
    let mut k = kernel(&dims, &vec![(Scalar::F32, vec![1]); 3], Scalar::F32);
    let (x, y, z) = (
        k.push(Expr::Load(0)),
        k.push(Expr::Load(1)),
        k.push(Expr::Load(2)),
    );
    k.push(Expr::Select(z, x, y));
    let want: Vec<f32> = (0..a.len())
        .map(|i| {
            if c[i] != 0.0 || c[i].is_nan() {
                a[i]
            } else {
                b[i]
            }
        })
        .collect();
    check_f32(&finish(k), &[bytes(&a), bytes(&b), bytes(&c)], &want);
}

#[test]
fn empty_output_compiles_and_writes_nothing() {
    for dims in [[0u64, 4], [3, 0]] {
        let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
        k.push(Expr::Load(0));
        let k = finish(k);
        for (_, out) in run_all(&k, &[bytes(&[1.0f32; 4])], &bytes(&[9.0f32; 4]), (0, 3)) {
            assert_eq!(values::<f32>(&out), [9.0; 4]);
        }
    }
}

#[test]
fn invalid_kernels_are_errors() {
    let base = || {
        let mut k = kernel(&[2, 3], &[(Scalar::F32, vec![3, 1])], Scalar::F32);
        k.push(Expr::Load(0));
        finish(k)
    };
    let err = |k: PointwiseKernel| compile_pointwise(&k, X86Level::Baseline).unwrap_err();
    let mut k = base();
    k.operands[0].strides = vec![1];
    assert_eq!(err(k), "operand 0 must have 2 strides, found 1");
    let mut k = base();
    k.exprs = vec![Expr::Unary(Unary::Neg, 0)];
    assert_eq!(
        err(k),
        "expression 0 uses expression 0, which is not earlier"
    );
    let mut k = base();
    k.exprs = vec![Expr::Load(1)];
    assert_eq!(err(k), "expression 0 loads operand 1, but there are 1");
    let mut k = base();
    k.result = 5;
    assert_eq!(err(k), "result must name one of the 1 expressions, found 5");
    let mut k = base();
    k.operands[0].dtype = Scalar::F16;
    assert_eq!(
        err(k),
        "operand 0: element type f16 is not supported by generated kernels"
    );
    let mut k = base();
    k.dims.clear();
    k.operands[0].strides.clear();
    assert_eq!(err(k), "kernel output must have at least one dimension");
}

#[test]
fn clif_and_asm_listings() {
    let dims = [4u64, 8];
    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
    let x = k.push(Expr::Load(0));
    // A dead exp: no call is emitted for it.
    k.push(Expr::Unary(Unary::Exp, x));
    k.push(Expr::Unary(Unary::Floor, x));
    let k = finish(k);
    let clif = pointwise_clif(&k, X86Level::V3).unwrap();
    assert!(clif.contains("f32x4"), "{clif}");
    assert!(clif.contains("floor"), "{clif}");
    assert!(!clif.contains("call_indirect"), "{clif}");
    // The baseline has no rounding instruction: no floor, no libcall.
    let base = pointwise_clif(&k, X86Level::Baseline).unwrap();
    assert!(!base.contains("floor"), "{base}");
    let asm = pointwise_asm(&k, X86Level::V3).unwrap();
    assert!(asm.contains("round"), "{asm}");
    assert!(asm.trim_end().ends_with("bytes"), "{asm}");

    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
    let x = k.push(Expr::Load(0));
    k.push(Expr::Unary(Unary::Tanh, x));
    let clif = pointwise_clif(&finish(k), X86Level::V4).unwrap();
    assert!(clif.contains("call_indirect"), "{clif}");
}
