"""Sessions run from several Python threads at once (the GIL is released
while one runs) and give the same outputs as one thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import aoc


def test_one_session_from_many_threads(encoder):
    sess = aoc.Session(aoc.compile(encoder.onnx))
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(encoder.input.shape).astype(np.float32) for _ in range(16)]
    want = [sess.run({"src": x})["hidden"] for x in xs]
    with ThreadPoolExecutor(max_workers=6) as pool:
        for _ in range(3):
            got = list(pool.map(lambda x: sess.run({"src": x})["hidden"], xs))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


def test_several_sessions_at_once(resnet, encoder):
    a = aoc.Session(aoc.compile(resnet.onnx), threads=1)
    b = aoc.Session(aoc.compile(encoder.onnx), threads=1)
    wa = a.run({"input": resnet.input})["logits"]
    wb = b.run({"src": encoder.input})["hidden"]

    def work(i):
        if i % 2:
            return np.array_equal(a.run({"input": resnet.input})["logits"], wa)
        return np.array_equal(b.run({"src": encoder.input})["hidden"], wb)

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(work, range(40)))
