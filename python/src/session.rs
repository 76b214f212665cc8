//! `aoc.Session`: a loaded artifact run on NumPy arrays, on the CPU
//! (`exec::Session`) or a GPU (`cuda::GpuSession`), chosen by the
//! artifact's target as the C API does.
//!
//! Copies: an input array is read where it lies (its buffer is handed to
//! the runtime as is; it must be C-contiguous with exactly the input's
//! dtype and shape, or the call raises `aoc.InputError` instead of copying
//! quietly). Each output is a 64-byte aligned buffer the kernels write
//! into directly, handed to NumPy as the array's memory (the array's
//! `base` is an `aoc._aoc.OutputBuffer`): no copy on the way out. The CPU
//! runtime stages an input that is not 64-byte aligned
//! (`aoc.empty` gives aligned arrays).

use std::alloc::Layout;
use std::ffi::c_void;
use std::time::Instant;

use numpy::npyffi::{self, NPY_ARRAY_CARRAY, PY_ARRAY_API, npy_intp};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use aoc_runtime::artifact::{Artifact as RtArtifact, DType, TensorSpec};
use aoc_runtime::cuda::{Dst, GpuSession, Src};
use aoc_runtime::exec::{Session as CpuSession, SessionOptions};

use crate::dlpack::{DL_CUDA, DeviceArray, Want, cuda_address, device_of};
use crate::model::Artifact;
use crate::{Failure, Kind, guarded, json_to_py};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_class::<OutputBuffer>()?;
    m.add_class::<DeviceArray>()?;
    m.add_function(wrap_pyfunction!(empty, m)?)?;
    Ok(())
}

/// Where a session runs (one per `Session` object, so its size is no
/// concern).
#[allow(clippy::large_enum_variant)]
enum Backend {
    Cpu(CpuSession),
    Gpu(GpuSession),
}

impl Backend {
    fn inputs(&self) -> &[TensorSpec] {
        match self {
            Backend::Cpu(s) => s.inputs(),
            Backend::Gpu(s) => s.inputs(),
        }
    }

    fn outputs(&self) -> &[TensorSpec] {
        match self {
            Backend::Cpu(s) => s.outputs(),
            Backend::Gpu(s) => s.outputs(),
        }
    }

    fn run_io(&self, inputs: &[Src], outputs: &mut [Dst], after: Option<usize>) -> Result<(), String> {
        match self {
            Backend::Cpu(_) if after.is_some() => return Err("stream is for GPU sessions".to_string()),
            Backend::Cpu(s) => {
                let ins: Vec<&[u8]> = inputs.iter().map(|x| if let Src::Host(x) = x { Ok(*x) } else { Err("a CPU session reads host memory only") }).collect::<Result<_, _>>()?;
                let mut outs: Vec<&mut [u8]> = outputs
                    .iter_mut()
                    .map(|o| if let Dst::Host(o) = o { Ok(&mut **o) } else { Err("a CPU session writes host memory only") })
                    .collect::<Result<_, _>>()?;
                s.run_into(&ins, &mut outs)
            }
            Backend::Gpu(s) => s.run_io(inputs, outputs, after),
        }
        .map_err(|e| e.to_string())
    }
}

/// 64-byte aligned memory (zeroed) that a NumPy array uses as its own.
#[pyclass(module = "aoc._aoc", frozen)]
pub(crate) struct OutputBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain heap memory; NumPy owns access to it once handed over.
unsafe impl Send for OutputBuffer {}
unsafe impl Sync for OutputBuffer {}

const ALIGN: usize = 64;

impl OutputBuffer {
    pub(crate) fn new(len: usize) -> Result<OutputBuffer, Failure> {
        if len == 0 {
            return Ok(OutputBuffer { ptr: std::ptr::NonNull::<[u8; ALIGN]>::dangling().as_ptr().cast(), len });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| Failure::new(Kind::Run, format!("cannot allocate {len} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Failure::new(Kind::Run, format!("out of memory allocating an output of {len} bytes")));
        }
        Ok(OutputBuffer { ptr, len })
    }
}

impl OutputBuffer {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `self` owns `len` bytes at `ptr`, borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for OutputBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, ALIGN)) };
        }
    }
}

#[pymethods]
impl OutputBuffer {
    fn __len__(&self) -> usize {
        self.len
    }
}

/// Wraps `buf` as an array of `descr` and `dims` that owns it.
pub(crate) fn into_array<'py>(py: Python<'py>, buf: OutputBuffer, descr: &Bound<'py, PyArrayDescr>, dims: &[npy_intp]) -> PyResult<Bound<'py, PyAny>> {
    let data = buf.ptr;
    let owner = Bound::new(py, buf)?;
    let mut dims = dims.to_vec();
    // SAFETY: NewFromDescr steals a reference to the descriptor (given
    // one) and views `data` (len bytes = the product of dims times the
    // item size, checked at load); SetBaseObject steals the owner, which
    // keeps `data` alive as long as the array.
    unsafe {
        let ty = npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type);
        let d = descr.as_dtype_ptr();
        pyo3::ffi::Py_INCREF(d.cast());
        let arr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            ty,
            d,
            dims.len() as i32,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data.cast::<c_void>(),
            NPY_ARRAY_CARRAY,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, arr)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, arr.as_ptr().cast(), owner.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}

/// NumPy's name of a runtime dtype (bf16 and fp8 as `ml_dtypes` names them).
pub(crate) fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "float64",
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::I16 => "int16",
        DType::I8 => "int8",
        DType::U64 => "uint64",
        DType::U32 => "uint32",
        DType::U16 => "uint16",
        DType::U8 => "uint8",
        DType::I1 => "bool",
        DType::BF16 => "bfloat16",
        DType::F8E4M3FN => "float8_e4m3fn",
        DType::F8E5M2 => "float8_e5m2",
    }
}

/// The NumPy dtype of a runtime dtype (bf16 and fp8 through `ml_dtypes`).
pub(crate) fn numpy_dtype<'py>(py: Python<'py>, d: DType) -> Result<Bound<'py, PyArrayDescr>, Failure> {
    let err = |e: PyErr| Failure::new(Kind::Load, format!("no NumPy dtype for {}: {e}", d.name()));
    let name = numpy_name(d);
    match d {
        DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => {
            let m = py.import("ml_dtypes").map_err(|_| {
                Failure::new(Kind::Load, format!("the artifact has a {} tensor; NumPy has no such dtype: install the ml_dtypes package", d.name()))
            })?;
            let t = m.getattr(name).map_err(err)?;
            PyArrayDescr::new(py, &t).map_err(err)
        }
        _ => PyArrayDescr::new(py, name).map_err(err),
    }
}

/// A tensor's dtype, shape and size, looked up once at load.
struct Port {
    name: String,
    dt: DType,
    dtype: Py<PyArrayDescr>,
    shape: Vec<usize>,
    dims: Vec<npy_intp>,
    bytes: usize,
}

fn ports(py: Python<'_>, specs: &[TensorSpec], what: &str) -> Result<Vec<Port>, Failure> {
    specs
        .iter()
        .map(|s| {
            let d = DType::parse(&s.dtype).ok_or_else(|| Failure::new(Kind::Load, format!("{what} `{}` has unknown dtype {}", s.name, s.dtype)))?;
            let n: u64 = s.shape.iter().product();
            Ok(Port {
                name: s.name.clone(),
                dt: d,
                dtype: numpy_dtype(py, d)?.unbind(),
                shape: s.shape.iter().map(|&x| x as usize).collect(),
                dims: s.shape.iter().map(|&x| x as npy_intp).collect(),
                bytes: (n * d.size()) as usize,
            })
        })
        .collect()
}

/// Something other than an ndarray as an array: through DLPack when it
/// speaks it (a PyTorch CPU tensor: no copy), else `numpy.asarray`.
fn as_array<'py>(py: Python<'py>, name: &str, v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    let np = py.import("numpy")?;
    let a = if v.hasattr("__dlpack__")? {
        np.call_method1("from_dlpack", (v,)).map_err(|e| {
            Failure::new(
                Kind::Input,
                format!("input `{name}` cannot be read as a host array through DLPack ({e}); sessions take host memory: move it to the CPU first"),
            )
        })?
    } else {
        np.call_method1("asarray", (v,))?
    };
    a.cast_into::<PyUntypedArray>().map_err(PyErr::from)
}

/// A loaded artifact, ready to run on NumPy arrays.
#[pyclass(module = "aoc._aoc", frozen)]
pub struct Session {
    backend: Backend,
    name: String,
    target: String,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    load_ms: f64,
}

/// `cuda`, `cuda:N` or `N` -> N; `None` -> 0.
fn gpu_ordinal(device: Option<&Bound<'_, PyAny>>) -> Result<usize, Failure> {
    let Some(d) = device else { return Ok(0) };
    if let Ok(n) = d.extract::<usize>() {
        return Ok(n);
    }
    let s: String = d.str().map(|s| s.to_string()).unwrap_or_default();
    match s.as_str() {
        "cuda" | "gpu" => Ok(0),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Failure::new(Kind::Input, format!("device must be `cuda`, `cuda:N` or a GPU index for a GPU artifact, found `{s}`"))),
    }
}

/// One bound input: a host array read in place, or a CUDA tensor's
/// address with the capsule that keeps it valid.
enum Slot<'py> {
    Host(Bound<'py, PyUntypedArray>),
    /// The address and the capsule that keeps it valid.
    Device(u64, #[allow(dead_code)] Bound<'py, PyAny>),
}

impl Session {
    /// The GPU session, for a value on a CUDA device; a clear refusal for a
    /// CPU one.
    fn gpu_for(&self, what: &str, name: &str) -> Result<&GpuSession, Failure> {
        match &self.backend {
            Backend::Gpu(g) => Ok(g),
            Backend::Cpu(_) => Err(Failure::new(
                Kind::Input,
                format!("{what} `{name}` is a CUDA tensor, but {} is a CPU artifact ({}); move it to the CPU first (.cpu())", self.name, self.target),
            )),
        }
    }

    fn bind<'a, 'py>(&self, py: Python<'py>, feed: &Bound<'py, PyAny>, keep: &'a mut Vec<Slot<'py>>) -> PyResult<Vec<Src<'a>>> {
        let feed = feed
            .cast::<PyDict>()
            .map_err(|_| Failure::new(Kind::Input, format!("the inputs must be a dict of input name to array; the model's inputs are: {}", self.describe_inputs(py))))?;
        let mut slots: Vec<Option<Slot<'py>>> = (0..self.inputs.len()).map(|_| None).collect();
        for (k, v) in feed.iter() {
            let key = k
                .cast::<pyo3::types::PyString>()
                .map_err(|_| Failure::new(Kind::Input, format!("input names must be strings, found {}", k.repr().map(|r| r.to_string()).unwrap_or_default())))?;
            let name = key.to_cow()?;
            let i = self.inputs.iter().position(|p| p.name == *name).ok_or_else(|| {
                Failure::new(Kind::Input, format!("unknown input `{name}`; the model's inputs are: {}", self.describe_inputs(py)))
            })?;
            let p = &self.inputs[i];
            if v.cast::<PyUntypedArray>().is_err() && device_of(&v)?.is_some_and(|(t, _)| t == DL_CUDA) {
                let g = self.gpu_for("input", &name)?;
                let want = Want { what: "input", name: &name, dtype: p.dt, shape: &p.shape };
                let (addr, cap) = cuda_address(&v, g.stream_handle(), g.ordinal(), &want)?;
                slots[i] = Some(Slot::Device(addr, cap));
                continue;
            }
            let arr = match v.cast::<PyUntypedArray>() {
                Ok(a) => a.clone(),
                Err(_) => as_array(py, &name, &v)?,
            };
            let want = p.dtype.bind(py);
            if !arr.dtype().is_equiv_to(want) {
                return Err(Failure::new(Kind::Input, format!("input `{name}` must be {} with shape {:?}, found {}", want.str()?, p.shape, arr.dtype().str()?)).into());
            }
            if arr.shape() != p.shape.as_slice() {
                return Err(Failure::new(Kind::Input, format!("input `{name}` must have shape {:?} ({}), found {:?}", p.shape, want.str()?, arr.shape())).into());
            }
            if !arr.is_c_contiguous() {
                return Err(Failure::new(
                    Kind::Input,
                    format!("input `{name}` is not C-contiguous (strides {:?}); pass numpy.ascontiguousarray(...) (aoc reads inputs in place and does not copy them)", arr.strides()),
                )
                .into());
            }
            slots[i] = Some(Slot::Host(arr));
        }
        let missing: Vec<String> = slots
            .iter()
            .zip(&self.inputs)
            .filter(|(s, _)| s.is_none())
            .map(|(_, p)| format!("{} ({} {:?})", p.name, p.dtype.bind(py).str().map(|s| s.to_string()).unwrap_or_default(), p.shape))
            .collect();
        if !missing.is_empty() {
            return Err(Failure::new(Kind::Input, format!("missing input{} {}", if missing.len() == 1 { "" } else { "s" }, missing.join(", "))).into());
        }
        keep.extend(slots.into_iter().flatten());
        Ok(keep
            .iter()
            .zip(&self.inputs)
            .map(|(slot, p)| match slot {
                _ if p.bytes == 0 => Src::Host(&[]),
                Slot::Device(addr, _) => Src::Device(*addr),
                // SAFETY: a C-contiguous array of exactly this dtype and
                // shape holds `p.bytes` bytes at `data`; `keep` holds a
                // reference to it for as long as the slice lives.
                Slot::Host(a) => Src::Host(unsafe { std::slice::from_raw_parts((*a.as_array_ptr()).fields.data as *const u8, p.bytes) }),
            })
            .collect())
    }

    fn describe_inputs(&self, py: Python<'_>) -> String {
        self.inputs
            .iter()
            .map(|p| format!("{} ({} {:?})", p.name, p.dtype.bind(py).str().map(|s| s.to_string()).unwrap_or_default(), p.shape))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Runs one inference; the outputs in the artifact's order: the
    /// tensors bound in `bound` (name -> CUDA tensor, written in place),
    /// else device arrays when an input came from the GPU, else NumPy
    /// arrays.
    fn run_arrays<'py>(&self, py: Python<'py>, feed: &Bound<'py, PyAny>, bound: Option<&Bound<'py, PyAny>>, stream: Option<usize>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut keep = Vec::with_capacity(self.inputs.len());
        let ins = self.bind(py, feed, &mut keep)?;
        let on_device = ins.iter().any(|x| matches!(x, Src::Device(_)));
        // Each output: a caller's tensor, a device array, or host memory.
        enum Out<'py> {
            // The address, the capsule that keeps it valid, the tensor.
            Bound { addr: u64, _capsule: Bound<'py, PyAny>, tensor: Bound<'py, PyAny> },
            Device(Bound<'py, DeviceArray>),
            Host(OutputBuffer),
        }
        let mut outs: Vec<Option<Out<'py>>> = (0..self.outputs.len()).map(|_| None).collect();
        if let Some(bound) = bound.filter(|b| !b.is_none()) {
            let d = bound
                .cast::<PyDict>()
                .map_err(|_| Failure::new(Kind::Input, "outputs must be a dict of output name to a CUDA tensor".to_string()))?;
            for (k, v) in d.iter() {
                let name: String = k.extract().map_err(|_| Failure::new(Kind::Input, "output names must be strings".to_string()))?;
                let i = self.outputs.iter().position(|p| p.name == name).ok_or_else(|| {
                    Failure::new(Kind::Input, format!("unknown output `{name}`; the model's outputs are: {}", self.outputs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")))
                })?;
                if !device_of(&v)?.is_some_and(|(t, _)| t == DL_CUDA) {
                    return Err(Failure::new(Kind::Input, format!("output `{name}`: only CUDA tensors (DLPack) can be bound as outputs")).into());
                }
                let g = self.gpu_for("output", &name)?;
                let p = &self.outputs[i];
                let want = Want { what: "output", name: &name, dtype: p.dt, shape: &p.shape };
                let (addr, cap) = cuda_address(&v, g.stream_handle(), g.ordinal(), &want)?;
                outs[i] = Some(Out::Bound { addr, _capsule: cap, tensor: v });
            }
        }
        for (o, p) in outs.iter_mut().zip(&self.outputs) {
            if o.is_some() {
                continue;
            }
            *o = Some(match &self.backend {
                Backend::Gpu(g) if on_device => Out::Device(Bound::new(py, DeviceArray::new(g.gpu(), p.dt, &p.shape, p.bytes)?)?),
                _ => Out::Host(OutputBuffer::new(p.bytes)?),
            });
        }
        let mut outs: Vec<Out<'py>> = outs.into_iter().flatten().collect();
        let mut dsts: Vec<Dst> = outs
            .iter_mut()
            .zip(&self.outputs)
            .map(|(o, p)| match o {
                _ if p.bytes == 0 => Dst::Host(&mut []),
                Out::Bound { addr, .. } => Dst::Device(*addr),
                Out::Device(a) => Dst::Device(a.get().ptr()),
                Out::Host(b) => Dst::Host(b.as_mut_slice()),
            })
            .collect();
        let backend = &self.backend;
        let name = &self.name;
        py.detach(|| guarded(|| backend.run_io(&ins, &mut dsts, stream).map_err(|m| Failure::new(Kind::Run, format!("{name}: {m}")))))?;
        drop(dsts);
        outs.into_iter()
            .zip(&self.outputs)
            .map(|(o, p)| match o {
                Out::Bound { tensor, .. } => Ok(tensor),
                Out::Device(a) => Ok(a.into_any()),
                Out::Host(b) => into_array(py, b, p.dtype.bind(py), &p.dims),
            })
            .collect()
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (artifact, threads=None, device=None))]
    fn new(py: Python<'_>, artifact: &Bound<'_, PyAny>, threads: Option<usize>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Session> {
        let t0 = Instant::now();
        let art: RtArtifact = match artifact.cast::<Artifact>() {
            Ok(a) => {
                let a = a.get();
                py.detach(|| guarded(|| a.open()))?
            }
            Err(_) => {
                let path: std::path::PathBuf = artifact.extract().map_err(|_| {
                    Failure::new(Kind::Input, "Session takes an aoc.Artifact or the path of an .aoc file".to_string())
                })?;
                py.detach(|| guarded(|| RtArtifact::open(&path).map_err(|e| Failure::new(Kind::Load, e.to_string()))))?
            }
        };
        let name = art.name().to_string();
        let target = art.manifest().target.clone();
        let backend = if target.starts_with("sm_") {
            if threads.is_some() {
                return Err(Failure::new(Kind::Input, format!("threads is for CPU artifacts; {name} is for {target}")).into());
            }
            let ordinal = gpu_ordinal(device)?;
            Backend::Gpu(py.detach(|| guarded(|| GpuSession::from_artifact(art, ordinal).map_err(|e| Failure::new(Kind::Device, e.to_string()))))?)
        } else {
            if let Some(d) = device {
                let s = d.str()?.to_string();
                if s != "cpu" {
                    return Err(Failure::new(Kind::Input, format!("{name} is a CPU artifact ({target}); device must be None or `cpu`, found `{s}`")).into());
                }
            }
            let opts = SessionOptions { threads: threads.unwrap_or(0) };
            Backend::Cpu(py.detach(|| guarded(|| CpuSession::from_artifact(art, &opts).map_err(|e| Failure::new(Kind::Load, e.to_string()))))?)
        };
        let inputs = ports(py, backend.inputs(), "input")?;
        let outputs = ports(py, backend.outputs(), "output")?;
        Ok(Session { backend, name, target, inputs, outputs, load_ms: t0.elapsed().as_secs_f64() * 1e3 })
    }

    /// `run(feed)` -> {name: array}; `run(None, feed)` -> [array, ...] in
    /// output order; `run([names], feed)` -> those outputs, as ONNX
    /// Runtime's `InferenceSession.run`. For a GPU artifact, CUDA tensors
    /// (anything with `__dlpack__`) are read on the device; the outputs are
    /// then `aoc.DeviceArray`s (`torch.from_dlpack` views them), or
    /// `outputs` binds the caller's CUDA tensors, written in place.
    /// `stream` (a CUDA stream handle, e.g. PyTorch's
    /// `current_stream().cuda_stream`): the run is ordered after the work
    /// queued on it and it waits for the run; with device inputs and
    /// outputs the call may then return before the run is done.
    #[pyo3(signature = (output_names_or_feed, feed=None, run_options=None, *, outputs=None, stream=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names_or_feed: &Bound<'py, PyAny>,
        feed: Option<&Bound<'py, PyAny>>,
        run_options: Option<&Bound<'py, PyAny>>,
        outputs: Option<&Bound<'py, PyAny>>,
        stream: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = run_options;
        let Some(feed) = feed else {
            let arrays = self.run_arrays(py, output_names_or_feed, outputs, stream)?;
            let d = PyDict::new(py);
            for (p, a) in self.outputs.iter().zip(arrays) {
                d.set_item(&p.name, a)?;
            }
            return Ok(d.into_any());
        };
        let names: Option<Vec<String>> = if output_names_or_feed.is_none() {
            None
        } else {
            Some(output_names_or_feed.extract().map_err(|_| Failure::new(Kind::Input, "output names must be None or a list of strings".to_string()))?)
        };
        let mut picks = vec![];
        if let Some(names) = &names {
            for n in names {
                let i = self.outputs.iter().position(|p| &p.name == n).ok_or_else(|| {
                    Failure::new(
                        Kind::Input,
                        format!("unknown output `{n}`; the model's outputs are: {}", self.outputs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")),
                    )
                })?;
                picks.push(i);
            }
        }
        let arrays = self.run_arrays(py, feed, outputs, stream)?;
        let list = match names {
            None => PyList::new(py, arrays)?,
            Some(_) => PyList::new(py, picks.iter().map(|&i| arrays[i].clone()))?,
        };
        Ok(list.into_any())
    }

    /// One run on raw device addresses, for frameworks' integrations (the
    /// torch.compile backend): `inputs` and `outputs` hold one address per
    /// port, in order, each of a contiguous buffer of exactly the port's
    /// dtype and shape on the session's GPU (the caller vouches for dtype
    /// and shape; the runtime checks each address range lies inside one
    /// allocation of that GPU). Ordered on `stream` as `run`'s `stream`
    /// is; returns once queued when no index check needs waiting for.
    #[pyo3(signature = (inputs, outputs, stream))]
    fn run_device(&self, py: Python<'_>, inputs: Vec<u64>, outputs: Vec<u64>, stream: usize) -> PyResult<()> {
        let Backend::Gpu(g) = &self.backend else {
            return Err(Failure::new(Kind::Input, format!("run_device is for GPU sessions; {} is a CPU artifact ({})", self.name, self.target)).into());
        };
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Failure::new(
                Kind::Input,
                format!("run_device takes {} input and {} output addresses, got {} and {}", self.inputs.len(), self.outputs.len(), inputs.len(), outputs.len()),
            )
            .into());
        }
        let ins: Vec<Src> = inputs.iter().zip(&self.inputs).map(|(&p, port)| if port.bytes == 0 { Src::Host(&[]) } else { Src::Device(p) }).collect();
        let mut outs: Vec<Dst> = outputs.iter().zip(&self.outputs).map(|(&p, port)| if port.bytes == 0 { Dst::Host(&mut []) } else { Dst::Device(p) }).collect();
        let name = &self.name;
        py.detach(|| guarded(|| g.run_io(&ins, &mut outs, Some(stream)).map_err(|e| Failure::new(Kind::Run, format!("{name}: {e}")))))?;
        Ok(())
    }

    /// `aoc bench --json` on this session: latency percentiles and mean
    /// (ms), throughput (items/s), peak memory, over `iters` timed runs
    /// after `warmup` untimed ones, on `inputs` (a feed dict) or the
    /// command's synthetic inputs.
    #[pyo3(signature = (iters=50, warmup=5, inputs=None))]
    fn bench<'py>(&self, py: Python<'py>, iters: usize, warmup: usize, inputs: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        if iters == 0 {
            return Err(Failure::new(Kind::Input, "iters must be at least 1".to_string()).into());
        }
        let data: Vec<Vec<u8>> = match inputs {
            Some(feed) => {
                let mut keep = vec![];
                let mut data = vec![];
                for (x, p) in self.bind(py, feed, &mut keep)?.iter().zip(&self.inputs) {
                    match x {
                        Src::Host(x) => data.push(x.to_vec()),
                        Src::Device(_) => return Err(Failure::new(Kind::Input, format!("bench takes host arrays; input `{}` is a CUDA tensor", p.name)).into()),
                    }
                }
                data
            }
            None => aoc_compiler::bench::synthetic_inputs(self.backend.inputs()),
        };
        let load_ms = self.load_ms;
        let v = py.detach(|| guarded(|| {
            let run = |m: String| Failure::new(Kind::Run, m);
            Ok(match &self.backend {
                Backend::Cpu(s) => {
                    let r = aoc_compiler::cpu::bench(s, &data, warmup, iters).map_err(run)?;
                    r.cpu_json(load_ms, None)
                }
                Backend::Gpu(s) => {
                    let (r, dev) = aoc_compiler::gpu::bench_gpu(s, &data, warmup, iters).map_err(run)?;
                    r.gpu_json(&dev, s.gpu().name())
                }
            })
        }))?;
        json_to_py(py, &v)
    }

    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|p| p.name.clone()).collect()
    }

    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|p| p.name.clone()).collect()
    }

    #[getter]
    fn input_shapes(&self) -> Vec<Vec<usize>> {
        self.inputs.iter().map(|p| p.shape.clone()).collect()
    }

    #[getter]
    fn output_shapes(&self) -> Vec<Vec<usize>> {
        self.outputs.iter().map(|p| p.shape.clone()).collect()
    }

    #[getter]
    fn input_dtypes<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyArrayDescr>> {
        self.inputs.iter().map(|p| p.dtype.bind(py).clone()).collect()
    }

    #[getter]
    fn output_dtypes<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyArrayDescr>> {
        self.outputs.iter().map(|p| p.dtype.bind(py).clone()).collect()
    }

    /// The artifact's target (`x86-64-v3`, `sm_90a`, ...).
    #[getter]
    fn target(&self) -> &str {
        &self.target
    }

    /// `cpu`, or the GPU's name.
    #[getter]
    fn device(&self) -> String {
        match &self.backend {
            Backend::Cpu(_) => "cpu".to_string(),
            Backend::Gpu(s) => s.gpu().name().to_string(),
        }
    }

    /// Worker threads of a CPU session (0 for a GPU session).
    #[getter]
    fn threads(&self) -> usize {
        match &self.backend {
            Backend::Cpu(s) => s.threads(),
            Backend::Gpu(_) => 0,
        }
    }

    fn __repr__(&self) -> String {
        format!("<aoc.Session {} on {} ({} inputs, {} outputs)>", self.name, self.device(), self.inputs.len(), self.outputs.len())
    }
}

/// A zeroed C-contiguous array of `shape` and `dtype` whose memory is
/// 64-byte aligned: as an input, the CPU runtime reads it without staging.
#[pyfunction]
#[pyo3(signature = (shape, dtype=None))]
fn empty<'py>(py: Python<'py>, shape: Vec<usize>, dtype: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let descr = match dtype {
        Some(d) => PyArrayDescr::new(py, d)?,
        None => PyArrayDescr::new(py, "float32")?,
    };
    if descr.has_object() || descr.has_subarray() {
        return Err(Failure::new(Kind::Input, format!("aoc.empty makes arrays of plain numbers, not {}", descr.str()?)).into());
    }
    let n = shape.iter().try_fold(descr.itemsize(), |a, &d| a.checked_mul(d)).ok_or_else(|| Failure::new(Kind::Input, format!("shape {shape:?} is too large")))?;
    let buf = OutputBuffer::new(n)?;
    let dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
    into_array(py, buf, &descr, &dims)
}
