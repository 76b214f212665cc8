//! Row-wise kernels of a plan, all f32 with every shape baked in:
//! softmax and log-softmax (`Step::Softmax`), layer normalization
//! (`Step::LayerNorm`), reductions over the middle axis (`Step::Reduce`)
//! and NHWC pooling (`Step::Pool`). The CPU kernels
//! (`aoc_runtime::kernels::{norm, pool}`) are the reference: the formulas
//! below are theirs operation by operation, so results differ only by the
//! order in which sums are added (and exp/log, which are a few ulp on both).
//!
//! Kernels, parameters (global f32 pointers, in this order) and launch
//! geometry (a one-dimensional grid and block; `smem` is always 0, the few
//! bytes of shared memory are static):
//! - [`softmax`] `(x, y)` and [`layer_norm`] `(x, [gamma], [beta], y)` over
//!   a `rows × cols` row-major matrix. Rows of at most 1024 columns: a group
//!   of `g = min(32, next_pow2(cols))` lanes per row (a warp or an aligned
//!   part of one), `block = min(256, ⌈rows·g / 32⌉·32)`,
//!   `grid = ⌈rows / (block / g)⌉`; each lane keeps its `⌈cols / g⌉` values
//!   in registers, so `x` is read once. Longer rows: a block per row
//!   (`grid = rows`), `block = clamp(⌈cols / 16⌉ rounded up to 32, 128,
//!   1024)`; up to 16 values per thread in registers (cols ≤ 16384), else
//!   three passes over the row (it stays in L1/L2). The layer norm may
//!   also store y's quantized bytes through a parameter after y
//!   ([`layer_norm_quant`]), and read x as bytes it dequantizes as it
//!   loads them ([`layer_norm_bytes`]).
//! - [`reduce`] `(x, y)`, `y[o][i] = reduce_l x[o][l][i]`. `inner == 1`
//!   (contiguous runs): lane groups as above over `len` (a block of 512
//!   per output when `len > 1024` and `outer < 2048`); the group's first
//!   lane writes. `inner > 1`: with enough outputs (`outer·inner ≥ 2^16`, or
//!   `len < 8`) one thread per output, consecutive threads on consecutive
//!   `i`, `block = 256`, `grid = min(⌈outer·inner / 256⌉, 2^31 − 1)` with a
//!   grid-stride loop; with few outputs `len` is split `by` ways (a power of
//!   two up to 64) over a `bx × by` block (`bx = min(next_pow2(inner),
//!   256 / by)`, `grid = outer·⌈inner / bx⌉`), partial results meet in
//!   shared memory. `len == 0` writes the empty result (0, NaN, −∞, +∞).
//! - [`pool`] `(x, y)`: one thread per output element (channel fastest),
//!   `block = 256`, `grid = min(⌈n·oh·ow·c / 256⌉, 2^31 − 1)`, grid-stride;
//!   [`qmax_pool`] the same over 8-bit values.
//!
//! Invariants:
//! - Lane groups never diverge before a shuffle: loads past a row's end or
//!   of rows past the last one read a clamped (valid) address and are
//!   masked to the reduction's identity; only stores are conditional. Every
//!   block size is a multiple of 32 wherever shuffles are used.
//! - Group reductions are butterflies, so every lane of a group ends with
//!   the same value; a block's warps combine through shared memory, one
//!   slot per reduction (no slot is reused, so one barrier each).
//! - NaN: softmax's row maximum ignores NaN (as the CPU's `v > m`), the sum
//!   then carries it; reduce max/min and max pooling propagate NaN
//!   (`llvm.maximum`/`llvm.minimum`). A zero extent gives a kernel that
//!   returns at once (grid 1); `x` and `y` must not overlap.
//! - Offsets are 64-bit, except pooling, which uses 32-bit arithmetic when
//!   every index and coordinate fits. Grids are exact (no row loop), so a
//!   generator refuses shapes that would need more than 2^31 − 1 blocks
//!   (far past any GPU's memory).
//!
//! Layout: `kernel` holds the function builder and the reduction operators;
//! `row` maps rows to threads and provides the row-wide loads, reductions
//! and stores; `norm` (softmax, layer norm), `reduce` and `pool` hold the
//! generators.
//!
//! [`reduce`]: fn@reduce
//! [`pool`]: fn@pool

mod kernel;
mod norm;
mod pool;
mod reduce;
mod row;

pub use norm::{layer_norm, layer_norm_bytes, layer_norm_quant, layer_norm_with, softmax};
pub use pool::{pool, pool_with, qmax_pool};
pub use reduce::reduce;
