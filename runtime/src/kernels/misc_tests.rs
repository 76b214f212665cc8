//! Tests of the data-movement, normalization and batched-matmul kernels
//! (`copy.rs`, `norm.rs`, `batched.rs`) against naive loops written here,
//! with hand-checked values, odd sizes, negative and broadcast strides,
//! rayon pools of 1 and 3 threads, and the rejection of bad arguments.

use super::Isa;
use super::batched::batched_matmul;
use super::copy::{fill, gather, strided_copy, strided_copy_with};
use super::norm::{exp_f32, exp_slice, exp_with, layer_norm, softmax};

/// Deterministic values in [-1, 1) (xorshift), so failures reproduce.
pub(super) fn values(len: usize, seed: u64) -> Vec<f32> {
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

/// Runs `f` inside rayon pools of 1 and 3 threads.
pub(super) fn in_pools(f: impl Fn() + Sync) {
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("test thread pool");
        pool.install(&f);
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The copy of `Step::Copy`, one element at a time in row-major order.
fn naive_copy(
    es: usize,
    shape: &[u64],
    src: &[u8],
    start: u64,
    ss: &[i64],
    dst: &mut [u8],
    ds: &[u64],
) {
    let total: u64 = shape.iter().product();
    for flat in 0..total {
        let (mut rem, mut s, mut d) = (flat, start as i64, 0u64);
        for ax in (0..shape.len()).rev() {
            let i = rem % shape[ax];
            rem /= shape[ax];
            s += i as i64 * ss[ax];
            d += i * ds[ax];
        }
        let (s, d) = (s as usize * es, d as usize * es);
        dst[d..d + es].copy_from_slice(&src[s..s + es]);
    }
}

/// Runs one copy through the kernel (default threshold and forced split,
/// pools of 1 and 3) and compares every byte of `dst` with the naive loop.
fn check_copy(
    es: usize,
    shape: &[u64],
    src_len: usize,
    start: u64,
    ss: &[i64],
    ds: &[u64],
    dst_len: usize,
) {
    let src: Vec<u8> = (0..src_len * es).map(|i| (i * 7 + 3) as u8).collect();
    let mut want = vec![0xAB; dst_len * es];
    naive_copy(es, shape, &src, start, ss, &mut want, ds);
    in_pools(|| {
        for par_min in [usize::MAX, 0] {
            let mut got = vec![0xAB; dst_len * es];
            strided_copy_with(es, shape, &src, start, ss, &mut got, ds, par_min)
                .expect("valid copy");
            assert_eq!(got, want, "es {es} shape {shape:?} ss {ss:?} ds {ds:?}");
        }
    });
}

/// Row-major strides of `shape`.
fn dense(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

#[test]
fn copy_nchw_to_nhwc_and_back() {
    // x is NCHW 2x3x5x7 holding its own flat index; y = NHWC.
    let x: Vec<f32> = (0..210).map(|i| i as f32).collect();
    let shape = [2u64, 5, 7, 3]; // in y's (NHWC) order
    let src_strides = [105i64, 7, 1, 35];
    let dst_strides = [105u64, 21, 3, 1];
    in_pools(|| {
        let mut y = vec![0u8; 210 * 4];
        strided_copy(
            4,
            &shape,
            &f32_bytes(&x),
            0,
            &src_strides,
            &mut y,
            &dst_strides,
        )
        .unwrap();
        let y = bytes_f32(&y);
        // y[n,h,w,c] = x[n,c,h,w]: y[0,0,0,1] = x[0,1,0,0] = 35,
        // y[0,0,1,0] = x[0,0,0,1] = 1, y[1,4,6,2] = x[1,2,4,6] = 209.
        assert_eq!(&y[..4], &[0.0, 35.0, 70.0, 1.0]);
        assert_eq!(y[209], 209.0);
        assert_eq!(y[105 + 21 + 3 + 2], (105 + 70 + 7 + 1) as f32);
        // And back: NHWC -> NCHW restores x.
        let mut back = vec![0u8; 210 * 4];
        strided_copy(
            4,
            &[2, 3, 5, 7],
            &f32_bytes(&y),
            0,
            &[105, 1, 21, 3],
            &mut back,
            &[105, 35, 7, 1],
        )
        .unwrap();
        assert_eq!(bytes_f32(&back), x);
    });
    check_copy(4, &shape, 210, 0, &src_strides, &dst_strides, 210);
}

#[test]
fn copy_every_permutation_and_element_size() {
    let shape = [3u64, 5, 7];
    let perms = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let src_strides = dense(&shape);
    for es in [1, 2, 3, 4, 8, 12] {
        for p in perms {
            // Output axis j is input axis p[j].
            let out_shape: Vec<u64> = p.iter().map(|&a| shape[a]).collect();
            let ss: Vec<i64> = p.iter().map(|&a| src_strides[a] as i64).collect();
            check_copy(es, &out_shape, 105, 0, &ss, &dense(&out_shape), 105);
        }
    }
}

#[test]
fn copy_large_transposes_in_parallel() {
    // NCHW -> NHWC of 1x64x56x56 (800 KiB), and an attention head
    // transpose [b, s, h, d] -> [b, h, s, d] of 2x50x8x64.
    check_copy(
        4,
        &[1, 56, 56, 64],
        64 * 3136,
        0,
        &[0, 56, 1, 3136],
        &[0, 3584, 64, 1],
        64 * 3136,
    );
    check_copy(
        4,
        &[2, 8, 50, 64],
        51200,
        0,
        &[25600, 64, 512, 1],
        &dense(&[2, 8, 50, 64]),
        51200,
    );
    // Padded destination batches, fewer than the threads: the split
    // recurses into the next dimension.
    check_copy(
        4,
        &[2, 40, 30],
        2400,
        0,
        &[1200, 1, 40],
        &[1500, 30, 1],
        3000,
    );
    // A 2-D transpose whose source rows are padded (no merge possible).
    check_copy(
        4,
        &[300, 257],
        257 * 310,
        5,
        &[1, 310],
        &[257, 1],
        300 * 257,
    );
}

#[test]
fn copy_transposes_with_few_rows_or_columns() {
    // A 3-channel 40x50 NCHW image to NHWC (3 columns of 2000 rows), an
    // NHWC map of 5 classes back to NCHW (5 rows of 2000 columns), and a
    // reversed source of 7 columns: the column and row loops of the
    // transpose, against the naive copy.
    check_copy(4, &[40, 50, 3], 6000, 0, &[50, 1, 2000], &[150, 3, 1], 6000);
    check_copy(4, &[5, 40, 50], 10000, 0, &[1, 250, 5], &[2000, 50, 1], 10000);
    check_copy(4, &[300, 7], 2100, 2099, &[-1, -300], &[7, 1], 2100);
    check_copy(4, &[2, 9, 600], 10800, 0, &[5400, 1, 9], &[5400, 600, 1], 10800);
}

#[test]
fn copy_negative_strides_reverse() {
    // A 4x6 matrix reversed along both axes, then along the columns only.
    let src: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let mut dst = vec![0u8; 96];
    strided_copy(
        4,
        &[4, 6],
        &f32_bytes(&src),
        23,
        &[-6, -1],
        &mut dst,
        &[6, 1],
    )
    .unwrap();
    let got = bytes_f32(&dst);
    assert_eq!(got[0], 23.0);
    assert_eq!(got[5], 18.0);
    assert_eq!(got[23], 0.0);
    check_copy(4, &[4, 6], 24, 23, &[-6, -1], &[6, 1], 24);
    check_copy(4, &[4, 6], 24, 5, &[6, -1], &[6, 1], 24);
    check_copy(2, &[3, 5, 7], 105, 104, &[-35, -7, -1], &[1, 3, 15], 105);
    check_copy(4, &[200, 300], 60000, 299, &[300, -1], &[1, 200], 60000);
}

#[test]
fn copy_broadcast_slices_and_concat_pieces() {
    // Expand a 1x5 row to 4x5 and a 4x1 column to 4x5 (stride 0).
    let src: Vec<f32> = (0..5).map(|i| i as f32).collect();
    let mut dst = vec![0u8; 80];
    strided_copy(4, &[4, 5], &f32_bytes(&src), 0, &[0, 1], &mut dst, &[5, 1]).unwrap();
    assert_eq!(&bytes_f32(&dst)[15..20], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    strided_copy(4, &[4, 5], &f32_bytes(&src), 1, &[1, 0], &mut dst, &[5, 1]).unwrap();
    assert_eq!(&bytes_f32(&dst)[10..15], &[3.0; 5]);
    check_copy(4, &[4, 5], 5, 0, &[0, 1], &[5, 1], 20);
    check_copy(4, &[4, 5], 4, 0, &[1, 0], &[5, 1], 20);
    check_copy(
        8,
        &[3, 300, 33],
        33,
        0,
        &[0, 0, 1],
        &dense(&[3, 300, 33]),
        29700,
    );
    // A stepped slice x[1:, 3::2] of a 5x20 matrix.
    check_copy(4, &[4, 9], 100, 23, &[20, 2], &[9, 1], 36);
    // A concatenation piece: 3x4 written into columns 2..6 of a 3x10
    // output; the other bytes keep their sentinel (0xAB).
    check_copy(4, &[3, 4], 12, 0, &[4, 1], &[10, 1], 30);
    let src = f32_bytes(&[1.0; 12]);
    let mut dst = vec![0u8; 120];
    strided_copy(4, &[3, 4], &src, 0, &[4, 1], &mut dst[8..], &[10, 1]).unwrap();
    let got = bytes_f32(&dst);
    assert_eq!(
        &got[..12],
        &[0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    // Size-1 axes with arbitrary strides, a rank-0 copy, an empty copy.
    check_copy(
        4,
        &[1, 6, 1],
        6,
        0,
        &[i64::MAX, 1, -77],
        &[u64::MAX, 1, 9],
        6,
    );
    check_copy(3, &[], 4, 2, &[], &[], 1);
    let mut untouched = vec![7u8; 8];
    strided_copy(4, &[2, 0], &[], 0, &[1, 1], &mut untouched, &[1, 1]).unwrap();
    assert_eq!(untouched, vec![7u8; 8]);
}

#[test]
fn copy_overlapping_destination_last_write_wins() {
    // dst stride 0: every element lands on dst[0]; the last one stays.
    let src = f32_bytes(&[1.0, 2.0, 3.0]);
    let mut dst = vec![0u8; 4];
    strided_copy(4, &[3], &src, 0, &[1], &mut dst, &[0]).unwrap();
    assert_eq!(bytes_f32(&dst), vec![3.0]);
    check_copy(4, &[50, 40, 30], 2000, 0, &[40, 1, 0], &[30, 0, 1], 1500);
}

/// A rejected copy: element size, shape, start, source and destination
/// strides, and a piece of the expected message.
type BadCopy = (
    usize,
    &'static [u64],
    u64,
    &'static [i64],
    &'static [u64],
    &'static str,
);

#[test]
fn copy_rejects_out_of_bounds_arguments() {
    let src = vec![0u8; 24];
    let mut dst = vec![0u8; 24];
    const BIG: u64 = u64::MAX;
    const MIN: i64 = i64::MIN;
    const MAX: i64 = i64::MAX;
    let cases: [BadCopy; 9] = [
        (
            4,
            &[2, 3],
            0,
            &[3],
            &[3, 1],
            "needs 2 source and destination strides",
        ),
        (4, &[2, 4], 0, &[3, 1], &[3, 1], "source needs 7 elements"),
        (4, &[2, 3], 1, &[-3, 1], &[3, 1], "before the start"),
        (
            4,
            &[2, 3],
            0,
            &[3, 1],
            &[4, 1],
            "destination needs 7 elements",
        ),
        (4, &[1], 6, &[1], &[1], "source needs 7 elements"),
        (0, &[2], 0, &[1], &[1], "element size must be at least 1"),
        (4, &[BIG, 3], 0, &[MIN, 1], &[1, 1], "before the start"),
        (4, &[BIG, BIG], 0, &[MAX, MAX], &[1, 1], "too large"),
        (8, &[3], BIG, &[1], &[1], "source needs"),
    ];
    for (es, shape, start, ss, ds, msg) in cases {
        let e =
            strided_copy(es, shape, &src, start, ss, &mut dst, ds).expect_err("bad copy accepted");
        assert!(
            e.message().contains(msg),
            "{shape:?} {ss:?}: {}",
            e.message()
        );
    }
    assert_eq!(dst, vec![0u8; 24]);
}

#[test]
fn fill_patterns_and_errors() {
    let mut d = vec![0u8; 12];
    fill(4, 1.5f32.to_bits() as u64, &mut d).unwrap();
    assert_eq!(bytes_f32(&d), vec![1.5; 3]);
    fill(2, 0x1234, &mut d).unwrap();
    assert_eq!(&d[..4], &[0x34, 0x12, 0x34, 0x12]);
    fill(3, 0x0A0B0C, &mut d).unwrap();
    assert_eq!(&d[..6], &[0x0C, 0x0B, 0x0A, 0x0C, 0x0B, 0x0A]);
    fill(1, 0xFF07, &mut d).unwrap();
    assert_eq!(d, vec![7u8; 12]);
    in_pools(|| {
        // Larger than one parallel chunk, not a multiple of it.
        let mut big = vec![0u8; 8 * 70_001];
        fill(8, (-2i64) as u64, &mut big).unwrap();
        assert!(
            big.chunks_exact(8)
                .all(|c| i64::from_le_bytes(c.try_into().unwrap()) == -2)
        );
        let mut big = vec![1u8; 300_003];
        fill(1, 0, &mut big).unwrap();
        assert!(big.iter().all(|&b| b == 0));
    });
    assert!(
        fill(4, 0, &mut [0u8; 6])
            .unwrap_err()
            .message()
            .contains("6 bytes")
    );
    assert!(fill(0, 0, &mut [0u8; 6]).is_err());
    assert!(fill(9, 0, &mut [0u8; 9]).is_err());
}

#[test]
fn gather_rows_negative_indices_and_errors() {
    // data 2 x 3 x 2: data[o, a, i] = 100·o + 10·a + i.
    let data: Vec<f32> = (0..12)
        .map(|f| (100 * (f / 6) + 10 * (f / 2 % 3) + f % 2) as f32)
        .collect();
    let idx: Vec<u8> = [2i64, -1, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
    let mut out = vec![0u8; 12 * 4];
    gather(4, 2, 3, 2, 3, &f32_bytes(&data), &idx, &mut out).unwrap();
    assert_eq!(
        bytes_f32(&out),
        vec![
            20.0, 21.0, 20.0, 21.0, 0.0, 1.0, 120.0, 121.0, 120.0, 121.0, 100.0, 101.0
        ]
    );
    for bad in [3i64, -4, i64::MIN] {
        let idx: Vec<u8> = [0i64, bad].iter().flat_map(|i| i.to_le_bytes()).collect();
        let mut out = vec![0u8; 8 * 4];
        let e = gather(4, 2, 3, 2, 2, &f32_bytes(&data), &idx, &mut out).unwrap_err();
        assert!(
            e.message()
                .contains(&format!("index {bad} is out of range")),
            "{}",
            e.message()
        );
        assert_eq!(out, vec![0u8; 32], "nothing written on error");
    }
    let idx = 0i64.to_le_bytes();
    assert!(gather(4, 2, 3, 2, 1, &f32_bytes(&data[..11]), &idx, &mut out).is_err());
    assert!(gather(4, 2, 3, 2, 2, &f32_bytes(&data), &idx, &mut out).is_err());
    assert!(gather(4, 2, 3, 2, 1, &f32_bytes(&data), &idx, &mut out[..15]).is_err());
    assert!(gather(4, usize::MAX, 3, 2, 1, &[], &idx, &mut out).is_err());
    // Large enough to split over threads: an embedding lookup.
    let table: Vec<u8> = (0..1000 * 64u32).flat_map(|v| v.to_le_bytes()).collect();
    let ids: Vec<i64> = (0..400).map(|j| (j * 37 % 1000) - 500).collect();
    let idx: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    in_pools(|| {
        let mut out = vec![0u8; 400 * 64 * 4];
        gather(4, 1, 1000, 64, 400, &table, &idx, &mut out).unwrap();
        for (j, &id) in ids.iter().enumerate() {
            let row = (id + if id < 0 { 1000 } else { 0 }) as usize;
            assert_eq!(
                out[j * 256..(j + 1) * 256],
                table[row * 256..(row + 1) * 256]
            );
        }
    });
}

/// Distance in units in the last place between two finite f32 of one sign.
fn ulps(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

#[test]
fn exp_is_accurate_and_handles_extremes() {
    // Both forms: separate multiplies and adds (plain level) and fused
    // multiply-adds (AVX2 and AVX-512 levels).
    let forms: [(&str, fn(f32) -> f32); 2] =
        [("unfused", exp_with::<false>), ("fused", exp_with::<true>)];
    for (name, exp) in forms {
        let mut worst = 0;
        let (lo, hi) = (-87.3f32, 88.72f32);
        let steps = 2_000_000;
        for s in 0..=steps {
            let x = lo + (hi - lo) * (s as f32 / steps as f32);
            let want = (x as f64).exp() as f32;
            worst = worst.max(ulps(exp(x), want));
        }
        // Every f32 in [-1, 1] near 0 (dense bits) as well.
        for bits in (0u32..0x3F80_0000).step_by(97) {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                worst = worst.max(ulps(exp(x), (x as f64).exp() as f32));
            }
        }
        assert!(worst <= 2, "{name}: worst error {worst} ulp");
        assert_eq!(exp(0.0), 1.0, "{name}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0, "{name}");
        assert_eq!(exp(-104.0), 0.0, "{name}");
        assert_eq!(exp(-1e30), 0.0, "{name}");
        assert_eq!(exp(f32::INFINITY), f32::INFINITY, "{name}");
        assert_eq!(exp(89.0), f32::INFINITY, "{name}");
        assert!(exp(88.72).is_finite(), "{name}");
        assert!(exp(f32::NAN).is_nan(), "{name}");
        // Subnormal results: e^-100 = 3.72e-44 is 27 · 2^-149 (rounded).
        assert_eq!(exp(-100.0), f32::from_bits(27), "{name}");
        let sub = exp(-90.0) as f64;
        assert!((sub / (-90f64).exp() - 1.0).abs() < 1e-5, "{name}: {sub}");
    }
    assert_eq!(exp_f32(1.5).to_bits(), exp_with::<false>(1.5).to_bits());
    // The slice version computes the values of the best level's form.
    let fused = Isa::best() != Isa::Scalar;
    let xs: Vec<f32> = values(1001, 9).iter().map(|v| v * 90.0).collect();
    let mut ys = xs.clone();
    exp_slice(&mut ys);
    for (x, y) in xs.iter().zip(&ys) {
        let want = if fused {
            exp_with::<true>(*x)
        } else {
            exp_with::<false>(*x)
        };
        assert_eq!(y.to_bits(), want.to_bits(), "x = {x}");
    }
}

/// Softmax of one row in f64.
fn softmax_ref(x: &[f32], log: bool) -> Vec<f64> {
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    x.iter()
        .map(|&v| {
            if log {
                (v as f64 - max) - sum.ln()
            } else {
                (v as f64 - max).exp() / sum
            }
        })
        .collect()
}

#[test]
fn softmax_hand_values_and_extremes() {
    let run = |x: &[f32], log: bool| {
        let mut y = vec![0.0; x.len()];
        softmax(1, x.len(), log, x, &mut y).unwrap();
        y
    };
    let close = |got: &[f32], want: &[f32]| {
        for (g, w) in got.iter().zip(want) {
            assert!(
                g == w || (g - w).abs() <= 2e-7 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    };
    close(
        &run(&[1.0, 2.0, 3.0], false),
        &[0.090_030_57, 0.244_728_48, 0.665_240_94],
    );
    close(
        &run(&[1.0, 2.0, 3.0], true),
        &[-2.407_606, -1.407_606, -0.407_606],
    );
    let inf = f32::INFINITY;
    close(&run(&[0.0, -inf, 0.0], false), &[0.5, 0.0, 0.5]);
    close(
        &run(&[0.0, -inf, 0.0], true),
        &[-std::f32::consts::LN_2, -inf, -std::f32::consts::LN_2],
    );
    close(&run(&[1000.0, 1000.0, 3e38], false), &[0.0, 0.0, 1.0]);
    close(&run(&[1e30, 1e30], false), &[0.5, 0.5]);
    close(&run(&[-1e30, 0.0], false), &[0.0, 1.0]);
    close(&run(&[7.0], true), &[0.0]);
    // A row of only -inf has no maximum to subtract: NaN, as in ONNX.
    assert!(run(&[-inf, -inf], false).iter().all(|v| v.is_nan()));
}

#[test]
fn softmax_matches_f64_reference() {
    for (rows, cols) in [(3, 1), (5, 7), (4, 33), (2, 1000), (170, 129)] {
        let x: Vec<f32> = values(rows * cols, cols as u64)
            .iter()
            .map(|v| v * 30.0)
            .collect();
        for log in [false, true] {
            in_pools(|| {
                let mut y = vec![f32::NAN; rows * cols + 3];
                softmax(rows, cols, log, &x, &mut y).unwrap();
                for r in 0..rows {
                    let xr = &x[r * cols..(r + 1) * cols];
                    let max = xr.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let want = softmax_ref(xr, log);
                    for ((g, w), &v) in y[r * cols..(r + 1) * cols].iter().zip(want).zip(xr) {
                        // f32 rounding of `x - max` alone moves e^(x-max)
                        // by up to |x - max|·2^-24 relative.
                        let tol = if log {
                            1e-6 * w.abs().max(1.0)
                        } else {
                            w * (1e-6 + (v - max).abs() as f64 * 6e-8)
                        };
                        assert!(
                            (*g as f64 - w).abs() <= tol,
                            "{rows}x{cols} log {log}: {g} vs {w}"
                        );
                    }
                }
                assert!(
                    y[rows * cols..].iter().all(|v| v.is_nan()),
                    "wrote past the matrix"
                );
            });
        }
    }
}

#[test]
fn layer_norm_matches_f64_reference() {
    // Offsets and scales that defeat a one-pass variance in f32.
    for (rows, cols, offset, scale) in [
        (3, 1, 0.0, 1.0),
        (4, 7, 0.0, 1.0),
        (5, 768, 1000.0, 1.0),
        (130, 130, -50.0, 0.01),
        (2, 4097, 3.0, 100.0),
    ] {
        let x: Vec<f32> = values(rows * cols, cols as u64 + 1)
            .iter()
            .map(|v| offset + v * scale)
            .collect();
        let gamma = values(cols, 5);
        let beta = values(cols, 6);
        let eps = 1e-5f32;
        for (g, b) in [
            (None, None),
            (Some(&gamma[..]), None),
            (None, Some(&beta[..])),
            (Some(&gamma[..]), Some(&beta[..])),
        ] {
            in_pools(|| {
                let mut y = vec![0.0; rows * cols];
                layer_norm(rows, cols, eps, &x, g, b, &mut y).unwrap();
                for r in 0..rows {
                    let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                        .iter()
                        .map(|&v| v as f64)
                        .collect();
                    let mean = row.iter().sum::<f64>() / cols as f64;
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
                    let rstd = 1.0 / (var + eps as f64).sqrt();
                    for j in 0..cols {
                        let z = (row[j] - mean) * rstd;
                        let want =
                            z * g.map_or(1.0, |g| g[j] as f64) + b.map_or(0.0, |b| b[j] as f64);
                        let got = y[r * cols + j] as f64;
                        assert!(
                            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                            "{rows}x{cols} row {r} col {j}: {got} vs {want}"
                        );
                    }
                }
            });
        }
    }
    // A constant row normalizes to 0 (then beta).
    let mut y = vec![9.0; 3];
    layer_norm(1, 3, 1e-5, &[4.0; 3], None, Some(&[1.0, 2.0, 3.0]), &mut y).unwrap();
    assert_eq!(y, vec![1.0, 2.0, 3.0]);
}

#[test]
fn norm_rejects_bad_lengths() {
    let mut y = vec![0.0; 6];
    assert!(
        softmax(2, 3, false, &[0.0; 5], &mut y)
            .unwrap_err()
            .message()
            .contains("needs 6 floats, found 5")
    );
    assert!(softmax(2, 4, false, &[0.0; 8], &mut y).is_err());
    assert!(softmax(usize::MAX, 2, false, &[], &mut y).is_err());
    assert!(
        layer_norm(2, 3, 1e-5, &[0.0; 6], Some(&[1.0; 2]), None, &mut y)
            .unwrap_err()
            .message()
            .contains("gamma needs 3 values")
    );
    assert!(layer_norm(2, 3, 1e-5, &[0.0; 6], None, Some(&[]), &mut y).is_err());
    assert!(layer_norm(3, 3, 1e-5, &[0.0; 9], None, None, &mut y).is_err());
    softmax(0, 5, true, &[], &mut []).unwrap();
    layer_norm(4, 0, 1e-5, &[], None, None, &mut []).unwrap();
}

/// `C_i = A_i·B_i` in f64 with strides, and each output's Σ|a·b|.
#[allow(clippy::too_many_arguments)]
fn matmul_ref(
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    sa: [u64; 3],
    b: &[f32],
    sb: [u64; 3],
) -> Vec<(f64, f64)> {
    let at = |s: [u64; 3], i: usize, r: usize, c: usize| {
        i * s[0] as usize + r * s[1] as usize + c * s[2] as usize
    };
    let mut out = Vec::new();
    for i in 0..batch {
        for r in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0, 0.0);
                for p in 0..k {
                    let v = a[at(sa, i, r, p)] as f64 * b[at(sb, i, p, j)] as f64;
                    s += v;
                    mag += v.abs();
                }
                out.push((s, mag));
            }
        }
    }
    out
}

/// Runs one batched product in pools of 1 and 3 threads and checks every
/// output element (addressed with `sc`) against the f64 reference.
#[allow(clippy::too_many_arguments)]
fn check_matmul(
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    sa: [u64; 3],
    sb: [u64; 3],
    sc: [u64; 3],
    lens: [usize; 3],
) {
    let a = values(lens[0], (m * 7 + k) as u64);
    let b = values(lens[1], (k * 5 + n) as u64);
    let want = matmul_ref(batch, m, n, k, &a, sa, &b, sb);
    in_pools(|| {
        let mut c = vec![f32::NAN; lens[2]];
        batched_matmul(batch, m, n, k, &a, sa, &b, sb, &mut c, sc).unwrap();
        let mut e = 0;
        for i in 0..batch {
            for r in 0..m {
                for j in 0..n {
                    let got =
                        c[i * sc[0] as usize + r * sc[1] as usize + j * sc[2] as usize] as f64;
                    let (w, mag) = want[e];
                    e += 1;
                    assert!(
                        (got - w).abs() <= 2e-6 * (k as f64 + 1.0) * mag + 1e-30,
                        "{batch}x{m}x{n}x{k} [{i},{r},{j}]: {got} vs {w}"
                    );
                }
            }
        }
    });
}

#[test]
fn batched_matmul_contiguous_odd_sizes() {
    for (batch, m, n, k) in [
        (1, 1, 1, 1),
        (3, 2, 3, 4),
        (5, 7, 9, 11),
        (2, 33, 17, 40),
        (4, 65, 31, 70),
        (1, 130, 50, 64),
        (7, 1, 100, 300),
    ] {
        let (sa, sb, sc) = (
            [(m * k) as u64, k as u64, 1],
            [(k * n) as u64, n as u64, 1],
            [(m * n) as u64, n as u64, 1],
        );
        check_matmul(
            batch,
            m,
            n,
            k,
            sa,
            sb,
            sc,
            [batch * m * k, batch * k * n, batch * m * n],
        );
    }
}

#[test]
fn batched_matmul_transposed_broadcast_and_strided() {
    // Attention scores Q·Kᵀ: 6 heads, Q and K are [s=20, h=6, d=32] rows.
    let (h, s, d) = (6usize, 20usize, 32usize);
    check_matmul(
        h,
        s,
        s,
        d,
        [d as u64, (h * d) as u64, 1],
        [d as u64, 1, (h * d) as u64],
        [(s * s) as u64, s as u64, 1],
        [s * h * d, s * h * d, h * s * s],
    );
    // Broadcast A (batch stride 0) and broadcast B (shared packing).
    check_matmul(
        4,
        9,
        40,
        50,
        [0, 50, 1],
        [2000, 40, 1],
        [360, 40, 1],
        [450, 8000, 1440],
    );
    check_matmul(
        4,
        60,
        40,
        50,
        [3000, 50, 1],
        [0, 40, 1],
        [2400, 40, 1],
        [12000, 2000, 9600],
    );
    check_matmul(3, 2, 3, 4, [8, 4, 1], [0, 1, 4], [6, 3, 1], [24, 12, 18]);
    // A with column stride 2, C transposed (column-major) and padded rows.
    check_matmul(
        3,
        20,
        30,
        40,
        [1700, 85, 2],
        [1200, 30, 1],
        [700, 1, 21],
        [5100, 3600, 2100],
    );
    check_matmul(2, 3, 4, 5, [15, 1, 3], [20, 4, 1], [12, 1, 3], [30, 40, 24]);
    // Rows of C padded (ldc > n), in place through gemm.
    check_matmul(
        3,
        40,
        30,
        20,
        [800, 20, 1],
        [600, 30, 1],
        [1500, 37, 1],
        [2400, 1800, 4500],
    );
}

#[test]
fn batched_matmul_edge_cases() {
    // k = 0: C is all zeros.
    let mut c = vec![5.0; 6];
    batched_matmul(
        2,
        1,
        3,
        0,
        &[],
        [0, 0, 1],
        &[],
        [0, 0, 1],
        &mut c,
        [3, 3, 1],
    )
    .unwrap();
    assert_eq!(c, vec![0.0; 6]);
    // Hand-checked 2x2 products for two batches.
    let a = [1.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 1.0];
    let b = [5.0, 6.0, 7.0, 8.0];
    let mut c = vec![0.0; 8];
    batched_matmul(2, 2, 2, 2, &a, [4, 2, 1], &b, [0, 2, 1], &mut c, [4, 2, 1]).unwrap();
    assert_eq!(c, vec![19.0, 22.0, 43.0, 50.0, 5.0, 6.0, 7.0, 8.0]);
    // C batch stride 0: batches overwrite one matrix; the last one stays.
    let mut c = vec![0.0; 4];
    batched_matmul(2, 2, 2, 2, &a, [4, 2, 1], &b, [0, 2, 1], &mut c, [0, 2, 1]).unwrap();
    assert_eq!(c, vec![5.0, 6.0, 7.0, 8.0]);
    // Nothing to do.
    batched_matmul(
        0,
        2,
        2,
        2,
        &[],
        [9, 9, 9],
        &[],
        [9, 9, 9],
        &mut [],
        [9, 9, 9],
    )
    .unwrap();
}

#[test]
fn batched_matmul_rejects_out_of_bounds() {
    let a = vec![0.0; 24];
    let b = vec![0.0; 24];
    let mut c = vec![0.0; 18];
    let ok = ([12u64, 4, 1], [12u64, 3, 1], [9u64, 3, 1]);
    batched_matmul(2, 3, 3, 4, &a, ok.0, &b, ok.1, &mut c, ok.2).unwrap();
    let bad = [
        (2, [12, 5, 1], ok.1, ok.2, "a of 2x3x4"),
        (2, ok.0, [13, 3, 1], ok.2, "b of 2x4x3"),
        (2, ok.0, ok.1, [10, 3, 1], "c of 2x3x3"),
        (3, ok.0, ok.1, ok.2, "needs 27 floats, found 18"),
        (2, [u64::MAX, 4, 1], ok.1, ok.2, "a of"),
        (2, ok.0, ok.1, [u64::MAX, u64::MAX, u64::MAX], "c of"),
    ];
    for (batch, sa, sb, sc, msg) in bad {
        let e = batched_matmul(batch, 3, 3, 4, &a, sa, &b, sb, &mut c, sc).unwrap_err();
        assert!(e.message().contains(msg), "{}", e.message());
    }
}
