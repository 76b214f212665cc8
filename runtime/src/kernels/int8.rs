//! The int8 GEMM of the quantized operators: `C[m×n] = Σ_k (A − zp_A)·B`
//! for a u8 activation A (zero point `zp_A`) and an s8 weight B, exactly in
//! i32, computed as `A·B − zp_A·colsum(B)` so that every level multiplies
//! raw u8 × s8 bytes.
//!
//! B is packed at compile time ([`pack_b_s8`]) in the grouped layout of
//! `grouped.rs`: groups of 4 consecutive k per column, 16-column panels of
//! 64-byte rows — the operand shape of `vpdpbusd` and of AMX's B tile — and
//! its per-column sums travel with it.
//!
//! Levels ([`Int8Level`]): AMX (`tdpbusd`, `amx.rs`), AVX-512 VNNI
//! (`vpdpbusd zmm`, 14×32 register tile), AVX2 (u8→i16 and s8→i16 widening,
//! then `vpmaddwd`: exact, unlike `vpmaddubsw`, whose i16 pair sum saturates
//! at 255·(−128)·2), and portable Rust. All accumulate in wrapping i32, so
//! every level returns the same bits: the exact sum whenever it fits in i32
//! (always for `k ≤ 65 793`, since |(a − zp)·b| ≤ 255·128), and that sum
//! modulo 2³² otherwise.
//!
//! [`requantize_i32`] is the epilogue of a quantized operator: i32 sums plus
//! bias, scaled in f32, rounded half to even, shifted by the output zero
//! point and saturated to u8 or i8.

use super::KernelError;
use super::detect::{Isa, has_avx512_vnni};
use super::grouped::{self, Level, PANEL, Problem, check_matrix, pack_a_groups};

/// A `k × n` s8 matrix B packed for the int8 GEMM, with its column sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedS8 {
    k: usize,
    n: usize,
    data: Vec<i8>,
    col_sums: Vec<i32>,
}

/// A borrowed [`PackedS8`], e.g. slices of an mmapped artifact.
#[derive(Clone, Copy, Debug)]
pub struct PackedS8Ref<'a> {
    k: usize,
    n: usize,
    data: &'a [i8],
    col_sums: &'a [i32],
}

/// Bytes of a packed `k × n` B: `ceil(n/16)` panels of
/// `round_up(ceil(k/4), 16)` rows of 64 bytes.
pub fn packed_s8_len(k: usize, n: usize) -> Result<usize, KernelError> {
    grouped::packed_bytes(k, n, 4)
}

/// Packs the row-major `k × n` matrix `b` (row stride `ldb`): byte
/// `(p·R + q)·64 + 4j + r` holds `B[4q + r][16p + j]` (zero outside B), with
/// `R = round_up(ceil(k/4), 16)`; `col_sums[j] = Σ_k B[k][j]`.
pub fn pack_b_s8(k: usize, n: usize, b: &[i8], ldb: usize) -> Result<PackedS8, KernelError> {
    check_matrix("b", k, n, b.len(), ldb)?;
    packed_s8_len(k, n)?;
    let bytes: Vec<u8> = b.iter().map(|&v| v as u8).collect();
    let data = grouped::pack_b(k, n, &bytes, ldb)
        .into_iter()
        .map(|v| v as i8)
        .collect();
    let mut col_sums = vec![0i32; n];
    for r in 0..k {
        for (s, &v) in col_sums.iter_mut().zip(&b[r * ldb..r * ldb + n]) {
            *s += i32::from(v);
        }
    }
    Ok(PackedS8 {
        k,
        n,
        data,
        col_sums,
    })
}

/// [`pack_b_s8`] of the `k × n` matrix whose column `j` is row `j` of `bt`
/// (`n × k`, row stride `ldbt`): each packed group of 4 consecutive `k` of
/// one column is 4 consecutive bytes of `bt`, so packing is a 4-byte copy
/// per group (a run-time B such as attention's `Kᵀ` packs this way).
pub fn pack_b_s8_from_columns(k: usize, n: usize, bt: &[i8], ldbt: usize) -> Result<PackedS8, KernelError> {
    check_matrix("b (by columns)", n, k, bt.len(), ldbt)?;
    let len = packed_s8_len(k, n)?;
    let rows = grouped::panel_rows(k, 4);
    let mut data = vec![0i8; len];
    let mut col_sums = vec![0i32; n];
    for (j, sum) in col_sums.iter_mut().enumerate() {
        let col = &bt[j * ldbt..j * ldbt + k];
        *sum = col.iter().map(|&v| v as i32).sum();
        let (p, jj) = (j / grouped::PANEL, j % grouped::PANEL);
        for (q, group) in col.chunks(4).enumerate() {
            let at = (p * rows + q) * grouped::ROW_BYTES + jj * 4;
            data[at..at + group.len()].copy_from_slice(group);
        }
    }
    Ok(PackedS8 { k, n, data, col_sums })
}

impl PackedS8 {
    /// Takes ownership of data already packed (e.g. read from an artifact);
    /// checks the lengths.
    pub fn from_parts(
        k: usize,
        n: usize,
        data: Vec<i8>,
        col_sums: Vec<i32>,
    ) -> Result<PackedS8, KernelError> {
        PackedS8Ref::new(k, n, &data, &col_sums)?;
        Ok(PackedS8 {
            k,
            n,
            data,
            col_sums,
        })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    /// The packed bytes, in the layout of [`pack_b_s8`].
    pub fn data(&self) -> &[i8] {
        &self.data
    }
    /// `Σ_k B[k][j]` for each column `j`.
    pub fn col_sums(&self) -> &[i32] {
        &self.col_sums
    }
    pub fn as_ref(&self) -> PackedS8Ref<'_> {
        PackedS8Ref {
            k: self.k,
            n: self.n,
            data: &self.data,
            col_sums: &self.col_sums,
        }
    }
}

impl<'a> PackedS8Ref<'a> {
    /// Views packed bytes and column sums as a `k × n` matrix; `data` must
    /// hold exactly [`packed_s8_len`]`(k, n)` bytes and `col_sums` `n` sums.
    pub fn new(
        k: usize,
        n: usize,
        data: &'a [i8],
        col_sums: &'a [i32],
    ) -> Result<PackedS8Ref<'a>, KernelError> {
        let want = packed_s8_len(k, n)?;
        if data.len() != want {
            return Err(KernelError::new(format!(
                "packed b of {k}x{n} must hold {want} bytes, found {}",
                data.len()
            )));
        }
        if col_sums.len() != n {
            return Err(KernelError::new(format!(
                "column sums of packed b must have {n} elements, found {}",
                col_sums.len()
            )));
        }
        Ok(PackedS8Ref {
            k,
            n,
            data,
            col_sums,
        })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn data(&self) -> &'a [i8] {
        self.data
    }
    pub fn col_sums(&self) -> &'a [i32] {
        self.col_sums
    }
}

/// A code path of the int8 GEMM, fastest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8Level {
    /// AMX tiles, `tdpbusd`: 32×32 blocks of four 16×16 i32 tiles.
    Amx,
    /// AVX-512 VNNI, `vpdpbusd zmm`: 14×32 register tile.
    Avx512Vnni,
    /// AVX2, widening to i16 and `vpmaddwd`: 6×16 register tile.
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl Int8Level {
    /// Every level, fastest first.
    pub const ALL: [Int8Level; 4] = [
        Int8Level::Amx,
        Int8Level::Avx512Vnni,
        Int8Level::Avx2,
        Int8Level::Scalar,
    ];

    /// Lower-case name used in messages and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Int8Level::Amx => "amx",
            Int8Level::Avx512Vnni => "avx512-vnni",
            Int8Level::Avx2 => "avx2",
            Int8Level::Scalar => "scalar",
        }
    }

    /// Whether this CPU (and, for AMX, the OS) can run the level.
    pub fn is_supported(self) -> bool {
        match self {
            Int8Level::Amx => super::amx::amx_int8_available(),
            Int8Level::Avx512Vnni => has_avx512_vnni(),
            Int8Level::Avx2 => Isa::Avx2.is_supported(),
            Int8Level::Scalar => true,
        }
    }

    /// The fastest supported level.
    pub fn best() -> Int8Level {
        Int8Level::ALL
            .into_iter()
            .find(|l| l.is_supported())
            .unwrap_or(Int8Level::Scalar)
    }
}

impl std::fmt::Display for Int8Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `C = Σ_k (A − a_zero_point)·B` on the fastest level: A row-major
/// `m × k` u8 (row stride `lda`), B packed, C row-major `m × n` i32 (row
/// stride `ldc`, overwritten). Runs in the current rayon pool.
// BLAS-shaped on purpose: the backend emits calls with exactly these operands.
#[allow(clippy::too_many_arguments)]
pub fn gemm_u8s8(
    m: usize,
    n: usize,
    k: usize,
    a: &[u8],
    lda: usize,
    a_zero_point: i32,
    b: PackedS8Ref<'_>,
    c: &mut [i32],
    ldc: usize,
) -> Result<(), KernelError> {
    gemm_u8s8_level(Int8Level::best(), m, n, k, a, lda, a_zero_point, b, c, ldc)
}

/// [`gemm_u8s8`] on a given level (tests, benchmarks); refused when the CPU
/// lacks it.
#[allow(clippy::too_many_arguments)]
pub fn gemm_u8s8_level(
    level: Int8Level,
    m: usize,
    n: usize,
    k: usize,
    a: &[u8],
    lda: usize,
    a_zero_point: i32,
    b: PackedS8Ref<'_>,
    c: &mut [i32],
    ldc: usize,
) -> Result<(), KernelError> {
    if !level.is_supported() {
        return Err(KernelError::new(format!(
            "int8 level {level} is not supported by this cpu"
        )));
    }
    // SAFETY: the level is supported.
    unsafe {
        run_level(
            &level_table(level),
            m,
            n,
            k,
            a,
            lda,
            a_zero_point,
            b,
            c,
            ldc,
        )
    }
}

/// Checks the arguments and runs the product on `lv`.
///
/// # Safety
/// The CPU supports `lv`'s kernels.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_level(
    lv: &Level<u8>,
    m: usize,
    n: usize,
    k: usize,
    a: &[u8],
    lda: usize,
    a_zero_point: i32,
    b: PackedS8Ref<'_>,
    c: &mut [i32],
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
    if !(0..=255).contains(&a_zero_point) {
        return Err(KernelError::new(format!(
            "zero point of a must be in 0..=255, found {a_zero_point}"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for i in 0..m {
            c[i * ldc..i * ldc + n].fill(0);
        }
        return Ok(());
    }
    // Every column starts at −zp·colsum; the kernels then add raw A·B.
    let mut init = vec![0u32; n.div_ceil(PANEL) * PANEL];
    for (x, &s) in init.iter_mut().zip(b.col_sums()) {
        *x = s.wrapping_mul(-a_zero_point) as u32;
    }
    let bytes: &[u8] = {
        let d = b.data();
        // SAFETY: i8 and u8 have the same size and alignment.
        unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) }
    };
    let cu: &mut [u32] = {
        // SAFETY: i32 and u32 have the same size and alignment; the kernels
        // store wrapping i32 sums as their bits.
        unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast(), c.len()) }
    };
    let problem = Problem {
        m,
        n,
        k,
        a,
        lda,
        b: bytes,
        panel_bytes: grouped::panel_rows(k, 4) * grouped::ROW_BYTES,
        init: &init,
        c: cu,
        ldc,
    };
    // SAFETY: the caller guarantees the level; shapes checked above, k > 0.
    unsafe { grouped::run(lv, problem) };
    Ok(())
}

fn level_table(level: Int8Level) -> Level<u8> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Int8Level::Amx => super::amx::int8_level(),
        #[cfg(target_arch = "x86_64")]
        Int8Level::Avx512Vnni => Level {
            // B micro-panel 2 × 128 rows × 64 B = 16 KiB (L1); A block
            // 168 × 512 B = 84 KiB (L2).
            mr: VNNI_MR,
            max_panels: 2,
            tiles: &[vnni_tile::<1>, vnni_tile::<2>],
            pack_a: pack_a_groups::<u8>,
            mc: 12 * VNNI_MR,
            kc: 512,
            nc: 4096,
            begin: None,
            end: None,
        },
        #[cfg(target_arch = "x86_64")]
        Int8Level::Avx2 => Level {
            // B micro-panel 128 rows × 64 B = 8 KiB; A block 144 × 512 i16.
            mr: AVX2_MR,
            max_panels: 1,
            tiles: &[avx2_tile],
            pack_a: pack_a_wide,
            mc: 24 * AVX2_MR,
            kc: 512,
            nc: 4096,
            begin: None,
            end: None,
        },
        #[cfg(not(target_arch = "x86_64"))]
        Int8Level::Amx | Int8Level::Avx512Vnni | Int8Level::Avx2 => scalar_level(),
        Int8Level::Scalar => scalar_level(),
    }
}

fn scalar_level() -> Level<u8> {
    Level {
        mr: SCALAR_MR,
        max_panels: 1,
        tiles: &[scalar_tile],
        pack_a: pack_a_groups::<u8>,
        mc: 32 * SCALAR_MR,
        kc: 512,
        nc: 4096,
        begin: None,
        end: None,
    }
}

const VNNI_MR: usize = 14;
const AVX2_MR: usize = 6;
const SCALAR_MR: usize = 4;

/// AVX-512 VNNI tile: `VNNI_MR` rows × 16·NP columns in 14·NP zmm
/// accumulators; per group, NP B rows and one 32-bit broadcast of A per row.
///
/// # Safety
/// AVX-512F and VNNI present; `t` as in `grouped::Tile`, A packed by
/// `pack_a_groups` with `mr = VNNI_MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn vnni_tile<const NP: usize>(t: &grouped::Tile) {
    use std::arch::x86_64::*;
    unsafe {
        let mut acc = [[_mm512_setzero_si512(); NP]; VNNI_MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (j, r) in row.iter_mut().enumerate() {
                let src = if t.load_c {
                    t.c.add(i * t.ldc + 16 * j)
                } else {
                    t.init.add(16 * j)
                };
                *r = _mm512_loadu_si512(src.cast());
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
                let av = _mm512_set1_epi32(ap.add(i).read_unaligned());
                for (j, r) in row.iter_mut().enumerate() {
                    // u8 (A, first) × s8 (B, second), 4 products per lane.
                    *r = _mm512_dpbusd_epi32(*r, av, bv[j]);
                }
            }
            ap = ap.add(VNNI_MR);
            bp = bp.add(grouped::ROW_BYTES);
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, r) in row.iter().enumerate() {
                _mm512_storeu_si512(t.c.add(i * t.ldc + 16 * j).cast(), *r);
            }
        }
    }
}

/// A for the AVX2 tile: as `pack_a_groups` but each u8 widened to a
/// little-endian u16, so a row's group (4 × i16, 8 bytes) is one 64-bit
/// broadcast.
fn pack_a_wide(
    mr: usize,
    a: &[u8],
    lda: usize,
    rows: usize,
    kb: usize,
    out: &mut Vec<u8>,
) -> usize {
    let groups = kb.div_ceil(4);
    let pstride = groups * mr * 8;
    out.clear();
    out.resize(rows.div_ceil(mr) * pstride, 0);
    for i in 0..rows {
        let base = (i / mr) * pstride + (i % mr) * 8;
        for (q, g) in a[i * lda..i * lda + kb].chunks(4).enumerate() {
            let at = base + q * mr * 8;
            for (d, &v) in out[at..at + 8].chunks_exact_mut(2).zip(g) {
                d.copy_from_slice(&u16::from(v).to_ne_bytes());
            }
        }
    }
    pstride
}

/// AVX2 tile: `AVX2_MR` rows × 16 columns, computed as two halves of 8
/// columns (12 accumulators each: 6 rows × 2 vectors of 4 columns × 2
/// partial sums). B's 4-byte groups are sign-extended to i16 (`vpmovsxbw`),
/// A's are already i16; `vpmaddwd` sums adjacent pairs exactly into i32,
/// and `vphaddd` folds the two partial sums of a column at the end.
///
/// # Safety
/// AVX2 present; `t` as in `grouped::Tile`, A packed by `pack_a_wide` with
/// `mr = AVX2_MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_tile(t: &grouped::Tile) {
    use std::arch::x86_64::*;
    unsafe {
        for h in 0..2 {
            let mut lo = [_mm256_setzero_si256(); AVX2_MR];
            let mut hi = [_mm256_setzero_si256(); AVX2_MR];
            let mut ap = t.a.cast::<i64>();
            let mut bp = t.b.add(32 * h);
            for _ in 0..t.groups {
                // Columns 8h..8h+4 and 8h+4..8h+8, 16 × i16 each.
                let b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(bp.cast()));
                let b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(bp.add(16).cast()));
                for i in 0..AVX2_MR {
                    let av = _mm256_set1_epi64x(ap.add(i).read_unaligned());
                    lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(av, b0));
                    hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(av, b1));
                }
                ap = ap.add(AVX2_MR);
                bp = bp.add(grouped::ROW_BYTES);
            }
            for i in 0..AVX2_MR {
                // hadd gives columns [0 1 4 5 | 2 3 6 7]; the permute
                // restores their order.
                let sum = _mm256_permute4x64_epi64::<0xD8>(_mm256_hadd_epi32(lo[i], hi[i]));
                let dst = t.c.add(i * t.ldc + 8 * h);
                let base = if t.load_c {
                    dst.cast_const()
                } else {
                    t.init.add(8 * h)
                };
                let v = _mm256_add_epi32(_mm256_loadu_si256(base.cast()), sum);
                _mm256_storeu_si256(dst.cast(), v);
            }
        }
    }
}

/// Portable tile: `SCALAR_MR` rows × 16 columns.
///
/// # Safety
/// `t` as in `grouped::Tile`, A packed by `pack_a_groups` with
/// `mr = SCALAR_MR`, one panel.
unsafe fn scalar_tile(t: &grouped::Tile) {
    let mut acc = [[0i32; PANEL]; SCALAR_MR];
    // SAFETY: the caller guarantees the tile, `groups` rows of A and B.
    let (a, b) = unsafe {
        for (i, row) in acc.iter_mut().enumerate() {
            let src = if t.load_c {
                t.c.add(i * t.ldc).cast_const()
            } else {
                t.init
            };
            for (j, x) in row.iter_mut().enumerate() {
                *x = *src.add(j) as i32;
            }
        }
        (
            std::slice::from_raw_parts(t.a, t.groups * SCALAR_MR * 4),
            std::slice::from_raw_parts(t.b, t.groups * grouped::ROW_BYTES),
        )
    };
    for (ag, bg) in a
        .chunks_exact(SCALAR_MR * 4)
        .zip(b.chunks_exact(grouped::ROW_BYTES))
    {
        // B's group as 4 rows of 16 columns, so the inner loop runs along
        // columns and vectorizes.
        let mut bv = [[0i32; PANEL]; 4];
        for (j, bc) in bg.chunks_exact(4).enumerate() {
            for (r, &b) in bc.iter().enumerate() {
                bv[r][j] = i32::from(b as i8);
            }
        }
        for (row, ar) in acc.iter_mut().zip(ag.chunks_exact(4)) {
            for (&a, br) in ar.iter().zip(&bv) {
                let a = i32::from(a);
                for (x, &b) in row.iter_mut().zip(br) {
                    *x = x.wrapping_add(a * b);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the caller guarantees a full tile at `c`, row stride `ldc`.
        let dst = unsafe { std::slice::from_raw_parts_mut(t.c.add(i * t.ldc), PANEL) };
        for (d, &x) in dst.iter_mut().zip(row) {
            *d = x as u32;
        }
    }
}

/// The scale of [`requantize_i32`]: one for the tensor or one per column.
#[derive(Clone, Copy, Debug)]
pub enum RequantScale<'a> {
    PerTensor(f32),
    PerColumn(&'a [f32]),
}

/// The output of [`requantize_i32`], row-major with its own row stride.
#[derive(Debug)]
pub enum QuantOut<'a> {
    U8(&'a mut [u8]),
    I8(&'a mut [i8]),
}

/// `out[i][j] = saturate(round_half_even((acc[i][j] + bias[j]) · scale_j)
///     + out_zero_point)` for an `m × n` block, row-major with strides `ld_acc`
/// and `ldo`. The i32 sum plus bias (wrapping) is converted to f32 and
/// multiplied in f32 (as ONNX Runtime does), rounded half to even, shifted
/// by the zero point and saturated to the output type; a NaN product
/// saturates to the type's minimum.
#[allow(clippy::too_many_arguments)]
pub fn requantize_i32(
    m: usize,
    n: usize,
    acc: &[i32],
    ld_acc: usize,
    bias: Option<&[i32]>,
    scale: RequantScale<'_>,
    out_zero_point: i32,
    out: QuantOut<'_>,
    ldo: usize,
) -> Result<(), KernelError> {
    check_matrix("accumulators", m, n, acc.len(), ld_acc)?;
    if let Some(bias) = bias
        && bias.len() != n
    {
        return Err(KernelError::new(format!(
            "bias must have {n} elements, found {}",
            bias.len()
        )));
    }
    if let RequantScale::PerColumn(s) = scale
        && s.len() != n
    {
        return Err(KernelError::new(format!(
            "per-column scale must have {n} elements, found {}",
            s.len()
        )));
    }
    let (lo, hi, len) = match &out {
        QuantOut::U8(o) => (0, 255, o.len()),
        QuantOut::I8(o) => (-128, 127, o.len()),
    };
    check_matrix("output", m, n, len, ldo)?;
    if !(lo..=hi).contains(&out_zero_point) {
        return Err(KernelError::new(format!(
            "output zero point must be in {lo}..={hi}, found {out_zero_point}"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mut row = vec![0i32; n];
    let zp = out_zero_point as f32;
    match out {
        QuantOut::U8(o) => {
            for i in 0..m {
                requant_row(&acc[i * ld_acc..], bias, scale, zp, (0.0, 255.0), &mut row);
                for (d, &q) in o[i * ldo..i * ldo + n].iter_mut().zip(&row) {
                    *d = q as u8;
                }
            }
        }
        QuantOut::I8(o) => {
            for i in 0..m {
                requant_row(
                    &acc[i * ld_acc..],
                    bias,
                    scale,
                    zp,
                    (-128.0, 127.0),
                    &mut row,
                );
                for (d, &q) in o[i * ldo..i * ldo + n].iter_mut().zip(&row) {
                    *d = q as i8;
                }
            }
        }
    }
    Ok(())
}

/// One row of [`requantize_i32`] into `out` (`out.len()` columns),
/// saturated to `lo..=hi`.
fn requant_row(
    acc: &[i32],
    bias: Option<&[i32]>,
    scale: RequantScale<'_>,
    zp: f32,
    (lo, hi): (f32, f32),
    out: &mut [i32],
) {
    // Adding and subtracting 1.5·2²³ rounds |v| ≤ 2²² to an integer, half
    // to even (the default rounding mode), without a libm call on baseline
    // x86-64; anything beyond ±2²² saturates anyway.
    const MAGIC: f32 = 12_582_912.0;
    const LIMIT: f32 = 4_194_304.0;
    for (j, (o, &x)) in out.iter_mut().zip(acc).enumerate() {
        let x = match bias {
            Some(b) => x.wrapping_add(b[j]),
            None => x,
        };
        let s = match scale {
            RequantScale::PerTensor(s) => s,
            RequantScale::PerColumn(s) => s[j],
        };
        let v = (x as f32 * s).clamp(-LIMIT, LIMIT);
        let r = (v + MAGIC) - MAGIC;
        // `max` then `min` (not `clamp`): a NaN becomes `lo`.
        *o = (r + zp).max(lo).min(hi) as i32;
    }
}
