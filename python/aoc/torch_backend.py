"""aoc as a ``torch.compile`` backend.

    model = torch.compile(model, backend="aoc")                       # this CPU
    model = torch.compile(model, backend="aoc", options={"target": "sm_90a", "precision": "fp16"})

The package registers ``aoc`` under the ``torch_dynamo_backends`` entry
point. Each graph TorchDynamo captures is exported to ONNX, compiled with
:func:`aoc.compile` and run by an :class:`aoc.Session`; TorchDynamo
recompiles (and so calls this backend again) when input shapes change.

Without a ``target``, a graph whose inputs are CUDA tensors is compiled
for that GPU (``sm_90a`` on Hopper, ``sm_XY`` elsewhere) and anything else
for this CPU.

A graph that aoc cannot take whole (it does not export to ONNX, aoc cannot
compile it, or its outputs differ from eager PyTorch on the example inputs)
is split: each node is tried on its own, the nodes aoc takes are grouped
into the largest partitions that keep the graph acyclic, each partition is
compiled (and checked against eager) on its own, and the rest runs in eager
PyTorch. The reasons are printed to stderr: never a wrong answer.

Tensors cross without a host round trip: CPU tensors as NumPy views,
CUDA tensors through DLPack into a GPU artifact, whose outputs are written
straight into PyTorch CUDA tensors. Inference only: outputs carry no
autograd history.
"""

from __future__ import annotations

import contextlib
import io
import operator
import os
import re
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


#: How many graphs (or partitions of graphs) this process compiled with
#: aoc, how many graphs ran split between aoc and eager PyTorch, and why
#: the others ran in eager PyTorch (one reason each, as printed).
compiled_graphs = 0
partitioned_graphs = 0
fallbacks: List[str] = []
#: The artifacts compiled for whole graphs and partitions, in order (save
#: one to `aoc bench` it, or to load it without recompiling).
artifacts: List[Any] = []


@contextlib.contextmanager
def _quiet() -> Any:
    """Silences the exporters: their deprecation notes, progress and the
    graph dumps their C++ side writes straight to file descriptors 1 and 2
    (the reason for a fallback is printed once, by the caller)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = []
    try:
        with open(os.devnull, "w") as null:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(null.fileno(), fd)
                except OSError:
                    pass
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)


def _first_line(e: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line[:240]}"


def _export(module: Any, free_inputs: Sequence[Any], n_out: int, folder: str, quick: bool = False) -> str:
    """Writes `module` (called on `free_inputs`) as FOLDER/graph.onnx
    (weights inline, or beside it as external data for large graphs) and
    returns its path. `quick`: the TorchScript exporter only (a node tried
    alone), not the slower dynamo one."""
    import torch

    names_in = [f"input_{i}" for i in range(len(free_inputs))]
    names_out = [f"output_{i}" for i in range(n_out)]
    path = os.path.join(folder, "graph.onnx")
    errors = []
    # The TorchScript exporter first (it folds constants into a plain
    # graph), then the dynamo one; torch before 2.5 knows neither flag.
    for how in ({"dynamo": False},) if quick else ({"dynamo": False}, {"dynamo": True}, {}):
        try:
            with _quiet():
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
            errors.append(_first_line(e))
    # The first exporter's complaint names the op; the others' add little.
    raise _Fallback(f"cannot export the graph to ONNX ({errors[0]})")


def _flat(out: Any) -> List[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _state_positions(gm: Any) -> List[int]:
    """The graph inputs that are module state: TorchDynamo lifts parameters
    and buffers to inputs (named ..._parameters_... / ..._buffers_...)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(names) if "_parameters_" in n or "_buffers_" in n]


def _wide(t: Any) -> Any:
    """aoc compiles float32 graphs, at the precision asked for: a float16 or
    bfloat16 model is exported and run in float32 (its tensors cast at the
    artifact's edges), and fp16 precision brings the arithmetic back."""
    import torch

    return t.float() if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16) else t


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
        # Hundreds of them for a real model: compared as two lists.
        baked = [i for i, a in self.fixed.items() if isinstance(a, torch.Tensor)]
        # itemgetter of one index returns the item, not a tuple.
        self.pick = operator.itemgetter(*baked) if len(baked) > 1 else (lambda args: [args[i] for i in baked])
        self.versions = [args[i]._version for i in baked]
        self.ptrs = [args[i].data_ptr() for i in baked]

        class Bound(torch.nn.Module):
            def __init__(inner) -> None:
                super().__init__()
                inner.gm = gm
                for i, a in self.fixed.items():
                    if isinstance(a, torch.Tensor):
                        inner.register_buffer(f"fixed_{i}", _wide(a.detach()), persistent=False)

            def forward(inner, *free: Any) -> Any:
                full: List[Any] = [None] * self.n
                for i, a in self.fixed.items():
                    full[i] = getattr(inner, f"fixed_{i}") if isinstance(a, torch.Tensor) else a
                for i, a in zip(self.free, free):
                    full[i] = a
                return inner.gm(*full)

        self.module = Bound()

    def still_valid(self, args: Sequence[Any]) -> bool:
        ts = self.pick(args)
        return [t._version for t in ts] == self.versions and [t.data_ptr() for t in ts] == self.ptrs


def _compile(gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any, quick: bool = False) -> Callable[..., Any]:
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
            model = _export(spec.module, [_wide(a) for a in free], len(eager), folder, quick)
        try:
            art = aoc.compile(model, target=target, precision=precision)
            sess = aoc.Session(art, threads=threads)
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
    on_gpu = sess.device != "cpu"
    # A GPU artifact fed CUDA tensors: inputs read and outputs written on
    # the device (DLPack), into tensors PyTorch allocates.
    device_io = on_gpu and all(args[i].is_cuda for i in positions) and all(d.type == "cuda" for d in devices)
    out_specs = [
        (name, tuple(shape), torch.from_numpy(np.empty(0, dtype)).dtype, d)
        for name, shape, dtype, d in zip(sess.output_names, sess.output_shapes, sess.output_dtypes, devices)
    ]
    want_dtypes = [t.dtype for t in eager]

    def run(*call_args: Any) -> Any:
        if not spec.still_valid(call_args):
            return gm(*call_args)
        if device_io:
            # Shapes and dtypes are this compile's (the cache key), so the
            # addresses go straight in; ordered on PyTorch's current
            # stream, the call returns once queued, as PyTorch's own
            # kernels do.
            feed = [_wide(call_args[i].detach()).contiguous() for i in positions]
            res = [torch.empty(shape, dtype=dt, device=d) for _, shape, dt, d in out_specs]
            stream = torch.cuda.current_stream(devices[0]).cuda_stream
            sess.run_device([t.data_ptr() for t in feed], [r.data_ptr() for r in res], stream)
        else:
            feed = {name: _wide(call_args[i].detach()).cpu().contiguous().numpy() for name, i in zip(sess.input_names, positions)}
            outs = sess.run(None, feed)
            res = [torch.from_numpy(o).to(d) for o, d in zip(outs, devices)]
        res = [r if r.dtype == w else r.to(w) for r, w in zip(res, want_dtypes)]
        if seq_type is None:
            return res[0]
        return tuple(res) if issubclass(seq_type, tuple) else list(res)

    with torch.no_grad():
        got = _flat(run(*args))
    tol = _TOLERANCE.get(precision, 1e-2)
    if any(t.dtype in (torch.float16, torch.bfloat16) for t in eager):
        # Eager itself rounds to 16 bits: that much is no mismatch.
        tol = max(tol, _TOLERANCE["bf16" if any(t.dtype == torch.bfloat16 for t in eager) else "fp16"])
    run.artifact = art  # type: ignore[attr-defined]
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


def _default_target(args: Sequence[Any]) -> str:
    """The GPU the inputs are on (`sm_90a` for Hopper: its wgmma kernels),
    else this CPU."""
    import torch

    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            major, minor = torch.cuda.get_device_capability(a.device)
            return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    return "host"


def aoc_backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``torch.compile`` backend: ``options`` may hold ``target``
    (default: the inputs' GPU, else ``host``), ``precision`` (default
    ``fp32``) and ``threads``.

    Returns a function that compiles `gm` with aoc for each new set of
    input shapes (and scalar values) it is called with, on its first call
    with them, so graphs TorchDynamo traced with symbolic shapes run
    specialized too."""
    options = dict(kwargs.get("options") or {})
    target = options.pop("target", None)
    precision = str(options.pop("precision", "fp32"))
    threads = options.pop("threads", None)
    if options:
        print(f"aoc: ignoring unknown torch.compile options {sorted(options)}", file=sys.stderr)
    state = _state_positions(gm)
    n_in = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    others = [i for i in range(n_in) if i not in set(state)]
    cache: dict = {}

    def call(*args: Any) -> Any:
        # Module state keeps its shapes (TorchDynamo guards them): the key
        # is the other inputs'.
        key = _key([args[i] for i in others] if len(args) == n_in else args)
        fn = cache.get(key)
        if fn is None:
            where = str(target) if target is not None else _default_target(args)
            fn = cache[key] = _compile_or_eager(gm, args, state, where, precision, threads)
        return fn(*args)

    return call


def _try_compile(gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any) -> Any:
    """(aoc's run of `gm`, counted and its artifact kept, None) or (None,
    why not): whatever goes wrong, eager is right."""
    global compiled_graphs
    try:
        run = _compile(gm, args, state, target, precision, threads)
    except Exception as e:
        return None, str(e) if isinstance(e, _Fallback) else f"{type(e).__name__}: {e}"
    compiled_graphs += 1
    artifacts.append(run.artifact)  # type: ignore[attr-defined]
    return run, None


def _compile_or_eager(gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any) -> Callable[..., Any]:
    """aoc's version of the whole graph; else the graph split between aoc
    and eager PyTorch; else eager PyTorch."""
    global partitioned_graphs
    run, reason = _try_compile(gm, args, state, target, precision, threads)
    if run is not None:
        return run
    try:
        split = _Partitioned(gm, args, state, target, precision, threads)
    except Exception as e:  # splitting is best effort; eager is right
        split = None
        reason += f" (and it cannot be split: {type(e).__name__}: {e})"
    if split is not None and split.compiled:
        partitioned_graphs += 1
        fallbacks.append(reason)
        whole = "" if reason in split.why_eager else f"aoc cannot take it whole ({reason}); "
        print(
            f"aoc: {whole}this graph runs split: {split.compiled} partition{'s' if split.compiled != 1 else ''} with aoc "
            f"({split.aoc_nodes} of {split.total_nodes} nodes), {split.eager_nodes} node{'s' if split.eager_nodes != 1 else ''} "
            f"in eager PyTorch: {split.why_eager}",
            file=sys.stderr,
        )
        return split
    fallbacks.append(reason)
    print(f"aoc: running this graph in eager PyTorch: {reason}", file=sys.stderr)
    return gm.forward


# Nodes that only rename or pick values: they go with their neighbours and
# are not worth a compile of their own.
def _is_plumbing(node: Any) -> bool:
    import operator

    return node.op == "call_function" and node.target is operator.getitem


class _Partitioned:
    """`gm` split into partitions aoc compiles and nodes eager PyTorch runs.

    Each compute node is first compiled on its own (its inputs as example
    values, module state baked in) and checked against eager; the verdicts
    are cached by op, shapes and arguments, so a model's repeated blocks
    are tried once. TorchFX's capability partitioner groups the supported
    nodes into acyclic partitions; each partition is compiled as a whole
    graph on its first call (and falls back to eager alone if that fails)."""

    def __init__(self, gm: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any):
        import torch
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase

        values = _record_values(gm, args)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        state_nodes = {placeholders[i] for i in state}
        verdicts: dict = {}
        reasons: List[str] = []
        supported = set()
        for node in gm.graph.nodes:
            if node.op not in ("call_function", "call_method", "call_module"):
                continue
            if _is_plumbing(node):
                if node.args and node.args[0] in supported:
                    supported.add(node)
                continue
            ok, why = _node_verdict(gm, node, values, state_nodes, target, precision, threads, verdicts)
            if ok:
                supported.add(node)
            elif why not in reasons:
                reasons.append(why)

        class Support(OperatorSupportBase):
            def is_node_supported(self, submodules: Any, node: Any) -> bool:
                return node in supported

        # The partitioner rewrites the graph it is given: split a copy.
        import copy

        split_gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        # Map the copy's nodes to verdicts by name (names survive the copy).
        names = {n.name for n in supported}
        supported = {n for n in split_gm.graph.nodes if n.name in names}
        partitioner = CapabilityBasedPartitioner(split_gm, Support(), allows_single_node_partition=True)
        partitions = partitioner.propose_partitions()
        fused = partitioner.fuse_partitions(partitions)
        self.total_nodes = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        self.aoc_nodes = len(names)
        self.compiled = 0
        for node in list(fused.graph.nodes):
            if node.op != "call_module" or not str(node.target).startswith("fused_"):
                continue
            sub = getattr(fused, node.target)
            sub_state = [i for i, n in enumerate(p for p in sub.graph.nodes if p.op == "placeholder") if n.name in {s.name for s in state_nodes}]
            setattr(fused, node.target, _aoc_part(sub, sub_state, target, precision, threads))
            self.compiled += 1
        self.eager_nodes = sum(1 for n in fused.graph.nodes if n.op in ("call_function", "call_method", "call_module") and not str(n.target).startswith("fused_") and not _is_plumbing(n))
        # The first few distinct reasons, each shortened: a model whose
        # every node fails would otherwise print a page per node.
        shown = [r if len(r) < 300 else r[:297] + "..." for r in reasons[:3]]
        more = f"; and {len(reasons) - 3} more reasons" if len(reasons) > 3 else ""
        self.why_eager = ("; ".join(shown) + more) if reasons else "nothing"
        self.module = fused

    def __call__(self, *args: Any) -> Any:
        return self.module(*args)


def _aoc_part(sub: Any, state: Sequence[int], target: str, precision: str, threads: Any) -> Any:
    """A module running partition `sub` with aoc, compiled per input shape
    on first use (eager alone if that fails)."""
    import torch

    class AocPartition(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sub = sub
            self.cache: dict = {}

        def forward(self, *args: Any) -> Any:
            key = _key(args)
            fn = self.cache.get(key)
            if fn is None:
                fn = self.cache[key] = _part_or_eager(sub, args, state, target, precision, threads)
            return fn(*args)

    return AocPartition()


def _part_or_eager(sub: Any, args: Sequence[Any], state: Sequence[int], target: str, precision: str, threads: Any) -> Callable[..., Any]:
    run, reason = _try_compile(sub, args, state, target, precision, threads)
    if run is not None:
        return run
    fallbacks.append(reason)
    print(f"aoc: running a partition in eager PyTorch: {reason}", file=sys.stderr)
    return sub.forward


def _record_values(gm: Any, args: Sequence[Any]) -> dict:
    """Every node's value when `gm` runs on `args` (eagerly, once)."""
    import torch

    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            v = super().run_node(n)
            values[n] = v
            return v

    with torch.no_grad():
        Recorder(gm).run(*args)
    return values


def _describe(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.dtype, v.device.type)
    if isinstance(v, (list, tuple)):
        return tuple(_describe(x) for x in v)
    return ("value", repr(v))


def _node_verdict(gm: Any, node: Any, values: dict, state_nodes: Any, target: str, precision: str, threads: Any, verdicts: dict) -> Any:
    """(whether aoc compiles `node` alone to eager's numbers, why not)."""
    import torch

    out = values.get(node)
    if not isinstance(out, torch.Tensor) and not (isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out)):
        return False, f"{node.name} returns something other than tensors"
    ins = node.all_input_nodes
    key = (
        node.op,
        str(node.target),
        tuple((_describe(values.get(n)), n in state_nodes) for n in ins),
        repr([a if not isinstance(a, torch.fx.Node) else None for a in node.args]),
        repr(sorted((k, v) for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node))),
    )
    if key in verdicts:
        return verdicts[key]
    graph = torch.fx.Graph()
    mapping = {}
    example = []
    state = []
    for i, n in enumerate(ins):
        mapping[n] = graph.placeholder(f"in_{i}")
        example.append(values.get(n))
        if n in state_nodes or n.op == "get_attr":
            state.append(i)
    graph.output(graph.node_copy(node, lambda n: mapping[n]))
    one = torch.fx.GraphModule(gm, graph)
    try:
        _compile(one, example, state, target, precision, threads, quick=True)
        verdict = (True, "")
    except _Fallback as e:
        verdict = (False, f"{node.target}: {e}")
    except Exception as e:
        verdict = (False, f"{node.target}: {type(e).__name__}: {e}")
    verdicts[key] = verdict
    return verdict
