//! LLVM IR text → PTX text, through inkwell and LLVM's NVPTX backend.
//!
//! Steps: parse the text into a fresh context, set the target triple and the
//! NVPTX data layout, verify, optimize with the `default<O3>` pipeline (which
//! also promotes the generators' `alloca`s to registers and inlines the math
//! helpers), then print PTX assembly.
//!
//! Invariants:
//! - Nothing here is global but LLVM's target registry, initialized once.
//! - Errors name the step and carry LLVM's message; a parse or verify error
//!   is a bug in a generator, never a user error, and says so.
//! - The pipeline keeps IEEE semantics: no fast-math flags are added, so
//!   `fdiv` stays `div.rn.f32` and `sqrt` stays `sqrt.rn.f32`.

use std::sync::Once;

use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};

use crate::target::Sm;

const TRIPLE: &str = "nvptx64-nvidia-cuda";

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| Target::initialize_nvptx(&InitializationConfig::default()));
}

fn target_machine(sm: Sm) -> Result<TargetMachine, String> {
    init();
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple)
        .map_err(|e| format!("llvm has no nvptx target: {}", e.to_string_lossy()))?;
    target
        .create_target_machine(
            &triple,
            sm.name(),
            &sm.ptx_feature(),
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| format!("llvm cannot create an nvptx target machine for {sm}"))
}

/// Lowers a module of LLVM IR text to PTX text for `sm`.
pub fn ir_to_ptx(ir: &str, sm: Sm) -> Result<String, String> {
    let tm = target_machine(sm)?;
    let context = Context::create();
    let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "aoc");
    let module = context.create_module_from_ir(buf).map_err(|e| {
        format!(
            "internal error (please report): generated llvm ir does not parse: {}",
            e.to_string_lossy()
        )
    })?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module.verify().map_err(|e| {
        format!(
            "internal error (please report): generated llvm ir is invalid: {}",
            e.to_string_lossy()
        )
    })?;
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|e| format!("llvm optimization failed: {}", e.to_string_lossy()))?;
    let asm = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| format!("llvm nvptx code generation failed: {}", e.to_string_lossy()))?;
    String::from_utf8(asm.as_slice().to_vec())
        .map_err(|_| "llvm produced ptx that is not utf-8".to_string())
}
