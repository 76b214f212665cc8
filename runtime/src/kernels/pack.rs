//! Packed layouts: B (weights) in column panels, packed once at compile time
//! and stored in the artifact; A in row micro-panels, packed per cache block
//! at run time.
//!
//! **Layout of [`PackedB`]** (the contract with the compiler, which writes it
//! into the artifact): B is `k × n`, row-major in the source. Its columns are
//! cut into `P = ceil(n / 16)` panels of [`PANEL_WIDTH`] = 16 columns. Panel
//! `p` occupies floats `[p·k·16, (p+1)·k·16)`; inside it, row `r` of the panel
//! is the 16 floats at `p·k·16 + r·16`, holding `B[r][16p .. 16p+16]`. Columns
//! past `n` in the last panel are zero. Total length: `P·k·16` floats.
//! The layout does not depend on the ISA or on the cache-block sizes: every
//! micro-kernel reads 1, 2 or 3 neighbouring panels, and a k-block of a panel
//! is a contiguous slice, so one packed weight serves every target level.

use super::gemm::GemmError;

/// Columns per panel of a packed B.
pub const PANEL_WIDTH: usize = 16;

/// A `k × n` matrix B packed in column panels (layout in the module doc).
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

/// Number of floats in a packed `k × n` matrix.
pub fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(PANEL_WIDTH) * PANEL_WIDTH * k
}

/// Packs the row-major `k × n` matrix `b` (row stride `ldb`) into panels.
pub fn pack_b(k: usize, n: usize, b: &[f32], ldb: usize) -> Result<PackedB, GemmError> {
    check_matrix("b", k, n, b.len(), ldb)?;
    let panels = n.div_ceil(PANEL_WIDTH);
    let mut data = vec![0.0f32; packed_len(k, n)];
    for p in 0..panels {
        let c0 = p * PANEL_WIDTH;
        let width = PANEL_WIDTH.min(n - c0);
        for r in 0..k {
            let dst = p * k * PANEL_WIDTH + r * PANEL_WIDTH;
            let src = r * ldb + c0;
            data[dst..dst + width].copy_from_slice(&b[src..src + width]);
        }
    }
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
    /// The packed floats, in the layout of the module doc.
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

/// Checks that a row-major `rows × cols` matrix with row stride `ld` fits in
/// `len` floats.
pub(crate) fn check_matrix(
    name: &str,
    rows: usize,
    cols: usize,
    len: usize,
    ld: usize,
) -> Result<(), GemmError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    if ld < cols {
        return Err(GemmError::new(format!(
            "leading dimension of {name} must be at least {cols}, found {ld}"
        )));
    }
    let need = (rows - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(cols))
        .ok_or_else(|| GemmError::new(format!("{name} of {rows}x{cols} is too large")))?;
    if len < need {
        return Err(GemmError::new(format!(
            "{name} of {rows}x{cols} with leading dimension {ld} needs {need} floats, found {len}"
        )));
    }
    Ok(())
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
