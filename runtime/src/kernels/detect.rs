//! Instruction-set levels for the micro-kernels and their detection.
//!
//! [`Isa::best`] asks the CPU once (`is_x86_feature_detected!`) and caches
//! the answer; tests and benchmarks force a level through
//! [`crate::kernels::GemmOptions::isa`], which is refused when the CPU lacks it
//! (running an AVX-512 instruction on a CPU without it would fault).

use std::fmt;
use std::sync::OnceLock;

/// A code path of the fp32 GEMM, from fastest to most portable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F: 14×32 register tile, `vfmadd231ps zmm`.
    Avx512,
    /// AVX2 + FMA: 6×16 register tile, `vfmadd231ps ymm`.
    Avx2,
    /// Portable Rust, any CPU.
    Scalar,
}

impl Isa {
    /// Every level, fastest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Scalar];

    /// Lower-case name used in messages and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Scalar => "scalar",
        }
    }

    /// Whether this CPU can run the level's code.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Avx512 => avx512_supported(),
            Isa::Avx2 => avx2_supported(),
            Isa::Scalar => true,
        }
    }

    /// The fastest level this CPU supports, detected once per process.
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            Isa::ALL
                .into_iter()
                .find(|isa| isa.is_supported())
                .unwrap_or(Isa::Scalar)
        })
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512_supported() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_supported() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn avx2_supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_supported() -> bool {
    false
}
