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
    return pytest.importorskip("torch", reason="PyTorch is not installed here (CI has none); the backend is tested where it is")


def _net(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()


def test_compiled_module_matches_eager():
    torch = _torch()
    from aoc.torch_backend import aoc_backend

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


def test_backend_by_name():
    torch = _torch()
    net = _net(torch)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        got = torch.compile(net, backend="aoc")(x)
        np.testing.assert_allclose(got.numpy(), net(x).numpy(), atol=1e-4, rtol=1e-3)


def test_unsupported_graph_falls_back_to_eager(capsys):
    torch = _torch()
    from aoc.torch_backend import aoc_backend

    def f(x):
        return torch.fft.rfft(x).abs()

    x = torch.randn(4, 32)
    got = torch.compile(f, backend=aoc_backend)(x)
    np.testing.assert_allclose(got.numpy(), f(x).numpy(), atol=1e-5, rtol=1e-5)
    assert "aoc: running this graph in eager PyTorch" in capsys.readouterr().err


def test_cuda_tensors_stay_on_their_device():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    from aoc.torch_backend import aoc_backend

    net = _net(torch).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with torch.no_grad():
        got = torch.compile(net, backend=aoc_backend, options={"target": "sm_90a", "precision": "fp16"})(x)
        want = net(x)
    assert got.device == x.device
    err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err <= 1e-2, err
