//! The architecture zoo: small exports of the architectures timm,
//! torchvision and Hugging Face users bring (`tests/data/zoo/`, made by
//! `tests/scripts/gen_zoo.py`), each against ONNX Runtime.
//!
//! For each model of `manifest.json`: seeded inputs from its input spec
//! (standard-normal floats; token ids uniform in `[0, high)`), ONNX
//! Runtime's outputs from `tests/scripts/ort_run.py` with `$AOC_PYTHON`
//! (default `.venv/bin/python`; without a Python that has onnxruntime the
//! model passes with a printed reason), then: import, the reference
//! interpreter, and the CPU pipeline compiled for `x86-64-v4` and `x86-64`
//! with no reference step (the lowering refuses one; the step kinds are
//! checked too) and run by the runtime at 2 threads. Every result is
//! within 1e-3 of max(1, max|expected|). A level this CPU lacks is skipped
//! with a printed reason. The GPU targets of the same models are
//! `compiler/tests/gpu.rs` (`compile_zoo_*`, `gpu_zoo_*`).
//!
//! `tests/data/zoo/pending.txt` names models that wait for an op or a
//! kernel another change adds, with the text their failure must hold
//! (`roberta unsupported ONNX op `GatherElements``): their test passes
//! only while the import or the compile fails with that text, so it
//! fails, and asks to be removed from the list, once the op lands.

use aoc_backend_x86::compile::compile;
use aoc_backend_x86::pointwise::X86Level;
use aoc_compiler::cpu::CPU_PIPELINE;
use aoc_compiler::driver::load_model;
use aoc_compiler::npy::{read_npy, write_npy};
use aoc_ir::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use aoc_runtime::artifact::{Artifact, ArtifactErrorKind};
use aoc_runtime::exec::{Session, SessionOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const TOLERANCE: f64 = 1e-3;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn zoo() -> PathBuf {
    workspace().join("tests/data/zoo")
}

/// One model of the manifest.
struct Model {
    name: String,
    file: PathBuf,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    /// What the expected failure says (pending.txt).
    pending: Option<String>,
}

struct InputSpec {
    name: String,
    shape: Vec<usize>,
    dtype: String,
    /// Token ids: the exclusive upper bound.
    high: Option<i64>,
}

fn models() -> Result<Vec<Model>, String> {
    let text = std::fs::read_to_string(zoo().join("manifest.json")).map_err(|e| format!("manifest.json: {e}"))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("manifest.json: {e}"))?;
    let pending = std::fs::read_to_string(zoo().join("pending.txt")).unwrap_or_default();
    let pending: Vec<(&str, &str)> = pending
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(char::is_whitespace))
        .collect();
    let obj = json.as_object().ok_or("manifest.json: not an object")?;
    let mut out = vec![];
    for (name, m) in obj {
        let file = zoo().join(m["file"].as_str().ok_or_else(|| format!("{name}: no file"))?);
        let inputs = m["inputs"]
            .as_array()
            .ok_or_else(|| format!("{name}: no inputs"))?
            .iter()
            .map(|i| InputSpec {
                name: i["name"].as_str().unwrap_or_default().to_string(),
                shape: i["shape"].as_array().into_iter().flatten().filter_map(|d| d.as_u64()).map(|d| d as usize).collect(),
                dtype: i["dtype"].as_str().unwrap_or("float32").to_string(),
                high: i["high"].as_i64(),
            })
            .collect();
        let outputs = m["outputs"].as_array().into_iter().flatten().filter_map(|o| o.as_str()).map(String::from).collect();
        let pending = pending.iter().find(|(n, _)| n == name).map(|(_, needle)| needle.trim().to_string());
        out.push(Model { name: name.clone(), file, inputs, outputs, pending });
    }
    Ok(out)
}

/// Seeded inputs: xorshift, standard normal (Box–Muller) for floats.
fn make_inputs(m: &Model) -> Result<Vec<Tensor>, Failed> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = vec![];
    for s in &m.inputs {
        let n: usize = s.shape.iter().product();
        let t = match (s.dtype.as_str(), s.high) {
            ("int64", Some(high)) => {
                let v = (0..n).map(|_| ((next() * high as f64) as i64).min(high - 1)).collect();
                Tensor::from_i64(TensorType::new(s.shape.clone(), Scalar::I64), v)
            }
            ("float32", None) => {
                let v = (0..n)
                    .map(|_| {
                        let (u, v) = (next().max(1e-12), next());
                        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
                    })
                    .collect();
                Tensor::from_f64(TensorType::new(s.shape.clone(), Scalar::F32), v)
            }
            (d, _) => return Err(format!("{}: input {} has dtype {d}, which the zoo test cannot make", m.name, s.name).into()),
        };
        out.push(t);
    }
    Ok(out)
}

/// The file stem ort_run.py uses for a tensor name.
fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect()
}

/// ONNX Runtime's outputs, or `None` (with the reason printed) when there
/// is no Python with onnxruntime.
fn ort_outputs(m: &Model, inputs: &[Tensor], dir: &Path) -> Result<Option<Vec<Tensor>>, Failed> {
    let py = std::env::var_os("AOC_PYTHON").map_or_else(|| workspace().join(".venv/bin/python"), PathBuf::from);
    let ok = Command::new(&py).args(["-c", "import onnxruntime"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped the ONNX Runtime comparison: no Python with onnxruntime at {} (set AOC_PYTHON)", py.display());
        return Ok(None);
    }
    let mut cmd = Command::new(&py);
    cmd.arg(workspace().join("tests/scripts/ort_run.py")).arg(&m.file).arg(dir.join("ort"));
    for (s, t) in m.inputs.iter().zip(inputs) {
        let p = dir.join(format!("in_{}.npy", sanitize(&s.name)));
        write_npy(&p, t)?;
        cmd.arg("--input").arg(format!("{}={}", s.name, p.display()));
    }
    let run = cmd.output()?;
    if !run.status.success() {
        return Err(format!("ort_run.py failed: {}", String::from_utf8_lossy(&run.stderr)).into());
    }
    let outs = m.outputs.iter().map(|o| read_npy(&dir.join("ort").join(format!("{}.npy", sanitize(o))))).collect::<Result<_, _>>()?;
    Ok(Some(outs))
}

/// Largest difference over max(1, max|want|), and the check against the tolerance.
fn close(what: &str, want: &[Tensor], got: &[Tensor]) -> Result<f64, Failed> {
    if want.len() != got.len() {
        return Err(format!("{what}: {} outputs, expected {}", got.len(), want.len()).into());
    }
    let mut worst = 0.0f64;
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.ty.shape != g.ty.shape {
            return Err(format!("{what}: output {i} has shape {:?}, expected {:?}", g.ty.shape, w.ty.shape).into());
        }
        let (wv, gv) = (w.to_f64(), g.to_f64());
        let scale = wv.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let e = wv.iter().zip(&gv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
        // f64::max skips NaN: a NaN where ONNX Runtime has a number is an error of its own
        if wv.iter().zip(&gv).any(|(a, b)| b.is_nan() != a.is_nan()) {
            return Err(format!("{what}: output {i} has NaN where ONNX Runtime does not (or the reverse)").into());
        }
        if e.is_nan() || e > TOLERANCE {
            return Err(format!("{what}: output {i} differs by {e:.3e} (tolerance {TOLERANCE:.0e})").into());
        }
        worst = worst.max(e);
    }
    Ok(worst)
}

fn run_model(m: &Model) -> Result<(), Failed> {
    let Some(needle) = &m.pending else { return check_model(m) };
    match check_model(m) {
        Err(e) if e.message().is_some_and(|t| t.contains(needle.as_str())) => {
            println!("pending (pending.txt): fails as expected: {}", e.message().unwrap_or_default());
            Ok(())
        }
        Err(e) => Err(format!("pending on `{needle}` (pending.txt), but it fails otherwise: {}", e.message().unwrap_or_default()).into()),
        Ok(()) => Err(format!("pending on `{needle}` (pending.txt), but the model passes now: remove it from pending.txt").into()),
    }
}

fn check_model(m: &Model) -> Result<(), Failed> {
    let mut loaded = load_model(&m.file, &[])?;
    let dir = std::env::temp_dir().join(format!("aoc-zoo-{}-{}", m.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let inputs = make_inputs(m)?;
    let want = ort_outputs(m, &inputs, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let func = loaded.module.entry().ok_or("no entry function")?;
    let interp = aoc_ir::interp::run(func, inputs.clone(), loaded.weights.as_ref()).map_err(|d| d.message)?;
    let want = match want? {
        Some(w) => w,
        // no ONNX Runtime here: the compiled code against the interpreter
        None => interp.clone(),
    };
    let e = close("interpreter vs ONNX Runtime", &want, &interp)?;
    println!("interpreter: max error {e:.2e}");

    let config = aoc_compiler::opt::OptConfig { passes: Some(CPU_PIPELINE.to_string()), ..Default::default() };
    aoc_compiler::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None)?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|t| aoc_ir::bytes::encode(t.ty.elem.storage(), &t.data)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    for level in [X86Level::V4, X86Level::Baseline] {
        let out = compile(func, loaded.weights.as_ref(), level).map_err(|d| format!("{}: {}", level.target_name(), d.message))?;
        if !out.report.reference_ops.is_empty() || out.report.steps.iter().any(|(k, _)| k == "reference") {
            return Err(format!("{}: reference steps: {:?}", level.target_name(), out.report.reference_ops).into());
        }
        let artifact = match Artifact::from_bytes(&out.artifact) {
            Ok(a) => a,
            Err(e) if matches!(e.kind, ArtifactErrorKind::MissingCpuFeatures { .. }) => {
                println!("{}: compiled, not run: {e}", level.target_name());
                continue;
            }
            Err(e) => return Err(e.to_string().into()),
        };
        let session = Session::from_artifact(artifact, &SessionOptions { threads: 2 })?;
        let outs = session.run(&refs)?;
        let got = want
            .iter()
            .zip(outs)
            .map(|(w, b)| Ok(Tensor { ty: w.ty.clone(), data: aoc_ir::bytes::decode(w.ty.elem.storage(), &b)? }))
            .collect::<Result<Vec<_>, String>>()?;
        let e = close(&format!("{} runtime vs ONNX Runtime", level.target_name()), &want, &got)?;
        println!("{} ({} steps): max error {e:.2e}", level.target_name(), out.steps);
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let trials = match models() {
        Ok(ms) => ms
            .into_iter()
            .map(|m| {
                let m = Arc::new(m);
                Trial::test(format!("zoo_{}", m.name), move || run_model(&m))
            })
            .collect(),
        Err(e) => vec![Trial::test("zoo_manifest", move || Err(e.clone().into()))],
    };
    libtest_mimic::run(&args, trials).exit();
}
