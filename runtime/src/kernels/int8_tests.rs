//! Tests of the int8 GEMM (every level this CPU supports against an exact
//! i64 reference, over shapes that cut every tile and block size, zero
//! points 0/37/128/255, extreme values, padded strides), its packed layout,
//! the requantization epilogue, and the bf16 GEMM (against an f64
//! reference of the same bf16 inputs within the worst-case f32 summation
//! bound, and within 1e-2 of the unrounded f32 product), each under rayon
//! pools of 1 and 3 threads. The AMX kernel also runs everywhere on a
//! software model of the tiles (`emulated_amx`), which checks its tile
//! shapes, strides and packing on CPUs without AMX. Levels the CPU lacks
//! (AVX-512, AMX on the build machine) are printed as skipped and must be
//! refused; run with `--nocapture` to see which levels ran.

use super::amx::{amx_available, amx_unavailable_reason, gemm_bf16_amx, gemm_u8s8_amx};
use super::bf16::run_level as run_level_bf16;
use super::bf16::{
    Bf16Level, PackedBf16Ref, bf16_to_f32, f32_to_bf16, gemm_bf16, gemm_bf16_level, pack_b_bf16,
    packed_bf16_len,
};
use super::int8::run_level as run_level_s8;
use super::int8::{
    Int8Level, PackedS8Ref, QuantOut, RequantScale, gemm_u8s8, gemm_u8s8_level, pack_b_s8,
    packed_s8_len, requantize_i32,
};

/// Deterministic 64-bit values (xorshift), so failures reproduce.
fn bits(len: usize, seed: u64) -> Vec<u64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

fn bytes_u8(len: usize, seed: u64) -> Vec<u8> {
    bits(len, seed)
        .into_iter()
        .map(|x| (x >> 32) as u8)
        .collect()
}

fn bytes_i8(len: usize, seed: u64) -> Vec<i8> {
    bits(len, seed)
        .into_iter()
        .map(|x| (x >> 40) as i8)
        .collect()
}

/// Runs `f` inside rayon pools of 1 and 3 threads.
fn in_pools(f: impl Fn(usize) + Sync) {
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| f(threads));
    }
}

fn int8_levels() -> Vec<Int8Level> {
    let (run, skip): (Vec<_>, Vec<_>) = Int8Level::ALL.into_iter().partition(|l| l.is_supported());
    println!("int8 levels run: {run:?}; skipped (cpu lacks them): {skip:?}");
    run
}

fn bf16_levels() -> Vec<Bf16Level> {
    let (run, skip): (Vec<_>, Vec<_>) = Bf16Level::ALL.into_iter().partition(|l| l.is_supported());
    println!("bf16 levels run: {run:?}; skipped (cpu lacks them): {skip:?}");
    run
}

/// Exact `Σ_k (a − zp)·b` in i64.
fn reference_s8(m: usize, n: usize, k: usize, a: &[u8], lda: usize, zp: i32, b: &[i8]) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = i64::from(a[i * lda + p]) - i64::from(zp);
            for j in 0..n {
                c[i * n + j] += av * i64::from(b[p * n + j]);
            }
        }
    }
    c
}

/// Sentinel in C's padding columns: must survive every call.
const PAD: i32 = 0x5A5A_5A5A;

/// One int8 product on every level and pool, and on the AMX kernel over
/// emulated tiles; C must equal the reference (wrapped to i32) bit for bit
/// and its padding must be untouched.
#[allow(clippy::too_many_arguments)]
fn check_s8(m: usize, n: usize, k: usize, a: &[u8], lda: usize, zp: i32, b: &[i8], ldc: usize) {
    let want = reference_s8(m, n, k, a, lda, zp, b);
    let packed = pack_b_s8(k, n, b, n).unwrap();
    let verify = |name: &str, threads: usize, c: &[i32]| {
        for i in 0..m {
            for j in 0..ldc {
                let got = c[i * ldc + j];
                let exp = if j < n { want[i * n + j] as i32 } else { PAD };
                assert_eq!(
                    got, exp,
                    "{name} threads={threads} m={m} n={n} k={k} zp={zp} at ({i},{j})"
                );
            }
        }
    };
    in_pools(|threads| {
        for level in int8_levels() {
            let mut c = vec![PAD; m.max(1) * ldc];
            gemm_u8s8_level(level, m, n, k, a, lda, zp, packed.as_ref(), &mut c, ldc).unwrap();
            verify(level.name(), threads, &c);
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut c = vec![PAD; m.max(1) * ldc];
            let lv = emulated_amx::int8();
            // SAFETY: the emulated level runs no CPU-specific instruction.
            unsafe { run_level_s8(&lv, m, n, k, a, lda, zp, packed.as_ref(), &mut c, ldc) }
                .unwrap();
            verify("emulated amx", threads, &c);
        }
    });
}

#[test]
fn int8_gemm_matches_exact_reference_on_edge_shapes() {
    // Shapes cut every register tile (4/6/14 rows, 16/32 columns, 32×32
    // AMX blocks), k groups of 4, depth blocks (512, AMX 1024), row blocks
    // (128..168) and the 4096-column block.
    let shapes = [
        (1, 1, 1),
        (1, 1, 5),
        (2, 3, 4),
        (3, 17, 7),
        (4, 16, 3),
        (6, 16, 8),
        (14, 32, 64),
        (13, 31, 63),
        (15, 33, 65),
        (28, 64, 2),
        (32, 32, 64),
        (33, 17, 129),
        (29, 47, 200),
        (7, 48, 513),
        (64, 64, 1024),
        (65, 40, 1030),
        (37, 20, 2100),
        (130, 50, 77),
        (200, 33, 40),
        (3, 4100, 9),
    ];
    for (s, &(m, n, k)) in shapes.iter().enumerate() {
        let a = bytes_u8(m * k, 1 + s as u64);
        let b = bytes_i8(k * n, 100 + s as u64);
        for zp in [0, 128] {
            check_s8(m, n, k, &a, k, zp, &b, n);
        }
    }
}

#[test]
fn int8_gemm_handles_padded_strides_and_odd_zero_points() {
    for (s, &(m, n, k)) in [(5, 19, 11), (31, 33, 70), (17, 64, 5)].iter().enumerate() {
        let lda = k + 3;
        let a = bytes_u8(m * lda, 7 + s as u64);
        let b = bytes_i8(k * n, 70 + s as u64);
        for zp in [37, 255] {
            check_s8(m, n, k, &a, lda, zp, &b, n + 5);
        }
    }
}

#[test]
fn int8_gemm_is_exact_at_extreme_values() {
    // 255·(−128) + 255·(−128) overflows the i16 pair sums of vpmaddubsw;
    // every level must still be exact.
    let (m, n, k) = (3, 20, 1000);
    for (av, bv, zp) in [
        (255u8, -128i8, 0),
        (0, -128, 255),
        (255, 127, 0),
        (0, 127, 128),
    ] {
        let a = vec![av; m * k];
        let b = vec![bv; k * n];
        let want = (i64::from(av) - i64::from(zp)) * i64::from(bv) * k as i64;
        assert_eq!(reference_s8(m, n, k, &a, k, zp, &b)[0], want);
        check_s8(m, n, k, &a, k, zp, &b, n);
    }
    // Alternating extremes along k and across columns.
    let a: Vec<u8> = (0..m * k)
        .map(|i| if i % 3 == 0 { 0 } else { 255 })
        .collect();
    let b: Vec<i8> = (0..k * n)
        .map(|i| if i % 5 < 2 { 127 } else { -128 })
        .collect();
    check_s8(m, n, k, &a, k, 0, &b, n);
    check_s8(m, n, k, &a, k, 128, &b, n);
}

#[test]
fn int8_gemm_is_exact_up_to_the_i32_limit_and_wraps_beyond() {
    // k = 65 793: 255·(−128)·k = −2 147 450 880 still fits in i32.
    let (m, n) = (2, 3);
    for k in [65_793, 70_000] {
        let a = vec![255u8; m * k];
        let b = vec![-128i8; k * n];
        let exact = -255i64 * 128 * k as i64;
        assert_eq!(exact as i32 as i64 == exact, k == 65_793);
        let packed = pack_b_s8(k, n, &b, n).unwrap();
        for level in int8_levels() {
            let mut c = vec![0i32; m * n];
            gemm_u8s8_level(level, m, n, k, &a, k, 0, packed.as_ref(), &mut c, n).unwrap();
            assert!(c.iter().all(|&x| x == exact as i32), "{level} k={k}: {c:?}");
        }
    }
}

#[test]
fn int8_gemm_best_level_and_amx_entry() {
    let (m, n, k) = (40, 36, 150);
    let a = bytes_u8(m * k, 3);
    let b = bytes_i8(k * n, 4);
    let want: Vec<i32> = reference_s8(m, n, k, &a, k, 128, &b)
        .into_iter()
        .map(|x| x as i32)
        .collect();
    let packed = pack_b_s8(k, n, &b, n).unwrap();
    let mut c = vec![0i32; m * n];
    gemm_u8s8(m, n, k, &a, k, 128, packed.as_ref(), &mut c, n).unwrap();
    assert_eq!(c, want, "best level {}", Int8Level::best());
    let amx = gemm_u8s8_amx(m, n, k, &a, k, 128, packed.as_ref(), &mut c, n);
    println!(
        "amx available: {} ({})",
        amx_available(),
        amx_unavailable_reason().unwrap_or_default()
    );
    assert_eq!(amx_available(), amx_unavailable_reason().is_none());
    if Int8Level::Amx.is_supported() {
        amx.unwrap();
        assert_eq!(c, want);
    } else {
        assert_eq!(
            amx.unwrap_err().message(),
            "int8 level amx is not supported by this cpu"
        );
    }
}

#[test]
fn int8_gemm_with_empty_depth_writes_zeros() {
    let packed = pack_b_s8(0, 5, &[], 5).unwrap();
    assert_eq!(packed.data().len(), 0);
    for level in int8_levels() {
        let mut c = vec![7i32; 2 * 6];
        gemm_u8s8_level(level, 2, 5, 0, &[], 0, 9, packed.as_ref(), &mut c, 6).unwrap();
        assert_eq!(c, [0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 7]);
    }
}

#[test]
fn int8_pack_layout_groups_four_k_per_column() {
    // B[r][j] = 10r − j, k = 5 (2 groups, padded to 16 rows), n = 17.
    let (k, n) = (5, 17);
    let b: Vec<i8> = (0..k * n)
        .map(|i| (10 * (i / n) as i32 - (i % n) as i32) as i8)
        .collect();
    let p = pack_b_s8(k, n, &b, n).unwrap();
    let d = p.data();
    assert_eq!(d.len(), 2 * 16 * 64);
    assert_eq!(packed_s8_len(k, n).unwrap(), 2048);
    assert_eq!(&d[0..8], &[0, 10, 20, 30, -1, 9, 19, 29]); // B[0..4][0], B[0..4][1]
    assert_eq!(&d[64..68], &[40, 0, 0, 0]); // B[4][0], then k padding
    assert_eq!(d[64 + 4 * 15], 25); // B[4][15]
    assert!(d[128..1024].iter().all(|&x| x == 0)); // rows 2..16 of panel 0
    assert_eq!(&d[1024..1028], &[-16, -6, 4, 14]); // B[0..4][16]
    assert_eq!(&d[1028..1032], &[0, 0, 0, 0]); // column 17 does not exist
    assert_eq!(d[1024 + 64], 24); // B[4][16]
    // Σ_r (10r − j) = 100 − 5j.
    assert_eq!(p.col_sums()[0], 100);
    assert_eq!(p.col_sums()[16], 20);
    // A row stride (ldb = 3) longer than n: the 9s are skipped.
    let strided = pack_b_s8(2, 2, &[1, 2, 9, 3, 4, 9], 3).unwrap();
    assert_eq!(&strided.data()[0..8], &[1, 3, 0, 0, 2, 4, 0, 0]);
    assert_eq!(strided.col_sums(), [4, 6]);
}

#[test]
fn int8_rejects_bad_arguments() {
    let b = pack_b_s8(3, 2, &[1, 2, 3, 4, 5, 6], 2).unwrap();
    let a = [1u8; 6];
    let mut c = [0i32; 4];
    let err = |r: Result<(), super::KernelError>| r.unwrap_err().message().to_string();
    assert_eq!(
        err(gemm_u8s8(2, 2, 3, &a[..5], 3, 0, b.as_ref(), &mut c, 2)),
        "a of 2x3 with leading dimension 3 needs 6 elements, found 5"
    );
    assert_eq!(
        err(gemm_u8s8(2, 2, 3, &a, 2, 0, b.as_ref(), &mut c, 2)),
        "leading dimension of a must be at least 3, found 2"
    );
    assert_eq!(
        err(gemm_u8s8(2, 2, 3, &a, 3, 256, b.as_ref(), &mut c, 2)),
        "zero point of a must be in 0..=255, found 256"
    );
    assert_eq!(
        err(gemm_u8s8(2, 2, 3, &a, 3, 0, b.as_ref(), &mut c[..3], 2)),
        "c of 2x2 with leading dimension 2 needs 4 elements, found 3"
    );
    assert_eq!(
        err(gemm_u8s8(2, 3, 3, &a, 3, 0, b.as_ref(), &mut c, 3)),
        "packed b must be 3x3, found 3x2"
    );
    assert_eq!(
        err(pack_b_s8(3, 2, &[1, 2, 3], 2).map(|_| ())),
        "b of 3x2 with leading dimension 2 needs 6 elements, found 3"
    );
    assert_eq!(
        err(PackedS8Ref::new(3, 2, &[0; 10], &[0, 0]).map(|_| ())),
        "packed b of 3x2 must hold 1024 bytes, found 10"
    );
    assert_eq!(
        err(PackedS8Ref::new(3, 2, b.data(), &[0]).map(|_| ())),
        "column sums of packed b must have 2 elements, found 1"
    );
    let mut refused = 0;
    for level in Int8Level::ALL.into_iter().filter(|l| !l.is_supported()) {
        assert_eq!(
            err(gemm_u8s8_level(
                level,
                2,
                2,
                3,
                &a,
                3,
                0,
                b.as_ref(),
                &mut c,
                2
            )),
            format!("int8 level {level} is not supported by this cpu")
        );
        refused += 1;
    }
    println!("int8 levels refused as unsupported: {refused}");
}

#[test]
fn int8_requantize_rounds_half_to_even_and_saturates() {
    let acc = [3, 5, -3, -5, 1000, -1000, 0, 7];
    let mut u = [0u8; 8];
    let s = RequantScale::PerTensor(0.5);
    requantize_i32(1, 8, &acc, 8, None, s, 10, QuantOut::U8(&mut u), 8).unwrap();
    assert_eq!(u, [12, 12, 8, 8, 255, 0, 10, 14]);
    let mut q = [0i8; 8];
    requantize_i32(1, 8, &acc, 8, None, s, -3, QuantOut::I8(&mut q), 8).unwrap();
    assert_eq!(q, [-1, -1, -5, -5, 127, -128, -3, 1]);
    // Extremes of i32 saturate; a NaN scale gives the minimum.
    let big = [i32::MAX, i32::MIN];
    requantize_i32(
        1,
        2,
        &big,
        2,
        None,
        RequantScale::PerTensor(1.0),
        0,
        QuantOut::U8(&mut u),
        2,
    )
    .unwrap();
    assert_eq!(&u[..2], &[255, 0]);
    let nan = RequantScale::PerTensor(f32::NAN);
    requantize_i32(1, 2, &big, 2, None, nan, 5, QuantOut::I8(&mut q), 2).unwrap();
    assert_eq!(&q[..2], &[-128, -128]);
}

#[test]
fn int8_requantize_per_column_with_bias_and_strides() {
    // Row 0: (11, 22, 33)·(0.1, 0.25, 1) = (1.1, 5.5, 33) → (1, 6, 33);
    // row 1: (−9, −18, −27)·… = (−0.9, −4.5, −27) → (−1, −4, −27).
    let acc = [10, 20, 30, 99, -10, -20, -30, 99];
    let scales = [0.1, 0.25, 1.0];
    let mut out = [55i8; 8];
    requantize_i32(
        2,
        3,
        &acc,
        4,
        Some(&[1, 2, 3]),
        RequantScale::PerColumn(&scales),
        0,
        QuantOut::I8(&mut out),
        4,
    )
    .unwrap();
    assert_eq!(out, [1, 6, 33, 55, -1, -4, -27, 55]);
    let err = |r: Result<(), super::KernelError>| r.unwrap_err().message().to_string();
    let mut u = [0u8; 3];
    let one = RequantScale::PerTensor(1.0);
    assert_eq!(
        err(requantize_i32(
            1,
            3,
            &acc,
            3,
            Some(&[1]),
            one,
            0,
            QuantOut::U8(&mut u),
            3
        )),
        "bias must have 3 elements, found 1"
    );
    assert_eq!(
        err(requantize_i32(
            1,
            3,
            &acc,
            3,
            None,
            RequantScale::PerColumn(&scales[..2]),
            0,
            QuantOut::U8(&mut u),
            3
        )),
        "per-column scale must have 3 elements, found 2"
    );
    assert_eq!(
        err(requantize_i32(
            1,
            3,
            &acc,
            3,
            None,
            one,
            256,
            QuantOut::U8(&mut u),
            3
        )),
        "output zero point must be in 0..=255, found 256"
    );
    assert_eq!(
        err(requantize_i32(
            1,
            3,
            &acc,
            3,
            None,
            one,
            -129,
            QuantOut::I8(&mut out),
            3
        )),
        "output zero point must be in -128..=127, found -129"
    );
    assert_eq!(
        err(requantize_i32(
            2,
            3,
            &acc,
            3,
            None,
            one,
            0,
            QuantOut::U8(&mut u),
            3
        )),
        "output of 2x3 with leading dimension 3 needs 6 elements, found 3"
    );
}

#[test]
fn int8_bf16_conversions_round_to_nearest_even() {
    assert_eq!(f32_to_bf16(1.0), 0x3F80);
    assert_eq!(f32_to_bf16(-2.0), 0xC000);
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8000)), 0x3F80); // tie, even below
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F81_8000)), 0x3F82); // tie, even above
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
    assert_eq!(f32_to_bf16(f32::MAX), 0x7F80); // rounds to +inf
    assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    assert_eq!(bf16_to_f32(0x3F80), 1.0);
    assert_eq!(bf16_to_f32(0xC0A0), -5.0);
}

#[test]
fn int8_bf16_pack_layout_pairs_k_per_column() {
    let (k, n) = (3, 17);
    let b: Vec<u16> = (0..(k * n) as u16).map(|i| i + 1).collect();
    let p = pack_b_bf16(k, n, &b, n).unwrap();
    let d = p.data();
    assert_eq!(d.len(), 2 * 16 * 32);
    assert_eq!(packed_bf16_len(k, n).unwrap(), 1024);
    assert_eq!(&d[0..4], &[1, 18, 2, 19]); // B[0..2][0], B[0..2][1]
    assert_eq!(&d[32..34], &[35, 0]); // B[2][0], then k padding
    assert_eq!(&d[512..516], &[17, 34, 0, 0]); // B[0..2][16], column 17 absent
    assert!(d[64..512].iter().all(|&x| x == 0));
}

/// One bf16 product on every level and pool, against (1) the f64 product
/// of the same bf16 inputs within the worst-case bound of any f32
/// summation order, `2·k·2⁻²⁴·Σ|a·b|`, and (2) the f64 product of the
/// unrounded f32 inputs within `1e-2·Σ|a·b|`.
fn check_bf16(m: usize, n: usize, k: usize, lda: usize, seed: u64) {
    let to_f = |x: u64| ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    let af: Vec<f32> = bits(m * lda, seed).into_iter().map(to_f).collect();
    let bf: Vec<f32> = bits(k * n, seed + 1).into_iter().map(to_f).collect();
    let a: Vec<u16> = af.iter().map(|&x| f32_to_bf16(x)).collect();
    let b: Vec<u16> = bf.iter().map(|&x| f32_to_bf16(x)).collect();
    let packed = pack_b_bf16(k, n, &b, n).unwrap();
    let mut exact = vec![0f64; m * n];
    let mut orig = vec![0f64; m * n];
    let mut mag = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let (ar, ao) = (bf16_to_f32(a[i * lda + p]) as f64, af[i * lda + p] as f64);
            for j in 0..n {
                let (br, bo) = (bf16_to_f32(b[p * n + j]) as f64, bf[p * n + j] as f64);
                exact[i * n + j] += ar * br;
                orig[i * n + j] += ao * bo;
                mag[i * n + j] += (ar * br).abs();
            }
        }
    }
    let gamma = 2.0 * k as f64 * (2.0f64).powi(-24);
    let ldc = n + 2;
    let verify = |name: &str, threads: usize, c: &[f32]| {
        for i in 0..m {
            for j in 0..ldc {
                let got = c[i * ldc + j];
                let at = || format!("{name} threads={threads} m={m} n={n} k={k} at ({i},{j})");
                if j >= n {
                    assert_eq!(got, -7.0, "{}: padding overwritten", at());
                    continue;
                }
                let e = i * n + j;
                let err = (got as f64 - exact[e]).abs();
                assert!(
                    err <= gamma * mag[e] + 1e-30,
                    "{}: {got} vs {}",
                    at(),
                    exact[e]
                );
                let err = (got as f64 - orig[e]).abs();
                let tol = 1e-2 * mag[e] + 1e-30;
                assert!(err <= tol, "{}: {got} vs f32 {}", at(), orig[e]);
            }
        }
    };
    in_pools(|threads| {
        for level in bf16_levels() {
            let mut c = vec![-7.0f32; m * ldc];
            gemm_bf16_level(level, m, n, k, &a, lda, packed.as_ref(), &mut c, ldc).unwrap();
            verify(level.name(), threads, &c);
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut c = vec![-7.0f32; m * ldc];
            let lv = emulated_amx::bf16();
            // SAFETY: the emulated level runs no CPU-specific instruction.
            unsafe { run_level_bf16(&lv, m, n, k, &a, lda, packed.as_ref(), &mut c, ldc) }.unwrap();
            verify("emulated amx", threads, &c);
        }
    });
}

#[test]
fn int8_bf16_gemm_matches_reference_on_edge_shapes() {
    let shapes = [
        (1, 1, 1),
        (2, 3, 2),
        (3, 17, 7),
        (4, 16, 31),
        (14, 32, 32),
        (15, 33, 33),
        (33, 17, 65),
        (32, 32, 256),
        (29, 47, 257),
        (64, 48, 513),
        (130, 20, 40),
        (5, 40, 1100),
    ];
    for (s, &(m, n, k)) in shapes.iter().enumerate() {
        check_bf16(m, n, k, k, 10 + s as u64);
    }
    check_bf16(9, 21, 19, 24, 99);
}

#[test]
fn int8_bf16_best_level_amx_entry_and_errors() {
    let (m, n, k) = (3, 2, 4);
    let a: Vec<u16> = [
        1.0f32, 2.0, -1.0, 0.5, 0.0, 1.0, 1.0, 1.0, 3.0, -2.0, 0.25, 4.0,
    ]
    .iter()
    .map(|&x| f32_to_bf16(x))
    .collect();
    let b: Vec<u16> = [1.0f32, -1.0, 2.0, 0.5, -3.0, 1.0, 0.5, 2.0]
        .iter()
        .map(|&x| f32_to_bf16(x))
        .collect();
    let packed = pack_b_bf16(k, n, &b, n).unwrap();
    // Row 0: 1·1 + 2·2 − 1·(−3) + 0.5·0.5 = 8.25; 1·(−1) + 2·0.5 − 1·1 + 0.5·2 = 0.
    // Row 1: 0 + 2 − 3 + 0.5 = −0.5; 0 + 0.5 + 1 + 2 = 3.5.
    // Row 2: 3 − 4 − 0.75 + 2 = 0.25; −3 − 1 + 0.25 + 8 = 4.25.
    let want = [8.25, 0.0, -0.5, 3.5, 0.25, 4.25];
    let mut c = [0f32; 6];
    gemm_bf16(m, n, k, &a, k, packed.as_ref(), &mut c, n).unwrap();
    assert_eq!(c, want, "best level {}", Bf16Level::best());
    let amx = gemm_bf16_amx(m, n, k, &a, k, packed.as_ref(), &mut c, n);
    if Bf16Level::Amx.is_supported() {
        amx.unwrap();
        assert_eq!(c, want);
    } else {
        assert_eq!(
            amx.unwrap_err().message(),
            "bf16 level amx is not supported by this cpu"
        );
    }
    let err = |r: Result<(), super::KernelError>| r.unwrap_err().message().to_string();
    assert_eq!(
        err(gemm_bf16(m, n, k, &a[..11], k, packed.as_ref(), &mut c, n)),
        "a of 3x4 with leading dimension 4 needs 12 elements, found 11"
    );
    assert_eq!(
        err(PackedBf16Ref::new(k, n, &[0; 3]).map(|_| ())),
        "packed b of 4x2 must hold 512 bf16 values, found 3"
    );
    assert_eq!(
        err(gemm_bf16(m, n, 5, &a, 5, packed.as_ref(), &mut c, n)),
        "packed b must be 5x2, found 4x2"
    );
}

/// The AMX kernel (`amx::tile_with`, with the AMX level's packing and
/// blocking) over a software model of the tiles that follows Intel's
/// pseudocode for `tileloadd`, `tilestored`, `tdpbusd` and `tdpbf16ps`
/// under the kernel's configuration (every tile 16 rows × 64 bytes). It
/// checks everything but the instruction encodings on CPUs without AMX.
#[cfg(target_arch = "x86_64")]
mod emulated_amx {
    use super::super::amx::{TileOps, bf16_level, int8_level, tile_with};
    use super::super::bf16::bf16_to_f32;
    use super::super::grouped::{Level, Tile};

    /// Eight tiles of 16 rows × 64 bytes.
    struct Tiles([[[u8; 64]; 16]; 8]);

    impl TileOps for Tiles {
        unsafe fn load<const T: usize>(&mut self, base: *const u8, stride: usize) {
            for (r, row) in self.0[T].iter_mut().enumerate() {
                // SAFETY: the kernel's contract (16 rows of 64 bytes).
                unsafe {
                    std::ptr::copy_nonoverlapping(base.add(r * stride), row.as_mut_ptr(), 64)
                };
            }
        }
        unsafe fn store<const T: usize>(&mut self, base: *mut u8, stride: usize) {
            for (r, row) in self.0[T].iter().enumerate() {
                // SAFETY: as for `load`.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), base.add(r * stride), 64) };
            }
        }
        unsafe fn zero<const T: usize>(&mut self) {
            self.0[T] = [[0; 64]; 16];
        }
        unsafe fn dot<const BF16: bool, const C: usize, const A: usize, const B: usize>(&mut self) {
            assert!(C != A && C != B && A != B, "tiles must differ");
            let (a, b) = (self.0[A], self.0[B]);
            let c = &mut self.0[C];
            let word = |x: &[u8]| [x[0], x[1], x[2], x[3]];
            let half =
                |x: &[u8], i: usize| bf16_to_f32(u16::from_le_bytes([x[2 * i], x[2 * i + 1]]));
            // for m < C.rows, k < A.colsb/4, n < C.colsb/4:
            //   C[m].dword[n] += dot(A[m].dword[k], B[k].dword[n])
            for m in 0..16 {
                for k in 0..16 {
                    let ad = &a[m][4 * k..4 * k + 4];
                    for n in 0..16 {
                        let bd = &b[k][4 * n..4 * n + 4];
                        let cd = &mut c[m][4 * n..4 * n + 4];
                        if BF16 {
                            let mut v = f32::from_le_bytes(word(cd));
                            v += half(ad, 0) * half(bd, 0);
                            v += half(ad, 1) * half(bd, 1);
                            cd.copy_from_slice(&v.to_le_bytes());
                        } else {
                            let dot: i32 = (0..4)
                                .map(|i| i32::from(ad[i]) * i32::from(bd[i] as i8))
                                .sum();
                            let v = i32::from_le_bytes(word(cd)).wrapping_add(dot);
                            cd.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
        }
    }

    /// # Safety
    /// As for `amx::tile_with`.
    unsafe fn tile<const BF16: bool, const NP: usize>(t: &Tile) {
        let mut tiles = Tiles([[[0; 64]; 16]; 8]);
        // SAFETY: forwarded from the caller.
        unsafe { tile_with::<Tiles, BF16, NP>(&mut tiles, t) }
    }

    /// The AMX int8 level with emulated tiles (no tile configuration).
    pub(super) fn int8() -> Level<u8> {
        Level {
            tiles: &[tile::<false, 1>, tile::<false, 2>],
            begin: None,
            end: None,
            ..int8_level()
        }
    }

    /// The AMX bf16 level with emulated tiles.
    pub(super) fn bf16() -> Level<u16> {
        Level {
            tiles: &[tile::<true, 1>, tile::<true, 2>],
            begin: None,
            end: None,
            ..bf16_level()
        }
    }
}
