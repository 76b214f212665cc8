//! `aoc quantize`: post-training quantization of a float model.
//!
//! The steps, each in its own module:
//! 1. the float model is prepared (batch-norms folded into the
//!    convolutions, so the integer model has no BN step left);
//! 2. [`place::layers`] finds what can run in int8 (or fp8);
//! 3. calibration runs the float model, compiled for this CPU with every
//!    tensor to be quantized as an extra output ([`engine`]), over the
//!    calibration batches ([`calib`]), streaming each tensor into an
//!    [`range::Observer`];
//! 4. each tensor's range comes from the chosen [`range::Method`];
//! 5. [`place::build`] writes the Q/DQ graph for the chosen layers; with
//!    `--target-sqnr`, layers are measured alone and the most sensitive
//!    kept in float until the model meets the target;
//! 6. the result is measured against the float model (output SQNR, and
//!    top-1 agreement for class scores) on the calibration and `--eval`
//!    batches, with the same compiled kernels `aoc compile` produces.

pub mod calib;
pub mod engine;
pub mod place;
pub mod range;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use aoc_ir::attr::{Attr, Attrs, ConstValue};
use aoc_ir::interp::{WeightSource, eval_op};
use aoc_ir::module::{Func, Module, ValueDef, ValueId};
use aoc_ir::types::QuantType;
use aoc_ir::{Opcode, Tensor};
use aoc_runtime::exec::Session;

use calib::CalibData;
use place::{Activations, Precision, WeightFormat};
use range::{Method, Observer};

/// What `aoc quantize` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub method: Method,
    pub precision: Precision,
    pub activations: Activations,
    pub per_channel_weights: bool,
    /// `--keep`: layers (by name or glob) left in float.
    pub keep: Vec<String>,
    /// `--residual`: where residual adds go.
    pub residual: Residual,
    pub target_sqnr: Option<f64>,
    /// Measure every layer alone even without a target.
    pub sensitivity: bool,
    /// Batches each per-layer measurement runs (the first ones).
    pub sensitivity_batches: usize,
    pub threads: usize,
    /// Where the quantized model will run (`--target`): which layers have
    /// integer kernels there, and what the layers kept out of them run in.
    pub target: Target,
    /// Quantize a model that is already quantized again, from its float form.
    pub requantize: bool,
    /// Show progress bars (on a terminal).
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            method: Method::Entropy,
            precision: Precision::Int8,
            activations: Activations::U8,
            per_channel_weights: true,
            keep: vec![],
            residual: Residual::Auto,
            target_sqnr: None,
            sensitivity: false,
            sensitivity_batches: 8,
            threads: 0,
            target: Target::Cpu,
            requantize: false,
            progress: true,
        }
    }
}

/// Where residual adds go (`--residual`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residual {
    Int8,
    Float,
    /// int8, except an add whose rows a norm reads and whose per-tensor
    /// scale would leave a row with less than
    /// [`ROW_SQNR_DB`] of its own spread (a transformer's CLS token beside
    /// patch tokens a hundred times larger): that add stays float.
    Auto,
}

/// The least SQNR of a normalized row (its variance, or for an RMS norm
/// its mean square, against the int8 step's rounding noise, step²/12)
/// that `--residual auto` quantizes.
pub const ROW_SQNR_DB: f64 = 25.0;

/// A layer's fate, for the table and the report.
#[derive(Clone, Debug)]
pub struct LayerResult {
    pub name: String,
    pub op: &'static str,
    /// `int8` or `fp8`; kept out of them, `float` (fp32) or `fp16` (GPU
    /// targets with fp16 tensor cores).
    pub precision: &'static str,
    /// Whether it is quantized (int8 or fp8).
    pub quantized: bool,
    /// Why it stayed in float; for a quantized layer, why it does not run
    /// on an integer kernel of the target.
    pub why: Option<String>,
    /// Output SQNR with only this layer quantized.
    pub sqnr_alone: Option<f64>,
}

/// Accuracy of a quantized model against the float one.
#[derive(Clone, Copy, Debug)]
pub struct Score {
    /// Output SQNR in dB over all outputs and batches (infinite when equal).
    pub sqnr_db: f64,
    /// Top-1 agreement of class-score outputs ([N, C]), when there are any.
    pub top1: Option<f64>,
    pub batches: usize,
    /// The SQNR the model keeps on batches it was not measured on, with 90%
    /// confidence: the 10th percentile of the SQNR over bootstrap resamples
    /// of the batches. `--target-sqnr` holds this to the target, because
    /// the ranges were fitted to the same batches the SQNR is measured on.
    pub lower_db: f64,
}

/// The named choices of a quantization, as words: `aoc quantize`'s flags
/// and the Python `aoc.quantize` arguments (each names them in its
/// messages as `{prefix}method`, ...: `--method` or `method`).
pub struct Choices<'a> {
    pub method: &'a str,
    pub percentile: f64,
    pub precision: &'a str,
    pub activations: &'a str,
    pub residual: &'a str,
}

impl Choices<'_> {
    /// The method, precision, activation storage and where residual adds
    /// go; a word outside the choices is an error naming it.
    pub fn parse(&self, prefix: &str) -> Result<(Method, Precision, Activations, Residual), String> {
        let method = match self.method {
            "entropy" | "kl" => Method::Entropy,
            "minmax" => Method::MinMax,
            "mse" => Method::Mse,
            "percentile" => {
                if !(self.percentile > 0.0 && self.percentile <= 100.0) {
                    return Err(format!("{prefix}percentile must be in (0, 100], found {}", self.percentile));
                }
                Method::Percentile(self.percentile)
            }
            m => return Err(format!("{prefix}method must be entropy, percentile, mse or minmax, found `{m}`")),
        };
        let precision = match self.precision {
            "int8" => Precision::Int8,
            "fp8" | "e4m3" => Precision::Fp8,
            p => return Err(format!("{prefix}precision must be int8 or fp8, found `{p}`")),
        };
        let activations = match self.activations {
            "u8" => Activations::U8,
            "s8" => Activations::S8,
            t => return Err(format!("{prefix}activations must be u8 or s8, found `{t}`")),
        };
        let residual = match self.residual {
            "auto" => Residual::Auto,
            "int8" => Residual::Int8,
            "float" | "fp32" | "fp16" => Residual::Float,
            r => return Err(format!("{prefix}residual must be auto, int8 or float, found `{r}`")),
        };
        Ok((method, precision, activations, residual))
    }
}

/// Where a quantized model will run. CPU targets share their integer
/// kernels (the level picks the instructions at run time), so `host`,
/// `x86-64-v4`, ... are one placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Cpu,
    Gpu(aoc_backend_ptx::Sm),
}

impl Target {
    /// `--target`'s values, as `aoc compile` takes them.
    pub fn parse(s: &str) -> Result<Target, String> {
        if s.starts_with("sm_") {
            return aoc_backend_ptx::Sm::parse(s).map(Target::Gpu).map_err(|e| format!("error: --target: {e}"));
        }
        crate::cpu::cpu_level(s).map(|_| Target::Cpu).ok_or_else(|| {
            format!("error: unknown --target `{s}`; CPU targets are x86-64-v4, x86-64-v3, x86-64 and host, GPU targets sm_70 … sm_90a")
        })
    }

    pub fn name(&self) -> String {
        match self {
            Target::Cpu => "this CPU".to_string(),
            Target::Gpu(sm) => sm.to_string(),
        }
    }

    /// What a layer kept out of int8 runs in: fp16 on GPUs with fp16
    /// tensor cores (with `aoc compile --precision fp16`), else fp32.
    pub fn kept_precision(&self) -> &'static str {
        match self {
            Target::Gpu(sm) if sm.has_mma_f16() => "fp16",
            _ => "float",
        }
    }
}

/// What `aoc quantize` produced.
pub struct Outcome {
    pub module: Module,
    pub layers: Vec<LayerResult>,
    /// On the calibration set (measured with --target-sqnr, or without --eval).
    pub calib: Option<Score>,
    pub eval: Option<Score>,
    pub report: serde_json::Value,
}

/// A decibel figure for a table: "exact" where it is infinite.
pub(crate) fn db(x: f64) -> String {
    if x.is_infinite() { "exact".to_string() } else { format!("{x:.2} dB") }
}

/// A decibel figure for a JSON report: `null` where it is not finite (an
/// exact result's SQNR is infinite).
pub(crate) fn json_db(x: f64) -> serde_json::Value {
    if x.is_finite() { serde_json::json!(x) } else { serde_json::Value::Null }
}

/// `*` and `?` globs.
pub fn glob(pat: &str, s: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') => (0..=s.len()).any(|i| go(&p[1..], &s[i..])),
            Some('?') => !s.is_empty() && go(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && go(&p[1..], &s[1..]),
        }
    }
    go(&pat.chars().collect::<Vec<_>>(), &s.chars().collect::<Vec<_>>())
}

/// Quant ops and quantized values of a function.
fn quantized_ops(f: &Func) -> Vec<String> {
    let mut kinds: Vec<String> = vec![];
    for &op in &f.body.ops {
        let d = &f.ops[op];
        let q = d.opcode.name().starts_with("quant.")
            || d.results.iter().any(|&r| f.ty(r).elem.quant().is_some());
        if q && !kinds.iter().any(|k| k == d.opcode.name()) {
            kinds.push(d.opcode.name().to_string());
        }
    }
    kinds
}

/// `--requantize`: the float form of a Q/DQ model. Quantized constants
/// behind a dequantize become float constants of their values, and each
/// `dequantize(quantize(x))` becomes `x`. Integer compute ops have no
/// float form here and are refused.
fn strip_qdq(f: &mut Func, weights: &dyn WeightSource) -> Result<(), String> {
    let mut replace: HashMap<ValueId, ValueId> = HashMap::new();
    let mut consts = place::Consts::new(f, weights);
    let mut new_consts: Vec<(aoc_ir::OpId, Tensor, aoc_ir::Location, String)> = vec![];
    for &op in &f.body.ops {
        let d = &f.ops[op];
        if d.opcode != Opcode::Dequantize {
            continue;
        }
        let (x, y) = (d.operands[0], d.results[0]);
        if let ValueDef::Result(qop, _) = f.values[x].def
            && f.ops[qop].opcode == Opcode::Quantize
        {
            replace.insert(y, f.ops[qop].operands[0]);
        } else if let Some(t) = consts.get(x)? {
            let ty = f.ty(y).clone();
            let out = eval_op(Opcode::Dequantize, &[&t], &Attrs::new(), std::slice::from_ref(&ty), weights)
                .map_err(|m| format!("error: {m}"))?;
            new_consts.push((op, out.into_iter().next().expect("one result"), d.loc.clone(), f.name_of(y).to_string()));
        }
    }
    drop(consts);
    for (op, t, loc, name) in new_consts {
        let ty = t.ty.clone();
        let attrs = Attrs::new().with("value", Attr::Const(ConstValue::tensor(t)));
        let c = f
            .push_op(Opcode::Const, &[], attrs, Some(vec![ty]), &format!("{name}.float"), loc)
            .map_err(|d| format!("error: {}", d.message))?[0];
        let new = f.body.ops.pop().expect("just pushed");
        let pos = f.body.ops.iter().position(|&o| o == op).expect("op in body");
        f.body.ops.insert(pos, new);
        replace.insert(f.ops[op].results[0], c);
    }
    let resolve = |mut v: ValueId| {
        while let Some(&n) = replace.get(&v) {
            v = n;
        }
        v
    };
    let ops = f.body.ops.clone();
    for op in ops {
        for i in 0..f.ops[op].operands.len() {
            f.ops[op].operands[i] = resolve(f.ops[op].operands[i]);
        }
    }
    for r in f.body.terminator.iter_mut() {
        *r = resolve(*r);
    }
    place::remove_dead(f);
    let left = quantized_ops(f);
    if !left.is_empty() {
        return Err(format!(
            "error: --requantize takes Q/DQ models (quantize/dequantize around float ops); this one has integer ops without a float form here: {}",
            left.join(", ")
        ));
    }
    Ok(())
}

/// The calibration (or evaluation) batches with the float model's outputs.
pub(crate) struct Set<'a> {
    data: &'a CalibData,
    /// Encoded inputs of each batch, while they fit the cache.
    cache: Vec<Option<Vec<Vec<u8>>>>,
    /// The float model's outputs per batch (f32 values per output).
    refs: Vec<Vec<Vec<f32>>>,
    /// Output shapes.
    shapes: Vec<Vec<usize>>,
}

/// Encoded calibration inputs kept in memory up to this size; beyond it
/// batches are read again from disk for each measurement.
const CACHE_LIMIT: usize = 1 << 30;

impl<'a> Set<'a> {
    /// The batches of `data` with the outputs of `reference` (the model
    /// others are measured against; its first `results` outputs).
    pub(crate) fn reference(data: &'a CalibData, reference: &Session, results: usize) -> Result<Set<'a>, String> {
        let shapes = reference.outputs().iter().take(results).map(|o| o.shape.iter().map(|&d| d as usize).collect()).collect();
        let mut s = Set { data, cache: vec![], refs: vec![], shapes };
        let mut cached = 0usize;
        for i in 0..data.len() {
            let bytes = engine::encode(&data.load(i)?);
            s.refs.push(engine::run_values(reference, &bytes, results)?);
            cached += bytes.iter().map(|b| b.len()).sum::<usize>();
            s.cache.push((cached <= CACHE_LIMIT).then_some(bytes));
        }
        Ok(s)
    }

    fn inputs(&self, i: usize) -> Result<Vec<Vec<u8>>, String> {
        match &self.cache[i] {
            Some(b) => Ok(b.clone()),
            None => Ok(engine::encode(&self.data.load(i)?)),
        }
    }

    /// Runs `s` (the model with its outputs only) on the first `limit`
    /// batches and compares with the float outputs.
    pub(crate) fn score(&self, s: &Session, limit: usize) -> Result<Score, String> {
        let (mut signal, mut noise) = (0f64, 0f64);
        let (mut agree, mut rows) = (0usize, 0usize);
        let n = limit.min(self.refs.len());
        let mut per_batch = Vec::with_capacity(n);
        for i in 0..n {
            let before = (signal, noise);
            let outs = engine::run_values(s, &self.inputs(i)?, self.shapes.len())?;
            for ((q, r), shape) in outs.iter().zip(&self.refs[i]).zip(&self.shapes) {
                for (&a, &b) in r.iter().zip(q) {
                    signal += (a as f64) * (a as f64);
                    let e = a as f64 - b as f64;
                    noise += if e.is_nan() { f64::INFINITY } else { e * e };
                }
                if shape.len() == 2 && shape[1] >= 2 {
                    for (ra, qa) in r.chunks(shape[1]).zip(q.chunks(shape[1])) {
                        agree += (argmax(ra) == argmax(qa)) as usize;
                        rows += 1;
                    }
                }
            }
            per_batch.push((signal - before.0, noise - before.1));
        }
        let sqnr_db = sqnr_of(signal, noise);
        Ok(Score { sqnr_db, top1: (rows > 0).then(|| agree as f64 / rows as f64), batches: n, lower_db: lower_bound(&per_batch) })
    }
}

fn sqnr_of(signal: f64, noise: f64) -> f64 {
    if noise == 0.0 { f64::INFINITY } else { 10.0 * (signal / noise).log10() }
}

/// The 10th percentile of the SQNR over 400 bootstrap resamples of the
/// batches' (signal, noise) energies (a fixed generator: the same batches
/// give the same bound). One batch gives its own SQNR.
fn lower_bound(per_batch: &[(f64, f64)]) -> f64 {
    let n = per_batch.len();
    let (s, e) = per_batch.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    if n < 2 {
        return sqnr_of(s, e);
    }
    let mut state = 0x5eed_u64;
    let mut next = || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    let mut draws: Vec<f64> = (0..400)
        .map(|_| {
            let (mut s, mut e) = (0.0, 0.0);
            for _ in 0..n {
                let (bs, be) = per_batch[next()];
                s += bs;
                e += be;
            }
            sqnr_of(s, e)
        })
        .collect();
    draws.sort_by(|a, b| a.total_cmp(b));
    draws[draws.len() / 10]
}

fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

fn progress(enabled: bool, len: usize, what: &str) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    crate::say::progress(len as u64, what)
}

/// Quantizes `module` (its entry function) with calibration batches
/// `calib`; `eval` are held-out batches measured at the end.
pub fn quantize(
    mut module: Module,
    weights: &dyn WeightSource,
    calib: &CalibData,
    eval: Option<&CalibData>,
    cfg: &Config,
    model_name: &str,
) -> Result<Outcome, String> {
    let t_start = Instant::now();
    if let Target::Gpu(sm) = cfg.target {
        match cfg.precision {
            Precision::Int8 if !sm.has_mma_f16() => {
                return Err(format!(
                    "error: --target {sm} has no integer kernels (aoc's int8 GPU kernels use mma.sync, sm_80 or newer): quantizing would add int8 error and no speed"
                ));
            }
            Precision::Fp8 if sm.capability() < 89 => {
                return Err(format!("error: --precision fp8 needs an sm_89 or newer target (e4m3 tensor cores), found --target {sm}"));
            }
            _ => {}
        }
    }
    let entry = module.entry().ok_or_else(|| format!("error: {model_name} has no function"))?.name.clone();
    let fidx = module.funcs.iter().position(|f| f.name == entry).expect("entry exists");
    let q = quantized_ops(&module.funcs[fidx]);
    if !q.is_empty() {
        if !cfg.requantize {
            return Err(format!(
                "error: {model_name} is already quantized (it has {}); it compiles to integer kernels as it is (aoc compile {model_name}). Use --requantize to calibrate it again from its float form",
                q.join(", ")
            ));
        }
        strip_qdq(&mut module.funcs[fidx], weights)?;
    }
    // The convolution behind each batch-norm: after folding, the conv
    // carries the BN's location, but users name layers by the conv.
    let conv_of_bn: HashMap<String, String> = {
        let f = &module.funcs[fidx];
        f.body
            .ops
            .iter()
            .filter(|&&op| f.ops[op].opcode == Opcode::BatchNorm)
            .filter_map(|&op| {
                let bn = &f.ops[op];
                let conv = f.def_op(*bn.operands.first()?)?;
                let c = &f.ops[conv];
                (c.opcode == Opcode::Conv2d).then(|| Some((bn.loc.name.clone()?, c.loc.name.clone()?)))?
            })
            .collect()
    };
    // 1. Batch-norms folded first: a BN left between a conv and its
    // quantize would keep the conv in float.
    let prep = crate::opt::OptConfig { passes: Some("fold-bn".to_string()), ..Default::default() };
    crate::opt::optimize(&mut module, weights, &prep, None)?;
    let func = module.funcs[fidx].clone();

    // 2. Layers, and what the user keeps in float.
    let mut layers = place::layers(&func, weights)?;
    for l in &mut layers {
        if let Some(conv) = conv_of_bn.get(&l.name) {
            l.aliases.push(std::mem::replace(&mut l.name, conv.clone()));
        }
    }
    if layers.iter().all(|l| l.unsupported.is_some()) {
        return Err(format!(
            "error: {model_name} has no layer to quantize (convolutions, matmuls, gemms, residual adds, average pools in f32)"
        ));
    }
    let mut kept: HashMap<usize, String> = HashMap::new();
    for pat in &cfg.keep {
        // By name (the ONNX node), or by result name or folded BN's name.
        let hits: Vec<usize> = (0..layers.len())
            .filter(|&i| {
                let l = &layers[i];
                std::iter::once(&l.name).chain([&l.value_name]).chain(&l.aliases).any(|n| glob(pat, n))
            })
            .collect();
        if hits.is_empty() {
            let names: Vec<&str> = layers.iter().take(12).map(|l| l.name.as_str()).collect();
            return Err(format!(
                "error: --keep {pat} matches no layer; the layers are named {}{}",
                names.join(", "),
                if layers.len() > 12 { ", ..." } else { "" }
            ));
        }
        for i in hits {
            kept.insert(i, "--keep".to_string());
        }
    }
    if cfg.residual == Residual::Float {
        for (i, l) in layers.iter().enumerate() {
            if l.kind == LayerKind::Add {
                kept.insert(i, "--residual float".to_string());
            }
        }
    }
    // fp8 computes in convolutions and matmuls by constant weights only:
    // no fp8 kernel multiplies two activations, and on the GPU an
    // attention's QKᵀ and AV in float are one fused attention kernel.
    for l in &mut layers {
        if cfg.precision == Precision::Fp8 && l.unsupported.is_none() && l.kind.has_weights() && l.weight.is_none() {
            l.unsupported = Some("fp8: no fp8 kernel multiplies two activations (an attention's products run in its fused kernel)".to_string());
        }
    }
    // A residual add reads the e4m3 form of an operand that such a layer
    // reads anyway (the block's input: TensorRT's residual placement), so
    // that on the GPU the add joins the epilogue of the GEMM making its
    // other operand, which stays float, and reads one byte per element
    // instead of four.
    let fp8_inputs: HashSet<ValueId> =
        layers.iter().filter(|l| l.kind.has_weights() && l.unsupported.is_none()).flat_map(|l| l.acts.iter().map(|&(_, v)| v)).collect();
    for l in &mut layers {
        if cfg.precision == Precision::Fp8 && l.unsupported.is_none() && l.kind == LayerKind::Add {
            l.acts.retain(|(_, v)| fp8_inputs.contains(v));
            if l.acts.is_empty() {
                l.unsupported = Some("fp8: neither operand is a convolution's or matmul's input".to_string());
            }
        } else if cfg.precision == Precision::Fp8 && l.unsupported.is_none() && !l.kind.has_weights() {
            l.unsupported = Some("fp8 runs convolutions and matmuls only".to_string());
        }
        if l.unsupported.is_none() && !l.acts.iter().map(|&(_, v)| v).chain([l.output]).all(|v| func.ty(v).elem.is_float()) {
            l.unsupported = Some("not a float op".to_string());
        }
    }

    // 3. Calibration: the float model with every observed tensor as an
    // extra output, compiled for this CPU.
    let observed = place::observed_values(&layers);
    let params: HashSet<ValueId> = func.params().iter().copied().collect();
    let results: Vec<ValueId> = func.results().to_vec();
    let extra: Vec<ValueId> = observed.iter().copied().filter(|v| !params.contains(v) && !results.contains(v)).collect();
    let mut obs_module = module.clone();
    {
        let f = &mut obs_module.funcs[fidx];
        let mut ret = results.clone();
        ret.extend(&extra);
        f.set_return(ret);
    }
    let t_cal = Instant::now();
    let float_session = engine::compile(&obs_module, weights, cfg.threads)?;
    let shapes: Vec<Vec<usize>> = results.iter().map(|&r| func.ty(r).shape.clone()).collect();
    // Min-max int8 needs only the range; every other method (and fp8's
    // scale search) reads the histogram.
    let histogram = cfg.precision == Precision::Fp8 || cfg.method != Method::MinMax;
    let mut observers: HashMap<ValueId, Observer> =
        observed.iter().map(|&v| (v, Observer::new(histogram))).collect();
    // `--residual auto`: the rows of an int8 residual add that a norm
    // reads are tracked, to find a row the per-tensor scale erases.
    let normed = if cfg.residual == Residual::Auto && cfg.precision == Precision::Int8 {
        place::normed_rows(&func, &layers)
    } else {
        HashMap::new()
    };
    for (v, rows) in &normed {
        if let Some(o) = observers.get_mut(v) {
            o.track_rows(rows.len, rows.epsilon, rows.centered);
        }
    }
    let mut set = Set { data: calib, cache: vec![], refs: vec![], shapes: shapes.clone() };
    let mut cached = 0usize;
    // The outputs land in f32 buffers made once (the observed tensors are
    // most of a batch's bytes: fresh ones per batch cost page faults).
    let mut outs: Vec<Vec<f32>> = float_session
        .outputs()
        .iter()
        .map(|o| vec![0f32; o.shape.iter().product::<u64>() as usize])
        .collect();
    // A model output of another type (an argmax's indices) is decoded.
    let all_f32 = float_session.outputs().iter().all(|o| o.dtype == "f32");
    let pb = progress(cfg.progress, calib.len(), "calibrating");
    for i in 0..calib.len() {
        let inputs = calib.load(i)?;
        let bytes = engine::encode(&inputs);
        if all_f32 {
            engine::run_into(&float_session, &bytes, &mut outs)?;
        } else {
            outs = engine::run_values(&float_session, &bytes, usize::MAX)?;
        }
        let (model_outs, extra_outs) = outs.split_at(results.len());
        let mut observe = |v: ValueId, xs: &[f32]| -> Result<(), String> {
            observers.get_mut(&v).expect("observed").observe(xs).map_err(|at| {
                format!(
                    "error: {}: the float model computes a non-finite value in %{} (element {at}); calibration needs finite activations",
                    calib.describe(i),
                    func.name_of(v)
                )
            })
        };
        for (k, &p) in func.params().iter().enumerate() {
            if observed.contains(&p) {
                observe(p, &engine::f32s(&bytes[k]))?;
            }
        }
        for &v in &observed {
            if let Some(k) = results.iter().position(|&r| r == v) {
                observe(v, &model_outs[k])?;
            } else if let Some(k) = extra.iter().position(|&e| e == v) {
                observe(v, &extra_outs[k])?;
            }
        }
        set.refs.push(model_outs.to_vec());
        cached += bytes.iter().map(|b| b.len()).sum::<usize>();
        set.cache.push((cached <= CACHE_LIMIT).then_some(bytes));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let calib_seconds = t_cal.elapsed().as_secs_f64();

    // The eval batches' float outputs.
    let eval_set = match eval {
        Some(d) => {
            let mut s = Set { data: d, cache: vec![], refs: vec![], shapes: shapes.clone() };
            let pb = progress(cfg.progress, d.len(), "evaluating");
            for i in 0..d.len() {
                let bytes = engine::encode(&d.load(i)?);
                s.refs.push(engine::run_values(&float_session, &bytes, results.len())?);
                s.cache.push(None);
                pb.inc(1);
            }
            pb.finish_and_clear();
            Some(s)
        }
        None => None,
    };
    drop(float_session);

    // 4. Ranges and types.
    let mut types: HashMap<ValueId, QuantType> = HashMap::new();
    let mut ranges: Vec<serde_json::Value> = vec![];
    for &v in &observed {
        let o = &observers[&v];
        let lv = place::levels(o.min, cfg.precision, cfg.activations);
        // A model output's clipping error is the output's error: no clip.
        let method = if results.contains(&v) { Method::MinMax } else { cfg.method };
        let (lo, hi, q) = match cfg.precision {
            Precision::Int8 => {
                let (lo, hi) = o.range(method, lv);
                (lo, hi, place::activation_type(lo, hi, cfg.precision, cfg.activations))
            }
            // fp8 keeps the observed max unless asked to clip (the KL
            // search is int8's: ModelOpt's fp8 calibrates by the max too);
            // then the best scale on the e4m3 grid under that clip.
            Precision::Fp8 => {
                let (t, octaves) = match method {
                    Method::MinMax | Method::Entropy => (o.amax(), 0),
                    Method::Percentile(_) => (o.threshold(method, lv), 0),
                    Method::Mse => (o.amax(), 4),
                };
                let scale = o.fp8_scale(t, octaves) as f32 as f64;
                let top = 448.0 * scale;
                (o.min.max(-top).min(0.0), o.max.min(top).max(0.0), place::fp8_type(scale))
            }
        };
        let (scale, zp) = q.params_at(0);
        ranges.push(serde_json::json!({
            "tensor": func.name_of(v), "min": o.min, "max": o.max, "lo": lo, "hi": hi,
            "scale": scale, "zero_point": zp, "storage": q.storage.name(),
        }));
        types.insert(v, q);
    }
    for (i, l) in layers.iter().enumerate() {
        let (Some(spread), Some(q)) = (observers.get(&l.output).and_then(Observer::least_row_spread), types.get(&l.output)) else {
            continue;
        };
        let step = q.params_at(0).0;
        let db = 10.0 * (12.0 * spread / (step * step)).log10();
        if db < ROW_SQNR_DB {
            kept.entry(i).or_insert_with(|| {
                format!("--residual auto: a row its norm reads keeps {db:.1} dB at the tensor's int8 step (below {ROW_SQNR_DB} dB)")
            });
        }
    }
    let act_type = |v: ValueId| types.get(&v).cloned();
    let wf = WeightFormat {
        precision: cfg.precision,
        per_channel: cfg.per_channel_weights,
        outputs: cfg.precision == Precision::Int8,
    };

    // 5. The layers to quantize.
    let mut candidates: Vec<usize> =
        (0..layers.len()).filter(|i| layers[*i].unsupported.is_none() && !kept.contains_key(i)).collect();
    if candidates.is_empty() {
        return Err("error: every quantizable layer is kept in float (--keep, --residual float); nothing to quantize".to_string());
    }
    let weight_cache = place::WeightCache::default();
    let module_for = |active: &HashSet<usize>| -> Result<Module, String> {
        let f = place::build(&func, &layers, active, &act_type, wf, &weight_cache)?;
        let mut m = module.clone();
        m.funcs[fidx] = f;
        Ok(m)
    };
    // A layer this CPU has no integer kernel for would run as dequantize,
    // float, quantize: the error of int8 for none of its speed. It stays
    // in float, with a dequantize before it (int8 only: fp8 targets GPUs).
    // The compiled probe is kept: when no layer is dropped and nothing else
    // changes the set, it is the final model.
    let mut probe: Option<(HashSet<usize>, Session)> = None;
    let target = cfg.target.name();
    let kept_in = cfg.target.kept_precision();
    // Whether layer `l` runs on a quantized kernel in a plan whose int8 and
    // fp8 steps are at `locs`: by its quantized output's location, or (an
    // fp8 layer's float result) its op's.
    let uses = place::uses(&func);
    let runs_quantized = |l: &place::Layer, locs: &HashSet<String>| {
        let chain = place::through_data_movement(&func, &uses, l.output);
        chain.iter().any(|&v| func.values[v].loc.name.as_deref().is_none_or(|n| locs.contains(n)))
            || func.ops[l.op].loc.name.as_deref().is_some_and(|n| locs.contains(n))
    };
    // fp8 has its kernels on sm_90a alone; elsewhere fp8 layers run as
    // their float expansion (and say so).
    let fp8_kernels = matches!(cfg.target, Target::Gpu(sm) if sm == aoc_backend_ptx::Sm::Sm90a);
    if cfg.precision == Precision::Int8 || fp8_kernels {
        let all: HashSet<usize> = candidates.iter().copied().collect();
        let m = module_for(&all)?;
        let locs = match cfg.target {
            Target::Cpu => {
                let sess = engine::compile(&m, weights, cfg.threads)?;
                let locs = int8_locs(sess.plan());
                probe = Some((all, sess));
                locs
            }
            Target::Gpu(sm) => int8_locs(&engine::gpu_plan(&m, weights, sm)?),
        };
        candidates.retain(|&i| {
            // A residual add in fp8 computes in f32 (its reader's epilogue).
            let runs = (cfg.precision == Precision::Fp8 && layers[i].kind == LayerKind::Add) || runs_quantized(&layers[i], &locs);
            if !runs {
                let what = if cfg.precision == Precision::Int8 { "integer" } else { "fp8" };
                kept.insert(i, format!("no {what} kernel for it on {target} yet: kept in {kept_in}"));
            }
            runs
        });
        if candidates.is_empty() {
            return Err(format!("error: {target} has no integer kernel for any of the model's quantizable layers"));
        }
    }
    let measure = |active: &HashSet<usize>, limit: usize, set: &Set| -> Result<Score, String> {
        let m = module_for(active)?;
        let s = engine::compile(&m, weights, cfg.threads)?;
        set.score(&s, limit)
    };

    let mut alone: HashMap<usize, f64> = HashMap::new();
    if cfg.sensitivity || cfg.target_sqnr.is_some() {
        let pb = progress(cfg.progress, candidates.len(), "sensitivity");
        pb.set_style(
            indicatif::ProgressStyle::with_template("{msg:<12} [{bar:30}] {pos}/{len} layers, ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        for &i in &candidates {
            let s = measure(&HashSet::from([i]), cfg.sensitivity_batches.max(1), &set)?;
            alone.insert(i, s.sqnr_db);
            pb.inc(1);
        }
        pb.finish_and_clear();
    }
    let mut active: HashSet<usize> = candidates.iter().copied().collect();
    // What runs in int8 of a chosen set: an average pool whose readers all
    // run in float stays in float too (see `pools_without_int8_readers`).
    let effective = |chosen: &HashSet<usize>| -> HashSet<usize> {
        let mut e = chosen.clone();
        for p in place::pools_without_int8_readers(&func, &layers, chosen) {
            e.remove(&p);
        }
        e
    };
    let measure_set = |chosen: &HashSet<usize>, set: &Set| measure(&effective(chosen), usize::MAX, set);
    // The calibration set's score: needed by the target; otherwise only
    // measured when there is no --eval set (the number to trust).
    let mut score = match cfg.target_sqnr {
        Some(_) => Some(measure_set(&active, &set)?),
        None => None,
    };
    let mut target_note = None;
    if let Some(target) = cfg.target_sqnr {
        let mut current = score.expect("measured above");
        // Most sensitive first.
        let mut order = candidates.clone();
        order.sort_by(|&a, &b| alone[&a].total_cmp(&alone[&b]));
        let mut dropped: Vec<usize> = vec![];
        for &i in &order {
            if current.lower_db >= target {
                break;
            }
            active.remove(&i);
            dropped.push(i);
            kept.insert(i, format!("--target-sqnr {target}"));
            current = measure_set(&active, &set)?;
        }
        if current.lower_db < target {
            return Err(format!(
                "error: --target-sqnr {target} cannot be met: with every layer in float the model reaches {} (90% lower bound over the batches)",
                db(current.lower_db)
            ));
        }
        // Fewest kept: try each kept layer back in int8, least sensitive first.
        for &i in dropped.iter().rev().skip(1) {
            let mut trial = active.clone();
            trial.insert(i);
            let s = measure_set(&trial, &set)?;
            if s.lower_db >= target {
                active = trial;
                current = s;
                kept.remove(&i);
            }
        }
        target_note = Some(format!(
            "--target-sqnr {target}: {} of {} layers kept in {kept_in}, {} on the calibration set (at least {} on unseen batches with 90% confidence)",
            candidates.len() - effective(&active).len(),
            candidates.len(),
            db(current.sqnr_db),
            db(current.lower_db)
        ));
        score = Some(current);
    }

    for p in place::pools_without_int8_readers(&func, &layers, &active) {
        active.remove(&p);
        kept.insert(p, format!("what reads it runs in {kept_in}: an int8 pool would only round its output"));
    }

    // 6. The result and its accuracy (one compiled model for both sets).
    let out_module = module_for(&active)?;
    let mut eval_score = None;
    let sess = match probe {
        Some((set, sess)) if set == active => sess,
        _ => engine::compile(&out_module, weights, cfg.threads)?,
    };
    if score.is_none() && eval_set.is_none() {
        score = Some(set.score(&sess, usize::MAX)?);
    }
    if let Some(s) = &eval_set {
        eval_score = Some(s.score(&sess, usize::MAX)?);
    }
    // Which quantized layers the target runs on integer (or fp8) kernels:
    // the plan's int8 and fp8 steps, by the location of the layer's
    // quantized output.
    let int8_locs = match cfg.target {
        Target::Cpu => int8_locs(sess.plan()),
        Target::Gpu(sm) => int8_locs(&engine::gpu_plan(&out_module, weights, sm)?),
    };
    let kernel_note = |l: &place::Layer| -> Option<String> {
        if cfg.precision == Precision::Fp8 && l.kind == LayerKind::Add {
            let names: Vec<String> = l.acts.iter().map(|&(_, v)| format!("%{}", func.name_of(v))).collect();
            return Some(format!("adds in f32, reading {} as e4m3", names.join(" and ")));
        }
        (!runs_quantized(l, &int8_locs)).then(|| match (cfg.precision, cfg.target) {
            (Precision::Int8, _) => format!("no integer kernel on {target} yet: runs as dequantize, float, quantize"),
            (Precision::Fp8, Target::Cpu) => "no fp8 kernel on this CPU (fp8 is for sm_89 / sm_90)".to_string(),
            (Precision::Fp8, Target::Gpu(sm)) if sm == aoc_backend_ptx::Sm::Sm90a => {
                "the fp8 wgmma kernel takes one group with channels in multiples of 16: runs as e4m3 dequantize, float, quantize".to_string()
            }
            (Precision::Fp8, Target::Gpu(_)) => format!(
                "no fp8 tensor-core kernel on {target} (the e4m3 wgmma needs sm_90a: quantize and compile with --target sm_90a): runs as e4m3 dequantize, float, quantize"
            ),
        })
    };
    let qname = match cfg.precision {
        Precision::Int8 => "int8",
        Precision::Fp8 => "fp8",
    };
    let results_: Vec<LayerResult> = layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let on = active.contains(&i);
            LayerResult {
                name: l.name.clone(),
                op: l.kind.name(),
                precision: if on { qname } else { kept_in },
                quantized: on,
                why: if on { kernel_note(l) } else { l.unsupported.clone().or_else(|| kept.get(&i).cloned()) },
                sqnr_alone: alone.get(&i).copied(),
            }
        })
        .collect();
    let score_json = |s: &Score| {
        serde_json::json!({"sqnr_db": json_db(s.sqnr_db), "top1_agreement": s.top1, "batches": s.batches, "sqnr_lower_90_db": json_db(s.lower_db)})
    };
    let report = serde_json::json!({
        "model": model_name,
        "method": cfg.method.name(),
        "percentile": match cfg.method { Method::Percentile(p) => Some(p), _ => None },
        "precision": qname,
        "activations": match (cfg.precision, cfg.activations) { (Precision::Fp8, _) => "f8E4M3FN", (_, Activations::U8) => "u8", _ => "s8" },
        "weights": if cfg.per_channel_weights { "per-channel symmetric" } else { "per-tensor symmetric" },
        "calibration": {"dir": calib.dir.display().to_string(), "batches": calib.len(), "seconds": calib_seconds},
        "target_sqnr_db": cfg.target_sqnr,
        "target": match cfg.target { Target::Cpu => "cpu".to_string(), Target::Gpu(sm) => sm.to_string() },
        "kept_precision": kept_in,
        "tensors": ranges,
        "layers": results_.iter().map(|r| serde_json::json!({
            "name": r.name, "op": r.op, "precision": r.precision,
            "why_float": if r.quantized { None } else { r.why.clone() },
            "runs": if !r.quantized { None } else { Some(r.why.clone().unwrap_or_else(|| "integer kernel".to_string())) },
            "sqnr_alone_db": r.sqnr_alone.map(json_db),
        })).collect::<Vec<_>>(),
        "totals": {
            "layers": layers.len(),
            "quantized": active.len(),
            "float": layers.len() - active.len(),
            "calibration": score.as_ref().map(score_json),
            "eval": eval_score.as_ref().map(score_json),
            "seconds": t_start.elapsed().as_secs_f64(),
        },
        "note": target_note,
    });
    Ok(Outcome { module: out_module, layers: results_, calib: score, eval: eval_score, report })
}

use place::LayerKind;

/// Every calibrated tensor's observed and chosen range (`aoc quantize -v`).
pub fn ranges_table(o: &Outcome) -> String {
    let mut s = format!("{:<40} {:>10} {:>10} {:>10} {:>10} {:>12} {:>5}\n", "tensor", "min", "max", "lo", "hi", "scale", "zp");
    for t in o.report["tensors"].as_array().into_iter().flatten() {
        let f = |k: &str| t[k].as_f64().unwrap_or(f64::NAN);
        s.push_str(&format!(
            "{:<40} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>12.4e} {:>5}\n",
            t["tensor"].as_str().unwrap_or("?"),
            f("min"),
            f("max"),
            f("lo"),
            f("hi"),
            f("scale"),
            t["zero_point"]
        ));
    }
    s
}

/// The locations of the ops a compiled plan runs on integer kernels.
fn int8_locs(plan: &aoc_runtime::plan::Plan) -> HashSet<String> {
    plan.steps
        .iter()
        .zip(&plan.origins)
        .filter(|(st, o)| matches!(crate::cpu::step_precision(st, o), "int8" | "fp8"))
        .filter_map(|(_, o)| crate::cpu::origin_loc(o).map(str::to_string))
        .collect()
}

/// The per-layer table `aoc quantize` prints.
pub fn table(o: &Outcome) -> String {
    let w = o.layers.iter().map(|l| l.name.len()).max().unwrap_or(5).clamp(5, 48);
    let mut s = format!("{:<w$}  {:<15}  {:<9}  {:>11}  why\n", "layer", "op", "precision", "SQNR alone");
    for l in &o.layers {
        let name = if l.name.len() > w { format!("…{}", &l.name[l.name.len() - (w - 1)..]) } else { l.name.clone() };
        let alone = l.sqnr_alone.map(db).unwrap_or_else(|| "-".to_string());
        s.push_str(&format!(
            "{name:<w$}  {:<15}  {:<9}  {alone:>11}  {}\n",
            l.op,
            l.precision,
            l.why.as_deref().unwrap_or("")
        ));
    }
    let n_q = o.layers.iter().filter(|l| l.quantized).count();
    let mut parts = vec![];
    for (sc, what) in [(&o.calib, "calibration"), (&o.eval, "eval")] {
        if let Some(sc) = sc {
            let mut p = format!("{} on {} {what} batch{}", db(sc.sqnr_db), sc.batches, if sc.batches == 1 { "" } else { "es" });
            if let Some(t) = sc.top1 {
                p.push_str(&format!(", top-1 agreement {:.1}%", t * 100.0));
            }
            parts.push(p);
        }
    }
    s.push_str(&format!("{n_q} of {} layers quantized; output SQNR against float: {}\n", o.layers.len(), parts.join("; ")));
    s
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs_match_names() {
        assert!(glob("/layer1/*", "/layer1/conv1/Conv"));
        assert!(glob("*Conv", "/layer1/conv1/Conv"));
        assert!(glob("conv?", "conv1"));
        assert!(!glob("conv?", "conv10"));
        assert!(glob("fc", "fc"));
        assert!(!glob("fc", "fc2"));
    }
}
