//! `aoc sparsify` and `aoc export --format onnx` end to end: the examples
//! (a ResNet block with batch-norms and a residual add, a MobileNet block
//! with depthwise convolutions, a transformer encoder layer) pruned to 2:4,
//! stored compressed, run by the interpreter, compiled for x86-64 and the
//! host and run to the interpreter's outputs, measured against the dense
//! model with --calib / --min-sqnr, exported to ONNX and run by ONNX
//! Runtime to the interpreter's outputs; and bad input (each a clear
//! message, exit 1, no output file).

use aoc_compiler::{npy, weights};
use aoc_ir::{Scalar, Tensor, TensorType};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{Rng, aoc, ok, user_error};

fn dir(name: &str) -> PathBuf {
    common::scratch("sparsity", name)
}

/// `n` batches of normal data of `shape` in `d` (b000.npy, ...).
fn batches(d: &Path, shape: &[usize], n: usize, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(d).unwrap();
    let mut rng = Rng(seed);
    let len: usize = shape.iter().product();
    (0..n)
        .map(|i| {
            let p = d.join(format!("b{i:03}.npy"));
            let vals = (0..len).map(|_| rng.normal() as f32 as f64).collect();
            let t = Tensor::from_f64(TensorType::new(shape.to_vec(), Scalar::F32), vals);
            std::fs::write(&p, npy::npy_bytes(&t).unwrap().0).unwrap();
            p
        })
        .collect()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).join("model.air")
}

fn example_input(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).join("input.npy")
}

/// The single `.npy` output `aoc run` wrote into `d`.
fn only_output(d: &Path) -> Vec<f64> {
    let files: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "npy")).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    npy::read_npy(&files[0]).unwrap().to_f64()
}

fn sqnr(reference: &[f64], x: &[f64]) -> f64 {
    let s: f64 = reference.iter().map(|a| a * a).sum();
    let n: f64 = reference.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum();
    if n == 0.0 { f64::INFINITY } else { 10.0 * (s / n).log10() }
}

fn max_rel_err(reference: &[f64], x: &[f64]) -> f64 {
    let scale = reference.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-6);
    reference.iter().zip(x).map(|(a, b)| (a - b).abs() / scale).fold(0.0, f64::max)
}

fn run_outputs(model: &Path, input: &Path, out: &Path) -> Vec<f64> {
    ok(&aoc(&[&"run", &model, &"--input", &input, &"--output-dir", &out]));
    only_output(out)
}

/// Checks every sparse weight in `st` is stored compressed: values of half
/// the row length, 2-bit indices, and that the decompressed tensor has the
/// pattern.
fn check_compressed(air: &Path) -> usize {
    let text = std::fs::read_to_string(air).unwrap();
    let st = weights::read_safetensors(&air.with_extension("safetensors")).unwrap();
    let names: Vec<&str> = st.iter().map(|(n, _)| n.as_str()).collect();
    let mut sparse = 0;
    for line in text.lines().filter(|l| l.contains("#sparse.nm<2, 4>") && l.contains("= const @")) {
        let key = line.split("[\"").nth(1).unwrap().split('"').next().unwrap();
        let ty = line.rsplit(": ").next().unwrap();
        let dims: Vec<usize> = ty.trim_start_matches("tensor<").split('x').map_while(|d| d.parse().ok()).collect();
        let (rows, len) = (dims[0], dims[1..].iter().product::<usize>());
        let values = &st.iter().find(|(n, _)| n == key).unwrap_or_else(|| panic!("{key} not in {names:?}")).1;
        assert_eq!(values.ty.shape, vec![rows, len / 2], "{key}");
        let meta = &st.iter().find(|(n, _)| *n == format!("{key}.nm_indices")).unwrap().1;
        assert_eq!(meta.ty.shape, vec![rows * len / 2 * 2 / 8], "{key}: 2 bits per kept value");
        sparse += 1;
    }
    sparse
}

#[test]
fn a_resnet_block_sparsifies_compiles_and_runs_to_the_interpreter() {
    let d = dir("resnet_block");
    let model = example("resnet_block");
    let input = example_input("resnet_block");
    let out = d.join("sp.air");
    let rep = d.join("sp.json");
    let e = ok(&aoc(&[&"sparsify", &model, &"--pattern", &"2:4", &"--report", &rep, &"-o", &out]));
    assert!(e.contains("layers pruned to 2:4"), "{e}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let layers = r["layers"].as_array().unwrap();
    // The stem's 3-channel 3x3 convolution (27 weights per channel) is
    // skipped, with why; the others are pruned.
    let skipped: Vec<&serde_json::Value> = layers.iter().filter(|l| l["pruned"] == false).collect();
    assert!(skipped.iter().any(|l| l["why"].as_str().unwrap().contains("not a multiple of 4")), "{r}");
    let pruned = r["pruned"].as_u64().unwrap() as usize;
    assert!(pruned >= 5, "{r}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.matches("sparse.conv2d").count() + text.matches("sparse.matmul").count(), pruned, "{text}");
    assert!(text.contains("core.batch_norm"), "batch-norms are kept for fine-tuning");
    assert_eq!(check_compressed(&out), pruned);

    // The interpreter runs it; pruning moves the output, not to nonsense.
    let dense = run_outputs(&model, &input, &d.join("dense"));
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let s = sqnr(&dense, &interp);
    assert!(s.is_finite() && s > 0.0, "SQNR of the 2:4 model against dense: {s} dB");
    for target in ["x86-64", "host"] {
        let art = d.join(format!("sp-{target}.aoc"));
        ok(&aoc(&[&"compile", &out, &"--target", &target, &"-o", &art]));
        let compiled = run_outputs(&art, &input, &d.join(format!("c-{target}")));
        let err = max_rel_err(&interp, &compiled);
        assert!(err < 1e-4, "{target}: compiled vs interpreter {err}");
        let explain = String::from_utf8_lossy(&aoc(&[&"explain", &art]).stdout).into_owned();
        assert!(explain.contains("sparse layers run dense"), "{explain}");
        assert!(!explain.contains("reference"), "{explain}");
    }
    // x86-64-v4 compiles (running it needs AVX-512).
    ok(&aoc(&[&"compile", &out, &"--target", &"x86-64-v4", &"-o", &d.join("sp-v4.aoc")]));
}

#[test]
fn an_encoder_layers_products_become_sparse_matmuls() {
    let d = dir("encoder_layer");
    let model = example("encoder_layer");
    let input = example_input("encoder_layer");
    let out = d.join("sp.air");
    ok(&aoc(&[&"sparsify", &model, &"-o", &out]));
    let text = std::fs::read_to_string(&out).unwrap();
    // Every product with a constant weight (the projections, the FFN and
    // the gemm) is sparse; the attention products of two activations not.
    assert!(text.matches("sparse.matmul").count() >= 4, "{text}");
    assert!(text.contains("core.matmul"), "{text}");
    assert!(check_compressed(&out) >= 4);
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let art = d.join("sp.aoc");
    ok(&aoc(&[&"compile", &out, &"--target", &"host", &"-o", &art]));
    let compiled = run_outputs(&art, &input, &d.join("c"));
    let err = max_rel_err(&interp, &compiled);
    assert!(err < 1e-4, "compiled vs interpreter {err}");
}

#[test]
fn min_sqnr_prunes_the_most_tolerant_layers_while_the_model_holds() {
    let d = dir("min_sqnr");
    let model = example("resnet_block");
    batches(&d.join("calib"), &[1, 3, 32, 32], 4, 7);
    // Without a floor every candidate is pruned and measured.
    let all = d.join("all.json");
    let e = ok(&aoc(&[&"sparsify", &model, &"--calib", &d.join("calib"), &"--report", &all, &"-o", &d.join("all.air")]));
    assert!(e.contains("SQNR alone"), "{e}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&all).unwrap()).unwrap();
    let full = r["sqnr_db"].as_f64().unwrap();
    let alone: Vec<f64> = r["layers"].as_array().unwrap().iter().filter_map(|l| l["sqnr_alone_db"].as_f64()).collect();
    assert!(alone.len() >= 5, "{r}");
    // Each layer alone costs less than all of them together.
    assert!(alone.iter().all(|&a| a > full), "{alone:?} vs {full}");
    // A floor above what pruning everything gives prunes fewer layers and
    // keeps the model at or above it.
    let floor = (full + alone.iter().cloned().fold(f64::INFINITY, f64::min)) / 2.0;
    let some = d.join("some.json");
    let floor_s = format!("{floor:.3}");
    ok(&aoc(&[&"sparsify", &model, &"--calib", &d.join("calib"), &"--min-sqnr", &floor_s, &"--report", &some, &"-o", &d.join("some.air")]));
    let r2: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&some).unwrap()).unwrap();
    let got = r2["sqnr_db"].as_f64().unwrap();
    assert!(got >= floor - 1e-3, "{got} < {floor}");
    let (n_all, n_some) = (r["pruned"].as_u64().unwrap(), r2["pruned"].as_u64().unwrap());
    assert!(n_some >= 1 && n_some < n_all, "{n_some} of {n_all}");
    assert!(r2["layers"].as_array().unwrap().iter().any(|l| l["why"].as_str().is_some_and(|w| w.contains("--min-sqnr"))), "{r2}");

    // Quantizing the sparsified model (prune first, then quantize): the
    // sparse layers stay in float and the table says why; the rest is int8.
    let q = d.join("q.air");
    let qrep = d.join("q.json");
    let e = ok(&aoc(&[&"quantize", &d.join("all.air"), &"--calib", &d.join("calib"), &"--report", &qrep, &"-o", &q]));
    assert!(e.contains("a 2:4 sparse layer: there is no int8 sparse kernel yet"), "{e}");
    let qr: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&qrep).unwrap()).unwrap();
    assert!(qr["totals"]["quantized"].as_u64().unwrap() >= 1, "{qr}");
    let text = std::fs::read_to_string(&q).unwrap();
    assert!(text.contains("sparse.conv2d") && text.contains("quant.quantize"), "{text}");
}

#[test]
fn layers_select_by_glob_and_bad_input_is_refused() {
    let d = dir("bad");
    let model = example("resnet_block");
    let out = d.join("o.air");
    for (pattern, frag) in [("3", "--pattern takes n:m"), ("4:2", "0 < n < m"), ("2:x", "found `2:x`"), ("0:4", "n:m")] {
        user_error(&aoc(&[&"sparsify", &model, &"--pattern", &pattern, &"-o", &out]), &[frag]);
    }
    user_error(&aoc(&[&"sparsify", &model, &"--layers", &"nothing*", &"-o", &out]), &["--layers nothing* matches no layer", "the layers are named"]);
    user_error(&aoc(&[&"sparsify", &model, &"--min-sqnr", &"30", &"-o", &out]), &["--min-sqnr needs --calib"]);
    assert!(!out.exists(), "nothing is written on error");
    // One layer by name: only it is sparse.
    let text = std::fs::read_to_string(&model).unwrap();
    let name = text.lines().find(|l| l.contains("core.conv2d") && l.contains("layer")).and_then(|l| l.split("loc(\"").nth(1)).map(|s| s.split('"').next().unwrap().to_string()).unwrap();
    let e = ok(&aoc(&[&"sparsify", &model, &"--layers", &name, &"-o", &out]));
    assert!(e.contains("not selected by --layers"), "{e}");
    let sp = std::fs::read_to_string(&out).unwrap();
    assert_eq!(sp.matches("sparse.conv2d").count(), 1, "{sp}");
}

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("AOC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    let ok = Command::new(&p).args(["-c", "import onnxruntime"]).output().is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

/// Exports `air` to ONNX, runs it in ONNX Runtime on `input` (bound to the
/// model's only input `name`) and compares with the interpreter.
fn export_matches_interpreter(d: &Path, air: &Path, name: &str, input: &Path) {
    let onnx = d.join(format!("{}.onnx", air.file_stem().unwrap().to_string_lossy()));
    ok(&aoc(&[&"export", &air, &"--format", &"onnx", &"-o", &onnx]));
    let interp = run_outputs(air, input, &d.join("export-interp"));
    let Some(py) = python() else {
        println!("skipping the ONNX Runtime run: no Python with onnxruntime (set AOC_PYTHON)");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scripts/ort_run.py");
    let ort_dir = d.join("export-ort");
    let o = Command::new(py).arg(script).arg(&onnx).arg(&ort_dir).arg("--input").arg(format!("{name}={}", input.display())).output().unwrap();
    assert!(o.status.success(), "ort_run.py failed:\n{}", String::from_utf8_lossy(&o.stderr));
    let ort = only_output(&ort_dir);
    let err = max_rel_err(&interp, &ort);
    assert!(err < 1e-4, "ONNX Runtime vs interpreter: {err}");
}

#[test]
fn sparsified_models_export_to_onnx_that_onnx_runtime_runs_to_the_interpreter() {
    for (ex, input_name) in [("resnet_block", "input"), ("mobilenet_block", "input"), ("encoder_layer", "src")] {
        let d = dir(&format!("export_{ex}"));
        let model = example(ex);
        let text = std::fs::read_to_string(&model).unwrap();
        let input_name = text.split("func @main(%").nth(1).map(|s| s.split(':').next().unwrap().to_string()).unwrap_or(input_name.to_string());
        let out = d.join("sp.air");
        ok(&aoc(&[&"sparsify", &model, &"-o", &out]));
        export_matches_interpreter(&d, &out, &input_name, &example_input(ex));
        // The dense model too.
        let dd = d.join("dense");
        std::fs::create_dir_all(&dd).unwrap();
        export_matches_interpreter(&dd, &model, &input_name, &example_input(ex));
    }
}

/// Resize (each mode, sizes or scales), pad (each mode, crops), grid
/// sampling, the tanh GELU and a boolean `where` (which ONNX Runtime's
/// Where lacks) export, and ONNX Runtime runs each to the interpreter's
/// outputs.
#[test]
fn resize_pad_grid_sample_gelu_and_where_export() {
    let x = "%x: tensor<1x2x4x6xf32>";
    let grid = "%t = core.tanh %x : tensor<1x2x4x6xf32>\n  %c = const dense<1.3> : tensor<f32>\n  %s = core.mul %t, %c : tensor<1x2x4x6xf32>\n  %g = core.reshape %s {shape = [1, 4, 6, 2]} : tensor<1x4x6x2xf32>\n  ";
    let cases: Vec<(&str, String, &str)> = vec![
        ("resize_linear", String::new(), "core.resize %x {sizes = [1, 2, 7, 9], mode = \"linear\"} : tensor<1x2x7x9xf32>"),
        ("resize_nearest_scales", String::new(), "core.resize %x {sizes = [1, 2, 8, 12], scales = [1.0, 1.0, 2.0, 2.0], mode = \"nearest\", coordinate_transformation_mode = \"asymmetric\", nearest_mode = \"floor\"} : tensor<1x2x8x12xf32>"),
        ("resize_cubic", String::new(), "core.resize %x {sizes = [1, 2, 5, 10], mode = \"cubic\", coordinate_transformation_mode = \"align_corners\"} : tensor<1x2x5x10xf32>"),
        ("pad_constant", String::new(), "core.pad %x {pads = [0, 0, 1, 2, 0, 0, 2, 1], value = 1.5} : tensor<1x2x7x9xf32>"),
        ("pad_reflect", String::new(), "core.pad %x {pads = [0, 0, 2, 1, 0, 0, 1, 3], mode = \"reflect\"} : tensor<1x2x7x10xf32>"),
        ("pad_edge_crop", String::new(), "core.pad %x {pads = [0, 0, -1, 2, 0, 0, 1, -2], mode = \"edge\"} : tensor<1x2x4x6xf32>"),
        ("grid_linear", grid.to_string(), "core.grid_sample %x, %g : tensor<1x2x4x6xf32>"),
        ("grid_nearest_border", grid.to_string(), "core.grid_sample %x, %g {mode = \"nearest\", padding_mode = \"border\"} : tensor<1x2x4x6xf32>"),
        ("grid_cubic_reflection", grid.to_string(), "core.grid_sample %x, %g {mode = \"cubic\", padding_mode = \"reflection\", align_corners = true} : tensor<1x2x4x6xf32>"),
        ("gelu_tanh", String::new(), "core.gelu %x {approximate = \"tanh\"} : tensor<1x2x4x6xf32>"),
        (
            "where_bool",
            "%z = const dense<0.0> : tensor<f32>\n  %h = const dense<0.5> : tensor<f32>\n  %c = core.greater %x, %z : tensor<1x2x4x6xi1>\n  %d = core.less %x, %h : tensor<1x2x4x6xi1>\n  %w = core.where %c, %d, %c : tensor<1x2x4x6xi1>\n  ".to_string(),
            "core.cast %w {to = f32} : tensor<1x2x4x6xf32>",
        ),
    ];
    let d = dir("export_ops");
    let input = batches(&d.join("in"), &[1, 2, 4, 6], 1, 5).remove(0);
    for (name, pre, op) in cases {
        let ty = op.rsplit(" : ").next().unwrap();
        let m = d.join(format!("{name}.air"));
        std::fs::write(&m, format!("func @main({x}) -> {ty} {{\n  {pre}%y = {op}\n  return %y : {ty}\n}}\n")).unwrap();
        let dd = d.join(name);
        std::fs::create_dir_all(&dd).unwrap();
        export_matches_interpreter(&dd, &m, "x", &input);
    }
}

#[test]
fn export_refuses_what_onnx_cannot_say() {
    let d = dir("export_bad");
    let m = d.join("m.air");
    std::fs::write(&m, "func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x10x10xf32> {\n  %y = core.pad %x {pads = [0, 0, 1, 1, 0, 0, 1, 1], mode = \"wrap\"} : tensor<1x4x10x10xf32>\n  return %y : tensor<1x4x10x10xf32>\n}\n").unwrap();
    let out = d.join("m.onnx");
    user_error(&aoc(&[&"export", &m, &"--format", &"onnx", &"-o", &out]), &["core.pad", "no ONNX form", "wrap padding"]);
    // Scales that ONNX would turn into another size.
    std::fs::write(&m, "func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x12x12xf32> {\n  %y = core.resize %x {sizes = [1, 4, 12, 12], scales = [1.0, 1.0, 1.4, 1.4]} : tensor<1x4x12x12xf32>\n  return %y : tensor<1x4x12x12xf32>\n}\n").unwrap();
    user_error(&aoc(&[&"export", &m, &"--format", &"onnx", &"-o", &out]), &["core.resize", "floor(input × scale)"]);
    assert!(!out.exists());
    user_error(&aoc(&[&"export", &m, &"--format", &"tflite", &"-o", &out]), &["--format must be mlir or onnx"]);
}

/// The weight shape of the convolution at `loc` in a `.air` text.
fn conv_weight_shape(text: &str, loc: &str) -> Vec<usize> {
    let line = text.lines().find(|l| l.contains("conv2d") && l.contains(&format!("loc(\"{loc}\")"))).unwrap_or_else(|| panic!("no conv at {loc}"));
    let w = line.split(", ").nth(1).unwrap().split_whitespace().next().unwrap().trim_end_matches(',');
    let decl = text.lines().find(|l| l.trim_start().starts_with(&format!("{w} = const"))).unwrap_or_else(|| panic!("no const {w}"));
    let ty = decl.rsplit(": tensor<").next().unwrap();
    ty.split('x').map_while(|d| d.parse().ok()).collect()
}

#[test]
fn pruning_a_resnet_block_removes_channels_across_the_residual_group() {
    let d = dir("prune_resnet");
    let model = example("resnet_block");
    let input = example_input("resnet_block");
    batches(&d.join("calib"), &[1, 3, 32, 32], 3, 11);
    let out = d.join("p.air");
    let rep = d.join("p.json");
    let e = ok(&aoc(&[&"prune", &model, &"--channels", &"0.3", &"--calib", &d.join("calib"), &"--report", &rep, &"-o", &out]));
    assert!(e.contains("parameters") && e.contains("FLOPs") && e.contains("needs fine-tuning"), "{e}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let (pb, pa) = (r["params_before"].as_f64().unwrap(), r["params_after"].as_f64().unwrap());
    let (fb, fa) = (r["flops_before"].as_f64().unwrap(), r["flops_after"].as_f64().unwrap());
    assert!(pa < 0.7 * pb && fa < 0.7 * fb, "{r}");
    let sq = r["sqnr_db"].as_f64().expect("an SQNR with --calib");
    assert!(sq.is_finite(), "{r}");
    // 32 channels keep 22, 64 keep 45; the residual group (stem, layer1's
    // second conv) loses the same channels, so layer2's first conv reads 22.
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(conv_weight_shape(&text, "/stem/stem.0/Conv")[0], 22);
    assert_eq!(conv_weight_shape(&text, "/layer1/conv1/Conv")[..2], [22, 22]);
    assert_eq!(conv_weight_shape(&text, "/layer1/conv2/Conv")[..2], [22, 22]);
    assert_eq!(conv_weight_shape(&text, "/layer2/conv1/Conv")[..2], [45, 22]);
    assert_eq!(conv_weight_shape(&text, "/layer2/downsample/downsample.0/Conv")[..2], [45, 22]);
    assert!(text.contains("tensor<10x45xf32>") || text.contains("tensor<45x10xf32>"), "the classifier reads 45 features:\n{text}");
    // Compiled, it runs to the interpreter's outputs; the SQNR the report
    // gives is the pruned model's against the unpruned one.
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let art = d.join("p.aoc");
    ok(&aoc(&[&"compile", &out, &"--target", &"x86-64", &"-o", &art]));
    let compiled = run_outputs(&art, &input, &d.join("c"));
    assert!(max_rel_err(&interp, &compiled) < 1e-4);
    let dense = run_outputs(&model, &input, &d.join("dense"));
    assert!(sqnr(&dense, &interp).is_finite());
    export_matches_interpreter(&d, &out, "input", &input);
}

#[test]
fn pruning_a_mobilenet_block_follows_depthwise_convolutions_and_gates() {
    let d = dir("prune_mobilenet");
    let model = example("mobilenet_block");
    let input = example_input("mobilenet_block");
    let out = d.join("p.air");
    let rep = d.join("p.json");
    ok(&aoc(&[&"prune", &model, &"--channels", &"0.5", &"--report", &rep, &"-o", &out]));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let spaces = r["spaces"].as_array().unwrap();
    // The last block's channels reach the output: left alone, with why.
    assert!(spaces.iter().any(|s| s["why"].as_str().is_some_and(|w| w.contains("model output")) && s["kept"] == s["channels"]), "{r}");
    assert!(spaces.iter().filter(|s| s["why"].is_null()).all(|s| s["kept"].as_u64().unwrap() * 2 == s["channels"].as_u64().unwrap()), "{r}");
    // Depthwise convolutions lose the channels of the expansion before them.
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("groups = 36") && text.contains("groups = 44"), "{text}");
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let art = d.join("p.aoc");
    ok(&aoc(&[&"compile", &out, &"--target", &"host", &"-o", &art]));
    assert!(max_rel_err(&interp, &run_outputs(&art, &input, &d.join("c"))) < 1e-4);
    export_matches_interpreter(&d, &out, "input", &input);
}

/// A transformer's feed-forward hidden units are a channel space (matmul,
/// bias, GELU, matmul): pruned; the attention projections (reshaped into
/// heads) and the residual stream are left alone, and say why.
#[test]
fn pruning_an_encoder_layer_narrows_its_feed_forward() {
    let d = dir("prune_encoder");
    let model = example("encoder_layer");
    let input = example_input("encoder_layer");
    let out = d.join("p.air");
    let rep = d.join("p.json");
    ok(&aoc(&[&"prune", &model, &"--channels", &"0.25", &"--report", &rep, &"-o", &out]));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let spaces = r["spaces"].as_array().unwrap();
    let space = |p: &str| spaces.iter().find(|s| s["producers"].as_array().unwrap().iter().any(|x| x == p)).unwrap_or_else(|| panic!("{p}: {r}"));
    assert_eq!((space("/linear1/MatMul")["channels"].as_u64(), space("/linear1/MatMul")["kept"].as_u64()), (Some(128), Some(96)), "{r}");
    assert!(space("/self_attn/MatMul")["why"].as_str().unwrap().contains("reshape"), "{r}");
    assert!(space("/linear2/MatMul")["why"].as_str().unwrap().contains("core.add"), "{r}");
    assert!(r["params_after"].as_u64() < r["params_before"].as_u64(), "{r}");
    // linear1 writes 96 features and linear2 reads them.
    let text = std::fs::read_to_string(&out).unwrap();
    let line = |loc: &str| text.lines().find(|l| l.contains("core.matmul") && l.contains(&format!("loc(\"{loc}\")"))).unwrap_or_else(|| panic!("{loc}")).to_string();
    assert!(line("/linear1/MatMul").contains("tensor<1x16x96xf32>"), "{text}");
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let art = d.join("p.aoc");
    ok(&aoc(&[&"compile", &out, &"--target", &"host", &"-o", &art]));
    assert!(max_rel_err(&interp, &run_outputs(&art, &input, &d.join("c"))) < 1e-4);
    export_matches_interpreter(&d, &out, "src", &input);
}

/// A weight two layers share (ALBERT's) is not sliced: its space is left
/// alone and the parameters do not grow.
#[test]
fn pruning_leaves_shared_weights_alone() {
    let d = dir("prune_shared");
    let m = d.join("m.air");
    let w: Vec<String> = (0..4).map(|i| format!("[{}]", (0..8).map(|j| format!("{}.0", (i * 8 + j) % 5)).collect::<Vec<_>>().join(", "))).collect();
    let v: Vec<String> = (0..8).map(|i| format!("[{}]", (0..4).map(|j| format!("{}.0", (i + j) % 3)).collect::<Vec<_>>().join(", "))).collect();
    std::fs::write(
        &m,
        format!(
            "func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {{\n\
               %w = const dense<[{}]> : tensor<4x8xf32>\n\
               %v = const dense<[{}]> : tensor<8x4xf32>\n\
               %h1 = core.matmul %x, %w : tensor<2x8xf32> loc(\"/l1/up\")\n\
               %a1 = core.relu %h1 : tensor<2x8xf32>\n\
               %y1 = core.matmul %a1, %v : tensor<2x4xf32> loc(\"/l1/down\")\n\
               %h2 = core.matmul %y1, %w : tensor<2x8xf32> loc(\"/l2/up\")\n\
               %a2 = core.relu %h2 : tensor<2x8xf32>\n\
               %y2 = core.matmul %a2, %v : tensor<2x4xf32> loc(\"/l2/down\")\n\
               return %y2 : tensor<2x4xf32>\n\
             }}\n",
            w.join(", "),
            v.join(", ")
        ),
    )
    .unwrap();
    let rep = d.join("r.json");
    ok(&aoc(&[&"prune", &m, &"--channels", &"0.5", &"--report", &rep, &"-o", &d.join("p.air")]));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["params_after"], r["params_before"], "{r}");
    let spaces = r["spaces"].as_array().unwrap();
    assert!(spaces.iter().filter(|s| s["channels"] == 8).all(|s| s["why"].as_str().is_some_and(|w| w.contains("shares its weights"))), "{r}");
}

#[test]
fn pruning_an_onnx_model_and_bad_input() {
    let d = dir("prune_bad");
    let onnx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.onnx");
    let out = d.join("p.air");
    ok(&aoc(&[&"prune", &onnx, &"--channels", &"0.25", &"--layers", &"/layer2/*", &"-o", &out]));
    let text = std::fs::read_to_string(&out).unwrap();
    // Only layer2's groups are pruned: 64 keep 48; layer1 keeps 32.
    assert_eq!(conv_weight_shape(&text, "/layer2/conv1/Conv")[..2], [48, 32]);
    assert_eq!(conv_weight_shape(&text, "/layer1/conv1/Conv")[..2], [32, 32]);
    let out2 = d.join("q.air");
    for ratio in ["0", "1", "1.5", "-0.2", "nan"] {
        let flag = format!("--channels={ratio}");
        user_error(&aoc(&[&"prune", &onnx, &flag, &"-o", &out2]), &["--channels takes a ratio in (0, 1)"]);
    }
    user_error(&aoc(&[&"prune", &onnx, &"--channels", &"0.3", &"--layers", &"nope", &"-o", &out2]), &["--layers nope matches no prunable layer"]);
    assert!(!out2.exists());
}

/// Q/DQ models export as QuantizeLinear/DequantizeLinear around float ops,
/// quantized weights as integer initializers, and ONNX Runtime runs them
/// to the interpreter's outputs.
#[test]
fn quantized_models_export_as_qdq() {
    use aoc_compiler::onnx::proto::{ModelProto, data_type};
    use prost::Message;
    for (ex, input) in [("qdq_cnn", "input"), ("qdq_encoder", "src")] {
        let d = dir(&format!("export_{ex}"));
        let model = example(ex);
        let text = std::fs::read_to_string(&model).unwrap();
        let input = text.split("func @main(%").nth(1).map(|s| s.split(':').next().unwrap().to_string()).unwrap_or(input.to_string());
        export_matches_interpreter(&d, &model, &input, &example_input(ex));
        let bytes = std::fs::read(d.join("model.onnx")).unwrap();
        let m = ModelProto::decode(bytes.as_slice()).unwrap();
        assert_eq!(m.opset_import[0].version, Some(17));
        let g = m.graph.unwrap();
        let count = |t: &str| g.node.iter().filter(|n| n.op_type.as_deref() == Some(t)).count();
        assert!(count("DequantizeLinear") >= 4 && count("QuantizeLinear") >= 2, "{ex}");
        assert!(g.initializer.iter().any(|t| t.data_type == Some(data_type::INT8) && t.dims.len() >= 2), "{ex}: int8 weights");
        // Every initializer is read by a node.
        for t in &g.initializer {
            let name = t.name.as_deref().unwrap();
            assert!(g.node.iter().any(|n| n.input.iter().any(|i| i == name)), "{ex}: unused initializer {name}");
        }
    }
}

/// An ONNX model built with onnx.helper: a stem convolution with BN and
/// relu, an inverted-residual block (1×1 expansion, depthwise 3×3, 1×1
/// projection, each with BN) added to the stem, a global pool, a flatten
/// and a classifier gemm. Pruning half the channels removes them across
/// the residual group (stem and projection alike) and inside the block
/// (expansion, depthwise), and the classifier reads the stem's count;
/// the exported model runs in ONNX Runtime to the interpreter's outputs.
const HELPER_MODEL: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(5)
inits = []
def t(name, *shape, scale=0.3):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name
def bn(name, c):
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), name + ".g"))
    inits.append(numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), name + ".b"))
    inits.append(numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), name + ".m"))
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), name + ".v"))
    return [name + ".g", name + ".b", name + ".m", name + ".v"]
N = helper.make_node
nodes = [
    N("Conv", ["x", t("stem.w", 16, 3, 3, 3), t("stem.b", 16)], ["s0"], name="stem", pads=[1, 1, 1, 1]),
    N("BatchNormalization", ["s0"] + bn("stem.bn", 16), ["s1"], name="stem_bn"),
    N("Relu", ["s1"], ["s2"], name="stem_relu"),
    N("Conv", ["s2", t("exp.w", 32, 16, 1, 1)], ["e0"], name="expand"),
    N("BatchNormalization", ["e0"] + bn("exp.bn", 32), ["e1"], name="expand_bn"),
    N("Relu", ["e1"], ["e2"], name="expand_relu"),
    N("Conv", ["e2", t("dw.w", 32, 1, 3, 3)], ["d0"], name="depthwise", group=32, pads=[1, 1, 1, 1]),
    N("BatchNormalization", ["d0"] + bn("dw.bn", 32), ["d1"], name="depthwise_bn"),
    N("Relu", ["d1"], ["d2"], name="depthwise_relu"),
    N("Conv", ["d2", t("proj.w", 16, 32, 1, 1)], ["p0"], name="project"),
    N("BatchNormalization", ["p0"] + bn("proj.bn", 16), ["p1"], name="project_bn"),
    N("Add", ["s2", "p1"], ["r"], name="residual"),
    N("GlobalAveragePool", ["r"], ["g"], name="pool"),
    N("Flatten", ["g"], ["f"], name="flatten"),
    N("Gemm", ["f", t("fc.w", 10, 16), t("fc.b", 10)], ["y"], name="fc", transB=1),
]
g = helper.make_graph(nodes, "helper_block",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
np.save(sys.argv[2], rng.standard_normal((1, 3, 12, 12)).astype(np.float32))
"#;

#[test]
fn pruning_an_onnx_helper_model_with_residual_depthwise_and_batch_norms() {
    let Some(py) = python() else {
        println!("skipping: no Python with onnx and onnxruntime (set AOC_PYTHON)");
        return;
    };
    let d = dir("prune_helper");
    let (model, input) = (d.join("block.onnx"), d.join("x.npy"));
    let o = Command::new(&py).arg("-c").arg(HELPER_MODEL).arg(&model).arg(&input).output().unwrap();
    assert!(o.status.success(), "building the model:\n{}", String::from_utf8_lossy(&o.stderr));
    let out = d.join("p.air");
    let rep = d.join("p.json");
    ok(&aoc(&[&"prune", &model, &"--channels", &"0.5", &"--report", &rep, &"-o", &out]));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(conv_weight_shape(&text, "stem")[..2], [8, 3]);
    assert_eq!(conv_weight_shape(&text, "expand")[..2], [16, 8]);
    assert_eq!(conv_weight_shape(&text, "depthwise")[..2], [16, 1]);
    assert!(text.contains("groups = 16"), "{text}");
    assert_eq!(conv_weight_shape(&text, "project")[..2], [8, 16]);
    assert!(text.contains("tensor<10x8xf32>"), "the classifier reads 8 features:\n{text}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let spaces = r["spaces"].as_array().unwrap();
    // The residual group and the block's inner group are pruned; the
    // classifier's features are the output.
    let pruned: Vec<_> = spaces.iter().filter(|s| s["why"].is_null()).collect();
    assert_eq!(pruned.len(), 2, "the residual group and the block's inner group: {r}");
    assert!(spaces.iter().all(|s| s["why"].is_null() || s["why"] == "reaches a model output"), "{r}");
    assert!(spaces.iter().any(|s| s["producers"].as_array().unwrap().len() == 2), "stem and projection in one group: {r}");
    // The pruned model compiles and runs to its interpreter's outputs, and
    // its ONNX export runs in ONNX Runtime to the same.
    let interp = run_outputs(&out, &input, &d.join("interp"));
    let art = d.join("p.aoc");
    ok(&aoc(&[&"compile", &out, &"--target", &"host", &"-o", &art]));
    assert!(max_rel_err(&interp, &run_outputs(&art, &input, &d.join("c"))) < 1e-4);
    export_matches_interpreter(&d, &out, "x", &input);
}
