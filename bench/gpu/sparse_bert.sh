#!/usr/bin/env bash
# 2:4 against dense on the GPU (issue 20's BERT target: 2:4 ≥ 1.2× dense):
# BERT-base (seq 128) at batch 32, every FFN and projection pruned to 2:4
# by `aoc sparsify --pattern 2:4`, both builds at --precision fp16 for
# sm_90a (dense wgmma; the cost model picks per layer between wgmma.sp,
# mma.sp and dense wgmma) and sm_90 (dense mma.sync, where the sparse
# layers run on mma.sp), aoc bench device times and `aoc explain`'s
# per-layer choice. On the GPU machine, from the repository root (Python
# with numpy and onnx): bash bench/gpu/sparse_bert.sh  (A=path/to/aoc to
# use another binary than build/device/aoc, SMS=sm_90a for one target,
# PROFILE=1 to add `aoc bench --profile`'s slowest steps)
set -e
A=${A:-build/device/aoc}
W=${W:-/tmp/gbsp}
mkdir -p $W
python3 bench/models/build_models.py $W bert_base --batch 32 --seq 128 >/dev/null
$A sparsify $W/bert_base.onnx --pattern 2:4 -o $W/sp.air | tail -2
for sm in ${SMS:-sm_90a sm_90}; do
  $A compile $W/bert_base.onnx --target $sm --precision fp16 -o $W/dense_$sm.aoc 2>&1 | head -1
  $A compile $W/sp.air --target $sm --precision fp16 -o $W/sp_$sm.aoc 2>&1 | head -1
  for m in dense sp; do
    echo "== $sm $m"; $A bench $W/${m}_$sm.aoc --iters 50 2>&1 | grep "device"
    if [ -n "$PROFILE" ]; then $A bench $W/${m}_$sm.aoc --iters 20 --profile --slowest 12 2>&1 | grep -v '^{'; fi
  done
  echo "== $sm: sparse layers on wgmma.sp / mma.sp / dense"
  $A explain $W/sp_$sm.aoc | grep -c ": sparse: 2:4 wgmma.sp" || true
  $A explain $W/sp_$sm.aoc | grep -c ": sparse: 2:4 mma.sp" || true
  $A explain $W/sp_$sm.aoc | grep -c ": dense: " || true
  $A explain $W/sp_$sm.aoc | grep ": dense: " | sed 's/.*: dense: //' | sort | uniq -c | head -5
done
