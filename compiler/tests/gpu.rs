//! End-to-end tests of the GPU path through the user's commands:
//! `aoc compile --target sm_*` for every example model and the OCR models,
//! and, where a GPU exists, `aoc run` of the artifact compared with
//! `aoc run` of the model on the reference interpreter.
//!
//! - `compile_*` (everywhere): every example and every imported model of
//!   `compiler/tests/data/models/` (recurrent layers, old opsets) compiles
//!   for every GPU target;
//!   the PTX inside the artifact assembles with `ptxas` for that target
//!   (skipped with a printed reason when no ptxas is found: `AOC_PTXAS`,
//!   `PATH`, or the `nvidia-cuda-nvcc` wheel in `.venv`; CUDA 13's ptxas no
//!   longer targets sm_70, whose PTX is only generated).
//! - `fp16_build_uses_tensor_cores`: an fp16 build of a conv model has f16
//!   `mma.sync` in its PTX; `int8_build_uses_s8_mma`: the quantized example
//!   built for sm_86 runs its integer convolutions on s8 `mma.sync`
//!   m16n8k32 (and for sm_75, without it, on the host);
//!   `fused_attention_and_wgmma_builds`: the encoder's attention is one
//!   fused launch; two large fp16 GEMMs on one activation for sm_90a use
//!   `wgmma` with one conversion of A, and `gpu_wgmma_projections_*` runs
//!   that model on the GPU against the interpreter.
//! - `gpu_*` (on a GPU; skipped with the reason elsewhere): artifacts built
//!   for sm_86 and sm_90a, fp32 and fp16, against the interpreter: 1e-3 of
//!   max(1, max|expected|) for fp32, 1e-2 for fp16 (one quantization step,
//!   0.1, for the quantized example).
//! - `gpu_quantized_for_sm_90_runs_int8_and_fp16`: `aoc quantize --target
//!   sm_90` of the encoder, compiled for sm_90a at fp16, has integer GEMM
//!   launches and (on a GPU) runs to the quantized model's outputs.
//! - `compile_{sparse,pruned}_*` and `gpu_{sparse,pruned}_*`: the examples
//!   after `aoc sparsify --pattern 2:4` or `aoc prune --channels 0.3`
//!   compile for sm_80, sm_86 and sm_90a and (on a GPU) run at fp32 and
//!   fp16 to the interpreter's outputs of the transformed model;
//!   `sparse_explain_says_why`: `aoc explain` gives each sparse layer's
//!   kernel and reason; `sparse_gemm_builds` / `gpu_sparse_gemm_*`: a
//!   large sparsified matmul runs on the `mma.sp` kernel for sm_86 and
//!   sm_90, on the `wgmma.sp` kernel on sm_90a (also with ragged edges:
//!   `gpu_sparse_gemm_ragged_sm_90a_fp16`), and on the GPU to the
//!   interpreter's outputs.
//! - `compile_zoo_*` / `gpu_zoo_*`: the architecture zoo
//!   (`tests/data/zoo/`) for sm_86 and sm_90a at fp32 and fp16,
//!   ptxas-checked, and on a GPU against the interpreter; a model listed
//!   in `pending.txt` is checked to still fail to compile.
//! - `fp8_builds_use_e4m3_wgmma` and `gpu_fp8_*`: fp8 models (`gpu/fp8.rs`).
//! - `no_gpu_is_a_clear_error` (without a GPU): `aoc run` of a GPU artifact
//!   fails with exit code 1 and says what is missing.
//!
//! On the GPU machine (no cargo there) the binary runs from the repository
//! root with `AOC_BIN` naming a prebuilt `aoc` (see `make gpu-test`).

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "gpu/fp8.rs"]
mod fp8;

use aoc_compiler::npy::read_npy;
use aoc_ir::tensor::Tensor;
use libtest_mimic::{Arguments, Failed, Trial};

const TARGETS: [&str; 7] = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"];

fn root() -> PathBuf {
    std::env::var_os("AOC_ROOT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("compiler/ has a parent").to_path_buf(),
        PathBuf::from,
    )
}

fn aoc() -> PathBuf {
    std::env::var_os("AOC_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_aoc")), PathBuf::from)
}

fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("AOC_TEST_TMP")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let d = base.join("gpu").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Why GPU runs are skipped here, or `None` when a GPU is present.
fn no_gpu() -> Option<String> {
    aoc_runtime::cuda::Gpu::open(0).err().map(|e| e.to_string())
}

/// A model: its file, its inputs (`NAME=PATH` for `aoc run`), its
/// `--input-shape` flags, and whether it is quantized.
#[derive(Clone)]
struct Model {
    name: String,
    file: PathBuf,
    inputs: Vec<String>,
    shapes: Vec<String>,
    quantized: bool,
    /// The relative tolerance at bf16 when not the default 1e-2.
    bf16_tolerance: Option<f64>,
}

fn models() -> Vec<Model> {
    let mut out = vec![];
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    for d in dirs.into_iter().filter(|d| d.join("model.air").exists()) {
        let text = std::fs::read_to_string(d.join("model.air")).unwrap_or_default();
        out.push(Model {
            name: d.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default(),
            file: d.join("model.air"),
            inputs: vec![d.join("input.npy").display().to_string()],
            shapes: vec![],
            quantized: text.contains("quant."),
            bf16_tolerance: None,
        });
    }
    out
}

/// Small imported ONNX models in `compiler/tests/data/models/` (made by
/// `aoc import` from tests/scripts/gen_onnx_cases.py's cases, whose ONNX
/// Runtime comparison is tests/onnx_cases.rs): the recurrent layers
/// (bidirectional, with sequence lengths and initial states), models
/// of opsets 8 and 9, control flow (`If`, `Loop`, `Scan` as `core.loop`),
/// the import compositions and `core.grid_sample` (every mode and
/// padding). Inputs are `input_<NAME>.npy`.
fn imported_models() -> Vec<Model> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("compiler/tests/data/models"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.into_iter()
        .filter(|d| d.join("model.air").exists())
        .map(|d| {
            let mut inputs: Vec<String> = std::fs::read_dir(&d)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let file = e.file_name().to_string_lossy().to_string();
                    let name = file.strip_prefix("input_")?.strip_suffix(".npy")?.to_string();
                    Some(format!("{name}={}", e.path().display()))
                })
                .collect();
            inputs.sort();
            Model {
                name: format!("imported_{}", d.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default()),
                file: d.join("model.air"),
                inputs,
                shapes: vec![],
                quantized: false,
                bf16_tolerance: None,
            }
        })
        .collect()
}

/// The architecture zoo (`tests/data/zoo/`, tests/zoo.rs against ONNX
/// Runtime on the CPU): each model with seeded inputs from its manifest
/// entry (token ids uniform below the entry's `high`), and the text its
/// failure holds while it waits for another change (`pending.txt`).
fn zoo_models() -> Vec<(Model, Option<String>)> {
    let dir = root().join("tests/data/zoo");
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else { return vec![] };
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(&text) else { return vec![] };
    let pending = std::fs::read_to_string(dir.join("pending.txt")).unwrap_or_default();
    let dims = |i: &serde_json::Value| -> String {
        let d: Vec<String> = i["shape"].as_array().into_iter().flatten().map(|d| d.to_string()).collect();
        d.join("x")
    };
    obj.iter()
        .map(|(name, m)| {
            let inputs = m["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| {
                    let n = i["name"].as_str().unwrap_or_default();
                    match i["high"].as_i64() {
                        Some(high) => format!("{n}=@ids{high}:{}", dims(i)),
                        None => format!("{n}=@random:{}", dims(i)),
                    }
                })
                .collect();
            let waits = pending
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once(' '))
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.trim().to_string());
            let model = Model {
                name: format!("zoo_{name}"),
                file: dir.join(m["file"].as_str().unwrap_or_default()),
                inputs,
                shapes: vec![],
                quantized: false,
                bf16_tolerance: None,
            };
            (model, waits)
        })
        .collect()
}

/// A pending zoo model (`tests/data/zoo/pending.txt`) does not compile
/// yet: the test fails once it does, so the list is kept honest.
fn zoo_pending_still_fails(m: &Model, target: &str, why: &str) -> Result<(), Failed> {
    let d = scratch(&format!("compile_{}_{target}", m.name));
    match compile(m, target, "fp32", &d.join("model.aoc")) {
        Ok(_) => Err(format!("{} compiles for {target} now; it is pending on `{why}`: run it here and update pending.txt", m.name).into()),
        Err(e) if e.message().is_some_and(|t| t.contains(why)) => {
            println!("pending: fails as expected with `{why}`");
            Ok(())
        }
        Err(e) => Err(format!("pending on `{why}`, but it fails otherwise: {}", e.message().unwrap_or_default()).into()),
    }
}

/// The OCR models (`make real-models`), each with a seeded random input.
fn ocr_models() -> Vec<Model> {
    let dir = std::env::var_os("AOC_MODELS").map_or_else(|| root().join("build/models"), PathBuf::from);
    let list = [
        ("det", "ch_PP-OCRv4_det_infer.onnx", "x", [1usize, 3, 160, 160]),
        ("rec", "ch_PP-OCRv4_rec_infer.onnx", "x", [1, 3, 48, 160]),
        ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", [1, 3, 48, 192]),
    ];
    list.iter()
        .filter(|(_, f, _, _)| dir.join(f).exists())
        .map(|(key, f, input, shape)| Model {
            name: format!("ocr_{key}"),
            file: dir.join(f),
            inputs: vec![format!("{input}=@random:{}", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"))],
            shapes: vec![format!("{input}={}", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"))],
            quantized: false,
            bf16_tolerance: None,
        })
        .collect()
}

fn run(args: &[&str]) -> Result<String, Failed> {
    let out = Command::new(aoc()).args(args).output().map_err(|e| format!("cannot run {}: {e}", aoc().display()))?;
    if !out.status.success() {
        return Err(format!(
            "aoc {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stderr).to_string())
}

fn compile(m: &Model, target: &str, precision: &str, out: &Path) -> Result<String, Failed> {
    let mut args = vec![
        "compile".to_string(),
        m.file.display().to_string(),
        "--target".into(),
        target.into(),
        "--precision".into(),
        precision.into(),
        "-o".into(),
        out.display().to_string(),
    ];
    for s in &m.shapes {
        args.push("--input-shape".into());
        args.push(s.clone());
    }
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let summary = run(&refs)?;
    launch_counts_add_up(&summary)?;
    Ok(summary)
}

/// The compile summary's per-kernel launch counts add up to its launch
/// count: `12 launches (gemm_f32 5, pw 4, copy 3) of 9 kernels`.
fn launch_counts_add_up(summary: &str) -> Result<(), Failed> {
    let Some(i) = summary.find(" launches (") else {
        return Err(format!("no launch count in the summary:\n{summary}").into());
    };
    let total: usize = summary[..i].rsplit(' ').next().unwrap_or("").parse()?;
    let rest = &summary[i + " launches (".len()..];
    let list = &rest[..rest.find(") of").ok_or("no `) of` after the launch list")?];
    let sum: usize = list
        .split(", ")
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit(' ').next().unwrap_or("").parse::<usize>())
        .collect::<Result<Vec<_>, _>>()?
        .iter()
        .sum();
    if sum != total {
        return Err(format!("the launch counts ({list}) add up to {sum}, not {total}:\n{summary}").into());
    }
    Ok(())
}

/// Every launch of the artifact names an entry of its module with its
/// parameter count (what the executor checks at load).
fn check_entries(art: &Path) -> Result<(), Failed> {
    let a = aoc_runtime::artifact::Artifact::open(art)?;
    let text = std::str::from_utf8(a.code(aoc_runtime::gpu_plan::PTX_BLOB)?)?;
    let plan: aoc_runtime::gpu_plan::GpuPlan = serde_json::from_value(a.manifest().plan.clone())?;
    Ok(plan.check_entries(text)?)
}

/// The reduced-precision and integer paths give artifacts whose launches
/// match their modules too: tensor-core convolutions with epilogues
/// (resnet_block fp16), fused attention (encoder fp16), int8 (qdq_cnn),
/// `wgmma` with its conversion (projections, sm_90a).
fn special_paths_match_their_entries() -> Result<(), Failed> {
    let d = scratch("entries");
    let mut cases: Vec<(Model, &str, &str)> = models()
        .into_iter()
        .filter_map(|m| match m.name.as_str() {
            "resnet_block" | "encoder_layer" => Some((m, "sm_86", "fp16")),
            "qdq_cnn" => Some((m, "sm_86", "fp32")),
            _ => None,
        })
        .collect();
    cases.push((projections(&d)?, "sm_90a", "fp16"));
    if cases.len() != 4 {
        return Err("an example is missing".into());
    }
    for (m, target, precision) in cases {
        let art = d.join(format!("{}.aoc", m.name));
        compile(&m, target, precision, &art)?;
        if let Err(e) = check_entries(&art) {
            return Err(format!("{} {target} {precision}: {e:?}", m.name).into());
        }
    }
    Ok(())
}

/// A `ptxas`, or why there is none.
fn find_ptxas() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("AOC_PTXAS") {
        return Ok(p.into());
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(p) = std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file()) {
            return Ok(p);
        }
    }
    let lib = root().join(".venv/lib");
    for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
        let p = py.path().join("site-packages/nvidia/cu13/bin/ptxas");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err("no ptxas (set AOC_PTXAS, put it on PATH, or `make setup` for the nvidia-cuda-nvcc wheel)".into())
}

fn check_compiles(m: &Model, target: &str) -> Result<(), Failed> {
    check_compiles_at(m, target, "fp32")
}

/// [`check_compiles`] at a precision.
fn check_compiles_at(m: &Model, target: &str, precision: &str) -> Result<(), Failed> {
    let d = scratch(&format!("compile_{}_{target}_{precision}", m.name));
    let art = d.join("model.aoc");
    compile(m, target, precision, &art)?;
    let a = aoc_runtime::artifact::Artifact::open(&art)?;
    if a.manifest().target != target {
        return Err(format!("the artifact's target is {}, expected {target}", a.manifest().target).into());
    }
    let ptx = a.code(aoc_runtime::gpu_plan::PTX_BLOB)?;
    let text = std::str::from_utf8(ptx)?;
    let want_target = format!(".target {target}");
    if !text.contains(&want_target) {
        return Err(format!("the PTX does not say `{want_target}`").into());
    }
    check_entries(&art)?;
    if target == "sm_70" {
        return Ok(());
    }
    let ptxas = match find_ptxas() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped ptxas: {why}");
            return Ok(());
        }
    };
    let src = d.join("module.ptx");
    std::fs::write(&src, ptx)?;
    let out = Command::new(&ptxas)
        .arg(format!("-arch={target}"))
        .arg(&src)
        .arg("-o")
        .arg(d.join("module.cubin"))
        .output()?;
    if !out.status.success() {
        return Err(format!("ptxas -arch={target} rejected the PTX:\n{}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

/// Writes seeded random inputs for `@random:DIMS` entries; returns the
/// `--input` arguments.
fn materialize_inputs(m: &Model, d: &Path) -> Result<Vec<String>, Failed> {
    let mut out = vec![];
    for (i, spec) in m.inputs.iter().enumerate() {
        if let Some((name, rest)) = spec.split_once("=@ids") {
            // token ids: `NAME=@idsHIGH:DIMS`, seeded, uniform in [0, HIGH)
            let (high, dims) = rest.split_once(':').ok_or("`@idsHIGH:DIMS`")?;
            let high: u64 = high.parse()?;
            let shape: Vec<usize> = dims.split('x').map(|v| v.parse()).collect::<Result<_, _>>()?;
            let mut state = 0x2545_f491_4f6c_dd1du64;
            let vals: Vec<i64> = (0..shape.iter().product::<usize>())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state >> 11) % high) as i64
                })
                .collect();
            let t = Tensor::from_i64(aoc_ir::types::TensorType::new(shape, aoc_ir::types::Scalar::I64), vals);
            let p = d.join(format!("input{i}.npy"));
            aoc_compiler::npy::write_npy(&p, &t)?;
            out.push(format!("{name}={}", p.display()));
            continue;
        }
        let Some((name, dims)) = spec.split_once("=@random:") else {
            out.push(spec.clone());
            continue;
        };
        let shape: Vec<usize> = dims.split('x').map(|v| v.parse()).collect::<Result<_, _>>()?;
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
        let t = Tensor::from_f64(aoc_ir::types::TensorType::new(shape, aoc_ir::types::Scalar::F32), vals);
        let p = d.join(format!("input{i}.npy"));
        aoc_compiler::npy::write_npy(&p, &t)?;
        out.push(format!("{name}={}", p.display()));
    }
    Ok(out)
}

fn run_to_dir(file: &Path, inputs: &[String], shapes: &[String], dir: &Path) -> Result<(), Failed> {
    let mut args = vec!["run".to_string(), file.display().to_string()];
    for i in inputs {
        args.push("--input".into());
        args.push(i.clone());
    }
    for s in shapes {
        args.push("--input-shape".into());
        args.push(s.clone());
    }
    args.push("--output-dir".into());
    args.push(dir.display().to_string());
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    run(&refs).map(|_| ())
}

fn outputs(dir: &Path) -> Result<Vec<(String, Tensor)>, Failed> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files
        .into_iter()
        .map(|p| Ok((p.file_name().unwrap().to_string_lossy().to_string(), read_npy(&p)?)))
        .collect()
}

fn check_on_gpu(m: &Model, target: &str, precision: &str) -> Result<(), Failed> {
    if let Some(why) = no_gpu() {
        println!("skipped: {why}");
        return Ok(());
    }
    let d = scratch(&format!("gpu_{}_{target}_{precision}", m.name));
    let inputs = materialize_inputs(m, &d)?;
    let art = d.join("model.aoc");
    compile(m, target, precision, &art)?;
    let (want_dir, got_dir) = (d.join("want"), d.join("got"));
    run_to_dir(&m.file, &inputs, &m.shapes, &want_dir)?;
    run_to_dir(&art, &inputs, &[], &got_dir)?;
    let (want, got) = (outputs(&want_dir)?, outputs(&got_dir)?);
    if want.len() != got.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()).into());
    }
    let tol = match (m.quantized, precision) {
        (true, _) => 0.1,
        (false, "fp32") => 1e-3,
        (false, "bf16") => m.bf16_tolerance.unwrap_or(1e-2),
        _ => 1e-2,
    };
    for ((wn, w), (gn, g)) in want.iter().zip(&got) {
        if wn != gn || w.ty.shape != g.ty.shape {
            return Err(format!("output {gn} {:?} does not match {wn} {:?}", g.ty.shape, w.ty.shape).into());
        }
        // Integer and bool outputs (indices, counters, masks) exactly in
        // fp32 (in 16-bit precisions an index may follow a rounded value).
        if precision == "fp32" && !w.ty.elem.storage().is_float() {
            if let Some(j) = (0..w.len()).find(|&j| w.get_i64(j) != g.get_i64(j)) {
                return Err(format!("output {wn} element {j} is {}, expected {}", g.get_i64(j), w.get_i64(j)).into());
            }
            println!("{wn}: exact");
            continue;
        }
        let (wv, gv) = (w.to_f64(), g.to_f64());
        let scale = wv.iter().fold(1.0f64, |a, v| a.max(v.abs()));
        let err = wv.iter().zip(&gv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
        println!("{wn}: max error {err:.2e} of {scale:.3} (tolerance {tol:.0e})");
        if err.is_nan() || gv.iter().any(|v| v.is_nan()) != wv.iter().any(|v| v.is_nan()) || err > tol {
            return Err(format!("output {wn} differs by {err:.3e} (tolerance {tol:.0e})").into());
        }
    }
    Ok(())
}

fn fp16_uses_tensor_cores() -> Result<(), Failed> {
    let m = models().into_iter().find(|m| m.name == "resnet_block").ok_or("examples/resnet_block is missing")?;
    let d = scratch("fp16_mma");
    let out = d.join("model.ptx");
    run(&[
        "compile",
        &m.file.display().to_string(),
        "--target",
        "sm_86",
        "--precision",
        "fp16",
        "--emit",
        "ptx",
        "-o",
        &out.display().to_string(),
    ])?;
    let ptx = std::fs::read_to_string(&out)?;
    if !ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") {
        return Err("the fp16 build has no f16 mma.sync".into());
    }
    // And fp32 has none.
    run(&["compile", &m.file.display().to_string(), "--target", "sm_86", "--emit", "ptx", "-o", &out.display().to_string()])?;
    if std::fs::read_to_string(&out)?.contains("mma.sync") {
        return Err("the fp32 build uses mma.sync".into());
    }
    Ok(())
}

fn int8_uses_s8_mma() -> Result<(), Failed> {
    let m = models().into_iter().find(|m| m.name == "qdq_cnn").ok_or("examples/qdq_cnn is missing")?;
    let d = scratch("int8_mma");
    let out = d.join("model.ptx");
    let file = m.file.display().to_string();
    let o = out.display().to_string();
    run(&["compile", &file, "--target", "sm_86", "--emit", "ptx", "-o", &o])?;
    let ptx = std::fs::read_to_string(&out)?;
    if !ptx.contains("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") {
        return Err("the int8 build has no s8 mma.sync".into());
    }
    run(&["compile", &file, "--target", "sm_75", "--emit", "ptx", "-o", &o])?;
    if std::fs::read_to_string(&out)?.contains("m16n8k32") {
        return Err("the sm_75 build uses m16n8k32, which needs sm_80".into());
    }
    // sm_90a: Hopper's wgmma for the convolutions with 16-byte channel runs.
    run(&["compile", &file, "--target", "sm_90a", "--emit", "ptx", "-o", &o])?;
    let ptx = std::fs::read_to_string(&out)?;
    if !ptx.contains("k32.s32.u8.s8") && !ptx.contains("k32.s32.s8.s8") {
        return Err("the sm_90a int8 build has no integer wgmma".into());
    }
    // The residual adds and the logits' dequantize are the wgmma
    // convolutions' epilogues: no launch of their own.
    let ll = d.join("model.ll");
    run(&["compile", &file, "--target", "sm_90a", "--emit", "llvm", "-o", &ll.display().to_string()])?;
    let items = std::fs::read_to_string(&ll)?;
    let own: Vec<&str> = items
        .lines()
        .filter(|l| l.starts_with("; item") && (l.contains("<- quant.add") || l.contains("logits_DequantizeLinear")))
        .collect();
    if !own.is_empty() {
        return Err(format!("steps the int8 convolutions should have taken as epilogues:\n{}", own.join("\n")).into());
    }
    // The stem's 3 input channels are unfolded along W so that it runs on
    // wgmma too: every convolution is a qconv_wgmma launch, none mma.sync.
    let launches = |kind: &str| items.lines().filter(|l| l.starts_with("; item") && l.contains(&format!("launch {kind}_"))).count();
    if launches("unfold_w") != 1 || launches("qconv_s8") != 0 || launches("qconv_wgmma") == 0 {
        let list: Vec<&str> = items.lines().filter(|l| l.starts_with("; item")).collect();
        return Err(format!("the stem did not run on wgmma through one unfold:\n{}", list.join("\n")).into());
    }
    // The max pool of quantized values runs on bytes.
    let pools: Vec<&str> = items.lines().filter(|l| l.starts_with("; item") && l.contains("<- core.max_pool2d")).collect();
    if pools.is_empty() || pools.iter().any(|l| !l.contains("launch qmax_pool")) {
        return Err(format!("the int8 max pool is not a byte kernel:\n{}", pools.join("\n")).into());
    }
    Ok(())
}

/// A `rows × cols` dense literal of values in [-0.5, 0.5) (seeded).
fn dense(rows: usize, cols: usize, seed: usize) -> String {
    let lines: Vec<String> = (0..rows)
        .map(|r| {
            let v: Vec<String> =
                (0..cols).map(|j| format!("{:.3}", (((r * cols + j) * 7919 + seed) % 97) as f32 / 97.0 - 0.5)).collect();
            format!("[{}]", v.join(", "))
        })
        .collect();
    format!("[{}]", lines.join(", "))
}

/// Two projections of one activation (`m × k` times constant `k × n`
/// matrices) added together, in `.air`: on sm_90a at fp16 both GEMMs run
/// on `wgmma`, share one half conversion of `x`, and the add becomes the
/// second GEMM's epilogue.
fn projections_air(dir: &Path, m: usize, k: usize, n: usize) -> Result<PathBuf, Failed> {
    let weight = |seed| dense(k, n, seed);
    let text = format!(
        "func @main(%x: tensor<{m}x{k}xf32>) -> tensor<{m}x{n}xf32> {{\n  \
         %w1 = const dense<{}> : tensor<{k}x{n}xf32>\n  \
         %w2 = const dense<{}> : tensor<{k}x{n}xf32>\n  \
         %a = core.matmul %x, %w1 : tensor<{m}x{n}xf32>\n  \
         %b = core.matmul %x, %w2 : tensor<{m}x{n}xf32>\n  \
         %y = core.add %a, %b : tensor<{m}x{n}xf32>\n  \
         return %y : tensor<{m}x{n}xf32>\n}}\n",
        weight(1),
        weight(2)
    );
    let path = dir.join("projections.air");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn projections(d: &Path) -> Result<Model, Failed> {
    Ok(Model {
        name: "projections".into(),
        file: projections_air(d, 8192, 64, 512)?,
        inputs: vec!["x=@random:8192x64".into()],
        shapes: vec![],
        quantized: false,
        bf16_tolerance: None,
    })
}

/// The `wgmma` path (conversion into the scratch, packed B, epilogue) on
/// the GPU against the interpreter.
fn wgmma_on_gpu() -> Result<(), Failed> {
    let m = projections(&scratch("wgmma_model"))?;
    check_on_gpu(&m, "sm_90a", "fp16")
}

fn fused_attention_and_wgmma() -> Result<(), Failed> {
    let m = models().into_iter().find(|m| m.name == "encoder_layer").ok_or("examples/encoder_layer is missing")?;
    let d = scratch("attention_wgmma");
    let out = d.join("model.ptx");
    let o = out.display().to_string();
    run(&["compile", &m.file.display().to_string(), "--target", "sm_86", "--precision", "fp16", "--emit", "ptx", "-o", &o])?;
    let ptx = std::fs::read_to_string(&out)?;
    if ptx.matches(".entry attention_").count() != 1 || ptx.contains(".entry softmax_") {
        return Err("the encoder's attention is not one fused kernel".into());
    }
    let g = projections(&d)?.file.display().to_string();
    run(&["compile", &g, "--target", "sm_90a", "--precision", "fp16", "--emit", "ptx", "-o", &o])?;
    let ptx = std::fs::read_to_string(&out)?;
    if !ptx.contains("wgmma.mma_async") {
        return Err("the sm_90a fp16 GEMM does not use wgmma".into());
    }
    let launches = |prefix: &str| ptx.lines().filter(|l| l.starts_with("//") && l.contains(prefix)).count();
    if launches("gemm_wgmma_") != 2 || launches("cvt_") != 1 || launches(" pw") != 0 {
        return Err("expected two wgmma launches sharing one conversion, the add fused into the second".into());
    }
    run(&["compile", &g, "--target", "sm_90", "--precision", "fp16", "--emit", "ptx", "-o", &o])?;
    if std::fs::read_to_string(&out)?.contains("wgmma") {
        return Err("the sm_90 build uses wgmma, which needs sm_90a".into());
    }
    Ok(())
}

/// `aoc compile FILE --target T --precision P --emit KIND -o OUT`; the
/// emitted text.
fn emit(file: &Path, target: &str, precision: &str, kind: &str, out: &Path) -> Result<String, Failed> {
    let (f, o) = (file.display().to_string(), out.display().to_string());
    run(&["compile", &f, "--target", target, "--precision", precision, "--emit", kind, "-o", &o])?;
    Ok(std::fs::read_to_string(out)?)
}

/// The launch lines (`// item N: launch KERNEL ...`) of an emitted PTX file.
fn launch_lines(ptx: &str) -> Vec<&str> {
    ptx.lines().filter(|l| l.starts_with("// item") && l.contains(": launch ")).collect()
}

/// `relu(x·w + bias) + r` with `x` 64×2048 and `w` 2048×256: too few
/// tiles for the GPU and a long k, so the tensor-core GEMM is split in
/// four parts of k whose sum, bias, relu and residual add are one
/// pointwise launch.
fn split_k_model(dir: &Path) -> Result<Model, Failed> {
    let (m, k, n) = (64, 2048, 256);
    let text = format!(
        "func @main(%x: tensor<{m}x{k}xf32>, %r: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n  \
         %w = const dense<{}> : tensor<{k}x{n}xf32>\n  \
         %b = const dense<{}> : tensor<{n}xf32>\n  \
         %p = core.matmul %x, %w : tensor<{m}x{n}xf32>\n  \
         %q = core.add %p, %b : tensor<{m}x{n}xf32>\n  \
         %h = core.relu %q : tensor<{m}x{n}xf32>\n  \
         %y = core.add %h, %r : tensor<{m}x{n}xf32>\n  \
         return %y : tensor<{m}x{n}xf32>\n}}\n",
        dense(k, n, 3),
        &dense(1, n, 4)[1..dense(1, n, 4).len() - 1]
    );
    let file = dir.join("split_k.air");
    std::fs::write(&file, text)?;
    Ok(Model {
        name: "split_k".into(),
        file,
        inputs: vec![format!("x=@random:{m}x{k}"), format!("r=@random:{m}x{n}")],
        shapes: vec![],
        quantized: false,
        bf16_tolerance: None,
    })
}

/// The split-k build: the GEMM is one launch over four slices of k
/// (grid z = 4) and its finish one pointwise launch, with no other launch
/// left (bias, relu and the add ride in it); fp32 does not split.
fn split_k_builds() -> Result<(), Failed> {
    let d = scratch("split_k");
    let m = split_k_model(&d)?;
    let out = d.join("model.ptx");
    let ptx = emit(&m.file, "sm_86", "fp16", "ptx", &out)?;
    let launches = launch_lines(&ptx);
    let split = launches.iter().filter(|l| l.contains("gemm_tc_") && l.contains(", 4] block")).count();
    let sums = launches.iter().filter(|l| l.contains("splitk_")).count();
    if launches.len() != 2 || split != 1 || sums != 1 {
        return Err(format!("expected a 4-way split GEMM and its sum, got {launches:#?}").into());
    }
    let art = d.join("model.aoc");
    compile(&m, "sm_86", "fp16", &art)?;
    check_entries(&art)?;
    if emit(&m.file, "sm_86", "fp32", "ptx", &out)?.contains("splitk_") {
        return Err("the fp32 build splits k".into());
    }
    Ok(())
}

/// The split-k GEMM on the GPU against the interpreter.
fn split_k_on_gpu() -> Result<(), Failed> {
    let m = split_k_model(&scratch("split_k_gpu"))?;
    check_on_gpu(&m, "sm_86", "fp16")
}

/// A BERT-style block at 32 × 128 tokens, hidden 512, 8 heads, in
/// `.air`: layer norm → Q, K, V projections → fused attention → output
/// projection → relu → a last projection (without `attention`: layer norm
/// → one projection → relu → the last projection). On sm_90a at fp16 every GEMM
/// runs on `wgmma` and every A it reads comes as a half copy that the
/// producer (layer norm, attention, the previous GEMM) writes beside its
/// f32 output: no conversion launch.
fn half_copies_model(dir: &Path, attention: bool) -> Result<Model, Failed> {
    let (b, s, h, d) = (32, 128, 8, 64);
    let (m, e) = (b * s, h * d);
    let vec = |n: usize, seed| {
        let rows = dense(1, n, seed);
        rows[1..rows.len() - 1].to_string()
    };
    let mut t = format!("func @main(%x: tensor<{m}x{d}xf32>) -> tensor<{m}x{e}xf32> {{\n");
    t += &format!("  %g = const dense<{}> : tensor<{d}xf32>\n", vec(d, 5));
    t += &format!("  %be = const dense<{}> : tensor<{d}xf32>\n", vec(d, 6));
    t += &format!("  %n = core.layer_norm %x, %g, %be {{epsilon = 1.0e-5}} : tensor<{m}x{d}xf32>\n");
    let heads = if attention { &[("q", 7), ("k", 8), ("v", 9)][..] } else { &[] };
    if !attention {
        t += &format!("  %wq = const dense<{}> : tensor<{d}x{e}xf32>\n", dense(d, e, 7));
        t += &format!("  %o = core.matmul %n, %wq : tensor<{m}x{e}xf32>\n");
    }
    for &(name, seed) in heads {
        t += &format!("  %w{name} = const dense<{}> : tensor<{d}x{e}xf32>\n", dense(d, e, seed));
        t += &format!("  %{name}2 = core.matmul %n, %w{name} : tensor<{m}x{e}xf32>\n");
        t += &format!("  %{name}4 = core.reshape %{name}2 {{shape = [{b}, {s}, {h}, {d}]}} : tensor<{b}x{s}x{h}x{d}xf32>\n");
    }
    if attention {
        t += &format!("  %qh = core.transpose %q4 {{perm = [0, 2, 1, 3]}} : tensor<{b}x{h}x{s}x{d}xf32>\n");
        t += "  %c = const dense<0.125> : tensor<f32>\n";
        t += &format!("  %qs = core.mul %qh, %c : tensor<{b}x{h}x{s}x{d}xf32>\n");
        t += &format!("  %kt = core.transpose %k4 {{perm = [0, 2, 3, 1]}} : tensor<{b}x{h}x{d}x{s}xf32>\n");
        t += &format!("  %vh = core.transpose %v4 {{perm = [0, 2, 1, 3]}} : tensor<{b}x{h}x{s}x{d}xf32>\n");
        t += &format!("  %a = core.attention %qs, %kt, %vh : tensor<{b}x{h}x{s}x{d}xf32>\n");
        t += &format!("  %at = core.transpose %a {{perm = [0, 2, 1, 3]}} : tensor<{b}x{s}x{h}x{d}xf32>\n");
        t += &format!("  %a2 = core.reshape %at {{shape = [{m}, {e}]}} : tensor<{m}x{e}xf32>\n");
        t += &format!("  %wo = const dense<{}> : tensor<{e}x{e}xf32>\n", dense(e, e, 10));
        t += &format!("  %o = core.matmul %a2, %wo : tensor<{m}x{e}xf32>\n");
    }
    t += &format!("  %r = core.relu %o : tensor<{m}x{e}xf32>\n");
    t += &format!("  %w2 = const dense<{}> : tensor<{e}x{e}xf32>\n", dense(e, e, 11));
    t += &format!("  %y = core.matmul %r, %w2 : tensor<{m}x{e}xf32>\n");
    t += &format!("  return %y : tensor<{m}x{e}xf32>\n}}\n");
    let file = dir.join(if attention { "half_copies.air" } else { "half_copies_short.air" });
    std::fs::write(&file, t)?;
    // 2 M outputs of two chained bf16 products: the largest error is a
    // far tail of bf16's rounding (1.3e-2 of max|y| measured on an H200).
    let bf16_tolerance = Some(2e-2);
    Ok(Model { name: "half_copies".into(), file, inputs: vec![format!("x=@random:{m}x{d}")], shapes: vec![], quantized: false, bf16_tolerance })
}

/// The half copies replace the conversion launches of [`half_copies_model`].
fn half_copies_build() -> Result<(), Failed> {
    let d = scratch("half_copies");
    let m = half_copies_model(&d, true)?;
    let ptx = emit(&m.file, "sm_90a", "fp16", "ptx", &d.join("model.ptx"))?;
    let launches = launch_lines(&ptx);
    let count = |p: &str| launches.iter().filter(|l| l.contains(p)).count();
    if count("gemm_wgmma_") != 5 || count("cvt_") != 0 || count("attention_") != 1 || count("layer_norm_") != 1 {
        return Err(format!("expected 5 wgmma GEMMs, attention, layer norm and no conversion: {launches:#?}").into());
    }
    // Only the out-projection reads attention's output: its f32 form is
    // not stored, only the half copy.
    let at = ptx.find(".entry attention_").ok_or("no attention entry")?;
    let body = &ptx[at..ptx[at..].find("\n}\n").map_or(ptx.len(), |e| at + e)];
    if body.contains("st.global.f32") || body.contains("st.global.b32") || !body.contains("st.global.b16") {
        return Err("attention's output is still stored as f32 (or no half copy)".into());
    }
    let art = d.join("model.aoc");
    compile(&m, "sm_90a", "fp16", &art)?;
    check_entries(&art)
}

/// [`half_copies_model`] on the GPU against the interpreter (f16 and bf16
/// copies).
fn half_copies_on_gpu(precision: &str) -> Result<(), Failed> {
    // bf16's 8-bit mantissa drifts past 1e-2 over the five chained
    // products of the full block: the short chain for it.
    let m = half_copies_model(&scratch(&format!("half_copies_gpu_{precision}")), precision == "fp16")?;
    check_on_gpu(&m, "sm_90a", precision)
}

/// A seeded literal of `shape` (nested brackets), values in
/// [-scale/2, scale/2).
fn nested(shape: &[usize], scale: f32, seed: usize) -> String {
    fn go(shape: &[usize], scale: f32, seed: usize, at: &mut usize) -> String {
        let Some((&n, rest)) = shape.split_first() else {
            *at += 1;
            return format!("{:.4}", (((*at * 7919 + seed) % 97) as f32 / 97.0 - 0.5) * scale);
        };
        let parts: Vec<String> = (0..n).map(|_| go(rest, scale, seed, at)).collect();
        format!("[{}]", parts.join(", "))
    }
    go(shape, scale, seed, &mut 0)
}

/// Convolutions the `wgmma` kernel reads implicitly (NCHW in `.air`):
/// `x` 16×3×80×80 → a 7×7 stride-2 stem + relu (`c0`, its 3 channels
/// padded to 8 in the half copy) → a 3×3 max pool (`p`) → 3×3 padded +
/// relu (`c1`) → 3×3 stride 2 + relu (`c2`) → 3×3 dilation 2 (`c3`), plus
/// a 1×1 stride-2 projection of `c1` (`d`), `relu(c3 + c2) + d`. On sm_90a at
/// fp16 all five run on `wgmma`, with one padding copy of `x` and no
/// conversion: the pool writes `c1`'s half input, `c1`'s half copy serves
/// both `c2` and `d`, `c2`'s is written by `c2`'s launch for `c3`, whose
/// epilogue also reads it as the residual.
fn wgmma_convs_model(dir: &Path) -> Result<Model, Failed> {
    let w = |o: usize, i: usize, k: usize, seed| {
        let scale = 2.0 / ((i * k * k) as f32).sqrt();
        format!("const dense<{}> : tensor<{o}x{i}x{k}x{k}xf32>", nested(&[o, i, k, k], scale, seed))
    };
    let mut t = "func @main(%x: tensor<16x3x80x80xf32>) -> tensor<16x128x20x20xf32> {\n".to_string();
    t += &format!("  %w0 = {}\n  %w1 = {}\n  %w2 = {}\n  %w3 = {}\n  %wd = {}\n", w(64, 3, 7, 5), w(64, 64, 3, 1), w(128, 64, 3, 2), w(128, 128, 3, 3), w(128, 64, 1, 4));
    t += "  %a0 = core.conv2d %x, %w0 {strides = [2, 2], pads = [3, 3, 3, 3]} : tensor<16x64x40x40xf32>\n";
    t += "  %c0 = core.relu %a0 : tensor<16x64x40x40xf32>\n";
    t += "  %p = core.max_pool2d %c0 {kernel = [3, 3], pads = [1, 1, 1, 1]} : tensor<16x64x40x40xf32>\n";
    t += "  %a1 = core.conv2d %p, %w1 {pads = [1, 1, 1, 1]} : tensor<16x64x40x40xf32>\n";
    t += "  %c1 = core.relu %a1 : tensor<16x64x40x40xf32>\n";
    t += "  %a2 = core.conv2d %c1, %w2 {strides = [2, 2], pads = [1, 1, 1, 1]} : tensor<16x128x20x20xf32>\n";
    t += "  %c2 = core.relu %a2 : tensor<16x128x20x20xf32>\n";
    t += "  %c3 = core.conv2d %c2, %w3 {dilations = [2, 2], pads = [2, 2, 2, 2]} : tensor<16x128x20x20xf32>\n";
    t += "  %d = core.conv2d %c1, %wd {strides = [2, 2]} : tensor<16x128x20x20xf32>\n";
    t += "  %s = core.add %c3, %c2 : tensor<16x128x20x20xf32>\n";
    t += "  %r = core.relu %s : tensor<16x128x20x20xf32>\n";
    t += "  %y = core.add %r, %d : tensor<16x128x20x20xf32>\n";
    t += "  return %y : tensor<16x128x20x20xf32>\n}\n";
    let file = dir.join("wgmma_convs.air");
    std::fs::write(&file, t)?;
    Ok(Model { name: "wgmma_convs".into(), file, inputs: vec!["x=@random:16x3x80x80".into()], shapes: vec![], quantized: false, bf16_tolerance: None })
}

/// [`wgmma_convs_model`] for sm_90a: five `wgmma` convolutions, one
/// padding copy, no conversion, no `mma.sync` GEMM; the pool, `c1` and
/// `c2` store only their half copies (every reader of theirs reads those).
fn wgmma_convs_build() -> Result<(), Failed> {
    let d = scratch("wgmma_convs");
    let m = wgmma_convs_model(&d)?;
    let ptx = emit(&m.file, "sm_90a", "fp16", "ptx", &d.join("model.ptx"))?;
    let launches = launch_lines(&ptx);
    let count = |p: &str| launches.iter().filter(|l| l.contains(p)).count();
    if count("gemm_wgmma_") != 5 || count("pad_half_") != 1 || count("cvt_") != 0 || count("gemm_tc_") != 0 {
        return Err(format!("expected 5 wgmma convolutions and one padding copy: {launches:#?}").into());
    }
    // In the LLVM IR: which convolution kernels store 16-bit values, and
    // which store no f32 to global memory.
    let ir = emit(&m.file, "sm_90a", "fp16", "llvm", &d.join("model.ll"))?;
    let convs: Vec<&str> =
        ir.split("define ptx_kernel void @").filter(|k| k.starts_with("gemm_wgmma_") || k.starts_with("pool_")).collect();
    let stores = |k: &str, ty: &str| k.lines().any(|l| l.trim_start().starts_with(&format!("store {ty}")) && l.contains("ptr addrspace(1)"));
    let halves = convs.iter().filter(|k| stores(k, "i16") || stores(k, "<2 x i16>")).count();
    let only_halves = convs.iter().filter(|k| (stores(k, "i16") || stores(k, "<2 x i16>")) && !stores(k, "float") && !stores(k, "<2 x float>")).count();
    // c3's epilogue reads the residual c2 from its half copy.
    if !ir.contains("fpext half") {
        return Err("no epilogue reads a half copy".into());
    }
    if halves != 3 || only_halves != 3 {
        return Err(format!("expected the pool, c1 and c2 to write only half copies ({halves} write 16-bit values, {only_halves} only those)").into());
    }
    let art = d.join("model.aoc");
    compile(&m, "sm_90a", "fp16", &art)?;
    check_entries(&art)
}

/// [`wgmma_convs_model`] on the GPU against the interpreter.
fn wgmma_convs_on_gpu(precision: &str) -> Result<(), Failed> {
    let m = wgmma_convs_model(&scratch(&format!("wgmma_convs_gpu_{precision}")))?;
    check_on_gpu(&m, "sm_90a", precision)
}

/// `--tune` times every GEMM's tiles on the GPU, caches the winners, and a
/// second compile of the same model measures nothing; the tuned artifact
/// computes what the untuned one does.
fn tune_measures_once_and_stays_correct() -> Result<(), Failed> {
    if let Some(why) = no_gpu() {
        println!("skipped: {why}");
        return Ok(());
    }
    let m = models().into_iter().find(|m| m.name == "resnet_block").ok_or("examples/resnet_block is missing")?;
    let d = scratch("tune");
    let (art, cache) = (d.join("model.aoc"), d.join("tune.json"));
    let args = |p: &str| {
        vec![
            "compile".to_string(),
            m.file.display().to_string(),
            "--target".into(),
            "sm_90".into(),
            "--precision".into(),
            p.into(),
            "--tune".into(),
            "--tune-cache".into(),
            cache.display().to_string(),
            "-o".into(),
            art.display().to_string(),
        ]
    };
    for p in ["fp32", "fp16"] {
        let a = args(p);
        let first = run(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
        if !first.contains("GEMM shapes measured, 0 from the cache") || first.contains(" 0 GEMM shapes measured") {
            return Err(format!("the first tuned compile should measure: {first}").into());
        }
        let second = run(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
        if !second.contains(": 0 GEMM shapes measured") {
            return Err(format!("the second tuned compile should use the cache: {second}").into());
        }
        let (want_dir, got_dir) = (d.join(format!("want_{p}")), d.join(format!("got_{p}")));
        run_to_dir(&m.file, &m.inputs, &[], &want_dir)?;
        run_to_dir(&art, &m.inputs, &[], &got_dir)?;
        for ((_, w), (n, g)) in outputs(&want_dir)?.iter().zip(&outputs(&got_dir)?) {
            let (wv, gv) = (w.to_f64(), g.to_f64());
            let scale = wv.iter().fold(1.0f64, |a, v| a.max(v.abs()));
            let err = wv.iter().zip(&gv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
            let tol = if p == "fp32" { 1e-3 } else { 1e-2 };
            if !(err <= tol) {
                return Err(format!("tuned {p}: output {n} differs by {err:.3e}").into());
            }
        }
    }
    let cached: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cache)?)?;
    println!("{} cached winners", cached.as_object().map_or(0, |o| o.len()));
    Ok(())
}

fn no_gpu_is_a_clear_error() -> Result<(), Failed> {
    if no_gpu().is_none() {
        println!("skipped: this machine has a GPU");
        return Ok(());
    }
    let m = models().into_iter().next().ok_or("no example models")?;
    let d = scratch("no_gpu");
    let art = d.join("model.aoc");
    let tuned = Command::new(aoc())
        .args(["compile", &m.file.display().to_string(), "--target", "sm_86", "--tune", "-o", &art.display().to_string()])
        .output()?;
    let err = String::from_utf8_lossy(&tuned.stderr);
    if tuned.status.code() != Some(1) || !err.contains("--tune needs a GPU") {
        return Err(format!("--tune without a GPU: expected exit 1 naming it, got {}: {err}", tuned.status).into());
    }
    compile(&m, "sm_86", "fp32", &art)?;
    let out = Command::new(aoc()).args(["run", &art.display().to_string(), "--input", &m.inputs[0]]).output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(1) || !(err.contains("no NVIDIA driver") || err.contains("reports no GPU")) {
        return Err(format!("expected exit 1 naming the missing driver or GPU, got {}: {err}", out.status).into());
    }
    Ok(())
}

/// `GpuSession::run_io` with the input and output in device memory (what
/// the Python package's DLPack path calls) gives exactly the bytes of a
/// run through host memory, mixed host/device too; a device address whose
/// tensor would run past its allocation, or that is no device memory at
/// all, is refused before anything is queued.
fn device_buffers_in_and_out() -> Result<(), Failed> {
    use aoc_runtime::cuda::{DeviceBuffer, Dst, GpuSession, Src};
    let m = models().into_iter().find(|m| m.name == "resnet_block").ok_or("examples/resnet_block is missing")?;
    let d = scratch("device_io");
    let art = d.join("model.aoc");
    compile(&m, "sm_86", "fp16", &art)?;
    if let Some(why) = no_gpu() {
        println!("skipped: {why}");
        return Ok(());
    }
    let s = GpuSession::load(&art).map_err(|e| e.to_string())?;
    let x = read_npy(Path::new(&m.inputs[0]))?;
    let input: Vec<u8> = x.to_f64().iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    let host = s.run(&[&input]).map_err(|e| e.to_string())?;
    let gpu = s.gpu();
    let dev_in = DeviceBuffer::new(gpu, input.len()).map_err(|e| e.to_string())?;
    dev_in.copy_from_host(&input).map_err(|e| e.to_string())?;
    let dev_out: Vec<DeviceBuffer> = host.iter().map(|o| DeviceBuffer::new(gpu, o.len())).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let mut dsts: Vec<Dst> = dev_out.iter().map(|b| Dst::Device(b.ptr())).collect();
    s.run_io(&[Src::Device(dev_in.ptr())], &mut dsts, None).map_err(|e| format!("device in, device out: {e}"))?;
    let same = |what: &str| -> Result<(), Failed> {
        for (i, (b, want)) in dev_out.iter().zip(&host).enumerate() {
            let mut got = vec![0u8; want.len()];
            b.copy_to_host(&mut got).map_err(|e| e.to_string())?;
            if &got != want {
                return Err(format!("{what}, output {i}: the device run differs from the host run").into());
            }
        }
        Ok(())
    };
    same("waited for")?;
    // Ordered against the legacy default stream, the call returns before
    // the run is done (no index check here); the stream's later work, the
    // copies back included, sees the outputs. Twice, back to back.
    for round in 0..2 {
        let mut dsts: Vec<Dst> = dev_out.iter().map(|b| Dst::Device(b.ptr())).collect();
        s.run_io(&[Src::Device(dev_in.ptr())], &mut dsts, Some(0)).map_err(|e| format!("ordered on the default stream: {e}"))?;
        drop(dsts);
        gpu.context().synchronize().map_err(|e| format!("{e:?}"))?;
        same(&format!("ordered on the default stream, round {round}"))?;
    }
    let mut mixed: Vec<Vec<u8>> = host.iter().map(|o| vec![0u8; o.len()]).collect();
    let mut dsts: Vec<Dst> = mixed.iter_mut().map(|o| Dst::Host(o)).collect();
    s.run_io(&[Src::Device(dev_in.ptr())], &mut dsts, None).map_err(|e| format!("device in, host out: {e}"))?;
    drop(dsts);
    if mixed != host {
        return Err("device in, host out: the outputs differ from the host run".into());
    }
    let mut dsts: Vec<Dst> = dev_out.iter().map(|b| Dst::Device(b.ptr())).collect();
    let past = s.run_io(&[Src::Device(dev_in.ptr() + 64)], &mut dsts, None).err().map(|e| e.to_string()).unwrap_or_default();
    if !past.contains("allocation ends") || !past.contains("input") {
        return Err(format!("an input running 64 bytes past its allocation: expected a refusal, got `{past}`").into());
    }
    let mut bad: Vec<Dst> = host.iter().map(|_| Dst::Device(0x1000)).collect();
    let bogus = s.run_io(&[Src::Host(&input)], &mut bad, None).err().map(|e| e.to_string()).unwrap_or_default();
    if !bogus.contains("not memory of a CUDA device") || !bogus.contains("output") {
        return Err(format!("an output at 0x1000: expected a refusal, got `{bogus}`").into());
    }
    println!("device I/O matches host I/O bit for bit; refusals: {past} | {bogus}");
    Ok(())
}

/// A gather with an index out of range fails its run; run ordered on a
/// caller's stream with device I/O returns before the check can be made,
/// so the session's next run reports it (naming the earlier run), and the
/// run after that is clean again.
fn late_index_errors_are_reported() -> Result<(), Failed> {
    use aoc_runtime::cuda::{DeviceBuffer, Dst, GpuSession, Src};
    let d = scratch("late_index");
    let table = (0..8).map(|r| format!("[{}]", (0..4).map(|c| format!("{}.0", r * 4 + c)).collect::<Vec<_>>().join(", "))).collect::<Vec<_>>().join(", ");
    let air = d.join("gather.air");
    std::fs::write(
        &air,
        format!(
            "func @main(%idx: tensor<3xi64>) -> tensor<3x4xf32> {{\n  %t = const dense<[{table}]> : tensor<8x4xf32>\n  %y = core.gather %t, %idx : tensor<3x4xf32>\n  return %y : tensor<3x4xf32>\n}}\n"
        ),
    )?;
    let art = d.join("gather.aoc");
    run(&["compile", &air.display().to_string(), "--target", "sm_86", "-o", &art.display().to_string()])?;
    if let Some(why) = no_gpu() {
        println!("skipped: {why}");
        return Ok(());
    }
    let s = GpuSession::load(&art).map_err(|e| e.to_string())?;
    let idx = |v: [i64; 3]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let good = idx([0, 7, 2]);
    let bad = idx([0, 9, 2]);
    let out = s.run(&[&good]).map_err(|e| e.to_string())?;
    let row7: Vec<u8> = (28..32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    if out[0][16..32] != row7[..] {
        return Err("gather of row 7 read the wrong values".into());
    }
    let now = s.run(&[&bad]).err().map(|e| e.to_string()).unwrap_or_default();
    if !now.contains("out of range") {
        return Err(format!("a waited-for run with index 9 of 8: expected an error, got `{now}`").into());
    }
    let gpu = s.gpu();
    let dev_in = DeviceBuffer::new(gpu, bad.len()).map_err(|e| e.to_string())?;
    dev_in.copy_from_host(&bad).map_err(|e| e.to_string())?;
    let dev_out = DeviceBuffer::new(gpu, out[0].len()).map_err(|e| e.to_string())?;
    s.run_io(&[Src::Device(dev_in.ptr())], &mut [Dst::Device(dev_out.ptr())], Some(0))
        .map_err(|e| format!("the queued run itself cannot know yet: {e}"))?;
    let late = s.run(&[&good]).err().map(|e| e.to_string()).unwrap_or_default();
    if !late.contains("previous run") || !late.contains("out of range") {
        return Err(format!("the run after a queued bad one: expected the late report, got `{late}`").into());
    }
    let again = s.run(&[&good]).map_err(|e| format!("the run after the report: {e}"))?;
    if again != out {
        return Err("the run after the report gave different outputs".into());
    }
    println!("waited-for: {now} | queued, reported late: {late}");
    Ok(())
}

/// GPU artifacts through the C API (`aoc_runtime.h`): `aoc_session_load`
/// of an sm_86 artifact describes its ports from the manifest and
/// `aoc_session_run` (two threads at once on one session) matches the
/// interpreter as `aoc run` does; a wrong buffer size is an error naming
/// the tensor. Without a GPU, the load fails with NULL and a message that
/// names the missing driver or GPU, never a crash.
fn c_api_runs_gpu_artifacts() -> Result<(), Failed> {
    use aoc_runtime::capi::*;
    use std::ffi::{CStr, CString, c_void};
    let last_error = || unsafe { CStr::from_ptr(aoc_last_error()) }.to_string_lossy().to_string();
    let m = models().into_iter().find(|m| m.name == "resnet_block").ok_or("examples/resnet_block is missing")?;
    let d = scratch("c_api");
    let art = d.join("model.aoc");
    compile(&m, "sm_86", "fp32", &art)?;
    let path = CString::new(art.display().to_string())?;
    let s = unsafe { aoc_session_load(path.as_ptr(), 0) };
    if let Some(why) = no_gpu() {
        let err = last_error();
        if !s.is_null() || !(err.contains("no NVIDIA driver") || err.contains("reports no GPU")) || !err.contains("model.aoc") {
            return Err(format!("without a GPU: expected NULL and the missing driver or GPU named, got {s:?}: {err}").into());
        }
        println!("skipped the run: {why} (the load failed as it should: {err})");
        return Ok(());
    }
    if s.is_null() {
        return Err(format!("aoc_session_load: {}", last_error()).into());
    }
    struct Free(*mut AocSession);
    impl Drop for Free {
        fn drop(&mut self) {
            unsafe { aoc_session_free(self.0) }
        }
    }
    let s = Free(s);
    let (n_in, n_out) = unsafe { (aoc_session_input_count(s.0), aoc_session_output_count(s.0)) };
    if n_in != 1 || n_out == 0 {
        return Err(format!("{n_in} inputs and {n_out} outputs").into());
    }
    let x = read_npy(Path::new(&m.inputs[0]))?;
    let in_bytes: Vec<u8> = x.to_f64().iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    if unsafe { aoc_session_input_bytes(s.0, 0) } != in_bytes.len() {
        return Err(format!("input bytes {} vs the .npy's {}", unsafe { aoc_session_input_bytes(s.0, 0) }, in_bytes.len()).into());
    }
    let want_dir = d.join("want");
    run_to_dir(&m.file, std::slice::from_ref(&m.inputs[0]), &[], &want_dir)?;
    let want = outputs(&want_dir)?;
    let out_sizes: Vec<usize> = (0..n_out).map(|i| unsafe { aoc_session_output_bytes(s.0, i) }).collect();
    let session = s.0 as usize;
    let runs: Vec<Result<Vec<Vec<u8>>, String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (in_bytes, out_sizes) = (&in_bytes, &out_sizes);
                sc.spawn(move || {
                    let mut outs: Vec<Vec<u8>> = out_sizes.iter().map(|&n| vec![0u8; n]).collect();
                    let ins = [in_bytes.as_ptr() as *const c_void];
                    let ptrs: Vec<*mut c_void> = outs.iter_mut().map(|o| o.as_mut_ptr() as *mut c_void).collect();
                    let rc = unsafe {
                        aoc_session_run(session as *mut AocSession, ins.as_ptr(), [in_bytes.len()].as_ptr(), 1, ptrs.as_ptr(), out_sizes.as_ptr(), out_sizes.len())
                    };
                    if rc != 0 { Err(unsafe { CStr::from_ptr(aoc_last_error()) }.to_string_lossy().to_string()) } else { Ok(outs) }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into()))).collect()
    });
    for run in runs {
        let outs = run.map_err(|e| format!("aoc_session_run: {e}"))?;
        for (i, (o, (wn, w))) in outs.iter().zip(&want).enumerate() {
            let got: Vec<f64> = o.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect();
            let wv = w.to_f64();
            if got.len() != wv.len() {
                return Err(format!("output {i}: {} values, the interpreter's {wn} has {}", got.len(), wv.len()).into());
            }
            let scale = wv.iter().fold(1.0f64, |a, v| a.max(v.abs()));
            let err = wv.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
            println!("C API output {i}: max error {err:.2e} of {scale:.3}");
            if err.is_nan() || err > 1e-3 {
                return Err(format!("C API output {i} differs from the interpreter's {wn} by {err:.3e}").into());
            }
        }
    }
    let mut short = vec![0u8; out_sizes[0].saturating_sub(4)];
    let ptrs = [short.as_mut_ptr() as *mut c_void];
    let rc = unsafe { aoc_session_run(s.0, [in_bytes.as_ptr() as *const c_void].as_ptr(), [in_bytes.len()].as_ptr(), 1, ptrs.as_ptr(), [short.len()].as_ptr(), 1) };
    let err = last_error();
    if n_out == 1 && (rc == 0 || !err.contains("bytes")) {
        return Err(format!("a short output buffer: expected an error naming the size, got rc {rc}: {err}").into());
    }
    Ok(())
}

/// NaN and ±inf through every epilogue the GPU compiles: a convolution with
/// bias and relu (implicit GEMM), a GEMM with relu, a max pool, a clip, a
/// softmax, each compared element by element with the interpreter: NaN
/// where it has NaN, the same infinities, the same finite values. (The GEMM
/// epilogues' relu was `llvm.maxnum`, which turns NaN into 0.) The model
/// is compiler/tests/data/nan_epilogues.air; cli.rs runs it on the CPU.

fn nan_through_epilogues() -> Result<(), Failed> {
    if let Some(why) = no_gpu() {
        println!("skipped: {why}");
        return Ok(());
    }
    let d = scratch("gpu_nan");
    let file = root().join("compiler/tests/data/nan_epilogues.air");
    let data = root().join("compiler/tests/data");
    let inputs = vec![format!("x={}", data.join("nan_x.npy").display()), format!("a={}", data.join("nan_a.npy").display())];
    let want_dir = d.join("want");
    run_to_dir(&file, &inputs, &[], &want_dir)?;
    let want = outputs(&want_dir)?;
    for (target, precision) in [("sm_86", "fp32"), ("sm_90a", "fp32")] {
        let art = d.join(format!("{target}.aoc"));
        run(&["compile", &file.display().to_string(), "--target", target, "--precision", precision, "-o", &art.display().to_string()])?;
        let got_dir = d.join(format!("got-{target}"));
        run_to_dir(&art, &inputs, &[], &got_dir)?;
        for ((name, w), (_, g)) in want.iter().zip(&outputs(&got_dir)?) {
            for (i, (wv, gv)) in w.to_f64().iter().zip(g.to_f64()).enumerate() {
                let same = if wv.is_nan() { gv.is_nan() } else if wv.is_infinite() { *wv == gv } else { (wv - gv).abs() <= 1e-4 * wv.abs().max(1.0) };
                if !same {
                    return Err(format!("{target}: {name}[{i}] is {gv}, the interpreter's is {wv}").into());
                }
            }
        }
    }
    Ok(())
}

/// Eight calibration batches of `shape` (uniform in [-2, 2), seeded) in
/// `d/calib`; the folder.
fn calibration(d: &Path, shape: &[usize]) -> Result<PathBuf, Failed> {
    let calib = d.join("calib");
    std::fs::create_dir_all(&calib)?;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for b in 0..8 {
        let vals: Vec<f64> = (0..shape.iter().product::<usize>())
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
            })
            .collect();
        let t = Tensor::from_f64(aoc_ir::types::TensorType::new(shape.to_vec(), aoc_ir::types::Scalar::F32), vals);
        aoc_compiler::npy::write_npy(&calib.join(format!("b{b}.npy")), &t)?;
    }
    Ok(calib)
}

/// A BERT-style attention block (batch 2, 64 tokens, 2 heads of 64):
/// q, k and v projections with biases, reshaped and transposed into heads,
/// scaled dot-product attention, heads merged, an output projection, the
/// residual add and a layer norm; quantized by `aoc quantize --target
/// sm_90`, which leaves the attention and the layer norm in float: each
/// projection's bytes are dequantized for the attention alone, and the
/// residual sum's for the layer norm.
fn int8_attention_model(tag: &str) -> Result<Model, Failed> {
    attention_block_model(&format!("int8_attention_{tag}"), &["--target", "sm_90"], false)
}

/// [`int8_attention_model`]'s block, with one more projection after the
/// layer norm where `projected` (so that a quantized layer reads the layer
/// norm's output), in `.air` (every op named, as an imported model's) and
/// quantized by `aoc quantize` with `args`, in the scratch folder `name`.
pub(crate) fn attention_block_model(name: &str, args: &[&str], projected: bool) -> Result<Model, Failed> {
    let (b, s, h, heads) = (2, 64, 128, 2);
    let hd = h / heads;
    let d = scratch(name);
    let bias = |seed| {
        let v = dense(1, h, seed);
        v[1..v.len() - 1].to_string()
    };
    let mut text = format!("func @main(%x: tensor<{b}x{s}x{h}xf32>) -> tensor<{b}x{s}x{h}xf32> {{\n");
    for (i, (name, perm, shape)) in [
        ("q", "0, 2, 1, 3", format!("{b}x{heads}x{s}x{hd}")),
        ("k", "0, 2, 3, 1", format!("{b}x{heads}x{hd}x{s}")),
        ("v", "0, 2, 1, 3", format!("{b}x{heads}x{s}x{hd}")),
    ]
    .into_iter()
    .enumerate()
    {
        text += &format!(
            "  %w{name} = const dense<{}> : tensor<{h}x{h}xf32>\n  \
             %b{name} = const dense<{}> : tensor<{h}xf32>\n  \
             %{name}0 = core.matmul %x, %w{name} : tensor<{b}x{s}x{h}xf32>\n  \
             %{name}1 = core.add %{name}0, %b{name} : tensor<{b}x{s}x{h}xf32>\n  \
             %{name}2 = core.reshape %{name}1 {{shape = [{b}, {s}, {heads}, {hd}]}} : tensor<{b}x{s}x{heads}x{hd}xf32>\n  \
             %{name} = core.transpose %{name}2 {{perm = [{perm}]}} : tensor<{shape}xf32>\n",
            dense(h, h, 11 + i),
            bias(21 + i)
        );
    }
    text += &format!(
        "  %sc = core.matmul %q, %k : tensor<{b}x{heads}x{s}x{s}xf32>\n  \
         %c = const dense<0.125> : tensor<f32>\n  \
         %ss = core.mul %sc, %c : tensor<{b}x{heads}x{s}x{s}xf32>\n  \
         %p = core.softmax %ss : tensor<{b}x{heads}x{s}x{s}xf32>\n  \
         %o = core.matmul %p, %v : tensor<{b}x{heads}x{s}x{hd}xf32>\n  \
         %ot = core.transpose %o {{perm = [0, 2, 1, 3]}} : tensor<{b}x{s}x{heads}x{hd}xf32>\n  \
         %om = core.reshape %ot {{shape = [{b}, {s}, {h}]}} : tensor<{b}x{s}x{h}xf32>\n  \
         %wo = const dense<{}> : tensor<{h}x{h}xf32>\n  \
         %y0 = core.matmul %om, %wo : tensor<{b}x{s}x{h}xf32>\n  \
         %r = core.add %y0, %x : tensor<{b}x{s}x{h}xf32>\n  \
         %g = const dense<{}> : tensor<{h}xf32>\n  \
         %be = const dense<{}> : tensor<{h}xf32>\n  \
         %y = core.layer_norm %r, %g, %be {{epsilon = 1e-5}} : tensor<{b}x{s}x{h}xf32>\n",
        dense(h, h, 31),
        bias(41),
        bias(42)
    );
    text += &if projected {
        format!(
            "  %w2 = const dense<{}> : tensor<{h}x{h}xf32>\n  \
             %z = core.matmul %y, %w2 : tensor<{b}x{s}x{h}xf32>\n  \
             return %z : tensor<{b}x{s}x{h}xf32>\n}}\n",
            dense(h, h, 51)
        )
    } else {
        format!("  return %y : tensor<{b}x{s}x{h}xf32>\n}}\n")
    };
    // Every op named, as an imported model's are (`aoc quantize` keeps a
    // named layer without an integer kernel on the target in float).
    let text: String = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix('%').and_then(|r| r.split_once(" = core.")) {
            Some((name, _)) => format!("{l} loc(\"{name}\")\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let float = d.join("float.air");
    std::fs::write(&float, text)?;
    let calib = calibration(&d, &[b, s, h])?;
    let file = d.join("model.air");
    let (float, calib, out) = (float.display().to_string(), calib.display().to_string(), file.display().to_string());
    let mut cmd = vec!["quantize", &float, "--calib", &calib, "-o", &out, "-q"];
    cmd.extend(args);
    run(&cmd)?;
    Ok(Model {
        name: name.to_string(),
        file,
        inputs: vec![format!("x=@random:{b}x{s}x{h}")],
        shapes: vec![],
        quantized: true,
        bf16_tolerance: None,
    })
}

/// The attention of [`int8_attention_model`] reads the projections' bytes
/// and dequantizes them as it stages them (`attention::attention_bytes`),
/// and so does the layer norm with the residual sum
/// (`rows::layer_norm_bytes`): their kernels define a dequantization for
/// each of q, k and v and for x, and no launch dequantizes before the
/// attention (`make gpu-test` runs the model against the interpreter as
/// `gpu_int8_attention_*`).
fn int8_attention_reads_bytes() -> Result<(), Failed> {
    let m = int8_attention_model("build")?;
    let d = scratch("int8_attention_emit");
    for target in ["sm_90a", "sm_86"] {
        let ll = emit(&m.file, target, "fp16", "llvm", &d.join("model.ll"))?;
        let dq = |i: usize| ll.lines().any(|l| l.starts_with("define internal float @attention") && l.contains(&format!("_dq{i}(")));
        if !(dq(0) && dq(1) && dq(2)) {
            return Err(format!("{target}: the attention does not dequantize q, k and v itself").into());
        }
        if !ll.lines().any(|l| l.starts_with("define internal float @layer_norm") && l.contains("_dq(")) {
            return Err(format!("{target}: the layer norm does not dequantize its input itself").into());
        }
        let ptx = emit(&m.file, target, "fp16", "ptx", &d.join("model.ptx"))?;
        // Before the attention (the model's output may be dequantized alone on sm_86).
        let launches = launch_lines(&ptx);
        let attention = launches.iter().position(|l| l.contains("launch attention")).ok_or("no attention launch")?;
        if launches[..attention].iter().any(|l| l.split_once("<- ").is_some_and(|(_, o)| o.starts_with("quant.dequantize"))) {
            return Err(format!("{target}: a dequantize launched before the attention: {launches:#?}").into());
        }
    }
    Ok(())
}

/// `aoc quantize --target sm_90` of the encoder layer, compiled with
/// `--precision fp16` for sm_90a: its int8 matmuls are s8 `mma.sync`
/// launches, the attention's products (no integer GPU kernel) run in fp16,
/// the float glue between integer steps is merged (no lone dequantize or
/// quantized add launch), and on a GPU the artifact gives the quantized model's interpreter
/// outputs to within one quantization step.
fn quantized_for_the_gpu() -> Result<(), Failed> {
    let d = scratch("quantized_for_sm_90");
    let model = root().join("examples/encoder_layer/model.air");
    let input = read_npy(&model.with_file_name("input.npy"))?;
    let calib = calibration(&d, &input.ty.shape)?;
    let q = d.join("q.air");
    let note = run(&["quantize", &model.display().to_string(), "--calib", &calib.display().to_string(), "--target", "sm_90", "-o", &q.display().to_string()])?;
    if !note.contains("--precision fp16") || !note.contains("fp16") {
        return Err(format!("no fp16 note in:\n{note}").into());
    }
    let m = Model {
        name: "encoder_int8_for_sm_90".to_string(),
        file: q.clone(),
        inputs: vec![model.with_file_name("input.npy").display().to_string()],
        shapes: vec![],
        quantized: true,
        bf16_tolerance: None,
    };
    let summary = compile(&m, "sm_90a", "fp16", &d.join("build.aoc"))?;
    if !summary.contains("qconv_wgmma") {
        return Err(format!("no integer wgmma launch in:\n{summary}").into());
    }
    // The float glue after each integer GEMM (dequantize, bias, quantize,
    // quantized residual add) is merged into one kernel, most often the
    // GEMM's epilogue: no launch runs one of those ops alone.
    let explain = run(&["explain", &d.join("build.aoc").display().to_string()])?;
    let alone: Vec<&str> = explain
        .lines()
        .filter(|l| l.split_once("<- ").is_some_and(|(_, o)| !o.contains(" + ") && (o.starts_with("quant.add") || o.starts_with("quant.dequantize"))))
        .collect();
    if !alone.is_empty() {
        return Err(format!("quantized glue launched alone:\n{}", alone.join("\n")).into());
    }
    check_on_gpu(&m, "sm_90a", "fp16")
}

/// The pruned and sparsified examples (issue 20): (transform, example).
const TRANSFORMED: [(&str, &str); 5] = [
    ("sparse", "resnet_block"),
    ("sparse", "mobilenet_block"),
    ("sparse", "encoder_layer"),
    ("pruned", "resnet_block"),
    ("pruned", "mobilenet_block"),
];

/// Example `name` after `aoc sparsify --pattern 2:4` (`how` = sparse) or
/// `aoc prune --channels 0.3` (pruned), written into a scratch folder of
/// its own (`tag` keeps concurrent trials apart).
fn transformed(how: &str, name: &str, tag: &str) -> Result<Model, Failed> {
    let m = models().into_iter().find(|m| m.name == name).ok_or_else(|| format!("examples/{name} is missing"))?;
    let d = scratch(&format!("{how}_{name}_{tag}"));
    let out = d.join("model.air");
    let (file, o) = (m.file.display().to_string(), out.display().to_string());
    match how {
        "sparse" => run(&["sparsify", &file, "--pattern", "2:4", "-o", &o])?,
        _ => run(&["prune", &file, "--channels", "0.3", "-o", &o])?,
    };
    Ok(Model { name: format!("{how}_{name}"), file: out, ..m })
}

/// `aoc explain` of an artifact.
fn explain(art: &Path) -> Result<String, Failed> {
    let out = Command::new(aoc()).args(["explain", &art.display().to_string()]).output()?;
    if !out.status.success() {
        return Err(format!("aoc explain failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// A sparsified model's GPU artifact says, per sparse layer, whether it
/// ran sparse or dense, and why: the 3×3 convolutions of the ResNet block
/// run dense (their 2:4 groups do not follow the implicit GEMM's k), and
/// at fp32 every layer runs dense for the precision.
fn sparse_explain_says_why() -> Result<(), Failed> {
    let m = transformed("sparse", "resnet_block", "explain")?;
    let d = scratch("sparse_explain");
    let art = d.join("model.aoc");
    for (target, precision) in [("sm_86", "fp16"), ("sm_90a", "fp16"), ("sm_86", "fp32")] {
        compile(&m, target, precision, &art)?;
        let text = explain(&art)?;
        let notes: Vec<&str> = text.lines().filter(|l| l.contains(": sparse: ") || l.contains(": dense: ")).collect();
        if !text.contains("sparse layers (2:4") || notes.len() < 6 || notes.iter().any(|l| !l.contains("  sparse.")) {
            return Err(format!("{target} {precision}: explain does not give each sparse layer's kernel:\n{text}").into());
        }
        let why = if precision == "fp32" { "--precision fp32 has no sparse" } else { "(kh, kw, c)" };
        if !notes.iter().any(|l| l.contains(why)) {
            return Err(format!("{target} {precision}: no layer says `{why}`:\n{text}").into());
        }
    }
    Ok(())
}

/// `relu(x·w + b)` with `x` 16384×256 and `w` 256×1024 after `aoc
/// sparsify --pattern 2:4`: one `sparse.matmul` large enough that the
/// cost model runs it on `mma.sp` where the dense kernel is `mma.sync`
/// (sm_86, sm_90) and on `wgmma.sp` where it is `wgmma` (sm_90a); the
/// bias add and relu follow as one pointwise launch.
fn sparse_gemm_model(tag: &str) -> Result<Model, Failed> {
    sparse_gemm_model_of(tag, 16384, 256, 1024)
}

/// [`sparse_gemm_model`] with ragged edges for `wgmma.sp`'s 128×128
/// tiles and 128-deep k-tiles: m 10000, k 288 (a k32 tail past two
/// k-tiles), n 1000 (a partial feature tile).
fn sparse_gemm_ragged_model(tag: &str) -> Result<Model, Failed> {
    sparse_gemm_model_of(&format!("ragged_{tag}"), 10000, 288, 1000)
}

fn sparse_gemm_model_of(tag: &str, m: usize, k: usize, n: usize) -> Result<Model, Failed> {
    let d = scratch(&format!("sparse_gemm_{tag}"));
    let bias = dense(1, n, 6);
    let text = format!(
        "func @main(%x: tensor<{m}x{k}xf32>) -> tensor<{m}x{n}xf32> {{\n  \
         %w = const dense<{}> : tensor<{k}x{n}xf32>\n  \
         %b = const dense<{}> : tensor<{n}xf32>\n  \
         %p = core.matmul %x, %w : tensor<{m}x{n}xf32>\n  \
         %q = core.add %p, %b : tensor<{m}x{n}xf32>\n  \
         %y = core.relu %q : tensor<{m}x{n}xf32>\n  \
         return %y : tensor<{m}x{n}xf32>\n}}\n",
        dense(k, n, 5),
        &bias[1..bias.len() - 1]
    );
    let dense_file = d.join("dense.air");
    std::fs::write(&dense_file, text)?;
    let file = d.join("model.air");
    run(&["sparsify", &dense_file.display().to_string(), "--pattern", "2:4", "-o", &file.display().to_string()])?;
    if !std::fs::read_to_string(&file)?.contains("sparse.matmul") {
        return Err("aoc sparsify left the matmul dense".into());
    }
    Ok(Model {
        name: format!("sparse_gemm_{m}x{k}x{n}"),
        file,
        inputs: vec![format!("x=@random:{m}x{k}")],
        shapes: vec![],
        quantized: false,
        bf16_tolerance: None,
    })
}

/// The quantized encoder for sm_90a: the layer norm whose output the next
/// step quantizes writes the bytes itself (`layer_norm_q`), so no
/// quantize launch reads its f32 output again (`make gpu-test` runs it
/// against the interpreter as `gpu_qdq_encoder_sm_90a_*`).
fn int8_layer_norm_writes_bytes() -> Result<(), Failed> {
    let m = models().into_iter().find(|m| m.name == "qdq_encoder").ok_or("examples/qdq_encoder is missing")?;
    let d = scratch("int8_layer_norm");
    let ptx = emit(&m.file, "sm_90a", "fp16", "ptx", &d.join("model.ptx"))?;
    let launches = launch_lines(&ptx);
    let fused = launches.iter().filter(|l| l.contains("launch layer_norm_q_")).count();
    // A quantize alone right after a layer norm (the last one's output is
    // quantized and dequantized in one f32 step, which stays).
    let after_ln = launches.windows(2).filter(|w| w[0].contains("launch layer_norm") && w[1].contains("<- quant.quantize") && !w[1].contains(" + ")).count();
    if fused == 0 || after_ln != 0 {
        return Err(format!("expected the layer norm to write its quantized bytes, got {launches:#?}").into());
    }
    Ok(())
}

/// Two sparsified layers as a transformer's FFN writes them: `x·w1 + b1`,
/// GELU, then `·w2 + b2` and a residual add of the layer's input, then a
/// ReLU (so the residual sum is an arena buffer the planner may place over
/// the GELU output, the second GEMM's A). The IR does not fuse a
/// `sparse.matmul` with what follows, so the bias + GELU and the bias +
/// residual are pointwise steps the PTX translation moves into the sparse
/// GEMMs (`epilogue::moved_epilogue`).
fn sparse_ffn_model(tag: &str) -> Result<Model, Failed> {
    let (m, d_model, d_ff) = (8192, 256, 1024);
    let d = scratch(&format!("sparse_ffn_{tag}"));
    let (b1, b2) = (dense(1, d_ff, 3), dense(1, d_model, 4));
    let text = format!(
        "func @main(%x0: tensor<{m}x{d_model}xf32>) -> tensor<{m}x{d_model}xf32> {{\n  \
         %w0 = const dense<{}> : tensor<{d_model}x{d_model}xf32>\n  \
         %w1 = const dense<{}> : tensor<{d_model}x{d_ff}xf32>\n  \
         %b1 = const dense<{}> : tensor<{d_ff}xf32>\n  \
         %w2 = const dense<{}> : tensor<{d_ff}x{d_model}xf32>\n  \
         %b2 = const dense<{}> : tensor<{d_model}xf32>\n  \
         %x = core.matmul %x0, %w0 : tensor<{m}x{d_model}xf32>\n  \
         %p = core.matmul %x, %w1 : tensor<{m}x{d_ff}xf32>\n  \
         %q = core.add %p, %b1 : tensor<{m}x{d_ff}xf32>\n  \
         %g = core.gelu %q : tensor<{m}x{d_ff}xf32>\n  \
         %r = core.matmul %g, %w2 : tensor<{m}x{d_model}xf32>\n  \
         %s = core.add %r, %b2 : tensor<{m}x{d_model}xf32>\n  \
         %t = core.add %s, %x : tensor<{m}x{d_model}xf32>\n  \
         %y = core.relu %t : tensor<{m}x{d_model}xf32>\n  \
         return %y : tensor<{m}x{d_model}xf32>\n}}\n",
        dense(d_model, d_model, 2),
        dense(d_model, d_ff, 5),
        &b1[1..b1.len() - 1],
        dense(d_ff, d_model, 7),
        &b2[1..b2.len() - 1],
    );
    let dense_file = d.join("dense.air");
    std::fs::write(&dense_file, text)?;
    let file = d.join("model.air");
    run(&["sparsify", &dense_file.display().to_string(), "--pattern", "2:4", "-o", &file.display().to_string()])?;
    if std::fs::read_to_string(&file)?.matches("sparse.matmul").count() != 3 {
        return Err("aoc sparsify did not make the three matmuls sparse".into());
    }
    Ok(Model {
        name: "sparse_ffn".to_string(),
        file,
        inputs: vec![format!("x0=@random:{m}x{d_model}")],
        shapes: vec![],
        quantized: false,
        // Three chained bf16 layers over k = 256 and 1024: 1.005e-2 on
        // the H200.
        bf16_tolerance: Some(2e-2),
    })
}

/// The sparse FFN at fp16 on sm_90a (`wgmma.sp`): the FFN's two layers
/// run sparse, every bias, GELU and residual add is a GEMM's epilogue (no
/// pointwise launch at all), and the second layer's A is the half copy the
/// first one wrote (no conversion launch for it); on sm_86 the first layer
/// runs on `mma.sp` and no pointwise launch is left either. At bf16 (no
/// sparse kernel) the layers run dense. The PTX assembles.
fn sparse_ffn_builds() -> Result<(), Failed> {
    let m = sparse_ffn_model("build")?;
    let d = scratch("sparse_ffn_builds");
    let out = d.join("model.ptx");
    for (target, precision) in [("sm_90a", "fp16"), ("sm_86", "fp16"), ("sm_90a", "bf16")] {
        let ptx = emit(&m.file, target, precision, "ptx", &out)?;
        let launches = launch_lines(&ptx);
        let sparse = |what: &str| launches.iter().any(|l| l.contains("launch gemm_sp_") && l.ends_with(&format!("sparse.matmul {what}")));
        let pointwise = launches.iter().any(|l| l.contains("launch pw"));
        let converts_g = launches.iter().any(|l| l.contains("launch cvt_") && l.ends_with("sparse.matmul %r"));
        let ok = if target == "sm_90a" && precision == "fp16" {
            sparse("%p") && sparse("%r") && !pointwise && !converts_g
        } else if precision == "fp16" {
            // mma.sp writes no half copy: the cost model weighs the
            // conversion, and the second layer may run dense.
            sparse("%p") && !pointwise
        } else {
            !launches.iter().any(|l| l.contains("launch gemm_sp_"))
        };
        if !ok {
            return Err(format!("{target} {precision}: unexpected launches {launches:#?}").into());
        }
        if target == "sm_90a" && precision == "fp16" {
            // The last layer's epilogue reads the residual %x from the half
            // copy made for the second layer's A, as the dense `wgmma`
            // kernels do (in the LLVM IR: the epilogue function of one
            // `wgmma.sp` kernel extends a half to float).
            let ir = emit(&m.file, target, precision, "llvm", &d.join("model.ll"))?;
            let reads_half = ir
                .split("define internal float @")
                .filter(|f| f.starts_with("gemm_sp_wgmma_") && f.split("\n}\n").next().is_some_and(|body| body.contains("fpext half")))
                .count();
            if reads_half != 1 {
                return Err(format!("{target} {precision}: {reads_half} wgmma.sp epilogues read a half residual, expected 1").into());
            }
        }
        check_compiles_at(&m, target, precision)?;
    }
    Ok(())
}

/// The sparse GEMM's builds: for sm_86 and sm_90 at fp16 one `mma.sp`
/// launch (after A's conversion to half) and no dense GEMM, its PTX
/// assembling (ptxas), and `aoc explain` saying it ran
/// sparse; for sm_90a one `wgmma.sp` launch, with its note; at
/// fp32 the dense kernel with the precision as the reason.
fn sparse_gemm_builds() -> Result<(), Failed> {
    let m = sparse_gemm_model("build")?;
    let d = scratch("sparse_gemm_builds");
    let out = d.join("model.ptx");
    for target in ["sm_86", "sm_90"] {
        let ptx = emit(&m.file, target, "fp16", "ptx", &out)?;
        let launches = launch_lines(&ptx);
        let sparse = launches.iter().filter(|l| l.contains("launch gemm_sp_")).count();
        let dense = launches.iter().filter(|l| l.contains("launch gemm_tc_") || l.contains("launch gemm_wgmma_")).count();
        if sparse != 1 || dense != 0 || !ptx.contains("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32") {
            return Err(format!("{target}: expected the matmul as one mma.sp launch, got {launches:#?}").into());
        }
        check_compiles(&m, target)?;
        let art = d.join(format!("model_{target}.aoc"));
        compile(&m, target, "fp16", &art)?;
        check_entries(&art)?;
        let text = explain(&art)?;
        if !text.contains("sparse.matmul") || !text.contains(": sparse: 2:4 mma.sp") {
            return Err(format!("{target}: explain does not say the layer ran sparse:\n{text}").into());
        }
    }
    // sm_90a: the cost model picks the wgmma.sp kernel (translate/sparse.rs:
    // 1.2× the dense wgmma kernel's rate, both faster than mma.sp there)
    // for the plain and the ragged model, and explain says so.
    for m in [m.clone(), sparse_gemm_ragged_model("build")?] {
        let ptx = emit(&m.file, "sm_90a", "fp16", "ptx", &out)?;
        let launches = launch_lines(&ptx);
        let sparse = launches.iter().filter(|l| l.contains("launch gemm_sp_")).count();
        let dense = launches.iter().filter(|l| l.contains("launch gemm_wgmma_") || l.contains("launch gemm_tc_")).count();
        if sparse != 1 || dense != 0 || !ptx.contains("wgmma.mma_async.sp.sync.aligned.m64n") {
            return Err(format!("sm_90a {}: expected the matmul as one wgmma.sp launch, got {launches:#?}", m.file.display()).into());
        }
        check_compiles(&m, "sm_90a")?;
        let art = d.join("model_sm_90a.aoc");
        compile(&m, "sm_90a", "fp16", &art)?;
        check_entries(&art)?;
        let text = explain(&art)?;
        if !text.contains(": sparse: 2:4 wgmma.sp") {
            return Err(format!("sm_90a: explain does not say the layer ran on wgmma.sp:\n{text}").into());
        }
    }
    let art = d.join("model_fp32.aoc");
    compile(&m, "sm_86", "fp32", &art)?;
    let text = explain(&art)?;
    if !text.contains(": dense: --precision fp32 has no sparse tensor-core kernel") {
        return Err(format!("fp32: explain does not say why the layer ran dense:\n{text}").into());
    }
    Ok(())
}

/// The sparse GEMM on the GPU against the interpreter, for sm_86 and sm_90
/// (`mma.sp`) and sm_90a (`wgmma.sp`).
fn sparse_gemm_on_gpu(target: &'static str) -> Result<(), Failed> {
    let m = sparse_gemm_model(&format!("gpu_{target}"))?;
    check_on_gpu(&m, target, "fp16")
}

/// The ragged sparsified GEMM for sm_90a (`wgmma.sp`: a partial feature
/// tile, a k32 tail past two k-tiles) against the interpreter.
fn sparse_gemm_ragged_on_gpu() -> Result<(), Failed> {
    let m = sparse_gemm_ragged_model("gpu_sm_90a")?;
    check_on_gpu(&m, "sm_90a", "fp16")
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![];
    for m in models().into_iter().chain(imported_models()) {
        for t in TARGETS {
            let m = m.clone();
            trials.push(Trial::test(format!("compile_{}_{t}", m.name), move || check_compiles(&m, t)));
        }
    }
    let all: Vec<Model> = models().into_iter().chain(imported_models()).chain(ocr_models()).collect();
    for m in &all {
        if m.name.starts_with("ocr_") {
            for t in ["sm_86", "sm_90a"] {
                let m = m.clone();
                trials.push(Trial::test(format!("compile_{}_{t}", m.name), move || check_compiles(&m, t)));
            }
        }
        for t in ["sm_86", "sm_90a"] {
            for p in ["fp32", "fp16"] {
                let m = m.clone();
                trials.push(Trial::test(format!("gpu_{}_{t}_{p}", m.name), move || check_on_gpu(&m, t, p)));
            }
        }
    }
    // The zoo: compiled for sm_86 and sm_90a at fp32 and fp16
    // (ptxas-checked), and on a GPU run to the interpreter's outputs.
    for (m, pending) in zoo_models() {
        for t in ["sm_86", "sm_90a"] {
            if let Some(why) = &pending {
                let (m, why) = (m.clone(), why.clone());
                trials.push(Trial::test(format!("compile_{}_{t}", m.name), move || zoo_pending_still_fails(&m, t, &why)));
                continue;
            }
            for p in ["fp32", "fp16"] {
                let m2 = m.clone();
                trials.push(Trial::test(format!("compile_{}_{t}_{p}", m.name), move || check_compiles_at(&m2, t, p)));
                let m = m.clone();
                trials.push(Trial::test(format!("gpu_{}_{t}_{p}", m.name), move || check_on_gpu(&m, t, p)));
            }
        }
    }
    // Sparsified and pruned models: they compile for the tensor-core
    // targets (ptxas-checked) and run to their own interpreter outputs.
    for (how, name) in TRANSFORMED {
        for t in ["sm_80", "sm_86", "sm_90a"] {
            trials.push(Trial::test(format!("compile_{how}_{name}_{t}"), move || {
                check_compiles(&transformed(how, name, &format!("c_{t}"))?, t)
            }));
        }
        for t in ["sm_86", "sm_90a"] {
            for p in ["fp32", "fp16"] {
                trials.push(Trial::test(format!("gpu_{how}_{name}_{t}_{p}"), move || {
                    check_on_gpu(&transformed(how, name, &format!("g_{t}_{p}"))?, t, p)
                }));
            }
        }
    }
    trials.push(Trial::test("sparse_explain_says_why", sparse_explain_says_why));
    trials.push(Trial::test("sparse_gemm_builds", sparse_gemm_builds));
    trials.push(Trial::test("sparse_ffn_builds", sparse_ffn_builds));
    trials.push(Trial::test("int8_layer_norm_writes_bytes", int8_layer_norm_writes_bytes));
    trials.push(Trial::test("int8_attention_reads_bytes", int8_attention_reads_bytes));
    for t in ["sm_90a", "sm_86"] {
        trials.push(Trial::test(format!("gpu_int8_attention_{t}_fp16"), move || check_on_gpu(&int8_attention_model(&format!("gpu_{t}"))?, t, "fp16")));
    }
    for (t, p) in [("sm_90a", "fp16"), ("sm_86", "fp16"), ("sm_90a", "bf16")] {
        trials.push(Trial::test(format!("gpu_sparse_ffn_{t}_{p}"), move || check_on_gpu(&sparse_ffn_model(&format!("gpu_{t}_{p}"))?, t, p)));
    }
    for t in ["sm_86", "sm_90", "sm_90a"] {
        trials.push(Trial::test(format!("gpu_sparse_gemm_{t}_fp16"), move || sparse_gemm_on_gpu(t)));
    }
    trials.push(Trial::test("gpu_sparse_gemm_ragged_sm_90a_fp16", sparse_gemm_ragged_on_gpu));
    trials.push(Trial::test("fp16_build_uses_tensor_cores", fp16_uses_tensor_cores));
    trials.push(Trial::test("int8_build_uses_s8_mma", int8_uses_s8_mma));
    trials.push(Trial::test("fused_attention_and_wgmma_builds", fused_attention_and_wgmma));
    trials.push(Trial::test("gpu_wgmma_projections_sm_90a_fp16", wgmma_on_gpu));
    trials.push(Trial::test("split_k_builds", split_k_builds));
    trials.push(Trial::test("half_copies_replace_conversions", half_copies_build));
    trials.push(Trial::test("gpu_half_copies_sm_90a_fp16", || half_copies_on_gpu("fp16")));
    trials.push(Trial::test("gpu_half_copies_sm_90a_bf16", || half_copies_on_gpu("bf16")));
    trials.push(Trial::test("gpu_split_k_sm_86_fp16", split_k_on_gpu));
    trials.push(Trial::test("wgmma_convolutions_build", wgmma_convs_build));
    trials.push(Trial::test("gpu_wgmma_convolutions_sm_90a_fp16", || wgmma_convs_on_gpu("fp16")));
    trials.push(Trial::test("gpu_wgmma_convolutions_sm_90a_bf16", || wgmma_convs_on_gpu("bf16")));
    trials.push(Trial::test("special_paths_match_their_entries", special_paths_match_their_entries));
    trials.push(Trial::test("gpu_nan_and_inf_through_epilogues", nan_through_epilogues));
    trials.push(Trial::test("no_gpu_is_a_clear_error", no_gpu_is_a_clear_error));
    trials.push(Trial::test("gpu_c_api_runs_gpu_artifacts", c_api_runs_gpu_artifacts));
    trials.push(Trial::test("gpu_device_buffers_in_and_out", device_buffers_in_and_out));
    trials.push(Trial::test("gpu_late_index_errors_are_reported", late_index_errors_are_reported));
    trials.push(Trial::test("gpu_tune_measures_once_and_stays_correct", tune_measures_once_and_stays_correct));
    trials.push(Trial::test("gpu_quantized_for_sm_90_runs_int8_and_fp16", quantized_for_the_gpu));
    trials.push(Trial::test("fp8_builds_use_e4m3_wgmma", fp8::fp8_builds));
    trials.push(Trial::test("fp8_attention_and_layer_norm_write_e4m3", fp8::fp8_attention_builds));
    for which in ["cnn", "matmul", "residual", "attention"] {
        for t in ["sm_90a", "sm_90"] {
            trials.push(Trial::test(format!("gpu_fp8_{which}_{t}"), move || fp8::fp8_on_gpu(which, t)));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
