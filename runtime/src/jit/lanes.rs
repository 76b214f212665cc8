//! The lane types the math functions of [`super::math`] are written over:
//! [`Lanes`] for one `f32` and for the four lanes of an SSE register, and
//! the multiply-add policies [`Unfused`] and [`Fused`].
//!
//! Invariants:
//! - The `f32` methods copy the SSE instructions' semantics (including
//!   `minps`/`maxps` on NaN), so code run on one `f32` computes bit for bit
//!   what the same code computes in each lane of an `__m128`.
//! - A [`Fused`] value exists only on CPUs with FMA ([`Fused::new`] is
//!   unsafe for that reason), so the fused multiply-adds it selects never
//!   fault.

/// A vector of f32 lanes (or a single f32) with the operations the math
/// functions need. Masks are lanes with all bits set (true) or clear.
pub(crate) trait Lanes: Copy {
    fn splat(c: f32) -> Self;
    /// Every lane holds the bit pattern `b`.
    fn splat_bits(b: u32) -> Self;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    fn div(self, b: Self) -> Self;
    /// `self < b ? self : b` (so `b` when either is NaN), as `minps`.
    fn min(self, b: Self) -> Self;
    /// `self > b ? self : b` (so `b` when either is NaN), as `maxps`.
    fn max(self, b: Self) -> Self;
    /// Mask of `self < b`.
    fn lt(self, b: Self) -> Self;
    /// Mask of `self == b`.
    fn eq(self, b: Self) -> Self;
    /// Mask of "`self` or `b` is NaN".
    fn unord(self, b: Self) -> Self;
    fn and(self, b: Self) -> Self;
    fn or(self, b: Self) -> Self;
    /// `!self & b`.
    fn andnot(self, b: Self) -> Self;
    /// Lane-wise wrapping `i32` addition of the bit patterns.
    fn iadd(self, b: Self) -> Self;
    /// Lane-wise wrapping `i32` subtraction of the bit patterns.
    fn isub(self, b: Self) -> Self;
    /// Bit patterns shifted left by 23 (into the exponent field).
    fn shl23(self) -> Self;
    /// Bit patterns shifted right by 23, logically (the exponent field of a
    /// non-negative float).
    fn shr23(self) -> Self;
    /// Bit patterns as `i32`, shifted right by 1 arithmetically.
    fn sar1(self) -> Self;
    /// The `i32` in each lane's bits, converted to f32.
    fn int_to_float(self) -> Self;
    /// `self·b + c` rounded once.
    ///
    /// # Safety
    /// The CPU must support FMA (the vector instance uses its instruction).
    unsafe fn fused_mul_add(self, b: Self, c: Self) -> Self;

    /// `mask ? a : b`, lane by lane.
    #[inline(always)]
    fn select(mask: Self, a: Self, b: Self) -> Self {
        mask.and(a).or(mask.andnot(b))
    }
}

impl Lanes for f32 {
    #[inline(always)]
    fn splat(c: f32) -> f32 {
        c
    }
    #[inline(always)]
    fn splat_bits(b: u32) -> f32 {
        f32::from_bits(b)
    }
    #[inline(always)]
    fn add(self, b: f32) -> f32 {
        self + b
    }
    #[inline(always)]
    fn sub(self, b: f32) -> f32 {
        self - b
    }
    #[inline(always)]
    fn mul(self, b: f32) -> f32 {
        self * b
    }
    #[inline(always)]
    fn div(self, b: f32) -> f32 {
        self / b
    }
    #[inline(always)]
    fn min(self, b: f32) -> f32 {
        if self < b { self } else { b }
    }
    #[inline(always)]
    fn max(self, b: f32) -> f32 {
        if self > b { self } else { b }
    }
    #[inline(always)]
    fn lt(self, b: f32) -> f32 {
        mask(self < b)
    }
    #[inline(always)]
    fn eq(self, b: f32) -> f32 {
        mask(self == b)
    }
    #[inline(always)]
    fn unord(self, b: f32) -> f32 {
        mask(self.is_nan() || b.is_nan())
    }
    #[inline(always)]
    fn and(self, b: f32) -> f32 {
        f32::from_bits(self.to_bits() & b.to_bits())
    }
    #[inline(always)]
    fn or(self, b: f32) -> f32 {
        f32::from_bits(self.to_bits() | b.to_bits())
    }
    #[inline(always)]
    fn andnot(self, b: f32) -> f32 {
        f32::from_bits(!self.to_bits() & b.to_bits())
    }
    #[inline(always)]
    fn iadd(self, b: f32) -> f32 {
        f32::from_bits(self.to_bits().wrapping_add(b.to_bits()))
    }
    #[inline(always)]
    fn isub(self, b: f32) -> f32 {
        f32::from_bits(self.to_bits().wrapping_sub(b.to_bits()))
    }
    #[inline(always)]
    fn shl23(self) -> f32 {
        f32::from_bits(self.to_bits() << 23)
    }
    #[inline(always)]
    fn shr23(self) -> f32 {
        f32::from_bits(self.to_bits() >> 23)
    }
    #[inline(always)]
    fn sar1(self) -> f32 {
        f32::from_bits(((self.to_bits() as i32) >> 1) as u32)
    }
    #[inline(always)]
    fn int_to_float(self) -> f32 {
        self.to_bits() as i32 as f32
    }
    #[inline(always)]
    unsafe fn fused_mul_add(self, b: f32, c: f32) -> f32 {
        // One `vfmadd` where FMA is enabled (the caller's contract); a
        // correct but slow libm call elsewhere.
        self.mul_add(b, c)
    }
}

/// An all-ones or all-zeros lane.
#[inline(always)]
fn mask(b: bool) -> f32 {
    f32::from_bits(if b { u32::MAX } else { 0 })
}

#[cfg(target_arch = "x86_64")]
mod sse {
    use super::Lanes;
    use std::arch::x86_64::*;

    /// Calls SSE2 intrinsics.
    macro_rules! sse {
        ($e:expr) => {
            // SAFETY: the intrinsics used need only SSE2, which every
            // x86-64 CPU has (the x86-64 targets enable it statically).
            unsafe { $e }
        };
    }

    impl Lanes for __m128 {
        #[inline(always)]
        fn splat(c: f32) -> __m128 {
            sse!(_mm_set1_ps(c))
        }
        #[inline(always)]
        fn splat_bits(b: u32) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_set1_epi32(b as i32)))
        }
        #[inline(always)]
        fn add(self, b: __m128) -> __m128 {
            sse!(_mm_add_ps(self, b))
        }
        #[inline(always)]
        fn sub(self, b: __m128) -> __m128 {
            sse!(_mm_sub_ps(self, b))
        }
        #[inline(always)]
        fn mul(self, b: __m128) -> __m128 {
            sse!(_mm_mul_ps(self, b))
        }
        #[inline(always)]
        fn div(self, b: __m128) -> __m128 {
            sse!(_mm_div_ps(self, b))
        }
        #[inline(always)]
        fn min(self, b: __m128) -> __m128 {
            sse!(_mm_min_ps(self, b))
        }
        #[inline(always)]
        fn max(self, b: __m128) -> __m128 {
            sse!(_mm_max_ps(self, b))
        }
        #[inline(always)]
        fn lt(self, b: __m128) -> __m128 {
            sse!(_mm_cmplt_ps(self, b))
        }
        #[inline(always)]
        fn eq(self, b: __m128) -> __m128 {
            sse!(_mm_cmpeq_ps(self, b))
        }
        #[inline(always)]
        fn unord(self, b: __m128) -> __m128 {
            sse!(_mm_cmpunord_ps(self, b))
        }
        #[inline(always)]
        fn and(self, b: __m128) -> __m128 {
            sse!(_mm_and_ps(self, b))
        }
        #[inline(always)]
        fn or(self, b: __m128) -> __m128 {
            sse!(_mm_or_ps(self, b))
        }
        #[inline(always)]
        fn andnot(self, b: __m128) -> __m128 {
            sse!(_mm_andnot_ps(self, b))
        }
        #[inline(always)]
        fn iadd(self, b: __m128) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_add_epi32(
                _mm_castps_si128(self),
                _mm_castps_si128(b)
            )))
        }
        #[inline(always)]
        fn isub(self, b: __m128) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_sub_epi32(
                _mm_castps_si128(self),
                _mm_castps_si128(b)
            )))
        }
        #[inline(always)]
        fn shl23(self) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_slli_epi32::<23>(_mm_castps_si128(
                self
            ))))
        }
        #[inline(always)]
        fn shr23(self) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_srli_epi32::<23>(_mm_castps_si128(
                self
            ))))
        }
        #[inline(always)]
        fn sar1(self) -> __m128 {
            sse!(_mm_castsi128_ps(_mm_srai_epi32::<1>(_mm_castps_si128(
                self
            ))))
        }
        #[inline(always)]
        fn int_to_float(self) -> __m128 {
            sse!(_mm_cvtepi32_ps(_mm_castps_si128(self)))
        }
        #[inline(always)]
        unsafe fn fused_mul_add(self, b: __m128, c: __m128) -> __m128 {
            // SAFETY: the caller guarantees FMA (this method's contract).
            unsafe { _mm_fmadd_ps(self, b, c) }
        }
    }
}

/// How the math functions compute `a·b + c`.
pub(crate) trait MulAdd: Copy {
    fn mul_add<V: Lanes>(self, a: V, b: V, c: V) -> V;
}

/// A multiply, then an add: two roundings, any x86-64 (and any target).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unfused;

impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add<V: Lanes>(self, a: V, b: V, c: V) -> V {
        a.mul(b).add(c)
    }
}

/// One fused multiply-add: one rounding, fewer instructions and a shorter
/// dependency chain. Proof that the CPU has FMA.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fused(());

impl Fused {
    /// # Safety
    /// The CPU must support FMA.
    #[inline(always)]
    pub(crate) unsafe fn new() -> Fused {
        Fused(())
    }
}

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add<V: Lanes>(self, a: V, b: V, c: V) -> V {
        // SAFETY: a `Fused` exists only where the CPU has FMA (`new`).
        unsafe { a.fused_mul_add(b, c) }
    }
}
