//! Generated ONNX models against ONNX Runtime: the forms of opsets 7 to 10
//! (attribute Slice/Pad/Clip, Upsample, Resize-10, BatchNormalization's
//! `spatial`, Dropout's ratio), models whose inputs and outputs have names
//! that are not identifiers, the recurrent ops, and the activations and
//! normalizations the importer composes from other ops.
//!
//! `tests/scripts/gen_onnx_cases.py` writes each case (model, inputs, ONNX
//! Runtime's outputs) with `$AOC_PYTHON` (default `.venv/bin/python`) into
//! a scratch folder; without a Python that has onnx and onnxruntime the
//! test passes with a printed reason. Each case is imported, run in the
//! reference interpreter (tolerance 1e-4 of max(1, max|expected|)), then
//! optimized with the CPU pipeline, compiled for baseline x86-64 with no
//! reference fallback, and run by the runtime (tolerance 1e-3; integer
//! and bool outputs exactly).

use aoc_backend_x86::compile::compile;
use aoc_backend_x86::pointwise::X86Level;
use aoc_compiler::cpu::CPU_PIPELINE;
use aoc_compiler::driver::load_model;
use aoc_compiler::npy::read_npy;
use aoc_ir::Tensor;
use aoc_runtime::artifact::Artifact;
use aoc_runtime::exec::{Session, SessionOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// What the generator gave.
enum Cases {
    Dir(PathBuf),
    /// No Python with onnx and ONNX Runtime: the reason.
    Skip(String),
    /// The generator itself failed: a test failure, not a skip.
    Failed(String),
}

/// Runs the generator once.
fn generate() -> Cases {
    let py = std::env::var_os("AOC_PYTHON").map_or_else(|| workspace().join(".venv/bin/python"), PathBuf::from);
    let ok = Command::new(&py)
        .args(["-c", "import onnx, onnxruntime"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return Cases::Skip(format!("no Python with onnx and onnxruntime at {} (set AOC_PYTHON)", py.display()));
    }
    let out = std::env::temp_dir().join(format!("aoc-onnx-cases-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    match Command::new(&py).arg(workspace().join("tests/scripts/gen_onnx_cases.py")).arg(&out).output() {
        Ok(run) if run.status.success() => Cases::Dir(out),
        Ok(run) => Cases::Failed(String::from_utf8_lossy(&run.stderr).into_owned()),
        Err(e) => Cases::Failed(e.to_string()),
    }
}

fn npys(dir: &Path) -> Result<Vec<Tensor>, Failed> {
    let mut v = vec![];
    for i in 0.. {
        let p = dir.join(format!("{i}.npy"));
        if !p.exists() {
            break;
        }
        v.push(read_npy(&p)?);
    }
    Ok(v)
}

fn close(what: &str, want: &[Tensor], got: &[Tensor], tol: f64) -> Result<(), Failed> {
    if want.len() != got.len() {
        return Err(format!("{what}: {} outputs, expected {}", got.len(), want.len()).into());
    }
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.ty.shape != g.ty.shape {
            return Err(format!("{what}: output {i} has shape {:?}, expected {:?}", g.ty.shape, w.ty.shape).into());
        }
        // Integers and bools must match exactly (an f64 view would hide
        // an error in the low bits of a large i64).
        if !w.ty.elem.storage().is_float() {
            if let Some(j) = (0..w.len()).find(|&j| w.get_i64(j) != g.get_i64(j)) {
                return Err(format!("{what}: output {i} element {j} is {}, expected {}", g.get_i64(j), w.get_i64(j)).into());
            }
            continue;
        }
        let (wv, gv) = (w.to_f64(), g.to_f64());
        let scale = wv.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let e = wv.iter().zip(&gv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
        if e.is_nan() || e > tol {
            return Err(format!("{what}: output {i} differs by {e:.3e} (tolerance {tol:.0e})").into());
        }
    }
    Ok(())
}

fn run_case(dir: &Path) -> Result<(), Failed> {
    let inputs = npys(&dir.join("inputs"))?;
    let want = npys(&dir.join("outputs"))?;
    let mut loaded = load_model(&dir.join("model.onnx"), &[])?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let got = aoc_ir::interp::run(func, inputs.clone(), loaded.weights.as_ref()).map_err(|d| d.message)?;
    close("interpreter vs ONNX Runtime", &want, &got, 1e-4)?;

    let config = aoc_compiler::opt::OptConfig { passes: Some(CPU_PIPELINE.to_string()), ..Default::default() };
    aoc_compiler::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None)?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let out = compile(func, loaded.weights.as_ref(), X86Level::Baseline).map_err(|d| d.message)?;
    let artifact = Artifact::from_bytes(&out.artifact).map_err(|e| e.to_string())?;
    let session = Session::from_artifact(artifact, &SessionOptions { threads: 2 })?;
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|t| aoc_ir::bytes::encode(t.ty.elem.storage(), &t.data)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let outs = session.run(&refs)?;
    let got = want
        .iter()
        .zip(outs)
        .map(|(w, b)| Ok(Tensor { ty: w.ty.clone(), data: aoc_ir::bytes::decode(w.ty.elem.storage(), &b)? }))
        .collect::<Result<Vec<_>, String>>()?;
    close("x86-64 runtime vs ONNX Runtime", &want, &got, 1e-3)
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![];
    match generate() {
        Cases::Skip(reason) => trials.push(Trial::test("generated_cases", move || {
            println!("skipping: {reason}");
            Ok(())
        })),
        Cases::Failed(msg) => {
            trials.push(Trial::test("generator", move || Err(format!("gen_onnx_cases.py failed: {msg}").into())));
        }
        Cases::Dir(dir) => {
            let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                .unwrap_or_default();
            cases.sort();
            for case in cases {
                let name = case.file_name().unwrap_or_default().to_string_lossy().into_owned();
                trials.push(Trial::test(name, move || run_case(&case)));
            }
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
