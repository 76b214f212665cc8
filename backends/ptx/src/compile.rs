//! The backend's entry: an optimized function → lowered plan (GPU weight
//! forms) → launch plan + one PTX module → one `.aoc` artifact for an `sm`.
//!
//! Cross-compiling needs no GPU: the PTX is generated here and JIT-compiled
//! by the driver where the artifact runs (for the GPU at hand, which may be
//! newer than the target).

use aoc_ir::diag::Diagnostic;
use aoc_ir::interp::WeightSource;
use aoc_ir::module::Func;
use aoc_passes::lower::{LowerOptions, LowerReport, Lowered, lower};
use aoc_plan::artifact::ArtifactWriter;
use aoc_plan::gpu_plan::{GpuItem, PTX_BLOB};

use crate::llvm::ir_parts_to_ptx;
use crate::target::Sm;
use crate::translate::{Precision, Translated, Tuner, translate_tuned};

/// What `compile` hands back besides the bytes.
pub struct CompileOutput {
    pub artifact: Vec<u8>,
    pub report: LowerReport,
    /// Distinct kernels in the PTX module.
    pub kernels: usize,
    pub ptx_bytes: usize,
    pub arena_bytes: u64,
    pub launches: usize,
    /// Launches per kernel family (the kernel's name without its hash or
    /// index: `gemm_f32`, `pw`, `copy`, ...), most first; they add up to
    /// `launches`.
    pub launch_kinds: Vec<(String, usize)>,
    /// Items run on the host (ops without a GPU kernel).
    pub host_items: usize,
}

/// A kernel's family: its name without a trailing `_<hex hash>` or index
/// (`gemm_f32_ea2016aa21d6f2fa` → `gemm_f32`, `pw12` → `pw`).
pub fn kernel_family(name: &str) -> &str {
    let base = match name.rsplit_once('_') {
        Some((head, tail)) if tail.len() >= 8 && tail.bytes().all(|b| b.is_ascii_hexdigit()) => head,
        _ => name,
    };
    // Numbered kernels (`pw12`) have no underscore; `gemm_tc_f16` keeps its digits.
    if base.contains('_') { base } else { base.trim_end_matches(|c: char| c.is_ascii_digit()) }
}

/// What the lowering may ask of this backend's kernels for `sm`: the
/// integer kernels use mma.sync m16n8k32 (sm_80+; older GPUs have no
/// kernel for the quantized ops); fp8: e4m3 quantize/dequantize kernels
/// from sm_89, convolutions and GEMMs on the e4m3 wgmma on sm_90a only
/// (elsewhere their float expansion).
pub fn lower_options(sm: Sm, reference_fallback: bool) -> LowerOptions {
    LowerOptions {
        int8: sm.has_mma_f16(),
        fp8_elementwise: sm.has_fp8_cvt(),
        fp8_conv: sm == Sm::Sm90a,
        reference_fallback,
        ..LowerOptions::GPU
    }
}

fn lowered_and_translated(
    func: &Func,
    weights: &dyn WeightSource,
    sm: Sm,
    precision: Precision,
    tuner: Option<&mut dyn Tuner>,
    reference_fallback: bool,
) -> Result<(Lowered, Translated), Diagnostic> {
    let opts = lower_options(sm, reference_fallback);
    let mut lowered = lower(func, weights, &opts)?;
    let t = translate_tuned(&mut lowered, sm, precision, tuner).map_err(|m| Diagnostic::error(m, func.loc.clone()))?;
    Ok((lowered, t))
}

/// Compiles an optimized, verified function into artifact bytes for `sm`;
/// with a `tuner`, each GEMM's tile is chosen by measurement; with
/// `reference_fallback`, ops without a kernel run on the host's reference
/// interpreter instead of being an error.
pub fn compile(
    func: &Func,
    weights: &dyn WeightSource,
    sm: Sm,
    precision: Precision,
    tuner: Option<&mut dyn Tuner>,
    reference_fallback: bool,
) -> Result<CompileOutput, Diagnostic> {
    let (lowered, t) = lowered_and_translated(func, weights, sm, precision, tuner, reference_fallback)?;
    let err = |m: String| Diagnostic::error(m, func.loc.clone());
    let ptx = ir_parts_to_ptx(&t.llvm, &t.llvm_parts, sm).map_err(err)?;
    let mut w = ArtifactWriter::new(sm.name());
    for s in &lowered.inputs {
        w.input(&s.name, s.dtype.name(), &s.shape);
    }
    for s in &lowered.outputs {
        w.output(&s.name, s.dtype.name(), &s.shape);
    }
    w.arena_size(lowered.arena_bytes);
    let plan = serde_json::to_value(&t.plan).map_err(|e| err(format!("cannot encode the plan: {e}")))?;
    w.plan(plan);
    w.add_code(PTX_BLOB, sm.name(), ptx.as_bytes());
    for b in &lowered.weights {
        w.add_weight(&b.name, b.dtype.name(), &b.shape, &b.bytes);
    }
    let artifact = w.to_bytes().map_err(|e| err(e.to_string()))?;
    let host_items = t.plan.items.iter().filter(|i| matches!(i, GpuItem::Host { .. })).count();
    let mut launch_kinds: Vec<(String, usize)> = vec![];
    for item in &t.plan.items {
        if let GpuItem::Launch(l) = item {
            let family = kernel_family(&l.kernel);
            match launch_kinds.iter_mut().find(|(k, _)| k == family) {
                Some((_, n)) => *n += 1,
                None => launch_kinds.push((family.to_string(), 1)),
            }
        }
    }
    launch_kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(CompileOutput {
        artifact,
        report: lowered.report,
        kernels: t.kernels,
        ptx_bytes: ptx.len(),
        arena_bytes: lowered.arena_bytes,
        launches: t.plan.items.len() - host_items,
        launch_kinds,
        host_items,
    })
}

/// The whole module as LLVM IR (`ptx == false`) or PTX, headed by the
/// launch list as comments: what `--emit llvm|ptx` writes.
pub fn emit_text(
    func: &Func,
    weights: &dyn WeightSource,
    sm: Sm,
    precision: Precision,
    ptx: bool,
    reference_fallback: bool,
) -> Result<String, Diagnostic> {
    let (_, t) = lowered_and_translated(func, weights, sm, precision, None, reference_fallback)?;
    let body = if ptx {
        ir_parts_to_ptx(&t.llvm, &t.llvm_parts, sm).map_err(|m| Diagnostic::error(m, func.loc.clone()))?
    } else {
        t.llvm.clone()
    };
    let c = if ptx { "//" } else { ";" };
    let mut out = format!(
        "{c} aoc PTX backend, target {sm}, precision {}: {} items, {} kernels\n",
        precision.name(),
        t.plan.items.len(),
        t.kernels
    );
    for (i, (item, o)) in t.plan.items.iter().zip(&t.plan.origins).enumerate() {
        let what = match item {
            GpuItem::Launch(l) => format!("launch {} grid={:?} block={:?} smem={}", l.kernel, l.grid, l.block, l.smem),
            GpuItem::Host { step } => format!("host {}", step.kind()),
        };
        out.push_str(&format!("{c} item {i}: {what}  <- {o}\n"));
    }
    out.push('\n');
    out.push_str(&body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::kernel_family;

    #[test]
    fn kernel_families_drop_hashes_and_indices() {
        assert_eq!(kernel_family("gemm_f32_ea2016aa21d6f2fa"), "gemm_f32");
        assert_eq!(kernel_family("pw12"), "pw");
        assert_eq!(kernel_family("copy_5b08da50abc51ebf"), "copy");
        assert_eq!(kernel_family("softmax"), "softmax");
        assert_eq!(kernel_family("gemm_tc_f16"), "gemm_tc_f16");
    }
}
