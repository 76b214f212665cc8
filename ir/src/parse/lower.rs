//! Lowering of the syntax tree to a `Module`: resolves op mnemonics through
//! the op table, SSA names to values, literals to attributes and types, and
//! reports every problem it finds as a diagnostic at the text's span.
//!
//! Invariants: never panics; keeps going after an error so several are
//! reported in one run. An op with any error (mnemonic, operands, types,
//! attributes, payload) is left out of the module and its result names are
//! "poisoned": later uses of them are silently skipped, so one mistake gives
//! one diagnostic, not a cascade. Value names are kept exactly as written.

use super::ast::{self, Spanned};
use super::literals::nearest;
use crate::attr::{Attr, AttrKind, Attrs, ConstValue, WeightRef};
use crate::diag::{Diagnostic, Location, Span};
use crate::module::{Block, Func, Module, OpData, OpId, ValueData, ValueDef, ValueId, WeightsDecl};
use crate::ops::fused::{self, Step};
use crate::ops::{Format, Opcode, Trait};
use crate::types::TensorType;
use std::collections::{HashMap, HashSet};

pub fn lower(file: &ast::File) -> (Module, Vec<Diagnostic>) {
    let mut cx = Lowerer { diags: Vec::new(), legacy_epilogues: Vec::new() };
    let mut module = Module::default();
    for item in &file.items {
        match item {
            ast::Item::Weights { name, path } => {
                let name_text = cx.symbol(name);
                if let Some(path_text) = cx.string(path) {
                    module.weights.push(WeightsDecl {
                        name: name_text,
                        path: path_text,
                        loc: Location::span(name.span),
                    });
                }
            }
            ast::Item::Func(f) => {
                let func = cx.func(f);
                module.funcs.push(func);
            }
        }
    }
    (module, cx.diags)
}

pub(super) struct Lowerer {
    pub(super) diags: Vec<Diagnostic>,
    /// Fused ops of the current function written with the old string
    /// attribute `epilogue = "..."`: converted to regions once the whole
    /// function is lowered, so the new values' names cannot clash with
    /// names written later in the text.
    legacy_epilogues: Vec<(OpId, Vec<Step>, Span)>,
}

/// What an SSA name refers to while lowering one function.
#[derive(Copy, Clone)]
enum Binding {
    Value(ValueId),
    /// Its definition failed (already reported): uses are skipped quietly.
    Poisoned,
}

struct Scope {
    /// Every name defined so far in the function, with its first definition.
    defined: HashMap<String, (Binding, Span)>,
    /// The names each enclosing region defines, innermost last.
    region_stack: Vec<Vec<String>>,
    /// Names defined in regions already closed: defined, but not visible.
    hidden: HashSet<String>,
    /// Every name the function defines anywhere, for "used before defined".
    all_defs: HashMap<String, Span>,
}

enum BlockKind {
    FuncBody,
    Region,
}

impl Lowerer {
    pub(super) fn error(&mut self, message: impl Into<String>, span: Span) {
        self.diags.push(Diagnostic::error_at(message, span));
    }

    fn func(&mut self, f: &ast::FuncDef) -> Func {
        let mut func = Func::new(self.symbol(&f.name));
        func.loc = Location::span(f.name.span);
        let mut all_defs = HashMap::new();
        collect_defs(&f.body, &mut all_defs);
        for p in &f.params {
            all_defs
                .entry(value_name(&p.name).to_string())
                .or_insert(p.name.span);
        }
        let mut scope = Scope {
            defined: HashMap::new(),
            region_stack: vec![],
            hidden: HashSet::new(),
            all_defs,
        };
        for p in &f.params {
            let ty = self.ty(&p.ty);
            let name = value_name(&p.name);
            match ty {
                Some(ty) if !self.is_duplicate(&scope, &p.name) => {
                    let loc = Location { span: Some(p.name.span), name: p.loc.as_ref().and_then(|l| self.string(l)) };
                    let v = func.add_param(name, ty, loc);
                    scope
                        .defined
                        .insert(name.to_string(), (Binding::Value(v), p.name.span));
                }
                Some(_) => {}
                None => {
                    scope
                        .defined
                        .entry(name.to_string())
                        .or_insert((Binding::Poisoned, p.name.span));
                }
            }
        }
        func.result_types = f.results.iter().filter_map(|(t, _)| self.ty(t)).collect();
        func.result_names = f.results.iter().map(|(_, l)| l.as_ref().and_then(|l| self.string(l))).collect();
        if func.result_names.iter().all(Option::is_none) {
            func.result_names.clear();
        }
        let block = self.block(&mut func, &mut scope, &f.body, BlockKind::FuncBody, None);
        func.body.ops = block.ops;
        func.body.terminator = block.terminator;
        func.body.terminator_loc = block.terminator_loc;
        for (op, steps, span) in std::mem::take(&mut self.legacy_epilogues) {
            if let Err(m) = fused::set_epilogue(&mut func, op, &steps) {
                self.error(format!("{}: {m}", func.ops[op].opcode.name()), span);
            }
        }
        func
    }

    /// Reports a second definition of `name` (the first is labelled).
    fn is_duplicate(&mut self, scope: &Scope, name: &Spanned) -> bool {
        let key = value_name(name);
        match scope.defined.get(key) {
            Some((_, first)) => {
                self.diags.push(
                    Diagnostic::error_at(format!("value %{key} is defined twice"), name.span)
                        .with_label(*first, "first defined here"),
                );
                true
            }
            None => false,
        }
    }

    /// Lowers a block. For a region, `owner` gives the op and region index
    /// its arguments belong to.
    fn block(
        &mut self,
        func: &mut Func,
        scope: &mut Scope,
        body: &ast::Body,
        kind: BlockKind,
        owner: Option<(OpId, usize)>,
    ) -> Block {
        let mut block = Block::default();
        if let Some((op, region)) = owner {
            for (index, a) in body.args.iter().enumerate() {
                let name = value_name(&a.name);
                let Some(ty) = self.ty(&a.ty) else {
                    scope
                        .defined
                        .entry(name.to_string())
                        .or_insert((Binding::Poisoned, a.name.span));
                    continue;
                };
                let dup = self.is_duplicate(scope, &a.name);
                let def = ValueDef::RegionArg { op, region, index };
                let v = self.new_value(func, scope, name, dup, ty, def, a.name.span);
                block.args.push(v);
            }
        }
        for op in &body.ops {
            if let Some(id) = self.op(func, scope, op) {
                block.ops.push(id);
            }
        }
        let term = &body.term;
        let want = match kind {
            BlockKind::FuncBody => "return",
            BlockKind::Region => "yield",
        };
        if term.keyword.text != want {
            let place = match kind {
                BlockKind::FuncBody => "a function body",
                BlockKind::Region => "a region",
            };
            self.error(
                format!(
                    "expected `{want}` at the end of {place}, found `{}`",
                    term.keyword.text
                ),
                term.keyword.span,
            );
        }
        let mut values = Vec::new();
        let mut complete = true;
        for v in &term.values {
            match self.use_value(scope, v) {
                Some(id) => values.push(id),
                None => complete = false,
            }
        }
        if term.types.len() != term.values.len() {
            self.error(
                format!(
                    "`{want}` has {} values but {} types",
                    term.values.len(),
                    term.types.len()
                ),
                term.span,
            );
        } else if complete {
            // A written type that differs from the value's type is an error
            // here, unless it is the function's declared result type: then
            // the verifier reports the value against the signature, once.
            let declared = match kind {
                BlockKind::FuncBody => func.result_types.clone(),
                BlockKind::Region => vec![],
            };
            for (i, ((t, v), name)) in term.types.iter().zip(&values).zip(&term.values).enumerate()
            {
                if let Some(t) = self.ty(t)
                    && &t != func.ty(*v)
                    && declared.get(i) != Some(&t)
                {
                    self.error(
                        format!(
                            "`{want}`: %{} has type {}, but {t} is written",
                            value_name(name),
                            func.ty(*v)
                        ),
                        term.types[i].span,
                    );
                }
            }
        }
        block.terminator = values;
        block.terminator_loc = Location::span(term.span);
        block
    }

    #[allow(clippy::too_many_arguments)]
    fn new_value(
        &mut self,
        func: &mut Func,
        scope: &mut Scope,
        name: &str,
        duplicate: bool,
        ty: TensorType,
        def: ValueDef,
        span: Span,
    ) -> ValueId {
        // A duplicate still gets a value (with a fresh name) so the module
        // stays well-formed; uses keep referring to the first definition.
        let unique = if duplicate {
            func.fresh_name(name)
        } else {
            name.to_string()
        };
        let v = func.values.push(ValueData {
            name: unique,
            ty,
            def,
            loc: Location::span(span),
        });
        if !duplicate {
            scope
                .defined
                .insert(name.to_string(), (Binding::Value(v), span));
            if let Some(region) = scope.region_stack.last_mut() {
                region.push(name.to_string());
            }
        }
        v
    }

    fn poison(&mut self, scope: &mut Scope, names: &[Spanned]) {
        for n in names {
            let name = value_name(n);
            if !scope.defined.contains_key(name) {
                scope
                    .defined
                    .insert(name.to_string(), (Binding::Poisoned, n.span));
                if let Some(region) = scope.region_stack.last_mut() {
                    region.push(name.to_string());
                }
            }
        }
    }

    /// Resolves a use of `%name`; `None` after reporting (or when poisoned).
    fn use_value(&mut self, scope: &Scope, name: &Spanned) -> Option<ValueId> {
        let key = value_name(name);
        if scope.hidden.contains(key) {
            self.error(
                format!("value %{key} is defined inside a region and is not visible here"),
                name.span,
            );
            return None;
        }
        match scope.defined.get(key) {
            Some((Binding::Value(v), _)) => Some(*v),
            Some((Binding::Poisoned, _)) => None,
            None => {
                let d = match scope.all_defs.get(key) {
                    Some(def) => Diagnostic::error_at(
                        format!("value %{key} is used before it is defined"),
                        name.span,
                    )
                    .with_label(*def, "defined here"),
                    None => {
                        Diagnostic::error_at(format!("use of undefined value %{key}"), name.span)
                    }
                };
                self.diags.push(d);
                None
            }
        }
    }

    fn op(&mut self, func: &mut Func, scope: &mut Scope, op: &ast::Op) -> Option<OpId> {
        let opcode = match Opcode::from_name(op.name.text) {
            Some(o) => Some(o),
            None => {
                let mut msg = format!("unknown op `{}`", op.name.text);
                if let Some(s) = suggest_op(op.name.text) {
                    msg.push_str(&format!("; did you mean `{s}`?"));
                }
                self.error(msg, op.name.span);
                None
            }
        };
        let mut operands = Vec::new();
        let mut ok = opcode.is_some();
        for o in &op.operands {
            match self.use_value(scope, o) {
                Some(v) => operands.push(v),
                None => ok = false,
            }
        }
        let types: Vec<Option<TensorType>> = op.types.iter().map(|t| self.ty(t)).collect();
        // A bad type was reported already; checks that need the types skip.
        let types_ok = types.iter().all(Option::is_some);
        ok &= types_ok;
        if op.results.len() != op.types.len() {
            let span = op.types.first().map_or(op.span, |t| {
                Span::new(t.span.start as usize, op.span.end as usize)
            });
            self.error(
                format!(
                    "{} results are named but {} types are given",
                    op.results.len(),
                    op.types.len()
                ),
                span,
            );
            ok = false;
        }
        let types: Vec<TensorType> = types.into_iter().flatten().collect();
        let (mut attrs, attrs_ok) = self.attr_dict(&op.attrs);
        ok &= attrs_ok;
        let Some(opcode) = opcode else {
            self.poison(scope, &op.results);
            return None;
        };
        let info = opcode.info();
        let payload_attr = info
            .attrs
            .iter()
            .find(|a| a.kind == AttrKind::Const)
            .map(|a| a.name);
        match (info.format, &op.payload, payload_attr) {
            (Format::Const, Some(_), Some(_)) if !types_ok => {}
            (Format::Const, Some(p), Some(attr_name)) => match self.payload(p, opcode, &types) {
                Some(value) => attrs
                    .0
                    .insert(0, (attr_name.to_string(), Attr::Const(value))),
                None => ok = false,
            },
            (Format::Const, _, _) => {
                self.error(
                    format!(
                        "{}: expected `dense<...>` or `@file[\"key\"]` after the op name",
                        info.name
                    ),
                    op.name.span,
                );
                ok = false;
            }
            (Format::Generic, Some(_), _) => {
                self.error(
                    format!(
                        "{}: this op takes operands, not a constant payload",
                        info.name
                    ),
                    op.name.span,
                );
                ok = false;
            }
            (Format::Generic, None, _) => {}
        }
        // The old string form of an epilogue (`epilogue = "add; relu"`) is
        // read and becomes the op's region.
        let mut legacy = None;
        if info.has_trait(Trait::Epilogue)
            && let Some(text) = attrs.remove("epilogue")
        {
            let span = op
                .attrs
                .iter()
                .find(|a| a.key.text == "epilogue")
                .map_or(op.name.span, |a| a.span);
            match text {
                Attr::Str(t) => match fused::parse_epilogue(&t) {
                    Ok(steps) if !op.regions.is_empty() && !steps.is_empty() => {
                        self.error(
                            format!("{}: the epilogue is given both as a region and as the string attribute `epilogue`", info.name),
                            span,
                        );
                        ok = false;
                    }
                    Ok(steps) => legacy = Some((steps, span)),
                    Err(m) => {
                        self.error(format!("{}: {m}", info.name), span);
                        ok = false;
                    }
                },
                other => {
                    self.error(format!("{}: attribute `epilogue` must be a string, found {other}", info.name), span);
                    ok = false;
                }
            }
        }
        if !ok {
            self.poison(scope, &op.results);
            return None;
        }
        // The table's own check (its messages name the op); an op with bad
        // attributes is dropped like any other op that failed.
        let attrs = match info.complete_attrs(attrs) {
            Ok(a) => a,
            Err(m) => {
                // Point at the attribute the message names, else the op name.
                let span = op
                    .attrs
                    .iter()
                    .find(|a| m.contains(&format!("`{}`", a.key.text)))
                    .map_or(op.name.span, |a| a.span);
                self.error(m, span);
                self.poison(scope, &op.results);
                return None;
            }
        };
        let loc = Location {
            span: Some(op.span),
            name: op.loc.as_ref().and_then(|l| self.string(l)),
        };
        let id = func.ops.push(OpData {
            opcode,
            operands,
            results: vec![],
            attrs,
            regions: vec![],
            loc,
        });
        // Regions first: an op's body cannot see the op's own results.
        for (ri, region) in op.regions.iter().enumerate() {
            scope.region_stack.push(vec![]);
            let block = self.block(func, scope, region, BlockKind::Region, Some((id, ri)));
            // Region definitions stay in `defined` (names are unique per
            // function) but are not visible after the region.
            for name in scope.region_stack.pop().unwrap_or_default() {
                scope.hidden.insert(name);
            }
            func.ops[id].regions.push(block);
        }
        for (i, (r, ty)) in op.results.iter().zip(types).enumerate() {
            let dup = self.is_duplicate(scope, r);
            let v = self.new_value(
                func,
                scope,
                value_name(r),
                dup,
                ty,
                ValueDef::Result(id, i),
                r.span,
            );
            func.ops[id].results.push(v);
        }
        if let Some((steps, span)) = legacy
            && !steps.is_empty()
        {
            self.legacy_epilogues.push((id, steps, span));
        }
        Some(id)
    }

    /// The attributes as written, and whether all of them lowered.
    fn attr_dict(&mut self, entries: &[ast::AttrEntry]) -> (Attrs, bool) {
        let mut attrs = Attrs::new();
        let mut ok = true;
        for e in entries {
            if attrs.get(e.key.text).is_some() {
                self.error(
                    format!("attribute `{}` is given twice", e.key.text),
                    e.key.span,
                );
                ok = false;
                continue;
            }
            match self.attr_value(&e.value) {
                Some(v) => attrs.set(e.key.text, v),
                None => ok = false,
            }
        }
        (attrs, ok)
    }

    fn payload(
        &mut self,
        p: &ast::Payload,
        opcode: Opcode,
        types: &[TensorType],
    ) -> Option<ConstValue> {
        match p {
            ast::Payload::Weight { file, key } => {
                let file = self.symbol(file);
                let key = self.string(key)?;
                Some(ConstValue::Weight(WeightRef { file, key }))
            }
            ast::Payload::Dense(d, span) => {
                let [ty] = types else {
                    self.error(
                        format!(
                            "{}: expected 1 result type, found {}",
                            opcode.name(),
                            types.len()
                        ),
                        *span,
                    );
                    return None;
                };
                self.dense(d, ty).map(ConstValue::Dense)
            }
        }
    }
}

fn value_name<'s>(s: &Spanned<'s>) -> &'s str {
    &s.text[1..]
}

/// Every name `body` (and its regions) defines, with its first span.
fn collect_defs(body: &ast::Body, out: &mut HashMap<String, Span>) {
    for a in &body.args {
        out.entry(value_name(&a.name).to_string())
            .or_insert(a.name.span);
    }
    for op in &body.ops {
        for r in &op.results {
            out.entry(value_name(r).to_string()).or_insert(r.span);
        }
        for region in &op.regions {
            collect_defs(region, out);
        }
    }
}

/// The op mnemonic closest to `name`, when close enough to be a typo (a
/// missing dialect prefix counts as close).
fn suggest_op(name: &str) -> Option<&'static str> {
    let names = Opcode::ALL.iter().map(|o| o.name());
    if !name.contains('.') {
        let prefixed = Opcode::ALL
            .iter()
            .map(|o| o.name())
            .find(|n| n.split_once('.').is_some_and(|(_, op)| op == name));
        if prefixed.is_some() {
            return prefixed;
        }
    }
    nearest(name, names)
}
