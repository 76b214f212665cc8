//! `core.winograd_conv2d` against `core.conv2d`: exact on small integers
//! (every transform coefficient of F(2x2) is a power of two), within the
//! stated rounding on random values, for both tiles, with partial tiles at
//! the border, padding and bias.

use super::transform_weight;
use crate::attr::{Attr, Attrs};
use crate::interp::{NoWeights, eval_op};
use crate::ops::Opcode;
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};
use crate::verify::infer_op;

fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(shape.to_vec(), Scalar::F32)
}

fn tensor(shape: &[usize], f: impl Fn(usize) -> f64) -> Tensor {
    let ty = f32t(shape);
    let n = ty.num_elements();
    Tensor::from_f64(ty, (0..n).map(f).collect())
}

/// A deterministic pseudo-random value in [-1, 1).
fn noise(i: usize, seed: usize) -> f64 {
    let h = (i.wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) % 10007;
    h as f64 / 5003.5 - 1.0
}

/// Runs conv2d and winograd_conv2d on the same operands; returns both.
fn both(x: &Tensor, w: &Tensor, b: Option<&Tensor>, pads: &[i64], tile: i64) -> (Tensor, Tensor) {
    let conv_attrs = Opcode::Conv2d
        .info()
        .complete_attrs(Attrs::new().with("pads", Attr::Ints(pads.to_vec())))
        .unwrap();
    let mut ops = vec![x, w];
    ops.extend(b);
    let types: Vec<TensorType> = ops.iter().map(|t| t.ty.clone()).collect();
    let rt = infer_op(Opcode::Conv2d, &types, &conv_attrs, None).unwrap();
    let direct = eval_op(Opcode::Conv2d, &ops, &conv_attrs, &rt, &NoWeights)
        .unwrap()
        .remove(0);
    let u = transform_weight(w, tile as usize).unwrap();
    let wino_attrs = Attrs::new()
        .with("tile", Attr::Int(tile))
        .with("pads", Attr::Ints(pads.to_vec()));
    let mut wops = vec![x, &u];
    wops.extend(b);
    let wtypes: Vec<TensorType> = wops.iter().map(|t| t.ty.clone()).collect();
    let wt = infer_op(Opcode::WinogradConv2d, &wtypes, &wino_attrs, None).unwrap();
    assert_eq!(wt, rt);
    let wino = eval_op(Opcode::WinogradConv2d, &wops, &wino_attrs, &wt, &NoWeights)
        .unwrap()
        .remove(0);
    (direct, wino)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (0..a.len())
        .map(|i| (a.get_f64(i) - b.get_f64(i)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn ones_give_nine_per_full_window() {
    let x = tensor(&[1, 1, 4, 4], |_| 1.0);
    let w = tensor(&[1, 1, 3, 3], |_| 1.0);
    for tile in [2, 4] {
        let (_, y) = both(&x, &w, None, &[0, 0, 0, 0], tile);
        assert_eq!(y.to_f64(), vec![9.0; 4]);
        // padded: corners see 4 inputs, edges 6, the middle 9
        let (_, y) = both(&x, &w, None, &[1, 1, 1, 1], tile);
        let v = y.to_f64();
        assert_eq!((v[0], v[1], v[5]), (4.0, 6.0, 9.0));
    }
}

#[test]
fn f2_is_exact_on_small_integers() {
    let x = tensor(&[2, 3, 7, 5], |i| ((i * 7) % 11) as f64 - 5.0);
    let w = tensor(&[4, 3, 3, 3], |i| ((i * 5) % 7) as f64 - 3.0);
    let b = tensor(&[4], |i| i as f64 - 1.5);
    let (direct, wino) = both(&x, &w, Some(&b), &[1, 1, 1, 1], 2);
    assert_eq!(direct, wino);
}

#[test]
fn random_values_agree_within_the_stated_rounding() {
    let x = tensor(&[1, 8, 9, 11], |i| noise(i, 1));
    let w = tensor(&[5, 8, 3, 3], |i| noise(i, 2));
    let b = tensor(&[5], |i| noise(i, 3));
    for (tile, pads, bound) in [
        (2, [1, 1, 1, 1], 1e-5),
        (4, [1, 1, 1, 1], 1e-4),
        (4, [0, 2, 1, 0], 1e-4),
    ] {
        let (direct, wino) = both(&x, &w, Some(&b), &pads, tile);
        let d = max_diff(&direct, &wino);
        // different from conv2d (f32 steps) yet close to it
        assert!(d > 0.0 && d < bound, "tile {tile}: {d}");
    }
}

#[test]
fn infer_checks_tile_weight_and_bias() {
    let x = f32t(&[1, 2, 5, 5]);
    let attrs = |tile| {
        Attrs::new()
            .with("tile", Attr::Int(tile))
            .with("pads", Attr::Ints(vec![0; 4]))
    };
    let e = infer_op(
        Opcode::WinogradConv2d,
        &[x.clone(), f32t(&[4, 4, 3, 2])],
        &attrs(3),
        None,
    )
    .unwrap_err();
    assert_eq!(e, "core.winograd_conv2d: `tile` must be 2 or 4, found 3");
    let e = infer_op(
        Opcode::WinogradConv2d,
        &[x.clone(), f32t(&[4, 4, 3, 2])],
        &attrs(4),
        None,
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.winograd_conv2d: transformed weight must be [6, 6, C_out, C_in] for tile 4, found [4, 4, 3, 2]"
    );
    let e = infer_op(
        Opcode::WinogradConv2d,
        &[x.clone(), f32t(&[4, 4, 3, 2]), f32t(&[2])],
        &attrs(2),
        None,
    )
    .unwrap_err();
    assert_eq!(
        e,
        "core.winograd_conv2d: bias must be tensor<3xf32>, found tensor<2xf32>"
    );
    let ok = infer_op(
        Opcode::WinogradConv2d,
        &[x, f32t(&[4, 4, 3, 2])],
        &attrs(2),
        None,
    )
    .unwrap();
    assert_eq!(ok, vec![f32t(&[1, 3, 3, 3])]);
}
