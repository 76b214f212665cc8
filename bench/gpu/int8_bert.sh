#!/usr/bin/env bash
# int8 against fp16 on the GPU: BERT-base (seq 128) at batch 32 quantized by
# aoc quantize --target sm_90 (min-max, 2 calibration batches of token ids),
# both builds for sm_90a at --precision fp16, aoc bench device times. On the
# GPU machine, from the repository root, with build/device from
# tests/scripts/device_bins.py --gpu-only.
set -e
A=build/device/aoc
W=/tmp/gb
. bench/gpu/int8_models.sh
int8_bert $W
$A compile $W/bert_base.onnx --target sm_90a --precision fp16 -o $W/f16.aoc 2>&1 | head -1
$A compile $W/q.air --target sm_90a --precision fp16 -o $W/i8.aoc 2>&1 | head -1
for m in f16 i8; do echo "== $m"; $A bench $W/$m.aoc --iters 50 2>&1 | grep "device"; done
$A bench $W/i8.aoc --profile --iters 10 2>&1 | grep -v "^  pw[0-9]" | head -24
