//! Tests of the convolution-family kernels (conv2d, depthwise, transposed
//! convolution) and of the GEMM's thread split, against naive reference
//! loops in f64 written here from the ONNX definitions, on odd sizes, in
//! rayon pools of 1 and 3 threads. Pool, reduce and resize tests sit at the
//! end of `pool.rs` and `resize.rs` and share the helpers here.

use super::conv::*;
use super::gemm::split;
use super::*;
use crate::plan::ConvGeom;

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

/// Runs `f` inside a rayon pool of `threads` threads.
pub(super) fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("test thread pool")
        .install(f)
}

/// Asserts `got` matches `want` within 1e-4 relative (absolute below 1).
pub(super) fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-4 * w.abs().max(1.0);
        assert!(
            (g as f64 - w).abs() <= tol || (g.is_nan() && w.is_nan()),
            "{what}: element {i} is {g}, expected {w}"
        );
    }
}

/// A geometry; `oh`, `ow` computed by the caller.
#[allow(clippy::too_many_arguments)]
pub(super) fn geom(
    [n, h, w, c]: [u64; 4],
    [oh, ow, oc]: [u64; 3],
    [kh, kw]: [u64; 2],
    stride: [u64; 2],
    dilation: [u64; 2],
    pads: [u64; 4],
    group: u64,
) -> ConvGeom {
    ConvGeom {
        n,
        h,
        w,
        c,
        oh,
        ow,
        oc,
        kh,
        kw,
        stride,
        dilation,
        pads,
        group,
    }
}

/// Forward-convolution output size.
fn out(input: u64, k: u64, s: u64, d: u64, pb: u64, pe: u64) -> u64 {
    (input + pb + pe - d * (k - 1) - 1) / s + 1
}

/// A convolution geometry with its output size computed.
fn conv_geom(
    nhwc: [u64; 4],
    oc: u64,
    k: [u64; 2],
    s: [u64; 2],
    d: [u64; 2],
    p: [u64; 4],
    group: u64,
) -> ConvGeom {
    let oh = out(nhwc[1], k[0], s[0], d[0], p[0], p[2]);
    let ow = out(nhwc[2], k[1], s[1], d[1], p[1], p[3]);
    geom(nhwc, [oh, ow, oc], k, s, d, p, group)
}

/// Reference grouped convolution, NHWC activations, OIHW weights, in f64.
fn ref_conv(g: &ConvGeom, x: &[f32], w: &[f32], bias: Option<&[f32]>, relu: bool) -> Vec<f64> {
    let u = |v: u64| v as usize;
    let (n, h, wd, c) = (u(g.n), u(g.h), u(g.w), u(g.c));
    let (oh, ow, oc, kh, kw) = (u(g.oh), u(g.ow), u(g.oc), u(g.kh), u(g.kw));
    let (cg, mg) = (c / u(g.group), oc / u(g.group));
    let mut y = Vec::new();
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let mut acc = bias.map_or(0.0, |b| b[o] as f64);
                    for ci in 0..cg {
                        let ic = (o / mg) * cg + ci;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * u(g.stride[0]) + ky * u(g.dilation[0])) as i64
                                    - g.pads[0] as i64;
                                let ix = (ox * u(g.stride[1]) + kx * u(g.dilation[1])) as i64
                                    - g.pads[1] as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                    continue;
                                }
                                let xv = x[((b * h + iy as usize) * wd + ix as usize) * c + ic];
                                let wv = w[((o * cg + ci) * kh + ky) * kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y.push(if relu { acc.max(0.0) } else { acc });
                }
            }
        }
    }
    y
}

/// The epilogues every convolution case runs: none, bias + relu, bias +
/// clip (ReLU6-like, bounds inside the outputs' range so both bind), and
/// relu then clip.
fn posts(bias: &[f32]) -> [(Option<&[f32]>, Post); 4] {
    let clip = |relu, lo, hi| Post {
        relu,
        clip: Some([lo, hi]),
    };
    [
        (None, Post::from(false)),
        (Some(bias), Post::from(true)),
        (Some(bias), clip(false, -0.3, 0.4)),
        (Some(bias), clip(true, 0.1, 0.5)),
    ]
}

/// The reference's values after `post`'s clip (its relu is in `ref_conv`).
fn ref_post(y: Vec<f64>, post: Post) -> Vec<f64> {
    match post.clip {
        Some([lo, hi]) => y
            .into_iter()
            .map(|v| v.max(lo as f64).min(hi as f64))
            .collect(),
        None => y,
    }
}

/// Runs conv2d in pools of 1 and 3 threads, compares with the reference
/// and checks the two thread counts agree bit for bit.
fn check_conv(g: &ConvGeom, what: &str) {
    check_conv_with(g, what, |g, x, w, b, post, y| conv2d(g, x, w, b, post, y).unwrap());
}

/// [`check_conv`] of the entry `run`.
fn check_conv_with(
    g: &ConvGeom,
    what: &str,
    run: impl Fn(&ConvGeom, &[f32], &[f32], Option<&[f32]>, Post, &mut [f32]) + Sync,
) {
    let run = &run;
    let (x_len, y_len) = (
        (g.n * g.h * g.w * g.c) as usize,
        (g.n * g.oh * g.ow * g.oc) as usize,
    );
    let wlen = (g.oc * g.c / g.group * g.kh * g.kw) as usize;
    let x = values(x_len, 11 + x_len as u64);
    let w = values(wlen, 13 + wlen as u64);
    let bias = values(g.oc as usize, 17);
    let packed = conv2d_pack_weights(g, &w).unwrap();
    for (b, post) in posts(&bias) {
        let want = ref_post(ref_conv(g, &x, &w, b, post.relu), post);
        let mut first: Option<Vec<f32>> = None;
        for threads in [1, 3] {
            let mut y = vec![f32::NAN; y_len];
            in_pool(threads, || run(g, &x, &packed, b, post, &mut y));
            assert_close(&y, &want, &format!("{what} {post:?} threads={threads}"));
            match &first {
                None => first = Some(y),
                Some(f) => assert!(
                    f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: 1 and 3 threads differ"
                ),
            }
        }
    }
}

#[test]
fn conv2d_matches_reference_on_odd_geometries() {
    let cases = [
        (
            "3x3 stride 2 asymmetric pads",
            conv_geom([1, 5, 7, 3], 4, [3, 3], [2, 2], [1, 1], [1, 0, 2, 1], 1),
        ),
        (
            "3x2 dilation 2 groups 2",
            conv_geom([2, 5, 7, 4], 6, [3, 2], [1, 1], [2, 2], [2, 1, 0, 2], 2),
        ),
        (
            "groups 2 of 20 outputs (grouped implicit GEMM)",
            conv_geom([1, 5, 7, 6], 40, [3, 3], [2, 1], [1, 2], [1, 2, 0, 1], 2),
        ),
        (
            "groups 2 of 12 outputs, 5 inputs, stride 2 (per-group GEMMs by cost)",
            conv_geom([2, 9, 5, 10], 24, [3, 3], [2, 2], [1, 1], [1, 1, 1, 0], 2),
        ),
        (
            "24 groups of 3 outputs, 2 inputs (direct grouped, channel blocks of 64 and 8)",
            conv_geom([1, 6, 6, 48], 72, [3, 3], [1, 1], [1, 1], [1; 4], 24),
        ),
        (
            "8 groups of 2 (direct grouped, one channel block of 16)",
            conv_geom([2, 5, 6, 16], 16, [3, 3], [1, 1], [1, 1], [1; 4], 8),
        ),
        (
            "15 groups of 3, 2 inputs (direct grouped, blocks of 32, 8, 4 and 1)",
            conv_geom([1, 6, 6, 30], 45, [3, 3], [1, 1], [1, 1], [1; 4], 15),
        ),
        (
            "32 groups of 4 (ResNeXt-style)",
            conv_geom([1, 7, 6, 128], 128, [3, 3], [1, 1], [1, 1], [1; 4], 32),
        ),
        (
            "width dilation 2 (strided unfolding)",
            conv_geom([1, 6, 9, 5], 7, [2, 3], [1, 2], [1, 2], [0, 1, 1, 0], 1),
        ),
        (
            "1x1 fast path",
            conv_geom([2, 5, 7, 5], 18, [1, 1], [1, 1], [1, 1], [0; 4], 1),
        ),
        (
            "1x1 fast path groups 3",
            conv_geom([1, 5, 7, 6], 9, [1, 1], [1, 1], [1, 1], [0; 4], 3),
        ),
        (
            "1x1 stride 2",
            conv_geom([1, 5, 7, 8], 16, [1, 1], [2, 2], [1, 1], [0; 4], 1),
        ),
        (
            "3x3 pad 1, several blocks",
            conv_geom([1, 13, 13, 16], 33, [3, 3], [1, 1], [1, 1], [1; 4], 1),
        ),
        (
            "5x5 deep",
            conv_geom([1, 9, 8, 40], 20, [5, 5], [1, 1], [1, 1], [2; 4], 1),
        ),
        (
            "U-Net 32x32x16 -> 8 (planar on AVX-512)",
            conv_geom([1, 32, 32, 16], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1),
        ),
        (
            "stem 3 -> 16 stride 2 (planar on AVX-512)",
            conv_geom([1, 40, 40, 3], 16, [3, 3], [2, 2], [1, 1], [1; 4], 1),
        ),
    ];
    for (what, g) in &cases {
        check_conv(g, what);
    }
}

#[test]
fn conv2d_pack_weights_orders_rows_kh_kw_c() {
    // oc = 1, c = 2, 1x2 kernel: w[0][ci][0][kx] = [[1, 2], [3, 4]]; the
    // matrix rows (kx, ci) are (0,0)=1, (0,1)=3, (1,0)=2, (1,1)=4.
    let g = geom([1, 1, 2, 2], [1, 1, 1], [1, 2], [1, 1], [1, 1], [0; 4], 1);
    let p = conv2d_pack_weights(&g, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(p.len(), 4 * PANEL_WIDTH);
    let col0: Vec<f32> = (0..4).map(|r| p[r * PANEL_WIDTH]).collect();
    assert_eq!(col0, [1.0, 3.0, 2.0, 4.0]);
    // x = [[5, 6], [7, 8]] (pixel, channel): y = 5·1 + 6·3 + 7·2 + 8·4 = 69.
    let mut y = [0.0f32];
    conv2d(&g, &[5.0, 6.0, 7.0, 8.0], &p, Some(&[1.0]), false, &mut y).unwrap();
    assert_eq!(y, [70.0]);
}

/// Reference depthwise convolution: group == c, output o reads o / mult.
fn check_depthwise(g: &ConvGeom, what: &str) {
    let (x_len, y_len) = (
        (g.n * g.h * g.w * g.c) as usize,
        (g.n * g.oh * g.ow * g.oc) as usize,
    );
    let wlen = (g.oc * g.kh * g.kw) as usize;
    let x = values(x_len, 21);
    let w = values(wlen, 23);
    let bias = values(g.oc as usize, 29);
    let packed = depthwise_pack_weights(g, &w).unwrap();
    for (b, post) in posts(&bias) {
        // A grouped conv with c/group = 1 is the depthwise reference.
        let want = ref_post(ref_conv(g, &x, &w, b, post.relu), post);
        for threads in [1, 3] {
            let mut y = vec![f32::NAN; y_len];
            in_pool(threads, || {
                depthwise_conv2d(g, &x, &packed, b, post, &mut y)
            })
            .unwrap();
            assert_close(&y, &want, &format!("{what} {post:?} threads={threads}"));
        }
    }
}

#[test]
fn depthwise_matches_reference() {
    let cases = [
        (
            "3x3 stride 2 asymmetric pads",
            conv_geom([1, 5, 7, 3], 3, [3, 3], [2, 2], [1, 1], [1, 0, 2, 1], 3),
        ),
        (
            "multiplier 2, dilation 2",
            conv_geom([2, 5, 7, 3], 6, [3, 3], [1, 2], [2, 2], [2, 1, 1, 2], 3),
        ),
        (
            "70 channels (a full block and a tail)",
            conv_geom([1, 6, 5, 70], 70, [3, 3], [1, 1], [1, 1], [1; 4], 70),
        ),
        (
            "124 channels (blocks of 64, 32, 16 and 8, a tail), stride 2",
            conv_geom([1, 7, 6, 124], 124, [3, 3], [2, 2], [1, 1], [1; 4], 124),
        ),
        (
            "multiplier 3, 5x5",
            conv_geom([1, 7, 6, 4], 12, [5, 5], [2, 1], [1, 1], [2, 2, 2, 2], 4),
        ),
        (
            "7 channels, stride 2 (blocks of 4, 2 and 1)",
            conv_geom([1, 6, 7, 7], 7, [3, 3], [2, 2], [1, 1], [1; 4], 7),
        ),
        // Fewer than 16 channels with unit W stride: whole-row taps.
        (
            "2 channels 3x3 (row taps)",
            conv_geom([2, 9, 11, 2], 2, [3, 3], [1, 1], [1, 1], [1; 4], 2),
        ),
        (
            "12 channels, H stride 2, W dilation 2, asymmetric pads (row taps)",
            conv_geom([1, 8, 9, 12], 12, [3, 5], [2, 1], [1, 2], [0, 3, 2, 1], 12),
        ),
        (
            "1 channel, a 7-wide kernel over a 4-wide image (row taps miss the edges)",
            conv_geom([1, 5, 4, 1], 1, [3, 7], [1, 1], [1, 1], [1, 3, 1, 3], 1),
        ),
    ];
    for (what, g) in &cases {
        check_depthwise(g, what);
    }
}

#[test]
fn depthwise_hand_checked() {
    // One channel 3x3 of 1..9, kernel 2x2 of ones, stride 1, no pads:
    // window sums 1+2+4+5=12, 16, 24, 28; bias -20 then relu.
    let g = geom([1, 3, 3, 1], [2, 2, 1], [2, 2], [1, 1], [1, 1], [0; 4], 1);
    let w = depthwise_pack_weights(&g, &[1.0; 4]).unwrap();
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let mut y = [0.0f32; 4];
    depthwise_conv2d(&g, &x, &w, Some(&[-20.0]), true, &mut y).unwrap();
    assert_eq!(y, [0.0, 0.0, 4.0, 8.0]);
}

/// ONNX ConvTranspose on NHWC activations with IOHW weights `[c, oc/g, kh,
/// kw]`, scatter form, in f64.
fn ref_conv_transpose(g: &ConvGeom, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let u = |v: u64| v as usize;
    let (n, h, wd, c) = (u(g.n), u(g.h), u(g.w), u(g.c));
    let (oh, ow, oc, kh, kw) = (u(g.oh), u(g.ow), u(g.oc), u(g.kh), u(g.kw));
    let (cg, mg) = (c / u(g.group), oc / u(g.group));
    let mut y = vec![0.0f64; n * oh * ow * oc];
    for (i, v) in y.iter_mut().enumerate() {
        *v = bias.map_or(0.0, |b| b[i % oc] as f64);
    }
    for b in 0..n {
        for iy in 0..h {
            for ix in 0..wd {
                for ic in 0..c {
                    let xv = x[((b * h + iy) * wd + ix) * c + ic] as f64;
                    for j in 0..mg {
                        let o = (ic / cg) * mg + j;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let oy = (iy * u(g.stride[0]) + ky * u(g.dilation[0])) as i64
                                    - g.pads[0] as i64;
                                let ox = (ix * u(g.stride[1]) + kx * u(g.dilation[1])) as i64
                                    - g.pads[1] as i64;
                                if oy < 0 || ox < 0 || oy >= oh as i64 || ox >= ow as i64 {
                                    continue;
                                }
                                let wv = w[((ic * mg + j) * kh + ky) * kw + kx] as f64;
                                y[((b * oh + oy as usize) * ow + ox as usize) * oc + o] += xv * wv;
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

/// A transposed-convolution geometry: full output minus pads plus
/// `output_padding`.
#[allow(clippy::too_many_arguments)]
fn convt_geom(
    nhwc: [u64; 4],
    oc: u64,
    k: [u64; 2],
    s: [u64; 2],
    d: [u64; 2],
    p: [u64; 4],
    op: [u64; 2],
    group: u64,
) -> ConvGeom {
    let full = |i: usize| (nhwc[1 + i] - 1) * s[i] + d[i] * (k[i] - 1) + 1;
    let oh = full(0) - p[0] - p[2] + op[0];
    let ow = full(1) - p[1] - p[3] + op[1];
    geom(nhwc, [oh, ow, oc], k, s, d, p, group)
}

#[test]
fn conv_transpose2d_matches_reference() {
    let cases = [
        (
            "3x3 stride 2 groups 2 output padding",
            convt_geom(
                [2, 3, 4, 4],
                6,
                [3, 3],
                [2, 2],
                [1, 1],
                [1, 0, 0, 1],
                [1, 1],
                2,
            ),
        ),
        (
            "2x3 stride 1 dilation 2",
            convt_geom(
                [1, 5, 7, 3],
                5,
                [2, 3],
                [1, 1],
                [2, 2],
                [1, 2, 0, 1],
                [0, 0],
                1,
            ),
        ),
        (
            "4x4 stride 2 pad 1 (decoder upsampling)",
            convt_geom([1, 6, 5, 8], 20, [4, 4], [2, 2], [1, 1], [1; 4], [0, 0], 1),
        ),
    ];
    for (what, g) in &cases {
        let x_len = (g.n * g.h * g.w * g.c) as usize;
        let y_len = (g.n * g.oh * g.ow * g.oc) as usize;
        let wlen = (g.c * g.oc / g.group * g.kh * g.kw) as usize;
        let x = values(x_len, 31);
        let w = values(wlen, 37);
        let bias = values(g.oc as usize, 41);
        let packed = conv_transpose2d_pack_weights(g, &w).unwrap();
        for b in [None, Some(&bias[..])] {
            let want = ref_conv_transpose(g, &x, &w, b);
            for threads in [1, 3] {
                let mut y = vec![f32::NAN; y_len];
                in_pool(threads, || conv_transpose2d(g, &x, &packed, b, &mut y)).unwrap();
                assert_close(&y, &want, &format!("{what} threads={threads}"));
            }
        }
    }
}

#[test]
fn conv_transpose2d_hand_checked() {
    // x = [1, 2] (1x1x2x1), kernel [1, 10, 100] (1x3), stride 2: the full
    // output is [1, 10, 100+2, 20, 200]; pads crop one cell on the left.
    let g = convt_geom(
        [1, 1, 2, 1],
        1,
        [1, 3],
        [1, 2],
        [1, 1],
        [0, 1, 0, 0],
        [0, 0],
        1,
    );
    assert_eq!((g.oh, g.ow), (1, 4));
    let w = conv_transpose2d_pack_weights(&g, &[1.0, 10.0, 100.0]).unwrap();
    let mut y = [0.0f32; 4];
    conv_transpose2d(&g, &[1.0, 2.0], &w, Some(&[0.5]), &mut y).unwrap();
    assert_eq!(y, [10.5, 102.5, 20.5, 200.5]);
}

#[test]
fn bad_arguments_are_errors() {
    let g = conv_geom([1, 5, 7, 3], 4, [3, 3], [2, 2], [1, 1], [1, 0, 2, 1], 1);
    let w = conv2d_pack_weights(&g, &values(4 * 3 * 9, 1)).unwrap();
    let x = values(105, 2);
    let mut y = vec![0.0; (g.oh * g.ow * 4) as usize];
    let err = |r: Result<(), KernelError>| r.unwrap_err().to_string();
    assert_eq!(
        err(conv2d(&g, &x[..104], &w, None, false, &mut y)),
        "input needs 105 floats, found 104"
    );
    let short = y.len() - 1;
    assert_eq!(
        err(conv2d(&g, &x, &w, None, false, &mut y[..short])),
        format!("output needs {} floats, found {short}", y.len())
    );
    assert_eq!(
        err(conv2d(&g, &x, &w[1..], None, false, &mut y)),
        format!(
            "packed weights must hold 1 groups of {} floats, found {}",
            w.len(),
            w.len() - 1
        )
    );
    assert_eq!(
        err(conv2d(&g, &x, &w, Some(&[0.0; 3]), false, &mut y)),
        "bias needs 4 floats, found 3"
    );
    assert_eq!(
        conv2d_pack_weights(&g, &[0.0; 5]).unwrap_err().to_string(),
        "weight [4, 3, 3, 3] must hold 108 floats, found 5"
    );
    let mut bad = g;
    bad.oh += 1;
    assert_eq!(
        err(conv2d(&bad, &x, &w, None, false, &mut y)),
        "output size must be 3x3 for this geometry, found 4x3"
    );
    bad = g;
    bad.group = 2;
    assert_eq!(
        err(conv2d(&bad, &x, &w, None, false, &mut y)),
        "channels 3 (input) and 4 (output) must be multiples of group 2"
    );
    bad = g;
    bad.stride = [0, 1];
    assert_eq!(
        err(conv2d(&bad, &x, &w, None, false, &mut y)),
        "strides must be at least 1, found [0, 1]"
    );
    bad = g;
    bad.n = u64::MAX / 2;
    assert!(conv2d(&bad, &x, &w, None, false, &mut y).is_err());
    assert_eq!(
        err(depthwise_conv2d(&g, &x, &w, None, false, &mut y)),
        "depthwise convolution needs group == channels and output channels a multiple of them, \
         found group 1, 3 input and 4 output channels"
    );
    let t = convt_geom([1, 2, 2, 1], 1, [3, 3], [2, 2], [1, 1], [0; 4], [0, 0], 1);
    let mut tbad = t;
    tbad.oh += 2;
    assert_eq!(
        err(conv_transpose2d(
            &tbad,
            &[0.0; 4],
            &[0.0; 9],
            None,
            &mut [0.0; 64]
        )),
        "output height must be between 5 and 6 for this geometry, found 7"
    );
}

#[test]
fn gemm_split_covers_threads_in_both_shapes() {
    // Tall-skinny (a convolution: 3136 pixels × 64 channels) splits rows.
    let (r, c) = split(3136, 64, 14, 32, 16);
    assert!(r * c >= 16 && c == 1, "tall-skinny split {r}x{c}");
    // Short-wide (7x7 pixels × 512 channels) splits columns.
    let (r, c) = split(49, 512, 14, 32, 16);
    assert!(r * c >= 16 && c >= 8, "short-wide split {r}x{c}");
    assert_eq!(split(3136, 64, 14, 32, 1), (1, 1));
    assert_eq!(split(5, 10, 14, 32, 8), (1, 1));
}

#[test]
fn gemm_results_are_identical_across_thread_counts() {
    for &(m, n, k) in &[(1000, 40, 70), (5, 700, 300), (300, 300, 300)] {
        let a = values(m * k, 3);
        let bv = values(k * n, 5);
        let b = pack_b(k, n, &bv, n).unwrap();
        let bias = values(n, 7);
        let mut first: Option<Vec<f32>> = None;
        for threads in [1, 3] {
            let mut c = vec![0.0f32; m * n];
            let opts = GemmOptions {
                bias: Some(&bias),
                relu: true,
                threads: 64,
                ..Default::default()
            };
            in_pool(threads, || {
                gemm(m, n, k, &a, k, b.as_ref(), &mut c, n, &opts)
            })
            .unwrap();
            // Spot-check against f64 on a few elements.
            for &(i, j) in &[(0, 0), (m - 1, n - 1), (m / 2, n / 3)] {
                let mut s = bias[j] as f64;
                for p in 0..k {
                    s += a[i * k + p] as f64 * bv[p * n + j] as f64;
                }
                assert_close(&[c[i * n + j]], &[s.max(0.0)], "gemm");
            }
            match &first {
                None => first = Some(c),
                Some(f) => assert!(
                    f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "gemm {m}x{n}x{k}: 1 and 3 threads differ"
                ),
            }
        }
    }
}

/// The grouped convolution's path by its cost: RegNet's strided layer of
/// two groups of 8 and a layer of wide groups take the per-group GEMMs,
/// ResNeXt's 32 groups of 4 the direct expansion.
#[test]
fn grouped_path_follows_the_work() {
    let pays = |g: ConvGeom| direct_grouped_pays(&Dims::new(&g).unwrap());
    assert!(!pays(conv_geom([1, 32, 32, 16], 16, [3, 3], [2, 2], [1, 1], [1; 4], 2)));
    assert!(!pays(conv_geom([1, 14, 14, 64], 120, [3, 3], [1, 1], [1, 1], [1; 4], 8)));
    assert!(pays(conv_geom([1, 56, 56, 128], 128, [3, 3], [1, 1], [1, 1], [1; 4], 32)));
    assert!(pays(conv_geom([1, 16, 16, 16], 16, [3, 3], [1, 1], [1, 1], [1; 4], 4)));
}

/// The planar kernel (pixels in the lanes, `conv/planar.rs`) run directly,
/// whatever `planar_pays` would choose, on the shapes it must handle:
/// input channels copied by gathers and by 16 × 16 transposes (multiples
/// of 16 at stride 1), output channels not a multiple of its 8-wide tile or of a panel,
/// strides and dilations (phase planes), pads larger than the taps' reach
/// (skipped taps), rows narrower than a vector and wider than a block,
/// several images, one input channel; in pools of 1 and 3 threads (the
/// large cases split their rows), bit for bit the same.
#[test]
fn planar_conv_matches_reference() {
    if !Isa::Avx512.is_supported() {
        eprintln!("skipped: the planar convolution needs AVX-512F, which this CPU lacks");
        return;
    }
    let cases = [
        ("U-Net 3x3 pad 1, 16 -> 8", conv_geom([1, 32, 32, 16], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        ("3 inputs -> 3 outputs", conv_geom([1, 9, 11, 3], 3, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        ("13 outputs, 5x5 pad 2", conv_geom([2, 7, 20, 5], 13, [5, 5], [1, 1], [1, 1], [2; 4], 1)),
        ("20 outputs (tile across panels)", conv_geom([1, 6, 9, 7], 20, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        ("40 outputs", conv_geom([1, 5, 6, 4], 40, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        (
            "stride 2 asymmetric pads (four phases)",
            conv_geom([1, 13, 11, 6], 16, [3, 3], [2, 2], [1, 1], [1, 0, 2, 1], 1),
        ),
        ("stride 2x1, 2x3 kernel", conv_geom([2, 9, 10, 3], 9, [2, 3], [2, 1], [1, 1], [0, 1, 1, 0], 1)),
        (
            "stride 2x1, 16 inputs (transposed copy into two row phases)",
            conv_geom([1, 9, 19, 16], 5, [3, 3], [2, 1], [1, 1], [1; 4], 1),
        ),
        ("stride 3, dilation 2", conv_geom([1, 17, 19, 2], 5, [3, 3], [3, 3], [2, 2], [2, 1, 1, 2], 1)),
        (
            "dilation 6 pad 6 on 8x8 (taps in the padding)",
            conv_geom([1, 8, 8, 12], 11, [3, 3], [1, 1], [6, 6], [6; 4], 1),
        ),
        ("dilation 2x1", conv_geom([1, 7, 9, 4], 6, [3, 3], [1, 1], [2, 1], [2, 1, 2, 1], 1)),
        ("1x1 stride 2 pad 1", conv_geom([1, 6, 7, 8], 8, [1, 1], [2, 2], [1, 1], [1; 4], 1)),
        ("one input channel, no pad", conv_geom([1, 10, 5, 1], 4, [3, 3], [1, 1], [1, 1], [0; 4], 1)),
        ("wide rows, split over threads", conv_geom([1, 40, 70, 16], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        ("two images, split", conv_geom([2, 30, 33, 16], 12, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        ("one output channel", conv_geom([1, 12, 13, 5], 1, [3, 3], [1, 1], [1, 1], [1; 4], 1)),
        (
            "32 inputs (two transposed channel blocks), rows of 21 (a tail of 5)",
            conv_geom([1, 9, 21, 32], 6, [3, 3], [1, 1], [1, 1], [1, 2, 1, 0], 1),
        ),
        ("5x5 kernel over a 3x3 input, pad 2", conv_geom([1, 3, 3, 4], 6, [5, 5], [1, 1], [1, 1], [2; 4], 1)),
        ("one output row, stride 2", conv_geom([1, 3, 17, 6], 7, [3, 3], [2, 2], [1, 1], [0, 1, 0, 1], 1)),
    ];
    for (what, g) in &cases {
        check_conv_with(g, what, |g, x, w, b, post, y| {
            let d = Dims::new(g).unwrap();
            conv2d_planar(&d, x, w, b, post, y, rayon::current_num_threads()).unwrap();
        });
    }
}

/// The planar kernel by its cost: U-Net's narrow layers take it; wide,
/// grouped and small dilated layers keep the implicit GEMM; a large image
/// runs in bands that fit the scratch budget.
#[test]
fn planar_path_follows_the_work() {
    if !Isa::Avx512.is_supported() {
        eprintln!("skipped: the planar convolution needs AVX-512F, which this CPU lacks");
        return;
    }
    let pays = |g: ConvGeom| planar_pays(&Dims::new(&g).unwrap());
    assert!(pays(conv_geom([1, 32, 32, 16], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1)));
    assert!(pays(conv_geom([1, 32, 32, 8], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1)));
    assert!(pays(conv_geom([1, 40, 40, 3], 16, [3, 3], [2, 2], [1, 1], [1; 4], 1)));
    // DeepLab's 32×32×16 → 24 at stride 2: measured 23 µs planar, 19-21 GEMM.
    assert!(!pays(conv_geom([1, 32, 32, 16], 24, [3, 3], [2, 2], [1, 1], [1; 4], 1)));
    assert!(!pays(conv_geom([1, 8, 8, 32], 32, [3, 3], [1, 1], [6, 6], [6; 4], 1)));
    assert!(!pays(conv_geom([1, 56, 56, 64], 64, [3, 3], [1, 1], [1, 1], [1; 4], 1)));
    assert!(!pays(conv_geom([1, 16, 16, 16], 16, [3, 3], [1, 1], [1, 1], [1; 4], 2)));
    // Planes of the whole image would pass the scratch budget (16 × 514
    // × 514 floats): it runs in bands.
    let big = Dims::new(&conv_geom([1, 512, 512, 16], 8, [3, 3], [1, 1], [1, 1], [1; 4], 1)).unwrap();
    assert!(planar_pays(&big));
    let (rows, _) = planar_bands(&big, 1).unwrap();
    assert!(rows < 512 && rows > 64, "{rows} rows per band");
}
