//! `aoc prune`: structured channel pruning (docs/sparsity.md).
//!
//! A *channel space* is the channel axis a convolution creates: axis 1 of
//! its result, followed forward through everything that keeps channels in
//! place — batch-norms, activations, depthwise convolutions, pools, a
//! flatten of `N×C×1×1` (the channel axis then last) — and merged across
//! residual adds and gating products (`x * gate`): what such an op joins
//! must lose the same channels. A space ends at its consumers that reduce
//! over channels: convolutions (their input channels) and gemms / matmuls
//! after a flatten (their k). A space reaching anything else (a model
//! output, a concat, a reshape, an op with a constant operand) is left
//! alone, as is one whose producing convolutions are not all selected.
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
use crate::quantize::{Score, Set, engine, glob};

/// What `aoc prune` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--channels`: the fraction of each space's channels removed.
    pub ratio: f64,
    /// `--layers`: globs over convolution names; empty means all.
    pub layers: Vec<String>,
    pub threads: usize,
}

/// One channel space and what became of it.
#[derive(Clone, Debug)]
pub struct SpaceResult {
    /// The producing convolutions' names.
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
    /// A convolution creating a space (weight axis 0, bias).
    Producer,
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
                    roles.insert(id, (Role::Producer, s));
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
            OpKind::Binary(Binary::Add | Binary::Mul | Binary::Sub | Binary::Max | Binary::Min) => {
                if let (Some(a), Some(b)) = (first, ins.get(1).copied().flatten())
                    && a.last == b.last
                    && sp.channels[sp.root(a.space)] == sp.channels[sp.root(b.space)]
                {
                    sp.union(a.space, b.space);
                    at.insert(r.expect("a result"), a);
                    handled = true;
                }
            }
            OpKind::Pool(Pool::Max | Pool::Avg | Pool::GlobalAvg | Pool::GlobalMax, Form::Float) => {
                if let Some(a) = first.filter(|a| !a.last) {
                    at.insert(r.expect("a result"), a);
                    handled = true;
                }
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
            OpKind::Gemm(Form::Float) if is_const(consts, 1)? => {
                if let Some(a) = first.filter(|a| a.last)
                    && !bool_attr(&op.attrs, "trans_a")
                {
                    consumers.insert(id, (a.space, 1, if bool_attr(&op.attrs, "trans_b") { 1 } else { 0 }));
                    handled = true;
                }
            }
            OpKind::MatMul(Form::Float) if is_const(consts, 1)? && func.ty(op.operands[1]).rank() == 2 => {
                if let Some(a) = first.filter(|a| a.last) {
                    consumers.insert(id, (a.space, 1, 0));
                    handled = true;
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
    let convs: Vec<OpId> = an.roles.iter().filter(|(_, (r, _))| *r == Role::Producer).map(|(&o, _)| o).collect();
    if convs.is_empty() {
        return Err(format!("error: {model_name} has no convolution to prune (float conv2d with constant weights)"));
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
                return Err(format!("error: --layers {pat} matches no convolution; they are named {}", names.join(", ")));
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
                let w = consts.get(func.ops[o].operands[1])?.ok_or("internal error: a producer's weight is not constant (please report)")?;
                let v = w.to_f64();
                let per = v.len() / c.max(1);
                let norms: Vec<f64> = (0..c).map(|k| v[k * per..(k + 1) * per].iter().map(|x| x.abs()).sum()).collect();
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
                Role::Producer | Role::Depthwise => {
                    cuts.push((1, 0, k));
                    if op.operands.len() > 2 {
                        cuts.push((2, 0, k));
                    }
                    if role == Role::Depthwise {
                        attrs.set("groups", Attr::Int(k.len() as i64));
                    }
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
        "sqnr_db": score.map(|s| if s.sqnr_db.is_finite() { serde_json::json!(s.sqnr_db) } else { serde_json::Value::Null }),
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
