//! `core.winograd_conv2d`: 3x3, stride-1, dilation-1, ungrouped convolution
//! by Winograd's minimal filtering algorithm F(m x m, 3 x 3), m = 2 or 4
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks").
//!
//! The weight operand is already transformed, `U = G g G^T`, laid out
//! `[m+2, m+2, C_out, C_in]` (the `winograd` pass computes it at compile
//! time with [`transform_weight`]). The interpreter runs the real algorithm
//! in f32 arithmetic, every step rounded as a kernel would round it: per
//! output tile, the input transform `V = B^T d B` for each channel, the
//! elementwise products `U ⊙ V` summed over input channels, and the output
//! transform `Y = A^T M A`, plus the bias. So the interpreter measures the
//! rounding difference Winograd makes against `core.conv2d` (which
//! accumulates in f64 and rounds once): with inputs and weights of order 1,
//! about 1e-5 for F(2x2) and 1e-4 for F(4x4); the stated tolerance is 1e-3.
//!
//! Invariant: `infer` accepts only f32 operands, `tile` 2 or 4 and a weight
//! of shape `[tile+2, tile+2, C_out, C_in]`, so `eval` indexes within bounds.

use crate::ops::nn::{ints_attr, require_rank};
use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::{Scalar, TensorType};

/// The transform matrices of F(m x m, 3 x 3): (B^T, G, A^T), row-major.
struct Matrices {
    bt: &'static [&'static [f64]],
    g: &'static [[f64; 3]],
    at: &'static [&'static [f64]],
}

const F2: Matrices = Matrices {
    bt: &[
        &[1.0, 0.0, -1.0, 0.0],
        &[0.0, 1.0, 1.0, 0.0],
        &[0.0, -1.0, 1.0, 0.0],
        &[0.0, 1.0, 0.0, -1.0],
    ],
    g: &[
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ],
    at: &[&[1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, -1.0]],
};

const F4: Matrices = Matrices {
    bt: &[
        &[4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        &[0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        &[0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        &[0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ],
    g: &[
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ],
    at: &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        &[0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        &[0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ],
};

fn matrices(tile: usize) -> Result<&'static Matrices, String> {
    match tile {
        2 => Ok(&F2),
        4 => Ok(&F4),
        t => Err(format!("`tile` must be 2 or 4, found {t}")),
    }
}

/// The transformed weight `U[a][b][k][c] = (G g[k][c] G^T)[a][b]` of OIHW
/// 3x3 weights, computed in f64 and rounded once to f32.
pub fn transform_weight(w: &Tensor, tile: usize) -> Result<Tensor, String> {
    let m = matrices(tile)?;
    let &[k_out, c_in, 3, 3] = w.shape() else {
        return Err(format!(
            "weight shape must be [C_out, C_in, 3, 3], found {:?}",
            w.shape()
        ));
    };
    let a = tile + 2;
    let wv = w.to_f64();
    let mut u = vec![0.0; a * a * k_out * c_in];
    for k in 0..k_out {
        for c in 0..c_in {
            let g = &wv[(k * c_in + c) * 9..][..9];
            for i in 0..a {
                for j in 0..a {
                    let mut s = 0.0;
                    for p in 0..3 {
                        for q in 0..3 {
                            s += m.g[i][p] * g[p * 3 + q] * m.g[j][q];
                        }
                    }
                    u[((i * a + j) * k_out + k) * c_in + c] = s;
                }
            }
        }
    }
    let ty = TensorType::new(vec![a, a, k_out, c_in], Scalar::F32);
    Ok(Tensor::from_f64(ty, u))
}

pub fn infer_winograd_conv2d(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let (x, u) = (&cx.operands[0], &cx.operands[1]);
    require_rank(x, 4, "input")?;
    require_rank(u, 4, "weight")?;
    for (t, what) in [(x, "input"), (u, "weight")] {
        if t.elem.scalar() != Some(Scalar::F32) {
            return Err(format!("{what} must be f32, found {}", t.elem));
        }
    }
    let tile = cx.int("tile")?;
    let a = matrices(usize::try_from(tile).unwrap_or(0))?.bt.len();
    let p = ints_attr(cx.ints("pads"), "pads", 4, 0)?;
    if u.shape[0] != a || u.shape[1] != a {
        return Err(format!(
            "transformed weight must be [{a}, {a}, C_out, C_in] for tile {tile}, found {:?}",
            u.shape
        ));
    }
    let (c, k) = (x.shape[1], u.shape[2]);
    if u.shape[3] != c {
        return Err(format!(
            "weight expects {} input channels, input has {c}",
            u.shape[3]
        ));
    }
    if let Some(b) = cx.operand(2)
        && (b.elem != x.elem || b.shape != [k])
    {
        return Err(format!("bias must be tensor<{k}xf32>, found {b}"));
    }
    let out = |len: usize, p0: usize, p1: usize, dim: &str| {
        (len + p0 + p1)
            .checked_sub(2)
            .filter(|&o| o > 0)
            .ok_or_else(|| {
                format!(
                    "the 3x3 kernel is larger than the padded input ({}) along {dim}",
                    len + p0 + p1
                )
            })
    };
    let oh = out(x.shape[2], p[0], p[2], "H")?;
    let ow = out(x.shape[3], p[1], p[3], "W")?;
    Ok(vec![TensorType::new(
        vec![x.shape[0], k, oh, ow],
        Scalar::F32,
    )])
}

/// `out[i][j] = sum_k l[i][k] * r[k][j]` in f32, `l` being `n x len`,
/// `r` row-major `len x cols`.
fn matmul_f32(l: &[&[f64]], r: &[f32], cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; l.len() * cols];
    for (i, row) in l.iter().enumerate() {
        for j in 0..cols {
            let mut s = 0f32;
            for (k, &c) in row.iter().enumerate() {
                if c != 0.0 {
                    s += c as f32 * r[k * cols + j];
                }
            }
            out[i * cols + j] = s;
        }
    }
    out
}

/// `x^T` of a row-major `rows x cols` matrix.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; x.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = x[i * cols + j];
        }
    }
    t
}

/// `L X L^T` in f32 (`L` is `n x a`, `X` is `a x a`): `(L (L X)^T)^T`.
fn sandwich(l: &[&[f64]], x: &[f32], a: usize) -> Vec<f32> {
    let n = l.len();
    let lx = matmul_f32(l, x, a); // n x a
    let lxt = transpose(&lx, n, a); // a x n
    let y = matmul_f32(l, &lxt, n); // n x n: L X^T L^T, the transpose of the result
    transpose(&y, n, n)
}

pub fn eval_winograd_conv2d(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let (x, u) = (cx.inputs[0], cx.inputs[1]);
    let tile = cx.int("tile")? as usize;
    let m = matrices(tile)?;
    let p = ints_attr(cx.ints("pads"), "pads", 4, 0)?;
    let out_ty = cx.result_type().clone();
    let [n, k_out, oh, ow] = out_ty.shape[..] else {
        return Err("internal error: winograd result is not 4-D".into());
    };
    let (c_in, h, w) = (x.shape()[1], x.shape()[2], x.shape()[3]);
    let a = tile + 2;
    let xv: Vec<f32> = x.to_f64().into_iter().map(|v| v as f32).collect();
    let uv: Vec<f32> = u.to_f64().into_iter().map(|v| v as f32).collect();
    let bias: Option<Vec<f32>> = cx
        .input(2)
        .map(|b| b.to_f64().into_iter().map(|v| v as f32).collect());
    let (th, tw) = (oh.div_ceil(tile), ow.div_ceil(tile));
    let mut out = vec![0f32; n * k_out * oh * ow];
    let mut v = vec![0f32; c_in * a * a];
    let mut d = vec![0f32; a * a];
    for b in 0..n {
        for ty in 0..th {
            for tx in 0..tw {
                // Input transform of this tile, every channel: V = B^T d B.
                for c in 0..c_in {
                    for i in 0..a {
                        for j in 0..a {
                            let iy = (ty * tile + i) as i64 - p[0] as i64;
                            let ix = (tx * tile + j) as i64 - p[1] as i64;
                            let inside = (0..h as i64).contains(&iy) && (0..w as i64).contains(&ix);
                            d[i * a + j] = if inside {
                                xv[((b * c_in + c) * h + iy as usize) * w + ix as usize]
                            } else {
                                0.0
                            };
                        }
                    }
                    v[c * a * a..][..a * a].copy_from_slice(&sandwich(m.bt, &d, a));
                }
                for k in 0..k_out {
                    // M = sum over channels of U ⊙ V, accumulated in f32.
                    let mut acc = vec![0f32; a * a];
                    for c in 0..c_in {
                        for e in 0..a * a {
                            acc[e] += uv[(e * k_out + k) * c_in + c] * v[c * a * a + e];
                        }
                    }
                    // Output transform Y = A^T M A, cropped at the border.
                    let y = sandwich(m.at, &acc, a);
                    let bk = bias.as_ref().map_or(0.0, |bv| bv[k]);
                    for i in 0..tile {
                        for j in 0..tile {
                            let (oy, ox) = (ty * tile + i, tx * tile + j);
                            if oy < oh && ox < ow {
                                out[((b * k_out + k) * oh + oy) * ow + ox] = y[i * tile + j] + bk;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(vec![Tensor::from_f64(
        out_ty,
        out.into_iter().map(f64::from).collect(),
    )])
}

#[cfg(test)]
mod tests;
