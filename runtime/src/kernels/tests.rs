//! Tests of the fp32 GEMM: every level this CPU supports against an f64
//! reference over many shapes (edges of every tile size, padded leading
//! dimensions, overwrite and accumulate, epilogue, threads), the packed
//! layout, and the rejection of bad arguments.

use super::pack::packed_len;
use super::*;

/// Deterministic values in [-1, 1) (xorshift), so failures reproduce.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn supported_levels() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|isa| {
            let ok = isa.is_supported();
            if !ok {
                println!("skipping isa {isa}: this cpu does not support it");
            }
            ok
        })
        .collect()
}

struct Case {
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
}

/// Runs one case on `isa` and compares with an f64 reference; the bound is
/// `2e-6·(k+1)` times the sum of magnitudes entering each output.
fn check(isa: Isa, cs: &Case, accumulate: bool, epi: bool, threads: usize) {
    let Case {
        m,
        n,
        k,
        lda,
        ldb,
        ldc,
    } = *cs;
    let a = values(m.max(1) * lda, 1 + (m * 31 + k) as u64);
    let b = values(k.max(1) * ldb, 2 + (k * 17 + n) as u64);
    let c0 = values(m.max(1) * ldc, 3 + (n * 7 + m) as u64);
    let bias = values(n, 4);
    let packed = pack_b(k, n, &b, ldb).unwrap();
    let mut c = c0.clone();
    let opts = GemmOptions {
        isa: Some(isa),
        accumulate,
        bias: if epi { Some(&bias) } else { None },
        relu: epi,
        clip: None,
        gelu: false,
        threads,
    };
    gemm(m, n, k, &a, lda, packed.as_ref(), &mut c, ldc, &opts).unwrap();
    for i in 0..m {
        for j in 0..n {
            let mut sum = if accumulate {
                c0[i * ldc + j] as f64
            } else {
                0.0
            };
            let mut mag = sum.abs();
            for p in 0..k {
                let t = a[i * lda + p] as f64 * b[p * ldb + j] as f64;
                sum += t;
                mag += t.abs();
            }
            if epi {
                sum = (sum + bias[j] as f64).max(0.0);
                mag += (bias[j] as f64).abs();
            }
            let got = c[i * ldc + j] as f64;
            let tol = 2e-6 * (k as f64 + 1.0) * (mag + 1e-30);
            assert!(
                (got - sum).abs() <= tol,
                "{isa} m={m} n={n} k={k} lda={lda} ldb={ldb} ldc={ldc} acc={accumulate} epi={epi} \
                 threads={threads}: c[{i}][{j}] = {got}, expected {sum}"
            );
        }
        // Padding between rows of C is never written.
        for j in n..ldc {
            if i + 1 < m {
                assert_eq!(
                    c[i * ldc + j],
                    c0[i * ldc + j],
                    "{isa}: padding of c written"
                );
            }
        }
    }
}

const SIZES: [usize; 9] = [1, 2, 7, 13, 31, 33, 64, 100, 257];

#[test]
fn gemm_matches_reference_on_all_shapes() {
    for isa in supported_levels() {
        for &m in &SIZES {
            for &n in &SIZES {
                for &k in &SIZES {
                    // The f64 reference is slow in debug builds; the largest
                    // products are covered by the dedicated cases below.
                    if m * n * k > 700_000 {
                        continue;
                    }
                    let dense = Case {
                        m,
                        n,
                        k,
                        lda: k,
                        ldb: n,
                        ldc: n,
                    };
                    check(isa, &dense, false, false, 1);
                    let padded = Case {
                        m,
                        n,
                        k,
                        lda: k + 3,
                        ldb: n + 5,
                        ldc: n + 2,
                    };
                    check(isa, &padded, true, false, 1);
                }
            }
        }
    }
}

#[test]
fn gemm_large_shapes_cross_cache_blocks() {
    // k > kc (256) forces several depth blocks; m > mc several row blocks.
    let cases = [
        Case {
            m: 257,
            n: 257,
            k: 257,
            lda: 257,
            ldb: 257,
            ldc: 257,
        },
        Case {
            m: 300,
            n: 100,
            k: 600,
            lda: 611,
            ldb: 100,
            ldc: 103,
        },
        Case {
            m: 33,
            n: 4100,
            k: 5,
            lda: 5,
            ldb: 4100,
            ldc: 4100,
        },
        // One column tile (n ≤ 32): the AVX-512 kernels read A in place,
        // across row blocks (m > mc) and depth blocks (k > kc), with a cut
        // tile (n = 24) and a padded A.
        Case {
            m: 700,
            n: 24,
            k: 300,
            lda: 311,
            ldb: 24,
            ldc: 29,
        },
    ];
    for isa in supported_levels() {
        for cs in &cases {
            check(isa, cs, false, false, 1);
            check(isa, cs, true, true, 1);
        }
    }
}

#[test]
fn gemm_epilogue_and_threads_match_reference() {
    for isa in supported_levels() {
        for &(m, n, k) in &[(7, 100, 33), (31, 257, 64), (1, 33, 257), (64, 13, 2)] {
            let cs = Case {
                m,
                n,
                k,
                lda: k + 1,
                ldb: n,
                ldc: n + 3,
            };
            for threads in [1, 2, 3, 8] {
                check(isa, &cs, false, true, threads);
                check(isa, &cs, true, true, threads);
            }
        }
    }
}

#[test]
fn gemm_hand_checked_with_bias_relu() {
    // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]]: A·B = [[19, 22], [43, 50]].
    let b = pack_b(2, 2, &[5.0, 6.0, 7.0, 8.0], 2).unwrap();
    for isa in supported_levels() {
        let mut c = [0.5f32; 4];
        let bias = [1.0f32, -100.0];
        let opts = GemmOptions {
            isa: Some(isa),
            bias: Some(&bias),
            relu: true,
            ..Default::default()
        };
        gemm(
            2,
            2,
            2,
            &[1.0, 2.0, 3.0, 4.0],
            2,
            b.as_ref(),
            &mut c,
            2,
            &opts,
        )
        .unwrap();
        assert_eq!(c, [20.0, 0.0, 44.0, 0.0], "{isa}");
        let mut c = [1.0f32, 2.0, 3.0, 4.0];
        let opts = GemmOptions {
            isa: Some(isa),
            accumulate: true,
            ..Default::default()
        };
        gemm(
            2,
            2,
            2,
            &[1.0, 2.0, 3.0, 4.0],
            2,
            b.as_ref(),
            &mut c,
            2,
            &opts,
        )
        .unwrap();
        assert_eq!(c, [20.0, 24.0, 46.0, 54.0], "{isa}");
    }
}

#[test]
fn gemm_with_zero_depth_only_applies_beta_and_epilogue() {
    let b = pack_b(0, 3, &[], 3).unwrap();
    let bias = [1.0f32, -2.0, 3.0];
    let mut c = [5.0f32, 5.0, 5.0];
    let opts = GemmOptions {
        bias: Some(&bias),
        relu: true,
        ..Default::default()
    };
    gemm(1, 3, 0, &[], 0, b.as_ref(), &mut c, 3, &opts).unwrap();
    assert_eq!(c, [1.0, 0.0, 3.0]);
    let mut c = [5.0f32, 5.0, 5.0];
    let opts = GemmOptions {
        accumulate: true,
        bias: Some(&bias),
        ..Default::default()
    };
    gemm(1, 3, 0, &[], 0, b.as_ref(), &mut c, 3, &opts).unwrap();
    assert_eq!(c, [6.0, 3.0, 8.0]);
}

#[test]
fn pack_b_layout_is_column_panels_zero_padded() {
    // B is 2×18: panel 0 holds columns 0..16, panel 1 columns 16..18 + zeros.
    let b: Vec<f32> = (0..2 * 20).map(|x| x as f32).collect(); // ldb = 20
    let p = pack_b(2, 18, &b, 20).unwrap();
    assert_eq!(p.as_slice().len(), packed_len(2, 18));
    assert_eq!(p.as_slice().len(), 64);
    let s = p.as_slice();
    assert_eq!(&s[0..16], &b[0..16]); // panel 0, row 0
    assert_eq!(&s[16..32], &b[20..36]); // panel 0, row 1
    assert_eq!(&s[32..35], &[16.0, 17.0, 0.0]); // panel 1, row 0
    assert_eq!(&s[48..51], &[36.0, 37.0, 0.0]); // panel 1, row 1
    assert!(s[34..48].iter().all(|&x| x == 0.0));
    let again = PackedB::from_packed(2, 18, s.to_vec()).unwrap();
    assert_eq!(again, p);
}

#[test]
fn bad_arguments_are_rejected_with_messages() {
    let b = pack_b(2, 2, &[1.0; 4], 2).unwrap();
    let a = [1.0f32; 4];
    let mut c = [0.0f32; 4];
    let d = GemmOptions::default();
    let err = |r: Result<(), GemmError>| r.unwrap_err().to_string();
    assert_eq!(
        err(gemm(2, 2, 3, &a, 3, b.as_ref(), &mut c, 2, &d)),
        "packed b must be 3x2, found 2x2"
    );
    assert_eq!(
        err(gemm(2, 2, 2, &a, 1, b.as_ref(), &mut c, 2, &d)),
        "leading dimension of a must be at least 2, found 1"
    );
    assert_eq!(
        err(gemm(2, 2, 2, &a[..3], 2, b.as_ref(), &mut c, 2, &d)),
        "a of 2x2 with leading dimension 2 needs 4 floats, found 3"
    );
    assert_eq!(
        err(gemm(2, 2, 2, &a, 2, b.as_ref(), &mut c[..3], 2, &d)),
        "c of 2x2 with leading dimension 2 needs 4 floats, found 3"
    );
    let bias = [0.0f32; 3];
    let o = GemmOptions {
        bias: Some(&bias),
        ..Default::default()
    };
    assert_eq!(
        err(gemm(2, 2, 2, &a, 2, b.as_ref(), &mut c, 2, &o)),
        "bias must have 2 elements, found 3"
    );
    let o = GemmOptions {
        threads: 0,
        ..Default::default()
    };
    assert_eq!(
        err(gemm(2, 2, 2, &a, 2, b.as_ref(), &mut c, 2, &o)),
        "threads must be at least 1, found 0"
    );
    assert_eq!(
        PackedB::from_packed(2, 17, vec![0.0; 40])
            .unwrap_err()
            .to_string(),
        "packed b of 2x17 must hold 64 floats, found 40"
    );
    assert_eq!(
        pack_b(2, 3, &[0.0; 5], 3).unwrap_err().to_string(),
        "b of 2x3 with leading dimension 3 needs 6 floats, found 5"
    );
    for isa in Isa::ALL {
        let o = GemmOptions {
            isa: Some(isa),
            ..Default::default()
        };
        let r = gemm(2, 2, 2, &a, 2, b.as_ref(), &mut c, 2, &o);
        if isa.is_supported() {
            assert!(r.is_ok(), "{isa}");
        } else {
            assert_eq!(err(r), format!("isa {isa} is not supported by this cpu"));
        }
    }
}

#[test]
fn best_isa_is_supported_and_cached() {
    let best = Isa::best();
    assert!(best.is_supported());
    assert_eq!(Isa::best(), best);
    // The best level is the first supported one in ALL.
    assert_eq!(Some(best), Isa::ALL.into_iter().find(|i| i.is_supported()));
}

/// `gemm_shared_a` computes every part bit for bit as `gemm` alone does
/// (same kernels, same depth order), whatever the grid: parts of unequal
/// widths with column tails, bias/relu per part, accumulate, a padded A
/// and C, thread counts that cut units across part boundaries; a bad part
/// is refused before anything is written.
#[test]
fn gemm_shared_a_matches_separate_products() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for isa in supported_levels() {
        for &(m, k, ref widths) in &[
            (37usize, 70usize, vec![100usize, 17, 64, 21]),
            (128, 256, vec![256, 256, 256]),
            (5, 3, vec![40, 1]),
            (64, 0, vec![9, 33]),
        ] {
            let lda = k + 3;
            let a = values(m * lda, 11 + k as u64);
            let bs: Vec<Vec<f32>> = widths
                .iter()
                .enumerate()
                .map(|(i, &n)| values(k.max(1) * n, 20 + i as u64))
                .collect();
            let packed: Vec<_> = widths
                .iter()
                .zip(&bs)
                .map(|(&n, b)| pack_b(k, n, b, n).unwrap())
                .collect();
            let biases: Vec<Vec<f32>> = widths
                .iter()
                .enumerate()
                .map(|(i, &n)| values(n, 30 + i as u64))
                .collect();
            let opts = |i: usize, threads: usize| GemmOptions {
                isa: Some(isa),
                threads,
                bias: (i % 2 == 0).then(|| biases[i].as_slice()),
                relu: i == 1,
                clip: (i == 0).then_some([-0.2, 0.3]),
                accumulate: i == 2,
                gelu: i == 3,
            };
            let c0: Vec<Vec<f32>> = widths
                .iter()
                .enumerate()
                .map(|(i, &n)| values(m * (n + 2), 40 + i as u64))
                .collect();
            let mut want = c0.clone();
            for (i, &n) in widths.iter().enumerate() {
                gemm(
                    m,
                    n,
                    k,
                    &a,
                    lda,
                    packed[i].as_ref(),
                    &mut want[i],
                    n + 2,
                    &opts(i, 1),
                )
                .unwrap();
            }
            for threads in [1, 2, 3] {
                let mut got = c0.clone();
                let mut parts: Vec<SharedAPart<'_>> = got
                    .iter_mut()
                    .enumerate()
                    .map(|(i, c)| SharedAPart {
                        n: widths[i],
                        b: packed[i].as_ref(),
                        c,
                        ldc: widths[i] + 2,
                        opts: opts(i, threads),
                    })
                    .collect();
                pool.install(|| gemm_shared_a(m, k, &a, lda, &mut parts))
                    .unwrap();
                for i in 0..widths.len() {
                    assert!(
                        got[i] == want[i],
                        "{isa} m {m} k {k} part {i} threads {threads}"
                    );
                }
            }
        }
    }
    // A part whose B does not match k is refused, and no C is touched.
    let (a, b) = (values(4 * 8, 1), values(8 * 4, 2));
    let good = pack_b(8, 4, &b, 4).unwrap();
    let bad = pack_b(7, 4, &b, 4).unwrap();
    let (mut c1, mut c2) = (vec![5.0f32; 16], vec![5.0f32; 16]);
    let mut parts = vec![
        SharedAPart {
            n: 4,
            b: good.as_ref(),
            c: &mut c1,
            ldc: 4,
            opts: GemmOptions::default(),
        },
        SharedAPart {
            n: 4,
            b: bad.as_ref(),
            c: &mut c2,
            ldc: 4,
            opts: GemmOptions::default(),
        },
    ];
    let e = gemm_shared_a(4, 8, &a, 8, &mut parts).unwrap_err();
    assert!(e.message().contains("packed b"), "{e}");
    assert!(c1.iter().chain(&c2).all(|&x| x == 5.0));
}

/// `0.5·x·(1 + erf(x/√2))` in f64.
fn gelu_f64(x: f64) -> f64 {
    0.5 * x * (1.0 + crate::jit::erf_f64(x / std::f64::consts::SQRT_2))
}

#[test]
fn gelu_matches_f64_at_every_level() {
    // A sweep over [-12, 12] (both tails saturate), tiny values, and odd
    // lengths (vector bodies and tails).
    let mut xs: Vec<f32> = (0..=48_001)
        .map(|i| -12.0 + 24.0 * i as f32 / 48_001.0)
        .collect();
    xs.extend([0.0, -0.0, 1e-30, -1e-30, 1e-7, 3.0e38, f32::INFINITY]);
    for isa in supported_levels() {
        let mut y = xs.clone();
        act::gelu(isa, &mut y);
        for (&x, &g) in xs.iter().zip(&y) {
            let want = gelu_f64(x as f64);
            // erf within 2e-7 absolute, times 0.5·|x|, plus f32 rounding.
            let tol = 1.2e-7 * (x as f64).abs() + 2.4e-7 * want.abs() + 1e-37;
            assert!(
                (g as f64 - want).abs() <= tol || (g.is_infinite() && want.is_infinite()),
                "{isa}: gelu({x}) = {g}, want {want}"
            );
        }
        let mut nan = [f32::NAN; 3];
        act::gelu(isa, &mut nan);
        assert!(nan.iter().all(|v| v.is_nan()), "{isa}: NaN must stay NaN");
    }
}

#[test]
fn gemm_gelu_epilogue_equals_gelu_after_the_product() {
    // Row and column tails, a depth over one block, 1 and 3 threads: the
    // fused epilogue gives the bits of the product followed by `act::gelu`.
    for isa in supported_levels() {
        for &(m, n, k) in &[(7, 37, 5), (29, 64, 300), (128, 1024 / 8, 64)] {
            let a = values(m * k, 11);
            let b = values(k * n, 12);
            let bias = values(n, 13);
            let packed = pack_b(k, n, &b, n).unwrap();
            let plain = {
                let mut c = vec![0f32; m * n];
                let opts = GemmOptions {
                    isa: Some(isa),
                    bias: Some(&bias),
                    ..Default::default()
                };
                gemm(m, n, k, &a, k, packed.as_ref(), &mut c, n, &opts).unwrap();
                act::gelu(isa, &mut c);
                c
            };
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut c = vec![f32::NAN; m * n];
                let opts = GemmOptions {
                    isa: Some(isa),
                    bias: Some(&bias),
                    gelu: true,
                    threads,
                    ..Default::default()
                };
                pool.install(|| gemm(m, n, k, &a, k, packed.as_ref(), &mut c, n, &opts))
                    .unwrap();
                for (i, (x, y)) in c.iter().zip(&plain).enumerate() {
                    assert_eq!(
                        x.to_bits(),
                        y.to_bits(),
                        "{isa} {m}x{n}x{k} threads {threads}: c[{i}]"
                    );
                }
            }
        }
    }
}

/// NaN and ±inf through the GEMM epilogues on every level: relu and clip
/// keep a NaN (as the interpreter's `fmax_nan`/`fmin_nan` do) and clamp the
/// infinities, in full register tiles and in tiles cut by n or m alike.
#[test]
fn gemm_epilogues_keep_nan_and_clamp_infinities() {
    let (m, n, k) = (20, 40, 8);
    let mut a = values(m * k, 11);
    a[3 * k + 2] = f32::NAN;
    a[5 * k + 4] = f32::INFINITY;
    a[7 * k + 1] = f32::NEG_INFINITY;
    let b = values(k * n, 12);
    let bias = values(n, 13);
    let packed = pack_b(k, n, &b, n).unwrap();
    let keep_max = |x: f64, lo: f64| if x.is_nan() || x >= lo { x } else { lo };
    let keep_min = |x: f64, hi: f64| if x.is_nan() || x <= hi { x } else { hi };
    for isa in supported_levels() {
        for (relu, clip) in [(true, None), (false, Some([-0.5f32, 0.5])), (true, Some([0.0, 6.0]))] {
            let mut c = vec![0.0f32; m * n];
            let opts = GemmOptions {
                isa: Some(isa),
                bias: Some(&bias),
                relu,
                clip,
                ..Default::default()
            };
            gemm(m, n, k, &a, k, packed.as_ref(), &mut c, n, &opts).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let mut v = bias[j] as f64;
                    for p in 0..k {
                        v += a[i * k + p] as f64 * b[p * n + j] as f64;
                    }
                    if relu {
                        v = keep_max(v, 0.0);
                    }
                    if let Some([lo, hi]) = clip {
                        v = keep_min(keep_max(v, lo as f64), hi as f64);
                    }
                    let got = c[i * n + j];
                    let what = format!("{isa} relu={relu} clip={clip:?} at ({i}, {j}): got {got}, want {v}");
                    if v.is_nan() {
                        assert!(got.is_nan(), "{what}");
                    } else if v.is_infinite() {
                        assert_eq!(got as f64, v, "{what}");
                    } else {
                        assert!((got as f64 - v).abs() <= 1e-4, "{what}");
                    }
                }
            }
        }
    }
}

/// The per-element epilogue (depthwise, grouped and transposed convolutions,
/// tiles cut by n) keeps NaN too.
#[test]
fn post_keeps_nan() {
    let relu6 = super::act::Post { relu: true, clip: Some([0.0, 6.0]) };
    assert!(relu6.apply(f32::NAN).is_nan());
    assert_eq!(relu6.apply(f32::INFINITY), 6.0);
    assert_eq!(relu6.apply(f32::NEG_INFINITY), 0.0);
    let relu = super::act::Post { relu: true, clip: None };
    assert!(relu.apply(f32::NAN).is_nan());
    assert_eq!(relu.apply(-1.0), 0.0);
    assert_eq!(relu.apply(f32::INFINITY), f32::INFINITY);
}

#[test]
fn block_width_is_the_largest_power_of_two_within_64() {
    let want = [(1, 1), (2, 2), (3, 2), (4, 4), (7, 4), (16, 16), (31, 16), (63, 32), (64, 64), (65, 64), (1000, 64)];
    for (rest, w) in want {
        assert_eq!(super::block_width(rest), w, "{rest}");
    }
}
