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


def _longest_pause_while(work) -> tuple:
    """Runs `work` on a thread and spins here meanwhile; returns (work's
    seconds, the longest gap between two iterations of this thread's loop).
    A call that kept the GIL would stall this loop for its whole length."""
    import threading
    import time

    done = threading.Event()
    t = threading.Thread(target=lambda: (work(), done.set()))
    gaps = []
    # From before start(): a thread that keeps the GIL may run its whole
    # call inside start().
    start = last = time.perf_counter()
    t.start()
    while not done.is_set():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    t.join()
    return time.perf_counter() - start, max(gaps, default=0.0)


def test_running_releases_the_gil(resnet):
    sess = aoc.Session(aoc.compile(resnet.onnx), threads=1)
    per_run_ms = sess.bench(iters=20)["mean_ms"]
    iters = max(50, int(400 / per_run_ms))  # about 0.4 s of runs in one call
    seconds, gap = _longest_pause_while(lambda: sess.bench(iters=iters, warmup=0))
    assert seconds > 0.2
    assert gap < seconds / 2, (gap, seconds)


def test_compiling_releases_the_gil(encoder):
    def work():
        for _ in range(8):
            aoc.compile(encoder.onnx)

    seconds, gap = _longest_pause_while(work)
    assert gap < seconds / 2, (gap, seconds)


def test_the_gil_check_can_fail():
    # A call that keeps the GIL (a C loop): the spinning thread stalls.
    seconds, gap = _longest_pause_while(lambda: sum(range(20_000_000)))
    assert gap > seconds / 2, (gap, seconds)
