//! stub: to be written

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_reshape(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_reshape(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_transpose(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_transpose(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_flatten(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn infer_concat(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_concat(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_slice(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_slice(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_pad(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_pad(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_gather(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_gather(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_expand(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_expand(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}
