//! The fp32 GEMM entry point: `C[m×n] = epilogue(β·C + A[m×k] · B[k×n])`
//! with β ∈ {0, 1}, A and C row-major with leading dimensions, B packed
//! (see `pack.rs`).
//!
//! Blocking (BLIS order): columns in blocks of `nc`, depth in blocks of `kc`,
//! rows in blocks of `mc`; each `mc × kc` block of A is packed once and
//! stays in L2 while the loop over B micro-panels (`kc × 16·panels`, in L1)
//! and over A micro-panels calls the register-tile kernel. When a column
//! block fits one register tile (n ≤ 32 on AVX-512: convolutions with few
//! output channels) each A row meets one tile, so packing would copy every
//! element to read it once: the AVX-512 kernels then read A in place. The last rows of
//! a block run a kernel of just that many rows (same operations per
//! element, so the same results); a tile cut by `n` runs on a scratch tile
//! (its epilogue with the bias padded) whose live columns are copied back. The
//! epilogue (bias per column, then relu) is applied to each tile right after
//! its last depth block, while the tile is still in L1.
//!
//! Threads: the product is cut into a 2-D grid of units (row ranges in
//! whole register-tile rows × column ranges in whole tiles) run as rayon
//! tasks in the *current* pool, so tall-skinny products (convolutions: many
//! pixels, few channels) use every thread as well as wide ones. The grid is
//! chosen by a small cost model (`split`). Each unit packs its own A rows
//! and writes a disjoint rectangle of C; every element of C is computed by
//! exactly one unit with the same depth order, so results are bit-identical
//! for every thread count and grid. Several products of one A
//! ([`gemm_shared_a`]: an encoder layer's Q, K and V projections) are cut
//! as one, their column tiles side by side; [`gemm`] is the group of one.

use std::cell::RefCell;
use std::fmt;

use rayon::prelude::*;

use super::act::{Post, max_nan, min_nan};
use super::detect::Isa;
use super::pack::{PANEL_WIDTH, PackedBRef, check_matrix, pack_a};

/// A rejected GEMM call; the message names the expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmError {
    message: String,
}

impl GemmError {
    pub(crate) fn new(message: String) -> GemmError {
        GemmError { message }
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for GemmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GemmError {}

/// A weight layout's refusal (`aoc_plan::pack`) reads as a kernel error with
/// the same message.
impl From<aoc_plan::pack::PackError> for GemmError {
    fn from(e: aoc_plan::pack::PackError) -> GemmError {
        GemmError::new(e.message().to_string())
    }
}

/// How to run a [`gemm()`].
#[derive(Clone, Copy, Debug)]
pub struct GemmOptions<'a> {
    /// Force a level (tests, benchmarks); `None` uses [`Isa::best`].
    pub isa: Option<Isa>,
    /// `true`: `C += A·B`; `false`: `C = A·B` (C's old values are not read).
    pub accumulate: bool,
    /// Added to every row of the result (length `n`), after the sum.
    pub bias: Option<&'a [f32]>,
    /// `max(x, 0)` after the bias.
    pub relu: bool,
    /// `min(max(x, lo), hi)` after the relu (ReLU6 is `[0, 6]`).
    pub clip: Option<[f32; 2]>,
    /// GELU (erf form, [`act::gelu`](super::act::gelu)) last.
    pub gelu: bool,
    /// Upper bound on the worker threads (at least 1); the work runs in the
    /// current rayon pool and uses at most `min(threads, pool size)` of them.
    pub threads: usize,
}

impl GemmOptions<'_> {
    /// The relu and clip of the epilogue.
    fn post(&self) -> Post {
        Post {
            relu: self.relu,
            clip: self.clip,
        }
    }
}

impl Default for GemmOptions<'_> {
    fn default() -> Self {
        GemmOptions {
            isa: None,
            accumulate: false,
            bias: None,
            relu: false,
            clip: None,
            gelu: false,
            threads: 1,
        }
    }
}

/// Signature of every register-tile kernel; contract in `avx512.rs`.
type TileFn =
    unsafe fn(usize, *const f32, *const f32, usize, *mut f32, usize, bool, Option<&TileEpi>);

/// A register-tile kernel reading A in place with row stride `lda` (the
/// third argument); otherwise as [`TileFn`].
type UnpackedTileFn = unsafe fn(
    usize,
    *const f32,
    usize,
    *const f32,
    usize,
    *mut f32,
    usize,
    bool,
    Option<&TileEpi>,
);

/// The epilogue a register-tile kernel applies to a full tile as it stores
/// it after the last depth block: the bias of each column, then `max(x,
/// lo)` and `min(x, hi)` where present (a relu is `lo = 0`). The same
/// operations in the same order as [`epilogue`], so a tile's results do not
/// depend on which of the two applied them.
pub(crate) struct TileEpi {
    /// The bias of the tile's first column (a full tile's worth follows),
    /// or null.
    pub bias: *const f32,
    pub lo: Option<f32>,
    pub hi: Option<f32>,
}

impl TileEpi {
    /// The epilogue of the full tile whose first column is `col`.
    fn new(bias: Option<&[f32]>, col: usize, post: Post) -> TileEpi {
        let clip_lo = post.clip.map(|c| c[0]);
        // relu then clip: max(max(x, 0), lo) = max(x, max(0, lo)).
        let lo = if post.relu {
            Some(clip_lo.map_or(0.0, |l| l.max(0.0)))
        } else {
            clip_lo
        };
        TileEpi {
            bias: bias.map_or(std::ptr::null(), |b| b[col..].as_ptr()),
            lo,
            hi: post.clip.map(|c| c[1]),
        }
    }
}

/// One level's kernel and block sizes.
struct Level {
    mr: usize,
    max_panels: usize,
    /// Kernel for a tile of `p` panels and `r` rows is `tiles[p - 1][r - 1]`.
    tiles: &'static [&'static [TileFn]],
    /// As `tiles`, reading A unpacked (levels that have them).
    unpacked: &'static [&'static [UnpackedTileFn]],
    mc: usize,
    kc: usize,
    /// Column block, a multiple of `16·max_panels`.
    nc: usize,
}

/// The AVX-512 tiles of `$np` panels for each row count listed.
#[cfg(target_arch = "x86_64")]
macro_rules! rows {
    ($np:literal; $($r:literal)+) => {
        [$(super::avx512::tile::<$np, $r> as TileFn),+]
    };
}

/// The AVX-512 tiles reading A unpacked, as [`rows!`].
#[cfg(target_arch = "x86_64")]
macro_rules! unpacked_rows {
    ($np:literal; $($r:literal)+) => {
        [$(super::avx512::tile_unpacked::<$np, $r> as UnpackedTileFn),+]
    };
}

fn level(isa: Isa) -> Level {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            use super::avx512::{MAX_PANELS, MR};
            // B micro-panel 256×32 floats = 32 KiB (L1); A block 336×256 =
            // 336 KiB (L2 of 1-2 MiB): each B micro-panel serves 24 tiles.
            // On a Xeon (one core) 336 rows beat 168 at 1024³, 2048³ and
            // 128×512×512 (docs/performance.md, fifth session).
            Level {
                mr: MR,
                max_panels: MAX_PANELS,
                tiles: &[
                    &rows!(1; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
                    &rows!(2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
                ],
                unpacked: &[
                    &unpacked_rows!(1; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
                    &unpacked_rows!(2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
                ],
                mc: 24 * MR,
                kc: 256,
                nc: 4096,
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            use super::avx2::{MAX_PANELS, MR, tile};
            // B micro-panel 256×16 floats = 16 KiB (L1); A block 144×256 = 144 KiB (L2).
            Level {
                mr: MR,
                max_panels: MAX_PANELS,
                tiles: &[&[
                    tile::<1>, tile::<2>, tile::<3>, tile::<4>, tile::<5>, tile::<6>,
                ]],
                unpacked: &[],
                mc: 24 * MR,
                kc: 256,
                nc: 4096,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx512 | Isa::Avx2 => scalar_level(),
        Isa::Scalar => scalar_level(),
    }
}

fn scalar_level() -> Level {
    use super::scalar::{MAX_PANELS, MR, tile};
    Level {
        mr: MR,
        max_panels: MAX_PANELS,
        tiles: &[&[tile::<1>, tile::<2>, tile::<3>, tile::<4>]],
        unpacked: &[],
        mc: 32 * MR,
        kc: 256,
        nc: 4096,
    }
}

/// `C = epilogue(β·C + A·B)` for a row-major `m × k` A (row stride `lda`),
/// a packed `k × n` B and a row-major `m × n` C (row stride `ldc`).
// BLAS-shaped on purpose: the backend emits calls with exactly these operands.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: PackedBRef<'_>,
    c: &mut [f32],
    ldc: usize,
    opts: &GemmOptions<'_>,
) -> Result<(), GemmError> {
    // One product is a group of one.
    let mut part = [SharedAPart {
        n,
        b,
        c,
        ldc,
        opts: *opts,
    }];
    gemm_shared_a(m, k, a, lda, &mut part)
}

/// Checks one product's arguments; returns the level it runs at.
#[allow(clippy::too_many_arguments)]
fn check(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: PackedBRef<'_>,
    c: &[f32],
    ldc: usize,
    opts: &GemmOptions<'_>,
) -> Result<Isa, GemmError> {
    if b.k() != k || b.n() != n {
        return Err(GemmError::new(format!(
            "packed b must be {k}x{n}, found {}x{}",
            b.k(),
            b.n()
        )));
    }
    check_matrix("a", m, k, a.len(), lda)?;
    check_matrix("c", m, n, c.len(), ldc)?;
    if let Some(bias) = opts.bias
        && bias.len() != n
    {
        return Err(GemmError::new(format!(
            "bias must have {n} elements, found {}",
            bias.len()
        )));
    }
    if opts.threads == 0 {
        return Err(GemmError::new(
            "threads must be at least 1, found 0".to_string(),
        ));
    }
    let isa = opts.isa.unwrap_or_else(Isa::best);
    if !isa.is_supported() {
        return Err(GemmError::new(format!(
            "isa {isa} is not supported by this cpu"
        )));
    }
    Ok(isa)
}

/// A product with `k = 0`: only β·C and the epilogue.
fn only_epilogue(m: usize, n: usize, c: &mut [f32], ldc: usize, opts: &GemmOptions<'_>) {
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        if !opts.accumulate {
            row.fill(0.0);
        }
        let isa = opts.isa.unwrap_or_else(Isa::best);
        epilogue(isa, row, opts.bias, opts.post(), opts.gelu);
    }
}

/// One product of [`gemm_shared_a`]: `C = epilogue(A · B)` with its own
/// packed B (`k × n`), C and options (bias, relu, accumulate; `isa` and
/// `threads` are the first part's for all).
pub struct SharedAPart<'a> {
    pub n: usize,
    pub b: PackedBRef<'a>,
    pub c: &'a mut [f32],
    pub ldc: usize,
    pub opts: GemmOptions<'a>,
}

/// Several products of one A (`m × k`) with different B, run as one
/// parallel region: the units of the grid [`split`] picks for the parts'
/// columns side by side, each cut where one part ends and the next
/// begins. An encoder layer's Q, K and V projections (three 128×256×256
/// products at sequence 128) then fill the threads as one 128×768 product
/// would, instead of three regions of a third of the work. Every element
/// is computed as [`gemm`] computes it (same kernels, same depth order).
pub fn gemm_shared_a(
    m: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    parts: &mut [SharedAPart<'_>],
) -> Result<(), GemmError> {
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let (isa0, threads) = (first.opts.isa, first.opts.threads);
    let mut isa = Isa::Scalar;
    for p in parts.iter() {
        let opts = GemmOptions {
            isa: isa0,
            threads,
            ..p.opts
        };
        isa = check(m, p.n, k, a, lda, p.b, p.c, p.ldc, &opts)?;
    }
    if m == 0 {
        return Ok(());
    }
    if k == 0 {
        for p in parts.iter_mut() {
            only_epilogue(m, p.n, p.c, p.ldc, &p.opts);
        }
        return Ok(());
    }
    let lv = level(isa);
    let tile_cols = lv.max_panels * PANEL_WIDTH;
    let jobs: Vec<(Job<'_>, usize)> = parts
        .iter_mut()
        .map(|p| {
            let job = Job {
                isa,
                k,
                a,
                lda,
                b: p.b,
                c: SharedC(p.c.as_mut_ptr()),
                ldc: p.ldc,
                opts: &p.opts,
                lv: &lv,
            };
            (job, p.n)
        })
        .collect();
    // The parts' column tiles side by side: part p owns tiles first[p]..first[p + 1].
    let mut first = vec![0usize];
    for (_, n) in &jobs {
        first.push(first.last().copied().unwrap_or(0) + n.div_ceil(tile_cols));
    }
    let total = first.last().copied().unwrap_or(0);
    let macs = jobs.iter().fold(0usize, |acc, (_, n)| {
        acc.saturating_add(m.saturating_mul(*n).saturating_mul(k))
    });
    let threads = threads
        .min(rayon::current_num_threads())
        .min((macs / MIN_UNIT_MACS).max(1));
    let grid = split(m, total * tile_cols, lv.mr, tile_cols, threads);
    let cparts = grid.1;
    for_each_unit(m, lv.mr, grid, |i0, i1, ci| {
        let (t0, t1) = (ci * total / cparts, (ci + 1) * total / cparts);
        for (p, (job, n)) in jobs.iter().enumerate() {
            let (lo, hi) = (t0.max(first[p]), t1.min(first[p + 1]));
            let (j0, j1) = (
                (lo - first[p]) * tile_cols,
                ((hi.max(lo) - first[p]) * tile_cols).min(*n),
            );
            if i0 < i1 && j0 < j1 {
                // SAFETY: arguments checked above; the parts' C are
                // disjoint (distinct mutable slices) and within a part the
                // units' rectangles are (row and tile ranges partition it).
                unsafe { job.run(i0, i1, j0, j1) };
            }
        }
    });
    Ok(())
}

/// Runs `unit(i0, i1, ci)` for every unit of a `rparts × cparts` grid
/// from [`split`] over `m` rows cut in whole `mr`-row tiles: rows
/// `i0..i1` of row part `ri` (possibly empty), column part `ci`; on this
/// thread when the grid is one unit, else as rayon tasks.
pub(super) fn for_each_unit(
    m: usize,
    mr: usize,
    (rparts, cparts): (usize, usize),
    unit: impl Fn(usize, usize, usize) + Send + Sync,
) {
    let rt = m.div_ceil(mr);
    let run = |u: usize| {
        let (ri, ci) = (u / cparts, u % cparts);
        let i0 = (ri * rt / rparts * mr).min(m);
        let i1 = ((ri + 1) * rt / rparts * mr).min(m);
        unit(i0, i1, ci);
    };
    if rparts * cparts == 1 {
        run(0);
    } else {
        (0..rparts * cparts).into_par_iter().for_each(run);
    }
}

/// Fewest multiply-adds worth a parallel unit: below this the rayon task
/// costs more than it saves.
const MIN_UNIT_MACS: usize = 1 << 16;

/// Cost, in multiply-adds, of streaming one row of A (packing) or one
/// column of B (from outer caches) per depth step; it makes the split prefer
/// square-ish units.
const STREAM_COST: usize = 16;

/// Chooses a grid of `rows × cols` units for `threads` workers: rows are
/// split in whole register-tile rows (`mr`), columns in whole tiles. It
/// minimises (rounds of units) × (unit area + `STREAM_COST`·perimeter), so
/// a tall-skinny product is cut by rows, a short-wide one by columns, and
/// the unit count is close to a multiple of the thread count.
pub(super) fn split(
    m: usize,
    n: usize,
    mr: usize,
    tile_cols: usize,
    threads: usize,
) -> (usize, usize) {
    let (rt, ct) = (m.div_ceil(mr), n.div_ceil(tile_cols));
    if threads <= 1 || rt * ct <= 1 {
        return (1, 1);
    }
    let mut best = (usize::MAX, 1, 1);
    for cparts in 1..=ct.min(threads) {
        for mult in 1..=3 {
            let rparts = (mult * threads).div_ceil(cparts).min(rt);
            let units = rparts * cparts;
            let rounds = units.div_ceil(threads);
            let rows = (rt.div_ceil(rparts) * mr).min(m);
            let cols = (ct.div_ceil(cparts) * tile_cols).min(n);
            let cost = rounds * (rows * cols + STREAM_COST * (rows + cols));
            if cost < best.0 || (cost == best.0 && units < best.1 * best.2) {
                best = (cost, rparts, cparts);
            }
        }
    }
    (best.1, best.2)
}

thread_local! {
    /// Packed-A buffer reused by every GEMM on this thread (a fresh
    /// allocation per unit would page-fault its ~170 KiB every time).
    static APACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// C's base pointer, shared by workers that write disjoint rectangles.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: workers write disjoint rectangles of C (see `gemm`).
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}

struct Job<'a> {
    /// The level the product runs at (the GELU epilogue's too).
    isa: Isa,
    k: usize,
    a: &'a [f32],
    lda: usize,
    b: PackedBRef<'a>,
    c: SharedC,
    ldc: usize,
    opts: &'a GemmOptions<'a>,
    lv: &'a Level,
}

/// Largest tile any level uses: 14 rows × 32 columns.
const SCRATCH: usize = 14 * 32;
/// The widest register tile of any level, in columns.
const MAX_TILE_COLS: usize = 32;

impl Job<'_> {
    /// Computes rows `i0..i1` × columns `j0..j1` of C (`j0` a multiple of
    /// the tile width).
    ///
    /// # Safety
    /// Arguments validated by `gemm`; no other thread touches this rectangle.
    unsafe fn run(&self, i0: usize, i1: usize, j0: usize, j1: usize) {
        APACK.with(|cell| match cell.try_borrow_mut() {
            // SAFETY: forwarded from the caller.
            Ok(mut apack) => unsafe { self.run_with(i0, i1, j0, j1, &mut apack) },
            // Not reachable (`run_with` calls nothing that could re-enter),
            // but a fresh buffer is always correct.
            Err(_) => unsafe { self.run_with(i0, i1, j0, j1, &mut Vec::new()) },
        })
    }

    /// `run` with the packed-A buffer given.
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn run_with(&self, i0: usize, i1: usize, j0: usize, j1: usize, apack: &mut Vec<f32>) {
        let lv = self.lv;
        let (k, ldc) = (self.k, self.ldc);
        let bdata = self.b.as_slice().as_ptr();
        let bstride = k * PANEL_WIDTH;
        let tile_cols = lv.max_panels * PANEL_WIDTH;
        let mut scratch = [0.0f32; SCRATCH];
        for jc in (j0..j1).step_by(lv.nc) {
            let nb = lv.nc.min(j1 - jc);
            for pc in (0..k).step_by(lv.kc) {
                let kb = lv.kc.min(k - pc);
                let load_c = pc > 0 || self.opts.accumulate;
                let last = pc + kb == k;
                // Columns that fit one tile: each A row is read once per
                // depth block, so the kernel reads A in place instead of
                // packing it (a convolution with few output channels: the
                // unfolded pixels would be copied twice).
                let unpacked = !lv.unpacked.is_empty() && nb <= tile_cols;
                for ic in (i0..i1).step_by(lv.mc) {
                    let mb = lv.mc.min(i1 - ic);
                    if !unpacked {
                        pack_a(
                            lv.mr,
                            &self.a[ic * self.lda + pc..],
                            self.lda,
                            mb,
                            kb,
                            apack,
                        );
                    }
                    for jr in (0..nb).step_by(tile_cols) {
                        let col = jc + jr;
                        let cols = tile_cols.min(nb - jr);
                        let panels = cols.div_ceil(PANEL_WIDTH);
                        let kernels = lv.tiles[panels - 1];
                        // SAFETY: panel `col / 16` exists and has rows pc..pc+kb.
                        let bp =
                            unsafe { bdata.add((col / PANEL_WIDTH) * bstride + pc * PANEL_WIDTH) };
                        for ir in (0..mb).step_by(lv.mr) {
                            let rows = lv.mr.min(mb - ir);
                            let packed_kernel = kernels[rows - 1];
                            let lda = self.lda;
                            let ap = if unpacked {
                                self.a[(ic + ir) * lda + pc..].as_ptr()
                            } else {
                                apack[ir * kb..].as_ptr()
                            };
                            let unpacked_kernel = if unpacked {
                                Some(lv.unpacked[panels - 1][rows - 1])
                            } else {
                                None
                            };
                            // SAFETY (of each call): as for the packed
                            // kernel; unpacked, rows ic+ir.. of A hold
                            // columns pc..pc+kb (A was checked m × k).
                            let kernel = |kb: usize,
                                          ap: *const f32,
                                          bp: *const f32,
                                          bstride: usize,
                                          c: *mut f32,
                                          ldc: usize,
                                          load_c: bool,
                                          epi: Option<&TileEpi>| unsafe {
                                match unpacked_kernel {
                                    Some(f) => f(kb, ap, lda, bp, bstride, c, ldc, load_c, epi),
                                    None => packed_kernel(kb, ap, bp, bstride, c, ldc, load_c, epi),
                                }
                            };
                            // SAFETY: row ic+ir, column col lie inside C.
                            let cp = unsafe { self.c.0.add((ic + ir) * ldc + col) };
                            // The next tile of C (below this one, or the top
                            // of the next column tile): its rows lie a row
                            // stride apart, too far for the hardware
                            // prefetchers, and in a large C they come from
                            // memory (each was last touched a whole k block
                            // ago). Only when the kernel reads C: in a first
                            // depth block C is only written, and there the
                            // prefetches cost more than they save (a 1×1
                            // convolution with k = 16: 0.67 → 0.59 ms).
                            let (next_row, next_col) = if ir + lv.mr < mb {
                                (ic + ir + lv.mr, col)
                            } else {
                                (ic, col + tile_cols)
                            };
                            if load_c && next_col < jc + nb {
                                let next_rows = lv.mr.min(ic + mb - next_row);
                                let next_cols = tile_cols.min(jc + nb - next_col);
                                // SAFETY: the rectangle lies inside C (rows
                                // of this block, columns of this job).
                                unsafe {
                                    prefetch_rows(
                                        self.c.0.add(next_row * ldc + next_col),
                                        ldc,
                                        next_rows,
                                        next_cols,
                                    )
                                };
                            }
                            let post = self.opts.post();
                            let has_epi =
                                last && (self.opts.bias.is_some() || post != Post::default());
                            unsafe {
                                if cols == panels * PANEL_WIDTH {
                                    // A full tile: the kernel applies bias,
                                    // relu and clip as it stores it.
                                    let epi = TileEpi::new(self.opts.bias, col, post);
                                    let epi = has_epi.then_some(&epi);
                                    kernel(kb, ap, bp, bstride, cp, ldc, load_c, epi);
                                    if last && self.opts.gelu {
                                        let tile = (cp, ldc, rows, cols);
                                        epilogue_tile(self.isa, tile, None, Post::default(), true);
                                    }
                                } else {
                                    let sld = panels * PANEL_WIDTH;
                                    if load_c {
                                        for i in 0..rows {
                                            std::ptr::copy_nonoverlapping(
                                                cp.add(i * ldc),
                                                scratch[i * sld..].as_mut_ptr(),
                                                cols,
                                            );
                                        }
                                    }
                                    let sp = scratch.as_mut_ptr();
                                    // A tile cut by n: the kernel applies
                                    // the epilogue on the scratch tile with
                                    // the bias padded to the full width (it
                                    // has no values past n).
                                    let mut padded = [0.0f32; MAX_TILE_COLS];
                                    let epi = has_epi.then(|| {
                                        let bias = self.opts.bias.map(|b| {
                                            padded[..cols].copy_from_slice(&b[col..col + cols]);
                                            &padded[..]
                                        });
                                        TileEpi::new(bias, 0, post)
                                    });
                                    kernel(kb, ap, bp, bstride, sp, sld, load_c, epi.as_ref());
                                    for i in 0..rows {
                                        std::ptr::copy_nonoverlapping(
                                            scratch[i * sld..].as_ptr(),
                                            cp.add(i * ldc),
                                            cols,
                                        );
                                    }
                                    if last && self.opts.gelu {
                                        let tile = (cp, ldc, rows, cols);
                                        epilogue_tile(self.isa, tile, None, Post::default(), true);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Asks for `rows` rows of `cols` floats, `ld` apart from `p`, in L2 (not
/// L1: the AVX-512 level's A and B micro-panels fill most of a 48 KiB L1).
///
/// # Safety
/// The rows lie inside one allocation.
#[inline]
unsafe fn prefetch_rows(p: *const f32, ld: usize, rows: usize, cols: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..rows {
        for j in (0..cols).step_by(16) {
            // SAFETY: inside the allocation (the caller's rectangle).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                    p.add(i * ld + j) as *const i8,
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, ld, rows, cols);
}

/// [`epilogue`] on each row of the `rows × cols` tile at `c` (row stride
/// `ldc`), the level chosen once for the tile.
///
/// # Safety
/// The tile lies inside C and no other thread touches it.
unsafe fn epilogue_tile(
    isa: Isa,
    (c, ldc, rows, cols): (*mut f32, usize, usize, usize),
    bias: Option<&[f32]>,
    post: Post,
    gelu: bool,
) {
    for i in 0..rows {
        // SAFETY: row `i` of the tile (the caller's contract).
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), cols) };
        epilogue(isa, row, bias, post, gelu);
    }
}

/// Bias per column, then relu and clip, then GELU, on one row segment, at
/// `isa`'s vector width (a tile's rows are 16 or 32 floats: compiled for
/// the baseline these loops were a fifth of a convolution's time).
fn epilogue(isa: Isa, row: &mut [f32], bias: Option<&[f32]>, post: Post, gelu: bool) {
    #[inline(always)]
    fn bias_post(row: &mut [f32], bias: Option<&[f32]>, post: Post) {
        if let Some(bias) = bias {
            for (x, &b) in row.iter_mut().zip(bias) {
                *x += b;
            }
        }
        // One loop per form, so each vectorizes without a per-element test.
        match (post.relu, post.clip) {
            (false, None) => {}
            (true, None) => row.iter_mut().for_each(|x| *x = max_nan(*x, 0.0)),
            (false, Some([lo, hi])) => row.iter_mut().for_each(|x| *x = min_nan(max_nan(*x, lo), hi)),
            (true, Some([lo, hi])) => row.iter_mut().for_each(|x| *x = min_nan(max_nan(max_nan(*x, 0.0), lo), hi)),
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn v512(row: &mut [f32], bias: Option<&[f32]>, post: Post) {
        bias_post(row, bias, post)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn v256(row: &mut [f32], bias: Option<&[f32]>, post: Post) {
        bias_post(row, bias, post)
    }
    match isa {
        // SAFETY: the product runs at `isa` only where the CPU has it
        // (`check`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { v512(row, bias, post) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { v256(row, bias, post) },
        _ => bias_post(row, bias, post),
    }
    if gelu {
        super::act::gelu(isa, row);
    }
}
