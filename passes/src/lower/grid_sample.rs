//! `core.grid_sample` → `Step::GridSample` (f32): `x` and `grid` in their
//! logical row-major order (NCHW and `n × oh × ow × 2`), the result NCHW.
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
        let xb = self.materialize(x, &identity(4))?;
        let gb = self.materialize(grid, &identity(4))?;
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
            x: xb,
            grid: gb,
            y,
            n: u(xt.shape[0]),
            c: u(xt.shape[1]),
            h: u(xt.shape[2]),
            w: u(xt.shape[3]),
            oh: u(gt.shape[1]),
            ow: u(gt.shape[2]),
        });
        self.define(op.results[0], y, identity(4));
        Ok(true)
    }
}
