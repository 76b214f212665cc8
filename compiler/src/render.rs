//! Renders diagnostics for people: `file:line:col`, the source line, a caret
//! under the span, labels and notes (codespan-reporting). Diagnostics without
//! a span but with a node name (from an imported model) render as
//! `error: message (at node "name")`.
//!
//! Invariant: rendering never fails or panics, whatever the spans say: spans
//! are clamped to the source and to character boundaries first (a bad span
//! is a bug elsewhere, but the user must still see the message).

use aoc_ir::diag::{Diagnostic, Severity, Span};
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label, Severity as CsSeverity};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Config};
use std::io::IsTerminal;
use std::ops::Range;

/// Renders `diags` about `source` (named `file_name` in the output) as plain
/// text, one after another.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str) -> String {
    let file = SimpleFile::new(file_name, source);
    let config = Config::default();
    let mut out = String::new();
    for d in diags {
        match to_codespan(d, source) {
            Some(cs) => {
                if term::emit_to_string(&mut out, &config, &file, &cs).is_err() {
                    // Unreachable with clamped spans; keep the message anyway.
                    out.push_str(&format!("{d}\n"));
                }
            }
            None => out.push_str(&format!("{}\n", plain(d, Some(file_name)))),
        }
    }
    out
}

/// Renders diagnostics that have no source text (e.g. from the ONNX
/// importer) as `error: message (at node "name")` lines, prefixed by the
/// input's file name.
pub fn render_plain(diags: &[Diagnostic], file_name: &str) -> String {
    diags
        .iter()
        .map(|d| format!("{}\n", plain(d, Some(file_name))))
        .collect()
}

/// Writes rendered diagnostics to stderr, in colour when stderr is a
/// terminal.
pub fn emit_stderr(diags: &[Diagnostic], file_name: &str, source: &str) {
    if !std::io::stderr().is_terminal() {
        eprint!("{}", render(diags, file_name, source));
        return;
    }
    use term::termcolor::{ColorChoice, StandardStream};
    let file = SimpleFile::new(file_name, source);
    let config = Config::default();
    let w = StandardStream::stderr(ColorChoice::Auto);
    for d in diags {
        let done = to_codespan(d, source).is_some_and(|cs| {
            term::emit_to_write_style(&mut w.lock(), &config, &file, &cs).is_ok()
        });
        if !done {
            eprintln!("{}", plain(d, Some(file_name)));
        }
    }
}

fn severity(s: Severity) -> CsSeverity {
    match s {
        Severity::Error => CsSeverity::Error,
        Severity::Warning => CsSeverity::Warning,
        Severity::Note => CsSeverity::Note,
    }
}

/// The codespan form of a spanned diagnostic; `None` when it has no span.
fn to_codespan(d: &Diagnostic, source: &str) -> Option<CsDiagnostic<()>> {
    let span = d.loc.span?;
    let mut labels = vec![Label::primary((), clamp(span, source))];
    for (s, text) in &d.labels {
        labels.push(Label::secondary((), clamp(*s, source)).with_message(text.clone()));
    }
    let mut notes = d.notes.clone();
    if let Some(name) = &d.loc.name {
        notes.push(format!("imported from node \"{name}\""));
    }
    Some(
        CsDiagnostic::new(severity(d.severity))
            .with_message(d.message.clone())
            .with_labels(labels)
            .with_notes(notes),
    )
}

/// A span moved inside `source` and onto character boundaries.
fn clamp(span: Span, source: &str) -> Range<usize> {
    let start = source.floor_char_boundary((span.start as usize).min(source.len()));
    let end = source.ceil_char_boundary((span.end as usize).clamp(start, source.len()));
    start..end
}

/// One-line form: `file: error: message (at node "name")` plus notes.
fn plain(d: &Diagnostic, file_name: Option<&str>) -> String {
    match file_name {
        Some(f) if !f.is_empty() => format!("{f}: {d}"),
        _ => d.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aoc_ir::diag::Location;

    #[test]
    fn renders_file_line_col_and_caret() {
        let src = "func @f() {\n  %y = core.relu %x : tensor<2xf32>\n}\n";
        let at = src.find("%x").unwrap();
        let d = Diagnostic::error_at("undefined value %x", Span::new(at, at + 2))
            .with_note("define it first");
        let out = render(&[d], "m.air", src);
        assert!(out.contains("error: undefined value %x"), "{out}");
        assert!(out.contains("m.air:2:18"), "{out}");
        assert!(out.contains("%y = core.relu %x : tensor<2xf32>"), "{out}");
        assert!(out.contains("^^"), "{out}");
        assert!(out.contains("= define it first"), "{out}");
    }

    #[test]
    fn survives_bad_spans_and_missing_spans() {
        let src = "héllo\n";
        let d = Diagnostic::error_at("odd", Span::new(2, 400));
        assert!(render(&[d], "x.air", src).contains("x.air:1:2"));
        let d = Diagnostic::error_at("at end", Span::new(src.len(), src.len()));
        assert!(render(&[d], "x.air", src).contains("error: at end"));
        let d = Diagnostic::error("unsupported op", Location::named("conv_1"));
        assert_eq!(
            render(std::slice::from_ref(&d), "m.onnx", ""),
            "m.onnx: error: unsupported op (at node \"conv_1\")\n"
        );
        assert_eq!(
            render_plain(&[d], "m.onnx"),
            "m.onnx: error: unsupported op (at node \"conv_1\")\n"
        );
    }
}
