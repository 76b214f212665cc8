//! stub: to be written

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_same(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_identity(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_numeric_unary(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_unary(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_float_unary(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn infer_cast(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_cast(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_binary(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_binary(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_pow(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn infer_prelu(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn infer_compare(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn infer_where(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_where(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}
