//! int8 and bf16 GEMM benchmark: GOP/s of `gemm_u8s8` per supported level
//! (AMX, AVX-512 VNNI, AVX2, scalar) and GFLOP/s of `gemm_bf16` per level
//! next to the fp32 `gemm()` (AVX-512, AVX2) at 512³, 1024³ and 2048³ —
//! the "AMX against AVX-512". Each level is compared with its
//! core's peak measured in the same run by a register-only loop of its
//! instruction (12 independent zmm accumulators; 4 tiles for AMX), and the
//! core clock is measured with a chain of dependent adds (1 cycle each), so
//! the AMX peaks per cycle can be checked against Intel's figures (1024
//! int8 and 512 bf16 multiply-adds per cycle per core on Sapphire Rapids).
//!
//! `cargo bench -p aoc-runtime --bench gemm_int8 [-- --quick] [-- --threads N]`
//! (`--quick`: 512³ only). Threads default to 1 (one core's peak).

use std::hint::black_box;
use std::time::Instant;

mod common;
use common::best_of;

use aoc_runtime::kernels::amx::{amx_bf16_available, amx_int8_available, amx_unavailable_reason};
use aoc_runtime::kernels::bf16::{Bf16Level, f32_to_bf16, gemm_bf16_level, pack_b_bf16};
use aoc_runtime::kernels::detect::{has_avx512_bf16, has_avx512_vnni};
use aoc_runtime::kernels::int8::{Int8Level, gemm_u8s8_level, pack_b_s8};
use aoc_runtime::kernels::{GemmOptions, Isa, gemm, pack_b};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = common::threads_arg(&args);
    let quick = args.iter().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[512] } else { &[512, 1024, 2048] };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");

    let ghz = clock_ghz();
    println!("threads: {threads}; core clock (dependent adds): {ghz:.2} GHz");
    if let Some(why) = amx_unavailable_reason() {
        println!("amx: unavailable: {why}");
    }
    let peaks = Peaks::measure();
    peaks.print(ghz);

    println!("\nint8 gemm_u8s8 (u8 x s8 -> i32, zero point 128)");
    println!(
        "{:17} {:>5} {:>10} {:>9} {:>12}",
        "level", "size", "ms", "GOP/s", "% own peak"
    );
    for level in Int8Level::ALL {
        if !level.is_supported() {
            println!("{:17} skipped: this cpu does not support it", level.name());
            continue;
        }
        let own = match level {
            Int8Level::Amx => peaks.amx_int8,
            Int8Level::Avx512Vnni => peaks.vnni,
            Int8Level::Avx2 | Int8Level::Scalar => None,
        };
        for &s in sizes {
            if level == Int8Level::Scalar && s > 512 {
                continue; // slow; 512³ shows its level
            }
            let secs = pool.install(|| time_int8(level, s));
            report(level.name(), s, secs, own, threads, None);
        }
    }

    println!("\nbf16 gemm_bf16 (bf16 x bf16 -> f32) against the fp32 gemm()");
    println!(
        "{:17} {:>5} {:>10} {:>9} {:>12} {:>14}",
        "level", "size", "ms", "GFLOP/s", "% own peak", "x fp32 avx512"
    );
    let mut fp32 = Vec::new();
    for isa in [Isa::Avx512, Isa::Avx2] {
        if !isa.is_supported() {
            println!(
                "fp32-{:7} skipped: this cpu does not support it",
                isa.name()
            );
            continue;
        }
        let own = match isa {
            Isa::Avx512 => peaks.fma512,
            _ => None,
        };
        for &s in sizes {
            let secs = pool.install(|| time_fp32(isa, s, threads));
            if isa == Isa::Avx512 {
                fp32.push((s, secs));
            }
            let base = fp32.iter().find(|&&(z, _)| z == s).map(|&(_, t)| t);
            report(&format!("fp32-{}", isa.name()), s, secs, own, threads, base);
        }
    }
    for level in Bf16Level::ALL {
        if !level.is_supported() {
            println!(
                "bf16-{:7} skipped: this cpu does not support it",
                level.name()
            );
            continue;
        }
        let own = match level {
            Bf16Level::Amx => peaks.amx_bf16,
            Bf16Level::Avx512Bf16 => peaks.bf16_512,
            Bf16Level::Avx2 | Bf16Level::Scalar => None,
        };
        for &s in sizes {
            if level == Bf16Level::Scalar && s > 512 {
                continue;
            }
            let secs = pool.install(|| time_bf16(level, s));
            let base = fp32.iter().find(|&&(z, _)| z == s).map(|&(_, t)| t);
            report(
                &format!("bf16-{}", level.name()),
                s,
                secs,
                own,
                threads,
                base,
            );
        }
    }
}

/// One table row: `2·s³` operations in `secs`, against a one-core peak
/// (times the thread count) and, when given, a baseline time.
fn report(name: &str, s: usize, secs: f64, peak: Option<f64>, threads: usize, base: Option<f64>) {
    let rate = 2.0 * (s as f64).powi(3) / secs / 1e9;
    let pct = peak.map_or("-".to_string(), |p| {
        format!("{:.1}%", 100.0 * rate / (p * threads as f64))
    });
    let speedup = base.map_or(String::new(), |b| format!("{:>13.2}x", b / secs));
    println!(
        "{name:17} {s:>5} {:>10.2} {rate:>9.1} {pct:>12} {speedup}",
        secs * 1e3
    );
}

fn time_int8(level: Int8Level, s: usize) -> f64 {
    let a: Vec<u8> = (0..s * s).map(|i| (i * 7 % 251) as u8).collect();
    let b: Vec<i8> = (0..s * s).map(|i| (i * 5 % 253) as u8 as i8).collect();
    let packed = pack_b_s8(s, s, &b, s).unwrap();
    let mut c = vec![0i32; s * s];
    best_of(|| {
        gemm_u8s8_level(level, s, s, s, &a, s, 128, packed.as_ref(), &mut c, s).unwrap();
        black_box(&c);
    })
}

fn time_bf16(level: Bf16Level, s: usize) -> f64 {
    let a: Vec<u16> = (0..s * s)
        .map(|i| f32_to_bf16(((i * 7 % 13) as f32 - 6.0) * 0.1))
        .collect();
    let b: Vec<u16> = (0..s * s)
        .map(|i| f32_to_bf16(((i * 5 % 11) as f32 - 5.0) * 0.1))
        .collect();
    let packed = pack_b_bf16(s, s, &b, s).unwrap();
    let mut c = vec![0f32; s * s];
    best_of(|| {
        gemm_bf16_level(level, s, s, s, &a, s, packed.as_ref(), &mut c, s).unwrap();
        black_box(&c);
    })
}

fn time_fp32(isa: Isa, s: usize, threads: usize) -> f64 {
    let a: Vec<f32> = (0..s * s)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
        .collect();
    let b: Vec<f32> = (0..s * s)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1)
        .collect();
    let packed = pack_b(s, s, &b, s).unwrap();
    let mut c = vec![0f32; s * s];
    let opts = GemmOptions {
        isa: Some(isa),
        threads,
        ..Default::default()
    };
    best_of(|| {
        gemm(s, s, s, &a, s, packed.as_ref(), &mut c, s, &opts).unwrap();
        black_box(&c);
    })
}

/// Clock of this core in GHz: 8 dependent adds per loop iteration take 8
/// cycles on every x86-64 core of the last decade.
fn clock_ghz() -> f64 {
    let iters = 50_000_000u64;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: register-only arithmetic.
        unsafe {
            std::arch::asm!(
                "2:",
                "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
                "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
                "dec {n}",
                "jnz 2b",
                x = inout(reg) 0u64 => _,
                n = inout(reg) iters => _,
                options(nomem, nostack),
            );
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    8.0 * iters as f64 / best / 1e9
}

/// One core's peaks in G(FL)OP/s, measured by register-only loops; `None`
/// where the CPU lacks the instructions.
struct Peaks {
    fma512: Option<f64>,
    vnni: Option<f64>,
    bf16_512: Option<f64>,
    amx_int8: Option<f64>,
    amx_bf16: Option<f64>,
}

impl Peaks {
    fn measure() -> Peaks {
        let zmm = |f: unsafe fn(u64), ops_per_iter: f64| {
            let iters = 20_000_000u64;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                // SAFETY: the caller checked the CPU features.
                unsafe { f(iters) };
                best = best.min(t.elapsed().as_secs_f64());
            }
            iters as f64 * ops_per_iter / best / 1e9
        };
        let amx = |bf16: bool| {
            let iters = 2_000_000u64;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                // SAFETY: AMX available (checked by the caller).
                unsafe { amx_loop(iters, bf16) };
                best = best.min(t.elapsed().as_secs_f64());
            }
            // 4 tile products of 16 × 16 × (64 int8 | 32 bf16) per iteration.
            let macs = 4.0 * 16.0 * 16.0 * if bf16 { 32.0 } else { 64.0 };
            iters as f64 * 2.0 * macs / best / 1e9
        };
        Peaks {
            // 12 vfmadd231ps zmm: 12·16 multiply-adds.
            fma512: Isa::Avx512
                .is_supported()
                .then(|| zmm(fma_loop, 12.0 * 16.0 * 2.0)),
            // 12 vpdpbusd zmm: 12·64 multiply-adds.
            vnni: has_avx512_vnni().then(|| zmm(vnni_loop, 12.0 * 64.0 * 2.0)),
            // 12 vdpbf16ps zmm: 12·32 multiply-adds.
            bf16_512: has_avx512_bf16().then(|| zmm(bf16_loop, 12.0 * 32.0 * 2.0)),
            amx_int8: amx_int8_available().then(|| amx(false)),
            amx_bf16: amx_bf16_available().then(|| amx(true)),
        }
    }

    fn print(&self, ghz: f64) {
        let rows = [
            ("fp32 avx512 FMA", self.fma512, "GFLOP/s"),
            ("int8 avx512-vnni", self.vnni, "GOP/s"),
            ("bf16 avx512-bf16", self.bf16_512, "GFLOP/s"),
            ("int8 amx", self.amx_int8, "GOP/s"),
            ("bf16 amx", self.amx_bf16, "GFLOP/s"),
        ];
        for (name, peak, unit) in rows {
            match peak {
                Some(p) => println!(
                    "peak {name:17} (1 core): {p:9.1} {unit:7} = {:6.0} per cycle",
                    p / ghz
                ),
                None => println!("peak {name:17}: skipped, this cpu does not support it"),
            }
        }
        if self.amx_int8.is_some() || self.amx_bf16.is_some() {
            println!(
                "theory amx at {ghz:.2} GHz (Sapphire Rapids: 2048 int8 op, 1024 bf16 flop per cycle): {:.0} GOP/s, {:.0} GFLOP/s",
                2048.0 * ghz,
                1024.0 * ghz
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_loop(iters: u64) {
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn vnni_loop(iters: u64) {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 12];
    let x = _mm512_set1_epi32(black_box(0x0102_0304));
    let y = _mm512_set1_epi32(black_box(0x0506_0708));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_dpbusd_epi32(*v, x, y);
        }
    }
    black_box(acc);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_loop(iters: u64) {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 12];
    // SAFETY: same size; any bits are valid bf16 pairs.
    let (x, y): (__m512bh, __m512bh) = unsafe {
        (
            std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(black_box(0x3F80_3F80))),
            std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(black_box(0x3380_3380))),
        )
    };
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_dpbf16_ps(*v, x, y);
        }
    }
    black_box(acc);
}

/// Palette 1, tiles 0–7 of 16 rows × 64 bytes (as the runtime's kernels).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

/// `iters` × 4 independent tile products on tmm0–3 from tmm4–7.
///
/// # Safety
/// AMX available and permitted (`amx_*_available`).
#[cfg(target_arch = "x86_64")]
unsafe fn amx_loop(iters: u64, bf16: bool) {
    let mut cfg = TileConfig([0; 64]);
    cfg.0[0] = 1;
    for t in 0..8 {
        cfg.0[16 + 2 * t] = 64;
        cfg.0[48 + t] = 16;
    }
    let zeros = [0u8; 1024];
    // SAFETY: forwarded from the caller; the loads read 1 KiB of zeros.
    unsafe {
        std::arch::asm!(
            "ldtilecfg [{cfg}]",
            "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
            "tileloadd tmm4, [{z} + {s}*1]", "tileloadd tmm5, [{z} + {s}*1]",
            "tileloadd tmm6, [{z} + {s}*1]", "tileloadd tmm7, [{z} + {s}*1]",
            cfg = in(reg) cfg.0.as_ptr(),
            z = in(reg) zeros.as_ptr(),
            s = in(reg) 64usize,
            options(nostack),
        );
        if bf16 {
            std::arch::asm!(
                "2:",
                "tdpbf16ps tmm0, tmm4, tmm6", "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6", "tdpbf16ps tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                options(nostack),
            );
        } else {
            std::arch::asm!(
                "2:",
                "tdpbusd tmm0, tmm4, tmm6", "tdpbusd tmm1, tmm4, tmm7",
                "tdpbusd tmm2, tmm5, tmm6", "tdpbusd tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                options(nostack),
            );
        }
        std::arch::asm!("tilerelease", options(nostack));
    }
}
