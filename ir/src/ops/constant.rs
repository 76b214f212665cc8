//! `const`: inline dense values, named weights, and in-memory values
//! computed by passes (folded weights).

use crate::attr::{ConstValue, DenseData};
use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_const(cx: &InferCx) -> Result<Vec<TensorType>, String> {
    let ty = cx.declared_one()?.clone();
    match cx.constant("value")? {
        ConstValue::Weight(_) => {}
        ConstValue::Tensor(t) => {
            if t.ty != ty || t.len() != ty.num_elements() {
                return Err(format!("the in-memory value is {}, but the constant declares {ty}", t.ty));
            }
        }
        ConstValue::Dense(d) => {
            let n = ty.num_elements();
            if d.len() != 1 && d.len() != n {
                return Err(format!("{ty} has {n} elements, but {} values are given", d.len()));
            }
            if let (DenseData::Floats(_), false) = (d, ty.elem.storage().is_float()) {
                return Err(format!("float values cannot initialize {ty}"));
            }
        }
    }
    Ok(vec![ty])
}

pub fn eval_const(cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    let ty = cx.result_type().clone();
    let n = ty.num_elements();
    let t = match cx.constant("value")? {
        ConstValue::Weight(w) => cx.weights.load(&w.file, &w.key, &ty)?,
        ConstValue::Tensor(t) => t.as_ref().clone(),
        ConstValue::Dense(DenseData::Floats(v)) => {
            Tensor::from_f64(ty, if v.len() == n { v.clone() } else { vec![v[0]; n] })
        }
        ConstValue::Dense(DenseData::Ints(v)) => {
            Tensor::from_i64(ty, if v.len() == n { v.clone() } else { vec![v[0]; n] })
        }
    };
    // A sparse constant written densely must have its pattern.
    crate::ops::sparse::check_pattern(&t)?;
    Ok(vec![t])
}
