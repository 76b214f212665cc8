//! `aoc prune`: structured channel pruning (docs/sparsity.md).
//!
//! A *channel space* is the channel axis a convolution creates (axis 1 of
//! its result) or a linear layer creates (a matmul or gemm on a constant
//! weight: the last axis, its features), followed forward through
//! everything that keeps channels in place — batch-norms, activations,
//! depthwise convolutions, pools, a flatten of `N×C×1×1` (the channel axis
//! then last), a reshape that keeps the last axis, arithmetic with a
//! constant that is per channel (a bias add, a layer scale: sliced with the
//! space) or a scalar — and merged across residual adds and gating products
//! (`x * gate`): what such an op joins must lose the same channels. A space
//! ends at its consumers that reduce over channels: convolutions (their
//! input channels) and gemms / matmuls on its last axis (their k). A
//! transformer's feed-forward hidden units are such a space (matmul, bias,
//! GELU, matmul). A space reaching anything else (a model output, a
//! concat, another reshape, a normalization over channels) is left alone,
//! as is one whose producers are not all selected.
//!
//! In every other space the channels with the smallest filter L1 norms
//! (summed over the space's producers) are removed from producers,
//! members and consumers alike; the result is an ordinary dense model with
//! smaller weights. Invariants: the model is rebuilt op by op through the
//! op table's inference, so every type is re-derived and the result
//! verifies; nothing is written before the whole workflow has succeeded.

use std::collections::{HashMap, HashSet};

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::interp::WeightSource;
use aoc_ir::module::{Func, Module, OpData, OpId, ValueId};
use aoc_ir::ops::fused;
use aoc_ir::ops::kind::{Activation, Binary, Conv, Form, OpCost, OpKind, Pool};
use aoc_ir::{Opcode, Tensor, TensorType, Trait};

use crate::quantize::calib::CalibData;
use crate::quantize::place::Consts;
use crate::quantize::{Score, Set, engine, glob, json_db};

/// What `aoc prune` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--channels`: the fraction of each space's channels removed.
    pub ratio: f64,
    /// `--layers`: globs over the producing layers' names; empty means all.
    pub layers: Vec<String>,
    pub threads: usize,
}

/// One channel space and what became of it.
#[derive(Clone, Debug)]
pub struct SpaceResult {
    /// The producing layers' names.
    pub producers: Vec<String>,
    pub channels: usize,
    pub kept: usize,
    /// Why it was left alone.
    pub why: Option<String>,
}

pub struct Outcome {
    pub module: Module,
    pub spaces: Vec<SpaceResult>,
    pub params: (usize, usize),
    pub flops: (f64, f64),
    pub score: Option<Score>,
    pub report: serde_json::Value,
}

/// How an op takes part in a space.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// A layer creating a space: the channel axis of its weight (operand 1)
    /// and, when it has one, its bias operand's.
    Producer { w_axis: usize, bias: Option<(usize, usize)> },
    /// Arithmetic with a per-channel constant inside a space: the
    /// constant's operand and channel axis.
    Constant { operand: usize, axis: usize },
    /// A depthwise convolution inside one (weight axis 0, bias, groups).
    Depthwise,
    /// A batch-norm inside one (its four parameters).
    BatchNorm,
}

struct Spaces {
    parent: Vec<usize>,
    /// Per space: channels, producer ops, blocked reason.
    channels: Vec<usize>,
    producers: Vec<Vec<OpId>>,
    blocked: Vec<Option<String>>,
}

impl Spaces {
    fn add(&mut self, channels: usize, producer: OpId) -> usize {
        self.parent.push(self.parent.len());
        self.channels.push(channels);
        self.producers.push(vec![producer]);
        self.blocked.push(None);
        self.parent.len() - 1
    }
    fn root(&self, mut s: usize) -> usize {
        while self.parent[s] != s {
            s = self.parent[s];
        }
        s
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        if a != b {
            self.parent[b] = a;
            let p = std::mem::take(&mut self.producers[b]);
            self.producers[a].extend(p);
            if self.blocked[a].is_none() {
                self.blocked[a] = self.blocked[b].take();
            }
        }
    }
    fn block(&mut self, s: usize, why: String) {
        let r = self.root(s);
        if self.blocked[r].is_none() {
            self.blocked[r] = Some(why);
        }
    }
}

/// A value's place in a space: the space and whether its channel axis is
/// 1 (`N×C×...`) or the last (after a flatten).
#[derive(Clone, Copy)]
struct At {
    space: usize,
    last: bool,
}

fn name_of(f: &Func, op: &OpData) -> String {
    op.loc.name.clone().unwrap_or_else(|| f.name_of(op.results[0]).to_string())
}

fn int_attr(a: &Attrs, name: &str) -> i64 {
    match a.get(name) {
        Some(Attr::Int(i)) => *i,
        _ => 1,
    }
}

fn bool_attr(a: &Attrs, name: &str) -> bool {
    matches!(a.get(name), Some(Attr::Bool(true)))
}

/// The L1 norm of each index of `axis` of `w` (a filter's, a feature's).
fn channel_l1(w: &Tensor, axis: usize) -> Vec<f64> {
    let shape = w.shape();
    let inner: usize = shape[axis + 1..].iter().product();
    let dim = shape[axis];
    let mut norms = vec![0f64; dim];
    for (i, x) in w.to_f64().iter().enumerate() {
        norms[(i / inner) % dim] += x.abs();
    }
    norms
}

/// `t` with only the `keep` indices of `axis`.
fn take(t: &Tensor, axis: usize, keep: &[usize]) -> Tensor {
    let shape = t.shape().to_vec();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut new_shape = shape.clone();
    new_shape[axis] = keep.len();
    let dim = shape[axis];
    let idx = (0..outer).flat_map(|o| keep.iter().flat_map(move |&k| (0..inner).map(move |i| (o * dim + k) * inner + i)));
    t.select(TensorType { shape: new_shape, ..t.ty.clone() }, idx)
}

/// The channel spaces of `func`, which ops take part in which, and each
/// space's consumers (op, operand that carries the channels, weight axis).
struct Analysis {
    spaces: Spaces,
    at: HashMap<ValueId, At>,
    roles: HashMap<OpId, (Role, usize)>,
    /// Consumer op -> (space, weight operand, weight axis).
    consumers: HashMap<OpId, (usize, usize, usize)>,
}

/// A binary op of a value in a space and a constant: where the result
/// stands, and the role that slices the constant when it is per channel
/// (`None` for a scalar). `None` when the constant broadcasts any other way.
fn with_constant(func: &Func, consts: &mut Consts, op: &OpData, ins: &[Option<At>], sp: &Spaces) -> Result<Option<(At, Option<Role>)>, String> {
    let (a, ci) = match (ins.first().copied().flatten(), ins.get(1).copied().flatten()) {
        (Some(a), None) => (a, 1),
        (None, Some(b)) => (b, 0),
        _ => return Ok(None),
    };
    if op.operands.len() != 2 || consts.get(op.operands[ci])?.is_none() {
        return Ok(None);
    }
    let x = func.ty(op.operands[1 - ci]);
    let c = func.ty(op.operands[ci]);
    let r = func.ty(op.results[0]);
    if r.shape != x.shape || c.rank() > x.rank() {
        return Ok(None);
    }
    if c.num_elements() == 1 {
        return Ok(Some((a, None)));
    }
    // Per channel: every dimension 1 but the channel axis (aligned to the
    // right, as broadcasting aligns), which has the space's channels.
    let axis = if a.last { x.rank() - 1 } else { 1 };
    let Some(caxis) = (axis + c.rank()).checked_sub(x.rank()) else { return Ok(None) };
    let channels = sp.channels[sp.root(a.space)];
    let per_channel = c.shape.iter().enumerate().all(|(i, &d)| if i == caxis { d == channels } else { d == 1 });
    Ok(per_channel.then_some((a, Some(Role::Constant { operand: ci, axis: caxis }))))
}

fn analyse(func: &Func, consts: &mut Consts) -> Result<Analysis, String> {
    let mut sp = Spaces { parent: vec![], channels: vec![], producers: vec![], blocked: vec![] };
    let mut at: HashMap<ValueId, At> = HashMap::new();
    let mut roles = HashMap::new();
    let mut consumers = HashMap::new();
    for &id in &func.body.ops {
        let op = &func.ops[id];
        let ins: Vec<Option<At>> = op.operands.iter().map(|v| at.get(v).copied()).collect();
        let first = ins.first().copied().flatten();
        let r = op.results.first().copied();
        let is_const = |c: &mut Consts, i: usize| -> Result<bool, String> {
            Ok(match op.operands.get(i) {
                Some(&v) => c.get(v)?.is_some(),
                None => true,
            })
        };
        let mut handled = false;
        match op.opcode.kind() {
            OpKind::Conv(Conv::Direct, Form::Float) if op.operands.len() >= 2 && is_const(consts, 1)? && is_const(consts, 2)? => {
                let w = func.ty(op.operands[1]);
                let groups = int_attr(&op.attrs, "groups") as usize;
                let cin = func.ty(op.operands[0]).shape[1];
                if groups == 1 {
                    if let Some(a) = first.filter(|a| !a.last) {
                        consumers.insert(id, (a.space, 1, 1));
                    }
                    let s = sp.add(w.shape[0], id);
                    let bias = (op.operands.len() > 2).then_some((2, 0));
                    roles.insert(id, (Role::Producer { w_axis: 0, bias }, s));
                    at.insert(r.expect("a result"), At { space: s, last: false });
                    handled = true;
                } else if groups == cin
                    && w.shape[0] == cin
                    && w.shape[1] == 1
                    && let Some(a) = first.filter(|a| !a.last)
                {
                    roles.insert(id, (Role::Depthwise, a.space));
                    at.insert(r.expect("a result"), a);
                    handled = true;
                }
            }
            OpKind::Pointwise(aoc_ir::ops::kind::Pointwise::BatchNorm) => {
                if let Some(a) = first.filter(|a| !a.last) {
                    let mut params_const = true;
                    for i in 1..5 {
                        params_const &= is_const(consts, i)?;
                    }
                    if params_const {
                        roles.insert(id, (Role::BatchNorm, a.space));
                        at.insert(r.expect("a result"), a);
                        handled = true;
                    }
                }
            }
            OpKind::Unary(_) | OpKind::Activation(_) if op.operands.len() == 1 => {
                if let Some(a) = first {
                    at.insert(r.expect("a result"), a);
                    handled = true;
                }
            }
            OpKind::Activation(Activation::Prelu) => {}
            OpKind::Binary(kind @ (Binary::Add | Binary::Mul | Binary::Sub | Binary::Max | Binary::Min | Binary::Div | Binary::Pow)) => {
                // Division and powers join nothing and take a constant on
                // the right only (x / c, x ^ c).
                let symmetric = !matches!(kind, Binary::Div | Binary::Pow);
                let second = ins.get(1).copied().flatten();
                if symmetric
                    && let (Some(a), Some(b)) = (first, second)
                    && a.last == b.last
                    && sp.channels[sp.root(a.space)] == sp.channels[sp.root(b.space)]
                {
                    sp.union(a.space, b.space);
                    at.insert(r.expect("a result"), a);
                    handled = true;
                } else if (symmetric || second.is_none())
                    && let Some((x, role)) = with_constant(func, consts, op, &ins, &sp)?
                {
                    if let Some(role) = role {
                        roles.insert(id, (role, x.space));
                    }
                    at.insert(r.expect("a result"), x);
                    handled = true;
                }
            }
            OpKind::Pool(Pool::Max | Pool::Avg | Pool::GlobalAvg | Pool::GlobalMax, Form::Float) => {
                if let Some(a) = first.filter(|a| !a.last) {
                    at.insert(r.expect("a result"), a);
                    handled = true;
                }
            }
            // A reshape that keeps the last axis (GPT-2's linear layers
            // run on `[rows, features]` views) keeps a space on it.
            OpKind::Movement(_)
                if matches!(op.opcode, Opcode::Reshape | Opcode::Flatten)
                    && first.is_some_and(|a| a.last)
                    && func.ty(op.operands[0]).shape.last() == func.ty(r.expect("a result")).shape.last() =>
            {
                at.insert(r.expect("a result"), first.expect("checked"));
                handled = true;
            }
            OpKind::Movement(_) if op.opcode == Opcode::Flatten => {
                let xs = &func.ty(op.operands[0]).shape;
                if let Some(a) = first.filter(|a| !a.last)
                    && int_attr(&op.attrs, "axis") == 1
                    && xs.len() == 4
                    && xs[2] == 1
                    && xs[3] == 1
                {
                    at.insert(r.expect("a result"), At { space: a.space, last: true });
                    handled = true;
                }
            }
            OpKind::Gemm(Form::Float) if is_const(consts, 1)? && !bool_attr(&op.attrs, "trans_a") => {
                let trans_b = bool_attr(&op.attrs, "trans_b");
                let out = func.ty(r.expect("a result"));
                let n = out.shape[1];
                // The bias c: per feature ([n] or [1, n]) or a scalar.
                let bias = match op.operands.get(2) {
                    None => Some(None),
                    Some(_) if !is_const(consts, 2)? => None,
                    Some(&c) => match func.ty(c).shape.as_slice() {
                        [k] if *k == n => Some(Some((2, 0))),
                        [1, k] if *k == n => Some(Some((2, 1))),
                        [] | [1] | [1, 1] => Some(None),
                        _ => None,
                    },
                };
                match first {
                    Some(a) if a.last => {
                        consumers.insert(id, (a.space, 1, if trans_b { 1 } else { 0 }));
                        handled = true;
                    }
                    Some(_) => {}
                    None => handled = true,
                }
                if handled && let Some(bias) = bias {
                    let s = sp.add(n, id);
                    roles.insert(id, (Role::Producer { w_axis: if trans_b { 0 } else { 1 }, bias }, s));
                    at.insert(r.expect("a result"), At { space: s, last: true });
                }
            }
            OpKind::MatMul(Form::Float) if is_const(consts, 1)? && func.ty(op.operands[1]).rank() == 2 => {
                match first {
                    Some(a) if a.last => {
                        consumers.insert(id, (a.space, 1, 0));
                        handled = true;
                    }
                    Some(_) => {}
                    None => handled = true,
                }
                if handled {
                    let s = sp.add(func.ty(op.operands[1]).shape[1], id);
                    roles.insert(id, (Role::Producer { w_axis: 1, bias: None }, s));
                    at.insert(r.expect("a result"), At { space: s, last: true });
                }
            }
            // Every other op pins the spaces it reads (below).
            _ => {}
        }
        // Any other use of a value in a space pins that space.
        let used: Vec<At> = ins.iter().flatten().copied().collect();
        let other_operand_in_space = match roles.get(&id) {
            Some(_) => false,
            None => consumers.contains_key(&id) && ins.iter().skip(1).any(|i| i.is_some()),
        };
        if (!handled && !used.is_empty()) || other_operand_in_space {
            for a in used {
                sp.block(a.space, format!("reaches {} ({})", op.opcode.name(), name_of(func, op)));
            }
        }
    }
    for &r in func.results() {
        if let Some(a) = at.get(&r) {
            sp.block(a.space, "reaches a model output".to_string());
        }
    }
    // A weight that several ops read (ALBERT shares its layers') would be
    // sliced once per reader: copies, and more parameters, not fewer.
    let mut readers: HashMap<ValueId, usize> = HashMap::new();
    for &id in &func.body.ops {
        for &v in &func.ops[id].operands {
            *readers.entry(v).or_default() += 1;
        }
    }
    let shared = |op: OpId, i: usize| func.ops[op].operands.get(i).is_some_and(|v| readers.get(v).copied().unwrap_or(0) > 1);
    let mut sliced: Vec<(OpId, usize, usize)> = vec![];
    for (&op, &(role, s)) in &roles {
        match role {
            Role::Producer { bias, .. } => {
                sliced.push((op, 1, s));
                sliced.extend(bias.map(|(i, _)| (op, i, s)));
            }
            Role::Constant { operand, .. } => sliced.push((op, operand, s)),
            Role::Depthwise => sliced.extend([(op, 1, s), (op, 2, s)]),
            Role::BatchNorm => sliced.extend((1..5).map(|i| (op, i, s))),
        }
    }
    sliced.extend(consumers.iter().map(|(&op, &(s, i, _))| (op, i, s)));
    sliced.sort_unstable();
    for (op, i, s) in sliced {
        if shared(op, i) {
            sp.block(s, format!("{} shares its weights with another op", name_of(func, &func.ops[op])));
        }
    }
    Ok(Analysis { spaces: sp, at, roles, consumers })
}

fn param_count(f: &Func) -> usize {
    f.body.ops.iter().filter(|&&o| f.ops[o].opcode == Opcode::Const).map(|&o| f.ty(f.ops[o].results[0]).num_elements()).sum()
}

fn flop_count(f: &Func) -> f64 {
    f.body
        .ops
        .iter()
        .map(|&o| {
            let op = &f.ops[o];
            let kind = op.opcode.kind();
            if !matches!(kind, OpKind::Conv(..) | OpKind::MatMul(_) | OpKind::Gemm(_)) {
                return 0.0;
            }
            let operands: Vec<&TensorType> = op.operands.iter().map(|&v| f.ty(v)).collect();
            OpKind::flops(&OpCost { kind, trans_a: bool_attr(&op.attrs, "trans_a"), operands: &operands, result: f.ty(op.results[0]) })
        })
        .sum()
}

/// Prunes `module`'s entry function.
pub fn prune(
    mut module: Module,
    weights: &dyn WeightSource,
    calib: Option<&CalibData>,
    cfg: &Config,
    model_name: &str,
) -> Result<Outcome, String> {
    if !(cfg.ratio > 0.0 && cfg.ratio < 1.0) {
        return Err(format!("error: --channels takes a ratio in (0, 1), found {}", cfg.ratio));
    }
    let entry = module.entry().ok_or_else(|| format!("error: {model_name} has no function"))?.name.clone();
    let fidx = module.funcs.iter().position(|f| f.name == entry).expect("entry exists");
    let func = module.funcs[fidx].clone();
    let mut consts = Consts::new(&func, weights);
    let mut an = analyse(&func, &mut consts)?;
    let mut convs: Vec<OpId> = an.roles.iter().filter(|(_, (r, _))| matches!(r, Role::Producer { .. })).map(|(&o, _)| o).collect();
    convs.sort_unstable();
    if convs.is_empty() {
        return Err(format!("error: {model_name} has nothing to prune (no float conv2d, matmul or gemm with constant weights)"));
    }
    // --layers: spaces whose producers are not all selected stay.
    if !cfg.layers.is_empty() {
        let mut selected: HashSet<OpId> = HashSet::new();
        for pat in &cfg.layers {
            let hits: Vec<OpId> = convs.iter().copied().filter(|&o| glob(pat, &name_of(&func, &func.ops[o])) || glob(pat, func.name_of(func.ops[o].results[0]))).collect();
            if hits.is_empty() {
                let mut names: Vec<String> = convs.iter().map(|&o| name_of(&func, &func.ops[o])).collect();
                names.sort();
                names.truncate(12);
                return Err(format!("error: --layers {pat} matches no prunable layer; they are named {}", names.join(", ")));
            }
            selected.extend(hits);
        }
        for &o in &convs {
            if !selected.contains(&o) {
                let s = an.roles[&o].1;
                an.spaces.block(s, "not selected by --layers".to_string());
            }
        }
    }
    // The kept channels of each space: largest summed filter L1 norms.
    let mut keep: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut results = vec![];
    let roots: Vec<usize> = (0..an.spaces.parent.len()).filter(|&s| an.spaces.root(s) == s).collect();
    for s in roots {
        let c = an.spaces.channels[s];
        let producers: Vec<String> = an.spaces.producers[s].iter().map(|&o| name_of(&func, &func.ops[o])).collect();
        let n_keep = ((c as f64) * (1.0 - cfg.ratio)).round().max(1.0) as usize;
        let mut why = an.spaces.blocked[s].clone();
        if why.is_none() && n_keep >= c {
            why = Some(format!("{c} channels: removing {:.0}% leaves them all", 100.0 * cfg.ratio));
        }
        if why.is_none() {
            let mut score = vec![0f64; c];
            for &o in &an.spaces.producers[s] {
                let Some(&(Role::Producer { w_axis, .. }, _)) = an.roles.get(&o) else { continue };
                let w = consts.get(func.ops[o].operands[1])?.ok_or("internal error: a producer's weight is not constant (please report)")?;
                let norms = channel_l1(&w, w_axis);
                // Each producer's norms relative to its mean, so a residual
                // group weighs its convolutions alike.
                let mean = norms.iter().sum::<f64>() / c as f64;
                for k in 0..c {
                    score[k] += if mean > 0.0 { norms[k] / mean } else { 0.0 };
                }
            }
            let mut order: Vec<usize> = (0..c).collect();
            order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
            let mut kept = order[..n_keep].to_vec();
            kept.sort_unstable();
            keep.insert(s, kept);
        }
        results.push(SpaceResult { producers, channels: c, kept: if why.is_none() { n_keep } else { c }, why });
    }

    // Rebuild the function with the sliced weights; types re-inferred.
    let mut f = Func::new(func.name.clone());
    f.loc = func.loc.clone();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for &p in func.params() {
        let v = f.add_param(func.name_of(p), func.ty(p).clone(), func.values[p].loc.clone());
        map.insert(p, v);
    }
    let space_keep = |s: usize| keep.get(&an.spaces.root(s));
    for &id in &func.body.ops {
        let op = &func.ops[id];
        let mut operands: Vec<ValueId> = op.operands.iter().map(|v| map[v]).collect();
        let mut attrs = op.attrs.clone();
        // Operand index -> (axis, kept indices) to slice.
        let mut cuts: Vec<(usize, usize, &Vec<usize>)> = vec![];
        if let Some(&(role, s)) = an.roles.get(&id)
            && let Some(k) = space_keep(s)
        {
            match role {
                Role::Producer { w_axis, bias } => {
                    cuts.push((1, w_axis, k));
                    if let Some((i, axis)) = bias {
                        cuts.push((i, axis, k));
                    }
                }
                Role::Constant { operand, axis } => cuts.push((operand, axis, k)),
                Role::Depthwise => {
                    cuts.push((1, 0, k));
                    if op.operands.len() > 2 {
                        cuts.push((2, 0, k));
                    }
                    attrs.set("groups", Attr::Int(k.len() as i64));
                }
                Role::BatchNorm => {
                    for i in 1..5 {
                        cuts.push((i, 0, k));
                    }
                }
            }
        }
        if let Some(&(s, operand, axis)) = an.consumers.get(&id)
            && let Some(k) = space_keep(s)
        {
            cuts.push((operand, axis, k));
        }
        // A reshape in a space: its target shape's last axis shrinks too.
        if op.opcode == Opcode::Reshape
            && let Some(a) = an.at.get(&op.results[0])
            && let Some(k) = space_keep(a.space)
            && let Some(Attr::Ints(mut shape)) = attrs.get("shape").cloned()
            && let Some(last) = shape.last_mut()
        {
            *last = k.len() as i64;
            attrs.set("shape", Attr::Ints(shape));
        }
        let touched = !cuts.is_empty() || op.results.iter().any(|r| an.at.get(r).is_some_and(|a| space_keep(a.space).is_some()));
        if !touched {
            let results = op.results.iter().map(|&r| (func.name_of(r).to_string(), func.ty(r).clone())).collect();
            let new = f.push_op_unchecked(op.opcode, operands, attrs, results, op.loc.clone());
            if !op.regions.is_empty() {
                fused::set_epilogue(&mut f, new, &fused::epilogue(&func, op)?)?;
            }
            for (&r, &n) in op.results.iter().zip(&f.ops[new].results) {
                map.insert(r, n);
            }
            continue;
        }
        // Slicing composes: a conv may be producer and consumer at once.
        let mut sliced: HashMap<usize, Tensor> = HashMap::new();
        for (i, axis, k) in cuts {
            let t = match sliced.remove(&i) {
                Some(t) => t,
                None => consts.get(op.operands[i])?.ok_or("internal error: a pruned weight is not constant (please report)")?,
            };
            sliced.insert(i, take(&t, axis, k));
        }
        let mut idx: Vec<usize> = sliced.keys().copied().collect();
        idx.sort_unstable();
        for i in idx {
            let t = sliced.remove(&i).expect("sliced");
            let ty = t.ty.clone();
            let a = Attrs::new().with("value", Attr::Const(ConstValue::tensor(t)));
            let hint = format!("{}.pruned", func.name_of(op.operands[i]));
            operands[i] = f
                .push_op(Opcode::Const, &[], a, Some(vec![ty]), &hint, op.loc.clone())
                .map_err(|d| format!("internal error: pruning {}: {} (please report)", name_of(&func, op), d.message))?[0];
        }
        if op.opcode.info().has_trait(Trait::DeclaredResult) || !op.regions.is_empty() {
            return Err(format!("internal error: pruning through {} (please report)", op.opcode.name()));
        }
        let new = f
            .push_op(op.opcode, &operands, attrs, None, func.name_of(op.results[0]), op.loc.clone())
            .map_err(|d| format!("internal error: pruning {}: {} (please report)", name_of(&func, op), d.message))?;
        for (&r, &n) in op.results.iter().zip(&new) {
            map.insert(r, n);
        }
    }
    let results_v: Vec<ValueId> = func.results().iter().map(|v| map[v]).collect();
    f.set_return(results_v);
    f.result_names = func.result_names.clone();
    crate::quantize::place::remove_dead(&mut f);
    let before = (param_count(&func), flop_count(&func));
    let after = (param_count(&f), flop_count(&f));
    module.funcs[fidx] = f;
    if let Some(d) = aoc_ir::verify::verify_module(&module).first() {
        return Err(format!("internal error: the pruned model does not verify: {} (please report)", d.message));
    }
    let score = match calib {
        Some(data) => {
            let mut dense_module = module.clone();
            dense_module.funcs[fidx] = func.clone();
            let dense = engine::compile(&dense_module, weights, cfg.threads)?;
            let set = Set::reference(data, &dense, func.results().len())?;
            drop(dense);
            let s = engine::compile(&module, weights, cfg.threads)?;
            Some(set.score(&s, usize::MAX)?)
        }
        None => None,
    };
    let report = serde_json::json!({
        "model": model_name,
        "channels": cfg.ratio,
        "params_before": before.0,
        "params_after": after.0,
        "flops_before": before.1,
        "flops_after": after.1,
        "sqnr_db": score.map(|s| json_db(s.sqnr_db)),
        "top1_agreement": score.and_then(|s| s.top1),
        "spaces": results.iter().map(|r| serde_json::json!({
            "producers": r.producers, "channels": r.channels, "kept": r.kept, "why": r.why,
        })).collect::<Vec<_>>(),
    });
    Ok(Outcome { module, spaces: results, params: (before.0, after.0), flops: (before.1, after.1), score, report })
}

/// The table `aoc prune` prints.
pub fn table(o: &Outcome) -> String {
    let mut s = String::from("channels  kept  producers (why left alone)\n");
    for r in &o.spaces {
        let why = r.why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default();
        s.push_str(&format!("{:>8}  {:>4}  {}{why}\n", r.channels, r.kept, r.producers.join(", ")));
    }
    let pct = |a: f64, b: f64| if a > 0.0 { 100.0 * (1.0 - b / a) } else { 0.0 };
    s.push_str(&format!(
        "parameters {} -> {} (-{:.1}%), FLOPs {:.3e} -> {:.3e} (-{:.1}%)",
        o.params.0,
        o.params.1,
        pct(o.params.0 as f64, o.params.1 as f64),
        o.flops.0,
        o.flops.1,
        pct(o.flops.0, o.flops.1)
    ));
    match o.score {
        Some(sc) => {
            let db = if sc.sqnr_db.is_finite() { format!("{:.2} dB", sc.sqnr_db) } else { "exact".to_string() };
            s.push_str(&format!("; output SQNR against the unpruned model {db} on {} calibration batches", sc.batches));
            if let Some(t) = sc.top1 {
                s.push_str(&format!(", top-1 agreement {:.2}%", 100.0 * t));
            }
            s.push('\n');
        }
        None => s.push_str(" (no --calib: accuracy not measured)\n"),
    }
    s.push_str("note: the pruned model needs fine-tuning to recover accuracy (aoc export --format onnx)\n");
    s
}
