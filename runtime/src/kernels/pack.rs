//! Packed layouts: B (weights) in column panels, packed once at compile time
//! and stored in the artifact; A in row micro-panels, packed per cache block
//! at run time.
//!
//! The layout of B is the contract with the compiler, so it is defined once
//! in `aoc_plan::pack` (see its module doc); this module wraps it in the
//! typed [`PackedB`] / [`PackedBRef`] the GEMM takes, and packs A.

use super::gemm::GemmError;

pub(crate) use aoc_plan::pack::check_matrix;
pub use aoc_plan::pack::{PANEL_WIDTH, packed_len};

/// A `k × n` matrix B packed in column panels (layout: `aoc_plan::pack`).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

/// A borrowed packed B, e.g. a slice of an mmapped artifact.
#[derive(Clone, Copy, Debug)]
pub struct PackedBRef<'a> {
    k: usize,
    n: usize,
    data: &'a [f32],
}

/// Packs the row-major `k × n` matrix `b` (row stride `ldb`) into panels
/// (`aoc_plan::pack::pack_b`).
pub fn pack_b(k: usize, n: usize, b: &[f32], ldb: usize) -> Result<PackedB, GemmError> {
    let data = aoc_plan::pack::pack_b(k, n, b, ldb)?;
    Ok(PackedB { k, n, data })
}

impl PackedB {
    /// Takes ownership of data already in the packed layout (e.g. read from
    /// an artifact); checks the length.
    pub fn from_packed(k: usize, n: usize, data: Vec<f32>) -> Result<PackedB, GemmError> {
        PackedBRef::new(k, n, &data)?;
        Ok(PackedB { k, n, data })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    /// The packed floats, in the layout of `aoc_plan::pack`.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    pub fn as_ref(&self) -> PackedBRef<'_> {
        PackedBRef {
            k: self.k,
            n: self.n,
            data: &self.data,
        }
    }
}

impl<'a> PackedBRef<'a> {
    /// Views `data` as a packed `k × n` matrix; its length must be exactly
    /// [`packed_len`]`(k, n)`.
    pub fn new(k: usize, n: usize, data: &'a [f32]) -> Result<PackedBRef<'a>, GemmError> {
        let want = k
            .checked_mul(n.div_ceil(PANEL_WIDTH) * PANEL_WIDTH)
            .ok_or_else(|| GemmError::new(format!("packed b of {k}x{n} is too large")))?;
        if data.len() != want {
            return Err(GemmError::new(format!(
                "packed b of {k}x{n} must hold {want} floats, found {}",
                data.len()
            )));
        }
        Ok(PackedBRef { k, n, data })
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn as_slice(&self) -> &'a [f32] {
        self.data
    }
}

/// Packs the `rows × depth` block of A at `a` (row stride `lda`) into
/// micro-panels of `mr` rows: panel `i` holds, for each `p < depth`, the
/// `mr` floats `A[i·mr .. i·mr+mr][p]`, rows past `rows` zero. The
/// micro-kernel then reads one contiguous run of `mr` floats per k step.
///
/// `out` keeps its allocation (and length, when large enough) from call to
/// call: every element of the packed block is written here, so nothing is
/// cleared first. Each panel is written in order, one k step at a time,
/// from `mr` sequential row streams.
pub(crate) fn pack_a(
    mr: usize,
    a: &[f32],
    lda: usize,
    rows: usize,
    depth: usize,
    out: &mut Vec<f32>,
) {
    let panels = rows.div_ceil(mr);
    let len = panels * mr * depth;
    if out.len() < len {
        out.resize(len, 0.0);
    }
    if depth == 0 {
        return;
    }
    for (ip, panel) in out[..len].chunks_exact_mut(mr * depth).enumerate() {
        let live = mr.min(rows - ip * mr);
        let src = &a[ip * mr * lda..];
        match mr {
            4 => pack_panel::<4>(panel, src, lda, live, depth),
            6 => pack_panel::<6>(panel, src, lda, live, depth),
            14 => pack_panel::<14>(panel, src, lda, live, depth),
            _ => {
                for (p, step) in panel.chunks_exact_mut(mr).enumerate() {
                    for (i, x) in step.iter_mut().enumerate() {
                        *x = if i < live { src[i * lda + p] } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// One panel of [`pack_a`] for a register tile of `MR` rows, `live` of them
/// present in `src` (the rest packed as zeros).
#[inline(always)]
fn pack_panel<const MR: usize>(
    panel: &mut [f32],
    src: &[f32],
    lda: usize,
    live: usize,
    depth: usize,
) {
    let row = |i: usize| {
        if i < live {
            &src[i * lda..i * lda + depth]
        } else {
            &[][..]
        }
    };
    let rows: [&[f32]; MR] = std::array::from_fn(row);
    if live == MR {
        for (p, step) in panel.chunks_exact_mut(MR).enumerate() {
            for i in 0..MR {
                step[i] = rows[i][p];
            }
        }
    } else {
        for (p, step) in panel.chunks_exact_mut(MR).enumerate() {
            for i in 0..MR {
                step[i] = if i < live { rows[i][p] } else { 0.0 };
            }
        }
    }
}
