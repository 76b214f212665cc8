//! `core.attention` → one `Step::Attention`, for targets with a fused
//! attention kernel ([`LowerOptions::fused_attention_max_dim`](super::LowerOptions)).
//!
//! The step reads Q, K and V through strides, so the transposes that split
//! heads (`[b, s, h·d] → [b, h, s, d]`, and `kt`'s `[b, h, d, s]`) cost no
//! copy: they are only physical orders of the values. The output takes Q's
//! physical order, so the transpose that merges the heads back is free as
//! well. The epilogue must be what the kernels compute: a multiplication
//! (or division) by a constant scalar, then optionally an additive mask that
//! broadcasts to the scores; anything else keeps the unfused lowering.

use aoc_ir::module::{OpData, ValueId};
use aoc_ir::ops::Opcode;
use aoc_ir::ops::fused::Step as EpiStep;
use aoc_ir::types::TensorType;
use aoc_plan::plan::{Buf, Step};

use super::pointwise::epilogue;
use super::{Lower, Val, identity, logical_strides};

/// What the kernels can apply to the scores.
struct ScoreEpilogue {
    scale: f32,
    mask: Option<ValueId>,
}

impl Lower<'_> {
    /// Emits the fused step when the op qualifies; `Ok(false)` otherwise.
    pub(crate) fn lower_attention_fused(&mut self, op: &OpData) -> Result<bool, String> {
        let max_dim = self.opts.fused_attention_max_dim as usize;
        let (q, kt, v) = (op.operands[0], op.operands[1], op.operands[2]);
        let (qt, ktt, vt, yt) = (
            self.ty(q).clone(),
            self.ty(kt).clone(),
            self.ty(v).clone(),
            self.ty(op.results[0]).clone(),
        );
        let r = yt.rank();
        if max_dim == 0 || !(2..=4).contains(&r) || [&qt, &ktt, &vt].iter().any(|t| t.rank() != r) {
            return Ok(false);
        }
        let (sq, d, sk, dv) = (
            qt.shape[r - 2],
            qt.shape[r - 1],
            ktt.shape[r - 1],
            vt.shape[r - 1],
        );
        if d > max_dim || dv > max_dim || ktt.shape[r - 2] != d || vt.shape[r - 2] != sk {
            return Ok(false);
        }
        let Some(epi) = self.score_epilogue(op)? else {
            return Ok(false);
        };
        // Batch dimensions as [batch, heads] (rank 2 has neither).
        let lead = |t: &TensorType| -> [usize; 2] {
            match r {
                4 => [t.shape[0], t.shape[1]],
                3 => [1, t.shape[0]],
                _ => [1, 1],
            }
        };
        let [batch, heads] = lead(&yt);
        let (qb, qs) = self.strided(q, batch, heads)?;
        let (kb, ks) = self.strided(kt, batch, heads)?;
        let (vb, vs) = self.strided(v, batch, heads)?;
        // kt is [.., d, sk]: K[j][f] is kt[f][j].
        let ks = [ks[0], ks[1], ks[3], ks[2]];
        let (mask, mask_strides) = match epi.mask {
            Some(m) => {
                let (mb, ms) = self.strided(m, batch, heads)?;
                (Some(mb), ms)
            }
            None => (None, [0; 4]),
        };
        // Y in Q's physical order when Q has one, so a transpose back is free.
        let perm = match self.val(q)? {
            Val::Mem { perm, .. } if perm.len() == r => perm,
            _ => identity(r),
        };
        let y = self.alloc(&yt)?;
        let ys = pad4(&logical_strides(&yt.shape, &perm), r);
        let u = |v: usize| v as u64;
        self.push(Step::Attention {
            q: qb,
            k: kb,
            v: vb,
            mask,
            y,
            batch: u(batch),
            heads: u(heads),
            sq: u(sq),
            sk: u(sk),
            d: u(d),
            dv: u(dv),
            q_strides: qs,
            k_strides: ks,
            v_strides: vs,
            mask_strides,
            y_strides: ys,
            scale: epi.scale,
        });
        self.define(op.results[0], y, perm);
        Ok(true)
    }

    /// The op's epilogue as a scale and a mask, or `None`.
    fn score_epilogue(&self, op: &OpData) -> Result<Option<ScoreEpilogue>, String> {
        let steps = epilogue(self.func, op)?;
        let extras = &op.operands[3..];
        let mut out = ScoreEpilogue {
            scale: 1.0,
            mask: None,
        };
        let mut scaled = false;
        for (i, s) in steps.iter().enumerate() {
            let EpiStep::Binary {
                opcode,
                reversed: false,
            } = s
            else {
                return Ok(None);
            };
            let Some(&x) = extras.get(i) else {
                return Ok(None);
            };
            match opcode {
                Opcode::Mul | Opcode::Div if !scaled && out.mask.is_none() => {
                    let Some(c) = self.constant(x) else {
                        return Ok(None);
                    };
                    if c.len() != 1 {
                        return Ok(None);
                    }
                    let v = c.get_f64(0) as f32;
                    out.scale = if *opcode == Opcode::Mul { v } else { 1.0 / v };
                    scaled = true;
                }
                Opcode::Add if out.mask.is_none() => out.mask = Some(x),
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// `v`'s buffer and `[batch, heads, row, col]` strides (0 where `v`
    /// broadcasts); constants are stored as weights first.
    fn strided(
        &mut self,
        v: ValueId,
        batch: usize,
        heads: usize,
    ) -> Result<(Buf, [u64; 4]), String> {
        let ty = self.ty(v).clone();
        let (buf, perm) = match self.val(v)? {
            Val::Const(t) => (self.add_tensor("attention", &t), identity(ty.rank())),
            Val::Mem { buf, perm } => (buf, perm),
        };
        let ls = logical_strides(&ty.shape, &perm);
        // Left-pad to rank 4 with broadcast dimensions, zero size-1 ones.
        let pad = 4 - ty.rank();
        let mut s = [0u64; 4];
        for i in 0..ty.rank() {
            s[pad + i] = if ty.shape[i] == 1 { 0 } else { ls[i] };
        }
        let full = [batch, heads];
        for (i, &n) in full.iter().enumerate() {
            let have = if i >= pad { ty.shape[i - pad] } else { 1 };
            if have != n && have != 1 {
                return Err(format!(
                    "internal error: attention operand of shape {:?} does not broadcast (please report)",
                    ty.shape
                ));
            }
        }
        Ok((buf, s))
    }
}

/// Strides of a rank-`r` value as `[batch, heads, row, col]`.
fn pad4(ls: &[u64], r: usize) -> [u64; 4] {
    let mut s = [0u64; 4];
    s[4 - r..].copy_from_slice(ls);
    s
}
