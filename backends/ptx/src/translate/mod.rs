//! A lowered plan (`aoc_passes::lower`) → the GPU launch plan
//! ([`aoc_plan::gpu_plan::GpuPlan`]) and one LLVM module holding every
//! kernel the launches name.
//!
//! Each step becomes one launch of a kernel specialized for its shapes
//! (`kernels::*`), or of the generated pointwise kernel it names; a
//! `Step::Reference` (an op without a GPU kernel) becomes a host item.
//! Identical specializations share one kernel: a kernel's name is its
//! generator's name and a hash of its arguments.
//!
//! Precision: `fp32` runs GEMMs and convolutions on the CUDA cores;
//! `tf32`, `fp16` and `bf16` on tensor cores (sm_80+; activations stay f32
//! in memory and are rounded while staged, constant weights are stored in
//! the half type). Everything else computes in f32 at every precision.
//!
//! This file holds the translator (`Tr`): the entry points, the loop
//! over the steps and the dispatch of each step to its kernel, and the
//! kernel and launch bookkeeping every job shares. The jobs:
//! - `gemm`: GEMM-shaped steps (GEMM, matmul, convolution) → `gemm_simt`,
//!   `gemm_tc` or split-k; tiles chosen by cost model or `--tune`;
//! - `wgmma`: when and how a GEMM or convolution runs on sm_90a `wgmma`;
//! - `half`: the half copies of activations `wgmma` reads as A (three
//!   scratch slots after the arena, `HalfCopies`), made by a
//!   producer kernel or a conversion launch;
//! - `weights`: the weights section and the blobs derived from its
//!   weights (half copies, packed layouts, `WeightSection`);
//! - `epilogue`: which pointwise step fuses into the GEMM before it;
//! - `merge`: chains of pointwise steps merged into one kernel;
//! - `bytes`: dequantize steps dropped where their readers (attention,
//!   layer norm) take the bytes and dequantize as they load;
//! - `sparse`: 2:4 sparse layers on `mma.sp` or the dense kernels, by a
//!   cost model per layer, with the reason in the plan's notes.
//!
//! Invariants:
//! - The launch list runs the steps in plan order; buffers are the plan's.
//! - Every kernel a launch names is defined exactly once in the module.
//! - The scratch after the lowering's arena is shared by the half-copy
//!   slots and split-k's partial sums (read by the launch right after
//!   they are written); a split-k GEMM forgets every half copy.

mod bytes;
mod epilogue;
mod gemm;
mod half;
mod merge;
mod sparse;
mod weights;
mod wgmma;

use std::collections::HashMap;
use std::fmt::Debug;

use aoc_passes::lower::Lowered;
use aoc_plan::gpu_plan::{Arg, GpuItem, GpuPlan, ItemNote, Launch};
use aoc_ir::types::Scalar;
use aoc_plan::plan::{Buf, QuantElem, Space, Step};

use crate::expr::PointwiseKernel;
use crate::irtext::ModuleText;
use crate::kernels::attention::{self, AttentionSpec, AttnPrecision};
use crate::kernels::gemm_s8::{self, QConvSpec};
use crate::kernels::gemm_wgmma;
use crate::kernels::{AMode, GemmEpilogue, GemmSpec, Geometry, index, rows};
use crate::pointwise::{add_to_module, is_vectorized, work_items};
use crate::target::Sm;

pub use epilogue::affine_over;
use epilogue::{attention_quant, fusable_epilogue, gemm_output, layer_norm_quant, moved_epilogue, q_epilogue};
use gemm::GemmBufs;
use half::{HalfCopies, Remake};
use weights::WeightSection;

/// Arithmetic of GEMMs and convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "fp32" => Precision::Fp32,
            "tf32" => Precision::Tf32,
            "fp16" => Precision::Fp16,
            "bf16" => Precision::Bf16,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

/// One candidate kernel for a tuned launch.
pub struct TuneCandidate {
    /// The tile, as `aoc explain` and the cache name it (`128x64x16`).
    pub label: String,
    /// A PTX module holding only this kernel.
    pub ptx: String,
    pub kernel: String,
    pub geometry: Geometry,
    /// Bytes of each pointer argument, in order.
    pub arg_bytes: Vec<u64>,
}

/// Measures candidates on a GPU (`aoc compile --tune`). `key` names the
/// problem (target, precision, kind, shapes, strides, alignment), so an
/// implementation may cache its answer under it.
pub trait Tuner {
    /// The index of the fastest candidate.
    fn pick(&mut self, key: &str, candidates: &[TuneCandidate]) -> Result<usize, String>;
}

/// What [`translate`] produced.
pub struct Translated {
    pub plan: GpuPlan,
    /// LLVM IR text of the module with every kernel.
    pub llvm: String,
    /// The same module in parts for parallel code generation
    /// (`llvm::ir_parts_to_ptx`).
    pub llvm_parts: Vec<String>,
    /// Distinct kernels in the module.
    pub kernels: usize,
}

/// The translator: the target and precision, the module and launch list
/// being built, and the state each job keeps.
struct Tr<'a, 't> {
    sm: Sm,
    tuner: Option<&'t mut dyn Tuner>,
    precision: Precision,
    m: ModuleText,
    /// Kernel name → its launch geometry (generated once).
    made: HashMap<String, Geometry>,
    pointwise: HashMap<&'a str, &'a PointwiseKernel>,
    weights: WeightSection<'a>,
    items: Vec<GpuItem>,
    origins: Vec<String>,
    /// Notes on items for `aoc explain` (sparse or dense, and why).
    notes: Vec<ItemNote>,
    scratch: Scratch,
    /// The half copies of activations in the scratch, and the launches
    /// that can write them.
    halves: HalfCopies,
    /// While a sparse layer's GEMM stores its moved epilogue's output over
    /// its own A (`epilogue::moved_epilogue`): the product's buffer, the
    /// pointwise step and its origin, for a dense fallback that reads the
    /// f32 A to run them apart.
    unmoved: Option<(Buf, Step, String)>,
}

/// The scratch region after the lowering's arena: where it starts, and
/// the most any launch uses of it (launches run in order on one stream).
struct Scratch {
    at: u64,
    len: u64,
}

impl Scratch {
    /// Notes that a launch uses the scratch's first `len` bytes.
    fn uses(&mut self, len: u64) {
        self.len = self.len.max(len);
    }
}

/// Parts a module is split into for code generation: the same on every
/// machine (so the PTX is), enough for the cores of a GPU host.
const CODEGEN_PARTS: usize = 8;

/// FNV-1a of the text: stable across runs and platforms (unlike `std`'s
/// hasher), so the same model gives the same kernel names.
fn fnv(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn overlaps(a: &Buf, b: &Buf) -> bool {
    a.space == b.space && a.index == b.index && a.offset < b.offset + b.len && b.offset < a.offset + a.len
}

fn aligned16(bufs: &[&Buf]) -> bool {
    bufs.iter().all(|b| b.offset % 16 == 0)
}

impl<'a> Tr<'a, '_> {
    /// Generates kernel `kind` with arguments `key` once; returns its name
    /// and geometry.
    fn kernel(
        &mut self,
        kind: &str,
        key: impl Debug,
        generate: impl FnOnce(&mut ModuleText, &str) -> Result<Geometry, String>,
    ) -> Result<(String, Geometry), String> {
        let name = format!("{kind}_{:016x}", fnv(&format!("{key:?}")));
        if let Some(g) = self.made.get(&name) {
            return Ok((name, *g));
        }
        let g = generate(&mut self.m, &name)?;
        self.made.insert(name.clone(), g);
        Ok((name, g))
    }

    fn launch(&mut self, (kernel, g): (String, Geometry), args: Vec<Arg>, origin: &str) {
        self.halves.launching(&args);
        self.items.push(GpuItem::Launch(Launch { kernel, grid: g.grid, block: g.block, smem: g.smem, args }));
        self.origins.push(origin.to_string());
    }

    fn step(&mut self, step: &Step, origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>)>) -> Result<(), String> {
        // The GPU lowering keeps clips and GELU pointwise steps
        // (`LowerOptions::GPU.step_activations` is false).
        if let Step::Gemm { clip: Some(_), .. }
        | Step::Gemm { gelu: true, .. }
        | Step::Conv2d { clip: Some(_), .. }
        | Step::DepthwiseConv2d { clip: Some(_), .. } = step
        {
            return Err(format!("{origin}: a clip or GELU inside a GEMM or convolution step has no GPU kernel"));
        }
        match step {
            Step::Gemm { a, b, bias, c, m, n, k, lda, ldc, relu, .. } => {
                let spec = GemmSpec {
                    batch: 1,
                    m: *m,
                    n: *n,
                    k: *k,
                    a: AMode::Strided { batch: 0, row: *lda, col: 1 },
                    b_strides: [0, *n, 1],
                    c_strides: [0, *ldc, 1],
                    bias: bias.map(|_| 0),
                    relu: *relu,
                    aligned16: false,
                };
                let bufs = GemmBufs { a: *a, b: *b, bias: *bias, c: *c };
                if sparse::is_sparse(origin) {
                    return self.sparse_gemm(spec, bufs, origin, epi);
                }
                self.gemm(spec, bufs, true, origin, epi)
            }
            Step::MatMul { a, b, c, batch, m, n, k, a_strides, b_strides, c_strides } => {
                let spec = GemmSpec {
                    batch: *batch,
                    m: *m,
                    n: *n,
                    k: *k,
                    a: AMode::Strided { batch: a_strides[0], row: a_strides[1], col: a_strides[2] },
                    b_strides: *b_strides,
                    c_strides: *c_strides,
                    bias: None,
                    relu: false,
                    aligned16: false,
                };
                self.gemm(spec, GemmBufs { a: *a, b: *b, bias: None, c: *c }, b.space == Space::Weights, origin, epi)
            }
            Step::Conv2d { x, w, bias, y, geom, relu, .. } => {
                let g = geom.group.max(1);
                let (cg, ocg) = (geom.c / g, geom.oc / g);
                let k = geom.kh * geom.kw * cg;
                let spec = GemmSpec {
                    batch: g,
                    m: geom.n * geom.oh * geom.ow,
                    n: ocg,
                    k,
                    a: AMode::Conv(*geom),
                    b_strides: [k * ocg, ocg, 1],
                    c_strides: [ocg, geom.oc, 1],
                    bias: bias.map(|_| ocg),
                    relu: *relu,
                    aligned16: false,
                };
                let bufs = GemmBufs { a: *x, b: *w, bias: *bias, c: *y };
                if sparse::is_sparse(origin) {
                    return self.sparse_gemm(spec, bufs, origin, epi);
                }
                self.gemm(spec, bufs, true, origin, epi)
            }
            Step::WinogradConv2d { .. } => {
                Err("internal error: the GPU lowering produced a Winograd step".to_string())
            }
            Step::DepthwiseConv2d { x, w, bias, y, geom, relu, .. } => {
                let (geom, has_bias, relu) = (*geom, bias.is_some(), *relu);
                let k = self.kernel("dwconv", (&geom, has_bias, relu), |m, n| {
                    index::depthwise_conv2d(m, n, &geom, has_bias, relu)
                })?;
                let mut args = vec![Arg::In(*x), Arg::In(*w)];
                args.extend(bias.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                Ok(())
            }
            Step::ConvTranspose2d { x, w, bias, y, geom } => {
                let (geom, has_bias) = (*geom, bias.is_some());
                let k = self.kernel("convt", (&geom, has_bias), |m, n| index::conv_transpose2d(m, n, &geom, has_bias))?;
                let mut args = vec![Arg::In(*x), Arg::In(*w)];
                args.extend(bias.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                Ok(())
            }
            Step::Pool { kind, x, y, geom, ceil_mode } => {
                let (kind, geom, ceil) = (*kind, *geom, *ceil_mode);
                let k = self.kernel("pool", (kind, &geom, ceil), |m, n| rows::pool(m, n, kind, &geom, ceil))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                self.produced(*y, Remake::Pool(kind, geom, ceil));
                Ok(())
            }
            Step::Reduce { kind, x, y, outer, len, inner } => {
                let (kind, o, l, i) = (*kind, *outer, *len, *inner);
                let k = self.kernel("reduce", (kind, o, l, i), |m, n| rows::reduce(m, n, kind, o, l, i))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::Resize { mode, x, y, n, h, w, c, oh, ow } => {
                let p = (*mode, *n, *h, *w, *c, *oh, *ow);
                let k = self.kernel("resize", p, |m, name| index::resize(m, name, p.0, p.1, p.2, p.3, p.4, p.5, p.6))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::GridSample { mode, padding, align_corners, volumetric, x, grid, y, n, c, d, h, w, od, oh, ow } => {
                let p = (*mode, *padding, *align_corners, *volumetric, [*n, *c, *d, *h, *w, *od, *oh, *ow]);
                let k = self.kernel("grid_sample", p, |m, name| index::grid_sample(m, name, p.0, p.1, p.2, p.3, p.4))?;
                self.launch(k, vec![Arg::In(*x), Arg::In(*grid), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::Copy { src, dst, elem_size, shape, src_start, src_strides, dst_strides } => {
                let key = (elem_size, shape, src_start, src_strides, dst_strides);
                let k = self.kernel("copy", key, |m, n| {
                    index::copy(m, n, *elem_size, shape, *src_start, src_strides, dst_strides)
                })?;
                self.launch(k, vec![Arg::In(*src), Arg::Out(*dst)], origin);
                Ok(())
            }
            Step::Fill { dst, elem_size, bits } => {
                if *elem_size == 0 || dst.len % elem_size != 0 {
                    return Err(format!("a fill of {} bytes in {elem_size}-byte elements", dst.len));
                }
                let (es, count, bits) = (*elem_size, dst.len / elem_size, *bits);
                let k = self.kernel("fill", (es, count, bits), |m, n| index::fill(m, n, es, count, bits))?;
                self.launch(k, vec![Arg::Out(*dst)], origin);
                Ok(())
            }
            Step::Gather { data, indices, out, elem_size, outer, axis, inner, count } => {
                let p = (*elem_size, *outer, *axis, *inner, *count);
                let k = self.kernel("gather", p, |m, n| index::gather(m, n, p.0, p.1, p.2, p.3, p.4))?;
                self.launch(k, vec![Arg::In(*data), Arg::In(*indices), Arg::Out(*out), Arg::Status], origin);
                Ok(())
            }
            Step::Softmax { x, y, rows: r, cols, log } => {
                let p = (*r, *cols, *log);
                let k = self.kernel("softmax", p, |m, n| rows::softmax(m, n, p.0, p.1, p.2))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::LayerNorm { x, gamma, beta, y, rows: r, cols, epsilon } => {
                let p = (*r, *cols, epsilon.to_bits(), gamma.is_some(), beta.is_some());
                let k = self.kernel("layer_norm", p, |m, n| {
                    rows::layer_norm(m, n, p.0, p.1, f32::from_bits(p.2), p.3, p.4)
                })?;
                let mut args = vec![Arg::In(*x)];
                args.extend(gamma.map(Arg::In));
                args.extend(beta.map(Arg::In));
                args.push(Arg::Out(*y));
                self.launch(k, args, origin);
                self.produced(*y, Remake::LayerNorm(p));
                Ok(())
            }
            Step::Attention { .. } => self.attention(step, origin, None, &[None, None, None]),
            Step::QConv2d { x, w, comp, scale, shift, y, geom, q } => {
                let spec = QConvSpec { geom: *geom, q: *q };
                self.qconv2d(spec, [x, w, comp, scale, shift, y], origin, None)
            }
            // The CPU's 8-bit kernels: `LowerOptions::GPU` never asks for
            // them (its int8_elementwise is off).
            Step::QMaxPool { x, y, geom, ceil_mode, signed } => {
                let (geom, ceil, signed) = (*geom, *ceil_mode, *signed);
                // The vector form's alignment: the largest power of two up
                // to 16 dividing both offsets (bases are 256-byte aligned).
                let align = 1u64 << (x.offset | y.offset | 16).trailing_zeros();
                let k = self.kernel("qmax_pool", (&geom, ceil, signed, align), |m, n| rows::qmax_pool(m, n, &geom, ceil, signed, align))?;
                self.launch(k, vec![Arg::In(*x), Arg::Out(*y)], origin);
                Ok(())
            }
            Step::QAdd { .. }
            | Step::QAvgPool { .. }
            | Step::QGlobalAvgPool { .. }
            | Step::Quantize { .. }
            | Step::Dequantize { .. }
            | Step::QMatMul { .. } => {
                Err(format!("internal error: a {} step in a GPU plan (please report)", step.kind()))
            }
            Step::Pointwise { code, args, .. } => self.pointwise(code, args, origin),
            // Control flow: a host item between the recorded graphs (the
            // executor reads the condition back and jumps); its targets are
            // step indices until `jump_targets_to_items` maps them.
            Step::If { .. } | Step::Else { .. } | Step::EndIf {} | Step::Loop { .. } | Step::EndLoop { .. } => {
                self.halves.host_step();
                self.items.push(GpuItem::Host { step: step.clone() });
                self.origins.push(origin.to_string());
                Ok(())
            }
            Step::Reference { .. } => {
                self.halves.host_step();
                self.items.push(GpuItem::Host { step: step.clone() });
                self.origins.push(origin.to_string());
                Ok(())
            }
        }
    }

    /// An attention step (`step`), with its output's quantization as a
    /// byte output (`quant`: the epilogue, its buffer, whether y's f32
    /// stores stay) or alone, reading q, k, v as bytes where `bytes` gives
    /// their buffer and dequantization (`bytes::drop_dequantize_steps`).
    fn attention(&mut self, step: &Step, origin: &str, quant: Option<(&GemmEpilogue, Buf, bool)>, bytes: &[Option<(Buf, GemmEpilogue)>; 3]) -> Result<(), String> {
        let Step::Attention { q, k, v, mask, y, batch, heads, sq, sk, d, dv, q_strides, k_strides, v_strides, mask_strides, y_strides, scale } = step else {
            return Err("internal error: not an attention step".to_string());
        };
        // The buffers the kernel reads: the bytes in place of a dequantized f32 operand.
        let [q, k, v] = [(q, &bytes[0]), (k, &bytes[1]), (v, &bytes[2])].map(|(b, by)| by.as_ref().map_or(*b, |(bb, _)| *bb));
        let spec = AttentionSpec {
            batch: *batch,
            heads: *heads,
            sq: *sq,
            sk: *sk,
            d: *d,
            dv: *dv,
            q: *q_strides,
            k: *k_strides,
            v: *v_strides,
            y: *y_strides,
            mask: mask.map(|_| *mask_strides),
            scale: *scale,
            aligned16: aligned16(&[&q, &k, &v, y].into_iter().chain(mask.as_ref()).collect::<Vec<_>>()),
        };
        let p = match self.precision {
            _ if !self.sm.has_mma_f16() => AttnPrecision::F32,
            Precision::Fp32 | Precision::Tf32 => AttnPrecision::F32,
            Precision::Fp16 => AttnPrecision::F16,
            Precision::Bf16 => AttnPrecision::Bf16,
        };
        let sm = self.sm;
        let mut args = vec![Arg::In(q), Arg::In(k), Arg::In(v)];
        args.extend(mask.map(Arg::In));
        args.push(Arg::Out(*y));
        let dq = [0, 1, 2].map(|i| bytes[i].as_ref().map(|(_, e)| e));
        if quant.is_none() && dq.iter().all(Option::is_none) {
            let kern = self.kernel("attention", (&spec, p), |m, n| attention::attention(m, n, &spec, p, sm))?;
            self.launch(kern, args, origin);
            self.produced(*y, Remake::Attention(spec, p));
            return Ok(());
        }
        let q = quant.map(|(e, _, keep)| (e, keep));
        let kern = self.kernel("attention_q", (&spec, p, q, dq), |m, n| attention::attention_bytes(m, n, &spec, p, sm, dq, q))?;
        args.extend(quant.map(|(_, out, _)| Arg::Out(out)));
        self.launch(kern, args, origin);
        Ok(())
    }

    /// An int8 convolution `spec` on buffers `[x, w, comp, scale, shift, y]`
    /// (the plan step's), with an epilogue that stores its result in the
    /// last buffer of `epi` instead of `y` (wgmma only: see
    /// [`epilogue::q_epilogue`]).
    fn qconv2d(&mut self, spec: QConvSpec, [x, w, comp, scale, shift, y]: [&Buf; 6], origin: &str, epi: Option<&(GemmEpilogue, Vec<Buf>, Buf)>) -> Result<(), String> {
        let geom = &spec.geom;
        let need = geom.oc * geom.kh * geom.kw * geom.c.checked_div(geom.group).unwrap_or(0);
        if w.len != need {
            return Err(format!("internal error: qconv2d weights hold {} bytes, the geometry needs {need}", w.len));
        }
        // Hopper's wgmma where the channels come in 16-byte chunks of one
        // group (or do once unfolded along W), else mma.sync.
        let sm = self.sm;
        let form = q_wgmma_form(&spec, sm);
        if epi.is_some() && form.is_none() {
            return Err("internal error: an epilogue for an int8 convolution without wgmma".to_string());
        }
        if spec.q.elem != QuantElem::Int8 && form.is_none() {
            return Err(format!("internal error: an fp8 convolution for {sm}, which has no fp8 wgmma kernel for it (please report)"));
        }
        let (spec, x, packed, wg) = match form {
            Some((run, Some(cp))) => {
                let xu = self.unfold_w(&spec, x, cp, origin)?;
                let tile = gemm_wgmma::choose_q_tile(&run);
                let packed = self.weights.s8_wg_unfolded(w, &spec, cp, tile)?;
                (run, xu, packed, Some(tile))
            }
            Some((run, None)) => {
                let tile = gemm_wgmma::choose_q_tile(&run);
                (run, *x, self.weights.s8_wg_packed(w, &run, tile)?, Some(tile))
            }
            None => (spec, *x, self.weights.s8_packed(w, &spec)?, None),
        };
        let x = &x;
        let out = epi.map_or(y, |(_, _, out)| out);
        // The kernel moves x, w and y in 16-byte chunks; the arena and
        // the weights align every tensor, only a view inside one could
        // break it.
        if !aligned16(&[x, &packed, out]) {
            return Err("the integer convolution's input or output starts inside a tensor at an offset that is not a multiple of 16 bytes, which its GPU kernel cannot read; please report the model".to_string());
        }
        let kern = match wg {
            Some(tile) => {
                let e = epi.map(|(e, _, _)| e);
                self.kernel("qconv_wgmma", (spec, tile, e), |m, n| gemm_wgmma::qconv_wgmma_tile(m, n, &spec, sm, tile, e))?
            }
            None => self.kernel("qconv_s8", spec, |m, n| gemm_s8::qconv_s8(m, n, &spec, sm))?,
        };
        let mut args: Vec<Arg> = [x, &packed, comp, scale, shift].into_iter().map(|b| Arg::In(*b)).chain([Arg::Out(*out)]).collect();
        args.extend(epi.iter().flat_map(|(_, extra, _)| extra.iter().map(|b| Arg::In(*b))));
        self.launch(kern, args, origin);
        match spec.q.elem {
            QuantElem::Int8 => {}
            QuantElem::E4M3 => self.note("fp8: e4m3 x e4m3 wgmma, f32 accumulation, e4m3 result".to_string()),
            QuantElem::E4M3ToF32 => match epi {
                Some((e, extra, _)) => self.note(format!(
                    "fp8: e4m3 x e4m3 wgmma, f32 accumulation, f32 result through its fused pointwise epilogue (reading {} other tensor{}), stored as {}",
                    extra.len(),
                    if extra.len() == 1 { "" } else { "s" },
                    e.kernel.out_dtype.name()
                )),
                None => self.note("fp8: e4m3 x e4m3 wgmma, f32 accumulation, f32 result".to_string()),
            },
        }
        Ok(())
    }

    /// The input `x` of the 8-bit convolution `spec` unfolded along W into
    /// `cp` channels (`index::unfold_w`) in the scratch, by a launch made
    /// here: the buffer.
    fn unfold_w(&mut self, spec: &QConvSpec, x: &Buf, cp: u64, origin: &str) -> Result<Buf, String> {
        let g = spec.geom;
        let fill = if spec.q.elem == QuantElem::Int8 { spec.q.x_zero as u8 } else { 0 };
        let len = g.n * g.h * g.ow * cp;
        let to = Buf { space: Space::Arena, index: 0, offset: self.scratch.at, len };
        self.scratch.uses(len);
        // The unfolded input overwrites whatever half copies the scratch held.
        self.halves.scratch_overwritten();
        let kern = self.kernel("unfold_w", (g, cp, fill), |m, n| index::unfold_w(m, n, &g, cp, fill))?;
        self.launch(kern, vec![Arg::In(*x), Arg::Out(to)], origin);
        Ok(to)
    }

    fn pointwise(&mut self, code: &str, bufs: &[Buf], origin: &str) -> Result<(), String> {
        let k = *self
            .pointwise
            .get(code)
            .ok_or_else(|| format!("internal error: step names kernel `{code}`, which the lowering did not make"))?;
        if bufs.len() != k.operands.len() + 1 {
            return Err(format!("internal error: kernel `{code}` takes {} buffers", k.operands.len() + 1));
        }
        self.launch_pointwise(k.clone(), bufs, origin)
    }

    /// Launches pointwise kernel `k` (generated once) on `bufs`, its
    /// operands then its output.
    fn launch_pointwise(&mut self, k: PointwiseKernel, bufs: &[Buf], origin: &str) -> Result<(), String> {
        // The vector form needs 16-byte aligned buffers; a trailing unit
        // dimension forces the scalar form where one is not.
        let mut k = k;
        if is_vectorized(&k) && !aligned16(&bufs.iter().collect::<Vec<_>>()) {
            k.name.push_str("_unaligned");
            k.dims.push(1);
            for op in &mut k.operands {
                op.strides.push(0);
            }
        }
        let total: u64 = k.dims.iter().product();
        let items = work_items(&k);
        let name = k.name.clone();
        if !self.made.contains_key(&name) {
            add_to_module(&k, &mut self.m)?;
            let block = 256u64;
            // The kernel strides over the grid; 2^20 blocks is plenty.
            let grid = items.div_ceil(block).clamp(1, 1 << 20);
            self.made.insert(name.clone(), Geometry { grid: [grid as u32, 1, 1], block: [block as u32, 1, 1], smem: 0 });
        }
        let g = self.made[&name];
        let mut args: Vec<Arg> = bufs[..bufs.len() - 1].iter().map(|b| Arg::In(*b)).collect();
        args.push(Arg::Out(bufs[bufs.len() - 1]));
        args.push(Arg::U64(total));
        self.launch((name, g), args, origin);
        Ok(())
    }
}

/// How the 8-bit convolution `spec` runs on sm_90a's `wgmma`: the
/// convolution the kernel computes, with `None` when that is `spec` itself
/// and `Some(cp)` when it runs on the input unfolded along W into `cp`
/// channels (too few channels for 16-byte chunks, as a stem's 3); `None`
/// when it does not run on `wgmma` (`mma.sync`).
fn q_wgmma_form(spec: &QConvSpec, sm: Sm) -> Option<(QConvSpec, Option<u64>)> {
    if gemm_wgmma::supports(spec, sm) {
        return Some((*spec, None));
    }
    let cp = index::unfolded_channels(&spec.geom).filter(|_| spec.geom.group == 1)?;
    let unfolded = QConvSpec { geom: index::unfold_w_geom(&spec.geom, cp), q: spec.q };
    gemm_wgmma::supports(&unfolded, sm).then_some((unfolded, Some(cp)))
}

/// Translates `lowered` for `sm` at `precision`. Half-precision weight
/// copies are appended to `lowered.weights`.
/// Rewrites the step indices control items jump to as item indices. A
/// target is a control step or the step after one, so it starts its items
/// (nothing fuses across a control step).
fn jump_targets_to_items(items: &mut [GpuItem], item_of_step: &[Option<usize>]) -> Result<(), String> {
    let map = |t: &mut u64| -> Result<(), String> {
        let item = item_of_step
            .get(*t as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("internal error: a jump to step {t}, which has no item of its own (please report)"))?;
        *t = item as u64;
        Ok(())
    };
    for item in items.iter_mut() {
        if let GpuItem::Host {
            step: Step::If { else_at: t, .. } | Step::Else { end_at: t } | Step::Loop { end_at: t, .. } | Step::EndLoop { start_at: t, .. },
        } = item
        {
            map(t)?;
        }
    }
    Ok(())
}

pub fn translate(lowered: &mut Lowered, sm: Sm, precision: Precision) -> Result<Translated, String> {
    translate_tuned(lowered, sm, precision, None)
}

/// [`translate`], choosing each GEMM's tile by measurement when `tuner` is
/// given (otherwise by the generators' cost models).
pub fn translate_tuned(
    lowered: &mut Lowered,
    sm: Sm,
    precision: Precision,
    tuner: Option<&mut dyn Tuner>,
) -> Result<Translated, String> {
    if precision != Precision::Fp32 && !sm.has_mma_f16() {
        return Err(format!(
            "--precision {} needs tensor cores with mma.sync (sm_80 or newer); {sm} has none: use --precision fp32",
            precision.name()
        ));
    }
    let mut kernels = std::mem::take(&mut lowered.kernels);
    let mut steps = lowered.plan.steps.clone();
    let mut origins = lowered.plan.origins.clone();
    merge::merge_pointwise(&mut steps, &mut origins, &mut kernels);
    let byte_inputs = bytes::drop_dequantize_steps(&mut steps, &mut origins, &kernels.iter().map(|k| (k.name.as_str(), k)).collect());
    let scratch_at = lowered.arena_bytes.div_ceil(256) * 256;
    let mut tr = Tr {
        sm,
        tuner,
        precision,
        m: ModuleText::new(),
        made: HashMap::new(),
        pointwise: kernels.iter().map(|k| (k.name.as_str(), k)).collect(),
        weights: WeightSection::new(&mut lowered.weights),
        items: Vec::new(),
        origins: Vec::new(),
        notes: Vec::new(),
        scratch: Scratch { at: scratch_at, len: 0 },
        halves: HalfCopies::new(&steps, scratch_at),
        unmoved: None,
    };
    let has_control = steps.iter().any(Step::is_control);
    let mut i = 0;
    // The first item of each step (`None` for a step fused into the one
    // before it), for control items' targets.
    let mut item_of_step: Vec<Option<usize>> = vec![None; steps.len() + 1];
    while i < steps.len() {
        let (step, origin) = (&steps[i], &origins[i]);
        item_of_step[i] = Some(tr.items.len());
        tr.halves.at_step(i);
        if let Step::QConv2d { x, w, comp, scale, shift, y, geom, q } = step {
            // A wgmma int8 convolution takes the next pointwise step (a
            // quantized residual add, a dequantize) as its epilogue, and
            // so does an fp8 one with a float result (fp8's residual add,
            // relu and quantize); an fp8 one with an e4m3 result stores
            // its bytes.
            let spec = QConvSpec { geom: *geom, q: *q };
            let mn = (geom.n * geom.oh * geom.ow, geom.oc);
            let own = match q.elem {
                QuantElem::Int8 if q.y_signed => Some(Scalar::I8),
                QuantElem::Int8 => Some(Scalar::U8),
                QuantElem::E4M3ToF32 => Some(Scalar::F32),
                QuantElem::E4M3 => None,
            };
            // The chain of pointwise steps after it, merged, longest first.
            let fused = own.filter(|_| q_wgmma_form(&spec, sm).is_some()).and_then(|own| {
                merge::epilogue_chains(&steps[i + 1..], &[], y, &tr.pointwise).into_iter().find_map(|(k, args, len)| {
                    q_epilogue((x, y, own), mn, &k, &args, &steps[i + 1 + len..]).map(|e| (e, len))
                })
            });
            tr.qconv2d(spec, [x, w, comp, scale, shift, y], origin, fused.as_ref().map(|(e, _)| e)).map_err(|e| format!("{origin}: {e}"))?;
            i += 1 + fused.map_or(0, |(_, len)| len);
            continue;
        }
        // A layer norm whose output the next step quantizes writes the
        // bytes itself.
        if let Step::LayerNorm { x, gamma, beta, y, rows: r, cols, epsilon } = step {
            let x_bytes = byte_inputs.iter().find(|b| b.step == i).map(|b| (b.bytes, b.dq.clone()));
            let quant = if has_control { None } else { steps.get(i + 1).and_then(|next| layer_norm_quant(step, next, &steps[i + 2..], &tr.pointwise)) }
                .filter(|(_, out, _)| x_bytes.as_ref().is_none_or(|(b, _)| !overlaps(b, out)));
            if quant.is_some() || x_bytes.is_some() {
                let p = (*r, *cols, epsilon.to_bits(), gamma.is_some(), beta.is_some());
                let (dq, q) = (x_bytes.as_ref().map(|(_, e)| e), quant.as_ref().map(|(e, _, keep)| (e, *keep)));
                let kind = if q.is_some() { "layer_norm_q" } else { "layer_norm_dq" };
                let k = tr
                    .kernel(kind, (p, q, dq), |m, n| rows::layer_norm_bytes(m, n, p.0, p.1, f32::from_bits(p.2), p.3, p.4, dq, q))
                    .map_err(|e| format!("{origin}: {e}"))?;
                let mut args = vec![Arg::In(x_bytes.as_ref().map_or(*x, |(b, _)| *b))];
                args.extend(gamma.map(Arg::In));
                args.extend(beta.map(Arg::In));
                args.push(Arg::Out(*y));
                args.extend(quant.as_ref().map(|(_, out, _)| Arg::Out(*out)));
                tr.launch(k, args, origin);
                i += if quant.is_some() { 2 } else { 1 };
                continue;
            }
        }
        // So does an attention; it may read bytes for q, k, v.
        if let Step::Attention { .. } = step {
            let bytes = [0, 1, 2].map(|o| byte_inputs.iter().find(|b| b.step == i && b.operand == o).map(|b| (b.bytes, b.dq.clone())));
            let quant = if has_control { None } else { steps.get(i + 1).and_then(|next| attention_quant(step, next, &steps[i + 2..], &tr.pointwise)) }
                .filter(|(_, out, _)| bytes.iter().flatten().all(|(b, _)| !overlaps(b, out)));
            if quant.is_some() || bytes.iter().any(Option::is_some) {
                tr.attention(step, origin, quant.as_ref().map(|(e, out, keep)| (e, *out, *keep)), &bytes).map_err(|e| format!("{origin}: {e}"))?;
                i += if quant.is_some() { 2 } else { 1 };
                continue;
            }
        }
        let fused = gemm_output(step)
            .zip(steps.get(i + 1))
            .and_then(|((c, m, n), next)| fusable_epilogue(&c, m, n, next, &tr.pointwise));
        // An epilogue that writes another buffer than the product: the
        // GEMM stores there. Not in plans with control flow, where a step
        // after this one in the list may run before it again.
        // Over A only for a sparse layer: its kernel reads A's half copy;
        // should it run dense after all, `Tr::unmoved` undoes the move.
        let moved = match (&fused, gemm_output(step), steps.get(i + 1)) {
            (None, Some((c, m, n)), Some(next)) if !has_control => moved_epilogue(step, (&c, m, n), next, &steps[i + 2..], &tr.pointwise)
                .filter(|mv| !mv.over_a || sparse::is_sparse(origin))
                .map(|mv| (mv, c, next)),
            _ => None,
        };
        if let Some((mv, c, next)) = moved {
            let mut moved_step = step.clone();
            moved_step.visit_bufs(|b, write| {
                if write && *b == c {
                    *b = mv.out;
                }
            });
            if mv.over_a {
                tr.unmoved = Some((c, next.clone(), origins[i + 1].clone()));
            }
            tr.step(&moved_step, origin, Some(&(mv.epilogue, mv.extra))).map_err(|e| format!("{origin}: {e}"))?;
            tr.unmoved = None;
            i += 2;
            continue;
        }
        tr.step(step, origin, fused.as_ref()).map_err(|e| format!("{origin}: {e}"))?;
        i += if fused.is_some() { 2 } else { 1 };
    }
    item_of_step[steps.len()] = Some(tr.items.len());
    jump_targets_to_items(&mut tr.items, &item_of_step)?;
    tr.drop_unread_f32()?;
    // Kernels a launch stopped naming (a producer remade with a half copy).
    let used: std::collections::HashSet<String> = tr
        .items
        .iter()
        .filter_map(|i| match i {
            GpuItem::Launch(l) => Some(l.kernel.clone()),
            GpuItem::Host { .. } => None,
        })
        .collect();
    tr.m.retain_kernels(|k| used.contains(k));
    let n = used.len();
    if tr.scratch.len > 0 {
        lowered.arena_bytes = tr.scratch.at + tr.scratch.len;
    }
    let plan = GpuPlan { items: tr.items, origins: tr.origins, notes: tr.notes };
    let llvm_parts = tr.m.split(CODEGEN_PARTS);
    let llvm = tr.m.finish();
    lowered.kernels = kernels;
    Ok(Translated { plan, llvm, llvm_parts, kernels: n })
}
