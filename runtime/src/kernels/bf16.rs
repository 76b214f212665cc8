//! The bf16 GEMM: `C[m×n] = A·B` with A and B in bf16 (raw `u16` bits) and C
//! in f32, for models compiled to bf16 weights and activations.
//!
//! B is packed at compile time ([`pack_b_bf16`]) in the grouped layout of
//! `grouped.rs` with groups of 2 consecutive k (a bf16 pair per column per
//! 4-byte group, the lower k in the lower half): the operand shape of
//! `vdpbf16ps` and of AMX's bf16 B tile.
//!
//! Levels ([`Bf16Level`]): AMX (`tdpbf16ps`, `amx.rs`), AVX-512 BF16
//! (`vdpbf16ps zmm`, 14×32 register tile), AVX2 + FMA (bf16 widened to f32
//! by a shift, 4×16 tile) and portable Rust. Products of two bf16 values are
//! exact in f32; levels differ only in the f32 rounding of the sums (and
//! the BF16 instructions flush denormal inputs and results to zero).

use super::KernelError;
use super::detect::{Isa, has_avx512_bf16};
use super::grouped::{self, Level, PANEL, Problem, check_matrix, pack_a_groups};

/// The f32 value of a bf16 (exact: bf16 is the upper half of an f32).
pub fn bf16_to_f32(x: u16) -> f32 {
    f32::from_bits(u32::from(x) << 16)
}

/// The bf16 nearest to `x`, ties to even; NaN stays a (quiet) NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// A `k × n` bf16 matrix B packed for the bf16 GEMM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedBf16 {
    k: usize,
    n: usize,
    data: Vec<u16>,
}

/// A borrowed [`PackedBf16`], e.g. a slice of an mmapped artifact.
#[derive(Clone, Copy, Debug)]
pub struct PackedBf16Ref<'a> {
    k: usize,
    n: usize,
    data: &'a [u16],
}

/// Elements (u16) of a packed `k × n` B: `ceil(n/16)` panels of
/// `round_up(ceil(k/2), 16)` rows of 32 values.
pub fn packed_bf16_len(k: usize, n: usize) -> Result<usize, KernelError> {
    Ok(grouped::packed_bytes(k, n, 2)? / 2)
}

/// Packs the row-major `k × n` bf16 matrix `b` (row stride `ldb`): element
/// `(p·R + q)·32 + 2j + r` holds `B[2q + r][16p + j]` (zero outside B), with
/// `R = round_up(ceil(k/2), 16)`.
pub fn pack_b_bf16(k: usize, n: usize, b: &[u16], ldb: usize) -> Result<PackedBf16, KernelError> {
    check_matrix("b", k, n, b.len(), ldb)?;
    packed_bf16_len(k, n)?;
    let data = grouped::pack_b(k, n, b, ldb)
        .chunks_exact(2)
        .map(|h| u16::from_ne_bytes([h[0], h[1]]))
        .collect();
    Ok(PackedBf16 { k, n, data })
}

impl PackedBf16 {
    /// Takes ownership of data already packed; checks the length.
    pub fn from_packed(k: usize, n: usize, data: Vec<u16>) -> Result<PackedBf16, KernelError> {
        PackedBf16Ref::new(k, n, &data)?;
        Ok(PackedBf16 { k, n, data })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    /// The packed values, in the layout of [`pack_b_bf16`].
    pub fn data(&self) -> &[u16] {
        &self.data
    }
    pub fn as_ref(&self) -> PackedBf16Ref<'_> {
        PackedBf16Ref {
            k: self.k,
            n: self.n,
            data: &self.data,
        }
    }
}

impl<'a> PackedBf16Ref<'a> {
    /// Views `data` as a packed `k × n` matrix; its length must be exactly
    /// [`packed_bf16_len`]`(k, n)`.
    pub fn new(k: usize, n: usize, data: &'a [u16]) -> Result<PackedBf16Ref<'a>, KernelError> {
        let want = packed_bf16_len(k, n)?;
        if data.len() != want {
            return Err(KernelError::new(format!(
                "packed b of {k}x{n} must hold {want} bf16 values, found {}",
                data.len()
            )));
        }
        Ok(PackedBf16Ref { k, n, data })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn data(&self) -> &'a [u16] {
        self.data
    }
}

/// A code path of the bf16 GEMM, fastest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16Level {
    /// AMX tiles, `tdpbf16ps`: 32×32 blocks of four 16×16 f32 tiles.
    Amx,
    /// AVX-512 BF16, `vdpbf16ps zmm`: 14×32 register tile.
    Avx512Bf16,
    /// AVX2 + FMA on bf16 widened to f32: 4×16 register tile.
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl Bf16Level {
    /// Every level, fastest first.
    pub const ALL: [Bf16Level; 4] = [
        Bf16Level::Amx,
        Bf16Level::Avx512Bf16,
        Bf16Level::Avx2,
        Bf16Level::Scalar,
    ];

    /// Lower-case name used in messages and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Level::Amx => "amx",
            Bf16Level::Avx512Bf16 => "avx512-bf16",
            Bf16Level::Avx2 => "avx2",
            Bf16Level::Scalar => "scalar",
        }
    }

    /// Whether this CPU (and, for AMX, the OS) can run the level.
    pub fn is_supported(self) -> bool {
        match self {
            Bf16Level::Amx => super::amx::amx_bf16_available(),
            Bf16Level::Avx512Bf16 => has_avx512_bf16(),
            Bf16Level::Avx2 => Isa::Avx2.is_supported(),
            Bf16Level::Scalar => true,
        }
    }

    /// The fastest supported level.
    pub fn best() -> Bf16Level {
        Bf16Level::ALL
            .into_iter()
            .find(|l| l.is_supported())
            .unwrap_or(Bf16Level::Scalar)
    }
}

impl std::fmt::Display for Bf16Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `C = A·B` on the fastest level: A row-major `m × k` bf16 bits (row
/// stride `lda`), B packed, C row-major `m × n` f32 (row stride `ldc`,
/// overwritten). Runs in the current rayon pool.
// BLAS-shaped on purpose: the backend emits calls with exactly these operands.
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16(
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: PackedBf16Ref<'_>,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), KernelError> {
    gemm_bf16_level(Bf16Level::best(), m, n, k, a, lda, b, c, ldc)
}

/// [`gemm_bf16`] on a given level (tests, benchmarks); refused when the CPU
/// lacks it.
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16_level(
    level: Bf16Level,
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: PackedBf16Ref<'_>,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), KernelError> {
    if !level.is_supported() {
        return Err(KernelError::new(format!(
            "bf16 level {level} is not supported by this cpu"
        )));
    }
    // SAFETY: the level is supported.
    unsafe { run_level(&level_table(level), m, n, k, a, lda, b, c, ldc) }
}

/// Checks the arguments and runs the product on `lv`.
///
/// # Safety
/// The CPU supports `lv`'s kernels.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_level(
    lv: &Level<u16>,
    m: usize,
    n: usize,
    k: usize,
    a: &[u16],
    lda: usize,
    b: PackedBf16Ref<'_>,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), KernelError> {
    if b.k() != k || b.n() != n {
        return Err(KernelError::new(format!(
            "packed b must be {k}x{n}, found {}x{}",
            b.k(),
            b.n()
        )));
    }
    check_matrix("a", m, k, a.len(), lda)?;
    check_matrix("c", m, n, c.len(), ldc)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(0.0);
        }
        return Ok(());
    }
    let init = vec![0u32; n.div_ceil(PANEL) * PANEL];
    let bytes: &[u8] = {
        let d = b.data();
        // SAFETY: any u16 is two initialized bytes; u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), 2 * d.len()) }
    };
    let cu: &mut [u32] = {
        // SAFETY: f32 and u32 have the same size and alignment; the kernels
        // store f32 bits.
        unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast(), c.len()) }
    };
    let problem = Problem {
        m,
        n,
        k,
        a,
        lda,
        b: bytes,
        panel_bytes: grouped::panel_rows(k, 2) * grouped::ROW_BYTES,
        init: &init,
        c: cu,
        ldc,
    };
    // SAFETY: the caller guarantees the level; shapes checked above, k > 0.
    unsafe { grouped::run(lv, problem) };
    Ok(())
}

fn level_table(level: Bf16Level) -> Level<u16> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Bf16Level::Amx => super::amx::bf16_level(),
        #[cfg(target_arch = "x86_64")]
        Bf16Level::Avx512Bf16 => Level {
            // B micro-panel 2 × 128 rows × 64 B = 16 KiB; A block 168 × 512 B.
            mr: BF16_MR,
            max_panels: 2,
            tiles: &[bf16_tile::<1>, bf16_tile::<2>],
            pack_a: pack_a_groups::<u16>,
            mc: 12 * BF16_MR,
            kc: 256,
            nc: 4096,
            begin: None,
            end: None,
        },
        #[cfg(target_arch = "x86_64")]
        Bf16Level::Avx2 => Level {
            // B micro-panel 128 rows × 64 B = 8 KiB; A block 128 × 256 f32.
            mr: AVX2_MR,
            max_panels: 1,
            tiles: &[avx2_tile],
            pack_a: pack_a_f32,
            mc: 32 * AVX2_MR,
            kc: 256,
            nc: 4096,
            begin: None,
            end: None,
        },
        #[cfg(not(target_arch = "x86_64"))]
        Bf16Level::Amx | Bf16Level::Avx512Bf16 | Bf16Level::Avx2 => scalar_level(),
        Bf16Level::Scalar => scalar_level(),
    }
}

fn scalar_level() -> Level<u16> {
    Level {
        mr: SCALAR_MR,
        max_panels: 1,
        tiles: &[scalar_tile],
        pack_a: pack_a_groups::<u16>,
        mc: 32 * SCALAR_MR,
        kc: 256,
        nc: 4096,
        begin: None,
        end: None,
    }
}

const BF16_MR: usize = 14;
const AVX2_MR: usize = 4;
const SCALAR_MR: usize = 4;

/// AVX-512 BF16 tile: `BF16_MR` rows × 16·NP columns in zmm accumulators;
/// per group, NP B rows and one 32-bit broadcast (a bf16 pair) per row.
///
/// # Safety
/// AVX-512F and BF16 present; `t` as in `grouped::Tile`, A packed by
/// `pack_a_groups::<u16>` with `mr = BF16_MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn bf16_tile<const NP: usize>(t: &grouped::Tile) {
    use std::arch::x86_64::*;
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NP]; BF16_MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (j, r) in row.iter_mut().enumerate() {
                let src = if t.load_c {
                    t.c.add(i * t.ldc + 16 * j).cast_const()
                } else {
                    t.init.add(16 * j)
                };
                *r = _mm512_loadu_ps(src.cast());
            }
        }
        let mut ap = t.a.cast::<i32>();
        let mut bp = t.b;
        for _ in 0..t.groups {
            let mut bv = [_mm512_setzero_si512(); NP];
            for (j, v) in bv.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(bp.add(j * t.bstride).cast());
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av: __m512bh =
                    std::mem::transmute(_mm512_set1_epi32(ap.add(i).read_unaligned()));
                for (j, r) in row.iter_mut().enumerate() {
                    let b: __m512bh = std::mem::transmute(bv[j]);
                    *r = _mm512_dpbf16_ps(*r, av, b);
                }
            }
            ap = ap.add(BF16_MR);
            bp = bp.add(grouped::ROW_BYTES);
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, r) in row.iter().enumerate() {
                _mm512_storeu_ps(t.c.add(i * t.ldc + 16 * j).cast(), *r);
            }
        }
    }
}

/// A for the AVX2 tile: as `pack_a_groups::<u16>` but each bf16 widened to
/// its f32 bits, so a row's pair is two `vbroadcastss` loads.
fn pack_a_f32(
    mr: usize,
    a: &[u16],
    lda: usize,
    rows: usize,
    kb: usize,
    out: &mut Vec<u8>,
) -> usize {
    let groups = kb.div_ceil(2);
    let pstride = groups * mr * 8;
    out.clear();
    out.resize(rows.div_ceil(mr) * pstride, 0);
    for i in 0..rows {
        let base = (i / mr) * pstride + (i % mr) * 8;
        for (r, &v) in a[i * lda..i * lda + kb].iter().enumerate() {
            let at = base + (r / 2) * mr * 8 + (r % 2) * 4;
            out[at..at + 4].copy_from_slice(&bf16_to_f32(v).to_ne_bytes());
        }
    }
    pstride
}

/// AVX2 tile: `AVX2_MR` rows × 16 columns (8 ymm accumulators). A B row of
/// 8 bf16 pairs becomes two f32 vectors: the lower k by a 16-bit left
/// shift of each lane, the upper k by masking the lower half away.
///
/// # Safety
/// AVX2 and FMA present; `t` as in `grouped::Tile`, A packed by
/// `pack_a_f32` with `mr = AVX2_MR`, one panel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile(t: &grouped::Tile) {
    use std::arch::x86_64::*;
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; AVX2_MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (h, r) in row.iter_mut().enumerate() {
                let src = if t.load_c {
                    t.c.add(i * t.ldc + 8 * h).cast_const()
                } else {
                    t.init.add(8 * h)
                };
                *r = _mm256_loadu_ps(src.cast());
            }
        }
        let hi_mask = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
        let mut ap = t.a.cast::<f32>();
        let mut bp = t.b;
        for _ in 0..t.groups {
            let x0 = _mm256_loadu_si256(bp.cast());
            let x1 = _mm256_loadu_si256(bp.add(32).cast());
            let b00 = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(x0));
            let b01 = _mm256_castsi256_ps(_mm256_and_si256(x0, hi_mask));
            let b10 = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(x1));
            let b11 = _mm256_castsi256_ps(_mm256_and_si256(x1, hi_mask));
            for (i, row) in acc.iter_mut().enumerate() {
                let a0 = _mm256_set1_ps(ap.add(2 * i).read_unaligned());
                let a1 = _mm256_set1_ps(ap.add(2 * i + 1).read_unaligned());
                row[0] = _mm256_fmadd_ps(a1, b01, _mm256_fmadd_ps(a0, b00, row[0]));
                row[1] = _mm256_fmadd_ps(a1, b11, _mm256_fmadd_ps(a0, b10, row[1]));
            }
            ap = ap.add(2 * AVX2_MR);
            bp = bp.add(grouped::ROW_BYTES);
        }
        for (i, row) in acc.iter().enumerate() {
            for (h, r) in row.iter().enumerate() {
                _mm256_storeu_ps(t.c.add(i * t.ldc + 8 * h).cast(), *r);
            }
        }
    }
}

/// Portable tile: `SCALAR_MR` rows × 16 columns.
///
/// # Safety
/// `t` as in `grouped::Tile`, A packed by `pack_a_groups::<u16>` with
/// `mr = SCALAR_MR`, one panel.
unsafe fn scalar_tile(t: &grouped::Tile) {
    let mut acc = [[0f32; PANEL]; SCALAR_MR];
    // SAFETY: the caller guarantees the tile, `groups` rows of A and B.
    let (a, b) = unsafe {
        for (i, row) in acc.iter_mut().enumerate() {
            let src = if t.load_c {
                t.c.add(i * t.ldc).cast_const()
            } else {
                t.init
            };
            for (j, x) in row.iter_mut().enumerate() {
                *x = f32::from_bits(*src.add(j));
            }
        }
        (
            std::slice::from_raw_parts(t.a, t.groups * SCALAR_MR * 4),
            std::slice::from_raw_parts(t.b, t.groups * grouped::ROW_BYTES),
        )
    };
    // A group's two bf16 values, as f32 (bytes: no alignment assumed).
    let pair = |g: &[u8]| {
        (
            bf16_to_f32(u16::from_ne_bytes([g[0], g[1]])),
            bf16_to_f32(u16::from_ne_bytes([g[2], g[3]])),
        )
    };
    for (ag, bg) in a
        .chunks_exact(SCALAR_MR * 4)
        .zip(b.chunks_exact(grouped::ROW_BYTES))
    {
        let mut bv = [(0f32, 0f32); PANEL];
        for (v, g) in bv.iter_mut().zip(bg.chunks_exact(4)) {
            *v = pair(g);
        }
        for (row, g) in acc.iter_mut().zip(ag.chunks_exact(4)) {
            let (a0, a1) = pair(g);
            for (x, &(b0, b1)) in row.iter_mut().zip(&bv) {
                // bf16 products are exact in f32, so this rounds like an FMA
                // (without a libm `fmaf` call on baseline x86-64).
                *x = (*x + a0 * b0) + a1 * b1;
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the caller guarantees a full tile at `c`, row stride `ldc`.
        let dst = unsafe { std::slice::from_raw_parts_mut(t.c.add(i * t.ldc), PANEL) };
        for (d, &x) in dst.iter_mut().zip(row) {
            *d = x.to_bits();
        }
    }
}
