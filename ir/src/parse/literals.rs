//! Literals while lowering: numbers, strings (with the escapes the printer
//! writes), attribute values, dense constant payloads checked against their
//! type, and "did you mean" suggestions.
//!
//! Invariant: every bad literal becomes a diagnostic at its own span; these
//! functions never panic.

use super::ast::{self, Dense, LitKind, Literal, Spanned};
use super::lower::Lowerer;
use crate::attr::{Attr, DenseData};
use crate::diag::Span;
use crate::tensor::round_to;
use crate::types::TensorType;

impl Lowerer {
    pub(super) fn attr_value(&mut self, v: &ast::AttrValue) -> Option<Attr> {
        match v {
            ast::AttrValue::Lit(l) => match l.kind {
                LitKind::Int => self.int(&l.text).map(Attr::Int),
                LitKind::Float => Some(Attr::Float(float(l.text.text))),
                LitKind::Bool => Some(Attr::Bool(l.text.text == "true")),
            },
            ast::AttrValue::Str(s) => self.string(s).map(Attr::Str),
            ast::AttrValue::Word(w) => self.scalar(w).map(Attr::Type),
            ast::AttrValue::List(items, _) => {
                let any_float = items.iter().any(|l| l.kind == LitKind::Float);
                let mut ints = Vec::new();
                let mut floats = Vec::new();
                for l in items {
                    match l.kind {
                        LitKind::Bool => {
                            self.error(
                                format!(
                                    "attribute lists hold numbers only, found `{}`",
                                    l.text.text
                                ),
                                l.text.span,
                            );
                            return None;
                        }
                        LitKind::Float => floats.push(float(l.text.text)),
                        LitKind::Int => {
                            let i = self.int(&l.text)?;
                            ints.push(i);
                            floats.push(i as f64);
                        }
                    }
                }
                Some(if any_float {
                    Attr::Floats(floats)
                } else {
                    Attr::Ints(ints)
                })
            }
        }
    }

    /// Checks a dense literal against `ty` and flattens it row-major.
    pub(super) fn dense(&mut self, d: &Dense, ty: &TensorType) -> Option<DenseData> {
        let mut leaves = Vec::new();
        let empty_ok =
            ty.num_elements() == 0 && matches!(d, Dense::List(items, _) if items.is_empty());
        if !empty_ok
            && !matches!(d, Dense::Scalar(_))
            && !self.dense_shape(d, &ty.shape, ty, &mut leaves)
        {
            return None;
        }
        if let Dense::Scalar(l) = d {
            leaves.push(*l);
        }
        let storage = ty.elem.storage();
        let mut ok = true;
        let data = if storage.is_float() {
            let mut out = Vec::with_capacity(leaves.len());
            for l in &leaves {
                match l.kind {
                    LitKind::Float => out.push(round_to(storage, float(l.text.text))),
                    LitKind::Int => match self.int(&l.text) {
                        Some(i) => out.push(round_to(storage, i as f64)),
                        None => ok = false,
                    },
                    LitKind::Bool => {
                        self.error(
                            format!("expected a number for {ty}, found `{}`", l.text.text),
                            l.text.span,
                        );
                        ok = false;
                    }
                }
            }
            DenseData::Floats(out)
        } else {
            let (lo, hi) = storage.int_range().unwrap_or((i64::MIN, i64::MAX));
            let mut out = Vec::with_capacity(leaves.len());
            for l in &leaves {
                let v = match l.kind {
                    LitKind::Bool => Some((l.text.text == "true") as i64),
                    LitKind::Int => self.int(&l.text),
                    LitKind::Float => {
                        self.error(
                            format!("expected an integer for {ty}, found `{}`", l.text.text),
                            l.text.span,
                        );
                        None
                    }
                };
                match v {
                    Some(v) if (lo..=hi).contains(&v) => out.push(v),
                    Some(v) => {
                        self.error(
                            format!("value {v} is out of range for {storage}"),
                            l.text.span,
                        );
                        ok = false;
                    }
                    None => ok = false,
                }
            }
            DenseData::Ints(out)
        };
        ok.then_some(data)
    }

    /// Checks that the nesting of `d` matches `shape`; collects the leaves.
    pub(super) fn dense_shape<'s>(
        &mut self,
        d: &Dense<'s>,
        shape: &[usize],
        ty: &TensorType,
        out: &mut Vec<Literal<'s>>,
    ) -> bool {
        match (d, shape.split_first()) {
            (Dense::Scalar(l), None) => {
                out.push(*l);
                true
            }
            (Dense::Scalar(l), Some((n, _))) => {
                self.error(format!("dense literal does not match {ty}: expected a list of {n} elements, found a number"), l.text.span);
                false
            }
            (Dense::List(_, span), None) => {
                self.error(
                    format!("dense literal does not match {ty}: expected a number, found a list"),
                    *span,
                );
                false
            }
            (Dense::List(items, span), Some((n, rest))) => {
                if items.len() != *n {
                    self.error(
                        format!("dense literal does not match {ty}: expected a list of {n} elements, found {}", items.len()),
                        *span,
                    );
                    return false;
                }
                items
                    .iter()
                    .all(|item| self.dense_shape(item, rest, ty, out))
            }
        }
    }

    pub(super) fn int(&mut self, t: &Spanned) -> Option<i64> {
        match t.text.parse::<i64>() {
            Ok(i) => Some(i),
            Err(_) => {
                self.error(
                    format!("integer `{}` does not fit in 64 bits", t.text),
                    t.span,
                );
                None
            }
        }
    }

    /// `@name` or `@"quoted"`, without the `@`.
    pub(super) fn symbol(&mut self, s: &Spanned) -> String {
        let body = &s.text[1..];
        if body.starts_with('"') {
            let inner = Spanned {
                text: body,
                span: Span::new(s.span.start as usize + 1, s.span.end as usize),
            };
            self.string(&inner).unwrap_or_default()
        } else {
            body.to_string()
        }
    }

    /// Decodes a string literal (with its quotes): the escapes Rust's
    /// `str::escape_default` writes, so printed strings read back exactly.
    pub(super) fn string(&mut self, s: &Spanned) -> Option<String> {
        let inner = &s.text[1..s.text.len() - 1];
        let base = s.span.start as usize + 1;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let decoded = match chars.next() {
                Some((_, 'n')) => Some('\n'),
                Some((_, 't')) => Some('\t'),
                Some((_, 'r')) => Some('\r'),
                Some((_, '0')) => Some('\0'),
                Some((_, c @ ('\\' | '"' | '\''))) => Some(c),
                Some((_, 'u')) => {
                    let rest = &inner[i + 2..];
                    let close = rest.find('}');
                    let code = match close {
                        Some(end) if rest.starts_with('{') && (2..=7).contains(&end) => {
                            u32::from_str_radix(&rest[1..end], 16)
                                .ok()
                                .and_then(char::from_u32)
                        }
                        _ => None,
                    };
                    if let (Some(c), Some(end)) = (code, close) {
                        // Skip `{hex}`.
                        for _ in 0..=end {
                            chars.next();
                        }
                        Some(c)
                    } else {
                        None
                    }
                }
                _ => None,
            };
            match decoded {
                Some(c) => out.push(c),
                None => {
                    let end = inner[i + 1..]
                        .chars()
                        .next()
                        .map_or(i + 1, |c| i + 1 + c.len_utf8());
                    self.error(
                        format!("invalid escape `{}` (expected \\n \\t \\r \\0 \\\\ \\\" \\' or \\u{{hex}})", &inner[i..end]),
                        Span::new(base + i, base + end),
                    );
                    return None;
                }
            }
        }
        Some(out)
    }
}

pub(super) fn float(text: &str) -> f64 {
    match text {
        "nan" => f64::NAN,
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        // The lexer only admits decimal floats, which `parse` always reads
        // (overflowing to infinity).
        t => t.parse().unwrap_or(f64::NAN),
    }
}

pub(super) use crate::diag::nearest;
