#!/usr/bin/env bash
# int8 against fp16 on the GPU: BERT-base (seq 128) at batch 32 quantized by
# aoc quantize --target sm_90 (min-max, 2 calibration batches of token ids),
# both builds for sm_90a at --precision fp16, aoc bench device times. On the
# GPU machine, from the repository root, with build/device from
# tests/scripts/device_bins.py --gpu-only.
set -e
A=build/device/aoc
W=/tmp/gb
mkdir -p $W/calib/input_ids
python3 bench/models/build_models.py $W bert_base --batch 32 --seq 128 >/dev/null
python3 -c "
import numpy as np
r=np.random.default_rng(0)
for i in range(2): np.save('$W/calib/input_ids/b%d.npy'%i, r.integers(0, 30522, (32,128)).astype(np.int64))
"
/usr/bin/time -f "quantize %e s" $A quantize $W/bert_base.onnx --calib $W/calib --method minmax --target sm_90 -o $W/q.air -q
$A compile $W/bert_base.onnx --target sm_90a --precision fp16 -o $W/f16.aoc 2>&1 | head -1
$A compile $W/q.air --target sm_90a --precision fp16 -o $W/i8.aoc 2>&1 | head -1
for m in f16 i8; do echo "== $m"; $A bench $W/$m.aoc --iters 50 2>&1 | grep "device"; done
$A bench $W/i8.aoc --profile --iters 10 2>&1 | grep -v "^  pw[0-9]" | head -24
