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


def test_half_precision_module(capsys):
    """A float16 model runs through aoc (computing in float32 between casts
    at the artifact's edges) and gives back float16 like eager."""
    torch = _torch()
    import aoc.torch_backend as tb

    before = tb.compiled_graphs
    net = _net(torch).half()
    x = torch.randn(2, 3, 16, 16).half()
    with torch.no_grad():
        got = torch.compile(net, backend="aoc")(x)
        want = net(x)
    assert got.dtype == torch.float16
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), atol=1e-2, rtol=1e-2)
    assert tb.compiled_graphs == before + 1, tb.fallbacks[-1:]
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


def test_an_unsupported_op_runs_eager_and_the_rest_with_aoc(capsys):
    """A graph with an op no ONNX exporter knows (a custom op) is split:
    the convolution before it and the linear layer after it run with aoc,
    the custom op in eager PyTorch, and the answer is eager's."""
    torch = _torch()
    import aoc.torch_backend as tb

    # The schema is spelled out: this file's annotations are strings.
    @torch.library.custom_op("aoc_test::mirror", mutates_args=(), schema="(Tensor x) -> Tensor")
    def mirror(x):
        return x.flip(-1) * 2.0

    @mirror.register_fake
    def _(x):
        return torch.empty_like(x)

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 8 * 8, 4)

        def forward(self, x):
            y = mirror(torch.relu(self.conv(x)))
            return self.fc(y.flatten(1))

    net = Net().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled, split = tb.compiled_graphs, tb.partitioned_graphs
    with torch.no_grad():
        want = net(x)
        fast = torch.compile(net, backend="aoc")
        got = fast(x)
        again = fast(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4, rtol=1e-3)
    np.testing.assert_allclose(again.numpy(), want.numpy(), atol=1e-4, rtol=1e-3)
    err = capsys.readouterr().err
    assert "this graph runs split: 2 partitions with aoc" in err, err
    assert "aoc_test" in err and "1 node in eager PyTorch" in err, err
    assert tb.partitioned_graphs == split + 1
    assert tb.compiled_graphs == compiled + 2  # conv+relu, flatten+linear


def _cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch here")
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def test_cuda_tensors_stay_on_their_device(monkeypatch):
    torch = _torch()
    target = _cuda(torch)
    import aoc.torch_backend as tb

    before = tb.compiled_graphs
    net = _net(torch).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    fast = torch.compile(net, backend="aoc", options={"precision": "fp16"})
    with torch.no_grad():
        fast(x)  # compiles, for this GPU's target (no target given)
        want = net(x)
        assert tb.compiled_graphs == before + 1, tb.fallbacks[-1:]
        # From now on no tensor may visit the host.
        def no_host(*a, **k):
            raise AssertionError("a CUDA tensor was copied to the host")

        monkeypatch.setattr(torch.Tensor, "cpu", no_host)
        monkeypatch.setattr(torch.Tensor, "numpy", no_host)
        got = fast(x)
        monkeypatch.undo()
    assert got.device == x.device and got.dtype == want.dtype
    err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err <= 1e-2, err
    art = tb.artifacts[-1]
    assert art.target == target, (art.target, target)
