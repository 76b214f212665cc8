//! Batched matrix product of two activations (`Step::MatMul`): for every
//! batch index `i`, `C_i[m×n] = A_i[m×k] · B_i[k×n]`, each operand
//! addressed by `[batch, row, col]` strides in elements (0 broadcasts).
//!
//! Products of at least [`GEMM_MIN`] multiply-adds go through [`gemm()`]:
//! `B_i` is packed at run time into the `pack_b` panel layout straight from
//! its strides (so a transposed B, as in `Q·Kᵀ`, costs no extra copy), once
//! for all batches when its batch stride is 0 (or there is one batch); `A_i`
//! is used in place when its rows are contiguous and copied into a scratch
//! matrix otherwise; `C_i` is written in place when its rows are contiguous
//! and through a scratch matrix otherwise. Smaller products run a direct
//! loop. With at least as many batches as threads, and batches whose `C_i`
//! are disjoint, batches run in parallel (one gemm thread each); otherwise
//! batches run in order and each gemm uses every thread.
//!
//! Invariants: every operand's extreme offset is checked before any memory
//! is touched, so the function never panics or reads out of bounds on bad
//! arguments; a `C` whose elements overlap (a 0 stride) is written in index
//! order, last write winning.

use rayon::prelude::*;

use super::KernelError;
use super::gemm::{GemmOptions, gemm};
use super::pack::{PANEL_WIDTH, PackedBRef};

/// Products smaller than this many multiply-adds skip packing.
const GEMM_MIN: usize = 4096;

/// Shape and element strides of one batched product.
#[derive(Clone, Copy)]
struct Geom {
    m: usize,
    n: usize,
    k: usize,
    /// `[batch, row, col]` strides of A, B and C.
    a: [usize; 3],
    b: [usize; 3],
    c: [usize; 3],
}

/// Per-task buffers, reused across the batches a task runs.
#[derive(Default)]
struct Scratch {
    a: Vec<f32>,
    packed: Vec<f32>,
    c: Vec<f32>,
}

/// Checks that an operand of extents `dims` with `strides` (elements)
/// lies in `len` elements; returns the strides as `usize`, 0 where the
/// extent is 1. Shared by the strided kernels (batched matmul, attention).
pub(super) fn check_operand<const N: usize>(
    name: &str,
    dims: [usize; N],
    strides: [u64; N],
    len: usize,
) -> Result<[usize; N], KernelError> {
    if dims.contains(&0) {
        return Ok([0; N]);
    }
    // Each product fits u128; their sum may not (it is then too far anyway).
    let last = dims.iter().zip(strides).try_fold(0u128, |acc, (d, s)| {
        acc.checked_add((*d as u128 - 1) * u128::from(s))
    });
    let last = last.unwrap_or(u128::MAX - 1);
    if last >= len as u128 {
        let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        return Err(KernelError::new(format!(
            "{name} of {} with strides {strides:?} needs {} floats, found {len}",
            shape.join("x"),
            last + 1
        )));
    }
    // Each stride with a dimension above 1 is bounded by `len`; a stride of
    // a length-1 dimension is never multiplied by a nonzero index.
    Ok(std::array::from_fn(|i| {
        if dims[i] > 1 { strides[i] as usize } else { 0 }
    }))
}

/// `C_i = A_i · B_i` for `i < batch` (semantics of `Step::MatMul`).
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul(
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_strides: [u64; 3],
    b: &[f32],
    b_strides: [u64; 3],
    c: &mut [f32],
    c_strides: [u64; 3],
) -> Result<(), KernelError> {
    let cs = check_operand("c", [batch, m, n], c_strides, c.len())?;
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: every element of C is 0.
        for i in 0..batch {
            for r in 0..m {
                for j in 0..n {
                    c[i * cs[0] + r * cs[1] + j * cs[2]] = 0.0;
                }
            }
        }
        return Ok(());
    }
    let g = Geom {
        m,
        n,
        k,
        a: check_operand("a", [batch, m, k], a_strides, a.len())?,
        b: check_operand("b", [batch, k, n], b_strides, b.len())?,
        c: cs,
    };
    let use_gemm = m.saturating_mul(n).saturating_mul(k) >= GEMM_MIN;
    // One packed B serves every batch when B does not move with the batch.
    let shared = if use_gemm && g.b[0] == 0 {
        let mut p = Vec::new();
        pack_strided(k, n, b, 0, [g.b[1], g.b[2]], &mut p);
        Some(p)
    } else {
        None
    };
    let threads = rayon::current_num_threads();
    let span = (m - 1) * g.c[1] + (n - 1) * g.c[2] + 1;
    let disjoint = g.c[0] >= span;
    let work = batch.saturating_mul(m).saturating_mul(n).saturating_mul(k);
    if threads > 1 && batch >= threads && disjoint && work >= GEMM_MIN {
        let c = &mut c[..(batch - 1) * g.c[0] + span];
        c.par_chunks_mut(g.c[0])
            .enumerate()
            .try_for_each_init(Scratch::default, |scr, (i, ci)| {
                one(&g, use_gemm, 1, i, a, b, shared.as_deref(), ci, 0, scr)
            })?;
    } else {
        let mut scr = Scratch::default();
        for i in 0..batch {
            one(
                &g,
                use_gemm,
                threads,
                i,
                a,
                b,
                shared.as_deref(),
                c,
                i * g.c[0],
                &mut scr,
            )?;
        }
    }
    Ok(())
}

/// Computes batch `i` into `c` at offset `c0` (C's batch offset already
/// applied by the caller).
#[allow(clippy::too_many_arguments)]
fn one(
    g: &Geom,
    use_gemm: bool,
    threads: usize,
    i: usize,
    a: &[f32],
    b: &[f32],
    shared: Option<&[f32]>,
    c: &mut [f32],
    c0: usize,
    scr: &mut Scratch,
) -> Result<(), KernelError> {
    let (m, n, k) = (g.m, g.n, g.k);
    let a0 = i * g.a[0];
    let b0 = i * g.b[0];
    if !use_gemm {
        direct(g, &a[a0..], &b[b0..], &mut c[c0..], &mut scr.c);
        return Ok(());
    }
    // A in place when its rows are contiguous (a row stride is irrelevant
    // for one row), else a contiguous copy.
    let (a_mat, lda): (&[f32], usize) = if g.a[2] == 1 && (m == 1 || g.a[1] >= k) {
        (&a[a0..], if m == 1 { k } else { g.a[1] })
    } else {
        scr.a.clear();
        for r in 0..m {
            for p in 0..k {
                scr.a.push(a[a0 + r * g.a[1] + p * g.a[2]]);
            }
        }
        (&scr.a, k)
    };
    let packed = match shared {
        Some(p) => p,
        None => {
            pack_strided(k, n, b, b0, [g.b[1], g.b[2]], &mut scr.packed);
            &scr.packed
        }
    };
    let bref = PackedBRef::new(k, n, packed)?;
    let opts = GemmOptions {
        threads,
        ..GemmOptions::default()
    };
    let in_place = g.c[2] == 1 && (m == 1 || g.c[1] >= n);
    if in_place {
        let ldc = if m == 1 { n } else { g.c[1] };
        return gemm(m, n, k, a_mat, lda, bref, &mut c[c0..], ldc, &opts);
    }
    scr.c.clear();
    scr.c.resize(m * n, 0.0);
    gemm(m, n, k, a_mat, lda, bref, &mut scr.c, n, &opts)?;
    for r in 0..m {
        for j in 0..n {
            c[c0 + r * g.c[1] + j * g.c[2]] = scr.c[r * n + j];
        }
    }
    Ok(())
}

/// `C = A·B` for one batch by a direct loop: each row of C accumulates
/// `A[r][p] · B[p][..]` over `p` in `acc`, then is stored with C's strides.
fn direct(g: &Geom, a: &[f32], b: &[f32], c: &mut [f32], acc: &mut Vec<f32>) {
    let (m, n, k) = (g.m, g.n, g.k);
    acc.clear();
    acc.resize(n, 0.0);
    for r in 0..m {
        acc.fill(0.0);
        for p in 0..k {
            let av = a[r * g.a[1] + p * g.a[2]];
            let brow = p * g.b[1];
            if g.b[2] == 1 {
                for (o, &bv) in acc.iter_mut().zip(&b[brow..brow + n]) {
                    *o += av * bv;
                }
            } else {
                for (j, o) in acc.iter_mut().enumerate() {
                    *o += av * b[brow + j * g.b[2]];
                }
            }
        }
        for (j, &v) in acc.iter().enumerate() {
            c[r * g.c[1] + j * g.c[2]] = v;
        }
    }
}

/// Packs the `k × n` matrix of `b` starting at element `b0` with `[row,
/// column]` strides `st` into `out` in the `pack_b` panel layout: panel `p`
/// holds, for each row `r < k`, columns `16p .. 16p+16` at `p·k·16 + r·16`,
/// zero past `n`. The caller has checked that every element lies in `b`.
pub(super) fn pack_strided(
    k: usize,
    n: usize,
    b: &[f32],
    b0: usize,
    st: [usize; 2],
    out: &mut Vec<f32>,
) {
    let [rs, cs] = st;
    let panels = n.div_ceil(PANEL_WIDTH);
    // Every element is written below (the padding columns with zeros), so a
    // buffer reused at the same size is not cleared first.
    out.resize(panels * PANEL_WIDTH * k, 0.0);
    for p in 0..panels {
        let c0 = p * PANEL_WIDTH;
        let width = PANEL_WIDTH.min(n - c0);
        let panel = &mut out[p * k * PANEL_WIDTH..(p + 1) * k * PANEL_WIDTH];
        if width < PANEL_WIDTH {
            for row in panel.chunks_exact_mut(PANEL_WIDTH) {
                row[width..].fill(0.0);
            }
        }
        if cs == 1 {
            for (r, row) in panel.chunks_exact_mut(PANEL_WIDTH).enumerate() {
                let s = b0 + r * rs + c0;
                row[..width].copy_from_slice(&b[s..s + width]);
            }
        } else {
            // Column by column: a transposed B (row stride 1) is read
            // contiguously, and one panel (k·64 bytes) is written.
            for j in 0..width {
                let s = b0 + (c0 + j) * cs;
                for r in 0..k {
                    panel[r * PANEL_WIDTH + j] = b[s + r * rs];
                }
            }
        }
    }
}
