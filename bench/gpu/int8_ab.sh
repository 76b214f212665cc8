#!/usr/bin/env bash
# int8 A/B on the GPU: BERT-base (seq 128) and ResNet-50 at batch 32,
# quantized by `aoc quantize --target sm_90` (min-max; 2 and 4 calibration
# batches), compiled for sm_90a --precision fp16 by an old and a new aoc,
# and fp16 by the new one; `aoc bench` device times in ROUNDS alternated
# rounds, so both binaries see the same machine. On the GPU machine, from
# the repository root:
#   OLD=path/to/old/aoc bash bench/gpu/int8_ab.sh
# (NEW defaults to build/device/aoc from tests/scripts/device_bins.py --gpu-only;
# without OLD only fp16 and the new int8 build are timed; MODELS="bert" or
# "r50" times one model.)
set -e
N=${NEW:-build/device/aoc}
A=$N
. bench/gpu/int8_models.sh
O=${OLD:-}
ROUNDS=${ROUNDS:-3}
builds="f16 new${O:+ old}"
MODELS=${MODELS:-bert r50}

if [[ " $MODELS " == *" bert "* ]]; then
W=/tmp/gb
int8_bert $W
$N compile $W/bert_base.onnx --target sm_90a --precision fp16 -o $W/f16.aoc | head -1
$N compile $W/q.air --target sm_90a --precision fp16 -o $W/new.aoc | head -1
[ -n "$O" ] && $O compile $W/q.air --target sm_90a --precision fp16 -o $W/old.aoc | head -1
for r in $(seq $ROUNDS); do for m in $builds; do echo "bert $m $($N bench $W/$m.aoc --iters 100 | grep device)"; done; done
fi

if [[ " $MODELS " == *" r50 "* ]]; then
G=/tmp/gi
int8_resnet50 $G
$N compile $G/resnet50.onnx --target sm_90a --precision fp16 -o $G/f16.aoc | head -1
$N compile $G/q.air --target sm_90a --precision fp16 -o $G/new.aoc | head -1
[ -n "$O" ] && $O compile $G/q.air --target sm_90a --precision fp16 -o $G/old.aoc | head -1
for r in $(seq $ROUNDS); do for m in $builds; do echo "r50 $m $($N bench $G/$m.aoc --iters 100 | grep device)"; done; done
$N bench $G/new.aoc --profile --slowest 12 --iters 10
fi
