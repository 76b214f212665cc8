//! The CUDA side of the runtime (feature `cuda`): finding the driver and
//! the GPU, checking an artifact's target against it, loading PTX (the
//! driver JIT-compiles it for the GPU at hand) and launching kernels.
//!
//! cudarc loads `libcuda.so` at run time (`dynamic-loading`), so this builds
//! and links without a CUDA toolkit; a machine without a driver gets an
//! error naming what is missing, never a panic (cudarc panics inside
//! `CudaContext::new` when the library is absent, so we probe first).
//!
//! [`GpuSession`] (`exec.rs`) runs GPU artifacts on top of this module.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::exec::RuntimeError;

mod exec;
pub use exec::{Dst, GpuSession, KernelTrial, Src, time_kernel};

/// One GPU, its primary context and a stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    sm: u32,
    ordinal: usize,
}

/// The `sm_XY` number of a target name (`sm_86` → 86, `sm_90a` → 90).
pub fn sm_of_target(target: &str) -> Option<u32> {
    let digits = target.strip_prefix("sm_")?.trim_end_matches('a');
    digits.parse().ok()
}

fn driver_error(what: &str, e: impl std::fmt::Debug) -> RuntimeError {
    RuntimeError::new(format!("{what}: {e:?}"))
}

impl Gpu {
    /// Opens GPU `ordinal`. Errors say whether the driver library, a GPU or
    /// the context is what is missing.
    pub fn open(ordinal: usize) -> Result<Gpu, RuntimeError> {
        // SAFETY: only probes whether the shared library can be loaded.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(RuntimeError::new(
                "no NVIDIA driver: libcuda.so cannot be loaded (install the NVIDIA driver, or run a CPU artifact)",
            ));
        }
        let count = CudaContext::device_count().map_err(|e| driver_error("cannot count GPUs", e))?;
        if count <= 0 {
            return Err(RuntimeError::new("the NVIDIA driver is loaded but reports no GPU"));
        }
        if ordinal >= count as usize {
            return Err(RuntimeError::new(format!(
                "GPU {ordinal} does not exist; this machine has {count}"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error("cannot create a CUDA context", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| driver_error("cannot read the compute capability", e))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".to_string());
        let stream = ctx.default_stream();
        Ok(Gpu {
            ctx,
            stream,
            name,
            sm: (major * 10 + minor) as u32,
            ordinal,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability as `major * 10 + minor` (an H200 is 90).
    pub fn sm(&self) -> u32 {
        self.sm
    }

    /// The GPU's index among the driver's devices.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Refuses `len` bytes at device address `ptr` unless they lie inside
    /// one allocation made on this GPU (another library's, e.g. PyTorch's
    /// caching allocator, is fine). The context must be bound.
    pub fn check_device_range(&self, ptr: u64, len: u64, what: &str) -> Result<(), RuntimeError> {
        use cudarc::driver::sys::{CUpointer_attribute as A, cuPointerGetAttribute};
        let attr = |a: A, out: *mut std::ffi::c_void| {
            // SAFETY: `out` points at a value of the size this attribute
            // writes (an int for the ordinal, a device pointer or size_t
            // for the range); the driver only reads `ptr` as an address.
            unsafe { cuPointerGetAttribute(out, a, ptr) }.result()
        };
        let not_ours = |e| RuntimeError::new(format!("{what} at {ptr:#x} is not memory of a CUDA device ({e:?})"));
        let mut ordinal: i32 = -1;
        attr(A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (&mut ordinal as *mut i32).cast()).map_err(not_ours)?;
        if ordinal as usize != self.ordinal {
            return Err(RuntimeError::new(format!(
                "{what} is on GPU {ordinal}, the session on GPU {} ({})",
                self.ordinal, self.name
            )));
        }
        let mut start: u64 = 0;
        let mut size: usize = 0;
        attr(A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (&mut start as *mut u64).cast()).map_err(not_ours)?;
        attr(A::CU_POINTER_ATTRIBUTE_RANGE_SIZE, (&mut size as *mut usize).cast()).map_err(not_ours)?;
        let end = start + size as u64;
        if ptr.checked_add(len).is_none_or(|e| e > end) {
            return Err(RuntimeError::new(format!(
                "{what} needs {len} bytes at {ptr:#x}, but its allocation ends {} bytes after that address",
                end.saturating_sub(ptr)
            )));
        }
        Ok(())
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Refuses an artifact built for a newer GPU than this one (PTX for an
    /// older sm runs on newer GPUs through the driver's JIT; the reverse
    /// cannot). `sm_90a` code runs only on sm 90 exactly.
    pub fn check_target(&self, target: &str) -> Result<(), RuntimeError> {
        let want = sm_of_target(target)
            .ok_or_else(|| RuntimeError::new(format!("`{target}` is not a GPU target")))?;
        if want > self.sm {
            return Err(RuntimeError::new(format!(
                "the artifact is built for {target}, newer than this GPU ({}, sm_{})",
                self.name, self.sm
            )));
        }
        if target.ends_with('a') && want != self.sm {
            return Err(RuntimeError::new(format!(
                "the artifact is built for {target}, which runs only on sm_{want} GPUs; this one is {} (sm_{})",
                self.name, self.sm
            )));
        }
        Ok(())
    }

    /// Loads a PTX module (the driver compiles it for this GPU).
    pub fn load_ptx(&self, ptx: &str) -> Result<Arc<CudaModule>, RuntimeError> {
        self.ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| driver_error("the driver rejected the PTX", e))
    }

    /// A kernel of a loaded module.
    pub fn function(&self, module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction, RuntimeError> {
        module
            .load_function(name)
            .map_err(|e| driver_error(&format!("kernel `{name}` is missing from the module"), e))
    }
}

/// Device memory that outlives any session: an output handed to another
/// library (through DLPack) owns one. Freed on drop, with its context
/// bound, from whatever thread drops it; the free waits for work queued on
/// it, as `cuMemFree` does.
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceBuffer {
    /// `len` bytes (at least one is allocated) on `gpu`.
    pub fn new(gpu: &Gpu, len: usize) -> Result<DeviceBuffer, RuntimeError> {
        gpu.ctx.bind_to_thread().map_err(|e| driver_error("cannot bind the CUDA context", e))?;
        // SAFETY: a plain allocation in the bound context.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(len.max(1)) }
            .map_err(|e| driver_error(&format!("out of device memory: cannot allocate {len} bytes on {}", gpu.name), e))?;
        Ok(DeviceBuffer { ptr, len, ctx: gpu.ctx.clone() })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills the whole buffer from `src` (exactly as long), waiting for it.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<(), RuntimeError> {
        if src.len() != self.len {
            return Err(RuntimeError::new(format!("a {}-byte device buffer cannot take {} bytes", self.len, src.len())));
        }
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| driver_error("cannot bind the CUDA context", e))?;
        // SAFETY: `len` bytes live at `ptr` in this context.
        unsafe { cudarc::driver::result::memcpy_htod_sync(self.ptr, src) }.map_err(|e| driver_error("copying to a device buffer", e))
    }

    /// Copies the whole buffer into `dst` (exactly as long), waiting for it.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), RuntimeError> {
        if dst.len() != self.len {
            return Err(RuntimeError::new(format!("a {}-byte device buffer cannot fill {} bytes", self.len, dst.len())));
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| driver_error("cannot bind the CUDA context", e))?;
        // SAFETY: `len` bytes live at `ptr` in this context.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, self.ptr) }.map_err(|e| driver_error("copying a device array to the host", e))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated in `new` in this context, freed once.
            let _ = unsafe { cudarc::driver::result::free_sync(self.ptr) };
        }
    }
}

#[cfg(test)]
mod tests;
