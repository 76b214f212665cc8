//! The tiling of a [`gemm_f32`](super::gemm_f32) kernel and its choice.
//!
//! [`SimtTile`] fixes the block tile, the k-tile depth, the register tile
//! and the k split; it owns the derived sizes every other part of the
//! generator uses (threads, shared-memory pitches and bytes, the
//! `.minnctapersm` cap). [`pick_tile`] is the cost model that chooses one of
//! [`SimtTile::CANDIDATES`] per spec.
//!
//! Invariants:
//! - A tile that passes [`SimtTile::check`] can be generated for every load
//!   mode: each operand tile splits evenly among the threads for scalar and
//!   16-byte loads, and the two shared buffers (or the k groups' partial
//!   sums) fit in 48 KiB, so the launch needs no smem attribute.
//! - Every candidate passes `check` and has 256 threads.
//! - `pick_tile` depends on the shape (m, n, batch) only, never on strides
//!   or the operation, and is deterministic (ties keep the earlier
//!   candidate).

use crate::kernels::GemmSpec;

/// Multiprocessors of the GPU the tile choice aims at (H200).
const SMS: u64 = 132;
/// fp32 TFLOP/s of each [`SimtTile::CANDIDATES`] tile on a 4096³ product
/// on an H200 (cuBLAS: 51), measured with the kernels of this file: the
/// relative throughput of a multiprocessor full of such blocks. 2×2, 2×4
/// and 4×2 register tiles without k split (16.9, 21.0, 23.4) lost to the
/// k-split tiles on every shape measured, so they are not candidates.
const RATES: [f64; 7] = [47.0, 43.0, 40.5, 33.0, 30.4, 28.0, 26.8];

/// The tiling of one kernel: a `bm × bn` block tile, `bk` deep k-tiles,
/// `tm × tn` outputs per thread, and `ks` groups of threads that each
/// multiply `bk / ks` of every k-tile (their sums are added through shared
/// memory at the end): small output tiles with long k keep a register tile
/// big enough to be efficient and still use 256 threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimtTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
    pub ks: u32,
}

const fn tile(bm: u32, bn: u32, bk: u32, tm: u32, tn: u32, ks: u32) -> SimtTile {
    SimtTile {
        bm,
        bn,
        bk,
        tm,
        tn,
        ks,
    }
}

impl SimtTile {
    /// The tiles [`pick_tile`] chooses from; all have 256 threads.
    pub const CANDIDATES: [SimtTile; 7] = [
        tile(128, 128, 8, 8, 8, 1),
        tile(128, 64, 16, 8, 4, 1),
        tile(64, 128, 16, 4, 8, 1),
        tile(64, 64, 16, 4, 4, 1),
        tile(32, 64, 32, 4, 4, 2),
        tile(64, 32, 32, 4, 4, 2),
        tile(32, 32, 32, 4, 4, 4),
    ];

    /// Threads of one k group.
    pub(super) fn group_threads(&self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn)
    }

    pub fn threads(&self) -> u32 {
        self.ks * self.group_threads()
    }

    /// Blocks per multiprocessor the register allocation must allow
    /// (`.minnctapersm`): 128 registers for the big register tiles, 80 for
    /// the small ones, whose natural use (ptxas hoists shared loads
    /// greedily) would otherwise leave room for one block only.
    pub(super) fn min_blocks(&self) -> u32 {
        if self.tm * self.tn >= 32 { 2 } else { 3 }
    }

    pub(super) fn pitch_a(&self) -> u32 {
        self.bm + 4
    }

    pub(super) fn pitch_b(&self) -> u32 {
        self.bn + 4
    }

    /// Floats of one shared buffer (A then B).
    pub(super) fn stage_floats(&self) -> u32 {
        self.bk * (self.pitch_a() + self.pitch_b())
    }

    /// Floats of the partial sums groups 1.. hand to group 0.
    pub(super) fn reduce_floats(&self) -> u32 {
        (self.ks - 1) * self.tm * self.tn * self.group_threads()
    }

    /// Dynamic shared memory per block: two buffers (reused for the
    /// partial sums of the k groups).
    pub fn smem_bytes(&self) -> u32 {
        4 * (2 * self.stage_floats()).max(self.reduce_floats())
    }

    /// Checks the tile can be generated (for every load mode).
    pub fn check(&self) -> Result<(), String> {
        let t = *self;
        let ok_t = |x: u32| matches!(x, 1 | 2 | 4 | 8);
        if !ok_t(t.tm) || !ok_t(t.tn) {
            return Err(format!(
                "tm and tn must be 1, 2, 4 or 8, found {}x{}",
                t.tm, t.tn
            ));
        }
        if t.bm == 0
            || t.bn == 0
            || !t.bm.is_multiple_of(4 * t.tm)
            || !t.bn.is_multiple_of(4 * t.tn)
        {
            return Err(format!(
                "bm and bn must be positive multiples of 4·tm and 4·tn, found {}x{}",
                t.bm, t.bn
            ));
        }
        let threads = t.threads();
        if !threads.is_multiple_of(32) || threads > 1024 {
            return Err(format!(
                "a block must have a multiple of 32 threads up to 1024, found {threads}"
            ));
        }
        if t.bk == 0 || !t.bk.is_multiple_of(4) || t.ks == 0 || !t.bk.is_multiple_of(t.ks) {
            return Err(format!(
                "bk must be a positive multiple of 4 and of ks = {}, found {}",
                t.ks, t.bk
            ));
        }
        for d in [t.bm, t.bn] {
            for vw in [1, 4] {
                let units = d * t.bk / vw;
                let rows_ok = threads.is_multiple_of(d / vw) && threads.is_multiple_of(t.bk / vw);
                if !units.is_multiple_of(threads) || !rows_ok {
                    return Err(format!(
                        "a {d}x{} operand tile does not split evenly among {threads} threads",
                        t.bk
                    ));
                }
            }
        }
        if t.smem_bytes() > 48 * 1024 {
            return Err(format!(
                "the tile needs {} bytes of shared memory",
                t.smem_bytes()
            ));
        }
        Ok(())
    }
}

/// The tile [`gemm_f32`](super::gemm_f32) uses for `spec`: the candidate that minimizes
/// `⌈blocks / SMs⌉ · bm · bn / rate`, the output area the busiest
/// multiprocessor computes over the rate the tile reaches when the GPU is
/// full (`RATES`). Large products take the big register tiles; small
/// ones the k-split tiles that give more blocks; padding waste counts
/// through the block count.
pub fn pick_tile(spec: &GemmSpec) -> SimtTile {
    let (m, n, batch) = (spec.m.max(1), spec.n.max(1), spec.batch.max(1));
    let cost = |(t, rate): (&SimtTile, &f64)| {
        let blocks = u128::from(m.div_ceil(u64::from(t.bm)))
            * u128::from(n.div_ceil(u64::from(t.bn)))
            * u128::from(batch);
        blocks.div_ceil(u128::from(SMS)) as f64 * f64::from(t.bm * t.bn) / rate
    };
    let mut best = (SimtTile::CANDIDATES[0], f64::INFINITY);
    for c in SimtTile::CANDIDATES.iter().zip(&RATES) {
        let x = cost(c);
        if x < best.1 {
            best = (*c.0, x);
        }
    }
    best.0
}
