//! Tests of the Winograd convolution against a direct f64 convolution
//! written here (the weights transformed as `aoc_ir::ops::winograd`'s
//! `transform_weight` does: `G g Gᵀ` in f64, rounded once to f32), on odd
//! sizes, pads, batch 2, forced block sizes and rayon pools of 1 and 3;
//! plus a timing against the im2col convolution (printed with
//! `--nocapture`).

use std::time::Instant;

use super::*;
use crate::kernels::Isa;
use crate::kernels::conv::{conv2d, conv2d_pack_weights};

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

/// Runs `f` inside a rayon pool of `threads` threads.
fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("test thread pool")
        .install(f)
}

/// The geometry of a 3×3 stride-1 convolution, output size computed.
fn geom3([n, h, w, c]: [u64; 4], oc: u64, pads: [u64; 4]) -> ConvGeom {
    ConvGeom {
        n,
        h,
        w,
        c,
        oh: h + pads[0] + pads[2] - 2,
        ow: w + pads[1] + pads[3] - 2,
        oc,
        kh: 3,
        kw: 3,
        stride: [1, 1],
        dilation: [1, 1],
        pads,
        group: 1,
    }
}

/// G of F(2×2, 3×3) and F(4×4, 3×3), as in `aoc_ir::ops::winograd`.
fn g_matrix(tile: usize) -> Vec<[f64; 3]> {
    match tile {
        2 => vec![
            [1.0, 0.0, 0.0],
            [0.5, 0.5, 0.5],
            [0.5, -0.5, 0.5],
            [0.0, 0.0, 1.0],
        ],
        4 => vec![
            [1.0 / 4.0, 0.0, 0.0],
            [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
            [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
            [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
            [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
            [0.0, 0.0, 1.0],
        ],
        _ => panic!("test asks for tile {tile}"),
    }
}

/// `U[i][j][k][c] = (G w[k][c] Gᵀ)[i][j]` of OIHW 3×3 weights, f64 rounded
/// once to f32: the operand `core.winograd_conv2d` receives.
fn transform(tile: usize, oc: usize, c: usize, w: &[f32]) -> Vec<f32> {
    let g = g_matrix(tile);
    let a = tile + 2;
    let mut u = vec![0.0f32; a * a * oc * c];
    for k in 0..oc {
        for ci in 0..c {
            let f = &w[(k * c + ci) * 9..][..9];
            for i in 0..a {
                for j in 0..a {
                    let mut s = 0.0f64;
                    for p in 0..3 {
                        for q in 0..3 {
                            s += g[i][p] * f[p * 3 + q] as f64 * g[j][q];
                        }
                    }
                    u[((i * a + j) * oc + k) * c + ci] = s as f32;
                }
            }
        }
    }
    u
}

/// Direct NHWC convolution in f64 with OIHW weights, then bias and relu.
fn direct(g: &ConvGeom, x: &[f32], w: &[f32], bias: Option<&[f32]>, relu: bool) -> Vec<f64> {
    let [n, h, wd, c, oh, ow, oc] = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc].map(|v| v as usize);
    let (pt, pl) = (g.pads[0] as isize, g.pads[1] as isize);
    let mut y = vec![0.0f64; n * oh * ow * oc];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for k in 0..oc {
                    let mut s = bias.map_or(0.0, |bv| bv[k] as f64);
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let iy = oy as isize + ky as isize - pt;
                            let ix = ox as isize + kx as isize - pl;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                continue;
                            }
                            let xp = ((b * h + iy as usize) * wd + ix as usize) * c;
                            for ci in 0..c {
                                s += x[xp + ci] as f64 * w[((k * c + ci) * 3 + ky) * 3 + kx] as f64;
                            }
                        }
                    }
                    y[((b * oh + oy) * ow + ox) * oc + k] = if relu { s.max(0.0) } else { s };
                }
            }
        }
    }
    y
}

/// Asserts `|got - want| <= tol · max|want|` everywhere.
fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * scale,
            "{what}: element {i} is {g}, expected {w} (scale {scale})"
        );
    }
}

/// The stated tolerance of tile `m`, relative to max|y|.
fn tol(tile: usize) -> f64 {
    if tile == 2 { 1e-4 } else { 1e-3 }
}

/// Runs the kernel on random data; returns (output, direct reference).
fn case(
    g: &ConvGeom,
    tile: usize,
    with_bias: bool,
    relu: bool,
    threads: usize,
    rows: Option<usize>,
) -> (Vec<f32>, Vec<f64>) {
    let [n, h, w, c, oh, ow, oc] = [g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc].map(|v| v as usize);
    let x = values(n * h * w * c, 1);
    let wt = values(oc * c * 9, 2);
    let bias = with_bias.then(|| values(oc, 3));
    let packed = winograd_pack_weights(tile, c, oc, &transform(tile, oc, c, &wt)).unwrap();
    // One spare element on each buffer: only the prefix is touched.
    let mut y = vec![f32::NAN; n * oh * ow * oc + 1];
    in_pool(threads, || {
        run(g, tile, &x, &packed, bias.as_deref(), relu, &mut y, rows)
    })
    .unwrap();
    assert!(y.pop().unwrap().is_nan(), "wrote past the output");
    (y, direct(g, &x, &wt, bias.as_deref(), relu))
}

#[test]
fn winograd_hand_checked_ones() {
    // All-ones 4×4 image and 3×3 filter, pads 1: each output counts the
    // window taps inside the image: 4 at corners, 6 on edges, 9 inside.
    for tile in [2, 4] {
        let g = geom3([1, 4, 4, 1], 1, [1, 1, 1, 1]);
        let u = transform(tile, 1, 1, &[1.0; 9]);
        let packed = winograd_pack_weights(tile, 1, 1, &u).unwrap();
        let mut y = vec![0.0f32; 16];
        winograd_conv2d(&g, tile, &[1.0; 16], &packed, Some(&[0.5]), false, &mut y).unwrap();
        #[rustfmt::skip]
        let want = [
            4.0, 6.0, 6.0, 4.0,
            6.0, 9.0, 9.0, 6.0,
            6.0, 9.0, 9.0, 6.0,
            4.0, 6.0, 6.0, 4.0,
        ].map(|v: f32| v + 0.5);
        for (i, (&g, &w)) in y.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() < 1e-5,
                "tile {tile}: pixel {i} is {g}, expected {w}"
            );
        }
    }
}

#[test]
fn winograd_pack_weights_layout() {
    // Tile 2: 16 points of a 2 (c) × 3 (oc) matrix each; u = its index.
    let u: Vec<f32> = (0..16 * 3 * 2).map(|i| i as f32).collect();
    let p = winograd_pack_weights(2, 2, 3, &u).unwrap();
    // One panel of 16 columns × 2 rows per point.
    assert_eq!(p.len(), 16 * 32);
    assert_eq!(winograd_packed_len(2, 2, 3).unwrap(), 16 * 32);
    // Point 0, row c=1, column k=2 is u[0][0][2][1] = (2·2 + 1) = 5.
    assert_eq!(p[16 + 2], 5.0);
    // Point 1, row c=0, column k=1 is u[0][1][1][0] = (1·3 + 1)·2 = 8.
    assert_eq!(p[32 + 1], 8.0);
    // Columns past oc are zero.
    assert_eq!(p[3], 0.0);
    assert_eq!(p[32 + 16 + 15], 0.0);
    assert!(winograd_pack_weights(2, 2, 3, &u[1..]).is_err());
    assert!(winograd_pack_weights(3, 2, 3, &u).is_err());
}

#[test]
fn winograd_odd_sizes_pads_batch_and_pools() {
    // H, W not multiples of the tile, c and oc not multiples of 16,
    // symmetric, asymmetric and no pads, batch 2.
    let shapes = [
        ([2, 7, 9, 5], 19, [1, 1, 1, 1]),
        ([2, 6, 5, 3], 17, [0, 0, 0, 0]),
        ([2, 5, 8, 21], 6, [1, 0, 2, 1]),
        ([1, 3, 3, 2], 1, [0, 0, 0, 0]),
    ];
    for tile in [2, 4] {
        for (dims, oc, pads) in shapes {
            let g = geom3(dims, oc, pads);
            let what = format!("tile {tile} {dims:?}→{oc} pads {pads:?}");
            let (one, want) = case(&g, tile, true, false, 1, None);
            assert_close(&one, &want, tol(tile), &what);
            let (three, _) = case(&g, tile, true, false, 3, None);
            assert_eq!(one, three, "{what}: pools of 1 and 3 threads differ");
        }
    }
}

#[test]
fn winograd_blocks_bias_relu() {
    // Several blocks per image (forced and chosen), the last one short;
    // the result is the same whatever the blocking.
    let g = geom3([2, 23, 19, 20], 33, [1, 1, 1, 1]);
    for tile in [2, 4] {
        let (base, want) = case(&g, tile, true, true, 1, None);
        assert_close(&base, &want, tol(tile), &format!("tile {tile}"));
        assert!(base.contains(&0.0) && base.iter().all(|&v| v >= 0.0));
        for (threads, rows) in [(1, Some(1)), (3, Some(2)), (3, None), (2, Some(100))] {
            let (got, _) = case(&g, tile, true, true, threads, rows);
            assert_eq!(got, base, "tile {tile}, {threads} threads, rows {rows:?}");
        }
        let (plain, want) = case(&g, tile, false, false, 3, None);
        assert_close(&plain, &want, tol(tile), &format!("tile {tile}, no bias"));
    }
}

#[test]
fn winograd_rejects_bad_arguments() {
    let g = geom3([1, 6, 6, 4], 8, [1, 1, 1, 1]);
    let packed = winograd_pack_weights(2, 4, 8, &vec![0.0; 16 * 32]).unwrap();
    let x = vec![0.0f32; 6 * 6 * 4];
    let mut y = vec![0.0f32; 6 * 6 * 8];
    let msg = |r: Result<(), KernelError>| r.unwrap_err().message().to_string();
    assert!(winograd_conv2d(&g, 2, &x, &packed, None, false, &mut y).is_ok());
    let e = msg(winograd_conv2d(&g, 3, &x, &packed, None, false, &mut y));
    assert!(e.contains("tile must be 2 or 4"), "{e}");
    let e = msg(winograd_conv2d(&g, 4, &x, &packed, None, false, &mut y));
    assert!(e.contains("packed transformed weights"), "{e}");
    let e = msg(winograd_conv2d(
        &g,
        2,
        &x[1..],
        &packed,
        None,
        false,
        &mut y,
    ));
    assert!(e.contains("input needs"), "{e}");
    let e = msg(winograd_conv2d(
        &g,
        2,
        &x,
        &packed,
        None,
        false,
        &mut y[1..],
    ));
    assert!(e.contains("output needs"), "{e}");
    let e = msg(winograd_conv2d(
        &g,
        2,
        &x,
        &packed,
        Some(&[0.0; 7]),
        false,
        &mut y,
    ));
    assert!(e.contains("bias needs"), "{e}");
    let strided = ConvGeom {
        stride: [2, 2],
        oh: 3,
        ow: 3,
        ..g
    };
    let e = msg(winograd_conv2d(
        &strided, 2, &x, &packed, None, false, &mut y,
    ));
    assert!(e.contains("stride 1"), "{e}");
    let five = ConvGeom {
        kh: 5,
        kw: 5,
        oh: 4,
        ow: 4,
        ..g
    };
    assert!(winograd_conv2d(&five, 2, &x, &packed, None, false, &mut y).is_err());
    let wrong_out = ConvGeom { oh: 5, ..g };
    let e = msg(winograd_conv2d(
        &wrong_out, 2, &x, &packed, None, false, &mut y,
    ));
    assert!(e.contains("output size must be 6x6"), "{e}");
}

#[test]
fn winograd_bench_vs_im2col() {
    // ResNet's 56×56×64→64 3×3 conv, one thread: Winograd F(2×2) and F(4×4)
    // against the im2col GEMM (printed; run with --release --nocapture).
    let g = geom3([1, 56, 56, 64], 64, [1, 1, 1, 1]);
    let (c, oc) = (64, 64);
    let x = values(56 * 56 * c, 4);
    let wt = values(oc * c * 9, 5);
    let bias = values(oc, 6);
    let reps = if cfg!(debug_assertions) { 2 } else { 20 };
    let time = |f: &mut dyn FnMut()| {
        f(); // warm caches and scratch
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let want = direct(&g, &x, &wt, Some(&bias), true);
    in_pool(1, || {
        let mut y = vec![0.0f32; 56 * 56 * oc];
        let w_im2col = conv2d_pack_weights(&g, &wt).unwrap();
        let t_im2col = time(&mut || {
            conv2d(&g, &x, &w_im2col, Some(&bias), true, &mut y).unwrap();
        });
        assert_close(&y, &want, 1e-4, "im2col");
        let gflop = 2.0 * (56 * 56 * 64 * 64 * 9) as f64 * 1e-9;
        println!(
            "1x56x56x64->64 3x3, 1 thread, {}: im2col {:.3} ms ({:.1} GFLOP/s direct-equivalent)",
            Isa::best(),
            t_im2col * 1e3,
            gflop / t_im2col
        );
        for tile in [2, 4] {
            let packed = winograd_pack_weights(tile, c, oc, &transform(tile, oc, c, &wt)).unwrap();
            let t = time(&mut || {
                winograd_conv2d(&g, tile, &x, &packed, Some(&bias), true, &mut y).unwrap();
            });
            assert_close(&y, &want, tol(tile), &format!("winograd F({tile}x{tile})"));
            println!(
                "  winograd F({tile}x{tile},3x3) {:.3} ms ({:.1} GFLOP/s direct-equivalent, {:.2}x im2col)",
                t * 1e3,
                gflop / t,
                t_im2col / t
            );
        }
    });
}
