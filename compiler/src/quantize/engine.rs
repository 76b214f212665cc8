//! Running candidate models fast: each is compiled for this CPU in memory
//! (the `aoc compile --target host` pipeline and backend) and run by the
//! native executor, so calibration and every accuracy measurement use the
//! kernels the user will run, not the f64 interpreter.

use aoc_backend_x86::compile::compile_with;
use aoc_backend_x86::pointwise::X86Level;
use aoc_ir::interp::WeightSource;
use aoc_ir::module::Module;
use aoc_ir::tensor::Tensor;
use aoc_passes::lower::LowerOptions;
use aoc_runtime::artifact::Artifact;
use aoc_runtime::exec::{Session, SessionOptions};

use crate::cpu::CPU_PIPELINE;

/// Compiles `module`'s entry function for this CPU and loads it. Ops
/// without a native kernel run on the reference interpreter here (this is
/// a measurement, not the user's artifact).
pub fn compile(module: &Module, weights: &dyn WeightSource, threads: usize) -> Result<Session, String> {
    let mut m = module.clone();
    let config = crate::opt::OptConfig {
        passes: Some(CPU_PIPELINE.to_string()),
        target: "x86-64-v4".to_string(),
        verify_each: false,
        ..Default::default()
    };
    crate::opt::optimize(&mut m, weights, &config, None)?;
    let func = m.entry().ok_or("error: the model has no function")?;
    let opts = LowerOptions { reference_fallback: true, ..LowerOptions::CPU };
    let out = compile_with(func, weights, X86Level::host(), &opts).map_err(|d| format!("error: {}", d.message))?;
    let art = Artifact::from_bytes(out.artifact).map_err(|e| format!("error: {e}"))?;
    Session::from_artifact(art, &SessionOptions { threads }).map_err(|e| format!("error: {e}"))
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

/// Little-endian f32 bytes as values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
