#!/usr/bin/env bash
# torch.compile's default mode on the lent H200 (docs/profile.md, "Compile mode"): the host costs of a compiled step
# (scripts/calibrate_compile_host.py) and `npuport profile record` with mode=compile of the given models' train 1x2048,
# prefill 1x2048 and decode 1 token after 2048, in bf16. Artifacts (JSON) come back packed per model, no raw traces.
# Usage there: bash scripts/profile_gpu_compile.sh OUT_DIR [MODEL...]   (default: tinyllama-1.1b llama-2-7b olmoe-1b-7b)
#   CALIBRATE=0 skips the host calibration; SCENARIOS=... replaces the three scenarios
set -u
OUT=${1:?out dir}
shift
MODELS=${*:-tinyllama-1.1b llama-2-7b olmoe-1b-7b}
mkdir -p "$OUT"
source scripts/gpu_env.sh
[ "${CALIBRATE:-1}" = 1 ] && python3 scripts/calibrate_compile_host.py -o "$OUT/compile-host.json" 2>&1 | tail -8
S=${SCENARIOS:-"--scenario train:batch=1,seq=2048,mode=compile --scenario prefill:batch=1,seq=2048,mode=compile --scenario decode:batch=1,past=2048,mode=compile"}
W=$(mktemp -d)
for m in $MODELS; do
  SECONDS=0
  python3 -m npuport.cli.main profile record --hf examples/configs/$m.json --dtype bfloat16 --dev cuda $S \
      --warmup 2 --steps 5 --out-dir "$W/$m" 2>&1 | tail -4
  echo "$m: ${SECONDS}s"
  tar -C "$W" -czf "$OUT/$m.tgz" --exclude='*.trace.json.gz' "$m"
done
ls -la "$OUT"
