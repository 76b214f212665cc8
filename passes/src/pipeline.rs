//! The pipeline text: `fold-bn,fuse{max-ops=8},winograd,qdq` or `default`.
//!
//! Grammar (whitespace allowed between tokens):
//! `pipeline := item (',' item)*`, `item := name ('{' option (',' option)* '}')?`,
//! `option := key '=' value`; names and keys are kebab-case; a value runs to
//! the next `,` or `}`. `default` stands for the passes the registry marks as
//! default, in registry order.
//!
//! Invariant: every diagnostic's span is a byte range of the pipeline text
//! (not of any source file); the driver renders it under the `--passes`
//! string.

use crate::pass::RawOption;
use crate::registry::PassEntry;
use aoc_ir::{Diagnostic, Span};

/// One pass as written in a pipeline.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineItem {
    pub name: String,
    pub span: Span,
    pub options: Vec<RawOption>,
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while self.text[self.pos..].starts_with(|c: char| c.is_whitespace()) {
            self.pos += self.text[self.pos..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
        }
    }
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }
    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }
    /// A kebab-case word; empty when none is here.
    fn word(&mut self) -> (String, Span) {
        self.skip_ws();
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.pos += 1;
        }
        (
            self.text[start..self.pos].to_string(),
            Span::new(start, self.pos),
        )
    }
    fn here(&self) -> Span {
        let end = self.pos + self.peek().map_or(0, char::len_utf8);
        Span::new(self.pos, end)
    }
    fn unexpected(&self, expected: &str) -> Diagnostic {
        let found = match self.peek() {
            Some(c) => format!("`{c}`"),
            None => "the end of the pipeline".to_string(),
        };
        Diagnostic::error_at(format!("expected {expected}, found {found}"), self.here())
    }
}

/// Parses pipeline text into items (without looking names up).
pub fn parse_pipeline(text: &str) -> Result<Vec<PipelineItem>, Diagnostic> {
    let mut c = Cursor { text, pos: 0 };
    let mut items = Vec::new();
    loop {
        let (name, span) = c.word();
        if name.is_empty() {
            return Err(c.unexpected("a pass name"));
        }
        let mut options = Vec::new();
        if c.eat('{') {
            loop {
                let (key, key_span) = c.word();
                if key.is_empty() {
                    return Err(c.unexpected("an option name"));
                }
                if !c.eat('=') {
                    return Err(c.unexpected("`=` after the option name"));
                }
                c.skip_ws();
                let start = c.pos;
                while c.peek().is_some_and(|ch| ch != ',' && ch != '}') {
                    c.pos += c.peek().map_or(1, char::len_utf8);
                }
                let raw = &text[start..c.pos];
                let value = raw.trim_end().to_string();
                let value_span = Span::new(start, start + value.len());
                if value.is_empty() {
                    return Err(Diagnostic::error_at(
                        format!("option `{key}` needs a value"),
                        value_span,
                    ));
                }
                options.push(RawOption {
                    key,
                    value,
                    key_span,
                    value_span,
                });
                if c.eat(',') {
                    continue;
                }
                if c.eat('}') {
                    break;
                }
                return Err(c.unexpected("`,` or `}`"));
            }
        }
        items.push(PipelineItem {
            name,
            span,
            options,
        });
        if c.eat(',') {
            continue;
        }
        c.skip_ws();
        if c.peek().is_none() {
            return Ok(items);
        }
        return Err(c.unexpected("`,` between passes"));
    }
}

/// Looks every item up in `entries` and expands `default`. Returns the
/// entries with their options, in run order.
pub fn resolve<'e>(
    items: &[PipelineItem],
    entries: &'e [PassEntry],
) -> Result<Vec<(&'e PassEntry, PipelineItem)>, Diagnostic> {
    let mut out = Vec::new();
    for item in items {
        if item.name == "default" {
            if let Some(o) = item.options.first() {
                return Err(Diagnostic::error_at(
                    "`default` takes no options",
                    o.key_span,
                ));
            }
            for e in entries.iter().filter(|e| e.in_default) {
                out.push((
                    e,
                    PipelineItem {
                        name: e.name.to_string(),
                        span: item.span,
                        options: vec![],
                    },
                ));
            }
            continue;
        }
        match entries.iter().find(|e| e.name == item.name) {
            Some(e) => out.push((e, item.clone())),
            None => {
                let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
                let mut msg = format!("unknown pass `{}`", item.name);
                if let Some(s) = aoc_ir::diag::nearest(&item.name, names.iter().copied()) {
                    msg.push_str(&format!("; did you mean `{s}`?"));
                }
                return Err(Diagnostic::error_at(msg, item.span)
                .with_note(format!("known passes: default, {}", names.join(", "))));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_options_with_spans() {
        let text = "fold-bn, fuse{max-ops=8, x = y },qdq";
        let items = parse_pipeline(text).unwrap();
        assert_eq!(
            items.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            ["fold-bn", "fuse", "qdq"]
        );
        assert_eq!(items[0].span, Span::new(0, 7));
        assert_eq!(items[1].span, Span::new(9, 13));
        let o = &items[1].options;
        assert_eq!((o[0].key.as_str(), o[0].value.as_str()), ("max-ops", "8"));
        assert_eq!(o[0].key_span, Span::new(14, 21));
        assert_eq!(o[0].value_span, Span::new(22, 23));
        assert_eq!((o[1].key.as_str(), o[1].value.as_str()), ("x", "y"));
        assert_eq!(&text[o[1].value_span.range()], "y");
        assert_eq!(items[2].span, Span::new(33, 36));
        assert_eq!(&text[items[2].span.range()], "qdq");
    }

    #[test]
    fn syntax_errors_point_at_the_column() {
        let e = parse_pipeline("a,,b").unwrap_err();
        assert_eq!(e.message, "expected a pass name, found `,`");
        assert_eq!(e.loc.span, Some(Span::new(2, 3)));
        let e = parse_pipeline("a{k}").unwrap_err();
        assert_eq!(e.message, "expected `=` after the option name, found `}`");
        assert_eq!(e.loc.span, Some(Span::new(3, 4)));
        let e = parse_pipeline("a{k=1").unwrap_err();
        assert_eq!(
            e.message,
            "expected `,` or `}`, found the end of the pipeline"
        );
        let e = parse_pipeline("a b").unwrap_err();
        assert_eq!(e.message, "expected `,` between passes, found `b`");
        assert_eq!(e.loc.span, Some(Span::new(2, 3)));
        assert!(parse_pipeline("").is_err());
    }

    #[test]
    fn unknown_pass_is_reported_at_its_name() {
        let text = "algebraic,nope";
        let items = parse_pipeline(text).unwrap();
        let e = resolve(&items, crate::registry::registry()).unwrap_err();
        assert_eq!(e.message, "unknown pass `nope`");
        assert_eq!(e.loc.span, Some(Span::new(10, 14)));
        assert!(e.notes[0].contains("algebraic"));
        let items = parse_pipeline("fold-bn,fuze").unwrap();
        let e = resolve(&items, crate::registry::registry()).unwrap_err();
        assert_eq!(e.message, "unknown pass `fuze`; did you mean `fuse`?");
    }

    #[test]
    fn default_expands_to_the_default_passes() {
        let items = parse_pipeline("default").unwrap();
        let r = resolve(&items, crate::registry::registry()).unwrap();
        let want: Vec<&str> = crate::registry::registry()
            .iter()
            .filter(|e| e.in_default)
            .map(|e| e.name)
            .collect();
        assert!(!want.is_empty());
        assert_eq!(r.iter().map(|(e, _)| e.name).collect::<Vec<_>>(), want);
    }
}
