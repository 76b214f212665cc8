//! Activations, predicates and normalizations ONNX defines that the op table
//! has no op for, imported as compositions of ops it has (the ONNX function
//! body, or an equal form that stays finite where the body overflows). Both
//! backends then run them as ordinary pointwise kernels and reductions.
//!
//! - `Softplus`: `relu(x) + log(1 + exp(−|x|))`; the body's
//!   `log(exp(x) + 1)` is inf above 88.
//! - `Softsign`: `x / (1 + |x|)`.
//! - `Elu`, `Celu`, `Selu`: `relu(x) + α·(exp(min(x, 0)/s) − 1)` with
//!   `s = α` for `Celu`, else 1; `Selu` times `γ`.
//! - `ThresholdedRelu`: `where(x > α, x, 0)`.
//! - `Mish`: `x · tanh(softplus(x))`; `Swish`: `x · sigmoid(α·x)`.
//! - `Shrink`: `where(x < −λ, x + bias, where(x > λ, x − bias, 0))`.
//! - `Sign`: `where(x > 0, 1, where(x < 0, −1, x))`: zero stays zero and
//!   NaN stays NaN.
//! - `IsNaN`: `x ≠ x`; `IsInf`: `x == ±inf`, for the signs it detects.
//! - `LpNormalization`: `x / ‖x‖_p` along the axis (p 1 or 2); where the
//!   norm is zero, by 1 (zeros, as ONNX Runtime gives).
//! - `MeanVarianceNormalization`: `(x − E[x]) / (√E[(x − E[x])²] + 1e-9)`
//!   over the axes (its body's `E[x²] − E[x]²` can round below zero).
//! - `RMSNormalization`: `x / √(E[x²] + ε) · scale` over the axes from
//!   `axis` on.
//! - `Trilu`: `where(mask, x, 0)` with a constant triangle for constant `k`.
//! - `Tile`: reshape to `[1, d0, 1, d1, …]`, expand to `[r0, d0, r1, d1,
//!   …]`, reshape to `[r0·d0, r1·d1, …]`.
//! - `Hardmax`: 1 at the first maximum along the axis: the least position
//!   (a constant ramp along the axis) where `x` equals its maximum, then
//!   `ramp == that position`.

use super::context::{Cx, Node, R, V};
use super::elementwise::{bool_const, scalar_like};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{Opcode, Scalar, Tensor, TensorType};

impl Cx<'_> {
    /// `opcode(x, c)` with `c` a scalar of `x`'s element type.
    fn with_scalar(&mut self, opcode: Opcode, x: &V, c: f64) -> R<V> {
        let c = scalar_like(self, x, c);
        self.bin(opcode, x, &c)
    }
    fn float_input(&self, n: &Node) -> R<V> {
        let x = self.need(n, 0)?.clone();
        match self.ty(&x).elem.scalar() {
            Some(s) if s.is_float() => Ok(x),
            _ => Err(self.bad(format!("input must be a float tensor, found {}", self.ty(&x)))),
        }
    }
    fn softplus_of(&mut self, x: &V) -> R<V> {
        let pos = self.un(Opcode::Relu, x)?;
        let a = self.un(Opcode::Abs, x)?;
        let na = self.un(Opcode::Neg, &a)?;
        let e = self.un(Opcode::Exp, &na)?;
        let e1 = self.with_scalar(Opcode::Add, &e, 1.0)?;
        let l = self.un(Opcode::Log, &e1)?;
        self.bin(Opcode::Add, &pos, &l)
    }
    /// `relu(x) + alpha·(exp(min(x, 0)/scale) − 1)`.
    fn elu_of(&mut self, x: &V, alpha: f64, scale: f64) -> R<V> {
        let pos = self.un(Opcode::Relu, x)?;
        let mut neg = self.with_scalar(Opcode::Min, x, 0.0)?;
        if scale != 1.0 {
            neg = self.with_scalar(Opcode::Div, &neg, scale)?;
        }
        let e = self.un(Opcode::Exp, &neg)?;
        let em1 = self.with_scalar(Opcode::Sub, &e, 1.0)?;
        let tail = self.with_scalar(Opcode::Mul, &em1, alpha)?;
        self.bin(Opcode::Add, &pos, &tail)
    }
    fn axes_of(&self, axes: &[i64], rank: usize) -> R<Vec<usize>> {
        let mut v = axes
            .iter()
            .map(|&a| normalize_axis(a, rank))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| self.bad(m))?;
        v.sort();
        v.dedup();
        Ok(v)
    }
}

/// ONNX stores float attributes as f32: defaults are rounded the same way.
fn f32_attr(n: &Node, name: &str, default: f32) -> f64 {
    n.float(name, default as f64)
}

/// `Softplus`, `Softsign`, `Elu`, `Celu`, `Selu`, `ThresholdedRelu`,
/// `Mish`, `Swish`, `Shrink`.
pub fn activation(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.float_input(n)?;
    let y = match n.op_type {
        "Softplus" => cx.softplus_of(&x)?,
        "Softsign" => {
            let a = cx.un(Opcode::Abs, &x)?;
            let d = cx.with_scalar(Opcode::Add, &a, 1.0)?;
            cx.bin(Opcode::Div, &x, &d)?
        }
        "Elu" => cx.elu_of(&x, f32_attr(n, "alpha", 1.0), 1.0)?,
        "Celu" => {
            let alpha = f32_attr(n, "alpha", 1.0);
            if alpha == 0.0 {
                return Err(cx.bad("`alpha` must not be 0"));
            }
            cx.elu_of(&x, alpha, alpha)?
        }
        "Selu" => {
            let e = cx.elu_of(&x, f32_attr(n, "alpha", 1.673_263_2), 1.0)?;
            cx.with_scalar(Opcode::Mul, &e, f32_attr(n, "gamma", 1.050_701))?
        }
        "ThresholdedRelu" => {
            let alpha = scalar_like(cx, &x, f32_attr(n, "alpha", 1.0));
            let above = cx.bin(Opcode::Greater, &x, &alpha)?;
            let zero = scalar_like(cx, &x, 0.0);
            cx.select(&above, &x, &zero)?
        }
        "Mish" => {
            let sp = cx.softplus_of(&x)?;
            let t = cx.un(Opcode::Tanh, &sp)?;
            cx.bin(Opcode::Mul, &x, &t)?
        }
        "Swish" => {
            let alpha = f32_attr(n, "alpha", 1.0);
            let ax = if alpha == 1.0 { x.clone() } else { cx.with_scalar(Opcode::Mul, &x, alpha)? };
            let s = cx.un(Opcode::Sigmoid, &ax)?;
            cx.bin(Opcode::Mul, &x, &s)?
        }
        _ => {
            // Shrink
            let (bias, lambd) = (f32_attr(n, "bias", 0.0), f32_attr(n, "lambd", 0.5));
            let lo = scalar_like(cx, &x, -lambd);
            let hi = scalar_like(cx, &x, lambd);
            let below = cx.bin(Opcode::Less, &x, &lo)?;
            let above = cx.bin(Opcode::Greater, &x, &hi)?;
            let plus = cx.with_scalar(Opcode::Add, &x, bias)?;
            let minus = cx.with_scalar(Opcode::Sub, &x, bias)?;
            let zero = scalar_like(cx, &x, 0.0);
            let upper = cx.select(&above, &minus, &zero)?;
            cx.select(&below, &plus, &upper)?
        }
    };
    Ok(vec![y])
}

/// `Sign` of a float or integer tensor.
pub fn sign(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    if cx.ty(&x).elem.scalar().is_none_or(|s| s == Scalar::I1) {
        return Err(cx.bad(format!("input must be a number tensor, found {}", cx.ty(&x))));
    }
    let zero = scalar_like(cx, &x, 0.0);
    let pos = cx.bin(Opcode::Greater, &x, &zero)?;
    let neg = cx.bin(Opcode::Less, &x, &zero)?;
    let one = scalar_like(cx, &x, 1.0);
    let minus_one = scalar_like(cx, &x, -1.0);
    let rest = cx.select(&neg, &minus_one, &x)?;
    Ok(vec![cx.select(&pos, &one, &rest)?])
}

/// `IsNaN` and `IsInf` (bool results).
pub fn is_special(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.float_input(n)?;
    let y = if n.op_type == "IsNaN" {
        let eq = cx.bin(Opcode::Equal, &x, &x)?;
        cx.bin(Opcode::Equal, &eq, &bool_const(false))?
    } else {
        let (pos, neg) = (n.int("detect_positive", 1) != 0, n.int("detect_negative", 1) != 0);
        let inf = scalar_like(cx, &x, f64::INFINITY);
        match (pos, neg) {
            (true, true) => {
                let a = cx.un(Opcode::Abs, &x)?;
                cx.bin(Opcode::Equal, &a, &inf)?
            }
            (true, false) => cx.bin(Opcode::Equal, &x, &inf)?,
            (false, true) => {
                let ninf = scalar_like(cx, &x, f64::NEG_INFINITY);
                cx.bin(Opcode::Equal, &x, &ninf)?
            }
            // Detects nothing: NaN equals nothing, so every element is false.
            (false, false) => {
                let nan = scalar_like(cx, &x, f64::NAN);
                cx.bin(Opcode::Equal, &x, &nan)?
            }
        }
    };
    Ok(vec![y])
}

/// `LpNormalization`, `MeanVarianceNormalization`, `RMSNormalization`.
pub fn normalization(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.float_input(n)?;
    let rank = cx.shape(&x).len();
    let y = match n.op_type {
        "LpNormalization" => {
            let axes = cx.axes_of(&[n.int("axis", -1)], rank)?;
            let norm = match n.int("p", 2) {
                1 => {
                    let a = cx.un(Opcode::Abs, &x)?;
                    cx.reduce_keep(Opcode::ReduceSum, &a, &axes)?
                }
                2 => {
                    let sq = cx.bin(Opcode::Mul, &x, &x)?;
                    let s = cx.reduce_keep(Opcode::ReduceSum, &sq, &axes)?;
                    cx.un(Opcode::Sqrt, &s)?
                }
                p => return Err(cx.bad(format!("`p` must be 1 or 2, found {p}"))),
            };
            // A zero norm (every element zero) divides by 1: zeros, as
            // ONNX Runtime gives, not NaN.
            let zero = scalar_like(cx, &x, 0.0);
            let one = scalar_like(cx, &x, 1.0);
            let is_zero = cx.bin(Opcode::Equal, &norm, &zero)?;
            let den = cx.select(&is_zero, &one, &norm)?;
            cx.bin(Opcode::Div, &x, &den)?
        }
        "MeanVarianceNormalization" => {
            let axes = cx.axes_of(&n.ints("axes").unwrap_or_else(|| vec![0, 2, 3]), rank)?;
            // The variance as the mean square of the centered values: the
            // function body's E[x²] − E[x]² is the same number but can round
            // below zero (NaN after the root) where the spread is tiny.
            let mean = cx.reduce_keep(Opcode::ReduceMean, &x, &axes)?;
            let centered = cx.bin(Opcode::Sub, &x, &mean)?;
            let sq = cx.bin(Opcode::Mul, &centered, &centered)?;
            let var = cx.reduce_keep(Opcode::ReduceMean, &sq, &axes)?;
            let std = cx.un(Opcode::Sqrt, &var)?;
            let den = cx.with_scalar(Opcode::Add, &std, 1e-9)?;
            cx.bin(Opcode::Div, &centered, &den)?
        }
        _ => {
            // RMSNormalization
            let first = normalize_axis(n.int("axis", -1), rank).map_err(|m| cx.bad(m))?;
            let axes: Vec<usize> = (first..rank).collect();
            let sq = cx.bin(Opcode::Mul, &x, &x)?;
            let ms = cx.reduce_keep(Opcode::ReduceMean, &sq, &axes)?;
            let ms = cx.with_scalar(Opcode::Add, &ms, f32_attr(n, "epsilon", 1e-5))?;
            let rms = cx.un(Opcode::Sqrt, &ms)?;
            let y = cx.bin(Opcode::Div, &x, &rms)?;
            let scale = cx.need(n, 1)?.clone();
            cx.bin(Opcode::Mul, &y, &scale)?
        }
    };
    Ok(vec![y])
}

/// `Trilu` with a constant `k` (default 0).
pub fn trilu(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    if shape.len() < 2 {
        return Err(cx.bad(format!("input must have rank 2 or more, found {}", cx.ty(&x))));
    }
    let k = match cx.const_ints(n, 1, "k")? {
        None => 0,
        Some(k) if k.len() == 1 => k[0],
        Some(k) => return Err(cx.bad(format!("`k` must be a scalar, found {} values", k.len()))),
    };
    let upper = n.int("upper", 1) != 0;
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let keep: Vec<i64> = (0..rows as i64)
        .flat_map(|i| (0..cols as i64).map(move |j| if upper { j - i >= k } else { j - i <= k } as i64))
        .collect();
    let mask = V::konst(Tensor::from_i64(TensorType::new(vec![rows, cols], Scalar::I1), keep));
    let zero = scalar_like(cx, &x, 0.0);
    Ok(vec![cx.select(&mask, &x, &zero)?])
}

/// `Tile` with constant repeats.
pub fn tile(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let shape = cx.shape(&x);
    let repeats = cx.const_input(n, 1, "repeats")?.to_i64();
    if repeats.len() != shape.len() {
        return Err(cx.bad(format!("`repeats` has {} entries for an input of rank {}", repeats.len(), shape.len())));
    }
    if let Some(r) = repeats.iter().find(|&&r| r < 0) {
        return Err(cx.bad(format!("`repeats` must not be negative, found {r}")));
    }
    if repeats.iter().all(|&r| r == 1) {
        return Ok(vec![x]);
    }
    let spread: Vec<usize> = shape.iter().flat_map(|&d| [1, d]).collect();
    let wide: Vec<i64> = shape.iter().zip(&repeats).flat_map(|(&d, &r)| [r, d as i64]).collect();
    let out: Vec<usize> = shape.iter().zip(&repeats).map(|(&d, &r)| d * r as usize).collect();
    let s = cx.reshape(&x, &spread)?;
    let e = cx.op1(Opcode::Expand, &[s], Attrs::new().with("shape", Attr::Ints(wide)))?;
    Ok(vec![cx.reshape(&e, &out)?])
}

/// `Hardmax` (opset 13: along `axis`, default −1; before, over the
/// flattened trailing axes from `axis`, default 1).
pub fn hardmax(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.float_input(n)?;
    let shape = cx.shape(&x);
    let rank = shape.len();
    let (x, axis) = if cx.opset >= 13 {
        let axis = normalize_axis(n.int("axis", -1), rank.max(1)).map_err(|m| cx.bad(m))?;
        (x, axis)
    } else {
        let axis = normalize_axis(n.int("axis", 1), rank.max(1)).map_err(|m| cx.bad(m))?;
        let rows: usize = shape[..axis].iter().product();
        let cols: usize = shape[axis..].iter().product();
        (cx.reshape(&x, &[rows, cols])?, 1)
    };
    let xs = cx.shape(&x);
    let mut ramp_shape = vec![1; xs.len()];
    ramp_shape[axis] = xs[axis];
    let ramp = V::konst(Tensor::from_f64(
        TensorType::new(ramp_shape, cx.ty(&x).elem),
        (0..xs[axis]).map(|i| i as f64).collect(),
    ));
    let top = cx.reduce_keep(Opcode::ReduceMax, &x, &[axis])?;
    let at_top = cx.bin(Opcode::Equal, &x, &top)?;
    let inf = scalar_like(cx, &x, f64::INFINITY);
    let cand = cx.select(&at_top, &ramp, &inf)?;
    let first = cx.reduce_keep(Opcode::ReduceMin, &cand, &[axis])?;
    let hit = cx.bin(Opcode::Equal, &ramp, &first)?;
    let (one, zero) = (scalar_like(cx, &x, 1.0), scalar_like(cx, &x, 0.0));
    let y = cx.select(&hit, &one, &zero)?;
    Ok(vec![if xs == shape { y } else { cx.reshape(&y, &shape)? }])
}
