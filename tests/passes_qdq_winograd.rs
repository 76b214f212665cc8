//! The `qdq` and `winograd` passes on real models made by others, imported
//! from ONNX, run in the reference interpreter and compared with ONNX
//! Runtime's outputs (`examples/*/expected/*.npy`).
//!
//! - `examples/qdq_cnn` (onnxruntime's static quantizer: per-tensor
//!   activations, per-axis int8 weights, int32 biases): after `qdq` there are
//!   fewer `quant.quantize`/`quant.dequantize` ops and integer ops appear; the
//!   result equals the interpreter's output before the pass exactly (every
//!   `qdq` rule is exact) and ONNX Runtime's within one quantization step
//!   (the largest scale of any quantize in the model — ONNX Runtime computes
//!   QDQ convolutions with integer kernels whose rounding differs).
//! - `examples/resnet_block`: after `winograd` every 3x3 stride-1 conv is a
//!   Winograd op, and the outputs match ONNX Runtime within 1e-3.

use aoc_compiler::npy::read_npy;
use aoc_compiler::onnx::{ImportOptions, Imported, import_model};
use aoc_ir::{Module, Opcode, Tensor};
use aoc_passes::{PipelineOptions, run_pipeline};
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// Imports `examples/<name>/model.onnx` with its input's shape; returns the
/// import, the input and ONNX Runtime's outputs (one `expected/*.npy`).
fn load(name: &str, output: &str) -> (Imported, Tensor, Tensor) {
    let dir = example(name);
    let bytes = std::fs::read(dir.join("model.onnx")).expect("model.onnx");
    let input = read_npy(&dir.join("input.npy")).expect("input.npy");
    let expected =
        read_npy(&dir.join("expected").join(format!("{output}.npy"))).expect("expected output");
    let probe = import_model(&bytes, &ImportOptions::default()).expect("imports");
    let in_name = probe
        .module
        .entry()
        .expect("a function")
        .name_of(probe.module.entry().unwrap().params()[0])
        .to_string();
    let opts = ImportOptions {
        input_shapes: vec![(in_name, input.shape().to_vec())],
        ..ImportOptions::default()
    };
    (
        import_model(&bytes, &opts).expect("imports"),
        input,
        expected,
    )
}

fn count(m: &Module, pred: impl Fn(Opcode) -> bool) -> usize {
    let f = m.entry().expect("a function");
    f.body
        .ops
        .iter()
        .filter(|o| pred(f.ops[**o].opcode))
        .count()
}

fn run(m: &Module, imported: &Imported, input: &Tensor) -> Tensor {
    let ws = imported.weight_source();
    let mut out = aoc_ir::interp::run(m.entry().unwrap(), vec![input.clone()], &ws).expect("runs");
    out.remove(0)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    (0..a.len())
        .map(|i| (a.get_f64(i) - b.get_f64(i)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn qdq_makes_integer_ops_on_the_quantized_cnn() {
    let (imported, input, expected) = load("qdq_cnn", "logits");
    let before = run(&imported.module, &imported, &input);
    let is_qdq = |o| matches!(o, Opcode::Quantize | Opcode::Dequantize);
    let qdq_before = count(&imported.module, is_qdq);
    // one quantization step: the largest scale of any quantize
    let f = imported.module.entry().unwrap();
    let step = f
        .body
        .ops
        .iter()
        .filter(|o| f.ops[**o].opcode == Opcode::Quantize)
        .filter_map(|o| {
            f.ty(f.ops[*o].results[0])
                .elem
                .quant()
                .map(|q| q.params_at(0).0)
        })
        .fold(0.0, f64::max);
    assert!(step > 0.0);

    let mut m = imported.module.clone();
    let ws = imported.weight_source();
    let opts = PipelineOptions {
        weights: &ws,
        verify_each: true,
        ..PipelineOptions::default()
    };
    run_pipeline(&mut m, "qdq", &opts).expect("qdq runs");

    let qdq_after = count(&m, is_qdq);
    assert!(
        qdq_after < qdq_before,
        "{qdq_after} Q/DQ ops after, {qdq_before} before"
    );
    // only the input's quantize and the output's dequantize remain
    assert_eq!((qdq_before, qdq_after), (40, 2));
    assert_eq!(
        count(&m, |o| o == Opcode::Conv2d),
        0,
        "every conv becomes an integer conv"
    );
    assert_eq!(count(&m, |o| o == Opcode::QuantConv2d), 6);
    assert_eq!(count(&m, |o| o == Opcode::QuantAdd), 2);
    assert_eq!(count(&m, |o| o == Opcode::QuantGemm), 1);
    assert_eq!(count(&m, |o| o == Opcode::QuantGlobalAvgPool), 1);

    let after = run(&m, &imported, &input);
    assert_eq!(
        max_diff(&before, &after),
        0.0,
        "the qdq rewrite is exact in the interpreter"
    );
    let d = max_diff(&after, &expected);
    assert!(
        d <= step,
        "max difference from onnxruntime {d} exceeds one quantization step {step}"
    );
    // the text form round-trips and verifies
    let text = aoc_ir::print::print_module(&m);
    let (parsed, diags) = aoc_ir::parse_and_verify(&text);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    assert_eq!(aoc_ir::print::print_module(&parsed), text);
}

#[test]
fn winograd_rewrites_the_resnet_block_convs() {
    let (imported, input, expected) = load("resnet_block", "logits");
    // the 3x3 stride-1 convs: stem, layer1.conv1, layer1.conv2, layer2.conv2
    let eligible = 4;
    for tile in [2, 4] {
        let mut m = imported.module.clone();
        let ws = imported.weight_source();
        let opts = PipelineOptions {
            weights: &ws,
            verify_each: true,
            ..PipelineOptions::default()
        };
        run_pipeline(&mut m, &format!("winograd{{tile={tile}}}"), &opts).expect("winograd runs");
        assert_eq!(
            count(&m, |o| o == Opcode::WinogradConv2d),
            eligible,
            "tile {tile}"
        );
        // the stride-2 conv and the 1x1 downsample stay direct
        assert_eq!(count(&m, |o| o == Opcode::Conv2d), 2, "tile {tile}");
        assert!(aoc_ir::print::print_module(&m).contains("core.winograd_conv2d"));
        let got = run(&m, &imported, &input);
        let d = max_diff(&got, &expected);
        assert!(d < 1e-3, "tile {tile}: max difference from onnxruntime {d}");
    }
}
