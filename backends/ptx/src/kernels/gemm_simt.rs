//! fp32 GEMM on the CUDA cores (no tensor cores) for a [`GemmSpec`]:
//! batched strided products (`Step::Gemm`, `Step::MatMul`) and NHWC
//! implicit-GEMM convolution with groups (`Step::Conv2d`, [`AMode::Conv`]).
//!
//! Kernel ABI of [`gemm_f32`]: parameters `(a, b, [bias,] c)`, f32 global
//! pointers, `bias` only when `spec.bias` is `Some`. `C_b[i][j] =
//! Σ_kk A_b[i][kk]·B_b[kk][j] (+ bias[b·s + j])`, then `max(x, 0)` with
//! relu, for `b < batch`, `i < m`, `j < n`; no other element of `c` is
//! written (C may be a strided view inside a larger tensor).
//! Launch: block `(256, 1, 1)` ([`SimtTile::threads`]), grid
//! `(tiles_m · tiles_n, 1, min(batch, 65535))` for the `bm × bn` tile
//! [`pick_tile`] chooses (a block at `z` runs batches `z, z + 65535, …`),
//! dynamic shared memory [`SimtTile::smem_bytes`] (≤ 48 KiB). An empty
//! product (batch, m or n zero) is a kernel that returns at once, launched
//! as one block of 32.
//!
//! Code shape: a block computes a `bm × bn` tile of C, each thread a
//! `tm × tn` register tile whose rows (columns) come in groups of up to
//! four consecutive ones, so that the inner loop reads them from shared
//! memory with conflict-free 16-byte loads and does `tm·tn` `fma.rn.f32`
//! per k. K advances by `bk`: the next k-tile is loaded from global memory
//! into registers while the current one is multiplied out of shared
//! memory, then stored into the other of two shared buffers (one barrier
//! per k-tile; the loop does two k-tiles per iteration so that buffer
//! offsets are constants). Both operands sit in shared memory k-major
//! (`[kk][row]`, `[kk][col]`, rows padded by 4 floats against bank
//! conflicts of the transposing stores). Small tiles split each k-tile
//! among `ks` thread groups whose sums meet in shared memory at the end,
//! which keeps 4×4 register tiles (and 256 threads) on small outputs.
//!
//! Loads: 16 bytes wide where four consecutive elements are contiguous and
//! aligned (`spec.aligned16`, unit stride along k or along the rows /
//! columns, extents and other strides multiples of 4), scalar otherwise,
//! with consecutive threads along the smaller stride. Out-of-range and
//! padding elements read as zero through a clamped address (no branch);
//! guards the shape makes unnecessary are not emitted, and the partial
//! k-tile is the first one, so only the prologue checks k. The
//! convolution gather keeps per loaded row the offset of its top-left tap
//! and derives each column's tap offset once per k-tile.
//!
//! Epilogue: accumulators start from the bias, so the end is relu and
//! guarded (16-byte where C allows) stores. Blocks are ordered in groups
//! of 8 row tiles so that blocks running together share A and B in L2.
//!
//! Invariants:
//! - Everything is a constant; only the pointers are passed.
//! - Offsets are i32 when every index the kernel forms for an element in
//!   range fits, i64 otherwise; an out-of-range element's offset is
//!   replaced by 0 before the address is formed.
//! - Relu is `max(x, 0)` with Rust's `f32::max` NaN rule, as the CPU
//!   kernels: NaN becomes 0 (`llvm.maxnum` → `max.f32`).
//! - The summation order is fixed (bias, then k ascending per group, then
//!   groups in order): results are deterministic, and differ from the CPU
//!   kernels' by rounding only.

use std::collections::HashMap;

use super::{AMode, ConvGeom, GemmSpec, Geometry};
use crate::irtext::{Body, ModuleText, check_entry_name};

/// Row tiles per group of the block order (L2 reuse).
const GROUP_M: u64 = 8;
/// The largest grid.z.
const MAX_Z: u64 = 65535;
/// Multiprocessors of the GPU the tile choice aims at (H200).
const SMS: u64 = 132;
/// fp32 TFLOP/s of each [`SimtTile::CANDIDATES`] tile on a 4096³ product
/// on an H200 (cuBLAS: 51), measured with the kernels of this file: the
/// relative throughput of a multiprocessor full of such blocks. 2×2, 2×4
/// and 4×2 register tiles without k split (16.9, 21.0, 23.4) lost to the
/// k-split tiles on every shape measured, so they are not candidates.
const RATES: [f64; 7] = [47.0, 43.0, 40.5, 33.0, 30.4, 28.0, 26.8];

const DECLS: &[&str] = &[
    "@aoc_smem = external addrspace(3) global [0 x i8], align 16",
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()",
    "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
    "declare float @llvm.fma.f32(float, float, float)",
    "declare float @llvm.maxnum.f32(float, float)",
];

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
    fn group_threads(&self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn)
    }

    pub fn threads(&self) -> u32 {
        self.ks * self.group_threads()
    }

    /// Blocks per multiprocessor the register allocation must allow
    /// (`.minnctapersm`): 128 registers for the big register tiles, 80 for
    /// the small ones, whose natural use (ptxas hoists shared loads
    /// greedily) would otherwise leave room for one block only.
    fn min_blocks(&self) -> u32 {
        if self.tm * self.tn >= 32 { 2 } else { 3 }
    }

    fn pitch_a(&self) -> u32 {
        self.bm + 4
    }

    fn pitch_b(&self) -> u32 {
        self.bn + 4
    }

    /// Floats of one shared buffer (A then B).
    fn stage_floats(&self) -> u32 {
        self.bk * (self.pitch_a() + self.pitch_b())
    }

    /// Floats of the partial sums groups 1.. hand to group 0.
    fn reduce_floats(&self) -> u32 {
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

/// The convolution gather of A: the geometry, the group's channel count,
/// output pixels per image, and whether a tap can fall above/left or
/// below/right of the image (else that check is not emitted).
#[derive(Clone, Copy)]
struct ConvA {
    g: ConvGeom,
    cg: u64,
    ohw: u64,
    check_y: bool,
    check_x: bool,
}

#[derive(Clone, Copy)]
enum ASrc {
    Strided([u64; 3]),
    Conv(ConvA),
}

/// A non-empty product with its strides normalized (0 for extents ≤ 1).
struct Problem {
    batch: u64,
    m: u64,
    n: u64,
    /// 0 when A has no elements (a convolution of an empty image).
    k: u64,
    a: ASrc,
    b: [u64; 3],
    c: [u64; 3],
    bias: Option<u64>,
    relu: bool,
    aligned16: bool,
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
    /// `None` for an empty product.
    fn new(s: &GemmSpec) -> Result<Option<Problem>, String> {
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
        }))
    }

    /// The largest magnitude of an index the kernel forms for an element
    /// in range: offsets of valid elements, the tile overhang of the row,
    /// column and k indices, convolution coordinates.
    fn max_index(&self, t: &SimtTile) -> u128 {
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

/// The tile [`gemm_f32`] uses for `spec`: the candidate that minimizes
/// `⌈blocks / SMs⌉ · bm · bn / rate`, the output area the busiest
/// multiprocessor computes over the rate the tile reaches when the GPU is
/// full ([`RATES`]). Large products take the big register tiles; small
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

/// Appends the kernel `@{name}` computing `spec` with the tile
/// [`pick_tile`] chooses; see the module doc for its ABI and launch.
pub fn gemm_f32(m: &mut ModuleText, name: &str, spec: &GemmSpec) -> Result<Geometry, String> {
    gemm_f32_tile(m, name, spec, pick_tile(spec))
}

/// [`gemm_f32`] with a given tile (for tests and tuning).
pub fn gemm_f32_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &GemmSpec,
    tile: SimtTile,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    tile.check()?;
    let params = if spec.bias.is_some() {
        "ptr addrspace(1) noalias readonly %pa, ptr addrspace(1) noalias readonly %pb, ptr addrspace(1) noalias readonly %pbias, ptr addrspace(1) noalias %pc"
    } else {
        "ptr addrspace(1) noalias readonly %pa, ptr addrspace(1) noalias readonly %pb, ptr addrspace(1) noalias %pc"
    };
    let Some(p) = Problem::new(spec)? else {
        m.func(format!(
            "define ptx_kernel void @{name}({params}) {{\nentry:\n  ret void\n}}\n"
        ));
        return Ok(Geometry {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            smem: 0,
        });
    };
    let (bm, bn) = (u64::from(tile.bm), u64::from(tile.bn));
    let blocks = p.m.div_ceil(bm) * p.n.div_ceil(bn);
    if blocks > i32::MAX as u64 || p.batch > i32::MAX as u64 {
        return Err(format!(
            "gemm_f32: {} blocks of {bm}x{bn} over {} batches exceed the grid",
            blocks, p.batch
        ));
    }
    let it = match p.max_index(&tile) {
        x if x < (1 << 31) - 1 => "i32",
        x if x < 1 << 62 => "i64",
        _ => return Err("gemm_f32: the operands are too large to index".into()),
    };
    for d in DECLS {
        m.declare(d);
    }
    let mut g = Gen {
        b: Body::new(),
        p: &p,
        t: tile,
        it,
    };
    let body = g.kernel();
    // A scalar convolution gather keeps three values per loaded row
    // (offset, top-left input corner) in registers; under the caps of
    // `min_blocks` that spills, so ptxas gets a free hand there.
    let scalar_conv = matches!(p.a, ASrc::Conv(_)) && !g.operands()[0].vec;
    let min_blocks = if scalar_conv { 1 } else { tile.min_blocks() };
    m.func(format!(
        "define ptx_kernel void @{name}({params}) \"nvvm.maxntid\"=\"{}\" \"nvvm.minctasm\"=\"{}\" {{\nentry:\n{body}}}\n",
        tile.threads(),
        min_blocks,
    ));
    Ok(Geometry {
        grid: [blocks as u32, 1, p.batch.min(MAX_Z) as u32],
        block: [tile.threads(), 1, 1],
        smem: tile.smem_bytes(),
    })
}

/// How one operand's k-tile moves from global to shared memory.
struct Operand {
    ptr: &'static str,
    /// The tile extent along the operand's non-k dimension (bm or bn).
    dim: u32,
    /// The matrix extent along it (m or n).
    extent: u64,
    /// 16-byte loads of four consecutive elements.
    vec: bool,
    /// Consecutive threads walk k (else the row/column dimension); with
    /// `vec`, the four elements are consecutive in k.
    kfast: bool,
    /// Float offset of the operand's region in a shared buffer.
    smem_off: u32,
    pitch: u32,
    /// `[batch, non-k, k]` strides, for a strided operand.
    strides: [u64; 3],
    conv: Option<ConvA>,
}

/// One load unit of a thread: fixed position in the tile.
struct Slot {
    /// i32 float index in shared buffer 0.
    sidx: String,
    /// Offset (index type) within the k-tile.
    kl: String,
    /// Element offset without the k part (index type).
    base: String,
    /// The row/column is inside the matrix (absent: statically true).
    valid: Option<String>,
    /// Convolution: the row's top-left input coordinates.
    iy0: String,
    ix0: String,
}

struct Gen<'a> {
    b: Body,
    p: &'a Problem,
    t: SimtTile,
    /// The index type.
    it: &'static str,
}

impl Gen<'_> {
    fn v(&mut self, rhs: String) -> String {
        self.b.v(rhs)
    }

    /// An i32 value (non-negative) in the index type.
    fn widen(&mut self, x: &str) -> String {
        if self.it == "i32" {
            x.to_string()
        } else {
            self.v(format!("zext i32 {x} to i64"))
        }
    }

    /// `x + y` in the index type, folding zeros.
    fn add(&mut self, x: &str, y: &str) -> String {
        match (x, y) {
            ("0", _) => y.to_string(),
            (_, "0") => x.to_string(),
            _ => self.v(format!("add {} {x}, {y}", self.it)),
        }
    }

    /// `x · c` in the index type, folding 0 and 1.
    fn mulc(&mut self, x: &str, c: u64) -> String {
        match c {
            0 => "0".to_string(),
            1 => x.to_string(),
            _ => self.v(format!("mul {} {x}, {c}", self.it)),
        }
    }

    fn and_all(&mut self, conds: &[Option<String>]) -> Option<String> {
        let mut acc: Option<String> = None;
        for c in conds.iter().flatten() {
            acc = Some(match acc {
                None => c.clone(),
                Some(a) => self.v(format!("and i1 {a}, {c}")),
            });
        }
        acc
    }

    fn operands(&self) -> [Operand; 2] {
        let (p, t) = (self.p, &self.t);
        let (a_vec, a_kfast, a_strides, conv) = match p.a {
            ASrc::Strided([s0, s1, s2]) => {
                let v = p.aligned16 && s0 % 4 == 0;
                if v && s2 == 1 && p.k % 4 == 0 && s1 % 4 == 0 {
                    (true, true, [s0, s1, s2], None)
                } else if v && s1 == 1 && p.m % 4 == 0 && s2 % 4 == 0 {
                    (true, false, [s0, s1, s2], None)
                } else {
                    (false, s2 <= s1, [s0, s1, s2], None)
                }
            }
            ASrc::Conv(g) => {
                let v = p.aligned16 && g.cg % 4 == 0 && g.g.c % 4 == 0;
                (v, true, [0; 3], Some(g))
            }
        };
        let [s0, s1, s2] = p.b;
        let v = p.aligned16 && s0 % 4 == 0;
        let (b_vec, b_kfast) = if v && s2 == 1 && p.n % 4 == 0 && s1 % 4 == 0 {
            (true, false)
        } else if v && s1 == 1 && p.k % 4 == 0 && s2 % 4 == 0 {
            (true, true)
        } else {
            (false, s1 < s2)
        };
        [
            Operand {
                ptr: "%pa",
                dim: t.bm,
                extent: p.m,
                vec: a_vec,
                kfast: a_kfast,
                smem_off: 0,
                pitch: t.pitch_a(),
                strides: a_strides,
                conv,
            },
            Operand {
                ptr: "%pb",
                dim: t.bn,
                extent: p.n,
                vec: b_vec,
                kfast: b_kfast,
                smem_off: t.bk * t.pitch_a(),
                pitch: t.pitch_b(),
                strides: [s0, s2, s1],
                conv: None,
            },
        ]
    }

    /// The kernel body (after `entry:`).
    fn kernel(&mut self) -> String {
        let (p, t) = (self.p, self.t);
        let [opa, opb] = self.operands();
        let tid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.tid.x()".into());
        let pid = self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()".into());
        let (tmi, tni) = self.decode_tile(&pid);
        let i0 = self.v(format!("mul i32 {tmi}, {}", t.bm));
        let j0 = self.v(format!("mul i32 {tni}, {}", t.bn));
        let ntx = t.bn / t.tn;
        let nty = t.bm / t.tm;
        let (wa, wb) = (t.tm.min(4), t.tn.min(4));
        // k group `grp` multiplies rows grp·bk/ks .. of every k-tile.
        let gt = t.group_threads();
        let (lt, grp) = if t.ks > 1 {
            (
                self.v(format!("urem i32 {tid}, {gt}")),
                self.v(format!("udiv i32 {tid}, {gt}")),
            )
        } else {
            (tid.clone(), "0".to_string())
        };
        let kg = t.bk / t.ks;
        let ty = self.v(format!("udiv i32 {lt}, {ntx}"));
        let tx = self.v(format!("urem i32 {lt}, {ntx}"));
        let a_rd = self.v(format!("mul i32 {ty}, {wa}"));
        let a_k = self.v(format!("mul i32 {grp}, {}", kg * t.pitch_a()));
        let a_rd = self.v(format!("add i32 {a_rd}, {a_k}"));
        let b_rd = self.v(format!("mul i32 {tx}, {wb}"));
        let b_k = self.v(format!("mul i32 {grp}, {}", kg * t.pitch_b()));
        let b_rd = self.v(format!("add i32 {b_rd}, {b_k}"));
        let b_rd = self.v(format!("add i32 {b_rd}, {}", opb.smem_off));

        // The batch: grid.z, looping when there are more than 65535.
        let bz = if p.batch > 1 {
            self.v("call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()".into())
        } else {
            "0".to_string()
        };
        let looped = p.batch > MAX_Z;
        let bat = if looped {
            self.b.br("bat.pre");
            self.b.place("bat.pre");
            self.b.br("bat");
            self.b.place("bat");
            self.b.ins(format!(
                "%bat.i = phi i32 [ {bz}, %bat.pre ], [ %bat.next, %bat.latch ]"
            ));
            "%bat.i".to_string()
        } else {
            bz
        };
        let batw = self.widen(&bat);

        let i0w = self.widen(&i0);
        let j0w = self.widen(&j0);
        let sa = self.slots(&opa, &tid, &i0w, &batw);
        let sb = self.slots(&opb, &tid, &j0w, &batw);

        let ktiles = p.k.div_ceil(u64::from(t.bk));
        let sf = t.stage_floats();
        let cols = self.columns(&tx, &j0w, ntx, wb);
        let is0 = (t.ks > 1).then(|| self.v(format!("icmp eq i32 {grp}, 0")));
        let init = self.acc_init(&cols, &batw, is0.as_deref());
        let mut acc = init.clone();
        if ktiles > 0 {
            // The first k-tile starts at `k − ktiles·bk` (≤ 0): it holds the
            // partial one, so only the prologue's loads check k.
            let kfirst = p.k as i64 - (ktiles * u64::from(t.bk)) as i64;
            let ra = self.load(&opa, &sa, &kfirst.to_string(), kfirst < 0);
            let rb = self.load(&opb, &sb, &kfirst.to_string(), kfirst < 0);
            self.store(&opa, &sa, &ra, "0");
            self.store(&opb, &sb, &rb, "0");
            self.barrier();
            // Steps t = 0 .. ktiles-2 (prefetch tile t+1, multiply tile t),
            // two per loop iteration so that buffer offsets are constants.
            let ops = [opa, opb];
            let slots = [sa, sb];
            let rd = (a_rd.as_str(), b_rd.as_str());
            let steps = ktiles - 1;
            let k0_of = |g: &mut Self, tile: &str| {
                let k0 = g.mulc(tile, u64::from(t.bk));
                g.add(&k0, &kfirst.to_string())
            };
            if steps >= 2 {
                self.b.br("kpre");
                self.b.place("kpre");
                self.b.br("kloop");
                self.b.place("kloop");
                self.b
                    .ins("%kp = phi i32 [ 0, %kpre ], [ %kp.next, %kloop ]");
                let mut phis = Vec::new();
                let mut next = Vec::new();
                for (i, x) in init.iter().enumerate() {
                    self.b.ins(format!(
                        "%acc.{i} = phi float [ {x}, %kpre ], [ %accn.{i}, %kloop ]"
                    ));
                    phis.push(format!("%acc.{i}"));
                    next.push(format!("%accn.{i}"));
                }
                let kt = self.v("shl i32 %kp, 1".into());
                let kt = self.widen(&kt);
                let t1 = self.add(&kt, "1");
                let k0 = k0_of(self, &t1);
                let mid = self.step(&ops, &slots, &k0, 0, sf, rd, &phis, None);
                let t2 = self.add(&kt, "2");
                let k0 = k0_of(self, &t2);
                self.step(&ops, &slots, &k0, sf, 0, rd, &mid, Some(&next));
                self.b.ins("%kp.next = add i32 %kp, 1");
                let more = self.v(format!("icmp ult i32 %kp.next, {}", steps / 2));
                self.b.cond_br(&more, "kloop", "kdone");
                self.b.place("kdone");
                acc = next;
            }
            if steps % 2 == 1 {
                let k0 = (kfirst + (steps * u64::from(t.bk)) as i64).to_string();
                acc = self.step(&ops, &slots, &k0, 0, sf, rd, &acc, None);
            }
            let last = ((ktiles - 1) % 2) as u32 * sf;
            acc = self.compute(&last.to_string(), &a_rd, &b_rd, &acc, None);
            // Pin the sums here: otherwise LLVM sinks the last k-tile's
            // fma chains into the guarded stores below, which keeps every
            // fragment of that tile live at once (hundreds of registers).
            for x in acc.iter_mut() {
                *x = self.v(format!(
                    "call float asm sideeffect \"\", \"=f,0\"(float {x})"
                ));
            }
        }
        if let Some(is0) = &is0 {
            // Groups 1.. hand their sums to group 0, which stores C.
            if ktiles > 0 {
                acc = self.reduce(&acc, is0, &grp, &lt);
            }
            self.b.cond_br(is0, "epi", "epi.done");
            self.b.place("epi");
        }
        self.epilogue(&acc, &cols, &ty, &i0w, &batw, nty, wa);
        if t.ks > 1 {
            self.b.br("epi.done");
            self.b.place("epi.done");
        }

        if looped {
            self.b.br("bat.latch");
            self.b.place("bat.latch");
            // The next batch's first stores reuse buffer 0.
            self.barrier();
            self.b.ins(format!("%bat.next = add i32 %bat.i, {MAX_Z}"));
            let more = self.v(format!("icmp ult i32 %bat.next, {}", p.batch));
            self.b.cond_br(&more, "bat", "done");
            self.b.place("done");
        }
        self.b.ins("ret void");
        std::mem::take(&mut self.b).into_text()
    }

    /// One pipeline step: load the k-tile at `k0` into registers, multiply
    /// the buffer at float offset `cs`, store the registers into the
    /// buffer at `ss`, barrier.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        ops: &[Operand; 2],
        slots: &[Vec<Slot>; 2],
        k0: &str,
        cs: u32,
        ss: u32,
        rd: (&str, &str),
        acc: &[String],
        names: Option<&[String]>,
    ) -> Vec<String> {
        let ra = self.load(&ops[0], &slots[0], k0, false);
        let rb = self.load(&ops[1], &slots[1], k0, false);
        let acc = self.compute(&cs.to_string(), rd.0, rd.1, acc, names);
        self.store(&ops[0], &slots[0], &ra, &ss.to_string());
        self.store(&ops[1], &slots[1], &rb, &ss.to_string());
        self.barrier();
        acc
    }

    /// Adds the partial sums of k groups 1.. to group 0's `acc` through
    /// shared memory (thread-fastest layout: conflict-free). The sum order
    /// is fixed, so results do not vary between runs.
    fn reduce(&mut self, acc: &[String], is0: &str, grp: &str, lt: &str) -> Vec<String> {
        let t = self.t;
        let gt = t.group_threads();
        let nacc = t.tm * t.tn;
        // Every group has finished reading the last k-tile.
        self.barrier();
        self.b.cond_br(is0, "red.wait", "red.put");
        self.b.place("red.put");
        let g1 = self.v(format!("add i32 {grp}, -1"));
        let base = self.v(format!("mul i32 {g1}, {}", nacc * gt));
        let base = self.v(format!("add i32 {base}, {lt}"));
        let p = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {base}"
        ));
        for (i, x) in acc.iter().enumerate() {
            let q = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                i as u32 * gt
            ));
            self.b
                .ins(format!("store float {x}, ptr addrspace(3) {q}, align 4"));
        }
        self.b.br("red.wait");
        self.b.place("red.wait");
        self.barrier();
        self.b.cond_br(is0, "red.sum", "epi.done");
        self.b.place("red.sum");
        let p = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {lt}"
        ));
        let mut out = acc.to_vec();
        for g in 1..t.ks {
            for (i, x) in out.iter_mut().enumerate() {
                let q = self.v(format!(
                    "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                    ((g - 1) * nacc + i as u32) * gt
                ));
                let y = self.v(format!("load float, ptr addrspace(3) {q}, align 4"));
                *x = self.v(format!("fadd float {x}, {y}"));
            }
        }
        out
    }

    fn barrier(&mut self) {
        self.b
            .ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
    }

    /// Block `pid` → (row tile, column tile): groups of `GROUP_M` row tiles,
    /// row tiles fastest within a group.
    fn decode_tile(&mut self, pid: &str) -> (String, String) {
        let (p, t) = (self.p, self.t);
        let tiles_m = p.m.div_ceil(u64::from(t.bm));
        let tiles_n = p.n.div_ceil(u64::from(t.bn));
        let gm = GROUP_M.min(tiles_m);
        let width = gm * tiles_n;
        let groups = tiles_m.div_ceil(gm);
        let last_g = tiles_m - (groups - 1) * gm;
        let grp = self.v(format!("udiv i32 {pid}, {width}"));
        let first = self.v(format!("mul i32 {grp}, {gm}"));
        let local = self.v(format!("urem i32 {pid}, {width}"));
        let mut tmo = self.v(format!("urem i32 {local}, {gm}"));
        let mut tno = self.v(format!("udiv i32 {local}, {gm}"));
        if last_g != gm {
            let is_last = self.v(format!("icmp eq i32 {grp}, {}", groups - 1));
            let lm = self.v(format!("urem i32 {local}, {last_g}"));
            let ln = self.v(format!("udiv i32 {local}, {last_g}"));
            tmo = self.v(format!("select i1 {is_last}, i32 {lm}, i32 {tmo}"));
            tno = self.v(format!("select i1 {is_last}, i32 {ln}, i32 {tno}"));
        }
        let tmi = self.v(format!("add i32 {first}, {tmo}"));
        (tmi, tno)
    }

    /// The load units of this thread for `op`; `d0` is the tile's first
    /// row/column, `bat` the batch (index type).
    fn slots(&mut self, op: &Operand, tid: &str, d0: &str, bat: &str) -> Vec<Slot> {
        let t = self.t;
        let threads = t.threads();
        let vw = if op.vec { 4 } else { 1 };
        let count = op.dim * t.bk / vw / threads;
        let per_row = if op.kfast { t.bk / vw } else { op.dim / vw };
        let step = threads / per_row;
        let lane = self.v(format!("urem i32 {tid}, {per_row}"));
        let lane = self.v(format!("mul i32 {lane}, {vw}"));
        let row = self.v(format!("udiv i32 {tid}, {per_row}"));
        let batch_off = match op.conv {
            Some(g) => self.mulc(bat, g.cg),
            None => self.mulc(bat, op.strides[0]),
        };
        let mut out = Vec::new();
        for s in 0..count {
            let r = self.v(format!("add i32 {row}, {}", s * step));
            let (d, kl) = if op.kfast {
                (r, lane.clone())
            } else {
                (lane.clone(), r)
            };
            let si = self.v(format!("mul i32 {kl}, {}", op.pitch));
            let si = self.v(format!("add i32 {si}, {d}"));
            let sidx = self.v(format!("add i32 {si}, {}", op.smem_off));
            let kl = self.widen(&kl);
            let dw = self.widen(&d);
            let gd = self.add(d0, &dw);
            let valid = if !op.extent.is_multiple_of(u64::from(op.dim)) {
                Some(self.v(format!("icmp ult {} {gd}, {}", self.it, op.extent)))
            } else {
                None
            };
            let it = self.it;
            let (base, iy0, ix0) = match op.conv {
                None => {
                    let o = self.mulc(&gd, op.strides[1]);
                    (self.add(&batch_off, &o), String::new(), String::new())
                }
                Some(a) => {
                    let g = a.g;
                    // Row gd = (img·oh + oy)·ow + ox.
                    let img = self.v(format!("udiv {it} {gd}, {}", a.ohw));
                    let pix = self.v(format!("urem {it} {gd}, {}", a.ohw));
                    let oy = self.v(format!("udiv {it} {pix}, {}", g.ow));
                    let ox = self.v(format!("urem {it} {pix}, {}", g.ow));
                    let iy0 = self.mulc(&oy, g.stride[0]);
                    let iy0 = self.v(format!("sub {it} {iy0}, {}", g.pads[0]));
                    let ix0 = self.mulc(&ox, g.stride[1]);
                    let ix0 = self.v(format!("sub {it} {ix0}, {}", g.pads[1]));
                    let ib = self.mulc(&img, g.h * g.w * g.c);
                    let pos = self.mulc(&iy0, g.w);
                    let pos = self.add(&pos, &ix0);
                    let pos = self.mulc(&pos, g.c);
                    let base = self.add(&ib, &pos);
                    (self.add(&base, &batch_off), iy0, ix0)
                }
            };
            out.push(Slot {
                sidx,
                kl,
                base,
                valid,
                iy0,
                ix0,
            });
        }
        out
    }

    /// Loads the k-tile starting at `k0` (index type, may be negative)
    /// into registers; with `kcheck`, columns below 0 read as zero.
    fn load(&mut self, op: &Operand, slots: &[Slot], k0: &str, kcheck: bool) -> Vec<String> {
        let it = self.it;
        // Per distinct k offset: (k term of the offset, dy, dx, k valid).
        let mut kterms: HashMap<String, (String, String, String, Option<String>)> = HashMap::new();
        let mut vals = Vec::new();
        for s in slots {
            let term = match kterms.get(&s.kl) {
                Some(x) => x.clone(),
                None => {
                    let kk = self.add(k0, &s.kl);
                    let kv = kcheck.then(|| self.v(format!("icmp sge {it} {kk}, 0")));
                    let x = match op.conv {
                        None => (self.mulc(&kk, op.strides[2]), "0".into(), "0".into(), kv),
                        Some(a) if a.g.kh * a.g.kw == 1 => (kk, "0".into(), "0".into(), kv),
                        Some(a) => {
                            let g = a.g;
                            let tap = self.v(format!("udiv {it} {kk}, {}", a.cg));
                            let tc = self.mulc(&tap, a.cg);
                            let ci = self.v(format!("sub {it} {kk}, {tc}"));
                            let ky = self.v(format!("udiv {it} {tap}, {}", g.kw));
                            let kyw = self.mulc(&ky, g.kw);
                            let kx = self.v(format!("sub {it} {tap}, {kyw}"));
                            let dy = self.mulc(&ky, g.dilation[0]);
                            let dx = self.mulc(&kx, g.dilation[1]);
                            let o = self.mulc(&dy, g.w);
                            let o = self.add(&o, &dx);
                            let o = self.mulc(&o, g.c);
                            (self.add(&o, &ci), dy, dx, kv)
                        }
                    };
                    kterms.insert(s.kl.clone(), x.clone());
                    x
                }
            };
            let (koff, dy, dx, kv) = term;
            let mut conds = vec![s.valid.clone(), kv];
            if let Some(a) = op.conv {
                if a.check_y {
                    let iy = self.add(&s.iy0, &dy);
                    conds.push(Some(self.v(format!("icmp ult {it} {iy}, {}", a.g.h))));
                }
                if a.check_x {
                    let ix = self.add(&s.ix0, &dx);
                    conds.push(Some(self.v(format!("icmp ult {it} {ix}, {}", a.g.w))));
                }
            }
            let valid = self.and_all(&conds);
            let mut off = self.add(&s.base, &koff);
            if let Some(v) = &valid {
                off = self.v(format!("select i1 {v}, {it} {off}, {it} 0"));
            }
            let ptr = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(1) {}, {it} {off}",
                op.ptr
            ));
            let (ty, align, zero) = if op.vec {
                ("<4 x float>", 16, "zeroinitializer")
            } else {
                ("float", 4, "0.0")
            };
            let mut x = self.v(format!("load {ty}, ptr addrspace(1) {ptr}, align {align}"));
            if let Some(v) = &valid {
                x = self.v(format!("select i1 {v}, {ty} {x}, {ty} {zero}"));
            }
            vals.push(x);
        }
        vals
    }

    /// Stores loaded values into the shared buffer at float offset `soff`.
    fn store(&mut self, op: &Operand, slots: &[Slot], vals: &[String], soff: &str) {
        for (s, x) in slots.iter().zip(vals) {
            let idx = if soff == "0" {
                s.sidx.clone()
            } else {
                self.v(format!("add i32 {}, {soff}", s.sidx))
            };
            let p = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {idx}"
            ));
            if !op.vec {
                self.b
                    .ins(format!("store float {x}, ptr addrspace(3) {p}, align 4"));
            } else if !op.kfast {
                self.b.ins(format!(
                    "store <4 x float> {x}, ptr addrspace(3) {p}, align 16"
                ));
            } else {
                for q in 0..4 {
                    let e = self.v(format!("extractelement <4 x float> {x}, i32 {q}"));
                    let pq = self.v(format!(
                        "getelementptr inbounds float, ptr addrspace(3) {p}, i32 {}",
                        q * op.pitch
                    ));
                    self.b
                        .ins(format!("store float {e}, ptr addrspace(3) {pq}, align 4"));
                }
            }
        }
    }

    /// Loads `n` floats in groups of `w` from shared row `kk` at `base`;
    /// group `g` starts `g·gap` floats on.
    fn frag(&mut self, base: &str, off: u32, n: u32, w: u32, gap: u32) -> Vec<String> {
        let mut out = Vec::new();
        for g in 0..n / w {
            let p = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(3) {base}, i32 {}",
                off + g * gap
            ));
            if w == 1 {
                out.push(self.v(format!("load float, ptr addrspace(3) {p}, align 4")));
            } else {
                let x = self.v(format!(
                    "load <{w} x float>, ptr addrspace(3) {p}, align {}",
                    4 * w
                ));
                for q in 0..w {
                    out.push(self.v(format!("extractelement <{w} x float> {x}, i32 {q}")));
                }
            }
        }
        out
    }

    /// Multiplies the shared buffer at float offset `soff` into `acc`;
    /// with `names`, the final values get those names.
    fn compute(
        &mut self,
        soff: &str,
        a_rd: &str,
        b_rd: &str,
        acc: &[String],
        names: Option<&[String]>,
    ) -> Vec<String> {
        let t = self.t;
        let (wa, wb) = (t.tm.min(4), t.tn.min(4));
        let (nty, ntx) = (t.bm / t.tm, t.bn / t.tn);
        let ai = self.v(format!("add i32 {a_rd}, {soff}"));
        let pa = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {ai}"
        ));
        let bi = self.v(format!("add i32 {b_rd}, {soff}"));
        let pb = self.v(format!(
            "getelementptr inbounds float, ptr addrspace(3) @aoc_smem, i32 {bi}"
        ));
        let mut acc = acc.to_vec();
        for kk in 0..t.bk / t.ks {
            let a = self.frag(&pa, kk * t.pitch_a(), t.tm, wa, wa * nty);
            let bv = self.frag(&pb, kk * t.pitch_b(), t.tn, wb, wb * ntx);
            for (r, ar) in a.iter().enumerate() {
                for (c, bc) in bv.iter().enumerate() {
                    let i = r * t.tn as usize + c;
                    let rhs = format!(
                        "call float @llvm.fma.f32(float {ar}, float {bc}, float {})",
                        acc[i]
                    );
                    acc[i] = match names {
                        Some(n) if kk == t.bk / t.ks - 1 => {
                            self.b.ins(format!("{} = {rhs}", n[i]));
                            n[i].clone()
                        }
                        _ => self.v(rhs),
                    };
                }
            }
        }
        acc
    }

    /// This thread's columns of C: index and validity (absent: always in
    /// range).
    fn columns(&mut self, tx: &str, j0: &str, ntx: u32, wb: u32) -> Vec<(String, Option<String>)> {
        let (p, t, it) = (self.p, self.t, self.it);
        let txw = self.widen(tx);
        let tx_off = self.mulc(&txw, u64::from(wb));
        let j_base = self.add(j0, &tx_off);
        let mut cols = Vec::new();
        for cc in 0..t.tn {
            let local = (cc / wb) * wb * ntx + cc % wb;
            let j = self.add(&j_base, &local.to_string());
            let ok =
                (p.n % u64::from(t.bn) != 0).then(|| self.v(format!("icmp ult {it} {j}, {}", p.n)));
            cols.push((j, ok));
        }
        cols
    }

    /// The accumulators' start: the bias of their column (in k group 0),
    /// else 0. Starting from the bias rather than adding it at the end
    /// keeps the epilogue free of it (registers) and rounds as well.
    fn acc_init(
        &mut self,
        cols: &[(String, Option<String>)],
        bat: &str,
        is0: Option<&str>,
    ) -> Vec<String> {
        let (p, t, it) = (self.p, self.t, self.it);
        let Some(s) = p.bias else {
            return vec!["0.0".to_string(); (t.tm * t.tn) as usize];
        };
        let bb = self.mulc(bat, s);
        let mut vals = Vec::new();
        for (j, ok) in cols {
            let mut o = self.add(&bb, j);
            if let Some(ok) = ok {
                o = self.v(format!("select i1 {ok}, {it} {o}, {it} 0"));
            }
            let ptr = self.v(format!(
                "getelementptr inbounds float, ptr addrspace(1) %pbias, {it} {o}"
            ));
            let mut x = self.v(format!("load float, ptr addrspace(1) {ptr}, align 4"));
            if let Some(is0) = is0 {
                x = self.v(format!("select i1 {is0}, float {x}, float 0.0"));
            }
            vals.push(x);
        }
        (0..t.tm).flat_map(|_| vals.iter().cloned()).collect()
    }

    /// Relu and the guarded stores of this thread's `tm × tn` tile.
    #[allow(clippy::too_many_arguments)]
    fn epilogue(
        &mut self,
        acc: &[String],
        cols: &[(String, Option<String>)],
        ty: &str,
        i0: &str,
        bat: &str,
        nty: u32,
        wa: u32,
    ) {
        let (p, t, it) = (self.p, self.t, self.it);
        let [c0, c1, c2] = p.c;
        let vec = p.aligned16 && t.tn >= 4 && c2 == 1 && p.n % 4 == 0 && c1 % 4 == 0 && c0 % 4 == 0;
        let tyw = self.widen(ty);
        let ty_off = self.mulc(&tyw, u64::from(wa));
        let cb = self.mulc(bat, c0);
        for r in 0..t.tm {
            let local = (r / wa) * wa * nty + r % wa;
            let i = self.add(i0, &ty_off);
            let i = self.add(&i, &local.to_string());
            let iok =
                (p.m % u64::from(t.bm) != 0).then(|| self.v(format!("icmp ult {it} {i}, {}", p.m)));
            let ro = self.mulc(&i, c1);
            let ro = self.add(&cb, &ro);
            let mut outs = Vec::new();
            for cc in 0..cols.len() {
                let mut x = acc[(r * t.tn) as usize + cc].clone();
                if p.relu {
                    x = self.v(format!("call float @llvm.maxnum.f32(float {x}, float 0.0)"));
                }
                outs.push(x);
            }
            let groups: Vec<Vec<usize>> = if vec {
                (0..t.tn as usize)
                    .collect::<Vec<_>>()
                    .chunks(4)
                    .map(|c| c.to_vec())
                    .collect()
            } else {
                (0..t.tn as usize).map(|c| vec![c]).collect()
            };
            for grp in groups {
                let (j, jok) = cols[grp[0]].clone();
                let ok = self.and_all(&[iok.clone(), jok]);
                let next = self.b.label("st.next");
                if let Some(ok) = &ok {
                    let st = self.b.label("st");
                    self.b.cond_br(ok, &st, &next);
                    self.b.place(&st);
                }
                let jo = self.mulc(&j, c2);
                let o = self.add(&ro, &jo);
                let ptr = self.v(format!(
                    "getelementptr inbounds float, ptr addrspace(1) %pc, {it} {o}"
                ));
                if grp.len() == 4 {
                    let mut v = "poison".to_string();
                    for (q, &c) in grp.iter().enumerate() {
                        v = self.v(format!(
                            "insertelement <4 x float> {v}, float {}, i32 {q}",
                            outs[c]
                        ));
                    }
                    self.b.ins(format!(
                        "store <4 x float> {v}, ptr addrspace(1) {ptr}, align 16"
                    ));
                } else {
                    self.b.ins(format!(
                        "store float {}, ptr addrspace(1) {ptr}, align 4",
                        outs[grp[0]]
                    ));
                }
                if ok.is_some() {
                    self.b.br(&next);
                    self.b.place(&next);
                }
            }
        }
    }
}
