//! `fold-bn` and `fuse` on real models exported from PyTorch
//! (examples/resnet_block, mobilenet_block with depthwise convs, and
//! encoder_layer with Erf-GELU and attention): after `fold-bn` no
//! `core.batch_norm` remains, after `fuse` the op count drops and fused ops
//! appear, and every result runs in the reference interpreter to ONNX
//! Runtime's outputs within 1e-4 (scaled by max(1, max|expected|); BN
//! folding changes rounding).

use aoc_compiler::npy::read_npy;
use aoc_compiler::onnx::{ImportOptions, import_model};
use aoc_ir::interp::{MapWeights, run};
use aoc_ir::{Module, Opcode};
use aoc_passes::{PipelineOptions, run_pipeline};
use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

fn load(name: &str) -> (Module, MapWeights) {
    let bytes = std::fs::read(example(name).join("model.onnx")).unwrap();
    let imported = import_model(&bytes, &ImportOptions::default()).unwrap();
    let w = imported.weight_source();
    (imported.module, w)
}

fn count(m: &Module, op: Opcode) -> usize {
    m.funcs
        .iter()
        .flat_map(|f| f.body.ops.iter().map(move |o| f.ops[*o].opcode))
        .filter(|o| *o == op)
        .count()
}

fn ops(m: &Module) -> usize {
    m.funcs
        .iter()
        .map(|f| {
            f.body
                .ops
                .iter()
                .filter(|o| f.ops[**o].opcode != Opcode::Const)
                .count()
        })
        .sum()
}

/// Runs the module on the example's input and compares with every expected
/// output.
fn check_outputs(name: &str, m: &Module, w: &MapWeights) {
    let dir = example(name);
    let input = read_npy(&dir.join("input.npy")).unwrap();
    let out = run(m.entry().unwrap(), vec![input], w).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(dir.join("expected"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(out.len(), files.len());
    for (got, file) in out.iter().zip(&files) {
        let want = read_npy(file).unwrap();
        assert_eq!(got.shape(), want.shape());
        let scale = (0..want.len())
            .map(|i| want.get_f64(i).abs())
            .fold(1.0, f64::max);
        let err = (0..want.len())
            .map(|i| (got.get_f64(i) - want.get_f64(i)).abs())
            .fold(0.0, f64::max);
        assert!(
            err <= 1e-4 * scale,
            "{name}: max error {err} (scale {scale})"
        );
    }
}

fn optimize(name: &str, pipeline: &str) -> (Module, Module, MapWeights) {
    let (before, w) = load(name);
    let mut m = before.clone();
    let opts = PipelineOptions {
        weights: &w,
        verify_each: true,
        ..PipelineOptions::default()
    };
    let report =
        run_pipeline(&mut m, pipeline, &opts).unwrap_or_else(|d| panic!("{name}: {}", d.message));
    assert!(!report.passes.is_empty());
    // Growth: every saturation stays within 4 e-nodes per op and saturates.
    for p in &report.passes {
        for e in &p.stats.saturation {
            assert!(
                e.nodes <= 4 * p.ops_before.max(1),
                "{name}/{}: {} nodes for {} ops",
                p.name,
                e.nodes,
                p.ops_before
            );
            assert_eq!(e.stop_reason, "saturated", "{name}/{}", p.name);
        }
    }
    (before, m, w)
}

fn check_model(name: &str, expect_bn: bool) {
    let (before, folded, w) = optimize(name, "fold-bn");
    if expect_bn {
        assert!(
            count(&before, Opcode::BatchNorm) > 0,
            "{name} has batch-norms to fold"
        );
    }
    assert_eq!(
        count(&folded, Opcode::BatchNorm),
        0,
        "{name}: batch_norm left after fold-bn"
    );
    check_outputs(name, &folded, &w);
    let (_, fused, w) = optimize(name, "fold-bn,fuse");
    assert!(
        ops(&fused) < ops(&folded),
        "{name}: fuse did not reduce the op count ({} -> {})",
        ops(&folded),
        ops(&fused)
    );
    check_outputs(name, &fused, &w);
    // The text form round-trips and verifies (in-memory constants print as dense).
    let text = aoc_ir::print::print_module(&fused);
    let (reparsed, diags) = aoc_ir::parse_and_verify(&text);
    assert!(diags.is_empty(), "{name}: {diags:?}");
    check_outputs(name, &reparsed, &w);
}

#[test]
fn resnet_block_folds_and_fuses() {
    check_model("resnet_block", true);
    let (_, m, _) = optimize("resnet_block", "fold-bn,fuse");
    assert!(count(&m, Opcode::FusedConv2d) > 0);
}

#[test]
fn mobilenet_block_folds_depthwise_and_fuses() {
    check_model("mobilenet_block", true);
    let (_, m, _) = optimize("mobilenet_block", "fold-bn,fuse");
    assert!(count(&m, Opcode::FusedConv2d) > 0);
}

#[test]
fn encoder_layer_recognizes_gelu_and_attention() {
    check_model("encoder_layer", false);
    let (_, m, _) = optimize("encoder_layer", "fuse");
    assert_eq!(count(&m, Opcode::Erf), 0, "the Erf-GELU was not recognized");
    assert_eq!(count(&m, Opcode::Attention), 1);
    assert_eq!(count(&m, Opcode::Softmax), 0);
}
