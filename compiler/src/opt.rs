//! `aoc opt`: runs a pass pipeline over a module through
//! `aoc_passes::run_pipeline`, with the driver's extras around it: the
//! user's rules file, diagnostics rendered against the text they are about
//! (the `--passes` string, the rules file, the `.air` file), the rewrite
//! check of `--verify-rewrites`, and writing a result whose folded
//! constants need a weights file.
//!
//! Invariants: the pipeline is validated completely (names, options, the
//! `--print-ir-after` names, the target) before any pass runs, so every
//! error about the `--passes` text carries a span into that text; every
//! error comes back as text ready to print; nothing here panics on user
//! input.

use crate::render;
use crate::weights::safetensors_bytes;
use aoc_ir::attr::{Attr, ConstValue};
use aoc_ir::interp::WeightSource;
use aoc_ir::module::Module;
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{ElemType, TensorType};
use aoc_ir::{Diagnostic, Span};
use aoc_passes::pipeline::{PipelineItem, parse_pipeline, resolve};
use aoc_passes::{PassEntry, PipelineOptions, PipelineReport, registry, run_pipeline};
use std::path::{Path, PathBuf};

/// Computed constants with fewer elements than this print inline as
/// `dense<...>`; larger ones go to the weights file (the importer's limit).
pub const INLINE_LIMIT: usize = 16;

/// The default `--rewrite-tolerance`: the largest relative error a pass may
/// introduce under `--verify-rewrites`.
pub const DEFAULT_REWRITE_TOLERANCE: f64 = 1e-3;

/// A user's rules file: its name for diagnostics and its text.
#[derive(Clone, Debug)]
pub struct RulesFile {
    pub name: String,
    pub text: String,
}

/// What `aoc opt` was asked to do (its flags, minus file handling).
#[derive(Clone, Debug)]
pub struct OptConfig {
    /// The `--passes` text; `None` or blank means no passes (only
    /// `user-rules` when there is a rules file).
    pub passes: Option<String>,
    /// `--rules FILE`: adds `user-rules` after the given passes (unless the
    /// pipeline names it already).
    pub rules: Option<RulesFile>,
    pub print_ir_after_all: bool,
    pub print_ir_after: Vec<String>,
    /// Verify after every pass (default; `--no-verify-each` clears it).
    pub verify_each: bool,
    /// `--verify-rewrites`: run the interpreter before and after each pass.
    pub verify_rewrites: bool,
    /// The target of the cost models (`x86-64-v4`, `sm_86`, `sm_90`).
    pub target: String,
    /// Passes defined outside aoc-passes, as `PipelineOptions::extra_passes`.
    pub extra_passes: Vec<PassEntry>,
}

impl Default for OptConfig {
    fn default() -> Self {
        OptConfig {
            passes: None,
            rules: None,
            print_ir_after_all: false,
            print_ir_after: vec![],
            verify_each: true,
            verify_rewrites: false,
            target: PipelineOptions::default().target,
            extra_passes: vec![],
        }
    }
}

/// The largest error one pass introduced, measured by `--verify-rewrites`.
#[derive(Clone, Debug, PartialEq)]
pub struct RewriteCheck {
    pub pass: String,
    /// max |after - before| over every element of every result.
    pub max_abs: f64,
    /// The same, divided by the largest |before| of that result (so an
    /// error is measured against the scale of the values, and elements
    /// near zero do not blow it up); the maximum over results.
    pub max_rel: f64,
}

/// What a pipeline run produced besides the module.
#[derive(Clone, Debug, Default)]
pub struct OptOutcome {
    pub report: PipelineReport,
    /// One entry per pass when `verify_rewrites` was set.
    pub rewrite_checks: Vec<RewriteCheck>,
}

impl OptOutcome {
    /// The `--verify-rewrites` table.
    pub fn render_rewrite_checks(&self) -> String {
        let mut s = String::from(
            "rewrite check (interpreter on seeded random inputs, each pass against its input):\n",
        );
        s.push_str(&format!(
            "  {:<16} {:>12} {:>12}\n",
            "pass", "max abs err", "max rel err"
        ));
        for c in &self.rewrite_checks {
            s.push_str(&format!(
                "  {:<16} {:>12.3e} {:>12.3e}\n",
                c.pass, c.max_abs, c.max_rel
            ));
        }
        s
    }

    /// An error naming the first pass whose relative error exceeds `tol`.
    pub fn check_tolerance(&self, tol: f64) -> Result<(), String> {
        match self
            .rewrite_checks
            .iter()
            .find(|c| c.max_rel.is_nan() || c.max_rel > tol)
        {
            Some(c) => Err(format!(
                "error: pass `{}` changed the results by {:.3e} (relative; absolute {:.3e}), more than the tolerance {tol:e}",
                c.pass, c.max_rel, c.max_abs
            )),
            None => Ok(()),
        }
    }
}

/// A `--passes` text as one renders it in diagnostics.
const PASSES_NAME: &str = "--passes";

/// Resolves the pipeline the config asks for into one text per pass
/// (`name{key=value,...}`), validating everything up front.
fn plan(config: &OptConfig, entries: &[PassEntry]) -> Result<Vec<String>, String> {
    let text = config.passes.as_deref().unwrap_or("");
    let at_passes = |d: Diagnostic| render::render(&[d], PASSES_NAME, text);
    let mut items: Vec<PipelineItem> = if text.trim().is_empty() {
        vec![]
    } else {
        parse_pipeline(text).map_err(at_passes)?
    };
    if config.rules.is_some() && !items.iter().any(|i| i.name == "user-rules") {
        items.push(PipelineItem {
            name: "user-rules".to_string(),
            span: Span::new(text.len(), text.len()),
            options: vec![],
        });
    }
    let resolved = resolve(&items, entries).map_err(at_passes)?;
    let mut out = Vec::new();
    for (entry, item) in &resolved {
        (entry.build)(&item.options).map_err(at_passes)?;
        let mut t = entry.name.to_string();
        if !item.options.is_empty() {
            let opts: Vec<String> = item
                .options
                .iter()
                .map(|o| format!("{}={}", o.key, o.value))
                .collect();
            t.push_str(&format!("{{{}}}", opts.join(",")));
        }
        out.push(t);
    }
    for name in &config.print_ir_after {
        if !entries.iter().any(|e| e.name == name) {
            let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
            return Err(format!(
                "error: --print-ir-after: unknown pass `{name}` (known passes: {})",
                names.join(", ")
            ));
        }
    }
    if aoc_passes::egraph::Roofline::for_target(&config.target).is_none() {
        return Err(format!(
            "error: unknown target `{}` (known: x86-64-v4, sm_86, sm_90)",
            config.target
        ));
    }
    Ok(out)
}

/// Loads the rules of `file`; errors are rendered at file:line:col.
fn load_rules(file: &RulesFile) -> Result<Vec<aoc_passes::Rewrite>, String> {
    aoc_passes::load_rules(&file.text).map_err(|diags| {
        let n = diags.len();
        let mut s = render::render(&diags, &file.name, &file.text);
        s.push_str(&format!(
            "error: {} has {n} malformed rule{}\n",
            file.name,
            if n == 1 { "" } else { "s" }
        ));
        s
    })
}

/// Runs the pipeline `config` describes over `module`. `weights` loads the
/// module's external weights (for passes that fold them, and for
/// `--verify-rewrites`); `source` is the `.air` file's (name, text), so
/// errors from the passes render with file:line:col.
pub fn optimize(
    module: &mut Module,
    weights: &dyn WeightSource,
    config: &OptConfig,
    source: Option<(&str, &str)>,
) -> Result<OptOutcome, String> {
    let entries: Vec<PassEntry> = registry()
        .iter()
        .copied()
        .chain(config.extra_passes.iter().copied())
        .collect();
    let passes = plan(config, &entries)?;
    let user_rules = match &config.rules {
        Some(f) => load_rules(f)?,
        None => vec![],
    };
    let opts = PipelineOptions {
        verify_each: config.verify_each,
        print_ir_after_all: config.print_ir_after_all,
        print_ir_after: config.print_ir_after.clone(),
        user_rules,
        extra_passes: config.extra_passes.clone(),
        weights,
        target: config.target.clone(),
    };
    let on_module = |d: Diagnostic| match source {
        Some((name, text)) => render::render(&[d], name, text),
        None => render::render_plain(&[d], ""),
    };
    let mut outcome = OptOutcome::default();
    if passes.is_empty() {
        return Ok(outcome);
    }
    if !config.verify_rewrites {
        outcome.report = run_pipeline(module, &passes.join(","), &opts).map_err(on_module)?;
        return Ok(outcome);
    }
    let inputs = random_inputs(module)?;
    let mut before = interpret(module, weights, &inputs).map_err(|d| {
        format!(
            "error: --verify-rewrites: the input module does not run: {}",
            on_module(d)
        )
    })?;
    for pass in &passes {
        let r = run_pipeline(module, pass, &opts).map_err(on_module)?;
        let name = r.passes.first().map_or(pass.as_str(), |p| p.name.as_str());
        let after = interpret(module, weights, &inputs).map_err(|d| {
            format!(
                "error: --verify-rewrites: the module does not run after pass `{name}`: {}",
                on_module(d)
            )
        })?;
        let (max_abs, max_rel) = compare(&before, &after)
            .map_err(|m| format!("error: --verify-rewrites: after pass `{name}`: {m}"))?;
        outcome.rewrite_checks.push(RewriteCheck {
            pass: name.to_string(),
            max_abs,
            max_rel,
        });
        outcome.report.passes.extend(r.passes);
        outcome.report.printed_ir.extend(r.printed_ir);
        before = after;
    }
    Ok(outcome)
}

// ------------------------------------------------------- rewrite checks

/// The seed of `--verify-rewrites`' inputs (fixed, so runs repeat).
const SEED: u64 = 0x5eed_a0c0;

/// splitmix64: small, seedable, good enough for test inputs (also
/// `aoc run --random-inputs`, `run_check.rs`).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    pub(crate) fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// Uniform in [lo, hi].
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo + 1).max(1) as u64;
        lo + (self.next_u64() % span) as i64
    }
}

/// One random input per parameter of the entry function: standard normal
/// for floats (and fp8-stored quantized types), ids in [0, 10) for
/// integers (small non-negative ints are valid indices and shapes in most
/// models), 0/1 for bools, the storage range for quantized integers.
pub fn random_inputs(module: &Module) -> Result<Vec<Tensor>, String> {
    let func = module
        .entry()
        .ok_or("error: --verify-rewrites: the module has no function to run")?;
    let mut rng = Rng(SEED);
    Ok(func
        .params()
        .iter()
        .map(|&p| random_tensor(func.ty(p), &mut rng))
        .collect())
}

fn random_tensor(ty: &TensorType, rng: &mut Rng) -> Tensor {
    let n = ty.num_elements();
    let storage = ty.elem.storage();
    match &ty.elem {
        _ if storage.is_float() => {
            Tensor::from_f64(ty.clone(), (0..n).map(|_| rng.normal()).collect())
        }
        ElemType::Quant(_) => {
            let (lo, hi) = storage.int_range().unwrap_or((0, 9));
            Tensor::from_i64(ty.clone(), (0..n).map(|_| rng.int(lo, hi)).collect())
        }
        ElemType::Scalar(s) if s.is_bool() => {
            Tensor::from_i64(ty.clone(), (0..n).map(|_| rng.int(0, 1)).collect())
        }
        ElemType::Scalar(_) => {
            Tensor::from_i64(ty.clone(), (0..n).map(|_| rng.int(0, 9)).collect())
        }
    }
}

fn interpret(
    module: &Module,
    weights: &dyn WeightSource,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, Diagnostic> {
    let func = module.entry().ok_or_else(|| {
        Diagnostic::error("the module has no function to run", Default::default())
    })?;
    aoc_ir::interp::run(func, inputs.to_vec(), weights)
}

/// (max absolute error, max relative error) of `after` against `before`;
/// see [`RewriteCheck`]. A NaN where the reference has none is an infinite
/// error.
pub fn compare(before: &[Tensor], after: &[Tensor]) -> Result<(f64, f64), String> {
    if before.len() != after.len() {
        return Err(format!(
            "the number of results changed from {} to {}",
            before.len(),
            after.len()
        ));
    }
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if b.ty.shape != a.ty.shape {
            return Err(format!("result {i} changed type from {} to {}", b.ty, a.ty));
        }
        let (bv, av) = (b.to_f64(), a.to_f64());
        let mut abs = 0.0f64;
        let mut scale = 0.0f64;
        for (x, y) in bv.iter().zip(&av) {
            let d = if x == y || (x.is_nan() && y.is_nan()) {
                0.0
            } else if x.is_finite() && y.is_finite() {
                (x - y).abs()
            } else {
                f64::INFINITY
            };
            abs = abs.max(d);
            if x.is_finite() {
                scale = scale.max(x.abs());
            }
        }
        let rel = if abs == 0.0 {
            0.0
        } else {
            abs / scale.max(f64::MIN_POSITIVE)
        };
        max_abs = max_abs.max(abs);
        max_rel = max_rel.max(rel);
    }
    Ok((max_abs, max_rel))
}

// ------------------------------------------------------------- output

/// (count, elements) of the in-memory constants of at least
/// [`INLINE_LIMIT`] elements: what a weights file must hold.
pub fn large_computed_constants(module: &Module) -> (usize, usize) {
    let mut found = (0, 0);
    for f in &module.funcs {
        for (_, op) in f.ops.iter() {
            for (_, a) in op.attrs.iter() {
                if let Attr::Const(ConstValue::Tensor(t)) = a
                    && t.len() >= INLINE_LIMIT
                {
                    found.0 += 1;
                    found.1 += t.len();
                }
            }
        }
    }
    found
}

/// Whether some `const` refers to a weights file.
pub fn refers_to_weights(module: &Module) -> bool {
    module.funcs.iter().any(|f| {
        f.ops.iter().any(|(_, op)| {
            op.attrs
                .iter()
                .any(|(_, a)| matches!(a, Attr::Const(ConstValue::Weight(_))))
        })
    })
}

/// The printed module for stdout: small computed constants inline; an
/// error when large ones would need a weights file.
pub fn print_result(module: &mut Module) -> Result<String, String> {
    let (n, elements) = large_computed_constants(module);
    if n > 0 {
        return Err(format!(
            "error: the result holds {n} computed constant{} ({elements} elements) that need a weights file; use -o OUT.air to write OUT.air and OUT.safetensors",
            if n == 1 { "" } else { "s" }
        ));
    }
    aoc_ir::weights::externalize_constants(module, "weights", 0);
    Ok(aoc_ir::print::print_module(module))
}

/// Writes the result to `out`. When it holds computed constants or refers
/// to weights, every tensor it needs (the original weights, loaded through
/// `weights`, and the computed ones) goes to one new file `OUT.safetensors`
/// beside it, so the result is self-contained. Returns the paths written.
pub fn write_result(
    module: &mut Module,
    weights: &dyn WeightSource,
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut written = vec![];
    let mut staged = crate::output::Staged::new();
    if refers_to_weights(module) || large_computed_constants(module).0 > 0 {
        let wpath = out.with_extension("safetensors");
        let wname = wpath
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "weights.safetensors".to_string());
        let tensors =
            aoc_ir::weights::bundle_weights(module, "weights", &wname, INLINE_LIMIT, weights)
                .map_err(|m| format!("error: cannot bundle the weights: {m}"))?;
        // Staged beside and renamed, so a weights file the input maps (when
        // OUT is the input) is replaced, not truncated under the map, and
        // the .air and its weights appear together.
        let bytes = safetensors_bytes(&wpath, &tensors).map_err(|m| format!("error: {m}"))?;
        staged.add(&wpath, &bytes).map_err(|m| format!("error: {m}"))?;
        written.push(wpath);
    } else {
        aoc_ir::weights::externalize_constants(module, "weights", 0);
        module.weights.clear();
    }
    let text = aoc_ir::print::print_module(module);
    staged.add(out, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
    staged.commit().map_err(|m| format!("error: {m}"))?;
    written.insert(0, out.to_path_buf());
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aoc_ir::types::Scalar;

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_f64(TensorType::new(vec![v.len()], Scalar::F64), v.to_vec())
    }

    #[test]
    fn compares_against_the_scale_of_each_result() {
        let (abs, rel) = compare(&[t(&[10.0, -20.0, 0.0])], &[t(&[10.0, -20.5, 0.25])]).unwrap();
        assert_eq!(abs, 0.5);
        assert_eq!(rel, 0.5 / 20.0);
        let (abs, rel) = compare(&[t(&[1.0, f64::NAN])], &[t(&[1.0, f64::NAN])]).unwrap();
        assert_eq!((abs, rel), (0.0, 0.0));
        let (abs, _) = compare(&[t(&[1.0, 2.0])], &[t(&[1.0, f64::NAN])]).unwrap();
        assert_eq!(abs, f64::INFINITY);
        assert!(compare(&[t(&[1.0])], &[t(&[1.0, 2.0])]).is_err());
        assert!(compare(&[t(&[1.0])], &[]).is_err());
    }

    #[test]
    fn random_inputs_follow_the_parameter_types() {
        let src = "func @main(%x: tensor<1000xf32>, %i: tensor<50xi64>, %b: tensor<20xi1>) -> tensor<1000xf32> {\n  return %x : tensor<1000xf32>\n}\n";
        let (m, diags) = aoc_ir::parse_and_verify(src);
        assert!(diags.is_empty(), "{diags:?}");
        let ins = random_inputs(&m).unwrap();
        let x = ins[0].to_f64();
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(mean.abs() < 0.15 && (var - 1.0).abs() < 0.2, "{mean} {var}");
        assert!(ins[1].to_i64().iter().all(|&v| (0..10).contains(&v)));
        assert!(ins[1].to_i64().iter().any(|&v| v != ins[1].to_i64()[0]));
        assert!(ins[2].to_i64().iter().all(|&v| v == 0 || v == 1));
        // Seeded: the same module gets the same inputs.
        assert_eq!(ins, random_inputs(&m).unwrap());
    }

    /// A pass that breaks the IR: it declares the wrong result type.
    struct Breaker;
    impl aoc_passes::PassDef for Breaker {
        const NAME: &'static str = "breaker";
        const SUMMARY: &'static str = "declares a wrong result type";
        type Options = aoc_passes::pass::NoOptions;
        fn new(_: aoc_passes::pass::NoOptions) -> Self {
            Breaker
        }
    }
    impl aoc_passes::Pass for Breaker {
        fn name(&self) -> &'static str {
            "breaker"
        }
        fn summary(&self) -> &'static str {
            "declares a wrong result type"
        }
        fn run(
            &mut self,
            m: &mut Module,
            _: &mut aoc_passes::PassContext,
        ) -> Result<aoc_passes::PassStats, Diagnostic> {
            m.funcs[0].result_types[0] = TensorType::new(vec![7], Scalar::F32);
            Ok(Default::default())
        }
    }

    #[test]
    fn a_pass_that_breaks_the_ir_is_named_unless_verify_each_is_off() {
        let src = "func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = core.relu %x : tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n";
        let config = OptConfig {
            passes: Some("algebraic,breaker,algebraic".into()),
            extra_passes: vec![PassEntry::of::<Breaker>(false)],
            ..Default::default()
        };
        assert!(config.verify_each, "verification after each pass is the default");
        let (mut m, _) = aoc_ir::parse_and_verify(src);
        let e = optimize(&mut m, &aoc_ir::interp::NoWeights, &config, Some(("m.air", src))).unwrap_err();
        assert!(e.contains("internal error: pass `breaker` produced invalid IR"), "{e}");
        // Off, nothing checks after `breaker`: a pipeline that ends there
        // succeeds, and in a longer one the next pass trips over the IR
        // with an error that does not name the culprit.
        let off = OptConfig { verify_each: false, ..config };
        let (mut m, _) = aoc_ir::parse_and_verify(src);
        let ends = OptConfig { passes: Some("algebraic,breaker".into()), ..off.clone() };
        let out = optimize(&mut m, &aoc_ir::interp::NoWeights, &ends, None).unwrap();
        let ran: Vec<&str> = out.report.passes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(ran, ["algebraic", "breaker"]);
        let (mut m, _) = aoc_ir::parse_and_verify(src);
        let e = optimize(&mut m, &aoc_ir::interp::NoWeights, &off, None).unwrap_err();
        assert!(!e.contains("breaker"), "{e}");
    }

    #[test]
    fn the_tolerance_names_the_pass() {
        let o = OptOutcome {
            report: PipelineReport::default(),
            rewrite_checks: vec![
                RewriteCheck {
                    pass: "algebraic".into(),
                    max_abs: 0.0,
                    max_rel: 0.0,
                },
                RewriteCheck {
                    pass: "fold-bn".into(),
                    max_abs: 0.5,
                    max_rel: 0.01,
                },
            ],
        };
        let e = o.check_tolerance(1e-3).unwrap_err();
        assert!(e.contains("pass `fold-bn`"), "{e}");
        assert!(o.check_tolerance(0.1).is_ok());
        let table = o.render_rewrite_checks();
        assert!(
            table.contains("fold-bn") && table.contains("1.000e-2"),
            "{table}"
        );
    }
}
