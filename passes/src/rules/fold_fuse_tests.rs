//! Numeric tests of the `fold-bn` and `fuse` rules: each builds the pattern
//! over seeded random inputs (weights as inline constants), checks the rule
//! fired and the expected ops remain, and compares the interpreter's outputs
//! before and after. Tolerances: BN folding 1e-5 (unit-scale data; the
//! folded weights round once), epilogue/pointwise/attention fusion 0 (bit
//! exact), GELU and softmax recognition 1e-6, layer-norm 1e-5.

use super::{fold_bn, fuse};
use crate::egraph::Rewrite;
use crate::testutil::*;
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::{Func, Location, Opcode, ValueId};

fn pick(rules: Vec<Rewrite>, names: &[&str]) -> Vec<Rewrite> {
    let out: Vec<Rewrite> = rules
        .into_iter()
        .filter(|r| names.contains(&r.name.as_str()))
        .collect();
    assert_eq!(out.len(), names.len(), "missing rules among {names:?}");
    out
}

fn randoms(seed: u64, n: usize, lo: f64) -> Vec<f64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| lo + (r.next() + 2.0) / 4.0).collect()
}

/// Builds `body`, applies `rules`, checks `fired` fired, the op list, and
/// the error bound.
fn check(
    rules: &[Rewrite],
    fired: &str,
    shape: &[usize],
    expect: &[Opcode],
    tol: f64,
    body: impl Fn(&mut Func, ValueId) -> ValueId,
) {
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(shape), Location::default());
    let y = body(&mut f, x);
    f.set_return(vec![y]);
    let (g, stats) = optimize(&f, rules);
    assert!(
        stats.applied.iter().any(|(r, n)| r == fired && *n > 0),
        "{fired} did not fire: {stats:?}"
    );
    let ops: Vec<Opcode> = opcodes(&g)
        .into_iter()
        .filter(|o| *o != Opcode::Const)
        .collect();
    assert_eq!(ops, expect, "{fired}");
    let err = max_error(&f, &g, 3);
    assert!(err <= tol, "{fired}: error {err} > {tol}");
}

fn bn(f: &mut Func, y: ValueId, c: usize, seed: u64) -> ValueId {
    let s = dense(f, &[c], randoms(seed, c, 0.5));
    let b = dense(f, &[c], randoms(seed + 1, c, -0.5));
    let m = dense(f, &[c], randoms(seed + 2, c, -0.5));
    let v = dense(f, &[c], randoms(seed + 3, c, 0.1));
    op(f, Opcode::BatchNorm, &[y, s, b, m, v], Attrs::new())
}

#[test]
fn fold_bn_into_grouped_conv_with_and_without_bias() {
    let rules = fold_bn::rules().unwrap();
    // grouped: 4 in, 6 out, 2 groups, 3x3
    check(
        &rules,
        "fold-bn-conv",
        &[1, 4, 5, 5],
        &[Opcode::Conv2d],
        1e-5,
        |f, x| {
            let w = dense(f, &[6, 2, 3, 3], randoms(1, 108, -0.5));
            let y = op(
                f,
                Opcode::Conv2d,
                &[x, w],
                Attrs::new()
                    .with("groups", Attr::Int(2))
                    .with("pads", Attr::Ints(vec![1; 4])),
            );
            bn(f, y, 6, 10)
        },
    );
    // depthwise with a bias
    check(
        &rules,
        "fold-bn-conv-bias",
        &[1, 3, 4, 4],
        &[Opcode::Conv2d],
        1e-5,
        |f, x| {
            let w = dense(f, &[3, 1, 3, 3], randoms(2, 27, -0.5));
            let b = dense(f, &[3], randoms(3, 3, -0.5));
            let y = op(
                f,
                Opcode::Conv2d,
                &[x, w, b],
                Attrs::new().with("groups", Attr::Int(3)),
            );
            bn(f, y, 3, 20)
        },
    );
}

#[test]
fn fold_scale_and_shift_into_conv() {
    let rules = fold_bn::rules().unwrap();
    check(
        &rules,
        "fold-add-conv-bias",
        &[1, 2, 3, 3],
        &[Opcode::Conv2d],
        1e-5,
        |f, x| {
            let w = dense(f, &[4, 2, 1, 1], randoms(4, 8, -0.5));
            let y = op(f, Opcode::Conv2d, &[x, w], Attrs::new());
            let s = dense(f, &[4, 1, 1], randoms(5, 4, 0.5));
            let t = dense(f, &[1, 4, 1, 1], randoms(6, 4, -0.5));
            let z = op(f, Opcode::Mul, &[s, y], Attrs::new());
            op(f, Opcode::Add, &[z, t], Attrs::new())
        },
    );
    // a scale that varies along H is not per-channel: nothing folds
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 2, 3, 3]), Location::default());
    let w = dense(&mut f, &[4, 2, 1, 1], randoms(4, 8, -0.5));
    let y = op(&mut f, Opcode::Conv2d, &[x, w], Attrs::new());
    let s = dense(&mut f, &[3, 1], randoms(5, 3, 0.5));
    let z = op(&mut f, Opcode::Mul, &[y, s], Attrs::new());
    f.set_return(vec![z]);
    let (g, _) = optimize(&f, &rules);
    assert!(opcodes(&g).contains(&Opcode::Mul));
}

#[test]
fn fold_bn_into_gemm_and_matmul() {
    let rules = fold_bn::rules().unwrap();
    check(
        &rules,
        "fold-bn-gemm-c",
        &[2, 3],
        &[Opcode::Gemm],
        1e-5,
        |f, x| {
            let w = dense(f, &[4, 3], randoms(7, 12, -0.5));
            let c = dense(f, &[4], randoms(8, 4, -0.5));
            let y = op(
                f,
                Opcode::Gemm,
                &[x, w, c],
                Attrs::new()
                    .with("trans_b", Attr::Bool(true))
                    .with("beta", Attr::Float(0.5)),
            );
            bn(f, y, 4, 30)
        },
    );
    check(
        &rules,
        "fold-bn-matmul",
        &[2, 3],
        &[Opcode::Gemm],
        1e-5,
        |f, x| {
            let w = dense(f, &[3, 4], randoms(9, 12, -0.5));
            let y = op(f, Opcode::MatMul, &[x, w], Attrs::new());
            bn(f, y, 4, 40)
        },
    );
    // a per-column scale on a batched matmul folds into the weights
    check(
        &rules,
        "fold-mul-matmul",
        &[2, 2, 3],
        &[Opcode::MatMul],
        1e-5,
        |f, x| {
            let w = dense(f, &[3, 4], randoms(11, 12, -0.5));
            let y = op(f, Opcode::MatMul, &[x, w], Attrs::new());
            let s = dense(f, &[4], randoms(12, 4, 0.5));
            op(f, Opcode::Mul, &[y, s], Attrs::new())
        },
    );
}

#[test]
fn conv_bias_activation_and_residual_fuse_exactly() {
    let rules = fuse::fusion_rules(8).unwrap();
    check(
        &rules,
        "fuse-relu",
        &[1, 2, 4, 4],
        &[Opcode::FusedConv2d],
        0.0,
        |f, x| {
            let w = dense(f, &[2, 2, 3, 3], randoms(13, 36, -0.5));
            let y = op(
                f,
                Opcode::Conv2d,
                &[x, w],
                Attrs::new().with("pads", Attr::Ints(vec![1; 4])),
            );
            let b = dense(f, &[2, 1, 1], randoms(14, 2, -0.5));
            let z = op(f, Opcode::Add, &[b, y], Attrs::new());
            let r = op(f, Opcode::Add, &[z, x], Attrs::new());
            op(f, Opcode::Relu, &[r], Attrs::new())
        },
    );
    for (act, attrs) in [
        (
            Opcode::Clip,
            Attrs::new()
                .with("min", Attr::Float(0.0))
                .with("max", Attr::Float(0.5)),
        ),
        (Opcode::Gelu, Attrs::new()),
        (Opcode::Sigmoid, Attrs::new()),
        (Opcode::Silu, Attrs::new()),
        (Opcode::HardSwish, Attrs::new()),
    ] {
        let name = format!(
            "fuse-{}",
            act.name().trim_start_matches("core.").replace('_', "-")
        );
        check(&rules, &name, &[3, 4], &[Opcode::FusedGemm], 0.0, |f, x| {
            let w = dense(f, &[4, 5], randoms(15, 20, -0.5));
            let c = dense(f, &[5], randoms(16, 5, -0.5));
            let y = op(f, Opcode::Gemm, &[x, w, c], Attrs::new());
            op(f, act, &[y], attrs.clone())
        });
    }
    check(
        &rules,
        "fuse-sub",
        &[2, 3],
        &[Opcode::FusedMatMul],
        0.0,
        |f, x| {
            let w = dense(f, &[3, 3], randoms(17, 9, -0.5));
            let y = op(f, Opcode::MatMul, &[x, w], Attrs::new());
            op(f, Opcode::Sub, &[x, y], Attrs::new())
        },
    );
}

#[test]
fn max_ops_bounds_an_epilogue_and_shared_producers_stay() {
    // conv + 3 pointwise ops with max-ops 3: at most 2 steps in one op
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 1, 3, 3]), Location::default());
    let w = dense(&mut f, &[1, 1, 1, 1], vec![0.5]);
    let mut y = op(&mut f, Opcode::Conv2d, &[x, w], Attrs::new());
    for a in [Opcode::Relu, Opcode::Sigmoid, Opcode::Tanh] {
        y = op(&mut f, a, &[y], Attrs::new());
    }
    f.set_return(vec![y]);
    let (g, _) = optimize(&f, &fuse::fusion_rules(3).unwrap());
    assert_eq!(
        opcodes(&g)
            .into_iter()
            .filter(|o| *o != Opcode::Const)
            .count(),
        2
    );
    assert_eq!(max_error(&f, &g, 2), 0.0);
    // a conv used twice is not absorbed into either consumer
    let mut f = Func::new("main");
    let x = f.add_param("x", f32t(&[1, 1, 3, 3]), Location::default());
    let w = dense(&mut f, &[1, 1, 1, 1], vec![0.5]);
    let y = op(&mut f, Opcode::Conv2d, &[x, w], Attrs::new());
    let a = op(&mut f, Opcode::Relu, &[y], Attrs::new());
    let b = op(&mut f, Opcode::Sigmoid, &[y], Attrs::new());
    f.set_return(vec![a, b]);
    let (g, _) = optimize(&f, &fuse::fusion_rules(8).unwrap());
    assert!(opcodes(&g).contains(&Opcode::Conv2d));
}

#[test]
fn pointwise_chains_fuse_exactly() {
    check(
        &fuse::fusion_rules(8).unwrap(),
        "fuse-tanh",
        &[2, 5],
        &[Opcode::FusedPointwise],
        0.0,
        |f, x| {
            let c = dense(f, &[5], randoms(18, 5, -0.5));
            let a = op(f, Opcode::Div, &[c, x], Attrs::new());
            let b = op(f, Opcode::Sigmoid, &[a], Attrs::new());
            op(f, Opcode::Tanh, &[b], Attrs::new())
        },
    );
}

/// The exported Erf-GELU variants all become `core.gelu`.
#[test]
fn erf_gelu_variants_are_recognized() {
    let rules = pick(fuse::pattern_rules().unwrap(), &["erf-gelu"]);
    for variant in 0..4 {
        check(
            &rules,
            "erf-gelu",
            &[3, 4],
            &[Opcode::Gelu],
            1e-6,
            |f, x| {
                let one = dense(f, &[], vec![1.0]);
                let half = dense(f, &[], vec![0.5]);
                let e = if variant % 2 == 0 {
                    // The f32-rounded literal an exporter writes, on purpose.
                    #[allow(clippy::approx_constant)]
                    let c = dense(f, &[], vec![1.4142135]);
                    op(f, Opcode::Div, &[x, c], Attrs::new())
                } else {
                    let c = dense(f, &[], vec![0.70710677]);
                    op(f, Opcode::Mul, &[c, x], Attrs::new())
                };
                let e = op(f, Opcode::Erf, &[e], Attrs::new());
                let p = op(f, Opcode::Add, &[one, e], Attrs::new());
                if variant < 2 {
                    let m = op(f, Opcode::Mul, &[x, p], Attrs::new());
                    op(f, Opcode::Mul, &[m, half], Attrs::new())
                } else {
                    let m = op(f, Opcode::Mul, &[x, half], Attrs::new());
                    op(f, Opcode::Mul, &[p, m], Attrs::new())
                }
            },
        );
    }
}

/// Layer-norm as the OCR recognition model exports it.
#[test]
fn layer_norm_in_primitives_is_recognized() {
    let rules = fuse::pattern_rules().unwrap();
    check(
        &rules,
        "layer-norm",
        &[2, 3, 8],
        &[Opcode::LayerNorm],
        1e-5,
        |f, x| {
            let axes = Attrs::new().with("axes", Attr::Ints(vec![-1]));
            let mu = op(f, Opcode::ReduceMean, &[x], axes.clone());
            let d = op(f, Opcode::Sub, &[x, mu], Attrs::new());
            let two = dense(f, &[], vec![2.0]);
            let p = op(f, Opcode::Pow, &[d, two], Attrs::new());
            let v = op(f, Opcode::ReduceMean, &[p], axes);
            let eps = dense(f, &[], vec![1e-5]);
            let ve = op(f, Opcode::Add, &[v, eps], Attrs::new());
            let s = op(f, Opcode::Sqrt, &[ve], Attrs::new());
            let n = op(f, Opcode::Div, &[d, s], Attrs::new());
            let g = dense(f, &[8], randoms(19, 8, 0.5));
            let b = dense(f, &[8], randoms(20, 8, -0.5));
            let m = op(f, Opcode::Mul, &[n, g], Attrs::new());
            op(f, Opcode::Add, &[m, b], Attrs::new())
        },
    );
}

#[test]
fn softmax_in_primitives_is_recognized() {
    let rules = fuse::pattern_rules().unwrap();
    check(
        &rules,
        "softmax",
        &[2, 6],
        &[Opcode::Softmax],
        1e-6,
        |f, x| {
            let axes = Attrs::new().with("axes", Attr::Ints(vec![1]));
            let mx = op(f, Opcode::ReduceMax, &[x], axes.clone());
            let z = op(f, Opcode::Sub, &[x, mx], Attrs::new());
            let e = op(f, Opcode::Exp, &[z], Attrs::new());
            let s = op(f, Opcode::ReduceSum, &[e], axes);
            op(f, Opcode::Div, &[e, s], Attrs::new())
        },
    );
}

#[test]
fn attention_with_scale_and_mask_fuses_exactly() {
    let rules = fuse::fusion_rules(8).unwrap();
    check(
        &rules,
        "attention",
        &[2, 4, 3],
        &[Opcode::Transpose, Opcode::Attention],
        0.0,
        |f, x| {
            let kt = op(
                f,
                Opcode::Transpose,
                &[x],
                Attrs::new().with("perm", Attr::Ints(vec![0, 2, 1])),
            );
            let s = op(f, Opcode::MatMul, &[x, kt], Attrs::new());
            let c = dense(f, &[], vec![1.7320508]);
            let s = op(f, Opcode::Div, &[s, c], Attrs::new());
            let mask = dense(f, &[4, 4], randoms(21, 16, -1.0));
            let s = op(f, Opcode::Add, &[mask, s], Attrs::new());
            let p = op(f, Opcode::Softmax, &[s], Attrs::new());
            op(f, Opcode::MatMul, &[p, x], Attrs::new())
        },
    );
}

/// Growth: a 40-block conv/bias/relu/residual chain saturates within 4
/// e-nodes per op under the whole fuse family.
#[test]
fn fuse_growth_is_bounded() {
    let mut f = Func::new("main");
    let mut x = f.add_param("x", f32t(&[1, 2, 3, 3]), Location::default());
    let w = dense(&mut f, &[2, 2, 1, 1], randoms(22, 4, -0.5));
    let b = dense(&mut f, &[2, 1, 1], randoms(23, 2, -0.5));
    for _ in 0..40 {
        let y = op(&mut f, Opcode::Conv2d, &[x, w], Attrs::new());
        let y = op(&mut f, Opcode::Add, &[y, b], Attrs::new());
        let y = op(&mut f, Opcode::Relu, &[y], Attrs::new());
        x = op(&mut f, Opcode::Add, &[y, x], Attrs::new());
    }
    f.set_return(vec![x]);
    let n = f.body.ops.len();
    let (g, stats) = optimize(&f, &fuse::rules().unwrap());
    assert_eq!(stats.stop_reason, "saturated");
    assert!(stats.nodes <= 4 * n, "{} nodes for {n} ops", stats.nodes);
    assert_eq!(
        opcodes(&g)
            .iter()
            .filter(|o| **o == Opcode::FusedConv2d)
            .count(),
        40
    );
    assert!(max_error(&f, &g, 1) < 1e-6);
}
