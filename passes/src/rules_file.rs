//! Rules files: the user's own rewrites (`aoc opt --rules my.rules`).
//!
//! Syntax, one rule a line; `#` starts a comment; blank lines are ignored:
//!
//! ```text
//! # name: LHS => RHS
//! relu-relu: (core.relu (core.relu ?x)) => (core.relu ?x)
//! lrelu-01:  (core.leaky_relu {alpha = 0.1} ?x) => (core.leaky_relu {alpha = 0.1} ?x)
//! ```
//!
//! A term is `?var` or `(op {attr = value, ...} term...)` with an op
//! mnemonic of the op table. Attribute values are integers, floats, `true`/
//! `false`, `"strings"` and `[lists]`. On the left, an op without `{...}`
//! matches any attributes and one with `{...}` matches exactly (unwritten
//! attributes take their defaults); on the right, unwritten attributes take
//! their defaults. A rule applies only where its result has the matched
//! value's type. A fused op's epilogue region is written as the attribute
//! `epilogue = "add; relu"` (the step list `aoc_ir::ops::fused` documents):
//! `(core.fused_conv2d {epilogue = "relu"} ?x ?w)`.
//!
//! Invariant: every malformed line yields a diagnostic whose span is a byte
//! range of the file text (so the driver shows line and column); loading
//! never panics and reports every bad line, not only the first.

use crate::egraph::node::{Node, OpAttrs, OpNode};
use crate::egraph::{Lhs, Rewrite};
use crate::rules::TypedApplier;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::check_operand_count;
use aoc_ir::ops::fused::parse_epilogue;
use aoc_ir::{Diagnostic, Opcode, Span, Trait};
use egg::{ENodeOrVar, Id, PatternAst, Var};
use std::sync::Arc;

/// Parses a rules file into rewrites, or every diagnostic found.
pub fn load_rules(text: &str) -> Result<Vec<Rewrite>, Vec<Diagnostic>> {
    let mut rules = Vec::new();
    let mut diags = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let body = line
            .split('#')
            .next()
            .unwrap_or("")
            .trim_end_matches(['\n', '\r']);
        if body.trim().is_empty() {
            continue;
        }
        match parse_rule(body, start, &names) {
            Ok((name, rw)) => {
                names.push(name);
                rules.push(rw);
            }
            Err(d) => diags.push(d),
        }
    }
    if diags.is_empty() {
        Ok(rules)
    } else {
        Err(diags)
    }
}

struct P<'a> {
    s: &'a str,
    pos: usize,
    base: usize,
}

type R<T> = Result<T, Diagnostic>;

impl<'a> P<'a> {
    fn ws(&mut self) {
        while self.s[self.pos..].starts_with([' ', '\t']) {
            self.pos += 1;
        }
    }
    fn span(&self, a: usize, b: usize) -> Span {
        Span::new(self.base + a, self.base + b)
    }
    fn err(&self, msg: impl Into<String>) -> Diagnostic {
        let end = self.pos + self.s[self.pos..].chars().next().map_or(0, char::len_utf8);
        Diagnostic::error_at(msg, self.span(self.pos, end))
    }
    fn found(&self) -> String {
        match self.s[self.pos..].chars().next() {
            Some(c) => format!("`{c}`"),
            None => "the end of the line".to_string(),
        }
    }
    fn eat(&mut self, t: &str) -> bool {
        self.ws();
        if self.s[self.pos..].starts_with(t) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }
    /// A run of characters allowed in names, mnemonics and numbers.
    fn token(&mut self) -> (usize, &'a str) {
        self.ws();
        let a = self.pos;
        while self.s[self.pos..]
            .starts_with(|c: char| c.is_ascii_alphanumeric() || "._-+".contains(c))
        {
            self.pos += 1;
        }
        let s: &'a str = self.s;
        (a, &s[a..self.pos])
    }
}

fn parse_rule(line: &str, base: usize, names: &[String]) -> R<(String, Rewrite)> {
    let mut p = P {
        s: line,
        pos: 0,
        base,
    };
    let (a, name) = p.token();
    let name = name.to_string();
    if name.is_empty() {
        return Err(p.err(format!("expected a rule name, found {}", p.found())));
    }
    let name_span = p.span(a, p.pos);
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(Diagnostic::error_at(
            format!("rule name `{name}` must be kebab-case (a-z, 0-9, -)"),
            name_span,
        ));
    }
    if names.contains(&name) {
        return Err(Diagnostic::error_at(
            format!("rule `{name}` is defined twice"),
            name_span,
        ));
    }
    if !p.eat(":") {
        return Err(p.err(format!(
            "expected `:` after the rule name, found {}",
            p.found()
        )));
    }
    let mut lhs = PatternAst::default();
    let (lhs_root, lhs_vars) = term(&mut p, &mut lhs, true)?;
    if matches!(lhs[lhs_root], ENodeOrVar::Var(_)) {
        return Err(Diagnostic::error_at(
            "the left-hand side must be an op, not a variable",
            p.span(0, p.pos),
        ));
    }
    if !p.eat("=>") {
        return Err(p.err(format!("expected `=>`, found {}", p.found())));
    }
    let rhs_start = p.pos;
    let mut rhs = PatternAst::default();
    let (_, rhs_vars) = term(&mut p, &mut rhs, false)?;
    p.ws();
    if p.pos < line.len() {
        return Err(p.err(format!("expected the end of the rule, found {}", p.found())));
    }
    for (v, span) in rhs_vars {
        if !lhs_vars.iter().any(|(l, _)| *l == v) {
            return Err(Diagnostic::error_at(
                format!("variable `{v}` is not bound by the left-hand side"),
                span,
            ));
        }
    }
    let rw = Rewrite::new(name.as_str(), Lhs::new(lhs), TypedApplier::new(rhs))
        .map_err(|m| Diagnostic::error_at(m, p.span(rhs_start, line.len())))?;
    Ok((name, rw))
}

/// Parses one term into `ast`; returns its id and the variables it uses.
fn term(p: &mut P, ast: &mut PatternAst<Node>, is_lhs: bool) -> R<(Id, Vec<(Var, Span)>)> {
    p.ws();
    if p.eat("?") {
        let a = p.pos - 1;
        let (_, name) = p.token();
        if name.is_empty() {
            return Err(p.err("expected a variable name after `?`"));
        }
        let span = p.span(a, p.pos);
        let v: Var = format!("?{name}")
            .parse()
            .map_err(|_| Diagnostic::error_at("bad variable name", span))?;
        return Ok((ast.add(ENodeOrVar::Var(v)), vec![(v, span)]));
    }
    if !p.eat("(") {
        return Err(p.err(format!("expected `(` or `?var`, found {}", p.found())));
    }
    let (a, op) = p.token();
    let op_span = p.span(a, p.pos);
    if op.is_empty() {
        return Err(p.err(format!("expected an op mnemonic, found {}", p.found())));
    }
    let opcode = Opcode::from_name(op)
        .ok_or_else(|| Diagnostic::error_at(format!("unknown op `{op}`"), op_span))?;
    if opcode == Opcode::Const || opcode.info().has_trait(Trait::DeclaredResult) {
        return Err(Diagnostic::error_at(
            format!("{op} cannot be written in a rule (its result type is declared)"),
            op_span,
        ));
    }
    let attrs = if p.eat("{") {
        Some(attr_dict(p)?)
    } else {
        None
    };
    let mut children = Vec::new();
    let mut vars = Vec::new();
    loop {
        p.ws();
        if p.eat(")") {
            break;
        }
        if p.pos >= p.s.len() {
            return Err(p.err("expected `)`, found the end of the line"));
        }
        let (id, vs) = term(p, ast, is_lhs)?;
        children.push(id);
        vars.extend(vs);
    }
    check_operand_count(opcode, children.len()).map_err(|m| Diagnostic::error_at(m, op_span))?;
    let attrs = match (attrs, is_lhs) {
        (None, true) => None,
        (given, _) => {
            let mut given = given.unwrap_or_default();
            // A fused op's epilogue region is written as its step list.
            let steps = match given.remove("epilogue") {
                Some(Attr::Str(text)) if opcode.info().has_trait(Trait::Epilogue) => {
                    parse_epilogue(&text).map_err(|m| Diagnostic::error_at(m, op_span))?
                }
                Some(_) if opcode.info().has_trait(Trait::Epilogue) => {
                    return Err(Diagnostic::error_at(
                        "`epilogue` is a string of steps, e.g. \"add; relu\"",
                        op_span,
                    ));
                }
                Some(v) => {
                    given.set("epilogue", v);
                    vec![]
                }
                None => vec![],
            };
            let attrs = OpAttrs::new(opcode, given, None)
                .map_err(|m| Diagnostic::error_at(m, op_span))?;
            Some(Arc::new(attrs.with_epilogue(&steps)))
        }
    };
    Ok((
        ast.add(ENodeOrVar::ENode(Node::Op(OpNode {
            opcode,
            attrs,
            children,
        }))),
        vars,
    ))
}

/// `{k = v, ...}` after the opening brace.
fn attr_dict(p: &mut P) -> R<Attrs> {
    let mut attrs = Attrs::new();
    if p.eat("}") {
        return Ok(attrs);
    }
    loop {
        let (_, key) = p.token();
        if key.is_empty() {
            return Err(p.err(format!("expected an attribute name, found {}", p.found())));
        }
        let key = key.to_string();
        if !p.eat("=") {
            return Err(p.err(format!("expected `=` after `{key}`, found {}", p.found())));
        }
        attrs.set(&key, value(p)?);
        if p.eat(",") {
            continue;
        }
        if p.eat("}") {
            return Ok(attrs);
        }
        return Err(p.err(format!("expected `,` or `}}`, found {}", p.found())));
    }
}

fn value(p: &mut P) -> R<Attr> {
    p.ws();
    if p.eat("[") {
        let mut items = Vec::new();
        if !p.eat("]") {
            loop {
                items.push(value(p)?);
                if p.eat(",") {
                    continue;
                }
                if p.eat("]") {
                    break;
                }
                return Err(p.err(format!("expected `,` or `]`, found {}", p.found())));
            }
        }
        return if items.iter().all(|a| matches!(a, Attr::Int(_))) {
            Ok(Attr::Ints(
                items
                    .iter()
                    .map(|a| if let Attr::Int(i) = a { *i } else { 0 })
                    .collect(),
            ))
        } else if items
            .iter()
            .all(|a| matches!(a, Attr::Int(_) | Attr::Float(_)))
        {
            Ok(Attr::Floats(
                items
                    .iter()
                    .map(|a| match a {
                        Attr::Int(i) => *i as f64,
                        Attr::Float(x) => *x,
                        _ => 0.0,
                    })
                    .collect(),
            ))
        } else {
            Err(p.err("a list holds numbers only"))
        };
    }
    if p.eat("\"") {
        let a = p.pos;
        let end = p.s[a..]
            .find('"')
            .ok_or_else(|| p.err("unterminated string"))?;
        p.pos = a + end + 1;
        return Ok(Attr::Str(p.s[a..a + end].to_string()));
    }
    let (a, tok) = p.token();
    let span = p.span(a, p.pos);
    let tok = tok.to_string();
    match tok.as_str() {
        "" => Err(p.err(format!("expected an attribute value, found {}", p.found()))),
        "true" => Ok(Attr::Bool(true)),
        "false" => Ok(Attr::Bool(false)),
        _ => {
            if let Ok(i) = tok.parse::<i64>() {
                Ok(Attr::Int(i))
            } else if let Ok(x) = tok.parse::<f64>() {
                Ok(Attr::Float(x))
            } else if let Some(s) = aoc_ir::Scalar::from_name(&tok) {
                Ok(Attr::Type(s))
            } else {
                Err(Diagnostic::error_at(
                    format!("expected an attribute value, found `{tok}`"),
                    span,
                ))
            }
        }
    }
}
