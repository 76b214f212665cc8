//! QuantizeLinear / DequantizeLinear -> the quant dialect.
//!
//! Scales and zero points must be constants: they become the parameters of
//! a `!quant.uniform` element type (per tensor when the scale has one
//! element, else per axis). QuantizeLinear is `quant.quantize` to that type.
//! DequantizeLinear of a constant (a quantized weight) retypes the constant
//! itself to the quantized type and dequantizes it, so the int8 weight
//! stays visible to later passes; of a value already of the matching
//! quantized type it is `quant.dequantize`; of a plain integer value (a
//! graph input) it is the exact decomposition `(cast(x) - zp) * scale`.
//! Blocked quantization (`block_size > 0`) is unsupported.

use super::context::{Cx, Node, R, V};
use aoc_ir::attr::{Attr, Attrs};
use aoc_ir::ops::normalize_axis;
use aoc_ir::{ElemType, Opcode, QuantParams, QuantType, Scalar, Tensor, TensorType};

/// The quantized element type a Q/DQ node describes for a value of shape
/// `shape`, stored as `storage` and expressed as `expressed`.
fn quant_type(
    cx: &Cx,
    n: &Node,
    shape: &[usize],
    storage: Scalar,
    expressed: Scalar,
) -> R<QuantType> {
    if n.int("block_size", 0) != 0 {
        return Err(cx.bad("blocked quantization (block_size > 0) is unsupported"));
    }
    let scale = cx.const_input(n, 1, "scale")?;
    let zp = match n.input(2) {
        None => None,
        Some(_) => Some(cx.const_input(n, 2, "zero_point")?),
    };
    if let Some(z) = zp
        && z.len() != scale.len()
    {
        return Err(cx.bad(format!(
            "scale has {} elements, zero_point {}",
            scale.len(),
            z.len()
        )));
    }
    // fp8 zero points are float zeros; integer ones are the integers.
    let zps: Vec<i64> = match zp {
        Some(z) => z.to_i64(),
        None => vec![0; scale.len()],
    };
    let params = if scale.len() == 1 {
        QuantParams::PerTensor {
            scale: scale.get_f64(0),
            zero_point: zps[0],
        }
    } else {
        if scale.ty.rank() != 1 {
            return Err(cx.bad(format!("scale must be a scalar or 1-D, found {}", scale.ty)));
        }
        let axis = normalize_axis(n.int("axis", 1), shape.len()).map_err(|m| cx.bad(m))?;
        if shape[axis] != scale.len() {
            return Err(cx.bad(format!(
                "scale has {} elements, but axis {axis} has size {}",
                scale.len(),
                shape[axis]
            )));
        }
        QuantParams::PerAxis {
            axis,
            scales: scale.to_f64(),
            zero_points: zps,
        }
    };
    Ok(QuantType {
        storage,
        expressed,
        params,
    })
}

pub fn quantize_linear(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let xt = cx.ty(&x);
    let expressed = xt
        .elem
        .scalar()
        .filter(|s| s.is_float())
        .ok_or_else(|| cx.bad(format!("input must be a float tensor, found {xt}")))?;
    let storage = match n.input(2) {
        Some(z) => cx.ty(z).elem.storage(),
        None => match n.int("output_dtype", 0) {
            0 => Scalar::U8,
            t => super::tensors::scalar_of(t as i32, "output_dtype").map_err(|m| cx.bad(m))?,
        },
    };
    let qt = quant_type(cx, n, &xt.shape, storage, expressed)?;
    let declared = TensorType::new(xt.shape.clone(), ElemType::Quant(Box::new(qt)));
    let attrs = Attrs::new().with("saturate", Attr::Bool(n.int("saturate", 1) != 0));
    Ok(vec![
        cx.op(Opcode::Quantize, &[x], attrs, Some(vec![declared]))?
            .remove(0),
    ])
}

pub fn dequantize_linear(cx: &mut Cx, n: &Node) -> R<Vec<V>> {
    let x = cx.need(n, 0)?.clone();
    let xt = cx.ty(&x);
    let scale_ty = cx.ty(cx.need(n, 1)?);
    let expressed = match n.int("output_dtype", 0) {
        0 => scale_ty
            .elem
            .scalar()
            .filter(|s| s.is_float())
            .ok_or_else(|| cx.bad("scale must be a float tensor"))?,
        t => super::tensors::scalar_of(t as i32, "output_dtype").map_err(|m| cx.bad(m))?,
    };
    let storage = xt.elem.storage();
    if storage == Scalar::I1
        || (storage.is_float() && !matches!(storage, Scalar::F8E4M3FN | Scalar::F8E5M2))
    {
        return Err(cx.bad(format!(
            "input must be an integer or fp8 tensor, found {xt}"
        )));
    }
    let qt = quant_type(cx, n, &xt.shape, storage, expressed)?;
    let qelem = ElemType::Quant(Box::new(qt.clone()));
    match &x {
        V::C(t) => {
            // A quantized weight: the constant itself takes the quantized type.
            let q = std::rc::Rc::new(Tensor {
                ty: t.ty.with_elem(qelem),
                data: t.data.clone(),
            });
            if let Some(name) = cx.const_name(t) {
                cx.name_const(&q, &name);
            }
            Ok(vec![cx.op1(
                Opcode::Dequantize,
                &[V::C(q)],
                Attrs::new(),
            )?])
        }
        V::R(_) if xt.elem == qelem => Ok(vec![cx.op1(Opcode::Dequantize, &[x], Attrs::new())?]),
        V::R(_) if xt.elem.quant().is_some() => Err(cx.bad(format!(
            "the input is {xt}, whose quantization parameters differ from this node's ({qelem})"
        ))),
        V::R(_) => {
            // A plain integer value: (cast(x) - zero_point) * scale, exactly as
            // ONNX defines it.
            let rank = xt.rank();
            let (shape, scales, zps): (Vec<usize>, Vec<f64>, Vec<i64>) = match &qt.params {
                QuantParams::PerTensor { scale, zero_point } => {
                    (vec![], vec![*scale], vec![*zero_point])
                }
                QuantParams::PerAxis {
                    axis,
                    scales,
                    zero_points,
                } => {
                    let mut s = vec![1; rank];
                    s[*axis] = scales.len();
                    (s, scales.clone(), zero_points.clone())
                }
            };
            let ty = TensorType::new(shape, expressed);
            let f = cx.op1(
                Opcode::Cast,
                &[x],
                Attrs::new().with("to", Attr::Type(expressed)),
            )?;
            let centered = if zps.iter().any(|&z| z != 0) {
                let z = V::konst(Tensor::from_i64(ty.clone(), zps));
                cx.op1(Opcode::Sub, &[f, z], Attrs::new())?
            } else {
                f
            };
            let s = V::konst(Tensor::from_f64(ty, scales));
            Ok(vec![cx.op1(Opcode::Mul, &[centered, s], Attrs::new())?])
        }
    }
}
