//! Kernel templates for the steps of a lowered plan (`aoc_plan::plan`):
//! each generator writes one `ptx_kernel` function into a [`ModuleText`]
//! with every shape baked in as a constant, and returns the launch
//! [`Geometry`] it was written for.
//!
//! - [`attention`]: fused (flash-style) attention, fp32 on the CUDA cores or
//!   f16/bf16 on `mma.sync`;
//! - [`gemm_simt`]: fp32 GEMM, batched matmul and NHWC implicit-GEMM
//!   convolution on the CUDA cores (shared-memory tiles);
//! - [`gemm_s8`]: int8 tensor-core NHWC convolution / GEMM (`mma.sync`
//!   m16n8k32, s32 accumulation) with a requantizing epilogue;
//! - [`gemm_wgmma`]: Hopper (sm_90a) f16/bf16 GEMM on `wgmma` with a
//!   packed B, and the int8 convolution on `wgmma` with the requantizing
//!   epilogue (and a fused pointwise step after it);
//! - [`rows`]: row reductions (softmax, layer-norm), axis reductions, pooling;
//! - [`index`]: index-mapping kernels (strided copy, fill, gather, resize,
//!   depthwise and transposed convolution).
//!
//! Invariants:
//! - A kernel's parameters are global pointers (`ptr addrspace(1)`), in the
//!   order its generator's doc states; nothing else is passed at launch, so
//!   a launch is (name, geometry, pointers).
//! - Generators are pure and deterministic: the same arguments give the same
//!   text, so the translator can name a kernel by its arguments and emit it
//!   once.

pub mod attention;
/// Implicit-im2col index arithmetic the tensor-core convolutions share.
mod conv_index;
/// Epilogue pieces the tensor-core GEMMs share (`gemm_tc`, `gemm_s8`, `gemm_wgmma`).
mod gemm_epilogue;
pub mod gemm_s8;
pub mod gemm_sp;
pub mod gemm_simt;
pub mod gemm_tc;
pub mod gemm_wgmma;
pub mod index;
pub mod rows;

/// A half-precision copy of a kernel's f32 output that the kernel writes
/// beside it, so that a following `wgmma` GEMM reading that output as A
/// needs no conversion launch: a last pointer parameter (after all
/// others), element `o` of the output also stored at element `o` of it,
/// rounded as the pointwise conversion rounds (to nearest even; a NaN
/// stays a NaN). Without `keep_f32` (nothing else reads the f32 output)
/// only the copy is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HalfCopy {
    pub bf16: bool,
    pub keep_f32: bool,
}

impl HalfCopy {
    pub const F16: HalfCopy = HalfCopy { bf16: false, keep_f32: true };
    pub const BF16: HalfCopy = HalfCopy { bf16: true, keep_f32: true };

    /// f32 `x` as the half type's 16 bits (an i16 value).
    pub(crate) fn bits(self, b: &mut crate::irtext::Body, x: &str) -> String {
        if !self.bf16 {
            let h = b.v(format!("fptrunc float {x} to half"));
            return b.v(format!("bitcast half {h} to i16"));
        }
        crate::irtext::bf16_bits(b, x)
    }

    /// Stores f32 `x` as 16 bits at element `off` (i64) of `param`.
    pub(crate) fn store(self, b: &mut crate::irtext::Body, x: &str, param: &str, off: &str) {
        let bits = self.bits(b, x);
        let p = b.v(format!("getelementptr i16, ptr addrspace(1) {param}, i64 {off}"));
        b.ins(format!("store i16 {bits}, ptr addrspace(1) {p}, align 2"));
    }

    /// Stores `x0`, `x1` at elements `off`, `off + 1` of `param` as one
    /// 4-byte store (`off` even, `param` 4-byte aligned).
    pub(crate) fn store_pair(self, b: &mut crate::irtext::Body, [x0, x1]: [&str; 2], param: &str, off: &str) {
        let lo = self.bits(b, x0);
        let hi = self.bits(b, x1);
        let v = b.v(format!("insertelement <2 x i16> poison, i16 {lo}, i32 0"));
        let v = b.v(format!("insertelement <2 x i16> {v}, i16 {hi}, i32 1"));
        let p = b.v(format!("getelementptr i16, ptr addrspace(1) {param}, i64 {off}"));
        b.ins(format!("store <2 x i16> {v}, ptr addrspace(1) {p}, align 4"));
    }
}

/// How a generated kernel must be launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub smem: u32,
}

pub use aoc_plan::plan::ConvGeom;

/// How the `m × k` operand A of a [`GemmSpec`] is addressed, per batch
/// index `b`, row `i`, column `kk` (all in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AMode {
    /// `A_b[i][kk] = a[b·batch + i·row + kk·col]` (a stride may be 0).
    Strided { batch: u64, row: u64, col: u64 },
    /// Implicit im2col of the NHWC input `x` (`n × h × w × c`) for group
    /// `b` (the batch index is the group; `batch == geom.group`): row
    /// `i = (img·oh + oy)·ow + ox`, column `kk = (ky·kw + kx)·cg + ci` with
    /// `cg = c / group`; the element is
    /// `x[img][oy·sh − pad_top + ky·dh][ox·sw − pad_left + kx·dw][b·cg + ci]`,
    /// or 0 where that position is outside the image. Then `m = n·oh·ow`,
    /// `k = kh·kw·cg`.
    Conv(ConvGeom),
}

/// A (batched) matrix product `C_b = A_b · B_b (+ bias_b) (relu)` for
/// `b < batch`, `A_b` `m × k`, `B_b` `k × n`, `C_b` `m × n`. Covers
/// `Step::Gemm` (B from the weights, row major), `Step::MatMul` (any
/// strides) and `Step::Conv2d` (with [`AMode::Conv`]; B is the group's
/// `(kh·kw·cg) × ocg` weight matrix, C the group's columns of the NHWC
/// output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSpec {
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: AMode,
    /// B's strides in elements: `[batch, row (k), col (n)]`.
    pub b_strides: [u64; 3],
    /// C's strides in elements: `[batch, row (m), col (n)]`.
    pub c_strides: [u64; 3],
    /// `Some(s)`: a bias vector is passed, `bias[b·s + j]` is added to
    /// column `j` of batch `b`.
    pub bias: Option<u64>,
    pub relu: bool,
    /// Every pointer passed (A, B, bias, C) is 16-byte aligned, so
    /// contiguous runs of four f32 may use 16-byte accesses when the strides
    /// keep them aligned too.
    pub aligned16: bool,
}

/// A pointwise epilogue of a GEMM-shaped kernel (a residual add, an
/// activation, a scale): applied to each result element after the bias and
/// relu, before it is stored. `kernel`'s operand 0 is the result itself; its
/// operand `k ≥ 1` is read at element offset `b·s0 + i·s1 + j·s2` of an extra
/// kernel parameter, `strides[k − 1] = [s0, s1, s2]`, for result element
/// `(b, i, j)`. The extra pointers follow C in the kernel's parameters, in
/// operand order. `pointwise::define_epilogue` writes the expression as a
/// helper function the generator calls.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmEpilogue {
    pub kernel: crate::expr::PointwiseKernel,
    pub strides: Vec<[u64; 3]>,
}
