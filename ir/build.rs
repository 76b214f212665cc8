//! Generates the `.air` parser from `src/parse/grammar.lalrpop` into
//! `$OUT_DIR` (included by `src/parse/mod.rs`).

fn main() {
    lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .emit_rerun_directives(true)
        .process()
        .expect("the .air grammar must compile");
}
