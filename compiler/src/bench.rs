//! What `aoc bench` measures, for CPU and GPU artifacts alike:
//! deterministic synthetic inputs and the latency statistics of a run.

use aoc_runtime::artifact::TensorSpec;

/// Deterministic inputs for benchmarks: floats uniform in [-1, 1) from a
/// fixed seed, integers and booleans zero.
pub fn synthetic_inputs(specs: &[TensorSpec]) -> Vec<Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    specs
        .iter()
        .map(|spec| {
            let n: u64 = spec.shape.iter().product();
            if spec.dtype == "f32" {
                (0..n)
                    .flat_map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let v = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                        v.to_le_bytes()
                    })
                    .collect()
            } else {
                let width = aoc_runtime::artifact::DType::parse(&spec.dtype).map_or(1, |d| d.size());
                vec![0u8; (n * width) as usize]
            }
        })
        .collect()
}

/// Latency statistics of a benchmark.
#[derive(Clone, Debug)]
pub struct BenchResult {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub throughput_per_s: f64,
    pub peak_memory_bytes: u64,
    pub iters: usize,
    pub threads: usize,
}

impl BenchResult {
    /// `aoc bench --json` of a CPU artifact (the Python `Session.bench`
    /// returns the same object): these figures, the load time, and the
    /// per-step profile (`null` without `--profile`).
    pub fn cpu_json(&self, load_ms: f64, profile: Option<serde_json::Value>) -> serde_json::Value {
        serde_json::json!({
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "mean_ms": self.mean_ms,
            "throughput_per_s": self.throughput_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "iters": self.iters,
            "threads": self.threads,
            "load_ms": load_ms,
            "profile": profile,
        })
    }

    /// `aoc bench --json` of a GPU artifact: these end-to-end figures and
    /// `device`'s (CUDA-graph replay) on the GPU named `gpu`.
    pub fn gpu_json(&self, device: &BenchResult, gpu: &str) -> serde_json::Value {
        serde_json::json!({
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "mean_ms": self.mean_ms,
            "throughput_per_s": self.throughput_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "iters": self.iters,
            "device": gpu,
            "device_p50_ms": device.p50_ms,
            "device_p99_ms": device.p99_ms,
            "device_mean_ms": device.mean_ms,
        })
    }
}

/// Percentiles, mean and throughput of `times` (ms, one per inference of
/// `batch` items).
pub fn stats(mut times: Vec<f64>, batch: f64, peak_memory_bytes: u64, threads: usize) -> BenchResult {
    times.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    BenchResult {
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        mean_ms: mean,
        throughput_per_s: batch * 1e3 / mean,
        peak_memory_bytes,
        iters: times.len(),
        threads,
    }
}
