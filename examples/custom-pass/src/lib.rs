//! An example of a pass written outside aoc: `strip-identity` removes
//! `core.identity` ops (and, with `strip-identity{casts=true}`, casts to the
//! type they already have) by pointing their users at their operands.
//!
//! Read with `docs/passes.md`. The three pieces every pass has:
//! 1. an options struct implementing `PassOptions` (its `SPEC` is the one
//!    list of options, used for parsing and for `describe`),
//! 2. a type implementing `Pass` (what it does) and `PassDef` (its name,
//!    summary and constructor),
//! 3. a `PassEntry` (`PassEntry::of::<StripIdentity>(false)`) given to the
//!    pipeline through `PipelineOptions::extra_passes`, so that
//!    `strip-identity` can be named in pipeline text.
//!
//! Invariant: the pass only rewires uses and drops ops whose result equals
//! their operand in type and value, so the module keeps verifying and
//! computing the same results (the test checks both).

use aoc_ir::module::{Block, Func};
use aoc_ir::{Diagnostic, Module, Opcode, ValueId};
use aoc_passes::pass::{OptionSpec, PassOptions, parse_bool};
use aoc_passes::{Pass, PassContext, PassDef, PassEntry, PassStats};
use std::collections::HashMap;

/// Options of `strip-identity`.
#[derive(Default, Debug, Clone)]
pub struct StripIdentityOptions {
    /// Also drop `core.cast` ops whose result type equals the operand's.
    pub casts: bool,
}

impl PassOptions for StripIdentityOptions {
    const SPEC: &'static [OptionSpec] = &[OptionSpec {
        name: "casts",
        kind: "bool",
        default: "false",
        doc: "also remove casts to the type the value already has",
    }];
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "casts" => self.casts = parse_bool(value)?,
            _ => return Err(format!("unknown option `{key}`")),
        }
        Ok(())
    }
}

/// The pass.
pub struct StripIdentity {
    options: StripIdentityOptions,
}

impl PassDef for StripIdentity {
    const NAME: &'static str = "strip-identity";
    const SUMMARY: &'static str = "remove core.identity ops (and, with casts=true, no-op casts)";
    type Options = StripIdentityOptions;
    fn new(options: StripIdentityOptions) -> Self {
        StripIdentity { options }
    }
}

/// The registry entry to put in `PipelineOptions::extra_passes`.
pub const ENTRY: PassEntry = PassEntry::of::<StripIdentity>(false);

impl Pass for StripIdentity {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn summary(&self) -> &'static str {
        Self::SUMMARY
    }
    fn run(&mut self, module: &mut Module, _cx: &mut PassContext) -> Result<PassStats, Diagnostic> {
        let mut stats = PassStats::default();
        for func in &mut module.funcs {
            let removed = strip_func(func, self.options.casts);
            if removed > 0 {
                stats
                    .notes
                    .push(format!("@{}: removed {removed} ops", func.name));
            }
        }
        Ok(stats)
    }
}

/// Whether `op` passes its operand through unchanged.
fn is_passthrough(func: &Func, op: &aoc_ir::OpData, casts: bool) -> bool {
    let [x] = op.operands[..] else {
        return false;
    };
    let [y] = op.results[..] else {
        return false;
    };
    // Two opcodes matter here; comparing beats a `match` with a catch-all
    // arm, which the project's style keeps off `Opcode`.
    if op.opcode == Opcode::Identity {
        return true;
    }
    op.opcode == Opcode::Cast && casts && func.ty(x) == func.ty(y)
}

/// Removes pass-through ops from `func`'s body; returns how many.
fn strip_func(func: &mut Func, casts: bool) -> usize {
    // result -> operand of every pass-through op of the top-level body.
    let mut forward: HashMap<ValueId, ValueId> = HashMap::new();
    let mut keep = Vec::with_capacity(func.body.ops.len());
    for &op_id in &func.body.ops {
        let op = &func.ops[op_id];
        if is_passthrough(func, op, casts) {
            forward.insert(op.results[0], op.operands[0]);
        } else {
            keep.push(op_id);
        }
    }
    let removed = func.body.ops.len() - keep.len();
    if removed == 0 {
        return 0;
    }
    // Follow chains (identity of identity) to the first real value.
    let resolve = |mut v: ValueId| {
        while let Some(&w) = forward.get(&v) {
            v = w;
        }
        v
    };
    func.body.ops = keep;
    // Every op of every block (nested regions too) lives in `func.ops`, so
    // rewiring the arena rewires them all; removed ops stay in the arena,
    // unreachable.
    let all: Vec<_> = func.ops.keys().collect();
    for op_id in all {
        let op = &mut func.ops[op_id];
        for v in &mut op.operands {
            *v = resolve(*v);
        }
        for block in &mut op.regions {
            rewire_terminators(block, &resolve);
        }
    }
    for v in &mut func.body.terminator {
        *v = resolve(*v);
    }
    removed
}

/// Blocks of nested regions may return values of the enclosing body.
fn rewire_terminators(block: &mut Block, resolve: &dyn Fn(ValueId) -> ValueId) {
    for v in &mut block.terminator {
        *v = resolve(*v);
    }
}
