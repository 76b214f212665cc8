//! Modules, functions, blocks, ops and values.
//!
//! A function owns two arenas, one of values and one of ops; blocks list op
//! ids in program order. Regions (blocks nested in an op) use the same arenas,
//! so a fused op's body can refer to values by id like any other op.
//!
//! Invariants (checked by the verifier): every value has exactly one
//! definition; every use comes after its definition in program order; value
//! names are unique within a function (the printer relies on it); op result
//! types equal what the op table's `infer` hook computes.

use crate::attr::{Attr, Attrs};
use crate::diag::{Diagnostic, Location};
use crate::entity::Arena;
use crate::ops::Opcode;
use crate::ops::fused::Step;
use crate::types::TensorType;
use crate::entity::EntityId;
use std::collections::HashSet;

crate::entity_id!(
    /// A value (function parameter, block argument or op result).
    ValueId,
    "v"
);
crate::entity_id!(
    /// An op.
    OpId,
    "op"
);

/// How a value is defined.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ValueDef {
    /// Argument `index` of the function's body block.
    Param(usize),
    /// Argument `index` of the entry block of region `region` of `op`.
    RegionArg { op: OpId, region: usize, index: usize },
    /// Result `index` of `op`.
    Result(OpId, usize),
}

#[derive(Clone, Debug)]
pub struct ValueData {
    /// The SSA name without `%`, unique in its function.
    pub name: String,
    pub ty: TensorType,
    pub def: ValueDef,
    pub loc: Location,
}

/// A straight-line list of ops with arguments and a terminator
/// (`return` in a function body, `yield` in a region).
#[derive(Clone, Debug, Default)]
pub struct Block {
    pub args: Vec<ValueId>,
    pub ops: Vec<OpId>,
    /// The values the terminator returns or yields.
    pub terminator: Vec<ValueId>,
    pub terminator_loc: Location,
}

#[derive(Clone, Debug)]
pub struct OpData {
    pub opcode: Opcode,
    pub operands: Vec<ValueId>,
    pub results: Vec<ValueId>,
    pub attrs: Attrs,
    /// Nested bodies (one block each): the epilogue of a fused op
    /// (`Trait::Epilogue`); empty for every other op.
    pub regions: Vec<Block>,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct Func {
    pub name: String,
    pub values: Arena<ValueId, ValueData>,
    pub ops: Arena<OpId, OpData>,
    /// The body; its `args` are the parameters and its terminator returns the
    /// results.
    pub body: Block,
    /// The declared result types (checked against the returned values).
    pub result_types: Vec<TensorType>,
    /// External names of the results (an ONNX output named `logits:0`),
    /// where they differ from the returned values' names; by position,
    /// possibly shorter than the results. A parameter's external name is
    /// its `loc` name. See [`Func::param_name`], [`Func::result_name`].
    pub result_names: Vec<Option<String>>,
    pub loc: Location,
    /// The names in use, for [`Func::fresh_name`] (see [`NameCache`]).
    names: NameCache,
}

/// The value names of a function, kept up to date incrementally: values
/// are only ever appended to the arena, so each call adds the names of the
/// values made since the last one, and naming a function of n values costs
/// O(n) in all instead of O(n) per name. A rename of an existing value
/// goes through [`Func::rename`], which records the new name. A clone
/// starts empty and is rebuilt on first use.
#[derive(Default, Debug)]
struct NameCache(std::sync::Mutex<(usize, HashSet<String>)>);

impl Clone for NameCache {
    fn clone(&self) -> NameCache {
        NameCache::default()
    }
}

/// A module-level declaration of an external weights file:
/// `weights @weights = "model.safetensors"`.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightsDecl {
    pub name: String,
    /// Path as written, relative to the `.air` file's folder.
    pub path: String,
    pub loc: Location,
}

#[derive(Clone, Debug, Default)]
pub struct Module {
    pub weights: Vec<WeightsDecl>,
    pub funcs: Vec<Func>,
}

impl Module {
    pub fn func(&self, name: &str) -> Option<&Func> {
        self.funcs.iter().find(|f| f.name == name)
    }
    /// The function `aoc run` executes: `main` if present, else the first.
    pub fn entry(&self) -> Option<&Func> {
        self.func("main").or(self.funcs.first())
    }
    pub fn weights_decl(&self, name: &str) -> Option<&WeightsDecl> {
        self.weights.iter().find(|w| w.name == name)
    }
}

impl Func {
    pub fn new(name: impl Into<String>) -> Func {
        Func {
            name: name.into(),
            values: Arena::new(),
            ops: Arena::new(),
            body: Block::default(),
            result_types: vec![],
            result_names: vec![],
            loc: Location::default(),
            names: NameCache::default(),
        }
    }

    pub fn params(&self) -> &[ValueId] {
        &self.body.args
    }

    pub fn results(&self) -> &[ValueId] {
        &self.body.terminator
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v].ty
    }

    pub fn name_of(&self, v: ValueId) -> &str {
        &self.values[v].name
    }

    /// The name the outside world knows parameter `i` by: its external name
    /// (`loc`) if it has one, else its SSA name.
    pub fn param_name(&self, i: usize) -> &str {
        let p = self.body.args[i];
        self.values[p].loc.name.as_deref().unwrap_or(&self.values[p].name)
    }

    /// The name the outside world knows result `i` by: its external name if
    /// it has one, else the returned value's SSA name.
    pub fn result_name(&self, i: usize) -> &str {
        match self.result_names.get(i) {
            Some(Some(n)) => n,
            _ => self.name_of(self.body.terminator[i]),
        }
    }

    /// Pins each result's external name (`result_name`), so a pass that
    /// returns another value in a result's place does not rename it. A name
    /// a result already has (a value returned twice, or two results named
    /// alike) gets `_2`, `_3`, ...: an artifact's outputs need distinct names.
    pub fn pin_result_names(&mut self) {
        let mut taken = std::collections::HashSet::new();
        let mut names = vec![];
        for i in 0..self.body.terminator.len() {
            let base = self.result_name(i).to_string();
            let mut name = base.clone();
            let mut k = 2;
            while !taken.insert(name.clone()) {
                name = format!("{base}_{k}");
                k += 1;
            }
            names.push(Some(name));
        }
        self.result_names = names;
    }

    /// The parameter a caller names `name`: by external name first, then
    /// by SSA name (so an external name that equals another parameter's
    /// sanitized name finds the one the model calls so).
    pub fn param_index(&self, name: &str) -> Option<usize> {
        let n = self.body.args.len();
        (0..n).find(|&i| self.param_name(i) == name).or_else(|| (0..n).find(|&i| self.name_of(self.body.args[i]) == name))
    }

    /// Finds a value by its SSA name (without `%`).
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.values.iter().find(|(_, d)| d.name == name).map(|(id, _)| id)
    }

    /// A name not yet used in this function, derived from `hint`.
    pub fn fresh_name(&self, hint: &str) -> String {
        let mut cache = self.names.0.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, taken) = &mut *cache;
        for i in *seen..self.values.len() {
            taken.insert(self.values[ValueId::new(i)].name.clone());
        }
        *seen = self.values.len();
        fresh_name(hint, |n| taken.contains(n))
    }

    /// Renames value `v` (to a name the caller knows is free, e.g. from
    /// [`Func::fresh_name`]).
    pub fn rename(&mut self, v: ValueId, name: String) {
        let cache = self.names.0.get_mut().unwrap_or_else(|e| e.into_inner());
        cache.1.insert(name.clone());
        self.values[v].name = name;
    }

    /// Adds a parameter to the body block.
    pub fn add_param(&mut self, name: &str, ty: TensorType, loc: Location) -> ValueId {
        let name = self.fresh_name(name);
        let index = self.body.args.len();
        let v = self.values.push(ValueData { name, ty, def: ValueDef::Param(index), loc });
        self.body.args.push(v);
        v
    }

    /// Appends an op to the body with explicit result types, without
    /// checking them (the parser uses this; the verifier checks later).
    pub fn push_op_unchecked(
        &mut self,
        opcode: Opcode,
        operands: Vec<ValueId>,
        attrs: Attrs,
        result_types: Vec<(String, TensorType)>,
        loc: Location,
    ) -> OpId {
        let op = self.ops.push(OpData {
            opcode,
            operands,
            results: vec![],
            attrs,
            regions: vec![],
            loc: loc.clone(),
        });
        for (i, (name, ty)) in result_types.into_iter().enumerate() {
            let name = self.fresh_name(&name);
            let v = self.values.push(ValueData { name, ty, def: ValueDef::Result(op, i), loc: loc.clone() });
            self.ops[op].results.push(v);
        }
        self.body.ops.push(op);
        op
    }

    /// Appends an op to the body: fills attribute defaults, checks operands
    /// and attributes against the op table and infers result types.
    /// `declared` gives result types for ops whose result type is not implied
    /// by their operands (`const`, `quant.quantize`, `quant.requantize`).
    /// Returns the result values, or a diagnostic naming the op.
    pub fn push_op(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        declared: Option<Vec<TensorType>>,
        name_hint: &str,
        loc: Location,
    ) -> Result<Vec<ValueId>, Diagnostic> {
        self.push_op_with_epilogue(opcode, operands, attrs, declared, &[], name_hint, loc)
    }

    /// As [`Func::push_op`], for an op that carries an epilogue
    /// (`Trait::Epilogue`): its result type follows from the core and
    /// `steps`, and the op gets the epilogue region computing them.
    #[allow(clippy::too_many_arguments)]
    pub fn push_op_with_epilogue(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        declared: Option<Vec<TensorType>>,
        steps: &[Step],
        name_hint: &str,
        loc: Location,
    ) -> Result<Vec<ValueId>, Diagnostic> {
        let attrs = opcode.info().complete_attrs(attrs).map_err(|m| Diagnostic::error(m, loc.clone()))?;
        let operand_types: Vec<TensorType> = operands.iter().map(|v| self.ty(*v).clone()).collect();
        let types = crate::verify::infer_op_with_epilogue(opcode, &operand_types, &attrs, declared.as_deref(), steps)
            .map_err(|m| Diagnostic::error(m, loc.clone()))?;
        let n = types.len();
        let named = types
            .into_iter()
            .enumerate()
            .map(|(i, t)| (if n == 1 { name_hint.to_string() } else { format!("{name_hint}_{i}") }, t))
            .collect();
        let op = self.push_op_unchecked(opcode, operands.to_vec(), attrs, named, loc.clone());
        if !steps.is_empty() {
            crate::ops::fused::set_epilogue(self, op, steps).map_err(|m| Diagnostic::error(m, loc))?;
        }
        Ok(self.ops[op].results.clone())
    }

    /// A value for an argument of a region being built (before the op that
    /// will hold it exists): [`Func::push_region_op`] sets its definition.
    pub fn new_region_arg(&mut self, hint: &str, ty: TensorType, loc: Location) -> ValueId {
        let name = self.fresh_name(hint);
        self.values.push(ValueData { name, ty, def: ValueDef::RegionArg { op: OpId::new(0), region: 0, index: 0 }, loc })
    }

    /// Appends an op holding `regions` (their arguments made with
    /// [`Func::new_region_arg`], their ops already in the arena and in no
    /// other block) to the body, with these result types; unchecked, like
    /// [`Func::push_op_unchecked`] (the verifier checks it).
    pub fn push_region_op(
        &mut self,
        opcode: Opcode,
        operands: Vec<ValueId>,
        attrs: Attrs,
        result_types: Vec<(String, TensorType)>,
        regions: Vec<Block>,
        loc: Location,
    ) -> OpId {
        let op = self.push_op_unchecked(opcode, operands, attrs, result_types, loc);
        for (region, block) in regions.iter().enumerate() {
            for (index, &a) in block.args.iter().enumerate() {
                self.values[a].def = ValueDef::RegionArg { op, region, index };
            }
        }
        self.ops[op].regions = regions;
        op
    }

    /// Sets the values the function returns and its result types.
    pub fn set_return(&mut self, values: Vec<ValueId>) {
        self.result_types = values.iter().map(|v| self.ty(*v).clone()).collect();
        self.body.terminator = values;
    }

    /// The op that defines `v`, if any.
    pub fn def_op(&self, v: ValueId) -> Option<OpId> {
        match self.values[v].def {
            ValueDef::Result(op, _) => Some(op),
            _ => None,
        }
    }

    /// Attribute lookup helper.
    pub fn attr(&self, op: OpId, name: &str) -> Option<&Attr> {
        self.ops[op].attrs.get(name)
    }
}

/// Sanitizes `hint` into a valid SSA name and appends `_N` until `taken`
/// says it is free.
pub fn fresh_name(hint: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut base: String = hint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-') { c } else { '_' })
        .collect();
    if base.is_empty() {
        base.push('v');
    }
    if !taken(&base) {
        return base;
    }
    (1..).map(|i| format!("{base}_{i}")).find(|n| !taken(n)).expect("an unused name exists")
}
