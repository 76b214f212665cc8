//! Generated pointwise kernels that call the runtime's math table: accuracy
//! against f64, one call per vector in the `f32x4` loop, agreement of the
//! vector body, the scalar tail and the scalar loop, and a timed GELU.

mod common;

use aoc_backend_x86::expr::{Binary, Expr, Unary};
use aoc_backend_x86::pointwise::{X86Level, compile_pointwise, pointwise_clif};
use aoc_ir::ops::elementwise::erf;
use aoc_ir::types::Scalar;
use aoc_runtime::jit::LoadedKernel;
use common::*;

type UnaryF64 = fn(f64) -> f64;

/// Relative error of `got` against the f64 value `want`.
fn rel_err(got: f32, want: f64) -> f64 {
    if got as f64 == want {
        return 0.0;
    }
    ((got as f64 - want) / want.abs().max(1e-30)).abs()
}

#[test]
fn math_functions_match_f64_within_1e6() {
    let unary: [(Unary, UnaryF64); 7] = [
        (Unary::Exp, f64::exp),
        (Unary::Log, f64::ln),
        (Unary::Tanh, f64::tanh),
        (Unary::Erf, erf),
        (Unary::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (Unary::Sin, f64::sin),
        (Unary::Cos, f64::cos),
    ];
    let dims = [2u64, 9];
    let n = 18;
    // f32 operands take the vector loop, f64 ones the scalar loop.
    for dtype in [Scalar::F32, Scalar::F64] {
        for (op, f) in unary {
            let x: Vec<f32> = if op == Unary::Log {
                (0..n).map(|i| 0.05 + i as f32 * 0.37).collect()
            } else {
                (0..n).map(|i| -4.0 + i as f32 * 0.47).collect()
            };
            let input = match dtype {
                Scalar::F32 => bytes(&x),
                _ => bytes(&x.iter().map(|&v| v as f64).collect::<Vec<_>>()),
            };
            let mut k = kernel(&dims, &[(dtype, contiguous(&dims))], Scalar::F32);
            let a = k.push(Expr::Load(0));
            k.push(Expr::Unary(op, a));
            let k = finish(k);
            for (level, out) in run_all(&k, &[input], &bytes(&vec![0f32; n]), (0, 2)) {
                for (i, g) in values::<f32>(&out).into_iter().enumerate() {
                    let want = f(x[i] as f64);
                    let e = rel_err(g, want);
                    assert!(
                        e <= 1e-6,
                        "{level:?} {op:?}({}) = {g}, want {want} (rel {e})",
                        x[i]
                    );
                }
            }
        }
        // pow(a, b)
        let a: Vec<f32> = (0..n).map(|i| 0.05 + i as f32 * 0.41).collect();
        let b: Vec<f32> = (0..n).map(|i| -2.0 + i as f32 * 0.29).collect();
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
        k.push(Expr::Binary(Binary::Pow, x, y));
        let k = finish(k);
        for (level, out) in run_all(&k, &[enc(&a), enc(&b)], &bytes(&vec![0f32; n]), (0, 2)) {
            for (i, g) in values::<f32>(&out).into_iter().enumerate() {
                let want = (a[i] as f64).powf(b[i] as f64);
                let e = rel_err(g, want);
                assert!(
                    e <= 1e-6,
                    "{level:?} pow({}, {}) = {g}, want {want}",
                    a[i],
                    b[i]
                );
            }
        }
    }
}

#[test]
fn vector_loop_calls_each_math_function_once_per_vector() {
    // 8 columns: a vector loop and no scalar tail, so every call is a
    // vector call: one `f32x4 -> f32x4` call per function, no lane
    // extraction, and sigmoid as a call rather than 1/(1+exp(-x)).
    let dims = [4u64, 8];
    for op in [Unary::Exp, Unary::Log, Unary::Tanh, Unary::Erf, Unary::Sigmoid] {
        let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
        let x = k.push(Expr::Load(0));
        k.push(Expr::Unary(op, x));
        let clif = pointwise_clif(&finish(k), X86Level::V3).unwrap();
        assert_eq!(clif.matches("call_indirect").count(), 1, "{op:?}: {clif}");
        assert!(clif.contains("(f32x4) -> f32x4 system_v"), "{op:?}: {clif}");
        assert!(!clif.contains("extractlane"), "{op:?}: {clif}");
        assert!(!clif.contains("fdiv"), "{op:?}: {clif}");
    }
    // pow has no vector entry: four scalar calls per vector.
    let mut k = kernel(
        &dims,
        &[
            (Scalar::F32, contiguous(&dims)),
            (Scalar::F32, contiguous(&dims)),
        ],
        Scalar::F32,
    );
    let (x, y) = (k.push(Expr::Load(0)), k.push(Expr::Load(1)));
    k.push(Expr::Binary(Binary::Pow, x, y));
    let clif = pointwise_clif(&finish(k), X86Level::V3).unwrap();
    assert_eq!(clif.matches("call_indirect").count(), 4, "{clif}");
    // 7 columns: the vector loop plus a 3-element tail of scalar calls.
    let dims = [4u64, 7];
    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
    let x = k.push(Expr::Load(0));
    k.push(Expr::Unary(Unary::Erf, x));
    let clif = pointwise_clif(&finish(k), X86Level::V3).unwrap();
    assert_eq!(clif.matches("call_indirect").count(), 4, "{clif}");
    assert!(clif.contains("(f32) -> f32 system_v"), "{clif}");
}

#[test]
fn vector_body_scalar_tail_and_scalar_loop_agree_bit_for_bit() {
    // Each row holds four values, then the first three again: the vector
    // loop computes columns 0..4 and the scalar tail columns 4..7, so equal
    // inputs must give equal bits; an f64 copy of the input takes the
    // scalar loop and must give the same bits too (the values are exact in
    // f32).
    let dims = [6u64, 7];
    let quads = [
        [0.3f32, -1.7, 2.9, 7.5],
        [-0.0, 1e-30, -3.95, 0.9999],
        [88.5, -90.0, 0.625, -0.62],
        [f32::INFINITY, f32::NEG_INFINITY, 1e-40, 4.0],
        [0.5, 1.0, 1.0001, 2.0],
        [-12.0, 12.0, 1e20, -1e-5],
    ];
    let xv: Vec<f32> = quads
        .iter()
        .flat_map(|q| [q[0], q[1], q[2], q[3], q[0], q[1], q[2]])
        .collect();
    let xd: Vec<f64> = xv.iter().map(|&x| x as f64).collect();
    for op in [Unary::Exp, Unary::Log, Unary::Tanh, Unary::Erf, Unary::Sigmoid, Unary::Sin, Unary::Cos] {
        let mut outs = Vec::new();
        for (dtype, data) in [(Scalar::F32, bytes(&xv)), (Scalar::F64, bytes(&xd))] {
            let mut k = kernel(&dims, &[(dtype, contiguous(&dims))], Scalar::F32);
            let x = k.push(Expr::Load(0));
            k.push(Expr::Unary(op, x));
            let k = finish(k);
            for (level, out) in run_all(&k, &[data], &bytes(&vec![0f32; 42]), (0, 6)) {
                outs.push((level, dtype, values::<f32>(&out)));
            }
        }
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let (_, _, first) = &outs[0];
        for (level, dtype, out) in &outs {
            for r in 0..6 {
                for c in 0..7 {
                    let (g, w) = (out[r * 7 + c], first[r * 7 + c % 4]);
                    assert!(
                        same(g, w),
                        "{op:?} {level:?} {dtype:?} row {r} col {c}: {g:e} vs {w:e}"
                    );
                }
            }
        }
    }
}

/// `gelu(x) = x · 0.5 · (1 + erf(x · √½))` over a 128×1024 tensor, the
/// shape of a transformer's MLP epilogue: checks every element against an
/// f64 evaluation of the same f32 steps, and prints the single-thread time
/// of the whole tensor per level (best of several runs; meaningful in a
/// release build: `cargo test --release -p aoc-backend-x86 gelu -- --nocapture`).
#[test]
fn gelu_erf_epilogue_is_accurate_and_timed() {
    let dims = [128u64, 1024];
    let mut k = kernel(&dims, &[(Scalar::F32, contiguous(&dims))], Scalar::F32);
    let x = k.push(Expr::Load(0));
    let c = k.push(Expr::Const(std::f32::consts::FRAC_1_SQRT_2));
    let t = k.push(Expr::Binary(Binary::Mul, x, c));
    let e = k.push(Expr::Unary(Unary::Erf, t));
    let one = k.push(Expr::Const(1.0));
    let s = k.push(Expr::Binary(Binary::Add, one, e));
    let half = k.push(Expr::Const(0.5));
    let xh = k.push(Expr::Binary(Binary::Mul, x, half));
    k.push(Expr::Binary(Binary::Mul, xh, s));
    let k = finish(k);
    let n = 128 * 1024;
    // A deterministic spread over [-8, 8) (a multiplicative hash of i).
    let xv: Vec<f32> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 8) as f32 / (1 << 24) as f32 * 16.0 - 8.0)
        .collect();
    for level in X86Level::ALL.into_iter().filter(|&l| l <= X86Level::host()) {
        let loaded = LoadedKernel::new(&compile_pointwise(&k, level).unwrap()).unwrap();
        let mut input = xv.clone();
        let mut out = vec![0f32; n];
        let args = [input.as_mut_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
        let mut best = f64::INFINITY;
        for _ in 0..20 {
            let start = std::time::Instant::now();
            // SAFETY: both buffers hold the kernel's 128×1024 f32 elements.
            unsafe { loaded.call(&args, 0, 128) };
            best = best.min(start.elapsed().as_secs_f64());
        }
        eprintln!(
            "{level:?}: gelu over 128x1024 f32, one thread: {:.3} ms",
            best * 1e3
        );
        for (i, (&g, &xi)) in out.iter().zip(&xv).enumerate() {
            // The f32 steps, in f64 with an exact erf.
            let t = (xi * std::f32::consts::FRAC_1_SQRT_2) as f64;
            let want = (xi * 0.5) as f64 * (1.0 + erf(t));
            let tol = 1.2e-7 * xi.abs() as f64 + 2.4e-7 * want.abs();
            assert!(
                (g as f64 - want).abs() <= tol,
                "{level:?}: gelu({xi}) = {g}, want {want} (element {i})"
            );
        }
    }
}
