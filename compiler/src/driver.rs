//! The library behind the `aoc` subcommands (`cli.rs` holds the command
//! line itself): loading `.air` and `.onnx` files (and running a pipeline
//! over them, `load_optimized`, for every compile target), writing `.air`
//! plus `.safetensors`, binding `.npy` inputs, running the interpreter,
//! writing and dumping results. Target-specific commands live in `cpu.rs`
//! and `gpu.rs`. Tests call these without the binary.
//!
//! Every function here returns `Err(String)` with text ready to print (the
//! diagnostics already rendered with file:line:col), so the CLI only prints
//! and picks the exit code. Bad input never panics.

use crate::npy;
use crate::onnx;
use crate::render;
use crate::weights::{SafetensorsWeights, safetensors_bytes};
use aoc_ir::Diagnostic;
use aoc_ir::attr::{Attr, ConstValue};
use aoc_ir::interp::{MapWeights, WeightSource};
use aoc_ir::module::{Func, Module};
use aoc_ir::tensor::{Data, Tensor};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Whether `path` names an ONNX model (by extension).
pub fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Whether `path` names an MLIR file (by extension).
pub fn is_mlir(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("mlir"))
}

/// Imports an MLIR file (TOSA / linalg) and verifies the result, as
/// [`import_onnx`] does for ONNX. Needs the `mlir` feature.
pub fn import_mlir(path: &Path, weights_path: &str) -> Result<(Module, Vec<(String, Tensor)>), String> {
    #[cfg(feature = "mlir")]
    {
        let name = path.display().to_string();
        let imported = crate::mlir::import_mlir(path, weights_path)?;
        let module = imported.module;
        let errors = aoc_ir::verify::verify_module(&module);
        if !errors.is_empty() {
            let mut text = render::render_plain(&errors, &name);
            text.push_str("error: the imported module does not verify; this is a bug in the MLIR importer, please report it\n");
            return Err(text);
        }
        Ok((module, imported.weights))
    }
    #[cfg(not(feature = "mlir"))]
    {
        let _ = weights_path;
        Err(format!(
            "error: {}: this aoc was built without MLIR support; rebuild with `cargo build --release -p aoc --features mlir` (docs/mlir.md)",
            path.display()
        ))
    }
}

// ---------------------------------------------------------------- loading

/// A parsed and verified `.air` file.
pub struct AirFile {
    pub path: PathBuf,
    pub source: String,
    pub module: Module,
    /// Rendered warnings and notes (empty when there are none).
    pub warnings: String,
}

impl AirFile {
    /// Renders diagnostics about this file's source.
    pub fn render(&self, diags: &[Diagnostic]) -> String {
        render::render(diags, &self.path.display().to_string(), &self.source)
    }
}

/// Reads a text file; invalid UTF-8 is an error at its line and column.
pub fn read_text(path: &Path) -> Result<String, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("error: cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let valid = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let (line, col) = aoc_ir::diag::line_col(valid, at);
        format!(
            "{}:{line}:{col}: error: the file is not UTF-8 text (byte {:#04x} at offset {at}); is it an .air file?",
            path.display(),
            bytes[at]
        )
    })
}

/// Parses and verifies `source` (named `path` in diagnostics).
pub fn parse_air(path: &Path, source: String) -> Result<AirFile, String> {
    let (module, diags) = aoc_ir::parse_and_verify(&source);
    let mut file = AirFile {
        path: path.to_path_buf(),
        source,
        module,
        warnings: String::new(),
    };
    let (errors, others): (Vec<_>, Vec<_>) = diags.into_iter().partition(|d| d.is_error());
    file.warnings = if others.is_empty() {
        String::new()
    } else {
        file.render(&others)
    };
    if !errors.is_empty() {
        let mut text = file.warnings.clone();
        text.push_str(&file.render(&errors));
        let n = errors.len();
        text.push_str(&format!(
            "error: {} has {n} error{}\n",
            path.display(),
            if n == 1 { "" } else { "s" }
        ));
        return Err(text);
    }
    Ok(file)
}

/// Every `const @file["key"]` of `module` that `weights` cannot provide with
/// its declared type, as a diagnostic at the constant.
pub fn check_weights(module: &Module, weights: &SafetensorsWeights) -> Vec<aoc_ir::Diagnostic> {
    use aoc_ir::attr::{Attr, ConstValue};
    let mut diags = vec![];
    for f in &module.funcs {
        for &op in &f.body.ops {
            let o = &f.ops[op];
            if let (Some(Attr::Const(ConstValue::Weight(w))), Some(&r)) = (o.attrs.get("value"), o.results.first())
                && let Err(m) = weights.check(&w.file, &w.key, f.ty(r))
            {
                diags.push(aoc_ir::Diagnostic::error(m, o.loc.clone()));
            }
        }
    }
    diags
}

/// Reads, parses and verifies an `.air` file.
pub fn read_air(path: &Path) -> Result<AirFile, String> {
    parse_air(path, read_text(path)?)
}

/// Loads an `.air` file and a weight source over the safetensors files it
/// declares (opened lazily, relative to the file's folder).
pub fn load_air(path: &Path) -> Result<(Module, SafetensorsWeights), String> {
    let file = read_air(path)?;
    let weights = SafetensorsWeights::for_module(&file.module, path);
    Ok((file.module, weights))
}

/// Imports an ONNX model and verifies the result. The module names its
/// weights file `weights_path` (as `@weights`); the weights come back in
/// memory.
pub fn import_onnx(
    path: &Path,
    input_shapes: &[(String, Vec<usize>)],
    weights_path: &str,
) -> Result<(Module, Vec<(String, Tensor)>), String> {
    import_onnx_with(path, input_shapes, &[], weights_path)
}

/// [`import_onnx`] with inputs fixed to values (`aoc import
/// --input-value`): they become constants.
pub fn import_onnx_with(
    path: &Path,
    input_shapes: &[(String, Vec<usize>)],
    input_values: &[(String, Vec<f64>)],
    weights_path: &str,
) -> Result<(Module, Vec<(String, Tensor)>), String> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("error: cannot read {name}: {e}"))?;
    let opts = onnx::ImportOptions {
        input_shapes: input_shapes.to_vec(),
        input_values: input_values.to_vec(),
        weights_name: "weights".to_string(),
        weights_path: weights_path.to_string(),
        model_dir: Some(path.parent().map_or_else(|| Path::new(".").to_path_buf(), Path::to_path_buf)),
        ..Default::default()
    };
    let imported =
        onnx::import_model(&bytes, &opts).map_err(|d| render::render_plain(&[d], &name))?;
    for w in &imported.warnings {
        crate::say::info(&format!("warning: {name}: {w}"));
    }
    let mut module = imported.module;
    let errors = aoc_ir::verify::verify_module(&module);
    if !errors.is_empty() {
        let mut text = render::render_plain(&errors, &name);
        text.push_str("error: the imported module does not verify; this is a bug in the importer, please report it\n");
        return Err(text);
    }
    // A module without external weights must not name a file nobody writes.
    let used = referenced_weight_files(&module);
    module.weights.retain(|w| used.contains(&w.name));
    Ok((module, imported.weights))
}

/// The weight declarations that some `const` refers to.
fn referenced_weight_files(module: &Module) -> HashSet<String> {
    let mut used = HashSet::new();
    for f in &module.funcs {
        for (_, op) in f.ops.iter() {
            for (_, a) in op.attrs.iter() {
                if let Attr::Const(ConstValue::Weight(w)) = a {
                    used.insert(w.file.clone());
                }
            }
        }
    }
    used
}

/// A model loaded from either format, ready to run.
pub struct Loaded {
    pub module: Module,
    pub weights: Box<dyn WeightSource>,
    /// The `.air` text, for rendering interpreter diagnostics with spans.
    pub source: Option<String>,
    pub path: PathBuf,
}

impl Loaded {
    pub fn render(&self, diags: &[Diagnostic]) -> String {
        let name = self.path.display().to_string();
        match &self.source {
            Some(src) => render::render(diags, &name, src),
            None => render::render_plain(diags, &name),
        }
    }
}

/// Loads an `.air` file, or imports an `.onnx` or `.mlir` file in memory.
pub fn load_model(path: &Path, input_shapes: &[(String, Vec<usize>)]) -> Result<Loaded, String> {
    if is_onnx(path) {
        let (module, weights) = import_onnx(path, input_shapes, "weights.safetensors")?;
        let map = MapWeights(
            weights
                .into_iter()
                .map(|(k, t)| (("weights".to_string(), k), t))
                .collect(),
        );
        return Ok(Loaded {
            module,
            weights: Box::new(map),
            source: None,
            path: path.to_path_buf(),
        });
    }
    if is_mlir(path) {
        if !input_shapes.is_empty() {
            return Err("error: --input-shape applies to .onnx files only (an .mlir file's shapes are static)".to_string());
        }
        let (module, weights) = import_mlir(path, "weights.safetensors")?;
        let map = MapWeights(weights.into_iter().map(|(k, t)| (("weights".to_string(), k), t)).collect());
        return Ok(Loaded { module, weights: Box::new(map), source: None, path: path.to_path_buf() });
    }
    if !input_shapes.is_empty() {
        return Err(
            "error: --input-shape applies to .onnx files only (an .air file's shapes are fixed)"
                .to_string(),
        );
    }
    let file = read_air(path)?;
    if !file.warnings.is_empty() {
        crate::say::info(&file.warnings);
    }
    let weights = SafetensorsWeights::for_module(&file.module, path);
    Ok(Loaded {
        module: file.module,
        weights: Box::new(weights),
        source: Some(file.source),
        path: path.to_path_buf(),
    })
}

// ---------------------------------------------------------------- import

/// Writes `module` to `out` and, when there are weights, the weights to the
/// file the module's `@weights` declaration names (beside `out`). Returns
/// the paths written.
pub fn write_air(
    module: &Module,
    weights: &[(String, Tensor)],
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut written = vec![];
    let mut staged = crate::output::Staged::new();
    if !weights.is_empty() {
        let decl = module.weights.first().ok_or(
            "error: the model has weights but the module declares no weights file (importer bug, please report)",
        )?;
        let dir = out.parent().unwrap_or(Path::new(""));
        let wpath = dir.join(&decl.path);
        let bytes = safetensors_bytes(&wpath, weights).map_err(|m| format!("error: {m}"))?;
        staged.add(&wpath, &bytes).map_err(|m| format!("error: {m}"))?;
        written.push(wpath);
    }
    let text = aoc_ir::print::print_module(module);
    staged.add(out, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
    // Both files appear together, or neither does.
    staged.commit().map_err(|m| format!("error: {m}"))?;
    written.insert(0, out.to_path_buf());
    Ok(written)
}

// ---------------------------------------------------------------- check

/// `2 functions, 31 ops, 1 weights file`.
pub fn summary(m: &Module) -> String {
    let ops: usize = m.funcs.iter().map(|f| f.body.ops.len()).sum();
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    format!(
        "{}, {}, {}",
        plural(m.funcs.len(), "function"),
        plural(ops, "op"),
        plural(m.weights.len(), "weights file")
    )
}

// ---------------------------------------------------------------- opt

/// Runs the pipeline `passes` (plus `user-rules` when `rules` is given)
/// over `module`, with no external weights and the default target: what the
/// filetests' `// test: opt` does. `aoc opt` itself calls
/// [`crate::opt::optimize`] with all its flags.
pub fn run_passes(
    module: &mut Module,
    passes: &str,
    rules: Option<crate::opt::RulesFile>,
) -> Result<aoc_passes::PipelineReport, String> {
    let config = crate::opt::OptConfig {
        passes: Some(passes.to_string()),
        rules,
        ..Default::default()
    };
    let out = crate::opt::optimize(module, &aoc_ir::interp::NoWeights, &config, None)?;
    Ok(out.report)
}

/// Loads a model and runs `passes` with `cost_target`'s cost model,
/// verifying after each pass when `verify_each`; with `air_out`, writes the
/// optimized IR there instead and returns `None` (`--emit air`: folded
/// weights print inline as dense<...>, complete if large).
pub fn load_optimized(
    input: &Path,
    input_shapes: &[(String, Vec<usize>)],
    passes: &str,
    verify_each: bool,
    cost_target: &str,
    air_out: Option<&Path>,
) -> Result<Option<Loaded>, String> {
    let mut loaded = load_model(input, input_shapes)?;
    // The outside world knows each result by its name in the model: pin it,
    // so a pass that returns another value in its place (a quantize folded
    // into a dequantize, say) does not rename the artifact's output.
    for f in loaded.module.funcs.iter_mut() {
        f.pin_result_names();
    }
    let config = crate::opt::OptConfig {
        passes: Some(passes.to_string()),
        target: cost_target.to_string(),
        verify_each,
        ..Default::default()
    };
    let pb = crate::say::progress(0, &format!("optimizing {} ({passes})", input.display()));
    let outcome = crate::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None);
    pb.finish_and_clear();
    let outcome = outcome?;
    crate::say::detail(&outcome.report.render_timing());
    if let Some(out) = air_out {
        let text = aoc_ir::print::print_module(&loaded.module);
        crate::output::write_file(out, text.as_bytes()).map_err(|m| format!("error: {m}"))?;
        return Ok(None);
    }
    Ok(Some(loaded))
}

// ---------------------------------------------------------------- run

/// One `--input` argument.
#[derive(Clone, Debug, PartialEq)]
pub struct InputArg {
    /// The parameter's name (without `%`), or `None` to bind in order.
    pub name: Option<String>,
    pub path: PathBuf,
}

/// Parses `NAME=PATH.npy` or `PATH.npy`. A `=` splits only when the part
/// before it looks like a value name and the whole text is not an existing
/// file (paths may contain `=`).
pub fn parse_input_arg(s: &str) -> InputArg {
    if let Some((name, path)) = s.split_once('=') {
        let name = name.strip_prefix('%').unwrap_or(name);
        let looks_like_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-' | ':'));
        if looks_like_name && !Path::new(s).exists() {
            return InputArg {
                name: Some(name.to_string()),
                path: PathBuf::from(path),
            };
        }
    }
    InputArg {
        name: None,
        path: PathBuf::from(s),
    }
}

/// `%x (tensor<...>)`, or `input:0 (%input_0, tensor<...>)` for a
/// parameter whose external name differs.
fn describe_param(func: &Func, i: usize) -> String {
    let p = func.params()[i];
    match func.param_name(i) {
        n if n == func.name_of(p) => format!("%{n} ({})", func.ty(p)),
        n => format!("{n} (%{}, {})", func.name_of(p), func.ty(p)),
    }
}

fn describe_params(func: &Func) -> String {
    (0..func.params().len()).map(|i| describe_param(func, i)).collect::<Vec<_>>().join(", ")
}

/// Binds given tensors to `func`'s parameters: named ones by name, unnamed
/// ones to the remaining parameters in order. Each tensor is checked against
/// (and converted to) its parameter's type. `origin` names where each came
/// from, for messages.
pub fn bind_inputs(
    func: &Func,
    given: Vec<(Option<String>, String, Tensor)>,
) -> Result<Vec<Tensor>, String> {
    let params = func.params();
    let mut slots: Vec<Option<(String, Tensor)>> = vec![None; params.len()];
    let mut unnamed = vec![];
    for (name, origin, t) in given {
        let Some(name) = name else {
            unnamed.push((origin, t));
            continue;
        };
        let Some(i) = func.param_index(&name) else {
            return Err(format!(
                "error: unknown input `{name}` (from {origin}); @{}'s inputs are: {}",
                func.name,
                describe_params(func)
            ));
        };
        if slots[i].is_some() {
            return Err(format!("error: input `{name}` is given twice"));
        }
        slots[i] = Some((origin, t));
    }
    let mut unnamed = unnamed.into_iter();
    for slot in slots.iter_mut().filter(|s| s.is_none()) {
        match unnamed.next() {
            Some(x) => *slot = Some(x),
            None => break,
        }
    }
    let extra: Vec<String> = unnamed.map(|(o, _)| o).collect();
    if !extra.is_empty() {
        return Err(format!(
            "error: too many inputs: @{} takes {} ({}); not bound: {}",
            func.name,
            params.len(),
            describe_params(func),
            extra.join(", ")
        ));
    }
    let missing: Vec<String> =
        (0..params.len()).filter(|&i| slots[i].is_none()).map(|i| describe_param(func, i)).collect();
    if !missing.is_empty() {
        let first = (0..params.len()).find(|&i| slots[i].is_none()).map(|i| func.param_name(i)).unwrap_or("x");
        return Err(format!(
            "error: missing input{} {}; give {} with --input {first}=PATH.npy",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            if missing.len() == 1 { "it" } else { "each" }
        ));
    }
    params
        .iter()
        .zip(slots)
        .map(|(&p, slot)| {
            let (origin, t) = slot.expect("every slot is bound (checked above)");
            npy::conform(t, func.ty(p))
                .map_err(|m| format!("error: {origin}: input %{}: {m}", func.name_of(p)))
        })
        .collect()
}

/// Runs `module`'s entry function on bound inputs; returns each result with
/// the name of the returned value.
pub fn run_module(
    module: &Module,
    weights: &dyn WeightSource,
    inputs: Vec<Tensor>,
) -> Result<Vec<(String, Tensor)>, Diagnostic> {
    let func = module.entry().ok_or_else(|| {
        Diagnostic::error("the module has no function to run", Default::default())
    })?;
    // A bar for models big enough to take a while in the interpreter.
    let n = func.body.ops.len();
    let pb = if n >= 200 { crate::say::progress(n as u64, "interpreting") } else { indicatif::ProgressBar::hidden() };
    let outs = aoc_ir::interp::run_observed(func, inputs, weights, &mut |k| pb.set_position(k as u64));
    pb.finish_and_clear();
    let outs = outs?;
    Ok((0..func.results().len()).map(|i| func.result_name(i).to_string()).zip(outs).collect())
}

/// Loads a model (`.air`, or `.onnx` imported in memory), reads the `.npy`
/// inputs, binds them and runs the entry function.
pub fn run_file(
    path: &Path,
    inputs: &[InputArg],
    input_shapes: &[(String, Vec<usize>)],
) -> Result<Vec<(String, Tensor)>, String> {
    let loaded = load_model(path, input_shapes)?;
    let func = loaded
        .module
        .entry()
        .ok_or_else(|| format!("error: {} has no function to run", path.display()))?;
    let mut given = vec![];
    for a in inputs {
        let t = npy::read_npy(&a.path).map_err(|m| format!("error: {m}"))?;
        given.push((a.name.clone(), a.path.display().to_string(), t));
    }
    let bound = bind_inputs(func, given)?;
    run_module(&loaded.module, loaded.weights.as_ref(), bound).map_err(|d| loaded.render(&[d]))
}

/// [`run_file`] for `.air` files.
pub fn run_air(path: &Path, inputs: &[InputArg]) -> Result<Vec<(String, Tensor)>, String> {
    run_file(path, inputs, &[])
}

/// Writes each output to `dir/NAME.npy`; returns the paths and any notes
/// (e.g. bf16 written as float32).
pub fn write_outputs(
    dir: &Path,
    outputs: &[(String, Tensor)],
) -> Result<(Vec<PathBuf>, Vec<String>), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("error: cannot create {}: {e}", dir.display()))?;
    let mut paths = vec![];
    let mut notes = vec![];
    for (name, t) in outputs {
        let p = dir.join(format!("{name}.npy"));
        if let Some(n) = npy::write_npy(&p, t).map_err(|m| format!("error: {m}"))? {
            notes.push(n);
        }
        paths.push(p);
    }
    Ok((paths, notes))
}

// ---------------------------------------------------------------- dumps

/// A textual dump of results, one line each:
/// `%y = tensor<2x2xf32> [[1.0, 2.5], [-3.0, 0.333333]]`.
/// Values nest by shape; floats print with six significant digits (enough
/// to check by hand, and blind to last-bit differences between computing in
/// f32 and f64); integers, bools (0/1) and quantized storage print exactly.
pub fn dump_outputs(outputs: &[(String, Tensor)]) -> String {
    outputs
        .iter()
        .map(|(n, t)| format!("%{n} = {} {}\n", t.ty, dump_values(t)))
        .collect()
}

/// The values of `t`, nested by shape (a bare number for rank 0).
pub fn dump_values(t: &Tensor) -> String {
    let mut out = String::new();
    let float = t.ty.elem.storage().is_float();
    let mut i = 0;
    nest(&mut out, &t.ty.shape, &mut |out| {
        match &t.data {
            Data::F(v) => out.push_str(&fmt_sig6(v[i])),
            Data::I(v) if float => out.push_str(&fmt_sig6(v[i] as f64)),
            Data::I(v) => out.push_str(&v[i].to_string()),
        }
        i += 1;
    });
    out
}

fn nest(out: &mut String, shape: &[usize], leaf: &mut dyn FnMut(&mut String)) {
    match shape.split_first() {
        None => leaf(out),
        Some((&n, rest)) => {
            out.push('[');
            for k in 0..n {
                if k > 0 {
                    out.push_str(", ");
                }
                nest(out, rest, leaf);
            }
            out.push(']');
        }
    }
}

/// Bytes in KiB/MiB for messages.
pub fn human(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

/// A float with six significant digits, always with a `.` or exponent:
/// `0.0900306`, `1.0`, `-2.5e-7`, `1.23457e10`, `nan`, `inf`.
pub fn fmt_sig6(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{v:.5e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| {
        if !s.contains('.') {
            return format!("{s}.0");
        }
        let s = s.trim_end_matches('0');
        if s.ends_with('.') {
            format!("{s}0")
        } else {
            s.to_string()
        }
    };
    if (-5..6).contains(&exp) {
        trim(&format!("{v:.*}", (5 - exp) as usize))
    } else {
        format!("{}e{exp}", trim(mant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aoc_ir::types::Scalar;

    #[test]
    fn formats_six_significant_digits() {
        assert_eq!(fmt_sig6(1.0), "1.0");
        assert_eq!(fmt_sig6(0.09003057317038046), "0.0900306");
        assert_eq!(fmt_sig6(-2.5), "-2.5");
        assert_eq!(fmt_sig6(123456.7), "123457.0");
        assert_eq!(fmt_sig6(1234567.0), "1.23457e6");
        assert_eq!(fmt_sig6(0.1f32 as f64), "0.1");
        assert_eq!(fmt_sig6(2.5e-7), "2.5e-7");
        assert_eq!(fmt_sig6(0.000012345), "0.000012345");
        assert_eq!(fmt_sig6(f64::NAN), "nan");
    }

    #[test]
    fn dumps_nested_values() {
        let t = Tensor::from_f64(
            aoc_ir::TensorType::new(vec![2, 2], Scalar::F32),
            vec![1.0, 2.5, -3.0, 1.0 / 3.0],
        );
        assert_eq!(
            dump_outputs(&[("y".into(), t)]),
            "%y = tensor<2x2xf32> [[1.0, 2.5], [-3.0, 0.333333]]\n"
        );
        let t = Tensor::from_i64(aoc_ir::TensorType::new(vec![], Scalar::I8), vec![-7]);
        assert_eq!(dump_values(&t), "-7");
    }

    #[test]
    fn parses_arguments() {
        assert_eq!(
            parse_input_arg("x=a.npy"),
            InputArg {
                name: Some("x".into()),
                path: "a.npy".into()
            }
        );
        assert_eq!(
            parse_input_arg("%x=a.npy"),
            InputArg {
                name: Some("x".into()),
                path: "a.npy".into()
            }
        );
        assert_eq!(
            parse_input_arg("dir/a.npy"),
            InputArg {
                name: None,
                path: "dir/a.npy".into()
            }
        );
        assert_eq!(
            parse_input_arg("d/x=a.npy"),
            InputArg {
                name: None,
                path: "d/x=a.npy".into()
            }
        );
    }
}
