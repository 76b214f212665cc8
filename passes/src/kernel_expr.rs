//! The description of one generated pointwise kernel (shared by the x86
//! and PTX backends): an output shape, the
//! operands with their strides over that shape, and a straight-line
//! expression computing each output element. The lowering (`lower.rs`)
//! builds these from the IR's elementwise ops, fused epilogues,
//! batch-norm, quantize/dequantize and casts; `pointwise.rs` turns one into
//! Cranelift IR and machine code.
//!
//! Semantics (what the generated code must compute):
//! - the kernel writes every element of the output, a row-major tensor of
//!   shape `dims`, element type `out_dtype`;
//! - element `idx` (a multi-index over `dims`) of operand `k` is at element
//!   offset `Σ idx[d] · operands[k].strides[d]` of argument `k` (stride 0
//!   broadcasts);
//! - every value is an f32; a load converts the operand's element type to
//!   f32 (integers exactly up to 2^24); the store converts f32 to
//!   `out_dtype` (floats round to nearest; integers truncate toward zero
//!   and saturate: the lowering emits `RoundEven` and clamps first where the
//!   IR rounds);
//! - comparisons give 1.0 or 0.0; `Select(c, a, b)` is `c != 0 ? a : b`.
//!
//! An integer kernel (`compute` is [`Compute::I64`]) instead computes every
//! value as an i64, exactly: loads sign-extend signed integers and
//! zero-extend unsigned ones and bool (0 or 1); floats are not loaded.
//! `Add`/`Sub`/`Mul`/`Neg`/`Abs` wrap; `Div` truncates toward zero
//! (`i64::MIN / -1` wraps to `i64::MIN`) and division by zero gives 0
//! (ONNX leaves it undefined; the interpreter reports it); `Max`/`Min` and
//! the comparisons (1 or 0) are the integer ones; the store keeps the low
//! bits of the output type (wrapping, as the interpreter's `from_i64`),
//! bool storing `x != 0`. Other functions are refused
//! ([`Compute::supports`]). `Const` holds an f32 and suits float kernels;
//! `Int` an exact integer (a float kernel reads it as f32).
//!
//! The kernel's ABI (`aoc_plan::jit_abi`, shared by the x86 backend and
//! the runtime's `aoc_runtime::jit`): `extern "C" fn(args: *const *mut u8,
//! row_start: u64, row_end: u64, math: *const MathTable)`, where `args`
//! holds the operands' base pointers and then the output's, and rows are
//! the output's elements grouped by its last dimension (`rows =
//! Π dims[..last]`). The kernel computes rows `row_start..row_end`, so the
//! executor can split rows over threads.

use aoc_ir::types::Scalar;

/// One input of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    pub dtype: Scalar,
    /// Element stride per output dimension (same length as `dims`).
    pub strides: Vec<u64>,
}

/// The scalar functions a kernel computes: the op table's own (one enum for
/// the interpreter and both backends' pointwise emitters).
pub use aoc_ir::ops::kind::{Binary, Unary};

/// What a kernel's values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute {
    /// f32 values (integers exact up to 2^24).
    F32,
    /// i64 values, exact, for integer arithmetic and comparisons.
    I64,
}

impl Compute {
    /// Whether an integer kernel computes `e` (a float kernel computes all).
    pub fn supports(self, e: &Expr) -> bool {
        match (self, e) {
            (Compute::F32, _) => true,
            (Compute::I64, Expr::Const(_)) => false,
            (Compute::I64, Expr::Unary(u, _)) => matches!(u, Unary::Neg | Unary::Abs),
            (Compute::I64, Expr::Binary(b, ..)) => !matches!(b, Binary::Pow),
            (Compute::I64, Expr::Load(_) | Expr::Int(_) | Expr::Select(..)) => true,
        }
    }
}

/// One instruction; arguments are indices of earlier instructions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expr {
    /// The current element of operand `k`.
    Load(usize),
    Const(f32),
    /// An exact integer constant.
    Int(i64),
    Unary(Unary, usize),
    Binary(Binary, usize, usize),
    /// `c != 0 ? a : b`
    Select(usize, usize, usize),
}

/// A whole kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct PointwiseKernel {
    /// Name of the code blob in the artifact.
    pub name: String,
    /// Output shape (at least one dimension; the lowering collapses
    /// dimensions that are contiguous for every operand).
    pub dims: Vec<u64>,
    pub operands: Vec<Operand>,
    /// Straight-line program; `result` is stored.
    pub exprs: Vec<Expr>,
    pub result: usize,
    pub out_dtype: Scalar,
    pub compute: Compute,
}

/// Whether every operand and the output of `k` are integers or bool.
fn int_types(k: &PointwiseKernel) -> bool {
    !k.out_dtype.is_float() && k.operands.iter().all(|o| !o.dtype.is_float())
}

impl PointwiseKernel {
    /// Rows the kernel splits over: the product of all dimensions but the
    /// last.
    pub fn rows(&self) -> u64 {
        self.dims[..self.dims.len().saturating_sub(1)]
            .iter()
            .product()
    }

    /// A builder helper: appends `e` and returns its index.
    pub fn push(&mut self, e: Expr) -> usize {
        self.exprs.push(e);
        self.exprs.len() - 1
    }

    /// Which expressions the result depends on, after checking that every
    /// reference is in range and points backwards (both backends call this
    /// before generating code).
    pub fn live_exprs(&self) -> Result<Vec<bool>, String> {
        let k = self;
        if k.exprs.is_empty() || k.result >= k.exprs.len() {
            return Err(format!(
                "result must name one of the {} expressions, found {}",
                k.exprs.len(),
                k.result
            ));
        }
        if k.compute == Compute::I64 && !int_types(k) {
            return Err("an integer kernel loads and stores integers only".to_string());
        }
        for (i, e) in k.exprs.iter().enumerate() {
            let args: &[usize] = match e {
                Expr::Load(op) => {
                    if *op >= k.operands.len() {
                        return Err(format!(
                            "expression {i} loads operand {op}, but there are {}",
                            k.operands.len()
                        ));
                    }
                    &[]
                }
                Expr::Const(_) | Expr::Int(_) => &[],
                Expr::Unary(_, a) => &[*a],
                Expr::Binary(_, a, b) => &[*a, *b],
                Expr::Select(c, a, b) => &[*c, *a, *b],
            };
            if !k.compute.supports(e) {
                return Err(format!("expression {i} ({e:?}) has no integer form"));
            }
            if let Some(a) = args.iter().find(|&&a| a >= i) {
                return Err(format!(
                    "expression {i} uses expression {a}, which is not earlier"
                ));
            }
        }
        let mut live = vec![false; k.exprs.len()];
        live[k.result] = true;
        for i in (0..k.exprs.len()).rev() {
            if !live[i] {
                continue;
            }
            match k.exprs[i] {
                Expr::Load(_) | Expr::Const(_) | Expr::Int(_) => {}
                Expr::Unary(_, a) => live[a] = true,
                Expr::Binary(_, a, b) => {
                    live[a] = true;
                    live[b] = true;
                }
                Expr::Select(c, a, b) => {
                    live[c] = true;
                    live[a] = true;
                    live[b] = true;
                }
            }
        }
        Ok(live)
    }
}
