//! Runs `strip-identity` through the library API, as an embedding compiler
//! would: parse a module from text, register the pass with
//! `PipelineOptions::extra_passes`, run a pipeline that mixes it with a
//! built-in pass, and check the printed result, the report and the numbers.

use aoc_example_custom_pass::ENTRY;
use aoc_ir::interp::{NoWeights, run};
use aoc_ir::{Scalar, Tensor, TensorType};
use aoc_passes::{PipelineOptions, run_pipeline};

const SOURCE: &str = "\
func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = core.identity %x : tensor<4xf32>
  %b = core.identity %a : tensor<4xf32>
  %c = core.cast %b {to = f32} : tensor<4xf32>
  %r = core.relu %c : tensor<4xf32>
  %s = core.relu %r : tensor<4xf32>
  return %s : tensor<4xf32>
}
";

fn parse() -> aoc_ir::Module {
    let (module, diags) = aoc_ir::parse_and_verify(SOURCE);
    assert!(diags.is_empty(), "{diags:?}");
    module
}

fn options() -> PipelineOptions<'static> {
    PipelineOptions {
        extra_passes: vec![ENTRY],
        print_ir_after: vec!["strip-identity".to_string()],
        ..Default::default()
    }
}

#[test]
fn strips_identities_and_keeps_the_numbers() {
    let mut module = parse();
    let x = Tensor::from_f64(
        TensorType::new(vec![4], Scalar::F32),
        vec![-1.0, 2.0, -3.0, 4.0],
    );
    let before = run(module.entry().unwrap(), vec![x.clone()], &NoWeights).unwrap();

    let report = run_pipeline(&mut module, "strip-identity", &options()).unwrap();
    assert!(aoc_ir::verify::verify_module(&module).is_empty());
    let text = aoc_ir::print::print_module(&module);
    assert!(!text.contains("core.identity"), "{text}");
    // Casts stay unless asked for.
    assert!(text.contains("%c = core.cast %x"), "{text}");
    assert_eq!(report.passes.len(), 1);
    assert_eq!(
        (report.passes[0].ops_before, report.passes[0].ops_after),
        (5, 3)
    );
    assert_eq!(report.passes[0].stats.notes, vec!["@main: removed 2 ops"]);
    assert_eq!(report.printed_ir[0].0, "strip-identity");

    let after = run(module.entry().unwrap(), vec![x], &NoWeights).unwrap();
    assert_eq!(before, after);
    assert_eq!(after[0].to_f64(), vec![0.0, 2.0, 0.0, 4.0]);
}

#[test]
fn options_and_built_in_passes_mix_in_one_pipeline() {
    let mut module = parse();
    let report = run_pipeline(
        &mut module,
        "strip-identity{casts=true},algebraic",
        &options(),
    )
    .unwrap();
    let text = aoc_ir::print::print_module(&module);
    // strip-identity removed the identities and the cast; algebraic then
    // merged relu(relu(x)).
    assert_eq!(
        report
            .passes
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["strip-identity", "algebraic"]
    );
    assert_eq!(report.passes[0].ops_after, 2);
    assert_eq!(report.passes[1].ops_after, 1);
    assert!(text.contains("core.relu %x : tensor<4xf32>"), "{text}");
}

#[test]
fn bad_options_and_unregistered_use_are_diagnostics() {
    let mut module = parse();
    let text = "strip-identity{casts=maybe}";
    let e = run_pipeline(&mut module, text, &options()).unwrap_err();
    assert!(
        e.message.contains("expected `true` or `false`"),
        "{}",
        e.message
    );
    assert_eq!(&text[e.loc.span.unwrap().range()], "maybe");
    // Without the entry in extra_passes the name is unknown.
    let e = run_pipeline(&mut module, "strip-identity", &PipelineOptions::default()).unwrap_err();
    assert_eq!(e.message, "unknown pass `strip-identity`");
    // The registry's help text describes the pass and its option.
    let help = aoc_passes::registry::describe(&[ENTRY]);
    assert!(help.contains("strip-identity") && help.contains("casts=<bool> (default false)"));
}
