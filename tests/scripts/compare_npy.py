#!/usr/bin/env python3
"""Compare every EXPECTED/*.npy with the file of the same name in ACTUAL.

    compare_npy.py EXPECTED_DIR ACTUAL_DIR [--atol 1e-4] [--min-sqnr DB]

Prints the max absolute error per file; exits 1 if a file is missing, has
another shape, or differs by more than --atol. With --min-sqnr (for
quantized models) the test is the signal-to-quantization-noise ratio
instead: 10 log10(sum(want^2) / sum((got - want)^2)) must be at least DB.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--min-sqnr", type=float, default=None)
    args = ap.parse_args(argv)

    names = sorted(n for n in os.listdir(args.expected) if n.endswith(".npy"))
    if not names:
        print(f"compare_npy: no .npy files in {args.expected}", file=sys.stderr)
        return 1
    ok = True
    for name in names:
        want = np.load(os.path.join(args.expected, name))
        path = os.path.join(args.actual, name)
        if not os.path.exists(path):
            print(f"{name}: missing from {args.actual}")
            ok = False
            continue
        got = np.load(path)
        if got.shape != want.shape:
            print(f"{name}: shape {got.shape}, expected {want.shape}")
            ok = False
            continue
        diff = got.astype(np.float64) - want.astype(np.float64)
        err = float(np.max(np.abs(diff))) if want.size else 0.0
        if args.min_sqnr is not None:
            noise = float(np.sum(diff * diff))
            signal = float(np.sum(want.astype(np.float64) ** 2))
            sqnr = float("inf") if noise == 0 else 10 * np.log10(signal / noise)
            good = sqnr >= args.min_sqnr
            verdict = "ok" if good else f"FAIL (min SQNR {args.min_sqnr:g} dB)"
            print(f"{name}: SQNR {sqnr:.2f} dB, max abs error {err:.3g} {verdict}")
        else:
            good = err <= args.atol
            verdict = "ok" if good else f"FAIL (atol {args.atol:g})"
            print(f"{name}: max abs error {err:.3g} {verdict}")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
