//! AVX2 + FMA micro-kernel: a 6×16 register tile (12 ymm accumulators, two
//! B vectors, one A broadcast), the classic shape for 16 ymm registers.
//!
//! Contract: as in `avx512.rs`, with [`MR`] = 6 and one panel per tile;
//! `tile::<R>` computes the first `R` rows of the tile (the A micro-panel
//! keeps its stride of `MR` floats per step).

use std::arch::x86_64::*;

use super::gemm::TileEpi;

/// Rows of the register tile.
pub(crate) const MR: usize = 6;
/// Panels (of 16 columns) per tile.
pub(crate) const MAX_PANELS: usize = 1;

/// # Safety
/// The CPU supports AVX2 and FMA; the pointers cover the ranges described in
/// `avx512.rs`. `bstride` is unused (one panel).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn tile<const R: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    _bstride: usize,
    c: *mut f32,
    ldc: usize,
    load_c: bool,
    epi: Option<&TileEpi>,
) {
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(i));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
            ap = ap.add(MR);
            bp = bp.add(16);
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            for (j, r) in row.iter().enumerate() {
                let p = cr.add(8 * j);
                let mut v = if load_c {
                    _mm256_add_ps(_mm256_loadu_ps(p), *r)
                } else {
                    *r
                };
                if let Some(e) = epi {
                    if !e.bias.is_null() {
                        v = _mm256_add_ps(v, _mm256_loadu_ps(e.bias.add(8 * j)));
                    }
                    // `maxps`/`minps` return their second operand when
                    // either is NaN: the bound goes first, so a NaN x is
                    // kept, as the interpreter's relu and clip keep it.
                    if let Some(lo) = e.lo {
                        v = _mm256_max_ps(_mm256_set1_ps(lo), v);
                    }
                    if let Some(hi) = e.hi {
                        v = _mm256_min_ps(_mm256_set1_ps(hi), v);
                    }
                }
                _mm256_storeu_ps(p, v);
            }
        }
    }
}
