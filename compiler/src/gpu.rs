//! `aoc compile` for GPU targets (`sm_70` … `sm_90a`) and `aoc run` /
//! `aoc bench` / `aoc explain` on GPU artifacts: the driver's side of the
//! PTX backend and the CUDA executor.
//!
//! Compiling needs no GPU (the PTX is JIT-compiled by the driver where the
//! artifact runs); running needs the NVIDIA driver and a GPU at least as new
//! as the target, and says which is missing otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use aoc_backend_ptx::Sm;
use aoc_backend_ptx::compile::{compile, emit_text};
use aoc_backend_ptx::translate::{Precision, TuneCandidate, Tuner};
use aoc_ir::tensor::Tensor;
use aoc_runtime::artifact::Artifact;
use aoc_runtime::cuda::{GpuSession, KernelTrial, time_kernel};
use aoc_runtime::gpu_plan::GpuItem;

use crate::artifact_io::{bind_inputs, decode_outputs};
use crate::bench::{BenchResult, stats};
use crate::driver::{InputArg, human, load_optimized};

/// The pass pipeline `aoc compile` runs for a GPU target (no Winograd: the
/// GPU lowering runs 3×3 convolutions as implicit GEMMs on tensor cores).
pub const GPU_PIPELINE: &str = "algebraic,fold-bn,qdq,fuse";

/// What `--emit` may be for a GPU target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuEmit {
    Artifact,
    Air,
    Llvm,
    Ptx,
}

/// The cost model's name for `sm` (the roofline knows sm_80/86 and sm_90).
pub(crate) fn cost_target(sm: Sm) -> &'static str {
    if sm.capability() >= 90 { "sm_90" } else { "sm_86" }
}

/// `--tune`: measures each GEMM's candidate tiles on GPU 0 and remembers
/// the winners in a JSON file keyed by (target, kind, shapes, precision),
/// so a later compile of the same shapes measures nothing.
pub struct GpuTuner {
    gpu: aoc_runtime::cuda::Gpu,
    cache_path: PathBuf,
    cache: BTreeMap<String, String>,
    pub measured: usize,
    pub cached: usize,
}

/// The default tuning cache: `$XDG_CACHE_HOME/aoc/tune.json`, else
/// `$HOME/.cache/aoc/tune.json`.
pub fn default_tune_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("aoc/tune.json")
}

impl GpuTuner {
    /// Opens GPU 0 (tuning measures on the GPU that runs the compiler) and
    /// reads the cache (a missing file is an empty cache).
    pub fn open(cache_path: PathBuf) -> Result<GpuTuner, String> {
        let gpu = aoc_runtime::cuda::Gpu::open(0).map_err(|e| format!("error: --tune needs a GPU: {e}"))?;
        let cache = match std::fs::read_to_string(&cache_path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("error: {}: not a tuning cache: {e}", cache_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("error: cannot read {}: {e}", cache_path.display())),
        };
        Ok(GpuTuner { gpu, cache_path, cache, measured: 0, cached: 0 })
    }

    pub fn gpu_name(&self) -> &str {
        self.gpu.name()
    }

    pub fn save(&self) -> Result<(), String> {
        if let Some(dir) = self.cache_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("error: cannot create {}: {e}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&self.cache).map_err(|e| format!("error: {e}"))?;
        crate::output::write_file(&self.cache_path, text.as_bytes()).map_err(|m| format!("error: {m}"))
    }
}

impl Tuner for GpuTuner {
    fn pick(&mut self, key: &str, candidates: &[TuneCandidate]) -> Result<usize, String> {
        let key = format!("{} | {key}", self.gpu.name());
        if let Some(label) = self.cache.get(&key)
            && let Some(i) = candidates.iter().position(|c| &c.label == label)
        {
            self.cached += 1;
            return Ok(i);
        }
        let mut best = (f64::INFINITY, 0);
        for (i, c) in candidates.iter().enumerate() {
            let trial = KernelTrial {
                ptx: &c.ptx,
                kernel: &c.kernel,
                grid: c.geometry.grid,
                block: c.geometry.block,
                smem: c.geometry.smem,
                arg_bytes: &c.arg_bytes,
            };
            // A candidate the GPU cannot run (e.g. too much shared memory)
            // is skipped, not fatal.
            if let Ok(ms) = time_kernel(&self.gpu, &trial, 5)
                && ms < best.0
            {
                best = (ms, i);
            }
        }
        if best.0.is_infinite() {
            return Err(format!("no candidate kernel ran for {key}"));
        }
        self.measured += 1;
        self.cache.insert(key, candidates[best.1].label.clone());
        Ok(best.1)
    }
}

/// `aoc compile` for a GPU target; returns the summary for stderr.
#[allow(clippy::too_many_arguments)]
pub fn compile_gpu(
    input: &Path,
    input_shapes: &[(String, Vec<usize>)],
    sm: Sm,
    precision: Precision,
    passes: &str,
    verify_each: bool,
    emit: GpuEmit,
    output: &Path,
    tune: Option<&Path>,
    reference_fallback: bool,
) -> Result<(String, serde_json::Value), String> {
    let t0 = Instant::now();
    let write = |bytes: &[u8]| crate::output::write_file(output, bytes).map_err(|m| format!("error: {m}"));
    let wrote = |emit: &str| serde_json::json!({"output": output.display().to_string(), "emit": emit});
    let Some(loaded) = load_optimized(input, input_shapes, passes, verify_each, cost_target(sm), (emit == GpuEmit::Air).then_some(output))? else {
        return Ok((format!("wrote {} (the IR after `{passes}`)", output.display()), wrote("air")));
    };
    let func = loaded
        .module
        .entry()
        .ok_or_else(|| format!("error: {} has no function to compile", input.display()))?;
    if matches!(emit, GpuEmit::Llvm | GpuEmit::Ptx) {
        let text = emit_text(func, loaded.weights.as_ref(), sm, precision, emit == GpuEmit::Ptx, reference_fallback)
            .map_err(|d| loaded.render(&[d]))?;
        write(text.as_bytes())?;
        return Ok((format!("wrote {}", output.display()), wrote(if emit == GpuEmit::Ptx { "ptx" } else { "llvm" })));
    }
    let mut tuner = tune.map(|p| GpuTuner::open(p.to_path_buf())).transpose()?;
    let what = if tuner.is_some() { format!("generating PTX for {sm} and timing GEMM tiles (--tune)") } else { format!("generating PTX for {sm}") };
    let pb = crate::say::progress(0, &what);
    let out = compile(func, loaded.weights.as_ref(), sm, precision, tuner.as_mut().map(|t| t as &mut dyn Tuner), reference_fallback);
    pb.finish_and_clear();
    let out = out.map_err(|d| loaded.render(&[d]))?;
    write(&out.artifact)?;
    let tuned = match &tuner {
        Some(t) => {
            t.save()?;
            format!(
                "\ntuned on {}: {} GEMM shapes measured, {} from the cache {}",
                t.gpu_name(),
                t.measured,
                t.cached,
                tune.map(|p| p.display().to_string()).unwrap_or_default()
            )
        }
        None => String::new(),
    };
    let r = &out.report;
    let seconds = t0.elapsed().as_secs_f64();
    let json = serde_json::json!({
        "input": input.display().to_string(),
        "output": output.display().to_string(),
        "target": sm.to_string(),
        "precision": precision.name(),
        "seconds": seconds,
        "launches": out.launches,
        "launch_kinds": out.launch_kinds.iter().map(|(k, n)| (k.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "kernels": out.kernels,
        "ptx_bytes": out.ptx_bytes,
        "weight_bytes": r.weight_bytes,
        "arena_bytes": out.arena_bytes,
        "unshared_bytes": r.unshared_bytes,
        "layout_copies": r.layout_copies,
        "host_items": out.host_items,
        "artifact_bytes": out.artifact.len(),
        "reference_ops": r.reference_ops.iter().map(|(k, n)| (k.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
    });
    let steps: Vec<String> = out.launch_kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let mut msg = format!(
        "compiled {} for {sm} ({}) in {:.2} s: {} launches ({}) of {} kernels, PTX {}, weights {}, arena {} (unshared {}), {} layout copies\nwrote {} ({})",
        input.display(),
        precision.name(),
        seconds,
        out.launches,
        steps.join(", "),
        out.kernels,
        human(out.ptx_bytes as u64),
        human(r.weight_bytes),
        human(out.arena_bytes),
        human(r.unshared_bytes),
        r.layout_copies,
        output.display(),
        human(out.artifact.len() as u64),
    );
    msg.push_str(&tuned);
    if !r.reference_ops.is_empty() {
        let ops: Vec<String> = r.reference_ops.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        msg.push_str(&format!(
            "\nnote: {} op kinds have no GPU kernel yet and run on the host's reference interpreter between launches ({} host steps): {}",
            r.reference_ops.len(),
            out.host_items,
            ops.join(", ")
        ));
    }
    Ok((msg, json))
}

/// The artifact at `path` for reading, not running: every check but the
/// CPU features, so `aoc explain` reads an artifact built for another CPU
/// (an AVX-512 one on an AVX2 machine).
pub fn inspect_artifact(path: &Path) -> Result<Artifact, String> {
    Artifact::open_for_inspection(path).map_err(|e| format!("error: {e}"))
}

/// Whether the artifact at `path` is for a GPU (its target is `sm_*`).
pub fn is_gpu_artifact(path: &Path) -> Result<Option<Artifact>, String> {
    let a = Artifact::open(path).map_err(|e| format!("error: {e}"))?;
    Ok(if a.manifest().target.starts_with("sm_") { Some(a) } else { None })
}

pub fn load_gpu_session(a: Artifact) -> Result<GpuSession, String> {
    GpuSession::from_artifact(a, 0).map_err(|e| format!("error: {e}"))
}

/// `aoc run FILE.aoc` for a GPU artifact.
pub fn run_gpu_artifact(a: Artifact, inputs: &[InputArg]) -> Result<Vec<(String, Tensor)>, String> {
    let name = a.name().to_string();
    let s = load_gpu_session(a)?;
    let bytes = bind_inputs(s.inputs(), inputs)?;
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let outs = s.run(&refs).map_err(|e| format!("error: {name}: {e}"))?;
    decode_outputs(s.outputs(), outs)
}

/// `aoc bench` for a GPU artifact: each inference end to end (inputs in,
/// graph replay, outputs out), plus the device time of the replays alone
/// (CUDA events) in `device`.
pub fn bench_gpu(s: &GpuSession, inputs: &[Vec<u8>], warmup: usize, iters: usize) -> Result<(BenchResult, BenchResult), String> {
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        s.run(&refs).map_err(|e| format!("error: {e}"))?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    let device = s.time_replays(iters).map_err(|e| format!("error: {e}"))?;
    let batch = s.inputs().first().and_then(|i| i.shape.first().copied()).unwrap_or(1).max(1) as f64;
    let peak = s.peak_memory_bytes();
    Ok((stats(times, batch, peak, 0), stats(device, batch, peak, 0)))
}

/// The `--profile` breakdown of a GPU artifact: device time per kernel kind
/// and the `slowest` slowest launches (with their grids).
pub fn profile_gpu(s: &GpuSession, slowest: usize) -> Result<String, String> {
    let t = s.profile_items().map_err(|e| format!("error: {e}"))?;
    let plan = s.plan();
    let kind = |i: usize| -> String {
        let k = plan.items[i].kind();
        k.rsplit_once('_').map_or(k, |(head, tail)| if tail.len() == 16 { head } else { k }).to_string()
    };
    let mut by_kind: Vec<(String, f64, usize)> = vec![];
    for (i, &ms) in t.iter().enumerate() {
        let k = kind(i);
        match by_kind.iter_mut().find(|(n, _, _)| *n == k) {
            Some(e) => {
                e.1 += ms;
                e.2 += 1;
            }
            None => by_kind.push((k, ms, 1)),
        }
    }
    by_kind.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = String::new();
    for (k, ms, n) in by_kind {
        out.push_str(&format!("  {k:<18} {n:>4} launches {ms:>9.3} ms\n"));
    }
    let mut order: Vec<usize> = (0..t.len()).collect();
    order.sort_by(|&a, &b| t[b].total_cmp(&t[a]));
    for &i in order.iter().take(slowest) {
        let grid = match &plan.items[i] {
            GpuItem::Launch(l) => format!(" grid {:?} block {}", l.grid, l.block[0]),
            GpuItem::Host { .. } => String::new(),
        };
        out.push_str(&format!("  slowest: item {i} {}{grid} {:.4} ms  <- {}\n", plan.items[i].kind(), t[i], plan.origins[i]));
    }
    Ok(out)
}

/// `aoc explain` for a GPU artifact (needs no GPU).
pub fn explain_gpu(path: &Path, a: &Artifact) -> Result<String, String> {
    let m = a.manifest();
    let plan: aoc_runtime::gpu_plan::GpuPlan =
        serde_json::from_value(m.plan.clone()).map_err(|e| format!("error: {}: the GPU plan is not valid: {e}", path.display()))?;
    let w = a.weights_range();
    let mut out = format!(
        "{}: target {}\n  arena {}, weights {}, PTX {}, {} items\n",
        path.display(),
        m.target,
        human(m.arena_size),
        human((w.end - w.start) as u64),
        human(a.code(aoc_runtime::gpu_plan::PTX_BLOB).map(|c| c.len() as u64).unwrap_or(0)),
        plan.items.len()
    );
    for i in &m.inputs {
        out.push_str(&format!("  input  {} {} {:?}\n", i.name, i.dtype, i.shape));
    }
    for o in &m.outputs {
        out.push_str(&format!("  output {} {} {:?}\n", o.name, o.dtype, o.shape));
    }
    for (i, (item, origin)) in plan.items.iter().zip(&plan.origins).enumerate() {
        let what = match item {
            GpuItem::Launch(l) => format!("{} grid {:?} block {}", l.kernel, l.grid, l.block[0]),
            GpuItem::Host { step } => format!("host {}", step.kind()),
        };
        out.push_str(&format!("  {i:>4}  {what:<52} <- {origin}\n"));
    }
    // The translation's notes: each 2:4 sparse layer's kernel (mma.sp or
    // wgmma.sp, or dense and why), each fp8 launch's form.
    if !plan.notes.is_empty() {
        out.push_str("  notes (sparse layers (2:4 weights: sparse on mma.sp or wgmma.sp, or dense and why; docs/sparsity.md); fp8 layers, docs/quantization.md):\n");
        for n in &plan.notes {
            let origin = plan.origins.get(n.item).map_or("", |o| o.as_str());
            out.push_str(&format!("  {:>4}  {origin}: {}\n", n.item, n.note));
        }
    }
    Ok(out)
}

/// `aoc explain --json` for a GPU artifact: every launch and host step.
pub fn explain_gpu_json(path: &Path, a: &Artifact) -> Result<serde_json::Value, String> {
    let m = a.manifest();
    let plan: aoc_runtime::gpu_plan::GpuPlan =
        serde_json::from_value(m.plan.clone()).map_err(|e| format!("error: {}: the GPU plan is not valid: {e}", path.display()))?;
    let w = a.weights_range();
    let items: Vec<serde_json::Value> = plan
        .items
        .iter()
        .zip(&plan.origins)
        .enumerate()
        .map(|(i, (item, origin))| match item {
            GpuItem::Launch(l) => {
                let mut v = serde_json::json!({
                    "index": i, "kind": "launch", "kernel": l.kernel, "grid": l.grid, "block": l.block, "origin": origin,
                });
                if let Some(n) = plan.notes.iter().find(|n| n.item == i) {
                    v["note"] = serde_json::Value::String(n.note.clone());
                }
                v
            }
            GpuItem::Host { step } => serde_json::json!({"index": i, "kind": "host", "step": step.kind(), "origin": origin}),
        })
        .collect();
    Ok(serde_json::json!({
        "artifact": path.display().to_string(),
        "target": m.target,
        "arena_bytes": m.arena_size,
        "weight_bytes": w.end - w.start,
        "ptx_bytes": a.code(aoc_runtime::gpu_plan::PTX_BLOB).map(|c| c.len()).unwrap_or(0),
        "inputs": m.inputs.iter().map(crate::artifact_io::spec_json).collect::<Vec<_>>(),
        "outputs": m.outputs.iter().map(crate::artifact_io::spec_json).collect::<Vec<_>>(),
        "items": items,
    }))
}
