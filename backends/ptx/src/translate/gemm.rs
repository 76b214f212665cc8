//! GEMM-shaped steps (GEMM, matmul, convolution as implicit GEMM, all one
//! `GemmSpec`) → their launches: `wgmma` where it pays (`wgmma.rs`), else
//! `gemm_tc` on tensor cores when the precision asks and the GPU has them,
//! split along k when the tiles leave the GPU idle ([`split_k`]), else
//! `gemm_simt` on the CUDA cores. The tile is the generator's cost-model
//! choice, or with `--tune` the [`Tuner`](super::Tuner)'s measurement.
//!
//! Invariants:
//! - A constant B is read in the half type at fp16/bf16 (a derived weight,
//!   `weights.rs`); an activation B stays f32.
//! - A fused epilogue's extra buffers are the launch's last arguments, in
//!   the epilogue's operand order; split-k applies bias, relu and the
//!   epilogue in its summing launch instead.

use std::fmt::Debug;

use aoc_ir::types::Scalar;
use aoc_plan::gpu_plan::Arg;
use aoc_plan::plan::{Buf, Space};

use super::{Precision, TuneCandidate, Tr, aligned16, fnv};
use crate::expr::{Binary, Expr, Operand, PointwiseKernel, Unary};
use crate::irtext::ModuleText;
use crate::kernels::gemm_simt::SimtTile;
use crate::kernels::gemm_tc::{ENOUGH_BLOCKS, TcPrecision, TcTile, choose_tile, gemm_tc_with};
use crate::kernels::{AMode, GemmEpilogue, GemmSpec, Geometry, gemm_simt};

/// The buffers of a GEMM-shaped step.
pub(super) struct GemmBufs {
    pub(super) a: Buf,
    pub(super) b: Buf,
    pub(super) bias: Option<Buf>,
    pub(super) c: Buf,
}

/// The k loop a split-k part keeps at least: shorter parts spend more on
/// their extra partial sums than they gain in parallelism.
const SPLIT_MIN_K: u64 = 512;

/// Into how many parts a tensor-core GEMM's k loop is split, when it
/// should be: a single product whose tiles leave most of the GPU idle
/// and whose k loop is long (BERT-base's second FFN GEMM at batch 1,
/// 128×768×3072: 96 blocks of 16×64 each walking 24 k-steps). Each part
/// writes its partial product to the scratch; one pointwise launch adds
/// them, with the bias, relu and epilogue. Parts are even and keep
/// [`SPLIT_MIN_K`] of k (a multiple of 64); the most of them whose
/// blocks stay under three waves of the GPU.
fn split_k(spec: &GemmSpec) -> Option<u64> {
    let plain = spec.batch == 1
        && matches!(spec.a, AMode::Strided { .. })
        && spec.c_strides[1] == spec.n
        && spec.c_strides[2] == 1
        && spec.m > 0
        && spec.n > 0;
    if !plain {
        return None;
    }
    let t = choose_tile(spec);
    let blocks = spec.m.div_ceil(t.bm as u64) * spec.n.div_ceil(t.bn as u64);
    if blocks >= ENOUGH_BLOCKS {
        return None;
    }
    (2..=8u64)
        .filter(|&s| {
            let part = spec.k / s;
            spec.k.is_multiple_of(s) && part.is_multiple_of(64) && part >= SPLIT_MIN_K && blocks * (s - 1) < 3 * ENOUGH_BLOCKS
        })
        .max()
}

/// The pointwise kernel that finishes a split-k GEMM `m × n` in `parts`:
/// the sum of the partial products (operands `0..parts`, row-major
/// `m × n`), then the bias (next operand, one per column), relu, and the
/// epilogue's expression (its further operands next, at its strides).
fn split_k_sum(parts: u64, m: u64, n: u64, bias: bool, relu: bool, epi: Option<&GemmEpilogue>) -> PointwiseKernel {
    let mut operands = vec![Operand { dtype: Scalar::F32, strides: vec![n, 1] }; parts as usize];
    if bias {
        operands.push(Operand { dtype: Scalar::F32, strides: vec![0, 1] });
    }
    let mut k = PointwiseKernel {
        name: String::new(),
        dims: vec![m, n],
        operands,
        exprs: vec![],
        result: 0,
        out_dtype: Scalar::F32,
        compute: crate::expr::Compute::F32,
    };
    let mut acc = k.push(Expr::Load(0));
    for p in 1..k.operands.len() {
        let x = k.push(Expr::Load(p));
        acc = k.push(Expr::Binary(Binary::Add, acc, x));
    }
    if relu {
        acc = k.push(Expr::Unary(Unary::Relu, acc));
    }
    if let Some(e) = epi {
        // The epilogue's operand 0 is the product; its operand `j ≥ 1`
        // becomes ours after the parts and the bias.
        let first = k.operands.len();
        for (st, op) in e.strides.iter().zip(&e.kernel.operands[1..]) {
            k.operands.push(Operand { dtype: op.dtype, strides: vec![st[1], st[2]] });
        }
        let mut at = Vec::with_capacity(e.kernel.exprs.len());
        for x in &e.kernel.exprs {
            let i = match *x {
                Expr::Load(0) => acc,
                Expr::Load(j) => k.push(Expr::Load(first + j - 1)),
                Expr::Const(c) => k.push(Expr::Const(c)),
                Expr::Int(c) => k.push(Expr::Int(c)),
                Expr::Unary(u, a) => k.push(Expr::Unary(u, at[a])),
                Expr::Binary(b, a, c) => k.push(Expr::Binary(b, at[a], at[c])),
                Expr::Select(c, a, b) => k.push(Expr::Select(at[c], at[a], at[b])),
            };
            at.push(i);
        }
        acc = at[e.kernel.result];
        k.out_dtype = e.kernel.out_dtype;
    }
    k.result = acc;
    k.name = format!("splitk_{:016x}", fnv(&format!("{:?}", (&k.dims, &k.operands, &k.exprs, k.result, k.out_dtype))));
    k
}

/// The tuning key's mark of a GEMM's epilogue: candidates are timed with
/// it (a GELU's math or a residual's reads change which tile wins).
pub(super) fn epi_key(e: Option<&GemmEpilogue>) -> String {
    e.map_or(String::new(), |e| format!("|epi{:016x}", fnv(&format!("{e:?}"))))
}

/// A tuned launch's pointer sizes: `args`, then the epilogue's operands.
pub(super) fn with_extras(args: &[u64], epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Vec<u64> {
    let mut all = args.to_vec();
    all.extend(epi.iter().flat_map(|(_, extra)| extra.iter().map(|b| b.len)));
    all
}

impl Tr<'_, '_> {
    /// A GEMM-shaped step: on tensor cores when the precision asks and the
    /// GPU has them, else on the CUDA cores; `epi` is a fused epilogue and
    /// its extra buffers.
    pub(super) fn gemm(&mut self, spec: GemmSpec, bufs: GemmBufs, b_const: bool, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let (a, b, bias, c) = (&a, &b, bias.as_ref(), &c);
        let tc = match self.precision {
            Precision::Fp32 => None,
            Precision::Tf32 => Some(TcPrecision::Tf32),
            Precision::Fp16 => Some(TcPrecision::F16),
            Precision::Bf16 => Some(TcPrecision::Bf16),
        };
        let tc = tc.filter(|_| self.sm.has_mma_f16());
        if let Some(p) = tc
            && b_const
            && let Some(wg) = self.wgmma_form(&spec, p, c, bias)
        {
            return self.gemm_wgmma(spec, wg, GemmBufs { a: *a, b: *b, bias: bias.copied(), c: *c }, origin, epi);
        }
        let (b, b_half) = match tc {
            Some(TcPrecision::F16 | TcPrecision::Bf16) if b_const => (self.weights.half(b, self.precision)?, true),
            _ => (*b, false),
        };
        if let Some(p) = tc
            && let Some(parts) = split_k(&spec)
        {
            return self.gemm_split_k(spec, p, parts, GemmBufs { a: *a, b, bias: bias.copied(), c: *c }, b_half, origin, epi);
        }
        let mut spec = spec;
        let mut bufs = vec![a, &b, c];
        bufs.extend(bias);
        spec.aligned16 = aligned16(&bufs);
        let sm = self.sm;
        let mut arg_bytes = vec![a.len, b.len];
        arg_bytes.extend(bias.map(|x| x.len));
        arg_bytes.push(c.len);
        let e = epi.map(|(e, _)| e);
        let k = match (tc, self.tuner.is_some()) {
            (Some(p), tuned) => {
                let t = if tuned {
                    let tiles: Vec<TcTile> = TcTile::ALL.into_iter().filter(|t| t.check(p).is_ok()).collect();
                    let kind = format!("gemm_tc|{p:?}|{b_half}{}", epi_key(e));
                    let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |m, n, t| {
                        gemm_tc_with(m, n, &spec, p, b_half, sm, Some(*t), e)
                    })?;
                    Some(tiles[pick])
                } else {
                    None
                };
                self.kernel("gemm_tc", (&spec, p, b_half, t, e), |m, n| gemm_tc_with(m, n, &spec, p, b_half, sm, t, e))?
            }
            (None, tuned) => {
                let t = if tuned {
                    let tiles: Vec<SimtTile> = SimtTile::CANDIDATES.into_iter().filter(|t| t.check().is_ok()).collect();
                    let kind = format!("gemm_f32{}", epi_key(e));
                    let pick = self.tune(&kind, &spec, &tiles, &with_extras(&arg_bytes, epi), |m, n, t| {
                        gemm_simt::gemm_f32_with(m, n, &spec, *t, e)
                    })?;
                    tiles[pick]
                } else {
                    gemm_simt::pick_tile(&spec)
                };
                self.kernel("gemm_f32", (&spec, t, e), |m, n| gemm_simt::gemm_f32_with(m, n, &spec, t, e))?
            }
        };
        let mut args = vec![Arg::In(*a), Arg::In(b)];
        args.extend(bias.map(|x| Arg::In(*x)));
        args.push(Arg::Out(*c));
        if let Some((_, extra)) = epi {
            args.extend(extra.iter().map(|b| Arg::In(*b)));
        }
        self.launch(k, args, origin);
        Ok(())
    }

    /// A tensor-core GEMM in `parts` slices of k ([`split_k`]): one batched
    /// launch writes each slice's product to the scratch, one pointwise
    /// launch sums them into C with the bias, relu and epilogue.
    #[allow(clippy::too_many_arguments)]
    fn gemm_split_k(
        &mut self,
        spec: GemmSpec,
        p: TcPrecision,
        parts: u64,
        bufs: GemmBufs,
        b_half: bool,
        origin: &str,
        epi: Option<&(GemmEpilogue, Vec<Buf>)>,
    ) -> Result<(), String> {
        let GemmBufs { a, b, bias, c } = bufs;
        let AMode::Strided { row, col, .. } = spec.a else {
            return Err("internal error: split-k of a convolution".to_string());
        };
        let (m, n, part) = (spec.m, spec.n, spec.k / parts);
        let slice = m * n * 4;
        let scratch = Buf { space: Space::Arena, index: 0, offset: self.scratch.at, len: parts * slice };
        self.scratch.uses(scratch.len);
        // The partial sums overwrite whatever half copies the scratch held.
        self.halves.scratch_overwritten();
        let sliced = GemmSpec {
            batch: parts,
            k: part,
            a: AMode::Strided { batch: part * col, row, col },
            b_strides: [part * spec.b_strides[1], spec.b_strides[1], spec.b_strides[2]],
            c_strides: [m * n, n, 1],
            bias: None,
            relu: false,
            aligned16: aligned16(&[&a, &b, &scratch]),
            ..spec
        };
        let sm = self.sm;
        let k = self.kernel("gemm_tc", (&sliced, p, b_half, None::<TcTile>, None::<&GemmEpilogue>), |mt, nm| {
            gemm_tc_with(mt, nm, &sliced, p, b_half, sm, None, None)
        })?;
        self.launch(k, vec![Arg::In(a), Arg::In(b), Arg::Out(scratch)], origin);
        let sum = split_k_sum(parts, m, n, bias.is_some(), spec.relu, epi.map(|(e, _)| e));
        let mut ins: Vec<Buf> = (0..parts)
            .map(|i| Buf { offset: scratch.offset + i * slice, len: slice, ..scratch })
            .collect();
        ins.extend(bias);
        if let Some((_, extra)) = epi {
            ins.extend(extra.iter().copied());
        }
        ins.push(c);
        self.launch_pointwise(sum, &ins, origin)
    }

    /// Asks the tuner which of `tiles` runs `spec` fastest; a tile the
    /// generator refuses for this problem is left out.
    pub(super) fn tune<T: Debug>(
        &mut self,
        kind: &str,
        spec: &GemmSpec,
        tiles: &[T],
        arg_bytes: &[u64],
        generate: impl Fn(&mut ModuleText, &str, &T) -> Result<Geometry, String>,
    ) -> Result<usize, String> {
        let mut cands = Vec::new();
        let mut index = Vec::new();
        for (i, t) in tiles.iter().enumerate() {
            let mut m = ModuleText::new();
            let name = format!("tune_{i}");
            let Ok(geometry) = generate(&mut m, &name, t) else { continue };
            let ptx = crate::llvm::ir_to_ptx(&m.finish(), self.sm)?;
            cands.push(TuneCandidate { label: format!("{t:?}"), ptx, kernel: name, geometry, arg_bytes: arg_bytes.to_vec() });
            index.push(i);
        }
        if cands.is_empty() {
            return Err(format!("no tile fits {spec:?}"));
        }
        let key = format!("{}|{kind}|{spec:?}", self.sm);
        let tuner = self.tuner.as_mut().expect("tune is called with a tuner");
        let pick = tuner.pick(&key, &cands)?;
        index.get(pick).copied().ok_or_else(|| format!("the tuner picked candidate {pick} of {}", cands.len()))
    }
}
