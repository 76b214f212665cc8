"""Shared helpers of the aoc Python tests: the example models (from
examples/, with ONNX Runtime's expected outputs) and a tolerance check."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


class Example:
    def __init__(self, name: str):
        self.name = name
        self.dir = EXAMPLES / name
        self.onnx = self.dir / "model.onnx"
        self.air = self.dir / "model.air"
        self.input = np.load(self.dir / "input.npy")
        self.expected = {p.stem: np.load(p) for p in sorted((self.dir / "expected").glob("*.npy"))}

    def calibration(self, n: int, seed: int = 0):
        """`n` seeded batches like the input (tests/scripts/make_calib.py's
        noise: the input's per-channel mean and deviation)."""
        rng = np.random.default_rng(seed)
        x = self.input
        axes = (0, 2, 3) if x.ndim == 4 else None
        mean = x.mean(axis=axes, keepdims=True)
        std = x.std(axis=axes, keepdims=True) + 1e-6
        return [(mean + std * rng.standard_normal(x.shape)).astype(x.dtype) for _ in range(n)]


@pytest.fixture(scope="session")
def resnet() -> Example:
    return Example("resnet_block")


@pytest.fixture(scope="session")
def encoder() -> Example:
    return Example("encoder_layer")


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - got) ** 2))
    signal = float(np.sum(ref.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / noise)


def assert_close(got: np.ndarray, want: np.ndarray, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
