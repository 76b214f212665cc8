//! The 2:4 weight in the form the tiled `mma.sp` kernel reads
//! ([`pack_weight`]): kept values padded to the tile, and the metadata
//! words laid out per lane of the instruction (see `tiled.rs`'s module
//! doc for the layout). Pure data: the translation packs constant
//! weights with it at compile time, the tests and the GPU checks with the
//! same rules.

use super::tiled::SpTile;
use super::wgmma::SpWgTile;

/// How a kernel pads the weight it reads: features up to a multiple of
/// its block's features, k up to a multiple of its k-tile (so its copies
/// need no bounds checks on the weight).
pub trait SparsePadding {
    /// Features of the padded weight for `n` features.
    fn n_pad(&self, n: u64) -> u64;
    /// k of the padded weight for reduction length `k`.
    fn k_pad(&self, k: u64) -> u64;
}

impl SparsePadding for SpTile {
    fn n_pad(&self, n: u64) -> u64 {
        SpTile::n_pad(self, n)
    }
    fn k_pad(&self, k: u64) -> u64 {
        SpTile::k_pad(self, k)
    }
}

impl SparsePadding for SpWgTile {
    fn n_pad(&self, n: u64) -> u64 {
        SpWgTile::n_pad(self, n)
    }
    fn k_pad(&self, k: u64) -> u64 {
        SpWgTile::k_pad(self, k)
    }
}

/// The metadata word of a group of four with no non-zero value: indices
/// 0 and 1 (a valid pattern over zeros), for every group of a word.
pub const EMPTY_META: u32 = 0x4444_4444;

/// A 2:4 weight in the kernel's form: `values` (f16 bits, `n_pad ×
/// k_pad/2`) and `meta` (u32 words, laid out as `tiled.rs` documents).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedSparse {
    pub values: Vec<u16>,
    pub meta: Vec<u32>,
}

/// Packs the weight `w(j, kk)` (feature `j < n`, `kk < k`, f16 bits) for
/// `tile` (an `mma.sp` [`SpTile`] or a `wgmma.sp` [`SpWgTile`]: the same
/// layout, padded to each kernel's tile); `None` when some group of four along k holds more than two
/// non-zero values (the weight is not 2:4). A group with fewer keeps its
/// non-zeros and zeros in ascending index order (the instruction wants
/// the two indices ascending).
pub fn pack_weight(
    n: u64,
    k: u64,
    tile: &impl SparsePadding,
    w: impl Fn(u64, u64) -> u16,
) -> Option<PackedSparse> {
    let (n_pad, k_pad) = (tile.n_pad(n), tile.k_pad(k));
    let kt32 = k_pad / 32;
    let mut values = vec![0u16; (n_pad * k_pad / 2) as usize];
    // Each feature's metadata word per k-tile of 32 (as aoc's stored form).
    let mut words = vec![EMPTY_META; (n_pad * kt32) as usize];
    for j in 0..n {
        for g in 0..k / 4 {
            let vals: [u16; 4] = std::array::from_fn(|i| w(j, 4 * g + i as u64));
            // Non-zero bits (a negative zero is zero).
            let nz: Vec<usize> = (0..4).filter(|&i| vals[i] & 0x7fff != 0).collect();
            let pair = match nz[..] {
                [] => [0, 1],
                [a] if a == 3 => [2, 3],
                [a] => [a, a + 1],
                [a, b] => [a, b],
                _ => return None,
            };
            let at = (j * k_pad / 2 + 2 * g) as usize;
            values[at] = vals[pair[0]];
            values[at + 1] = vals[pair[1]];
            let (t, c) = ((g / 8) as usize, (g % 8) as u32);
            let word = &mut words[j as usize * kt32 as usize + t];
            let nibble = pair[0] as u32 | (pair[1] as u32) << 2;
            *word = (*word & !(0xf << (4 * c))) | nibble << (4 * c);
        }
    }
    let mut meta = Vec::with_capacity((n_pad / 16 * kt32 * 16) as usize);
    for f in 0..n_pad / 16 {
        for t in 0..kt32 {
            for q in 0..8 {
                let lo = words[((16 * f + q) * kt32 + t) as usize];
                let hi = words[((16 * f + q + 8) * kt32 + t) as usize];
                for p in 0..2 {
                    meta.push((lo >> (16 * p)) & 0xffff | ((hi >> (16 * p)) & 0xffff) << 16);
                }
            }
        }
    }
    Some(PackedSparse { values, meta })
}
