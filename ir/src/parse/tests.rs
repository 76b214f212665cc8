//! Parser and printer tests: round trips against hand-written canonical
//! text, one test per diagnostic (message and line:col), and a no-panic
//! sweep over truncated and mutated input.

use super::parse;
use crate::attr::{Attr, ConstValue, DenseData, WeightRef};
use crate::diag::{Diagnostic, line_col};
use crate::module::{Module, ValueDef};
use crate::ops::Opcode;
use crate::print::print_module;
use crate::types::{ElemType, Encoding, QuantParams, Scalar};

/// Parses text that must be free of errors.
fn parse_ok(src: &str) -> Module {
    let (m, diags) = parse(src);
    assert!(diags.is_empty(), "unexpected diagnostics: {diags:#?}");
    m
}

/// print(parse(src)) == expected, and printing is a fixed point.
fn assert_canonical(src: &str, expected: &str) {
    let printed = print_module(&parse_ok(src));
    assert_eq!(printed, expected, "printed:\n{printed}");
    let again = print_module(&parse_ok(&printed));
    assert_eq!(again, printed, "not a fixed point");
}

/// The single error of `src`: its message and 1-based line:col.
fn one_error(src: &str) -> (String, (usize, usize)) {
    let (_, diags) = parse(src);
    assert_eq!(diags.len(), 1, "expected one diagnostic, got {diags:#?}");
    let d = &diags[0];
    (
        d.message.clone(),
        line_col(src, d.loc.span.expect("a span").start as usize),
    )
}

fn errors(src: &str) -> Vec<(String, (usize, usize))> {
    parse(src)
        .1
        .iter()
        .map(|d: &Diagnostic| {
            (
                d.message.clone(),
                line_col(src, d.loc.span.map_or(0, |s| s.start as usize)),
            )
        })
        .collect()
}

const BRIEF_EXAMPLE: &str = r#"// comments run to end of line
weights @weights = "model.safetensors"

func @main(%x: tensor<1x3x8x8xf32>, %ids: tensor<1x4xi64>) -> (tensor<1x8x8x8xf32>, tensor<1x4x16xf32>) {
  %w = const @weights["conv1.weight"] : tensor<8x3x3x3xf32>
  %b = const dense<[0.5, -1.0, 2.0, 0.0, 1.5, 3.0, -2.5, 1.0e-3]> : tensor<8xf32>
  %z = const dense<0.0> : tensor<8xf32>
  %y = core.conv2d %x, %w, %b {pads = [1, 1, 1, 1]} : tensor<1x8x8x8xf32> loc("conv1/Conv")
  %r = core.relu %y : tensor<1x8x8x8xf32>
  %q = quant.quantize %r : tensor<1x8x8x8x!quant.uniform<i8:f32, 0.0157:-3>>
  %e = const @weights["emb"] : tensor<100x16xf32>
  %g = core.gather %e, %ids : tensor<1x4x16xf32>
  %c = core.cast %x {to = f16} : tensor<1x3x8x8xf16>
  return %r, %g : tensor<1x8x8x8xf32>, tensor<1x4x16xf32>
}
"#;

#[test]
fn brief_example_round_trips() {
    let expected = r#"weights @weights = "model.safetensors"

func @main(%x: tensor<1x3x8x8xf32>, %ids: tensor<1x4xi64>) -> (tensor<1x8x8x8xf32>, tensor<1x4x16xf32>) {
  %w = const @weights["conv1.weight"] : tensor<8x3x3x3xf32>
  %b = const dense<[0.5, -1.0, 2.0, 0.0, 1.5, 3.0, -2.5, 0.001]> : tensor<8xf32>
  %z = const dense<0.0> : tensor<8xf32>
  %y = core.conv2d %x, %w, %b {pads = [1, 1, 1, 1]} : tensor<1x8x8x8xf32> loc("conv1/Conv")
  %r = core.relu %y : tensor<1x8x8x8xf32>
  %q = quant.quantize %r : tensor<1x8x8x8x!quant.uniform<i8:f32, 0.0157:-3>>
  %e = const @weights["emb"] : tensor<100x16xf32>
  %g = core.gather %e, %ids : tensor<1x4x16xf32>
  %c = core.cast %x {to = f16} : tensor<1x3x8x8xf16>
  return %r, %g : tensor<1x8x8x8xf32>, tensor<1x4x16xf32>
}
"#;
    assert_canonical(BRIEF_EXAMPLE, expected);
}

#[test]
fn brief_example_builds_the_expected_module() {
    let m = parse_ok(BRIEF_EXAMPLE);
    assert_eq!(m.weights.len(), 1);
    assert_eq!(
        (m.weights[0].name.as_str(), m.weights[0].path.as_str()),
        ("weights", "model.safetensors")
    );
    let f = &m.funcs[0];
    assert_eq!(f.name, "main");
    assert_eq!(f.params().len(), 2);
    assert_eq!(f.result_types.len(), 2);
    assert_eq!(f.body.ops.len(), 9);
    let w = f.def_op(f.value_by_name("w").unwrap()).unwrap();
    assert_eq!(
        f.ops[w].attrs.get("value"),
        Some(&Attr::Const(ConstValue::Weight(WeightRef {
            file: "weights".into(),
            key: "conv1.weight".into()
        })))
    );
    let b = f.def_op(f.value_by_name("b").unwrap()).unwrap();
    // 1.0e-3 is rounded to f32.
    assert_eq!(
        f.ops[b].attrs.get("value"),
        Some(&Attr::Const(ConstValue::Dense(DenseData::Floats(vec![
            0.5,
            -1.0,
            2.0,
            0.0,
            1.5,
            3.0,
            -2.5,
            0.001f32 as f64
        ]))))
    );
    let conv = f.def_op(f.value_by_name("y").unwrap()).unwrap();
    let conv = &f.ops[conv];
    assert_eq!(conv.opcode, Opcode::Conv2d);
    // Defaults are filled, in table order.
    let names: Vec<&str> = conv.attrs.iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["strides", "pads", "dilations", "groups"]);
    assert_eq!(conv.attrs.get("pads"), Some(&Attr::Ints(vec![1, 1, 1, 1])));
    assert_eq!(conv.loc.name.as_deref(), Some("conv1/Conv"));
    // The op's span runs from `%y` to the end of its type.
    let span = conv.loc.span.unwrap();
    assert_eq!(
        &BRIEF_EXAMPLE[span.range()],
        "%y = core.conv2d %x, %w, %b {pads = [1, 1, 1, 1]} : tensor<1x8x8x8xf32>"
    );
    let x = f.params()[0];
    assert_eq!(&BRIEF_EXAMPLE[f.values[x].loc.span.unwrap().range()], "%x");
    assert_eq!(&BRIEF_EXAMPLE[f.loc.span.unwrap().range()], "@main");
    let q = f.ty(f.value_by_name("q").unwrap());
    let qt = q.elem.quant().unwrap();
    assert_eq!((qt.storage, qt.expressed), (Scalar::I8, Scalar::F32));
    assert_eq!(
        qt.params,
        QuantParams::PerTensor {
            scale: 0.0157,
            zero_point: -3
        }
    );
    let c = f.def_op(f.value_by_name("c").unwrap()).unwrap();
    assert_eq!(f.ops[c].attrs.get("to"), Some(&Attr::Type(Scalar::F16)));
    assert_eq!(f.ops[c].attrs.get("saturate"), Some(&Attr::Bool(true)));
    assert_eq!(
        &BRIEF_EXAMPLE[f.body.terminator_loc.span.unwrap().range()],
        "return %r, %g : tensor<1x8x8x8xf32>, tensor<1x4x16xf32>"
    );
}

#[test]
fn every_syntax_feature_round_trips() {
    let src = r#"
weights @w2 = "b.safetensors"   weights @"odd name" = "dir/a \"q\".safetensors"
func @empty() {
  return
}
func @"with space"(%in.1: tensor<f32>, %$a-b_2: tensor<0x3xf32>) -> tensor<f32> { return %in.1 : tensor<f32> }
func @types(%s: tensor<8x16xf16, #sparse.nm<2, 4>>, %p: tensor<2x3x!quant.uniform<u8:f32:1, {0.5:128, 0.25, 1.0e-2:7}>>,
            %f8: tensor<4x!quant.uniform<f8E4M3FN:bf16, 2>>, %b: tensor<2xi1>) -> (tensor<8x16xf16, #sparse.nm<2, 4>>) {
  %i = const dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  %t = const dense<[true, false, true]> : tensor<3xi1>
  %h = const dense<[0.1, 1]> : tensor<2xf16>
  %s1 = const dense<7> : tensor<2x2xi8>
  %s2 = const dense<[[5, 5], [5, 5]]> : tensor<2x2xi8>
  %n = const dense<[nan, inf, -inf, -0.0]> : tensor<4xf64>
  %e = const dense<[]> : tensor<0x3xf32>
  %r0 = const dense<2.5> : tensor<f32> loc("tab\there \u{e9} \"q\" \\")
  %k = core.gelu %s {approximate = "tanh"} : tensor<8x16xf16>
  %l = core.leaky_relu %h {alpha = 1} : tensor<2xf16>
  %c = core.clip %h {min = -2.5e+3, max = 6.0} : tensor<2xf16>
  %z = core.resize %h {sizes = [4], scales = [2, 2.5], roi = []} : tensor<4xf16>
  return %s : tensor<8x16xf16, #sparse.nm<2, 4>>
}
"#;
    let expected = r#"weights @w2 = "b.safetensors"
weights @"odd name" = "dir/a \"q\".safetensors"

func @empty() {
  return
}

func @"with space"(%in.1: tensor<f32>, %$a-b_2: tensor<0x3xf32>) -> tensor<f32> {
  return %in.1 : tensor<f32>
}

func @types(%s: tensor<8x16xf16, #sparse.nm<2, 4>>, %p: tensor<2x3x!quant.uniform<u8:f32:1, {0.5:128, 0.25, 0.01:7}>>, %f8: tensor<4x!quant.uniform<f8E4M3FN:bf16, 2.0>>, %b: tensor<2xi1>) -> tensor<8x16xf16, #sparse.nm<2, 4>> {
  %i = const dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  %t = const dense<[true, false, true]> : tensor<3xi1>
  %h = const dense<[0.099975586, 1.0]> : tensor<2xf16>
  %s1 = const dense<7> : tensor<2x2xi8>
  %s2 = const dense<5> : tensor<2x2xi8>
  %n = const dense<[nan, inf, -inf, -0.0]> : tensor<4xf64>
  %e = const dense<[]> : tensor<0x3xf32>
  %r0 = const dense<2.5> : tensor<f32> loc("tab\there \u{e9} \"q\" \\")
  %k = core.gelu %s {approximate = "tanh"} : tensor<8x16xf16>
  %l = core.leaky_relu %h {alpha = 1.0} : tensor<2xf16>
  %c = core.clip %h {min = -2500.0, max = 6.0} : tensor<2xf16>
  %z = core.resize %h {sizes = [4], scales = [2.0, 2.5], roi = []} : tensor<4xf16>
  return %s : tensor<8x16xf16, #sparse.nm<2, 4>>
}
"#;
    assert_canonical(src, expected);
    let m = parse_ok(src);
    assert_eq!(m.weights[1].name, "odd name");
    assert_eq!(m.weights[1].path, "dir/a \"q\".safetensors");
    assert_eq!(m.funcs[1].name, "with space");
    let f = &m.funcs[2];
    let s = f.ty(f.params()[0]);
    assert_eq!(s.encoding, Some(Encoding::NM { n: 2, m: 4 }));
    let p = f.ty(f.params()[1]).elem.quant().unwrap().clone();
    assert_eq!(
        p.params,
        QuantParams::PerAxis {
            axis: 1,
            scales: vec![0.5, 0.25, 0.01],
            zero_points: vec![128, 0, 7]
        }
    );
    assert_eq!(f.ty(f.params()[2]).elem.storage(), Scalar::F8E4M3FN);
    let value = |name: &str| {
        let op = f.def_op(f.value_by_name(name).unwrap()).unwrap();
        match f.ops[op].attrs.get("value") {
            Some(Attr::Const(ConstValue::Dense(d))) => d.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(value("i"), DenseData::Ints(vec![1, 2, 3, 4]));
    assert_eq!(value("t"), DenseData::Ints(vec![1, 0, 1]));
    assert_eq!(value("s1"), DenseData::Ints(vec![7]));
    assert_eq!(value("e"), DenseData::Floats(vec![]));
    let r0 = f.def_op(f.value_by_name("r0").unwrap()).unwrap();
    assert_eq!(
        f.ops[r0].loc.name.as_deref(),
        Some("tab\there \u{e9} \"q\" \\")
    );
    let z = f.def_op(f.value_by_name("z").unwrap()).unwrap();
    // `[]` becomes whichever list kind the table asks for.
    assert_eq!(f.ops[z].attrs.get("roi"), Some(&Attr::Floats(vec![])));
    assert_eq!(
        f.ops[z].attrs.get("scales"),
        Some(&Attr::Floats(vec![2.0, 2.5]))
    );
}

#[test]
fn regions_and_multiple_results_parse_and_print() {
    // No op takes regions or has two results yet: the parser accepts the
    // syntax, the verifier rejects it.
    let src = r#"func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a, %b = core.relu %x : tensor<4xf32>, tensor<4xf32>
  %y = core.identity %x ({
  ^bb0(%arg: tensor<4xf32>, %k: tensor<4xf32>):
    %in = core.relu %arg : tensor<4xf32>
    yield %in : tensor<4xf32>
  }, {
    yield
  }) : tensor<4xf32>
  return %y : tensor<4xf32>
}
"#;
    assert_canonical(src, src);
    let m = parse_ok(src);
    let f = &m.funcs[0];
    let y = &f.ops[f.def_op(f.value_by_name("y").unwrap()).unwrap()];
    assert_eq!(y.regions.len(), 2);
    let arg = y.regions[0].args[0];
    assert!(matches!(
        f.values[arg].def,
        ValueDef::RegionArg {
            region: 0,
            index: 0,
            ..
        }
    ));
    assert_eq!(y.regions[0].ops.len(), 1);
    assert_eq!(y.regions[0].terminator.len(), 1);
    assert!(!f.body.ops.contains(&y.regions[0].ops[0]));
    let ab = f.def_op(f.value_by_name("a").unwrap()).unwrap();
    assert_eq!(f.ops[ab].results.len(), 2);
    let (_, diags) = crate::parse_and_verify(src);
    let messages: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
    assert!(
        messages.contains(&"core.identity: this op takes no regions"),
        "{messages:?}"
    );
}

#[test]
fn region_values_are_not_visible_outside() {
    let src = "func @f(%x: tensor<4xf32>) {\n  %y = core.identity %x ({\n  ^bb0(%a: tensor<4xf32>):\n    yield %x : tensor<4xf32>\n  }) : tensor<4xf32>\n  %z = core.relu %a : tensor<4xf32>\n  return\n}\n";
    assert_eq!(
        one_error(src),
        (
            "value %a is defined inside a region and is not visible here".to_string(),
            (6, 18)
        )
    );
}

#[test]
fn const_and_structure_verify() {
    let src = "weights @w = \"m.safetensors\"\n\nfunc @main() -> (tensor<2x2xf32>, tensor<3xi64>) {\n  %a = const dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>\n  %b = const @w[\"k\"] : tensor<3xi64>\n  return %a, %b : tensor<2x2xf32>, tensor<3xi64>\n}\n";
    let (_, diags) = crate::parse_and_verify(src);
    assert!(diags.is_empty(), "{diags:#?}");
    // The declared result types come from the signature, not the values.
    let bad = src.replace(
        "-> (tensor<2x2xf32>, tensor<3xi64>)",
        "-> (tensor<2x2xf32>, tensor<3xi32>)",
    );
    let (m, diags) = parse(&bad);
    assert!(diags.is_empty());
    assert_eq!(m.funcs[0].result_types[1].to_string(), "tensor<3xi32>");
    let (_, diags) = crate::parse_and_verify(&bad);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert!(
        diags[0]
            .message
            .starts_with("return: result 1 of @main is declared tensor<3xi32>"),
        "{}",
        diags[0].message
    );
}

// ---- syntax errors: one diagnostic at the offending token ----

#[test]
fn syntax_error_lists_expected_tokens() {
    let (msg, pos) = one_error("func @f() {\n  %x = core.relu foo\n}\n");
    assert_eq!(pos, (2, 18));
    assert!(msg.starts_with("expected one of "), "{msg}");
    assert!(msg.ends_with(", found `foo`"), "{msg}");
    assert!(
        msg.contains("`%name`") && msg.contains("`:`") && msg.contains("`{`"),
        "{msg}"
    );
    assert_eq!(
        one_error("func @f() -> tensor<4xf32> {\n  return %x tensor<4xf32>\n}"),
        (
            "expected one of `,`, `:`, `}`, found `tensor`".to_string(),
            (2, 13)
        )
    );
    assert_eq!(
        one_error("func @f() {\n  return\n"),
        (
            "expected one of `%name`, `}`, found end of input".to_string(),
            (2, 9)
        )
    );
    assert_eq!(
        one_error("func @f() {\n  return\n}\n}"),
        (
            "expected one of `func`, `weights`, found `}`".to_string(),
            (4, 1)
        )
    );
    // The module is empty after a syntax error.
    let (m, _) = parse("func @ok() {\n  return\n}\nfunc @bad(");
    assert!(m.funcs.is_empty());
}

#[test]
fn lexical_errors() {
    assert_eq!(
        one_error("func @f() {\n  %x = ? \n"),
        ("unexpected character `?`".to_string(), (2, 8))
    );
    assert_eq!(
        one_error("weights @w = \"abc\nfunc"),
        (
            "unterminated string (strings end on the same line)".to_string(),
            (1, 14)
        )
    );
    let (msg, _) = one_error(&format!(
        "func @f() {{ %x = const dense<{}",
        "[".repeat(200)
    ));
    assert!(msg.starts_with("brackets nest deeper than"), "{msg}");
}

// ---- semantic errors: collected, each at its span ----

#[test]
fn unknown_op_suggests_the_nearest_name() {
    let src = "func @f(%x: tensor<4xf32>) {\n  %a = core.rleu %x : tensor<4xf32>\n  %b = relu %x : tensor<4xf32>\n  %c = core.frobnicate %x : tensor<4xf32>\n  %d = core.relu %a : tensor<4xf32>\n  return\n}\n";
    assert_eq!(
        errors(src),
        [
            (
                "unknown op `core.rleu`; did you mean `core.relu`?".to_string(),
                (2, 8)
            ),
            (
                "unknown op `relu`; did you mean `core.relu`?".to_string(),
                (3, 8)
            ),
            ("unknown op `core.frobnicate`".to_string(), (4, 8)),
        ]
    );
}

#[test]
fn undefined_and_duplicate_values() {
    let src = "func @f(%x: tensor<4xf32>) {\n  %a = core.relu %nope : tensor<4xf32>\n  %b = core.relu %later : tensor<4xf32>\n  %later = core.relu %x : tensor<4xf32>\n  %later = core.relu %x : tensor<4xf32>\n  return %zz : tensor<4xf32>\n}\n";
    let (m, diags) = parse(src);
    let got: Vec<_> = diags
        .iter()
        .map(|d| {
            (
                d.message.as_str(),
                line_col(src, d.loc.span.unwrap().start as usize),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("use of undefined value %nope", (2, 18)),
            ("value %later is used before it is defined", (3, 18)),
            ("value %later is defined twice", (5, 3)),
            ("use of undefined value %zz", (6, 10)),
        ]
    );
    // The duplicate points back at the first definition.
    let (label, _) = &diags[2].labels[0];
    assert_eq!(line_col(src, label.start as usize), (4, 3));
    // Names stay unique in the module.
    let f = &m.funcs[0];
    let names: Vec<&str> = f.values.iter().map(|(_, v)| v.name.as_str()).collect();
    assert_eq!(names, ["x", "later", "later_1"]);
}

#[test]
fn poisoned_values_do_not_cascade() {
    let src = "func @f(%x: tensor<4xf32>) {\n  %a = core.nope %x : tensor<4xf32>\n  %b = core.relu %a : tensor<4xf32>\n  return %b : tensor<4xf32>\n}\n";
    assert_eq!(errors(src).len(), 1);
}

#[test]
fn attribute_errors() {
    let src = "func @f(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {\n  %a = core.conv2d %x, %w {padz = [1, 1]} : tensor<1x8x6x6xf32>\n  %b = core.conv2d %x, %w {groups = 1.5} : tensor<1x8x6x6xf32>\n  %c = core.cast %x : tensor<1x3x8x8xf16>\n  %d = core.cast %x {to = f17} : tensor<1x3x8x8xf16>\n  %e = core.conv2d %x, %w {groups = 1, groups = 2} : tensor<1x8x6x6xf32>\n  %g = core.conv2d %x, %w {pads = [1, true]} : tensor<1x8x6x6xf32>\n  return\n}\n";
    assert_eq!(
        errors(src),
        [
            (
                "core.conv2d: unknown attribute `padz` (expected one of: strides, pads, dilations, groups)".to_string(),
                (2, 28)
            ),
            ("core.conv2d: attribute `groups` must be a integer, found float".to_string(), (3, 28)),
            ("core.cast: missing required attribute `to`".to_string(), (4, 8)),
            ("unknown element type `f17`; did you mean `f16`?".to_string(), (5, 27)),
            ("attribute `groups` is given twice".to_string(), (6, 40)),
            ("attribute lists hold numbers only, found `true`".to_string(), (7, 39)),
        ]
    );
}

#[test]
fn type_errors() {
    let src = "func @f(\n  %a: tensor<4x!quant.uniform<i8:f32:1, {0.1, 0.2}>>,\n  %b: tensor<3x!quant.uniform<i8:f32:0, {0.1, 0.2}>>,\n  %c: tensor<4x!quant.uniform<f32:f32, 0.1>>,\n  %d: tensor<4x!quant.uniform<i8:i8, 0.1>>,\n  %e: tensor<8xf16, #sparse.nm<3, 2>>,\n  %f: tensor<4x!quant.uniform<i8:f32, 0.1:200>>,\n  %g: tensor<4x!quant.uniform<i8:f32, 0.0>>,\n  %h: tensor<99999999999999999999xf32>,\n  %i: tensor<4x!quant.uniform<i8:f32:0, 0.1>>,\n  %j: tensor<4x!qaunt.uniform<i8:f32, 0.1>>,\n  %k: tensor<8xf16, #sparse.nm<2>>,\n  %l: tensor<4xfloat>) {\n  return\n}\n";
    assert_eq!(
        errors(src),
        [
            (
                "quantization axis 1 is out of range for rank 1".to_string(),
                (2, 16)
            ),
            (
                "per-axis quantization along axis 0 needs 3 scales (the dimension's size), found 2"
                    .to_string(),
                (3, 41)
            ),
            (
                "quantized storage type must be an integer or fp8 type, found f32".to_string(),
                (4, 31)
            ),
            (
                "quantized expressed type must be a float type, found i8".to_string(),
                (5, 34)
            ),
            (
                "#sparse.nm<3, 2> must satisfy 0 < n <= m".to_string(),
                (6, 21)
            ),
            ("zero point 200 is out of range for i8".to_string(), (7, 43)),
            (
                "quantization scale must be finite and non-zero, found `0.0`".to_string(),
                (8, 39)
            ),
            (
                "dimension `99999999999999999999` is too large".to_string(),
                (9, 14)
            ),
            (
                "a quantization axis needs a `{scale:zero_point, ...}` list".to_string(),
                (10, 38)
            ),
            (
                "unknown type `!qaunt.uniform`, expected `!quant.uniform`".to_string(),
                (11, 16)
            ),
            (
                "#sparse.nm takes 2 integers (n, m), found 1".to_string(),
                (12, 21)
            ),
            ("unknown element type `float`".to_string(), (13, 16)),
        ]
    );
}

#[test]
fn dense_errors() {
    let src = "func @f() {\n  %a = const dense<[[1.0, 2.0], [3.0]]> : tensor<2x2xf32>\n  %b = const dense<[1.0, 2.0, 3.0, 4.0]> : tensor<2x2xf32>\n  %c = const dense<[1.5]> : tensor<1xi32>\n  %d = const dense<300> : tensor<2xu8>\n  %e = const dense<true> : tensor<2xf32>\n  %f = const dense<[[1]]> : tensor<f32>\n  %g = const : tensor<f32>\n  %h = core.relu dense<1.0> : tensor<f32>\n  %i = const dense<99999999999999999999> : tensor<i64>\n  %j = const @w[\"bad \\q escape\"] : tensor<f32>\n  return\n}\n";
    assert_eq!(
        errors(src),
        [
            ("dense literal does not match tensor<2x2xf32>: expected a list of 2 elements, found 1".to_string(), (2, 33)),
            ("dense literal does not match tensor<2x2xf32>: expected a list of 2 elements, found 4".to_string(), (3, 20)),
            ("expected an integer for tensor<1xi32>, found `1.5`".to_string(), (4, 21)),
            ("value 300 is out of range for u8".to_string(), (5, 20)),
            ("expected a number for tensor<2xf32>, found `true`".to_string(), (6, 20)),
            ("dense literal does not match tensor<f32>: expected a number, found a list".to_string(), (7, 20)),
            ("const: expected `dense<...>` or `@file[\"key\"]` after the op name".to_string(), (8, 8)),
            ("core.relu: this op takes operands, not a constant payload".to_string(), (9, 8)),
            ("integer `99999999999999999999` does not fit in 64 bits".to_string(), (10, 20)),
            ("invalid escape `\\q` (expected \\n \\t \\r \\0 \\\\ \\\" \\' or \\u{hex})".to_string(), (11, 22)),
        ]
    );
}

/// `@g2` writes its declared result type for a value of another type: the
/// parser leaves that to the verifier, which names the signature.
#[test]
fn terminator_errors() {
    let src = "func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  yield %x : tensor<4xf32>\n}\nfunc @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf16>\n}\nfunc @g2(%x: tensor<4xf32>) -> tensor<4xf16> {\n  return %x : tensor<4xf16>\n}\nfunc @h(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x\n}\n";
    assert_eq!(
        errors(src),
        [
            (
                "expected `return` at the end of a function body, found `yield`".to_string(),
                (2, 3)
            ),
            (
                "`return`: %x has type tensor<4xf32>, but tensor<4xf16> is written".to_string(),
                (5, 15)
            ),
            ("`return` has 1 values but 0 types".to_string(), (11, 3)),
        ]
    );
}

#[test]
fn result_count_must_match_types() {
    let src =
        "func @f(%x: tensor<4xf32>) {\n  %a, %b = core.relu %x : tensor<4xf32>\n  return\n}\n";
    assert_eq!(
        one_error(src),
        (
            "2 results are named but 1 types are given".to_string(),
            (2, 27)
        )
    );
}

// ---- robustness ----

#[test]
fn never_panics_on_truncations_and_mutations() {
    let src = BRIEF_EXAMPLE;
    let bytes = src.as_bytes();
    let mut inputs: Vec<String> = Vec::new();
    // Truncations at ~25 points, on char boundaries.
    for k in 0..25 {
        let cut = src.floor_char_boundary(k * bytes.len() / 25);
        inputs.push(src[..cut].to_string());
    }
    // Byte mutations from a fixed pseudo-random sequence: replace, delete,
    // duplicate; characters chosen to stress the lexer and the grammar.
    let alphabet = b"%@^!#<>[]{}(),:=-x0123456789.\"\\ \nfinadense";
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..30 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            match next() % 3 {
                0 => b[i] = alphabet[(next() as usize) % alphabet.len()],
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, b[i]),
            }
        }
        inputs.push(String::from_utf8_lossy(&b).into_owned());
    }
    inputs.push("\u{0}\u{ffff}%".to_string());
    inputs.push("func @f(%x: tensor<18446744073709551615x2xf32>) { return }".to_string());
    inputs.push(
        "func @f() { %a = const dense<1.0> : tensor<4294967296x4294967296xf32>\n return }"
            .to_string(),
    );
    for input in &inputs {
        let (m, _) = parse(input);
        // Whatever was built prints, and the print parses again.
        let printed = print_module(&m);
        let _ = parse(&printed);
    }
}

#[test]
fn valid_parses_print_to_a_fixed_point_after_mutation() {
    // Mutations that still parse must still round-trip canonically.
    let mut ok = 0;
    for (i, line) in BRIEF_EXAMPLE.lines().enumerate() {
        let mut variant: Vec<&str> = BRIEF_EXAMPLE.lines().collect();
        variant.remove(i);
        let text = variant.join("\n");
        let (m, diags) = parse(&text);
        if diags.is_empty() {
            ok += 1;
            let p = print_module(&m);
            assert_eq!(
                print_module(&parse_ok(&p)),
                p,
                "after removing line {line:?}"
            );
        }
    }
    assert!(ok >= 3, "only {ok} variants parsed");
}

#[test]
fn elem_types_all_parse() {
    for s in Scalar::ALL {
        let src = format!(
            "func @f(%x: tensor<2x{s}>) -> tensor<2x{s}> {{\n  return %x : tensor<2x{s}>\n}}\n"
        );
        let m = parse_ok(&src);
        assert_eq!(
            m.funcs[0].ty(m.funcs[0].params()[0]).elem,
            ElemType::Scalar(s)
        );
        assert_eq!(print_module(&m), src);
    }
}
