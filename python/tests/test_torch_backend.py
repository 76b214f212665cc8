"""The torch.compile backend. Its registration is checked everywhere; the
backend itself where PyTorch is installed (the GPU machine), and skips with
the reason elsewhere."""

from __future__ import annotations

import sys

import numpy as np
import pytest


def test_registered_under_the_dynamo_entry_point():
    from importlib.metadata import entry_points

    eps = entry_points()
    group = eps.select(group="torch_dynamo_backends") if hasattr(eps, "select") else eps.get("torch_dynamo_backends", [])
    found = {e.name: e.value for e in group}
    assert found.get("aoc") == "aoc.torch_backend:aoc_backend", found
    # Importing it needs no torch (torch is imported when a graph arrives).
    from aoc.torch_backend import aoc_backend

    assert callable(aoc_backend)


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (CI has none); the backend is tested where it is")
    torch._dynamo.reset()  # each test compiles afresh
    return torch


def _net(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()


def test_compiled_module_matches_eager(capsys):
    torch = _torch()
    import aoc.torch_backend as tb
    from aoc.torch_backend import aoc_backend

    before = tb.compiled_graphs
    net = _net(torch)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = net(x)
        fast = torch.compile(net, backend=aoc_backend)
        got = fast(x)
        # A new shape recompiles.
        x2 = torch.randn(1, 3, 8, 8)
        np.testing.assert_allclose(fast(x2).numpy(), net(x2).numpy(), atol=1e-4, rtol=1e-3)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4, rtol=1e-3)
    # aoc ran both shapes: two graphs compiled, nothing fell back.
    assert tb.compiled_graphs == before + 2
    assert "eager PyTorch" not in capsys.readouterr().err


def test_backend_by_name(capsys):
    torch = _torch()
    import aoc.torch_backend as tb

    before = tb.compiled_graphs
    net = _net(torch)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        got = torch.compile(net, backend="aoc")(x)
        np.testing.assert_allclose(got.numpy(), net(x).numpy(), atol=1e-4, rtol=1e-3)
    assert tb.compiled_graphs == before + 1
    assert "eager PyTorch" not in capsys.readouterr().err


def test_changed_weights_are_never_stale():
    torch = _torch()
    import aoc.torch_backend as tb
    from aoc.torch_backend import aoc_backend

    before = tb.compiled_graphs
    net = _net(torch)
    x = torch.randn(1, 3, 16, 16)
    fast = torch.compile(net, backend=aoc_backend)
    with torch.no_grad():
        fast(x)
        net[0].weight.mul_(2.0)  # in place: the compiled graph baked the old values
        np.testing.assert_allclose(fast(x).numpy(), net(x).numpy(), atol=1e-4, rtol=1e-3)
    assert tb.compiled_graphs >= before + 1


def test_unsupported_graph_falls_back_to_eager(capsys):
    torch = _torch()
    from aoc.torch_backend import aoc_backend

    def f(x):
        return torch.fft.rfft(x).abs()

    import aoc.torch_backend as tb

    n = len(tb.fallbacks)
    x = torch.randn(4, 32)
    got = torch.compile(f, backend=aoc_backend)(x)
    np.testing.assert_allclose(got.numpy(), f(x).numpy(), atol=1e-5, rtol=1e-5)
    assert "aoc: running this graph in eager PyTorch" in capsys.readouterr().err
    assert len(tb.fallbacks) == n + 1


def test_cuda_tensors_stay_on_their_device():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    from aoc.torch_backend import aoc_backend

    import aoc.torch_backend as tb

    before = tb.compiled_graphs
    net = _net(torch).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    major, minor = torch.cuda.get_device_capability()
    target = "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    with torch.no_grad():
        got = torch.compile(net, backend=aoc_backend, options={"target": target, "precision": "fp16"})(x)
        want = net(x)
    assert tb.compiled_graphs == before + 1, tb.fallbacks[-1:]
    assert got.device == x.device
    err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err <= 1e-2, err
