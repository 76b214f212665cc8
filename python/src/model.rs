//! Compiling, loading, explaining and quantizing: the `aoc compile`,
//! `aoc explain --json` and `aoc quantize` commands as functions over
//! files. Models arrive as paths (the Python side writes ONNX bytes and
//! calibration batches to a scratch folder first); artifacts come back in
//! memory as [`Artifact`]s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use aoc_compiler::cpu::{CPU_PIPELINE, Emit, compile_cpu, cpu_level};
use aoc_compiler::gpu::{GPU_PIPELINE, GpuEmit, compile_gpu};
use aoc_compiler::quantize::{self as engine, Choices, Config, calib::CalibData};

use crate::{Failure, Kind, guarded, json_to_py, on_big_stack};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Artifact>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(model_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(save_model, m)?)?;
    Ok(())
}

/// A scratch folder, removed when dropped.
pub(crate) struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new() -> Result<Scratch, Failure> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("aoc-python-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::new(Kind::Internal, format!("cannot create the scratch folder {}: {e}", dir.display())))?;
        Ok(Scratch { dir })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A compiled model: the bytes of one `.aoc` file, in memory.
#[pyclass(module = "aoc._aoc", frozen)]
pub struct Artifact {
    pub(crate) bytes: Vec<u8>,
    /// What error messages call it: the file it was loaded from, or
    /// `<compiled from MODEL>`.
    pub(crate) name: String,
    /// The file it was loaded from or last saved to.
    pub(crate) path: std::sync::Mutex<Option<PathBuf>>,
    pub(crate) target: String,
    /// `aoc compile --json`'s summary (compiled artifacts only).
    summary: Option<serde_json::Value>,
}

impl Artifact {
    /// The runtime's view of it, validated (a copy of the bytes: the
    /// runtime wants them 64-byte aligned).
    pub(crate) fn open(&self) -> Result<aoc_runtime::artifact::Artifact, Failure> {
        aoc_runtime::artifact::Artifact::from_bytes_named(&self.name, &self.bytes)
            .map_err(|e| Failure::new(Kind::Load, e.to_string()))
    }
}

#[pymethods]
impl Artifact {
    /// The target it was compiled for (`x86-64-v3`, `sm_90a`, ...).
    #[getter]
    fn target(&self) -> &str {
        &self.target
    }

    /// Whether it runs on a GPU (an `sm_*` target).
    #[getter]
    fn is_gpu(&self) -> bool {
        self.target.starts_with("sm_")
    }

    /// The file it was loaded from or last saved to, if any.
    #[getter]
    fn path(&self) -> Option<String> {
        self.path.lock().ok().and_then(|p| p.as_ref().map(|p| p.display().to_string()))
    }

    /// The compile summary (`aoc compile --json`): steps by kind, kernels,
    /// memory, seconds; `None` for an artifact loaded from a file.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.summary.as_ref().map(|s| json_to_py(py, s)).transpose()
    }

    /// Writes the artifact to `path` (an `.aoc` file `aoc run`, `aoc bench`
    /// and the runtime's C API load).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| guarded(|| {
            aoc_compiler::output::write_file(&path, &self.bytes).map_err(|m| Failure::new(Kind::Load, m))
        }))?;
        if let Ok(mut p) = self.path.lock() {
            *p = Some(path);
        }
        Ok(())
    }

    /// The `.aoc` file's bytes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }

    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    fn __repr__(&self) -> String {
        format!("<aoc.Artifact {} for {}, {} bytes>", self.name, self.target, self.bytes.len())
    }
}

/// `aoc compile MODEL --target TARGET --precision P [--passes ...]`, in
/// memory: returns the artifact.
#[pyfunction]
#[pyo3(signature = (model, target, precision, passes, input_shapes, reference_fallback, verify_each))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    model: PathBuf,
    target: String,
    precision: String,
    passes: Option<String>,
    input_shapes: Vec<(String, Vec<usize>)>,
    reference_fallback: bool,
    verify_each: bool,
) -> PyResult<Artifact> {
    let art = py.detach(|| on_big_stack(|| compile_to_memory(&model, &target, &precision, passes.as_deref(), &input_shapes, reference_fallback, verify_each)))?;
    Ok(art)
}

fn compile_to_memory(
    model: &Path,
    target: &str,
    precision: &str,
    passes: Option<&str>,
    input_shapes: &[(String, Vec<usize>)],
    reference_fallback: bool,
    verify_each: bool,
) -> Result<Artifact, Failure> {
    let err = |m: String| Failure::new(Kind::Compile, m);
    let scratch = Scratch::new()?;
    let out = scratch.dir.join("model.aoc");
    let (_, mut summary, target_name) = if target.starts_with("sm_") {
        let sm = aoc_backend_ptx::Sm::parse(target).map_err(err)?;
        let p = aoc_backend_ptx::translate::Precision::parse(precision)
            .ok_or_else(|| err(format!("precision must be fp32, tf32, fp16 or bf16, found `{precision}`")))?;
        let (msg, json) = compile_gpu(model, input_shapes, sm, p, passes.unwrap_or(GPU_PIPELINE), verify_each, GpuEmit::Artifact, &out, None, reference_fallback)
            .map_err(err)?;
        (msg, json, target.to_string())
    } else {
        let level = cpu_level(target).ok_or_else(|| {
            err(format!(
                "unknown target `{target}`; CPU targets are x86-64-v4, x86-64-v3, x86-64 and host, GPU targets sm_70, sm_75, sm_80, sm_86, sm_89, sm_90 and sm_90a"
            ))
        })?;
        if precision != "fp32" {
            return Err(err(format!("precision {precision} is for GPU targets; CPU targets compute in fp32")));
        }
        let (msg, json) = compile_cpu(model, input_shapes, level, passes.unwrap_or(CPU_PIPELINE), verify_each, Emit::Artifact, &out, reference_fallback)
            .map_err(err)?;
        (msg, json, level.target_name().to_string())
    };
    let bytes = std::fs::read(&out).map_err(|e| err(format!("cannot read back {}: {e}", out.display())))?;
    if let Some(o) = summary.as_object_mut() {
        o.remove("output");
    }
    Ok(Artifact {
        bytes,
        name: format!("<compiled from {}>", model.display()),
        path: std::sync::Mutex::new(None),
        target: target_name,
        summary: Some(summary),
    })
}

/// Reads and validates an `.aoc` file.
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf) -> PyResult<Artifact> {
    Ok(py.detach(|| guarded(|| load_artifact(&path)))?)
}

pub(crate) fn load_artifact(path: &Path) -> Result<Artifact, Failure> {
    let a = aoc_runtime::artifact::Artifact::open(path).map_err(|e| Failure::new(Kind::Load, e.to_string()))?;
    Ok(Artifact {
        bytes: a.as_bytes().to_vec(),
        name: path.display().to_string(),
        path: std::sync::Mutex::new(Some(path.to_path_buf())),
        target: a.manifest().target.clone(),
        summary: None,
    })
}

/// `aoc explain --json` of an artifact (a file's path, or the artifact
/// object, written to a scratch file first).
#[pyfunction]
fn explain<'py>(py: Python<'py>, artifact: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let v = if let Ok(a) = artifact.cast::<Artifact>() {
        let a = a.get();
        let known = a.path.lock().ok().and_then(|p| p.clone());
        py.detach(|| guarded(|| match known {
            Some(p) => explain_file(&p),
            None => {
                let scratch = Scratch::new()?;
                let p = scratch.dir.join("model.aoc");
                std::fs::write(&p, &a.bytes).map_err(|e| Failure::new(Kind::Internal, format!("cannot write {}: {e}", p.display())))?;
                let mut v = explain_file(&p)?;
                v["artifact"] = serde_json::json!(a.name);
                Ok(v)
            }
        }))?
    } else {
        let p: PathBuf = artifact.extract()?;
        py.detach(|| guarded(|| explain_file(&p)))?
    };
    json_to_py(py, &v)
}

fn explain_file(path: &Path) -> Result<serde_json::Value, Failure> {
    let load = |m: String| Failure::new(Kind::Load, m);
    let art = aoc_compiler::gpu::inspect_artifact(path).map_err(load)?;
    if art.manifest().target.starts_with("sm_") {
        aoc_compiler::gpu::explain_gpu_json(path, &art).map_err(load)
    } else {
        aoc_compiler::cpu::explain_json(path, &art).map_err(load)
    }
}

/// A model's inputs as (name, dtype, shape), `.onnx` or `.air`.
#[pyfunction]
#[pyo3(signature = (model, input_shapes))]
fn model_inputs(py: Python<'_>, model: PathBuf, input_shapes: Vec<(String, Vec<usize>)>) -> PyResult<Vec<(String, String, Vec<usize>)>> {
    Ok(py.detach(|| on_big_stack(|| {
        let loaded = aoc_compiler::driver::load_model(&model, &input_shapes).map_err(|m| Failure::new(Kind::Compile, m))?;
        let entry = loaded
            .module
            .entry()
            .ok_or_else(|| Failure::new(Kind::Compile, format!("{} has no function", model.display())))?;
        Ok(entry_inputs(entry).into_iter().map(|(n, t)| (n, t.elem.to_string(), t.shape)).collect())
    }))?)
}

fn entry_inputs(entry: &aoc_ir::module::Func) -> Vec<(String, aoc_ir::TensorType)> {
    (0..entry.params().len()).map(|i| (entry.param_name(i).to_string(), entry.ty(entry.params()[i]).clone())).collect()
}

/// What `aoc quantize` takes, with Python's names.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct QuantizeOptions {
    method: String,
    percentile: f64,
    precision: String,
    activations: String,
    per_channel_weights: bool,
    keep: Vec<String>,
    residual: String,
    target_sqnr: Option<f64>,
    sensitivity: bool,
    sensitivity_batches: usize,
    requantize: bool,
    threads: usize,
    target: String,
}

/// `aoc quantize MODEL --calib DIR -o OUT.air [--eval DIR] ...`: writes the
/// quantized model to `output` (weights beside it) and returns the report
/// (`--report`'s JSON) and the table the command prints.
#[pyfunction]
#[pyo3(signature = (model, calib, output, options, eval=None, input_shapes=vec![]))]
fn quantize<'py>(
    py: Python<'py>,
    model: PathBuf,
    calib: PathBuf,
    output: PathBuf,
    options: &Bound<'py, PyDict>,
    eval: Option<PathBuf>,
    input_shapes: Vec<(String, Vec<usize>)>,
) -> PyResult<(Bound<'py, PyAny>, String)> {
    let o: QuantizeOptions = options.extract()?;
    let (report, table) = py.detach(|| on_big_stack(|| quantize_files(&model, &calib, &output, &o, eval.as_deref(), &input_shapes)))?;
    Ok((json_to_py(py, &report)?, table))
}

fn quantize_files(
    model: &Path,
    calib: &Path,
    output: &Path,
    o: &QuantizeOptions,
    eval: Option<&Path>,
    input_shapes: &[(String, Vec<usize>)],
) -> Result<(serde_json::Value, String), Failure> {
    let bad = |m: String| Failure::new(Kind::Input, m);
    let choices = Choices {
        method: &o.method,
        percentile: o.percentile,
        precision: &o.precision,
        activations: &o.activations,
        residual: &o.residual,
    };
    let (method, precision, activations, residual) = choices.parse("").map_err(bad)?;
    if let Some(t) = o.target_sqnr
        && !t.is_finite()
    {
        return Err(bad(format!("target_sqnr must be a number of dB, found {t}")));
    }
    let qerr = |m: String| Failure::new(Kind::Quantize, m);
    let loaded = aoc_compiler::driver::load_model(model, input_shapes).map_err(|m| Failure::new(Kind::Compile, m))?;
    let entry = loaded.module.entry().ok_or_else(|| Failure::new(Kind::Compile, format!("{} has no function", model.display())))?;
    let inputs = entry_inputs(entry);
    let calib = CalibData::open(calib, &inputs, None).map_err(bad)?;
    let eval = eval.map(|d| CalibData::open(d, &inputs, None)).transpose().map_err(bad)?;
    // Where the result will run decides which layers go int8 (the
    // CLI's --target).
    let cfg = Config {
        method,
        precision,
        activations,
        per_channel_weights: o.per_channel_weights,
        keep: o.keep.iter().filter(|k| !k.is_empty()).cloned().collect(),
        residual,
        target_sqnr: o.target_sqnr,
        sensitivity: o.sensitivity,
        sensitivity_batches: o.sensitivity_batches,
        threads: o.threads,
        target: engine::Target::parse(&o.target).map_err(bad)?,
        requantize: o.requantize,
        progress: false,
    };
    let name = model.display().to_string();
    let weights = loaded.weights;
    let mut outcome = engine::quantize(loaded.module, weights.as_ref(), &calib, eval.as_ref(), &cfg, &name).map_err(qerr)?;
    aoc_compiler::opt::write_result(&mut outcome.module, weights.as_ref(), output).map_err(qerr)?;
    Ok((outcome.report.clone(), engine::table(&outcome)))
}

/// Writes the model at `source` (`.air` or `.onnx`) as `.air` at `dest`,
/// its weights in `dest` with `.safetensors` beside it.
#[pyfunction]
fn save_model(py: Python<'_>, source: PathBuf, dest: PathBuf) -> PyResult<Vec<String>> {
    Ok(py.detach(|| on_big_stack(|| {
        let err = |m: String| Failure::new(Kind::Load, m);
        if source == dest {
            return Err(err(format!("{} would overwrite the model", dest.display())));
        }
        let mut loaded = aoc_compiler::driver::load_model(&source, &[]).map_err(err)?;
        let written = aoc_compiler::opt::write_result(&mut loaded.module, loaded.weights.as_ref(), &dest).map_err(err)?;
        Ok(written.iter().map(|p| p.display().to_string()).collect())
    }))?)
}
