//! Tests of the `winograd` family: each rule fires on an eligible conv and
//! keeps the outputs within the stated tolerance (1e-3; seeded random
//! inputs in [-2, 2) and weights of order 1 through the interpreter);
//! ineligible convs are left alone; growth is bounded; the roofline prefers
//! Winograd on large layers and the direct conv on small ones; the passes
//! work through the pipeline.

use crate::egraph::cost::{CostModel, CostNode};
use crate::egraph::{Limits, OpAttrs, Optimized, Rewrite, Roofline, optimize_func};
use crate::passes::winograd::PreferWinograd;
use crate::testutil::*;
use crate::{PipelineOptions, run_pipeline};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{Func, Location, Module, Opcode, ValueId};

/// Optimizes with `rules`, extracting Winograd forms wherever they exist.
fn optimize_preferring(f: &Func, rules: &[Rewrite]) -> (Func, crate::pass::SaturationStats) {
    let model = PreferWinograd(Roofline::default());
    match optimize_func(f, rules, &Limits::default(), &model).expect("optimizes") {
        Optimized::Done(g, s) => (g, s),
        Optimized::Skipped(r) => panic!("skipped: {r}"),
    }
}

fn rules_named(name: &str) -> Vec<Rewrite> {
    let r: Vec<Rewrite> = super::winograd::rules()
        .unwrap()
        .into_iter()
        .filter(|r| r.name.as_str() == name)
        .collect();
    assert_eq!(r.len(), 1, "no rule {name}");
    r
}

/// A weight of order 1 with deterministic values.
fn weight(f: &mut Func, shape: &[usize], seed: u64) -> ValueId {
    let mut rng = Rng::new(seed);
    let n = shape.iter().product();
    dense(f, shape, (0..n).map(|_| rng.next() / 2.0).collect())
}

/// conv2d(x, w[, b]) with `attrs`, then relu, over x of `x_shape`.
fn conv_func(x_shape: &[usize], w_shape: &[usize], bias: bool, attrs: Attrs) -> Func {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(x_shape), Location::default());
    let w = weight(&mut f, w_shape, 7);
    let mut ops = vec![x, w];
    if bias {
        ops.push(weight(&mut f, &[w_shape[0]], 9));
    }
    let y = op(&mut f, Opcode::Conv2d, &ops, attrs);
    let r = op(&mut f, Opcode::Relu, &[y], Attrs::new());
    f.set_return(vec![r]);
    f
}

#[test]
fn every_rule_rewrites_an_eligible_conv_within_tolerance() {
    for (name, tile, bias) in [
        ("winograd-f2x2", 2, false),
        ("winograd-f2x2-bias", 2, true),
        ("winograd-f4x4", 4, false),
        ("winograd-f4x4-bias", 4, true),
    ] {
        // 9x7 output: partial tiles at the bottom and right for both tiles
        let f = conv_func(
            &[2, 3, 9, 7],
            &[4, 3, 3, 3],
            bias,
            ints("pads", &[1, 1, 1, 1]),
        );
        let (g, stats) = optimize_preferring(&f, &rules_named(name));
        assert!(
            stats.applied.iter().any(|(r, n)| r == name && *n > 0),
            "{name}: {stats:?}"
        );
        let ops = opcodes(&g);
        assert!(!ops.contains(&Opcode::Conv2d), "{name}: {ops:?}");
        let w = g
            .body
            .ops
            .iter()
            .map(|o| &g.ops[*o])
            .find(|o| o.opcode == Opcode::WinogradConv2d)
            .unwrap();
        assert_eq!(w.attrs.get("tile"), Some(&Attr::Int(tile)));
        assert_eq!(w.operands.len(), if bias { 3 } else { 2 });
        let a = tile as usize + 2;
        assert_eq!(g.ty(w.operands[1]).shape, vec![a, a, 4, 3]);
        let err = max_error(&f, &g, 3);
        assert!(err < 1e-3, "{name}: {err}");
    }
}

#[test]
fn ineligible_convs_stay_direct() {
    let cases: Vec<(&str, Vec<usize>, Vec<usize>, Attrs)> = vec![
        (
            "stride 2",
            vec![1, 2, 8, 8],
            vec![2, 2, 3, 3],
            ints("strides", &[2, 2]),
        ),
        (
            "dilation 2",
            vec![1, 2, 8, 8],
            vec![2, 2, 3, 3],
            ints("dilations", &[2, 2]),
        ),
        (
            "1x1 kernel",
            vec![1, 2, 8, 8],
            vec![2, 2, 1, 1],
            Attrs::new(),
        ),
        (
            "5x5 kernel",
            vec![1, 2, 8, 8],
            vec![2, 2, 5, 5],
            Attrs::new(),
        ),
        (
            "grouped",
            vec![1, 4, 8, 8],
            vec![4, 2, 3, 3],
            Attrs::new().with("groups", Attr::Int(2)),
        ),
    ];
    for (why, x, w, attrs) in cases {
        let f = conv_func(&x, &w, false, attrs);
        let (g, stats) = optimize_preferring(&f, &super::winograd::rules().unwrap());
        assert!(stats.applied.is_empty(), "{why}: {stats:?}");
        assert!(opcodes(&g).contains(&Opcode::Conv2d), "{why}");
    }
    // a weight that is not a constant cannot be transformed at compile time
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 2, 6, 6]), Location::default());
    let w = f.add_param("w", f32t(&[2, 2, 3, 3]), Location::default());
    let y = op(&mut f, Opcode::Conv2d, &[x, w], Attrs::new());
    f.set_return(vec![y]);
    let (g, _) = optimize_preferring(&f, &super::winograd::rules().unwrap());
    assert_eq!(opcodes(&g), vec![Opcode::Conv2d]);
}

/// Growth: a chain of 30 eligible convs sharing one weight gains two
/// Winograd nodes per conv (one per tile) and two transformed weights in
/// all, and saturates.
#[test]
fn winograd_growth_is_bounded() {
    let mut f = Func::new("main");
    let mut h = f.add_param("x", f32t(&[1, 4, 6, 6]), Location::default());
    let w = weight(&mut f, &[4, 4, 3, 3], 3);
    for _ in 0..30 {
        h = op(&mut f, Opcode::Conv2d, &[h, w], ints("pads", &[1, 1, 1, 1]));
    }
    f.set_return(vec![h]);
    let (g, stats) = optimize_preferring(&f, &super::winograd::rules().unwrap());
    assert_eq!(stats.stop_reason, "saturated");
    // x, w, 30 convs; + 60 Winograd nodes + 2 transformed weights
    assert!(stats.nodes <= 32 + 62, "{} nodes", stats.nodes);
    assert_eq!(stats.classes, 32 + 2);
    assert_eq!(
        opcodes(&g)
            .iter()
            .filter(|o| **o == Opcode::WinogradConv2d)
            .count(),
        30
    );
}

/// The roofline's price of a conv and of its F(2x2) and F(4x4) forms.
fn prices(target: &str, n: usize, c: usize, k: usize, hw: usize) -> (f64, f64, f64) {
    let model = Roofline::for_target(target).unwrap();
    let x = f32t(&[n, c, hw, hw]);
    let out = f32t(&[n, k, hw, hw]);
    let pads = Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let w = f32t(&[k, c, 3, 3]);
    let conv_attrs = OpAttrs::new(Opcode::Conv2d, pads.clone(), None).unwrap();
    let conv = model.cost(&CostNode::Op {
        opcode: Opcode::Conv2d,
        attrs: &conv_attrs,
        operands: &[&x, &w],
        result: &out,
    });
    let wino = |tile: usize| {
        let u = f32t(&[tile + 2, tile + 2, k, c]);
        let attrs = OpAttrs::new(
            Opcode::WinogradConv2d,
            pads.clone().with("tile", Attr::Int(tile as i64)),
            None,
        )
        .unwrap();
        model.cost(&CostNode::Op {
            opcode: Opcode::WinogradConv2d,
            attrs: &attrs,
            operands: &[&x, &u],
            result: &out,
        })
    };
    (conv, wino(2), wino(4))
}

#[test]
fn roofline_decides_per_layer_and_target() {
    // Measured on the CPU kernels (docs/performance.md): with Winograd's
    // scratch blocked in L2, F(2x2) or F(4x4) beats im2col on ResNet's 3x3
    // layers, from 32 channels at 16x16 (0.067 vs 0.094 ms) to 64 channels
    // at 56x56 (1.2-2.0 vs 4.05 ms).
    for (c, hw) in [(32, 16), (64, 56), (128, 28), (256, 14)] {
        let (conv, f2, f4) = prices("x86-64-v4", 1, c, c, hw);
        assert!(f2.min(f4) < conv, "{c}x{hw}: {conv} {f2} {f4}");
    }
    // A stem with 3 input channels: the transforms cost more than the
    // saved multiplies (measured 0.126 vs 0.074 ms), so direct wins.
    let (conv, f2, f4) = prices("x86-64-v4", 1, 3, 32, 32);
    assert!(conv < f2 && conv < f4, "{conv} {f2} {f4}");
    // On the GPU the scratch goes through memory: still a win at 64x56.
    let (conv, f2, _) = prices("sm_90", 1, 64, 64, 56);
    assert!(f2 < conv, "{conv} {f2}");
}

fn module_of(f: Func) -> Module {
    let mut m = Module::default();
    m.funcs.push(f);
    m
}

#[test]
fn passes_rewrite_through_the_pipeline() {
    let f = conv_func(
        &[1, 3, 8, 8],
        &[4, 3, 3, 3],
        true,
        ints("pads", &[1, 1, 1, 1]),
    );
    for (pipeline, tile) in [("winograd", 2), ("winograd{tile=4}", 4)] {
        let mut m = module_of(f.clone());
        run_pipeline(&mut m, pipeline, &PipelineOptions::default()).expect("runs");
        let g = &m.funcs[0];
        let w = g
            .body
            .ops
            .iter()
            .map(|o| &g.ops[*o])
            .find(|o| o.opcode == Opcode::WinogradConv2d);
        assert_eq!(
            w.and_then(|w| w.attrs.get("tile")),
            Some(&Attr::Int(tile)),
            "{pipeline}"
        );
        assert!(max_error(&f, g, 2) < 1e-3);
    }
    // the auto pass leaves this small layer direct on the CPU
    let mut m = module_of(f.clone());
    run_pipeline(&mut m, "winograd-auto", &PipelineOptions::default()).expect("runs");
    assert!(opcodes(&m.funcs[0]).contains(&Opcode::Conv2d));
    let err = run_pipeline(
        &mut module_of(f),
        "winograd{tile=3}",
        &PipelineOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.message.contains("expected 2 or 4, found 3"),
        "{}",
        err.message
    );
}
