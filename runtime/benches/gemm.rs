//! fp32 GEMM micro-kernel benchmark: GFLOP/s of `aoc_runtime::kernels::gemm`
//! for 512³, 1024³ and 2048³ per supported ISA level, and the ratio to the
//! core's FMA peak measured in the same run with a register-only loop (12
//! independent accumulators, no memory traffic).
//!
//! `cargo bench -p aoc-runtime --bench gemm [-- --threads N] [-- --quick]
//! [-- --shape M,N,K]` (`--shape`: that product alone, e.g. a model's layer).

use std::hint::black_box;
use std::time::Instant;

mod common;
use common::best_of;

use aoc_runtime::kernels::{GemmOptions, Isa, gemm, pack_b};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = common::threads_arg(&args);
    let quick = args.iter().any(|a| a == "--quick");
    let shape: Option<[usize; 3]> = args.iter().position(|a| a == "--shape").map(|i| {
        let dims: Option<Vec<usize>> = args.get(i + 1).and_then(|s| s.split(',').map(|x| x.parse().ok()).collect());
        match dims.as_deref() {
            Some(&[m, n, k]) if m > 0 && n > 0 && k > 0 => [m, n, k],
            _ => {
                eprintln!("error: --shape takes M,N,K (three positive integers)");
                std::process::exit(2);
            }
        }
    });
    let sizes: Vec<[usize; 3]> = match shape {
        Some(s) => vec![s],
        None if quick => vec![[512; 3]],
        None => vec![[512; 3], [1024; 3], [2048; 3]],
    };

    println!("best isa: {}, threads: {threads}", Isa::best());
    let peak512 = peak(Isa::Avx512);
    let peak2 = peak(Isa::Avx2);
    for (isa, p) in [(Isa::Avx512, peak512), (Isa::Avx2, peak2)] {
        match p {
            Some(g) => println!("peak {isa:6} FMA (12 accumulators, 1 thread): {g:8.1} GFLOP/s"),
            None => println!("peak {isa:6}: skipped, this cpu does not support it"),
        }
    }
    println!(
        "{:7} {:>5} {:>10} {:>9} {:>13} {:>14}",
        "isa", "size", "ms", "GFLOP/s", "% own peak", "% avx512 peak"
    );
    for isa in Isa::ALL {
        if !isa.is_supported() {
            println!("{isa:7} skipped: this cpu does not support it");
            continue;
        }
        for &[m, n, k] in &sizes {
            if isa == Isa::Scalar && m * n * k > 512 * 512 * 512 {
                continue; // minutes per run; 512³ shows its level
            }
            let secs = time_gemm(isa, [m, n, k], threads);
            let gflops = 2.0 * (m * n * k) as f64 / secs / 1e9;
            let own = match isa {
                Isa::Avx512 => peak512,
                Isa::Avx2 => peak2,
                Isa::Scalar => None,
            };
            let pct = |p: Option<f64>| {
                p.map_or("-".to_string(), |p| {
                    format!("{:.1}%", 100.0 * gflops / (p * threads as f64))
                })
            };
            let size = if m == n && n == k { m.to_string() } else { format!("{m}x{n}x{k}") };
            println!(
                "{:7} {:>5} {:>10.3} {:>9.1} {:>13} {:>14}",
                isa.name(),
                size,
                secs * 1e3,
                gflops,
                pct(own),
                pct(peak512)
            );
        }
    }
}

/// Best time of several runs of an `m×n×k` GEMM (overwrite, no epilogue).
fn time_gemm(isa: Isa, [m, n, k]: [usize; 3], threads: usize) -> f64 {
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1)
        .collect();
    let packed = pack_b(k, n, &b, n).unwrap();
    let mut c = vec![0.0f32; m * n];
    let opts = GemmOptions {
        isa: Some(isa),
        threads,
        ..Default::default()
    };
    best_of(|| {
        gemm(m, n, k, &a, k, packed.as_ref(), &mut c, n, &opts).unwrap();
        black_box(&c);
    })
}

/// FMA peak of one core at `isa`, GFLOP/s, or `None` when unsupported.
fn peak(isa: Isa) -> Option<f64> {
    if !isa.is_supported() {
        return None;
    }
    let iters = 20_000_000u64;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        // SAFETY: the level is supported (checked above).
        unsafe {
            match isa {
                Isa::Avx512 => fma_loop_512(iters),
                Isa::Avx2 => fma_loop_256(iters),
                Isa::Scalar => unreachable!("no peak loop for scalar"),
            }
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let lanes = if isa == Isa::Avx512 { 16.0 } else { 8.0 };
    Some(iters as f64 * 12.0 * lanes * 2.0 / best / 1e9)
}

#[target_feature(enable = "avx512f")]
unsafe fn fma_loop_512(iters: u64) {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(0.0); 12];
    let x = _mm512_set1_ps(black_box(0.999_999));
    let y = _mm512_set1_ps(black_box(1e-7));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, x, y);
        }
    }
    black_box(acc);
}

#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop_256(iters: u64) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(0.0); 12];
    let x = _mm256_set1_ps(black_box(0.999_999));
    let y = _mm256_set1_ps(black_box(1e-7));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, x, y);
        }
    }
    black_box(acc);
}
