//! Tests of the fused attention kernel (`attention.rs`) against an f64
//! loop written here and against the unfused steps (batched matmul, scale
//! and mask, softmax, batched matmul), over the layouts the lowering
//! produces (heads as column slices, Kᵀ as a transposed view, gathered Q),
//! head splits across tasks, pools of 1 and 3 threads, edge shapes and bad
//! arguments.

use super::attention::{AttentionShape, attention, chunks_per_head};
use super::batched::batched_matmul;
use super::misc_tests::{in_pools, values as unit_values};
use super::norm::softmax;

/// Deterministic values in [-2, 2), so failures reproduce.
fn values(len: usize, seed: u64) -> Vec<f32> {
    unit_values(len, seed)
        .into_iter()
        .map(|v| 2.0 * v)
        .collect()
}

/// Operand layouts the lowering produces.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Q, K, V, Y as `[b, s, h·d]` (a projection's output split into heads
    /// by strides only): BERT's form.
    Columns,
    /// Dense `[b, h, s, d]` for every operand.
    HeadMajor,
    /// Q with features strided (`q[3] ≠ 1`, gathered by the kernel), K
    /// stored as `[b, h, d, s]` (a transposed view) and Y as `[b, h, d, s]`.
    Transposed,
}

struct Problem {
    s: AttentionShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Option<Vec<f32>>,
    ylen: usize,
}

/// A problem of the given extents and layout; `mask`: `None`, a key mask
/// broadcast over heads and queries (`[b, 1, 1, sk]`), or a full one.
fn problem(dims: [usize; 6], layout: Layout, mask: Option<bool>, seed: u64) -> Problem {
    let [batch, heads, sq, sk, d, dv] = dims;
    let (q, k, v, y) = match layout {
        Layout::Columns => (
            [sq * heads * d, d, heads * d, 1],
            [sk * heads * d, d, heads * d, 1],
            [sk * heads * dv, dv, heads * dv, 1],
            [sq * heads * dv, dv, heads * dv, 1],
        ),
        Layout::HeadMajor => (
            [heads * sq * d, sq * d, d, 1],
            [heads * sk * d, sk * d, d, 1],
            [heads * sk * dv, sk * dv, dv, 1],
            [heads * sq * dv, sq * dv, dv, 1],
        ),
        Layout::Transposed => (
            [heads * sq * d, sq * d, 1, sq],
            [heads * sk * d, sk * d, 1, sk],
            [heads * sk * dv, sk * dv, dv, 1],
            [heads * sq * dv, sq * dv, 1, sq],
        ),
    };
    let (mask_strides, mask_len) = match mask {
        None => ([0; 4], 0),
        Some(false) => ([sk, 0, 0, 1], batch * sk),
        Some(true) => ([heads * sq * sk, sq * sk, sk, 1], batch * heads * sq * sk),
    };
    let n = batch * heads;
    Problem {
        s: AttentionShape {
            batch,
            heads,
            sq,
            sk,
            d,
            dv,
            q,
            k,
            v,
            mask: mask_strides,
            y,
            scale: 1.0 / (d.max(1) as f32).sqrt(),
        },
        q: values(n * sq * d, seed),
        k: values(n * sk * d, seed + 1),
        v: values(n * sk * dv, seed + 2),
        mask: mask.map(|_| values(mask_len, seed + 3)),
        ylen: n * sq * dv,
    }
}

/// The definition in f64, element by element through the strides.
fn reference(p: &Problem) -> Vec<f64> {
    let s = &p.s;
    let mut y = vec![f64::NAN; p.ylen];
    for b in 0..s.batch {
        for h in 0..s.heads {
            let at =
                |st: [usize; 4], i: usize, j: usize| b * st[0] + h * st[1] + i * st[2] + j * st[3];
            for i in 0..s.sq {
                let scores: Vec<f64> = (0..s.sk)
                    .map(|j| {
                        let dot: f64 = (0..s.d)
                            .map(|f| p.q[at(s.q, i, f)] as f64 * p.k[at(s.k, j, f)] as f64)
                            .sum();
                        let m = p.mask.as_ref().map_or(0.0, |m| m[at(s.mask, i, j)] as f64);
                        dot * s.scale as f64 + m
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for f in 0..s.dv {
                    let acc: f64 = (0..s.sk)
                        .map(|j| e[j] / sum * p.v[at(s.v, j, f)] as f64)
                        .sum();
                    y[at(s.y, i, f)] = acc;
                }
            }
        }
    }
    y
}

fn run(p: &Problem) -> Vec<f32> {
    let mut y = vec![f32::NAN; p.ylen];
    attention(&p.s, &p.q, &p.k, &p.v, p.mask.as_deref(), &mut y).expect("attention");
    y
}

#[test]
fn attention_matches_f64_reference_in_every_layout() {
    // [batch, heads, sq, sk, d, dv]: one row, odd sizes with column tails,
    // more query rows than one task takes (heads split across tasks), a
    // sequence longer than one score block, d = 1.
    let shapes = [
        [1, 1, 1, 1, 1, 1],
        [1, 2, 7, 9, 3, 5],
        [2, 3, 33, 17, 16, 16],
        [1, 1, 130, 70, 64, 64],
        [1, 4, 40, 200, 8, 24],
        [1, 1, 300, 260, 1, 3],
    ];
    in_pools(|| {
        for (n, dims) in shapes.into_iter().enumerate() {
            for layout in [Layout::Columns, Layout::HeadMajor, Layout::Transposed] {
                for mask in [None, Some(false), Some(true)] {
                    let p = problem(dims, layout, mask, 10 * n as u64 + 1);
                    let (want, got) = (reference(&p), run(&p));
                    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                        let err = (*w - *g as f64).abs();
                        assert!(
                            err <= 2e-6 * (1.0 + w.abs()),
                            "{dims:?} {layout:?} mask {mask:?}: y[{i}] = {g}, want {w}"
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn attention_equals_the_unfused_steps_bit_for_bit() {
    // The BERT layout with a key mask: two batched products through the
    // same strides, the scale-and-mask pass and the softmax kernel.
    let dims = [2, 4, 48, 48, 32, 32];
    let p = problem(dims, Layout::Columns, Some(false), 5);
    let [batch, heads, sq, sk, d, dv] = dims;
    let s = &p.s;
    let u = |x: usize| x as u64;
    let fused = run(&p);
    for b in 0..batch {
        for h in 0..heads {
            let base = |st: [usize; 4]| b * st[0] + h * st[1];
            let mut scores = vec![0f32; sq * sk];
            let kt = [0, u(s.k[3]), u(s.k[2])];
            batched_matmul(
                1,
                sq,
                sk,
                d,
                &p.q[base(s.q)..],
                [0, u(s.q[2]), 1],
                &p.k[base(s.k)..],
                kt,
                &mut scores,
                [0, u(sk), 1],
            )
            .expect("scores");
            let m = p.mask.as_deref().expect("mask");
            for (i, row) in scores.chunks_exact_mut(sk).enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = *x * s.scale + m[base(s.mask) + i * s.mask[2] + j * s.mask[3]];
                }
            }
            let mut probs = vec![0f32; sq * sk];
            softmax(sq, sk, false, &scores, &mut probs).expect("softmax");
            let mut y = vec![0f32; sq * dv];
            batched_matmul(
                1,
                sq,
                dv,
                sk,
                &probs,
                [0, u(sk), 1],
                &p.v[base(s.v)..],
                [0, u(s.v[2]), 1],
                &mut y,
                [0, u(dv), 1],
            )
            .expect("output");
            for i in 0..sq {
                for f in 0..dv {
                    let at = base(s.y) + i * s.y[2] + f;
                    assert_eq!(
                        fused[at].to_bits(),
                        y[i * dv + f].to_bits(),
                        "b {b} h {h} y[{i}][{f}]"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_edge_shapes() {
    in_pools(|| {
        // No keys: every output is the empty sum, 0.
        let p = problem([1, 2, 3, 0, 4, 5], Layout::HeadMajor, None, 3);
        assert!(run(&p).iter().all(|&x| x == 0.0));
        // No features: uniform scores, so every row is V's column mean.
        let p = problem([1, 1, 2, 4, 0, 3], Layout::HeadMajor, None, 4);
        let y = run(&p);
        for f in 0..3 {
            let mean = (0..4).map(|j| p.v[j * 3 + f]).sum::<f32>() / 4.0;
            assert!(
                (y[f] - mean).abs() < 1e-6 && (y[3 + f] - mean).abs() < 1e-6,
                "{y:?}"
            );
        }
        // A row of -inf scores gives NaN, as the softmax step does; the
        // other rows are finite.
        let mut p = problem([1, 1, 2, 3, 2, 2], Layout::HeadMajor, Some(true), 6);
        let m = p.mask.as_mut().expect("mask");
        m[..3].fill(f32::NEG_INFINITY);
        let y = run(&p);
        assert!(
            y[..2].iter().all(|x| x.is_nan()) && y[2..].iter().all(|x| x.is_finite()),
            "{y:?}"
        );
        // Nothing to do: no rows or no output features; y is untouched.
        for dims in [[0, 2, 3, 3, 2, 2], [1, 2, 0, 3, 2, 2], [1, 2, 3, 3, 2, 0]] {
            let p = problem(dims, Layout::HeadMajor, None, 7);
            let mut y = vec![7.0f32; p.ylen];
            attention(&p.s, &p.q, &p.k, &p.v, None, &mut y).expect("empty");
            assert!(y.iter().all(|&x| x == 7.0));
        }
    });
}

#[test]
fn attention_rejects_bad_operands() {
    let p = problem([1, 2, 4, 5, 3, 3], Layout::Columns, Some(true), 8);
    let mut y = vec![0f32; p.ylen];
    let short = &p.k[..p.k.len() - 1];
    let err = attention(&p.s, &p.q, short, &p.v, p.mask.as_deref(), &mut y).expect_err("short k");
    assert!(err.message().contains("attention k"), "{}", err.message());
    let mask = p.mask.as_deref().map(|m| &m[..m.len() - 1]);
    let err = attention(&p.s, &p.q, &p.k, &p.v, mask, &mut y).expect_err("short mask");
    assert!(
        err.message().contains("attention mask"),
        "{}",
        err.message()
    );
    let mut s = p.s;
    s.y = [0, 0, 0, 1]; // every head and row onto the same elements
    let err = attention(&s, &p.q, &p.k, &p.v, None, &mut y).expect_err("overlapping y");
    assert!(err.message().contains("twice"), "{}", err.message());
    let mut short_y = vec![0f32; p.ylen - 1];
    let err = attention(&p.s, &p.q, &p.k, &p.v, None, &mut short_y).expect_err("short y");
    assert!(err.message().contains("attention y"), "{}", err.message());
}

#[test]
fn heads_split_across_tasks_only_when_needed() {
    // Enough heads for two tasks per thread: one task per head.
    assert_eq!(chunks_per_head(12, 128, 128, 2), 1);
    assert_eq!(chunks_per_head(4, 128, 128, 2), 1);
    // Few heads, many threads: split, but never below 32 rows a task.
    assert_eq!(chunks_per_head(1, 128, 128, 8), 4);
    assert_eq!(chunks_per_head(2, 64, 128, 16), 2);
    assert_eq!(chunks_per_head(1, 10, 10, 8), 1);
    // Long sequences: score blocks of at most 64 Ki floats.
    assert_eq!(chunks_per_head(16, 1024, 1024, 2), 16);
    // Never more tasks than rows.
    assert_eq!(chunks_per_head(1, 3, 1 << 20, 1), 3);
}
