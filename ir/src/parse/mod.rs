//! The `.air` parser: a logos lexer (`lexer.rs`), an lalrpop grammar
//! (`grammar.lalrpop`, external lexer) that builds a syntax tree
//! (`ast.rs`), and lowering of that tree to a [`Module`] (`lower.rs` for
//! structure and names, `types.rs` for types, `literals.rs` for numbers,
//! strings, attributes and dense payloads).
//! The language is described in `docs/ir.md`.
//!
//! Invariants:
//! - [`parse`] never fails and never panics, on any `&str`;
//! - a syntax error stops parsing: it is the only diagnostic, at the
//!   offending token, and the module is empty;
//! - semantic errors (unknown ops, undefined or duplicate values, bad
//!   attributes or types) are collected, several per run, each at the span
//!   of the text it is about; the module holds what could be built;
//! - the parser does not verify (`crate::parse_and_verify` does both).

pub mod ast;
pub mod lexer;
mod literals;
mod lower;
mod types;

#[cfg(test)]
mod tests;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens, unused_qualifications)]
    grammar,
    "/parse/grammar.rs"
);

use crate::diag::{Diagnostic, Span};
use crate::module::Module;
use lalrpop_util::ParseError;
use lexer::{LexError, Tok};

/// Parses `.air` text. Never fails: returns the module it could build and
/// every diagnostic found. Does not run the verifier.
pub fn parse(source: &str) -> (Module, Vec<Diagnostic>) {
    match grammar::FileParser::new().parse(lexer::Lexer::new(source)) {
        Ok(file) => lower::lower(&file),
        Err(e) => (Module::default(), vec![syntax_error(source, e)]),
    }
}

/// Turns lalrpop's error into one diagnostic at the offending token.
fn syntax_error(source: &str, e: ParseError<usize, Tok<'_>, LexError>) -> Diagnostic {
    match e {
        ParseError::User { error } => Diagnostic::error_at(error.message, error.span),
        ParseError::InvalidToken { location } => {
            let end = source[location.min(source.len())..]
                .chars()
                .next()
                .map_or(location, |c| location + c.len_utf8());
            Diagnostic::error_at("invalid token", Span::new(location, end))
        }
        ParseError::UnrecognizedEof { location, expected } => Diagnostic::error_at(
            format!("{}, found end of input", expectation(&expected)),
            Span::new(location, location),
        ),
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => Diagnostic::error_at(
            format!("{}, found `{tok}`", expectation(&expected)),
            Span::new(l, r),
        ),
        ParseError::ExtraToken { token: (l, tok, r) } => {
            Diagnostic::error_at(format!("unexpected `{tok}`"), Span::new(l, r))
        }
    }
}

/// "expected `x`" or "expected one of `x`, `y`": lalrpop names terminals
/// as quoted grammar strings; classes of tokens read as words.
fn expectation(expected: &[String]) -> String {
    let mut names: Vec<String> = expected
        .iter()
        .map(|e| {
            let bare = e.trim_matches('"');
            match bare {
                "identifier" | "integer" | "float" | "string" => bare.to_string(),
                // Only these dialect types and attributes exist; naming them
                // helps more than naming the token class.
                "dimension" => "a dimension like `4x`".to_string(),
                "!dialect.type" => "`!quant.uniform`".to_string(),
                "#dialect.attr" => "`#sparse.nm`".to_string(),
                _ => format!("`{bare}`"),
            }
        })
        .collect();
    names.sort();
    names.dedup();
    match names.as_slice() {
        [] => "unexpected token".to_string(),
        [one] => format!("expected {one}"),
        many => format!("expected one of {}", many.join(", ")),
    }
}
