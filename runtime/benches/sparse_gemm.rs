//! Does a 2:4 sparse fp32 GEMM that skips the zero half beat the dense
//! GEMM on this CPU? (issue 20; docs/sparsity.md records the answer.)
//!
//! Both compute `y (m × n) = x (m × k) · wᵀ` for a weight `w (n × k)`
//! with two non-zeros in every four along k, single-threaded, in the same
//! run:
//! - **dense**: `aoc_runtime::kernels::gemm` on the decompressed weight
//!   packed into its panels (what aoc runs today: the AVX-512 14×32
//!   register tile, one broadcast of x against two vectors of w);
//! - **sparse**: the best form found for skipping zeros with AVX-512: the
//!   rows of x in the vector lanes. x is transposed into panels of 64
//!   rows (`k × 64`); for each k-block of 128 (32 KiB of a panel, in L1)
//!   and block of 4 features,
//!   16 accumulators (4 vectors of rows × 4 features) take, for each
//!   kept value, one broadcast of the value against the 4 row vectors of
//!   x at its k (a vector load per FMA: the kept positions differ per
//!   feature, so x vectors cannot be shared across features as the dense
//!   kernel shares w). The kept values and their x offsets are packed at
//!   load time, per feature block. Its time includes transposing x into
//!   panels and transposing the result back.
//!
//! `cargo bench -p aoc-runtime --bench sparse_gemm [-- --shape M,N,K]`;
//! prints ms and GFLOP/s counted as dense (2·m·n·k) for each, the ratio,
//! and the sparse inner loops alone (x already in panels, the result left
//! transposed): an upper bound for any layout work moved elsewhere. M must be a multiple of 64 and N of 4 (the prototype has no
//! edge code).

use std::hint::black_box;

#[allow(dead_code)]
mod common;
use common::best_of;

use aoc_runtime::kernels::{GemmOptions, Isa, gemm, pack_b};

/// Rows per panel (4 vectors of 16) and features per block.
const MR: usize = 64;
const NF: usize = 4;
/// k per block: a panel's k-block (128 × 64 × 4 bytes = 32 KiB) stays in L1.
const KC: usize = 128;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let shapes: Vec<[usize; 3]> = match args.iter().position(|a| a == "--shape") {
        Some(i) => {
            let dims: Option<Vec<usize>> = args.get(i + 1).and_then(|s| s.split(',').map(|x| x.parse().ok()).collect());
            match dims.as_deref() {
                Some(&[m, n, k]) if m % MR == 0 && n % NF == 0 && k % KC == 0 && m > 0 && n > 0 => vec![[m, n, k]],
                _ => {
                    eprintln!("error: --shape takes M,N,K with M a multiple of {MR}, N of {NF}, K of {KC}");
                    std::process::exit(2);
                }
            }
        }
        // BERT-base FFN at 128 tokens (both GEMMs), a square product, a
        // ResNet-50 1×1 convolution at 56² (rows = pixels).
        None => vec![[128, 3072, 768], [128, 768, 3072], [512, 1024, 1024], [3136, 256, 128]],
    };
    if !Isa::Avx512.is_supported() {
        println!("skipped: this CPU has no AVX-512 (the sparse prototype needs it)");
        return;
    }
    println!(
        "{:>16} {:>10} {:>9} {:>10} {:>9} {:>13} {:>14} {:>13}",
        "m x n x k", "dense ms", "GFLOP/s", "sparse ms", "GFLOP/s", "sparse/dense", "inner loop ms", "inner/dense"
    );
    for [m, n, k] in shapes {
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
        // A 2:4 weight: in each group of four the two of largest magnitude.
        let mut w: Vec<f32> = (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1 + (i % 3) as f32 * 0.01).collect();
        for g in w.chunks_mut(4) {
            let mut order = [0usize, 1, 2, 3];
            order.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
            for &i in &order[2..] {
                g[i] = 0.0;
            }
        }
        // Dense: B = wᵀ (k × n) packed as the lowering packs it.
        let mut b = vec![0f32; k * n];
        for j in 0..n {
            for kk in 0..k {
                b[kk * n + j] = w[j * k + kk];
            }
        }
        let packed = pack_b(k, n, &b, n).unwrap();
        let mut yd = vec![0f32; m * n];
        let opts = GemmOptions { isa: Some(Isa::Avx512), threads: 1, ..Default::default() };
        let dense = best_of(|| {
            gemm(m, n, k, &x, k, packed.as_ref(), &mut yd, n, &opts).unwrap();
            black_box(&yd);
        });
        let sw = SparseWeight::new(&w, n, k);
        let mut ys = vec![0f32; m * n];
        let mut panels = vec![0f32; k * m];
        let mut yt = vec![0f32; n * m];
        let sparse = best_of(|| {
            // SAFETY: AVX-512 is supported (checked above).
            unsafe { sparse_gemm(&x, m, k, &sw, &mut panels, &mut yt, &mut ys, true) };
            black_box(&ys);
        });
        // The inner loops alone (x already in panels, yt not transposed).
        let kernel = best_of(|| {
            // SAFETY: as above.
            unsafe { sparse_gemm(&x, m, k, &sw, &mut panels, &mut yt, &mut ys, false) };
            black_box(&yt);
        });
        let err = yd.iter().zip(&ys).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let scale = yd.iter().fold(1f32, |a, v| a.max(v.abs()));
        assert!(err <= 1e-4 * scale, "{m}x{n}x{k}: sparse differs from dense by {err}");
        let gf = |s: f64| 2.0 * (m * n * k) as f64 / s / 1e9;
        println!(
            "{:>16} {:>10.3} {:>9.1} {:>10.3} {:>9.1} {:>12.2}x {:>14.3} {:>12.2}x",
            format!("{m}x{n}x{k}"),
            dense * 1e3,
            gf(dense),
            sparse * 1e3,
            gf(sparse),
            dense / sparse,
            kernel * 1e3,
            dense / kernel
        );
    }
}

/// The kept values and their x offsets (`k · MR`, in floats, within a
/// panel), per block of `NF` features, per k-block, interleaved by kept
/// position: `[(value, offset); NF]` for each position.
struct SparseWeight {
    n: usize,
    k: usize,
    values: Vec<f32>,
    offsets: Vec<u32>,
}

impl SparseWeight {
    fn new(w: &[f32], n: usize, k: usize) -> SparseWeight {
        let (mut values, mut offsets) = (Vec::new(), Vec::new());
        for fb in (0..n).step_by(NF) {
            for kb in (0..k).step_by(KC) {
                // Each feature's kept positions in this k-block (two per
                // group of four; zeros kept as zeros where fewer).
                let kept: Vec<Vec<usize>> = (0..NF)
                    .map(|f| {
                        let row = &w[(fb + f) * k..(fb + f + 1) * k];
                        (kb..kb + KC)
                            .step_by(4)
                            .flat_map(|g| {
                                let mut nz: Vec<usize> = (g..g + 4).filter(|&i| row[i] != 0.0).collect();
                                nz.resize(2, g);
                                nz
                            })
                            .collect()
                    })
                    .collect();
                for p in 0..KC / 2 {
                    for (f, kf) in kept.iter().enumerate() {
                        values.push(w[(fb + f) * k + kf[p]]);
                        offsets.push(((kf[p] - kb) * MR) as u32);
                    }
                }
            }
        }
        SparseWeight { n, k, values, offsets }
    }
}

/// `ys = x · wᵀ` through panels of x (`k × MR` each) and a transposed
/// result `yt` (`n × m`).
#[target_feature(enable = "avx512f")]
unsafe fn sparse_gemm(x: &[f32], m: usize, k: usize, w: &SparseWeight, panels: &mut [f32], yt: &mut [f32], ys: &mut [f32], transposes: bool) {
    // SAFETY: every offset lies inside its buffer: panels hold m/64 panels
    // of k × 64, yt n × m, the weight's offsets are below KC · 64.
    unsafe {
        use std::arch::x86_64::*;
        let n = w.n;
        debug_assert_eq!(w.k, k);
        // x → panels: panel p holds rows 64p … 64p+63, k-major.
        for p in (0..m / MR).filter(|_| transposes) {
            let panel = &mut panels[p * k * MR..(p + 1) * k * MR];
            for r in 0..MR {
                let row = &x[(p * MR + r) * k..(p * MR + r + 1) * k];
                for (kk, &v) in row.iter().enumerate() {
                    panel[kk * MR + r] = v;
                }
            }
        }
        let per_kb = KC / 2 * NF;
        // Panel-block (32 KiB) outer, features inner, so x stays in L1; the
        // accumulators go through yt between k-blocks.
        for p in 0..m / MR {
            let panel = panels.as_ptr().add(p * k * MR);
            for kb in 0..k / KC {
                let base = panel.add(kb * KC * MR);
                for fb in 0..n / NF {
                    let out = |f: usize, r: usize| (fb * NF + f) * m + p * MR + 16 * r;
                    let mut acc = [_mm512_setzero_ps(); 16];
                    if kb > 0 {
                        for f in 0..NF {
                            for r in 0..4 {
                                acc[f * 4 + r] = _mm512_loadu_ps(yt.as_ptr().add(out(f, r)));
                            }
                        }
                    }
                    let at = (fb * (k / KC) + kb) * per_kb;
                    let vals = w.values.as_ptr().add(at);
                    let offs = w.offsets.as_ptr().add(at);
                    for q in 0..KC / 2 {
                        for f in 0..NF {
                            let v = _mm512_set1_ps(*vals.add(q * NF + f));
                            let xp = base.add(*offs.add(q * NF + f) as usize);
                            for r in 0..4 {
                                acc[f * 4 + r] = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(16 * r)), v, acc[f * 4 + r]);
                            }
                        }
                    }
                    for f in 0..NF {
                        for r in 0..4 {
                            _mm512_storeu_ps(yt.as_mut_ptr().add(out(f, r)), acc[f * 4 + r]);
                        }
                    }
                }
            }
        }
        // yt (n × m) → ys (m × n).
        for j in (0..n).filter(|_| transposes) {
            for i in 0..m {
                ys[i * n + j] = yt[j * m + i];
            }
        }
    }
}
