//! The last lowering stage: places the virtual buffers and rewrites every
//! step's `Buf` to its real space.
//!
//! Arena buffers live from the first step that touches them to the last
//! (inclusive), so a step's outputs never share bytes with its inputs
//! unless they are the same virtual buffer (in-place epilogues). Offsets
//! come from the memory planner's greedy-by-size placement, 64-byte
//! aligned.

use crate::memplan::{ALIGN, Lifetime, greedy_by_size};
use aoc_plan::plan::{Plan, Space};

use super::{Home, IoSpec, Lower, Lowered};

pub(crate) fn finish(mut lw: Lower<'_>, inputs: Vec<IoSpec>, outputs: Vec<IoSpec>) -> Result<Lowered, String> {
    let n = lw.bufs.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, step) in lw.steps.iter_mut().enumerate() {
        step.visit_bufs(|b, _| {
            let id = b.index as usize;
            first[id] = first[id].min(i);
            last[id] = last[id].max(i);
        });
    }
    let arena: Vec<usize> = (0..n)
        .filter(|&b| lw.bufs[b].home == Home::Arena && first[b] != usize::MAX)
        .collect();
    let groups: Vec<(Lifetime, u64)> = arena
        .iter()
        .map(|&b| {
            let size = lw.bufs[b].size.div_ceil(ALIGN).max(1) * ALIGN;
            (Lifetime { start: first[b], end: last[b] }, size)
        })
        .collect();
    let offsets = greedy_by_size(&groups);
    let arena_bytes = groups.iter().zip(&offsets).map(|((_, s), o)| o + s).max().unwrap_or(0);
    let mut place = vec![0u64; n];
    for (&b, &o) in arena.iter().zip(&offsets) {
        place[b] = o;
    }
    for step in lw.steps.iter_mut() {
        step.visit_bufs(|b, _| {
            let id = b.index as usize;
            match lw.bufs[id].home {
                Home::Arena => {
                    b.offset += place[id];
                    b.index = 0;
                }
                Home::Input(i) => {
                    b.space = Space::Input;
                    b.index = i;
                }
                Home::Output(i) => {
                    b.space = Space::Output;
                    b.index = i;
                }
                Home::Weights(off) => {
                    b.space = Space::Weights;
                    b.offset += off;
                    b.index = 0;
                }
            }
        });
    }
    Ok(Lowered {
        plan: Plan { steps: lw.steps, origins: lw.origins },
        kernels: lw.kernels,
        weights: lw.weights,
        arena_bytes,
        inputs,
        outputs,
        report: lw.report,
    })
}
