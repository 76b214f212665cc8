//! The IR-level reference planner (`memplan/planner.rs`, not used by the
//! compiler) and its tests (`memplan/planner_tests.rs`), and the planner on
//! real models: examples/resnet_block and encoder_layer, imported from ONNX
//! and optimized with the `default` pipeline, get plans that `check_plan`
//! accepts, and greedy-by-size placement (the compiler's too) stays close
//! to the lower bound (the peak of live bytes). Prints arena, sum of sizes
//! and peak for each model.

#[path = "memplan/planner.rs"]
mod planner;
#[path = "memplan/planner_tests.rs"]
mod planner_tests;

use aoc_compiler::onnx::{ImportOptions, import_model};
use aoc_passes::{PipelineOptions, run_pipeline};
use planner::{MemPlanOptions, MemoryPlan, check_plan, plan_memory};
use std::path::Path;

fn plan_model(name: &str, opts: MemPlanOptions) -> MemoryPlan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
        .join("model.onnx");
    let bytes = std::fs::read(path).unwrap();
    let imported = import_model(&bytes, &ImportOptions::default()).unwrap();
    let weights = imported.weight_source();
    let mut m = imported.module;
    let popts = PipelineOptions {
        weights: &weights,
        ..PipelineOptions::default()
    };
    run_pipeline(&mut m, "default", &popts).unwrap_or_else(|d| panic!("{name}: {}", d.message));
    let f = m.entry().unwrap();
    let plan = plan_memory(f, &opts).unwrap();
    check_plan(f, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
    println!(
        "{name} ({opts:?}): {} ops, {} buffers ({} aliases): arena {} B, sum of sizes {} B, peak live {} B, arena/peak {:.3}",
        f.body.ops.len(),
        plan.buffers.len(),
        plan.aliases.len(),
        plan.arena_bytes,
        plan.sum_of_sizes(),
        plan.peak_live_bytes,
        plan.arena_bytes as f64 / plan.peak_live_bytes.max(1) as f64
    );
    plan
}

fn check_model(name: &str) {
    for opts in [
        MemPlanOptions::default(),
        MemPlanOptions {
            plan_params: true,
            plan_results: true,
            ..MemPlanOptions::default()
        },
        MemPlanOptions {
            alias_reshapes: false,
            ..MemPlanOptions::default()
        },
    ] {
        let p = plan_model(name, opts);
        assert!(p.peak_live_bytes > 0, "{name}: nothing planned");
        assert!(p.arena_bytes <= p.sum_of_sizes(), "{name}");
        // Greedy by size is not optimal in general; on these models it
        // stays within 25% of the lower bound.
        assert!(
            p.arena_bytes * 4 <= p.peak_live_bytes * 5,
            "{name}: arena {} > 1.25 x peak {}",
            p.arena_bytes,
            p.peak_live_bytes
        );
    }
}

#[test]
fn resnet_block_plan() {
    check_model("resnet_block");
}

#[test]
fn encoder_layer_plan() {
    check_model("encoder_layer");
}
