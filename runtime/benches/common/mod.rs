//! What the kernel benchmarks share: the `--threads N` argument and the
//! best-of-several-runs timer.

use std::time::{Duration, Instant};

/// The value of `--threads N` in `args`, 1 when absent or not a number.
pub fn threads_arg(args: &[String]) -> usize {
    args.iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Best time in seconds of several runs of `f` after a warm-up: at least 3
/// runs, then more while under ~2 s, at most 50.
pub fn best_of(mut f: impl FnMut()) -> f64 {
    f(); // warm-up: page faults, caches, clocks
    let mut best = f64::INFINITY;
    let start = Instant::now();
    let mut n = 0;
    while n < 3 || (start.elapsed() < Duration::from_secs(2) && n < 50) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        n += 1;
    }
    best
}
