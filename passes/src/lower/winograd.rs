//! Lowering of `core.winograd_conv2d` to `Step::WinogradConv2d`: the input
//! in NHWC, the transformed weights (`[m+2, m+2, C_out, C_in]`, computed by
//! the `winograd` pass) packed per transform point now
//! (`winograd_pack_weights`), the constant bias into the step, the result
//! in NHWC.
//!
//! An op this cannot lower (non-f32 types, a weight or bias that is not a
//! compile-time constant, a shape the op's verifier would refuse) returns
//! `Ok(false)` so the reference path runs it.

use aoc_ir::attr::Attr;
use aoc_ir::module::OpData;
use aoc_plan::pack::winograd_pack_weights;
use aoc_plan::plan::{ConvGeom, Step};

use super::nn::{f32s, is_f32};
use super::{Lower, NHWC};


impl Lower<'_> {
    pub(crate) fn lower_winograd(&mut self, op: &OpData) -> Result<bool, String> {
        if !op
            .operands
            .iter()
            .chain(&op.results)
            .all(|&v| is_f32(self.ty(v)))
        {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let tile = match attrs.get("tile") {
            Some(Attr::Int(t @ (2 | 4))) => *t as usize,
            _ => return Ok(false),
        };
        let pads = match attrs.get("pads") {
            Some(Attr::Ints(p)) if p.len() == 4 && p.iter().all(|&v| v >= 0) => {
                [p[0] as u64, p[1] as u64, p[2] as u64, p[3] as u64]
            }
            _ => return Ok(false),
        };
        let (x, u) = (op.operands[0], op.operands[1]);
        let (xt, ut, yt) = (
            self.ty(x).clone(),
            self.ty(u).clone(),
            self.ty(op.results[0]).clone(),
        );
        let a = tile + 2;
        if xt.rank() != 4 || ut.shape.len() != 4 || yt.rank() != 4 || ut.shape[..2] != [a, a] {
            return Ok(false);
        }
        let Some(uc) = self.constant(u) else {
            return Ok(false);
        };
        let Some(bias) = self.const_bias(op.operands.get(2).copied()) else {
            return Ok(false);
        };
        let [n, c, h, w] = [xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]].map(|v| v as u64);
        let (oc, oh, ow) = (ut.shape[2] as u64, yt.shape[2] as u64, yt.shape[3] as u64);
        if ut.shape[3] as u64 != c || yt.shape[..2] != [n as usize, oc as usize] {
            return Ok(false);
        }
        let geom = ConvGeom {
            n,
            h,
            w,
            c,
            oh,
            ow,
            oc,
            kh: 3,
            kw: 3,
            stride: [1, 1],
            dilation: [1, 1],
            pads,
            group: 1,
        };
        let packed = winograd_pack_weights(tile, c as usize, oc as usize, &f32s(&uc))
            .map_err(|e| e.to_string())?;
        let xb = self.materialize(x, &NHWC)?;
        let y = self.alloc(&yt)?;
        let ub = self.add_weight_f32("winograd_packed", &[packed.len() as u64], &packed);
        let bias_buf = bias.map(|b| self.add_weight_f32("bias", &[oc], &b));
        self.push(Step::WinogradConv2d {
            x: xb,
            u: ub,
            bias: bias_buf,
            y,
            geom,
            tile: tile as u64,
            relu: false,
        });
        self.define(op.results[0], y, NHWC.to_vec());
        Ok(true)
    }
}
