//! Generates `docs/ops.md` from the op table, so the reference can never
//! drift from the code (a test compares the committed file with this output).

use crate::attr::AttrDefault;
use crate::ops::{Arity, Format, Opcode, Trait};
use std::fmt::Write;

fn default_text(d: AttrDefault) -> String {
    match d {
        AttrDefault::Required => "required".to_string(),
        AttrDefault::Optional => "optional".to_string(),
        other => format!("`{}`", other.value().expect("a default with a value")),
    }
}

/// The Markdown reference of every op, grouped by dialect, in table order.
pub fn ops_markdown() -> String {
    let mut out = String::new();
    out.push_str("# aoc ops\n\n");
    out.push_str("<!-- generated from the op table in ir/src/ops/mod.rs; regenerate with `AOC_BLESS=1 cargo test -p aoc-ir --test ops_doc` -->\n\n");
    out.push_str("Every op aoc knows, generated from its one declaration in the op table. ");
    out.push_str("Types and syntax are described in [ir.md](ir.md). Attributes equal to their default are omitted when printing.\n\n");
    let mut dialect = "";
    for &op in Opcode::ALL {
        let info = op.info();
        let d = info.name.split_once('.').map_or("builtin", |(d, _)| d);
        if d != dialect {
            dialect = d;
            let _ = writeln!(out, "## `{d}` dialect\n");
        }
        let _ = writeln!(out, "### `{}`\n", info.name);
        let _ = writeln!(out, "{}\n", info.summary);
        let _ = writeln!(out, "```\n{}\n```\n", info.example);
        if !info.operands.is_empty() {
            let list: Vec<String> = info
                .operands
                .iter()
                .map(|o| match o.arity {
                    Arity::One => format!("`{}`", o.name),
                    Arity::Optional => format!("`{}` (optional)", o.name),
                    Arity::Variadic => format!("`{}` (one or more)", o.name),
                    Arity::Many => format!("`{}` (zero or more)", o.name),
                })
                .collect();
            let _ = writeln!(out, "Operands: {}.\n", list.join(", "));
        }
        if !info.attrs.is_empty() {
            out.push_str("| attribute | kind | default | meaning |\n| --- | --- | --- | --- |\n");
            for a in info.attrs {
                let _ = writeln!(out, "| `{}` | {} | {} | {} |", a.name, a.kind.name(), default_text(a.default), a.doc);
            }
            out.push('\n');
        }
        let traits: Vec<&str> = info
            .traits
            .iter()
            .map(|t| match t {
                Trait::Pure => "pure",
                Trait::Elementwise => "elementwise",
                Trait::Commutative => "commutative",
                Trait::DataMovement => "data movement",
                Trait::View => "view (shares its operand's memory)",
                Trait::DeclaredResult => "result type written explicitly",
                Trait::Epilogue => "epilogue region (optional)",
            })
            .collect();
        let format = match info.format {
            Format::Generic => "generic",
            Format::Const => "constant",
        };
        let _ = writeln!(out, "Kind: `{:?}`. Traits: {}. Format: {format}.\n", info.kind, traits.join(", "));
    }
    out
}
