//! Index-mapping kernels: the data-movement steps of a plan (`Step::Copy`,
//! `Fill`, `Gather`, `Resize`) and the direct convolutions that sum a few
//! gathered neighbours (`DepthwiseConv2d`, `ConvTranspose2d`). Every shape
//! is baked in; the CPU kernels (`aoc_runtime::kernels::{copy, resize,
//! conv}`) are the reference.
//!
//! Kernels, parameters (global pointers, in this order) and launch geometry.
//! Unless said otherwise a kernel maps one *work item* to one thread,
//! consecutive threads to consecutive destination addresses, `block = 256`,
//! `grid = clamp(⌈items / 256⌉, 1, 2^31 − 1)`, `smem = 0`, and a
//! grid-stride loop covers any shortfall. An empty shape gives a kernel that
//! returns at once (grid 1).
//! - [`copy`] `(src, dst)`: elements move as opaque *units* (the largest
//!   power of two ≤ 8 dividing the element size). [`copy_plan`] drops
//!   length-1 dimensions, fixes each destination-stride-0 dimension at its
//!   last index (the last write wins, as in the CPU's loop), sorts the rest
//!   by decreasing destination stride, merges neighbours contiguous in both
//!   operands and picks a [`CopyForm`]:
//!   `Runs` (innermost dimension contiguous in the destination with source
//!   stride 1, or 0 to repeat one unit): an item is a chunk of up to 16
//!   bytes (`ld/st.global.v4`) when the run length, the start and the outer
//!   strides keep chunks aligned; `Transpose` (an outer dimension has
//!   source stride ±1 and both it and the innermost have at least 16
//!   elements): 32×32 tiles through static shared memory, a block of 256
//!   threads per tile, `grid = min(tiles, 2^31 − 1)`; `Elements`: a unit
//!   per item; `Sequential` (destinations that overlap other than through
//!   stride 0): one thread in row-major order (`grid = block = 1`), exactly
//!   the CPU's result.
//! - [`fill`] `(dst)`: items are 16-byte stores, then the tail's elements.
//! - [`gather`] `(data, indices, out, status)`: an item is a chunk of an
//!   output row (16 bytes when the row allows). An index outside
//!   `[-axis, axis)` writes zeros to its output rows and stores `1u32` to
//!   `status`; with an empty output (`outer · inner == 0`) the items are the
//!   indices, only checked (the CPU checks them too).
//! - [`resize`] `(x, y)`: NHWC f32, an item is 4 channels (`c % 4 == 0`)
//!   or 1. The taps of an axis come from tables computed here with the CPU's
//!   f64 formulas; axes of more than 4096 outputs compute them on the GPU in
//!   f64 with the same operations.
//! - [`grid_sample`] `(x, grid, y)`: NCHW f32, an item is one output
//!   element; its taps are computed in the kernel with the CPU's f32
//!   formulas.
//! - [`depthwise_conv2d`] `(x, w, [bias], y)` and [`conv_transpose2d`]
//!   `(x, w, [bias], y)`: f32, an item is 4 output channels of a pixel where
//!   the channel layout allows (depthwise: `oc % 4 == 0` and a multiplier of
//!   1, 2 or a multiple of 4; transposed: `oc / group % 4 == 0`), else one
//!   output element. Transposed convolution is a gather: an output sums the
//!   taps whose input position exists (no atomics).
//! - [`unfold_w`] `(x, dst)`: an 8-bit convolution's input with each output
//!   column's `kw` taps of `c` channels as one pixel of `cp` channels (a
//!   multiple of 16), so that a stem's 3 channels reach the `wgmma` kernel
//!   in 16-byte chunks; an item is one unfolded pixel, stored as 16-byte
//!   vectors.
//!
//! Invariants:
//! - Only element alignment is assumed of a pointer. A 16-byte (or 8-, 4-
//!   byte chunk) path is taken when every offset is a multiple of the chunk
//!   by construction *and* a run-time test of the pointers passes (uniform
//!   across the grid); otherwise the same kernel runs its element path
//!   (grid-stride over the larger item count).
//! - Inputs are `noalias readonly` (read through the non-coherent cache):
//!   no output may overlap an input.
//! - Nothing is read out of bounds: a masked tap reads a valid address and
//!   drops the value; gather reads only rows whose index is in range.
//! - Arithmetic follows the CPU: depthwise adds the `x·w` products in the
//!   CPU's tap order without fused multiply-add (identical results), relu
//!   is `maxnum(acc, 0)` (NaN becomes 0, as `f32::max`); resize blends rows
//!   then columns with the CPU's `fy == 0` / `fx == 0` shortcuts (identical
//!   results); transposed convolution uses `fma` (the CPU's GEMM sums in
//!   another order anyway).
//! - Offsets are 32-bit when every byte offset and item count is below
//!   2^31, else 64-bit; wrapping partial sums are harmless because every
//!   final offset is in range.
//!
//! Layout: `builder` holds the kernel builder and the launch and offset-type
//! helpers every generator shares; `copy`, `fill`, `gather`, `resize` and
//! `conv` (depthwise and transposed convolution) hold one step's generator
//! each.
//!
//! [`copy`]: fn@copy
//! [`fill`]: fn@fill
//! [`gather`]: fn@gather
//! [`resize`]: fn@resize

mod builder;
mod conv;
mod copy;
mod fill;
mod gather;
mod grid_sample;
mod pad;
mod resize;
mod unfold;

pub use conv::{conv_transpose2d, depthwise_conv2d};
pub use copy::{CopyDim, CopyForm, CopyPlan, copy, copy_plan};
pub use fill::fill;
pub use gather::gather;
pub use grid_sample::grid_sample;
pub use pad::{PAD_MAX, pad_half};
pub use resize::resize;
pub use unfold::{UNFOLD_MAX, unfold_w, unfold_w_geom, unfold_w_weights, unfolded_channels};
