//! The last lowering stage: places the virtual buffers and rewrites every
//! step's `Buf` to its real space.
//!
//! Arena buffers live from the first step that touches them to the last
//! (inclusive), so a step's outputs never share bytes with its inputs
//! unless they are the same virtual buffer (in-place epilogues). Offsets
//! come from the memory planner's greedy-by-size placement, 64-byte
//! aligned.
//!
//! Invariant, checked on every plan (an internal error otherwise): every
//! step's buffer lies inside its virtual buffer, and the placement passes
//! `memplan::check_placement` — aligned, inside the arena, and no two arena
//! buffers that are live at the same step share a byte. Together: no step
//! touches a byte of another buffer live at that step. The check is linear in
//! the steps' buffers plus `O(n log n)` in the arena buffers, so it always
//! runs: about 50 µs for PP-OCRv4's detector (135 steps) and 65 ms for a
//! synthetic 100 000-step chain whose compile takes 9.5 s (dev build;
//! greedy placement itself is quadratic and takes 5.2 s there).

use crate::memplan::{ALIGN, Lifetime, Placed, check_placement, greedy_by_size};
use aoc_plan::plan::{Plan, Space};

use super::{Home, IoSpec, Lower, Lowered, Step, VirtualBuf};

pub(crate) fn finish(mut lw: Lower<'_>, inputs: Vec<IoSpec>, outputs: Vec<IoSpec>) -> Result<Lowered, String> {
    // The GPU lowering (no 8-bit pointwise steps) fuses the pointwise steps
    // after an int8 convolution into it: its input must outlive them.
    let epilogues = !lw.opts.int8_elementwise;
    let (place, arena_bytes) = place(&lw.bufs, &mut lw.steps, &lw.origins, epilogues)?;
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

/// The arena offset of each virtual buffer (0 for the others) and the
/// arena's size, for `steps` over `bufs`; checked (module doc). `origins`
/// name the steps in errors. With `epilogues` (the GPU's plans), an int8
/// convolution's input stays live over the pointwise steps right after it,
/// an attention's or a layer norm's inputs over the one step after it
/// ([`extend_over_epilogues`]).
fn place(bufs: &[VirtualBuf], steps: &mut [Step], origins: &[String], epilogues: bool) -> Result<(Vec<u64>, u64), String> {
    let n = bufs.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    // The first step buffer that reaches past its virtual buffer.
    let mut overrun = None;
    for (i, step) in steps.iter_mut().enumerate() {
        step.visit_bufs(|b, _| {
            let id = b.index as usize;
            first[id] = first[id].min(i);
            last[id] = last[id].max(i);
            let size = bufs[id].size;
            if overrun.is_none() && b.offset.checked_add(b.len).is_none_or(|end| end > size) {
                overrun = Some((i, id, b.offset, b.len, size));
            }
        });
    }
    if epilogues {
        extend_over_epilogues(steps, &mut last);
    }
    extend_over_loops(steps, &mut first, &mut last);
    let origin = |step: usize| origins.get(step).map_or("", String::as_str);
    if let Some((i, id, offset, len, size)) = overrun {
        return Err(format!(
            "internal error: the memory plan is unsafe: step {i} ({}) uses bytes {offset}..{} of buffer {id}, which has {size} (please report)",
            origin(i),
            offset.saturating_add(len)
        ));
    }
    let arena: Vec<usize> = (0..n)
        .filter(|&b| bufs[b].home == Home::Arena && first[b] != usize::MAX)
        .collect();
    let groups: Vec<(Lifetime, u64)> = arena
        .iter()
        .map(|&b| {
            let size = bufs[b].size.div_ceil(ALIGN).max(1) * ALIGN;
            (Lifetime { start: first[b], end: last[b] }, size)
        })
        .collect();
    let offsets = greedy_by_size(&groups);
    let arena_bytes = groups.iter().zip(&offsets).map(|((_, s), o)| o + s).max().unwrap_or(0);
    let placed: Vec<Placed> =
        groups.iter().zip(&offsets).map(|(&(life, size), &offset)| Placed { life, offset, size }).collect();
    let name = |i: usize| {
        let b = arena[i];
        format!("buffer {b} (first used by step {}: {})", first[b], origin(first[b]))
    };
    check_placement(&placed, arena_bytes, &name)
        .map_err(|e| format!("internal error: the memory plan is unsafe: {e} (please report)"))?;
    let mut place = vec![0u64; n];
    for (&b, &o) in arena.iter().zip(&offsets) {
        place[b] = o;
    }
    Ok((place, arena_bytes))
}

/// The GPU backend may run the pointwise steps after an int8 convolution
/// as that convolution's epilogue, writing their output while other blocks
/// of the convolution still read its input: the input (virtual buffer) stays
/// live until the last of those steps, so their outputs never land on it.
/// Likewise an attention or a layer norm may write the quantization of
/// its output (the pointwise step right after it) as a second output: its
/// inputs stay live over that step. And an attention (a layer norm) may
/// read the 8-bit input of the step that dequantized its q, k or v (its
/// x), a pointwise step of one input a quarter of its output's size, in
/// place of the f32 tensor: that input stays live over the reader and the
/// step after it. Finally, consecutive pointwise steps may merge into one
/// kernel (the float glue of a quantized graph: dequantize, residual add,
/// relu, quantize), which reads every step's inputs while it writes the
/// last step's output: what a step of such a run reads stays live until
/// the run's last step.
fn extend_over_epilogues(steps: &[Step], last: &mut [usize]) {
    let mut dequantized: Vec<(u32, u32)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Pointwise { args, .. } if args.len() == 2 && args[0].len.checked_mul(4) == Some(args[1].len) => {
                dequantized.push((args[1].index, args[0].index));
            }
            Step::Attention { .. } | Step::LayerNorm { .. } => {
                let read: Vec<&aoc_plan::plan::Buf> = match s {
                    Step::Attention { q, k, v, .. } => vec![q, k, v],
                    Step::LayerNorm { x, .. } => vec![x],
                    _ => unreachable!(),
                };
                for b in read {
                    for &(_, input) in dequantized.iter().filter(|(out, _)| *out == b.index) {
                        let id = input as usize;
                        last[id] = last[id].max((i + 1).min(steps.len() - 1));
                    }
                }
            }
            _ => {}
        }
    }
    for (i, s) in steps.iter().enumerate() {
        let (ins, run) = match s {
            Step::QConv2d { x, .. } => (vec![*x], steps[i + 1..].iter().take_while(|s| matches!(s, Step::Pointwise { .. })).count()),
            Step::Attention { q, k, v, mask, .. } => ([Some(*q), Some(*k), Some(*v), *mask].into_iter().flatten().collect(), 1),
            Step::LayerNorm { x, gamma, beta, .. } => ([Some(*x), *gamma, *beta].into_iter().flatten().collect(), 1),
            _ => continue,
        };
        if run == 0 || !matches!(steps.get(i + 1), Some(Step::Pointwise { .. })) {
            continue;
        }
        for b in ins {
            let id = b.index as usize;
            last[id] = last[id].max(i + run);
        }
    }
    let mut i = 0;
    while i < steps.len() {
        let run = steps[i..].iter().take_while(|s| matches!(s, Step::Pointwise { .. })).count();
        if run > 1 {
            for s in &steps[i..i + run] {
                if let Step::Pointwise { args, .. } = s {
                    for b in &args[..args.len() - 1] {
                        let id = b.index as usize;
                        last[id] = last[id].max(i + run - 1);
                    }
                }
            }
        }
        i += run.max(1);
    }
}

/// A loop body runs its steps again after its `EndLoop`: a buffer used
/// both inside a loop and outside it (what the body reads from before the
/// loop, the carried state, the scan outputs) must stay live over the whole
/// loop, or a body buffer placed over it would clobber it between
/// iterations. Buffers used only inside the body keep their lifetimes: each
/// iteration writes them before reading them. Inner loops first, so an
/// extension that reaches past an outer loop's bounds is extended again.
fn extend_over_loops(steps: &[Step], first: &mut [usize], last: &mut [usize]) {
    let mut loops: Vec<(usize, usize)> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Step::EndLoop { start_at, .. } => Some((*start_at as usize, i)),
            _ => None,
        })
        .collect();
    loops.sort_by_key(|&(s, e)| e - s);
    for (s, e) in loops {
        for b in 0..first.len() {
            let (f, l) = (first[b], last[b]);
            if f == usize::MAX {
                continue;
            }
            let inside = f <= e && l >= s;
            let outside = f < s || l > e;
            if inside && outside {
                first[b] = f.min(s);
                last[b] = l.max(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::vbuf;

    fn fill(id: u32, offset: u64, len: u64) -> Step {
        Step::Fill { dst: vbuf(id, offset, len), elem_size: 4, bits: 0 }
    }

    #[test]
    fn buffers_are_placed_by_lifetime() {
        let bufs = [
            VirtualBuf { home: Home::Arena, size: 100 },
            VirtualBuf { home: Home::Output(0), size: 16 },
            VirtualBuf { home: Home::Arena, size: 64 },
            VirtualBuf { home: Home::Arena, size: 100 },
        ];
        // 0 lives over steps 0..=2, 2 at step 1, 3 over 3..=4: 0 and 3 share
        // bytes, 2 sits above 0.
        let mut steps = vec![fill(0, 0, 100), fill(2, 0, 64), fill(0, 64, 36), fill(3, 0, 100), fill(3, 0, 8), fill(1, 0, 16)];
        let origins: Vec<String> = (0..steps.len()).map(|i| format!("op {i}")).collect();
        let (place, arena) = place(&bufs, &mut steps, &origins, false).unwrap();
        assert_eq!((place[0], place[2], place[3]), (0, 128, 0));
        assert_eq!(place[1], 0, "not in the arena");
        assert_eq!(arena, 128 + 64);
    }

    #[test]
    fn a_step_past_its_buffer_is_an_internal_error() {
        let bufs = [VirtualBuf { home: Home::Arena, size: 100 }, VirtualBuf { home: Home::Weights(0), size: 8 }];
        let origins = vec!["core.relu %a".to_string(), "core.add %b".to_string()];
        let e = place(&bufs, &mut [fill(0, 0, 100), fill(0, 64, 40)], &origins, false).unwrap_err();
        assert_eq!(
            e,
            "internal error: the memory plan is unsafe: step 1 (core.add %b) uses bytes 64..104 of buffer 0, which has 100 (please report)"
        );
        let e = place(&bufs, &mut [fill(1, 4, 8)], &origins, false).unwrap_err();
        assert!(e.contains("step 0 (core.relu %a) uses bytes 4..12 of buffer 1, which has 8"), "{e}");
        let e = place(&bufs, &mut [fill(0, u64::MAX, 2)], &origins, false).unwrap_err();
        assert!(e.contains("uses bytes 18446744073709551615..18446744073709551615 of buffer 0"), "{e}");
    }

    #[test]
    fn an_int8_convolutions_input_outlives_the_pointwise_steps_after_it() {
        use aoc_plan::plan::{ConvGeom, QuantConv};
        let geom = ConvGeom { n: 1, h: 4, w: 4, c: 16, oh: 4, ow: 4, oc: 16, kh: 1, kw: 1, stride: [1, 1], dilation: [1, 1], pads: [0; 4], group: 1 };
        let q = QuantConv { x_signed: false, x_zero: 0, y_signed: false, y_zero: 0, y_min: 0, y_max: 255, elem: Default::default() };
        let w = |id| vbuf(id, 0, 256);
        // 0: the input (bytes), 1: the convolution's output, 2: the
        // pointwise step's f32 output, 3..=5: weights.
        let bufs = [
            VirtualBuf { home: Home::Arena, size: 256 },
            VirtualBuf { home: Home::Arena, size: 256 },
            VirtualBuf { home: Home::Arena, size: 1024 },
            VirtualBuf { home: Home::Weights(0), size: 256 },
            VirtualBuf { home: Home::Weights(256), size: 256 },
            VirtualBuf { home: Home::Weights(512), size: 256 },
        ];
        let steps = || {
            vec![
                fill(0, 0, 256),
                Step::QConv2d { x: w(0), w: w(3), comp: w(4), scale: w(5), shift: w(5), y: w(1), geom, q },
                Step::Pointwise { code: "pw0".into(), args: vec![w(1), vbuf(2, 0, 1024)], rows: 1 },
            ]
        };
        let origins: Vec<String> = (0..3).map(|i| format!("op {i}")).collect();
        // Without epilogues the output may take the input's dead bytes...
        let (place0, _) = place(&bufs, &mut steps(), &origins, false).unwrap();
        assert_eq!(place0[2], 0, "{place0:?}");
        // ...with them it may not: the fused kernel writes it while reading x.
        let (place1, _) = place(&bufs, &mut steps(), &origins, true).unwrap();
        assert!(place1[2] >= 256 || place1[0] >= 1024, "{place1:?}");
    }

    #[test]
    fn bytes_an_attention_may_read_outlive_their_dequantize_step() {
        let arena = |size| VirtualBuf { home: Home::Arena, size };
        // 0: bytes, 1: their f32 dequantization (q, k and v), 2: a buffer
        // written between (the mask), 3: the attention's output, 4: what
        // the step after it writes.
        let bufs = [arena(256), arena(1024), arena(256), arena(1024), arena(256)];
        let b = |id, len| vbuf(id, 0, len);
        let attention = Step::Attention {
            q: b(1, 1024),
            k: b(1, 1024),
            v: b(1, 1024),
            mask: Some(b(2, 256)),
            y: b(3, 1024),
            batch: 1,
            heads: 1,
            sq: 16,
            sk: 16,
            d: 16,
            dv: 16,
            q_strides: [0, 0, 16, 1],
            k_strides: [0, 0, 16, 1],
            v_strides: [0, 0, 16, 1],
            mask_strides: [0, 0, 16, 1],
            y_strides: [0, 0, 16, 1],
            scale: 0.25,
        };
        let steps = || {
            vec![
                fill(0, 0, 256),
                Step::Pointwise { code: "pw0".into(), args: vec![b(0, 256), b(1, 1024)], rows: 1 },
                fill(2, 0, 256),
                attention.clone(),
                Step::Pointwise { code: "pw1".into(), args: vec![b(3, 1024), b(4, 256)], rows: 1 },
            ]
        };
        let origins: Vec<String> = (0..5).map(|i| format!("op {i}")).collect();
        let apart = |p: &[u64], a: usize, b: usize| p[a] + bufs[a].size <= p[b] || p[b] + bufs[b].size <= p[a];
        // Without the GPU's rule a later buffer may take the
        // bytes' place...
        let (p0, _) = place(&bufs, &mut steps(), &origins, false).unwrap();
        assert!(!(apart(&p0, 0, 2) && apart(&p0, 0, 3) && apart(&p0, 0, 4)), "{p0:?}");
        // ...with it the bytes stay until the step after the attention.
        let (p1, _) = place(&bufs, &mut steps(), &origins, true).unwrap();
        assert!(apart(&p1, 0, 2) && apart(&p1, 0, 3) && apart(&p1, 0, 4), "{p1:?}");
    }

    #[test]
    fn a_pointwise_runs_inputs_outlive_the_run() {
        let arena = |size| VirtualBuf { home: Home::Arena, size };
        // A quantized residual's glue: 0 the block input's bytes, 1 the
        // convolution's f32 result, 2 the bytes dequantized, 3 the add's
        // f32 result, 4 its quantization; 5 what a step after the run
        // writes.
        let bufs = [arena(256), arena(1024), arena(1024), arena(1024), arena(256), arena(1024)];
        let b = |id, len| vbuf(id, 0, len);
        let pw = |code: &str, args: Vec<aoc_plan::plan::Buf>| Step::Pointwise { code: code.into(), args, rows: 1 };
        let steps = || {
            vec![
                fill(0, 0, 256),
                fill(1, 0, 1024),
                pw("dq", vec![b(0, 256), b(2, 1024)]),
                pw("add", vec![b(1, 1024), b(2, 1024), b(3, 1024)]),
                pw("q", vec![b(3, 1024), b(4, 256)]),
                pw("next", vec![b(4, 256), b(5, 1024)]),
            ]
        };
        let origins: Vec<String> = (0..6).map(|i| format!("op {i}")).collect();
        let apart = |p: &[u64], a: usize, b: usize| p[a] + bufs[a].size <= p[b] || p[b] + bufs[b].size <= p[a];
        // Every input of the run [dq, add, q, next] against every output
        // written after it is read: the merged kernel reads the inputs
        // while it writes.
        let hazards = |p: &[u64]| [(0, 3), (0, 4), (0, 5), (1, 4), (1, 5), (2, 4), (2, 5), (3, 5)].iter().filter(|&&(i, o)| !apart(p, i, o)).count();
        let (p0, _) = place(&bufs, &mut steps(), &origins, false).unwrap();
        assert!(hazards(&p0) > 0, "{p0:?}");
        let (p1, _) = place(&bufs, &mut steps(), &origins, true).unwrap();
        assert_eq!(hazards(&p1), 0, "{p1:?}");
    }
}
