//! `aoc compile` for x86-64 targets and `aoc run` / `aoc bench` /
//! `aoc explain` on CPU artifacts: the driver's side of the CPU backend and
//! runtime.
//!
//! Compiling runs the target's pipeline ([`CPU_PIPELINE`], through
//! `driver::load_optimized`), then `aoc_backend_x86::compile`. What CPU and
//! GPU artifacts share lives elsewhere: binding `.npy` inputs and decoding
//! outputs in `artifact_io`, synthetic inputs and latency statistics in
//! `bench`.

use std::path::Path;
use std::time::Instant;

use aoc_backend_x86::compile::{compile_with, emit_text};
use aoc_passes::lower::LowerOptions;
use aoc_backend_x86::pointwise::X86Level;
use aoc_ir::tensor::Tensor;
use aoc_runtime::artifact::Artifact;
use aoc_runtime::exec::{Session, SessionOptions};
use aoc_runtime::plan::Plan;

use crate::artifact_io::{bind_inputs, decode_outputs};
use crate::bench::{BenchResult, stats};
use crate::driver::{InputArg, human, load_optimized};

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

/// `aoc compile` for a CPU target; returns the summary line(s) for stderr.
#[allow(clippy::too_many_arguments)]
pub fn compile_cpu(
    input: &Path,
    input_shapes: &[(String, Vec<usize>)],
    level: X86Level,
    passes: &str,
    verify_each: bool,
    emit: Emit,
    output: &Path,
    reference_fallback: bool,
) -> Result<(String, serde_json::Value), String> {
    let opts = LowerOptions { reference_fallback, ..LowerOptions::CPU };
    let t0 = Instant::now();
    let Some(loaded) = load_optimized(input, input_shapes, passes, verify_each, "x86-64-v4", (emit == Emit::Air).then_some(output))? else {
        let msg = format!("wrote {} (the IR after `{passes}`)", output.display());
        return Ok((msg, serde_json::json!({"output": output.display().to_string(), "emit": "air", "passes": passes})));
    };
    let func = loaded
        .module
        .entry()
        .ok_or_else(|| format!("error: {} has no function to compile", input.display()))?;
    if matches!(emit, Emit::Clif | Emit::Asm) {
        let text = emit_text(func, loaded.weights.as_ref(), level, emit == Emit::Asm, &opts)
            .map_err(|d| loaded.render(&[d]))?;
        crate::output::write_file(output, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
        let kind = if emit == Emit::Asm { "asm" } else { "clif" };
        return Ok((format!("wrote {}", output.display()), serde_json::json!({"output": output.display().to_string(), "emit": kind})));
    }
    let pb = crate::say::progress(0, &format!("generating code for {}", level.target_name()));
    let out = compile_with(func, loaded.weights.as_ref(), level, &opts);
    pb.finish_and_clear();
    let out = out.map_err(|d| loaded.render(&[d]))?;
    crate::output::write_file(output, &out.artifact).map_err(|m| format!("error: {m}"))?;
    let r = &out.report;
    let seconds = t0.elapsed().as_secs_f64();
    let json = serde_json::json!({
        "input": input.display().to_string(),
        "output": output.display().to_string(),
        "target": level.target_name(),
        "seconds": seconds,
        "steps": out.steps,
        "step_kinds": r.steps.iter().map(|(k, n)| (k.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "generated_kernels": out.kernels,
        "code_bytes": out.code_bytes,
        "weight_bytes": r.weight_bytes,
        "arena_bytes": out.arena_bytes,
        "unshared_bytes": r.unshared_bytes,
        "layout_copies": r.layout_copies,
        "artifact_bytes": out.artifact.len(),
        "reference_ops": r.reference_ops.iter().map(|(k, n)| (k.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
    });
    let steps: Vec<String> = r.steps.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let mut msg = format!(
        "compiled {} for {} in {:.2} s: {} steps ({}), {} generated kernels ({} bytes of code), weights {}, arena {} (unshared {}), {} layout copies\nwrote {} ({})",
        input.display(),
        level.target_name(),
        seconds,
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
            "\nnote: {} op kinds run on the reference interpreter (--reference-fallback): {}",
            r.reference_ops.len(),
            ops.join(", ")
        ));
    }
    if let Some(total) = aoc_ir::tensor::physical_memory()
        && out.arena_bytes + r.weight_bytes > total
    {
        msg.push_str(&format!(
            "\nwarning: one inference needs {} (arena {} and weights {}), more than this machine's {} of memory",
            human(out.arena_bytes + r.weight_bytes),
            human(out.arena_bytes),
            human(r.weight_bytes),
            human(total)
        ));
    }
    Ok((msg, json))
}

/// The first offset of `buf` at a 64-byte boundary (`buf` has 64 spare
/// bytes).
fn aligned_at(buf: &[u8]) -> usize {
    (buf.as_ptr() as usize).next_multiple_of(64) - buf.as_ptr() as usize
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

/// `aoc run FILE.aoc`: returns (output name, tensor) pairs.
pub fn run_artifact(path: &Path, inputs: &[InputArg], threads: usize) -> Result<Vec<(String, Tensor)>, String> {
    let s = load_session(path, threads)?;
    let bytes = bind_artifact_inputs(&s, inputs)?;
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let outs = s.run(&refs).map_err(|e| format!("error: {}: {e}", path.display()))?;
    decode_outputs(s.outputs(), outs)
}

/// Runs `warmup` untimed then `iters` timed inferences, on inputs and
/// outputs at 64-byte boundaries as the runtime wants them (an unaligned
/// caller buffer is staged through a copy each run, which a caller that
/// cares about latency avoids, as the Python binding's output buffers do).
pub fn bench(s: &Session, inputs: &[Vec<u8>], warmup: usize, iters: usize) -> Result<BenchResult, String> {
    let mut in_bufs: Vec<Vec<u8>> = inputs.iter().map(|b| vec![0u8; b.len() + 64]).collect();
    let ins: Vec<&[u8]> = in_bufs
        .iter_mut()
        .zip(inputs)
        .map(|(buf, b)| {
            let at = aligned_at(buf);
            buf[at..at + b.len()].copy_from_slice(b);
            &buf[at..at + b.len()]
        })
        .collect();
    let mut outs: Vec<Vec<u8>> = s
        .outputs()
        .iter()
        .map(|o| {
            let w = aoc_runtime::artifact::DType::parse(&o.dtype).map_or(1, |d| d.size());
            vec![0u8; (o.shape.iter().product::<u64>() * w) as usize + 64]
        })
        .collect();
    let out_lens: Vec<usize> = outs.iter().map(|v| v.len() - 64).collect();
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let mut orefs: Vec<&mut [u8]> = outs
            .iter_mut()
            .zip(&out_lens)
            .map(|(v, &len)| {
                let at = aligned_at(v);
                &mut v[at..at + len]
            })
            .collect();
        let t0 = Instant::now();
        s.run_into(&ins, &mut orefs).map_err(|e| format!("error: {e}"))?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    let batch = s.inputs().first().and_then(|i| i.shape.first().copied()).unwrap_or(1).max(1) as f64;
    Ok(stats(times, batch, s.peak_memory_bytes(), s.threads()))
}

/// A CPU artifact's plan, decoded for reading (no session: the artifact
/// may be for a CPU this one is not).
fn inspected_plan(path: &Path, a: &Artifact) -> Result<Plan, String> {
    let plan: Plan = serde_json::from_value(a.manifest().plan.clone())
        .map_err(|e| format!("error: {}: the plan is not valid: {e}", path.display()))?;
    if plan.origins.len() != plan.steps.len() {
        return Err(format!(
            "error: {}: the plan has {} steps and {} origins",
            path.display(),
            plan.steps.len(),
            plan.origins.len()
        ));
    }
    Ok(plan)
}

/// `aoc explain`: the artifact's plan, one line per step. `a` is the
/// artifact at `path` opened for inspection, so this also reads an
/// artifact for a CPU level this machine lacks.
pub fn explain(path: &Path, a: &Artifact) -> Result<String, String> {
    let plan = &inspected_plan(path, a)?;
    let m = a.manifest();
    let mut out = format!(
        "{}: target {}, needs [{}]\n  arena {}, weights {}, {} kernels, {} steps\n",
        path.display(),
        m.target,
        m.cpu_features.join(" "),
        human(m.arena_size),
        human({
            let w = a.weights_range();
            (w.end - w.start) as u64
        }),
        m.code.len(),
        plan.steps.len()
    );
    for i in &m.inputs {
        out.push_str(&format!("  input  {} {} {:?}\n", i.name, i.dtype, i.shape));
    }
    for o in &m.outputs {
        out.push_str(&format!("  output {} {} {:?}\n", o.name, o.dtype, o.shape));
    }
    // A quantized artifact also gets each step's precision, and why a
    // compute step is not in int8.
    let precisions: Option<Vec<&str>> = (plan.origins.iter().any(|o| o.starts_with("quant."))
        || plan.steps.iter().any(|st| step_precision(st, "") == "int8"))
        .then(|| plan.steps.iter().zip(&plan.origins).map(|(st, o)| step_precision(st, o)).collect());
    for (i, (step, origin)) in plan.steps.iter().zip(&plan.origins).enumerate() {
        let what = step_what(step);
        match &precisions {
            Some(p) => out.push_str(&format!("  {i:>4}  {:<7} {what:<44} <- {origin}\n", p[i])),
            None => out.push_str(&format!("  {i:>4}  {what:<44} <- {origin}\n")),
        }
    }
    if let Some(p) = &precisions {
        out.push_str(&not_in_int8(plan, p));
    }
    out.push_str(&sparse_ran_dense(plan));
    Ok(out)
}

/// The compute steps of `sparse.*` ops, which run on the dense kernels, and
/// why (empty when there are none).
fn sparse_ran_dense(plan: &aoc_runtime::plan::Plan) -> String {
    use aoc_runtime::plan::Step;
    let mut lines = String::new();
    for (i, (st, o)) in plan.steps.iter().zip(&plan.origins).enumerate() {
        if o.starts_with("sparse.") && !matches!(st, Step::Copy { .. } | Step::Pointwise { .. }) {
            lines.push_str(&format!("  {i:>4}  {o}\n"));
        }
    }
    if lines.is_empty() {
        return lines;
    }
    format!(
        "  sparse layers run dense: their N:M weights are decompressed into the dense packed panels at compile time, \
         since skipping the zero half does not pay on the CPU: a kernel that does measured 0.2-0.9x the dense GEMM's speed, \
         as each kept value needs its own load of x (docs/sparsity.md):\n{lines}"
    )
}

/// `aoc explain --json`: the same as [`explain`], one object.
pub fn explain_json(path: &Path, a: &Artifact) -> Result<serde_json::Value, String> {
    let plan = &inspected_plan(path, a)?;
    let m = a.manifest();
    let w = a.weights_range();
    let steps: Vec<serde_json::Value> = plan
        .steps
        .iter()
        .zip(&plan.origins)
        .enumerate()
        .map(|(i, (st, o))| {
            serde_json::json!({
                "index": i,
                "kind": st.kind(),
                "kernel": step_what(st),
                "precision": step_precision(st, o),
                "op": o.split_whitespace().next(),
                "loc": origin_loc(o),
                "origin": o,
            })
        })
        .collect();
    Ok(serde_json::json!({
        "artifact": path.display().to_string(),
        "target": m.target,
        "cpu_features": m.cpu_features,
        "arena_bytes": m.arena_size,
        "weight_bytes": w.end - w.start,
        "kernels": m.code.len(),
        "inputs": m.inputs.iter().map(crate::artifact_io::spec_json).collect::<Vec<_>>(),
        "outputs": m.outputs.iter().map(crate::artifact_io::spec_json).collect::<Vec<_>>(),
        "steps": steps,
    }))
}

/// One step's kernel and shape, as `aoc explain` prints it.
fn step_what(step: &aoc_runtime::plan::Step) -> String {
    use aoc_runtime::plan::Step;
    {
        match step {
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
            Step::If { else_at, .. } => format!("if (else: step {else_at})"),
            Step::Else { end_at } => format!("else (end: step {end_at})"),
            Step::Loop { end_at, .. } => format!("loop (end: step {end_at})"),
            Step::EndLoop { start_at, carried, scans, .. } => {
                format!("end_loop (back to step {start_at}; {} carried, {} scanned)", carried.len(), scans.len())
            }
            other => other.kind().to_string(),
        }
    }
}

/// The precision a step computes in, for `aoc explain` on quantized
/// artifacts: `int8` (integer kernels), `quant`/`dequant` (the conversions)
/// or `f32`.
pub(crate) fn step_precision(step: &aoc_runtime::plan::Step, origin: &str) -> &'static str {
    use aoc_runtime::plan::{QuantElem, Step};
    if let Step::QConv2d { q, .. } = step
        && q.elem != QuantElem::Int8
    {
        return "fp8";
    }
    if matches!(step, Step::QConv2d { .. } | Step::QAdd { .. } | Step::QMaxPool { .. } | Step::QAvgPool { .. } | Step::QMatMul { .. } | Step::QGlobalAvgPool { .. }) {
        return "int8";
    }
    if matches!(step, Step::Quantize { .. }) {
        return "quant";
    }
    if matches!(step, Step::Dequantize { .. }) {
        return "dequant";
    }
    if matches!(step, Step::Copy { .. } | Step::Fill { .. } | Step::Gather { .. }) {
        return "move";
    }
    if origin.starts_with("quant.quantize") || origin.starts_with("quant.requantize") {
        return "quant";
    }
    if origin.starts_with("quant.dequantize") {
        return "dequant";
    }
    if origin.starts_with("quant.") && matches!(step, Step::Pointwise { .. }) {
        return "int8";
    }
    "f32"
}

/// The `loc("...")` of an origin string.
pub(crate) fn origin_loc(origin: &str) -> Option<&str> {
    let start = origin.find("loc(\"")? + 5;
    let len = origin[start..].find("\")")?;
    Some(&origin[start..start + len])
}

/// The compute steps of a quantized artifact that run in f32, and why.
fn not_in_int8(plan: &aoc_runtime::plan::Plan, precision: &[&str]) -> String {
    use aoc_runtime::plan::Step;
    let dequantized: std::collections::HashSet<&str> = plan
        .origins
        .iter()
        .zip(precision)
        .filter(|(_, p)| **p == "dequant")
        .filter_map(|(o, _)| origin_loc(o))
        .collect();
    let mut lines = String::new();
    for (i, (st, o)) in plan.steps.iter().zip(&plan.origins).enumerate() {
        let compute = !matches!(st, Step::Pointwise { .. });
        if precision[i] != "f32" || !compute {
            continue;
        }
        let op = o.split_whitespace().next().unwrap_or("?");
        let why = if origin_loc(o).is_some_and(|l| dequantized.contains(l)) {
            "no integer kernel for it here: it runs on dequantized values and is quantized again"
        } else {
            "a float layer: not quantized, or kept in float by aoc quantize (its report says why)"
        };
        lines.push_str(&format!("  {i:>4}  {op} {}: {why}\n", origin_loc(o).unwrap_or("")));
    }
    if lines.is_empty() {
        "  every compute step runs in int8\n".to_string()
    } else {
        format!("  not in int8:\n{lines}")
    }
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
