"""Inputs and expected outputs for the TOSA programs in tosa/, computed
with numpy alone (independently of aoc and MLIR), following the TOSA 1.0
specification's definition of each op. Run from anywhere:

    python3 tests/data/mlir/gen_expected.py

Writes <dir>/<case>/arg<i>.npy and <dir>/<case>/expected/result<j>.npy for
the programs in tosa/ (from MLIR's test suite) and own/ (written for aoc).
"""
import math
import os
import shutil

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tosa")
rng = np.random.default_rng(21)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def few(*shape):
    # Small integers as floats, so equal/greater_equal see ties.
    return rng.integers(0, 3, size=shape).astype(np.float32)


def conv_nhwc(x, w, b, pad, stride, dil):
    # x [N,H,W,C], w [O,KH,KW,C], pad [top, bottom, left, right]
    x = np.pad(x.astype(np.float64), ((0, 0), (pad[0], pad[1]), (pad[2], pad[3]), (0, 0)))
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    oh = (h - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (wd - (kw - 1) * dil[1] - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, o))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i * dil[0]: i * dil[0] + (oh - 1) * stride[0] + 1: stride[0],
                      j * dil[1]: j * dil[1] + (ow - 1) * stride[1] + 1: stride[1], :]
            out += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :].astype(np.float64))
    return (out + b.astype(np.float64)).astype(np.float32)


def depthwise_nhwc(x, w, b):
    # w [KH, KW, C, M]; output channel c*M + m
    kh, kw, c, m = w.shape
    n, h, wd, _ = x.shape
    oh, ow = h - kh + 1, wd - kw + 1
    out = np.zeros((n, oh, ow, c, m))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + oh, j:j + ow, :].astype(np.float64)
            out += patch[..., None] * w[i, j].astype(np.float64)
    return (out.reshape(n, oh, ow, c * m) + b).astype(np.float32)


def pool_nhwc(x, k, pad, fill, reduce):
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad[0], pad[1]), (pad[2], pad[3]), (0, 0)), constant_values=np.nan)
    n, h, w, c = xp.shape
    oh, ow = h - k[0] + 1, w - k[1] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i:i + k[0], j:j + k[1], :]
            out[:, i, j, :] = reduce(win)
    return out.astype(np.float32)


def case(name, args, result, base=HERE):
    d = os.path.join(base, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "expected"))
    for i, a in enumerate(args):
        np.save(os.path.join(d, f"arg{i}.npy"), a)
    results = result if isinstance(result, tuple) else (result,)
    for j, r in enumerate(results):
        np.save(os.path.join(d, "expected", f"result{j}.npy"), r)


x = f32(14, 19)
case("argmax", [x], np.argmax(x, axis=1).astype(np.int32))
a, b = f32(1, 14, 19), f32(1, 19, 28)
case("matmul", [a, b], (a.astype(np.float64) @ b).astype(np.float32))
x = f32(13, 21, 3)
case("clamp", [x], np.clip(x, 0.0, 1.0))
x = f32(13, 21, 3)
case("sigmoid", [x], (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32))
x = f32(13, 21, 3)
case("erf", [x], np.vectorize(math.erf)(x.astype(np.float64)).astype(np.float32))
for name, fn, lo in [("exp", np.exp, -2.0), ("floor", np.floor, -2.0), ("ceil", np.ceil, -2.0),
                     ("abs", np.abs, -2.0), ("reciprocal", lambda v: 1.0 / v, 0.5),
                     ("rsqrt", lambda v: 1.0 / np.sqrt(v), 0.1), ("log", np.log, 0.1)]:
    x = f32(13, 21, 3, lo=lo)
    case(name, [x], fn(x.astype(np.float64)).astype(np.float32))
a, b = f32(13, 21, 1), f32(13, 21, 3)
case("add", [a, b], a + b)
a, b = f32(13, 21, 3), f32(13, 21, 1)
case("max", [a, b], np.maximum(a, b))
a, b = f32(13, 21, 3), f32(1, 21, 3)
case("min", [a, b], np.minimum(a, b))
a, b = f32(13, 21, 3), f32(13, 1, 3)
case("mul", [a, b], a * b)
a, b = f32(13, 21, 3, lo=0.1), f32(13, 21, 1)
case("pow", [a, b], np.power(a.astype(np.float64), b).astype(np.float32))
a, b = f32(1, 21, 3), f32(13, 21, 3)
case("sub", [a, b], a - b)
c, a, b = np.array([[[False]]]), f32(13, 21, 3), f32(13, 21, 3)
case("select", [c, a, b], np.where(c, a, b))
a, b = few(13, 21, 3), few(13, 1, 3)
case("equal", [a, b], a == b)
a, b = few(13, 1, 3), few(13, 21, 3)
case("greater_equal", [a, b], a >= b)
x = f32(13, 21, 3)
case("reduce_max", [x], x.max(axis=0))
x = f32(13, 21, 3)
case("reduce_sum", [x], x.astype(np.float64).sum(axis=0).astype(np.float32))
a, b = f32(13, 21, 3), f32(13, 21, 3)
case("concat", [a, b], np.concatenate([a, b], axis=0))
x = f32(13, 21, 3)
case("pad_explicit_value", [x], x)
x = f32(1, 32, 32, 8)
case("max_pool2d_f32", [x], x)
x = f32(1, 7, 7, 9)
case("avg_pool2d_f32", [x], pool_nhwc(x, (2, 2), (0, 1, 0, 1), np.nan, lambda w: np.nanmean(w, axis=(1, 2))))
x, w, b = f32(1, 49, 42, 27), f32(28, 3, 3, 27), f32(28)
case("conv2d_f32", [x, w, b], conv_nhwc(x, w, b, (0, 0, 0, 0), (1, 1), (2, 1)))
x, w, b = f32(1, 47, 40, 28), f32(28, 3, 3, 28), f32(28)
case("conv2d_padded_f32", [x, w, b], conv_nhwc(x, w, b, (1, 1, 1, 1), (1, 1), (2, 1)))
x, w, b = f32(1, 7, 5, 3), f32(3, 1, 3, 11), f32(33)
case("depthwise_conv", [x, w, b], depthwise_nhwc(x, w, b))
x = f32(1, 6, 34, 62)
case("max_pool_padded", [x], pool_nhwc(x, (3, 3), (0, 0, 0, 1), np.nan, lambda w: np.nanmax(w, axis=(1, 2))))
OWN = os.path.join(os.path.dirname(HERE), "own")
x = f32(4, 6, 5)
s = x[1:3, 2:5, 0:4].transpose(0, 2, 1)
case("slice_tile_transpose", [x], np.tanh(np.tile(s, (1, 1, 4)).astype(np.float64)).astype(np.float32), OWN)
v = (rng.integers(-8, 8, size=(2, 5, 3)) / 2.0).astype(np.float32)  # halves: casts see ties
i = rng.integers(0, 5, size=(2, 4)).astype(np.int32)
g = np.stack([v[n][i[n]] for n in range(2)])
case("gather_cast", [v, i], (g, np.rint(g).astype(np.int32)), OWN)
x = rng.integers(-300, 300, size=64).astype(np.int32)
r = np.clip(((x.astype(np.int64) * 1073741824 + (1 << 30)) >> 31) + 3, -128, 127)
table = np.array([((k * 7) % 256) - 128 for k in range(256)], dtype=np.int64)
case("rescale_table", [x], table[r + 128].astype(np.int8), OWN)
x, w, b = f32(1, 4, 4, 2), f32(3, 3, 3, 2), f32(3)
full = np.zeros((1, 9, 9, 3))
for ih in range(4):
    for iw in range(4):
        full[0, ih * 2:ih * 2 + 3, iw * 2:iw * 2 + 3, :] += np.einsum("c,okwc->kwo", x[0, ih, iw].astype(np.float64), w.astype(np.float64))
case("transpose_conv2d", [x, w, b], (full[:, 1:, 1:, :] + b).astype(np.float32), OWN)
a = rng.integers(-128, 128, size=(1, 5, 3)).astype(np.int8)
b = rng.integers(-128, 128, size=(1, 3, 6)).astype(np.int8)
case("matmul_quantized", [a, b], ((a.astype(np.int64) - 1) @ (b.astype(np.int64) - 2)).astype(np.int32))
x = rng.integers(-128, 128, size=(1, 5, 5, 3)).astype(np.int8)
w = rng.integers(-128, 128, size=(4, 3, 3, 3)).astype(np.int8)
b = rng.integers(-5000, 5000, size=4).astype(np.int32)
xp = np.pad(x.astype(np.int64) + 3, ((0, 0), (1, 1), (1, 1), (0, 0)))  # padding is the zero point: 0 after x - zp
y = np.zeros((1, 3, 3, 4), dtype=np.int64)
for i in range(3):
    for j in range(3):
        win = xp[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :]
        y[0, i, j] = np.einsum("hwc,ohwc->o", win, w.astype(np.int64) - 2) + b
mult = np.array([1073741824, 1342177280, 805306368, 1610612736], dtype=np.int64)
shift = np.array([38, 38, 37, 39], dtype=np.int64)
q = np.clip(((y * mult + (1 << (shift - 1))) >> shift) - 5, -128, 127)
case("conv2d_int8_zero_points", [x, w, b], (y.astype(np.int32), q.astype(np.int8)), OWN)
def bools(*shape):
    return rng.integers(0, 2, size=shape).astype(bool)


a, b = bools(13, 21, 3), bools(13, 21, 1)
case("logical_and", [a, b], a & b)
a, b = bools(13, 1, 3), bools(13, 21, 3)
case("logical_or", [a, b], a | b)
a, b = bools(13, 1, 3), bools(13, 21, 3)
case("logical_xor", [a, b], a ^ b)
a = bools(1, 21, 3)
case("logical_not", [a], ~a)
a = rng.random((13, 21, 3)) < 0.9  # mostly true, so some columns are all true
case("reduce_all", [a], a.all(axis=0))
a = rng.random((13, 21, 3)) < 0.05  # mostly false, so some columns have none
case("reduce_any", [a], a.any(axis=0))
x = f32(3, 5, 2)
case("reverse", [x], x[:, ::-1, :].copy(), OWN)
# Quantized tensors are their stored integers, in and out.
x = rng.integers(-128, 128, size=(1, 4, 4, 4)).astype(np.int8)
w = rng.integers(-128, 128, size=(8, 1, 1, 4)).astype(np.int8)
b = rng.integers(-128, 128, size=8).astype(np.int8)
case("conv2d_quant_uniform", [x, w, b], (np.einsum("nhwc,oc->nhwo", x.astype(np.int64), w[:, 0, 0, :].astype(np.int64)) + b).astype(np.int32))
x = rng.integers(-128, 128, size=(13, 21, 3)).astype(np.int8)
case("clamp_quantized", [x], np.clip(x, 0, 1).astype(np.int8))
def apply_scale_32(v, m, s, double_round):
    # TOSA 1.0 apply_scale_32, in exact integers.
    r = np.int64(1) << (s - 1)
    if double_round and s > 31:
        r = r + np.where(v >= 0, np.int64(1) << 30, -(np.int64(1) << 30))
    return (v * m + r) >> s


x = rng.integers(-40000, 40000, size=(50, 3)).astype(np.int32)
x[:4] = [[0, 0, 0], [1, 2, 3], [-1, -2, -3], [-15, 40000, -40000]]  # zero, small values of both signs, extremes
mult = np.array([1518500250, 1073741824, 2000000000], dtype=np.int64)
shift = np.array([33, 32, 31], dtype=np.int64)
v = x.astype(np.int64)
y = np.stack([apply_scale_32(v[:, c], mult[c], shift[c], True) for c in range(3)], axis=1)
case("rescale_double_round", [x], np.clip(y, -32768, 32767).astype(np.int16), OWN)
a = rng.integers(-100000, 100000, size=40).astype(np.int32)
b = rng.integers(-1000, 1000, size=40).astype(np.int32)
a[:4], b[:4] = [3, -3, 16, -16], [5, 5, 1, 1]  # rounding: 15/32 -> 0, -15/32 -> 0, ties 16/32 -> 1 and -16/32 -> 0
case("mul_shift", [a, b], ((a.astype(np.int64) * b + (1 << 4)) >> 5).astype(np.int32), OWN)
# Appended last, so the cases above keep their random numbers.
x = f32(13, 21, 3, lo=-7.0, hi=7.0)
case("cos", [x], np.cos(x.astype(np.float64)).astype(np.float32))
print("wrote", HERE, OWN)
