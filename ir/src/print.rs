//! The canonical `.air` printer (stub, being written).

use crate::module::Module;

/// Prints a module in canonical form.
pub fn print_module(module: &Module) -> String {
    let _ = module;
    String::new()
}
