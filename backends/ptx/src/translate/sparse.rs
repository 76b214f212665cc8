//! 2:4 sparse layers (`sparse.matmul`, `sparse.conv2d`) → a sparse
//! kernel (`mma.sp`, `kernels::gemm_sp::tiled`; on sm_90a also
//! `wgmma.mma_async.sp`, `kernels::gemm_sp::wgmma`) or the dense kernels,
//! per layer: [`Tr::sparse_gemm`] decides by the rules and the cost model
//! below, launches the sparse kernel when it wins, and records in the
//! plan's notes which way the layer went and why (`aoc explain` prints
//! them).
//!
//! The lowering hands a sparse layer over as the dense GEMM-shaped step on
//! the decompressed weight (B is `k × n` f32 in the weights), so the
//! sparse form is derived here: the weight rounded to f16 is checked to
//! be 2:4 along the GEMM's k and packed for the chosen kernel's tile
//! (`gemm_sp::pack_weight`, padded to that tile); A is read through a half copy (`half.rs`),
//! as `wgmma` reads it.
//!
//! Invariants:
//! - A layer runs sparse only at `--precision fp16` (the kernel's
//!   operands are f16), on a plain row-major A (a matmul, a 1×1
//!   stride-1 unpadded convolution), with k a multiple of 32 and the
//!   weight 2:4 in the GEMM's k order; otherwise it runs dense, with the
//!   reason in its note. The result is the dense kernel's up to the order
//!   of f32 sums.
//! - Every GEMM launch of a `sparse.*` op carries a note.

use aoc_ir::types::Scalar;
use aoc_plan::gpu_plan::{Arg, ItemNote};
use aoc_plan::plan::Buf;

use super::gemm::GemmBufs;
use super::half::Remake;
use super::{Precision, Tr, aligned16};
use crate::kernels::gemm_sp::wgmma as wgsp;
use crate::kernels::gemm_sp::{SpGemmSpec, SpTile, SpWgTile, choose_sp_tile, choose_sp_wg_tile, gemm_sp_tiled, gemm_sp_wgmma};
use crate::kernels::gemm_tc::{ENOUGH_BLOCKS, TcPrecision, choose_tile};
use crate::kernels::{AMode, GemmEpilogue, GemmSpec};
use crate::target::Sm;

/// Dense-equivalent rates (TFLOP/s, 2·m·n·k per second) of the kernels
/// the choice weighs, on a full GPU, measured on an H200
/// (docs/performance.md): `gemm_tc` f16 at 4096³ 240, `wgmma` f16 at
/// 8192³ 577, the tiled `mma.sp` kernel (sm_90 PTX, 128×128×64 tiles) at
/// 4096³ and 8192³ 415 (cuBLAS dense 701–744 in that run). The same
/// ratios are assumed on sm_80/sm_86.
const DENSE_MMA_TFLOPS: f64 = 240.0;
const DENSE_WGMMA_TFLOPS: f64 = 577.0;
const SPARSE_MMA_TFLOPS: f64 = 415.0;

/// The `wgmma.sp` kernel (`gemm_sp::wgmma`, sm_90a, 128×128×128 tiles in
/// four stages), on the same footing as `DENSE_WGMMA_TFLOPS`: measured
/// 1.14–1.24× aoc's dense `wgmma` kernel in the same run on an H200
/// (`gemm_sp.py --wgmma --time`, 2026-12-04: 794–878 dense-equivalent
/// TFLOP/s at 4096³ and 8192³, dense `wgmma` 688–712 there;
/// docs/performance.md), so 1.2 × 577.
const SPARSE_WGMMA_TFLOPS: f64 = 690.0;

/// Whether the cost model may pick the `wgmma.sp` kernel. It was off
/// while its k loop overwrote the metadata registers of the `wgmma.sp` in
/// flight (wrong sums past a few k-tiles); `gemm_sp.py --wgmma` passes on
/// every tile since (docs/sparsity.md).
const WGMMA_SP_ENABLED: bool = true;

/// Bytes per second of the conversion launch that writes A's half copy
/// (about 6 bytes per element: f32 read, f16 written), and one launch's
/// overhead inside a CUDA graph.
const CONVERT_BYTES_PER_S: f64 = 3.0e12;
const LAUNCH_S: f64 = 3.0e-6;

/// A sparse kernel and its tile.
#[derive(Clone, Copy, Debug)]
enum SparseKernel {
    /// `mma.sp` (`gemm_sp::tiled`), sm_80+.
    Mma(SpTile),
    /// `wgmma.mma_async.sp` (`gemm_sp::wgmma`), sm_90a.
    Wgmma(SpWgTile),
}

impl SparseKernel {
    /// The instruction and the tile, for the notes.
    fn describe(&self) -> String {
        match self {
            SparseKernel::Mma(t) => format!("mma.sp ({}x{}x{} tiles)", t.bm, t.bn, t.bk),
            SparseKernel::Wgmma(t) => format!("wgmma.sp ({}x{}x{} tiles)", wgsp::BM, t.bn, wgsp::BK),
        }
    }
}

/// How a sparse layer runs.
enum Choice {
    Sparse(SparseKernel),
    Dense(String),
}

/// Whether a step came from a sparse op (the lowering's origin names it).
pub(super) fn is_sparse(origin: &str) -> bool {
    origin.starts_with("sparse.")
}

/// The row stride of A when the GEMM reads a plain row-major A: a strided
/// A with unit column stride, or a 1×1, stride-1, unpadded, ungrouped
/// convolution's NHWC input.
fn plain_a(spec: &GemmSpec) -> Option<u64> {
    match spec.a {
        AMode::Strided { row, col: 1, .. } => Some(row),
        AMode::Conv(g) if g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pads == [0; 4] && g.group == 1 && g.dilation == [1, 1] => {
            Some(g.c)
        }
        _ => None,
    }
}

/// Microseconds, for the notes.
fn us(s: f64) -> String {
    format!("{:.1} µs", s * 1e6)
}

impl Tr<'_, '_> {
    /// A GEMM-shaped step of a `sparse.*` op: on `mma.sp` when that is
    /// possible and the cost model says it is faster, else on the dense
    /// kernels ([`Tr::gemm`]); either way the GEMM launch gets a note.
    pub(super) fn sparse_gemm(&mut self, spec: GemmSpec, bufs: GemmBufs, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        let choice = self.sparse_choice(&spec, &bufs);
        match choice {
            Choice::Sparse(kernel) => {
                let packed = match kernel {
                    SparseKernel::Mma(t) => self.weights.sparse_packed(&bufs.b, spec.n, spec.k, &t),
                    SparseKernel::Wgmma(t) => self.weights.sparse_packed(&bufs.b, spec.n, spec.k, &t),
                };
                match packed {
                    Ok((values, meta)) => {
                        self.unmoved = None;
                        self.launch_sparse(spec, kernel, bufs, values, meta, origin, epi)
                    }
                    Err(why) => self.dense_with_note(spec, bufs, origin, epi, format!("dense: {why}")),
                }
            }
            Choice::Dense(why) => self.dense_with_note(spec, bufs, origin, epi, format!("dense: {why}")),
        }
    }

    fn dense_with_note(&mut self, spec: GemmSpec, bufs: GemmBufs, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>, note: String) -> Result<(), String> {
        if let Some((c, next, next_origin)) = self.unmoved.take() {
            // The epilogue's output overlaps A, which a dense kernel may
            // read as f32 while other blocks store: the product goes to
            // its own buffer and the pointwise step runs after it.
            self.gemm(spec, GemmBufs { c, ..bufs }, true, origin, None)?;
            self.note(note);
            return self.step(&next, &next_origin, None);
        }
        self.gemm(spec, bufs, true, origin, epi)?;
        self.note(note);
        Ok(())
    }

    /// Notes the last launch.
    pub(super) fn note(&mut self, note: String) {
        let item = self.items.len() - 1;
        self.notes.push(ItemNote { item, note });
    }

    /// The rules, then the cost model: the sparse kernel's estimated time
    /// (its tile's fill of the GPU, the conversion of A to half) against
    /// the dense kernel the step would run on.
    fn sparse_choice(&self, spec: &GemmSpec, GemmBufs { a, b, c, bias }: &GemmBufs) -> Choice {
        let bias = bias.as_ref();
        let dense = |why: &str| Choice::Dense(why.to_string());
        match self.precision {
            Precision::Fp16 => {}
            Precision::Bf16 => return dense("the mma.sp kernel runs f16; there is no bf16 form yet (compile with --precision fp16)"),
            p => return Choice::Dense(format!("--precision {} has no sparse tensor-core kernel (compile with --precision fp16)", p.name())),
        }
        if !self.sm.has_mma_f16() {
            return Choice::Dense(format!("{} has no sparse tensor cores (mma.sp needs sm_80)", self.sm));
        }
        let Some(lda) = plain_a(spec) else {
            return dense(
                "a k×k or strided convolution: its 2:4 groups run along (c, kh, kw) while the NHWC implicit GEMM walks k as (kh, kw, c); only 1×1 convolutions and matmuls run sparse",
            );
        };
        if spec.batch != 1 || spec.c_strides[2] != 1 || spec.b_strides[2] != 1 || spec.b_strides[1] != spec.n {
            return dense("its output or weight is strided");
        }
        if spec.k == 0 || !spec.k.is_multiple_of(32) {
            return Choice::Dense(format!("its reduction length {} is not a multiple of 32 (the mma.sp k-tile)", spec.k));
        }
        if spec.m == 0 || spec.n == 0 || !aligned16(&[c, b].into_iter().chain(bias).collect::<Vec<_>>()) {
            return dense("an empty or unaligned product");
        }
        let sp = SpGemmSpec { m: spec.m, n: spec.n, k: spec.k, lda: spec.k, ldc: spec.c_strides[1], bias: spec.bias.is_some(), relu: spec.relu };
        let tile = choose_sp_tile(&sp, self.sm);
        let flops = 2.0 * spec.m as f64 * spec.n as f64 * spec.k as f64;
        let fill = |blocks: u64| (blocks as f64 / ENOUGH_BLOCKS as f64).min(1.0);
        // A's half copy: the sparse kernel needs one; the dense wgmma needs
        // the same one, gemm_tc reads f32 A. It is free when a slot holds
        // it or A's producer can write it.
        let free = self.half_copy_is_free((*a, lda, spec.m, spec.k, Scalar::F16));
        let convert = if free { 0.0 } else { LAUNCH_S + 6.0 * spec.m as f64 * spec.k as f64 / CONVERT_BYTES_PER_S };
        let mma_s = LAUNCH_S + flops / (SPARSE_MMA_TFLOPS * 1e12 * fill(tile.blocks(&sp)));
        // On sm_90a also wgmma.sp; the faster of the two sparse kernels.
        let (kernel, sparse_s) = match self.sm {
            Sm::Sm90a if WGMMA_SP_ENABLED => {
                let wt = choose_sp_wg_tile(&sp);
                let wg_s = LAUNCH_S + flops / (SPARSE_WGMMA_TFLOPS * 1e12 * fill(wt.blocks(&sp)));
                if wg_s < mma_s { (SparseKernel::Wgmma(wt), wg_s) } else { (SparseKernel::Mma(tile), mma_s) }
            }
            _ => (SparseKernel::Mma(tile), mma_s),
        };
        let wgmma = self.wgmma_form(spec, TcPrecision::F16, c, bias).is_some();
        let (dense_s, sparse_s, dense_kernel) = if wgmma {
            (LAUNCH_S + flops / (DENSE_WGMMA_TFLOPS * 1e12 * fill(spec.m.div_ceil(128) * spec.n.div_ceil(128))), sparse_s, "wgmma")
        } else {
            let t = choose_tile(spec);
            let blocks = spec.m.div_ceil(t.bm as u64) * spec.n.div_ceil(t.bn as u64);
            (LAUNCH_S + flops / (DENSE_MMA_TFLOPS * 1e12 * fill(blocks)), sparse_s + convert, "mma.sync")
        };
        if sparse_s < dense_s {
            Choice::Sparse(kernel)
        } else {
            Choice::Dense(format!(
                "the cost model estimates dense {dense_kernel} at {} and {} at {}",
                us(dense_s),
                kernel.describe(),
                us(sparse_s)
            ))
        }
    }

    /// The sparse launch: A's half copy, the packed weight, the kernel.
    #[allow(clippy::too_many_arguments)]
    fn launch_sparse(
        &mut self,
        spec: GemmSpec,
        kernel: SparseKernel,
        bufs: GemmBufs,
        values: Buf,
        meta: Buf,
        origin: &str,
        epi: Option<&(GemmEpilogue, Vec<Buf>)>,
    ) -> Result<(), String> {
        let GemmBufs { a, bias, c, .. } = bufs;
        // The staged epilogue stores 16 bytes at a time: y (which may be a
        // moved epilogue's buffer) must be 16-byte aligned for it.
        let kernel = match kernel {
            SparseKernel::Wgmma(t) if t.staged && !aligned16(&[&c]) => SparseKernel::Wgmma(SpWgTile { staged: false, ..t }),
            k => k,
        };
        let lda = plain_a(&spec).ok_or("internal error: mma.sp on an A it cannot read")?;
        let x = self.half_copy((a, lda, spec.m, spec.k, Scalar::F16), origin)?;
        // A residual operand a scratch slot holds in half is read from
        // there, as the dense `wgmma` GEMMs do: its producer (a layer norm)
        // may then stop storing it as f32.
        let epi = self.halves.epilogue_from_halves(epi, Scalar::F16);
        let epi = epi.as_ref();
        let sp = SpGemmSpec { m: spec.m, n: spec.n, k: spec.k, lda: spec.k, ldc: spec.c_strides[1], bias: bias.is_some(), relu: spec.relu };
        let sm = self.sm;
        let e = epi.map(|(e, _)| e);
        let kern = match kernel {
            SparseKernel::Mma(tile) => self.kernel("gemm_sp", (&sp, tile, e), |m, n| gemm_sp_tiled(m, n, &sp, tile, sm, e))?,
            SparseKernel::Wgmma(tile) => self.kernel("gemm_sp_wgmma", (&sp, tile, e), |m, n| gemm_sp_wgmma(m, n, &sp, tile, sm, e))?,
        };
        let mut args = vec![Arg::In(x), Arg::In(values), Arg::In(meta)];
        args.extend(bias.map(Arg::In));
        args.push(Arg::Out(c));
        if let Some((_, extra)) = epi {
            args.extend(extra.iter().map(|b| Arg::In(*b)));
        }
        self.launch(kern, args, origin);
        if let SparseKernel::Wgmma(tile) = kernel
            && sp.ldc == sp.n
        {
            self.produced(c, Remake::SparseWgmma(sp, tile, e.cloned()));
        }
        let flops = 2.0 * spec.m as f64 * spec.n as f64 * spec.k as f64;
        let how = match kernel {
            SparseKernel::Mma(tile) => format!(
                "mma.sp, {}x{}x{} tiles in {} stages{}",
                tile.bm,
                tile.bn,
                tile.bk,
                tile.stages,
                if tile.min_blocks > 1 { format!(", {} blocks per SM", tile.min_blocks) } else { String::new() },
            ),
            SparseKernel::Wgmma(tile) => format!("wgmma.sp, {}x{}x{} tiles in {} stages", wgsp::BM, tile.bn, wgsp::BK, tile.stages),
        };
        self.note(format!("sparse: 2:4 {how} ({:.2} dense GFLOP)", flops / 1e9));
        Ok(())
    }
}
