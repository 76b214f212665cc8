//! The `.air` lexer (logos), adapted to the token stream lalrpop expects.
//!
//! Tokens borrow their text from the source; nothing is converted here
//! (numbers, escapes and dimension sizes are checked while lowering, where a
//! bad one becomes a diagnostic with its span instead of a syntax error).
//!
//! Invariants: the lexer never panics on any `&str`; it reports the first
//! bad token as an error and then ends; brackets nest at most
//! [`MAX_NESTING`] deep, so later stages may recurse over the syntax tree.

use crate::diag::Span;
use logos::Logos;
use std::fmt;

/// The deepest nesting of `(`, `[`, `{` and `<` accepted. The syntax tree is
/// walked recursively (and dropped recursively), so depth must be bounded.
pub const MAX_NESTING: usize = 128;

#[derive(Logos, Copy, Clone, Debug, PartialEq, Eq)]
#[logos(skip r"[ \t\r\n\f]+")]
// A comment runs to the end of its line, so the greedy repetition is meant.
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Tok<'s> {
    #[token("func")]
    Func,
    #[token("weights")]
    Weights,
    #[token("return")]
    Return,
    #[token("yield")]
    Yield,
    #[token("dense")]
    Dense,
    #[token("tensor")]
    Tensor,
    #[token("loc")]
    Loc,
    #[token("true")]
    True,
    #[token("false")]
    False,
    #[token("nan")]
    Nan,
    #[token("inf")]
    Inf,
    #[token("-inf")]
    NegInf,

    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("<")]
    Lt,
    #[token(">")]
    Gt,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("=")]
    Eq,
    #[token("->")]
    Arrow,

    /// `%name`: an SSA value.
    #[regex(r"%[A-Za-z0-9_.$\-]+", |lex| lex.slice())]
    Value(&'s str),
    /// `@name` or `@"any name"`: a function or weights file.
    #[regex(r"@[A-Za-z0-9_.$\-]+", |lex| lex.slice())]
    #[regex(r#"@"([^"\\\n]|\\[^\n])*""#, |lex| lex.slice())]
    Symbol(&'s str),
    /// `^bb0`: a block label.
    #[regex(r"\^[A-Za-z0-9_.$\-]+", |lex| lex.slice())]
    Label(&'s str),
    /// `!quant.uniform`: a dialect type.
    #[regex(r"![A-Za-z_][A-Za-z0-9_.]*", |lex| lex.slice())]
    BangName(&'s str),
    /// `#sparse.nm`: a dialect attribute (tensor encodings).
    #[regex(r"#[A-Za-z_][A-Za-z0-9_.]*", |lex| lex.slice())]
    HashName(&'s str),
    /// Bare words: op names (`core.conv2d`, `const`), attribute names,
    /// element types (`f32`).
    #[regex(r"[A-Za-z_][A-Za-z0-9_.]*", |lex| lex.slice())]
    Ident(&'s str),
    /// A dimension inside `tensor<...>`: digits directly followed by `x`.
    /// Lexing `224x` as one token keeps `1x3xf32` unambiguous.
    #[regex(r"[0-9]+x", |lex| lex.slice())]
    Dim(&'s str),
    #[regex(r"-?[0-9]+", |lex| lex.slice())]
    Int(&'s str),
    #[regex(r"-?[0-9]+\.[0-9]+([eE][+\-]?[0-9]+)?", |lex| lex.slice())]
    #[regex(r"-?[0-9]+[eE][+\-]?[0-9]+", |lex| lex.slice())]
    Float(&'s str),
    /// A string literal with its quotes; escapes are decoded when lowering.
    #[regex(r#""([^"\\\n]|\\[^\n])*""#, |lex| lex.slice())]
    Str(&'s str),
}

impl fmt::Display for Tok<'_> {
    /// The token as written (used in "found `...`").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Func => "func",
            Tok::Weights => "weights",
            Tok::Return => "return",
            Tok::Yield => "yield",
            Tok::Dense => "dense",
            Tok::Tensor => "tensor",
            Tok::Loc => "loc",
            Tok::True => "true",
            Tok::False => "false",
            Tok::Nan => "nan",
            Tok::Inf => "inf",
            Tok::NegInf => "-inf",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Lt => "<",
            Tok::Gt => ">",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Eq => "=",
            Tok::Arrow => "->",
            Tok::Value(s)
            | Tok::Symbol(s)
            | Tok::Label(s)
            | Tok::BangName(s)
            | Tok::HashName(s)
            | Tok::Ident(s)
            | Tok::Dim(s)
            | Tok::Int(s)
            | Tok::Float(s)
            | Tok::Str(s) => s,
        };
        f.write_str(s)
    }
}

/// A lexical error: a bad character, an unterminated string, or nesting
/// deeper than [`MAX_NESTING`].
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    pub span: Span,
    pub message: String,
}

/// The token stream for the lalrpop parser: `(start, token, end)` triples.
pub struct Lexer<'s> {
    inner: logos::Lexer<'s, Tok<'s>>,
    source: &'s str,
    depth: usize,
    done: bool,
}

impl<'s> Lexer<'s> {
    pub fn new(source: &'s str) -> Lexer<'s> {
        Lexer {
            inner: Tok::lexer(source),
            source,
            depth: 0,
            done: false,
        }
    }

    fn error(&mut self, span: std::ops::Range<usize>) -> LexError {
        self.done = true;
        let text = &self.source[span.clone()];
        let message = if text.starts_with('"') || text.starts_with("@\"") {
            "unterminated string (strings end on the same line)".to_string()
        } else {
            match text.chars().next() {
                Some(c) if c.is_ascii_graphic() => format!("unexpected character `{c}`"),
                Some(c) => format!("unexpected character {:?}", c),
                None => "unexpected end of input".to_string(),
            }
        };
        // Point at the first character only, so the caret is precise.
        let first = text.chars().next().map_or(0, char::len_utf8);
        LexError {
            span: Span::new(span.start, span.start + first),
            message,
        }
    }
}

impl<'s> Iterator for Lexer<'s> {
    type Item = Result<(usize, Tok<'s>, usize), LexError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let tok = self.inner.next()?;
        let span = self.inner.span();
        let tok = match tok {
            Ok(t) => t,
            Err(()) => return Some(Err(self.error(span))),
        };
        match tok {
            Tok::LParen | Tok::LBrace | Tok::LBracket | Tok::Lt => {
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    self.done = true;
                    return Some(Err(LexError {
                        span: Span::new(span.start, span.end),
                        message: format!("brackets nest deeper than {MAX_NESTING} levels"),
                    }));
                }
            }
            Tok::RParen | Tok::RBrace | Tok::RBracket | Tok::Gt => {
                self.depth = self.depth.saturating_sub(1)
            }
            _ => {}
        }
        Some(Ok((span.start, tok, span.end)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(s: &str) -> Vec<Tok<'_>> {
        Lexer::new(s).map(|t| t.expect("lexes").1).collect()
    }

    #[test]
    fn dims_split_from_the_element_type() {
        assert_eq!(
            lex("tensor<1x3x224x224xf32>"),
            vec![
                Tok::Tensor,
                Tok::Lt,
                Tok::Dim("1x"),
                Tok::Dim("3x"),
                Tok::Dim("224x"),
                Tok::Dim("224x"),
                Tok::Ident("f32"),
                Tok::Gt
            ]
        );
        assert_eq!(lex("tensor<f8E4M3FN>")[2], Tok::Ident("f8E4M3FN"));
        assert_eq!(
            lex("4x!quant.uniform<")[..2],
            [Tok::Dim("4x"), Tok::BangName("!quant.uniform")]
        );
        assert_eq!(
            lex("0x3xi1"),
            vec![Tok::Dim("0x"), Tok::Dim("3x"), Tok::Ident("i1")]
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(
            lex("1 -2 1.0 1e-5 -2.5e+3 nan inf -inf 0.0157:-3"),
            vec![
                Tok::Int("1"),
                Tok::Int("-2"),
                Tok::Float("1.0"),
                Tok::Float("1e-5"),
                Tok::Float("-2.5e+3"),
                Tok::Nan,
                Tok::Inf,
                Tok::NegInf,
                Tok::Float("0.0157"),
                Tok::Colon,
                Tok::Int("-3"),
            ]
        );
    }

    #[test]
    fn names_keywords_and_comments() {
        assert_eq!(
            lex(
                "%input.1 = core.conv2d // a comment\n @w[\"k\"] ^bb0 #sparse.nm const tensorx -> return"
            ),
            vec![
                Tok::Value("%input.1"),
                Tok::Eq,
                Tok::Ident("core.conv2d"),
                Tok::Symbol("@w"),
                Tok::LBracket,
                Tok::Str("\"k\""),
                Tok::RBracket,
                Tok::Label("^bb0"),
                Tok::HashName("#sparse.nm"),
                Tok::Ident("const"),
                Tok::Ident("tensorx"),
                Tok::Arrow,
                Tok::Return,
            ]
        );
        assert_eq!(
            lex(r#""a\"b\\" @"odd name""#),
            vec![Tok::Str(r#""a\"b\\""#), Tok::Symbol("@\"odd name\"")]
        );
        assert_eq!(lex("%x-1 %$a"), vec![Tok::Value("%x-1"), Tok::Value("%$a")]);
    }

    #[test]
    fn errors_stop_the_stream() {
        let toks: Vec<_> = Lexer::new("%a ? %b").collect();
        assert_eq!(toks.len(), 2);
        let err = toks[1].clone().unwrap_err();
        assert_eq!(err.message, "unexpected character `?`");
        assert_eq!(err.span, Span::new(3, 4));
        let err = Lexer::new("\"abc\n\"").find_map(Result::err).unwrap();
        assert!(
            err.message.starts_with("unterminated string"),
            "{}",
            err.message
        );
        let deep = "[".repeat(MAX_NESTING + 1);
        let err = Lexer::new(&deep).find_map(Result::err).unwrap();
        assert_eq!(err.span, Span::new(MAX_NESTING, MAX_NESTING + 1));
        // A lone `%` or `-` is not a token.
        assert!(Lexer::new("%").any(|t| t.is_err()));
        assert!(Lexer::new("- 1").any(|t| t.is_err()));
    }
}
