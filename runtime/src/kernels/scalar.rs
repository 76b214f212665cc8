//! Portable micro-kernel: a 4×16 tile in plain Rust, for CPUs (or targets)
//! without AVX2. The fixed-size arrays let the compiler keep the tile in
//! registers and vectorize with whatever the baseline target offers.
//!
//! Contract: as in `avx512.rs`, with [`MR`] = 4, one panel per tile and
//! `tile::<R>` computing the first `R` rows.

use super::gemm::TileEpi;

/// Rows of the register tile.
pub(crate) const MR: usize = 4;
/// Panels (of 16 columns) per tile.
pub(crate) const MAX_PANELS: usize = 1;

/// # Safety
/// The pointers cover the ranges described in `avx512.rs`.
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
    let mut acc = [[0.0f32; 16]; R];
    // SAFETY: the caller guarantees `kc·MR` floats at `a` and `kc·16` at `b`.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, kc * MR),
            std::slice::from_raw_parts(b, kc * 16),
        )
    };
    for (ak, bk) in a.chunks_exact(MR).zip(b.chunks_exact(16)) {
        for (row, &av) in acc.iter_mut().zip(ak) {
            for (r, &bv) in row.iter_mut().zip(bk) {
                *r += av * bv;
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the caller guarantees a full MR×16 tile at `c` with stride `ldc`.
        let cr = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), 16) };
        for (j, (dst, &v)) in cr.iter_mut().zip(row).enumerate() {
            let mut x = if load_c { *dst + v } else { v };
            if let Some(e) = epi {
                if !e.bias.is_null() {
                    // SAFETY: a full tile's bias follows `e.bias` (`TileEpi`).
                    x += unsafe { *e.bias.add(j) };
                }
                // NaN kept, as the interpreter's relu and clip keep it.
                if let Some(lo) = e.lo {
                    x = super::act::max_nan(x, lo);
                }
                if let Some(hi) = e.hi {
                    x = super::act::min_nan(x, hi);
                }
            }
            *dst = x;
        }
    }
}
