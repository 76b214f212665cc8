//! Control-flow steps (`If`, `Else`, `EndIf`, `Loop`, `EndLoop`): they move
//! the executor's program counter over the flat plan (`aoc_plan::plan`).
//!
//! Invariants: `check_targets` accepts a plan only when every jump goes
//! forward except an `EndLoop`'s, which goes back to its own `Loop`; a
//! loop's iteration count is kept here (not in the arena, which the body
//! writes) and bounded by its `max_iterations`, so no plan makes the
//! executor hang.

use std::collections::HashMap;

use aoc_plan::plan::{Buf, Step};

use super::steps::Spaces;


/// The most iterations any loop may run, whatever its artifact says.
const HARD_LIMIT: u64 = 1 << 31;

/// Iterations run so far, by the index of each running loop's `Loop` step.
#[derive(Default)]
pub(crate) struct LoopState(HashMap<usize, u64>);

/// Checks the jump targets and buffer sizes of control step `i`.
pub(crate) fn check_targets(steps: &[Step], i: usize) -> Result<(), String> {
    let n = steps.len() as u64;
    let at_least = |b: &Buf, len: u64, what: &str| {
        if b.len < len { Err(format!("a {what} buffer of {} bytes (needs {len})", b.len)) } else { Ok(()) }
    };
    match &steps[i] {
        Step::If { cond, else_at } => {
            at_least(cond, 1, "condition")?;
            if *else_at <= i as u64 || *else_at > n {
                return Err(format!("an else target {else_at} outside {}..={n}", i + 1));
            }
        }
        Step::Else { end_at } if *end_at <= i as u64 || *end_at >= n => {
            return Err(format!("an end target {end_at} outside {}..{n}", i + 1));
        }
        Step::Loop { trip, cond, iter, cond_in, end_at, .. } => {
            at_least(iter, 8, "iteration")?;
            at_least(cond_in, 1, "condition")?;
            if let Some(t) = trip {
                at_least(t, 8, "trip count")?;
            }
            if let Some(c) = cond {
                at_least(c, 1, "condition")?;
            }
            match steps.get(*end_at as usize) {
                Some(Step::EndLoop { start_at, .. }) if *start_at == i as u64 && *end_at > i as u64 => {}
                _ => return Err(format!("a loop end {end_at} that is not its EndLoop")),
            }
        }
        Step::EndLoop { start_at, trip, iter, cond_in, cond_out, carried, scans, scan_rows, .. } => {
            at_least(iter, 8, "iteration")?;
            at_least(cond_in, 1, "condition")?;
            at_least(cond_out, 1, "condition")?;
            if let Some(t) = trip {
                at_least(t, 8, "trip count")?;
            }
            match steps.get(*start_at as usize) {
                Some(Step::Loop { end_at, .. }) if *end_at == i as u64 => {}
                _ => return Err(format!("a loop start {start_at} that is not its Loop")),
            }
            for [from, to] in carried {
                if from.len != to.len {
                    return Err(format!("a carried value of {} bytes yielded as {}", to.len, from.len));
                }
            }
            for [from, to] in scans {
                let rows = scan_rows.ok_or("scan outputs without a row count")?;
                if from.len.checked_mul(rows) != Some(to.len) {
                    return Err(format!("a scan output of {} bytes for {rows} rows of {}", to.len, from.len));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Where control steps read and write their buffers: the CPU executor's
/// spaces, or device memory through the host (`cuda::exec`).
pub(crate) trait Memory {
    fn read(&self, b: &Buf) -> Result<Vec<u8>, String>;
    /// Writes `bytes` at byte `at` of `b` (inside it: checked by callers).
    fn write(&self, b: &Buf, at: u64, bytes: &[u8]) -> Result<(), String>;
}

impl Memory for Spaces {
    fn read(&self, b: &Buf) -> Result<Vec<u8>, String> {
        Ok(self.bytes(b).to_vec())
    }
    fn write(&self, b: &Buf, at: u64, bytes: &[u8]) -> Result<(), String> {
        let out = self.bytes_mut(b);
        let at = usize::try_from(at).map_err(|_| "a write past its buffer")?;
        let end = at.checked_add(bytes.len()).ok_or("a write past its buffer")?;
        out.get_mut(at..end).ok_or("a write past its buffer")?.copy_from_slice(bytes);
        Ok(())
    }
}

fn read_i64(m: &dyn Memory, b: &Buf) -> Result<i64, String> {
    let bytes = m.read(b)?;
    let head: [u8; 8] = bytes.get(..8).and_then(|s| s.try_into().ok()).ok_or("an i64 buffer under 8 bytes")?;
    Ok(i64::from_le_bytes(head))
}

fn write_i64(m: &dyn Memory, b: &Buf, v: i64) -> Result<(), String> {
    m.write(b, 0, &v.to_le_bytes())
}

fn flag(m: &dyn Memory, b: &Buf) -> Result<bool, String> {
    m.read(b)?.first().map(|&c| c != 0).ok_or_else(|| "an empty condition buffer".to_string())
}

fn set_flag(m: &dyn Memory, b: &Buf, v: bool) -> Result<(), String> {
    m.write(b, 0, &[v as u8])
}

/// Runs control step `i`, setting `pc` (already at the next step) where it
/// jumps. Step indices are those of the list the step is in (plan steps on
/// the CPU, plan items on the GPU).
pub(crate) fn run(step: &Step, i: usize, pc: &mut usize, loops: &mut LoopState, sp: &dyn Memory) -> Result<(), String> {
    match step {
        Step::If { cond, else_at } => {
            if !flag(sp, cond)? {
                *pc = *else_at as usize;
            }
        }
        Step::Else { end_at } => *pc = *end_at as usize,
        Step::EndIf {} => {}
        Step::Loop { trip, cond, iter, cond_in, end_at, scan_rows } => {
            let go = match cond {
                Some(c) => flag(sp, c)?,
                None => true,
            };
            let max = match trip {
                Some(t) => read_i64(sp, t)?,
                None => i64::MAX,
            };
            write_i64(sp, iter, 0)?;
            set_flag(sp, cond_in, go)?;
            loops.0.insert(i, 0);
            if !(go && max > 0) {
                if let Some(rows) = scan_rows.filter(|&r| r != 0) {
                    return Err(format!("the loop ran 0 iterations, but its scan outputs are declared for {rows}"));
                }
                *pc = *end_at as usize + 1;
            }
        }
        Step::EndLoop { start_at, trip, iter, cond_in, cond_out, carried, scans, scan_rows, max_iterations } => {
            let done = loops.0.get(&(*start_at as usize)).copied().ok_or("a loop end reached without its start")?;
            // Read every yield before writing anything: a yield may be a
            // carried value that another pair overwrites.
            let staged: Vec<Vec<u8>> = carried.iter().chain(scans).map(|[from, _]| sp.read(from)).collect::<Result<_, _>>()?;
            let (state, rows) = staged.split_at(carried.len());
            for ([_, to], bytes) in carried.iter().zip(state) {
                sp.write(to, 0, bytes)?;
            }
            for ([_, to], bytes) in scans.iter().zip(rows) {
                let at = done.checked_mul(bytes.len() as u64).filter(|&at| at.checked_add(bytes.len() as u64).is_some_and(|end| end <= to.len)).ok_or_else(|| {
                    format!("the loop runs more than {} iterations, the rows its scan outputs are declared for", scan_rows.unwrap_or(0))
                })?;
                sp.write(to, at, bytes)?;
            }
            let count = done + 1;
            loops.0.insert(*start_at as usize, count);
            let go = flag(sp, cond_out)?;
            write_i64(sp, iter, count as i64)?;
            set_flag(sp, cond_in, go)?;
            let max = match trip {
                Some(t) => read_i64(sp, t)?,
                None => i64::MAX,
            };
            if go && (count as i64) < max {
                if count >= (*max_iterations).min(HARD_LIMIT) {
                    return Err(format!("the loop did not stop within {} iterations", (*max_iterations).min(HARD_LIMIT)));
                }
                *pc = *start_at as usize + 1;
            } else if let Some(rows) = scan_rows
                && *rows != count
            {
                return Err(format!(
                    "the loop ran {count} iterations, but its scan outputs are declared for {rows}; shapes are static, so the count must match"
                ));
            }
        }
        _ => return Err("internal error: not a control step (please report)".to_string()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aoc_plan::plan::Space;

    fn arena(offset: u64, len: u64) -> Buf {
        Buf { space: Space::Arena, index: 0, offset, len }
    }

    fn endless(max_iterations: u64) -> Vec<Step> {
        let (iter, cond) = (arena(0, 8), arena(8, 1));
        vec![
            Step::Loop { trip: None, cond: None, iter, cond_in: cond, end_at: 1, scan_rows: None },
            Step::EndLoop {
                start_at: 0,
                trip: None,
                iter,
                cond_in: cond,
                cond_out: cond,
                carried: vec![],
                scans: vec![],
                scan_rows: None,
                max_iterations,
            },
        ]
    }

    /// Runs `steps` over a 64-byte arena; the iterations and the error.
    fn execute(steps: &[Step]) -> (i64, Result<(), String>) {
        let mut mem = vec![0u64; 8];
        let sp = Spaces { arena: mem.as_mut_ptr() as *mut u8, weights: std::ptr::null(), inputs: vec![], outputs: vec![] };
        let mut loops = LoopState::default();
        let mut pc = 0;
        let mut result = Ok(());
        while pc < steps.len() {
            let i = pc;
            pc += 1;
            if let Err(e) = run(&steps[i], i, &mut pc, &mut loops, &sp) {
                result = Err(e);
                break;
            }
        }
        (mem[0] as i64, result)
    }

    #[test]
    fn a_loop_that_does_not_stop_is_an_error() {
        let steps = endless(10);
        for i in 0..steps.len() {
            check_targets(&steps, i).unwrap();
        }
        let (iters, r) = execute(&steps);
        assert_eq!(r.unwrap_err(), "the loop did not stop within 10 iterations");
        assert_eq!(iters, 10);
    }

    #[test]
    fn jumps_go_forward_except_to_their_own_loop() {
        let mut steps = endless(10);
        steps.push(Step::If { cond: arena(8, 1), else_at: 1 });
        assert!(check_targets(&steps, 2).unwrap_err().contains("else target"));
        steps[2] = Step::Else { end_at: 0 };
        assert!(check_targets(&steps, 2).unwrap_err().contains("end target"));
        if let Step::EndLoop { start_at, .. } = &mut steps[1] {
            *start_at = 1;
        }
        assert!(check_targets(&steps, 1).unwrap_err().contains("not its Loop"));
        assert!(check_targets(&steps, 0).unwrap_err().contains("not its EndLoop"));
    }
}
