"""Type stubs of aoc's native module (python/src/). Users import these
names from `aoc`; `aoc/__init__.py` documents the functions that wrap the
private ones (compile, load, explain, quantize)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, final, overload

import numpy as np
import numpy.typing as npt

__version__: str
__all__ = [
    "set_verbose",
    "Artifact",
    "compile",
    "load",
    "explain",
    "model_inputs",
    "quantize",
    "save_model",
    "Session",
    "OutputBuffer",
    "empty",
    "__version__",
]

_Path = Union[str, "os.PathLike[str]"]
_Feed = Mapping[str, npt.ArrayLike]

def set_verbose(verbose: bool) -> None:
    """Whether aoc prints its summaries, warnings and progress to stderr
    (off by default inside Python)."""

def empty(shape: Sequence[int], dtype: Optional[npt.DTypeLike] = None) -> np.ndarray:
    """A zeroed C-contiguous array (float32 unless `dtype`) whose memory is
    64-byte aligned: as an input, the CPU runtime reads it without staging."""

@final
class Artifact:
    """A compiled model: the bytes of one `.aoc` file, in memory
    (`aoc.compile` makes one, `aoc.load` reads one)."""

    @property
    def target(self) -> str:
        """The target it was compiled for (`x86-64-v3`, `sm_90a`, ...)."""
    @property
    def is_gpu(self) -> bool:
        """Whether it runs on a GPU (an `sm_*` target)."""
    @property
    def path(self) -> Optional[str]:
        """The file it was loaded from or last saved to, if any."""
    @property
    def summary(self) -> Optional[Dict[str, Any]]:
        """`aoc compile --json`'s summary; None for a loaded artifact."""
    def save(self, path: _Path) -> None:
        """Writes the `.aoc` file (`aoc run`, `aoc bench`, the C API load it)."""
    def to_bytes(self) -> bytes:
        """The `.aoc` file's bytes."""
    def __len__(self) -> int: ...

@final
class OutputBuffer:
    """The 64-byte aligned memory of an output array (its `base`)."""

    def __len__(self) -> int: ...

@final
class DeviceArray:
    """An output in GPU memory, exported through DLPack without a copy:
    `torch.from_dlpack(a)`, `cupy.from_dlpack(a)`. The memory lives as
    long as the array or any tensor viewing it."""

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def device(self) -> str:
        """`cuda:N`."""
    def numpy(self) -> np.ndarray:
        """A host copy."""

@final
class Session:
    """A loaded artifact, run on NumPy arrays: on the CPU, or on a GPU for
    `sm_*` artifacts. Several Python threads may run one session at once
    (the GIL is released while it runs).

    Inputs are read in place: each must be a C-contiguous array of exactly
    the input's dtype and shape (`aoc.InputError` otherwise; nothing is
    converted quietly). Each output is a fresh array whose memory the
    kernels wrote directly (no copy out).

    A GPU session also takes CUDA tensors (PyTorch, CuPy: anything with
    `__dlpack__`) on its GPU, copied on the device with no host round
    trip; the outputs of such a run are `aoc.DeviceArray`s, or the
    caller's own CUDA tensors bound with `outputs=`."""

    def __new__(
        cls,
        artifact: Union[Artifact, _Path],
        threads: Optional[int] = None,
        device: Union[None, int, str] = None,
    ) -> Session:
        """`artifact`: an `aoc.Artifact` or an `.aoc` file's path.
        `threads`: CPU worker threads (default: one per core).
        `device`: for GPU artifacts, `cuda`, `cuda:N` or N (default GPU 0);
        for CPU artifacts None or `cpu`."""
    @overload
    def run(self, output_names_or_feed: _Feed, feed: None = None, run_options: Any = None, *, outputs: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """`run(feed)` -> {output name: array}, the outputs by name."""
    @overload
    def run(self, output_names_or_feed: Optional[Sequence[str]], feed: _Feed, run_options: Any = None, *, outputs: Optional[Mapping[str, Any]] = None) -> List[Any]:
        """`run(None, feed)` -> every output in order and `run([names],
        feed)` -> those outputs, as ONNX Runtime's `InferenceSession.run`.
        `feed` maps each input name to an array, or (GPU sessions) to a
        CUDA tensor on the session's GPU. Outputs are NumPy arrays; after
        a run with a CUDA input, `aoc.DeviceArray`s; `outputs` maps output
        names to CUDA tensors of the output's dtype and shape (contiguous)
        that the run writes in place and returns."""
    def run_device(self, inputs: Sequence[int], outputs: Sequence[int], stream: int) -> None:
        """One run on raw device addresses (one per port, in order), for
        frameworks' integrations: each a contiguous buffer of exactly the
        port's dtype and shape on the session's GPU (the caller vouches;
        the runtime checks each lies inside one device allocation),
        ordered on `stream` as `run(..., stream=)` is."""
    def bench(self, iters: int = 50, warmup: int = 5, inputs: Optional[_Feed] = None) -> Dict[str, Any]:
        """`aoc bench --json` on this session: p50_ms, p99_ms, mean_ms,
        throughput_per_s, peak_memory_bytes, iters, threads, load_ms (CPU);
        GPU sessions add device, device_p50_ms, device_p99_ms,
        device_mean_ms. Inputs: `inputs`, or the command's synthetic ones."""
    @property
    def input_names(self) -> List[str]: ...
    @property
    def output_names(self) -> List[str]: ...
    @property
    def input_shapes(self) -> List[List[int]]: ...
    @property
    def output_shapes(self) -> List[List[int]]: ...
    @property
    def input_dtypes(self) -> List[np.dtype]: ...
    @property
    def output_dtypes(self) -> List[np.dtype]: ...
    @property
    def target(self) -> str:
        """The artifact's target."""
    @property
    def device(self) -> str:
        """`cpu`, or the GPU's name."""
    @property
    def threads(self) -> int:
        """Worker threads of a CPU session (0 for a GPU session)."""

# The private entry points `aoc/__init__.py` wraps.
def compile(
    model: str,
    target: str,
    precision: str,
    passes: Optional[str],
    input_shapes: List[Tuple[str, List[int]]],
    reference_fallback: bool,
    verify_each: bool,
) -> Artifact: ...
def load(path: str) -> Artifact: ...
def explain(artifact: Union[Artifact, str]) -> Dict[str, Any]: ...
def model_inputs(model: str, input_shapes: List[Tuple[str, List[int]]]) -> List[Tuple[str, str, List[int]]]: ...
def quantize(
    model: str,
    calib: str,
    output: str,
    options: Dict[str, Any],
    eval: Optional[str] = None,
    input_shapes: List[Tuple[str, List[int]]] = ...,
) -> Tuple[Dict[str, Any], str]: ...
def save_model(source: str, dest: str) -> List[str]: ...
