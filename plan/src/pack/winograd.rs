//! The weight layout of `Step::WinogradConv2d`: the transformed weights
//! `U = G g Gᵀ` of `core.winograd_conv2d` (computed by the `winograd` pass)
//! packed per transform point for the runtime's per-point GEMMs.
//!
//! Invariants: tiles are 2 or 4 (F(2×2, 3×3), F(4×4, 3×3)), the only ones
//! the runtime's kernel has; the functions never panic on bad arguments
//! (they return [`PackError`]).

use super::{PackError, pack_b, packed_len, perr, product};

/// `a = m + 2`, the transform size of tile `m`, or an error for a tile the
/// kernel lacks.
pub fn winograd_side(tile: usize) -> Result<usize, PackError> {
    match tile {
        2 | 4 => Ok(tile + 2),
        t => Err(perr(format!("winograd tile must be 2 or 4, found {t}"))),
    }
}

/// Floats of the packed weights of [`winograd_pack_weights`].
pub fn winograd_packed_len(tile: usize, c: usize, oc: usize) -> Result<usize, PackError> {
    let a = winograd_side(tile)?;
    product("packed transformed weight", &[a * a, packed_len(c, oc)])
}

/// Packs transformed weights `u` (`[m+2, m+2, oc, c]` row major, the
/// `core.winograd_conv2d` operand) into the layout of
/// `Step::WinogradConv2d`: for each transform point `ξ` in row-major order,
/// the `c × oc` matrix `U[ξ]ᵀ` packed by [`pack_b`], back to back.
pub fn winograd_pack_weights(
    tile: usize,
    c: usize,
    oc: usize,
    u: &[f32],
) -> Result<Vec<f32>, PackError> {
    let a = winograd_side(tile)?;
    let need = product("transformed weight", &[a, a, oc, c])?;
    if u.len() != need {
        return Err(perr(format!(
            "transformed weight [{a}, {a}, {oc}, {c}] must hold {need} floats, found {}",
            u.len()
        )));
    }
    let mut out = Vec::with_capacity(winograd_packed_len(tile, c, oc)?);
    let mut mat = vec![0.0f32; c * oc];
    for xi in 0..a * a {
        let src = &u[xi * oc * c..(xi + 1) * oc * c];
        for k in 0..oc {
            for ci in 0..c {
                mat[ci * oc + k] = src[k * c + ci];
            }
        }
        out.extend_from_slice(&pack_b(c, oc, &mat, oc)?);
    }
    Ok(out)
}
