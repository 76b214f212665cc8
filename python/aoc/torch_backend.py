"""aoc as a ``torch.compile`` backend.

    model = torch.compile(model, backend="aoc")                       # this CPU
    model = torch.compile(model, backend="aoc", options={"target": "sm_90a", "precision": "fp16"})

The package registers ``aoc`` under the ``torch_dynamo_backends`` entry
point. Each graph TorchDynamo captures is exported to ONNX, compiled with
:func:`aoc.compile` and run by an :class:`aoc.Session`; TorchDynamo
recompiles (and so calls this backend again) when input shapes change.

A graph that cannot be exported or compiled, has symbolic shapes or
non-tensor inputs, or whose compiled outputs do not match eager PyTorch on
the example inputs runs in eager PyTorch instead, with the reason printed
to stderr: never a wrong answer. The whole graph falls back, not only the
unsupported part.

Tensors cross as NumPy arrays: CPU tensors without a copy; CUDA tensors
through host memory (no DLPack device path yet), so a GPU artifact pays a
copy each way. Inference only: outputs carry no autograd history.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings
from typing import Any, Callable, List, Sequence

import numpy as np

import aoc

# Mismatch allowed against eager on the example inputs, of max(1, max|eager|),
# as compiler/tests/gpu.rs checks GPU builds.
_TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 1e-2, "bf16": 3e-2}


class _Fallback(Exception):
    """Why a graph runs in eager PyTorch."""


#: How many graphs this process compiled with aoc, and why the others ran in
#: eager PyTorch (one reason each, as printed).
compiled_graphs = 0
fallbacks: List[str] = []


def _export(module: Any, free_inputs: Sequence[Any], n_out: int, folder: str) -> str:
    """Writes `module` (called on `free_inputs`) as FOLDER/graph.onnx
    (weights inline, or beside it as external data for large graphs) and
    returns its path."""
    import torch

    names_in = [f"input_{i}" for i in range(len(free_inputs))]
    names_out = [f"output_{i}" for i in range(n_out)]
    path = os.path.join(folder, "graph.onnx")
    errors = []
    # The TorchScript exporter first (it folds constants into a plain
    # graph), then the dynamo one; torch before 2.5 knows neither flag.
    for how in ({"dynamo": False}, {"dynamo": True}, {}):
        try:
            # The exporters' deprecation notes, progress and graph dumps:
            # the reason for a fallback is printed once, below.
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    module,
                    tuple(free_inputs),
                    path,
                    input_names=names_in,
                    output_names=names_out,
                    opset_version=17,
                    do_constant_folding=True,
                    verbose=False,
                    **how,
                )
            return path
        except Exception as e:  # any exporter failure means eager
            errors.append(f"{how or 'default'}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    raise _Fallback("cannot export the graph to ONNX (" + "; ".join(errors) + ")")


def _flat(out: Any) -> List[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _state_positions(gm: Any) -> List[int]:
    """The graph inputs that are module state: TorchDynamo lifts parameters
    and buffers to inputs (named ..._parameters_... / ..._buffers_...)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(names) if "_parameters_" in n or "_buffers_" in n]


class _Specialized:
    """`gm` with its module state and scalar inputs fixed to this call's
    values: weights become ONNX initializers (aoc folds and packs them) and
    only the tensor inputs stay inputs."""

    def __init__(self, gm: Any, args: Sequence[Any], state: Sequence[int]):
        import torch

        self.n = len(args)
        self.fixed = {i: a for i, a in enumerate(args) if i in state or not isinstance(a, torch.Tensor)}
        self.free = [i for i in range(self.n) if i not in self.fixed]
        # Baked-in tensors are checked on every call: changed weights (an
        # optimizer step, a load_state_dict in place) mean eager again.
        self.versions = {i: (a._version, a.data_ptr()) for i, a in self.fixed.items() if isinstance(a, torch.Tensor)}

        class Bound(torch.nn.Module):
            def __init__(inner) -> None:
                super().__init__()
                inner.gm = gm
                for i, a in self.fixed.items():
                    if isinstance(a, torch.Tensor):
                        inner.register_buffer(f"fixed_{i}", a.detach(), persistent=False)

            def forward(inner, *free: Any) -> Any:
                full: List[Any] = [None] * self.n
                for i, a in self.fixed.items():
                    full[i] = getattr(inner, f"fixed_{i}") if isinstance(a, torch.Tensor) else a
                for i, a in zip(self.free, free):
                    full[i] = a
                return inner.gm(*full)

        self.module = Bound()

    def still_valid(self, args: Sequence[Any]) -> bool:
        for i, (version, ptr) in self.versions.items():
            a = args[i]
            if a._version != version or a.data_ptr() != ptr:
                return False
        return True


def _compile(gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any) -> Callable[..., Any]:
    """aoc's version of `gm` for inputs shaped like `args` (concrete), checked
    against eager on them."""
    import torch

    spec = _Specialized(gm, args, state)
    free = [args[i] for i in spec.free]
    with torch.no_grad():
        eager_out = gm(*args)
    # The structure to give back: a tuple or list like the graph's, or one tensor.
    seq_type = type(eager_out) if isinstance(eager_out, (tuple, list)) else None
    eager = _flat(eager_out)
    if not all(isinstance(t, torch.Tensor) for t in eager):
        raise _Fallback("the graph returns something other than tensors")
    with tempfile.TemporaryDirectory(prefix="aoc-torch-") as folder:
        with torch.no_grad():
            model = _export(spec.module, free, len(eager), folder)
        try:
            sess = aoc.Session(aoc.compile(model, target=target, precision=precision), threads=threads)
        except aoc.Error as e:
            raise _Fallback(f"aoc cannot compile it: {type(e).__name__}: {e}") from None
    try:
        # input_K is free input K (the exporter drops unused ones).
        positions = [spec.free[int(n.rsplit("_", 1)[1])] for n in sess.input_names]
    except (ValueError, IndexError):
        raise _Fallback(f"the exported graph renamed its inputs ({sess.input_names})") from None
    if len(sess.output_names) != len(eager):
        raise _Fallback(f"the ONNX model has {len(sess.output_names)} outputs, the graph {len(eager)}")
    devices = [t.device for t in eager]

    def run(*call_args: Any) -> Any:
        if not spec.still_valid(call_args):
            return gm(*call_args)
        feed = {}
        for name, i in zip(sess.input_names, positions):
            feed[name] = call_args[i].detach().cpu().contiguous().numpy()
        outs = sess.run(None, feed)
        res = [torch.from_numpy(o).to(d) for o, d in zip(outs, devices)]
        if seq_type is None:
            return res[0]
        return tuple(res) if issubclass(seq_type, tuple) else list(res)

    with torch.no_grad():
        got = _flat(run(*args))
    tol = _TOLERANCE.get(precision, 1e-2)
    for k, (got_k, eager_k) in enumerate(zip(got, eager)):
        want = eager_k.detach().float().cpu().numpy()
        have = got_k.detach().float().cpu().numpy()
        if have.shape != want.shape:
            raise _Fallback(f"output {k} has shape {have.shape}, eager {want.shape}")
        scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
        err = float(np.abs(have - want).max()) / scale if want.size else 0.0
        if not err <= tol:
            raise _Fallback(f"output {k} differs from eager by {err:.2e} of max(1, |eager|) (tolerance {tol:.0e})")
    return run


def _key(args: Sequence[Any]) -> Any:
    import torch

    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a) for a in args)


def aoc_backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``torch.compile`` backend: ``options`` may hold ``target``
    (default ``host``), ``precision`` (default ``fp32``) and ``threads``.

    Returns a function that compiles `gm` with aoc for each new set of
    input shapes (and scalar values) it is called with, on its first call
    with them, so graphs TorchDynamo traced with symbolic shapes run
    specialized too."""
    options = dict(kwargs.get("options") or {})
    target = str(options.pop("target", "host"))
    precision = str(options.pop("precision", "fp32"))
    threads = options.pop("threads", None)
    if options:
        print(f"aoc: ignoring unknown torch.compile options {sorted(options)}", file=sys.stderr)
    state = _state_positions(gm)
    cache: dict = {}

    def call(*args: Any) -> Any:
        key = _key(args)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = _compile_or_eager(gm, args, state, target, precision, threads)
        return fn(*args)

    return call


def _compile_or_eager(gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any) -> Callable[..., Any]:
    global compiled_graphs
    try:
        run = _compile(gm, args, state, target, precision, threads)
        compiled_graphs += 1
        return run
    except _Fallback as e:
        reason = str(e)
    except Exception as e:  # whatever else goes wrong, eager is right
        reason = f"{type(e).__name__}: {e}"
    fallbacks.append(reason)
    print(f"aoc: running this graph in eager PyTorch: {reason}", file=sys.stderr)
    return gm.forward
