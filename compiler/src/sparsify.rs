//! `aoc sparsify`: N:M semi-structured magnitude pruning (docs/sparsity.md).
//!
//! 1. [`layers`] finds the prunable layers of the entry function: float
//!    convolutions, matmuls and gemms whose weight is a constant, each with
//!    its reduction axis (C_in/groups·kh·kw per output channel, or k);
//!    layers whose reduction length is not a multiple of m, grouped
//!    convolutions and gemms with a transposed input are skipped, with why.
//! 2. Each chosen layer becomes `sparse.conv2d` / `sparse.matmul` on its
//!    weight pruned to the n largest magnitudes of every m along that axis
//!    ([`aoc_ir::ops::sparse::prune`]), laid out [N, K] for products.
//! 3. With calibration batches, every candidate is measured alone (output
//!    SQNR against the dense model, on the kernels `aoc compile` makes,
//!    through `aoc quantize`'s engine); with `--min-sqnr` the layers are
//!    pruned most-tolerant first while the model stays at or above it.
//!
//! Invariants: nothing is written before the whole workflow has succeeded
//! (the caller writes the returned module); batch-norms and the model's
//! structure are left as they are, so the result fine-tunes as the
//! original did.

use std::collections::{HashMap, HashSet};

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::interp::WeightSource;
use aoc_ir::module::{Func, Module, OpId, ValueId};
use aoc_ir::ops::kind::{Conv, Form, OpKind};
use aoc_ir::ops::sparse;
use aoc_ir::{Opcode, Tensor, TensorType};

use crate::quantize::calib::CalibData;
use crate::quantize::place::{Consts, remove_dead};
use crate::quantize::{Score, Set, db, engine, glob, json_db};

/// What `aoc sparsify` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--pattern n:m`.
    pub n: usize,
    pub m: usize,
    /// `--layers`: globs over layer names; empty means every layer.
    pub layers: Vec<String>,
    /// `--min-sqnr`: the output SQNR (dB) against the dense model to keep.
    pub min_sqnr: Option<f64>,
    pub threads: usize,
    pub progress: bool,
}

/// Parses `--pattern` (`2:4`).
pub fn parse_pattern(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("error: --pattern takes n:m with 0 < n < m <= 64 (2:4 for sparse tensor cores), found `{s}`");
    let (n, m) = s.split_once(':').ok_or_else(bad)?;
    let (n, m): (usize, usize) = (n.trim().parse().map_err(|_| bad())?, m.trim().parse().map_err(|_| bad())?);
    if n == 0 || n >= m || m > 64 {
        return Err(bad());
    }
    Ok((n, m))
}

/// A prunable layer.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The ONNX node / loc name, else the result name.
    pub name: String,
    pub value_name: String,
    pub op: OpId,
    pub opcode: &'static str,
    /// The reduction length the pattern runs along.
    pub reduction: usize,
    /// Why it cannot be pruned, if so.
    pub skip: Option<String>,
    /// The sparse op and its operands, when it can be.
    plan: Option<Rewrite>,
}

#[derive(Clone, Debug)]
struct Rewrite {
    opcode: Opcode,
    input: ValueId,
    /// The dense weight, laid out as the sparse op takes it (OIHW, or [N, K]).
    weight: Tensor,
    bias: Option<Tensor>,
    attrs: Attrs,
}

/// A layer's fate, for the table and the report.
#[derive(Clone, Debug)]
pub struct LayerResult {
    pub name: String,
    pub op: &'static str,
    pub reduction: usize,
    pub pruned: bool,
    pub why: Option<String>,
    /// Output SQNR with only this layer pruned.
    pub sqnr_alone: Option<f64>,
}

pub struct Outcome {
    pub module: Module,
    pub layers: Vec<LayerResult>,
    /// The sparsified model against the dense one on the calibration set.
    pub score: Option<Score>,
    pub report: serde_json::Value,
}

fn bool_attr(attrs: &Attrs, name: &str) -> bool {
    matches!(attrs.get(name), Some(Attr::Bool(true)))
}

fn float_attr(attrs: &Attrs, name: &str) -> f64 {
    match attrs.get(name) {
        Some(Attr::Float(v)) => *v,
        Some(Attr::Int(i)) => *i as f64,
        _ => 1.0,
    }
}

/// The dense products `aoc sparsify` rewrites.
#[derive(Clone, Copy)]
enum Product {
    Conv,
    MatMul,
    Gemm,
}

/// `t` (`[K, N]`) transposed to `[N, K]`, each value times `scale`.
fn transposed(t: &Tensor, scale: f64) -> Tensor {
    let (k, n) = (t.shape()[0], t.shape()[1]);
    let v = t.to_f64();
    let out = (0..n * k).map(|i| scale * v[(i % k) * n + i / k]).collect();
    Tensor::from_f64(TensorType::new(vec![n, k], t.ty.elem.clone()), out)
}

/// The prunable layers of `func`, in program order, each with its rewrite
/// or the reason it has none.
pub fn layers(func: &Func, weights: &dyn WeightSource, m: usize) -> Result<Vec<Layer>, String> {
    let mut consts = Consts::new(func, weights);
    let mut out = vec![];
    for &op in &func.body.ops {
        let d = &func.ops[op];
        let which = match d.opcode.kind() {
            OpKind::Conv(Conv::Direct, Form::Float) => Some(Product::Conv),
            OpKind::MatMul(Form::Float) => Some(Product::MatMul),
            OpKind::Gemm(Form::Float) => Some(Product::Gemm),
            OpKind::Conv(..)
            | OpKind::MatMul(_)
            | OpKind::Gemm(_)
            | OpKind::Constant
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Activation(_)
            | OpKind::Pointwise(_)
            | OpKind::Norm(_)
            | OpKind::Attention
            | OpKind::Pool(..)
            | OpKind::Reduce(_)
            | OpKind::Movement(_)
            | OpKind::Resize
            | OpKind::GridSample
            | OpKind::Recurrent(_)
            | OpKind::Control(_) => None,
        };
        let Some(which) = which.filter(|_| d.operands.len() >= 2) else { continue };
        let result = d.results[0];
        let mut layer = Layer {
            name: d.loc.name.clone().unwrap_or_else(|| func.name_of(result).to_string()),
            value_name: func.name_of(result).to_string(),
            op,
            opcode: d.opcode.name(),
            reduction: 0,
            skip: None,
            plan: None,
        };
        let x = d.operands[0];
        let float = func.ty(x).elem.is_float() && func.ty(result).elem.is_float();
        let Some(w) = consts.get(d.operands[1])?.filter(|_| float) else {
            layer.skip = Some(if float { "its weight is not a constant" } else { "not a float op" }.to_string());
            out.push(layer);
            continue;
        };
        let bias = match d.operands.get(2) {
            Some(&b) => match consts.get(b)? {
                Some(t) => Some(t),
                None => {
                    layer.skip = Some("its bias is not a constant".to_string());
                    out.push(layer);
                    continue;
                }
            },
            None => None,
        };
        let rewrite = match which {
            Product::Conv => {
                layer.reduction = w.shape().iter().skip(1).product();
                let groups = matches!(d.attrs.get("groups"), Some(Attr::Int(g)) if *g > 1);
                if groups {
                    Err("a grouped or depthwise convolution: the sparse kernels take one group".to_string())
                } else {
                    Ok(Rewrite { opcode: Opcode::SparseConv2d, input: x, weight: w, bias, attrs: d.attrs.clone() })
                }
            }
            Product::MatMul => {
                layer.reduction = w.shape().first().copied().unwrap_or(0);
                if w.ty.rank() != 2 {
                    Err(format!("a batched weight ({}): sparse.matmul takes a matrix", w.ty))
                } else {
                    Ok(Rewrite { opcode: Opcode::SparseMatMul, input: x, weight: transposed(&w, 1.0), bias: None, attrs: Attrs::new() })
                }
            }
            Product::Gemm => {
                // alpha · a @ op(b) + beta · c
                let tb = bool_attr(&d.attrs, "trans_b");
                layer.reduction = if tb { w.shape()[1] } else { w.shape()[0] };
                let alpha = float_attr(&d.attrs, "alpha");
                let beta = float_attr(&d.attrs, "beta");
                let n = if tb { w.shape()[0] } else { w.shape()[1] };
                if bool_attr(&d.attrs, "trans_a") {
                    Err("a gemm with trans_a: the sparse kernels read the input untransposed".to_string())
                } else if bias.as_ref().is_some_and(|b| b.len() != n) {
                    Err(format!("its c operand is not a vector of {n} (a bias)"))
                } else {
                    let weight = if tb {
                        let v = w.to_f64().into_iter().map(|x| alpha * x).collect();
                        Tensor::from_f64(w.ty.clone(), v)
                    } else {
                        transposed(&w, alpha)
                    };
                    let bias = bias.map(|b| {
                        let v = b.to_f64().into_iter().map(|x| beta * x).collect();
                        Tensor::from_f64(TensorType::new(vec![n], b.ty.elem.clone()), v)
                    });
                    Ok(Rewrite { opcode: Opcode::SparseMatMul, input: x, weight, bias, attrs: Attrs::new() })
                }
            }
        };
        match rewrite {
            Err(why) => layer.skip = Some(why),
            Ok(_) if !layer.reduction.is_multiple_of(m) => {
                layer.skip = Some(format!("its reduction length {} is not a multiple of {m}", layer.reduction));
            }
            Ok(r) => layer.plan = Some(r),
        }
        out.push(layer);
    }
    Ok(out)
}

/// `func` with the layers in `active` replaced by their sparse ops.
pub fn build(func: &Func, layers: &[Layer], active: &HashSet<usize>, n: usize, m: usize) -> Result<Func, String> {
    let mut f = func.clone();
    for (i, l) in layers.iter().enumerate() {
        let Some(r) = l.plan.as_ref().filter(|_| active.contains(&i)) else { continue };
        let loc = f.ops[l.op].loc.clone();
        let w = sparse::prune(&r.weight, n, m).map_err(|e| format!("error: {}: {e}", l.name))?;
        let mut operands = vec![r.input, push_const(&mut f, l.op, w, &format!("{}.sparse_w", l.value_name), loc.clone())?];
        if let Some(b) = &r.bias {
            operands.push(push_const(&mut f, l.op, b.clone(), &format!("{}.sparse_b", l.value_name), loc.clone())?);
        }
        let op = &mut f.ops[l.op];
        op.opcode = r.opcode;
        op.operands = operands;
        op.attrs = r.opcode.info().complete_attrs(r.attrs.clone()).map_err(|e| format!("error: {}: {e}", l.name))?;
    }
    remove_dead(&mut f);
    Ok(f)
}

/// Pushes a constant and moves it right before `before`.
fn push_const(f: &mut Func, before: OpId, t: Tensor, name: &str, loc: aoc_ir::Location) -> Result<ValueId, String> {
    let ty = t.ty.clone();
    let attrs = Attrs::new().with("value", Attr::Const(ConstValue::tensor(t)));
    let v = f.push_op(Opcode::Const, &[], attrs, Some(vec![ty]), name, loc).map_err(|d| format!("error: {}", d.message))?[0];
    let new = f.body.ops.pop().expect("just pushed");
    let pos = f.body.ops.iter().position(|&o| o == before).expect("the layer is in the body");
    f.body.ops.insert(pos, new);
    Ok(v)
}

/// Sparsifies `module`'s entry function.
pub fn sparsify(
    mut module: Module,
    weights: &dyn WeightSource,
    calib: Option<&CalibData>,
    cfg: &Config,
    model_name: &str,
) -> Result<Outcome, String> {
    let (n, m) = (cfg.n, cfg.m);
    let entry = module.entry().ok_or_else(|| format!("error: {model_name} has no function"))?.name.clone();
    let fidx = module.funcs.iter().position(|f| f.name == entry).expect("entry exists");
    let func = module.funcs[fidx].clone();
    let mut layers = layers(&func, weights, m)?;
    if layers.is_empty() {
        return Err(format!("error: {model_name} has no layer to sparsify (float convolutions, matmuls and gemms with constant weights)"));
    }
    if !cfg.layers.is_empty() {
        let mut selected = vec![false; layers.len()];
        for pat in &cfg.layers {
            let hits: Vec<usize> =
                (0..layers.len()).filter(|&i| glob(pat, &layers[i].name) || glob(pat, &layers[i].value_name)).collect();
            if hits.is_empty() {
                let names: Vec<&str> = layers.iter().take(12).map(|l| l.name.as_str()).collect();
                return Err(format!(
                    "error: --layers {pat} matches no layer; the layers are named {}{}",
                    names.join(", "),
                    if layers.len() > 12 { ", ..." } else { "" }
                ));
            }
            for i in hits {
                selected[i] = true;
            }
        }
        for (l, s) in layers.iter_mut().zip(selected) {
            if !s && l.skip.is_none() {
                l.skip = Some("not selected by --layers".to_string());
                l.plan = None;
            }
        }
    }
    let candidates: Vec<usize> = (0..layers.len()).filter(|&i| layers[i].plan.is_some()).collect();
    if candidates.is_empty() {
        let why: Vec<String> = layers.iter().take(6).map(|l| format!("{}: {}", l.name, l.skip.as_deref().unwrap_or("?"))).collect();
        return Err(format!("error: no layer of {model_name} can be pruned to {n}:{m} ({})", why.join("; ")));
    }

    // Measurements against the dense model on the calibration batches.
    let module_for = |active: &HashSet<usize>| -> Result<Module, String> {
        let mut md = module.clone();
        md.funcs[fidx] = build(&func, &layers, active, n, m)?;
        Ok(md)
    };
    let mut alone: HashMap<usize, f64> = HashMap::new();
    let mut kept_why: HashMap<usize, String> = HashMap::new();
    let mut active: HashSet<usize> = candidates.iter().copied().collect();
    let mut score = None;
    if let Some(data) = calib {
        let dense = engine::compile(&module, weights, cfg.threads)?;
        let set = Set::reference(data, &dense, func.results().len())?;
        drop(dense);
        let measure = |active: &HashSet<usize>| -> Result<Score, String> {
            let s = engine::compile(&module_for(active)?, weights, cfg.threads)?;
            set.score(&s, usize::MAX)
        };
        let pb = if cfg.progress { crate::say::progress(candidates.len() as u64, "sensitivity") } else { indicatif::ProgressBar::hidden() };
        for &i in &candidates {
            alone.insert(i, measure(&HashSet::from([i]))?.sqnr_db);
            pb.inc(1);
        }
        pb.finish_and_clear();
        if let Some(min) = cfg.min_sqnr {
            // Most tolerant first; a layer joins while the model holds.
            let mut order = candidates.clone();
            order.sort_by(|a, b| alone[b].total_cmp(&alone[a]));
            active.clear();
            let mut current: Option<Score> = None;
            for i in order {
                let mut trial = active.clone();
                trial.insert(i);
                let s = measure(&trial)?;
                if s.sqnr_db >= min {
                    active = trial;
                    current = Some(s);
                } else {
                    kept_why.insert(i, format!("--min-sqnr {min}: pruning it too gives {}", db(s.sqnr_db)));
                }
            }
            score = current;
        } else {
            score = Some(measure(&active)?);
        }
    }
    module.funcs[fidx] = build(&func, &layers, &active, n, m)?;
    if let Some(d) = aoc_ir::verify::verify_module(&module).first() {
        return Err(format!("internal error: the sparsified model does not verify: {} (please report)", d.message));
    }

    let results: Vec<LayerResult> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| LayerResult {
            name: l.name.clone(),
            op: l.opcode,
            reduction: l.reduction,
            pruned: active.contains(&i),
            why: if active.contains(&i) { None } else { kept_why.get(&i).cloned().or_else(|| l.skip.clone()) },
            sqnr_alone: alone.get(&i).copied(),
        })
        .collect();
    let report = serde_json::json!({
        "model": model_name,
        "pattern": format!("{n}:{m}"),
        "min_sqnr_db": cfg.min_sqnr,
        "calibration_batches": calib.map(|c| c.len()),
        "sqnr_db": score.map(|s| json_db(s.sqnr_db)),
        "top1_agreement": score.and_then(|s| s.top1),
        "pruned": results.iter().filter(|l| l.pruned).count(),
        "layers": results.iter().map(|l| serde_json::json!({
            "name": l.name,
            "op": l.op,
            "reduction": l.reduction,
            "pruned": l.pruned,
            "why": l.why,
            "sqnr_alone_db": l.sqnr_alone.map(json_db),
        })).collect::<Vec<_>>(),
    });
    Ok(Outcome { module, layers: results, score, report })
}

/// The per-layer table `aoc sparsify` prints.
pub fn table(o: &Outcome, n: usize, m: usize) -> String {
    let width = o.layers.iter().map(|l| l.name.len()).max().unwrap_or(5).max(5);
    let mut s = format!("{:<width$}  {:<12} {:>9}  {:<7} {:>12}  why not\n", "layer", "op", "reduction", "pruned", "SQNR alone");
    for l in &o.layers {
        let alone = l.sqnr_alone.map(db).unwrap_or_else(|| "-".to_string());
        s.push_str(&format!(
            "{:<width$}  {:<12} {:>9}  {:<7} {:>12}  {}\n",
            l.name,
            l.op,
            l.reduction,
            if l.pruned { format!("{n}:{m}") } else { "no".to_string() },
            alone,
            l.why.as_deref().unwrap_or("")
        ));
    }
    let pruned = o.layers.iter().filter(|l| l.pruned).count();
    s.push_str(&format!("{pruned} of {} layers pruned to {n}:{m}", o.layers.len()));
    match o.score {
        Some(sc) => {
            s.push_str(&format!("; output SQNR against the dense model {} on {} calibration batches", db(sc.sqnr_db), sc.batches));
            if let Some(t) = sc.top1 {
                s.push_str(&format!(", top-1 agreement {:.2}%", 100.0 * t));
            }
            s.push('\n');
        }
        None => s.push_str(" (no --calib: accuracy not measured)\n"),
    }
    s
}
