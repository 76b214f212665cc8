//! The int8 form of the wgmma kernel: an NHWC implicit-GEMM convolution
//! (a GEMM is a 1×1 one) with `wgmma.mma_async` m64nNk32 `.s32.{u8|s8}.s8`
//! and `gemm_s8`'s requantizing epilogue, for sm_90a (the plan's
//! `Step::QConv2d`, where `gemm_s8` runs the Ampere `mma.sync`).
//!
//! Semantics, ABI (`x, w, comp, scale, shift, y`) and alignment are
//! [`gemm_s8::qconv_s8`]'s (see its module doc), with these differences:
//! - one group, `c` a multiple of 16 (each 16-byte chunk of A is 16
//!   channels of one filter tap, copied by `cp.async`; a chunk in the
//!   padding is `x_zero` bytes, stored by the thread);
//! - `w` is packed by [`pack_weights_wg`] for the kernel's tile
//!   ([`choose_q_tile`]): the OHWI rows (`n` = output channel, K-major
//!   bytes) in the parent's block layout of 128-byte swizzled rows,
//!   [`packed_weights_wg_len`] bytes;
//! - launch: grid `[⌈M/128⌉·⌈oc/bn⌉, 1, 1]`, block `[256, 1, 1]`, the
//!   tile's dynamic shared memory.
//!
//! Epilogue: accumulator register `4q + 2h + e` of a thread (lane `l` of
//! warp `w`) is row `16w + l/4 + 8h`, column `8q + 2(l%4) + e` of the
//! block tile; each is requantized with its channel's `comp`, `scale`,
//! `shift` ([`gemm_epilogue::requantize`], bit for bit the CPU's) into a
//! byte of a staging tile in shared memory; the threads then read it back
//! in runs of 16 bytes of one row and store each run as one 16-byte store
//! where `oc` is a multiple of 16 (else byte by byte).
//!
//! With a [`GemmEpilogue`] (the pointwise step that read the convolution's
//! output: a quantized residual add, a dequantize), the requantized value
//! goes through it (as f32, the way that step loaded it) and its result is
//! stored, in its own type (8-bit or f32), at `y`, which is then that
//! step's output; the epilogue's operands `e1 … ek` follow `y` and must be
//! 16-byte aligned (so a run's 16 bytes of a residual load as one). An
//! epilogue of the requantized byte alone that stores a byte (a GELU or
//! sigmoid between two int8 layers) is tabulated per block: 256 entries in
//! shared memory, one evaluation per thread, then a lookup per element. An
//! int8 result the epilogue turns into f32 with `oc` even skips the staging
//! tile: each pair of columns goes through the epilogue from the
//! accumulators and out as one 8-byte store ([`Gen::store_direct`]).
//!
//! fp8 (`q.elem` = [`QuantElem::E4M3`]): the same kernel on e4m3 bytes,
//! `wgmma` m64nNk32 `.f32.e4m3.e4m3` (the same k32 byte layout), f32
//! accumulators promoted every k-tile (the parent's module doc), tiles at
//! most [`FP8_MAX_BN`] wide; the requantization is
//! [`gemm_epilogue::requantize_e4m3`] (`fma(acc, scale, shift)`, the clamp,
//! `cvt.rn.satfinite.e4m3x2.f32`); `comp` is passed and not read, padding
//! is byte 0 (+0.0). An epilogue reads the e4m3 result as its value.
//! With [`QuantElem::E4M3ToF32`] there is no requantization: each thread
//! stores its accumulators' `fma(acc, scale, shift)`, clamped where
//! bounded, as f32 at `y` (row-major `M × oc`), straight from registers.
//! With an epilogue (a residual add reading the block input's e4m3 bytes,
//! then a relu and the quantization of the next layer's input: fp8's
//! residual placement) those f32 values are staged instead of bytes, in
//! runs of 4 (16 bytes, as a run of 16 bytes), and go through the
//! epilogue as the 8-bit runs do: the run's residual elements load as one
//! vector, its results store as one (4 e4m3 bytes or 16 bytes of f32).

use super::{ALIGN, Gen, Operands, THREADS, WgTile, check_spec, choose_wg_tile, packed_offset, tiles, write};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::gemm_s8::QConvSpec;
use crate::kernels::{AMode, GemmEpilogue, GemmSpec, Geometry, gemm_epilogue};
use crate::pointwise::{define_epilogue_vals, epilogue_operand_types};
use aoc_ir::types::Scalar;
use crate::target::Sm;
use aoc_plan::plan::{QuantConv, QuantElem};

/// The GEMM `spec` computes: `M × oc × K` over its NHWC input.
fn gemm(spec: &QConvSpec) -> GemmSpec {
    let g = spec.geom;
    GemmSpec {
        batch: 1,
        m: g.n * g.oh * g.ow,
        n: g.oc,
        k: g.kh * g.kw * g.c,
        a: AMode::Conv(g),
        b_strides: [0, 0, 0],
        c_strides: [0, g.oc, 1],
        bias: None,
        relu: false,
        aligned16: true,
    }
}

/// Whether [`qconv_wgmma`] computes `spec` on `sm`: sm_90a, one group,
/// channels in whole 16-byte chunks (int8 or e4m3 alike).
pub fn supports(spec: &QConvSpec, sm: Sm) -> bool {
    let g = &spec.geom;
    sm == Sm::Sm90a && g.group == 1 && g.c > 0 && g.c.is_multiple_of(16)
}

// One table entry per thread (`Gen::epilogue_table`).
const _: () = assert!(THREADS == 256);

/// Widest tile of the fp8 kernel: its promoted k loop holds two sets of
/// `bn/2` f32 accumulators per thread (the sums and the scratch), 192
/// registers at 192.
pub const FP8_MAX_BN: u32 = 192;

/// The tile of [`qconv_wgmma`] for `spec`: the half kernel's choice for
/// the same GEMM; for fp8 at most [`FP8_MAX_BN`] wide, in four stages
/// (one block per multiprocessor: its registers allow no second).
pub fn choose_q_tile(spec: &QConvSpec) -> WgTile {
    let t = choose_wg_tile(&gemm(spec));
    match spec.q.elem {
        QuantElem::Int8 => t,
        // Five stages where the k loop can promote pairs of k-tiles (it
        // keeps one stage fewer of copies ahead), unless four let two
        // blocks share a multiprocessor; else four.
        QuantElem::E4M3 | QuantElem::E4M3ToF32 => {
            let four = WgTile { bn: t.bn.min(FP8_MAX_BN), stages: 4 };
            let stages = if even_k_tiles(spec) && !four.pairs() { 5 } else { 4 };
            WgTile { stages, ..four }
        }
    }
}

/// The k-tiles of `spec`'s k loop.
fn k_tiles(spec: &QConvSpec) -> u64 {
    gemm(spec).k.div_ceil(Operands::Quant(spec.q, Scalar::I8).bk() as u64)
}

/// Whether `spec`'s k-tiles come in pairs.
fn even_k_tiles(spec: &QConvSpec) -> bool {
    k_tiles(spec).is_multiple_of(2)
}

/// The k loop [`qconv_wgmma_tile`] takes: an fp8 kernel promotes pairs of
/// k-tiles where they pair and the tile has five stages or more (on the
/// H200, 8192³ in 0.853 ms against 0.897 promoting every tile; in four
/// stages pairs are slower, 1.12 ms: docs/performance.md), else every
/// k-tile; int8 never promotes.
pub fn choose_kloop(spec: &QConvSpec, tile: WgTile) -> KLoop {
    if spec.q.elem != QuantElem::Int8 && even_k_tiles(spec) && tile.stages >= 5 {
        KLoop::Pairs
    } else {
        KLoop::Lockstep
    }
}

/// Bytes of the weights packed by [`pack_weights_wg`] for `tile`.
pub fn packed_weights_wg_len(spec: &QConvSpec, tile: WgTile) -> usize {
    let p = Operands::Quant(spec.q, Scalar::I8);
    let (kt, nt) = tiles(&gemm(spec), tile, p.bk());
    (kt * nt * (p.bk() * tile.bn) as u64) as usize
}

/// The OHWI weights (`oc` rows of `K = kh·kw·c` bytes) in the layout the
/// kernel of `tile` reads, zero-padded to whole tiles. Panics unless
/// `ohwi` holds `oc·K` bytes (the caller's validation).
pub fn pack_weights_wg(spec: &QConvSpec, tile: WgTile, ohwi: &[i8]) -> Vec<i8> {
    let (gs, p) = (gemm(spec), Operands::Quant(spec.q, Scalar::I8));
    assert_eq!(ohwi.len() as u64, gs.n * gs.k, "pack_weights_wg: weight length");
    let mut out = vec![0i8; packed_weights_wg_len(spec, tile)];
    if gs.k > 0 {
        for (o, row) in ohwi.chunks_exact(gs.k as usize).enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                out[packed_offset(&gs, tile, p, kk as u64, o as u64)] = v;
            }
        }
    }
    out
}

/// Appends kernel `name` computing `spec` on `wgmma` (tile from
/// [`choose_q_tile`]); see the module doc.
pub fn qconv_wgmma(m: &mut ModuleText, name: &str, spec: &QConvSpec, sm: Sm) -> Result<Geometry, String> {
    qconv_wgmma_tile(m, name, spec, sm, choose_q_tile(spec), None)
}

/// The LLVM type and bytes of a stored output element of type `s` (the
/// kernel stores 8-bit integers, e4m3 bytes and f32).
pub fn stored_type(s: Scalar) -> Option<(&'static str, u32)> {
    match s {
        Scalar::I8 | Scalar::U8 | Scalar::F8E4M3FN => Some(("i8", 1)),
        Scalar::F32 => Some(("float", 4)),
        _ => None,
    }
}

/// [`qconv_wgmma`] with an explicit tile (for tests; the weights must be
/// packed for the same tile) and an optional epilogue (module doc).
pub fn qconv_wgmma_tile(
    m: &mut ModuleText,
    name: &str,
    spec: &QConvSpec,
    sm: Sm,
    tile: WgTile,
    epi: Option<&GemmEpilogue>,
) -> Result<Geometry, String> {
    qconv_wgmma_with(m, name, spec, sm, tile, epi, choose_kloop(spec, tile))
}

/// How often the fp8 kernel's k loop promotes its tensor-core sums into
/// f32 (the parent's module doc, "fp8"; int8 and half kernels have one
/// loop and take [`KLoop::Lockstep`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KLoop {
    /// After every k-tile (128 products): one `wait_group 0` drain of the
    /// tensor cores per k-tile.
    Lockstep,
    /// After every second k-tile (256 products), the second tile's
    /// `wgmma` chained on the first's in flight: half the drains, with
    /// one stage fewer of copies ahead. Needs an even number of k-tiles
    /// and at least four stages.
    Pairs,
}

impl KLoop {
    /// k-tiles per promotion.
    pub fn tiles(self) -> u32 {
        match self {
            KLoop::Lockstep => 1,
            KLoop::Pairs => 2,
        }
    }
}

/// [`qconv_wgmma_tile`] with the k loop `kloop` (`Pairs` for fp8 only).
pub fn qconv_wgmma_with(
    m: &mut ModuleText,
    name: &str,
    spec: &QConvSpec,
    sm: Sm,
    tile: WgTile,
    epi: Option<&GemmEpilogue>,
    kloop: KLoop,
) -> Result<Geometry, String> {
    if kloop == KLoop::Pairs && spec.q.elem == QuantElem::Int8 {
        return Err("only the fp8 kernel's promoted k loop promotes in pairs of k-tiles".to_string());
    }
    check_entry_name(name)?;
    if !supports(spec, sm) {
        return Err(format!(
            "the wgmma int8/fp8 convolution needs sm_90a, one group and channels in multiples of 16 (target {sm}, {} channels in {} groups)",
            spec.geom.c, spec.geom.group
        ));
    }
    tile.check()?;
    if kloop == KLoop::Pairs && (!even_k_tiles(spec) || tile.stages < 4) {
        return Err(format!(
            "promoting pairs of k-tiles needs an even number of them and four stages, found {} and {}",
            k_tiles(spec),
            tile.stages
        ));
    }
    if spec.q.elem != QuantElem::Int8 && tile.bn > FP8_MAX_BN {
        return Err(format!(
            "the fp8 wgmma convolution takes tiles at most {FP8_MAX_BN} wide (its promoted accumulators), found {}",
            tile.bn
        ));
    }
    let gs = gemm(spec);
    let (row, conv) = check_spec(&gs)?;
    for d in [
        "declare float @llvm.fma.f32(float, float, float)",
        "declare float @llvm.roundeven.f32(float)",
        "declare i64 @llvm.fptosi.sat.i64.f32(float)",
    ] {
        m.declare(d);
    }
    let mut sig: Vec<String> = (0..6)
        .map(|i| {
            let ro = if i < 5 { " readonly" } else { "" };
            format!("ptr addrspace(1) noalias{ro} %p{i}")
        })
        .collect();
    let epi_fn = match epi {
        None => None,
        Some(e) => {
            let own = match spec.q.elem {
                QuantElem::E4M3ToF32 => Scalar::F32,
                QuantElem::E4M3 => Scalar::F8E4M3FN,
                QuantElem::Int8 if spec.q.y_signed => Scalar::I8,
                QuantElem::Int8 => Scalar::U8,
            };
            if e.kernel.operands.first().map(|o| o.dtype) != Some(own) || stored_type(e.kernel.out_dtype).is_none() {
                return Err(format!(
                    "a quantized convolution's epilogue reads its {} output and stores 8-bit integers, e4m3 or f32",
                    own.name()
                ));
            }
            gemm_epilogue::check(&gs, e)?;
            if spec.q.elem == QuantElem::E4M3ToF32 && ALIGN + 128 * staging_pitch(tile.bn, true) > tile.smem_bytes() {
                return Err(format!("the fp8 convolution's f32 staging tile does not fit tile {tile:?}'s shared memory"));
            }
            // One helper taking the operands as values: the stores pass
            // them, and the table of an epilogue without operands calls
            // it as `gemm_epilogue::value_as` calls any helper.
            let f = format!("{name}_epi");
            define_epilogue_vals(m, &f, e)?;
            sig.extend((1..=e.strides.len()).map(|k| format!("ptr addrspace(1) noalias readonly align 16 %e{k}")));
            Some((f, e.strides.clone()))
        }
    };
    let epi_ops = epi.map(epilogue_operand_types).transpose()?.unwrap_or_default();
    let out = match (spec.q.elem, epi) {
        (QuantElem::E4M3ToF32, None) => Scalar::F32,
        (_, None) => Scalar::I8,
        (_, Some(e)) => e.kernel.out_dtype,
    };
    write(m, name, &sig, &gs, Operands::Quant(spec.q, out), tile, (row, conv), (epi_fn, epi_ops), None, kloop)
}

/// The elements of a run of the staging tile: 16 bytes, which are 16
/// 8-bit values or, for [`QuantElem::E4M3ToF32`] (staged only with an
/// epilogue), 4 f32 values.
pub(super) fn run_width(q: QuantConv) -> u32 {
    if q.elem == QuantElem::E4M3ToF32 { 4 } else { 16 }
}

/// The byte pitch of the staging tile's rows of `bn` elements (f32 or
/// 8-bit): padding so that the rows one store instruction covers hit
/// distinct banks (8 rows of 2 bytes a thread: 16 bytes; f32, 4 rows of
/// 32 bytes per half-warp: 32).
fn staging_pitch(bn: u32, f32: bool) -> u32 {
    if f32 { 4 * bn + 32 } else { bn + 16 }
}

/// The staging tile: its byte offset in shared memory, its row pitch,
/// whether it holds f32 values rather than bytes, and its runs' elements
/// ([`run_width`]).
struct Staging {
    tile: String,
    pitch: u32,
    f32: bool,
    width: u32,
}

impl Gen<'_> {
    /// Requantization, the epilogue and the stores (module doc); `out` is
    /// the stored type. The block's requantized bytes (or, for an f32
    /// result with an epilogue, its f32 values) go through shared memory
    /// (the ring is free after the k loop): each thread writes its
    /// accumulators' values there, then reads back runs of 16 bytes of one
    /// row, so the epilogue's operands are read and the output written in
    /// whole pieces where `oc` allows.
    pub(super) fn requantize(&mut self, q: QuantConv, out: Scalar) {
        let f32 = q.elem == QuantElem::E4M3ToF32;
        if f32 && self.epi.is_none() {
            return self.store_f32(q);
        }
        if q.elem == QuantElem::Int8 && out == Scalar::F32 && self.s.n.is_multiple_of(2) {
            return self.store_direct(q);
        }
        let (t, s) = (self.t, self.s);
        let (r0, c0) = self.fragment_origin();
        let oc = s.n;
        let pitch = staging_pitch(t.bn, f32);
        let base = self.v("ptrtoint ptr addrspace(3) @aoc_wg_smem to i32");
        let abs = self.v(format!("add i32 {base}, {}", ALIGN - 1));
        let abs = self.v(format!("and i32 {abs}, {}", !(ALIGN - 1) as i32));
        let tile = self.v(format!("sub i32 {abs}, {base}"));
        let st = Staging { tile: tile.clone(), pitch, f32, width: run_width(q) };
        // The epilogue's narrow operands (a quantized residual) of this
        // thread's first run, loaded now so that their latency passes under
        // the requantization and the staging ([`Gen::store_runs`] loads
        // each next run's while it computes one).
        let whole = oc.is_multiple_of(st.width as u64);
        let at0 = self.run_at(&st, "0");
        let first = self.run_vectors(&at0, st.width, whole, true);
        let ahead = self.hold_vectors(&first, st.width);
        // Every warpgroup is past its last wgmma reading the ring.
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        for j in 0..t.bn / 8 {
            // Columns c0 + 8j + e (e = 0, 1) of tile rows r0 and r0 + 8.
            let mut cols = Vec::new();
            for e in 0..2 {
                let col = self.v(format!("add i32 {}, {}", self.bn0, 8 * j + e));
                let col = self.v(format!("add i32 {col}, {c0}"));
                let ok = self.v(format!("icmp ult i32 {col}, {oc}"));
                cols.push(self.column_params(&col, &ok));
            }
            for h in 0..2u32 {
                let r = self.v(format!("add i32 {r0}, {}", 8 * h));
                if f32 {
                    // Two f32 values, one 8-byte store.
                    let mut v = "poison".to_string();
                    for (e, [_, sc, sh]) in cols.iter().enumerate() {
                        let ap = self.acc_ptr(4 * j + 2 * h + e as u32);
                        let a = self.v(format!("load float, ptr {ap}, align 4"));
                        let y = self.f32_result(&q, &a, sc, sh);
                        v = self.v(format!("insertelement <2 x float> {v}, float {y}, i32 {e}"));
                    }
                    let at = self.v(format!("mul i32 {r}, {pitch}"));
                    let cb = self.v(format!("add i32 {c0}, {}", 8 * j));
                    let cb = self.v(format!("shl i32 {cb}, 2"));
                    let at = self.v(format!("add i32 {at}, {cb}"));
                    let at = self.v(format!("add i32 {at}, {tile}"));
                    let p = self.smem(&at);
                    self.ins(format!("store <2 x float> {v}, ptr addrspace(3) {p}, align 8"));
                    continue;
                }
                let mut ys = Vec::new();
                for (e, [c, sc, sh]) in cols.iter().enumerate() {
                    let ap = self.acc_ptr(4 * j + 2 * h + e as u32);
                    let y = match q.elem {
                        QuantElem::Int8 => {
                            let a = self.v(format!("load i32, ptr {ap}, align 4"));
                            let y = gemm_epilogue::requantize(&mut self.b, &q, &a, [c, sc, sh]);
                            self.v(format!("trunc i32 {y} to i16"))
                        }
                        QuantElem::E4M3 | QuantElem::E4M3ToF32 => {
                            let a = self.v(format!("load float, ptr {ap}, align 4"));
                            let y = gemm_epilogue::requantize_e4m3(&mut self.b, &q, &a, [sc, sh]);
                            self.v(format!("zext i8 {y} to i16"))
                        }
                    };
                    ys.push(y);
                }
                let lo = self.v(format!("and i16 {}, 255", ys[0]));
                let hi = self.v(format!("shl i16 {}, 8", ys[1]));
                let w = self.v(format!("or i16 {lo}, {hi}"));
                let at = self.v(format!("mul i32 {r}, {pitch}"));
                let at = self.v(format!("add i32 {at}, {c0}"));
                let at = self.v(format!("add i32 {at}, {}", 8 * j));
                let at = self.v(format!("add i32 {at}, {tile}"));
                let p = self.smem(&at);
                self.ins(format!("store i16 {w}, ptr addrspace(3) {p}, align 2"));
            }
        }
        let lut = if f32 { None } else { self.epilogue_table(q, out, &tile, pitch) };
        self.ins("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)");
        self.store_runs(q, out, &st, lut.as_deref(), &ahead);
    }

    /// [`QuantElem::E4M3ToF32`]'s value of accumulator `a` of a column
    /// with `scale` and `shift`: `fma(a, scale, shift)`, clamped where the
    /// bounds are finite (as `f32::clamp`: a NaN stays NaN).
    fn f32_result(&mut self, q: &QuantConv, a: &str, scale: &str, shift: &str) -> String {
        let bound = |b: i32| (b != i32::MIN && b != i32::MAX).then(|| crate::irtext::f32_lit(b as f32));
        let mut v = self.v(format!("call float @llvm.fma.f32(float {a}, float {scale}, float {shift})"));
        if let Some(lo) = bound(q.y_min) {
            let lt = self.v(format!("fcmp olt float {v}, {lo}"));
            v = self.v(format!("select i1 {lt}, float {lo}, float {v}"));
        }
        if let Some(hi) = bound(q.y_max) {
            let gt = self.v(format!("fcmp ogt float {v}, {hi}"));
            v = self.v(format!("select i1 {gt}, float {hi}, float {v}"));
        }
        v
    }

    /// An epilogue of the requantized byte alone (no other operand) that
    /// stores a byte is a function of 256 values: thread `t` of the block
    /// evaluates it once for the byte `t` into a table in shared memory
    /// after the staging tile, and [`Gen::store_runs`] looks each element
    /// up (a GELU or sigmoid between two int8 layers costs one shared load
    /// per element instead of some 50 instructions). The same epilogue
    /// function computes both ways, so the stored bytes are the same.
    /// Returns the table's byte offset, or `None` where the epilogue does
    /// not qualify or the ring has no room for tile and table.
    fn epilogue_table(&mut self, q: QuantConv, out: Scalar, tile: &str, pitch: u32) -> Option<String> {
        let (_, strides) = self.epi.as_ref()?;
        if !strides.is_empty() || q.elem != QuantElem::Int8 || !matches!(out, Scalar::I8 | Scalar::U8) {
            return None;
        }
        if ALIGN + 128 * pitch + 256 > self.t.smem_bytes() {
            return None;
        }
        let at = self.v(format!("add i32 {tile}, {}", 128 * pitch));
        let byte = self.v(format!("trunc i32 {} to i8", self.tid));
        let conv = if q.y_signed { "sitofp" } else { "uitofp" };
        let f = self.v(format!("{conv} i8 {byte} to float"));
        let y = gemm_epilogue::value_as(&mut self.b, self.epi.as_ref(), &f, &[], 0, 0, "i8");
        let p = self.v(format!("add i32 {at}, {}", self.tid));
        let sp = self.smem(&p);
        self.ins(format!("store i8 {y}, ptr addrspace(3) {sp}, align 1"));
        Some(at)
    }

    /// [`QuantElem::E4M3ToF32`]'s stores (module doc): accumulator
    /// register `4q + 2h + e` of lane `l` of warp `w` is row `16w + l/4 +
    /// 8h`, column `8q + 2(l%4) + e` of the block tile.
    fn store_f32(&mut self, q: QuantConv) {
        let (t, s) = (self.t, self.s);
        let oc = s.n;
        let (r0, c0) = self.fragment_origin();
        let r0 = self.v(format!("add i32 {r0}, {}", self.bm0));
        let c0 = self.v(format!("add i32 {c0}, {}", self.bn0));
        for j in 0..t.bn / 8 {
            for e in 0..2u32 {
                let col = self.v(format!("add i32 {c0}, {}", 8 * j + e));
                let cok = self.v(format!("icmp ult i32 {col}, {oc}"));
                let c64 = self.v(format!("zext i32 {col} to i64"));
                let o = self.v(format!("select i1 {cok}, i64 {c64}, i64 0"));
                let mut vals = Vec::new();
                for p in ["%p3", "%p4"] {
                    let a = self.v(format!("getelementptr float, ptr addrspace(1) {p}, i64 {o}"));
                    vals.push(self.v(format!("load float, ptr addrspace(1) {a}, align 4")));
                }
                for h in 0..2u32 {
                    let row = self.v(format!("add i32 {r0}, {}", 8 * h));
                    let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
                    let ok = self.v(format!("and i1 {rok}, {cok}"));
                    let ap = self.acc_ptr(4 * j + 2 * h + e);
                    let a = self.v(format!("load float, ptr {ap}, align 4"));
                    let v = self.f32_result(&q, &a, &vals[0], &vals[1]);
                    let (l_st, l_end) = (self.b.label("st"), self.b.label("st.end"));
                    self.b.cond_br(&ok, &l_st, &l_end);
                    self.b.place(&l_st);
                    let r64 = self.v(format!("zext i32 {row} to i64"));
                    let off = self.v(format!("mul i64 {r64}, {oc}"));
                    let off = self.v(format!("add i64 {off}, {c64}"));
                    let p = self.v(format!("getelementptr float, ptr addrspace(1) %p5, i64 {off}"));
                    self.ins(format!("store float {v}, ptr addrspace(1) {p}, align 4"));
                    self.b.br(&l_end);
                    self.b.place(&l_end);
                }
            }
        }
    }

    /// An int8 result that its epilogue turns into f32 (a dequantize, a
    /// residual add in float), with `oc` even: straight from the
    /// accumulators, as the f16 kernel stores. Accumulator register
    /// `4q + 2h + e` of lane `l` of warp `w` is row `16w + l/4 + 8h`,
    /// column `8q + 2(l%4) + e` of the block tile; each pair of columns is
    /// requantized (bit for bit the CPU's), goes through the epilogue with
    /// its operands' elements loaded here, and is stored as one 8-byte
    /// pair. No staging tile, barrier or second pass: four times the bytes
    /// of an 8-bit result go out while the requantization of the next
    /// pairs is computed.
    fn store_direct(&mut self, q: QuantConv) {
        let (t, s) = (self.t, self.s);
        let oc = s.n;
        let (f, strides) = self.epi.clone().expect("an int8 kernel stores f32 through an epilogue");
        let ops = self.epi_ops.clone();
        let conv = if q.y_signed { "sitofp" } else { "uitofp" };
        let (r0, c0) = self.fragment_origin();
        let r0 = self.v(format!("add i32 {r0}, {}", self.bm0));
        let c0 = self.v(format!("add i32 {c0}, {}", self.bn0));
        for j in 0..t.bn / 8 {
            let col = self.v(format!("add i32 {c0}, {}", 8 * j));
            // The pair's requantization parameters (with oc even, both
            // columns are in range where the first is).
            let cok = self.v(format!("icmp ult i32 {col}, {oc}"));
            let col1 = self.v(format!("add i32 {col}, 1"));
            let params = [self.column_params(&col, &cok), self.column_params(&col1, &cok)];
            for h in 0..2u32 {
                let row = self.v(format!("add i32 {r0}, {}", 8 * h));
                let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
                let ok = self.v(format!("and i1 {rok}, {cok}"));
                let (l_st, l_end) = (self.b.label("st"), self.b.label("st.end"));
                self.b.cond_br(&ok, &l_st, &l_end);
                self.b.place(&l_st);
                let base = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &row, &col);
                // An operand laid out along the row with even rows reads
                // the pair as one vector (aligned: its offset is even; NVPTX
                // still loads a pair of bytes as two).
                let pairs: Vec<Option<String>> = strides
                    .iter()
                    .zip(&ops)
                    .zip(&base)
                    .enumerate()
                    .map(|(k, ((&[_, s1, s2], &(ty, size)), o))| {
                        (s2 == 1 && s1.is_multiple_of(2)).then(|| {
                            let p = self.v(format!("getelementptr {ty}, ptr addrspace(1) %e{}, i64 {o}", k + 1));
                            self.v(format!("load <2 x {ty}>, ptr addrspace(1) {p}, align {}", 2 * size))
                        })
                    })
                    .collect();
                let mut ys = Vec::new();
                for (e, vals) in params.iter().enumerate() {
                    let ap = self.acc_ptr(4 * j + 2 * h + e as u32);
                    let a = self.v(format!("load i32, ptr {ap}, align 4"));
                    let [c, sc, sh] = vals;
                    let y = gemm_epilogue::requantize(&mut self.b, &q, &a, [c, sc, sh]);
                    let byte = self.v(format!("trunc i32 {y} to i8"));
                    let x = self.v(format!("{conv} i8 {byte} to float"));
                    let mut args = vec![format!("float {x}")];
                    for (k, ((&[_, _, s2], &(ty, size)), o)) in strides.iter().zip(&ops).zip(&base).enumerate() {
                        let v = match &pairs[k] {
                            Some(v) => self.v(format!("extractelement <2 x {ty}> {v}, i32 {e}")),
                            None => {
                                let off = self.v(format!("add i64 {o}, {}", (e as u64).wrapping_mul(s2) as i64));
                                let p = self.v(format!("getelementptr {ty}, ptr addrspace(1) %e{}, i64 {off}", k + 1));
                                self.v(format!("load {ty}, ptr addrspace(1) {p}, align {size}"))
                            }
                        };
                        args.push(format!("{ty} {v}"));
                    }
                    ys.push(self.v(format!("call float @{f}({})", args.join(", "))));
                }
                let r64 = self.v(format!("zext i32 {row} to i64"));
                let off = self.v(format!("mul i64 {r64}, {oc}"));
                let c64 = self.v(format!("zext i32 {col} to i64"));
                let off = self.v(format!("add i64 {off}, {c64}"));
                let p = self.v(format!("getelementptr float, ptr addrspace(1) %p5, i64 {off}"));
                let st = gemm_epilogue::c_store(&mut self.b, &ys, &p);
                self.ins(st);
                self.b.br(&l_end);
                self.b.place(&l_end);
            }
        }
    }

    /// This thread's first accumulator row and column in the block tile
    /// (i32): register `4q + 2h + e` of lane `l` of warp `w` is row `16w +
    /// l/4 + 8h`, column `8q + 2(l%4) + e`.
    fn fragment_origin(&mut self) -> (String, String) {
        let tid = self.tid.clone();
        let lane = self.v(format!("and i32 {tid}, 31"));
        let warp = self.v(format!("lshr i32 {tid}, 5"));
        let r0 = self.v(format!("mul i32 {warp}, 16"));
        let g = self.v(format!("lshr i32 {lane}, 2"));
        let r0 = self.v(format!("add i32 {r0}, {g}"));
        let q4 = self.v(format!("and i32 {lane}, 3"));
        let c0 = self.v(format!("shl i32 {q4}, 1"));
        (r0, c0)
    }

    /// Output column `col`'s requantization `[comp, scale, shift]` (i32,
    /// f32, f32), read at column 0 where `ok` is false (past the edge).
    fn column_params(&mut self, col: &str, ok: &str) -> [String; 3] {
        let c64 = self.v(format!("zext i32 {col} to i64"));
        let o = self.v(format!("select i1 {ok}, i64 {c64}, i64 0"));
        [("%p2", "i32"), ("%p3", "float"), ("%p4", "float")].map(|(p, ty)| {
            let a = self.v(format!("getelementptr {ty}, ptr addrspace(1) {p}, i64 {o}"));
            self.v(format!("load {ty}, ptr addrspace(1) {a}, align 4"))
        })
    }

    /// Where this thread's run `c` of 16 bytes of the staging tile `st`
    /// lies (runs are numbered `c·256 + tid` row-major over the tile's
    /// rows of `bn / width` runs).
    fn run_at(&mut self, st: &Staging, c: &str) -> RunAt {
        let (t, s) = (self.t, self.s);
        let per_row = t.bn / st.width;
        let idx = self.v(format!("mul i32 {c}, {THREADS}"));
        let idx = self.v(format!("add i32 {idx}, {}", self.tid));
        let r = self.v(format!("udiv i32 {idx}, {per_row}"));
        let u = self.v(format!("urem i32 {idx}, {per_row}"));
        let u16 = self.v(format!("shl i32 {u}, 4"));
        let uc = self.v(format!("mul i32 {u}, {}", st.width));
        let row = self.v(format!("add i32 {}, {r}", self.bm0));
        let col = self.v(format!("add i32 {}, {uc}", self.bn0));
        let rok = self.v(format!("icmp ult i32 {row}, {}", s.m));
        let cok = self.v(format!("icmp ult i32 {col}, {}", s.n));
        let ok = self.v(format!("and i1 {rok}, {cok}"));
        RunAt { r, u16, row, col, ok }
    }

    /// The epilogue operands of run `at` that load as one vector of
    /// `width` elements (`whole` runs, the operand contiguous along a row
    /// in runs aligned as the vector) and are `narrow` (at most 2 bytes an
    /// element: those loaded a run ahead, cheap in registers) or, without
    /// `narrow`, wider; loaded here (at element 0 where the run is out of
    /// range, so the load is always valid). `None` for the others.
    fn run_vectors(&mut self, at: &RunAt, width: u32, whole: bool, narrow: bool) -> Vec<Option<String>> {
        let Some((_, strides)) = self.epi.clone() else {
            return Vec::new();
        };
        let base = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &at.row, &at.col);
        let ops = self.epi_ops.clone();
        strides
            .iter()
            .zip(ops)
            .zip(base)
            .enumerate()
            .map(|(k, ((&[_, s1, s2], (ty, size)), o))| {
                // The run starts `width` elements apart along the row, so
                // its alignment is the vector's (up to 16) where rows are.
                let align = (u64::from(width) * size).min(16);
                let vector = whole && s2 == 1 && (s1 * size).is_multiple_of(align) && (size <= 2) == narrow;
                vector.then(|| {
                    let o = self.v(format!("select i1 {}, i64 {o}, i64 0", at.ok));
                    let p = self.v(format!("getelementptr {ty}, ptr addrspace(1) %e{}, i64 {o}", k + 1));
                    self.v(format!("load <{width} x {ty}>, ptr addrspace(1) {p}, align {align}"))
                })
            })
            .collect()
    }

    /// `vecs`, the vectors of [`Gen::run_vectors`], stored in their
    /// operands' entry-block slots (registers after `mem2reg`): the slots
    /// and vector types.
    fn hold_vectors(&mut self, vecs: &[Option<String>], width: u32) -> Vec<Option<(String, String)>> {
        let ops = self.epi_ops.clone();
        let slots = self.ahead.clone();
        vecs.iter()
            .zip(ops)
            .zip(slots)
            .map(|((v, (ty, _)), slot)| {
                v.as_ref().map(|v| {
                    let vt = format!("<{width} x {ty}>");
                    self.ins(format!("store {vt} {v}, ptr {slot}, align 16"));
                    (slot, vt)
                })
            })
            .collect()
    }

    /// The second half of [`Gen::requantize`]: a loop over this thread's
    /// runs of 16 bytes of the staging tile `st` (16 bytes or 4 f32
    /// values), each through the epilogue and stored: as one vector where
    /// `oc` is a multiple of the run's width (a run is then all in range
    /// or all out, and aligned in y), else element by element. The
    /// epilogue's narrow operands come from `ahead` (the slots of
    /// [`Gen::hold_vectors`], filled with the first run's before the
    /// requantization; each iteration loads the next run's into them
    /// before computing its own), the other contiguous ones from a vector
    /// load per run, the rest element by element.
    fn store_runs(&mut self, q: QuantConv, out: Scalar, st: &Staging, lut: Option<&str>, ahead: &[Option<(String, String)>]) {
        let (t, s) = (self.t, self.s);
        let (oty, osize) = stored_type(out).expect("checked by qconv_wgmma_tile");
        let oc = s.n;
        let width = st.width;
        let whole = oc.is_multiple_of(u64::from(width));
        let conv = if q.y_signed { "sitofp" } else { "uitofp" };
        let e4m3 = q.elem == QuantElem::E4M3;
        let strides = self.epi.as_ref().map(|(_, st)| st.clone()).unwrap_or_default();
        let ops = self.epi_ops.clone();
        let cp = self.v("alloca i32, align 4");
        self.ins(format!("store i32 0, ptr {cp}, align 4"));
        let (l_loop, l_body, l_next, l_end) =
            (self.b.label("run"), self.b.label("run.body"), self.b.label("run.next"), self.b.label("run.end"));
        self.b.br(&l_loop);
        self.b.place(&l_loop);
        let c = self.v(format!("load i32, ptr {cp}, align 4"));
        // This run's narrow operands, then the next run's loads (a run past
        // the last is out of range: its loads read element 0).
        let mut vecs: Vec<Option<String>> = ahead
            .iter()
            .map(|h| h.as_ref().map(|(slot, vt)| self.v(format!("load {vt}, ptr {slot}, align 16"))))
            .collect();
        if ahead.iter().any(Option::is_some) {
            let nc = self.v(format!("add i32 {c}, 1"));
            let atn = self.run_at(st, &nc);
            let next = self.run_vectors(&atn, width, whole, true);
            for (h, v) in ahead.iter().zip(next) {
                if let (Some((slot, vt)), Some(v)) = (h, v) {
                    self.ins(format!("store {vt} {v}, ptr {slot}, align 16"));
                }
            }
        }
        let at = self.run_at(st, &c);
        self.b.cond_br(&at.ok, &l_body, &l_next);
        self.b.place(&l_body);
        if lut.is_none() {
            // The wide operands' vectors of this run (the narrow ones came
            // a run ahead).
            let wide = self.run_vectors(&at, width, whole, false);
            vecs.resize(wide.len(), None);
            for (v, w) in vecs.iter_mut().zip(wide) {
                if w.is_some() {
                    *v = w;
                }
            }
        }
        let sat = self.v(format!("mul i32 {}, {}", at.r, st.pitch));
        let sat = self.v(format!("add i32 {sat}, {}", at.u16));
        let sat = self.v(format!("add i32 {sat}, {}", st.tile));
        let sp = self.smem(&sat);
        let sty = if st.f32 { "float" } else { "i8" };
        let run = self.v(format!("load <{width} x {sty}>, ptr addrspace(3) {sp}, align 16"));
        let r64 = self.v(format!("zext i32 {} to i64", at.row));
        let o = self.v(format!("mul i64 {r64}, {oc}"));
        let c64 = self.v(format!("zext i32 {} to i64", at.col));
        let o = self.v(format!("add i64 {o}, {c64}"));
        let ebase = gemm_epilogue::bases(&mut self.b, self.epi.as_ref(), None, &at.row, &at.col);
        let mut vals = Vec::new();
        for e in 0..width {
            let guard = (!whole).then(|| {
                let ce = self.v(format!("add i32 {}, {e}", at.col));
                self.v(format!("icmp ult i32 {ce}, {oc}"))
            });
            let (l_el, l_el_end) = (self.b.label("el"), self.b.label("el.end"));
            if let Some(g) = &guard {
                self.b.cond_br(g, &l_el, &l_el_end);
                self.b.place(&l_el);
            }
            let b = self.v(format!("extractelement <{width} x {sty}> {run}, i32 {e}"));
            let y = match (self.epi.clone(), lut) {
                (None, _) => b,
                (Some(_), Some(at)) => {
                    let i = self.v(format!("zext i8 {b} to i32"));
                    let p = self.v(format!("add i32 {at}, {i}"));
                    let sp = self.smem(&p);
                    self.v(format!("load i8, ptr addrspace(3) {sp}, align 1"))
                }
                (Some((f, _)), None) => {
                    let x = if st.f32 {
                        b
                    } else if e4m3 {
                        crate::irtext::e4m3_to_f32(&mut self.b, &b)
                    } else {
                        self.v(format!("{conv} i8 {b} to float"))
                    };
                    let mut args = vec![format!("float {x}")];
                    for (k, ((&[_, _, s2], &(ty, size)), base)) in strides.iter().zip(&ops).zip(&ebase).enumerate() {
                        let v = match &vecs[k] {
                            Some(v) => self.v(format!("extractelement <{width} x {ty}> {v}, i32 {e}")),
                            None => {
                                // Where the element exists (the code
                                // runs), in range; elsewhere dead.
                                let d = (e as u64).wrapping_mul(s2) as i64;
                                let off = self.v(format!("add i64 {base}, {d}"));
                                let p = self.v(format!("getelementptr {ty}, ptr addrspace(1) %e{}, i64 {off}", k + 1));
                                self.v(format!("load {ty}, ptr addrspace(1) {p}, align {size}"))
                            }
                        };
                        args.push(format!("{ty} {v}"));
                    }
                    self.v(format!("call {oty} @{f}({})", args.join(", ")))
                }
            };
            if guard.is_some() {
                let oe = self.v(format!("add i64 {o}, {e}"));
                let p = self.v(format!("getelementptr {oty}, ptr addrspace(1) %p5, i64 {oe}"));
                self.ins(format!("store {oty} {y}, ptr addrspace(1) {p}, align {osize}"));
                self.b.br(&l_el_end);
                self.b.place(&l_el_end);
            } else {
                vals.push(y);
            }
        }
        if whole {
            // At most 16 bytes a store: a run of 16 bytes, four 16-byte
            // pieces of f32, 4 bytes of an f32 run's e4m3 results.
            let per = (16 / osize as usize).min(width as usize);
            let align = per * osize as usize;
            for (k, part) in vals.chunks(per).enumerate() {
                let mut v = "poison".to_string();
                for (i, y) in part.iter().enumerate() {
                    v = self.v(format!("insertelement <{per} x {oty}> {v}, {oty} {y}, i32 {i}"));
                }
                let ok = self.v(format!("add i64 {o}, {}", k * per));
                let p = self.v(format!("getelementptr {oty}, ptr addrspace(1) %p5, i64 {ok}"));
                self.ins(format!("store <{per} x {oty}> {v}, ptr addrspace(1) {p}, align {align}"));
            }
        }
        self.b.br(&l_next);
        self.b.place(&l_next);
        let nc = self.v(format!("add i32 {c}, 1"));
        self.ins(format!("store i32 {nc}, ptr {cp}, align 4"));
        // 128 rows of bn / width runs over 256 threads.
        let more = self.v(format!("icmp ult i32 {nc}, {}", t.bn / (2 * width)));
        self.b.cond_br(&more, &l_loop, &l_end);
        self.b.place(&l_end);
    }
}

/// Where a thread's run of 16 staged bytes lies ([`Gen::run_at`]): its
/// tile row and byte column in the staging tile, its output row and
/// column, and whether it is in range.
struct RunAt {
    r: String,
    u16: String,
    row: String,
    col: String,
    ok: String,
}
