//! The launch plan of a GPU artifact: what the manifest's `plan` field holds
//! when the target is `sm_*`. The PTX backend writes it; the runtime's CUDA
//! executor (`aoc_runtime::cuda::exec`, feature `cuda`) validates it at
//! load, records its launches into CUDA graphs once, and replays them per
//! inference.
//!
//! Every decision is made at compile time: which kernel, its grid, block and
//! shared memory, and which buffers it gets. A launch passes only device
//! pointers (kernels have their shapes baked in; pointwise kernels also take
//! their element count), so the executor needs no
//! knowledge of any kernel's meaning. Buffers are [`Buf`]s in the same four
//! spaces as the CPU plan's, placed in device memory: one arena, the weights
//! (uploaded once), and a device copy of each input and output.
//!
//! Invariants (checked by [`GpuPlan::validate`] before anything runs):
//! - every `Buf` lies inside its space; written buffers are in the arena or
//!   an output;
//! - every kernel a launch names is an entry of the artifact's PTX module
//!   taking exactly as many parameters as the launch passes
//!   ([`GpuPlan::check_entries`], run on the PTX text before the driver
//!   sees it: a launch with too few arguments would make the driver read
//!   past the argument array);
//! - host items are `Step::Reference` only: ops without a GPU kernel, run by
//!   the reference interpreter on the host between two launches.

use serde::{Deserialize, Serialize};

use crate::plan::{Buf, Space, Step};

/// The name of the code blob holding the PTX module.
pub const PTX_BLOB: &str = "module.ptx";

/// One kernel argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arg {
    /// A buffer the kernel only reads.
    In(Buf),
    /// A buffer the kernel writes (and may read).
    Out(Buf),
    /// The run's status word: a `u32` the executor zeroes before a run; a
    /// kernel stores 1 there when its input is bad (an index out of range),
    /// and the run then fails with an error naming the launch.
    Status,
    /// A 64-bit integer passed by value (a generated pointwise kernel's
    /// element count).
    U64(u64),
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// The `.entry` name in the PTX module.
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (above 48 KiB the executor raises the
    /// kernel's limit first).
    pub smem: u32,
    /// Pointers passed, in the kernel's parameter order.
    pub args: Vec<Arg>,
}

/// One thing the executor does, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "item", rename_all = "snake_case", deny_unknown_fields)]
// A plan holds a few hundred items at most; boxing the step would only
// add a pattern-matching detour.
#[allow(clippy::large_enum_variant)]
pub enum GpuItem {
    Launch(Launch),
    /// A plan step run on the host (only `Step::Reference`): its inputs are
    /// copied from the device, its outputs back.
    Host { step: Step },
}

/// The whole plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPlan {
    pub items: Vec<GpuItem>,
    /// Human-readable origin of each item (the IR op it came from); same
    /// length as `items`.
    pub origins: Vec<String>,
    /// Decisions the compiler explains (`aoc explain`): which kernel a
    /// layer ran on where it had a choice, and why. Absent in plans
    /// without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<ItemNote>,
}

/// A note on one item of a [`GpuPlan`]: e.g. that a 2:4 sparse layer runs
/// on the sparse `mma.sp` kernel, or on the dense kernels and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemNote {
    /// Index into `items`.
    pub item: usize,
    pub note: String,
}

/// The sizes of the four spaces, for validation.
#[derive(Clone, Debug)]
pub struct SpaceSizes {
    pub arena: u64,
    pub weights: u64,
    pub inputs: Vec<u64>,
    pub outputs: Vec<u64>,
}

impl SpaceSizes {
    fn check(&self, b: &Buf, written: bool) -> Result<(), String> {
        let (limit, what) = match b.space {
            Space::Arena => (Some(self.arena), "the arena"),
            Space::Weights => (Some(self.weights), "the weights"),
            Space::Input => (self.inputs.get(b.index as usize).copied(), "an input"),
            Space::Output => (self.outputs.get(b.index as usize).copied(), "an output"),
        };
        let inside = limit.is_some_and(|l| b.offset.checked_add(b.len).is_some_and(|e| e <= l));
        if !inside {
            return Err(format!("a buffer outside {what} ({b:?})"));
        }
        if written && matches!(b.space, Space::Weights | Space::Input) {
            return Err(format!("a write into {what}"));
        }
        Ok(())
    }
}

/// Largest grid and block extents the CUDA driver accepts.
const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];
const MAX_BLOCK_THREADS: u64 = 1024;
/// Shared memory per block no GPU we target exceeds (sm_90: 227 KiB).
const MAX_SMEM: u32 = 227 * 1024;

impl GpuItem {
    /// What `aoc explain` calls the item.
    pub fn kind(&self) -> &str {
        match self {
            GpuItem::Launch(l) => &l.kernel,
            GpuItem::Host { step } => step.kind(),
        }
    }
}

impl GpuPlan {
    /// Checks every item against the spaces' sizes and the launch limits;
    /// the error names the item and its origin.
    /// The jump targets of control item `i` (item indices): forward,
    /// except an `EndLoop`'s, which goes back to its own `Loop`; so a plan
    /// cannot make the executor loop except through a bounded `EndLoop`.
    fn check_jump(&self, i: usize) -> Result<(), String> {
        let n = self.items.len() as u64;
        let step = |j: u64| match self.items.get(j as usize) {
            Some(GpuItem::Host { step }) => Some(step),
            _ => None,
        };
        let GpuItem::Host { step: s } = &self.items[i] else { return Ok(()) };
        let me = i as u64;
        let ok = match s {
            Step::If { cond, else_at } => cond.len >= 1 && *else_at > me && *else_at <= n,
            Step::Else { end_at } => *end_at > me && *end_at < n,
            Step::Loop { end_at, iter, cond_in, .. } => {
                iter.len >= 8 && cond_in.len >= 1 && matches!(step(*end_at), Some(Step::EndLoop { start_at, .. }) if *start_at == me)
            }
            Step::EndLoop { start_at, iter, cond_in, cond_out, .. } => {
                iter.len >= 8
                    && cond_in.len >= 1
                    && cond_out.len >= 1
                    && *start_at < me
                    && matches!(step(*start_at), Some(Step::Loop { end_at, .. }) if *end_at == me)
            }
            _ => true,
        };
        if ok { Ok(()) } else { Err(format!("a `{}` item whose jump target or buffers are not valid", s.kind())) }
    }

    pub fn validate(&self, sizes: &SpaceSizes) -> Result<(), String> {
        if self.origins.len() != self.items.len() {
            return Err(format!(
                "the plan has {} items and {} origins",
                self.items.len(),
                self.origins.len()
            ));
        }
        if let Some(n) = self.notes.iter().find(|n| n.item >= self.items.len()) {
            return Err(format!("a note names item {} of {}", n.item, self.items.len()));
        }
        for (i, item) in self.items.iter().enumerate() {
            let at = |e: String| format!("item {i} ({}, {}) has {e}", item.kind(), self.origins[i]);
            match item {
                GpuItem::Launch(l) => {
                    for (d, (&g, &max)) in l.grid.iter().zip(&MAX_GRID).enumerate() {
                        if g == 0 || g > max {
                            return Err(at(format!("grid dimension {d} = {g} (1..={max})")));
                        }
                    }
                    let threads: u64 = l.block.iter().map(|&b| b as u64).product();
                    if threads == 0 || threads > MAX_BLOCK_THREADS {
                        return Err(at(format!("a block of {threads} threads (1..=1024)")));
                    }
                    if l.smem > MAX_SMEM {
                        return Err(at(format!("{} bytes of shared memory", l.smem)));
                    }
                    for a in &l.args {
                        match a {
                            Arg::In(b) => sizes.check(b, false).map_err(at)?,
                            Arg::Out(b) => sizes.check(b, true).map_err(at)?,
                            Arg::Status | Arg::U64(_) => {}
                        }
                    }
                }
                GpuItem::Host { step } => {
                    if !matches!(step, Step::Reference { .. }) && !step.is_control() {
                        return Err(at("a host step that is neither a reference nor a control step".to_string()));
                    }
                    self.check_jump(i).map_err(at)?;
                    let mut step = step.clone();
                    let mut err = Ok(());
                    step.visit_bufs(|b, written| {
                        if err.is_ok() {
                            err = sizes.check(b, written);
                        }
                    });
                    err.map_err(at)?;
                }
            }
        }
        Ok(())
    }
}

/// The `.entry` functions of a PTX module and how many parameters each
/// takes (`.param` declarations between its parentheses).
pub fn ptx_entries(ptx: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(i) = rest.find(".entry ") {
        rest = &rest[i + 7..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim();
        let Some(close) = rest[open..].find(')') else { break };
        out.push((name, rest[open..open + close].matches(".param").count()));
        rest = &rest[open + close..];
    }
    out
}

impl GpuPlan {
    /// Checks every launch against the module's entries: the kernel exists
    /// and takes exactly the arguments the launch passes.
    pub fn check_entries(&self, ptx: &str) -> Result<(), String> {
        let entries: std::collections::HashMap<&str, usize> = ptx_entries(ptx).into_iter().collect();
        for (i, item) in self.items.iter().enumerate() {
            let GpuItem::Launch(l) = item else { continue };
            match entries.get(l.kernel.as_str()) {
                None => return Err(format!("item {i} launches {}, which the PTX module does not define", l.kernel)),
                Some(&n) if n != l.args.len() => {
                    return Err(format!("item {i} passes {} arguments to {}, which takes {n}", l.args.len(), l.kernel));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(space: Space, offset: u64, len: u64) -> Buf {
        Buf { space, index: 0, offset, len }
    }

    fn plan(args: Vec<Arg>, grid: [u32; 3]) -> GpuPlan {
        GpuPlan {
            notes: vec![],
            items: vec![GpuItem::Launch(Launch {
                kernel: "k".into(),
                grid,
                block: [256, 1, 1],
                smem: 0,
                args,
            })],
            origins: vec!["core.relu %y".into()],
        }
    }

    fn sizes() -> SpaceSizes {
        SpaceSizes { arena: 1024, weights: 64, inputs: vec![16], outputs: vec![16] }
    }

    #[test]
    fn accepts_a_plan_inside_its_spaces() {
        let p = plan(
            vec![Arg::In(buf(Space::Input, 0, 16)), Arg::Out(buf(Space::Arena, 1008, 16)), Arg::Status],
            [4, 1, 1],
        );
        p.validate(&sizes()).unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<GpuPlan>(&json).unwrap(), p);
    }

    #[test]
    fn launches_match_the_module_entries() {
        let ptx = ".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u64 k_param_1\n)\n{\n\tret;\n}\n\
                   .visible .entry none()\n{\n\tret;\n}\n";
        assert_eq!(ptx_entries(ptx), vec![("k", 2), ("none", 0)]);
        let two = vec![Arg::In(buf(Space::Input, 0, 16)), Arg::Out(buf(Space::Arena, 0, 16))];
        plan(two.clone(), [1, 1, 1]).check_entries(ptx).unwrap();
        let e = plan(two[..1].to_vec(), [1, 1, 1]).check_entries(ptx).unwrap_err();
        assert_eq!(e, "item 0 passes 1 arguments to k, which takes 2");
        let mut p = plan(two, [1, 1, 1]);
        let GpuItem::Launch(l) = &mut p.items[0] else { unreachable!() };
        l.kernel = "missing".into();
        assert!(p.check_entries(ptx).unwrap_err().ends_with("launches missing, which the PTX module does not define"));
    }

    #[test]
    fn refuses_bad_buffers_and_geometry() {
        let e = plan(vec![Arg::In(buf(Space::Arena, 1009, 16))], [1, 1, 1]).validate(&sizes()).unwrap_err();
        assert!(e.contains("item 0 (k, core.relu %y) has a buffer outside the arena"), "{e}");
        let e = plan(vec![Arg::Out(buf(Space::Weights, 0, 4))], [1, 1, 1]).validate(&sizes()).unwrap_err();
        assert!(e.ends_with("has a write into the weights"), "{e}");
        let e = plan(vec![Arg::Out(buf(Space::Input, 0, 4))], [1, 1, 1]).validate(&sizes()).unwrap_err();
        assert!(e.ends_with("has a write into an input"), "{e}");
        let e = plan(vec![], [1, 70000, 1]).validate(&sizes()).unwrap_err();
        assert!(e.ends_with("grid dimension 1 = 70000 (1..=65535)"), "{e}");
        let e = plan(vec![], [0, 1, 1]).validate(&sizes()).unwrap_err();
        assert!(e.contains("grid dimension 0 = 0"), "{e}");
        let mut p = plan(vec![], [1, 1, 1]);
        p.origins.clear();
        assert!(p.validate(&sizes()).unwrap_err().contains("1 items and 0 origins"));
        let mut p = plan(vec![], [1, 1, 1]);
        p.notes.push(ItemNote { item: 1, note: "sparse".into() });
        assert!(p.validate(&sizes()).unwrap_err().contains("a note names item 1 of 1"));
        p.notes[0].item = 0;
        p.validate(&sizes()).unwrap();
        let p = GpuPlan {
            notes: vec![],
            items: vec![GpuItem::Host {
                step: Step::Fill { dst: buf(Space::Arena, 0, 4), elem_size: 4, bits: 0 },
            }],
            origins: vec!["x".into()],
        };
        assert!(p.validate(&sizes()).unwrap_err().ends_with("a host step that is neither a reference nor a control step"));
    }

    #[test]
    fn control_items_jump_forward_or_back_to_their_own_loop() {
        let (iter, cond) = (buf(Space::Arena, 0, 8), buf(Space::Arena, 8, 1));
        let looped = |start_at: u64, end_at: u64| GpuPlan {
            items: vec![
                GpuItem::Host { step: Step::Loop { trip: None, cond: None, iter, cond_in: cond, end_at, scan_rows: None } },
                GpuItem::Host {
                    step: Step::EndLoop {
                        start_at,
                        trip: None,
                        iter,
                        cond_in: cond,
                        cond_out: cond,
                        carried: vec![],
                        scans: vec![],
                        scan_rows: None,
                        max_iterations: 4,
                    },
                },
            ],
            origins: vec!["core.loop".into(), "core.loop".into()],
            notes: vec![],
        };
        looped(0, 1).validate(&sizes()).unwrap();
        let e = looped(1, 1).validate(&sizes()).unwrap_err();
        assert!(e.contains("jump target or buffers are not valid"), "{e}");
        let e = looped(0, 0).validate(&sizes()).unwrap_err();
        assert!(e.starts_with("item 0 (loop"), "{e}");
        let back = GpuPlan {
            items: vec![GpuItem::Host { step: Step::EndIf {} }, GpuItem::Host { step: Step::Else { end_at: 0 } }],
            origins: vec!["core.if".into(), "core.if".into()],
            notes: vec![],
        };
        assert!(back.validate(&sizes()).unwrap_err().starts_with("item 1 (else"));
    }
}
