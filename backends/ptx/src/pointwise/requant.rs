//! The quantize that ends a pointwise kernel, folded into one affine sum.
//!
//! The lowering writes `quant.quantize` as `clamp(round_even(x / s) + z)`
//! on f32 values, and a dequantize as `(q − z)·s`, so an 8-bit residual
//! add, a requantization or an input quantize ends in
//! `min(max(round_even(u) + z, lo), hi)` with `u` a sum of loaded values
//! times constants. Evaluated as written that is, per element, a correctly
//! rounded division (a reciprocal, its refinement and a slow-path check),
//! NaN-keeping clamps and a float-to-integer conversion: some 25
//! instructions on the GPU where the int8 epilogues are bound by their
//! arithmetic.
//!
//! [`fold`] recognizes that tail and the affine `u = Σ cᵢ·xᵢ + k` over the
//! kernel's loads (constant sums, differences, products and quotients, the
//! coefficients computed in f64); [`Gen::folded_result`](super::Gen) then
//! emits `u + z` as a chain of `fma` with f32 coefficients, one
//! `cvt.rni.s32.f32` (round to nearest even, saturating, NaN to 0) and an
//! integer clamp.
//!
//! Accuracy: the folded value differs from the step-by-step one by a few
//! f32 roundings of its terms (relative 2⁻²² or so), so the stored integer
//! is the reference's or one unit away, where the quotient lies that close
//! to a half: the issue's bound for a float requantization ("within one
//! unit of the output type"), as every integer kernel of the CPU and GPU
//! already allows. Special values store as the reference does: NaN as
//! `clamp(0)` (the store's conversion of NaN, and `cvt`'s), ±∞ and
//! overflows as the bound they saturate to.

use crate::expr::{Binary, Expr, PointwiseKernel, Unary};

use super::emit::Elem;

/// `Σ coef·operand + constant`, over operand indices.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Affine {
    pub terms: Vec<(usize, f64)>,
    pub constant: f64,
}

impl Affine {
    fn constant(c: f64) -> Affine {
        Affine { terms: Vec::new(), constant: c }
    }

    fn scaled(mut self, by: f64) -> Affine {
        for t in &mut self.terms {
            t.1 *= by;
        }
        self.constant *= by;
        self
    }

    fn plus(mut self, other: Affine) -> Affine {
        for (op, c) in other.terms {
            match self.terms.iter_mut().find(|t| t.0 == op) {
                Some(t) => t.1 += c,
                None => self.terms.push((op, c)),
            }
        }
        self.constant += other.constant;
        self
    }

    fn as_constant(&self) -> Option<f64> {
        self.terms.is_empty().then_some(self.constant)
    }
}

/// A quantize `clamp(round_even(u) + z, lo, hi)` whose value is used as
/// an integer (stored, or reloaded by a merged chain): `sum` is `u + z`,
/// `lo..=hi` the clamp within the integer's range. A NaN `u` gives 0 (the
/// store's conversion, the reload's select); `zero_outside` says that 0 is
/// not in `lo..=hi`, so the folded form must pick it itself.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct QuantTail {
    pub sum: Affine,
    pub lo: i32,
    pub hi: i32,
    pub zero_outside: bool,
}

/// The quantize that is `k`'s result, stored as `out` (8- or 16-bit
/// integers), with its affine sum; `None` where the result is not of that
/// form.
pub(super) fn fold(k: &PointwiseKernel, out: Elem) -> Option<QuantTail> {
    let range = match out {
        Elem::I8 => (-128, 127),
        Elem::U8 => (0, 255),
        Elem::I16 => (-32768, 32767),
        Elem::U16 => (0, 65535),
        _ => return None,
    };
    tail(k, k.result, range)
}

/// Expression `i` as the reload of a quantize (a merged chain's rebuild of
/// an integer intermediate, `translate::merge`'s `reload`: `q == q ?
/// clamp(trunc(q), rlo, rhi) : 0`) where `q` folds.
pub(super) fn reload(k: &PointwiseKernel, i: usize) -> Option<QuantTail> {
    let e = &k.exprs;
    let Expr::Select(c, m, zero) = e[i] else { return None };
    let (Expr::Binary(Binary::Equal, q, q2), Expr::Const(z)) = (e[c], e[zero]) else { return None };
    let Expr::Binary(Binary::Min, t, rhi) = e[m] else { return None };
    let Expr::Binary(Binary::Max, t, rlo) = e[t] else { return None };
    if q != q2 || z != 0.0 || e[t] != Expr::Unary(Unary::Trunc, q) {
        return None;
    }
    tail(k, q, (whole(e, rlo)?, whole(e, rhi)?))
}

/// Expression `e[i]` as a whole number of at most 2¹⁶.
fn whole(e: &[Expr], i: usize) -> Option<i32> {
    match e[i] {
        Expr::Const(c) if c.is_finite() && c.fract() == 0.0 && c.abs() <= 65536.0 => Some(c as i32),
        Expr::Int(c) if c.unsigned_abs() <= 65536 => Some(c as i32),
        _ => None,
    }
}

/// The quantize at expression `i`, its value then clamped to `range`.
fn tail(k: &PointwiseKernel, i: usize, (tlo, thi): (i32, i32)) -> Option<QuantTail> {
    let e = &k.exprs;
    let Expr::Binary(Binary::Min, t, hi) = e[i] else { return None };
    let Expr::Binary(Binary::Max, t, lo) = e[t] else { return None };
    let (lo, hi) = (whole(e, lo)?.max(tlo), whole(e, hi)?.min(thi));
    if lo > hi {
        return None;
    }
    let Expr::Binary(Binary::Add, a, b) = e[t] else { return None };
    let (r, z) = match (e[a], e[b]) {
        (Expr::Unary(Unary::RoundEven, u), _) => (u, whole(e, b)?),
        (_, Expr::Unary(Unary::RoundEven, u)) => (u, whole(e, a)?),
        _ => return None,
    };
    let sum = affine(e, r)?.plus(Affine::constant(z as f64));
    // A sum with no load is a constant the tail needs no help with; a
    // coefficient past f32 would store differently from the reference.
    let fits = |c: f64| c.is_finite() && (c as f32).is_finite();
    if sum.terms.is_empty() || !sum.terms.iter().all(|t| fits(t.1)) || !fits(sum.constant) {
        return None;
    }
    Some(QuantTail { sum, lo, hi, zero_outside: lo > 0 || hi < 0 })
}

/// Expression `i` as an affine sum of loads: one pass over the
/// expressions up to `i` (each refers to earlier ones), so a shared
/// subexpression is summed once however often it is used.
fn affine(e: &[Expr], i: usize) -> Option<Affine> {
    let mut sums: Vec<Option<Affine>> = Vec::with_capacity(i + 1);
    for x in &e[..=i] {
        let at = |j: usize| sums.get(j).cloned().flatten();
        let sum = match *x {
            Expr::Load(op) => Some(Affine { terms: vec![(op, 1.0)], constant: 0.0 }),
            Expr::Const(c) => Some(Affine::constant(c as f64)),
            Expr::Int(c) => Some(Affine::constant(c as f32 as f64)),
            Expr::Unary(Unary::Neg, a) => at(a).map(|s| s.scaled(-1.0)),
            Expr::Binary(Binary::Add, a, b) => at(a).zip(at(b)).map(|(x, y)| x.plus(y)),
            Expr::Binary(Binary::Sub, a, b) => at(a).zip(at(b)).map(|(x, y)| x.plus(y.scaled(-1.0))),
            Expr::Binary(Binary::Mul, a, b) => at(a).zip(at(b)).and_then(|(x, y)| match (x.as_constant(), y.as_constant()) {
                (_, Some(c)) => Some(x.scaled(c)),
                (Some(c), _) => Some(y.scaled(c)),
                _ => None,
            }),
            Expr::Binary(Binary::Div, a, b) => match at(b).and_then(|y| y.as_constant()) {
                Some(c) if c != 0.0 && c.is_finite() => at(a).map(|x| x.scaled(1.0 / c)),
                _ => None,
            },
            _ => None,
        };
        sums.push(sum);
    }
    sums.pop().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{Compute, Operand};
    use aoc_ir::types::Scalar;

    fn kernel(exprs: Vec<Expr>) -> PointwiseKernel {
        PointwiseKernel {
            name: "k".to_string(),
            dims: vec![4],
            operands: vec![
                Operand { dtype: Scalar::U8, strides: vec![1] },
                Operand { dtype: Scalar::I8, strides: vec![1] },
            ],
            result: exprs.len() - 1,
            exprs,
            out_dtype: Scalar::U8,
            compute: Compute::F32,
        }
    }

    /// `clamp(round((x − zx)·sx / s) + z)` appended after `exprs`, whose
    /// last expression is `x`'s dequantized value.
    fn quantize(mut e: Vec<Expr>, s: f32, z: f32, lo: f32, hi: f32) -> Vec<Expr> {
        let n = e.len();
        e.extend([
            Expr::Const(s),
            Expr::Binary(Binary::Div, n - 1, n),
            Expr::Unary(Unary::RoundEven, n + 1),
            Expr::Const(z),
            Expr::Binary(Binary::Add, n + 2, n + 3),
            Expr::Const(lo),
            Expr::Binary(Binary::Max, n + 4, n + 5),
            Expr::Const(hi),
            Expr::Binary(Binary::Min, n + 6, n + 7),
        ]);
        e
    }

    #[test]
    fn a_quantized_add_folds_to_one_sum() {
        // (a − 3)·0.5 + (b + 1)·0.25, quantized with scale 0.125, zero 10.
        let add = vec![
            Expr::Load(0),
            Expr::Const(3.0),
            Expr::Binary(Binary::Sub, 0, 1),
            Expr::Const(0.5),
            Expr::Binary(Binary::Mul, 2, 3),
            Expr::Load(1),
            Expr::Const(-1.0),
            Expr::Binary(Binary::Sub, 5, 6),
            Expr::Const(0.25),
            Expr::Binary(Binary::Mul, 7, 8),
            Expr::Binary(Binary::Add, 4, 9),
        ];
        let t = fold(&kernel(quantize(add, 0.125, 10.0, 0.0, 255.0)), Elem::U8).unwrap();
        assert_eq!(t.sum.terms, vec![(0, 4.0), (1, 2.0)]);
        assert_eq!(t.sum.constant, -12.0 + 2.0 + 10.0);
        assert_eq!((t.lo, t.hi, t.zero_outside), (0, 255, false));
        // The clamp narrows to the stored type.
        let t = fold(&kernel(quantize(vec![Expr::Load(0)], 2.0, 0.0, -1000.0, 1000.0)), Elem::I8).unwrap();
        assert_eq!((t.lo, t.hi, t.sum.terms.clone()), (-128, 127, vec![(0, 0.5)]));
    }

    #[test]
    fn shared_subexpressions_sum_once() {
        // x doubled 200 times: a walk of the tree would take 2^200 steps.
        let mut e = vec![Expr::Load(0)];
        for i in 0..200 {
            e.push(Expr::Binary(Binary::Add, i, i));
        }
        let last = e.len() - 1;
        let sum = affine(&e, last).unwrap();
        assert_eq!(sum.terms, vec![(0, 2f64.powi(200))]);
        // Past f32 the tail does not fold.
        assert!(fold(&kernel(quantize(e, 1.0, 0.0, 0.0, 255.0)), Elem::U8).is_none());
    }

    #[test]
    fn other_tails_do_not_fold() {
        let q = |e: Vec<Expr>| fold(&kernel(quantize(e, 0.5, 1.0, 0.0, 255.0)), Elem::U8);
        // A divisor loaded per element (a per-channel scale) is not a constant.
        assert!(q(vec![Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Div, 0, 1)]).is_none());
        // A product of two loads is not affine; an exp is not either.
        assert!(q(vec![Expr::Load(0), Expr::Load(1), Expr::Binary(Binary::Mul, 0, 1)]).is_none());
        assert!(q(vec![Expr::Load(0), Expr::Unary(Unary::Exp, 0)]).is_none());
        // A fractional zero point or clamp, a float store, no load at all.
        assert!(fold(&kernel(quantize(vec![Expr::Load(0)], 0.5, 0.5, 0.0, 255.0)), Elem::U8).is_none());
        assert!(fold(&kernel(quantize(vec![Expr::Load(0)], 0.5, 0.0, 0.5, 255.0)), Elem::U8).is_none());
        assert!(fold(&kernel(quantize(vec![Expr::Load(0)], 0.5, 0.0, 0.0, 255.0)), Elem::F32).is_none());
        assert!(q(vec![Expr::Const(3.0)]).is_none());
        // Division by zero stays as written.
        assert!(fold(&kernel(quantize(vec![Expr::Load(0)], 0.0, 0.0, 0.0, 255.0)), Elem::U8).is_none());
    }
}
