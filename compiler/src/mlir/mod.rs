//! MLIR interop through melior (MLIR 22's C API), behind the `mlir` cargo
//! feature: `aoc export --format mlir` writes a module of `func.func` with
//! TOSA ops (plus `quant` casts, `arith.divf` and `math` where TOSA has no
//! op), and `aoc import x.mlir` / `aoc compile x.mlir` read TOSA and linalg
//! named ops back (docs/mlir.md has the mapping table).
//!
//! Invariants:
//! - every module goes through MLIR itself: export builds operations with
//!   melior's `OperationBuilder` and runs MLIR's verifier before any text
//!   exists; import parses with MLIR's parser and verifier, so malformed
//!   input is rejected with MLIR's own diagnostic and location;
//! - neither direction panics on user input: an unsupported op, type or
//!   attribute is an `Err` naming it and its location (`file:line:col`);
//! - layouts: aoc is NCHW/OIHW, TOSA NHWC/OHWI; each direction inserts the
//!   transposes (constant weights are transposed at import time), so
//!   `.air -> .mlir -> .air` computes the same numbers.

mod export;
mod import;
mod types;

pub use export::{ExportOptions, export_module};
pub use import::{ImportedMlir, import_mlir};

use melior::Context;
use melior::dialect::DialectRegistry;
use melior::ir::Location;
use std::cell::RefCell;
use std::rc::Rc;

/// An MLIR context with every upstream dialect loaded and a handler that
/// keeps MLIR's diagnostics (message and location) instead of printing them.
pub(crate) struct Mlir {
    pub ctx: Context,
    diags: Rc<RefCell<Vec<String>>>,
}

impl Mlir {
    pub fn new() -> Mlir {
        let registry = DialectRegistry::new();
        melior::utility::register_all_dialects(&registry);
        let ctx = Context::new_with_threading(false);
        ctx.append_dialect_registry(&registry);
        ctx.load_all_available_dialects();
        let diags: Rc<RefCell<Vec<String>>> = Rc::default();
        let sink = diags.clone();
        ctx.attach_diagnostic_handler(move |d| {
            let sev = match d.severity() {
                melior::diagnostic::DiagnosticSeverity::Error => "error",
                melior::diagnostic::DiagnosticSeverity::Warning => "warning",
                melior::diagnostic::DiagnosticSeverity::Note => "note",
                melior::diagnostic::DiagnosticSeverity::Remark => "remark",
            };
            let mut text = format!("{}: {sev}: {}", loc_text(&d.location()), d);
            for i in 0..d.note_count() {
                if let Ok(n) = d.note(i) {
                    text.push_str(&format!("\n{}: note: {}", loc_text(&n.location()), n));
                }
            }
            sink.borrow_mut().push(text);
            true
        });
        Mlir { ctx, diags }
    }

    /// The diagnostics MLIR reported since the last call, one per line.
    pub fn take_diagnostics(&self) -> String {
        std::mem::take(&mut *self.diags.borrow_mut()).join("\n")
    }
}

/// A location as `file:line:col` (the innermost file location of a name,
/// call-site or fused location), or MLIR's own text when there is none.
pub(crate) fn loc_text(loc: &Location) -> String {
    match file_line_col(loc) {
        Some((f, l, c)) => format!("{f}:{l}:{c}"),
        None => loc.to_string(),
    }
}

/// The file, line and column of `loc`, looking through names, call sites
/// and fused locations.
pub(crate) fn file_line_col(loc: &Location) -> Option<(String, usize, usize)> {
    if loc.is_file_line_col_range() {
        let f = loc.file_line_col_range_filename();
        return Some((
            f.as_string_ref().as_str().unwrap_or("?").to_string(),
            loc.file_line_col_range_start_line(),
            loc.file_line_col_range_start_column(),
        ));
    }
    if loc.is_name() {
        return file_line_col(&loc.name_child_location());
    }
    if loc.is_call_site() {
        return file_line_col(&loc.call_site_callee());
    }
    if loc.is_fused() {
        return (0..loc.fused_num_locations()).find_map(|i| file_line_col(&loc.fused_location(i)));
    }
    None
}

/// The name of a name location (`loc("conv1/Conv"(...))`), if `loc` is one.
pub(crate) fn loc_name(loc: &Location) -> Option<String> {
    if loc.is_name() {
        return loc.name_value().as_string_ref().as_str().ok().map(str::to_string);
    }
    if loc.is_fused() {
        return (0..loc.fused_num_locations()).find_map(|i| loc_name(&loc.fused_location(i)));
    }
    None
}
