//! Fuzzes the `.air` front end: any bytes (decoded lossily as UTF-8) go
//! through parse + verify and diagnostic rendering, which must not panic.
//! When they give a valid module, printing it must give text that parses
//! back without errors and prints identically (print(parse(print(m))) ==
//! print(m)), and small modules are run in the interpreter on zero inputs,
//! which may fail with a diagnostic but must not panic.

#![no_main]

use aoc_ir::interp::NoWeights;
use aoc_ir::{Module, Tensor};
use libfuzzer_sys::fuzz_target;

/// Largest tensor the interpreter is asked to build (keeps runs fast).
const MAX_ELEMENTS: usize = 4096;

fn small(m: &Module) -> bool {
    m.funcs.iter().all(|f| {
        f.values.iter().all(|(_, v)| {
            v.ty.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_some_and(|n| n <= MAX_ELEMENTS)
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (module, diags) = aoc_ir::parse_and_verify(&text);
    let _ = aoc_compiler::render::render(&diags, "fuzz.air", &text);
    if diags.iter().any(|d| d.is_error()) {
        return;
    }
    let printed = aoc_ir::print::print_module(&module);
    let (again, diags) = aoc_ir::parse_and_verify(&printed);
    assert!(
        diags.iter().all(|d| !d.is_error()),
        "the printed module does not parse back:\n{printed}\n{}",
        aoc_compiler::render::render(&diags, "printed.air", &printed)
    );
    assert_eq!(aoc_ir::print::print_module(&again), printed, "printing is not stable");
    if small(&module)
        && let Some(f) = module.entry()
    {
        let inputs = f.params().iter().map(|&p| Tensor::splat(f.ty(p).clone(), 0.0)).collect();
        let _ = aoc_ir::interp::run(f, inputs, &NoWeights);
    }
});
