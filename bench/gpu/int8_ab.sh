#!/usr/bin/env bash
# int8 A/B on the GPU: BERT-base (seq 128) and ResNet-50 at batch 32,
# quantized by `aoc quantize --target sm_90` (min-max; 2 and 4 calibration
# batches), compiled for sm_90a --precision fp16 by an old and a new aoc,
# and fp16 by the new one; `aoc bench` device times in ROUNDS alternated
# rounds, so both binaries see the same machine. On the GPU machine, from
# the repository root:
#   OLD=path/to/old/aoc bash bench/gpu/int8_ab.sh
# (NEW defaults to build/device/aoc from tests/scripts/device_bins.py --gpu-only;
# without OLD only fp16 and the new int8 build are timed.)
set -e
N=${NEW:-build/device/aoc}
O=${OLD:-}
ROUNDS=${ROUNDS:-3}
builds="f16 new${O:+ old}"

W=/tmp/gb
mkdir -p $W/calib/input_ids
python3 bench/models/build_models.py $W bert_base --batch 32 --seq 128 >/dev/null
python3 -c "
import numpy as np
r=np.random.default_rng(0)
for i in range(2): np.save('$W/calib/input_ids/b%d.npy'%i, r.integers(0, 30522, (32,128)).astype(np.int64))
"
$N quantize $W/bert_base.onnx --calib $W/calib --method minmax --target sm_90 -o $W/q.air -q
$N compile $W/bert_base.onnx --target sm_90a --precision fp16 -o $W/f16.aoc | head -1
$N compile $W/q.air --target sm_90a --precision fp16 -o $W/new.aoc | head -1
[ -n "$O" ] && $O compile $W/q.air --target sm_90a --precision fp16 -o $W/old.aoc | head -1
for r in $(seq $ROUNDS); do for m in $builds; do echo "bert $m $($N bench $W/$m.aoc --iters 100 | grep device)"; done; done

G=/tmp/gi
mkdir -p $G/calib
python3 bench/models/build_models.py $G resnet50 --batch 32 >/dev/null
python3 -c "
import numpy as np
r=np.random.default_rng(0)
for i in range(4): np.save('$G/calib/b%d.npy'%i, r.standard_normal((32,3,224,224)).astype(np.float32))
"
$N quantize $G/resnet50.onnx --calib $G/calib --method minmax --target sm_90 -o $G/q.air -q
$N compile $G/resnet50.onnx --target sm_90a --precision fp16 -o $G/f16.aoc | head -1
$N compile $G/q.air --target sm_90a --precision fp16 -o $G/new.aoc | head -1
[ -n "$O" ] && $O compile $G/q.air --target sm_90a --precision fp16 -o $G/old.aoc | head -1
for r in $(seq $ROUNDS); do for m in $builds; do echo "r50 $m $($N bench $G/$m.aoc --iters 100 | grep device)"; done; done
$N bench $G/new.aoc --profile --slowest 12 --iters 10
