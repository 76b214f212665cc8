#!/usr/bin/env python3
"""Write N calibration batches like a given input: NAME.npy -> DIR/b000.npy ...

    make_calib.py INPUT.npy DIR N [--seed S]

Each batch is seeded normal noise with the input's shape, dtype, mean and
standard deviation (per channel for 4-D NCHW inputs), which is what the
example models' inputs are. A real model wants real data: a folder of its
own inputs or images (docs/quantization.md).
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("dir")
    ap.add_argument("n", type=int)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x = np.load(a.input)
    axes = (0, 2, 3) if x.ndim == 4 else None
    mean = x.mean(axis=axes, keepdims=True)
    std = x.std(axis=axes, keepdims=True) + 1e-6
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    for i in range(a.n):
        b = rng.standard_normal(x.shape) * std + mean
        np.save(os.path.join(a.dir, f"b{i:03d}.npy"), b.astype(x.dtype))


if __name__ == "__main__":
    main()
