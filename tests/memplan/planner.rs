//! The IR-level memory planner, kept as a test reference: one arena per
//! inference, every intermediate *IR value* at an offset planned from value
//! lifetimes (DESIGN §6), with reshape aliasing.
//!
//! The compiler does not use it: `aoc_passes::lower` plans at the level of
//! its steps' virtual buffers (a value may need several — layout copies,
//! packed weights — and several values one — views, in-place epilogues,
//! outputs written straight to the caller's buffers), so its plans differ
//! from these and cannot be made byte-identical. What stays useful here is
//! the lower bound (`peak_live_bytes`) the placement heuristic is measured
//! against, and `check_plan`, which proves a value-level plan safe. Both
//! share the placement heuristic and the checker with the compiler
//! (`aoc_passes::memplan`).
//!
//! Time runs over the function body: parameters are defined at time 0, op
//! number `i` (in program order) runs at time `i + 1`, and the `return` runs
//! at `n + 1`. A value lives from its definition to its last use, both
//! inclusive, so an op's result never shares bytes with its own operands
//! (kernels are not assumed to work in place) — except for declared aliases:
//! the result of a pure view (`core.reshape`, `core.flatten`,
//! `core.identity`) takes its operand's bytes when the operand dies at that
//! op, since the bytes are the same in the same order.
//!
//! Values that get a buffer: every op result that is not a `const` (weights
//! live in the artifact, not the arena); parameters and function results only
//! when the options say so (otherwise they are bound to the caller's buffers).
//!
//! Invariants of a plan (checked by [`check_plan`]): every offset and size is
//! a multiple of [`ALIGN`]; every buffer lies inside the arena; two buffers
//! whose lifetimes overlap share no byte unless one is a declared alias of
//! the other; `peak_live_bytes <= arena_bytes`.

pub use aoc_passes::memplan::{ALIGN, Lifetime, Placed, check_placement, greedy_by_size};
use aoc_ir::{Func, OpId, Opcode, TensorType, Trait, ValueDef, ValueId};
use std::collections::{BTreeMap, HashMap};

/// What to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemPlanOptions {
    /// Let the result of a reshape/flatten/identity reuse its operand's
    /// bytes when the operand dies there.
    pub alias_reshapes: bool,
    /// Give the function's parameters arena buffers (the caller copies the
    /// inputs in); otherwise they stay in the caller's buffers.
    pub plan_params: bool,
    /// Give the function's results arena buffers (the caller copies the
    /// outputs out); otherwise the ops write them to the caller's buffers.
    pub plan_results: bool,
}

impl Default for MemPlanOptions {
    fn default() -> Self {
        MemPlanOptions {
            alias_reshapes: true,
            plan_params: false,
            plan_results: false,
        }
    }
}

/// One value's place in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub offset: u64,
    /// Bytes reserved, a multiple of [`ALIGN`].
    pub size: u64,
}

/// The arena layout of one function.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPlan {
    /// Bytes the arena needs (the end of the highest buffer).
    pub arena_bytes: u64,
    /// Every planned value's buffer (aliases included, at their target's
    /// offset).
    pub buffers: BTreeMap<ValueId, Buffer>,
    /// Declared aliases: value -> the operand whose bytes it reuses.
    pub aliases: BTreeMap<ValueId, ValueId>,
    /// The lower bound any placement of these lifetimes needs: the largest
    /// sum, over time, of the sizes of the live buffers (an alias group
    /// counted once).
    pub peak_live_bytes: u64,
    /// The options the plan was made with (the checker needs them to know
    /// which values must have a buffer).
    pub options: MemPlanOptions,
}

impl MemoryPlan {
    /// The arena a planner without reuse would need: the sum of the sizes of
    /// the distinct buffers (aliases counted once).
    pub fn sum_of_sizes(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|(v, _)| !self.aliases.contains_key(v))
            .map(|(_, b)| b.size)
            .sum()
    }
}

/// Bytes a value of type `ty` occupies before alignment: storage bits ×
/// elements, rounded up to whole bytes (quantized types use their storage
/// integer; `i1` is packed eight to a byte).
pub fn value_bytes(ty: &TensorType) -> u64 {
    let bits = ty.num_elements() as u64 * u64::from(ty.elem.storage().bits());
    bits.div_ceil(8)
}

/// `value_bytes` rounded up to [`ALIGN`].
pub fn buffer_bytes(ty: &TensorType) -> u64 {
    value_bytes(ty).div_ceil(ALIGN) * ALIGN
}

/// Ops whose result is its operand's bytes reinterpreted (the op table's
/// `View` trait).
fn is_view(op: Opcode) -> bool {
    op.info().has_trait(Trait::View)
}

/// Facts about a function's values that both the planner and the checker
/// derive: which values need a buffer and how long each lives.
struct Liveness {
    /// Values needing a buffer, in definition order.
    planned: Vec<ValueId>,
    lifetimes: HashMap<ValueId, Lifetime>,
    /// Time of each body op.
    op_time: HashMap<OpId, usize>,
}

fn liveness(func: &Func, opts: &MemPlanOptions) -> Result<Liveness, String> {
    let n = func.body.ops.len();
    let end = n + 1;
    let mut lifetimes: HashMap<ValueId, Lifetime> = HashMap::new();
    let mut op_time = HashMap::new();
    let mut planned = vec![];
    let is_result = |v: ValueId| func.results().contains(&v);
    for &p in func.params() {
        lifetimes.insert(p, Lifetime { start: 0, end: 0 });
        if opts.plan_params {
            planned.push(p);
        }
    }
    for (i, &op) in func.body.ops.iter().enumerate() {
        let t = i + 1;
        op_time.insert(op, t);
        let data = &func.ops[op];
        // An epilogue region is computed inside its op (no buffers of its
        // own); any other region is not planned.
        if !data.regions.is_empty() && !data.opcode.info().has_trait(aoc_ir::Trait::Epilogue) {
            return Err(format!(
                "{}: ops with regions cannot be memory-planned",
                data.opcode.name()
            ));
        }
        for &x in &data.operands {
            let life = lifetimes.get_mut(&x).ok_or_else(|| {
                format!(
                    "{}: operand %{} used before its definition",
                    data.opcode.name(),
                    func.name_of(x)
                )
            })?;
            life.end = life.end.max(t);
        }
        for &r in &data.results {
            lifetimes.insert(r, Lifetime { start: t, end: t });
            let wanted = data.opcode != Opcode::Const && (opts.plan_results || !is_result(r));
            if wanted {
                planned.push(r);
            }
        }
    }
    for &r in func.results() {
        let life = lifetimes
            .get_mut(&r)
            .ok_or_else(|| format!("returned value %{} has no definition", func.name_of(r)))?;
        life.end = end;
    }
    // A parameter returned as a result is the caller's unless both options
    // ask for planning; `planned` already has it iff `plan_params`.
    if opts.plan_params && !opts.plan_results {
        planned.retain(|v| !(matches!(func.values[*v].def, ValueDef::Param(_)) && is_result(*v)));
    }
    Ok(Liveness {
        planned,
        lifetimes,
        op_time,
    })
}

/// The lifetime of every value of `func` (parameters, op results), in the
/// time of the module doc.
pub fn lifetimes(func: &Func) -> Result<HashMap<ValueId, Lifetime>, String> {
    Ok(liveness(func, &MemPlanOptions::default())?.lifetimes)
}

/// If `v` may alias its operand under `opts`, the operand.
fn alias_target(
    func: &Func,
    live: &Liveness,
    planned: &HashMap<ValueId, usize>,
    v: ValueId,
) -> Option<ValueId> {
    let op = func.def_op(v)?;
    let data = &func.ops[op];
    let [x] = data.operands[..] else { return None };
    let dies_here = live.lifetimes[&x].end == live.op_time[&op];
    let same_bytes = buffer_bytes(func.ty(x)) == buffer_bytes(func.ty(v));
    (is_view(data.opcode) && planned.contains_key(&x) && dies_here && same_bytes).then_some(x)
}

/// Plans the arena of `func`. Errors only on IR the verifier would reject
/// (a use before its definition, ops with regions other than epilogues).
pub fn plan_memory(func: &Func, opts: &MemPlanOptions) -> Result<MemoryPlan, String> {
    let live = liveness(func, opts)?;
    // Alias groups: index of each planned value's group.
    let mut group_of: HashMap<ValueId, usize> = HashMap::new();
    let mut groups: Vec<(Lifetime, u64)> = vec![];
    let mut aliases = BTreeMap::new();
    for &v in &live.planned {
        let life = live.lifetimes[&v];
        let target = if opts.alias_reshapes {
            alias_target(func, &live, &group_of, v)
        } else {
            None
        };
        match target {
            Some(x) => {
                let g = group_of[&x];
                groups[g].0.end = groups[g].0.end.max(life.end);
                group_of.insert(v, g);
                aliases.insert(v, x);
            }
            None => {
                group_of.insert(v, groups.len());
                groups.push((life, buffer_bytes(func.ty(v))));
            }
        }
    }
    let offsets = greedy_by_size(&groups);
    let arena_bytes = groups
        .iter()
        .zip(&offsets)
        .map(|((_, s), o)| o + s)
        .max()
        .unwrap_or(0);
    let buffers = live
        .planned
        .iter()
        .map(|v| {
            let g = group_of[v];
            (
                *v,
                Buffer {
                    offset: offsets[g],
                    size: groups[g].1,
                },
            )
        })
        .collect();
    Ok(MemoryPlan {
        arena_bytes,
        buffers,
        aliases,
        peak_live_bytes: peak_live(&groups),
        options: *opts,
    })
}

/// The largest total size of the groups live at one time.
fn peak_live(groups: &[(Lifetime, u64)]) -> u64 {
    // Sweep: +size at the start, -size just after the end. At one time the
    // ends go first: a group ending at `t - 1` and one starting at `t` are
    // never live together.
    let mut events: Vec<(usize, i8, u64)> = vec![];
    for (life, size) in groups {
        events.push((life.start, 1, *size));
        events.push((life.end + 1, 0, *size));
    }
    events.sort_by_key(|e| (e.0, e.1));
    let (mut now, mut peak) = (0u64, 0u64);
    for (_, kind, size) in events {
        if kind == 1 {
            now += size;
            peak = peak.max(now);
        } else {
            now -= size;
        }
    }
    peak
}

/// Checks a plan against `func`: every value that needs a buffer has one and
/// nothing else does; sizes cover the types; offsets and sizes are aligned;
/// buffers lie inside the arena; buffers of values whose lifetimes overlap
/// share no byte unless one is a declared alias (a view whose operand dies at
/// it, at the same offset and size); the peak is at most the arena.
pub fn check_plan(func: &Func, plan: &MemoryPlan) -> Result<(), String> {
    let live = liveness(func, &plan.options)?;
    let name = |v: ValueId| format!("%{}", func.name_of(v));
    for v in &live.planned {
        if !plan.buffers.contains_key(v) {
            return Err(format!("{} needs a buffer and has none", name(*v)));
        }
    }
    if plan.buffers.len() != live.planned.len() {
        return Err(format!(
            "{} buffers planned, expected {}",
            plan.buffers.len(),
            live.planned.len()
        ));
    }
    for (&v, b) in &plan.buffers {
        if b.offset % ALIGN != 0 || b.size % ALIGN != 0 {
            return Err(format!(
                "{}: offset {} or size {} not aligned to {ALIGN}",
                name(v),
                b.offset,
                b.size
            ));
        }
        if b.size < value_bytes(func.ty(v)) {
            return Err(format!(
                "{}: buffer of {} bytes for {} bytes",
                name(v),
                b.size,
                value_bytes(func.ty(v))
            ));
        }
        if b.offset + b.size > plan.arena_bytes {
            return Err(format!(
                "{}: bytes {}..{} outside the arena of {}",
                name(v),
                b.offset,
                b.offset + b.size,
                plan.arena_bytes
            ));
        }
    }
    // Declared aliases must be legitimate views.
    for (&v, &x) in &plan.aliases {
        let op = func
            .def_op(v)
            .ok_or_else(|| format!("{} aliases {} but is no op result", name(v), name(x)))?;
        let data = &func.ops[op];
        let ok = is_view(data.opcode)
            && data.operands == [x]
            && live.lifetimes[&x].end == live.op_time[&op]
            && plan.buffers.get(&x) == plan.buffers.get(&v);
        if !ok {
            return Err(format!("{} is not a valid alias of {}", name(v), name(x)));
        }
    }
    let root = |mut v: ValueId| {
        while let Some(&x) = plan.aliases.get(&v) {
            v = x;
        }
        v
    };
    // Alias groups share their root's buffer (checked above) and live as
    // long as any member: the rest is the compiler's placement checker.
    let mut groups: BTreeMap<ValueId, Placed> = BTreeMap::new();
    for (&v, &b) in &plan.buffers {
        let life = live.lifetimes[&v];
        let g = groups.entry(root(v)).or_insert(Placed { life, offset: b.offset, size: b.size });
        g.life.start = g.life.start.min(life.start);
        g.life.end = g.life.end.max(life.end);
    }
    let roots: Vec<ValueId> = groups.keys().copied().collect();
    let items: Vec<Placed> = groups.into_values().collect();
    check_placement(&items, plan.arena_bytes, &|i| name(roots[i]))?;
    if plan.peak_live_bytes > plan.arena_bytes {
        return Err(format!(
            "peak live {} exceeds the arena {}",
            plan.peak_live_bytes, plan.arena_bytes
        ));
    }
    Ok(())
}
