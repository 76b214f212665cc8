//! Scaled dot-product attention over strided operands (`Step::Attention`):
//! per batch `b` and head `h`, `s = scale · Q Kᵀ (+ mask)`, `p =
//! softmax(s)` row by row, `Y = p V`.
//!
//! A task is a block of query rows of one head (the whole head when there
//! are enough heads to keep every thread busy). It packs the head's Kᵀ and V
//! into the GEMM's panel layout straight from their strides (so the
//! transposes that split heads cost no copy), computes its `rows × sk`
//! scores with [`gemm`], scales and masks them, takes each row's softmax
//! ([`norm::softmax`]'s kernel, so a row of `-inf` scores gives NaN as the
//! unfused softmax step does) and multiplies by V with a second [`gemm`].
//! Scores and probabilities never leave the worker's caches, the whole
//! attention is one parallel region, and the results are those of the
//! unfused plan's matmul, pointwise, softmax and matmul steps (same
//! kernels, same order of operations). Each task writes only its own
//! output rows.
//!
//! Invariant: every offset is checked against its slice before the loops
//! (the largest index each operand's strides reach), so bad strides are an
//! error, never an out-of-bounds access.

use rayon::prelude::*;

use super::KernelError;
use super::batched::{check_operand, pack_strided};
use super::gemm::{GemmOptions, gemm};
use super::norm;
use super::pack::PackedBRef;

/// The problem and the operands' `[batch, head, row, feature]` strides in
/// elements (the mask's are `[batch, head, query, key]`).
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub batch: usize,
    pub heads: usize,
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub dv: usize,
    pub q: [usize; 4],
    pub k: [usize; 4],
    pub v: [usize; 4],
    pub mask: [usize; 4],
    pub y: [usize; 4],
    pub scale: f32,
}

/// Whether distinct indices of `dims` reach distinct offsets: sorted by
/// stride, each stride must step past everything the smaller ones reach (a
/// sufficient condition, which every dense layout meets). An empty extent
/// reaches nothing.
fn injective(dims: [usize; 4], strides: [usize; 4]) -> bool {
    if dims.contains(&0) {
        return true;
    }
    let mut ds: Vec<(usize, usize)> = dims
        .into_iter()
        .zip(strides)
        .filter(|&(n, _)| n > 1)
        .map(|(n, s)| (s, n))
        .collect();
    ds.sort_unstable();
    let mut reach = 1usize;
    for (s, n) in ds {
        if s < reach {
            return false;
        }
        reach = match s.checked_mul(n - 1).and_then(|e| e.checked_add(reach)) {
            Some(r) => r,
            None => return false,
        };
    }
    true
}

/// Query rows a task takes at least when heads are split over several
/// tasks: each task packs its head's K and V, which this many rows amortize.
const MIN_TASK_ROWS: usize = 32;

/// Scores one task holds at most (floats, per buffer): bounds the scratch
/// for long sequences and keeps a task's scores in L2.
const MAX_TASK_SCORES: usize = 64 * 1024;

/// Computes `y` (only the elements the `y` strides address are written).
pub fn attention(
    s: &AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let (bh, sq, sk) = ([s.batch, s.heads], s.sq, s.sk);
    let u = |st: [usize; 4]| st.map(|x| x as u64);
    check_operand("attention q", [bh[0], bh[1], sq, s.d], u(s.q), q.len())?;
    check_operand("attention k", [bh[0], bh[1], sk, s.d], u(s.k), k.len())?;
    check_operand("attention v", [bh[0], bh[1], sk, s.dv], u(s.v), v.len())?;
    check_operand("attention y", [bh[0], bh[1], sq, s.dv], u(s.y), y.len())?;
    if let Some(m) = mask {
        check_operand("attention mask", [bh[0], bh[1], sq, sk], u(s.mask), m.len())?;
    }
    if !injective([bh[0], bh[1], sq, s.dv], s.y) {
        return Err(KernelError::new(format!(
            "attention: the y strides {:?} write some elements twice",
            s.y
        )));
    }
    let heads = s.batch * s.heads;
    if heads == 0 || sq == 0 || s.dv == 0 {
        return Ok(());
    }
    let chunks = chunks_per_head(heads, sq, sk, rayon::current_num_threads());
    let rows_per = sq.div_ceil(chunks);
    // Tasks write interleaved elements of y (another head's columns of the
    // same rows), so they write through a raw pointer.
    let out = OutPtr(y.as_mut_ptr());
    let out = &out;
    (0..heads * chunks)
        .into_par_iter()
        .try_for_each_init(Scratch::default, |scr, t| {
            let (head, c) = (t / chunks, t % chunks);
            let (i0, i1) = (c * rows_per, ((c + 1) * rows_per).min(sq));
            if i0 >= i1 {
                return Ok(());
            }
            let task = Task {
                b: head / s.heads,
                h: head % s.heads,
                i0,
                i1,
            };
            task.run(s, [q, k, v], mask, out, scr)
        })
}

/// How many tasks share one head's query rows: enough tasks for two per
/// thread when there are few heads, never fewer than [`MIN_TASK_ROWS`]
/// rows each, and small enough score blocks ([`MAX_TASK_SCORES`]).
pub(super) fn chunks_per_head(heads: usize, sq: usize, sk: usize, threads: usize) -> usize {
    let for_threads = (2 * threads).div_ceil(heads);
    let by_rows = sq.div_ceil(MIN_TASK_ROWS);
    let by_scores = sq.saturating_mul(sk).div_ceil(MAX_TASK_SCORES);
    for_threads.min(by_rows).max(by_scores).clamp(1, sq)
}

/// One task's buffers, reused across the tasks a worker runs.
#[derive(Default)]
struct Scratch {
    /// Kᵀ (`d × sk`) and V (`sk × dv`) in the GEMM's packed-B layout.
    kt: Vec<f32>,
    v: Vec<f32>,
    /// Q rows gathered when they are not contiguous.
    q: Vec<f32>,
    /// Scores and probabilities, `rows × sk`; the output rows, `rows × dv`.
    scores: Vec<f32>,
    probs: Vec<f32>,
    y: Vec<f32>,
}

/// Query rows `i0..i1` of head `h` of batch `b`.
struct Task {
    b: usize,
    h: usize,
    i0: usize,
    i1: usize,
}

impl Task {
    /// Scores as one GEMM (Q rows × packed Kᵀ), scale and mask, each row's
    /// softmax, then the output rows as a second GEMM (probabilities ×
    /// packed V), all in this worker's caches. The products are [`gemm`]'s
    /// and the softmax is [`norm::softmax`]'s, so a row is computed as the
    /// unfused plan's matmul, pointwise, softmax and matmul steps compute
    /// it.
    fn run(
        &self,
        s: &AttentionShape,
        [q, k, v]: [&[f32]; 3],
        mask: Option<&[f32]>,
        out: &OutPtr,
        scr: &mut Scratch,
    ) -> Result<(), KernelError> {
        let (sk, d, dv) = (s.sk, s.d, s.dv);
        let rows = self.i1 - self.i0;
        let base = |st: [usize; 4]| self.b * st[0] + self.h * st[1];
        // Kᵀ[f][j] = K[j][f]: rows step along K's features, columns along keys.
        pack_strided(d, sk, k, base(s.k), [s.k[3], s.k[2]], &mut scr.kt);
        pack_strided(sk, dv, v, base(s.v), [s.v[2], s.v[3]], &mut scr.v);
        let q0 = base(s.q) + self.i0 * s.q[2];
        let (qa, lda): (&[f32], usize) = if s.q[3] == 1 && (rows == 1 || s.q[2] >= d) {
            (&q[q0..], if rows == 1 { d } else { s.q[2] })
        } else {
            scr.q.clear();
            for r in 0..rows {
                scr.q
                    .extend((0..d).map(|f| q[q0 + r * s.q[2] + f * s.q[3]]));
            }
            (&scr.q, d)
        };
        let one = GemmOptions::default();
        scr.scores.resize(rows * sk, 0.0);
        scr.probs.resize(rows * sk, 0.0);
        gemm(
            rows,
            sk,
            d,
            qa,
            lda,
            PackedBRef::new(d, sk, &scr.kt)?,
            &mut scr.scores,
            sk,
            &one,
        )?;
        for (r, row) in scr.scores.chunks_exact_mut(sk.max(1)).enumerate() {
            match mask {
                // A key mask (BERT's) is contiguous along the keys.
                Some(m) if s.mask[3] == 1 || sk == 1 => {
                    let m0 = base(s.mask) + (self.i0 + r) * s.mask[2];
                    for (x, &mv) in row.iter_mut().zip(&m[m0..m0 + sk]) {
                        *x = *x * s.scale + mv;
                    }
                }
                Some(m) => {
                    let m0 = base(s.mask) + (self.i0 + r) * s.mask[2];
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = *x * s.scale + m[m0 + j * s.mask[3]];
                    }
                }
                None => row.iter_mut().for_each(|x| *x *= s.scale),
            }
        }
        norm::softmax_rows_here(rows, sk, &scr.scores, &mut scr.probs)?;
        scr.y.resize(rows * dv, 0.0);
        gemm(
            rows,
            dv,
            sk,
            &scr.probs,
            sk,
            PackedBRef::new(sk, dv, &scr.v)?,
            &mut scr.y,
            dv,
            &one,
        )?;
        let y0 = base(s.y) + self.i0 * s.y[2];
        for (r, yr) in scr.y.chunks_exact(dv).enumerate() {
            let row = y0 + r * s.y[2];
            // SAFETY: `attention` bounded every index of y and `injective`
            // made distinct (b, h, i, f) distinct elements; each (b, h, i)
            // belongs to one task.
            unsafe {
                if s.y[3] == 1 {
                    std::ptr::copy_nonoverlapping(yr.as_ptr(), out.0.add(row), dv);
                } else {
                    for (f, &x) in yr.iter().enumerate() {
                        *out.0.add(row + f * s.y[3]) = x;
                    }
                }
            }
        }
        Ok(())
    }
}

struct OutPtr(*mut f32);
// SAFETY: see the write above: tasks write disjoint elements.
unsafe impl Sync for OutPtr {}
