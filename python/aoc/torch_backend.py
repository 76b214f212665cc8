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

import os
import sys
import tempfile
from typing import Any, Callable, List, Sequence

import numpy as np

import aoc

# Mismatch allowed against eager on the example inputs, of max(1, max|eager|),
# as compiler/tests/gpu.rs checks GPU builds.
_TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 1e-2, "bf16": 3e-2}


class _Fallback(Exception):
    """Why a graph runs in eager PyTorch."""


def _export(gm: Any, example_inputs: Sequence[Any], n_out: int, folder: str) -> str:
    """Writes the graph as FOLDER/graph.onnx (weights inline, or beside it
    as external data for large graphs) and returns its path."""
    import torch

    names_in = [f"input_{i}" for i in range(len(example_inputs))]
    names_out = [f"output_{i}" for i in range(n_out)]
    path = os.path.join(folder, "graph.onnx")
    errors = []
    # The TorchScript exporter first (it folds constants into a plain
    # graph), then the dynamo one; torch before 2.5 knows neither flag.
    for how in ({"dynamo": False}, {"dynamo": True}, {}):
        try:
            torch.onnx.export(
                gm,
                tuple(example_inputs),
                path,
                input_names=names_in,
                output_names=names_out,
                opset_version=17,
                do_constant_folding=True,
                **how,
            )
            return path
        except Exception as e:  # any exporter failure means eager
            errors.append(f"{how or 'default'}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    raise _Fallback("cannot export the graph to ONNX (" + "; ".join(errors) + ")")


def _flat(out: Any) -> List[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _compile(gm: Any, example_inputs: Sequence[Any], target: str, precision: str, threads: Any) -> Callable[..., Any]:
    import torch

    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise _Fallback(f"input {i} is a {type(x).__name__}, not a tensor")
        if any(not isinstance(d, int) for d in x.shape):
            raise _Fallback(f"input {i} has a symbolic shape {tuple(x.shape)}; aoc compiles static shapes")
    with torch.no_grad():
        eager_out = gm(*example_inputs)
    # The structure to give back: a tuple or list like the graph's, or one tensor.
    seq_type = type(eager_out) if isinstance(eager_out, (tuple, list)) else None
    eager = _flat(eager_out)
    if not all(isinstance(t, torch.Tensor) for t in eager):
        raise _Fallback("the graph returns something other than tensors")
    with tempfile.TemporaryDirectory(prefix="aoc-torch-") as folder:
        model = _export(gm, example_inputs, len(eager), folder)
        try:
            sess = aoc.Session(aoc.compile(model, target=target, precision=precision), threads=threads)
        except aoc.Error as e:
            raise _Fallback(f"aoc cannot compile it: {type(e).__name__}: {e}") from None
    try:
        positions = [int(n.rsplit("_", 1)[1]) for n in sess.input_names]
    except ValueError:
        raise _Fallback(f"the exported graph renamed its inputs ({sess.input_names})") from None
    if len(sess.output_names) != len(eager):
        raise _Fallback(f"the ONNX model has {len(sess.output_names)} outputs, the graph {len(eager)}")
    device = example_inputs[0].device if example_inputs else torch.device("cpu")

    def run(*args: Any) -> Any:
        feed = {}
        for name, i in zip(sess.input_names, positions):
            feed[name] = args[i].detach().cpu().contiguous().numpy()
        outs = sess.run(None, feed)
        res = [torch.from_numpy(o).to(device) for o in outs]
        if seq_type is None:
            return res[0]
        return tuple(res) if issubclass(seq_type, tuple) else list(res)

    with torch.no_grad():
        got = _flat(run(*example_inputs))
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


def aoc_backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``torch.compile`` backend: ``options`` may hold ``target``
    (default ``host``), ``precision`` (default ``fp32``) and ``threads``."""
    options = dict(kwargs.get("options") or {})
    target = str(options.pop("target", "host"))
    precision = str(options.pop("precision", "fp32"))
    threads = options.pop("threads", None)
    if options:
        print(f"aoc: ignoring unknown torch.compile options {sorted(options)}", file=sys.stderr)
    try:
        return _compile(gm, example_inputs, target, precision, threads)
    except _Fallback as e:
        reason = str(e)
    except Exception as e:  # whatever else goes wrong, eager is right
        reason = f"{type(e).__name__}: {e}"
    print(f"aoc: running this graph in eager PyTorch: {reason}", file=sys.stderr)
    return gm.forward
