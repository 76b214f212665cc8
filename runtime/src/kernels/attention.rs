//! Scaled dot-product attention over strided operands (`Step::Attention`):
//! per batch `b` and head `h`, `s = scale · Q Kᵀ (+ mask)`, `p =
//! softmax(s)` row by row, `Y = p V`.
//!
//! One score row at a time: a query row's `sk` scores live in a scratch
//! vector, never in a `sq × sk` matrix (dot products in eight partial sums;
//! `p·V` accumulated along contiguous feature rows), and the row's softmax is
//! [`norm::softmax`]'s, so a row behaves exactly as the unfused plan's
//! softmax step (a row of `-inf` scores gives NaN there and here). Rows are
//! split across the pool's threads; each writes only its own output row.
//!
//! Invariant: every offset is checked against its slice before the loops
//! (the largest index each operand's strides reach), so bad strides are an
//! error, never an out-of-bounds access.

use rayon::prelude::*;

use super::KernelError;
use super::batched::check_operand;
use super::norm;

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
/// sufficient condition, which every dense layout meets).
fn injective(dims: [usize; 4], strides: [usize; 4]) -> bool {
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
    let rows = s.batch * s.heads * sq;
    if rows == 0 || s.dv == 0 {
        return Ok(());
    }
    // Each output row is written by one task; rows may interleave in
    // memory (any strides), so tasks write through a raw pointer.
    let out = OutPtr(y.as_mut_ptr());
    let out = &out;
    let (d, dv) = (s.d, s.dv);
    (0..rows).into_par_iter().for_each_init(
        || {
            (
                vec![0f32; sk],
                vec![0f32; sk],
                vec![0f32; d],
                vec![0f32; d],
                vec![0f32; dv],
                vec![0f32; dv],
            )
        },
        |(scores, probs, qrow, krow, vrow, acc), r| {
            let (bh_i, i) = (r / sq, r % sq);
            let (b, h) = (bh_i / s.heads, bh_i % s.heads);
            let qo = b * s.q[0] + h * s.q[1] + i * s.q[2];
            let q_row = row(q, qo, s.q[3], qrow);
            for (j, sc) in scores.iter_mut().enumerate() {
                let k_row = row(k, b * s.k[0] + h * s.k[1] + j * s.k[2], s.k[3], krow);
                *sc = dot(q_row, k_row) * s.scale;
                if let Some(m) = mask {
                    *sc += m[b * s.mask[0] + h * s.mask[1] + i * s.mask[2] + j * s.mask[3]];
                }
            }
            // A one-row softmax cannot fail: both slices hold `sk` values.
            let _ = norm::softmax(1, sk, false, scores, probs);
            acc.fill(0.0);
            for (j, &p) in probs.iter().enumerate() {
                let v_row = row(v, b * s.v[0] + h * s.v[1] + j * s.v[2], s.v[3], vrow);
                for (a, &x) in acc.iter_mut().zip(v_row) {
                    *a += p * x;
                }
            }
            let yo = b * s.y[0] + h * s.y[1] + i * s.y[2];
            for (f, &a) in acc.iter().enumerate() {
                // SAFETY: `check` bounded every index of y and
                // `injective` made distinct (b, h, i, f) distinct elements.
                unsafe { *out.0.add(yo + f * s.y[3]) = a };
            }
        },
    );
    Ok(())
}

/// The `tmp.len()` elements of `x` from `start` at `stride`: a slice of `x`
/// when contiguous, else gathered into `tmp`.
fn row<'a>(x: &'a [f32], start: usize, stride: usize, tmp: &'a mut [f32]) -> &'a [f32] {
    let n = tmp.len();
    if stride == 1 {
        return &x[start..start + n];
    }
    for (f, t) in tmp.iter_mut().enumerate() {
        *t = x[start + f * stride];
    }
    tmp
}

/// Dot product in eight partial sums (so the compiler can use vector
/// registers; the rounding differs from one running sum by reassociation).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for ((l, &xv), &yv) in lanes.iter_mut().zip(x).zip(y) {
            *l += xv * yv;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

struct OutPtr(*mut f32);
// SAFETY: see the write above: tasks write disjoint elements.
unsafe impl Sync for OutPtr {}
