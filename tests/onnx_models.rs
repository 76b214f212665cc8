//! Differential tests on real ONNX models: import, verify, run in the
//! reference interpreter, compare with ONNX Runtime; then print, re-parse,
//! verify, re-print (byte-identical) and run the parsed module too.
//!
//! Models: every `examples/*/model.onnx` (with `input.npy` and
//! `expected/<output>.npy` from ONNX Runtime), and the third-party models
//! `tests/scripts/real_models.py list` names, from `$AOC_MODELS` (default
//! `build/models`), run on seeded random inputs through
//! `tests/scripts/ort_run.py` with `$AOC_PYTHON` (default `.venv/bin/python`).
//! A case whose files or Python are absent passes with a printed reason.
//!
//! Tolerance: float outputs within 1e-4 absolute, scaled by
//! max(1, max|expected|); models with QuantizeLinear nodes within one
//! quantization step (the largest scale of any QuantizeLinear) instead.

use aoc_compiler::npy::read_npy;
use aoc_compiler::onnx::{ImportOptions, import_model, proto};
use aoc_ir::Tensor;
use libtest_mimic::{Arguments, Failed, Trial};
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The file stem ort_run.py and the examples use for a tensor name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("AOC_PYTHON")
        .map_or_else(|| workspace().join(".venv/bin/python"), PathBuf::from);
    let ok = Command::new(&p)
        .arg("-c")
        .arg("import onnxruntime")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![];
    let examples = workspace().join("examples");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&examples)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("model.onnx").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        trials.push(Trial::test(format!("example::{name}"), move || {
            run_example(&dir)
        }));
    }
    for (key, file, input, shape) in real_models() {
        trials.push(Trial::test(format!("real::{key}"), move || {
            run_real(&file, &input, &shape)
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// (key, file, input name, shape) from real_models.py, or one entry whose
/// run prints why there are none.
fn real_models() -> Vec<(String, String, String, Vec<usize>)> {
    let Some(py) = python() else {
        return vec![("all".into(), String::new(), String::new(), vec![])];
    };
    let out = Command::new(py)
        .arg(workspace().join("tests/scripts/real_models.py"))
        .arg("list")
        .output();
    let Ok(out) = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()) else {
        return vec![];
    };
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let shape = f
                .get(3)?
                .split('x')
                .map(|d| d.parse().ok())
                .collect::<Option<Vec<usize>>>()?;
            Some((f[0].to_string(), f[1].to_string(), f[2].to_string(), shape))
        })
        .collect()
}

fn run_example(dir: &Path) -> Result<(), Failed> {
    let bytes = std::fs::read(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let input = read_npy(&dir.join("input.npy"))?;
    let model = proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    let graph = model.graph.clone().unwrap_or_default();
    let inits: Vec<String> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.clone())
        .collect();
    let in_name = graph
        .input
        .iter()
        .filter_map(|i| i.name.clone())
        .find(|n| !inits.contains(n))
        .ok_or("the model has no input")?;
    let mut expected = vec![];
    for o in &graph.output {
        let name = o.name.clone().unwrap_or_default();
        expected.push(read_npy(
            &dir.join("expected")
                .join(format!("{}.npy", sanitize(&name))),
        )?);
    }
    check(&bytes, &model, vec![(in_name, input)], expected)
}

fn run_real(file: &str, input: &str, shape: &[usize]) -> Result<(), Failed> {
    let Some(py) = python() else {
        println!("skipping: no Python with onnxruntime (set AOC_PYTHON or run `make setup`)");
        return Ok(());
    };
    let models = std::env::var_os("AOC_MODELS")
        .map_or_else(|| workspace().join("build/models"), PathBuf::from);
    let path = models.join(file);
    if !path.exists() {
        println!(
            "skipping: {} is absent (run `make real-models`)",
            path.display()
        );
        return Ok(());
    }
    let out = std::env::temp_dir().join(format!(
        "aoc-onnx-models-{}-{}",
        std::process::id(),
        sanitize(file)
    ));
    let _ = std::fs::remove_dir_all(&out);
    let shape_arg = format!(
        "{input}={}",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x")
    );
    let status = Command::new(py)
        .arg(workspace().join("tests/scripts/ort_run.py"))
        .arg(&path)
        .arg(&out)
        .args(["--random-inputs", "0", "--shape", &shape_arg])
        .output()
        .map_err(|e| e.to_string())?;
    if !status.status.success() {
        return Err(format!(
            "ort_run.py failed: {}",
            String::from_utf8_lossy(&status.stderr)
        )
        .into());
    }
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let model = proto::ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    let x = read_npy(&out.join("inputs").join(format!("{}.npy", sanitize(input))))?;
    let mut expected = vec![];
    for o in model.graph.iter().flat_map(|g| &g.output) {
        expected.push(read_npy(
            &out.join(format!("{}.npy", sanitize(o.name.as_deref().unwrap_or("")))),
        )?);
    }
    let r = check(&bytes, &model, vec![(input.to_string(), x)], expected);
    let _ = std::fs::remove_dir_all(&out);
    r
}

/// The largest QuantizeLinear scale (constant initializer) in the model, if any.
fn quant_step(model: &proto::ModelProto) -> Option<f64> {
    let g = model.graph.as_ref()?;
    let mut step: Option<f64> = None;
    for n in g
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("QuantizeLinear"))
    {
        let scale = n.input.get(1)?;
        let t = g
            .initializer
            .iter()
            .find(|t| t.name.as_ref() == Some(scale))?;
        let t = aoc_compiler::onnx::tensor_from_proto_bytes(&t.encode_to_vec()).ok()?;
        let m = t.to_f64().into_iter().fold(0.0, f64::max);
        step = Some(step.map_or(m, |s| s.max(m)));
    }
    step
}

fn check(
    bytes: &[u8],
    model: &proto::ModelProto,
    inputs: Vec<(String, Tensor)>,
    expected: Vec<Tensor>,
) -> Result<(), Failed> {
    let opts = ImportOptions {
        input_shapes: inputs
            .iter()
            .map(|(n, t)| (n.clone(), t.shape().to_vec()))
            .collect(),
        ..ImportOptions::default()
    };
    let imported = import_model(bytes, &opts).map_err(|d| format!("import: {d}"))?;
    let diags = aoc_ir::verify::verify_module(&imported.module);
    if !diags.is_empty() {
        return Err(format!(
            "verify: {}",
            diags
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
        .into());
    }
    let weights = imported.weight_source();
    let func = imported.module.entry().ok_or("no function")?;
    let args: Vec<Tensor> = inputs.iter().map(|(_, t)| t.clone()).collect();
    let got = aoc_ir::interp::run(func, args.clone(), &weights).map_err(|d| format!("run: {d}"))?;
    let step = quant_step(model);
    compare(&got, &expected, step).map_err(|m| format!("interpreter vs onnxruntime: {m}"))?;

    // Round trip through the text form.
    let text = aoc_ir::print::print_module(&imported.module);
    let (parsed, diags) = aoc_ir::parse_and_verify(&text);
    if let Some(d) = diags.iter().find(|d| d.is_error()) {
        return Err(
            format!("round trip: the printed module does not parse and verify: {d}").into(),
        );
    }
    let again = aoc_ir::print::print_module(&parsed);
    if again != text {
        return Err("round trip: print(parse(print(m))) differs from print(m)".into());
    }
    let func = parsed.entry().ok_or("round trip: no function")?;
    let got2 =
        aoc_ir::interp::run(func, args, &weights).map_err(|d| format!("round trip: run: {d}"))?;
    if got2 != got {
        return Err("round trip: the parsed module computes different outputs".into());
    }
    Ok(())
}

fn compare(got: &[Tensor], want: &[Tensor], step: Option<f64>) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape() != w.shape() {
            return Err(format!(
                "output {i}: shape {:?}, expected {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let (gv, wv) = (g.to_f64(), w.to_f64());
        let peak = wv.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let tol = match step {
            Some(s) => s * 1.0001,
            None => 1e-4 * peak.max(1.0),
        };
        let (mut worst, mut at) = (0.0f64, 0);
        for (j, (a, b)) in gv.iter().zip(&wv).enumerate() {
            let d = (a - b).abs();
            if d > worst || d.is_nan() {
                worst = d;
                at = j;
            }
        }
        println!("output {i}: max abs error {worst:.3e} (tolerance {tol:.3e})");
        // A NaN error (or tolerance) fails, as no comparison can pass it.
        if worst.is_nan() || tol.is_nan() || worst > tol {
            return Err(format!(
                "output {i}: element {at} is {}, expected {} (error {worst:.3e} > {tol:.3e})",
                gv[at], wv[at]
            ));
        }
    }
    Ok(())
}
