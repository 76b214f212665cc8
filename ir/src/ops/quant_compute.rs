//! Integer compute ops of the `quant` dialect: `quant.conv2d`,
//! `quant.matmul`, `quant.gemm`, `quant.add`, `quant.avg_pool2d` and
//! `quant.global_avg_pool`.
//!
//! Each is the float op of the same name applied to quantized operands, with
//! a requantize epilogue to a declared quantized result type. Its meaning is
//! exactly what the Q/DQ graph it replaces computes — the QDQ form is the
//! specification of the integer computation:
//!
//! 1. every operand is dequantized as `quant.dequantize` does
//!    ([`dequantize_values`]), to its expressed float type;
//! 2. the float op's own `eval` hook runs on those values (so the rounding is
//!    the float op's, bit for bit);
//! 3. the optional epilogue clamps to `[clip_min, clip_max]` exactly as
//!    `core.clip` does (a fused relu is `clip_min = 0.0`);
//! 4. the result is quantized as `quant.quantize` does with `saturate =
//!    true` ([`quantize_values`]).
//!
//! So rewriting `quantize(op(dequantize(a), dequantize(b)))` into the integer
//! op is exact in the interpreter; a backend may compute it in integers
//! (int32 accumulation, fixed-point requantization) within its own stated
//! tolerance.
//!
//! Storage: integers; the products (`quant.conv2d`, `quant.matmul`,
//! `quant.gemm`) also take fp8 (`f8E4M3FN`, `f8E5M2`) operands and results
//! (fp8 PTQ, `aoc quantize --precision fp8`), with the same definition;
//! with fp8 operands their result may also be the float op's own type:
//! steps 1 to 3 only, no quantize (an fp8 layer whose output stays float).
//!
//! Invariant: `infer` runs the float op's `infer` on the dequantized operand
//! types, so every check the float op makes (shapes, attributes, bias size)
//! applies unchanged, and `eval` only ever sees operands `infer` accepted.

use crate::ops::elementwise::{fmax_nan, fmin_nan};
use crate::ops::quant::{check_quant_type, dequantize_values, quantize_values};
use crate::ops::{EvalCx, InferCx, Opcode};
use crate::tensor::{Tensor, round_to};
use crate::types::{QuantType, Scalar, TensorType};

/// The float op each integer op computes; the table routes only these ops
/// here, each through its own pair of hooks below.
macro_rules! int_hooks {
    ($($op:ident: $infer:ident, $eval:ident => $float:ident;)*) => {
        $(
            pub fn $infer(cx: &InferCx) -> Result<Vec<TensorType>, String> {
                infer_int(cx, Opcode::$float)
            }
            pub fn $eval(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
                eval_int(cx, Opcode::$float)
            }
        )*

        /// The float op an integer compute op is defined by (dequantize,
        /// this op, clamp, quantize); `None` for every other op.
        pub fn float_form(opcode: Opcode) -> Option<Opcode> {
            match opcode {
                $(Opcode::$op => Some(Opcode::$float),)*
                _ => None,
            }
        }
    };
}

int_hooks! {
    QuantConv2d: infer_conv2d, eval_conv2d => Conv2d;
    QuantMatMul: infer_matmul, eval_matmul => MatMul;
    QuantGemm: infer_gemm, eval_gemm => Gemm;
    QuantAdd: infer_add, eval_add => Add;
    QuantAvgPool2d: infer_avg_pool2d, eval_avg_pool2d => AvgPool2d;
    QuantGlobalAvgPool: infer_global_avg_pool, eval_global_avg_pool => GlobalAvgPool;
}

/// Whether `q`'s storage suits the integer op defined by `float_op`:
/// integers always, fp8 for the products.
fn storage_ok(q: &QuantType, float_op: Opcode) -> bool {
    let fp8 = matches!(q.storage, Scalar::F8E4M3FN | Scalar::F8E5M2);
    q.storage.is_int() || (fp8 && matches!(float_op, Opcode::Conv2d | Opcode::MatMul | Opcode::Gemm))
}

/// The float type an operand dequantizes to.
fn dequantized_type(cx: &InferCx, i: usize, float_op: Opcode) -> Result<TensorType, String> {
    let t = &cx.operands[i];
    let name = cx
        .opcode
        .info()
        .operands
        .get(i)
        .map_or("operand", |o| o.name);
    let q = t
        .elem
        .quant()
        .ok_or_else(|| format!("{name} must have a quantized element type, found {t}"))?;
    check_quant_type(q, t)?;
    if !storage_ok(q, float_op) {
        return Err(format!(
            "{name} must have integer (or, for products, fp8) storage, found {} in {t}",
            q.storage
        ));
    }
    Ok(TensorType::new(t.shape.clone(), q.expressed))
}

/// The epilogue's clamp bounds (absent bounds do not clamp).
fn clip_bounds(attrs: &crate::attr::Attrs) -> Result<(Option<f64>, Option<f64>), String> {
    let get = |name: &str| match attrs.get(name) {
        None => Ok(None),
        Some(crate::attr::Attr::Float(x)) if !x.is_nan() => Ok(Some(*x)),
        Some(crate::attr::Attr::Int(i)) => Ok(Some(*i as f64)),
        Some(a) => Err(format!("attribute `{name}` must be a number, found {a}")),
    };
    Ok((get("clip_min")?, get("clip_max")?))
}

fn infer_int(cx: &InferCx, float_op: Opcode) -> Result<Vec<TensorType>, String> {
    let floats = (0..cx.operands.len())
        .map(|i| dequantized_type(cx, i, float_op))
        .collect::<Result<Vec<_>, _>>()?;
    let fcx = InferCx {
        opcode: float_op,
        operands: &floats,
        attrs: cx.attrs,
        declared: None,
        epilogue: &[],
    };
    let (main, bias) = split_bias(float_op, &floats);
    let fcx = InferCx { operands: main, ..fcx };
    let mut out = (float_op.info().infer)(&fcx)?;
    let f = out
        .pop()
        .ok_or("internal error: the float op inferred no result (please report)")?;
    if let Some(b) = bias {
        let n = f.shape.last().copied();
        if b.shape.len() != 1 || Some(b.shape[0]) != n || b.elem != f.elem {
            return Err(format!(
                "bias must be a vector of the product's last dimension ({} {}), found {b}",
                n.map_or("none".to_string(), |n| n.to_string()),
                f.elem
            ));
        }
    }
    clip_bounds(cx.attrs)?;
    let r = cx.declared_one()?;
    if r.elem.quant().is_none() {
        let fp8 = cx.operands.first().and_then(|t| t.elem.quant()).is_some_and(|q| matches!(q.storage, Scalar::F8E4M3FN | Scalar::F8E5M2));
        if !fp8 || !matches!(float_op, Opcode::Conv2d | Opcode::MatMul | Opcode::Gemm) {
            return Err(format!("result must have a quantized element type (a float one only for products of fp8 operands), found {r}"));
        }
        if *r != f {
            return Err(format!("a float result must be {f} (the float op's), found {r}"));
        }
        return Ok(vec![r.clone()]);
    }
    let q = r
        .elem
        .quant()
        .ok_or_else(|| format!("result must have a quantized element type, found {r}"))?;
    check_quant_type(q, r)?;
    if !storage_ok(q, float_op) {
        return Err(format!(
            "result must have integer (or, for products, fp8) storage, found {} in {r}",
            q.storage
        ));
    }
    if r.shape != f.shape {
        return Err(format!(
            "result shape {:?} must be {:?} (the float op's)",
            r.shape, f.shape
        ));
    }
    if f.elem.scalar() != Some(q.expressed) {
        return Err(format!(
            "result's expressed type must be {} (the float op's), found {}",
            f.elem, q.expressed
        ));
    }
    Ok(vec![r.clone()])
}

/// A `quant.matmul`'s operands split into the matmul's two and its bias
/// (added after the product, broadcast along the last axis: the
/// `core.matmul` + `core.add` of a linear layer, whose integer form keeps
/// the bias in the accumulator as `quant.conv2d` and `quant.gemm` do).
/// Every other op has no separate bias.
fn split_bias<T>(float_op: Opcode, xs: &[T]) -> (&[T], Option<&T>) {
    match (float_op, xs) {
        (Opcode::MatMul, [_, _, b]) => (&xs[..2], Some(b)),
        _ => (xs, None),
    }
}

fn quant_of(t: &TensorType) -> Result<&QuantType, String> {
    t.elem
        .quant()
        .ok_or_else(|| format!("internal error: {t} is not quantized (please report)"))
}

fn eval_int(cx: &EvalCx, float_op: Opcode) -> Result<Vec<Tensor>, String> {
    let mut floats = Vec::with_capacity(cx.inputs.len());
    for x in cx.inputs {
        let q = quant_of(&x.ty)?;
        let ty = TensorType::new(x.shape().to_vec(), q.expressed);
        floats.push(Tensor::from_f64(ty, dequantize_values(x, q)));
    }
    let refs: Vec<&Tensor> = floats.iter().collect();
    let rty = cx.result_type().clone();
    let q = rty.elem.quant();
    let e = match q {
        Some(q) => q.expressed,
        None => rty.elem.storage(),
    };
    let fty = TensorType::new(rty.shape.clone(), e);
    let (main, bias) = split_bias(float_op, &refs);
    let fcx = EvalCx {
        opcode: float_op,
        inputs: main,
        attrs: cx.attrs,
        result_types: std::slice::from_ref(&fty),
        weights: cx.weights,
        epilogue: &[],
    };
    let mut y = (float_op.info().eval)(&fcx)?
        .pop()
        .ok_or("internal error: the float op produced no result (please report)")?;
    if let Some(b) = bias {
        // The bias as `core.add` adds it, in the product's float type.
        let add_attrs = crate::attr::Attrs::default();
        let inputs = [&y, *b];
        let acx = EvalCx {
            opcode: Opcode::Add,
            inputs: &inputs,
            attrs: &add_attrs,
            result_types: std::slice::from_ref(&fty),
            weights: cx.weights,
            epilogue: &[],
        };
        y = (Opcode::Add.info().eval)(&acx)?
            .pop()
            .ok_or("internal error: the bias add produced no result (please report)")?;
    }
    let (lo, hi) = clip_bounds(cx.attrs)?;
    // As core.clip: bounds rounded to the type, NaN-propagating max then min.
    let v: Vec<f64> = y
        .to_f64()
        .into_iter()
        .map(|mut v| {
            if let Some(lo) = lo {
                v = fmax_nan(v, round_to(e, lo));
            }
            if let Some(hi) = hi {
                v = fmin_nan(v, round_to(e, hi));
            }
            v
        })
        .collect();
    match q {
        Some(q) => {
            let data = quantize_values(&v, &rty.shape, q, true);
            Ok(vec![Tensor { ty: rty, data }])
        }
        // An fp8 product with a float result: no quantize.
        None => Ok(vec![Tensor::from_f64(rty, v)]),
    }
}

#[cfg(test)]
mod tests {
    use crate::attr::{Attr, Attrs};
    use crate::interp::{NoWeights, eval_op};
    use crate::ops::Opcode;
    use crate::tensor::{Data, Tensor};
    use crate::types::{ElemType, QuantParams, QuantType, Scalar, TensorType};
    use crate::verify::infer_op;

    fn qt(shape: &[usize], storage: Scalar, scale: f64, zp: i64) -> TensorType {
        let q = QuantType {
            storage,
            expressed: Scalar::F32,
            params: QuantParams::PerTensor {
                scale,
                zero_point: zp,
            },
        };
        TensorType::new(shape.to_vec(), ElemType::Quant(Box::new(q)))
    }

    fn q(ty: TensorType, v: Vec<i64>) -> Tensor {
        Tensor {
            ty,
            data: Data::I(v),
        }
    }

    #[test]
    fn add_dequantizes_adds_and_requantizes() {
        // a = (10 - 0) * 0.5 = 5, b = (4 - 2) * 0.25 = 0.5; 5.5 / 0.1 = 55 (+1 zp)
        let a = q(qt(&[2], Scalar::I8, 0.5, 0), vec![10, -3]);
        let b = q(qt(&[2], Scalar::I8, 0.25, 2), vec![4, 2]);
        let r = qt(&[2], Scalar::I8, 0.1, 1);
        let out = eval_op(
            Opcode::QuantAdd,
            &[&a, &b],
            &Attrs::new(),
            std::slice::from_ref(&r),
            &NoWeights,
        )
        .unwrap();
        // -1.5 + 0 = -1.5 -> -15 + 1 = -14
        assert_eq!(out[0].data, Data::I(vec![56, -14]));
        let relu = Attrs::new().with("clip_min", Attr::Float(0.0));
        let out = eval_op(Opcode::QuantAdd, &[&a, &b], &relu, &[r], &NoWeights).unwrap();
        assert_eq!(out[0].data, Data::I(vec![56, 1]));
    }

    #[test]
    fn conv2d_with_int32_bias_saturates() {
        // 1x1 conv, one channel: x = 2 * 1.0, w = 3 * 0.5, bias = 100 * 0.005
        // -> 2 * 1.5 + 0.5 = 3.5 -> / 0.01 = 350 -> saturates to 127.
        let x = q(qt(&[1, 1, 1, 1], Scalar::I8, 1.0, 0), vec![2]);
        let w = q(qt(&[1, 1, 1, 1], Scalar::I8, 0.5, 0), vec![3]);
        let b = q(qt(&[1], Scalar::I32, 0.005, 0), vec![100]);
        let r = qt(&[1, 1, 1, 1], Scalar::I8, 0.01, 0);
        let ty = infer_op(
            Opcode::QuantConv2d,
            &[x.ty.clone(), w.ty.clone(), b.ty.clone()],
            &conv_attrs(),
            Some(std::slice::from_ref(&r)),
        )
        .unwrap();
        assert_eq!(ty, vec![r.clone()]);
        let out = eval_op(
            Opcode::QuantConv2d,
            &[&x, &w, &b],
            &conv_attrs(),
            &[r],
            &NoWeights,
        )
        .unwrap();
        assert_eq!(out[0].data, Data::I(vec![127]));
    }

    #[test]
    fn matmul_adds_its_bias_after_the_product() {
        // [1, 2] x [2, 2]: x = (1, 2) * 0.5, w = [[2, 0], [1, -1]] * 0.25;
        // x·w = (0.5·0.5 + 1·0.25, -1·0.25) = (0.5, -0.25); bias
        // (10, -20) * 0.125 = (1.25, -2.5): (1.75, -2.75) / 0.25 = (7, -11).
        let x = q(qt(&[1, 2], Scalar::I8, 0.5, 0), vec![1, 2]);
        let w = q(qt(&[2, 2], Scalar::I8, 0.25, 0), vec![2, 0, 1, -1]);
        let b = q(qt(&[2], Scalar::I32, 0.125, 0), vec![10, -20]);
        let r = qt(&[1, 2], Scalar::I8, 0.25, 0);
        let ops = [x.ty.clone(), w.ty.clone(), b.ty.clone()];
        let ty = infer_op(Opcode::QuantMatMul, &ops, &Attrs::new(), Some(std::slice::from_ref(&r))).unwrap();
        assert_eq!(ty, vec![r.clone()]);
        let out = eval_op(Opcode::QuantMatMul, &[&x, &w, &b], &Attrs::new(), std::slice::from_ref(&r), &NoWeights).unwrap();
        assert_eq!(out[0].data, Data::I(vec![7, -11]));
        // Without the bias: (0.5, -0.25) / 0.25 = (2, -1).
        let out = eval_op(Opcode::QuantMatMul, &[&x, &w], &Attrs::new(), std::slice::from_ref(&r), &NoWeights).unwrap();
        assert_eq!(out[0].data, Data::I(vec![2, -1]));
        // A bias that is not a vector along the last axis is refused.
        for bad in [qt(&[1], Scalar::I32, 0.125, 0), qt(&[1, 2], Scalar::I32, 0.125, 0)] {
            let e = infer_op(Opcode::QuantMatMul, &[x.ty.clone(), w.ty.clone(), bad], &Attrs::new(), Some(std::slice::from_ref(&r)))
                .unwrap_err();
            assert!(e.to_string().contains("bias must be a vector"), "{e}");
        }
    }

    fn conv_attrs() -> Attrs {
        Opcode::QuantConv2d
            .info()
            .complete_attrs(Attrs::new())
            .unwrap()
    }

    #[test]
    fn infer_rejects_float_operands_and_wrong_result_shapes() {
        let x = qt(&[1, 1, 2, 2], Scalar::I8, 1.0, 0);
        let w = TensorType::new(vec![1, 1, 1, 1], Scalar::F32);
        let err = infer_op(
            Opcode::QuantConv2d,
            &[x.clone(), w],
            &conv_attrs(),
            Some(std::slice::from_ref(&x)),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "quant.conv2d: weight must have a quantized element type, found tensor<1x1x1x1xf32>"
        );
        let w = qt(&[1, 1, 1, 1], Scalar::I8, 1.0, 0);
        let r = qt(&[1, 1, 3, 3], Scalar::I8, 1.0, 0);
        let err = infer_op(Opcode::QuantConv2d, &[x, w], &conv_attrs(), Some(&[r])).unwrap_err();
        assert_eq!(
            err,
            "quant.conv2d: result shape [1, 1, 3, 3] must be [1, 1, 2, 2] (the float op's)"
        );
    }
}
