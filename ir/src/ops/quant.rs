//! stub: to be written

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_quantize(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_quantize(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_dequantize(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_dequantize(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_requantize(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_requantize(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}
