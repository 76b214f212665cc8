//! Op kinds: what the passes and backends need to know of an op, declared
//! in its op-table entry (`kind: ...`).
//!
//! Passes match on [`OpKind`], exhaustively and without `_ =>` arms, never on
//! a list of opcodes: adding an op of an existing kind then touches only its
//! table entry (and its kernels), and adding a kind makes `cargo check` list
//! every pass that must decide what to do with it.
//!
//! [`Unary`] and [`Binary`] are the scalar functions of pointwise code, shared
//! by the interpreter ([`Unary::eval`]) and by the backend-neutral kernel
//! description in `aoc-passes` (`kernel_expr`), which both backends compile:
//! a new variant makes the compiler point at its scalar function and at each
//! backend's pointwise emitter. Ops that compose several of them, or take
//! parameters (GELU, clip, leaky relu, ...), are [`Activation`]s; the
//! lowering expands those into `Unary`/`Binary` steps.

use crate::types::TensorType;

/// One-operand scalar functions of pointwise code.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Unary {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `1 / x`
    Reciprocal,
    Erf,
    Tanh,
    /// `1 / (1 + exp(-x))`
    Sigmoid,
    Floor,
    Ceil,
    /// Toward zero.
    Trunc,
    /// To nearest, ties to even.
    RoundEven,
    /// `max(x, 0)`, NaN kept.
    Relu,
    Sin,
    Cos,
}

/// Two-operand scalar functions of pointwise code (numpy broadcasting at the
/// op level).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    /// NaN-propagating maximum.
    Max,
    /// NaN-propagating minimum.
    Min,
    Pow,
    /// `a == b` (1 or 0)
    Equal,
    /// `a < b`
    Less,
    /// `a > b`
    Greater,
}

/// Pointwise ops defined as a short composition of [`Unary`]/[`Binary`]
/// steps, or with parameters taken from attributes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Activation {
    Gelu,
    Silu,
    HardSigmoid,
    HardSwish,
    LeakyRelu,
    Clip,
    /// Two operands: `x` where `x >= 0`, else `slope * x`.
    Prelu,
}

/// Pointwise ops that are neither a scalar function nor an activation.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Pointwise {
    Cast,
    /// `cond ? a : b`
    Where,
    Quantize,
    Dequantize,
    Requantize,
    /// Inference batch normalization: a per-channel scale and shift.
    BatchNorm,
    /// `quant.add`: dequantize, add, requantize.
    QuantAdd,
    /// `core.fused_pointwise`: a chain of pointwise ops.
    Fused,
    /// `sparse.compress`: keeps the `n` largest of every `m` weights along
    /// the reduction axis (a compile-time step on constant weights).
    SparseCompress,
}

/// Row-wise normalizations over the last axis.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Norm {
    LayerNorm,
    Softmax,
    LogSoftmax,
}

/// Whether a compute op is the plain float op, the float op with a fused
/// pointwise epilogue, the integer form with a requantize epilogue, or the
/// float op on an N:M sparse weight (`#sparse.nm<n, m>`, operand 1).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Form {
    Float,
    Fused,
    Quant,
    Sparse,
}

/// Convolution algorithms.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Conv {
    Direct,
    Transposed,
    /// Winograd F(m x m, 3 x 3) on compile-time transformed weights.
    Winograd,
}

/// Sliding-window and global pools.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Pool {
    Max,
    Avg,
    GlobalAvg,
    GlobalMax,
}

/// Reductions over attribute-given axes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

/// Ops that move or select elements without computing new values (the
/// table's `DataMovement` trait; a test keeps the two in agreement).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Movement {
    Identity,
    /// Reshape or flatten: the same row-major elements.
    Reshape,
    Transpose,
    Concat,
    Slice,
    Pad,
    Gather,
    Expand,
}

/// What kind of computation an op is.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    /// A constant payload.
    Constant,
    Unary(Unary),
    Binary(Binary),
    Activation(Activation),
    Pointwise(Pointwise),
    Norm(Norm),
    /// A convolution; weight operand 1 in OIHW.
    Conv(Conv, Form),
    /// `matmul`: batched products contracting the last axis of operand 0.
    MatMul(Form),
    /// `gemm`: 2-D products with `trans_a`/`trans_b`/`alpha`/`beta`.
    Gemm(Form),
    /// Fused scaled dot-product attention.
    Attention,
    Pool(Pool, Form),
    Reduce(Reduce),
    Movement(Movement),
    /// Interpolating resize.
    Resize,
    /// Sampling at positions computed at run time (`core.grid_sample`).
    GridSample,
    /// A recurrent layer over a sequence (`ops/recurrent.rs`); the
    /// lowering expands it into matrix products and pointwise steps.
    Recurrent(Cell),
    /// Control flow: an op holding regions of ordinary ops
    /// (`ops/control.rs`), run by choosing or repeating a region.
    Control(Control),
}

/// The control-flow ops (`ops/control.rs`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Control {
    /// Runs one of two regions (ONNX `If`, MLIR `scf.if`).
    If,
    /// Runs a region while a trip count and a condition allow (ONNX `Loop`,
    /// MLIR `scf.while`).
    Loop,
}

/// The cells of recurrent layers.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Cell {
    Rnn,
    Gru,
    Lstm,
}

/// The scalar function or activation of a one- or two-operand pointwise op:
/// what the interpreter's elementwise hooks and the lowering's pointwise
/// emitter compute.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ScalarOp {
    Unary(Unary),
    Binary(Binary),
    Activation(Activation),
}

/// What the cost model needs of an op: operation counts from its types.
pub struct OpCost<'a> {
    pub kind: OpKind,
    /// `trans_a` of a gemm (the reduction axis of operand 0).
    pub trans_a: bool,
    pub operands: &'a [&'a TensorType],
    pub result: &'a TensorType,
}

impl OpKind {
    /// The op's scalar function or activation; `None` for every other kind.
    pub fn scalar_op(self) -> Option<ScalarOp> {
        match self {
            OpKind::Unary(u) => Some(ScalarOp::Unary(u)),
            OpKind::Binary(b) => Some(ScalarOp::Binary(b)),
            OpKind::Activation(a) => Some(ScalarOp::Activation(a)),
            OpKind::Constant
            | OpKind::Pointwise(_)
            | OpKind::Norm(_)
            | OpKind::Conv(..)
            | OpKind::MatMul(_)
            | OpKind::Gemm(_)
            | OpKind::Attention
            | OpKind::Pool(..)
            | OpKind::Reduce(_)
            | OpKind::Movement(_)
            | OpKind::Resize
            | OpKind::GridSample
            | OpKind::Recurrent(_)
            | OpKind::Control(_) => None,
        }
    }

    /// Operations (multiply-adds count two) the op performs, estimated from
    /// its types. Integer forms count a quarter: the int8 paths (VNNI on x86,
    /// int8 tensor cores) run at about four times the f32 rate. Winograd
    /// convolutions have their own formula in the cost model (it needs the
    /// tile attribute), as have `Movement` ops (none).
    pub fn flops(c: &OpCost) -> f64 {
        let out = c.result.num_elements() as f64;
        let last_dim = |i: usize| c.operands.get(i).and_then(|a| a.shape.last()).map_or(1.0, |&k| k as f64);
        let rate = |form: Form| if form == Form::Quant { 0.25 } else { 1.0 };
        // Reductions and normalizations read each input element a few
        // times; pointwise ops compute each result once.
        let streaming = || {
            let input = c.operands.iter().map(|t| t.num_elements() as f64).fold(0.0, f64::max);
            4.0 * out.max(input)
        };
        match c.kind {
            // out * reduction length (C_in/g * kh * kw) * 2
            OpKind::Conv(Conv::Direct | Conv::Transposed, form) => {
                let w = c.operands.get(1).map_or(1.0, |w| w.shape.iter().skip(1).product::<usize>() as f64);
                2.0 * out * w * rate(form)
            }
            OpKind::Conv(Conv::Winograd, _) => streaming(),
            // Two products of about the same size.
            OpKind::Attention => 4.0 * out * last_dim(0),
            OpKind::MatMul(form) => 2.0 * out * last_dim(0) * rate(form),
            OpKind::Gemm(form) => {
                let a = c.operands.first();
                let k = a.and_then(|a| if c.trans_a { a.shape.first() } else { a.shape.last() });
                2.0 * out * k.map_or(1.0, |&k| k as f64) * rate(form)
            }
            OpKind::Movement(_) => 0.0,
            // The bodies are costed on their own (an opaque op to the
            // e-graph); the op itself moves its results.
            OpKind::Control(_) => out,
            // y is [seq, dirs, batch, hidden]: per element, a product with
            // the gate rows of w (k = input) and of r (k = hidden).
            OpKind::Recurrent(cell) => {
                let hidden = c.result.shape.last().map_or(1.0, |&h| h as f64);
                2.0 * out * cell.gates() as f64 * (last_dim(0) + hidden)
            }
            OpKind::Constant
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Activation(_)
            | OpKind::Pointwise(_)
            | OpKind::Norm(_)
            | OpKind::Pool(..)
            | OpKind::Reduce(_)
            | OpKind::Resize
            | OpKind::GridSample => streaming(),
        }
    }

    /// Whether a per-output-channel scale and shift after this op folds into
    /// its weights (and bias): the float convolution (OIHW, channel axis 1 of
    /// the result) and float products whose right operand is a constant
    /// matrix (channel axis = the last). `None` when nothing folds.
    pub fn affine_fold(self) -> Option<AffineFold> {
        match self {
            OpKind::Conv(Conv::Direct, Form::Float) => Some(AffineFold::ConvOutput),
            OpKind::MatMul(Form::Float) => Some(AffineFold::MatMulColumns),
            OpKind::Gemm(Form::Float) => Some(AffineFold::GemmColumns),
            OpKind::Conv(Conv::Direct | Conv::Transposed | Conv::Winograd, _)
            | OpKind::MatMul(Form::Fused | Form::Quant | Form::Sparse)
            | OpKind::Gemm(Form::Fused | Form::Quant | Form::Sparse)
            | OpKind::Constant
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Activation(_)
            | OpKind::Pointwise(_)
            | OpKind::Norm(_)
            | OpKind::Attention
            | OpKind::Pool(..)
            | OpKind::Reduce(_)
            | OpKind::Movement(_)
            | OpKind::Resize
            | OpKind::GridSample
            | OpKind::Recurrent(_)
            | OpKind::Control(_) => None,
        }
    }
}

/// How a scale/shift folds into a producer (see
/// [`OpKind::affine_fold`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum AffineFold {
    /// Output channel `o` owns the contiguous weight block `o` (OIHW); the
    /// result's channel axis is 1.
    ConvOutput,
    /// Columns of the right operand; the result's channel axis is the last.
    MatMulColumns,
    GemmColumns,
}

impl Unary {
    /// The function on a float, computed in `f64` (the interpreter rounds
    /// the result to the element type).
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => 1.0 / x.sqrt(),
            Unary::Reciprocal => 1.0 / x,
            Unary::Erf => super::elementwise::erf(x),
            Unary::Tanh => x.tanh(),
            Unary::Sigmoid => sigmoid(x),
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
            Unary::Trunc => x.trunc(),
            Unary::RoundEven => x.round_ties_even(),
            Unary::Relu => super::elementwise::fmax_nan(x, 0.0),
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
        }
    }

    /// The function on an integer (before wrapping to the type); `None` for
    /// float-only functions, which the infer hooks keep away from integers.
    pub fn eval_int(self, x: i64) -> Option<i64> {
        match self {
            Unary::Neg => Some(x.wrapping_neg()),
            Unary::Abs => Some(x.wrapping_abs()),
            Unary::Relu => Some(x.max(0)),
            Unary::Floor | Unary::Ceil | Unary::Trunc | Unary::RoundEven => Some(x),
            Unary::Exp
            | Unary::Log
            | Unary::Sqrt
            | Unary::Rsqrt
            | Unary::Reciprocal
            | Unary::Erf
            | Unary::Tanh
            | Unary::Sigmoid
            | Unary::Sin
            | Unary::Cos => None,
        }
    }
}

impl Binary {
    /// The function on floats, computed in `f64`; comparisons give 1 or 0.
    pub fn eval(self, a: f64, b: f64) -> f64 {
        use super::elementwise::{fmax_nan, fmin_nan};
        match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div => a / b,
            Binary::Max => fmax_nan(a, b),
            Binary::Min => fmin_nan(a, b),
            Binary::Pow => a.powf(b),
            Binary::Equal => (a == b) as i64 as f64,
            Binary::Less => (a < b) as i64 as f64,
            Binary::Greater => (a > b) as i64 as f64,
        }
    }
}

/// Numerically stable logistic function (ONNX's reference splits on the sign
/// the same way).
pub fn sigmoid(x: f64) -> f64 {
    if x > 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Opcode, Trait};

    /// The `Movement` kind and the table's `DataMovement` trait say the same.
    #[test]
    fn movement_kind_is_the_data_movement_trait() {
        for &op in Opcode::ALL {
            let movement = matches!(op.kind(), OpKind::Movement(_));
            assert_eq!(movement, op.info().has_trait(Trait::DataMovement), "{}", op.name());
        }
    }

    /// Scalar functions and activations are elementwise ops with one or two
    /// operands, as the lowering's pointwise emitter assumes.
    #[test]
    fn pointwise_kinds_are_elementwise_with_their_arity() {
        for &op in Opcode::ALL {
            let arity = match op.kind() {
                OpKind::Unary(_) => 1,
                OpKind::Activation(Activation::Prelu) | OpKind::Binary(_) => 2,
                OpKind::Activation(_) => 1,
                _ => continue,
            };
            let info = op.info();
            assert!(info.has_trait(Trait::Elementwise), "{} must be Elementwise", op.name());
            assert_eq!(info.operand_range(), (arity, Some(arity)), "{}", op.name());
        }
    }

    /// The integer forms of the scalar functions agree with the float ones
    /// where both exist.
    #[test]
    fn unary_int_agrees_with_float() {
        let all = [
            Unary::Neg, Unary::Abs, Unary::Exp, Unary::Log, Unary::Sqrt, Unary::Rsqrt,
            Unary::Reciprocal, Unary::Erf, Unary::Tanh, Unary::Sigmoid, Unary::Floor,
            Unary::Ceil, Unary::Trunc, Unary::RoundEven, Unary::Relu, Unary::Sin, Unary::Cos,
        ];
        for u in all {
            for x in [-3i64, -1, 0, 2, 7] {
                if let Some(i) = u.eval_int(x) {
                    assert_eq!(i as f64, u.eval(x as f64), "{u:?}({x})");
                }
            }
        }
        assert!(Unary::Relu.eval(f64::NAN).is_nan(), "relu keeps NaN");
        assert!(Binary::Max.eval(f64::NAN, 1.0).is_nan() && Binary::Min.eval(1.0, f64::NAN).is_nan());
        assert_eq!(Unary::RoundEven.eval(2.5), 2.0);
        assert_eq!(Unary::Trunc.eval(-2.7), -2.0);
    }

    /// Integer forms count a quarter of the float form's operations.
    #[test]
    fn flops_by_kind() {
        let a = TensorType::new(vec![4, 8], crate::types::Scalar::F32);
        let b = TensorType::new(vec![8, 16], crate::types::Scalar::F32);
        let y = TensorType::new(vec![4, 16], crate::types::Scalar::F32);
        let ops = [&a, &b];
        let cost = |kind| OpKind::flops(&OpCost { kind, trans_a: false, operands: &ops, result: &y });
        assert_eq!(cost(OpKind::MatMul(Form::Float)), 2.0 * 64.0 * 8.0);
        assert_eq!(cost(OpKind::MatMul(Form::Quant)), 2.0 * 64.0 * 8.0 / 4.0);
        assert_eq!(cost(OpKind::Gemm(Form::Fused)), 2.0 * 64.0 * 8.0);
        assert_eq!(cost(OpKind::Movement(Movement::Transpose)), 0.0);
        assert_eq!(cost(OpKind::Unary(Unary::Exp)), 4.0 * 128.0);
    }
}
