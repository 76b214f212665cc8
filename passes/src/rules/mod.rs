//! Rule families and the pieces rules are built from.
//!
//! Every rule has a unique kebab-case name. Pattern rules are written as
//! s-expressions over op mnemonics (`(core.relu (core.relu ?x))`). On a
//! left-hand side an op without attributes matches any attributes; on a
//! right-hand side it gets its defaults. Rules whose result needs computed
//! attributes use a named applier function.
//!
//! Invariant: every applier here only unions a new form with the matched
//! class when their types are equal (`TypedApplier`, `FnApplier`), so a rule
//! can never change a value's type, whatever its pattern says.

pub mod algebraic;
pub mod fold_bn;
pub mod fuse;
mod fuse_patterns;
pub mod qdq;
pub mod winograd;

use crate::egraph::analysis::Graph;
use crate::egraph::node::{Node, OpAttrs, OpNode};
use crate::egraph::{Lhs, Rewrite, TensorAnalysis};
use aoc_ir::Trait;
use aoc_ir::attr::Attrs;
use egg::{Applier, ENodeOrVar, Id, Pattern, PatternAst, RecExpr, Subst, Symbol, Var};
use std::sync::Arc;

/// Builds one rule family (an error says what in it is malformed).
pub type BuildRules = fn() -> Result<Vec<Rewrite>, String>;

/// Every built-in rule family: (name, builder). A unit test builds them all.
pub fn rule_sets() -> &'static [(&'static str, BuildRules)] {
    &[
        ("algebraic", algebraic::rules),
        ("qdq", qdq::rules),
        ("winograd", winograd::rules),
        ("fold-bn", fold_bn::rules),
        ("fuse", fuse::rules),
    ]
}

/// Parses a left-hand side (also read for the pattern of a right-hand
/// side, through `.ast`).
pub fn lhs(text: &str) -> Result<Lhs, String> {
    text.parse::<Pattern<Node>>()
        .map(|p| Lhs::new(p.ast))
        .map_err(|e| format!("bad pattern `{text}`: {e}"))
}

/// Gives every attribute-less op node of a right-hand side its default
/// attributes; errors name ops that have required attributes or declared
/// result types.
pub fn resolve_rhs(ast: &PatternAst<Node>) -> Result<PatternAst<Node>, String> {
    let mut out = RecExpr::default();
    for n in ast.as_ref() {
        let n = match n {
            ENodeOrVar::ENode(Node::Op(OpNode {
                opcode,
                attrs: None,
                children,
            })) => {
                if opcode.info().has_trait(Trait::DeclaredResult) {
                    return Err(format!(
                        "{} cannot be built by a pattern: its result type must be given",
                        opcode.name()
                    ));
                }
                let attrs = OpAttrs::new(*opcode, Attrs::new(), None)?;
                ENodeOrVar::ENode(Node::Op(OpNode {
                    opcode: *opcode,
                    attrs: Some(Arc::new(attrs)),
                    children: children.clone(),
                }))
            }
            other => other.clone(),
        };
        out.add(n);
    }
    Ok(out)
}

/// Instantiates a pattern and unions it with the matched class when the
/// types agree.
pub struct TypedApplier {
    pub ast: PatternAst<Node>,
    vars: Vec<Var>,
}

impl TypedApplier {
    pub fn new(ast: PatternAst<Node>) -> TypedApplier {
        let vars = Pattern::new(ast.clone()).vars();
        TypedApplier { ast, vars }
    }
}

/// Unions `new` with `eclass` when both are typed and the types are equal.
/// Returns the changed class, if any.
pub fn union_if_same_type(egraph: &mut Graph, eclass: Id, new: Id) -> Option<Id> {
    let same = match (&egraph[eclass].data.ty, &egraph[new].data.ty) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    (same && egraph.union(eclass, new)).then(|| egraph.find(eclass))
}

impl Applier<Node, TensorAnalysis> for TypedApplier {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        let new = egraph.add_instantiation(&self.ast, subst);
        union_if_same_type(egraph, eclass, new)
            .into_iter()
            .collect()
    }
    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
}

/// A named function computing new forms of the matched class; each is
/// unioned when its type agrees.
pub type ApplyFn = fn(&mut Graph, Id, &Subst) -> Vec<Id>;

pub struct FnApplier(pub ApplyFn);

impl Applier<Node, TensorAnalysis> for FnApplier {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        _: Symbol,
    ) -> Vec<Id> {
        let forms = (self.0)(egraph, eclass, subst);
        forms
            .into_iter()
            .filter_map(|new| union_if_same_type(egraph, eclass, new))
            .collect()
    }
}

/// A named condition on a match.
pub type CondFn = fn(&Graph, Id, &Subst) -> bool;

struct Conditional<A> {
    cond: CondFn,
    inner: A,
}

impl<A: Applier<Node, TensorAnalysis>> Applier<Node, TensorAnalysis> for Conditional<A> {
    fn apply_one(
        &self,
        egraph: &mut Graph,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<Node>>,
        name: Symbol,
    ) -> Vec<Id> {
        if (self.cond)(egraph, eclass, subst) {
            self.inner.apply_one(egraph, eclass, subst, ast, name)
        } else {
            vec![]
        }
    }
    fn vars(&self) -> Vec<Var> {
        self.inner.vars()
    }
}

/// `name: lhs => rhs`.
pub fn rule(name: &str, lhs_text: &str, rhs_text: &str) -> Result<Rewrite, String> {
    let rhs = resolve_rhs(&lhs(rhs_text)?.ast).map_err(|m| format!("rule `{name}`: {m}"))?;
    Rewrite::new(name, lhs(lhs_text)?, TypedApplier::new(rhs))
}

/// `name: lhs => rhs if cond`.
pub fn rule_if(
    name: &str,
    lhs_text: &str,
    rhs_text: &str,
    cond: CondFn,
) -> Result<Rewrite, String> {
    let rhs = resolve_rhs(&lhs(rhs_text)?.ast).map_err(|m| format!("rule `{name}`: {m}"))?;
    Rewrite::new(
        name,
        lhs(lhs_text)?,
        Conditional {
            cond,
            inner: TypedApplier::new(rhs),
        },
    )
}

/// `name: lhs => apply(...)`.
pub fn rule_fn(name: &str, lhs_text: &str, apply: ApplyFn) -> Result<Rewrite, String> {
    Rewrite::new(name, lhs(lhs_text)?, FnApplier(apply))
}

/// The op nodes of `opcode` in a class (cloned, so the caller may add).
pub fn nodes_of(egraph: &Graph, class: Id, opcode: aoc_ir::Opcode) -> Vec<OpNode> {
    egraph[class]
        .nodes
        .iter()
        .filter_map(|n| match n {
            Node::Op(o) if o.opcode == opcode && o.attrs.is_some() => Some(o.clone()),
            _ => None,
        })
        .collect()
}

/// A pattern variable (for appliers and conditions).
pub fn var(name: &str) -> Var {
    name.parse().expect("a valid variable name")
}

/// Whether two class ids are the same class.
pub fn same_class(egraph: &Graph, a: Id, b: Id) -> bool {
    egraph.find(a) == egraph.find(b)
}

#[cfg(test)]
mod fold_fuse_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod qdq_tests;
#[cfg(test)]
mod winograd_tests;
