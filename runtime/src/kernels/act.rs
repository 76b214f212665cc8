//! Activations that other kernels apply in their epilogues, so that an op
//! such as `core.fused_matmul {epilogue = "add; gelu"}` costs no pass of its
//! own over the product: the GEMM applies them to each tile while it is in
//! L1.
//!
//! GELU (erf form) is computed with the operations of the pointwise kernel
//! that `core.gelu` lowers to (`0.5·x` times `1 + erf(x·(1/√2))`, `erf`
//! from the JIT math table's code), with fused multiply-adds exactly where
//! that table uses them (a CPU with FMA), so a fused epilogue gives the
//! same bits as the separate step. The loop is instantiated per level
//! (plain, `avx2,fma`, `avx512f,fma`) and vectorized by the compiler: 8 or
//! 16 lanes per step, against the table's 4.

use super::Isa;

/// What a convolution applies to each output after its bias: relu
/// (`max(x, 0)`), then a clip to `[lo, hi]` (`max` with `lo`, then `min`
/// with `hi`, as the pointwise step computes `core.clip`). A `bool` is a
/// relu or nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Post {
    pub relu: bool,
    pub clip: Option<[f32; 2]>,
}

impl Post {
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        let v = if self.relu { max_nan(x, 0.0) } else { x };
        match self.clip {
            Some([lo, hi]) => min_nan(max_nan(v, lo), hi),
            None => v,
        }
    }
}

/// `max(x, lo)` keeping a NaN `x`, as the interpreter's relu and clip do
/// (`f32::max` would return `lo`); one `maxps(lo, x)` when vectorized.
#[inline(always)]
pub fn max_nan(x: f32, lo: f32) -> f32 {
    if x < lo { lo } else { x }
}

/// `min(x, hi)` keeping a NaN `x` (see [`max_nan`]).
#[inline(always)]
pub fn min_nan(x: f32, hi: f32) -> f32 {
    if x > hi { hi } else { x }
}

impl From<bool> for Post {
    fn from(relu: bool) -> Post {
        Post { relu, clip: None }
    }
}
use crate::jit::lanes::{Fused, MulAdd, Unfused};
use crate::jit::math::erf;

/// `x[i] = 0.5·x[i]·(1 + erf(x[i]/√2))` for every element, at `isa`'s
/// vector width (any level runs anywhere it is supported; the caller
/// passes a supported one).
pub fn gelu(isa: Isa, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = std::arch::is_x86_feature_detected!("fma");
        match isa {
            // SAFETY: the level is supported (the caller's contract) and
            // the CPU has FMA (checked).
            Isa::Avx512 if fma && isa.is_supported() => return unsafe { gelu_avx512(x) },
            // SAFETY: as above (the AVX2 level includes FMA).
            Isa::Avx2 if isa.is_supported() => return unsafe { gelu_avx2(x) },
            // The JIT's table fuses wherever the CPU has FMA.
            // SAFETY: FMA checked.
            _ if fma => return unsafe { gelu_fma(x) },
            _ => {}
        }
    }
    let _ = isa;
    gelu_with(Unfused, x)
}

#[inline(always)]
fn gelu_with<M: MulAdd>(m: M, x: &mut [f32]) {
    for v in x {
        let e = erf(m, *v * std::f32::consts::FRAC_1_SQRT_2);
        *v = (0.5 * *v) * (1.0 + e);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn gelu_avx512(x: &mut [f32]) {
    // SAFETY: this function runs only where the CPU has FMA.
    gelu_with(unsafe { Fused::new() }, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(x: &mut [f32]) {
    // SAFETY: as above.
    gelu_with(unsafe { Fused::new() }, x)
}

/// The scalar level on a CPU with FMA (the width of plain code, the
/// rounding of the JIT table).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn gelu_fma(x: &mut [f32]) {
    // SAFETY: as above.
    gelu_with(unsafe { Fused::new() }, x)
}
