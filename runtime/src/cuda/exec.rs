//! The executor for GPU artifacts: [`GpuSession`].
//!
//! At load: open the GPU and check the artifact's `sm` against it, load the
//! PTX module (the driver JIT-compiles it; its compute cache keeps the
//! result), resolve every launch's kernel, allocate one device arena, the
//! weights (uploaded once), device inputs and outputs, pinned host staging
//! buffers and the status word, then record each maximal run of launches
//! into a CUDA graph. Per inference: inputs are copied in through the
//! pinned buffers, the graphs are replayed (host items, ops without a GPU
//! kernel, run in between on the reference interpreter), outputs are copied
//! back, and the status word is checked.
//!
//! Invariants:
//! - Every pointer a kernel receives is the base of a device allocation
//!   plus a `Buf` offset that validation proved inside it; allocations are
//!   256-byte aligned (the driver's guarantee), so the compiler's alignment
//!   assumptions hold.
//! - One inference at a time per session (a mutex guards the buffers the
//!   graphs point into); several sessions may run at once.
//! - Driver failures come back as `RuntimeError`s naming the step; nothing
//!   here panics on a bad artifact.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::result;
use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaGraph, CudaModule, CudaStream};

use super::Gpu;
use crate::artifact::{Artifact, DType, TensorSpec, tensor_bytes};
use crate::exec::RuntimeError;
use crate::gpu_plan::{Arg, GpuItem, GpuPlan, Launch, PTX_BLOB, SpaceSizes};
use crate::plan::{Buf, Space};

/// Device memory from `cuMemAlloc`, freed on drop.
struct DeviceMem {
    ptr: sys::CUdeviceptr,
}

impl DeviceMem {
    fn new(gpu: &Gpu, len: usize, what: &str) -> Result<DeviceMem, RuntimeError> {
        // A zero-length allocation is refused by the driver; keep one byte so
        // every space has a valid base pointer.
        let ptr = unsafe { result::malloc_sync(len.max(1)) }.map_err(|e| {
            RuntimeError::new(format!(
                "out of device memory: cannot allocate {len} bytes for {what} on {} ({e:?})",
                gpu.name()
            ))
        })?;
        Ok(DeviceMem { ptr })
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `malloc_sync` and is freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// Page-locked host memory, freed on drop.
struct Pinned {
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    fn new(len: usize) -> Result<Pinned, RuntimeError> {
        let ptr = unsafe { result::malloc_host(len.max(1), 0) }
            .map_err(|e| RuntimeError::new(format!("cannot allocate {len} bytes of pinned host memory: {e:?}")))?;
        Ok(Pinned { ptr: ptr as *mut u8, len })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes were allocated at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
    }
}

/// The segment that starts at item `item` (`segments.len()` at the end).
fn segment_at(segments: &[Segment], item: usize, items: usize) -> Result<usize, RuntimeError> {
    if item >= items {
        return Ok(segments.len());
    }
    segments
        .iter()
        .position(|s| match s {
            Segment::Graph { items, .. } => items.start == item,
            Segment::Host(i) => *i == item,
        })
        .ok_or_else(|| RuntimeError::new(format!("internal error: a jump to item {item}, inside a graph (please report)")))
}

/// Device memory as control items see it: every read waits for the work
/// before it, every write is synchronous.
struct DeviceAccess<'a> {
    st: &'a State,
    stream: &'a cudarc::driver::CudaStream,
}

impl crate::exec::control::Memory for DeviceAccess<'_> {
    fn read(&self, b: &Buf) -> Result<Vec<u8>, String> {
        self.stream.synchronize().map_err(|e| format!("waiting for the device: {e}"))?;
        let mut out = vec![0u8; b.len as usize];
        unsafe { result::memcpy_dtoh_sync(out.as_mut_slice(), ptr(self.st, b)) }.map_err(|e| format!("reading a condition or loop value: {e}"))?;
        Ok(out)
    }
    fn write(&self, b: &Buf, at: u64, bytes: &[u8]) -> Result<(), String> {
        if at.checked_add(bytes.len() as u64).is_none_or(|end| end > b.len) {
            return Err("a write past its buffer".to_string());
        }
        self.stream.synchronize().map_err(|e| format!("waiting for the device: {e}"))?;
        unsafe { result::memcpy_htod_sync(ptr(self.st, b) + at, bytes) }.map_err(|e| format!("writing a loop value: {e}"))
    }
}

/// What one inference replays, in order.
enum Segment {
    /// Items `items` recorded as one graph.
    Graph { graph: CudaGraph, items: std::ops::Range<usize> },
    /// Item `i`, a host step.
    Host(usize),
}

/// Buffers and graphs of a session: everything a run touches.
struct State {
    weights: DeviceMem,
    arena: DeviceMem,
    inputs: Vec<DeviceMem>,
    outputs: Vec<DeviceMem>,
    status: DeviceMem,
    host_in: Vec<Pinned>,
    host_out: Vec<Pinned>,
    segments: Vec<Segment>,
    /// Marks the caller's stream before a run and the session's after it
    /// (runs ordered against a caller's stream: `run_io`'s `after`).
    before: Event,
    done: Event,
    /// The status word of a run that returned before it finished, copied
    /// here on the stream; checked when the next run starts.
    late_status: Pinned,
    late_pending: bool,
}

/// A driver event without timing, destroyed on drop.
struct Event(sys::CUevent);

impl Event {
    fn new() -> Result<Event, RuntimeError> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(Event)
            .map_err(drv("cannot create an event".into()))
    }

    /// Makes `waiter` wait for the work queued on `on` so far.
    fn order(&self, on: sys::CUstream, waiter: sys::CUstream) -> Result<(), RuntimeError> {
        // SAFETY: a live event and streams of the bound context.
        unsafe {
            result::event::record(self.0, on).map_err(drv("recording an event".into()))?;
            result::stream::wait_event(waiter, self.0, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                .map_err(drv("ordering two streams".into()))
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

// SAFETY: the raw pointers and graph handles are only used under the
// session's mutex, with the context bound to the calling thread.
unsafe impl Send for State {}

/// A loaded GPU artifact, ready to run.
pub struct GpuSession {
    /// First, so that it is dropped first: its memory, graphs and events
    /// go while the context (held by the stream, module and `gpu` below)
    /// is still alive; destroying an event of a released context crashes
    /// inside the driver.
    state: Mutex<State>,
    gpu: Gpu,
    launcher: Launcher,
    artifact: Artifact,
    plan: GpuPlan,
    _module: Arc<CudaModule>,
    input_bytes: Vec<u64>,
    output_bytes: Vec<u64>,
    /// Whether a kernel may flag an out-of-range index in the status word
    /// (then a run waits to read it, or the next run checks it).
    checks_status: bool,
    #[cfg(feature = "reference")]
    host: crate::exec::reference::HostSteps,
}

/// Where an input of [`GpuSession::run_io`] is: host bytes, or the
/// address of a buffer of the input's size on the session's GPU.
pub enum Src<'a> {
    Host(&'a [u8]),
    Device(u64),
}

/// Where an output of [`GpuSession::run_io`] goes.
pub enum Dst<'a> {
    Host(&'a mut [u8]),
    Device(u64),
}

impl Src<'_> {
    /// A host buffer's length (a device buffer is its tensor's size by
    /// definition, checked against its allocation instead).
    fn host_len(&self) -> Option<usize> {
        match self {
            Src::Host(x) => Some(x.len()),
            Src::Device(_) => None,
        }
    }
}

impl Dst<'_> {
    fn host_len(&self) -> Option<usize> {
        match self {
            Dst::Host(x) => Some(x.len()),
            Dst::Device(_) => None,
        }
    }
}

/// Checks a caller's buffers (their lengths, in order) against the
/// tensors' sizes: as many, and each exactly its tensor's bytes.
fn check_sizes(what: &str, lens: impl ExactSizeIterator<Item = Option<usize>>, want: &[u64], specs: &[TensorSpec]) -> Result<(), RuntimeError> {
    if lens.len() != want.len() {
        return Err(RuntimeError::new(format!("expected {} {what}s, got {}", want.len(), lens.len())));
    }
    for (i, (len, &n)) in lens.zip(want).enumerate() {
        let Some(len) = len else { continue };
        if len as u64 != n {
            let name = specs.get(i).map_or("?", |s| s.name.as_str());
            return Err(RuntimeError::new(format!("{what} {i} (`{name}`) has {len} bytes, expected {n}")));
        }
    }
    Ok(())
}

fn spec_bytes(file: &str, what: &str, s: &TensorSpec) -> Result<u64, RuntimeError> {
    let dt = DType::parse(&s.dtype)
        .ok_or_else(|| RuntimeError::new(format!("{file}: {what} `{}` has unknown dtype {}", s.name, s.dtype)))?;
    tensor_bytes(dt, &s.shape).ok_or_else(|| RuntimeError::new(format!("{file}: {what} `{}` is too large", s.name)))
}

fn drv(what: String) -> impl FnOnce(result::DriverError) -> RuntimeError {
    move |e| RuntimeError::new(format!("{what}: {e:?}"))
}

/// The stream and the kernels of a session's launches.
struct Launcher {
    stream: Arc<CudaStream>,
    /// The kernel of each launch item (`None` for host items).
    funcs: Vec<Option<CudaFunction>>,
}

/// The device address of `b`.
fn ptr(st: &State, b: &Buf) -> u64 {
    let base = match b.space {
        Space::Arena => st.arena.ptr,
        Space::Weights => st.weights.ptr,
        Space::Input => st.inputs[b.index as usize].ptr,
        Space::Output => st.outputs[b.index as usize].ptr,
    };
    base + b.offset
}


impl Launcher {
    /// Enqueues launch item `i` on the session's stream.
    fn launch(&self, plan: &GpuPlan, st: &State, i: usize, l: &Launch) -> Result<(), RuntimeError> {
        let f = self.funcs[i].as_ref().expect("launch items have a function");
        let mut values: Vec<u64> = l
            .args
            .iter()
            .map(|a| match a {
                Arg::In(b) | Arg::Out(b) => ptr(st, b),
                Arg::Status => st.status.ptr,
                Arg::U64(v) => *v,
            })
            .collect();
        let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        // SAFETY: validation proved every pointer inside its allocation; the
        // kernel's parameter list is device pointers in this order (the
        // compiler wrote both); the driver copies `params` at the call.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (l.grid[0], l.grid[1], l.grid[2]),
                (l.block[0], l.block[1], l.block[2]),
                l.smem,
                self.stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(drv(format!("launching {} (item {i}, {})", l.kernel, plan.origins[i])))
    }

    /// Records every maximal run of launches into a graph.
    fn record(&self, plan: &GpuPlan, st: &State) -> Result<Vec<Segment>, RuntimeError> {
        let mut segments = Vec::new();
        let mut i = 0;
        let items = &plan.items;
        while i < items.len() {
            if let GpuItem::Host { .. } = items[i] {
                segments.push(Segment::Host(i));
                i += 1;
                continue;
            }
            let start = i;
            self.stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(drv("cannot start recording a CUDA graph".into()))?;
            let mut failed = None;
            while i < items.len() {
                let GpuItem::Launch(l) = &items[i] else { break };
                if let Err(e) = self.launch(plan, st, i, l) {
                    failed = Some(e);
                    break;
                }
                i += 1;
            }
            let graph = self
                .stream
                .end_capture(sys::CUgraphInstantiate_flags(0))
                .map_err(drv("cannot instantiate the CUDA graph".into()))?;
            if let Some(e) = failed {
                return Err(e);
            }
            let graph = graph.ok_or_else(|| RuntimeError::new("the CUDA graph recorded nothing"))?;
            segments.push(Segment::Graph { graph, items: start..i });
        }
        Ok(segments)
    }

}

impl Drop for GpuSession {
    /// Waits for runs still queued (`run_io` with `after` returns before
    /// its work is done) before their buffers are freed.
    fn drop(&mut self) {
        if self.gpu.context().bind_to_thread().is_ok() {
            let _ = self.launcher.stream.synchronize();
        }
    }
}

impl GpuSession {
    /// Opens, validates and loads the GPU artifact at `path` on GPU 0.
    pub fn load(path: &std::path::Path) -> Result<GpuSession, RuntimeError> {
        let artifact = Artifact::open(path).map_err(|e| RuntimeError::new(e.to_string()))?;
        GpuSession::from_artifact(artifact, 0)
    }

    /// Loads an already validated artifact on GPU `ordinal`.
    pub fn from_artifact(artifact: Artifact, ordinal: usize) -> Result<GpuSession, RuntimeError> {
        let file = artifact.name().to_string();
        let m = artifact.manifest().clone();
        if !m.target.starts_with("sm_") {
            return Err(RuntimeError::new(format!(
                "{file}: a CPU artifact ({}); run it with the CPU executor",
                m.target
            )));
        }
        let plan: GpuPlan = serde_json::from_value(m.plan.clone())
            .map_err(|e| RuntimeError::new(format!("{file}: the GPU plan is not valid: {e}")))?;
        let input_bytes: Vec<u64> =
            m.inputs.iter().map(|s| spec_bytes(&file, "input", s)).collect::<Result<_, _>>()?;
        let output_bytes: Vec<u64> =
            m.outputs.iter().map(|s| spec_bytes(&file, "output", s)).collect::<Result<_, _>>()?;
        let w = artifact.weights_range();
        let sizes = SpaceSizes {
            arena: m.arena_size,
            weights: (w.end - w.start) as u64,
            inputs: input_bytes.clone(),
            outputs: output_bytes.clone(),
        };
        plan.validate(&sizes).map_err(|e| RuntimeError::new(format!("{file}: {e}")))?;
        #[cfg(not(feature = "reference"))]
        if let Some(i) = plan.items.iter().position(|it| matches!(it, GpuItem::Host { step } if !step.is_control())) {
            return Err(RuntimeError::new(format!(
                "{file}: item {i} ({}) runs on the reference interpreter, and this runtime was built without the `reference` feature",
                plan.origins[i]
            )));
        }
        #[cfg(feature = "reference")]
        let host = crate::exec::reference::HostSteps::new(&file, &plan)?;

        let gpu = Gpu::open(ordinal)?;
        gpu.check_target(&m.target)?;
        gpu.context().bind_to_thread().map_err(drv("cannot bind the CUDA context".into()))?;
        let ptx = artifact.code(PTX_BLOB).map_err(|e| RuntimeError::new(e.to_string()))?;
        let ptx = std::str::from_utf8(ptx)
            .map_err(|_| RuntimeError::new(format!("{file}: the PTX module is not UTF-8 text")))?;
        plan.check_entries(ptx).map_err(|e| RuntimeError::new(format!("{file}: {e}")))?;
        let module = gpu.load_ptx(ptx)?;
        let mut funcs = Vec::new();
        let mut by_name: std::collections::HashMap<&str, CudaFunction> = Default::default();
        for item in &plan.items {
            let GpuItem::Launch(l) = item else {
                funcs.push(None);
                continue;
            };
            if !by_name.contains_key(l.kernel.as_str()) {
                let f = gpu.function(&module, &l.kernel)?;
                by_name.insert(&l.kernel, f);
            }
            let f = by_name[l.kernel.as_str()].clone();
            if l.smem > 48 * 1024 {
                f.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    l.smem as i32,
                )
                .map_err(drv(format!("{} needs {} bytes of shared memory", l.kernel, l.smem)))?;
            }
            funcs.push(Some(f));
        }
        let stream = gpu.context().new_stream().map_err(drv("cannot create a CUDA stream".into()))?;

        let weights = DeviceMem::new(&gpu, w.end - w.start, "the weights")?;
        unsafe { result::memcpy_htod_sync(weights.ptr, &artifact.as_bytes()[w.clone()]) }
            .map_err(drv("cannot upload the weights".into()))?;
        let arena = DeviceMem::new(&gpu, m.arena_size as usize, "the arena")?;
        let mut inputs = Vec::new();
        let mut host_in = Vec::new();
        for (s, &n) in m.inputs.iter().zip(&input_bytes) {
            inputs.push(DeviceMem::new(&gpu, n as usize, &format!("input `{}`", s.name))?);
            host_in.push(Pinned::new(n as usize)?);
        }
        let mut outputs = Vec::new();
        let mut host_out = Vec::new();
        for (s, &n) in m.outputs.iter().zip(&output_bytes) {
            outputs.push(DeviceMem::new(&gpu, n as usize, &format!("output `{}`", s.name))?);
            host_out.push(Pinned::new(n as usize)?);
        }
        let status = DeviceMem::new(&gpu, 4, "the status word")?;
        let mut state = State {
            weights,
            arena,
            inputs,
            outputs,
            status,
            host_in,
            host_out,
            segments: Vec::new(),
            before: Event::new()?,
            done: Event::new()?,
            late_status: Pinned::new(4)?,
            late_pending: false,
        };
        let checks_status = plan.items.iter().any(|it| matches!(it, GpuItem::Launch(l) if l.args.iter().any(|a| matches!(a, Arg::Status))));
        let launcher = Launcher { stream, funcs };
        state.segments = launcher.record(&plan, &state)?;
        Ok(GpuSession {
            gpu,
            launcher,
            artifact,
            plan,
            _module: module,
            input_bytes,
            output_bytes,
            checks_status,
            state: Mutex::new(state),
            #[cfg(feature = "reference")]
            host,
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    pub fn inputs(&self) -> &[TensorSpec] {
        &self.artifact.manifest().inputs
    }

    pub fn outputs(&self) -> &[TensorSpec] {
        &self.artifact.manifest().outputs
    }

    pub fn plan(&self) -> &GpuPlan {
        &self.plan
    }

    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// Device bytes one inference uses: arena, weights, inputs and outputs.
    pub fn peak_memory_bytes(&self) -> u64 {
        let w = self.artifact.weights_range();
        self.artifact.manifest().arena_size
            + (w.end - w.start) as u64
            + self.input_bytes.iter().sum::<u64>()
            + self.output_bytes.iter().sum::<u64>()
    }

    /// Replays the segments (no input or output copies). Control items
    /// (`If`, `Loop`, ...) are host segments that read their condition back
    /// and move to the segment starting at the item they jump to; every
    /// jump target starts a segment, since a control item precedes it.
    fn replay(&self, st: &State) -> Result<(), RuntimeError> {
        let mut seg = 0;
        let mut loops = crate::exec::control::LoopState::default();
        while let Some(s) = st.segments.get(seg) {
            seg += 1;
            match s {
                Segment::Graph { graph, items } => graph.launch().map_err(drv(format!(
                    "replaying items {}..{} ({})",
                    items.start, items.end, self.plan.origins[items.start]
                )))?,
                Segment::Host(i) => match &self.plan.items[*i] {
                    GpuItem::Host { step } if step.is_control() => {
                        let mut next = *i + 1;
                        let mem = DeviceAccess { st, stream: &self.launcher.stream };
                        crate::exec::control::run(step, *i, &mut next, &mut loops, &mem)
                            .map_err(|e| RuntimeError::new(format!("item {i} ({}, {}): {e}", step.kind(), self.plan.origins[*i])))?;
                        seg = segment_at(&st.segments, next, self.plan.items.len())?;
                    }
                    _ => self.run_host(st, *i)?,
                },
            }
        }
        Ok(())
    }

    #[cfg(feature = "reference")]
    fn run_host(&self, st: &State, i: usize) -> Result<(), RuntimeError> {
        let GpuItem::Host { step: crate::plan::Step::Reference { inputs, outputs, .. } } = &self.plan.items[i] else {
            return Err(RuntimeError::new(format!("internal error: item {i} is not a host step")));
        };
        let cu = self.launcher.stream.cu_stream();
        let mut host: Vec<Vec<u8>> = inputs.iter().map(|b| vec![0u8; b.len as usize]).collect();
        for (b, h) in inputs.iter().zip(&mut host) {
            unsafe { result::memcpy_dtoh_async(h.as_mut_slice(), ptr(st, b), cu) }
                .map_err(drv(format!("copying item {i}'s inputs to the host")))?;
        }
        self.launcher.stream.synchronize().map_err(drv(format!("waiting for item {i}'s inputs")))?;
        let refs: Vec<&[u8]> = host.iter().map(|h| h.as_slice()).collect();
        let outs = self
            .host
            .run(i, &refs)
            .map_err(|e| RuntimeError::new(format!("item {i} ({}): {e}", self.plan.origins[i])))?;
        for (b, o) in outputs.iter().zip(&outs) {
            unsafe { result::memcpy_htod_sync(ptr(st, b), o.as_slice()) }
                .map_err(drv(format!("copying item {i}'s outputs to the device")))?;
        }
        Ok(())
    }

    #[cfg(not(feature = "reference"))]
    fn run_host(&self, _st: &State, i: usize) -> Result<(), RuntimeError> {
        Err(RuntimeError::new(format!("item {i} needs the `reference` feature")))
    }

    /// Runs one inference: `inputs[i]` holds input `i`'s bytes (row major,
    /// little endian, exactly the manifest's size); returns each output's.
    pub fn run(&self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, RuntimeError> {
        let mut outs: Vec<Vec<u8>> = self.output_bytes.iter().map(|&n| vec![0u8; n as usize]).collect();
        let mut slices: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        self.run_into(inputs, &mut slices)?;
        Ok(outs)
    }

    /// [`GpuSession::run`] into the caller's output buffers, each exactly
    /// its output's size (what the C API calls).
    pub fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        let ins: Vec<Src> = inputs.iter().map(|x| Src::Host(x)).collect();
        let mut outs: Vec<Dst> = outputs.iter_mut().map(|o| Dst::Host(o)).collect();
        self.run_io(&ins, &mut outs, None)
    }

    /// The session's stream as a driver handle: a caller whose device
    /// buffers are written on another stream makes this one wait for that
    /// work before [`GpuSession::run_io`] (DLPack's `__dlpack__(stream=)`
    /// does exactly that).
    pub fn stream_handle(&self) -> usize {
        self.launcher.stream.cu_stream() as usize
    }

    /// The GPU's ordinal, as DLPack's `device_id` names it.
    pub fn ordinal(&self) -> usize {
        self.gpu.ordinal()
    }

    /// One inference with each input and output on the host or on this
    /// GPU. Device buffers are copied into and out of the session's own
    /// (the recorded graphs point there) on the session's stream, with no
    /// host round trip. A device address must lie, with its tensor's size,
    /// inside one allocation on this GPU: anything else is refused before
    /// a copy is queued.
    ///
    /// Without `after`, the call returns once the outputs are written, so
    /// work the caller queues afterwards on any stream sees them. With
    /// `after` (a stream of this GPU's primary context, 0 for the legacy
    /// default stream), the run first waits for the work queued on `after`
    /// and `after` then waits for the run; when every input and output is
    /// on the device, the call returns as soon as the work is queued (the
    /// host runs ahead, as PyTorch's own kernels let it), else once it is
    /// done. An index out of range in such a run (a gather's status word)
    /// is reported by the session's next run, as CUDA reports a kernel's
    /// fault at a later call: that run fails, naming the earlier one.
    pub fn run_io(&self, inputs: &[Src], outputs: &mut [Dst], after: Option<usize>) -> Result<(), RuntimeError> {
        check_sizes("input", inputs.iter().map(Src::host_len), &self.input_bytes, self.inputs())?;
        check_sizes("output", outputs.iter().map(Dst::host_len), &self.output_bytes, self.outputs())?;
        let mut guard = self.state.lock().map_err(|_| RuntimeError::new("a previous run panicked"))?;
        let st = &mut *guard;
        self.gpu.context().bind_to_thread().map_err(drv("cannot bind the CUDA context".into()))?;
        for (i, x) in inputs.iter().enumerate() {
            if let Src::Device(p) = x {
                self.gpu.check_device_range(*p, self.input_bytes[i], &format!("input `{}`", self.inputs()[i].name))?;
            }
        }
        for (i, o) in outputs.iter().enumerate() {
            if let Dst::Device(p) = o {
                self.gpu.check_device_range(*p, self.output_bytes[i], &format!("output `{}`", self.outputs()[i].name))?;
            }
        }
        let cu = self.launcher.stream.cu_stream();
        if st.late_pending {
            st.late_pending = false;
            self.launcher.stream.synchronize().map_err(drv("waiting for the previous run".into()))?;
            if st.late_status.as_slice() != [0u8; 4] {
                return Err(RuntimeError::new(
                    "the previous run (which returned before it finished) had an index input out of range (a gather read past its axis); its outputs were not valid",
                ));
            }
        }
        let after = after.map(|h| h as sys::CUstream);
        if let Some(a) = after {
            st.before.order(a, cu)?;
        }
        for (i, x) in inputs.iter().enumerate() {
            match x {
                Src::Host(x) => {
                    st.host_in[i].as_mut_slice().copy_from_slice(x);
                    unsafe { result::memcpy_htod_async(st.inputs[i].ptr, st.host_in[i].as_slice(), cu) }
                }
                // SAFETY: the range was checked to lie inside a device
                // allocation of this GPU; the session's input holds as many.
                Src::Device(p) => unsafe { result::memcpy_dtod_async(st.inputs[i].ptr, *p, self.input_bytes[i] as usize, cu) },
            }
            .map_err(drv(format!("copying input {i} in")))?;
        }
        if self.checks_status {
            unsafe { result::memset_d8_async(st.status.ptr, 0, 4, cu) }.map_err(drv("clearing the status word".into()))?;
        }
        self.replay(st)?;
        for (i, o) in outputs.iter().enumerate() {
            let src = st.outputs[i].ptr;
            match o {
                Dst::Host(_) => unsafe { result::memcpy_dtoh_async(st.host_out[i].as_mut_slice(), src, cu) },
                // SAFETY: as for the inputs.
                Dst::Device(p) => unsafe { result::memcpy_dtod_async(*p, src, self.output_bytes[i] as usize, cu) },
            }
            .map_err(drv(format!("copying output {i} out")))?;
        }
        if let Some(a) = after {
            st.done.order(cu, a)?;
            let all_device = inputs.iter().all(|x| matches!(x, Src::Device(_))) && outputs.iter().all(|o| matches!(o, Dst::Device(_)));
            if all_device {
                if self.checks_status {
                    // SAFETY: 4 pinned bytes the session owns, read only
                    // after the stream has passed this copy.
                    unsafe { result::memcpy_dtoh_async(st.late_status.as_mut_slice(), st.status.ptr, cu) }
                        .map_err(drv("reading the status word".into()))?;
                    st.late_pending = true;
                }
                return Ok(());
            }
        }
        let mut status = [0u8; 4];
        if self.checks_status {
            unsafe { result::memcpy_dtoh_async(&mut status[..], st.status.ptr, cu) }
                .map_err(drv("reading the status word".into()))?;
        }
        self.launcher.stream.synchronize().map_err(drv("running the plan".into()))?;
        if u32::from_le_bytes(status) != 0 {
            return Err(RuntimeError::new(
                "an index input is out of range (a gather read past its axis); the outputs are not valid",
            ));
        }
        for (o, p) in outputs.iter_mut().zip(&st.host_out) {
            if let Dst::Host(o) = o {
                o.copy_from_slice(p.as_slice());
            }
        }
        Ok(())
    }

    /// Device time of `iters` replays (inputs already on the device from
    /// the last `run`), one CUDA-event measurement per replay, in ms.
    pub fn time_replays(&self, iters: usize) -> Result<Vec<f64>, RuntimeError> {
        let guard = self.state.lock().map_err(|_| RuntimeError::new("a previous run panicked"))?;
        self.gpu.context().bind_to_thread().map_err(drv("cannot bind the CUDA context".into()))?;
        let ctx = self.gpu.context();
        let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
        let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            start.record(&self.launcher.stream).map_err(drv("recording an event".into()))?;
            self.replay(&guard)?;
            end.record(&self.launcher.stream).map_err(drv("recording an event".into()))?;
            end.synchronize().map_err(drv("waiting for a replay".into()))?;
            times.push(start.elapsed_ms(&end).map_err(drv("reading an event".into()))? as f64);
        }
        Ok(times)
    }

    /// Device time of each item, launched one by one (not from the graph),
    /// in ms: the `--profile` breakdown.
    pub fn profile_items(&self) -> Result<Vec<f64>, RuntimeError> {
        let guard = self.state.lock().map_err(|_| RuntimeError::new("a previous run panicked"))?;
        self.gpu.context().bind_to_thread().map_err(drv("cannot bind the CUDA context".into()))?;
        let ctx = self.gpu.context();
        let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
        let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
        if self.plan.items.iter().any(|it| matches!(it, GpuItem::Host { step } if step.is_control())) {
            return Err(RuntimeError::new("profiling item by item is not available for plans with control flow (core.if, core.loop)"));
        }
        let mut times = Vec::new();
        for (i, item) in self.plan.items.iter().enumerate() {
            start.record(&self.launcher.stream).map_err(drv("recording an event".into()))?;
            match item {
                GpuItem::Launch(l) => self.launcher.launch(&self.plan, &guard, i, l)?,
                GpuItem::Host { .. } => self.run_host(&guard, i)?,
            }
            end.record(&self.launcher.stream).map_err(drv("recording an event".into()))?;
            end.synchronize().map_err(drv(format!("running item {i}")))?;
            times.push(start.elapsed_ms(&end).map_err(drv("reading an event".into()))? as f64);
        }
        Ok(times)
    }
}

/// One kernel to time in isolation (`aoc compile --tune`): its PTX module,
/// entry, launch shape, and the byte size of each pointer argument.
pub struct KernelTrial<'a> {
    pub ptx: &'a str,
    pub kernel: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    pub arg_bytes: &'a [u64],
}

/// The fastest of `iters` timed launches of `t` (after two untimed ones),
/// in ms, on zero-filled buffers of the stated sizes.
pub fn time_kernel(gpu: &Gpu, t: &KernelTrial, iters: usize) -> Result<f64, RuntimeError> {
    match crate::gpu_plan::ptx_entries(t.ptx).into_iter().find(|(n, _)| *n == t.kernel) {
        Some((_, n)) if n == t.arg_bytes.len() => {}
        _ => {
            return Err(RuntimeError::new(format!(
                "internal error: tuning candidate {} does not take {} pointers (please report)",
                t.kernel,
                t.arg_bytes.len()
            )));
        }
    }
    gpu.context().bind_to_thread().map_err(drv("cannot bind the CUDA context".into()))?;
    let module = gpu.load_ptx(t.ptx)?;
    let f = gpu.function(&module, t.kernel)?;
    if t.smem > 48 * 1024 {
        f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, t.smem as i32)
            .map_err(drv(format!("{} needs {} bytes of shared memory", t.kernel, t.smem)))?;
    }
    let bufs: Vec<DeviceMem> = t
        .arg_bytes
        .iter()
        .map(|&n| {
            let m = DeviceMem::new(gpu, n as usize, "a tuning buffer")?;
            unsafe { result::memset_d8_sync(m.ptr, 0, n.max(1) as usize) }.map_err(drv("clearing a tuning buffer".into()))?;
            Ok(m)
        })
        .collect::<Result<_, RuntimeError>>()?;
    let stream = gpu.context().new_stream().map_err(drv("cannot create a CUDA stream".into()))?;
    let ctx = gpu.context();
    let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
    let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cannot create an event".into()))?;
    let mut best = f64::INFINITY;
    for i in 0..iters + 2 {
        let mut values: Vec<u64> = bufs.iter().map(|b| b.ptr).collect();
        let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        start.record(&stream).map_err(drv("recording an event".into()))?;
        // SAFETY: every pointer is a live allocation of the size the kernel's
        // problem needs (the caller passes the plan's buffer sizes).
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (t.grid[0], t.grid[1], t.grid[2]),
                (t.block[0], t.block[1], t.block[2]),
                t.smem,
                stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(drv(format!("launching {}", t.kernel)))?;
        end.record(&stream).map_err(drv("recording an event".into()))?;
        end.synchronize().map_err(drv(format!("running {}", t.kernel)))?;
        if i >= 2 {
            best = best.min(start.elapsed_ms(&end).map_err(drv("reading an event".into()))? as f64);
        }
    }
    Ok(best)
}
