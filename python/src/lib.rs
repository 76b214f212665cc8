//! `aoc._aoc`: the native half of the `aoc` Python package. The Python
//! half (`python/aoc/`) turns what users pass (ONNX protos, bytes,
//! iterables of calibration batches) into files and calls in here; this
//! crate calls the same library functions the `aoc` command does
//! (`aoc_compiler::cpu`, `gpu`, `quantize`, `driver`) and the runtime's
//! sessions (`aoc_runtime::exec::Session`, `cuda::GpuSession`).
//!
//! Invariants:
//! - No Rust panic reaches Python: every entry point runs its work under
//!   `catch_unwind` (compiling and quantizing on a thread with the CLI's
//!   large stack), and a panic becomes `aoc.InternalError`.
//! - Errors carry the driver's text unchanged (diagnostics rendered with
//!   file:line:col), less a leading `error: `; the Python class says what
//!   failed (`aoc.CompileError`, `aoc.InputError`, ...; `aoc/_errors.py`).
//! - The GIL is released while compiling, quantizing and running.

mod dlpack;
mod model;
mod session;

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The kinds of failure, one per exception class in `aoc/_errors.py`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Compile,
    Load,
    Input,
    Run,
    Quantize,
    Device,
    Internal,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Compile => "CompileError",
            Kind::Load => "LoadError",
            Kind::Input => "InputError",
            Kind::Run => "RunError",
            Kind::Quantize => "QuantizeError",
            Kind::Device => "DeviceError",
            Kind::Internal => "InternalError",
        }
    }
}

/// A failure on its way to Python: its class and the driver's message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub kind: Kind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure { kind, message: message.into() }
    }
}

/// `aoc._errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The driver's text as an exception message: trailing newlines and one
/// leading `error: ` (the class already says it is an error) removed.
fn message_text(msg: &str) -> &str {
    let msg = msg.trim_end();
    msg.strip_prefix("error: ").unwrap_or(msg)
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        Python::attach(|py| {
            let class = ERRORS
                .get_or_try_init(py, || py.import("aoc._errors").map(|m| m.unbind()))
                .and_then(|m| m.bind(py).getattr(f.kind.class_name()))
                .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
            match class {
                Ok(c) => PyErr::from_type(c, message_text(&f.message).to_string()),
                Err(e) => e,
            }
        })
    }
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

fn internal(p: Box<dyn std::any::Any + Send>) -> Failure {
    Failure::new(
        Kind::Internal,
        format!(
            "internal error: {}\nthis is a bug in aoc, not in your input; please report it with the call and input files",
            panic_text(p.as_ref())
        ),
    )
}

/// Runs `f`, turning a panic into `aoc.InternalError`.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(internal(p)))
}

/// Runs `f` on a thread with the CLI's 256 MiB stack (deeply nested input
/// must give a diagnostic, not a stack overflow), a panic becoming
/// `aoc.InternalError`. The caller releases the GIL around it.
pub(crate) fn on_big_stack<T: Send>(f: impl FnOnce() -> Result<T, Failure> + Send) -> Result<T, Failure> {
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new().name("aoc".into()).stack_size(256 << 20).spawn_scoped(s, f);
        match worker {
            Ok(h) => h.join().unwrap_or_else(|p| Err(internal(p))),
            Err(e) => Err(Failure::new(Kind::Internal, format!("internal error: cannot start a worker thread: {e}"))),
        }
    })
}

/// Converts a `serde_json::Value` to Python objects (through `json.loads`:
/// the reports are small and this keeps one conversion for every shape).
pub(crate) fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// Whether the driver prints summaries and warnings to stderr (it is quiet
/// by default inside Python; `aoc.set_verbose(True)` turns it on).
#[pyfunction]
fn set_verbose(verbose: bool) {
    aoc_compiler::say::set(!verbose, verbose);
}

#[pymodule]
fn _aoc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    aoc_compiler::say::set(true, false);
    m.add_function(wrap_pyfunction!(set_verbose, m)?)?;
    model::register(m)?;
    session::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
