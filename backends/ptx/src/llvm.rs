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

/// [`ir_to_ptx`] of the module `whole`, split as `parts` (from
/// `ModuleText::split`), each part lowered on its own thread (threads up
/// to the machine's cores), the PTX texts joined: one header, the
/// `.extern` declarations once, then every part's kernels in part order.
/// Should two parts define the same module-level symbol (a helper LLVM did
/// not inline, a global), the whole module is lowered at once instead.
pub fn ir_parts_to_ptx(whole: &str, parts: &[String], sm: Sm) -> Result<String, String> {
    if parts.len() <= 1 {
        return ir_to_ptx(whole, sm);
    }
    init();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(parts.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Result<String, String>>> = vec![None; parts.len()];
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(p) = parts.get(i) else { break };
                        done.push((i, ir_to_ptx(p, sm)));
                    }
                    done
                })
            })
            .collect();
        for w in workers {
            for (i, r) in w.join().expect("a code generation thread panicked") {
                out[i] = Some(r);
            }
        }
    });
    let ptx: Vec<String> = out.into_iter().map(|r| r.expect("every part lowered")).collect::<Result<_, _>>()?;
    match join_ptx(&ptx) {
        Some(joined) => Ok(joined),
        None => ir_to_ptx(whole, sm),
    }
}

/// Joins PTX modules of one target: `None` when two define the same
/// module-level line other than an `.extern` declaration.
pub fn join_ptx(parts: &[String]) -> Option<String> {
    let mut header = String::new();
    let mut externs: Vec<&str> = Vec::new();
    let mut bodies = String::new();
    let mut defined = std::collections::HashSet::new();
    for (n, p) in parts.iter().enumerate() {
        let mut in_header = true;
        for line in p.lines() {
            if in_header {
                if n == 0 {
                    header.push_str(line);
                    header.push('\n');
                }
                if line.starts_with(".address_size") {
                    in_header = false;
                }
                continue;
            }
            if line.starts_with(".extern") {
                if !externs.contains(&line) {
                    externs.push(line);
                }
                continue;
            }
            let module_level = line.starts_with('.')
                && !line.starts_with(".visible .entry")
                && !line.starts_with(".entry")
                && !line.starts_with(".reg")
                && !line.starts_with(".maxntid")
                && !line.starts_with(".reqntid")
                && !line.starts_with(".maxnreg")
                && !line.starts_with(".minnctapersm");
            if module_level && !defined.insert(line.to_string()) {
                return None;
            }
            bodies.push_str(line);
            bodies.push('\n');
        }
    }
    let mut out = header;
    out.push('\n');
    for e in externs {
        out.push_str(e);
        out.push('\n');
    }
    out.push_str(&bodies);
    Some(out)
}
