//! stub: to be written

use crate::ops::{EvalCx, InferCx};
use crate::tensor::Tensor;
use crate::types::TensorType;

pub fn infer_conv2d(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_conv2d(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_conv_transpose2d(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_conv_transpose2d(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_matmul(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_matmul(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_gemm(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_gemm(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_batch_norm(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_batch_norm(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_layer_norm(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_layer_norm(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_softmax(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_softmax(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_pool2d(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_pool2d(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}

pub fn infer_global_pool(_cx: &InferCx) -> Result<Vec<TensorType>, String> {
    Err("not implemented".into())
}

pub fn eval_global_pool(_cx: &EvalCx) -> Result<Vec<Tensor>, String> {
    Err("not implemented".into())
}
