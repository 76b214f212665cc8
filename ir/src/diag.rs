//! Diagnostics as data. Library code returns them; only the driver renders
//! them (with file:line:col, the source line and a caret).
//!
//! Messages are lowercase and name the op and the expectation:
//! `core.conv2d: weight rank must be 4, found 3`.

use std::fmt;

/// A byte range in the source text.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Where an op or value came from: a span in an `.air` file and/or the name
/// of the node it was imported from (printed as `loc("name")`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Location {
    pub span: Option<Span>,
    pub name: Option<String>,
}

impl Location {
    pub fn span(span: Span) -> Location {
        Location { span: Some(span), name: None }
    }
    pub fn named(name: impl Into<String>) -> Location {
        Location { span: None, name: Some(name.into()) }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Severity {
    Error,
    Warning,
    Note,
}

/// One diagnostic: a message at a primary location, with optional labels and
/// notes.
#[derive(Clone, PartialEq, Debug)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub loc: Location,
    pub labels: Vec<(Span, String)>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>, loc: Location) -> Diagnostic {
        Diagnostic { severity: Severity::Error, message: message.into(), loc, labels: vec![], notes: vec![] }
    }
    pub fn error_at(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic::error(message, Location::span(span))
    }
    pub fn with_label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push((span, text.into()));
        self
    }
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// A plain one-line rendering for contexts without source text; the CLI
    /// renders spans itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        write!(f, "{sev}: {}", self.message)?;
        if let Some(name) = &self.loc.name {
            write!(f, " (at node \"{name}\")")?;
        }
        for n in &self.notes {
            write!(f, "\n  note: {n}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// For "did you mean" hints: the candidate within a small edit distance of
/// `name` (at most 2, and less than a third of its length), the closest
/// first.
pub fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if name.len() > 64 {
        return None;
    }
    let limit = (name.chars().count() / 3).clamp(1, 2);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Converts a byte offset to a 1-based (line, column), columns in chars.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..source.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}
