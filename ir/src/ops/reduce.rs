//! stub: to be written

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_reduce(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_reduce(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}
