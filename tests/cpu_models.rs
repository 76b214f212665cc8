//! End-to-end tests of the x86-64 backend and the CPU runtime: every
//! example model and the third-party OCR models are compiled for
//! `x86-64` (baseline code) and for this CPU's best level, loaded by the
//! runtime from the artifact bytes, run, and compared with the reference
//! interpreter on the same optimized module (and, for the examples, with
//! ONNX Runtime's outputs in `expected/`).
//!
//! Tolerance: 1e-3 of max(1, max|expected|), the issue's bar; quantized
//! models must match the interpreter exactly (the integer ops run on the
//! same arithmetic).
//!
//! The OCR models come from `$AOC_MODELS` (default `build/models`, made by
//! `make real-models`); when absent the case passes with a printed reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use aoc_backend_x86::compile::{compile, compile_with};
use aoc_passes::lower::LowerOptions;
use aoc_backend_x86::pointwise::X86Level;
use aoc_compiler::cpu::CPU_PIPELINE;
use aoc_compiler::driver::load_model;
use aoc_compiler::npy::read_npy;
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use aoc_runtime::artifact::Artifact;
use aoc_runtime::exec::{Session, SessionOptions};
use libtest_mimic::{Arguments, Failed, Trial};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn levels() -> Vec<X86Level> {
    let mut v = vec![X86Level::Baseline];
    if X86Level::host() != X86Level::Baseline {
        v.push(X86Level::host());
    }
    v
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![];
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace().join("examples"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    for d in dirs.into_iter().filter(|d| d.join("model.air").exists()) {
        let name = d.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        for level in levels() {
            let d = d.clone();
            trials.push(Trial::test(format!("example_{name}_{}", level.target_name()), move || {
                run_example(&d, level)
            }));
        }
    }
    for (key, file, input, shape) in real_models() {
        trials.push(Trial::test(format!("ocr_{key}_{}", X86Level::host().target_name()), move || {
            run_real(&file, &input, &shape)
        }));
    }
    trials.push(Trial::test("one_session_runs_from_several_threads", concurrent_runs));
    trials.push(Trial::test("fused_attention_step_on_the_cpu", fused_attention));
    trials.push(Trial::test("gelu_in_the_gemm_epilogue", gemm_gelu));
    trials.push(Trial::test("clips_in_convolution_and_gemm_steps", step_clips));
    trials.push(Trial::test("integer_convolution_step_on_the_cpu", integer_convolution));
    trials.push(Trial::test("quant_add_runs_on_the_qadd_kernel", quant_add_native));
    trials.push(Trial::test("squeeze_excitation_runs_without_copies_or_wide_epilogues", squeeze_excitation));
    for level in levels() {
        trials.push(Trial::test(format!("quantized_ops_without_integer_kernels_run_natively_{}", level.target_name()), move || {
            quant_without_kernels(level)
        }));
        trials.push(Trial::test(format!("int8_add_and_max_pool_steps_match_the_interpreter_{}", level.target_name()), move || {
            int8_elementwise(level)
        }));
        trials.push(Trial::test(format!("int8_average_pools_match_the_interpreter_{}", level.target_name()), move || {
            int8_avg_pool(level)
        }));
        trials.push(Trial::test(format!("int8_nearest_upsamples_gather_bytes_{}", level.target_name()), move || {
            int8_upsample(level)
        }));
        trials.push(Trial::test(format!("int8_attention_products_match_the_interpreter_{}", level.target_name()), move || {
            int8_attention(level)
        }));
        trials.push(Trial::test(format!("crossed_clip_bounds_give_the_upper_bound_{}", level.target_name()), move || {
            crossed_clips(level)
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// (key, file, input name, shape) of the third-party models.
fn real_models() -> Vec<(String, String, String, Vec<usize>)> {
    let py = std::env::var_os("AOC_PYTHON").map_or_else(|| workspace().join(".venv/bin/python"), PathBuf::from);
    let out = Command::new(py).arg(workspace().join("tests/scripts/real_models.py")).arg("list").output();
    let Ok(out) = out else { return vec![] };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let shape = f.get(3)?.split('x').map(|d| d.parse().ok()).collect::<Option<Vec<usize>>>()?;
            Some((f[0].to_string(), f[1].to_string(), f[2].to_string(), shape))
        })
        .collect()
}

/// Optimizes the model at `path` with the CPU pipeline; returns the
/// interpreter's outputs on `inputs` and the runtime's outputs of the
/// compiled artifact.
fn compile_and_run(
    path: &Path,
    shapes: &[(String, Vec<usize>)],
    inputs: Vec<Tensor>,
    level: X86Level,
) -> Result<(Vec<Tensor>, Vec<Tensor>), Failed> {
    let (want, got, _) = compile_and_run_with(path, shapes, inputs, level, &LowerOptions::CPU)?;
    Ok((want, got))
}

/// Also returns the plan's step kinds.
fn compile_and_run_with(
    path: &Path,
    shapes: &[(String, Vec<usize>)],
    inputs: Vec<Tensor>,
    level: X86Level,
    opts: &LowerOptions,
) -> Result<(Vec<Tensor>, Vec<Tensor>, Vec<String>), Failed> {
    let mut loaded = load_model(path, shapes)?;
    let config = aoc_compiler::opt::OptConfig { passes: Some(CPU_PIPELINE.to_string()), ..Default::default() };
    aoc_compiler::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None)?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let want = aoc_ir::interp::run(func, inputs.clone(), loaded.weights.as_ref()).map_err(|d| d.message)?;
    let out = compile_with(func, loaded.weights.as_ref(), level, opts).map_err(|d| d.message)?;
    let kinds: Vec<String> = out.report.steps.iter().flat_map(|(k, n)| std::iter::repeat_n(k.clone(), *n)).collect();
    let artifact = Artifact::from_bytes(&out.artifact).map_err(|e| e.to_string())?;
    let session = Session::from_artifact(artifact, &SessionOptions { threads: 2 })?;
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|t| aoc_ir::bytes::encode(t.ty.elem.storage(), &t.data)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let outs = session.run(&refs)?;
    let got = want
        .iter()
        .zip(outs)
        .map(|(w, b)| {
            let data = aoc_ir::bytes::decode(w.ty.elem.storage(), &b)?;
            Ok(Tensor { ty: w.ty.clone(), data })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((want, got, kinds))
}

/// Compiles and runs `.air` text (written to a scratch file named for
/// `name` and `level`) against the interpreter; also returns the step kinds.
fn run_air_text(name: &str, text: &str, inputs: Vec<Tensor>, level: X86Level) -> Result<(Vec<Tensor>, Vec<Tensor>, Vec<String>), Failed> {
    let dir = std::env::temp_dir().join(format!("aoc-{name}-{}-{}", std::process::id(), level.target_name()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.air"));
    std::fs::write(&path, text)?;
    let out = compile_and_run_with(&path, &[], inputs, level, &LowerOptions::CPU);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// The compiled outputs equal the interpreter's bit for bit.
fn bit_exact(want: &[Tensor], got: &[Tensor]) -> Result<(), Failed> {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let (wv, gv) = (w.to_f64(), g.to_f64());
        if let Some(j) = (0..wv.len()).find(|&j| wv[j].to_bits() != gv[j].to_bits()) {
            return Err(format!("output {i}[{j}]: {} compiled, {} interpreted", gv[j], wv[j]).into());
        }
    }
    Ok(())
}

/// Largest difference scaled by max(1, max|want|).
fn rel_err(want: &Tensor, got: &Tensor) -> f64 {
    let (w, g) = (want.to_f64(), got.to_f64());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    w.iter().zip(&g).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale
}

fn close(what: &str, want: &[Tensor], got: &[Tensor], tol: f64) -> Result<(), Failed> {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.ty.shape != g.ty.shape {
            return Err(format!("{what}: output {i} has shape {:?}, expected {:?}", g.ty.shape, w.ty.shape).into());
        }
        let e = rel_err(w, g);
        if e.is_nan() || e > tol {
            return Err(format!("{what}: output {i} differs by {e:.3e} (tolerance {tol:.0e})").into());
        }
    }
    Ok(())
}

fn run_example(dir: &Path, level: X86Level) -> Result<(), Failed> {
    let input = read_npy(&dir.join("input.npy"))?;
    let loaded = load_model(&dir.join("model.air"), &[])?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let input = aoc_compiler::npy::conform(input, func.ty(func.params()[0]))?;
    let (want, got) = compile_and_run(&dir.join("model.air"), &[], vec![input], level)?;
    let quantized = std::fs::read_to_string(dir.join("model.air"))?.contains("quant.");
    close("runtime vs interpreter", &want, &got, if quantized { 0.0 } else { 1e-3 })?;
    // And against ONNX Runtime (the first result of each example).
    let mut expected: Vec<PathBuf> = std::fs::read_dir(dir.join("expected"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    expected.sort();
    if let Some(e) = expected.first() {
        let e = read_npy(e)?;
        // Quantized models: one quantization step of ONNX Runtime, as in onnx_models.rs.
        let tol = if quantized { 0.1 } else { 1e-3 };
        close("runtime vs ONNX Runtime", &[e], &got[..1], tol)?;
    }
    Ok(())
}

fn run_real(file: &str, input: &str, shape: &[usize]) -> Result<(), Failed> {
    let dir = std::env::var_os("AOC_MODELS").map_or_else(|| workspace().join("build/models"), PathBuf::from);
    let path = dir.join(file);
    if !path.exists() {
        println!("skipped: {} is absent (run `make real-models`)", path.display());
        return Ok(());
    }
    let n: usize = shape.iter().product();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect();
    let ty = aoc_ir::types::TensorType::new(shape.to_vec(), aoc_ir::types::Scalar::F32);
    let x = Tensor::from_f64(ty, vals);
    let (want, got) =
        compile_and_run(&path, &[(input.to_string(), shape.to_vec())], vec![x], X86Level::host())?;
    close("runtime vs interpreter", &want, &got, 1e-3)
}

/// Several threads run one session at once (each run takes its own arena);
/// every run must give the single-threaded answer bit for bit.
fn concurrent_runs() -> Result<(), Failed> {
    let dir = workspace().join("examples/mobilenet_block");
    let mut loaded = load_model(&dir.join("model.air"), &[])?;
    let config = aoc_compiler::opt::OptConfig { passes: Some(CPU_PIPELINE.to_string()), ..Default::default() };
    aoc_compiler::opt::optimize(&mut loaded.module, loaded.weights.as_ref(), &config, None)?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let out = compile(func, loaded.weights.as_ref(), X86Level::host()).map_err(|d| d.message)?;
    let session = Session::from_artifact(Artifact::from_bytes(&out.artifact)?, &SessionOptions { threads: 2 })?;
    let n: u64 = session.inputs()[0].shape.iter().product();
    let inputs: Vec<Vec<u8>> = (0..4)
        .map(|t| (0..n).flat_map(|i| (((i * 7 + t * 13) % 17) as f32 / 17.0 - 0.5).to_le_bytes()).collect())
        .collect();
    let alone: Vec<Vec<Vec<u8>>> = inputs.iter().map(|x| session.run(&[x.as_slice()])).collect::<Result<_, _>>()?;
    let together: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = inputs
            .iter()
            .map(|x| {
                let session = &session;
                s.spawn(move || (0..5).map(|_| session.run(&[x.as_slice()])).last().expect("five runs"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("no panic")).collect::<Result<Vec<_>, _>>()
    })?;
    if alone != together {
        return Err("concurrent runs of one session differ from runs alone".into());
    }
    if alone[0] == alone[1] {
        return Err("different inputs gave the same output: the test cannot tell runs apart".into());
    }
    Ok(())
}

/// An example's model and input, conformed to its parameter.
fn example(name: &str) -> Result<(PathBuf, Tensor), Failed> {
    let dir = workspace().join("examples").join(name);
    let loaded = load_model(&dir.join("model.air"), &[])?;
    let func = loaded.module.entry().ok_or("no entry function")?;
    let input = aoc_compiler::npy::conform(read_npy(&dir.join("input.npy"))?, func.ty(func.params()[0]))?;
    Ok((dir.join("model.air"), input))
}

/// Multi-head attention as BERT writes it: heads split by reshape and
/// transpose, scaled, masked per key, merged back.
const HEADS_AIR: &str = r#"
func @main(%x: tensor<2x8x32xf32>, %mask: tensor<2x1x1x8xf32>) -> tensor<2x8x32xf32> {
  %q0 = core.reshape %x {shape = [2, 8, 4, 8]} : tensor<2x8x4x8xf32>
  %q = core.transpose %q0 {perm = [0, 2, 1, 3]} : tensor<2x4x8x8xf32>
  %kt = core.transpose %q0 {perm = [0, 2, 3, 1]} : tensor<2x4x8x8xf32>
  %s = const dense<0.35> : tensor<f32>
  %o = core.attention %q, %kt, %q, %s, %mask {epilogue = "mul; add"} : tensor<2x4x8x8xf32>
  %o2 = core.transpose %o {perm = [0, 2, 1, 3]} : tensor<2x8x4x8xf32>
  %y = core.reshape %o2 {shape = [2, 8, 32]} : tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
"#;

fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut state = seed | 1;
    let n: usize = shape.iter().product();
    let vals = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_f64(aoc_ir::types::TensorType::new(shape.to_vec(), aoc_ir::types::Scalar::F32), vals)
}

/// The fused attention lowering (one strided `attention` step instead of
/// transposes, matmuls and a softmax, the CPU's and the GPU's default) run
/// by the CPU runtime against the unfused lowering: the plan has the step,
/// the head transposes cost no copies, and the results match the
/// interpreter (BERT's form with a mask, and the PyTorch encoder layer).
fn fused_attention() -> Result<(), Failed> {
    let opts = LowerOptions::CPU;
    let unfused = LowerOptions { fused_attention_max_dim: 0, ..LowerOptions::CPU };
    let count = |ks: &[String], k: &str| ks.iter().filter(|x| *x == k).count();
    let dir = std::env::temp_dir().join(format!("aoc-attn-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("heads.air");
    std::fs::write(&path, HEADS_AIR)?;
    let inputs = vec![random(&[2, 8, 32], 7), random(&[2, 1, 1, 8], 11)];
    let (want, got, kinds) = compile_and_run_with(&path, &[], inputs.clone(), X86Level::host(), &opts)?;
    let (_, _, plain) = compile_and_run_with(&path, &[], inputs, X86Level::host(), &unfused)?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("copies: {} fused, {} unfused", count(&kinds, "copy"), count(&plain, "copy"));
    if count(&kinds, "attention") != 1 || count(&kinds, "copy") >= count(&plain, "copy") {
        return Err(format!("expected one attention step and fewer copies: {kinds:?} against {plain:?}").into());
    }
    close("fused attention vs interpreter", &want, &got, 1e-3)?;
    let (path, input) = example("encoder_layer")?;
    let (want, got, kinds) = compile_and_run_with(&path, &[], vec![input], X86Level::host(), &opts)?;
    if count(&kinds, "attention") != 1 {
        return Err(format!("expected one attention step: {kinds:?}").into());
    }
    close("encoder layer, fused attention vs interpreter", &want, &got, 1e-3)
}

/// A dense layer with GELU (`x·W + b`, then GELU): after fusion one
/// `fused_matmul {epilogue = "add; gelu"}`, which the CPU lowers to one GEMM
/// applying the bias and the GELU to each tile, no pointwise step. Its
/// results are bit for bit those of the lowering with a separate GELU step
/// and within 1e-3 of the interpreter; the tanh form stays a pointwise
/// step.
fn gemm_gelu() -> Result<(), Failed> {
    let (k, n) = (40, 52);
    let w = random(&[k, n], 3).to_f64();
    let b = random(&[n], 5).to_f64();
    let row = |v: &[f64]| v.iter().map(|x| format!("{x:.6}")).collect::<Vec<_>>().join(", ");
    let w_rows: Vec<String> = w.chunks(n).map(|r| format!("[{}]", row(r))).collect();
    let air = |approx: &str| {
        format!(
            "func @main(%x: tensor<2x19x{k}xf32>) -> tensor<2x19x{n}xf32> {{\n\
             %w = const dense<[{}]> : tensor<{k}x{n}xf32>\n\
             %b = const dense<[{}]> : tensor<{n}xf32>\n\
             %h = core.matmul %x, %w : tensor<2x19x{n}xf32>\n\
             %hb = core.add %h, %b : tensor<2x19x{n}xf32>\n\
             %y = core.gelu %hb {{approximate = \"{approx}\"}} : tensor<2x19x{n}xf32>\n\
             return %y : tensor<2x19x{n}xf32>\n}}\n",
            w_rows.join(", "),
            row(&b)
        )
    };
    let dir = std::env::temp_dir().join(format!("aoc-gelu-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let separate = LowerOptions { step_activations: false, ..LowerOptions::CPU };
    let count = |ks: &[String], kind: &str| ks.iter().filter(|x| *x == kind).count();
    let inputs = vec![random(&[2, 19, k], 7)];
    for approx in ["none", "tanh"] {
        let path = dir.join(format!("dense_{approx}.air"));
        std::fs::write(&path, air(approx))?;
        let (want, got, kinds) = compile_and_run_with(&path, &[], inputs.clone(), X86Level::host(), &LowerOptions::CPU)?;
        let (_, got_sep, kinds_sep) = compile_and_run_with(&path, &[], inputs.clone(), X86Level::host(), &separate)?;
        close(&format!("dense + gelu ({approx}) vs interpreter"), &want, &got, 1e-3)?;
        let fused = approx == "none";
        if count(&kinds, "gemm") != 1 || count(&kinds, "pointwise") != usize::from(!fused) || count(&kinds_sep, "pointwise") != 1 {
            return Err(format!("{approx}: unexpected plans {kinds:?} and {kinds_sep:?}").into());
        }
        let (a, b) = (got[0].to_f64(), got_sep[0].to_f64());
        let same = a.iter().zip(&b).all(|(x, y)| (*x as f32).to_bits() == (*y as f32).to_bits());
        if !same {
            return Err(format!("{approx}: the GEMM's GELU differs from the pointwise step's").into());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A nested `dense<...>` literal of `shape` holding `v` (row major).
fn literal(v: &[f64], shape: &[usize]) -> String {
    match shape {
        [] | [_] => format!("[{}]", v.iter().map(|x| format!("{x:.6}")).collect::<Vec<_>>().join(", ")),
        [n, rest @ ..] => {
            let inner: Vec<String> = v.chunks(v.len() / n).map(|c| literal(c, rest)).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// A squeeze-and-excitation block (`x * sigmoid(conv(mean_hw(x)))` over
/// an NHWC convolution's output) and reductions of that output over its
/// H and W without keepdims and over C: the reductions read the NHWC
/// activation in place (the only copies are the input's NCHW → NHWC and
/// the product's way back; the `1×1×6×6` sum is written as the output
/// directly, its NHWC and NCHW bytes being the same), the
/// gate's sigmoid runs on the 8-channel gate, not fused into a pointwise
/// step over the whole image (one pointwise step of 8 values, one of the
/// product), and the results match the interpreter.
fn squeeze_excitation() -> Result<(), Failed> {
    let w1 = random(&[8, 8, 3, 3], 11).to_f64();
    let w2 = random(&[8, 8, 1, 1], 13).to_f64();
    let air = format!(
        "func @main(%x: tensor<1x8x6x6xf32>) -> (tensor<1x8x6x6xf32>, tensor<1x8xf32>, tensor<1x1x6x6xf32>) {{\n\
         %w1 = const dense<{}> : tensor<8x8x3x3xf32>\n\
         %w2 = const dense<{}> : tensor<8x8x1x1xf32>\n\
         %c = core.conv2d %x, %w1 {{pads = [1, 1, 1, 1]}} : tensor<1x8x6x6xf32>\n\
         %r = core.relu %c : tensor<1x8x6x6xf32>\n\
         %m = core.reduce_mean %r {{axes = [2, 3]}} : tensor<1x8x1x1xf32>\n\
         %s = core.conv2d %m, %w2 : tensor<1x8x1x1xf32>\n\
         %g = core.sigmoid %s : tensor<1x8x1x1xf32>\n\
         %y = core.mul %r, %g : tensor<1x8x6x6xf32>\n\
         %p = core.reduce_max %r {{axes = [-2, -1], keepdims = false}} : tensor<1x8xf32>\n\
         %q = core.reduce_sum %r {{axes = [1]}} : tensor<1x1x6x6xf32>\n\
         return %y, %p, %q : tensor<1x8x6x6xf32>, tensor<1x8xf32>, tensor<1x1x6x6xf32>\n}}\n",
        literal(&w1, &[8, 8, 3, 3]),
        literal(&w2, &[8, 8, 1, 1]),
    );
    let (want, got, kinds) = run_air_text("squeeze_excitation", &air, vec![random(&[1, 8, 6, 6], 17)], X86Level::host())?;
    close("squeeze-and-excitation vs interpreter", &want, &got, 1e-5)?;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    if count("copy") != 2 || count("reduce") != 3 || count("pointwise") != 2 {
        return Err(format!("unexpected plan {kinds:?}").into());
    }
    Ok(())
}

/// ReLU6-style clips after a 1×1 convolution, a depthwise convolution and
/// a dense layer (each with its bias): the CPU lowers each to one step that
/// applies the clip itself, no pointwise step, with results bit for bit
/// those of the lowering with separate clip steps and within 1e-3 of the
/// interpreter.
fn step_clips() -> Result<(), Failed> {
    let dense = |shape: &[usize], seed: u64| {
        let v = random(shape, seed).to_f64();
        let items: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
        format!("dense<[{}]> : tensor<{}xf32>", items.join(", "), shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"))
    };
    // Flat literals need a rank-1 tensor: reshape them to the weights' shapes.
    let air = format!(
        "func @main(%x: tensor<1x8x9x10xf32>) -> tensor<1x90x5xf32> {{\n\
         %w0 = const {} \n\
         %w = core.reshape %w0 {{shape = [12, 8, 1, 1]}} : tensor<12x8x1x1xf32>\n\
         %b = const {}\n\
         %c = core.conv2d %x, %w, %b : tensor<1x12x9x10xf32>\n\
         %y = core.clip %c {{min = 0.0, max = 0.5}} : tensor<1x12x9x10xf32>\n\
         %dw0 = const {}\n\
         %dw = core.reshape %dw0 {{shape = [12, 1, 3, 3]}} : tensor<12x1x3x3xf32>\n\
         %db = const {}\n\
         %d = core.conv2d %y, %dw, %db {{pads = [1, 1, 1, 1], groups = 12}} : tensor<1x12x9x10xf32>\n\
         %z = core.clip %d {{min = -0.2, max = 0.3}} : tensor<1x12x9x10xf32>\n\
         %t = core.transpose %z {{perm = [0, 2, 3, 1]}} : tensor<1x9x10x12xf32>\n\
         %r = core.reshape %t {{shape = [1, 90, 12]}} : tensor<1x90x12xf32>\n\
         %fw0 = const {}\n\
         %fw = core.reshape %fw0 {{shape = [12, 5]}} : tensor<12x5xf32>\n\
         %fb = const {}\n\
         %h = core.matmul %r, %fw : tensor<1x90x5xf32>\n\
         %hb = core.add %h, %fb : tensor<1x90x5xf32>\n\
         %o = core.clip %hb {{min = -0.1, max = 0.1}} : tensor<1x90x5xf32>\n\
         return %o : tensor<1x90x5xf32>\n}}\n",
        dense(&[12 * 8], 3),
        dense(&[12], 5),
        dense(&[12 * 9], 7),
        dense(&[12], 9),
        dense(&[12 * 5], 11),
        dense(&[5], 13),
    );
    let dir = std::env::temp_dir().join(format!("aoc-clip-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("clips.air");
    std::fs::write(&path, air)?;
    let separate = LowerOptions { step_activations: false, ..LowerOptions::CPU };
    let inputs = vec![random(&[1, 8, 9, 10], 17)];
    let (want, got, kinds) = compile_and_run_with(&path, &[], inputs.clone(), X86Level::host(), &LowerOptions::CPU)?;
    let (_, got_sep, kinds_sep) = compile_and_run_with(&path, &[], inputs, X86Level::host(), &separate)?;
    let _ = std::fs::remove_dir_all(&dir);
    close("clips vs interpreter", &want, &got, 1e-3)?;
    let count = |ks: &[String], kind: &str| ks.iter().filter(|x| *x == kind).count();
    if count(&kinds, "pointwise") != 0 || count(&kinds_sep, "pointwise") != 3 {
        return Err(format!("unexpected plans {kinds:?} and {kinds_sep:?}").into());
    }
    let (a, b) = (got[0].to_f64(), got_sep[0].to_f64());
    if !a.iter().zip(&b).all(|(x, y)| (*x as f32).to_bits() == (*y as f32).to_bits()) {
        return Err("the steps' clips differ from the pointwise steps'".into());
    }
    // Both bounds bind somewhere, so the clips are exercised.
    let at = |b: f32| a.iter().filter(|&&v| v as f32 == b).count();
    if at(0.1) == 0 || at(-0.1) == 0 || at(0.1) + at(-0.1) == a.len() {
        return Err("the dense layer's clip binds at neither bound, or everywhere".into());
    }
    Ok(())
}

/// The integer lowering of `quant.conv2d` / `quant.gemm` (the CPU's and
/// the GPU's) run by the CPU runtime against the interpreter's float
/// definition of those ops.
/// Integer accumulation differs from the float sum only by rounding, which
/// can move a quantized activation by one step; the bar is two steps of the
/// output's scale (the model's last dequantize), relative as elsewhere.
fn integer_convolution() -> Result<(), Failed> {
    let (path, input) = example("qdq_cnn")?;
    let (want, got, kinds) = compile_and_run_with(&path, &[], vec![input], X86Level::host(), &LowerOptions::CPU)?;
    if !kinds.iter().any(|k| k == "qconv2d") {
        return Err(format!("no qconv2d step in the plan: {kinds:?}").into());
    }
    let e = rel_err(&want[0], &got[0]);
    println!("integer path vs interpreter: {e:.3e} of max(1, max|y|)");
    close("integer convolution vs interpreter", &want, &got, 2e-2)
}

/// `quant.add` runs on the 8-bit `qadd` kernel, not a reference step or
/// generated float code (the qdq_cnn example has two; its agreement with
/// the interpreter is `example_qdq_cnn_*`'s check).
fn quant_add_native() -> Result<(), Failed> {
    let (path, input) = example("qdq_cnn")?;
    let (want, got, kinds) = compile_and_run_with(&path, &[], vec![input], X86Level::host(), &LowerOptions::CPU)?;
    if kinds.iter().filter(|k| *k == "qadd").count() < 2 || kinds.iter().any(|k| k == "reference") {
        return Err(format!("expected two qadd steps and no reference step: {kinds:?}").into());
    }
    close("qdq_cnn with qadd steps vs interpreter", &want, &got, 2e-2)
}

/// The 8-bit elementwise steps against the interpreter, exactly: a
/// `quant.add` of u8 and i8 operands with a fused relu (`qadd`, 245
/// elements: vector blocks and a scalar tail), one into i8 with an upper
/// clip, one whose first operand repeats along the second (a 7×7 "bias",
/// `qadd` with a broadcast row), one of a short constant on the last axis
/// (tiled into a longer row for `qadd`), one that broadcasts along channels (no
/// `qadd`: generated code), and max pools of u8 and i8 values
/// (`qmax_pool`, padding and a ceil-mode window), and global average
/// pools of u8 and i8 values with clamps (`qglobal_avg_pool`).
const INT8_ELEMENTWISE_AIR: &str = r#"func @main(%x: tensor<1x5x7x7xf32>, %y: tensor<1x5x7x7xf32>, %b: tensor<1x5x1x1xf32>, %c: tensor<7x7xf32>) -> (tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>, tensor<1x5x1x1xf32>, tensor<1x5x1x1xf32>) {
  %qx = quant.quantize %x : tensor<1x5x7x7x!quant.uniform<u8:f32, 0.031:117>>
  %qy = quant.quantize %y : tensor<1x5x7x7x!quant.uniform<i8:f32, 0.027:-3>>
  %qb = quant.quantize %b : tensor<1x5x1x1x!quant.uniform<i8:f32, 0.05>>
  %qc = quant.quantize %c : tensor<7x7x!quant.uniform<u8:f32, 0.01:100>>
  %s = quant.add %qx, %qy {clip_min = 0.0} : tensor<1x5x7x7x!quant.uniform<u8:f32, 0.04:0>>
  %t = quant.add %qy, %qx {clip_max = 1.5} : tensor<1x5x7x7x!quant.uniform<i8:f32, 0.045:5>>
  %u = quant.add %qx, %qb : tensor<1x5x7x7x!quant.uniform<u8:f32, 0.06:128>>
  %v = quant.add %qc, %qy : tensor<1x5x7x7x!quant.uniform<i8:f32, 0.03:0>>
  %k = const dense<[3, -7, 12, 5, 0, -1, 9]> : tensor<7x!quant.uniform<i8:f32, 0.05>>
  %w = quant.add %qx, %k : tensor<1x5x7x7x!quant.uniform<u8:f32, 0.05:100>>
  %p = core.max_pool2d %qx {kernel = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]} : tensor<1x5x4x4x!quant.uniform<u8:f32, 0.031:117>>
  %r = core.max_pool2d %qy {kernel = [2, 2], strides = [2, 2], ceil_mode = true} : tensor<1x5x4x4x!quant.uniform<i8:f32, 0.027:-3>>
  %sd = quant.dequantize %s : tensor<1x5x7x7xf32>
  %td = quant.dequantize %t : tensor<1x5x7x7xf32>
  %ud = quant.dequantize %u : tensor<1x5x7x7xf32>
  %vd = quant.dequantize %v : tensor<1x5x7x7xf32>
  %wd = quant.dequantize %w : tensor<1x5x7x7xf32>
  %pd = quant.dequantize %p : tensor<1x5x4x4xf32>
  %rd = quant.dequantize %r : tensor<1x5x4x4xf32>
  %g = quant.global_avg_pool %qx {clip_min = 0.0} : tensor<1x5x1x1x!quant.uniform<u8:f32, 0.002:3>>
  %h = quant.global_avg_pool %qy {clip_max = 0.1} : tensor<1x5x1x1x!quant.uniform<i8:f32, 0.0011:-2>>
  %gd = quant.dequantize %g : tensor<1x5x1x1xf32>
  %hd = quant.dequantize %h : tensor<1x5x1x1xf32>
  return %sd, %td, %ud, %vd, %wd, %pd, %rd, %gd, %hd : tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x7x7xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>, tensor<1x5x1x1xf32>, tensor<1x5x1x1xf32>
}
"#;

/// `quant.avg_pool2d` (`qavg_pool`) against the interpreter, exactly: u8
/// and i8, padding counted or not, ceil mode on an odd size, strides,
/// dilation, a clamp, and a result scale other than the input's.
const INT8_AVG_POOL_AIR: &str = r#"func @main(%x: tensor<2x6x7x7xf32>) -> (tensor<2x6x7x7xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x3x3xf32>) {
  %qx = quant.quantize %x : tensor<2x6x7x7x!quant.uniform<u8:f32, 0.031:117>>
  %sx = quant.quantize %x : tensor<2x6x7x7x!quant.uniform<i8:f32, 0.027:-3>>
  %a = quant.avg_pool2d %qx {kernel = [3, 3], pads = [1, 1, 1, 1]} : tensor<2x6x7x7x!quant.uniform<u8:f32, 0.031:117>>
  %b = quant.avg_pool2d %sx {kernel = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1], count_include_pad = true, clip_min = -0.2} : tensor<2x6x4x4x!quant.uniform<i8:f32, 0.011:4>>
  %c = quant.avg_pool2d %qx {kernel = [2, 2], strides = [2, 2], ceil_mode = true} : tensor<2x6x4x4x!quant.uniform<u8:f32, 0.02:128>>
  %d = quant.avg_pool2d %sx {kernel = [2, 2], strides = [2, 2], dilations = [2, 2], pads = [0, 0, 1, 1]} : tensor<2x6x3x3x!quant.uniform<i8:f32, 0.027:-3>>
  %ad = quant.dequantize %a : tensor<2x6x7x7xf32>
  %bd = quant.dequantize %b : tensor<2x6x4x4xf32>
  %cd = quant.dequantize %c : tensor<2x6x4x4xf32>
  %dd = quant.dequantize %d : tensor<2x6x3x3xf32>
  return %ad, %bd, %cd, %dd : tensor<2x6x7x7xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x3x3xf32>
}
"#;

fn int8_avg_pool(level: X86Level) -> Result<(), Failed> {
    let (want, got, kinds) = run_air_text("int8-avg-pool", INT8_AVG_POOL_AIR, vec![random(&[2, 6, 7, 7], 41)], level)?;
    let count = |k: &str| kinds.iter().filter(|s| *s == k).count();
    if count("qavg_pool") != 4 || count("pool") != 0 || count("reference") != 0 {
        return Err(format!("expected 4 qavg_pool steps, no float pool or reference step: {kinds:?}").into());
    }
    bit_exact(&want, &got)
}

/// A Q/DQ feature-pyramid step: nearest 2× upsamples (ONNX `Resize`,
/// `asymmetric`/`floor` and the default `half_pixel`/`round_prefer_floor`)
/// of a quantized map, added to a finer one by quantized adds. The
/// upsamples gather bytes between the integer steps (the Q/DQ pair moves
/// through a nearest resize): one dequantize (the output), and the
/// interpreter's bytes.
const INT8_UPSAMPLE_AIR: &str = r#"func @main(%x: tensor<1x4x5x5xf32>, %s: tensor<1x4x10x10xf32>) -> tensor<1x4x10x10xf32> {
  %qx = quant.quantize %x : tensor<1x4x5x5x!quant.uniform<u8:f32, 0.03:120>>
  %dx = quant.dequantize %qx : tensor<1x4x5x5xf32>
  %u = core.resize %dx {sizes = [1, 4, 10, 10], mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"} : tensor<1x4x10x10xf32>
  %v = core.resize %dx {sizes = [1, 4, 10, 10], mode = "nearest"} : tensor<1x4x10x10xf32>
  %qu = quant.quantize %u : tensor<1x4x10x10x!quant.uniform<u8:f32, 0.03:120>>
  %du = quant.dequantize %qu : tensor<1x4x10x10xf32>
  %qv = quant.quantize %v : tensor<1x4x10x10x!quant.uniform<u8:f32, 0.03:120>>
  %dv = quant.dequantize %qv : tensor<1x4x10x10xf32>
  %qs = quant.quantize %s : tensor<1x4x10x10x!quant.uniform<u8:f32, 0.02:128>>
  %ds = quant.dequantize %qs : tensor<1x4x10x10xf32>
  %a = core.add %du, %ds : tensor<1x4x10x10xf32>
  %qa = quant.quantize %a : tensor<1x4x10x10x!quant.uniform<u8:f32, 0.04:110>>
  %da = quant.dequantize %qa : tensor<1x4x10x10xf32>
  %b = core.add %da, %dv : tensor<1x4x10x10xf32>
  %qb = quant.quantize %b : tensor<1x4x10x10x!quant.uniform<u8:f32, 0.05:100>>
  %db = quant.dequantize %qb : tensor<1x4x10x10xf32>
  return %db : tensor<1x4x10x10xf32>
}
"#;

fn int8_upsample(level: X86Level) -> Result<(), Failed> {
    let (want, got, kinds) = run_air_text("int8-upsample", INT8_UPSAMPLE_AIR, vec![random(&[1, 4, 5, 5], 51), random(&[1, 4, 10, 10], 52)], level)?;
    let count = |k: &str| kinds.iter().filter(|s| *s == k).count();
    if count("gather") != 2 || count("dequantize") != 1 || count("qadd") != 2 || count("reference") != 0 {
        return Err(format!("expected two byte gathers between integer steps and one dequantize: {kinds:?}").into());
    }
    bit_exact(&want, &got)
}

/// Attention's products of two activations in int8 (`qmatmul`): u8 queries
/// times the transpose of i8 keys (a strided view, no copy), then the u8
/// scores times u8 values, against the interpreter within one step of
/// each output's scale.
const INT8_ATTENTION_AIR: &str = r#"func @main(%q: tensor<2x16x8xf32>, %k: tensor<2x16x8xf32>, %v: tensor<2x16x8xf32>) -> (tensor<2x16x16xf32>, tensor<2x16x8xf32>) {
  %qq = quant.quantize %q : tensor<2x16x8x!quant.uniform<u8:f32, 0.01:120>>
  %qk = quant.quantize %k : tensor<2x16x8x!quant.uniform<i8:f32, 0.012:3>>
  %qv = quant.quantize %v : tensor<2x16x8x!quant.uniform<u8:f32, 0.009:130>>
  %kt = core.transpose %qk {perm = [0, 2, 1]} : tensor<2x8x16x!quant.uniform<i8:f32, 0.012:3>>
  %s = quant.matmul %qq, %kt : tensor<2x16x16x!quant.uniform<u8:f32, 0.002:128>>
  %c = quant.matmul %s, %qv : tensor<2x16x8x!quant.uniform<i8:f32, 0.004:-1>>
  %sd = quant.dequantize %s : tensor<2x16x16xf32>
  %cd = quant.dequantize %c : tensor<2x16x8xf32>
  return %sd, %cd : tensor<2x16x16xf32>, tensor<2x16x8xf32>
}
"#;

fn int8_attention(level: X86Level) -> Result<(), Failed> {
    let inputs = vec![random(&[2, 16, 8], 21), random(&[2, 16, 8], 22), random(&[2, 16, 8], 23)];
    let (want, got, kinds) = run_air_text("int8-attention", INT8_ATTENTION_AIR, inputs, level)?;
    if kinds.iter().filter(|k| *k == "qmatmul").count() != 2 || kinds.iter().any(|k| k == "reference" || k == "mat_mul") {
        return Err(format!("expected two qmatmul steps and no float matmul: {kinds:?}").into());
    }
    for (i, (w, g, step)) in want.iter().zip(&got).zip([0.002, 0.004]).map(|((w, g), s)| (w, g, s)).enumerate() {
        let err = w.to_f64().iter().zip(g.to_f64()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        if err > step * 1.001 {
            return Err(format!("output {i}: max error {err} > one step {step}").into());
        }
    }
    Ok(())
}

/// Crossed clip bounds (`clip_min > clip_max`) on integer ops mean
/// `clip_max` everywhere (max, then min): on the integer GEMM path
/// (`qconv2d`) and on `qmatmul` the compiled model gives the interpreter's
/// outputs. (The requantization used `clamp`, which panics on crossed
/// bounds, and the upper bound fell outside the storage range.)
const CROSSED_CLIPS_AIR: &str = r#"func @main(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %qa = quant.quantize %a : tensor<2x4x!quant.uniform<u8:f32, 0.05:10>>
  %qb = quant.quantize %b : tensor<4x3x!quant.uniform<i8:f32, 0.05>>
  %w = const dense<[[1, -2, 3], [4, 5, -6], [7, -8, 9], [-10, 11, 12]]> : tensor<4x3x!quant.uniform<i8:f32, 0.25>>
  %m = quant.matmul %qa, %qb {clip_min = 2.0, clip_max = -1.0} : tensor<2x3x!quant.uniform<u8:f32, 0.1:3>>
  %g = quant.matmul %qa, %w {clip_min = 0.5, clip_max = 0.2} : tensor<2x3x!quant.uniform<i8:f32, 0.1:-4>>
  %md = quant.dequantize %m : tensor<2x3xf32>
  %gd = quant.dequantize %g : tensor<2x3xf32>
  return %md, %gd : tensor<2x3xf32>, tensor<2x3xf32>
}
"#;

fn crossed_clips(level: X86Level) -> Result<(), Failed> {
    let (want, got, kinds) = run_air_text("crossed-clips", CROSSED_CLIPS_AIR, vec![random(&[2, 4], 31), random(&[4, 3], 32)], level)?;
    if !kinds.iter().any(|k| k == "qmatmul") || !kinds.iter().any(|k| k == "qconv2d") {
        return Err(format!("expected a qmatmul and a qconv2d step: {kinds:?}").into());
    }
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        if w.to_f64() != g.to_f64() {
            return Err(format!("output {i}: {:?} compiled, {:?} interpreted", g.to_f64(), w.to_f64()).into());
        }
    }
    Ok(())
}

fn int8_elementwise(level: X86Level) -> Result<(), Failed> {
    let inputs = vec![random(&[1, 5, 7, 7], 11), random(&[1, 5, 7, 7], 12), random(&[1, 5, 1, 1], 13), random(&[7, 7], 14)];
    let (want, got, kinds) = run_air_text("int8-elementwise", INT8_ELEMENTWISE_AIR, inputs, level)?;
    let count = |k: &str| kinds.iter().filter(|s| *s == k).count();
    if count("qadd") != 4 || count("qmax_pool") != 2 || count("qglobal_avg_pool") != 2 || count("reference") != 0 {
        return Err(format!("expected 4 qadd, 2 qmax_pool and 2 qglobal_avg_pool steps, no reference step: {kinds:?}").into());
    }
    bit_exact(&want, &got)
}

/// Nearest resizes in two modes the resize kernel lacks (ONNX's default
/// half-pixel, round-prefer-floor, and asymmetric with ceil), after a max
/// pool on u8 values (its own `qmax_pool` step), `quant.global_avg_pool`
/// and `quant.matmul` of two activations: none of the resizes and
/// quantized ops has a kernel of its own, and each compiles to native
/// steps (the quantized ops expanded
/// into dequantize, float op, quantize; the resizes as gathers), with no
/// reference step, to the interpreter's outputs (exactly, or within one
/// step of the output's scale).
const NO_KERNEL_AIR: &str = r#"func @main(%x: tensor<1x4x6x6xf32>, %a: tensor<2x4xf32>) -> (tensor<1x4x9x9xf32>, tensor<1x4x5x5xf32>, tensor<1x4x1x1xf32>, tensor<2x3xf32>) {
  %up = core.resize %x {sizes = [1, 4, 9, 9]} : tensor<1x4x9x9xf32>
  %q = quant.quantize %x : tensor<1x4x6x6x!quant.uniform<u8:f32, 0.05:128>>
  %mp = core.max_pool2d %q {kernel = [2, 2], strides = [2, 2]} : tensor<1x4x3x3x!quant.uniform<u8:f32, 0.05:128>>
  %mpd = quant.dequantize %mp : tensor<1x4x3x3xf32>
  %rd = core.resize %mpd {sizes = [1, 4, 5, 5], coordinate_transformation_mode = "asymmetric", nearest_mode = "ceil"} : tensor<1x4x5x5xf32>
  %r = quant.quantize %rd : tensor<1x4x5x5x!quant.uniform<u8:f32, 0.05:128>>
  %g = quant.global_avg_pool %r : tensor<1x4x1x1x!quant.uniform<u8:f32, 0.02:100>>
  %gd = quant.dequantize %g : tensor<1x4x1x1xf32>
  %qa = quant.quantize %a : tensor<2x4x!quant.uniform<i8:f32, 0.05>>
  %b = const dense<[[1, -2, 3], [4, 5, -6], [7, -8, 9], [-10, 11, 12]]> : tensor<4x3x!quant.uniform<i8:f32, 0.25>>
  %m = quant.matmul %qa, %b : tensor<2x3x!quant.uniform<i8:f32, 0.1:3>>
  %md = quant.dequantize %m : tensor<2x3xf32>
  return %up, %rd, %gd, %md : tensor<1x4x9x9xf32>, tensor<1x4x5x5xf32>, tensor<1x4x1x1xf32>, tensor<2x3xf32>
}
"#;

fn quant_without_kernels(level: X86Level) -> Result<(), Failed> {
    let x: Vec<f64> = (0..144).map(|i| ((i * 37 % 101) as f64 - 50.0) / 9.0).collect();
    let a: Vec<f64> = (0..8).map(|i| (i as f64 - 3.5) / 2.0).collect();
    let inputs = vec![
        Tensor::from_f64(TensorType::new(vec![1, 4, 6, 6], Scalar::F32), x),
        Tensor::from_f64(TensorType::new(vec![2, 4], Scalar::F32), a),
    ];
    let (want, got, kinds) = run_air_text("nokernel", NO_KERNEL_AIR, inputs, level)?;
    if kinds.iter().any(|k| k == "reference") {
        return Err(format!("reference steps remain: {kinds:?}").into());
    }
    if kinds.iter().filter(|k| *k == "gather").count() < 2 {
        return Err(format!("the resizes should be gathers: {kinds:?}").into());
    }
    // exact, exact (a max and a gather of stored values), one step of 0.02, one of 0.1
    for (i, (w, g, tol)) in want.iter().zip(&got).zip([0.0, 0.0, 0.0201, 0.1001]).map(|((w, g), t)| (w, g, t)).enumerate() {
        let (wv, gv) = (w.to_f64(), g.to_f64());
        let err = wv.iter().zip(&gv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        if err > tol {
            return Err(format!("output {i}: max error {err} > {tol}\nwant {wv:?}\ngot  {gv:?}").into());
        }
    }
    Ok(())
}
