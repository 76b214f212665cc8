//! CUDA tensors in and out of a GPU session through DLPack, with no host
//! round trip.
//!
//! In: an object with `__dlpack_device__` reporting a CUDA device (a
//! PyTorch or CuPy tensor) is asked for its capsule with the session's
//! stream (`__dlpack__(stream=...)`: the producer makes that stream wait
//! for the work that writes the tensor), and its data address is handed to
//! the runtime, which copies it into the session's input on the device.
//! The capsule is not consumed: dropping it lets the producer release it.
//!
//! Out: a `DeviceArray` owns device memory the run wrote and exports it as
//! a DLPack capsule (`torch.from_dlpack(out)` views it without a copy), or
//! the caller binds its own tensors as outputs (`run(feed, outputs=...)`).

use std::ffi::{CStr, c_void};

use numpy::PyArrayDescr;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use aoc_runtime::artifact::DType;
use aoc_runtime::cuda::{DeviceBuffer, Gpu};

use numpy::npyffi::npy_intp;

use crate::session::{OutputBuffer, into_array, numpy_name};
use crate::{Failure, Kind};

/// DLPack's device type of CUDA memory.
pub(crate) const DL_CUDA: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const CAPSULE: &CStr = c"dltensor";

/// DLPack's type code and width of a runtime dtype.
fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::F64 => (2, 64),
        DType::F32 => (2, 32),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::I64 => (0, 64),
        DType::I32 => (0, 32),
        DType::I16 => (0, 16),
        DType::I8 => (0, 8),
        DType::U64 => (1, 64),
        DType::U32 => (1, 32),
        DType::U16 => (1, 16),
        DType::U8 => (1, 8),
        DType::I1 => (6, 8),
        DType::F8E4M3FN => (10, 8),
        DType::F8E5M2 => (12, 8),
    };
    DLDataType { code, bits, lanes: 1 }
}

fn dl_dtype_name(t: DLDataType) -> String {
    let kind = match t.code {
        0 => "int",
        1 => "uint",
        2 => "float",
        4 => "bfloat",
        6 => "bool",
        10 => "float8_e4m3fn",
        12 => "float8_e5m2",
        _ => return format!("DLPack type code {} of {} bits", t.code, t.bits),
    };
    if t.code >= 6 { kind.to_string() } else { format!("{kind}{}", t.bits) }
}

/// The device `v` says it lives on (`__dlpack_device__`), if it speaks
/// DLPack.
pub(crate) fn device_of(v: &Bound<'_, PyAny>) -> PyResult<Option<(i32, i32)>> {
    if !v.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let d = v.call_method0("__dlpack_device__")?;
    let (t, id): (i32, i32) = d.extract().map_err(|_| Failure::new(Kind::Input, format!("__dlpack_device__ returned {}, not (type, id)", d.repr().map(|r| r.to_string()).unwrap_or_default())))?;
    Ok(Some((t, id)))
}

/// What a tensor must be to be bound to a session's input or output.
pub(crate) struct Want<'a> {
    pub what: &'a str,
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [usize],
}

/// A CUDA tensor's data address, checked against `want` (dtype, shape,
/// compact row-major layout, this GPU); the capsule that keeps it valid
/// rides along in the result.
pub(crate) fn cuda_address<'py>(v: &Bound<'py, PyAny>, stream: usize, ordinal: usize, want: &Want<'_>) -> PyResult<(u64, Bound<'py, PyAny>)> {
    let Want { what, name, .. } = *want;
    let kwargs = pyo3::types::PyDict::new(v.py());
    kwargs.set_item("stream", stream)?;
    let cap = v
        .call_method("__dlpack__", (), Some(&kwargs))
        .map_err(|e| Failure::new(Kind::Input, format!("{what} `{name}`: its __dlpack__(stream=...) failed: {e}")))?;
    // SAFETY: a capsule named "dltensor" holds a DLManagedTensor that stays
    // valid while the capsule is alive and unconsumed (DLPack's contract);
    // the shape and strides arrays hold `ndim` entries.
    let t = unsafe {
        let p = pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), CAPSULE.as_ptr());
        if p.is_null() {
            pyo3::ffi::PyErr_Clear();
            return Err(Failure::new(Kind::Input, format!("{what} `{name}`: __dlpack__ did not return a DLPack capsule named \"dltensor\"")).into());
        }
        &(*(p as *const DLManagedTensor)).dl_tensor
    };
    if t.device.device_type != DL_CUDA || t.device.device_id as usize != ordinal {
        return Err(Failure::new(
            Kind::Input,
            format!("{what} `{name}` is on DLPack device ({}, {}), the session on cuda:{ordinal}", t.device.device_type, t.device.device_id),
        )
        .into());
    }
    let dt = dl_dtype(want.dtype);
    if t.dtype != dt {
        return Err(Failure::new(Kind::Input, format!("{what} `{name}` must be {} with shape {:?}, found {}", numpy_name(want.dtype), want.shape, dl_dtype_name(t.dtype))).into());
    }
    let ndim = t.ndim.max(0) as usize;
    let (shape, strides) = unsafe {
        (
            if ndim == 0 { &[][..] } else { std::slice::from_raw_parts(t.shape, ndim) },
            if t.strides.is_null() || ndim == 0 { None } else { Some(std::slice::from_raw_parts(t.strides, ndim)) },
        )
    };
    if shape.len() != want.shape.len() || shape.iter().zip(want.shape).any(|(&a, &b)| a != b as i64) {
        return Err(Failure::new(Kind::Input, format!("{what} `{name}` must have shape {:?} ({}), found {shape:?}", want.shape, numpy_name(want.dtype))).into());
    }
    if let Some(strides) = strides {
        let mut expect = 1i64;
        for i in (0..ndim).rev() {
            if shape[i] != 1 && strides[i] != expect {
                return Err(Failure::new(
                    Kind::Input,
                    format!("{what} `{name}` is not contiguous (strides {strides:?} for shape {shape:?}); pass .contiguous() (aoc reads and writes device tensors in place)"),
                )
                .into());
            }
            expect *= shape[i];
        }
    }
    Ok(((t.data as u64) + t.byte_offset, cap))
}

/// Device memory an output was written into, readable by any DLPack
/// consumer (`torch.from_dlpack`, `cupy.from_dlpack`) without a copy.
#[pyclass(module = "aoc._aoc", frozen)]
pub struct DeviceArray {
    buf: DeviceBuffer,
    dtype: DType,
    shape: Vec<i64>,
    ordinal: usize,
}

impl DeviceArray {
    pub(crate) fn new(gpu: &Gpu, dtype: DType, shape: &[usize], bytes: usize) -> Result<DeviceArray, Failure> {
        let buf = DeviceBuffer::new(gpu, bytes).map_err(|e| Failure::new(Kind::Device, e.to_string()))?;
        Ok(DeviceArray { buf, dtype, shape: shape.iter().map(|&d| d as i64).collect(), ordinal: gpu.ordinal() })
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.buf.ptr()
    }
}

/// What a capsule's DLManagedTensor owns: the array (kept alive) and the
/// shape it points at.
struct Exported {
    _owner: Py<DeviceArray>,
    shape: Vec<i64>,
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its manager_ctx were boxed by `__dlpack__` below and
    // are freed here once, as DLPack's deleter contract says; dropping the
    // owner's reference needs the GIL.
    unsafe {
        let m = Box::from_raw(m);
        let ctx = Box::from_raw(m.manager_ctx as *mut Exported);
        Python::attach(move |_| drop(ctx));
    }
}

unsafe extern "C" fn capsule_destructor(cap: *mut pyo3::ffi::PyObject) {
    // SAFETY: a capsule still named "dltensor" was never consumed, so its
    // tensor is still ours to delete; a consumer renames it when it takes
    // over.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(cap, CAPSULE.as_ptr()) == 1 {
            let m = pyo3::ffi::PyCapsule_GetPointer(cap, CAPSULE.as_ptr()) as *mut DLManagedTensor;
            delete_managed(m);
        }
    }
}

#[pymethods]
impl DeviceArray {
    /// A DLPack capsule viewing this memory. The run that wrote it has
    /// finished before the array was returned, so `stream` needs no wait.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, max_version);
        let me = slf.get();
        if let Some(d) = dl_device.filter(|d| !d.is_none()) {
            let (t, id): (i32, i32) = d.extract()?;
            if (t, id) != (DL_CUDA, me.ordinal as i32) {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!("an aoc.DeviceArray lives on cuda:{}; copy it with .numpy() for the host", me.ordinal)));
            }
        }
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err("aoc.DeviceArray exports its memory without copying (copy=True is not supported)"));
        }
        let ctx = Box::new(Exported { _owner: slf.clone().unbind(), shape: me.shape.clone() });
        let shape_ptr = ctx.shape.as_ptr() as *mut i64;
        let managed = Box::new(DLManagedTensor {
            dl_tensor: DLTensor {
                data: me.buf.ptr() as *mut c_void,
                device: DLDevice { device_type: DL_CUDA, device_id: me.ordinal as i32 },
                ndim: me.shape.len() as i32,
                dtype: dl_dtype(me.dtype),
                shape: shape_ptr,
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: Box::into_raw(ctx) as *mut c_void,
            deleter: Some(delete_managed),
        });
        let raw = Box::into_raw(managed);
        // SAFETY: the capsule takes `raw`; its destructor deletes it unless
        // a consumer renamed the capsule (then the consumer calls the
        // deleter).
        unsafe {
            let cap = pyo3::ffi::PyCapsule_New(raw as *mut c_void, CAPSULE.as_ptr(), Some(capsule_destructor));
            if cap.is_null() {
                delete_managed(raw);
                return Err(PyErr::fetch(slf.py()));
            }
            Ok(Bound::from_owned_ptr(slf.py(), cap))
        }
    }

    fn __dlpack_device__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [DL_CUDA, self.ordinal as i32])
    }

    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDescr>> {
        Ok(crate::session::numpy_dtype(py, self.dtype)?)
    }

    /// `cuda:N`.
    #[getter]
    fn device(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }

    /// A host copy as a NumPy array.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let descr = crate::session::numpy_dtype(py, self.dtype)?;
        let dims: Vec<npy_intp> = self.shape.iter().map(|&d| d as npy_intp).collect();
        let mut host = OutputBuffer::new(self.buf.len())?;
        let buf = &self.buf;
        py.detach(|| buf.copy_to_host(host.as_mut_slice())).map_err(|e| Failure::new(Kind::Device, e.to_string()))?;
        into_array(py, host, &descr, &dims)
    }

    fn __repr__(&self) -> String {
        format!("<aoc.DeviceArray {} {:?} on cuda:{}>", numpy_name(self.dtype), self.shape, self.ordinal)
    }
}
