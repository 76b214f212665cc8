//! The packed weight layouts: the form the compiler stores weights in
//! (`aoc_passes::lower` packs them at compile time) and the runtime's CPU
//! kernels read them in, straight out of the mapped artifact.
//!
//! **Layout of a packed B** ([`pack_b`], the GEMM's right-hand matrix):
//! B is `k × n`, row-major in the source. Its columns are cut into
//! `P = ceil(n / 16)` panels of [`PANEL_WIDTH`] = 16 columns. Panel `p`
//! occupies floats `[p·k·16, (p+1)·k·16)`; inside it, row `r` of the panel
//! is the 16 floats at `p·k·16 + r·16`, holding `B[r][16p .. 16p+16]`.
//! Columns past `n` in the last panel are zero. Total length: `P·k·16`
//! floats ([`packed_len`]). The layout does not depend on the ISA or on the
//! cache-block sizes: every micro-kernel reads 1, 2 or 3 neighbouring
//! panels, and a k-block of a panel is a contiguous slice, so one packed
//! weight serves every target level.
//!
//! The convolution layouts build on it ([`conv`]), as does Winograd's
//! ([`winograd`]).
//!
//! Invariants: this module is the one definition of each layout; the
//! runtime's kernels import [`PANEL_WIDTH`], [`packed_len`] and
//! [`ConvDims`] from here rather than restating them. Packing never panics
//! on bad arguments: it returns a [`PackError`] naming the expectation.

use std::fmt;

pub mod conv;
pub mod winograd;

pub use conv::{
    ConvDims, conv_out_size, conv_transpose2d_pack_weights, conv2d_pack_weights,
    depthwise_pack_weights,
};
pub use winograd::{winograd_pack_weights, winograd_packed_len, winograd_side};

/// Columns per panel of a packed B.
pub const PANEL_WIDTH: usize = 16;

/// Arguments a packing function refuses; the message names the expectation.
/// (The runtime turns it into its kernels' `GemmError` with the same
/// message.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackError {
    message: String,
}

impl PackError {
    pub fn new(message: String) -> PackError {
        PackError { message }
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PackError {}

/// A packing error with `message`.
fn perr(message: String) -> PackError {
    PackError::new(message)
}

/// Number of floats in a packed `k × n` matrix.
#[inline]
pub fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(PANEL_WIDTH) * PANEL_WIDTH * k
}

/// Packs the row-major `k × n` matrix `b` (row stride `ldb`) into panels
/// (the layout of the module doc); the result holds [`packed_len`]`(k, n)`
/// floats.
pub fn pack_b(k: usize, n: usize, b: &[f32], ldb: usize) -> Result<Vec<f32>, PackError> {
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
    Ok(data)
}

/// Checks that a row-major `rows × cols` matrix with row stride `ld` fits in
/// `len` floats.
pub fn check_matrix(
    name: &str,
    rows: usize,
    cols: usize,
    len: usize,
    ld: usize,
) -> Result<(), PackError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    if ld < cols {
        return Err(perr(format!(
            "leading dimension of {name} must be at least {cols}, found {ld}"
        )));
    }
    let need = (rows - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(cols))
        .ok_or_else(|| perr(format!("{name} of {rows}x{cols} is too large")))?;
    if len < need {
        return Err(perr(format!(
            "{name} of {rows}x{cols} with leading dimension {ld} needs {need} floats, found {len}"
        )));
    }
    Ok(())
}

/// Product of sizes, or an error naming the tensor when it overflows.
pub fn product(name: &str, dims: &[usize]) -> Result<usize, PackError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| perr(format!("{name} of shape {dims:?} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ConvGeom;

    #[test]
    fn pack_b_cuts_columns_into_zero_padded_panels() {
        // 2 × 18 (row stride 20): one full panel and one of 2 columns.
        let b: Vec<f32> = (0..40).map(|i| i as f32).collect();
        let p = pack_b(2, 18, &b, 20).unwrap();
        assert_eq!(p.len(), packed_len(2, 18));
        assert_eq!(p.len(), 2 * 2 * PANEL_WIDTH);
        assert_eq!(&p[..16], &b[..16]);
        assert_eq!(&p[16..32], &b[20..36]);
        assert_eq!(&p[32..34], &[16.0, 17.0]);
        assert!(p[34..48].iter().all(|&v| v == 0.0));
        assert_eq!(&p[48..50], &[36.0, 37.0]);
        assert_eq!(
            pack_b(2, 3, &[0.0; 5], 3).unwrap_err().to_string(),
            "b of 2x3 with leading dimension 3 needs 6 floats, found 5"
        );
    }

    #[test]
    fn conv_layouts_refuse_bad_geometry_and_lengths() {
        let g = ConvGeom {
            n: 1,
            h: 4,
            w: 4,
            c: 2,
            oh: 4,
            ow: 4,
            oc: 2,
            kh: 1,
            kw: 1,
            stride: [1, 1],
            dilation: [1, 1],
            pads: [0; 4],
            group: 1,
        };
        assert_eq!(
            conv2d_pack_weights(&g, &[1.0; 4]).unwrap().len(),
            2 * PANEL_WIDTH
        );
        assert_eq!(
            conv2d_pack_weights(&g, &[1.0; 3]).unwrap_err().message(),
            "weight [2, 2, 1, 1] must hold 4 floats, found 3"
        );
        let zero = ConvGeom { kh: 0, ..g };
        assert!(ConvDims::new(&zero).is_err());
        assert!(winograd_pack_weights(3, 2, 2, &[0.0; 100]).is_err());
    }
}
