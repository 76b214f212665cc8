//! The blocked, threaded driver shared by the int8 (`int8.rs`) and bf16
//! (`bf16.rs`) GEMMs and their AMX levels (`amx.rs`).
//!
//! **Grouped packed B** (the layout every level reads, and AMX's tile
//! layout): the `k` rows of B are cut into *groups* of `G` consecutive
//! rows, each group holding 4 bytes per column (`G` = 4 s8 values or 2 bf16
//! values). The columns are cut into panels of [`PANEL`] = 16; one packed
//! *row* is the 64 bytes of one group for the panel's 16 columns (column
//! `j` at bytes `4j..4j+4`, in increasing k). A panel holds
//! `round_up(ceil(k/G), 16)` rows — a whole number of AMX tiles of 16 rows —
//! padded with zeros, and panels follow each other. Columns past `n` are
//! zero.
//!
//! Blocking and threads follow `gemm.rs`: a 2-D grid of units (the same
//! `split`) runs as rayon tasks in the current pool; each unit loops over
//! column blocks, depth blocks (`kc`, a multiple of 64 so that a block starts
//! on a whole AMX tile of groups) and row blocks whose A is packed once per
//! block; edge tiles run on a scratch tile. The first depth block starts
//! every column from `init` (the int8 zero-point compensation, or zero);
//! later ones add to C. Integer accumulation wraps (two's complement), which
//! every level does alike, so the int8 result is exact whenever it fits.

use std::cell::RefCell;

use super::KernelError;
use super::gemm::{for_each_unit, split};

/// Columns per panel of a grouped packed B.
pub const PANEL: usize = 16;
/// Bytes of one packed row: 16 columns × one 4-byte group.
pub(super) const ROW_BYTES: usize = 64;
/// Groups per AMX tile (rows of a B tile, dwords of an A tile row).
pub(super) const TILE_GROUPS: usize = 16;

/// An element of A or B: `u8`/`i8` (4 per group) or bf16 bits (2 per group).
pub(super) trait Elem: Copy + Sync {
    /// Elements per 4-byte group.
    const G: usize;
    /// Writes the elements' native-endian bytes to `dst`
    /// (`dst.len() == src.len() · 4 / G`).
    fn to_bytes(src: &[Self], dst: &mut [u8]);
}

impl Elem for u8 {
    const G: usize = 4;
    fn to_bytes(src: &[u8], dst: &mut [u8]) {
        dst.copy_from_slice(src);
    }
}

impl Elem for u16 {
    const G: usize = 2;
    fn to_bytes(src: &[u16], dst: &mut [u8]) {
        for (d, s) in dst.chunks_exact_mut(2).zip(src) {
            d.copy_from_slice(&s.to_ne_bytes());
        }
    }
}

/// Rows of one packed panel: groups rounded up to whole AMX tiles.
pub(super) fn panel_rows(k: usize, g: usize) -> usize {
    k.div_ceil(g).div_ceil(TILE_GROUPS) * TILE_GROUPS
}

/// Bytes of a grouped packed `k × n` B (module doc), or an error on overflow.
pub(super) fn packed_bytes(k: usize, n: usize, g: usize) -> Result<usize, KernelError> {
    panel_rows(k, g)
        .checked_mul(ROW_BYTES)
        .and_then(|x| x.checked_mul(n.div_ceil(PANEL)))
        .ok_or_else(|| KernelError::new(format!("packed b of {k}x{n} is too large")))
}

/// Packs the row-major `k × n` matrix `b` (row stride `ldb`) into the
/// grouped layout of the module doc.
pub(super) fn pack_b<T: Elem>(k: usize, n: usize, b: &[T], ldb: usize) -> Vec<u8> {
    let size = 4 / T::G;
    let rows = panel_rows(k, T::G);
    let mut out = vec![0u8; rows * ROW_BYTES * n.div_ceil(PANEL)];
    for r in 0..k {
        let (q, e) = (r / T::G, r % T::G);
        for (j, &v) in b[r * ldb..r * ldb + n].iter().enumerate() {
            let (p, jj) = (j / PANEL, j % PANEL);
            let at = (p * rows + q) * ROW_BYTES + jj * 4 + e * size;
            T::to_bytes(&[v], &mut out[at..at + size]);
        }
    }
    out
}

/// Checks that a row-major `rows × cols` matrix with row stride `ld` fits in
/// `len` elements.
pub(super) fn check_matrix(
    name: &str,
    rows: usize,
    cols: usize,
    len: usize,
    ld: usize,
) -> Result<(), KernelError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    if ld < cols {
        return Err(KernelError::new(format!(
            "leading dimension of {name} must be at least {cols}, found {ld}"
        )));
    }
    let need = (rows - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(cols))
        .ok_or_else(|| KernelError::new(format!("{name} of {rows}x{cols} is too large")))?;
    if len < need {
        return Err(KernelError::new(format!(
            "{name} of {rows}x{cols} with leading dimension {ld} needs {need} elements, found {len}"
        )));
    }
    Ok(())
}

/// One call of a register-tile (or AMX-tile) kernel.
pub(super) struct Tile {
    /// Groups of depth in this block (`ceil(kb / G)`).
    pub groups: usize,
    /// The packed A micro-panel, in the level's own layout.
    pub a: *const u8,
    /// Row `pc / G` of the first packed B panel of the tile.
    pub b: *const u8,
    /// Bytes from one B panel to the next.
    pub bstride: usize,
    /// A full `mr × 16·np` tile of C (i32 or f32 bits), row stride `ldc`.
    pub c: *mut u32,
    pub ldc: usize,
    /// With `load_c` false: the start value of each of the tile's `16·np`
    /// columns (64 bytes per panel, readable).
    pub init: *const u32,
    /// Add to C (later depth blocks) instead of starting from `init`.
    pub load_c: bool,
}

/// A tile kernel. Safety contract: the CPU has the level's features and the
/// pointers of [`Tile`] cover what its doc says.
pub(super) type TileFn = unsafe fn(&Tile);

/// Packs the `rows × kb` block of A at `a` (row stride `lda`) for a level;
/// returns the bytes from one micro-panel of `mr` rows to the next.
pub(super) type PackFn<T> = fn(usize, &[T], usize, usize, usize, &mut Vec<u8>) -> usize;

/// One level's kernels and block sizes.
pub(super) struct Level<T> {
    pub mr: usize,
    pub max_panels: usize,
    /// Kernel for a tile of `p` panels is `tiles[p - 1]`.
    pub tiles: &'static [TileFn],
    pub pack_a: PackFn<T>,
    pub mc: usize,
    /// Depth block in elements, a multiple of 64.
    pub kc: usize,
    /// Column block, a multiple of `16·max_panels`.
    pub nc: usize,
    /// Run once per unit around its tiles (AMX: load / release the tile
    /// configuration). Safety contract as for [`TileFn`].
    pub begin: Option<unsafe fn()>,
    pub end: Option<unsafe fn()>,
}

/// A checked product: `m × k` A, grouped packed B, `m × n` C, `k > 0`.
pub(super) struct Problem<'a, T> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: &'a [T],
    pub lda: usize,
    /// The packed bytes; `panel_bytes` from one panel to the next.
    pub b: &'a [u8],
    pub panel_bytes: usize,
    /// Start value per column, `16·ceil(n/16)` entries.
    pub init: &'a [u32],
    pub c: &'a mut [u32],
    pub ldc: usize,
}

/// Fewest multiply-adds worth a parallel unit.
const MIN_UNIT_MACS: usize = 1 << 17;

/// Largest tile of any level: AMX's 32 × 32.
const SCRATCH: usize = 32 * 32;

thread_local! {
    /// Packed-A buffer reused by every grouped GEMM on this thread.
    static APACK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// C's base pointer, shared by workers that write disjoint rectangles.
#[derive(Clone, Copy)]
struct SharedC(*mut u32);
// SAFETY: workers write disjoint rectangles of C (see `run`).
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}

/// Runs a checked product on a supported level.
///
/// # Safety
/// The CPU supports `lv`'s kernels; `p` was validated (B holds
/// `ceil(n/16)` panels of `panel_bytes` ≥ `panel_rows(k, G)·64` bytes,
/// A and C fit their shapes, `k > 0`).
pub(super) unsafe fn run<T: Elem>(lv: &Level<T>, p: Problem<'_, T>) {
    let (m, n) = (p.m, p.n);
    if m == 0 || n == 0 {
        return;
    }
    debug_assert!(lv.mr * lv.max_panels * PANEL <= SCRATCH && lv.kc.is_multiple_of(64));
    let tile_cols = lv.max_panels * PANEL;
    let macs = m.saturating_mul(n).saturating_mul(p.k);
    let threads = rayon::current_num_threads().min((macs / MIN_UNIT_MACS).max(1));
    let grid = split(m, n, lv.mr, tile_cols, threads);
    let cparts = grid.1;
    // Workers write C only through this pointer (never through `p.c`).
    let c = SharedC(p.c.as_mut_ptr());
    let job = Job { p: &p, c, lv };
    let ct = n.div_ceil(tile_cols);
    for_each_unit(m, lv.mr, grid, |i0, i1, ci| {
        let j0 = (ci * ct / cparts * tile_cols).min(n);
        let j1 = ((ci + 1) * ct / cparts * tile_cols).min(n);
        if i0 < i1 && j0 < j1 {
            // SAFETY: forwarded from the caller; the units' rectangles of C
            // are disjoint (row and column ranges partition m and n).
            unsafe { job.run(i0, i1, j0, j1) };
        }
    });
}

struct Job<'a, T> {
    p: &'a Problem<'a, T>,
    c: SharedC,
    lv: &'a Level<T>,
}

impl<T: Elem> Job<'_, T> {
    /// Computes rows `i0..i1` × columns `j0..j1` of C (`j0` a multiple of
    /// the tile width), with the level's `begin`/`end` around.
    ///
    /// # Safety
    /// As for [`run`]; no other thread touches this rectangle.
    unsafe fn run(&self, i0: usize, i1: usize, j0: usize, j1: usize) {
        APACK.with(|cell| {
            let mut fresh = Vec::new();
            let mut guard = cell.try_borrow_mut();
            // Not re-entered in practice (nothing below can call a GEMM),
            // but a fresh buffer is always correct.
            let apack = match guard.as_mut() {
                Ok(v) => &mut **v,
                Err(_) => &mut fresh,
            };
            // SAFETY: forwarded from the caller.
            unsafe {
                if let Some(begin) = self.lv.begin {
                    begin();
                }
                self.run_with(i0, i1, j0, j1, apack);
                if let Some(end) = self.lv.end {
                    end();
                }
            }
        })
    }

    /// # Safety
    /// As for `run`.
    unsafe fn run_with(&self, i0: usize, i1: usize, j0: usize, j1: usize, apack: &mut Vec<u8>) {
        let (lv, p) = (self.lv, self.p);
        let tile_cols = lv.max_panels * PANEL;
        let mut scratch = [0u32; SCRATCH];
        for jc in (j0..j1).step_by(lv.nc) {
            let nb = lv.nc.min(j1 - jc);
            for pc in (0..p.k).step_by(lv.kc) {
                let kb = lv.kc.min(p.k - pc);
                let groups = kb.div_ceil(T::G);
                let load_c = pc > 0;
                for ic in (i0..i1).step_by(lv.mc) {
                    let mb = lv.mc.min(i1 - ic);
                    let pstride = (lv.pack_a)(lv.mr, &p.a[ic * p.lda + pc..], p.lda, mb, kb, apack);
                    for jr in (0..nb).step_by(tile_cols) {
                        let col = jc + jr;
                        let cols = tile_cols.min(nb - jr);
                        let panels = cols.div_ceil(PANEL);
                        let kernel = lv.tiles[panels - 1];
                        let b =
                            p.b[(col / PANEL) * p.panel_bytes + (pc / T::G) * ROW_BYTES..].as_ptr();
                        let init = p.init[col..].as_ptr();
                        for ir in (0..mb).step_by(lv.mr) {
                            let rows = lv.mr.min(mb - ir);
                            let a = apack[(ir / lv.mr) * pstride..].as_ptr();
                            // SAFETY: row ic+ir, column col lie inside C.
                            let cp = unsafe { self.c.0.add((ic + ir) * p.ldc + col) };
                            let mut t = Tile {
                                groups,
                                a,
                                b,
                                bstride: p.panel_bytes,
                                c: cp,
                                ldc: p.ldc,
                                init,
                                load_c,
                            };
                            // SAFETY: the tile and B panels exist (checked
                            // by the caller); edge tiles go through scratch.
                            unsafe {
                                if rows == lv.mr && cols == panels * PANEL {
                                    kernel(&t);
                                    continue;
                                }
                                let sld = panels * PANEL;
                                if load_c {
                                    for i in 0..rows {
                                        std::ptr::copy_nonoverlapping(
                                            cp.add(i * p.ldc),
                                            scratch[i * sld..].as_mut_ptr(),
                                            cols,
                                        );
                                    }
                                }
                                t.c = scratch.as_mut_ptr();
                                t.ldc = sld;
                                kernel(&t);
                                for i in 0..rows {
                                    std::ptr::copy_nonoverlapping(
                                        scratch[i * sld..].as_ptr(),
                                        cp.add(i * p.ldc),
                                        cols,
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A in micro-panels of `mr` rows, group-major: panel `ip` holds, for each
/// group `q`, the `mr` rows' 4-byte groups (`A[i][qG .. qG+G]`), rows past
/// `rows` and depth past `kb` zero. The register-tile kernels broadcast one
/// row's group with a single 32-bit load.
pub(super) fn pack_a_groups<T: Elem>(
    mr: usize,
    a: &[T],
    lda: usize,
    rows: usize,
    kb: usize,
    out: &mut Vec<u8>,
) -> usize {
    let size = 4 / T::G;
    let groups = kb.div_ceil(T::G);
    let pstride = groups * mr * 4;
    let panels = rows.div_ceil(mr);
    out.clear();
    out.resize(panels * pstride, 0);
    for i in 0..rows {
        let base = (i / mr) * pstride + (i % mr) * 4;
        for (q, g) in a[i * lda..i * lda + kb].chunks(T::G).enumerate() {
            let at = base + q * mr * 4;
            T::to_bytes(g, &mut out[at..at + g.len() * size]);
        }
    }
    pstride
}

/// A in micro-panels of `mr` rows, row-major as AMX loads it: row `i` of a
/// panel is `round_up(ceil(kb/G), 16)·4` bytes (whole tiles of depth),
/// zero past `kb`; rows past `rows` zero.
pub(super) fn pack_a_rows<T: Elem>(
    mr: usize,
    a: &[T],
    lda: usize,
    rows: usize,
    kb: usize,
    out: &mut Vec<u8>,
) -> usize {
    let size = 4 / T::G;
    let stride = kb.div_ceil(T::G).div_ceil(TILE_GROUPS) * TILE_GROUPS * 4;
    let pstride = mr * stride;
    out.clear();
    out.resize(rows.div_ceil(mr) * pstride, 0);
    for i in 0..rows {
        T::to_bytes(
            &a[i * lda..i * lda + kb],
            &mut out[i * stride..i * stride + kb * size],
        );
    }
    pstride
}
