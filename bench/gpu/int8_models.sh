# Sourced by the int8 GPU benchmarks (int8_bert.sh, int8_resnet50.sh,
# int8_ab.sh): the float model, seeded calibration inputs and the model
# quantized by `aoc quantize --target sm_90` (min-max), in folder W, with
# the aoc binary A. Each function leaves W/<model>.onnx and W/q.air.

# BERT-base (seq 128) at batch 32, 2 calibration batches of token ids.
int8_bert() {
  local W=$1
  mkdir -p $W/calib/input_ids
  python3 bench/models/build_models.py $W bert_base --batch 32 --seq 128 >/dev/null
  python3 -c "
import numpy as np
r=np.random.default_rng(0)
for i in range(2): np.save('$W/calib/input_ids/b%d.npy'%i, r.integers(0, 30522, (32,128)).astype(np.int64))
"
  /usr/bin/time -f "quantize %e s" $A quantize $W/bert_base.onnx --calib $W/calib --method minmax --target sm_90 -o $W/q.air -q
}

# ResNet-50 at batch 32, 4 calibration batches of normal noise.
int8_resnet50() {
  local W=$1
  mkdir -p $W/calib
  python3 bench/models/build_models.py $W resnet50 --batch 32 >/dev/null
  python3 -c "
import numpy as np
r=np.random.default_rng(0)
for i in range(4): np.save('$W/calib/b%d.npy'%i, r.standard_normal((32,3,224,224)).astype(np.float32))
"
  /usr/bin/time -f "quantize %e s" $A quantize $W/resnet50.onnx --calib $W/calib --method minmax --target sm_90 -o $W/q.air -q
}
