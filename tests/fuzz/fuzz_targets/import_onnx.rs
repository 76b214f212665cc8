//! Fuzzes the ONNX importer: any bytes must import or fail with a
//! diagnostic, never panic; what imports must verify and print as text that
//! parses back. Seed it with real models (see README.md): random bytes
//! rarely decode as protobuf.

#![no_main]

use aoc_compiler::onnx::{import_model, ImportOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(imported) = import_model(data, &ImportOptions::default()) else { return };
    let errors = aoc_ir::verify::verify_module(&imported.module);
    assert!(errors.is_empty(), "the importer produced an invalid module: {errors:?}");
    let printed = aoc_ir::print::print_module(&imported.module);
    let (_, diags) = aoc_ir::parse_and_verify(&printed);
    assert!(diags.iter().all(|d| !d.is_error()), "the imported module's text does not parse back: {diags:?}");
});
