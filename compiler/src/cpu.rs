//! `aoc compile` for x86-64 targets and `aoc run` / `aoc bench` on `.aoc`
//! artifacts: the driver's side of the CPU backend and runtime.
//!
//! Compiling runs the target's pipeline (`cpu_pipeline`), then
//! `aoc_backend_x86::compile`. Running binds `.npy` inputs to the
//! artifact's inputs by name or order, exactly like `aoc run` on `.air`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use aoc_backend_x86::compile::{compile, emit_text};
use aoc_backend_x86::pointwise::X86Level;
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use aoc_runtime::artifact::TensorSpec;
use aoc_runtime::exec::{Session, SessionOptions};

use crate::driver::{InputArg, load_model};
use crate::npy;

/// The pass pipeline `aoc compile` runs for a CPU target (the cost model
/// picks Winograd per layer: the CPU has native Winograd kernels).
pub const CPU_PIPELINE: &str = "algebraic,fold-bn,qdq,winograd-auto,fuse";

/// Resolves `--target` for the CPU: `host` is the best level this CPU runs.
pub fn cpu_level(target: &str) -> Option<X86Level> {
    match target {
        "host" | "native" => Some(X86Level::host()),
        t => X86Level::from_target_name(t),
    }
}

/// What `--emit` may be for a CPU target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    Artifact,
    Air,
    Clif,
    Asm,
}

/// Loads a model and runs `passes` with `cost_target`'s cost model,
/// verifying after each pass when `verify_each`; with `air_out`, writes the
/// optimized IR there instead and returns `None` (`--emit air`: folded
/// weights print inline as dense<...>, complete if large).
pub fn load_optimized(
    input: &Path,
    input_shapes: &[(String, Vec<usize>)],
    passes: &str,
    verify_each: bool,
    cost_target: &str,
    air_out: Option<&Path>,
) -> Result<Option<crate::driver::Loaded>, String> {
    let mut loaded = load_model(input, input_shapes)?;
    let config = crate::opt::OptConfig {
        passes: Some(passes.to_string()),
        target: cost_target.to_string(),
        verify_each,
        ..Default::default()
    };
    crate::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None)?;
    if let Some(out) = air_out {
        let text = aoc_ir::print::print_module(&loaded.module);
        std::fs::write(out, &text).map_err(|e| format!("error: cannot write {}: {e}", out.display()))?;
        return Ok(None);
    }
    Ok(Some(loaded))
}

/// `aoc compile` for a CPU target; returns the summary line(s) for stderr.
pub fn compile_cpu(
    input: &Path,
    input_shapes: &[(String, Vec<usize>)],
    level: X86Level,
    passes: &str,
    verify_each: bool,
    emit: Emit,
    output: &Path,
) -> Result<String, String> {
    let t0 = Instant::now();
    let Some(loaded) = load_optimized(input, input_shapes, passes, verify_each, "x86-64-v4", (emit == Emit::Air).then_some(output))? else {
        return Ok(format!("wrote {} (the IR after `{passes}`)", output.display()));
    };
    let func = loaded
        .module
        .entry()
        .ok_or_else(|| format!("error: {} has no function to compile", input.display()))?;
    if matches!(emit, Emit::Clif | Emit::Asm) {
        let text = emit_text(func, loaded.weights.as_ref(), level, emit == Emit::Asm)
            .map_err(|d| loaded.render(&[d]))?;
        std::fs::write(output, text).map_err(|e| format!("error: cannot write {}: {e}", output.display()))?;
        return Ok(format!("wrote {}", output.display()));
    }
    let out = compile(func, loaded.weights.as_ref(), level).map_err(|d| loaded.render(&[d]))?;
    std::fs::write(output, &out.artifact)
        .map_err(|e| format!("error: cannot write {}: {e}", output.display()))?;
    let r = &out.report;
    let steps: Vec<String> = r.steps.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let mut msg = format!(
        "compiled {} for {} in {:.2} s: {} steps ({}), {} generated kernels ({} bytes of code), weights {}, arena {} (unshared {}), {} layout copies\nwrote {} ({})",
        input.display(),
        level.target_name(),
        t0.elapsed().as_secs_f64(),
        out.steps,
        steps.join(", "),
        out.kernels,
        out.code_bytes,
        human(r.weight_bytes),
        human(out.arena_bytes),
        human(r.unshared_bytes),
        r.layout_copies,
        output.display(),
        human(out.artifact.len() as u64),
    );
    if !r.reference_ops.is_empty() {
        let ops: Vec<String> = r.reference_ops.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        msg.push_str(&format!(
            "\nnote: {} op kinds run on the reference interpreter (no native kernel yet): {}",
            r.reference_ops.len(),
            ops.join(", ")
        ));
    }
    Ok(msg)
}

/// Bytes in KiB/MiB for messages.
pub fn human(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn spec_type(dtype: &str, shape: &[u64]) -> Result<TensorType, String> {
    let s = Scalar::from_name(dtype).ok_or_else(|| format!("error: the artifact uses dtype {dtype}, which aoc cannot read"))?;
    Ok(TensorType::new(shape.iter().map(|&d| d as usize).collect::<Vec<_>>(), s))
}

/// Loads an artifact for running.
pub fn load_session(path: &Path, threads: usize) -> Result<Session, String> {
    Session::load(path, &SessionOptions { threads }).map_err(|e| format!("error: {e}"))
}

/// Binds `.npy` files to a session's inputs (by name, then in order) and
/// returns their bytes.
pub fn bind_artifact_inputs(s: &Session, inputs: &[InputArg]) -> Result<Vec<Vec<u8>>, String> {
    bind_inputs(s.inputs(), inputs)
}

/// Binds `.npy` files to an artifact's inputs `specs` (by name, then in
/// order) and returns their bytes.
pub fn bind_inputs(specs: &[TensorSpec], inputs: &[InputArg]) -> Result<Vec<Vec<u8>>, String> {
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; specs.len()];
    let mut unnamed = Vec::new();
    let names = || specs.iter().map(|s| format!("{} ({} {:?})", s.name, s.dtype, s.shape)).collect::<Vec<_>>().join(", ");
    for a in inputs {
        let t = npy::read_npy(&a.path).map_err(|m| format!("error: {m}"))?;
        let i = match &a.name {
            Some(n) => specs
                .iter()
                .position(|s| &s.name == n)
                .ok_or_else(|| format!("error: unknown input `{n}`; the artifact's inputs are: {}", names()))?,
            None => {
                unnamed.push((a.path.clone(), t));
                continue;
            }
        };
        if slots[i].is_some() {
            return Err(format!("error: input `{}` is given twice", specs[i].name));
        }
        slots[i] = Some(encode_input(&a.path, t, &specs[i].dtype, &specs[i].shape, &specs[i].name)?);
    }
    let mut unnamed = unnamed.into_iter();
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.is_none()
            && let Some((p, t)) = unnamed.next()
        {
            *slot = Some(encode_input(&p, t, &specs[i].dtype, &specs[i].shape, &specs[i].name)?);
        }
    }
    if unnamed.next().is_some() {
        return Err(format!("error: too many inputs; the artifact takes {}: {}", specs.len(), names()));
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| {
                format!(
                    "error: missing input {} ({} {:?}); give it with --input {}=PATH.npy",
                    specs[i].name, specs[i].dtype, specs[i].shape, specs[i].name
                )
            })
        })
        .collect()
}

fn encode_input(path: &Path, t: Tensor, dtype: &str, shape: &[u64], name: &str) -> Result<Vec<u8>, String> {
    let ty = spec_type(dtype, shape)?;
    let t = npy::conform(t, &ty).map_err(|m| format!("error: {}: input {name}: {m}", path.display()))?;
    Ok(aoc_ir::bytes::encode(ty.elem.storage(), &t.data))
}

/// `aoc run FILE.aoc`: returns (output name, tensor) pairs.
pub fn run_artifact(path: &Path, inputs: &[InputArg], threads: usize) -> Result<Vec<(String, Tensor)>, String> {
    let s = load_session(path, threads)?;
    let bytes = bind_artifact_inputs(&s, inputs)?;
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let outs = s.run(&refs).map_err(|e| format!("error: {}: {e}", path.display()))?;
    decode_outputs(s.outputs(), outs)
}

/// Output bytes as tensors of the artifact's output `specs`.
pub fn decode_outputs(specs: &[TensorSpec], outs: Vec<Vec<u8>>) -> Result<Vec<(String, Tensor)>, String> {
    specs
        .iter()
        .zip(outs)
        .map(|(spec, b)| {
            let ty = spec_type(&spec.dtype, &spec.shape)?;
            let data = aoc_ir::bytes::decode(ty.elem.storage(), &b).map_err(|m| format!("error: output {}: {m}", spec.name))?;
            Ok((spec.name.clone(), Tensor { ty, data }))
        })
        .collect()
}

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

/// Runs `warmup` untimed then `iters` timed inferences.
pub fn bench(s: &Session, inputs: &[Vec<u8>], warmup: usize, iters: usize) -> Result<BenchResult, String> {
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let mut outs: Vec<Vec<u8>> = s
        .outputs()
        .iter()
        .map(|o| {
            let w = aoc_runtime::artifact::DType::parse(&o.dtype).map_or(1, |d| d.size());
            vec![0u8; (o.shape.iter().product::<u64>() * w) as usize]
        })
        .collect();
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let mut orefs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        let t0 = Instant::now();
        s.run_into(&refs, &mut orefs).map_err(|e| format!("error: {e}"))?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    let batch = s.inputs().first().and_then(|i| i.shape.first().copied()).unwrap_or(1).max(1) as f64;
    Ok(stats(times, batch, s.peak_memory_bytes(), s.threads()))
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

/// `out/NAME.npy` paths for artifact outputs (names may hold `/`).
pub fn output_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{}.npy", name.replace('/', "_")))
}

/// `aoc explain`: the artifact's plan, one line per step.
pub fn explain(path: &Path) -> Result<String, String> {
    use aoc_runtime::plan::Step;
    let s = load_session(path, 1)?;
    let m = s.artifact().manifest();
    let mut out = format!(
        "{}: target {}, needs [{}]\n  arena {}, weights {}, {} kernels, {} steps\n",
        path.display(),
        m.target,
        m.cpu_features.join(" "),
        human(m.arena_size),
        human(s.peak_memory_bytes() - m.arena_size),
        m.code.len(),
        s.plan().steps.len()
    );
    for i in &m.inputs {
        out.push_str(&format!("  input  {} {} {:?}\n", i.name, i.dtype, i.shape));
    }
    for o in &m.outputs {
        out.push_str(&format!("  output {} {} {:?}\n", o.name, o.dtype, o.shape));
    }
    for (i, (step, origin)) in s.plan().steps.iter().zip(&s.plan().origins).enumerate() {
        let what = match step {
            Step::Gemm { m, n, k, relu, clip, gelu, .. } => {
                format!("gemm {m}x{n}x{k}{}", activations(*relu, *clip, *gelu))
            }
            Step::MatMul { batch, m, n, k, .. } => format!("matmul {batch}x({m}x{n}x{k})"),
            Step::Conv2d { geom: g, relu, clip, .. } => format!(
                "conv2d {}x{}x{}x{} -> {}x{}x{} k{}x{} s{} g{}{}",
                g.n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.kh, g.kw, g.stride[0], g.group,
                activations(*relu, *clip, false)
            ),
            Step::DepthwiseConv2d { geom: g, relu, clip, .. } => format!(
                "depthwise {}x{}x{} k{}x{} s{}{}",
                g.h, g.w, g.c, g.kh, g.kw, g.stride[0],
                activations(*relu, *clip, false)
            ),
            Step::Pointwise { code, rows, args } => format!("pointwise {code} ({} args, {rows} rows)", args.len()),
            Step::Reference { air, .. } => {
                let op = air.lines().find_map(|l| l.split(" = ").nth(1)).and_then(|r| r.split_whitespace().next()).unwrap_or("?");
                format!("reference {op}")
            }
            other => other.kind().to_string(),
        };
        out.push_str(&format!("  {i:>4}  {what:<44} <- {origin}\n"));
    }
    Ok(out)
}

/// The activations a GEMM or convolution step applies, for `aoc explain`.
fn activations(relu: bool, clip: Option<[f32; 2]>, gelu: bool) -> String {
    let mut s = String::new();
    if relu {
        s.push_str(" +relu");
    }
    if let Some([lo, hi]) = clip {
        s.push_str(&format!(" +clip({lo}, {hi})"));
    }
    if gelu {
        s.push_str(" +gelu");
    }
    s
}
