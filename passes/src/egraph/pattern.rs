//! Left-hand sides of rules: egg patterns over [`Node`] that match
//! correctly when a variable is used twice.
//!
//! Why this exists: egg compiles a pattern into a small matching program.
//! When every variable under a sub-pattern is already bound (as the second
//! `?e` of `(core.div ?e (core.reduce_sum ?e))` is, once the first one has
//! matched), egg does not scan the class for that sub-pattern: it builds the
//! node and looks it up in the e-graph's hash-cons (`EGraph::lookup`). That
//! lookup compares whole nodes with `Eq`/`Hash`, attributes included, but a
//! pattern op written without attributes carries `attrs: None`, a wildcard
//! that only `Language::matches` understands; no e-graph node equals it, so
//! the lookup fails and the pattern never matches. The same happens to a
//! sub-pattern with no variables at all (`(core.relu param:0)`).
//!
//! The fix keeps egg's matcher and never lets it reach such a lookup: the
//! pattern is searched in a linear form where each repeated variable after
//! its first occurrence, and each childless node, is a fresh variable; every
//! sub-pattern then still has an unbound variable when egg reaches it, so it
//! is matched by scanning with `matches`. The matches are then filtered:
//! a copy of a variable must be in the same class as the original (compared
//! with `find`, so classes merged since are equal), and a childless node's
//! variable must be a class holding a node that `matches` it. The fresh
//! variables are removed before the matches reach an applier.
//!
//! Invariant: every rule's left-hand side is an [`Lhs`] (built by
//! `rules::lhs` and the rules-file loader), never a bare `egg::Pattern`.
//! A pattern without repeated variables or childless nodes is searched by
//! egg directly, exactly as before.

use super::node::Node;
use egg::{
    Analysis, EGraph, ENodeOrVar, Id, Language, Pattern, PatternAst, RecExpr, SearchMatches,
    Searcher, Subst, Var,
};
use std::borrow::Cow;
use std::fmt;

/// A rule's left-hand side.
#[derive(Clone, Debug)]
pub struct Lhs {
    /// The pattern as written.
    pub ast: PatternAst<Node>,
    written: Pattern<Node>,
    vars: Vec<Var>,
    /// The linear form, when the written one cannot be searched by egg as is.
    linear: Option<Linear>,
}

#[derive(Clone, Debug)]
struct Linear {
    pattern: Pattern<Node>,
    /// (copy, original): the copy must be in the original's class.
    same: Vec<(Var, Var)>,
    /// (variable, childless node): the class must hold a matching node.
    leaves: Vec<(Var, Node)>,
}

impl Lhs {
    pub fn new(ast: PatternAst<Node>) -> Lhs {
        let written = Pattern::new(ast.clone());
        let vars = written.vars();
        let linear = linearize(&ast, &vars);
        Lhs {
            ast,
            written,
            vars,
            linear,
        }
    }
}

impl fmt::Display for Lhs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.written, f)
    }
}

/// The linear form of `ast`, or `None` when it has no repeated variable and
/// no childless node (then every sub-pattern has a variable of its own, and
/// egg never looks one up).
fn linearize(ast: &PatternAst<Node>, vars: &[Var]) -> Option<Linear> {
    let mut l = Linearizer {
        ast,
        vars,
        seen: Vec::new(),
        same: Vec::new(),
        leaves: Vec::new(),
        next: 1u32 << 31,
        out: RecExpr::default(),
    };
    l.copy(Id::from(ast.as_ref().len() - 1));
    if l.same.is_empty() && l.leaves.is_empty() {
        return None;
    }
    Some(Linear {
        pattern: Pattern::new(l.out),
        same: l.same,
        leaves: l.leaves,
    })
}

/// Copies a pattern as a tree: the parser shares equal sub-terms (both
/// `?e` of `(core.div ?e (core.reduce_sum ?e))` are one node), so
/// occurrences are counted per use, not per node.
struct Linearizer<'a> {
    ast: &'a PatternAst<Node>,
    vars: &'a [Var],
    seen: Vec<Var>,
    same: Vec<(Var, Var)>,
    leaves: Vec<(Var, Node)>,
    next: u32,
    out: PatternAst<Node>,
}

impl Linearizer<'_> {
    /// A variable nobody wrote. Numbered variables (`?#N`) cannot be written
    /// in a rules file (`#` starts a comment); those a built-in pattern
    /// might use are skipped anyway.
    fn fresh(&mut self) -> Var {
        loop {
            let v = Var::from_u32(self.next);
            self.next += 1;
            if !self.vars.contains(&v) {
                return v;
            }
        }
    }

    fn copy(&mut self, id: Id) -> Id {
        let n = match &self.ast[id] {
            ENodeOrVar::Var(v) if self.seen.contains(v) => {
                let copy = self.fresh();
                self.same.push((copy, *v));
                ENodeOrVar::Var(copy)
            }
            ENodeOrVar::Var(v) => {
                self.seen.push(*v);
                ENodeOrVar::Var(*v)
            }
            ENodeOrVar::ENode(node) if node.is_leaf() => {
                let v = self.fresh();
                self.leaves.push((v, node.clone()));
                ENodeOrVar::Var(v)
            }
            ENodeOrVar::ENode(node) => {
                let mut node = node.clone();
                for c in node.children_mut() {
                    *c = self.copy(*c);
                }
                ENodeOrVar::ENode(node)
            }
        };
        self.out.add(n)
    }
}

impl Linear {
    /// Whether a match of the linear form is a match of the written one.
    fn accepts<A: Analysis<Node>>(&self, egraph: &EGraph<Node, A>, s: &Subst) -> bool {
        self.same
            .iter()
            .all(|(copy, orig)| egraph.find(s[*copy]) == egraph.find(s[*orig]))
            && self
                .leaves
                .iter()
                .all(|(v, leaf)| egraph[s[*v]].nodes.iter().any(|n| leaf.matches(n)))
    }
}

impl<A: Analysis<Node>> Searcher<Node, A> for Lhs {
    fn search_eclass_with_limit(
        &self,
        egraph: &EGraph<Node, A>,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Node>> {
        let Some(linear) = &self.linear else {
            return self.written.search_eclass_with_limit(egraph, eclass, limit);
        };
        // The limit applies to the filtered matches, so the linear form is
        // searched in full.
        let found = linear.pattern.search_eclass(egraph, eclass)?;
        let mut substs: Vec<Subst> = Vec::new();
        for s in &found.substs {
            if substs.len() == limit {
                break;
            }
            if !linear.accepts(egraph, s) {
                continue;
            }
            let mut kept = Subst::with_capacity(self.vars.len());
            for v in &self.vars {
                kept.insert(*v, s[*v]);
            }
            // Two matches that differ only in a childless node's class are
            // the same match of the written pattern.
            if !substs.contains(&kept) {
                substs.push(kept);
            }
        }
        (!substs.is_empty()).then(|| SearchMatches {
            eclass,
            substs,
            ast: Some(Cow::Borrowed(&self.ast)),
        })
    }

    fn search_with_limit(
        &self,
        egraph: &EGraph<Node, A>,
        mut limit: usize,
    ) -> Vec<SearchMatches<'_, Node>> {
        let Some(linear) = &self.linear else {
            return self.written.search_with_limit(egraph, limit);
        };
        // Only the classes holding the root's op can match (all of them when
        // the root is a variable).
        let classes: Vec<Id> = match linear.pattern.ast.as_ref().last() {
            Some(ENodeOrVar::ENode(root)) => egraph
                .classes_for_op(&root.discriminant())
                .map(|ids| ids.collect())
                .unwrap_or_default(),
            _ => egraph.classes().map(|c| c.id).collect(),
        };
        let mut out = Vec::new();
        for id in classes {
            if limit == 0 {
                break;
            }
            if let Some(m) = self.search_eclass_with_limit(egraph, id, limit) {
                limit -= m.substs.len();
                out.push(m);
            }
        }
        out
    }

    fn get_pattern_ast(&self) -> Option<&PatternAst<Node>> {
        Some(&self.ast)
    }

    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
}
