#!/usr/bin/env python3
"""The real third-party ONNX models aoc is tested on, and a check that they run.

The models are RapidOCR's PaddleOCR exports, shipped inside the PyPI wheel
rapidocr-onnxruntime==1.4.4 (`make real-models` extracts them into
build/models/). aoc did not write them: they are what a user brings.
Their inputs have symbolic dimensions, so each entry names the concrete
input shape the tests use (pass it to `aoc import --input-shape` and to
`ort_run.py --shape`).

    real_models.py list          # TSV: key, file, input name, shape, output name
    real_models.py extract WHEEL DIR
                                 # copy the wheel's .onnx files into DIR
    real_models.py check DIR     # load each model from DIR, run it in ONNX Runtime
                                 # on seeded random input, print output shapes
"""

from __future__ import annotations

import os
import sys

# key, file name inside the wheel, input name, concrete input shape, output name, what it is
MODELS = [
    ("det", "ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, 160, 160), "sigmoid_0.tmp_0",
     "PP-OCRv4 text detector: CNN with BN, depthwise convs, SE/HardSigmoid, ConvTranspose, Resize (opset 12)"),
    ("rec", "ch_PP-OCRv4_rec_infer.onnx", "x", (1, 3, 48, 160), "softmax_11.tmp_0",
     "PP-OCRv4 text recognizer: CNN + transformer-style mixer (MatMul, Softmax, decomposed LayerNorm) (opset 12)"),
    ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", (1, 3, 48, 192), "save_infer_model/scale_0.tmp_1",
     "PP-OCR v2 text-direction classifier: MobileNetV3-style CNN with BN, HardSigmoid (opset 11)"),
]


def shape_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def cmd_list() -> int:
    for key, file, inp, shape, out, _ in MODELS:
        print(f"{key}\t{file}\t{inp}\t{shape_text(shape)}\t{out}")
    return 0


def cmd_extract(wheel: str, directory: str) -> int:
    import zipfile

    os.makedirs(directory, exist_ok=True)
    wanted = {file for _, file, *_ in MODELS}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = os.path.basename(info.filename)
            if name in wanted:
                with z.open(info) as src, open(os.path.join(directory, name), "wb") as dst:
                    dst.write(src.read())
                wanted.discard(name)
    if wanted:
        print(f"{wheel} lacks {sorted(wanted)}", file=sys.stderr)
        return 1
    return 0


def cmd_check(directory: str) -> int:
    import numpy as np
    import onnxruntime as ort

    ok = True
    for key, file, inp, shape, out, _ in MODELS:
        path = os.path.join(directory, file)
        if not os.path.exists(path):
            print(f"{key}: missing {path}", file=sys.stderr)
            ok = False
            continue
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        inputs = sess.get_inputs()
        outputs = sess.get_outputs()
        if [i.name for i in inputs] != [inp] or [o.name for o in outputs] != [out]:
            print(f"{key}: expected input {inp!r} and output {out!r}, model has "
                  f"{[i.name for i in inputs]} -> {[o.name for o in outputs]}", file=sys.stderr)
            ok = False
            continue
        x = np.random.default_rng(0).standard_normal(size=shape).astype(np.float32)
        (y,) = sess.run(None, {inp: x})
        size_mb = os.path.getsize(path) / 1e6
        print(f"{key}: {file} ({size_mb:.1f} MB) {inp}{list(inputs[0].shape)} := {shape_text(shape)} "
              f"-> {out} {shape_text(y.shape)} {y.dtype} finite={bool(np.isfinite(y).all())}")
        ok &= bool(np.isfinite(y).all())
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv == ["list"]:
        return cmd_list()
    if len(argv) == 3 and argv[0] == "extract":
        return cmd_extract(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "check":
        return cmd_check(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
