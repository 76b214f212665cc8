//! A [`GemmSpec`] checked and normalized for the generator.
//!
//! [`Problem::new`] rejects inconsistent convolution specs, turns the empty
//! product into `None`, zeroes the strides of unit extents (so that the
//! vector-load conditions and index bounds do not see strides that are
//! never used), reads an unpadded 1×1 stride-1 convolution as the strided
//! matrix it is, and decides which image-border checks a convolution
//! gather needs. [`Problem::max_index`] bounds every index the kernel forms,
//! which picks the index type.
//!
//! Invariants:
//! - A `Problem` is non-empty: `batch`, `m` and `n` are at least 1 (`k` may
//!   be 0: every element of A is padding or there is no k).
//! - A stride is 0 wherever its extent is at most 1 (the epilogue
//!   operands' too).
//! - `ASrc::Conv` is only produced for a geometry whose `m` and `k` match
//!   the spec, with positive kernel size, strides and dilations and
//!   `batch == group` dividing the channels.
//! - `max_index` is an upper bound computed in u128 (no overflow), over
//!   element offsets in range and the tile overhang of row, column and k
//!   indices. The epilogue operands' offsets are not part of it: they are
//!   formed in i64 (and checked to fit) whatever the index type.

use super::SimtTile;
use crate::kernels::{AMode, ConvGeom, GemmSpec};

/// The convolution gather of A: the geometry, the group's channel count,
/// output pixels per image, and whether a tap can fall above/left or
/// below/right of the image (else that check is not emitted).
#[derive(Clone, Copy)]
pub(super) struct ConvA {
    pub(super) g: ConvGeom,
    pub(super) cg: u64,
    pub(super) ohw: u64,
    pub(super) check_y: bool,
    pub(super) check_x: bool,
}

#[derive(Clone, Copy)]
pub(super) enum ASrc {
    Strided([u64; 3]),
    Conv(ConvA),
}

/// A non-empty product with its strides normalized (0 for extents ≤ 1).
pub(super) struct Problem {
    pub(super) batch: u64,
    pub(super) m: u64,
    pub(super) n: u64,
    /// 0 when A has no elements (a convolution of an empty image).
    pub(super) k: u64,
    pub(super) a: ASrc,
    pub(super) b: [u64; 3],
    pub(super) c: [u64; 3],
    pub(super) bias: Option<u64>,
    pub(super) relu: bool,
    pub(super) aligned16: bool,
    /// The strides `[batch, row, col]` of the epilogue's extra operands.
    pub(super) epi: Vec<[u64; 3]>,
}

fn norm(strides: [u64; 3], extents: [u64; 3]) -> [u64; 3] {
    [0, 1, 2].map(|i| if extents[i] > 1 { strides[i] } else { 0 })
}

/// The largest element offset of a strided operand.
fn last(strides: [u64; 3], extents: [u64; 3]) -> u128 {
    (0..3)
        .map(|i| u128::from(strides[i]) * u128::from(extents[i].saturating_sub(1)))
        .sum()
}

impl Problem {
    /// `None` for an empty product. `epi`: the strides of an epilogue's
    /// extra operands (none without an epilogue).
    pub(super) fn new(s: &GemmSpec, epi: &[[u64; 3]]) -> Result<Option<Problem>, String> {
        if s.batch == 0 || s.m == 0 || s.n == 0 {
            return Ok(None);
        }
        let mut k = s.k;
        let a = match s.a {
            AMode::Strided { batch, row, col } => {
                ASrc::Strided(norm([batch, row, col], [s.batch, s.m, s.k]))
            }
            AMode::Conv(g) => {
                if g.group != s.batch || g.group == 0 || g.c % g.group != 0 {
                    return Err(format!(
                        "gemm_f32: a convolution's batch must be its group count dividing the channels, found batch {}, group {}, {} channels",
                        s.batch, g.group, g.c
                    ));
                }
                if g.kh == 0 || g.kw == 0 || g.stride.contains(&0) || g.dilation.contains(&0) {
                    return Err(
                        "gemm_f32: kernel size, strides and dilations must be at least 1".into(),
                    );
                }
                let cg = g.c / g.group;
                let w = u128::from;
                let (mm, kk) = (w(g.n) * w(g.oh) * w(g.ow), w(g.kh) * w(g.kw) * w(cg));
                if (mm, kk) != (w(s.m), w(s.k)) {
                    return Err(format!(
                        "gemm_f32: a convolution needs m = n·oh·ow = {mm} and k = kh·kw·c/group = {kk}, found m {}, k {}",
                        s.m, s.k
                    ));
                }
                let [pt, pl, ..] = g.pads;
                // The last tap's coordinate past the first one's.
                let span_y = w(g.oh - 1) * w(g.stride[0]) + w(g.kh - 1) * w(g.dilation[0]);
                let span_x = w(g.ow - 1) * w(g.stride[1]) + w(g.kw - 1) * w(g.dilation[1]);
                if g.h == 0 || g.w == 0 {
                    // Every element of A is padding.
                    k = 0;
                }
                let plain = g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && pt == 0 && pl == 0;
                if plain && g.oh == g.h && g.ow == g.w {
                    // The input is the (n·h·w) × c matrix; the group's
                    // channels are a column range of it.
                    ASrc::Strided(norm([cg, g.c, 1], [s.batch, s.m, s.k]))
                } else {
                    ASrc::Conv(ConvA {
                        g,
                        cg,
                        ohw: g.oh * g.ow,
                        check_y: pt > 0 || span_y >= w(g.h) + w(pt),
                        check_x: pl > 0 || span_x >= w(g.w) + w(pl),
                    })
                }
            }
        };
        let extents = [s.batch, s.m, s.n];
        let epi: Vec<[u64; 3]> = epi.iter().map(|&st| norm(st, extents)).collect();
        // Their offsets are formed in i64.
        if epi.iter().any(|&st| last(st, extents) >= 1 << 62) {
            return Err("gemm_f32: an epilogue operand is too large to index".into());
        }
        Ok(Some(Problem {
            batch: s.batch,
            m: s.m,
            n: s.n,
            k,
            a,
            b: norm(s.b_strides, [s.batch, s.k, s.n]),
            c: norm(s.c_strides, [s.batch, s.m, s.n]),
            bias: s.bias.map(|st| if s.batch > 1 { st } else { 0 }),
            relu: s.relu,
            aligned16: s.aligned16,
            epi,
        }))
    }

    /// The largest magnitude of an index the kernel forms for an element
    /// in range: offsets of valid elements, the tile overhang of the row,
    /// column and k indices, convolution coordinates.
    pub(super) fn max_index(&self, t: &SimtTile) -> u128 {
        let (bt, m, n, k) = (self.batch, self.m, self.n, self.k.max(1));
        let w = u128::from;
        let mut big: Vec<u128> = vec![
            last(self.b, [bt, k, n]),
            last(self.c, [bt, m, n]),
            w(bt),
            w(m) + w(t.bm.into()),
            w(n) + w(t.bn.into()),
            w(k) + w(t.bk.into()),
        ];
        if let Some(s) = self.bias {
            big.push(last([s, 0, 1], [bt, 1, n]));
        }
        match self.a {
            ASrc::Strided(s) => big.push(last(s, [bt, m, k])),
            ASrc::Conv(a) => {
                let g = a.g;
                let pixel = w(g.h) * w(g.w) * w(g.c);
                let taps =
                    (w(g.kh) * w(g.dilation[0]) * w(g.w) + w(g.kw) * w(g.dilation[1])) * w(g.c);
                let corner =
                    w(g.pads[0]) + w(g.pads[1]) + w(a.ohw) * (w(g.stride[0]) + w(g.stride[1]));
                big.extend([w(g.n) * pixel, taps, corner * w(g.w) * w(g.c)]);
            }
        }
        big.into_iter().max().unwrap_or(0)
    }
}
