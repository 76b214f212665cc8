//! Fused attention benchmark: `aoc_runtime::kernels::attention` against the
//! unfused steps it replaces (batched Q·Kᵀ, scale and mask, softmax,
//! batched P·V, as the plan ran them before), on encoder shapes, with the
//! same thread pool; prints each one's best time, GFLOP/s and the ratio.
//!
//! `cargo bench -p aoc-runtime --bench attention [-- --threads N]`

use std::hint::black_box;

mod common;
use common::best_of;

use aoc_runtime::kernels::attention::{AttentionShape, attention};
use aoc_runtime::kernels::batched::batched_matmul;
use aoc_runtime::kernels::norm::softmax;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = common::threads_arg(&args);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    println!("threads: {threads}");
    println!(
        "{:>22} {:>10} {:>10} {:>9} {:>8}",
        "batch x heads x seq x d", "fused ms", "steps ms", "GFLOP/s", "ratio"
    );
    // [batch, heads, seq, head dim]: the bench encoder, BERT-base at batch
    // 1 and 8, and a long sequence.
    for [b, h, s, d] in [
        [1, 4, 128, 64],
        [1, 12, 128, 64],
        [8, 12, 128, 64],
        [1, 12, 512, 64],
    ] {
        let p = Problem::new(b, h, s, d);
        let fused = pool.install(|| best_of(|| p.fused()));
        let steps = pool.install(|| best_of(|| p.steps()));
        let flops = 4.0 * (b * h * s * s * d) as f64;
        println!(
            "{:>22} {:>10.3} {:>10.3} {:>9.1} {:>8.2}",
            format!("{b}x{h}x{s}x{d}"),
            fused * 1e3,
            steps * 1e3,
            flops / fused / 1e9,
            fused / steps
        );
    }
}

/// Q, K, V and Y as `[b, s, h·d]` (heads split by strides, as the lowering
/// leaves a projection's output) and a key mask broadcast over heads.
struct Problem {
    shape: AttentionShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<f32>,
    y: std::sync::Mutex<Vec<f32>>,
}

impl Problem {
    fn new(b: usize, h: usize, s: usize, d: usize) -> Problem {
        let len = b * s * h * d;
        let val = |seed: usize| {
            (0..len)
                .map(|i| ((i * seed % 17) as f32 - 8.0) * 0.05)
                .collect::<Vec<f32>>()
        };
        let st = [s * h * d, d, h * d, 1];
        Problem {
            shape: AttentionShape {
                batch: b,
                heads: h,
                sq: s,
                sk: s,
                d,
                dv: d,
                q: st,
                k: st,
                v: st,
                mask: [s, 0, 0, 1],
                y: st,
                scale: 1.0 / (d as f32).sqrt(),
            },
            q: val(3),
            k: val(5),
            v: val(7),
            mask: (0..b * s)
                .map(|i| if i % 9 == 8 { -1e4 } else { 0.0 })
                .collect(),
            y: std::sync::Mutex::new(vec![0.0; len]),
        }
    }

    fn fused(&self) {
        let mut y = self.y.lock().expect("y");
        attention(
            &self.shape,
            &self.q,
            &self.k,
            &self.v,
            Some(&self.mask),
            &mut y,
        )
        .expect("attention");
        black_box(&y);
    }

    /// The unfused plan's four steps, batches as `b·h` products.
    fn steps(&self) {
        let st = &self.shape;
        let (bh, s, d) = ((st.batch * st.heads) as u64, st.sq, st.d);
        let u = |x: usize| x as u64;
        let mut scores = vec![0f32; st.batch * st.heads * s * s];
        let mut probs = vec![0f32; scores.len()];
        let mut y = self.y.lock().expect("y");
        for bi in 0..st.batch {
            let q = &self.q[bi * st.q[0]..];
            let k = &self.k[bi * st.k[0]..];
            let sc = &mut scores[bi * st.heads * s * s..];
            batched_matmul(
                st.heads,
                s,
                s,
                d,
                q,
                [u(d), u(st.q[2]), 1],
                k,
                [u(d), 1, u(st.k[2])],
                sc,
                [u(s * s), u(s), 1],
            )
            .expect("scores");
        }
        for (r, row) in scores.chunks_exact_mut(s).enumerate() {
            let m = &self.mask[(r / (st.heads * s)) * s..];
            for (x, &mv) in row.iter_mut().zip(m) {
                *x = *x * st.scale + mv;
            }
        }
        softmax(bh as usize * s, s, false, &scores, &mut probs).expect("softmax");
        for bi in 0..st.batch {
            let v = &self.v[bi * st.v[0]..];
            let p = &probs[bi * st.heads * s * s..];
            let yb = &mut y[bi * st.y[0]..];
            batched_matmul(
                st.heads,
                s,
                d,
                s,
                p,
                [u(s * s), u(s), 1],
                v,
                [u(d), u(st.v[2]), 1],
                yb,
                [u(d), u(st.y[2]), 1],
            )
            .expect("output");
        }
        black_box(&y);
    }
}
