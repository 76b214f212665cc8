//! `gemm_simt` kernels *run* on the host (`host_sim`: LLVM's JIT, a
//! block's threads as OS threads, so shared memory and barriers behave as
//! on the GPU). Results, with and without pointwise epilogues, are compared with
//! a naive product of the `GemmSpec`'s semantics, for every candidate tile
//! (16-byte and scalar paths, edge guards, k-split reduction, grid.z).

use aoc_backend_ptx::ModuleText;
use aoc_backend_ptx::kernels::gemm_simt::{SimtTile, gemm_f32_with, pick_tile};
use aoc_backend_ptx::kernels::{AMode, GemmEpilogue, GemmSpec};

use super::super::host_sim::{Mem, f32_bytes, with_jit};
use super::{cases, conv, dense, geom, residual_relu, scale_cols_add_i8};

/// Pseudo-random values in [-1, 1) (an LCG), seeded.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Elements a strided operand spans.
fn span(strides: [u64; 3], extents: [u64; 3]) -> usize {
    (0..3)
        .map(|d| strides[d] * extents[d].saturating_sub(1))
        .sum::<u64>() as usize
        + 1
}

/// `A_b[i][kk]` as `AMode` defines it.
fn a_elem(s: &GemmSpec, a: &[f32], b: u64, i: u64, kk: u64) -> f32 {
    match s.a {
        AMode::Strided { batch, row, col } => a[(b * batch + i * row + kk * col) as usize],
        AMode::Conv(g) => {
            let cg = g.c / g.group;
            let (img, oy, ox) = (i / (g.oh * g.ow), i / g.ow % g.oh, i % g.ow);
            let (ky, kx, ci) = (kk / cg / g.kw, kk / cg % g.kw, kk % cg);
            let y = (oy * g.stride[0] + ky * g.dilation[0]) as i64 - g.pads[0] as i64;
            let x = (ox * g.stride[1] + kx * g.dilation[1]) as i64 - g.pads[1] as i64;
            if y < 0 || x < 0 || y >= g.h as i64 || x >= g.w as i64 {
                return 0.0;
            }
            a[(((img * g.h + y as u64) * g.w + x as u64) * g.c + b * cg + ci) as usize]
        }
    }
}

/// One product to run: the spec, its epilogue with its operands' bytes,
/// and the epilogue's meaning for the reference, `f(x, b, i, j)`.
struct Case {
    name: &'static str,
    spec: GemmSpec,
    epi: Option<(GemmEpilogue, Vec<Vec<u8>>)>,
    f: Box<dyn Fn(f32, u64, u64, u64) -> f32>,
}

/// Runs `case` with every candidate tile and compares C with the naive
/// product: every element of the view within fp32 rounding, every other
/// element of C's buffer untouched.
fn check(case: &Case) {
    let s = &case.spec;
    let a_len = match s.a {
        AMode::Strided { batch, row, col } => span([batch, row, col], [s.batch, s.m, s.k]),
        AMode::Conv(g) => (g.n * g.h * g.w * g.c) as usize,
    };
    let a = values(a_len, 1);
    let b = values(span(s.b_strides, [s.batch, s.k, s.n]), 2);
    let bias = s
        .bias
        .map(|st| values(span([st, 0, 1], [s.batch, 1, s.n]), 3));
    let c_len = span(s.c_strides, [s.batch, s.m, s.n]);
    let mut want = vec![f32::from_bits(0x7fc0_1234); c_len];
    for bt in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = bias
                    .as_ref()
                    .map_or(0.0, |v| f64::from(v[(bt * s.bias.unwrap() + j) as usize]));
                for kk in 0..s.k {
                    let bv = b
                        [(bt * s.b_strides[0] + kk * s.b_strides[1] + j * s.b_strides[2]) as usize];
                    acc += f64::from(a_elem(s, &a, bt, i, kk)) * f64::from(bv);
                }
                let mut x = acc as f32;
                if s.relu {
                    x = x.max(0.0);
                }
                let [c0, c1, c2] = s.c_strides;
                want[(bt * c0 + i * c1 + j * c2) as usize] = (case.f)(x, bt, i, j);
            }
        }
    }
    let mut m = ModuleText::new();
    let tiles: Vec<SimtTile> = SimtTile::CANDIDATES.to_vec();
    assert!(tiles.contains(&pick_tile(s)));
    let mut geoms = Vec::new();
    for (ti, t) in tiles.iter().enumerate() {
        let name = format!("{}_t{ti}", case.name);
        let epi = case.epi.as_ref().map(|e| &e.0);
        geoms.push((
            name.clone(),
            gemm_f32_with(&mut m, &name, s, *t, epi).unwrap(),
        ));
    }
    with_jit(&m.finish(), |run| {
        for (name, g) in &geoms {
            let mut bufs = vec![Mem::from_f32s(&a), Mem::from_f32s(&b)];
            bufs.extend(bias.as_deref().map(Mem::from_f32s));
            bufs.push(Mem::from_f32s(&vec![f32::from_bits(0x7fc0_1234); c_len]));
            let ci = bufs.len() - 1;
            for x in case.epi.iter().flat_map(|e| &e.1) {
                bufs.push(Mem::new(x, 0));
            }
            let mut refs: Vec<&mut Mem> = bufs.iter_mut().collect();
            run(name, *g, &mut refs);
            let got = bufs[ci].to_f32s();
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_nan() {
                    g.to_bits() == w.to_bits()
                } else {
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs())
                };
                assert!(ok, "{name}: C[{o}] = {g}, want {w}");
            }
            for (i, x) in case.epi.iter().flat_map(|e| &e.1).enumerate() {
                assert_eq!(bufs[ci + 1 + i].bytes(), &x[..], "{name}: operand changed");
            }
        }
    });
}

#[test]
fn gemm_simt_kernels_run_like_the_spec() {
    // Dense, aligned (16-byte paths), bias and relu, then relu(x + r).
    let s = GemmSpec {
        bias: Some(0),
        relu: true,
        ..dense(70, 68, 40)
    };
    let r = values(70 * 68, 10);
    let rr = r.clone();
    check(&Case {
        name: "dense_res",
        spec: s,
        epi: Some((residual_relu([0, 68, 1]), vec![f32_bytes(&r)])),
        f: Box::new(move |x, _, i, j| (x + rr[(i * 68 + j) as usize]).max(0.0)),
    });
    // Batched, unaligned, strided: x · s[b][j] + q[b][j][i] (an i8 tensor
    // transposed against C).
    let s = cases()
        .into_iter()
        .find(|c| c.0 == "unaligned_strided")
        .unwrap()
        .1;
    let (bt, m, n) = (s.batch, s.m, s.n);
    let sc = values((bt * n) as usize, 11);
    let q: Vec<u8> = values((bt * n * m) as usize, 12)
        .iter()
        .map(|v| ((v * 100.0) as i8) as u8)
        .collect();
    let mut e = scale_cols_add_i8([n * m, 1, m]);
    e.strides[0] = [n, 0, 1];
    let (sc2, q2) = (sc.clone(), q.clone());
    check(&Case {
        name: "unaligned_scale_i8",
        spec: s,
        epi: Some((e, vec![f32_bytes(&sc), q])),
        f: Box::new(move |x, b, i, j| {
            x * sc2[(b * n + j) as usize] + f32::from(q2[(b * n * m + j * m + i) as usize] as i8)
        }),
    });
    // Grouped convolution (grid.z = 2) with an NHWC residual laid out as C.
    let s = conv(geom(2, 7, 8, 16, 3, 1, 1, 2), true, false);
    let r = values(span(s.c_strides, [s.batch, s.m, s.n]), 13);
    let (rr, c) = (r.clone(), s.c_strides);
    check(&Case {
        name: "conv_res",
        spec: s,
        epi: Some((residual_relu(c), vec![f32_bytes(&r)])),
        f: Box::new(move |x, b, i, j| (x + rr[(b * c[0] + i * c[1] + j * c[2]) as usize]).max(0.0)),
    });
    // Without an epilogue: three batches on grid.z, A broadcast.
    let s = cases()
        .into_iter()
        .find(|c| c.0 == "batch_broadcast")
        .unwrap()
        .1;
    check(&Case {
        name: "batch_plain",
        spec: s,
        epi: None,
        f: Box::new(|x, _, _, _| x),
    });
}
