//! The CPU executor: a [`Session`] holds a validated artifact, its plan,
//! its loaded kernels and a thread pool; [`Session::run`] walks the plan
//! over a per-inference arena.
//!
//! Invariants:
//! - Everything checkable is checked at load: the plan parses, every buffer
//!   of every step lies inside its space, no step writes the weights or an
//!   input, every kernel a step names exists, and steps that need the
//!   reference interpreter are refused when this runtime lacks it. Kernels
//!   check their own shape arguments against their slices, so a plan whose
//!   shapes disagree with its buffers is an error, never an out-of-bounds
//!   access.
//! - Sessions are `Send + Sync`: several threads may run one session at
//!   once; each run takes its own arena (recycled through a small pool).
//!   A run executes on one of the session's workers while its caller waits
//!   yielding its core, then parked (`Session::in_pool`): waking a thread
//!   that sleeps costs more than a small model's whole run on some
//!   machines.
//! - Kernels run on the session's pool, whose workers treat subnormal
//!   f32 inputs as zero and flush subnormal results (`flush_subnormals`):
//!   the same results on every thread, without the x86 assist per
//!   subnormal element.
//! - Generated code runs natively: the checksum guards an artifact against
//!   corruption, not against a malicious author (as with any shared library).

#[cfg(feature = "reference")]
pub(crate) mod reference;
pub(crate) mod control;
mod steps;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::artifact::{Artifact, DType, TensorSpec, tensor_bytes};
use crate::jit::LoadedKernel;
use crate::plan::{Plan, Space, Step};

/// A failure to load or run; the message names the file, step or tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeError {
    message: String,
}

impl RuntimeError {
    pub fn new(message: impl Into<String>) -> RuntimeError {
        RuntimeError {
            message: message.into(),
        }
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuntimeError {}

/// How to run a session.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionOptions {
    /// Worker threads; 0 means one per available core. At most
    /// [`max_threads`] (4 per core): more only oversubscribe the CPU, and
    /// an absurd count would spawn threads until the system refuses.
    pub threads: usize,
}

/// Time spent per step kind in one profiled run.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// (step index, kind, origin, seconds), in plan order.
    pub steps: Vec<(usize, &'static str, String, f64)>,
}

/// A loaded artifact, ready to run.
pub struct Session {
    artifact: Artifact,
    plan: Plan,
    kernels: Vec<Option<LoadedKernel>>,
    /// For each step, the index into `kernels` (pointwise steps only).
    step_kernel: Vec<usize>,
    /// Per step: an integer convolution's weights packed for the int8 GEMM.
    qconv_packed: Vec<Option<crate::kernels::qconv::PackedQConv>>,
    /// Per step: how many GEMMs on one A run from it as one product
    /// (`steps::shared_a_runs`; 0 for the members after the first).
    shared_a: Vec<usize>,
    pool: rayon::ThreadPool,
    threads: usize,
    input_bytes: Vec<u64>,
    output_bytes: Vec<u64>,
    arenas: Mutex<Vec<Arena>>,
    #[cfg(feature = "reference")]
    reference: reference::Prepared,
}

/// How long a caller of [`Session::run`] waits yielding its core before it
/// parks (`Session::in_pool`): runs of a small model end well within it.
const WAIT_YIELDING: Duration = Duration::from_millis(2);

/// Marks a run done and wakes its caller when dropped.
struct Signal<'a> {
    done: &'a AtomicBool,
    caller: &'a std::thread::Thread,
}

impl Drop for Signal<'_> {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        self.caller.unpark();
    }
}

/// A 64-byte aligned, zero-initialized byte buffer.
pub(crate) struct Arena {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the arena is plain memory owned by one run at a time.
unsafe impl Send for Arena {}

impl Arena {
    fn new(len: usize) -> Result<Arena, RuntimeError> {
        if len == 0 {
            return Ok(Arena {
                ptr: std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
                len: 0,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, 64)
            .map_err(|_| RuntimeError::new(format!("cannot allocate an arena of {len} bytes")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(RuntimeError::new(format!(
                "out of memory allocating an arena of {len} bytes"
            )));
        }
        Ok(Arena { ptr, len })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout.
            unsafe {
                std::alloc::dealloc(
                    self.ptr,
                    std::alloc::Layout::from_size_align_unchecked(self.len, 64),
                )
            };
        }
    }
}

fn spec_bytes(file: &str, what: &str, s: &TensorSpec) -> Result<u64, RuntimeError> {
    let dt = DType::parse(&s.dtype).ok_or_else(|| {
        RuntimeError::new(format!("{file}: {what} `{}` has unknown dtype {}", s.name, s.dtype))
    })?;
    tensor_bytes(dt, &s.shape)
        .ok_or_else(|| RuntimeError::new(format!("{file}: {what} `{}` is too large", s.name)))
}

impl Session {
    /// Opens, validates and loads the artifact at `path`.
    pub fn load(path: &Path, opts: &SessionOptions) -> Result<Session, RuntimeError> {
        let artifact = Artifact::open(path).map_err(|e| RuntimeError::new(e.to_string()))?;
        Session::from_artifact(artifact, opts)
    }

    /// Loads an already validated artifact.
    pub fn from_artifact(artifact: Artifact, opts: &SessionOptions) -> Result<Session, RuntimeError> {
        let file = artifact.name().to_string();
        let m = artifact.manifest();
        if m.target.starts_with("sm_") {
            return Err(RuntimeError::new(format!(
                "{file}: a GPU artifact ({}); run it with the CUDA executor (`cuda::GpuSession`, runtime feature `cuda`)",
                m.target
            )));
        }
        let plan: Plan = serde_json::from_value(m.plan.clone())
            .map_err(|e| RuntimeError::new(format!("{file}: the plan is not valid: {e}")))?;
        if plan.origins.len() != plan.steps.len() {
            return Err(RuntimeError::new(format!(
                "{file}: the plan has {} steps and {} origins",
                plan.steps.len(),
                plan.origins.len()
            )));
        }
        let input_bytes: Vec<u64> = m
            .inputs
            .iter()
            .map(|s| spec_bytes(&file, "input", s))
            .collect::<Result<_, _>>()?;
        let output_bytes: Vec<u64> = m
            .outputs
            .iter()
            .map(|s| spec_bytes(&file, "output", s))
            .collect::<Result<_, _>>()?;
        let weights_len = (artifact.weights_range().end - artifact.weights_range().start) as u64;
        let arena = m.arena_size;
        // Bounds and write permissions of every buffer.
        let mut steps = plan.steps.clone();
        for (i, step) in steps.iter_mut().enumerate() {
            let mut err = None;
            step.visit_bufs(|b, written| {
                if err.is_some() {
                    return;
                }
                let (limit, what) = match b.space {
                    Space::Arena => (Some(arena), "the arena"),
                    Space::Weights => (Some(weights_len), "the weights"),
                    Space::Input => (input_bytes.get(b.index as usize).copied(), "an input"),
                    Space::Output => (output_bytes.get(b.index as usize).copied(), "an output"),
                };
                let inside = limit.is_some_and(|l| b.offset.checked_add(b.len).is_some_and(|e| e <= l));
                if !inside {
                    err = Some(format!("a buffer outside {what} ({b:?})"));
                } else if written && matches!(b.space, Space::Weights | Space::Input) {
                    err = Some(format!("a write into {what}"));
                }
            });
            if err.is_none() {
                err = steps::check_disjoint(step).err();
            }
            if err.is_none() {
                err = control::check_targets(&plan.steps, i).err();
            }
            if let Some(e) = err {
                return Err(RuntimeError::new(format!(
                    "{file}: step {i} ({}, {}) has {e}",
                    step.kind(),
                    plan.origins[i]
                )));
            }
        }
        // Kernels: load every blob once; map steps to them.
        let mut names = Vec::new();
        let mut kernels = Vec::new();
        for entry in &m.code {
            let code = artifact.code(&entry.name).map_err(|e| RuntimeError::new(e.to_string()))?;
            let k = LoadedKernel::new(code)
                .map_err(|e| RuntimeError::new(format!("{file}: kernel `{}`: {e}", entry.name)))?;
            names.push(entry.name.clone());
            kernels.push(Some(k));
        }
        let mut step_kernel = vec![usize::MAX; plan.steps.len()];
        for (i, step) in plan.steps.iter().enumerate() {
            match step {
                Step::Pointwise { code, args, .. } => {
                    let k = names.iter().position(|n| n == code).ok_or_else(|| {
                        RuntimeError::new(format!("{file}: step {i} names kernel `{code}`, which the artifact lacks"))
                    })?;
                    if args.is_empty() {
                        return Err(RuntimeError::new(format!("{file}: step {i} has no arguments")));
                    }
                    step_kernel[i] = k;
                }
                #[cfg(not(feature = "reference"))]
                Step::Reference { air, .. } => {
                    let op = air
                        .lines()
                        .find_map(|l| l.split('=').nth(1).and_then(|r| r.split_whitespace().next()))
                        .unwrap_or("an op");
                    return Err(RuntimeError::new(format!(
                        "{file}: step {i} ({}) runs {op} on the reference interpreter, and this runtime was built without the `reference` feature",
                        plan.origins[i]
                    )));
                }
                _ => {}
            }
        }
        // Integer convolutions on the int8 GEMM: their weights packed once.
        let weights = &artifact.as_bytes()[artifact.weights_range()];
        let mut qconv_packed = Vec::with_capacity(plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            let packed = match step {
                Step::QConv2d { w, geom, q, .. } if w.space == Space::Weights && crate::kernels::qconv::uses_packed(geom, q) => {
                    let bytes = &weights[w.offset as usize..(w.offset + w.len) as usize];
                    let w8: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
                    let p = crate::kernels::qconv::pack_qconv(geom, &w8)
                        .map_err(|e| RuntimeError::new(format!("{file}: step {i} ({}): {e}", plan.origins[i])))?;
                    Some(p)
                }
                _ => None,
            };
            qconv_packed.push(packed);
        }
        #[cfg(feature = "reference")]
        let reference = reference::Prepared::new(&file, &plan)?;
        let threads = worker_threads(opts.threads)?;
        let shared_a = steps::shared_a_runs(&plan.steps);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("aoc-worker-{i}"))
            .start_handler(|_| flush_subnormals())
            .build()
            .map_err(|e| RuntimeError::new(format!("cannot start {threads} threads: {e}")))?;
        Ok(Session {
            artifact,
            plan,
            kernels,
            step_kernel,
            qconv_packed,
            shared_a,
            pool,
            threads,
            input_bytes,
            output_bytes,
            arenas: Mutex::new(Vec::new()),
            #[cfg(feature = "reference")]
            reference,
        })
    }

    pub fn inputs(&self) -> &[TensorSpec] {
        &self.artifact.manifest().inputs
    }

    pub fn outputs(&self) -> &[TensorSpec] {
        &self.artifact.manifest().outputs
    }

    /// Bytes of one inference's arena.
    pub fn arena_bytes(&self) -> u64 {
        self.artifact.manifest().arena_size
    }

    /// Bytes one inference touches: arena, weights, inputs and outputs.
    pub fn peak_memory_bytes(&self) -> u64 {
        let w = self.artifact.weights_range();
        self.arena_bytes()
            + (w.end - w.start) as u64
            + self.input_bytes.iter().sum::<u64>()
            + self.output_bytes.iter().sum::<u64>()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// Zeroed output buffers; an allocation the allocator refuses is an
    /// error naming the output, not an abort.
    fn output_buffers(&self) -> Result<Vec<Vec<u8>>, RuntimeError> {
        self.output_bytes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let mut v = Vec::new();
                v.try_reserve_exact(n as usize).map_err(|_| {
                    RuntimeError::new(format!("cannot allocate output {i} ({n} bytes)"))
                })?;
                v.resize(n as usize, 0u8);
                Ok(v)
            })
            .collect()
    }

    /// Runs one inference. `inputs[i]` holds input `i`'s bytes (row major,
    /// little endian, exactly the manifest's size); returns each output's
    /// bytes.
    pub fn run(&self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, RuntimeError> {
        let mut outs = self.output_buffers()?;
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.run_into(inputs, &mut refs)?;
        Ok(outs)
    }

    /// Runs one inference into caller-owned output buffers (each exactly the
    /// manifest's size).
    pub fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        self.run_inner(inputs, outputs, None)
    }

    /// Like [`Session::run`], timing every step (kernels run as usual).
    pub fn run_profiled(&self, inputs: &[&[u8]]) -> Result<(Vec<Vec<u8>>, Profile), RuntimeError> {
        let mut outs = self.output_buffers()?;
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        let mut profile = Profile::default();
        self.run_inner(inputs, &mut refs, Some(&mut profile))?;
        Ok((outs, profile))
    }

    fn run_inner(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        mut profile: Option<&mut Profile>,
    ) -> Result<(), RuntimeError> {
        let m = self.artifact.manifest();
        if inputs.len() != m.inputs.len() {
            return Err(RuntimeError::new(format!(
                "{} inputs given, the model takes {}",
                inputs.len(),
                m.inputs.len()
            )));
        }
        if outputs.len() != m.outputs.len() {
            return Err(RuntimeError::new(format!(
                "{} output buffers given, the model has {}",
                outputs.len(),
                m.outputs.len()
            )));
        }
        for (i, (x, s)) in inputs.iter().zip(&m.inputs).enumerate() {
            if x.len() as u64 != self.input_bytes[i] {
                return Err(RuntimeError::new(format!(
                    "input `{}` must be {} bytes ({} {:?}), found {}",
                    s.name, self.input_bytes[i], s.dtype, s.shape, x.len()
                )));
            }
        }
        for (i, (y, s)) in outputs.iter().zip(&m.outputs).enumerate() {
            if y.len() as u64 != self.output_bytes[i] {
                return Err(RuntimeError::new(format!(
                    "output `{}` must be {} bytes ({} {:?}), found {}",
                    s.name, self.output_bytes[i], s.dtype, s.shape, y.len()
                )));
            }
        }
        // Kernels read f32/i64 through typed slices: stage any caller
        // buffer that is not 64-byte aligned.
        let mut staged_in: Vec<Option<Arena>> = Vec::new();
        let mut in_ptrs = Vec::new();
        for x in inputs {
            if (x.as_ptr() as usize).is_multiple_of(64) {
                staged_in.push(None);
                in_ptrs.push(x.as_ptr() as *mut u8);
            } else {
                let a = Arena::new(x.len())?;
                // SAFETY: `a` has x.len() bytes.
                unsafe { std::ptr::copy_nonoverlapping(x.as_ptr(), a.ptr, x.len()) };
                in_ptrs.push(a.ptr);
                staged_in.push(Some(a));
            }
        }
        let mut staged_out: Vec<Option<Arena>> = Vec::new();
        let mut out_ptrs = Vec::new();
        for y in outputs.iter_mut() {
            if (y.as_ptr() as usize).is_multiple_of(64) {
                staged_out.push(None);
                out_ptrs.push(y.as_mut_ptr());
            } else {
                let a = Arena::new(y.len())?;
                out_ptrs.push(a.ptr);
                staged_out.push(Some(a));
            }
        }
        let arena = {
            let mut pool = self.arenas.lock().map_err(|_| RuntimeError::new("arena pool poisoned"))?;
            pool.pop()
        };
        let arena = match arena {
            Some(a) => a,
            None => Arena::new(m.arena_size as usize)?,
        };
        let w = self.artifact.weights_range();
        let spaces = steps::Spaces {
            arena: arena.ptr,
            weights: self.artifact.as_bytes()[w].as_ptr(),
            inputs: in_ptrs,
            outputs: out_ptrs,
        };
        let result = self.in_pool(|| -> Result<(), RuntimeError> {
            // The program counter: control steps (`control.rs`) move it.
            let mut pc = 0;
            let mut loops = control::LoopState::default();
            while pc < self.plan.steps.len() {
                let i = pc;
                let step = &self.plan.steps[i];
                let run = self.shared_a[i];
                pc += run.max(1);
                if run == 0 {
                    continue;
                }
                let t0 = profile.as_ref().map(|_| Instant::now());
                let done = if step.is_control() {
                    control::run(step, i, &mut pc, &mut loops, &spaces)
                } else if run > 1 {
                    steps::gemm_shared_a(&self.plan.steps[i..i + run], &spaces)
                } else {
                    self.run_step(i, step, &spaces)
                };
                done.map_err(|e| {
                    RuntimeError::new(format!(
                        "step {i} ({}, {}): {e}",
                        step.kind(),
                        self.plan.origins[i]
                    ))
                })?;
                if let (Some(p), Some(t0)) = (profile.as_deref_mut(), t0) {
                    p.steps.push((i, step.kind(), self.plan.origins[i].clone(), t0.elapsed().as_secs_f64()));
                }
            }
            Ok(())
        });
        if let Ok(mut pool) = self.arenas.lock() {
            pool.push(arena);
        }
        result?;
        for (y, s) in outputs.iter_mut().zip(&staged_out) {
            if let Some(a) = s {
                // SAFETY: `a` holds y.len() bytes written by the plan.
                unsafe { std::ptr::copy_nonoverlapping(a.ptr, y.as_mut_ptr(), y.len()) };
            }
        }
        drop(staged_in);
        Ok(())
    }

    /// Runs `f` (a whole run) on one of the session's workers and returns
    /// its result. The caller waits yielding its core rather than asleep
    /// for up to [`WAIT_YIELDING`], then parks: `ThreadPool::install` puts
    /// it to sleep at once, and waking a sleeping thread took 5 to 60 µs on
    /// the virtual machines measured (a one-step model's run: 4 to 37 µs
    /// at p50 asleep, 1 to 2 yielding; DeepLabV3 of the zoo at 1 thread:
    /// 0.108 to 0.156 against 0.112 to 0.116 ms, p99 4.1 against 0.16 ms).
    /// A caller that is itself one of the workers runs `f` in place.
    fn in_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if rayon::current_thread_index().is_some() {
            return self.pool.install(f);
        }
        let done = AtomicBool::new(false);
        let caller = std::thread::current();
        let mut out = None;
        self.pool.in_place_scope(|s| {
            s.spawn(|_| {
                // Set when the run ends, also by a panic (which the scope
                // then raises in the caller, as `install` would).
                let _signal = Signal { done: &done, caller: &caller };
                out = Some(f());
            });
            let t0 = Instant::now();
            while !done.load(Ordering::Acquire) {
                if t0.elapsed() < WAIT_YIELDING {
                    std::thread::yield_now();
                } else {
                    // Woken by the `unpark` after `done` (or at once, when
                    // it came first); spurious returns loop.
                    std::thread::park();
                }
            }
        });
        match out {
            Some(r) => r,
            // The scope returns only after the spawned run, which set it.
            None => unreachable!("a session run ended without a result"),
        }
    }

    fn run_step(&self, i: usize, step: &Step, sp: &steps::Spaces) -> Result<(), String> {
        match step {
            Step::Pointwise { args, rows, .. } => {
                let k = self.kernels[self.step_kernel[i]]
                    .as_ref()
                    .ok_or("kernel not loaded")?;
                steps::pointwise(k, args, *rows, sp)
            }
            #[cfg(feature = "reference")]
            Step::Reference { inputs, outputs, .. } => self.reference.run(i, inputs, outputs, sp),
            Step::QConv2d { .. } if self.qconv_packed[i].is_some() => {
                steps::qconv2d_packed(step, self.qconv_packed[i].as_ref().expect("checked"), sp)
            }
            _ => steps::run(step, sp),
        }
    }
}

/// Sets the calling thread's floating-point unit to treat subnormal
/// inputs as zero and flush subnormal results to zero (MXCSR's DAZ and FTZ
/// bits). Every kernel of a session runs on its pool's workers, which set
/// it when they start: an operand of subnormals costs a microcode assist
/// per element on x86 (a masked Swin attention's softmax gives
/// probabilities of e^-100, and its product with V ran 20 times slower
/// than on normal values), and a value below 2^-126 changes no result at
/// the precision a model is checked to.
pub(crate) fn flush_subnormals() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut csr: u32 = 0;
        // SAFETY: stmxcsr/ldmxcsr read and write the thread's MXCSR from a
        // valid u32; setting DAZ (bit 6) and FTZ (bit 15) changes no
        // exception mask.
        unsafe {
            std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack));
            csr |= (1 << 6) | (1 << 15);
            std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack));
        }
    }
}

/// The most worker threads a session takes: four per available core.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The pool size for a requested count (0: one per core), or an error
/// naming the limit.
fn worker_threads(requested: usize) -> Result<usize, RuntimeError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match requested {
        0 => Ok(cores),
        n if n <= max_threads() => Ok(n),
        n => Err(RuntimeError::new(format!(
            "{n} worker threads requested; at most {} are allowed on this machine (4 per core, {cores} cores)",
            max_threads()
        ))),
    }
}
