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

// Features of the quantized and bf16 kernels (`int8.rs`, `bf16.rs`,
// `amx.rs`). They are separate functions, not `Isa` levels, because those
// kernels have their own level lists and the fp32 GEMM's must not grow.

/// AVX-512F with VNNI (`vpdpbusd zmm`): the int8 GEMM's fastest
/// non-AMX level.
pub fn has_avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// AVX-512F with BF16 (`vdpbf16ps zmm`).
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The CPU reports AMX tiles with u8/s8 products (`amx-tile`, `amx-int8`)
/// and the OS enabled the tile state in XCR0. Linux also wants a
/// per-process permission before the first tile instruction:
/// `kernels::amx::amx_available` asks for it.
pub fn has_amx_int8() -> bool {
    amx_bits().0
}

/// As [`has_amx_int8`], for bf16 products (`amx-tile`, `amx-bf16`).
pub fn has_amx_bf16() -> bool {
    amx_bits().1
}

/// (int8, bf16) AMX support, read once. `is_x86_feature_detected!` cannot
/// name the AMX features on stable Rust, so this reads CPUID and XCR0.
fn amx_bits() -> (bool, bool) {
    static BITS: OnceLock<(bool, bool)> = OnceLock::new();
    *BITS.get_or_init(read_amx_bits)
}

#[cfg(target_arch = "x86_64")]
fn read_amx_bits() -> (bool, bool) {
    use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    if __cpuid(0).eax < 7 {
        return (false, false);
    }
    // CPUID.1:ECX.OSXSAVE[27]: XGETBV is usable.
    if __cpuid(1).ecx & (1 << 27) == 0 {
        return (false, false);
    }
    #[target_feature(enable = "xsave")]
    fn xcr0() -> u64 {
        // SAFETY: OSXSAVE was checked by the caller.
        unsafe { _xgetbv(0) }
    }
    // SAFETY: OSXSAVE implies XSAVE.
    let xcr0 = unsafe { xcr0() };
    // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves tile state.
    if xcr0 & (3 << 17) != 3 << 17 {
        return (false, false);
    }
    let edx = __cpuid_count(7, 0).edx;
    let tile = edx & (1 << 24) != 0;
    (tile && edx & (1 << 25) != 0, tile && edx & (1 << 22) != 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn read_amx_bits() -> (bool, bool) {
    (false, false)
}
