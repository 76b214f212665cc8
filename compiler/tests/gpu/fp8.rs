//! fp8 (e4m3) models on the GPU (issue 17): `aoc quantize --precision fp8
//! --target sm_90a` of a small CNN (examples/resnet_block), of a small
//! MatMul model and of a residual block of matmuls, then
//! - `fp8_builds_use_e4m3_wgmma` (everywhere): for sm_90a the PTX has the
//!   e4m3 `wgmma` (`k32.f32.e4m3.e4m3`) and the e4m3 conversions, the
//!   compile summary `qconv_wgmma` launches, `aoc explain` notes them, the
//!   residual adds (with their relu and quantize) have no launch of their
//!   own (they are the epilogues of the products before them), and ptxas
//!   accepts it; for sm_89 and sm_90 (no fp8 tensor-core kernel)
//!   the quantize/dequantize steps are e4m3 kernels and the products run
//!   in float (no wgmma), and ptxas accepts that too;
//! - `gpu_fp8_{cnn,matmul,residual}_{sm_90a,sm_90}` (on a GPU): the artifact gives
//!   the quantized model's interpreter outputs within the quantized
//!   models' tolerance (0.1 of max(1, max|expected|), as int8).

use super::*;

/// Seeded calibration batches of `shape` in [-2, 2).
fn calib(dir: &Path, shape: &[usize], batches: usize) -> Result<(), Failed> {
    std::fs::create_dir_all(dir)?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for b in 0..batches {
        let vals: Vec<f64> = (0..shape.iter().product::<usize>())
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
            })
            .collect();
        let t = Tensor::from_f64(aoc_ir::types::TensorType::new(shape.to_vec(), aoc_ir::types::Scalar::F32), vals);
        aoc_compiler::npy::write_npy(&dir.join(format!("b{b}.npy")), &t)?;
    }
    Ok(())
}

/// Two matmuls by constant weights with a relu between (`m × 64 → 128 →
/// 32`): the first's output feeds the second (quantized), the second's is
/// the model's (float: the fp8 kernel's f32 result).
fn matmul_air(dir: &Path, m: usize) -> Result<PathBuf, Failed> {
    let text = format!(
        "func @main(%x: tensor<{m}x64xf32>) -> tensor<{m}x32xf32> {{\n  \
         %w1 = const dense<{}> : tensor<64x128xf32>\n  \
         %w2 = const dense<{}> : tensor<128x32xf32>\n  \
         %a = core.matmul %x, %w1 : tensor<{m}x128xf32>\n  \
         %r = core.relu %a : tensor<{m}x128xf32>\n  \
         %y = core.matmul %r, %w2 : tensor<{m}x32xf32>\n  \
         return %y : tensor<{m}x32xf32>\n}}\n",
        dense(64, 128, 3),
        dense(128, 32, 5)
    );
    let path = dir.join("matmul.air");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A residual block of matmuls (`m × 64`): `a = x·w1`, `r = relu(a + x)`,
/// `y = |r·w2|` with 18 columns. Quantized for fp8, the add reads x's e4m3
/// form (the first product reads it anyway), so on sm_90a the add, relu
/// and r's quantization are the first product's epilogue, reading x's
/// bytes in runs of 4; the abs is the second's, on 18 columns (not a
/// multiple of 4: element by element).
fn residual_air(dir: &Path, m: usize) -> Result<PathBuf, Failed> {
    let text = format!(
        "func @main(%x: tensor<{m}x64xf32>) -> tensor<{m}x18xf32> {{\n  \
         %w1 = const dense<{}> : tensor<64x64xf32>\n  \
         %w2 = const dense<{}> : tensor<64x18xf32>\n  \
         %a = core.matmul %x, %w1 : tensor<{m}x64xf32>\n  \
         %s = core.add %a, %x : tensor<{m}x64xf32>\n  \
         %r = core.relu %s : tensor<{m}x64xf32>\n  \
         %p = core.matmul %r, %w2 : tensor<{m}x18xf32>\n  \
         %y = core.abs %p : tensor<{m}x18xf32>\n  \
         return %y : tensor<{m}x18xf32>\n}}\n",
        dense(64, 64, 7),
        dense(64, 18, 11)
    );
    let path = dir.join("residual.air");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Model `which` ("cnn", "matmul" or "residual") quantized to fp8 for sm_90a, in a
/// scratch folder of its own (`tag` keeps concurrent trials apart).
fn fp8_model(which: &str, tag: &str) -> Result<Model, Failed> {
    if which == "attention" {
        return fp8_attention_model(tag);
    }
    let d = scratch(&format!("fp8_{which}_{tag}"));
    let (file, shape, input) = match which {
        "cnn" => {
            let f = root().join("examples/resnet_block/model.air");
            let input = f.with_file_name("input.npy").display().to_string();
            (f, vec![1, 3, 32, 32], input)
        }
        "residual" => (residual_air(&d, 200)?, vec![200, 64], "x=@random:200x64".to_string()),
        _ => (matmul_air(&d, 256)?, vec![256, 64], "x=@random:256x64".to_string()),
    };
    calib(&d.join("calib"), &shape, 4)?;
    let q = d.join("q.air");
    run(&[
        "quantize",
        &file.display().to_string(),
        "--calib",
        &d.join("calib").display().to_string(),
        "--precision",
        "fp8",
        "--target",
        "sm_90a",
        "-o",
        &q.display().to_string(),
        "-q",
    ])?;
    Ok(Model {
        name: format!("fp8_{which}"),
        file: q,
        inputs: vec![input],
        shapes: vec![],
        quantized: true,
        bf16_tolerance: None,
    })
}

fn ptx_of(m: &Model, target: &str, out: &Path) -> Result<String, Failed> {
    run(&["compile", &m.file.display().to_string(), "--target", target, "--emit", "ptx", "-o", &out.display().to_string()])?;
    Ok(std::fs::read_to_string(out)?)
}

pub(super) fn fp8_builds() -> Result<(), Failed> {
    for which in ["cnn", "matmul", "residual"] {
        let m = fp8_model(which, "build")?;
        let d = scratch(&format!("fp8_build_{which}"));
        let ptx = ptx_of(&m, "sm_90a", &d.join("m90a.ptx"))?;
        // The matmul model's products read and write e4m3 themselves (x is
        // quantized by a kernel, the first product's relu result stays
        // e4m3, the second's is f32): no e4m3 load outside the wgmma.
        let mut wants = vec!["wgmma.mma_async.sync.aligned", "k32.f32.e4m3.e4m3", "cvt.rn.satfinite.e4m3x2.f32"];
        if which == "cnn" {
            wants.push("cvt.rn.f16x2.e4m3x2");
        }
        for want in wants {
            if !ptx.contains(want) {
                return Err(format!("{which}: the sm_90a fp8 build has no `{want}`").into());
            }
        }
        let summary = compile(&m, "sm_90a", "fp32", &d.join("m.aoc"))?;
        if !summary.contains("qconv_wgmma") {
            return Err(format!("{which}: no fp8 wgmma launch in:\n{summary}").into());
        }
        let plan = explain(&d.join("m.aoc"))?;
        if !plan.contains("fp8: e4m3 x e4m3 wgmma") {
            return Err(format!("{which}: `aoc explain` shows no fp8 step:\n{plan}").into());
        }
        // fp8's residual add reads the block input's e4m3 bytes in the
        // epilogue of the convolution (product) before it, with the relu
        // and the next layer's quantization: no launch of its own.
        let fused_away: &[&str] = match which {
            "cnn" => &["/layer1/Add", "/layer1/relu_1/Relu"],
            "residual" => &["%s", "%r", "%y"],
            _ => &[],
        };
        for op in fused_away {
            if let Some(line) = plan.lines().find(|l| l.contains("<-") && l.contains(op)) {
                return Err(format!("{which}: {op} has a launch of its own ({line}):\n{plan}").into());
            }
        }
        if which == "residual" && !(summary.contains(" 3 launches") && plan.contains("epilogue (reading 1 other tensor), stored as f8E4M3FN")) {
            return Err(format!("residual: expected the quantize of x and two fp8 products with their epilogues:\n{summary}\n{plan}").into());
        }
        check_compiles(&m, "sm_90a")?;
        // Without sm_90a's wgmma: e4m3 quantize/dequantize kernels, float
        // products.
        for t in ["sm_89", "sm_90"] {
            let ptx = ptx_of(&m, t, &d.join(format!("m_{t}.ptx")))?;
            if ptx.contains("wgmma") || !ptx.contains("cvt.rn.satfinite.e4m3x2.f32") {
                return Err(format!("{which} for {t}: expected e4m3 conversions and no wgmma").into());
            }
            check_compiles(&m, t)?;
        }
    }
    Ok(())
}

/// The BERT-style attention block with a projection after its layer norm,
/// quantized to fp8 for sm_90a (`tag` keeps concurrent trials apart): the
/// projections run in fp8, the attention's products and the layer norm in
/// float; the attention's output and the layer norm's are the next
/// projections' inputs, quantized to e4m3.
fn fp8_attention_model(tag: &str) -> Result<Model, Failed> {
    attention_block_model(&format!("fp8_attention_{tag}"), &["--precision", "fp8", "--target", "sm_90a"], true)
}

/// On sm_90a (fp16) the attention and the layer norm write the e4m3 bytes
/// the next projection reads as their second output (`attention_q`,
/// `layer_norm_q`, each with a quantizing helper that rounds to e4m3), so
/// no launch quantizes but the model input's; the residual add is the
/// output projection's epilogue, reading x's bytes.
pub(super) fn fp8_attention_builds() -> Result<(), Failed> {
    let m = fp8_attention_model("build")?;
    let d = scratch("fp8_attention_emit");
    let ll = emit(&m.file, "sm_90a", "fp16", "llvm", &d.join("model.ll"))?;
    for kind in ["attention", "layer_norm"] {
        let helper = ll.lines().skip_while(|l| !(l.starts_with(&format!("define internal i8 @{kind}")) && l.contains("_q("))).take_while(|l| *l != "}").collect::<Vec<_>>().join("\n");
        if !helper.contains("cvt.rn.satfinite.e4m3x2.f32") {
            return Err(format!("no e4m3 quantizing helper for the {kind}:\n{helper}").into());
        }
    }
    let summary = compile(&m, "sm_90a", "fp16", &d.join("m.aoc"))?;
    for want in ["attention_q 1", "layer_norm_q 1", "qconv_wgmma 5"] {
        if !summary.contains(want) {
            return Err(format!("expected `{want}` in:\n{summary}").into());
        }
    }
    let ptx = emit(&m.file, "sm_90a", "fp16", "ptx", &d.join("model.ptx"))?;
    let quantizes: Vec<&str> = launch_lines(&ptx).into_iter().filter(|l| l.split_once("<- ").is_some_and(|(_, o)| o.starts_with("quant.quantize") || o.starts_with("core.add"))).collect();
    if quantizes.len() != 1 {
        return Err(format!("expected the input's quantize alone: {quantizes:#?}").into());
    }
    Ok(())
}

pub(super) fn fp8_on_gpu(which: &'static str, target: &'static str) -> Result<(), Failed> {
    // The attention block as the benchmarks build it (fp16 float layers).
    let precision = if which == "attention" { "fp16" } else { "fp32" };
    check_on_gpu(&fp8_model(which, &format!("gpu_{target}"))?, target, precision)
}
