//! MLIR interop end to end (`cargo test -p aoc --features mlir --test
//! mlir`; `make test` runs it): every example model exports to TOSA that
//! `mlir-opt-22` reads (and, for the float ones, lowers to linalg), comes
//! back as `.air` and runs to the same numbers; TOSA programs from MLIR's
//! own test suite (tests/data/mlir/README.md) and the linalg that
//! `mlir-opt-22` makes of them import and run to numpy's numbers;
//! malformed or unsupported input fails at its `file:line:col`, exit 1, no
//! output file.
//!
//! `mlir-opt-22` (Debian's `mlir-22-tools`, which `make llvm` and CI
//! install) is required: without it these tests fail, saying so.

use aoc_compiler::npy;
use aoc_ir::Tensor;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The pipeline docs/mlir.md gives for lowering aoc's TOSA to linalg.
const LOWER: &str = "builtin.module(func.func(tosa-optional-decompositions,lower-quant-ops,tosa-to-linalg-named,tosa-to-linalg,tosa-to-arith,tosa-to-tensor,canonicalize),convert-elementwise-to-linalg)";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mlir").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn aoc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aoc")).args(args.iter().map(|a| a.as_ref())).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what} failed:\n{}{}", String::from_utf8_lossy(&o.stdout), stderr(o));
}

fn mlir_opt(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    match Command::new("mlir-opt-22").args(args.iter().map(|a| a.as_ref())).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run mlir-opt-22 ({e}); install it: apt-get install mlir-22-tools (make llvm does)"),
    }
}

/// The example models: (name, folder).
fn examples() -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            p.join("model.air").exists().then(|| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 6, "examples/*/model.air missing ({} found); run make examples-air", v.len());
    v
}

fn outputs(d: &Path) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), npy::read_npy(&p).unwrap())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Largest |a - b| / (atol + rtol |b|) over all outputs (> 1 fails).
#[track_caller]
fn assert_close(got: &[(String, Tensor)], want: &[(String, Tensor)], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.iter().map(|g| &g.0).collect::<Vec<_>>(), want.iter().map(|w| &w.0).collect::<Vec<_>>(), "{what}: output names");
    for ((n, g), (_, w)) in got.iter().zip(want) {
        assert_eq!(g.ty.shape, w.ty.shape, "{what}: {n} shape");
        let (g, w) = (g.to_f64(), w.to_f64());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = (a - b).abs() <= atol + rtol * b.abs() || (a.is_nan() && b.is_nan());
            assert!(ok, "{what}: {n}[{i}] = {a}, expected {b}");
        }
    }
}

fn run_air(model: &Path, input: &Path, out: &Path) -> Vec<(String, Tensor)> {
    ok(&aoc(&[&"run", &model, &"--input", &input, &"--output-dir", &out]), &format!("aoc run {}", model.display()));
    outputs(out)
}

#[test]
fn every_example_exports_verifies_and_lowers_to_linalg() {
    for (name, d) in examples() {
        let t = dir(&format!("export-{name}"));
        let out = t.join(format!("{name}.mlir"));
        ok(&aoc(&[&"export", &d.join("model.air"), &"--format", &"mlir", &"-o", &out]), &format!("export {name}"));
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("func.func @main"), "{name}: no func.func");
        assert!(text.contains("tosa."), "{name}: no TOSA op");
        // Locations: the .air file's line and column, and the ONNX node names.
        assert!(text.contains("model.air\":"), "{name}: no file:line:col location");
        let quant = text.contains("!quant.uniform<");
        assert_eq!(quant, name.starts_with("qdq"), "{name}: quantized types");
        let o = mlir_opt(&[&out]);
        assert!(o.status.success(), "{name}: mlir-opt-22 rejects the export:\n{}", stderr(&o));
        assert_lowers(&out, &name);
    }
}

/// `file` lowers with docs/mlir.md's pipeline, leaving no TOSA or quant op.
#[track_caller]
fn assert_lowers(file: &Path, name: &str) {
    let o = mlir_opt(&[&format!("--pass-pipeline={LOWER}"), &file]);
    assert!(o.status.success(), "{name}: lowering fails:\n{}", stderr(&o));
    let lowered = String::from_utf8_lossy(&o.stdout);
    assert!(lowered.contains("linalg."), "{name}: nothing lowered to linalg");
    // A quantized result type keeps one quant.scast before the return.
    let left: Vec<&str> = lowered.lines().filter(|l| l.contains("= tosa.") || (l.contains("= quant.") && !l.contains("quant.scast"))).collect();
    assert!(left.is_empty(), "{name}: not lowered:\n{}", left.join("\n"));
}

#[test]
fn air_programs_covering_the_rest_of_the_op_table_export_lower_and_run() {
    // tests/data/mlir/air: activations, pools (ceil mode, padding counted),
    // gemm with alpha/beta/transposes, batched matmul, casts, concat,
    // log-softmax, transposed convolution, where/less/prelu/hard-swish,
    // expand, gather, requantize, batch norm, strided and reversed slices.
    let d = root().join("tests/data/mlir/air");
    let mut n = 0;
    for e in std::fs::read_dir(&d).unwrap() {
        let air = e.unwrap().path();
        let name = air.file_stem().unwrap().to_string_lossy().into_owned();
        let t = dir(&format!("air-{name}"));
        let mlir = t.join("m.mlir");
        ok(&aoc(&[&"export", &air, &"--format", &"mlir", &"-o", &mlir]), &format!("export {name}"));
        let o = mlir_opt(&[&mlir]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert_lowers(&mlir, &name);
        let want = t.join("want");
        ok(&aoc(&[&"run", &air, &"--random-inputs", &"--seed", &"5", &"--output-dir", &want]), "run .air");
        let o = aoc(&[&"run", &mlir, &"--random-inputs", &"--seed", &"5", &"--expected", &want, &"--atol", &"1e-6", &"--rtol", &"1e-5"]);
        ok(&o, &format!("{name}: .mlir against .air"));
        n += 1;
    }
    assert!(n >= 3);
}

/// Lowers an exported module to LLVM with MLIR's own passes and runs it
/// with `mlir-runner-22` on `inputs` (f32 tensors), printing every f32
/// result: MLIR's numbers for what aoc exported, an oracle independent of
/// aoc's interpreter. Returns the f32 results in order.
fn run_with_mlir(exported: &str, inputs: &[Tensor], results: &[aoc_ir::TensorType], t: &Path) -> Vec<Vec<f64>> {
    let module = exported.replacen("func.func @main(", "func.func @model(", 1);
    let results: Vec<String> = results.iter().map(|r| r.to_string()).collect();
    let mut driver = String::from("  func.func @main() {\n");
    let mut args = vec![];
    for (i, x) in inputs.iter().enumerate() {
        let vals: Vec<String> = x.to_f64().iter().map(|v| format!("{v:e}")).collect();
        let n = x.len();
        let dims: Vec<String> = x.ty.shape.iter().map(|d| d.to_string()).collect();
        driver.push_str(&format!("    %f{i} = arith.constant dense<[{}]> : tensor<{n}xf32>\n", vals.join(", ")));
        driver.push_str(&format!(
            "    %s{i} = tosa.const_shape {{values = dense<[{}]> : tensor<{}xindex>}} : () -> !tosa.shape<{}>\n",
            dims.join(", "),
            dims.len(),
            dims.len()
        ));
        driver.push_str(&format!("    %x{i} = tosa.reshape %f{i}, %s{i} : (tensor<{n}xf32>, !tosa.shape<{}>) -> {}\n", dims.len(), x.ty));
        args.push((format!("%x{i}"), x.ty.to_string()));
    }
    let arg_names: Vec<&str> = args.iter().map(|a| a.0.as_str()).collect();
    let arg_types: Vec<&str> = args.iter().map(|a| a.1.as_str()).collect();
    driver.push_str(&format!(
        "    %r:{} = call @model({}) : ({}) -> ({})\n",
        results.len(),
        arg_names.join(", "),
        arg_types.join(", "),
        results.join(", ")
    ));
    for (i, r) in results.iter().enumerate() {
        if r.ends_with("xf32>") {
            driver.push_str(&format!("    %u{i} = tensor.cast %r#{i} : {r} to tensor<*xf32>\n    call @printMemrefF32(%u{i}) : (tensor<*xf32>) -> ()\n"));
        }
    }
    driver.push_str("    return\n  }\n  func.func private @printMemrefF32(tensor<*xf32>)\n");
    let end = module.find("\n}\n").unwrap_or(module.rfind('}').unwrap());
    let text = format!("{}\n{driver}{}", &module[..end], &module[end..]);
    let src = t.join("run.mlir");
    std::fs::write(&src, text).unwrap();
    let tensors = t.join("lowered.mlir");
    let o = mlir_opt(&[&format!("--pass-pipeline={LOWER}"), &src, &"-o", &tensors]);
    assert!(o.status.success(), "lowering: {}", stderr(&o));
    let llvm = t.join("llvm.mlir");
    let passes = [
        "--one-shot-bufferize=bufferize-function-boundaries",
        "--buffer-deallocation-pipeline",
        "--convert-bufferization-to-memref",
        "--convert-linalg-to-loops",
        "--convert-scf-to-cf",
        "--expand-strided-metadata",
        "--lower-affine",
        "--convert-math-to-libm",
        "--convert-math-to-llvm",
        "--convert-arith-to-llvm",
        "--finalize-memref-to-llvm",
        "--convert-func-to-llvm",
        "--convert-cf-to-llvm",
        "--convert-index-to-llvm",
        "--reconcile-unrealized-casts",
    ];
    let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&tensors];
    for p in &passes {
        a.push(p);
    }
    a.push(&"-o");
    a.push(&llvm);
    let o = mlir_opt(&a);
    assert!(o.status.success(), "to LLVM: {}", stderr(&o));
    let libs = "-shared-libs=/usr/lib/llvm-22/lib/libmlir_runner_utils.so,/usr/lib/llvm-22/lib/libmlir_c_runner_utils.so";
    let o = Command::new("mlir-runner-22")
        .args([llvm.as_os_str(), "-e".as_ref(), "main".as_ref(), "-entry-point-result=void".as_ref(), libs.as_ref()])
        .output()
        .expect("mlir-runner-22 (mlir-22-tools) runs");
    assert!(o.status.success(), "mlir-runner-22: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    out.split("data =")
        .skip(1)
        .map(|block| {
            let block = block.split("Unranked").next().unwrap();
            block
                .split(|c: char| c == '[' || c == ']' || c == ',' || c.is_whitespace())
                .filter(|w| !w.is_empty())
                .map(|w| w.parse::<f64>().unwrap_or_else(|_| panic!("`{w}` in mlir-runner's output")))
                .collect()
        })
        .collect()
}

#[test]
fn mlir_itself_runs_the_exports_to_aocs_numbers() {
    // The exported TOSA, lowered by MLIR's passes and run by mlir-runner,
    // against aoc's interpreter on the same inputs: the float examples and
    // the air/ programs with f32 inputs (their f32 results).
    // (Not the Q/DQ ones: MLIR folds quant.dcast(quant.qcast(x)) to x, even
    // inside --lower-quant-ops, so MLIR runs them as the float model.)
    let mut cases: Vec<(String, PathBuf)> = examples().into_iter().filter(|(n, _)| !n.starts_with("qdq")).map(|(n, d)| (n, d.join("model.air"))).collect();
    for name in ["resize_modes", "strided_slices", "pad_modes", "grouped_conv", "activations_pools_gemm"] {
        cases.push((name.to_string(), root().join("tests/data/mlir/air").join(format!("{name}.air"))));
    }
    for (name, air) in cases {
        let t = dir(&format!("mlir-runs-{name}"));
        let mlir = t.join("m.mlir");
        ok(&aoc(&[&"export", &air, &"--format", &"mlir", &"-o", &mlir]), "export");
        // The same inputs for both: values in [-1, 1) from a fixed LCG.
        let loaded = aoc_compiler::driver::load_model(&air, &[]).unwrap_or_else(|e| panic!("{e}"));
        let f = loaded.module.entry().unwrap();
        let mut state = 7u64;
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"run", &air];
        let mut inputs = vec![];
        let mut paths = vec![];
        for (i, &p) in f.params().iter().enumerate() {
            let ty = f.ty(p).clone();
            assert_eq!(ty.elem, aoc_ir::ElemType::F32, "{name}: f32 inputs only");
            let vals: Vec<f64> = (0..ty.num_elements())
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
                })
                .collect();
            let x = Tensor::from_f64(ty, vals);
            let path = t.join(format!("in{i}.npy"));
            npy::write_npy(&path, &x).unwrap();
            inputs.push(x);
            paths.push(path);
        }
        for p in &paths {
            args.push(&"--input");
            args.push(p);
        }
        let want = t.join("want");
        args.push(&"--output-dir");
        args.push(&want);
        ok(&aoc(&args), "run");
        let got = run_with_mlir(&std::fs::read_to_string(&mlir).unwrap(), &inputs, &f.result_types, &t);
        // In the function's result order, as MLIR prints them.
        let want: Vec<Tensor> = (0..f.results().len())
            .map(|i| npy::read_npy(&want.join(format!("{}.npy", f.result_name(i)))).unwrap())
            .filter(|o| o.ty.elem == aoc_ir::ElemType::F32)
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: results printed");
        for (g, w) in got.iter().zip(&want) {
            let w = w.to_f64();
            assert_eq!(g.len(), w.len(), "{name}: result size");
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!((a - b).abs() <= 1e-4 + 1e-3 * b.abs(), "{name}[{i}]: MLIR computes {a}, aoc {b}");
            }
        }
    }
}

#[test]
fn every_example_round_trips_through_mlir_to_the_same_numbers() {
    for (name, d) in examples() {
        let t = dir(&format!("roundtrip-{name}"));
        let mlir = t.join("m.mlir");
        let back = t.join("back.air");
        ok(&aoc(&[&"export", &d.join("model.air"), &"--format", &"mlir", &"-o", &mlir]), "export");
        ok(&aoc(&[&"import", &mlir, &"-o", &back]), &format!("import {name}"));
        ok(&aoc(&[&"check", &back]), "check");
        let input = d.join("input.npy");
        let want = run_air(&d.join("model.air"), &input, &t.join("want"));
        let got = run_air(&back, &input, &t.join("got"));
        // Compositions (layer norm, batch norm, hard sigmoid) round
        // differently from the fused definitions; measured: at most 1e-6
        // absolute on the float models, 0 on the Q/DQ ones.
        assert_close(&got, &want, 1e-5, 1e-4, &name);
        // And `aoc run` reads the .mlir directly.
        let direct = run_air(&mlir, &input, &t.join("direct"));
        assert_close(&direct, &got, 0.0, 0.0, &format!("{name} (run .mlir)"));
    }
}

#[test]
fn every_filetest_case_round_trips_or_fails_cleanly() {
    // Each `// -----` case of tests/filetests: it exports to a module
    // mlir-opt-22 reads, which imports back and runs to the case's numbers,
    // or fails with exit 1 and a message (a parse error, or an op or type
    // the export does not take, named) — never an internal error or a
    // panic.
    let t = dir("filetests");
    let mut files = vec![];
    let mut stack = vec![root().join("tests/filetests")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "air") {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut exported, mut refused, mut ran) = (0, 0, 0);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, case) in text.split("// -----").enumerate() {
            if !case.contains("func @") {
                continue;
            }
            let parent = f.parent().and_then(|p| p.file_name()).unwrap_or_default().to_string_lossy();
            let name = format!("{parent}_{}_{i}", f.file_stem().unwrap().to_string_lossy());
            let air = t.join(format!("{name}.air"));
            std::fs::write(&air, case).unwrap();
            let mlir = t.join(format!("{name}.mlir"));
            let o = aoc(&[&"export", &air, &"--format", &"mlir", &"-o", &mlir]);
            let e = stderr(&o);
            assert!(!e.contains("internal error") && !e.contains("panicked"), "{}: case {i}:\n{e}", f.display());
            match o.status.code() {
                Some(0) => {
                    let o = mlir_opt(&[&mlir]);
                    assert!(o.status.success(), "{}: case {i}: mlir-opt-22 rejects the export:\n{}", f.display(), stderr(&o));
                    exported += 1;
                    // It comes back, and where the case runs, to the same numbers.
                    let back = t.join(format!("{name}.back.air"));
                    ok(&aoc(&[&"import", &mlir, &"-o", &back]), &format!("{name}: import of the export"));
                    let want = t.join(format!("{name}.want"));
                    if aoc(&[&"run", &air, &"--random-inputs", &"--seed", &"1", &"--output-dir", &want]).status.success() {
                        let o = aoc(&[&"run", &back, &"--random-inputs", &"--seed", &"1", &"--expected", &want, &"--atol", &"1e-5", &"--rtol", &"1e-4"]);
                        ok(&o, &format!("{name}: the round trip against the .air"));
                        ran += 1;
                    }
                }
                Some(1) => {
                    assert!(!mlir.exists(), "{name}: output written on failure");
                    refused += 1;
                }
                c => panic!("{}: case {i}: exit {c:?}\n{e}", f.display()),
            }
        }
    }
    assert!(exported >= 60 && ran >= 60, "only {exported} filetest cases exported ({refused} refused), {ran} ran");
}

#[test]
fn optimized_examples_export_fused_and_winograd_ops() {
    // After `aoc opt --passes default`: fused convolutions, matmuls and
    // gemms with epilogue regions (broadcasting ones too), attention,
    // Winograd convolutions (their weights transformed back), integer
    // quant.conv2d/gemm/add/... ops.
    let mut seen = String::new();
    for (name, d) in examples() {
        let t = dir(&format!("optimized-{name}"));
        let opt = t.join("opt.air");
        ok(&aoc(&[&"opt", &d.join("model.air"), &"--passes", &"default", &"-o", &opt]), "opt");
        seen.push_str(&std::fs::read_to_string(&opt).unwrap());
        let mlir = t.join("opt.mlir");
        ok(&aoc(&[&"export", &opt, &"--format", &"mlir", &"-o", &mlir]), &format!("export optimized {name}"));
        let o = mlir_opt(&[&mlir]);
        assert!(o.status.success(), "{name}: mlir-opt-22 rejects the optimized export:\n{}", stderr(&o));
        let input = d.join("input.npy");
        let want = run_air(&d.join("model.air"), &input, &t.join("want"));
        let got = run_air(&mlir, &input, &t.join("got"));
        // The optimizer may rename the result; compare by position.
        let got: Vec<(String, Tensor)> = got.into_iter().zip(&want).map(|((_, g), (n, _))| (n.clone(), g)).collect();
        assert_close(&got, &want, 1e-4, 1e-3, &format!("optimized {name}"));
    }
    for op in ["core.winograd_conv2d", "core.fused_conv2d", "core.fused_matmul", "core.attention", "quant.conv2d", "quant.gemm", "quant.add"] {
        assert!(seen.contains(op), "no optimized example has {op} any more; cover it another way");
    }
}

/// The programs in tests/data/mlir/`sub` with their inputs and numpy's
/// expected results beside them.
fn cases(sub: &str) -> Vec<(String, PathBuf)> {
    let d = root().join("tests/data/mlir").join(sub);
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "mlir").then(|| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 4, "tests/data/mlir/{sub} has {} programs", v.len());
    v
}

/// Runs `model` on case `name`'s inputs (tests/data/mlir/tosa, or own/
/// when the name is there) and compares with numpy's results.
fn run_case(model: &Path, name: &str, out: &Path) -> Output {
    let base = root().join("tests/data/mlir");
    let d = if base.join("own").join(name).exists() { base.join("own").join(name) } else { base.join("tosa").join(name) };
    let mut args: Vec<std::ffi::OsString> = vec!["run".into(), model.into()];
    for p in (0..).map(|i| d.join(format!("arg{i}.npy"))).take_while(|p| p.exists()) {
        args.push("--input".into());
        args.push(p.into());
    }
    let want = d.join("expected");
    args.extend(["--output-dir".into(), out.into(), "--expected".into(), want.into(), "--atol".into(), "1e-5".into(), "--rtol".into(), "1e-4".into()]);
    Command::new(env!("CARGO_BIN_EXE_aoc")).args(&args).output().unwrap()
}

#[test]
fn tosa_programs_from_mlirs_test_suite_run_to_numpys_numbers() {
    let all = cases("tosa");
    assert!(all.len() >= 30, "{} programs", all.len());
    // own/: slice, tile, transpose, tanh, gather, cast, rescale, table,
    // transpose_conv2d, which the upstream files above do not cover.
    for (name, path) in all.into_iter().chain(cases("own")) {
        let t = dir(&format!("tosa-{name}"));
        ok(&run_case(&path, &name, &t.join("out")), &format!("{name} vs numpy"));
        // Through an .air file too.
        let air = t.join("m.air");
        ok(&aoc(&[&"import", &path, &"-o", &air]), &format!("import {name}"));
        ok(&run_case(&air, &name, &t.join("out-air")), &format!("{name} (.air) vs numpy"));
    }
}

#[test]
fn aoc_compile_takes_mlir_files() {
    // (Dilated convolutions and depthwise ones with a channel multiplier have
    // no CPU kernel yet, so those cases stay out.)
    for name in ["matmul", "avg_pool2d_f32", "max_pool_padded", "slice_tile_transpose"] {
        let t = dir(&format!("compile-{name}"));
        let base = root().join("tests/data/mlir");
        let path = if base.join("own").join(name).exists() { base.join("own") } else { base.join("tosa") }.join(format!("{name}.mlir"));
        let art = t.join("m.aoc");
        ok(&aoc(&[&"compile", &path, &"--target", &"x86-64", &"-o", &art]), &format!("compile {name}"));
        ok(&run_case(&art, name, &t.join("out")), &format!("{name} artifact vs numpy"));
    }
}

#[test]
fn linalg_that_mlir_opt_makes_of_tosa_imports_and_runs() {
    let named = "builtin.module(func.func(tosa-to-linalg-named,canonicalize))";
    for name in ["matmul", "max_pool2d_f32", "max_pool_padded"] {
        let t = dir(&format!("linalg-{name}"));
        let src = root().join("tests/data/mlir/tosa").join(format!("{name}.mlir"));
        let o = mlir_opt(&[&format!("--pass-pipeline={named}"), &src]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(text.contains("linalg.") && !text.contains("tosa."), "{name}: not pure linalg:\n{text}");
        let path = t.join(format!("{name}.mlir"));
        std::fs::write(&path, text).unwrap();
        ok(&run_case(&path, name, &t.join("out")), &format!("linalg {name} vs numpy"));
    }
}

#[test]
fn linalg_convolutions_in_both_layouts_match_numpy() {
    // conv2d_f32's inputs (x NHWC, w OHWI, bias), through linalg's NHWC/HWCF
    // and NCHW/FCHW convolutions.
    let progs = [
        (
            "nhwc_hwcf",
            r#"func.func @f(%x: tensor<1x49x42x27xf32>, %w: tensor<28x3x3x27xf32>, %b: tensor<28xf32>) -> tensor<1x45x40x28xf32> {
  %wt = tosa.transpose %w {perms = array<i32: 1, 2, 3, 0>} : (tensor<28x3x3x27xf32>) -> tensor<3x3x27x28xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x45x40x28xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x45x40x28xf32>) -> tensor<1x45x40x28xf32>
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<[2, 1]> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %wt : tensor<1x49x42x27xf32>, tensor<3x3x27x28xf32>) outs(%f : tensor<1x45x40x28xf32>) -> tensor<1x45x40x28xf32>
  %s = tosa.const_shape {values = dense<[1, 1, 1, 28]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %br = tosa.reshape %b, %s : (tensor<28xf32>, !tosa.shape<4>) -> tensor<1x1x1x28xf32>
  %y = tosa.add %c, %br : (tensor<1x45x40x28xf32>, tensor<1x1x1x28xf32>) -> tensor<1x45x40x28xf32>
  return %y : tensor<1x45x40x28xf32>
}"#,
        ),
        (
            "nchw_fchw",
            r#"func.func @f(%x: tensor<1x49x42x27xf32>, %w: tensor<28x3x3x27xf32>, %b: tensor<28xf32>) -> tensor<1x45x40x28xf32> {
  %xt = tosa.transpose %x {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x49x42x27xf32>) -> tensor<1x27x49x42xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 3, 1, 2>} : (tensor<28x3x3x27xf32>) -> tensor<28x27x3x3xf32>
  %e = tensor.empty() : tensor<1x28x45x40xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<[2, 1]> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%xt, %wt : tensor<1x27x49x42xf32>, tensor<28x27x3x3xf32>) outs(%e : tensor<1x28x45x40xf32>) -> tensor<1x28x45x40xf32>
  %ct = tosa.transpose %c {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x28x45x40xf32>) -> tensor<1x45x40x28xf32>
  %s = tosa.const_shape {values = dense<[1, 1, 1, 28]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %br = tosa.reshape %b, %s : (tensor<28xf32>, !tosa.shape<4>) -> tensor<1x1x1x28xf32>
  %y = tosa.add %ct, %br : (tensor<1x45x40x28xf32>, tensor<1x1x1x28xf32>) -> tensor<1x45x40x28xf32>
  return %y : tensor<1x45x40x28xf32>
}"#,
        ),
    ];
    for (name, text) in progs {
        let t = dir(&format!("linalg-conv-{name}"));
        let path = t.join("m.mlir");
        std::fs::write(&path, text).unwrap();
        ok(&run_case(&path, "conv2d_f32", &t.join("out")), &format!("linalg conv {name} vs numpy"));
    }
}

#[test]
fn malformed_mlir_is_rejected_with_mlirs_diagnostic_and_location() {
    let t = dir("malformed");
    let cases = [
        // A syntax error on line 2.
        ("syntax.mlir", "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tosa.add %x, %x : (tensor<4xf32>, tensor<4xf32) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n", ":2:"),
        // An op the verifier rejects (result shape) on line 2.
        ("verify.mlir", "func.func @f(%x: tensor<4xf32>) -> tensor<5xf32> {\n  %0 = tosa.add %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>\n  return %0 : tensor<5xf32>\n}\n", ":2:"),
        // Not text at all.
        ("binary.mlir", "\u{0}\u{1}\u{2}garbage{{{", ":1:"),
    ];
    for (file, text, at) in cases {
        let path = t.join(file);
        std::fs::write(&path, text).unwrap();
        let out = t.join(format!("{file}.air"));
        let o = aoc(&[&"import", &path, &"-o", &out]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{file}: {e}");
        assert!(e.contains(&format!("{file}{at}")), "{file}: no location in:\n{e}");
        assert!(e.contains("is not valid MLIR"), "{file}: {e}");
        assert!(!e.contains("panicked"), "{file}: {e}");
        assert!(!out.exists(), "{file}: output written");
        let o = aoc(&[&"run", &path, &"--random-inputs"]);
        assert_eq!(o.status.code(), Some(1), "{file} (run): {}", stderr(&o));
    }
}

#[test]
fn damaged_mlir_never_panics() {
    // Every test program cut short at several points, and with a character
    // overwritten: aoc imports it (exit 0) or says why not (exit 1).
    let t = dir("damaged");
    let mut n = 0;
    for sub in ["tosa", "own"] {
        for (name, path) in cases(sub) {
            let text = std::fs::read(&path).unwrap();
            let mut variants: Vec<Vec<u8>> = [4, 3, 2].iter().map(|d| text[..text.len() * (d - 1) / d].to_vec()).collect();
            for at in [text.len() / 5, text.len() / 2, text.len() * 4 / 5] {
                for b in [b'}', b'%', b'<', b'0'] {
                    let mut v = text.clone();
                    v[at] = b;
                    variants.push(v);
                }
            }
            for (i, v) in variants.into_iter().enumerate() {
                let file = t.join(format!("{name}_{i}.mlir"));
                std::fs::write(&file, v).unwrap();
                let out = t.join(format!("{name}_{i}.air"));
                let o = aoc(&[&"import", &file, &"-o", &out]);
                let e = stderr(&o);
                assert!(matches!(o.status.code(), Some(0 | 1)), "{}: exit {:?}\n{e}", file.display(), o.status.code());
                assert!(!e.contains("panicked") && !e.contains("internal error"), "{}:\n{e}", file.display());
                assert_eq!(out.exists(), o.status.code() == Some(0), "{}", file.display());
                n += 1;
            }
        }
    }
    assert!(n > 500, "{n} variants");
}

#[test]
fn unsupported_ops_fail_at_their_file_line_col() {
    let d = root().join("tests/data/mlir/unsupported");
    let t = dir("unsupported");
    for (file, what) in [("clz.mlir", "tosa.clz"), ("bitwise_and.mlir", "tosa.bitwise_and"), ("conv2d_zero_point_args.mlir", "zero point")] {
        let out = t.join(format!("{file}.air"));
        let o = aoc(&[&"import", &d.join(file), &"-o", &out]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{file}: {e}");
        assert!(e.contains(&format!("{file}:2:")), "{file}: no file:line:col in:\n{e}");
        assert!(e.contains(what), "{file}: `{what}` not named in:\n{e}");
        assert!(!out.exists(), "{file}: output written");
    }
}

#[test]
fn export_of_an_unsupported_op_names_it_and_writes_nothing() {
    let t = dir("export-unsupported");
    let air = t.join("m.air");
    std::fs::write(
        &air,
        "func @main(%x: tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32> {\n  %y = core.resize %x {sizes = [1, 3, 8, 8], mode = \"cubic\"} : tensor<1x3x8x8xf32>\n  return %y : tensor<1x3x8x8xf32>\n}\n",
    )
    .unwrap();
    let out = t.join("m.mlir");
    let o = aoc(&[&"export", &air, &"--format", &"mlir", &"-o", &out]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("m.air:2:3: core.resize"), "{e}");
    assert!(!out.exists());
    let o = aoc(&[&"export", &air, &"--format", &"onnx2", &"-o", &out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--format"), "{}", stderr(&o));
}

#[test]
fn large_weights_go_to_dense_resource_blobs_and_come_back() {
    let (name, d) = examples().into_iter().find(|(n, _)| n == "resnet_block").unwrap();
    let t = dir("resources");
    let mlir = t.join("m.mlir");
    ok(&aoc(&[&"export", &d.join("model.air"), &"--format", &"mlir", &"--dense-resource-above", &"256", &"-o", &mlir]), "export");
    let text = std::fs::read_to_string(&mlir).unwrap();
    assert!(text.contains("dense_resource<"), "no dense_resource");
    assert!(text.contains("dialect_resources"), "no resource section");
    let o = mlir_opt(&[&mlir]);
    assert!(o.status.success(), "{}", stderr(&o));
    let input = d.join("input.npy");
    let want = run_air(&d.join("model.air"), &input, &t.join("want"));
    let got = run_air(&mlir, &input, &t.join("got"));
    assert_close(&got, &want, 1e-4, 1e-4, &name);
}

#[test]
fn quantized_types_export_per_tensor_and_per_axis() {
    let t = dir("quant-types");
    let air = t.join("q.air");
    std::fs::write(
        &air,
        "func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n  %w = const dense<[[1, -2, 3], [4, 5, -6]]> : tensor<2x3x!quant.uniform<i8:f32:1, {0.5, 0.25:3, 0.125}>>\n  %q = quant.quantize %x : tensor<2x3x!quant.uniform<u8:f32, 0.0157:7>>\n  %a = quant.dequantize %q : tensor<2x3xf32>\n  %b = quant.dequantize %w : tensor<2x3xf32>\n  %y = core.add %a, %b : tensor<2x3xf32>\n  return %y : tensor<2x3xf32>\n}\n",
    )
    .unwrap();
    let mlir = t.join("q.mlir");
    ok(&aoc(&[&"export", &air, &"--format", &"mlir", &"-o", &mlir]), "export");
    let text = std::fs::read_to_string(&mlir).unwrap();
    assert!(text.contains("!quant.uniform<u8:f32, 1.570000e-02:7>"), "{text}");
    assert!(text.contains("!quant.uniform<i8:f32:1, {5.000000e-01,2.500000e-01:3,1.250000e-01}>"), "{text}");
    assert!(text.contains("quant.qcast") && text.contains("quant.dcast") && text.contains("quant.scast"), "{text}");
    assert!(mlir_opt(&[&mlir]).status.success());
    let back = t.join("back.air");
    ok(&aoc(&[&"import", &mlir, &"-o", &back]), "import");
    let text = std::fs::read_to_string(&back).unwrap();
    assert!(text.contains("!quant.uniform<i8:f32:1, {0.5, 0.25:3, 0.125}>"), "{text}");
    assert!(text.contains("!quant.uniform<u8:f32, 0.0157:7>"), "{text}");
    let o1 = aoc(&[&"run", &air, &"--random-inputs", &"--output-dir", &t.join("a")]);
    ok(&o1, "run");
    let o2 = aoc(&[&"run", &back, &"--random-inputs", &"--output-dir", &t.join("b")]);
    ok(&o2, "run back");
    assert_close(&outputs(&t.join("b")), &outputs(&t.join("a")), 0.0, 0.0, "quant");
}
