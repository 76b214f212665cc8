//! The executor's plan: what the manifest's `plan` field holds for a CPU
//! artifact. The lowering (`aoc_passes::lower`) and the x86-64 backend write
//! it; the runtime's executor (`aoc_runtime::exec`) validates it once at load
//! and then walks it for every inference.
//!
//! A plan is a list of [`Step`]s run in order. Every tensor a step touches is
//! a [`Buf`]: a byte range in one of four spaces (the per-inference arena,
//! the artifact's weights section, an input or an output). Shapes are static
//! and written into each step; activations are row major in the layout the
//! step names (NHWC for the convolution family, the IR's own order
//! elsewhere).
//!
//! Invariants (checked by the runtime's `exec::validate` before anything
//! runs):
//! - every `Buf` lies inside its space, and a step's buffers are at least as
//!   long as the step's shapes need;
//! - outputs of a step live in the arena or in an output, never in weights
//!   or inputs;
//! - `Pointwise` kernels name a code blob of the artifact.

use serde::{Deserialize, Serialize};

/// Which memory a [`Buf`] points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    /// The per-inference arena (`arena_size` bytes, 64-byte aligned).
    Arena,
    /// The artifact's weights section (read only).
    Weights,
    /// The caller's input number `index` (read only).
    Input,
    /// The caller's output number `index`.
    Output,
}

/// A byte range: `len` bytes at `offset` of a space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buf {
    pub space: Space,
    /// Input or output number; 0 for the arena and the weights.
    #[serde(default)]
    pub index: u32,
    pub offset: u64,
    pub len: u64,
}

/// Convolution geometry shared by the convolution and pooling steps.
/// Activations are NHWC: `x` is `n × h × w × c`, `y` is `n × oh × ow × oc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvGeom {
    pub n: u64,
    pub h: u64,
    pub w: u64,
    pub c: u64,
    pub oh: u64,
    pub ow: u64,
    pub oc: u64,
    pub kh: u64,
    pub kw: u64,
    pub stride: [u64; 2],
    pub dilation: [u64; 2],
    /// Top, left, bottom, right.
    pub pads: [u64; 4],
    pub group: u64,
}

/// The integer parameters of a [`Step::QConv2d`]: the input's and the
/// output's storage (i8 when signed, else u8) and zero points, and the
/// output's clamp in stored values (the type's range meets the op's clip).
/// With `elem` [`QuantElem::E4M3`] the signs and zero points are unused
/// (false, 0) and the clamp is in e4m3 values (whole numbers: see the
/// variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantConv {
    pub x_signed: bool,
    pub x_zero: i32,
    pub y_signed: bool,
    pub y_zero: i32,
    pub y_min: i32,
    pub y_max: i32,
    /// What the 8-bit bytes of `x`, `w` and `y` hold.
    #[serde(default)]
    pub elem: QuantElem,
}

/// The element type of a [`Step::QConv2d`]'s 8-bit operands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuantElem {
    /// Integers: i8/u8 activations, i8 weights, exact i32 accumulation and
    /// the requantization of [`Step::QConv2d`].
    #[default]
    Int8,
    /// fp8 e4m3 (OCP E4M3FN) activations and weights, zero points 0: per
    /// output element `acc = Σ x·w` in f32 (`comp` is unused, all zero),
    /// `v = fma(acc, scale[o], shift[o])` clamped to `[y_min, y_max]`, then
    /// rounded to e4m3 to nearest even, saturating to ±448 (NaN stays NaN).
    /// The clamp bounds are e4m3 values that are whole numbers (a clip
    /// whose bound is not is not lowered to this step).
    E4M3,
    /// e4m3 operands as [`QuantElem::E4M3`] and an f32 result, not
    /// requantized (an fp8 product whose output stays in float): `y` holds
    /// f32, `v = fma(acc, scale[o], shift[o])` clamped to `[y_min, y_max]`
    /// (`i32::MIN`/`i32::MAX`: no bound), NaN passing.
    E4M3ToF32,
}

/// One operand of a [`Step::QAdd`]: 8-bit storage (i8 when `signed`, else
/// u8) with per-tensor `zero` and `scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantOperand {
    pub signed: bool,
    pub zero: i32,
    #[serde(with = "crate::float_json")]
    pub scale: f32,
}

/// The parameters of a [`Step::QAdd`]: both operands', the result's, and
/// the op's clamp in real values (`None`: no bound).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantAdd {
    pub a: QuantOperand,
    pub b: QuantOperand,
    pub y: QuantOperand,
    #[serde(with = "crate::float_json::opt")]
    pub clip_min: Option<f32>,
    #[serde(with = "crate::float_json::opt")]
    pub clip_max: Option<f32>,
}

/// The parameters of a [`Step::QGlobalAvgPool`]: the input's and the
/// result's 8-bit parameters and the op's clamp in stored values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantMean {
    pub x: QuantOperand,
    pub y: QuantOperand,
    pub y_min: i32,
    pub y_max: i32,
}

/// The parameters of a [`Step::QMatMul`]: both operands', the result's
/// storage, zero point and clamp in stored values, and the f32 factor
/// `a.scale·b.scale / y.scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantMatMul {
    pub a: QuantOperand,
    pub b: QuantOperand,
    pub y_signed: bool,
    pub y_zero: i32,
    pub y_min: i32,
    pub y_max: i32,
    #[serde(with = "crate::float_json")]
    pub scale: f32,
}

/// How a pool reduces its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    Max,
    /// Average over the window cells inside the input.
    AvgExcludePad,
    /// Average over the whole window, padding counted as zeros.
    AvgIncludePad,
}

/// What a [`Step::Reduce`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// Interpolation of a [`Step::Resize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeMode {
    /// Source index `floor(dst * in / out)` ("asymmetric" + "floor").
    Nearest,
    /// Bilinear with `half_pixel` coordinates.
    BilinearHalfPixel,
    /// Bilinear with `align_corners` coordinates.
    BilinearAlignCorners,
    /// Bilinear with `asymmetric` coordinates.
    BilinearAsymmetric,
}

/// Interpolation of a [`Step::GridSample`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GridMode {
    Nearest,
    Linear,
    Cubic,
}

/// What a [`Step::GridSample`] position outside the image reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// One thing the executor does. Element type is f32 unless the step says
/// otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// `c[m×n] = a[m×k] · B + bias` (then relu, or GELU), B packed at
    /// compile time ([`crate::pack::pack_b`] layout) in the weights.
    /// `lda`/`ldc` are row strides in elements.
    Gemm {
        a: Buf,
        b: Buf,
        bias: Option<Buf>,
        c: Buf,
        m: u64,
        n: u64,
        k: u64,
        lda: u64,
        ldc: u64,
        relu: bool,
        /// `min(max(x, lo), hi)` after the bias and relu (ReLU6: `[0, 6]`);
        /// absent when none (and in artifacts written before it existed).
        #[serde(default, with = "crate::float_json::opt_pair", skip_serializing_if = "Option::is_none")]
        clip: Option<[f32; 2]>,
        /// `0.5·x·(1 + erf(x/√2))` last (after the bias; the lowering sets it
        /// alone); absent when false (and in artifacts before it existed).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        gelu: bool,
    },
    /// Batched product of two activations: for every batch index `i`,
    /// `c_i[m×n] = a_i[m×k] · b_i[k×n]`. Each operand is addressed by
    /// `[batch, row, col]` strides in elements (0 broadcasts).
    MatMul {
        a: Buf,
        b: Buf,
        c: Buf,
        batch: u64,
        m: u64,
        n: u64,
        k: u64,
        a_strides: [u64; 3],
        b_strides: [u64; 3],
        c_strides: [u64; 3],
    },
    /// NHWC convolution; `w` is packed per group as a `(kh·kw·c/group) ×
    /// (oc/group)` matrix (rows in `kh, kw, c` order) with `pack_b`, groups
    /// back to back; `bias` has `oc` values.
    Conv2d {
        x: Buf,
        w: Buf,
        bias: Option<Buf>,
        y: Buf,
        geom: ConvGeom,
        relu: bool,
        /// `min(max(x, lo), hi)` after the bias and relu (ReLU6: `[0, 6]`);
        /// absent when none (and in artifacts written before it existed).
        #[serde(default, with = "crate::float_json::opt_pair", skip_serializing_if = "Option::is_none")]
        clip: Option<[f32; 2]>,
    },
    /// NHWC Winograd convolution F(`tile`×`tile`, 3×3), `tile` 2 or 4
    /// (`core.winograd_conv2d`): `geom` is 3×3, stride 1, dilation 1, one
    /// group; `u` holds the transformed weights `G g Gᵀ` packed per
    /// transform point ([`crate::pack::winograd_pack_weights`]: for each
    /// of the `(tile+2)²` points in row-major order, the `c × oc` matrix
    /// packed by `pack_b`, back to back); `bias` has `oc` values; relu last.
    WinogradConv2d {
        x: Buf,
        u: Buf,
        bias: Option<Buf>,
        y: Buf,
        geom: ConvGeom,
        tile: u64,
        relu: bool,
    },
    /// NHWC depthwise convolution (`group == c`, `oc == c · multiplier`);
    /// `w` is `kh × kw × oc`, row major.
    DepthwiseConv2d {
        x: Buf,
        w: Buf,
        bias: Option<Buf>,
        y: Buf,
        geom: ConvGeom,
        relu: bool,
        /// `min(max(x, lo), hi)` after the bias and relu (ReLU6: `[0, 6]`);
        /// absent when none (and in artifacts written before it existed).
        #[serde(default, with = "crate::float_json::opt_pair", skip_serializing_if = "Option::is_none")]
        clip: Option<[f32; 2]>,
    },
    /// NHWC transposed convolution; `geom` describes the *forward*
    /// convolution from `y` back to `x` turned around: `x` is
    /// `n × h × w × c` (the input), `y` is `n × oh × ow × oc`, `w` is
    /// `group × (c/group) × kh × kw × (oc/group)` row major; `pads` crop the
    /// full output.
    ConvTranspose2d {
        x: Buf,
        w: Buf,
        bias: Option<Buf>,
        y: Buf,
        geom: ConvGeom,
    },
    /// NHWC pooling over `kh × kw` windows (`c == oc`, `group` unused).
    Pool {
        kind: PoolKind,
        x: Buf,
        y: Buf,
        geom: ConvGeom,
        /// Windows may run past the input's end (`ceil_mode`).
        ceil_mode: bool,
    },
    /// Reduction over the middle axis of `outer × len × inner` into
    /// `outer × inner` (global average pool in NHWC: `n × hw × c`).
    Reduce {
        kind: ReduceKind,
        x: Buf,
        y: Buf,
        outer: u64,
        len: u64,
        inner: u64,
    },
    /// NHWC resize from `n × h × w × c` to `n × oh × ow × c`.
    Resize {
        mode: ResizeMode,
        x: Buf,
        y: Buf,
        n: u64,
        h: u64,
        w: u64,
        c: u64,
        oh: u64,
        ow: u64,
    },
    /// ONNX `GridSample` (`core.grid_sample`): NCHW `x` of `n × c × h × w`
    /// sampled at the normalized `(x, y)` positions of `grid`
    /// (`n × oh × ow × 2`, row-major) into NCHW `y` of `n × c × oh × ow`;
    /// `volumetric`: NCDHW `x` of `n × c × d × h × w`, `grid` of
    /// `n × od × oh × ow × 3` holding `(x, y, z)`, `y` of
    /// `n × c × od × oh × ow` (otherwise `d` and `od` are 1).
    GridSample {
        mode: GridMode,
        padding: GridPadding,
        align_corners: bool,
        volumetric: bool,
        x: Buf,
        grid: Buf,
        y: Buf,
        n: u64,
        c: u64,
        d: u64,
        h: u64,
        w: u64,
        od: u64,
        oh: u64,
        ow: u64,
    },
    /// Strided copy of `elem_size`-byte elements: for every index of
    /// `shape`, `dst[Σ i·dst_strides] = src[src_start + Σ i·src_strides]`
    /// (strides and start in elements, relative to the bufs; a source stride
    /// may be 0 to broadcast or negative for reversed slices). Transposes,
    /// slices, concatenation pieces, expand, layout changes.
    Copy {
        src: Buf,
        dst: Buf,
        elem_size: u64,
        shape: Vec<u64>,
        src_start: u64,
        src_strides: Vec<i64>,
        dst_strides: Vec<u64>,
    },
    /// Every `elem_size`-byte element of `dst` set to the low bytes of
    /// `bits` (little endian): padding, empty tensors.
    Fill { dst: Buf, elem_size: u64, bits: u64 },
    /// `out[o, j, i] = data[o, indices[j], i]` for `data` of `outer × axis ×
    /// inner` elements of `elem_size` bytes and `count` i64 indices
    /// (negative ones count from the end; out-of-range is an error).
    Gather {
        data: Buf,
        indices: Buf,
        out: Buf,
        elem_size: u64,
        outer: u64,
        axis: u64,
        inner: u64,
        count: u64,
    },
    /// Softmax over the last axis of a `rows × cols` matrix (`log` for
    /// log-softmax).
    Softmax {
        x: Buf,
        y: Buf,
        rows: u64,
        cols: u64,
        log: bool,
    },
    /// Layer normalization over the last `cols` elements of each row, then
    /// `· gamma + beta` (each `cols` long; absent means 1 and 0).
    LayerNorm {
        x: Buf,
        gamma: Option<Buf>,
        beta: Option<Buf>,
        y: Buf,
        rows: u64,
        cols: u64,
        #[serde(with = "crate::float_json")]
        epsilon: f32,
    },
    /// Scaled dot-product attention of `batch × heads` independent problems
    /// (`core.attention` whose epilogue is a scalar scale and an optional
    /// additive mask): `s[i][j] = scale · Σ_f Q[b,h,i,f]·K[b,h,j,f]
    /// (+ mask[b,h,i,j])`, `p = softmax_j(s)`, `Y[b,h,i,f] = Σ_j p[i][j] ·
    /// V[b,h,j,f]`, for `i < sq`, `j < sk`, `f < d` (Q, K) or `f < dv` (V,
    /// Y). `X[b,h,r,f]` is element `b·X[0] + h·X[1] + r·X[2] + f·X[3]` of
    /// its buffer (strides in elements, 0 broadcasts); K is un-transposed
    /// (key rows). The score matrix is never stored.
    Attention {
        q: Buf,
        k: Buf,
        v: Buf,
        mask: Option<Buf>,
        y: Buf,
        batch: u64,
        heads: u64,
        sq: u64,
        sk: u64,
        d: u64,
        dv: u64,
        q_strides: [u64; 4],
        k_strides: [u64; 4],
        v_strides: [u64; 4],
        mask_strides: [u64; 4],
        y_strides: [u64; 4],
        #[serde(with = "crate::float_json")]
        scale: f32,
    },
    /// NHWC convolution in integers (`quant.conv2d`, and `quant.gemm` as a
    /// 1×1 one): `x` holds i8 (`q.x_signed`) or u8 values, padding reads as
    /// `q.x_zero`; `w` is i8 `[oc][kh][kw][c/group]`; `comp`, `scale` and
    /// `shift` have `oc` entries (i32, f32, f32), folded at compile time.
    /// Per output element, `acc = Σ x·w + comp[o]` exactly in i32, then
    /// `y = clamp(round_half_even(fma(acc as f32, scale[o], shift[o])) +
    /// y_zero, y_min, y_max)` stored as i8 (`y_signed`) or u8.
    QConv2d {
        x: Buf,
        w: Buf,
        comp: Buf,
        scale: Buf,
        shift: Buf,
        y: Buf,
        geom: ConvGeom,
        q: QuantConv,
    },
    /// `quant.add` of 8-bit tensors: `a` and `y` of `n` elements in the
    /// same layout, `b` of `b_len` elements repeated along them (`b_len`
    /// divides `n`; `b_len == n`: no broadcast, e.g. a bias along the last
    /// axis otherwise). Per element, in f32, `d = (a − a.zero)·a.scale +
    /// (b − b.zero)·b.scale`, clamped to `[clip_min, clip_max]`, then `y =
    /// clamp(round_half_even(d / y.scale) + y.zero)` to the storage range
    /// (the op's Q/DQ definition, operation for operation).
    QAdd {
        a: Buf,
        b: Buf,
        y: Buf,
        n: u64,
        b_len: u64,
        q: QuantAdd,
    },
    /// `quant.matmul` of two 8-bit activations (attention's `QKᵀ` and
    /// `AV`), batched with element strides as [`Step::MatMul`]: per output
    /// element `acc = Σ_k (a − a.zero)·(b − b.zero)` exactly in i32, then
    /// `y = clamp(round_half_even(acc·scale) + y_zero, y_min, y_max)`.
    QMatMul {
        a: Buf,
        b: Buf,
        y: Buf,
        batch: u64,
        m: u64,
        n: u64,
        k: u64,
        a_strides: [u64; 3],
        b_strides: [u64; 3],
        y_strides: [u64; 3],
        q: QuantMatMul,
    },
    /// `quant.quantize` of `n` f32 values to 8-bit storage with per-tensor
    /// parameters `q`: `y = clamp(round_half_even(x / q.scale) + q.zero)`
    /// to the storage range, NaN to the zero point (the interpreter's
    /// rule); `y` in `x`'s layout.
    Quantize {
        x: Buf,
        y: Buf,
        n: u64,
        q: QuantOperand,
    },
    /// `quant.dequantize` of `n` 8-bit values: `y = (x − q.zero)·q.scale`
    /// in f32; `y` in `x`'s layout.
    Dequantize {
        x: Buf,
        y: Buf,
        n: u64,
        q: QuantOperand,
    },
    /// A max pool of 8-bit integers (i8 when `signed`, else u8) in NHWC,
    /// geometry as [`Step::Pool`]: `core.max_pool2d` on a quantized tensor
    /// whose result has the same parameters, where the maximum of the stored
    /// values is the stored maximum.
    QMaxPool {
        x: Buf,
        y: Buf,
        geom: ConvGeom,
        ceil_mode: bool,
        signed: bool,
    },
    /// `quant.avg_pool2d` of an 8-bit NHWC tensor into another, geometry as
    /// [`Step::Pool`]: per window, the f64 sum of the dequantized values
    /// (each `(q − x.zero)·x.scale` rounded to f32), divided by the taps
    /// inside the input (or, with `count_include_pad`, inside the padded
    /// extent) and rounded to f32, then quantized and clamped to `[y_min,
    /// y_max]` (the op's Q/DQ definition).
    QAvgPool {
        x: Buf,
        y: Buf,
        geom: ConvGeom,
        ceil_mode: bool,
        count_include_pad: bool,
        q: QuantMean,
    },
    /// `quant.global_avg_pool` of an 8-bit NHWC tensor (`n` images of `hw`
    /// pixels × `c` channels) into `n × c` 8-bit values: per channel, the
    /// f64 sum of the dequantized values (each `(q − x.zero)·x.scale`
    /// rounded to f32, as `quant.dequantize` gives them), divided by `hw`
    /// and rounded to f32, then quantized as `quant.quantize` does and
    /// clamped to `[y_min, y_max]` (the op's Q/DQ definition).
    QGlobalAvgPool {
        x: Buf,
        y: Buf,
        n: u64,
        hw: u64,
        c: u64,
        q: QuantMean,
    },
    /// A kernel the backend generated (Cranelift): `code` names the blob,
    /// `args` are its tensors in the kernel's order (the last one is the
    /// output), `rows` the parallel extent the kernel splits over.
    Pointwise {
        code: String,
        args: Vec<Buf>,
        rows: u64,
    },
    /// An op no native kernel covers yet, run by the reference interpreter:
    /// `air` is a one-op `.air` function whose parameters are `inputs` and
    /// whose results are `outputs`, in order. Needs the runtime's
    /// `reference` feature; a runtime without it refuses the artifact at
    /// load, naming the op.
    Reference {
        air: String,
        inputs: Vec<Buf>,
        outputs: Vec<Buf>,
    },
    /// Control flow (`core.if`): when the byte at `cond` is 0 the executor
    /// continues at step `else_at` (the first step of the else branch,
    /// after this if's `Else`), else at the next step. The plan stays flat:
    /// every step keeps its index, so kernels, origins and profiles are
    /// per step as everywhere else.
    If { cond: Buf, else_at: u64 },
    /// The end of an if's then branch: continue at `end_at` (its `EndIf`).
    Else { end_at: u64 },
    /// Where an if's branches meet; does nothing.
    EndIf {},
    /// The head of a `core.loop`: the iteration number (i64 at `iter`)
    /// becomes 0 and the body's condition (the byte at `cond_in`) that of
    /// `cond` (true when absent); when `0 < trip` (an i64; no bound when
    /// absent) and the condition holds the body (the next steps) runs,
    /// else the executor continues after `end_at` (its `EndLoop`). A loop
    /// with scan outputs must run `scan_rows` iterations.
    Loop {
        trip: Option<Buf>,
        cond: Option<Buf>,
        iter: Buf,
        cond_in: Buf,
        end_at: u64,
        scan_rows: Option<u64>,
    },
    /// The end of a loop body: each carried value takes what the body
    /// yielded (`carried[j] = [yielded, carried]`, staged so a yield may be
    /// any carried value), each scan element is stored as row `iter` of
    /// its output (`scans[j] = [element, output]`), the iteration number
    /// grows by one and the condition becomes the byte at `cond_out`;
    /// while `iter < trip` and the condition holds, the body runs again
    /// (from step `start_at + 1`). More than `max_iterations` iterations is
    /// an error, never a hang; so is a count other than `scan_rows`.
    EndLoop {
        start_at: u64,
        trip: Option<Buf>,
        iter: Buf,
        cond_in: Buf,
        cond_out: Buf,
        carried: Vec<[Buf; 2]>,
        scans: Vec<[Buf; 2]>,
        scan_rows: Option<u64>,
        max_iterations: u64,
    },
}

/// The whole plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Human-readable origin of each step (the IR op and its location), for
    /// `aoc explain` and error messages; same length as `steps`.
    pub origins: Vec<String>,
}

impl Step {
    /// Calls `f` on every buffer of the step with `true` for the ones it
    /// writes. The executor's validation and the backend's memory planning
    /// both walk buffers through this one function.
    pub fn visit_bufs(&mut self, mut f: impl FnMut(&mut Buf, bool)) {
        match self {
            Step::Gemm { a, b, bias, c, .. } => {
                f(a, false);
                f(b, false);
                if let Some(bias) = bias {
                    f(bias, false);
                }
                f(c, true);
            }
            Step::MatMul { a, b, c, .. } => {
                f(a, false);
                f(b, false);
                f(c, true);
            }
            Step::Conv2d { x, w, bias, y, .. }
            | Step::DepthwiseConv2d { x, w, bias, y, .. }
            | Step::ConvTranspose2d { x, w, bias, y, .. } => {
                f(x, false);
                f(w, false);
                if let Some(bias) = bias {
                    f(bias, false);
                }
                f(y, true);
            }
            Step::WinogradConv2d { x, u, bias, y, .. } => {
                f(x, false);
                f(u, false);
                if let Some(bias) = bias {
                    f(bias, false);
                }
                f(y, true);
            }
            Step::Attention {
                q, k, v, mask, y, ..
            } => {
                f(q, false);
                f(k, false);
                f(v, false);
                if let Some(m) = mask {
                    f(m, false);
                }
                f(y, true);
            }
            Step::QConv2d {
                x,
                w,
                comp,
                scale,
                shift,
                y,
                ..
            } => {
                f(x, false);
                f(w, false);
                f(comp, false);
                f(scale, false);
                f(shift, false);
                f(y, true);
            }
            Step::QMatMul { a, b, y, .. } => {
                f(a, false);
                f(b, false);
                f(y, true);
            }
            Step::QAdd { a, b, y, .. } => {
                f(a, false);
                f(b, false);
                f(y, true);
            }
            Step::Pool { x, y, .. }
            | Step::QMaxPool { x, y, .. }
            | Step::QAvgPool { x, y, .. }
            | Step::QGlobalAvgPool { x, y, .. }
            | Step::Quantize { x, y, .. }
            | Step::Dequantize { x, y, .. }
            | Step::Reduce { x, y, .. }
            | Step::Resize { x, y, .. }
            | Step::Softmax { x, y, .. } => {
                f(x, false);
                f(y, true);
            }
            Step::Copy { src, dst, .. } => {
                f(src, false);
                f(dst, true);
            }
            Step::Fill { dst, .. } => f(dst, true),
            Step::GridSample { x, grid, y, .. } => {
                f(x, false);
                f(grid, false);
                f(y, true);
            }
            Step::Gather {
                data, indices, out, ..
            } => {
                f(data, false);
                f(indices, false);
                f(out, true);
            }
            Step::LayerNorm {
                x, gamma, beta, y, ..
            } => {
                f(x, false);
                if let Some(g) = gamma {
                    f(g, false);
                }
                if let Some(b) = beta {
                    f(b, false);
                }
                f(y, true);
            }
            Step::Pointwise { args, .. } => {
                let n = args.len();
                for (i, a) in args.iter_mut().enumerate() {
                    f(a, i + 1 == n);
                }
            }
            Step::Reference {
                inputs, outputs, ..
            } => {
                for b in inputs {
                    f(b, false);
                }
                for b in outputs {
                    f(b, true);
                }
            }
            Step::If { cond, .. } => f(cond, false),
            Step::Else { .. } | Step::EndIf {} => {}
            Step::Loop { trip, cond, iter, cond_in, .. } => {
                if let Some(t) = trip {
                    f(t, false);
                }
                if let Some(c) = cond {
                    f(c, false);
                }
                f(iter, true);
                f(cond_in, true);
            }
            Step::EndLoop { trip, iter, cond_in, cond_out, carried, scans, .. } => {
                if let Some(t) = trip {
                    f(t, false);
                }
                f(iter, true);
                f(cond_in, true);
                f(cond_out, false);
                for [from, to] in carried.iter_mut().chain(scans.iter_mut()) {
                    f(from, false);
                    f(to, true);
                }
            }
        }
    }

    /// Whether the step moves the executor's program counter (control flow).
    pub fn is_control(&self) -> bool {
        matches!(self, Step::If { .. } | Step::Else { .. } | Step::EndIf {} | Step::Loop { .. } | Step::EndLoop { .. })
    }

    /// The step's kind as written in the plan (`gemm`, `conv2d`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Gemm { .. } => "gemm",
            Step::MatMul { .. } => "mat_mul",
            Step::Conv2d { .. } => "conv2d",
            Step::DepthwiseConv2d { .. } => "depthwise_conv2d",
            Step::WinogradConv2d { .. } => "winograd_conv2d",
            Step::ConvTranspose2d { .. } => "conv_transpose2d",
            Step::Pool { .. } => "pool",
            Step::Reduce { .. } => "reduce",
            Step::Resize { .. } => "resize",
            Step::GridSample { .. } => "grid_sample",
            Step::Copy { .. } => "copy",
            Step::Fill { .. } => "fill",
            Step::Gather { .. } => "gather",
            Step::Softmax { .. } => "softmax",
            Step::LayerNorm { .. } => "layer_norm",
            Step::Attention { .. } => "attention",
            Step::QConv2d { .. } => "qconv2d",
            Step::QAdd { .. } => "qadd",
            Step::QMatMul { .. } => "qmatmul",
            Step::QMaxPool { .. } => "qmax_pool",
            Step::QAvgPool { .. } => "qavg_pool",
            Step::QGlobalAvgPool { .. } => "qglobal_avg_pool",
            Step::Quantize { .. } => "quantize",
            Step::Dequantize { .. } => "dequantize",
            Step::Pointwise { .. } => "pointwise",
            Step::Reference { .. } => "reference",
            Step::If { .. } => "if",
            Step::Else { .. } => "else",
            Step::EndIf {} => "end_if",
            Step::Loop { .. } => "loop",
            Step::EndLoop { .. } => "end_loop",
        }
    }
}
