//! Half copies of f32 activations for `wgmma` GEMMs, which read A in
//! f16/bf16 from shared memory: [`HalfCopies`] keeps up to three of them in
//! scratch slots after the arena, so GEMMs on one activation (attention's
//! Q, K and V projections, a bottleneck's first and downsampling
//! convolutions) share one copy.
//!
//! A copy is written, by preference, by the kernel that produced the
//! activation (layer norm, attention, a pool, a `wgmma` GEMM or
//! convolution: a [`Producer`], remade with a [`HalfCopy`] output), else
//! by one conversion launch (`pad_half` for a stem's 3 channels). An
//! epilogue's residual operand is read from a copy a slot holds. At the
//! end, producers whose f32 output no launch read store only the copy
//! ([`Tr::drop_unread_f32`]).
//!
//! Invariants:
//! - A slot's copy is forgotten as soon as a launch writes any byte of its
//!   activation, or a host step runs, or split-k's partial sums overwrite
//!   the scratch: a copy is read only while it equals its activation.
//! - A producer is remade to write into a slot only when no launch since
//!   it has read or written that slot.
//! - A producer stops storing its f32 output only when no launch (and no
//!   host step) read that output while it stood.

use aoc_ir::types::Scalar;
use aoc_plan::gpu_plan::{Arg, GpuItem};
use aoc_plan::plan::{Buf, PoolKind, Space, Step};

use super::{Tr, fnv, overlaps};
use crate::expr::{Expr, PointwiseKernel};
use crate::kernels::attention::{self, AttentionSpec, AttnPrecision};
use crate::kernels::gemm_sp::{SpGemmSpec, SpWgTile, gemm_sp_wgmma_with};
use crate::kernels::gemm_wgmma::{WgPrecision, WgTile, gemm_wgmma_with};
use crate::kernels::{ConvGeom, GemmEpilogue, GemmSpec, HalfCopy, index, rows};

/// A half copy of an f32 activation: the buffer, its row stride, rows and
/// columns (elements), and the half type. The copy is dense (`rows ×
/// cols`).
pub(super) type HalfKey = (Buf, u64, u64, u64, Scalar);

/// Scratch slots for half copies: a ResNet bottleneck keeps its input's
/// copy (read again by the downsampling convolution) while the copies of
/// its two inner activations come and go.
const HALF_SLOTS: usize = 3;

/// Producers [`HalfCopies`] remembers: a ResNet bottleneck's downsampling
/// convolution runs between the one that writes its last convolution's
/// input and that convolution.
const PRODUCERS: usize = 4;

/// The half-copy cache: what each scratch slot holds, and the recent
/// launches that can write a copy.
pub(super) struct HalfCopies {
    /// The half copy of an activation each scratch slot holds, until a
    /// launch writes that activation, and when it was made (for choosing
    /// which copy to replace).
    slots: [Option<(HalfKey, usize)>; HALF_SLOTS],
    /// Where slot 0 starts: the scratch region after the arena.
    base: u64,
    /// Bytes of each half-copy slot: half the largest activation.
    slot_bytes: u64,
    /// Recent launches whose kernels can also write a half copy of their
    /// output for a later `wgmma` GEMM, while that output stands (oldest
    /// first).
    producers: Vec<Producer>,
    /// Producers remade to write a half copy beside their f32 output,
    /// which they stop storing at the end unless a launch reads it.
    copied: Vec<Copied>,
    /// Each step's buffers (written or not), and the index of the step
    /// being translated.
    step_bufs: Vec<Vec<(Buf, bool)>>,
    step_at: usize,
}

/// A launch whose kernel can write a [`HalfCopy`] of its f32 output.
struct Producer {
    item: usize,
    out: Buf,
    remake: Remake,
}

/// A producer writing a half copy of its f32 output `out` (the copy's
/// `HalfCopy` keeps the f32 stores): whether a launch since it read `out`,
/// and whether a launch overwrote `out` (later reads are of other values).
struct Copied {
    item: usize,
    out: Buf,
    remake: Remake,
    half: HalfCopy,
    f32_read: bool,
    closed: bool,
}

/// How to make a producer's kernel again, with the copy.
pub(super) enum Remake {
    /// `(rows, cols, epsilon bits, gamma, beta)`
    LayerNorm((u64, u64, u32, bool, bool)),
    Attention(AttentionSpec, AttnPrecision),
    Wgmma(GemmSpec, WgPrecision, WgTile, Option<GemmEpilogue>),
    Pool(PoolKind, ConvGeom, bool),
    SparseWgmma(SpGemmSpec, SpWgTile, Option<GemmEpilogue>),
}

/// The buffers of `step`, each with whether the step writes it.
pub(super) fn bufs_of(step: &Step) -> Vec<(Buf, bool)> {
    let mut bufs = Vec::new();
    step.clone().visit_bufs(|b, write| bufs.push((*b, write)));
    bufs
}

/// Whether one of `steps` (their buffers, in order) reads a byte of the
/// arena range `a` that no earlier one of them overwrote; always for a
/// range outside the arena (an output must be written).
pub(super) fn read_later(steps: &[Vec<(Buf, bool)>], a: &Buf) -> bool {
    if a.space != Space::Arena {
        return true;
    }
    // The byte ranges of `a` still holding its values.
    let mut live = vec![(a.offset, a.offset + a.len)];
    for s in steps {
        let mut read = false;
        let mut written = Vec::new();
        for &(b, write) in s.iter().filter(|(b, _)| b.space == Space::Arena) {
            let (lo, hi) = (b.offset, b.offset + b.len);
            if write {
                written.push((lo, hi));
            } else if live.iter().any(|&(l, h)| lo < h && l < hi) {
                read = true;
            }
        }
        if read {
            return true;
        }
        for (lo, hi) in written {
            live = live
                .into_iter()
                .flat_map(|(l, h)| [(l, h.min(lo)), (l.max(hi), h)])
                .filter(|(l, h)| l < h)
                .collect();
        }
        if live.is_empty() {
            return false;
        }
    }
    false
}

/// Bytes of a scratch slot that holds a half copy of any activation of
/// `steps` (their buffers): half the largest activation buffer a step
/// names (arena, input or output), in 256-byte units.
fn half_slot_bytes(steps: &[Vec<(Buf, bool)>]) -> u64 {
    let most = steps.iter().flatten().filter(|(b, _)| b.space != Space::Weights).map(|(b, _)| b.len).max().unwrap_or(0);
    (most / 2).div_ceil(256) * 256
}

impl HalfCopies {
    /// An empty cache for the plan `steps`, its slots from `base` on.
    pub(super) fn new(steps: &[Step], base: u64) -> HalfCopies {
        let step_bufs: Vec<Vec<(Buf, bool)>> = steps.iter().map(bufs_of).collect();
        HalfCopies {
            slots: [None; HALF_SLOTS],
            base,
            slot_bytes: half_slot_bytes(&step_bufs),
            producers: Vec::new(),
            copied: Vec::new(),
            step_bufs,
            step_at: 0,
        }
    }

    /// Notes that step `i` is being translated.
    pub(super) fn at_step(&mut self, i: usize) {
        self.step_at = i;
    }

    /// Notes a launch with `args` (before it is recorded): it makes stale
    /// the copies of activations it writes, ends the producers of what it
    /// overwrites, and may read a copied producer's f32 output.
    pub(super) fn launching(&mut self, args: &[Arg]) {
        // A launch that writes an activation the scratch holds a half copy
        // of makes that copy stale.
        for h in &mut self.slots {
            if let Some(((src, ..), _)) = *h
                && args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &src)))
            {
                *h = None;
            }
        }
        // A producer whose output this launch overwrites made its last copy.
        self.producers.retain(|p| !args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &p.out))));
        for c in self.copied.iter_mut().filter(|c| !c.closed) {
            c.f32_read |= args.iter().any(|a| matches!(a, Arg::In(b) if overlaps(b, &c.out)));
            c.closed = args.iter().any(|a| matches!(a, Arg::Out(b) if overlaps(b, &c.out)));
        }
    }

    /// Notes a host step: it may read or write anything.
    pub(super) fn host_step(&mut self) {
        self.slots = [None; HALF_SLOTS];
        for c in &mut self.copied {
            c.f32_read = true;
        }
    }

    /// Forgets every slot's copy: something else overwrote the scratch.
    pub(super) fn scratch_overwritten(&mut self) {
        self.slots = [None; HALF_SLOTS];
    }

    /// Scratch slot `slot`'s first `len` bytes.
    fn slot_buf(&self, slot: usize, len: u64) -> Buf {
        Buf { space: Space::Arena, index: 0, offset: self.base + slot as u64 * self.slot_bytes, len }
    }

    /// The scratch slots in the order a new half copy takes them: empty
    /// ones, then those whose activation no later step reads, then the
    /// oldest copies.
    fn slot_order(&self) -> Vec<usize> {
        let later = &self.step_bufs[(self.step_at + 1).min(self.step_bufs.len())..];
        let rank = |slot: usize| match self.slots[slot] {
            None => (0, 0),
            Some(((src, ..), made)) => (1 + read_later(later, &src) as usize, made),
        };
        let mut order: Vec<usize> = (0..HALF_SLOTS).collect();
        order.sort_by_key(|&s| rank(s));
        order
    }

    /// `epi` reading, in place of each extra operand that a scratch slot
    /// holds a half copy of (in `half`), that copy: a residual added in a
    /// GEMM's epilogue is read at half the bytes, and its producer may stop
    /// storing it as f32.
    pub(super) fn epilogue_from_halves(&self, epi: Option<&(GemmEpilogue, Vec<Buf>)>, half: Scalar) -> Option<(GemmEpilogue, Vec<Buf>)> {
        let (mut e, mut extra) = epi.cloned()?;
        for (i, b) in extra.iter_mut().enumerate() {
            let held = self.slots.iter().enumerate().find_map(|(slot, h)| match h {
                // A dense copy: element `o` of the copy is element `o` of `b`.
                Some(((src, lda, rows, cols, t), _)) if src == b && *t == half && lda == cols && b.len == rows * cols * 4 => {
                    Some(self.slot_buf(slot, rows * cols * 2))
                }
                _ => None,
            });
            if let Some(copy) = held {
                *b = copy;
                e.kernel.operands[i + 1].dtype = half;
            }
        }
        Some((e, extra))
    }
}

impl Tr<'_, '_> {
    /// Records the launch just made as a [`Producer`] of `out`.
    pub(super) fn produced(&mut self, out: Buf, remake: Remake) {
        let item = self.items.len() - 1;
        let producers = &mut self.halves.producers;
        producers.push(Producer { item, out, remake });
        if producers.len() > PRODUCERS {
            producers.remove(0);
        }
    }

    /// Whether a launch from item `from` on reads or writes the scratch
    /// slot `slot` (a host step may touch anything).
    fn touched(&self, slot: usize, from: usize) -> bool {
        let region = self.halves.slot_buf(slot, self.halves.slot_bytes);
        self.items[from..].iter().any(|it| match it {
            GpuItem::Launch(l) => l.args.iter().any(|x| matches!(x, Arg::In(b) | Arg::Out(b) if overlaps(b, &region))),
            GpuItem::Host { .. } => true,
        })
    }

    /// Whether [`Tr::half_copy`] of `key` would cost no launch of its own:
    /// a slot holds the copy, or a remembered producer wrote exactly that
    /// dense activation and can be remade to write the copy too (as the
    /// cost model of sparse layers asks; whether a slot is free for it is
    /// not checked).
    pub(super) fn half_copy_is_free(&self, key: HalfKey) -> bool {
        let (a, lda, rows, cols, _) = key;
        self.halves.slots.iter().any(|h| h.is_some_and(|(k, _)| k == key))
            || (lda == cols && a.len == rows * cols * 4 && self.halves.producers.iter().any(|p| p.out == a))
    }

    /// Makes a remembered producer of exactly `a` (dense, `a.len` bytes of
    /// f32) also write its half copy into one of `slots` (best first) that
    /// no launch since it has read or written; the slot it did, if any.
    fn copy_from_producer(&mut self, a: &Buf, dense: bool, half: Scalar, slots: &[usize], len: u64) -> Result<Option<usize>, String> {
        let Some(pi) = self.halves.producers.iter().rposition(|p| p.out == *a).filter(|_| dense) else { return Ok(None) };
        let item = self.halves.producers[pi].item;
        let Some(&slot) = slots.iter().find(|&&s| !self.touched(s, item)) else { return Ok(None) };
        let to = self.halves.slot_buf(slot, len);
        let p = self.halves.producers.remove(pi);
        // The f32 stores stay until the end of the translation shows that
        // no launch read them ([`Tr::drop_unread_f32`]).
        let half = HalfCopy { bf16: half == Scalar::BF16, keep_f32: true };
        self.remake(p.item, &p.remake, half)?;
        if let Some(GpuItem::Launch(l)) = self.items.get_mut(p.item) {
            l.args.push(Arg::Out(to));
        }
        let f32_read = a.space != Space::Arena
            || self.items[p.item + 1..].iter().any(|it| match it {
                GpuItem::Launch(l) => l.args.iter().any(|x| matches!(x, Arg::In(b) if overlaps(b, a))),
                GpuItem::Host { .. } => true,
            });
        self.halves.copied.push(Copied { item: p.item, out: *a, remake: p.remake, half, f32_read, closed: false });
        Ok(Some(slot))
    }

    /// Makes the kernel of launch `item` again from `remake`, writing the
    /// half copy `h`.
    fn remake(&mut self, item: usize, remake: &Remake, h: HalfCopy) -> Result<(), String> {
        let sm = self.sm;
        let (kernel, g) = match remake {
            Remake::LayerNorm(q) => {
                let q = *q;
                self.kernel("layer_norm", (q, h), |m, n| {
                    rows::layer_norm_with(m, n, q.0, q.1, f32::from_bits(q.2), q.3, q.4, Some(h))
                })?
            }
            Remake::Attention(spec, ap) => {
                let (spec, ap) = (*spec, *ap);
                self.kernel("attention", (&spec, ap, h), |m, n| attention::attention_with(m, n, &spec, ap, sm, Some(h)))?
            }
            Remake::Wgmma(spec, wp, tile, e) => {
                let (spec, wp, tile, e) = (*spec, *wp, *tile, e.clone());
                self.kernel("gemm_wgmma", (&spec, wp, tile, e.as_ref(), h), |m, n| {
                    gemm_wgmma_with(m, n, &spec, wp, e.as_ref(), sm, tile, Some(h))
                })?
            }
            Remake::Pool(kind, geom, ceil) => {
                let (kind, geom, ceil) = (*kind, *geom, *ceil);
                self.kernel("pool", (kind, &geom, ceil, h), |m, n| rows::pool_with(m, n, kind, &geom, ceil, Some(h)))?
            }
            Remake::SparseWgmma(spec, tile, e) => {
                let (spec, tile, e) = (*spec, *tile, e.clone());
                self.kernel("gemm_sp_wgmma", (&spec, tile, e.as_ref(), h), |m, n| {
                    gemm_sp_wgmma_with(m, n, &spec, tile, sm, e.as_ref(), Some(h))
                })?
            }
        };
        let Some(GpuItem::Launch(l)) = self.items.get_mut(item) else {
            return Err("internal error: a producer is not a launch".to_string());
        };
        l.kernel = kernel;
        (l.grid, l.block, l.smem) = (g.grid, g.block, g.smem);
        Ok(())
    }

    /// Producers whose f32 output no launch read (every reader took the
    /// half copy) store only the copy.
    pub(super) fn drop_unread_f32(&mut self) -> Result<(), String> {
        for c in std::mem::take(&mut self.halves.copied) {
            if !c.f32_read {
                self.remake(c.item, &c.remake, HalfCopy { keep_f32: false, ..c.half })?;
            }
        }
        Ok(())
    }

    /// The scratch buffer holding the half copy `key` of an activation for
    /// a `wgmma` GEMM: the slot that already holds it, or a free slot
    /// filled by the launch just made (when it produced the activation and
    /// can write the copy too) or by a conversion launch.
    pub(super) fn half_copy(&mut self, key: HalfKey, origin: &str) -> Result<Buf, String> {
        let (a, lda, rows, cols, half) = key;
        let len = rows * cols * 2;
        if len > self.halves.slot_bytes {
            return Err("internal error: a half copy larger than its scratch slot".to_string());
        }
        if let Some(slot) = self.halves.slots.iter().position(|h| h.is_some_and(|(k, _)| k == key)) {
            return Ok(self.halves.slot_buf(slot, len));
        }
        let order = self.halves.slot_order();
        let dense = lda == cols && a.len == rows * cols * 4;
        let slot = match self.copy_from_producer(&a, dense, half, &order, len)? {
            Some(slot) => slot,
            None if cols > lda => {
                let slot = order[0];
                let to = self.halves.slot_buf(slot, len);
                let bf16 = half == Scalar::BF16;
                let kern = self.kernel("pad_half", (rows, lda, cols, bf16), |m, n| index::pad_half(m, n, rows, lda, cols, bf16))?;
                self.launch(kern, vec![Arg::In(a), Arg::Out(to)], origin);
                slot
            }
            None => {
                let cast = PointwiseKernel {
                    name: format!("cvt_{:016x}", fnv(&format!("{rows}|{cols}|{lda}|{half:?}"))),
                    // One flat dimension when A is dense: the widest vector form.
                    dims: if lda == cols { vec![rows * cols] } else { vec![rows, cols] },
                    operands: vec![crate::expr::Operand { dtype: Scalar::F32, strides: if lda == cols { vec![1] } else { vec![lda, 1] } }],
                    exprs: vec![Expr::Load(0)],
                    result: 0,
                    out_dtype: half,
                    compute: crate::expr::Compute::F32,
                };
                let slot = order[0];
                let to = self.halves.slot_buf(slot, len);
                self.launch_pointwise(cast, &[a, to], origin)?;
                slot
            }
        };
        self.scratch.uses(slot as u64 * self.halves.slot_bytes + len);
        self.halves.slots[slot] = Some((key, self.items.len()));
        Ok(self.halves.slot_buf(slot, len))
    }
}
