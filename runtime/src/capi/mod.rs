//! The C API (`include/aoc_runtime.h`): a thin, panic-proof layer over
//! [`Session`] for programs written in C, C++ or anything with a C FFI.
//!
//! Invariants:
//! - No panic crosses the FFI boundary: every entry point runs its body
//!   under `catch_unwind` and turns a panic into the error
//!   "internal error: ...".
//! - A null pointer or an out-of-range index is an error (recorded for
//!   [`aoc_last_error`]), never a crash.
//! - Every string handed to C (names, dtypes, the error) is owned by this
//!   library and NUL terminated; names and dtypes live as long as their
//!   session, the error until the next failing call on the same thread.
//! - `aoc_session_run` only ever takes a shared reference to the session,
//!   so concurrent runs on one session are as safe as [`Session::run_into`]
//!   (sessions are `Sync`, asserted below).
//!
//! The header is the user-facing documentation; keep the two in step.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use crate::artifact::{Artifact, DType, TensorSpec};
use crate::exec::{RuntimeError, Session, SessionOptions};

// The C API hands one session to several threads; that is sound only while
// both executors' sessions are `Send + Sync`, which they promise. Fail the
// build, not a user's program, if that promise is ever broken.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
    #[cfg(feature = "cuda")]
    assert_send_sync::<crate::cuda::GpuSession>();
};

/// The executor behind a C session: an artifact's manifest target picks it
/// (`sm_*` runs on GPU 0 through the CUDA executor, anything else on the
/// CPU).
enum Backend {
    Cpu(Session),
    #[cfg(feature = "cuda")]
    Gpu(crate::cuda::GpuSession),
}

impl Backend {
    fn load(path: &std::path::Path, threads: usize) -> Result<Backend, RuntimeError> {
        let artifact = Artifact::open(path).map_err(|e| RuntimeError::new(e.to_string()))?;
        if artifact.manifest().target.starts_with("sm_") {
            return Backend::gpu(artifact);
        }
        Session::from_artifact(artifact, &SessionOptions { threads }).map(Backend::Cpu)
    }

    #[cfg(feature = "cuda")]
    fn gpu(artifact: Artifact) -> Result<Backend, RuntimeError> {
        let file = artifact.name().to_string();
        crate::cuda::GpuSession::from_artifact(artifact, 0)
            .map(Backend::Gpu)
            .map_err(|e| RuntimeError::new(format!("{file}: {e}")))
    }

    #[cfg(not(feature = "cuda"))]
    fn gpu(artifact: Artifact) -> Result<Backend, RuntimeError> {
        Err(RuntimeError::new(format!(
            "{}: a GPU artifact ({}), and this library is built without CUDA support (build it with `make c-lib`, which enables the runtime's `cuda` feature)",
            artifact.name(),
            artifact.manifest().target
        )))
    }

    fn inputs(&self) -> &[TensorSpec] {
        match self {
            Backend::Cpu(s) => s.inputs(),
            #[cfg(feature = "cuda")]
            Backend::Gpu(s) => s.inputs(),
        }
    }

    fn outputs(&self) -> &[TensorSpec] {
        match self {
            Backend::Cpu(s) => s.outputs(),
            #[cfg(feature = "cuda")]
            Backend::Gpu(s) => s.outputs(),
        }
    }

    fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        match self {
            Backend::Cpu(s) => s.run_into(inputs, outputs),
            #[cfg(feature = "cuda")]
            Backend::Gpu(s) => s.run_into(inputs, outputs),
        }
    }
}

/// What C sees as `aoc_session`: the session plus the C strings and sizes
/// of its inputs and outputs, built once at load so the accessors only
/// lend pointers.
pub struct AocSession {
    session: Backend,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
}

/// An input or output as the C API describes it.
struct Port {
    name: CString,
    dtype: CString,
    shape: Vec<i64>,
    bytes: usize,
}

impl Port {
    fn new(what: &str, spec: &TensorSpec) -> Result<Port, String> {
        let name = CString::new(spec.name.as_str())
            .map_err(|_| format!("{what} name {:?} contains a NUL byte", spec.name))?;
        let dtype_of = DType::parse(&spec.dtype)
            .ok_or_else(|| format!("{what} `{}`: unknown dtype `{}`", spec.name, spec.dtype))?;
        let dtype = CString::new(dtype_of.name()).expect("dtype names have no NUL byte");
        let too_large = || {
            format!(
                "{what} `{}`: shape {:?} is too large",
                spec.name, spec.shape
            )
        };
        let shape = spec
            .shape
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| too_large()))
            .collect::<Result<Vec<i64>, String>>()?;
        let bytes = spec
            .shape
            .iter()
            .try_fold(dtype_of.size(), |acc, &d| acc.checked_mul(d))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(too_large)?;
        Ok(Port {
            name,
            dtype,
            shape,
            bytes,
        })
    }

    fn describe(&self) -> String {
        format!("{} {:?}", self.dtype.to_string_lossy(), self.shape)
    }
}

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    // A message with a NUL byte (a hostile tensor name) would be cut short
    // by C; escape it instead.
    let c = CString::new(message.replace('\0', "\\0")).expect("NUL bytes were escaped");
    // `try_with` fails only while the thread is being torn down; there is
    // nobody left to read the message then.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with no message".to_string()
    }
}

/// Runs `body`; on an error or a panic records the message and returns
/// `fallback` instead.
fn guard<T>(fallback: T, body: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => {
            set_error(&message);
            fallback
        }
        Err(payload) => {
            set_error(&format!(
                "internal error: {} (please report)",
                panic_message(payload.as_ref())
            ));
            fallback
        }
    }
}

/// The session behind a C pointer, or an error naming the function.
///
/// # Safety
/// `session` is null or a pointer returned by [`aoc_session_load`] and not
/// yet freed.
unsafe fn session_ref<'a>(
    session: *const AocSession,
    func: &str,
) -> Result<&'a AocSession, String> {
    // SAFETY: per this function's contract, non-null means live.
    unsafe { session.as_ref() }.ok_or_else(|| format!("{func}: the session is NULL"))
}

fn port<'a>(ports: &'a [Port], what: &str, index: usize) -> Result<&'a Port, String> {
    ports.get(index).ok_or_else(|| {
        format!(
            "{what} index {index} is out of range (the session has {} {what}s)",
            ports.len()
        )
    })
}

fn path_from_c(path: &CStr) -> Result<PathBuf, String> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())))
    }
    #[cfg(not(unix))]
    {
        path.to_str()
            .map(PathBuf::from)
            .map_err(|_| format!("path {path:?} is not valid UTF-8"))
    }
}

/// Opens, validates and loads an artifact (a CPU one on a thread pool of
/// `threads`, a GPU one on GPU 0); NULL on error.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aoc_session_load(path: *const c_char, threads: c_int) -> *mut AocSession {
    guard(std::ptr::null_mut(), || {
        if path.is_null() {
            return Err("aoc_session_load: the path is NULL".to_string());
        }
        // SAFETY: non-null and NUL terminated per the contract.
        let path = path_from_c(unsafe { CStr::from_ptr(path) })?;
        let threads = usize::try_from(threads).map_err(|_| {
            format!(
                "{}: thread count must be 0 (one per core) or positive, found {threads}",
                path.display()
            )
        })?;
        let session = Backend::load(&path, threads).map_err(|e| e.to_string())?;
        let ports = |what: &str, specs: &[TensorSpec]| {
            specs
                .iter()
                .map(|s| Port::new(what, s))
                .collect::<Result<Vec<Port>, String>>()
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let inputs = ports("input", session.inputs())?;
        let outputs = ports("output", session.outputs())?;
        Ok(Box::into_raw(Box::new(AocSession {
            session,
            inputs,
            outputs,
        })))
    })
}

/// Frees a session; NULL is ignored.
///
/// # Safety
/// `session` is null or a pointer returned by [`aoc_session_load`], not yet
/// freed and not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aoc_session_free(session: *mut AocSession) {
    guard((), || {
        if !session.is_null() {
            // SAFETY: it came from `Box::into_raw` in `aoc_session_load` and
            // is freed once, per the contract.
            drop(unsafe { Box::from_raw(session) });
        }
        Ok(())
    })
}

/// Number of inputs; 0 (and an error) for a NULL session.
///
/// # Safety
/// See [`session_ref`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aoc_session_input_count(session: *const AocSession) -> usize {
    guard(0, || {
        // SAFETY: forwarded contract.
        Ok(unsafe { session_ref(session, "aoc_session_input_count") }?
            .inputs
            .len())
    })
}

/// Number of outputs; 0 (and an error) for a NULL session.
///
/// # Safety
/// See [`session_ref`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aoc_session_output_count(session: *const AocSession) -> usize {
    guard(0, || {
        // SAFETY: forwarded contract.
        Ok(unsafe { session_ref(session, "aoc_session_output_count") }?
            .outputs
            .len())
    })
}

/// Which list of ports an accessor reads.
#[derive(Clone, Copy)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }

    fn ports(self, s: &AocSession) -> &[Port] {
        match self {
            Side::Input => &s.inputs,
            Side::Output => &s.outputs,
        }
    }
}

/// # Safety
/// See [`session_ref`].
unsafe fn port_of<'a>(
    session: *const AocSession,
    side: Side,
    index: usize,
    func: &str,
) -> Result<&'a Port, String> {
    // SAFETY: forwarded contract.
    let s = unsafe { session_ref(session, func) }?;
    port(side.ports(s), side.word(), index)
}

/// # Safety
/// See [`session_ref`].
unsafe fn name_of(
    session: *const AocSession,
    side: Side,
    index: usize,
    func: &str,
) -> *const c_char {
    guard(std::ptr::null(), || {
        // SAFETY: forwarded contract.
        Ok(unsafe { port_of(session, side, index, func) }?
            .name
            .as_ptr())
    })
}

/// # Safety
/// See [`session_ref`].
unsafe fn dtype_of(
    session: *const AocSession,
    side: Side,
    index: usize,
    func: &str,
) -> *const c_char {
    guard(std::ptr::null(), || {
        // SAFETY: forwarded contract.
        Ok(unsafe { port_of(session, side, index, func) }?
            .dtype
            .as_ptr())
    })
}

/// # Safety
/// See [`session_ref`].
unsafe fn bytes_of(session: *const AocSession, side: Side, index: usize, func: &str) -> usize {
    guard(0, || {
        // SAFETY: forwarded contract.
        Ok(unsafe { port_of(session, side, index, func) }?.bytes)
    })
}

/// Writes the rank to `*rank` and the dims to `dims[..rank]`; an error if
/// `dims` holds fewer than `rank` entries (after `*rank` is written, so a
/// caller may ask with `max_dims = 0` first).
///
/// # Safety
/// See [`session_ref`]; `dims` is null or points to `max_dims` writable
/// `i64`s; `rank` is null or writable.
unsafe fn shape_of(
    session: *const AocSession,
    side: Side,
    index: usize,
    dims: *mut i64,
    max_dims: usize,
    rank: *mut usize,
    func: &str,
) -> c_int {
    guard(1, || {
        // SAFETY: forwarded contract.
        let p = unsafe { port_of(session, side, index, func) }?;
        if rank.is_null() {
            return Err(format!("{func}: `rank` is NULL"));
        }
        // SAFETY: non-null and writable per the contract.
        unsafe { rank.write(p.shape.len()) };
        if p.shape.is_empty() {
            return Ok(0);
        }
        if max_dims < p.shape.len() {
            return Err(format!(
                "{func}: {} `{}` has rank {}, `dims` holds {max_dims}",
                side.word(),
                p.name.to_string_lossy(),
                p.shape.len()
            ));
        }
        if dims.is_null() {
            return Err(format!("{func}: `dims` is NULL"));
        }
        // SAFETY: `dims` is non-null and holds `max_dims >= shape.len()`
        // entries per the contract.
        unsafe { std::slice::from_raw_parts_mut(dims, p.shape.len()) }.copy_from_slice(&p.shape);
        Ok(0)
    })
}

macro_rules! accessors {
    ($side:expr, $name:ident, $dtype:ident, $bytes:ident, $shape:ident) => {
        /// The name (owned by the session), or NULL and an error.
        ///
        /// # Safety
        /// `session` is null or a live session.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(session: *const AocSession, index: usize) -> *const c_char {
            // SAFETY: forwarded contract.
            unsafe { name_of(session, $side, index, stringify!($name)) }
        }

        /// The dtype name, e.g. `f32` (static), or NULL and an error.
        ///
        /// # Safety
        /// `session` is null or a live session.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $dtype(session: *const AocSession, index: usize) -> *const c_char {
            // SAFETY: forwarded contract.
            unsafe { dtype_of(session, $side, index, stringify!($dtype)) }
        }

        /// Bytes of the dense tensor, or 0 and an error.
        ///
        /// # Safety
        /// `session` is null or a live session.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $bytes(session: *const AocSession, index: usize) -> usize {
            // SAFETY: forwarded contract.
            unsafe { bytes_of(session, $side, index, stringify!($bytes)) }
        }

        /// The shape; 0 on success, nonzero and an error otherwise.
        ///
        /// # Safety
        /// `session` is null or a live session; `dims` is null or holds
        /// `max_dims` writable entries; `rank` is null or writable.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $shape(
            session: *const AocSession,
            index: usize,
            dims: *mut i64,
            max_dims: usize,
            rank: *mut usize,
        ) -> c_int {
            // SAFETY: forwarded contract.
            unsafe {
                shape_of(
                    session,
                    $side,
                    index,
                    dims,
                    max_dims,
                    rank,
                    stringify!($shape),
                )
            }
        }
    };
}

accessors!(
    Side::Input,
    aoc_session_input_name,
    aoc_session_input_dtype,
    aoc_session_input_bytes,
    aoc_session_input_shape
);
accessors!(
    Side::Output,
    aoc_session_output_name,
    aoc_session_output_dtype,
    aoc_session_output_bytes,
    aoc_session_output_shape
);

/// Checks a caller's buffer table against the session's ports and returns
/// each buffer's (pointer, length). A zero-byte tensor may have a NULL
/// pointer.
///
/// # Safety
/// `ptrs` and `lens` are null or point to `n` readable entries.
unsafe fn buffers<P: Copy>(
    side: Side,
    ports: &[Port],
    ptrs: *const P,
    lens: *const usize,
    n: usize,
    is_null: impl Fn(P) -> bool,
) -> Result<Vec<P>, String> {
    let what = side.word();
    if n != ports.len() {
        return Err(format!(
            "aoc_session_run: the session has {} {what}s, {n} were given",
            ports.len()
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if ptrs.is_null() {
        return Err(format!("aoc_session_run: the {what} array is NULL"));
    }
    if lens.is_null() {
        return Err(format!("aoc_session_run: the {what} size array is NULL"));
    }
    // SAFETY: both non-null and `n` long per the contract.
    let (ptrs, lens) = unsafe {
        (
            std::slice::from_raw_parts(ptrs, n),
            std::slice::from_raw_parts(lens, n),
        )
    };
    for (i, p) in ports.iter().enumerate() {
        let name = p.name.to_string_lossy();
        if lens[i] != p.bytes {
            return Err(format!(
                "aoc_session_run: {what} {i} `{name}` ({}) needs {} bytes, {} were given",
                p.describe(),
                p.bytes,
                lens[i]
            ));
        }
        if p.bytes != 0 && is_null(ptrs[i]) {
            return Err(format!("aoc_session_run: {what} {i} `{name}` is NULL"));
        }
    }
    Ok(ptrs.to_vec())
}

/// Refuses output buffers that overlap each other or an input: making a
/// `&mut [u8]` of them would be undefined behaviour, and a caller's
/// mix-up is better reported than silently wrong results.
fn check_overlap(
    in_ports: &[Port],
    ins: &[*const c_void],
    out_ports: &[Port],
    outs: &[*mut c_void],
) -> Result<(), String> {
    let range = |p: usize, len: usize| (p, p.saturating_add(len));
    // Empty tensors get no slice made of their pointer, so never overlap.
    let overlaps =
        |a: (usize, usize), b: (usize, usize)| a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1;
    for (i, (op, &o)) in out_ports.iter().zip(outs).enumerate() {
        let mine = range(o as usize, op.bytes);
        let name = op.name.to_string_lossy();
        for (j, (ip, &p)) in in_ports.iter().zip(ins).enumerate() {
            if overlaps(mine, range(p as usize, ip.bytes)) {
                return Err(format!(
                    "aoc_session_run: output {i} `{name}` overlaps input {j} `{}`",
                    ip.name.to_string_lossy()
                ));
            }
        }
        for (j, (op2, &p)) in out_ports.iter().zip(outs).enumerate().skip(i + 1) {
            if overlaps(mine, range(p as usize, op2.bytes)) {
                return Err(format!(
                    "aoc_session_run: output {i} `{name}` overlaps output {j} `{}`",
                    op2.name.to_string_lossy()
                ));
            }
        }
    }
    Ok(())
}

/// Runs one inference; 0 on success, nonzero and an error otherwise.
///
/// # Safety
/// `session` is null or a live session. `inputs`/`input_bytes` are null or
/// hold `n_inputs` entries, each input pointer readable for its size;
/// likewise the outputs, writable. (Overlapping outputs are refused.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aoc_session_run(
    session: *mut AocSession,
    inputs: *const *const c_void,
    input_bytes: *const usize,
    n_inputs: usize,
    outputs: *const *mut c_void,
    output_bytes: *const usize,
    n_outputs: usize,
) -> c_int {
    guard(1, || {
        // Only a shared reference: other threads may be running this
        // session at the same time.
        // SAFETY: forwarded contract.
        let s = unsafe { session_ref(session, "aoc_session_run") }?;
        // SAFETY: forwarded contract (tables of `n` entries or null).
        let ins = unsafe {
            buffers(Side::Input, &s.inputs, inputs, input_bytes, n_inputs, |p| {
                p.is_null()
            })
        }?;
        // SAFETY: as above.
        let outs = unsafe {
            buffers(
                Side::Output,
                &s.outputs,
                outputs,
                output_bytes,
                n_outputs,
                |p| p.is_null(),
            )
        }?;
        check_overlap(&s.inputs, &ins, &s.outputs, &outs)?;
        let in_slices: Vec<&[u8]> = ins
            .iter()
            .zip(&s.inputs)
            .map(|(&p, port)| {
                if port.bytes == 0 {
                    &[][..]
                } else {
                    // SAFETY: non-null (checked) and readable for its size,
                    // which matched the port, per the contract.
                    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), port.bytes) }
                }
            })
            .collect();
        let mut out_slices: Vec<&mut [u8]> = outs
            .iter()
            .zip(&s.outputs)
            .map(|(&p, port)| {
                if port.bytes == 0 {
                    &mut [][..]
                } else {
                    // SAFETY: non-null (checked), writable for its size per
                    // the contract, and overlapping no other buffer
                    // (checked).
                    unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), port.bytes) }
                }
            })
            .collect();
        s.session
            .run_into(&in_slices, &mut out_slices)
            .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// The message of the last failed call on this thread ("" if none).
#[unsafe(no_mangle)]
pub extern "C" fn aoc_last_error() -> *const c_char {
    // The pointer stays valid until the CString is replaced, i.e. until the
    // next failing call on this thread.
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests;
