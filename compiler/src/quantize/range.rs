//! What calibration observes of one tensor, and the clipping range each
//! method chooses from it.
//!
//! An [`Observer`] keeps the minimum, the maximum and a histogram of |x|
//! over [0, `top`] in [`BINS`] bins. It streams: a batch whose |x| exceeds
//! `top` doubles `top` (as often as needed) and merges neighbouring bins
//! pairwise, which is exact, so memory stays the same whatever the number
//! of batches and no second pass over the data is needed.
//!
//! The methods (`threshold` returns T, the clip of |x|):
//! - `minmax`: the observed range itself;
//! - `entropy`: TensorRT's search: for each candidate of `i` bins (from the
//!   number of quantized levels up), the reference distribution is the
//!   first `i` bins with everything beyond folded into the last, the
//!   candidate is those bins merged into `levels` groups and expanded back
//!   over the nonzero bins; the candidate with the smallest KL divergence
//!   wins;
//! - `percentile`: the P-th percentile of |x| (interpolated within a bin);
//! - `mse`: the T that minimizes the expected squared error: step²/12 for
//!   values inside, (|x| − T)² for values clipped.

/// Histogram bins (TensorRT's 2048).
pub const BINS: usize = 2048;

/// The entropy search needs this many nonzero values per quantization
/// level; below it the tensor keeps its observed range.
const ENTROPY_MIN_SAMPLES: u64 = 64;

/// A calibration method.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    MinMax,
    Entropy,
    /// Clip at this percentile of |x| (0 < p ≤ 100).
    Percentile(f64),
    Mse,
}

impl Method {
    pub fn name(&self) -> &'static str {
        match self {
            Method::MinMax => "minmax",
            Method::Entropy => "entropy",
            Method::Percentile(_) => "percentile",
            Method::Mse => "mse",
        }
    }
}

/// Streaming statistics of one tensor.
#[derive(Clone, Debug)]
pub struct Observer {
    pub min: f64,
    pub max: f64,
    /// The histogram covers |x| in [0, top]; 0 until a nonzero value is seen.
    top: f64,
    /// Nonzero values only: zeros (half of a relu's output) quantize
    /// exactly at every scale, and a spike in bin 0 would dominate the
    /// entropy search.
    hist: Vec<u64>,
    zeros: u64,
    /// Values seen.
    pub count: u64,
    /// Whether the histogram is kept (min-max needs only the range).
    histogram: bool,
    /// For a tensor whose rows a norm normalizes: the row length, the
    /// norm's epsilon, whether it centers the rows (a layer norm: their
    /// variance; an RMS norm: their mean square), and the least such
    /// spread above the epsilon of a row seen (a row whose spread is below
    /// the epsilon normalizes to about 0, and a row of one value quantizes
    /// to one value).
    rows: Option<(usize, f64, bool, f64)>,
}

impl Default for Observer {
    fn default() -> Self {
        Observer::new(true)
    }
}

impl Observer {
    /// An observer that keeps the histogram the clipping methods and fp8's
    /// scale search read, or (`histogram` false) only the range, for
    /// min-max.
    pub fn new(histogram: bool) -> Observer {
        let hist = if histogram { vec![0; BINS] } else { vec![] };
        Observer { min: f64::INFINITY, max: f64::NEG_INFINITY, top: 0.0, hist, zeros: 0, count: 0, histogram, rows: None }
    }

    /// Adds a batch of values. Returns the index of the first non-finite
    /// value instead, leaving the observer unchanged.
    /// Also tracks the least spread (variance where `centered`, else mean
    /// square) of the tensor's rows of `len` values that is above
    /// `epsilon` ([`Observer::least_row_spread`]).
    pub fn track_rows(&mut self, len: usize, epsilon: f64, centered: bool) {
        self.rows = Some((len.max(1), epsilon.max(0.0), centered, f64::INFINITY));
    }

    /// The least spread above the epsilon of a row, when rows are tracked
    /// and one has been seen.
    pub fn least_row_spread(&self) -> Option<f64> {
        self.rows.map(|(_, _, _, v)| v).filter(|v| v.is_finite())
    }

    pub fn observe(&mut self, xs: &[f32]) -> Result<(), usize> {
        if xs.is_empty() {
            return Ok(());
        }
        let (lo, hi) = finite_range(xs)?;
        if let Some((len, eps, centered, least)) = &mut self.rows {
            for r in xs.chunks(*len) {
                let mean = if *centered { r.iter().map(|&x| x as f64).sum::<f64>() / r.len() as f64 } else { 0.0 };
                let spread = r.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / r.len() as f64;
                if spread > *eps {
                    *least = least.min(spread);
                }
            }
        }
        self.min = self.min.min(lo as f64);
        self.max = self.max.max(hi as f64);
        self.count += xs.len() as u64;
        if !self.histogram {
            return Ok(());
        }
        let amax = (lo.abs().max(hi.abs())) as f64;
        if amax > self.top {
            self.grow(amax);
        }
        let k = if self.top > 0.0 { BINS as f64 / self.top } else { 0.0 };
        for &x in xs {
            if x == 0.0 {
                self.zeros += 1;
                continue;
            }
            let b = ((x.abs() as f64) * k) as usize;
            self.hist[b.min(BINS - 1)] += 1;
        }
        Ok(())
    }

    /// Widens the histogram to cover `amax`: the first range is `amax`
    /// itself; later ones double the current one until it covers.
    fn grow(&mut self, amax: f64) {
        if self.top == 0.0 {
            self.top = amax;
            return;
        }
        let mut factor = 1usize;
        while self.top * (factor as f64) < amax {
            factor *= 2;
        }
        let mut merged = vec![0u64; BINS];
        for (i, &n) in self.hist.iter().enumerate() {
            merged[i / factor] += n;
        }
        self.hist = merged;
        self.top *= factor as f64;
    }

    /// The histogram up to its last nonzero bin, and the width of a bin.
    fn trimmed(&self) -> (&[u64], f64) {
        let last = self.hist.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
        (&self.hist[..last], self.top / BINS as f64)
    }

    /// The largest |x| seen.
    pub fn amax(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.min.abs().max(self.max.abs()) }
    }

    /// The clip T of |x| that `method` chooses, for a quantizer with
    /// `levels` steps between 0 and T (127 for symmetric int8, 255 for u8
    /// on non-negative data).
    pub fn threshold(&self, method: Method, levels: usize) -> f64 {
        let amax = self.amax();
        if amax == 0.0 {
            return 0.0;
        }
        if !self.histogram {
            // A range-only observer has nothing to clip by.
            return amax;
        }
        let (hist, width) = self.trimmed();
        let nonzero = self.count - self.zeros;
        let t = match method {
            Method::MinMax => amax,
            // A sparse histogram makes the divergence noise: a tensor seen
            // in fewer than ENTROPY_MIN_SAMPLES values per level (a pooled
            // vector of a few batches) keeps its observed range.
            Method::Entropy if nonzero < ENTROPY_MIN_SAMPLES * levels as u64 => amax,
            Method::Entropy => entropy_bins(hist, levels.max(1)) as f64 * width,
            Method::Percentile(p) => percentile(hist, self.zeros, width, p),
            Method::Mse => mse_bins(hist, width, levels.max(1)),
        };
        t.min(amax).max(f64::MIN_POSITIVE)
    }

    /// The scale of this tensor in fp8 (e4m3) clipped at T: e4m3's error is
    /// relative, so the best scale depends on where the values fall inside
    /// their binades. The candidates `T / 448 · 2^(k/16)` for k = 0..15 keep
    /// |x| ≤ T in range (scaling by 2 repeats the grid); `clip_octaves`
    /// more octaves below let values above the scale saturate. The scale
    /// with the least expected squared error over the histogram wins.
    pub fn fp8_scale(&self, t: f64, clip_octaves: u32) -> f64 {
        if self.count == 0 || t <= 0.0 {
            return 1.0;
        }
        let (hist, width) = self.trimmed();
        let mut best = (f64::INFINITY, t / 448.0);
        for k in -(16 * clip_octaves as i32)..16 {
            let s = t / 448.0 * 2f64.powf(k as f64 / 16.0);
            let mut err = 0.0;
            for (i, &c) in hist.iter().enumerate() {
                if c > 0 {
                    let x = (i as f64 + 0.5) * width;
                    let d = x - e4m3_round((x / s).min(448.0) as f32) as f64 * s;
                    err += c as f64 * d * d;
                }
            }
            if err < best.0 {
                best = (err, s);
            }
        }
        best.1
    }

    /// The real range [lo, hi] to quantize with `method`: the observed
    /// range clipped to ±T, always containing 0.
    pub fn range(&self, method: Method, levels: usize) -> (f64, f64) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        let t = self.threshold(method, levels);
        (self.min.max(-t).min(0.0), self.max.min(t).max(0.0))
    }
}

/// The minimum and maximum of `xs`, or the index of its first non-finite
/// value. Sixteen lanes without branches, so the loop vectorizes: this
/// runs over every observed tensor of every calibration batch.
fn finite_range(xs: &[f32]) -> Result<(f32, f32), usize> {
    const L: usize = 16;
    let (mut lo, mut hi) = ([f32::INFINITY; L], [f32::NEG_INFINITY; L]);
    // An exponent of all ones is an infinity or a NaN.
    let mut bad = [0u32; L];
    let chunks = xs.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..L {
            // Compare-and-select (minps/maxps), not f32::min's NaN rule:
            // NaNs are caught by `bad`.
            lo[j] = if c[j] < lo[j] { c[j] } else { lo[j] };
            hi[j] = if c[j] > hi[j] { c[j] } else { hi[j] };
            bad[j] |= ((c[j].to_bits() & 0x7f80_0000) == 0x7f80_0000) as u32;
        }
    }
    let mut any_bad = bad.iter().any(|&b| b != 0);
    for &x in tail {
        lo[0] = lo[0].min(x);
        hi[0] = hi[0].max(x);
        any_bad |= !x.is_finite();
    }
    if any_bad {
        return Err(xs.iter().position(|x| !x.is_finite()).expect("a non-finite value"));
    }
    Ok((lo.iter().fold(f32::INFINITY, |a, &b| a.min(b)), hi.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))))
}

/// The e4m3 value nearest `a` (0 ≤ a ≤ 448), ties to even: `round_f8`'s
/// arithmetic on f32 bits, fast enough to search scales with.
pub(crate) fn e4m3_round(a: f32) -> f32 {
    let e = ((a.to_bits() >> 23) as i32 - 127).max(-6);
    let ulp = f32::from_bits(((e - 3 + 127) as u32) << 23);
    ((a / ulp).round_ties_even() * ulp).min(448.0)
}

/// TensorRT's entropy calibration: the number of bins `i` (the clip at
/// `i` bin widths) whose quantization into `levels` groups loses the least
/// information, measured by KL(reference || quantized).
fn entropy_bins(hist: &[u64], levels: usize) -> usize {
    let n = hist.len();
    if n <= levels {
        return n;
    }
    let total_tail: Vec<u64> = {
        // tail[i] = Σ hist[i..]
        let mut t = vec![0u64; n + 1];
        for i in (0..n).rev() {
            t[i] = t[i + 1] + hist[i];
        }
        t
    };
    let mut best = (f64::INFINITY, n);
    let mut p = vec![0f64; n];
    let mut q = vec![0f64; n];
    for i in levels..=n {
        // Reference: the first i bins, the outliers folded into the last.
        for k in 0..i {
            p[k] = hist[k] as f64;
        }
        p[i - 1] += total_tail[i] as f64;
        // Candidate: i bins merged into `levels` groups, each group's count
        // spread evenly over its nonzero bins.
        for j in 0..levels {
            let start = j * i / levels;
            let end = ((j + 1) * i / levels).max(start + 1).min(i);
            let sum: f64 = hist[start..end].iter().map(|&c| c as f64).sum();
            let nonzero = hist[start..end].iter().filter(|&&c| c > 0).count();
            for k in start..end {
                q[k] = if hist[k] > 0 { sum / nonzero as f64 } else { 0.0 };
            }
        }
        let kl = kl_divergence(&p[..i], &q[..i]);
        if kl < best.0 {
            best = (kl, i);
        }
    }
    best.1
}

/// KL(p || q) of two unnormalized histograms; bins where q is empty but p
/// is not get a small smoothing mass, as in TensorRT and ONNX Runtime.
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    const EPS: f64 = 1e-4;
    let sp: f64 = p.iter().sum();
    let sq: f64 = q.iter().sum();
    if sp == 0.0 {
        return 0.0;
    }
    if sq == 0.0 {
        return f64::INFINITY;
    }
    let zeros = q.iter().zip(p).filter(|(q, p)| **q == 0.0 && **p > 0.0).count() as f64;
    let nonzero = q.iter().filter(|&&x| x > 0.0).count() as f64;
    // Move EPS of mass into each empty bin, taken evenly from the others.
    let take = if nonzero > 0.0 { EPS * zeros / nonzero } else { 0.0 };
    let mut kl = 0.0;
    for (&pk, &qk) in p.iter().zip(q) {
        if pk == 0.0 {
            continue;
        }
        let pn = pk / sp;
        let qn = if qk == 0.0 { EPS } else { (qk / sq - take).max(EPS * 1e-3) };
        kl += pn * (pn / qn).ln();
    }
    kl
}

/// The `p`-th percentile of |x| (`zeros` values are exactly 0).
fn percentile(hist: &[u64], zeros: u64, width: f64, p: f64) -> f64 {
    let total: u64 = hist.iter().sum::<u64>() + zeros;
    if total == zeros {
        return 0.0;
    }
    let want = (p / 100.0).clamp(0.0, 1.0) * total as f64;
    let mut seen = zeros as f64;
    if seen >= want {
        return 0.0;
    }
    for (i, &n) in hist.iter().enumerate() {
        let next = seen + n as f64;
        if next >= want && n > 0 {
            let frac = ((want - seen) / n as f64).clamp(0.0, 1.0);
            return (i as f64 + frac) * width;
        }
        seen = next;
    }
    hist.len() as f64 * width
}

/// The clip T (a bin edge) minimizing the expected squared quantization
/// error of the histogram with `levels` steps over [0, T].
fn mse_bins(hist: &[u64], width: f64, levels: usize) -> f64 {
    let n = hist.len();
    let mut best = (f64::INFINITY, n as f64 * width);
    // Candidates: every bin edge from 1/64 of the range up, in 1/512 steps.
    let step = (n / 512).max(1);
    let first = (n / 64).max(1);
    let mut i = first;
    while i <= n {
        let t = i as f64 * width;
        let q = t / levels as f64;
        let inside = q * q / 12.0;
        let mut err = 0.0;
        for (k, &c) in hist.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let x = (k as f64 + 0.5) * width;
            err += c as f64 * if x <= t { inside } else { (x - t) * (x - t) };
        }
        if err < best.0 {
            best = (err, t);
        }
        if i == n {
            break;
        }
        i = (i + step).min(n);
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observe_all(batches: &[Vec<f32>]) -> Observer {
        let mut o = Observer::default();
        for b in batches {
            o.observe(b).unwrap();
        }
        o
    }

    /// A deterministic heavy-tailed sample: normal with σ = 0.5, and one
    /// value in 1000 an outlier at ±50.
    fn heavy_tailed(n: usize) -> Vec<f32> {
        let mut rng = crate::opt::Rng(7);
        (0..n)
            .map(|i| {
                let u = rng.normal() * 0.5;
                if i % 1000 == 0 { 50.0 * u.signum() as f32 } else { u as f32 }
            })
            .collect()
    }

    #[test]
    fn rows_are_tracked_by_their_least_spread_above_epsilon() {
        let mut o = Observer::new(false);
        o.observe(&[1.0, 3.0]).unwrap();
        assert_eq!(o.least_row_spread(), None, "not tracked");
        let rows = [1.0, 3.0, 5.0, 5.0, 0.0, 1e-4, 2.0, 2.5];
        o.track_rows(2, 1e-6, true);
        // Variances: [1, 3] 1, [5, 5] 0 (one value), [0, 1e-4] 2.5e-9
        // (below epsilon), [2, 2.5] 0.0625.
        o.observe(&rows[..4]).unwrap();
        o.observe(&rows[4..]).unwrap();
        assert_eq!(o.least_row_spread(), Some(0.0625));
        assert_eq!((o.min, o.max), (0.0, 5.0));
        // Mean squares: 5, 25, 5e-9 (below epsilon), 5.125.
        let mut o = Observer::new(false);
        o.track_rows(2, 1e-6, false);
        o.observe(&rows).unwrap();
        assert_eq!(o.least_row_spread(), Some(5.0));
    }

    #[test]
    fn streaming_equals_one_batch() {
        let xs: Vec<f32> = (0..10_000).map(|i| ((i * 37 % 1001) as f32 - 500.0) / 100.0).collect();
        let one = observe_all(&[xs.clone()]);
        // Growing ranges: small values first, then the full range.
        let parts: Vec<Vec<f32>> = vec![xs.iter().map(|x| x / 8.0).collect(), xs.clone()];
        let streamed = observe_all(&parts);
        assert_eq!(one.min, streamed.min);
        assert_eq!(one.max, streamed.max);
        assert_eq!(streamed.count, 20_000);
        assert_eq!(streamed.hist.iter().sum::<u64>() + streamed.zeros, 20_000);
        // The merged histogram covers the range in at most twice the bin width.
        assert!(streamed.top >= one.top && streamed.top <= 2.0 * one.top + 1e-9, "{} vs {}", streamed.top, one.top);
    }

    #[test]
    fn non_finite_values_are_refused_with_their_index() {
        let mut o = Observer::default();
        assert_eq!(o.observe(&[1.0, 2.0, f32::NAN]), Err(2));
        assert_eq!(o.observe(&[f32::INFINITY]), Err(0));
        assert_eq!(o.count, 0);
    }

    #[test]
    fn minmax_is_the_observed_range() {
        let o = observe_all(&[vec![-0.5, 3.0, 1.0]]);
        assert_eq!(o.range(Method::MinMax, 127), (-0.5, 3.0));
        // Non-negative data still contains zero.
        let o = observe_all(&[vec![2.0, 3.0]]);
        assert_eq!(o.range(Method::MinMax, 255), (0.0, 3.0));
    }

    #[test]
    fn clipping_methods_cut_outliers() {
        let o = observe_all(&[heavy_tailed(100_000)]);
        assert_eq!(o.threshold(Method::MinMax, 127), 50.0);
        for m in [Method::Entropy, Method::Percentile(99.5)] {
            let t = o.threshold(m, 127);
            assert!(t > 0.9 && t < 10.0, "{}: T = {t}", m.name());
        }
        // The 99.99th percentile keeps part of the outliers' range; 50 keeps all.
        // The median of |x| for σ = 0.5 is 0.5 · 0.674.
        let p50 = o.threshold(Method::Percentile(50.0), 127);
        assert!((p50 - 0.337).abs() < 0.02, "median of |x| is {p50}");
    }

    #[test]
    fn mse_clips_only_where_it_pays() {
        // 0.1% outliers at ±50 cost more clipped than rounded coarsely: kept.
        let o = observe_all(&[heavy_tailed(100_000)]);
        assert!(o.threshold(Method::Mse, 127) > 45.0);
        // A Gaussian's int8 optimum lies inside its sample range (about 4σ).
        let mut rng = crate::opt::Rng(5);
        let xs: Vec<f32> = (0..400_000).map(|_| rng.normal() as f32).collect();
        let o = observe_all(&[xs]);
        let t = o.threshold(Method::Mse, 127);
        assert!(t > 3.0 && t < 0.97 * o.amax(), "T = {t}, amax {}", o.amax());
    }

    #[test]
    fn entropy_keeps_the_range_of_a_uniform_distribution() {
        let mut rng = crate::opt::Rng(3);
        let xs: Vec<f32> = (0..200_000).map(|_| (rng.unit() * 4.0 - 2.0) as f32).collect();
        let o = observe_all(&[xs]);
        let t = o.threshold(Method::Entropy, 127);
        assert!(t > 1.8 && t <= 2.0, "T = {t}");
        let t = o.threshold(Method::Mse, 127);
        assert!(t > 1.8 && t <= 2.0, "T = {t}");
    }

    #[test]
    fn sparse_histograms_keep_their_range_under_entropy() {
        let mut rng = crate::opt::Rng(2);
        let xs: Vec<f32> = (0..4096).map(|_| rng.normal() as f32).collect();
        let o = observe_all(&[xs]);
        assert_eq!(o.threshold(Method::Entropy, 127), o.amax());
    }

    #[test]
    fn all_zero_tensors_have_an_empty_range() {
        let o = observe_all(&[vec![0.0; 10]]);
        assert_eq!(o.range(Method::Entropy, 127), (0.0, 0.0));
        assert_eq!(Observer::default().range(Method::MinMax, 127), (0.0, 0.0));
    }
}
