"""aoc from Python: compile, quantize, run and explain neural networks.

    import aoc
    sess = aoc.Session(aoc.compile("model.onnx", target="host"))
    outputs = sess.run({"input": x})           # {name: numpy.ndarray}

The functions call the same library as the ``aoc`` command (``aoc compile``,
``aoc quantize``, ``aoc explain --json``, ``aoc bench --json``); sessions run
artifacts through aoc's runtime, on the CPU or, for ``sm_*`` targets, a GPU.
Errors are :class:`aoc.Error` subclasses carrying the command's messages.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._errors import (
    CompileError,
    DeviceError,
    Error,
    InputError,
    InternalError,
    LoadError,
    QuantizeError,
    RunError,
)
from . import _aoc
from ._aoc import Artifact, DeviceArray, Session, __version__, empty, set_verbose

__all__ = [
    "Artifact",
    "DeviceArray",
    "Session",
    "Model",
    "compile",
    "load",
    "quantize",
    "explain",
    "empty",
    "set_verbose",
    "Error",
    "CompileError",
    "LoadError",
    "InputError",
    "RunError",
    "QuantizeError",
    "DeviceError",
    "InternalError",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]
InputShapes = Optional[Union[Mapping[str, Sequence[int]], Sequence[Tuple[str, Sequence[int]]]]]


class Model:
    """A model in aoc's IR: an ``.air`` file and its weights, as
    :func:`quantize` returns it. :func:`compile` takes it like a path;
    :meth:`save` writes it where ``aoc compile`` and ``aoc run`` read it."""

    def __init__(self, path: PathLike, _scratch: Optional[tempfile.TemporaryDirectory] = None):
        self._path = Path(path)
        # Keeps the scratch folder (and so the files) alive with the object.
        self._scratch = _scratch

    @property
    def path(self) -> str:
        """The ``.air`` file (inside a scratch folder until saved)."""
        return str(self._path)

    def __fspath__(self) -> str:
        return str(self._path)

    @property
    def text(self) -> str:
        """The model's ``.air`` text."""
        return self._path.read_text()

    def save(self, path: PathLike) -> List[str]:
        """Writes the model to ``path`` (``.air``) and its weights to the
        ``.safetensors`` file beside it; returns the paths written."""
        return _aoc.save_model(str(self._path), os.fspath(path))

    def __repr__(self) -> str:
        return f"<aoc.Model {self._path}>"


def _shapes(input_shapes: InputShapes) -> List[Tuple[str, List[int]]]:
    if input_shapes is None:
        return []
    items = input_shapes.items() if isinstance(input_shapes, Mapping) else input_shapes
    out = []
    for item in items:
        try:
            name, dims = item
            out.append((str(name), [int(d) for d in dims]))
        except (TypeError, ValueError):
            raise InputError(f"input_shapes takes {{name: (dims...)}}, found {item!r}") from None
    return out


def _model_file(model: Any, scratch: List[tempfile.TemporaryDirectory]) -> str:
    """The path of a model file for `model`: a path as it is, an aoc.Model's
    file, or ONNX bytes / an onnx.ModelProto written to a scratch file."""
    if isinstance(model, Model):
        return model.path
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    else:
        raise InputError(
            f"model must be a path (.onnx or .air), ONNX bytes, an onnx.ModelProto or an aoc.Model, found {type(model).__name__}"
        )
    d = tempfile.TemporaryDirectory(prefix="aoc-model-")
    scratch.append(d)
    path = os.path.join(d.name, "model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    return path


def compile(
    model: Any,
    target: str = "host",
    precision: str = "fp32",
    passes: Optional[str] = None,
    input_shapes: InputShapes = None,
    *,
    reference_fallback: bool = False,
    verify_each: bool = True,
) -> Artifact:
    """Compiles ``model`` for ``target``, as ``aoc compile``.

    model: a path to an ``.onnx`` or ``.air`` file, ONNX bytes, an
        ``onnx.ModelProto`` or an :class:`aoc.Model`.
    target: ``host`` (the best level of this CPU), ``x86-64-v4``,
        ``x86-64-v3``, ``x86-64``, or a GPU: ``sm_70`` ... ``sm_90a``.
    precision: GPU targets: ``fp32``, ``tf32``, ``fp16`` or ``bf16``.
    passes: the pass pipeline (default: the target's).
    input_shapes: for ONNX models with symbolic dimensions, ``{name: dims}``.
    reference_fallback: run ops without a native kernel on the reference
        interpreter (a development aid; slow).

    Returns the :class:`aoc.Artifact` (in memory; ``.save(path)`` writes it).
    Raises :class:`aoc.CompileError` with the command's located messages.
    """
    scratch: List[tempfile.TemporaryDirectory] = []
    try:
        path = _model_file(model, scratch)
        return _aoc.compile(path, str(target), str(precision), passes, _shapes(input_shapes), bool(reference_fallback), bool(verify_each))
    finally:
        for d in scratch:
            d.cleanup()


def load(path: PathLike) -> Artifact:
    """Reads and validates an ``.aoc`` file (:class:`aoc.LoadError` if it
    is missing or not a valid artifact)."""
    return _aoc.load(os.fspath(path))


def explain(artifact: Union[Artifact, PathLike], full: bool = False) -> Any:
    """What an artifact runs, as ``aoc explain --json``: one dict per plan
    step (``index``, ``kind``, ``kernel``, ``precision``, ``op``, ``loc``,
    ``origin``; GPU artifacts: each launch and host step). With
    ``full=True``, the whole object (target, inputs, outputs, memory,
    steps)."""
    if not isinstance(artifact, Artifact):
        artifact = os.fspath(artifact)
    v = _aoc.explain(artifact)
    if full:
        return v
    return v.get("steps", v.get("items", []))


_NUMPY_OF = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u64": np.uint64,
    "u32": np.uint32,
    "u16": np.uint16,
    "u8": np.uint8,
    "i1": np.bool_,
}


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch.Tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _batch_arrays(item: Any, specs: Sequence[Tuple[str, str, List[int]]], i: int) -> List[np.ndarray]:
    names = [s[0] for s in specs]
    if isinstance(item, Mapping):
        unknown = [k for k in item if k not in names]
        if unknown:
            raise InputError(f"calibration batch {i}: unknown input `{unknown[0]}`; the model's inputs are: {', '.join(names)}")
        missing = [n for n in names if n not in item]
        if missing:
            raise InputError(f"calibration batch {i}: missing input `{missing[0]}`")
        values = [item[n] for n in names]
    elif isinstance(item, (tuple, list)):
        # Positional; trailing extras (a DataLoader's labels) are ignored.
        if len(item) < len(names):
            raise InputError(f"calibration batch {i}: {len(item)} arrays for a model with {len(names)} inputs ({', '.join(names)})")
        values = list(item[: len(names)])
    else:
        if len(names) != 1:
            raise InputError(f"calibration batch {i}: one array for a model with {len(names)} inputs; give a dict of {', '.join(names)}")
        values = [item]
    out = []
    for (name, dtype, shape), v in zip(specs, values):
        a = _to_numpy(v)
        want = _NUMPY_OF.get(dtype)
        if want is None:
            raise InputError(f"input `{name}` is {dtype}, which calibration cannot take")
        if list(a.shape) != list(shape):
            raise InputError(f"calibration batch {i}: input `{name}` must have shape {list(shape)}, found {list(a.shape)}")
        if a.dtype != want:
            if np.dtype(want).kind == a.dtype.kind or (np.dtype(want).kind == "f" and a.dtype.kind in "iu"):
                a = a.astype(want)
            else:
                raise InputError(f"calibration batch {i}: input `{name}` must be {np.dtype(want).name}, found {a.dtype.name}")
        out.append(np.ascontiguousarray(a))
    return out


def _write_batches(batches: Iterable[Any], specs: Sequence[Tuple[str, str, List[int]]], folder: str, what: str) -> int:
    """Writes each batch as .npy files in the layout `aoc quantize --calib`
    reads: FOLDER/NNNNNN.npy for one input, FOLDER/<input>/NNNNNN.npy for
    several."""
    if isinstance(batches, (np.ndarray, Mapping)):
        raise InputError(f"{what} must be an iterable of batches (a list of arrays or of input dicts, a DataLoader), not one batch")
    try:
        it = iter(batches)
    except TypeError:
        raise InputError(f"{what} must be an iterable of batches, found {type(batches).__name__}") from None
    os.makedirs(folder, exist_ok=True)
    n = 0
    for i, item in enumerate(it):
        arrays = _batch_arrays(item, specs, i)
        for (name, _, _), a in zip(specs, arrays):
            d = folder if len(specs) == 1 else os.path.join(folder, name)
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, f"{i:06d}.npy"), a)
        n += 1
    if n == 0:
        raise InputError(f"{what} holds no batches")
    return n


def quantize(
    model: Any,
    calibration: Iterable[Any],
    method: str = "entropy",
    target_sqnr: Optional[float] = None,
    *,
    target: str = "host",
    percentile: float = 99.99,
    precision: str = "int8",
    activations: str = "u8",
    per_channel_weights: bool = True,
    keep: Sequence[str] = (),
    residual: str = "auto",
    sensitivity: bool = False,
    sensitivity_batches: int = 8,
    eval: Optional[Iterable[Any]] = None,
    requantize: bool = False,
    input_shapes: InputShapes = None,
    threads: int = 0,
) -> Tuple[Model, Dict[str, Any]]:
    """Post-training quantization, as ``aoc quantize``.

    model: as for :func:`compile`.
    calibration: an iterable of batches, each an input dict ``{name:
        array}``, a tuple of arrays in input order (extra trailing items,
        such as a DataLoader's labels, are ignored) or, for a one-input
        model, an array. Arrays are NumPy arrays or anything
        ``numpy.asarray`` takes (PyTorch tensors too) of exactly the
        input's shape; floats are cast to the input's dtype.
    method: ``entropy``, ``percentile``, ``mse`` or ``minmax``.
    target_sqnr: keep the most sensitive layers in float until the
        output SQNR against the float model is at least this many dB.
    target: where the result will run (as for :func:`compile`): layers the
        target has no integer kernel for stay out of int8 (on GPUs with
        fp16 tensor cores they run in fp16: compile with precision="fp16").
    eval: held-out batches (as ``calibration``) to measure the result on.
    The other options are ``aoc quantize``'s flags of the same names.

    Returns ``(model, report)``: the quantized :class:`aoc.Model` and the
    report (``aoc quantize --report``'s JSON as a dict; ``report["table"]``
    is the per-layer table the command prints).
    """
    scratch: List[tempfile.TemporaryDirectory] = []
    try:
        path = _model_file(model, scratch)
        shapes = _shapes(input_shapes)
        specs = _aoc.model_inputs(path, shapes)
        work = tempfile.TemporaryDirectory(prefix="aoc-calib-")
        scratch.append(work)
        calib_dir = os.path.join(work.name, "calib")
        _write_batches(calibration, specs, calib_dir, "calibration")
        eval_dir = None
        if eval is not None:
            eval_dir = os.path.join(work.name, "eval")
            _write_batches(eval, specs, eval_dir, "eval")
        out = tempfile.TemporaryDirectory(prefix="aoc-quantized-")
        out_path = os.path.join(out.name, "model.air")
        options = dict(
            method=str(method),
            percentile=float(percentile),
            precision=str(precision),
            activations=str(activations),
            per_channel_weights=bool(per_channel_weights),
            keep=[str(k) for k in keep],
            residual=str(residual),
            target_sqnr=None if target_sqnr is None else float(target_sqnr),
            sensitivity=bool(sensitivity),
            sensitivity_batches=int(sensitivity_batches),
            requantize=bool(requantize),
            threads=int(threads),
            target=str(target),
        )
        report, table = _aoc.quantize(path, calib_dir, out_path, options, eval_dir, shapes)
        if isinstance(report, dict):
            report["table"] = table
        return Model(out_path, out), report
    finally:
        for d in scratch:
            d.cleanup()
