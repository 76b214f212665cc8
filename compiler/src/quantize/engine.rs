//! Running candidate models fast: each is compiled for this CPU in memory
//! (the `aoc compile --target host` pipeline and backend) and run by the
//! native executor, so calibration and every accuracy measurement use the
//! kernels the user will run, not the f64 interpreter.

use aoc_backend_x86::compile::compile_with;
use aoc_backend_x86::pointwise::X86Level;
use aoc_ir::interp::WeightSource;
use aoc_ir::module::{Func, Module};
use aoc_ir::tensor::Tensor;
use aoc_passes::lower::LowerOptions;
use aoc_runtime::artifact::Artifact;
use aoc_runtime::exec::{Session, SessionOptions};

use crate::cpu::CPU_PIPELINE;

/// A copy of `module` through the `passes` pipeline under `target`'s cost
/// model, its results pinned by position under distinct names (calibration
/// returns values the optimizer may merge: a cast to the same type, say).
fn optimized(module: &Module, weights: &dyn WeightSource, passes: &str, target: &str) -> Result<Module, String> {
    let mut m = module.clone();
    m.funcs.iter_mut().for_each(Func::pin_result_names);
    let config = crate::opt::OptConfig { passes: Some(passes.to_string()), target: target.to_string(), verify_each: false, ..Default::default() };
    crate::opt::optimize(&mut m, weights, &config, None)?;
    Ok(m)
}

/// Compiles `module`'s entry function for this CPU and loads it. Ops
/// without a native kernel run on the reference interpreter here (this is
/// a measurement, not the user's artifact).
pub fn compile(module: &Module, weights: &dyn WeightSource, threads: usize) -> Result<Session, String> {
    let m = optimized(module, weights, CPU_PIPELINE, "x86-64-v4")?;
    let func = m.entry().ok_or("error: the model has no function")?;
    let opts = LowerOptions { reference_fallback: true, ..LowerOptions::CPU };
    let out = compile_with(func, weights, X86Level::host(), &opts).map_err(|d| format!("error: {}", d.message))?;
    let art = Artifact::from_bytes(out.artifact).map_err(|e| format!("error: {e}"))?;
    Session::from_artifact(art, &SessionOptions { threads }).map_err(|e| format!("error: {e}"))
}

/// The plan the GPU backend makes of `module` for `sm` (the `aoc compile
/// --target sm_*` pipeline and lowering, without generating PTX): which
/// ops get integer kernels there.
pub fn gpu_plan(module: &Module, weights: &dyn WeightSource, sm: aoc_backend_ptx::Sm) -> Result<aoc_runtime::plan::Plan, String> {
    let m = optimized(module, weights, crate::gpu::GPU_PIPELINE, crate::gpu::cost_target(sm))?;
    let func = m.entry().ok_or("error: the model has no function")?;
    // As the PTX backend lowers (its kernels for `sm`).
    let opts = aoc_backend_ptx::compile::lower_options(sm, true);
    let lowered = aoc_passes::lower::lower(func, weights, &opts).map_err(|d| format!("error: {}", d.message))?;
    Ok(lowered.plan)
}

/// The bytes the runtime takes for each input tensor.
pub fn encode(inputs: &[Tensor]) -> Vec<Vec<u8>> {
    inputs.iter().map(|t| aoc_ir::bytes::encode(t.ty.elem.storage(), &t.data)).collect()
}

/// Runs one batch; returns each output's raw bytes.
pub fn run(s: &Session, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    s.run(&refs).map_err(|e| format!("error: {e}"))
}

/// Runs one batch of a model whose outputs are all f32 into `outs` (one
/// buffer per output, of its element count).
pub fn run_into(s: &Session, inputs: &[Vec<u8>], outs: &mut [Vec<f32>]) -> Result<(), String> {
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let mut bytes: Vec<&mut [u8]> = outs.iter_mut().map(|o| f32_bytes_mut(o)).collect();
    s.run_into(&refs, &mut bytes).map_err(|e| format!("error: {e}"))
}

/// The bytes of `xs`, which the runtime fills with little-endian f32s.
fn f32_bytes_mut(xs: &mut [f32]) -> &mut [u8] {
    const { assert!(cfg!(target_endian = "little"), "the runtime's f32 bytes are little-endian") };
    // SAFETY: u8 has alignment 1 and the length covers exactly the f32s'
    // bytes; every byte pattern is a valid f32, so any write is sound.
    unsafe { std::slice::from_raw_parts_mut(xs.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(xs)) }
}

/// An output's bytes as f32 values, whatever its element type (`dtype`, as
/// the artifact names it): an integer output (an argmax, class ids)
/// compares by value.
pub fn values(dtype: &str, bytes: &[u8]) -> Result<Vec<f32>, String> {
    if dtype == "f32" {
        return Ok(f32s(bytes));
    }
    let s = aoc_ir::Scalar::from_name(dtype).ok_or_else(|| format!("error: an output of unknown element type {dtype}"))?;
    Ok(match aoc_ir::bytes::decode(s, bytes).map_err(|m| format!("error: {m}"))? {
        aoc_ir::tensor::Data::F(v) => v.iter().map(|&x| x as f32).collect(),
        aoc_ir::tensor::Data::I(v) => v.iter().map(|&x| x as f32).collect(),
    })
}

/// Runs one batch; returns its first `n` outputs as f32 values.
pub fn run_values(s: &Session, inputs: &[Vec<u8>], n: usize) -> Result<Vec<Vec<f32>>, String> {
    let outs = run(s, inputs)?;
    outs.iter().zip(s.outputs()).take(n).map(|(b, o)| values(&o.dtype, b)).collect()
}

/// Little-endian f32 bytes as values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
