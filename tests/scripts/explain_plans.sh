#!/usr/bin/env bash
# Writes `aoc explain` of every example and OCR model compiled for each CPU
# and GPU target into OUT_DIR, one file per model and target, so that two
# builds of aoc can be compared: a restructuring must leave every plan as
# it was.
#
#   tests/scripts/explain_plans.sh AOC_BIN OUT_DIR [MODELS_DIR]
#   tests/scripts/explain_plans.sh /tmp/aoc-before /tmp/plans-before build/models
#   tests/scripts/explain_plans.sh target/release/aoc /tmp/plans-after build/models
#   diff -r /tmp/plans-before /tmp/plans-after
#
# Each file ends with the artifact's SHA-256, so a change in code or
# weights that the explain text does not show is seen too. The explain text
# names the artifact, so every artifact is written to the
# same path (OUT_DIR/work/model.aoc); the .air files are imported once per
# run from the ONNX files, with the input shapes tests/scripts/real_models.py
# lists for the OCR models.
set -euo pipefail
aoc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$2
models=${3:-build/models}
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${AOC_PYTHON:-$root/.venv/bin/python}
mkdir -p "$out/work"
work=$(cd "$out/work" && pwd)

targets_cpu="x86-64 x86-64-v3 x86-64-v4"
gpu_configs="sm_86:fp32 sm_86:fp16 sm_90a:fp16 sm_75:fp32"

# Runs a command, showing its output only when it fails.
quiet() { "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }; }

for d in "$root"/examples/*/; do
  name=$(basename "$d")
  [ -f "$d/model.onnx" ] || continue
  flag=()
  [ "$name" = dynamic_batch ] && flag=(--input-shape input=2x3x32x32)
  quiet "$aoc" import "$d/model.onnx" -o "$work/$name.air" "${flag[@]}"
done
if [ -d "$models" ]; then
  while IFS=$'\t' read -r key file inp shp _; do
    [ -f "$models/$file" ] || continue
    quiet "$aoc" import "$models/$file" -o "$work/$key.air" --input-shape "$inp=$shp"
  done < <("$py" "$root/tests/scripts/real_models.py" list)
fi

for air in "$work"/*.air; do
  name=$(basename "$air" .air)
  for t in $targets_cpu; do
    quiet "$aoc" compile "$air" --target "$t" -o "$work/model.aoc"
    (cd "$work" && "$aoc" explain model.aoc && sha256sum model.aoc) > "$out/$name.$t.explain"
  done
  for c in $gpu_configs; do
    t=${c%%:*}; p=${c##*:}
    quiet "$aoc" compile "$air" --target "$t" --precision "$p" -o "$work/model.aoc"
    (cd "$work" && "$aoc" explain model.aoc && sha256sum model.aoc) > "$out/$name.$t.$p.explain"
  done
done
rm -rf "$work"
echo "explain_plans: $(ls "$out" | wc -l) plans in $out"
