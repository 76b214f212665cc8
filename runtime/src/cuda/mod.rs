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
pub use exec::{GpuSession, KernelTrial, time_kernel};

/// One GPU, its primary context and a stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    sm: u32,
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
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability as `major * 10 + minor` (an H200 is 90).
    pub fn sm(&self) -> u32 {
        self.sm
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

#[cfg(test)]
mod tests;
