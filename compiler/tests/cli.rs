//! Runs the `aoc` binary on bad input and checks it fails the way a user
//! needs: exit code 1 (or 2 for usage errors; never 101, the panic code), a
//! message naming the problem, with file:line:col where the input is text,
//! and never "panicked" or "internal error". Plus the happy paths: check,
//! opt round trip, import, and run writing `.npy` results read back with
//! npyz.

use aoc_compiler::{driver, npy, weights};
use aoc_ir::{Scalar, Tensor, TensorType};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SAMPLE: &str = "\
func @main(%x: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %r = core.relu %x : tensor<2x3xf32>
  %y = core.add %r, %b : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
";

const WEIGHTED: &str = "\
weights @weights = \"w.safetensors\"
func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %b = const @weights[\"bias\"] : tensor<3xf32>
  %y = core.add %x, %b : tensor<3xf32>
  return %y : tensor<3xf32>
}
";

/// A fresh, empty folder for one test.
fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(d: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = d.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn aoc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aoc"))
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code 1, no panic, and every fragment in stderr.
fn user_error(o: &Output, fragments: &[&str]) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "expected exit 1, stderr:\n{err}");
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "panic:\n{err}"
    );
    for f in fragments {
        assert!(err.contains(f), "stderr lacks `{f}`:\n{err}");
    }
    err
}

/// Whether `text` holds `file:LINE:COL` for the file named `file`.
fn has_line_col(text: &str, file: &str) -> bool {
    text.match_indices(&format!("{file}:")).any(|(i, m)| {
        let rest = &text[i + m.len()..];
        let mut parts = rest.splitn(3, ':');
        let line = parts.next().unwrap_or("");
        let col = parts.next().unwrap_or("");
        let col: String = col.chars().take_while(|c| c.is_ascii_digit()).collect();
        !line.is_empty() && line.chars().all(|c| c.is_ascii_digit()) && !col.is_empty()
    })
}

fn f32_npy(d: &Path, name: &str, shape: &[usize], vals: &[f64]) -> PathBuf {
    let t = Tensor::from_f64(TensorType::new(shape.to_vec(), Scalar::F32), vals.to_vec());
    write(d, name, npy::npy_bytes(&t).unwrap().0)
}

fn read_f32(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = f.shape().to_vec();
    (shape, f.into_vec::<f32>().unwrap())
}

fn example_onnx() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.onnx");
    assert!(
        p.exists(),
        "the examples are part of the repository: {}",
        p.display()
    );
    p
}

// ------------------------------------------------------------- happy paths

#[test]
fn check_prints_nothing_for_a_valid_file() {
    let d = dir("check_ok");
    let f = write(&d, "m.air", SAMPLE);
    let o = aoc(&[&"check", &f]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty());
    let o = aoc(&[&"check", &"-v", &f]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}: ok (1 function, 2 ops, 0 weights files)\n", f.display())
    );
}

#[test]
fn quiet_and_verbose_apply_to_every_command() {
    let d = dir("quiet_verbose");
    let f = write(&d, "m.air", SAMPLE);
    // -q: errors only, for any command, before or after the subcommand.
    for args in [
        vec!["-q", "compile"],
        vec!["compile", "--quiet"],
    ] {
        let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> = args.iter().map(|s| s as &dyn AsRef<std::ffi::OsStr>).collect();
        a.push(&f);
        a.push(&"-o");
        let out = d.join("m.aoc");
        a.push(&out);
        let o = aoc(&a);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
        assert!(out.exists());
    }
    let o = aoc(&[&"import", &example_onnx(), &"-o", &d.join("r.air"), &"-q"]);
    assert_eq!((o.status.code(), stderr(&o)), (Some(0), String::new()));
    // Errors still print under -q.
    let o = aoc(&[&"-q", &"check", &d.join("missing.air")]);
    user_error(&o, &["missing.air"]);
    // -v: the pass timing of a compile.
    let o = aoc(&[&"compile", &f, &"-v", &"-o", &d.join("v.aoc")]);
    let e = stderr(&o);
    assert!(e.contains("pass timing (wall):") && e.contains("compiled "), "{e}");
    // The two contradict each other.
    assert_eq!(aoc(&[&"check", &f, &"-q", &"-v"]).status.code(), Some(2));
}

#[test]
fn json_reports_of_compile_explain_and_bench_profile() {
    let d = dir("json_reports");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"-o", &art, &"--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: u64 = v["step_kinds"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(kinds, v["steps"].as_u64().unwrap(), "{v}");
    assert_eq!(v["artifact_bytes"].as_u64().unwrap(), std::fs::metadata(&art).unwrap().len());
    assert!(v["arena_bytes"].as_u64().unwrap() > 0 && v["weight_bytes"].as_u64().unwrap() > 0);
    // explain --json: one entry per step of the text form, with kernel, op and loc.
    let text = String::from_utf8(aoc(&[&"explain", &art]).stdout).unwrap();
    let o = aoc(&[&"explain", &art, &"--json"]);
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let steps = e["steps"].as_array().unwrap();
    assert_eq!(steps.len() as u64, v["steps"].as_u64().unwrap());
    for st in steps {
        assert!(text.contains(st["kernel"].as_str().unwrap()), "{st}");
        assert!(st["op"].as_str().unwrap().starts_with("core."), "{st}");
    }
    assert_eq!(e["inputs"][0]["name"], "input");
    // bench --profile --json: each step's median time.
    let o = aoc(&[&"bench", &art, &"--iters", &"5", &"--profile", &"--json"]);
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(b["profile"]["steps"].as_array().unwrap().len(), steps.len());
    assert!(b["profile"]["by_kind"][0]["ms"].as_f64().unwrap() > 0.0);
    // A GPU compile (no GPU needed): launches add up.
    let o = aoc(&[&"compile", &model, &"--target", &"sm_86", &"-o", &d.join("g.aoc"), &"--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let launches: u64 = g["launch_kinds"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(launches, g["launches"].as_u64().unwrap(), "{g}");
    let ge: serde_json::Value = serde_json::from_slice(&aoc(&[&"explain", &d.join("g.aoc"), &"--json"]).stdout).unwrap();
    let items = ge["items"].as_array().unwrap();
    assert_eq!(items.iter().filter(|i| i["kind"] == "launch").count() as u64, launches);
}

/// External names (an ONNX model's `serving:0`, `out:0`) are the names of
/// the inputs and outputs in `aoc run` on `.air` files and on artifacts,
/// with no collision with a value that has the sanitized name.
#[test]
fn inputs_and_outputs_keep_the_models_own_names() {
    let d = dir("external_names");
    let f = write(
        &d,
        "m.air",
        "func @main(%serving_0: tensor<2xf32> loc(\"serving:0\")) -> (tensor<2xf32> loc(\"out:0\"), tensor<2xf32> loc(\"out_0\")) {\n\
           %a = core.relu %serving_0 : tensor<2xf32>\n\
           %b = core.neg %serving_0 : tensor<2xf32>\n\
           return %a, %b : tensor<2xf32>, tensor<2xf32>\n\
         }\n",
    );
    let x = f32_npy(&d, "x.npy", &[2], &[-1.0, 2.0]);
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &f, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (model, arg) in [(&f, "serving:0"), (&f, "serving_0"), (&art, "serving:0")] {
        let out = d.join(format!("out-{}", model.extension().unwrap().to_string_lossy()));
        let _ = std::fs::remove_dir_all(&out);
        let o = aoc(&[&"run", model, &"--input", &format!("{arg}={}", x.display()), &"--output-dir", &out]);
        assert!(o.status.success(), "{arg}: {}", stderr(&o));
        assert_eq!(read_f32(&out.join("out:0.npy")).1, vec![0.0, 2.0], "{}", model.display());
        assert_eq!(read_f32(&out.join("out_0.npy")).1, vec![1.0, -2.0], "{}", model.display());
    }
    let explain = String::from_utf8(aoc(&[&"explain", &art]).stdout).unwrap();
    assert!(explain.contains("input  serving:0 f32") && explain.contains("output out:0 f32"), "{explain}");
    // The artifact knows only the model's names.
    let o = aoc(&[&"run", &art, &"--input", &format!("serving_0={}", x.display())]);
    user_error(&o, &["unknown input `serving_0`", "serving:0"]);
}

/// A 48-layer transformer stack fuses every layer alike: each attention
/// into one step, each GELU into its GEMM, on the CPU and the GPU. (Under
/// tree cost, which counts a value once per reader, costs doubled at
/// every reuse and the later layers' choices fell below the last bit:
/// 17 of 48 attentions fused.)
#[test]
fn deep_models_fuse_every_layer() {
    let d = dir("deep_stack");
    let (layers, s, w, ff) = (48, 16, 64, 256);
    let t = format!("tensor<1x{s}x{w}xf32>");
    let mut text = format!(
        "func @main(%x0: {t}) -> {t} {{\n  %g = const dense<1.0> : tensor<{w}xf32>\n  %b = const dense<0.0> : tensor<{w}xf32>\n  %c = const dense<0.125> : tensor<f32>\n"
    );
    for i in 0..layers {
        for (n, r, c) in [("wq", w, w), ("wk", w, w), ("wv", w, w), ("wo", w, w), ("w1", w, ff), ("w2", ff, w)] {
            text += &format!("  %{n}{i} = const dense<0.01> : tensor<{r}x{c}xf32>\n");
        }
        text += &format!(
            "  %n{i} = core.layer_norm %x{i}, %g, %b : {t}\n\
               %q{i} = core.matmul %n{i}, %wq{i} : {t}\n\
               %k{i} = core.matmul %n{i}, %wk{i} : {t}\n\
               %v{i} = core.matmul %n{i}, %wv{i} : {t}\n\
               %kt{i} = core.transpose %k{i} {{perm = [0, 2, 1]}} : tensor<1x{w}x{s}xf32>\n\
               %s{i} = core.matmul %q{i}, %kt{i} : tensor<1x{s}x{s}xf32>\n\
               %ss{i} = core.mul %s{i}, %c : tensor<1x{s}x{s}xf32>\n\
               %p{i} = core.softmax %ss{i} {{axis = -1}} : tensor<1x{s}x{s}xf32>\n\
               %a{i} = core.matmul %p{i}, %v{i} : {t}\n\
               %o{i} = core.matmul %a{i}, %wo{i} : {t}\n\
               %r{i} = core.add %x{i}, %o{i} : {t}\n\
               %m{i} = core.layer_norm %r{i}, %g, %b : {t}\n\
               %h{i} = core.matmul %m{i}, %w1{i} : tensor<1x{s}x{ff}xf32>\n\
               %e{i} = core.gelu %h{i} : tensor<1x{s}x{ff}xf32>\n\
               %f{i} = core.matmul %e{i}, %w2{i} : {t}\n\
               %x{} = core.add %r{i}, %f{i} : {t}\n",
            i + 1
        );
    }
    text += &format!("  return %x{layers} : {t}\n}}\n");
    let f = write(&d, "deep.air", text);
    let kinds = |target: &str, key: &str| -> serde_json::Value {
        let out = d.join(format!("{target}.aoc"));
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"compile", &f, &"--target", &target, &"--json", &"-o", &out];
        if target.starts_with("sm_") {
            args.extend([&"--precision" as &dyn AsRef<std::ffi::OsStr>, &"fp16"]);
        }
        let o = aoc(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        j[key].clone()
    };
    let cpu = kinds("host", "step_kinds");
    assert_eq!(cpu["attention"], layers, "{cpu}");
    assert!(cpu.get("softmax").is_none() && cpu.get("mat_mul").is_none(), "{cpu}");
    let gpu = kinds("sm_90a", "launch_kinds");
    assert_eq!(gpu["attention"], layers, "{gpu}");
    assert!(gpu.get("softmax").is_none() && gpu.get("pw").is_none(), "{gpu}");
}

/// A value returned twice is two outputs: the second named `NAME_2`.
#[test]
fn a_value_returned_twice_is_two_outputs() {
    let d = dir("returned_twice");
    let f = write(
        &d,
        "m.air",
        "func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {\n\
           %a = core.relu %x : tensor<2xf32>\n\
           %b = core.neg %x : tensor<2xf32>\n\
           return %a, %b, %a : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>\n\
         }\n",
    );
    let x = f32_npy(&d, "x.npy", &[2], &[-1.0, 2.0]);
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &f, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = d.join("out");
    let o = aoc(&[&"run", &art, &"--input", &x, &"--output-dir", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_f32(&out.join("a.npy")).1, vec![0.0, 2.0]);
    assert_eq!(read_f32(&out.join("b.npy")).1, vec![1.0, -2.0]);
    assert_eq!(read_f32(&out.join("a_2.npy")).1, vec![0.0, 2.0]);
}

/// The same through ONNX: a model whose input is `input:0` and output
/// `output:0` (tests/data/names_with_colons.onnx: `output:0 = relu(x) + x`)
/// runs from the `.onnx` file, from its import and from its artifact with
/// `--input 'input:0=x.npy'`, writing `output:0.npy`.
#[test]
fn onnx_names_that_are_not_identifiers_work_everywhere() {
    let d = dir("onnx_names");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/names_with_colons.onnx");
    let vals = [-1.0, 2.0, -0.5, 0.25, 3.0, -4.0];
    let want: Vec<f32> = vals.iter().map(|&v: &f64| (v.max(0.0) + v) as f32).collect();
    let x = f32_npy(&d, "x.npy", &[2, 3], &vals);
    let air = d.join("m.air");
    let o = aoc(&[&"import", &model, &"-o", &air]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&air).unwrap();
    assert!(text.contains("%input_0: tensor<2x3xf32> loc(\"input:0\")"), "{text}");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (i, m) in [&model, &air, &art].into_iter().enumerate() {
        let out = d.join(format!("out{i}"));
        let _ = std::fs::remove_dir_all(&out);
        let o = aoc(&[&"run", m, &"--input", &format!("input:0={}", x.display()), &"--output-dir", &out]);
        assert!(o.status.success(), "{}: {}", m.display(), stderr(&o));
        assert_eq!(read_f32(&out.join("output:0.npy")).1, want, "{}", m.display());
    }
    let o = aoc(&[&"run", &art, &"--input", &format!("input_1={}", x.display())]);
    user_error(&o, &["unknown input `input_1`", "input:0"]);
}

#[test]
fn opt_writes_the_canonical_form_which_is_stable() {
    let d = dir("opt_roundtrip");
    let f = write(&d, "m.air", SAMPLE);
    let out = d.join("out.air");
    let o = aoc(&[&"opt", &f, &"-o", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let once = std::fs::read_to_string(&out).unwrap();
    assert!(once.contains("core.relu %x"), "{once}");
    let o = aoc(&[&"opt", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        once,
        "printing the canonical form again changed it"
    );
    let o = aoc(&[&"opt", &f, &"--passes", &""]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), once);
}

#[test]
fn run_writes_one_npy_per_result() {
    let d = dir("run_ok");
    let f = write(&d, "m.air", SAMPLE);
    let x = f32_npy(&d, "x.npy", &[2, 3], &[-1.0, 2.0, -3.0, 4.0, 0.5, -0.5]);
    let b = f32_npy(&d, "b.npy", &[3], &[10.0, 20.0, 30.0]);
    let out = d.join("out");
    let o = aoc(&[
        &"run",
        &f,
        &"--input",
        &format!("x={}", x.display()),
        &"--input",
        &format!("b={}", b.display()),
        &"--output-dir",
        &out,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (shape, vals) = read_f32(&out.join("y.npy"));
    assert_eq!(shape, vec![2, 3]);
    assert_eq!(vals, vec![10.0, 22.0, 30.0, 14.0, 20.5, 30.0]);
    // Positional binding gives the same; reversed names too.
    let out2 = d.join("out2");
    let o = aoc(&[&"run", &f, &x, &"--input", &b, &"--output-dir", &out2]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a bare path is not an option: usage error"
    );
    let o = aoc(&[&"run", &f, &"-i", &x, &"-i", &b, &"--output-dir", &out2]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(read_f32(&out2.join("y.npy")).1, vals);
    let o = aoc(&[&"run", &f, &"-i", &format!("b={}", b.display()), &"-i", &x]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "%y = tensor<2x3xf32> [[10.0, 22.0, 30.0], [14.0, 20.5, 30.0]]\n"
    );
}

#[test]
fn run_reads_weights_from_safetensors_beside_the_air_file() {
    let d = dir("run_weights");
    let f = write(&d, "m.air", WEIGHTED);
    let bias = Tensor::from_f64(TensorType::new(vec![3], Scalar::F32), vec![0.5, 1.5, -2.0]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("bias".to_string(), bias)]).unwrap();
    let x = f32_npy(&d, "x.npy", &[3], &[1.0, 2.0, 3.0]);
    let out = d.join("out");
    // Run from another folder: the weights path is relative to the .air file.
    let o = Command::new(env!("CARGO_BIN_EXE_aoc"))
        .current_dir(std::env::temp_dir())
        .args([
            "run".as_ref(),
            f.as_os_str(),
            "-i".as_ref(),
            x.as_os_str(),
            "--output-dir".as_ref(),
            out.as_os_str(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(read_f32(&out.join("y.npy")).1, vec![1.5, 3.5, 1.0]);
}

#[test]
fn import_writes_air_and_safetensors_that_run_like_the_model() {
    let d = dir("import");
    let out = d.join("rb.air");
    let o = aoc(&[&"import", &example_onnx(), &"-o", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // It says what it wrote.
    let said = stderr(&o);
    assert!(said.contains("imported ") && said.contains("wrote ") && said.contains("rb.air") && said.contains("rb.safetensors"), "{said}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("weights @weights = \"rb.safetensors\""),
        "{}",
        &text[..text.len().min(400)]
    );
    assert!(d.join("rb.safetensors").exists());
    let o = aoc(&[&"check", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let input = example_onnx().with_file_name("input.npy");
    let o = aoc(&[&"run", &out, &"-i", &input, &"--output-dir", &d.join("o")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = read_f32(&d.join("o/logits.npy")).1;
    let want = read_f32(&example_onnx().with_file_name("expected").join("logits.npy")).1;
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-4, "{got:?} vs {want:?}");
    }
}

// ------------------------------------------------------------- bad .air

#[test]
fn malformed_air_files_get_located_diagnostics() {
    let d = dir("malformed");
    let cases: &[(&str, &str)] = &[
        ("unclosed_paren.air", "func @main(\n"),
        (
            "truncated_body.air",
            "func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = core.relu %x : tensor<2xf32>\n",
        ),
        (
            "bad_token.air",
            "func @main() -> tensor<2xf32> {\n  %y = ### : tensor<2xf32>\n}\n",
        ),
        (
            "bad_type.air",
            "func @main(%x: tensor<2xq7>) -> tensor<2xf32> {\n  return %x : tensor<2xf32>\n}\n",
        ),
        (
            "huge_dim.air",
            "func @main(%x: tensor<99999999999999999999999xf32>) -> tensor<1xf32> {\n}\n",
        ),
        (
            "garbage_text.air",
            "\u{1F600} ]]]] {{{ %%% @@@ \"unterminated\n",
        ),
        (
            "no_return.air",
            "func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = core.relu %x : tensor<2xf32>\n}\n",
        ),
    ];
    for (name, text) in cases {
        let f = write(&d, name, text);
        let o = aoc(&[&"check", &f]);
        let err = user_error(&o, &[]);
        assert!(
            has_line_col(&err, name),
            "{name}: no file:line:col in:\n{err}"
        );
    }
}

#[test]
fn every_prefix_of_a_valid_file_is_handled() {
    // Truncation at every byte, in process (fast), must give diagnostics
    // or a valid module, never a panic.
    for cut in 0..SAMPLE.len() {
        let r = driver::parse_air(Path::new("t.air"), SAMPLE[..cut].to_string());
        if let Err(msg) = r {
            assert!(msg.contains("t.air:"), "cut {cut}: {msg}");
        }
    }
    // And a few through the binary.
    let d = dir("prefixes");
    for cut in [1, 10, 40, 75, 120, SAMPLE.len() - 3] {
        let f = write(&d, "t.air", &SAMPLE[..cut]);
        let err = user_error(&aoc(&[&"check", &f]), &[]);
        assert!(has_line_col(&err, "t.air"), "cut {cut}:\n{err}");
    }
}

#[test]
fn deep_nesting_is_not_a_crash() {
    let d = dir("deep");
    let text = format!(
        "func @main() -> tensor<1xf32> {{\n  %c = const dense<{}1.0{}> : tensor<1xf32>\n  return %c : tensor<1xf32>\n}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let f = write(&d, "deep.air", text);
    let o = aoc(&[&"check", &f]);
    assert_ne!(o.status.code(), Some(101), "{}", stderr(&o));
    assert!(
        o.status.code().is_some(),
        "killed by a signal (stack overflow?)"
    );
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn undefined_value_is_located() {
    let d = dir("undefined");
    let f = write(
        &d,
        "u.air",
        "func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = core.relu %nope : tensor<2xf32>\n  return %y : tensor<2xf32>\n}\n",
    );
    let err = user_error(&aoc(&[&"check", &f]), &["%nope", "u.air:2:"]);
    assert!(err.contains("^"), "no caret:\n{err}");
}

#[test]
fn shape_mismatch_is_located() {
    let d = dir("shape");
    let f = write(
        &d,
        "s.air",
        "func @main(%x: tensor<2x3xf32>, %y: tensor<4xf32>) -> tensor<2x3xf32> {\n  %z = core.add %x, %y : tensor<2x3xf32>\n  return %z : tensor<2x3xf32>\n}\n",
    );
    user_error(
        &aoc(&[&"check", &f]),
        &["core.add", "do not broadcast", "s.air:2:"],
    );
    let err = user_error(&aoc(&[&"run", &f]), &["s.air:2:"]);
    assert!(
        err.contains("%z = core.add %x, %y"),
        "source line missing:\n{err}"
    );
}

#[test]
fn non_utf8_bytes_are_rejected_with_a_position() {
    let d = dir("binary_air");
    let f = write(&d, "bin.air", b"func @main\n  \xff\xfe\x00garbage");
    user_error(&aoc(&[&"check", &f]), &["bin.air:2:3", "not UTF-8"]);
    let f = write(&d, "zeros.air", [0u8; 64]);
    user_error(&aoc(&[&"check", &f]), &["zeros.air:"]);
    user_error(&aoc(&[&"check", &d.join("missing.air")]), &["missing.air"]);
}

// ------------------------------------------------------------- bad .onnx

#[test]
fn garbage_and_truncated_onnx_are_rejected() {
    let d = dir("onnx");
    let g = write(
        &d,
        "garbage.onnx",
        b"\x08\x07\x12garbage \xff\xff\xff\xff\x01 not a protobuf at all",
    );
    user_error(
        &aoc(&[&"import", &g, &"-o", &d.join("g.air")]),
        &["garbage.onnx"],
    );
    user_error(&aoc(&[&"run", &g]), &["garbage.onnx"]);
    assert!(!d.join("g.air").exists(), "nothing is written on failure");
    let bytes = std::fs::read(example_onnx()).unwrap();
    // In process at many cut points, through the binary at a few.
    let step = (bytes.len() / 97).max(1);
    for cut in (0..bytes.len()).step_by(step) {
        let _ = aoc_compiler::onnx::import_model(&bytes[..cut], &Default::default());
    }
    for cut in [10, bytes.len() / 3, bytes.len() - 100] {
        let t = write(&d, "trunc.onnx", &bytes[..cut]);
        user_error(
            &aoc(&[&"import", &t, &"-o", &d.join("t.air")]),
            &["trunc.onnx"],
        );
        user_error(&aoc(&[&"check", &t]), &["trunc.onnx"]);
    }
}

// ------------------------------------------------------------- bad inputs

#[test]
fn wrong_inputs_are_named() {
    let d = dir("inputs");
    let f = write(&d, "m.air", SAMPLE);
    let x = f32_npy(&d, "x.npy", &[2, 3], &[0.0; 6]);
    let b = f32_npy(&d, "b.npy", &[3], &[0.0; 3]);
    let xs = |p: &Path| format!("x={}", p.display());
    // Unknown name: the expected ones are listed.
    user_error(
        &aoc(&[&"run", &f, &"-i", &format!("q={}", x.display()), &"-i", &b]),
        &[
            "unknown input `q`",
            "%x (tensor<2x3xf32>)",
            "%b (tensor<3xf32>)",
        ],
    );
    // Missing input.
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&x)]),
        &["missing input %b (tensor<3xf32>)"],
    );
    // Too many.
    user_error(
        &aoc(&[&"run", &f, &"-i", &x, &"-i", &b, &"-i", &b]),
        &["too many inputs"],
    );
    // Wrong shape.
    let bad = f32_npy(&d, "bad_shape.npy", &[3, 2], &[0.0; 6]);
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&bad), &"-i", &b]),
        &["bad_shape.npy", "expected tensor<2x3xf32>", "shape [3, 2]"],
    );
    // Wrong dtype.
    let t = Tensor::from_f64(TensorType::new(vec![2, 3], Scalar::F64), vec![0.0; 6]);
    let f64s = write(&d, "f64.npy", npy::npy_bytes(&t).unwrap().0);
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&f64s), &"-i", &b]),
        &["f64.npy", "float32", "found a float64"],
    );
    // Unreadable: garbage, truncated, missing.
    let junk = write(&d, "junk.npy", b"this is not numpy");
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&junk), &"-i", &b]),
        &["junk.npy", "not a .npy file"],
    );
    let full = std::fs::read(&x).unwrap();
    let cut = write(&d, "cut.npy", &full[..full.len() - 5]);
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&cut), &"-i", &b]),
        &["cut.npy", "truncated"],
    );
    user_error(
        &aoc(&[&"run", &f, &"-i", &xs(&d.join("nope.npy")), &"-i", &b]),
        &["nope.npy"],
    );
}

// ------------------------------------------------------------- bad weights

#[test]
fn weight_problems_name_the_file_and_key() {
    let d = dir("weights");
    let f = write(&d, "m.air", WEIGHTED);
    let x = f32_npy(&d, "x.npy", &[3], &[1.0, 2.0, 3.0]);
    // Missing file.
    let err = user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["w.safetensors", "cannot open"],
    );
    assert!(
        has_line_col(&err, "m.air"),
        "the failing const is located:\n{err}"
    );
    // Missing tensor.
    let other = Tensor::from_f64(TensorType::new(vec![3], Scalar::F32), vec![0.0; 3]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("other".to_string(), other)]).unwrap();
    user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["w.safetensors: no tensor \"bias\"", "m.air:3:"],
    );
    // Wrong dtype.
    let f64s = Tensor::from_f64(TensorType::new(vec![3], Scalar::F64), vec![0.0; 3]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("bias".to_string(), f64s)]).unwrap();
    user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["\"bias\" is F64", "declares tensor<3xf32>"],
    );
    // Wrong shape.
    let wide = Tensor::from_f64(TensorType::new(vec![4], Scalar::F32), vec![0.0; 4]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("bias".to_string(), wide)]).unwrap();
    user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["shape [4]", "declares tensor<3xf32>"],
    );
    // Corrupt header, and a file cut short.
    write(
        &d,
        "w.safetensors",
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all",
    );
    user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["w.safetensors", "not a valid safetensors file"],
    );
    write(&d, "w.safetensors", b"\xff\xff");
    user_error(
        &aoc(&[&"run", &f, &"-i", &x]),
        &["not a valid safetensors file"],
    );
}

// ------------------------------------------------------------- usage

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    assert_eq!(aoc(&[&"frobnicate"]).status.code(), Some(2));
    assert_eq!(aoc(&[]).status.code(), Some(2));
    assert_eq!(
        aoc(&[&"import", &"m.onnx", &"--input-shape", &"x=1xbanana"])
            .status
            .code(),
        Some(2)
    );
    let o = aoc(&[&"--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for sub in ["import", "check", "opt", "run", "Examples:"] {
        assert!(help.contains(sub), "{help}");
    }
    for sub in ["import", "check", "opt", "run"] {
        let o = aoc(&[&sub, &"--help"]);
        assert_eq!(o.status.code(), Some(0));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&format!("aoc {sub}")),
            "{sub} help has no example"
        );
    }
}

#[test]
fn unknown_passes_and_bad_options_are_located_in_the_pipeline() {
    let d = dir("passes");
    let f = write(&d, "m.air", SAMPLE);
    // The caret sits under the unknown name, at column 9 of the --passes text.
    let err = user_error(
        &aoc(&[&"opt", &f, &"--passes", &"fold-bn,nope"]),
        &[
            "unknown pass `nope`",
            "--passes:1:9",
            "fold-bn,nope",
            "^^^^",
            "known passes",
        ],
    );
    assert!(!err.contains("m.air:"), "{err}");
    user_error(
        &aoc(&[&"opt", &f, &"--passes", &"fold-bn,,fuse"]),
        &["expected a pass name, found `,`", "--passes:1:9"],
    );
    user_error(
        &aoc(&[&"opt", &f, &"--passes", &"winograd{tile=3}"]),
        &["expected 2 or 4, found 3", "--passes:1:15"],
    );
    user_error(
        &aoc(&[&"opt", &f, &"--passes", &"algebraic{nope=1}"]),
        &["pass `algebraic` has no option `nope`", "--passes:1:11"],
    );
    user_error(
        &aoc(&[&"opt", &f, &"--passes", &"algebraic", &"--target", &"z80"]),
        &["unknown target `z80`"],
    );
    user_error(
        &aoc(&[&"opt", &f, &"--print-ir-after", &"nope"]),
        &["--print-ir-after: unknown pass `nope`"],
    );
}

#[test]
fn no_verify_each_skips_only_the_checks() {
    // The built-in passes keep the IR valid, so the flag changes nothing in
    // the output (a pass that breaks the IR is tested in the library:
    // `opt::tests`, `manager_tests`).
    let d = dir("no_verify_each");
    let f = write(&d, "m.air", SAMPLE);
    let with = aoc(&[&"opt", &f, &"--passes", &"default"]);
    assert_eq!(with.status.code(), Some(0), "{}", stderr(&with));
    for flags in [&["--no-verify-each"][..], &["--verify-each"], &["--verify-each", "--no-verify-each"]] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"opt", &f, &"--passes", &"default"];
        args.extend(flags.iter().map(|s| s as &dyn AsRef<std::ffi::OsStr>));
        let o = aoc(&args);
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {}", stderr(&o));
        assert_eq!(o.stdout, with.stdout, "{flags:?}");
    }
    let out = d.join("m.opt.air");
    let o = aoc(&[&"compile", &f, &"--emit", &"air", &"--no-verify-each", &"-o", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out).unwrap().contains("func @main"));
}

/// x -> relu -> relu, for the rules-file tests.
const RELU_RELU: &str = "\
func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = core.relu %x : tensor<4xf32>
  %b = core.relu %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
";

#[test]
fn a_rules_file_applies() {
    let d = dir("rules_ok");
    let f = write(&d, "m.air", RELU_RELU);
    let r = write(
        &d,
        "my.rules",
        "# one rule\nrelu-relu: (core.relu (core.relu ?x)) => (core.relu ?x)\n",
    );
    let o = aoc(&[&"opt", &f, &"--rules", &r, &"--stats"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("core.relu").count(), 1, "{out}");
    assert!(out.contains("= core.relu %x : tensor<4xf32>"), "{out}");
    // --stats names the rule that fired.
    let err = stderr(&o);
    assert!(err.contains("user-rules: ops 2 -> 1"), "{err}");
    assert!(err.contains("relu-relu: 1"), "{err}");
    // Without the rules file nothing changes (algebraic is not run).
    let o = aoc(&[&"opt", &f]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .matches("core.relu")
            .count(),
        2
    );
}

#[test]
fn a_malformed_rules_file_is_located() {
    let d = dir("rules_bad");
    let f = write(&d, "m.air", RELU_RELU);
    let r = write(
        &d,
        "bad.rules",
        "# comment\nok: (core.relu (core.relu ?x)) => (core.relu ?x)\nbad: (core.frobnicate ?x) => ?x\n",
    );
    let err = user_error(
        &aoc(&[&"opt", &f, &"--rules", &r]),
        &[
            "unknown op `core.frobnicate`",
            "bad.rules:3:7",
            "bad.rules has 1 malformed rule",
        ],
    );
    assert!(has_line_col(&err, "bad.rules"), "{err}");
    let r = write(&d, "bad2.rules", "x: (core.relu ?x => ?x\n");
    user_error(&aoc(&[&"opt", &f, &"--rules", &r]), &["bad2.rules:1:"]);
    user_error(
        &aoc(&[&"opt", &f, &"--rules", &d.join("missing.rules")]),
        &["cannot read", "missing.rules"],
    );
}

#[test]
fn fold_bn_on_the_resnet_block_writes_weights_and_runs_like_onnx_runtime() {
    let d = dir("opt_fold_bn");
    let m = d.join("rb.air");
    let o = aoc(&[&"import", &example_onnx(), &"-o", &m]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        std::fs::read_to_string(&m)
            .unwrap()
            .contains("core.batch_norm")
    );
    let out = d.join("rb.opt.air");
    let o = aoc(&[
        &"opt",
        &m,
        &"--passes",
        &"fold-bn",
        &"-o",
        &out,
        &"--timing",
        &"--stats",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("pass timing (wall):") && err.contains("fold-bn"),
        "{err}"
    );
    assert!(err.contains("e-graph") && err.contains("stopped:"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("core.batch_norm"), "{text}");
    assert!(text.contains("core.conv2d"), "{text}");
    // Self-contained: one weights file beside the output, named after it.
    assert!(
        text.contains("weights @weights = \"rb.opt.safetensors\""),
        "{text}"
    );
    let st = weights::read_safetensors(&d.join("rb.opt.safetensors")).unwrap();
    assert!(st.len() >= 6, "{} tensors", st.len());
    let o = aoc(&[&"check", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Moving the original weights away shows the output does not need them.
    std::fs::rename(d.join("rb.safetensors"), d.join("moved.safetensors")).unwrap();
    let input = example_onnx().with_file_name("input.npy");
    let o = aoc(&[&"run", &out, &"-i", &input, &"--output-dir", &d.join("o")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (shape, got) = read_f32(&d.join("o/logits.npy"));
    let want = read_f32(&example_onnx().with_file_name("expected").join("logits.npy")).1;
    assert_eq!(shape, vec![1, 10]);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-4, "{got:?} vs {want:?}");
    }
    // On stdout, folded weights are an error that says what to do.
    std::fs::rename(d.join("moved.safetensors"), d.join("rb.safetensors")).unwrap();
    user_error(
        &aoc(&[&"opt", &m, &"--passes", &"fold-bn"]),
        &["computed constant", "use -o"],
    );
}

#[test]
fn verify_rewrites_reports_each_pass_and_enforces_the_tolerance() {
    let d = dir("verify_rewrites");
    // conv -> batch_norm: folding changes rounding only (f32).
    let src = "\
func @main(%x: tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = const dense<[[[[0.5]], [[-1.5]]], [[[2.0]], [[0.25]]]]> : tensor<2x2x1x1xf32>
  %s = const dense<[3.0, 0.7]> : tensor<2xf32>
  %b = const dense<[0.5, -0.1]> : tensor<2xf32>
  %m = const dense<[1.0, 0.2]> : tensor<2xf32>
  %v = const dense<[3.0, 0.9]> : tensor<2xf32>
  %y = core.conv2d %x, %w : tensor<1x2x3x3xf32>
  %z = core.batch_norm %y, %s, %b, %m, %v : tensor<1x2x3x3xf32>
  %r = core.relu %z : tensor<1x2x3x3xf32>
  %t = core.relu %r : tensor<1x2x3x3xf32>
  return %t : tensor<1x2x3x3xf32>
}
";
    let f = write(&d, "m.air", src);
    let o = aoc(&[
        &"opt",
        &f,
        &"--passes",
        &"algebraic,fold-bn",
        &"--verify-rewrites",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("max abs err") && err.contains("max rel err"),
        "{err}"
    );
    let row = |name: &str| -> Vec<f64> {
        let line = err
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{err}"));
        line.split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    // relu-relu is exact; folding the batch-norm rounds differently in f32.
    assert_eq!(row("algebraic"), vec![0.0, 0.0]);
    let fold = row("fold-bn");
    assert!(fold[0] < 1e-5 && fold[1] < 1e-5, "{err}");
    // A wrong rule (relu(x) -> x) changes the results on the random
    // inputs (standard normal: about half negative), and the command fails
    // naming the pass, without writing anything.
    let r = write(&d, "wrong.rules", "drop-relu: (core.relu ?x) => ?x\n");
    let out = d.join("out.air");
    let err = user_error(
        &aoc(&[
            &"opt",
            &f,
            &"--rules",
            &r,
            &"--verify-rewrites",
            &"-o",
            &out,
        ]),
        &[
            "pass `user-rules` changed the results",
            "more than the tolerance 1e-3",
        ],
    );
    assert!(err.contains("user-rules"), "{err}");
    assert!(!out.exists());
    // A generous tolerance lets it through.
    let o = aoc(&[
        &"opt",
        &f,
        &"--rules",
        &r,
        &"--verify-rewrites",
        &"--rewrite-tolerance",
        &"1e9",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

// ------------------------------------------------------------- docs

/// docs/passes.md lists the registry's passes as `aoc opt --list-passes`
/// prints them; `AOC_BLESS=1` rewrites the generated section.
#[test]
fn passes_doc_lists_every_pass() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/passes.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = (
        "<!-- passes:begin (generated; do not edit) -->\n",
        "<!-- passes:end -->",
    );
    let a = doc.find(begin).expect("begin marker") + begin.len();
    let b = doc.find(end).expect("end marker");
    let listed = aoc_passes::registry::describe(aoc_passes::registry());
    let want = format!("```text\n{listed}```\n");
    let o = aoc(&[&"opt", &"--list-passes"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), listed);
    if doc[a..b] != want {
        if std::env::var_os("AOC_BLESS").is_some() {
            std::fs::write(&path, format!("{}{want}{}", &doc[..a], &doc[b..])).unwrap();
        } else {
            panic!(
                "docs/passes.md is out of date; run AOC_BLESS=1 cargo test -p aoc --test cli passes_doc"
            );
        }
    }
    for e in aoc_passes::registry() {
        assert!(doc.contains(e.name));
    }
}

// ------------------------------------------------------------- CPU artifacts

fn example_air() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air")
}

#[test]
fn compile_run_and_bench_an_artifact() {
    let d = dir("compile_run_bench");
    let aocf = d.join("m.aoc");
    let o = aoc(&[&"compile", &example_air(), &"--target", &"x86-64", &"-o", &aocf]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("compiled") && stderr(&o).contains("conv2d"), "{}", stderr(&o));
    let input = example_air().with_file_name("input.npy");
    let out = d.join("out");
    let o = aoc(&[&"run", &aocf, &"--input", &input, &"--output-dir", &out, &"--threads", &"2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (shape, got) = read_f32(&out.join("logits.npy"));
    let (eshape, want) = read_f32(&example_air().with_file_name("expected").join("logits.npy"));
    assert_eq!(shape, eshape);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} vs {w}");
    }
    let o = aoc(&[&"bench", &aocf, &"--iters", &"3", &"--warmup", &"1", &"--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for key in ["p50_ms", "p99_ms", "mean_ms", "throughput_per_s", "peak_memory_bytes"] {
        assert!(text.contains(&format!("\"{key}\"")), "bench --json lacks {key}: {text}");
    }
    let v: f64 = text
        .split("\"p50_ms\":")
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|n| n.trim().parse().ok())
        .expect("p50_ms is a number");
    assert!(v > 0.0);
    // --profile lists the step kinds and, with --slowest N, N slowest steps.
    for n in [1usize, 3] {
        let o = aoc(&[&"bench", &aocf, &"--iters", &"1", &"--profile", &"--slowest", &n.to_string()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.matches("slowest: step").count(), n, "{err}");
        assert!(err.contains("conv2d"), "{err}");
        assert!(err.contains("median of each step over 1 runs"), "{err}");
    }
    // Step times are medians over min(--iters, 20) profiled runs.
    let o = aoc(&[&"bench", &aocf, &"--iters", &"4", &"--profile"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("median of each step over 4 runs"), "{}", stderr(&o));
}

#[test]
fn emit_shows_cranelift_ir_and_machine_code() {
    let d = dir("emit");
    let clif = d.join("m.clif");
    let o = aoc(&[&"compile", &example_air(), &"--emit", &"clif", &"-o", &clif]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&clif).unwrap();
    assert!(text.contains("; step 0:") && text.contains("function"), "{text}");
    let asm = d.join("m.s");
    let o = aoc(&[&"compile", &example_air(), &"--emit", &"asm", &"-o", &asm]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&asm).unwrap().contains("; kernel pw0"));
}

#[test]
fn compile_rejects_an_unknown_target() {
    let d = dir("compile_bad_target");
    let o = aoc(&[&"compile", &example_air(), &"--target", &"x86-65", &"-o", &d.join("m.aoc")]);
    user_error(&o, &["unknown target `x86-65`", "x86-64-v4"]);
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_87", &"-o", &d.join("m.aoc")]);
    user_error(&o, &["unknown gpu target `sm_87`", "sm_86"]);
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_86", &"--precision", &"fp8", &"-o", &d.join("m.aoc")]);
    user_error(&o, &["--precision must be fp32, tf32, fp16 or bf16", "fp8"]);
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_75", &"--precision", &"fp16", &"-o", &d.join("m.aoc")]);
    user_error(&o, &["--precision fp16 needs tensor cores", "sm_75"]);
    let o = aoc(&[&"compile", &example_air(), &"--target", &"host", &"--precision", &"fp16", &"-o", &d.join("m.aoc")]);
    user_error(&o, &["--precision fp16 is for GPU targets"]);
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_86", &"--emit", &"clif", &"-o", &d.join("m.clif")]);
    user_error(&o, &["--emit for a GPU target must be aoc, air, llvm or ptx"]);
}

/// A GPU artifact is built without a GPU; `explain` reads it without one;
/// `--emit llvm|ptx` write the module with the launch list.
#[test]
fn compile_for_a_gpu_explain_and_emit() {
    let d = dir("compile_gpu");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_86", &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("for sm_86 (fp32)"), "{}", stderr(&o));
    let o = aoc(&[&"explain", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("target sm_86") && text.contains("gemm_f32_") && text.contains("<- core."), "{text}");
    let ll = d.join("m.ll");
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_90a", &"--emit", &"llvm", &"-o", &ll]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&ll).unwrap();
    assert!(text.contains("; item 0: launch ") && text.contains("define ptx_kernel void @"), "{text}");
    // The residual add + relu after a convolution runs in its epilogue.
    assert!(text.contains("define internal float @gemm_f32_") && text.contains("_epi(float"), "{text}");
    let ptx = d.join("m.ptx");
    let o = aoc(&[&"compile", &example_air(), &"--target", &"sm_90a", &"--precision", &"bf16", &"--emit", &"ptx", &"-o", &ptx]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains(".target sm_90a") && text.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), "{text}");
}

#[test]
fn corrupt_and_truncated_artifacts_are_errors() {
    let d = dir("corrupt_artifact");
    let aocf = d.join("m.aoc");
    let o = aoc(&[&"compile", &example_air(), &"-o", &aocf]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&aocf).unwrap();
    let input = example_air().with_file_name("input.npy");
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let bad = write(&d, "flipped.aoc", &flipped);
    let o = aoc(&[&"run", &bad, &"--input", &input]);
    user_error(&o, &["flipped.aoc", "checksum"]);
    let short = write(&d, "short.aoc", &bytes[..bytes.len() / 3]);
    let o = aoc(&[&"bench", &short, &"--iters", &"1"]);
    user_error(&o, &["short.aoc", "truncated"]);
}

#[test]
fn artifact_inputs_are_checked() {
    let d = dir("artifact_inputs");
    let aocf = d.join("m.aoc");
    let o = aoc(&[&"compile", &example_air(), &"-o", &aocf]);
    assert!(o.status.success(), "{}", stderr(&o));
    let wrong = f32_npy(&d, "x.npy", &[1, 3, 16, 16], &vec![0.5; 3 * 16 * 16]);
    let o = aoc(&[&"run", &aocf, &"--input", &wrong]);
    user_error(&o, &["input", "1, 3, 32, 32"]);
    let o = aoc(&[&"run", &aocf, &"--input", &format!("nope={}", wrong.display())]);
    user_error(&o, &["unknown input `nope`", "input"]);
    let o = aoc(&[&"run", &aocf]);
    user_error(&o, &["missing input"]);
}

#[test]
fn explain_lists_every_step_with_its_origin() {
    let d = dir("explain");
    let aocf = d.join("m.aoc");
    let qdq = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/qdq_cnn/model.air");
    let o = aoc(&[&"compile", &qdq, &"-o", &aocf]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = aoc(&[&"explain", &aocf]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("input  input f32 [1, 3, 32, 32]"), "{text}");
    // The classifier's Q/DQ gemm (a weight small enough for the e-graph to
    // fold) runs as an integer step too, not as a float gemm between a
    // dequantize and a quantize.
    let fc = text.lines().find(|l| l.contains("quant.gemm")).unwrap_or_default();
    assert!(fc.contains("qconv2d") && !text.contains("gemm 1x10x64"), "{text}");
    // Integer convolutions, residual adds and the max pool run on 8-bit
    // kernels; the global average pool, which has no integer kernel yet,
    // runs as its float expansion: no step of a default compile is a
    // reference step.
    assert!(text.contains("qconv2d") && !text.contains("reference"), "{text}");
    assert!(text.lines().any(|l| l.contains(" qmax_pool ") && l.contains("core.max_pool2d")), "{text}");
    assert!(text.lines().any(|l| l.contains(" qadd ") && l.contains("quant.add")), "{text}");
    // --reference-fallback is the development escape hatch: a cubic resize
    // has no kernel and is an error that names it, unless the flag is given.
    let cubic = d.join("cubic.air");
    std::fs::write(
        &cubic,
        "func @main(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32> {\n  %r = core.resize %x {sizes = [1, 1, 4, 4], mode = \"cubic\"} : tensor<1x1x4x4xf32>\n  return %r : tensor<1x1x4x4xf32>\n}\n",
    )
    .unwrap();
    let out = d.join("cubic.aoc");
    let o = aoc(&[&"compile", &cubic, &"-o", &out]);
    user_error(&o, &["cannot compile core.resize: no native kernel", "--reference-fallback", "cubic.air:2:3"]);
    assert!(!out.exists(), "no artifact is written when the compile fails");
    let o = aoc(&[&"compile", &cubic, &"--reference-fallback", &"-o", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = aoc(&[&"explain", &out]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("reference core.resize"), "{}", stderr(&o));
}

/// One NaN pixel through the compiled resnet block (fused conv + relu
/// epilogues, the classifier GEMM) gives NaN logits, as the interpreter
/// does; before the GEMM epilogues kept NaN, the compiled logits were
/// finite. Every CPU level this machine runs is tried.
#[test]
fn a_nan_input_stays_nan_through_the_compiled_epilogues() {
    let d = dir("nan_through_epilogues");
    let mut vals = vec![0.25; 3 * 32 * 32];
    vals[5 * 32 + 5] = f64::NAN;
    let x = f32_npy(&d, "x.npy", &[1, 3, 32, 32], &vals);
    let interp = d.join("interp");
    let o = aoc(&[&"run", &example_air(), &"--input", &x, &"--output-dir", &interp]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (_, want) = read_f32(&interp.join("logits.npy"));
    assert!(want.iter().all(|v| v.is_nan()), "the interpreter's logits: {want:?}");
    for level in ["x86-64", "x86-64-v3", "x86-64-v4"] {
        let aocf = d.join(format!("{level}.aoc"));
        let o = aoc(&[&"compile", &example_air(), &"--target", &level, &"-o", &aocf]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = d.join(format!("out-{level}"));
        let o = aoc(&[&"run", &aocf, &"--input", &x, &"--output-dir", &out]);
        if !o.status.success() && stderr(&o).contains("this CPU lacks") {
            println!("skipping {level}: {}", stderr(&o).trim());
            continue;
        }
        assert!(o.status.success(), "{}", stderr(&o));
        let (_, got) = read_f32(&out.join("logits.npy"));
        assert!(got.iter().all(|v| v.is_nan()), "{level}: compiled logits {got:?}, the interpreter's are NaN");
    }
}

/// `aoc explain` reads an artifact for any CPU level, this machine's or
/// not (it reads the plan, it runs nothing): an x86-64-v4 artifact
/// explains on an AVX2-only CPU, where `aoc run` of the same file refuses
/// it, naming the features this CPU lacks.
#[test]
fn explain_reads_an_artifact_for_a_cpu_level_this_machine_lacks() {
    let d = dir("explain_other_level");
    let x = f32_npy(&d, "x.npy", &[1, 3, 32, 32], &vec![0.5; 3 * 32 * 32]);
    for level in ["x86-64", "x86-64-v3", "x86-64-v4"] {
        let aocf = d.join(format!("{level}.aoc"));
        let o = aoc(&[&"compile", &example_air(), &"--target", &level, &"-o", &aocf]);
        assert!(o.status.success(), "{}", stderr(&o));
        for json in [false, true] {
            let o = if json { aoc(&[&"explain", &aocf, &"--json"]) } else { aoc(&[&"explain", &aocf]) };
            assert!(o.status.success(), "{level}: {}", stderr(&o));
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains(level) && text.contains("gemm"), "{level}: {text}");
        }
        let o = aoc(&[&"run", &aocf, &"--input", &x, &"--output-dir", &d.join(format!("out-{level}"))]);
        if o.status.success() {
            println!("{level}: this CPU runs it");
        } else {
            user_error(&o, &["this CPU lacks", level]);
            println!("{level}: explained; this CPU cannot run it: {}", stderr(&o).trim());
        }
    }
}

/// Recompiling, copying over and truncating an artifact while `aoc bench`
/// runs it does not crash the benchmark (it used to end with SIGBUS: the
/// runtime mapped the file and `compile -o` rewrote it in place), and the
/// recompiled file is whole.
#[test]
fn replacing_an_artifact_under_a_running_benchmark_does_not_crash_it() {
    let d = dir("replace_under_load");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = std::fs::read(&art).unwrap();
    // The benchmark runs in its own thread of this test while the file is
    // rewritten, copied over and truncated underneath it.
    let (tx, rx) = std::sync::mpsc::channel();
    let art2 = art.clone();
    let runner = std::thread::spawn(move || {
        let o = Command::new(env!("CARGO_BIN_EXE_aoc"))
            .args(["bench", "--iters", "6000", "--warmup", "1", "--threads", "1"])
            .arg(&art2)
            .output()
            .unwrap();
        tx.send(()).unwrap();
        o
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    for _ in 0..3 {
        // In place, on the inode the benchmark loaded: `cp` over the file
        // (truncate, then write) and `truncate`.
        std::fs::write(&art, &first).unwrap();
        std::fs::OpenOptions::new().write(true).open(&art).unwrap().set_len(100).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let o = aoc(&[&"compile", &model, &"-o", &art]);
        assert!(o.status.success(), "{}", stderr(&o));
        if rx.try_recv().is_ok() {
            break;
        }
    }
    let o = runner.join().unwrap();
    assert!(o.status.success(), "the benchmark died: {:?}\n{}", o.status, stderr(&o));
    let o = aoc(&[&"compile", &model, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&art).unwrap(), first, "a recompile writes the same whole artifact");
    let leftovers: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// `--threads` has a bound (4 per core), named in the error; it used to
/// spawn threads until killed.
#[test]
fn thread_counts_are_bounded() {
    let d = dir("threads");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    for n in ["10000", "1000000000000"] {
        let t0 = std::time::Instant::now();
        let o = aoc(&[&"bench", &art, &"--iters", &"1", &"--threads", &n]);
        user_error(&o, &[&format!("{n} worker threads requested; at most"), "4 per core"]);
        assert!(t0.elapsed().as_secs() < 10, "rejecting took {:?}", t0.elapsed());
    }
    let o = aoc(&[&"bench", &art, &"--iters", &"2", &"--threads", &"2"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `aoc check` opens the weights: a missing file, a missing key and a shape
/// mismatch each fail at the constant that names them (they used to pass
/// `check` and fail only at `run`).
#[test]
fn check_opens_the_weights() {
    let d = dir("check_weights");
    let f = write(&d, "m.air", WEIGHTED);
    let o = aoc(&[&"check", &f]);
    user_error(&o, &["cannot open weights file", "w.safetensors", "m.air:"]);
    let bias = |n: usize| Tensor::from_f64(TensorType::new(vec![n], Scalar::F32), vec![0.5; n]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("other".to_string(), bias(3))]).unwrap();
    user_error(&aoc(&[&"check", &f]), &["no tensor \"bias\""]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("bias".to_string(), bias(4))]).unwrap();
    user_error(&aoc(&[&"check", &f]), &["tensor \"bias\" is F32 with shape [4], but the constant declares tensor<3xf32>"]);
    weights::save_safetensors(&d.join("w.safetensors"), &[("bias".to_string(), bias(3))]).unwrap();
    let o = aoc(&[&"check", &f]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A directory given as an artifact says what it is.
    let o = aoc(&[&"bench", &d]);
    user_error(&o, &["is a directory"]);
}

/// A tensor under the 2^40-element limit that does not fit in memory is an
/// error naming it, in `run` and in `compile`: it used to abort in the
/// allocator (SIGABRT, exit 134).
#[test]
fn tensors_too_large_for_memory_are_errors_not_aborts() {
    let d = dir("huge");
    let f = write(
        &d,
        "huge.air",
        "func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %c = const dense<1.0> : tensor<1000000x1000000xf32>\n  %s = core.reduce_sum %c {axes = [0, 1], keepdims = false} : tensor<f32>\n  %y = core.add %x, %s : tensor<2xf32>\n  return %y : tensor<2xf32>\n}\n",
    );
    let x = f32_npy(&d, "x.npy", &[2], &[1.0, 2.0]);
    let o = aoc(&[&"run", &f, &"-i", &x, &"--output-dir", &d.join("out")]);
    user_error(&o, &["cannot allocate tensor<1000000x1000000xf32>", "do not fit in memory"]);
    let out = d.join("huge.aoc");
    let o = aoc(&[&"compile", &f, &"-o", &out]);
    user_error(&o, &["cannot allocate tensor<1000000x1000000xf32>"]);
    assert!(!out.exists());
}

/// `--random-inputs` gives the same seeded inputs to an artifact and to the
/// interpreter, and `--expected` compares outputs with a folder of .npy
/// files: per-output errors, exit 1 and a count when they differ.
#[test]
fn random_inputs_and_expected_outputs() {
    let d = dir("expected");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air");
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = d.join("want");
    let o = aoc(&[&"run", &art, &"--random-inputs", &"--seed", &"3", &"--output-dir", &want]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The interpreter on the same seeded inputs agrees with the artifact.
    let o = aoc(&[&"run", &model, &"--random-inputs", &"--seed", &"3", &"--expected", &want, &"--atol", &"1e-4", &"--rtol", &"1e-3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("max abs error") && text.contains(": ok"), "{text}");
    // Another seed gives other inputs, so other outputs.
    let o = aoc(&[&"run", &art, &"--random-inputs", &"--seed", &"4", &"--expected", &want]);
    let err = user_error(&o, &["outputs differ from", "atol"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("elements differ"), "{err}");
    // A missing expected file is named.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = aoc(&[&"run", &art, &"--random-inputs", &"--expected", &empty]);
    user_error(&o, &["no expected values for output"]);
}

/// `aoc --version` names the git revision and the LLVM linked in.
#[test]
fn version_names_the_revision_and_llvm() {
    let o = aoc(&[&"--version"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("aoc ") && first.contains('(') && !first.contains("()"), "{text}");
    assert!(text.contains("LLVM 22.") && text.contains("features:"), "{text}");
}

/// `aoc bench` compiles a model (.air or .onnx) for --target and
/// benchmarks it in one command, reporting the load time; a soak of 200,000
/// runs of a small artifact passes (the CI soak).
#[test]
fn bench_compiles_models_and_soaks() {
    let d = dir("bench_model");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/resnet_block/model.air");
    let o = aoc(&[&"bench", &model, &"--target", &"x86-64", &"--iters", &"5", &"--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["iters"], 5);
    assert!(v["load_ms"].as_f64().is_some_and(|t| t >= 0.0), "{v}");
    let o = aoc(&[&"bench", &example_onnx(), &"--iters", &"3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("loaded in"), "{}", String::from_utf8_lossy(&o.stdout));
    // A model that does not compile is the compile's error.
    let bad = write(&d, "bad.air", "func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %y : tensor<2xf32>\n}\n");
    user_error(&aoc(&[&"bench", &bad]), &["bad.air"]);
    // The soak: 200,000 runs of a small artifact, one session, no failure.
    let small = write(
        &d,
        "small.air",
        "func @main(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %r = core.relu %x : tensor<8xf32>\n  %y = core.mul %r, %x : tensor<8xf32>\n  return %y : tensor<8xf32>\n}\n",
    );
    let art = d.join("small.aoc");
    let o = aoc(&[&"compile", &small, &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = aoc(&[&"bench", &art, &"--iters", &"200000", &"--threads", &"1", &"--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["iters"], 200000);
}

/// NaN and ±inf through every CPU epilogue (convolution + bias + relu, GEMM
/// + relu, max pool, clip, softmax) at every CPU level this machine runs,
/// element by element against the interpreter (gpu.rs runs the same model on
/// the GPU).
#[test]
fn nan_and_inf_through_every_cpu_epilogue() {
    let d = dir("nan_every_epilogue");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let model = data.join("nan_epilogues.air");
    let x = format!("x={}", data.join("nan_x.npy").display());
    let a = format!("a={}", data.join("nan_a.npy").display());
    let want = d.join("want");
    let o = aoc(&[&"run", &model, &"-i", &x, &"-i", &a, &"--output-dir", &want]);
    assert!(o.status.success(), "{}", stderr(&o));
    for level in ["x86-64", "x86-64-v3", "x86-64-v4"] {
        let art = d.join(format!("{level}.aoc"));
        let o = aoc(&[&"compile", &model, &"--target", &level, &"-o", &art]);
        assert!(o.status.success(), "{}", stderr(&o));
        let got = d.join(format!("got-{level}"));
        let o = aoc(&[&"run", &art, &"-i", &x, &"-i", &a, &"--output-dir", &got]);
        if !o.status.success() && stderr(&o).contains("this CPU lacks") {
            println!("skipping {level}: {}", stderr(&o).trim());
            continue;
        }
        assert!(o.status.success(), "{}", stderr(&o));
        assert_same_non_finite(&want, &got, &["cr", "gr", "p", "k", "s"], level);
    }
}

/// Each named output in `got` equals the one in `want` element by element:
/// NaN where it is NaN, the same infinity, else within 1e-4 relative.
fn assert_same_non_finite(want: &Path, got: &Path, names: &[&str], label: &str) {
    for name in names {
        let (_, w) = read_f32(&want.join(format!("{name}.npy")));
        let (_, g) = read_f32(&got.join(format!("{name}.npy")));
        assert_eq!(w.len(), g.len(), "{label}: {name}");
        for (i, (wv, gv)) in w.iter().zip(&g).enumerate() {
            let same = if wv.is_nan() { gv.is_nan() } else if wv.is_infinite() { wv == gv } else { (wv - gv).abs() <= 1e-4 * wv.abs().max(1.0) };
            assert!(same, "{label}: {name}[{i}] is {gv}, the interpreter's is {wv}");
        }
    }
}

/// Parameters that are not finite (a clip with no upper bound, a norm's
/// epsilon of inf or NaN) reach the plan, which is JSON: they used to be
/// written as `null`, so `aoc compile` wrote an artifact that no run could
/// load ("the plan is not valid: invalid type: null, expected f32"). Found
/// by mutating the zoo's models.
#[test]
fn non_finite_parameters_compile_to_artifacts_that_load_and_run() {
    let d = dir("non_finite_params");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nonfinite_params.air");
    let vals: Vec<f64> = (0..64).map(|i| ((i * 37 % 64) as f64 - 32.0) / 8.0).collect();
    let a = format!("a={}", f32_npy(&d, "a.npy", &[4, 16], &vals).display());
    let want = d.join("want");
    let o = aoc(&[&"run", &model, &"-i", &a, &"--output-dir", &want]);
    assert!(o.status.success(), "{}", stderr(&o));
    let art = d.join("m.aoc");
    let o = aoc(&[&"compile", &model, &"--target", &"host", &"-o", &art]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = d.join("got");
    let o = aoc(&[&"run", &art, &"-i", &a, &"--output-dir", &got]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_non_finite(&want, &got, &["gc", "li", "ln"], "host");
    let (_, ln) = read_f32(&got.join("ln.npy"));
    assert!(ln.iter().all(|v| v.is_nan()), "a NaN epsilon gives NaN rows: {ln:?}");
}

/// An artifact's outputs keep the model's result names through the
/// optimizer: in qdq_mobilenet the qdq pass returns another value in place
/// of `features` (its quantize folds into the dequantize before it), and
/// the artifact used to name the output after that value
/// (`features_QuantizeLinear_Input`), on the CPU and the GPU alike.
#[test]
fn compiled_outputs_keep_the_models_result_names() {
    let d = dir("result_names");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/qdq_mobilenet/model.air");
    for target in ["host", "sm_86"] {
        let art = d.join(format!("{target}.aoc"));
        let o = aoc(&[&"compile", &model, &"--target", &target, &"-o", &art]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = aoc(&[&"explain", &art]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.lines().any(|l| l.trim_start().starts_with("output features ")), "{target}:\n{text}");
    }
    let o = aoc(&[&"run", &model, &"--input", &model.with_file_name("input.npy"), &"--output-dir", &d.join("out")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(d.join("out/features.npy").exists());
}

/// `aoc import --input-value` fixes an input to a constant: an `If` on it
/// (whose branches yield different shapes, so it cannot stay a run-time
/// `If`) folds to the branch the value picks, the input disappears from the
/// model, and the artifact computes that branch. Without it the import
/// fails and says to use it; a wrong count, an unknown name and a value
/// that is not a number are errors.
#[test]
fn input_value_fixes_an_input_and_folds_its_branch() {
    let d = dir("input_value");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/branch_on_input.onnx");
    let air = d.join("m.air");
    let o = aoc(&[&"import", &model, &"-o", &air]);
    user_error(&o, &["then_branch", "else_branch", "--input-value"]);
    let o = aoc(&[&"import", &model, &"-o", &air, &"--input-value", &"mode=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&air).unwrap();
    assert!(text.contains("func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32>") && !text.contains("core.if"), "{text}");
    let vals = [-1.0, 2.0, -0.5, 0.25, 3.0, -4.0];
    let x = f32_npy(&d, "x.npy", &[2, 3], &vals);
    let out = d.join("out");
    let o = aoc(&[&"run", &air, &"--input", &format!("x={}", x.display()), &"--output-dir", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Vec<f32> = vals.iter().map(|&v: &f64| (v.max(0.0) + 1.0) as f32).collect();
    assert_eq!(read_f32(&out.join("y.npy")).1, want);
    // The other value takes the other branch (a reshape to 3x2).
    let o = aoc(&[&"import", &model, &"-o", &air, &"--input-value", &"mode=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&air).unwrap().contains("-> tensor<3x2xf32>"));
    let o = aoc(&[&"import", &model, &"-o", &air, &"--input-value", &"mode=1,2"]);
    user_error(&o, &["--input-value mode gives 2 values", "holds 1"]);
    let o = aoc(&[&"import", &model, &"-o", &air, &"--input-value", &"modes=1"]);
    user_error(&o, &["--input-value names `modes`", "x, mode"]);
    // A malformed flag is a usage error (exit 2), as for --input-shape.
    let o = aoc(&[&"import", &model, &"-o", &air, &"--input-value", &"mode=one"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`one` is not a number"), "{}", stderr(&o));
}
