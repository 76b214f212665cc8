//! GEMMs and convolutions on sm_90a `wgmma`: when one should run there
//! ([`Tr::wgmma_form`]: enough tiles to pay for reading A in half), and its
//! launch — A from a half copy (`half.rs`), B packed for the tile at
//! compile time (`weights.rs`), the tile chosen by `choose_wg_tile` or
//! `--tune`.
//!
//! Invariants:
//! - `wgmma` reads A only through a dense half copy: a plain row-major A,
//!   or the whole NHWC input of a one-group convolution, its channels
//!   padded to a multiple of 8 in the copy (B gets zero rows to match).
//! - A `wgmma` launch whose C is dense becomes a producer: a later `wgmma`
//!   GEMM on its output may have it write that output's half copy.

use aoc_ir::types::Scalar;
use aoc_plan::gpu_plan::Arg;
use aoc_plan::plan::Buf;

use super::gemm::{GemmBufs, epi_key, with_extras};
use super::half::Remake;
use super::{Tr, aligned16};
use crate::kernels::gemm_tc::TcPrecision;
use crate::kernels::gemm_wgmma::{WgPrecision, WgTile, choose_wg_tile, gemm_wgmma_tile, packed_b_len};
use crate::kernels::{AMode, ConvGeom, GemmEpilogue, GemmSpec, index};
use crate::target::Sm;

/// `wgmma` pays for its conversion launch once the 128×128 tiles cover
/// the GPU about once (an H200 has 132 multiprocessors).
const WGMMA_MIN_TILES: u64 = 128;

/// Convolutions go to `wgmma` from this many 128×64 tiles on: with the
/// producers writing half copies of their outputs, a network of them
/// pays one conversion at its start. ResNet-50 at batch 32 has 104 in its
/// last stage; at batch 1 none qualifies (its `mma.sync` tiles of 64 rows
/// fill the GPU better).
const WGMMA_MIN_CONV_TILES: u64 = 96;

/// The `wgmma` tiles `--tune` times: 128×`bn` with `stages` k-tiles of 64
/// in flight (three stages of 128×128 or less fit two blocks per
/// multiprocessor).
const WGMMA_CANDIDATES: [WgTile; 8] = [
    WgTile { bn: 256, stages: 3 },
    WgTile { bn: 256, stages: 4 },
    WgTile { bn: 192, stages: 4 },
    WgTile { bn: 128, stages: 3 },
    WgTile { bn: 128, stages: 4 },
    WgTile { bn: 128, stages: 6 },
    WgTile { bn: 64, stages: 3 },
    WgTile { bn: 64, stages: 4 },
];

/// Converting A costs about `6·m·k` bytes of traffic (f32 read, half
/// write) and saves about `2·m·n·k·(1/240 − 1/550)` TFLOP-seconds on an
/// H200 (mma.sync against wgmma rates): worth it from `n ≈ 430` on.
/// ResNet-50's early 1×1 convolutions (n ≤ 256) measured slower with it.
const WGMMA_MIN_N: u64 = 512;

/// The f32 activation the `wgmma` GEMM `spec` reads through a half copy,
/// as `(row stride, rows, columns)`: a plain A (see [`a_rows`]) itself, or
/// the whole NHWC input of a convolution the kernel reads implicitly (one
/// group, one pixel per row), its channels padded with zeros to a multiple
/// of 8 in the copy where they are not (`columns > row stride`: a stem's
/// 3 channels become 8).
fn wgmma_activation(spec: &GemmSpec) -> Option<(u64, u64, u64)> {
    match (a_rows(spec), spec.a) {
        (Some(lda), _) => Some((lda, spec.m, spec.k)),
        (None, AMode::Conv(g)) if g.group == 1 && g.c > 0 && g.c.next_multiple_of(8) <= index::PAD_MAX.max(g.c) => {
            Some((g.c, g.n * g.h * g.w, g.c.next_multiple_of(8)))
        }
        _ => None,
    }
}

/// The row stride of A when it is a plain row-major matrix with unit column
/// stride: a strided A, or the NHWC input of a 1×1, stride-1, unpadded,
/// ungrouped convolution (its rows are the pixels).
fn a_rows(spec: &GemmSpec) -> Option<u64> {
    match spec.a {
        AMode::Strided { row, col: 1, .. } => Some(row),
        AMode::Conv(g)
            if g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pads == [0; 4] && g.group == 1 && g.dilation == [1, 1] =>
        {
            Some(g.c)
        }
        _ => None,
    }
}

impl Tr<'_, '_> {
    /// The precision `wgmma` runs `spec` in, when it should: sm_90a, a
    /// plain GEMM with a constant B, k a multiple of 8 (the half copy of A
    /// is then dense with 16-byte rows), C with unit column stride, and
    /// enough rows and columns to fill most of the GPU with 128-row tiles;
    /// or a convolution the kernel reads implicitly ([`wgmma_activation`])
    /// with enough tiles of 128 × 64.
    pub(super) fn wgmma_form(&self, spec: &GemmSpec, p: TcPrecision, c: &Buf, bias: Option<&Buf>) -> Option<WgPrecision> {
        let wp = match p {
            TcPrecision::F16 => WgPrecision::F16,
            TcPrecision::Bf16 => WgPrecision::Bf16,
            TcPrecision::Tf32 => return None,
        };
        let (_, _, cols) = wgmma_activation(spec)?;
        // k of the product the kernel computes (a padded convolution's).
        let k = match spec.a {
            AMode::Conv(g) if a_rows(spec).is_none() => g.kh * g.kw * cols,
            _ => spec.k,
        };
        let common = self.sm == Sm::Sm90a
            && spec.batch == 1
            && k >= 64
            && k.is_multiple_of(8)
            && spec.c_strides[2] == 1
            && aligned16(&[c].into_iter().chain(bias).collect::<Vec<_>>());
        let wide = spec.n >= WGMMA_MIN_N && spec.m.div_ceil(128) * spec.n.div_ceil(128) >= WGMMA_MIN_TILES;
        let conv = matches!(spec.a, AMode::Conv(_))
            && spec.n >= 64
            && spec.m.div_ceil(128) * spec.n.div_ceil(64) >= WGMMA_MIN_CONV_TILES;
        (common && (wide || conv)).then_some(wp)
    }

    /// A GEMM on `wgmma`: A is converted into a half scratch buffer at the
    /// end of the arena (one pointwise launch), B is packed for the
    /// kernel's tile at compile time.
    pub(super) fn gemm_wgmma(
        &mut self,
        spec: GemmSpec,
        p: WgPrecision,
        bufs: GemmBufs,
        origin: &str,
        epi: Option<&(GemmEpilogue, Vec<Buf>)>,
    ) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let (lda, rows, cols) = wgmma_activation(&spec).ok_or("internal error: wgmma on an A it cannot read")?;
        let k = spec.k;
        let half = if p == WgPrecision::Bf16 { Scalar::BF16 } else { Scalar::F16 };
        // GEMMs on one activation (attention's Q, K and V projections, a
        // bottleneck's first and downsampling convolutions) share its copy.
        let key = (a, lda, rows, cols, half);
        let scratch = self.half_copy(key, origin)?;
        let epi = self.halves.epilogue_from_halves(epi, half);
        let epi = epi.as_ref();
        let mut spec = spec;
        // The padded channels' weights are zeros (rows of B inserted below).
        let mut pad = None;
        match spec.a {
            _ if a_rows(&spec).is_some() => spec.a = AMode::Strided { batch: 0, row: k, col: 1 },
            AMode::Conv(g) if g.c != cols => {
                pad = Some((g.c, cols, g.kh * g.kw));
                spec.a = AMode::Conv(ConvGeom { c: cols, ..g });
                spec.k = g.kh * g.kw * cols;
            }
            _ => {}
        }
        spec.aligned16 = true;
        let tile = if self.tuner.is_some() {
            let tiles: Vec<WgTile> = WGMMA_CANDIDATES.into_iter().filter(|t| t.check().is_ok()).collect();
            let b_bytes = tiles.iter().map(|&t| packed_b_len(&spec, t) as u64 * 2).max().unwrap_or(0);
            let mut arg_bytes = vec![scratch.len, b_bytes];
            arg_bytes.extend(bias.map(|x| x.len));
            arg_bytes.push(c.len);
            let sm = self.sm;
            let e = epi.map(|(e, _)| e);
            let kind = format!("gemm_wgmma|{p:?}{}", epi_key(e));
            let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |mt, nm, t| {
                gemm_wgmma_tile(mt, nm, &spec, p, e, sm, *t)
            })?;
            tiles[pick]
        } else {
            choose_wg_tile(&spec)
        };
        let packed = self.weights.wgmma_b(&b, &spec, p, tile, pad)?;
        let sm = self.sm;
        let e = epi.map(|(e, _)| e);
        let kern = self.kernel("gemm_wgmma", (&spec, p, tile, e), |mt, nm| gemm_wgmma_tile(mt, nm, &spec, p, e, sm, tile))?;
        let mut args = vec![Arg::In(scratch), Arg::In(packed)];
        args.extend(bias.map(Arg::In));
        args.push(Arg::Out(c));
        if let Some((_, extra)) = epi {
            args.extend(extra.iter().map(|b| Arg::In(*b)));
        }
        self.launch(kern, args, origin);
        if spec.c_strides[1] == spec.n {
            self.produced(c, Remake::Wgmma(spec, p, tile, e.cloned()));
        }
        Ok(())
    }
}
