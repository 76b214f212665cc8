//! AVX-512F micro-kernel: a 14×32 register tile (28 zmm accumulators, two
//! B vectors, A broadcast folded into the FMA as `{1to16}`), with a 14×16
//! variant for a last panel. 28 FMAs per 16 loads keeps the two FMA ports
//! busy without saturating the load ports.
//!
//! Contract (shared by every level, see `gemm.rs`): `a` is one packed A
//! micro-panel (`kc` steps of [`MR`] floats), `b` the first of `NP` packed B
//! panels (`kc` rows of 16 floats each, the next panel `bstride` floats
//! further), `c` a full `MR × 16·NP` tile with row stride `ldc`; with
//! `load_c` the tile is added to, otherwise overwritten; with an `epi`
//! ([`TileEpi`]) the bias, lower and upper bounds are applied before the
//! store. A kernel of `R`
//! rows (`R ≤ MR`) computes the tile's first `R` rows, reading the A
//! micro-panel at its stride of `MR` floats per step: the last rows of a
//! product take no more work than they have.

use std::arch::x86_64::*;

use super::gemm::TileEpi;

/// Rows of the register tile.
pub(crate) const MR: usize = 14;
/// Panels (of 16 columns) of the widest tile.
pub(crate) const MAX_PANELS: usize = 2;

/// # Safety
/// The CPU supports AVX-512F; the pointers cover the ranges described in the
/// module doc.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile<const NP: usize, const R: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bstride: usize,
    c: *mut f32,
    ldc: usize,
    load_c: bool,
    epi: Option<&TileEpi>,
) {
    // SAFETY: as for this function.
    unsafe { tile_body::<NP, R>(kc, a, 1, MR, b, bstride, c, ldc, load_c, epi) }
}

/// [`tile`] reading A unpacked: row `i`, step `p` at `a + i·lda + p` (a
/// row-major A in place, for products whose A rows meet one column tile
/// only, where packing A would copy every element to read it once).
///
/// # Safety
/// As for [`tile`], with the `R` rows of `kc` floats `lda` apart inside A.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_unpacked<const NP: usize, const R: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    bstride: usize,
    c: *mut f32,
    ldc: usize,
    load_c: bool,
    epi: Option<&TileEpi>,
) {
    // SAFETY: as for this function.
    unsafe { tile_body::<NP, R>(kc, a, lda, 1, b, bstride, c, ldc, load_c, epi) }
}

/// The register tile with A's element (row `i`, step `p`) at
/// `a + i·row + p·step`: packed (`1`, `MR`) or in place (`lda`, `1`).
/// Inlined into each AVX-512 caller, so the packed tile keeps its constant
/// strides.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_body<const NP: usize, const R: usize>(
    kc: usize,
    a: *const f32,
    row: usize,
    step: usize,
    b: *const f32,
    bstride: usize,
    c: *mut f32,
    ldc: usize,
    load_c: bool,
    epi: Option<&TileEpi>,
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NP]; R];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kc {
            let mut bv = [_mm512_setzero_ps(); NP];
            for (j, v) in bv.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(bp.add(j * bstride));
            }
            for (i, acc_row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(i * row));
                for (j, r) in acc_row.iter_mut().enumerate() {
                    *r = _mm512_fmadd_ps(av, bv[j], *r);
                }
            }
            ap = ap.add(step);
            bp = bp.add(16);
        }
        for (i, row) in acc.iter().enumerate() {
            let cr = c.add(i * ldc);
            for (j, r) in row.iter().enumerate() {
                let p = cr.add(16 * j);
                let mut v = if load_c {
                    _mm512_add_ps(_mm512_loadu_ps(p), *r)
                } else {
                    *r
                };
                if let Some(e) = epi {
                    if !e.bias.is_null() {
                        v = _mm512_add_ps(v, _mm512_loadu_ps(e.bias.add(16 * j)));
                    }
                    // As in `avx2.rs`: the bound first, so NaN is kept.
                    if let Some(lo) = e.lo {
                        v = _mm512_max_ps(_mm512_set1_ps(lo), v);
                    }
                    if let Some(hi) = e.hi {
                        v = _mm512_min_ps(_mm512_set1_ps(hi), v);
                    }
                }
                _mm512_storeu_ps(p, v);
            }
        }
    }
}
