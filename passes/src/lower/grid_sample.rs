//! `core.grid_sample` → `Step::GridSample` (f32): `x` and `grid` in their
//! logical row-major order (NCHW or NCDHW, and the grid as it is), the
//! result likewise.
//! Other element types have no kernel (an error naming the op).

use aoc_ir::attr::Attr;
use aoc_ir::module::OpData;
use aoc_ir::ops::grid_sample::{Mode, Padding, params};
use aoc_plan::plan::{GridMode, GridPadding, Step};

use super::nn::{is_f32, u};
use super::{Lower, identity};

impl Lower<'_> {
    pub(crate) fn lower_grid_sample(&mut self, op: &OpData) -> Result<bool, String> {
        if !op.operands.iter().chain(&op.results).all(|&v| is_f32(self.ty(v))) {
            return Ok(false);
        }
        let attrs = Lower::attrs(op)?;
        let s = |n: &str| match attrs.get(n) {
            Some(Attr::Str(s)) => s.clone(),
            _ => String::new(),
        };
        let (mode, padding) = params(&s("mode"), &s("padding_mode"))?;
        let align_corners = matches!(attrs.get("align_corners"), Some(Attr::Bool(true)));
        let (x, grid) = (op.operands[0], op.operands[1]);
        let (xt, gt, yt) = (self.ty(x).clone(), self.ty(grid).clone(), self.ty(op.results[0]).clone());
        let r = xt.rank();
        let vol = r == 5;
        let xb = self.materialize(x, &identity(r))?;
        let gb = self.materialize(grid, &identity(r))?;
        let y = self.alloc(&yt)?;
        self.push(Step::GridSample {
            mode: match mode {
                Mode::Nearest => GridMode::Nearest,
                Mode::Linear => GridMode::Linear,
                Mode::Cubic => GridMode::Cubic,
            },
            padding: match padding {
                Padding::Zeros => GridPadding::Zeros,
                Padding::Border => GridPadding::Border,
                Padding::Reflection => GridPadding::Reflection,
            },
            align_corners,
            volumetric: vol,
            x: xb,
            grid: gb,
            y,
            n: u(xt.shape[0]),
            c: u(xt.shape[1]),
            d: if vol { u(xt.shape[2]) } else { 1 },
            h: u(xt.shape[r - 2]),
            w: u(xt.shape[r - 1]),
            od: if vol { u(gt.shape[1]) } else { 1 },
            oh: u(gt.shape[r - 3]),
            ow: u(gt.shape[r - 2]),
        });
        self.define(op.results[0], y, identity(r));
        Ok(true)
    }
}
