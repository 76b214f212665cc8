//! One plan step at a time: resolves a step's buffers to slices of the
//! four spaces and calls its kernel.
//!
//! Safety argument: `Session::from_artifact` checked that every buffer lies
//! inside its space and that no step writes the weights or an input;
//! [`check_disjoint`] (also run at load) checks that a step other than a
//! pointwise kernel never writes bytes it reads, so the `&mut` slice of an
//! output never aliases a `&` slice of an input. Typed slices need their
//! element alignment, which [`f32s`] and friends check.

use rayon::prelude::*;

use crate::jit::{KernelFn, LoadedKernel, MATH};
use crate::kernels::act::Post;
use crate::kernels::{self, GemmOptions, PackedBRef};
use crate::plan::{Buf, QuantElem, Space, Step};

/// Base pointers of the spaces of one run.
pub(crate) struct Spaces {
    pub arena: *mut u8,
    pub weights: *const u8,
    pub inputs: Vec<*mut u8>,
    pub outputs: Vec<*mut u8>,
}

// SAFETY: the pointers are only dereferenced for the buffers of the plan,
// which the kernels (or their threads) access as documented above.
unsafe impl Sync for Spaces {}
unsafe impl Send for Spaces {}

impl Spaces {
    fn ptr(&self, b: &Buf) -> *mut u8 {
        let base = match b.space {
            Space::Arena => self.arena,
            Space::Weights => self.weights as *mut u8,
            Space::Input => self.inputs[b.index as usize],
            Space::Output => self.outputs[b.index as usize],
        };
        // SAFETY: offset checked against the space's size at load.
        unsafe { base.add(b.offset as usize) }
    }
}

/// Errors if a non-pointwise step writes bytes it also reads.
pub(crate) fn check_disjoint(step: &mut Step) -> Result<(), String> {
    // A pointwise kernel may write in place; `EndLoop` stages what it
    // copies (a yield may be any carried value).
    if matches!(step, Step::Pointwise { .. }) || step.is_control() {
        return Ok(());
    }
    let mut all: Vec<(Buf, bool)> = Vec::new();
    step.visit_bufs(|b, w| all.push((*b, w)));
    for (i, (a, wa)) in all.iter().enumerate() {
        for (b, wb) in &all[i + 1..] {
            let same = a.space == b.space && a.index == b.index;
            let overlap = a.offset < b.offset + b.len && b.offset < a.offset + a.len;
            if (*wa || *wb) && same && overlap && a.len > 0 && b.len > 0 {
                return Err("an output that overlaps another of its buffers".to_string());
            }
        }
    }
    Ok(())
}

impl Spaces {
    pub(crate) fn bytes<'a>(&self, b: &Buf) -> &'a [u8] {
        // SAFETY: see the module doc.
        unsafe { std::slice::from_raw_parts(self.ptr(b), b.len as usize) }
    }

    pub(crate) fn bytes_mut<'a>(&self, b: &Buf) -> &'a mut [u8] {
        // SAFETY: see the module doc.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(b), b.len as usize) }
    }
}

fn bytes<'a>(sp: &Spaces, b: &Buf) -> &'a [u8] {
    sp.bytes(b)
}

fn bytes_mut<'a>(sp: &Spaces, b: &Buf) -> &'a mut [u8] {
    sp.bytes_mut(b)
}

fn f32s<'a>(sp: &Spaces, b: &Buf) -> Result<&'a [f32], String> {
    let p = sp.ptr(b);
    if !(p as usize).is_multiple_of(4) {
        return Err(format!("buffer at offset {} is not aligned for f32", b.offset));
    }
    // SAFETY: aligned, inside its space (module doc).
    Ok(unsafe { std::slice::from_raw_parts(p as *const f32, b.len as usize / 4) })
}

fn f32s_mut<'a>(sp: &Spaces, b: &Buf) -> Result<&'a mut [f32], String> {
    let p = sp.ptr(b);
    if !(p as usize).is_multiple_of(4) {
        return Err(format!("buffer at offset {} is not aligned for f32", b.offset));
    }
    // SAFETY: aligned, inside its space, not aliased by the step's inputs.
    Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut f32, b.len as usize / 4) })
}

fn i32s<'a>(sp: &Spaces, b: &Buf) -> Result<&'a [i32], String> {
    let p = sp.ptr(b);
    if !(p as usize).is_multiple_of(4) {
        return Err(format!("buffer at offset {} is not aligned for i32", b.offset));
    }
    // SAFETY: aligned, inside its space (module doc).
    Ok(unsafe { std::slice::from_raw_parts(p as *const i32, b.len as usize / 4) })
}

fn i8s<'a>(sp: &Spaces, b: &Buf) -> &'a [i8] {
    // SAFETY: inside its space (module doc); i8 has no alignment.
    unsafe { std::slice::from_raw_parts(sp.ptr(b) as *const i8, b.len as usize) }
}

fn opt_f32s<'a>(sp: &Spaces, b: &Option<Buf>) -> Result<Option<&'a [f32]>, String> {
    b.as_ref().map(|b| f32s(sp, b)).transpose()
}

fn us(v: u64) -> usize {
    v as usize
}

/// For each step, how many `Gemm` steps starting there run as one
/// [`kernels::gemm_shared_a`] product: 2 or more at the head of a run of
/// consecutive `Gemm`s with the same A (buffer, `m`, `k`, `lda`), weights
/// for B, and outputs that overlap neither A nor each other (so no member
/// reads another's result); 0 for the other members; 1 elsewhere.
pub(crate) fn shared_a_runs(steps: &[Step]) -> Vec<usize> {
    let gemm_a = |s: &Step| match s {
        Step::Gemm { a, b, m, k, lda, .. } if b.space == Space::Weights => Some((*a, *m, *k, *lda)),
        _ => None,
    };
    let out = |s: &Step| match s {
        Step::Gemm { c, .. } => Some(*c),
        _ => None,
    };
    let overlap = |x: &Buf, y: &Buf| {
        x.space == y.space && x.index == y.index && x.offset < y.offset + y.len && y.offset < x.offset + x.len
    };
    let mut runs = vec![1; steps.len()];
    let mut i = 0;
    while i < steps.len() {
        let (Some(head), Some(c0)) = (gemm_a(&steps[i]), out(&steps[i])) else {
            i += 1;
            continue;
        };
        let mut outs = vec![c0];
        let mut j = i + 1;
        while j < steps.len() && gemm_a(&steps[j]) == Some(head) {
            let Some(c) = out(&steps[j]) else { break };
            if overlap(&c, &head.0) || outs.iter().any(|o| overlap(o, &c) || overlap(o, &head.0)) {
                break;
            }
            outs.push(c);
            j += 1;
        }
        if j - i > 1 {
            runs[i] = j - i;
            runs[i + 1..j].fill(0);
        }
        i = j;
    }
    runs
}

/// Runs `Gemm` steps with one A as one [`kernels::gemm_shared_a`]
/// product (see [`shared_a_runs`]).
pub(crate) fn gemm_shared_a(steps: &[Step], sp: &Spaces) -> Result<(), String> {
    let e = |e: kernels::GemmError| e.to_string();
    let Some(Step::Gemm { a, m, k, lda, .. }) = steps.first() else {
        return Err("internal error: a shared-A run does not start with a gemm".to_string());
    };
    let mut parts = Vec::with_capacity(steps.len());
    for s in steps {
        let Step::Gemm { b, bias, c, n, ldc, relu, clip, gelu, .. } = s else {
            return Err("internal error: a shared-A run holds a step that is not a gemm".to_string());
        };
        parts.push(kernels::SharedAPart {
            n: us(*n),
            b: PackedBRef::new(us(*k), us(*n), f32s(sp, b)?).map_err(e)?,
            c: f32s_mut(sp, c)?,
            ldc: us(*ldc),
            opts: GemmOptions {
                bias: opt_f32s(sp, bias)?,
                relu: *relu,
                clip: *clip,
                gelu: *gelu,
                threads: rayon::current_num_threads(),
                ..GemmOptions::default()
            },
        });
    }
    kernels::gemm_shared_a(us(*m), us(*k), f32s(sp, a)?, us(*lda), &mut parts).map_err(e)
}

/// Runs every step kind but `Pointwise` and `Reference`.
pub(crate) fn run(step: &Step, sp: &Spaces) -> Result<(), String> {
    let e = |e: kernels::GemmError| e.to_string();
    match step {
        // A GEMM is the run of one on its A (as `kernels::gemm` is).
        Step::Gemm { .. } => gemm_shared_a(std::slice::from_ref(step), sp),
        Step::MatMul { a, b, c, batch, m, n, k, a_strides, b_strides, c_strides } => {
            kernels::batched::batched_matmul(
                us(*batch),
                us(*m),
                us(*n),
                us(*k),
                f32s(sp, a)?,
                *a_strides,
                f32s(sp, b)?,
                *b_strides,
                f32s_mut(sp, c)?,
                *c_strides,
            )
            .map_err(e)
        }
        Step::Conv2d { x, w, bias, y, geom, relu, clip } => {
            let post = Post { relu: *relu, clip: *clip };
            kernels::conv::conv2d(geom, f32s(sp, x)?, f32s(sp, w)?, opt_f32s(sp, bias)?, post, f32s_mut(sp, y)?).map_err(e)
        }
        Step::DepthwiseConv2d { x, w, bias, y, geom, relu, clip } => {
            let post = Post { relu: *relu, clip: *clip };
            kernels::conv::depthwise_conv2d(geom, f32s(sp, x)?, f32s(sp, w)?, opt_f32s(sp, bias)?, post, f32s_mut(sp, y)?)
                .map_err(e)
        }
        Step::WinogradConv2d { x, u, bias, y, geom, tile, relu } => kernels::winograd::winograd_conv2d(
            geom,
            us(*tile),
            f32s(sp, x)?,
            f32s(sp, u)?,
            opt_f32s(sp, bias)?,
            *relu,
            f32s_mut(sp, y)?,
        )
        .map_err(e),
        Step::ConvTranspose2d { x, w, bias, y, geom } => {
            kernels::conv::conv_transpose2d(geom, f32s(sp, x)?, f32s(sp, w)?, opt_f32s(sp, bias)?, f32s_mut(sp, y)?).map_err(e)
        }
        Step::Pool { kind, x, y, geom, ceil_mode } => {
            kernels::pool::pool2d(*kind, geom, *ceil_mode, f32s(sp, x)?, f32s_mut(sp, y)?).map_err(e)
        }
        Step::QMaxPool { x, y, geom, ceil_mode, signed } => {
            kernels::qelem::qmax_pool2d(geom, *ceil_mode, *signed, bytes(sp, x), bytes_mut(sp, y)).map_err(e)
        }
        Step::QAvgPool { x, y, geom, ceil_mode, count_include_pad, q } => {
            kernels::qelem::qavg_pool2d(geom, *ceil_mode, *count_include_pad, q, bytes(sp, x), bytes_mut(sp, y)).map_err(e)
        }
        Step::QGlobalAvgPool { x, y, n, hw, c, q } => {
            kernels::qelem::qglobal_avg_pool(q, [us(*n), us(*hw), us(*c)], bytes(sp, x), bytes_mut(sp, y)).map_err(e)
        }
        Step::QMatMul { a, b, y, batch, m, n, k, a_strides, b_strides, y_strides, q } => kernels::qmatmul::qmatmul(
            [us(*batch), us(*m), us(*n), us(*k)],
            bytes(sp, a),
            a_strides.map(us),
            bytes(sp, b),
            b_strides.map(us),
            bytes_mut(sp, y),
            y_strides.map(us),
            q,
        )
        .map_err(e),
        Step::Quantize { x, y, n, q } => kernels::qelem::quantize(q, us(*n), f32s(sp, x)?, bytes_mut(sp, y)).map_err(e),
        Step::Dequantize { x, y, n, q } => kernels::qelem::dequantize(q, us(*n), bytes(sp, x), f32s_mut(sp, y)?).map_err(e),
        Step::QAdd { a, b, y, n, b_len, q } => {
            kernels::qelem::qadd(q, us(*n), us(*b_len), bytes(sp, a), bytes(sp, b), bytes_mut(sp, y)).map_err(e)
        }
        Step::Reduce { kind, x, y, outer, len, inner } => {
            kernels::pool::reduce_middle(*kind, us(*outer), us(*len), us(*inner), f32s(sp, x)?, f32s_mut(sp, y)?).map_err(e)
        }
        Step::Resize { mode, x, y, n, h, w, c, oh, ow } => kernels::resize::resize(
            *mode,
            us(*n),
            us(*h),
            us(*w),
            us(*c),
            us(*oh),
            us(*ow),
            f32s(sp, x)?,
            f32s_mut(sp, y)?,
        )
        .map_err(e),
        Step::GridSample { mode, padding, align_corners, volumetric, x, grid, y, n, c, d, h, w, od, oh, ow } => kernels::grid_sample::grid_sample(
            *mode,
            *padding,
            *align_corners,
            *volumetric,
            [us(*n), us(*c), us(*d), us(*h), us(*w), us(*od), us(*oh), us(*ow)],
            f32s(sp, x)?,
            f32s(sp, grid)?,
            f32s_mut(sp, y)?,
        )
        .map_err(e),
        Step::Copy { src, dst, elem_size, shape, src_start, src_strides, dst_strides } => kernels::copy::strided_copy(
            us(*elem_size),
            shape,
            bytes(sp, src),
            *src_start,
            src_strides,
            bytes_mut(sp, dst),
            dst_strides,
        )
        .map_err(e),
        Step::Fill { dst, elem_size, bits } => kernels::copy::fill(us(*elem_size), *bits, bytes_mut(sp, dst)).map_err(e),
        Step::Gather { data, indices, out, elem_size, outer, axis, inner, count } => kernels::copy::gather(
            us(*elem_size),
            us(*outer),
            us(*axis),
            us(*inner),
            us(*count),
            bytes(sp, data),
            bytes(sp, indices),
            bytes_mut(sp, out),
        )
        .map_err(e),
        Step::Softmax { x, y, rows, cols, log } => {
            kernels::norm::softmax(us(*rows), us(*cols), *log, f32s(sp, x)?, f32s_mut(sp, y)?).map_err(e)
        }
        Step::LayerNorm { x, gamma, beta, y, rows, cols, epsilon } => kernels::norm::layer_norm(
            us(*rows),
            us(*cols),
            *epsilon,
            f32s(sp, x)?,
            opt_f32s(sp, gamma)?,
            opt_f32s(sp, beta)?,
            f32s_mut(sp, y)?,
        )
        .map_err(e),
        Step::Attention {
            q, k, v, mask, y, batch, heads, sq, sk, d, dv, q_strides, k_strides, v_strides, mask_strides, y_strides, scale,
        } => {
            let st = |s: &[u64; 4]| s.map(us);
            let shape = kernels::attention::AttentionShape {
                batch: us(*batch),
                heads: us(*heads),
                sq: us(*sq),
                sk: us(*sk),
                d: us(*d),
                dv: us(*dv),
                q: st(q_strides),
                k: st(k_strides),
                v: st(v_strides),
                mask: st(mask_strides),
                y: st(y_strides),
                scale: *scale,
            };
            let (q, k, v, mask) = (f32s(sp, q)?, f32s(sp, k)?, f32s(sp, v)?, opt_f32s(sp, mask)?);
            kernels::attention::attention(&shape, q, k, v, mask, f32s_mut(sp, y)?).map_err(e)
        }
        Step::QConv2d { q, .. } if q.elem != QuantElem::Int8 => {
            Err("internal error: an fp8 convolution step in a CPU plan (please report)".to_string())
        }
        Step::QConv2d { x, w, comp, scale, shift, y, geom, q } => {
            let (w, comp, scale, shift) = (i8s(sp, w), i32s(sp, comp)?, f32s(sp, scale)?, f32s(sp, shift)?);
            kernels::qconv::qconv2d(geom, q, bytes(sp, x), w, None, comp, scale, shift, bytes_mut(sp, y)).map_err(e)
        }
        Step::Pointwise { .. }
        | Step::Reference { .. }
        | Step::If { .. }
        | Step::Else { .. }
        | Step::EndIf {}
        | Step::Loop { .. }
        | Step::EndLoop { .. } => Err("internal error: dispatched to the wrong runner".to_string()),
    }
}

/// `Step::QConv2d` with its weights packed at load.
pub(crate) fn qconv2d_packed(step: &Step, packed: &kernels::qconv::PackedQConv, sp: &Spaces) -> Result<(), String> {
    let Step::QConv2d { x, w, comp, scale, shift, y, geom, q } = step else {
        return Err("internal error: packed weights for a step that is no integer convolution".to_string());
    };
    if q.elem != QuantElem::Int8 {
        return Err("internal error: an fp8 convolution step in a CPU plan (please report)".to_string());
    }
    let (w, comp, scale, shift) = (i8s(sp, w), i32s(sp, comp)?, f32s(sp, scale)?, f32s(sp, shift)?);
    kernels::qconv::qconv2d(geom, q, bytes(sp, x), w, Some(packed), comp, scale, shift, bytes_mut(sp, y))
        .map_err(|e| e.to_string())
}

/// Pointer array of a kernel's arguments, shared by the worker threads.
struct Args(Vec<*mut u8>);
// SAFETY: threads write disjoint rows of the output (see `pointwise`).
unsafe impl Sync for Args {}

impl Args {
    fn base(&self) -> *const *mut u8 {
        self.0.as_ptr()
    }
}

/// Runs a generated kernel over `rows` rows, split across the pool's
/// threads in chunks of at least ~16 K elements.
pub(crate) fn pointwise(k: &LoadedKernel, args: &[Buf], rows: u64, sp: &Spaces) -> Result<(), String> {
    let ptrs = Args(args.iter().map(|b| sp.ptr(b)).collect());
    let f: KernelFn = k.entry();
    let out_len = args.last().map_or(0, |b| b.len);
    let per_row = (out_len / rows.max(1)).max(1);
    let chunk = (16384 / per_row).max(1);
    let chunks = rows.div_ceil(chunk);
    let threads = rayon::current_num_threads() as u64;
    let call = |r0: u64, r1: u64| {
        // SAFETY: the kernel reads its operands and writes rows r0..r1 of
        // its output, all inside the buffers validated at load.
        unsafe { f(ptrs.base(), r0, r1, &MATH) }
    };
    if chunks <= 1 || threads <= 1 {
        call(0, rows);
    } else {
        (0..chunks).into_par_iter().for_each(|c| {
            let r0 = c * chunk;
            call(r0, (r0 + chunk).min(rows));
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(offset: u64, len: u64) -> Buf {
        Buf {
            space: Space::Arena,
            index: 0,
            offset,
            len,
        }
    }

    fn gemm(a: Buf, b_offset: u64, c: Buf, k: u64) -> Step {
        Step::Gemm {
            a,
            b: Buf {
                space: Space::Weights,
                index: 0,
                offset: b_offset,
                len: 4 * k * 8,
            },
            bias: None,
            c,
            m: 4,
            n: 8,
            k,
            lda: k,
            ldc: 8,
            clip: None,
            gelu: false,
            relu: false,
        }
    }

    /// Runs of GEMMs on one A group; a different A or k, an output that
    /// overlaps an earlier one or A, or another step between, ends a run.
    #[test]
    fn shared_a_runs_group_independent_products_of_one_a() {
        let x = arena(0, 4 * 16 * 4);
        let y = arena(4096, 4 * 16 * 4);
        let c = |i: u64| arena(8192 + i * 128, 128);
        let copy = Step::Copy {
            src: c(0),
            dst: arena(20000, 128),
            elem_size: 4,
            shape: vec![32],
            src_start: 0,
            src_strides: vec![1],
            dst_strides: vec![1],
        };
        let steps = vec![
            gemm(x, 0, c(0), 16),
            gemm(x, 1024, c(1), 16),
            gemm(x, 2048, c(2), 16),
            copy.clone(),
            gemm(x, 0, c(3), 16),
            gemm(y, 0, c(4), 16),
            gemm(y, 0, arena(8192 + 4 * 128 + 64, 128), 16),
            gemm(y, 0, c(6), 8),
            gemm(x, 0, c(7), 16),
            gemm(x, 0, arena(0, 128), 16),
        ];
        assert_eq!(shared_a_runs(&steps), vec![3, 0, 0, 1, 1, 1, 1, 1, 1, 1]);
        let steps = vec![
            gemm(x, 0, c(0), 16),
            copy,
            gemm(x, 0, c(1), 16),
            gemm(x, 0, c(2), 16),
        ];
        assert_eq!(shared_a_runs(&steps), vec![1, 1, 2, 0]);
    }
}
