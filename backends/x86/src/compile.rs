//! The backend's entry: lowered plan + generated kernels + weights → one
//! `.aoc` artifact for an x86-64 level.
//!
//! The artifact's `cpu_features` are what the generated code was compiled
//! for (the runtime refuses it on a CPU that lacks one). The runtime's
//! micro-kernels choose their own instruction set at run time, so an
//! `x86-64` artifact still uses AVX-512 GEMM tiles on a CPU that has them.

use aoc_ir::diag::Diagnostic;
use aoc_ir::interp::WeightSource;
use aoc_ir::module::Func;
use aoc_plan::artifact::ArtifactWriter;

use crate::lower::{LowerOptions, LowerReport, lower};
use crate::pointwise::{X86Level, compile_pointwise, pointwise_asm, pointwise_clif};

/// What `compile` hands back besides the bytes.
pub struct CompileOutput {
    pub artifact: Vec<u8>,
    pub report: LowerReport,
    pub kernels: usize,
    pub code_bytes: usize,
    pub arena_bytes: u64,
    pub steps: usize,
}

/// CPU features (as `is_x86_feature_detected!` names them) code for
/// `level` needs.
pub fn cpu_features(level: X86Level) -> &'static [&'static str] {
    match level {
        X86Level::Baseline => &["sse2"],
        X86Level::V3 => &["sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "lzcnt"],
        X86Level::V4 => &[
            "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2", "lzcnt", "avx512f",
            "avx512dq", "avx512vl",
        ],
    }
}

/// Compiles an optimized, verified function into artifact bytes.
pub fn compile(func: &Func, weights: &dyn WeightSource, level: X86Level) -> Result<CompileOutput, Diagnostic> {
    compile_with(func, weights, level, &LowerOptions::CPU)
}

/// [`compile`] with other lowering choices (the runtime runs every step
/// kind, so any [`LowerOptions`] gives a working artifact).
pub fn compile_with(func: &Func, weights: &dyn WeightSource, level: X86Level, opts: &LowerOptions) -> Result<CompileOutput, Diagnostic> {
    let lowered = lower(func, weights, opts)?;
    let err = |m: String| Diagnostic::error(m, func.loc.clone());
    let mut w = ArtifactWriter::new(level.target_name());
    for f in cpu_features(level) {
        w.cpu_feature(f);
    }
    for s in &lowered.inputs {
        w.input(&s.name, s.dtype.name(), &s.shape);
    }
    for s in &lowered.outputs {
        w.output(&s.name, s.dtype.name(), &s.shape);
    }
    w.arena_size(lowered.arena_bytes);
    let plan = serde_json::to_value(&lowered.plan).map_err(|e| err(format!("cannot encode the plan: {e}")))?;
    w.plan(plan);
    let mut code_bytes = 0;
    for k in &lowered.kernels {
        let code = compile_pointwise(k, level).map_err(|m| err(format!("kernel {}: {m}", k.name)))?;
        code_bytes += code.len();
        w.add_code(&k.name, level.target_name(), &code);
    }
    for b in &lowered.weights {
        w.add_weight(&b.name, b.dtype.name(), &b.shape, &b.bytes);
    }
    let artifact = w.to_bytes().map_err(|e| err(e.to_string()))?;
    Ok(CompileOutput {
        artifact,
        report: lowered.report,
        kernels: lowered.kernels.len(),
        code_bytes,
        arena_bytes: lowered.arena_bytes,
        steps: lowered.plan.steps.len(),
    })
}

/// What `--emit clif` / `--emit asm` print: every generated kernel's
/// Cranelift IR or machine code listing, and the plan that calls them.
pub fn emit_text(
    func: &Func,
    weights: &dyn WeightSource,
    level: X86Level,
    asm: bool,
    opts: &LowerOptions,
) -> Result<String, Diagnostic> {
    let lowered = lower(func, weights, opts)?;
    let err = |m: String| Diagnostic::error(m, func.loc.clone());
    let mut out = String::new();
    out.push_str(&format!(
        "; aoc x86 backend, target {}: {} steps, {} kernels, arena {} bytes\n",
        level.target_name(),
        lowered.plan.steps.len(),
        lowered.kernels.len(),
        lowered.arena_bytes
    ));
    for (i, (s, o)) in lowered.plan.steps.iter().zip(&lowered.plan.origins).enumerate() {
        let extra = match s {
            aoc_plan::plan::Step::Pointwise { code, rows, .. } => format!(" {code} rows={rows}"),
            _ => String::new(),
        };
        out.push_str(&format!("; step {i}: {}{extra}  <- {o}\n", s.kind()));
    }
    for k in &lowered.kernels {
        let text = if asm { pointwise_asm(k, level) } else { pointwise_clif(k, level) };
        let text = text.map_err(|m| err(format!("kernel {}: {m}", k.name)))?;
        out.push_str(&format!("\n; kernel {} dims={:?}\n{text}\n", k.name, k.dims));
    }
    Ok(out)
}
