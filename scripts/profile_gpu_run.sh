#!/usr/bin/env bash
# The measured side of the step-time check (docs/profile.md), run on the lent H200 in one call:
#   calibration microbenchmarks (scripts/calibrate_timing.py) and `npuport profile record` of Llama-2-7B, OLMoE-1B-7B
#   and TinyLlama-1.1B (train 1x2048, prefill 1x2048, decode 1 token after 2048) in bf16, plus a small GPT trace that
#   ships as test data. Artifacts (JSON) come back packed per model; raw traces only for the GPT example.
# Usage there: bash scripts/profile_gpu_run.sh OUT_DIR [PART...]   (transformers travels as wheels in .gpuwheels/)
#   PART: calibration, gpt, models, grow (default: all four, in that order); MODELS=... picks the models
set -u
OUT=${1:?out dir}
shift
PARTS=${*:-calibration gpt models grow}
want() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
mkdir -p "$OUT"
source scripts/gpu_env.sh
want calibration && python3 scripts/calibrate_timing.py --chip H200 -o "$OUT/calibration.json" 2>&1 | tail -12
S="--scenario train:batch=1,seq=2048 --scenario prefill:batch=1,seq=2048 --scenario decode:batch=1,past=2048"
W=$(mktemp -d)
want gpt && python3 -m npuport.cli.main profile record examples/gpt/model.py --dev cuda --scenario prefill:batch=1,seq=64 \
    --scenario train:batch=2,seq=32 --warmup 1 --steps 1 --out-dir "$W/gpt" \
  && tar -C "$W" -czf "$OUT/gpt.tgz" gpt
want models && for m in ${MODELS:-tinyllama-1.1b olmoe-1b-7b llama-2-7b}; do
  python3 -m npuport.cli.main profile record --hf examples/configs/$m.json --dtype bfloat16 --dev cuda $S \
      --warmup 2 --steps 5 --out-dir "$W/$m" && tar -C "$W" -czf "$OUT/$m.tgz" --exclude='*.trace.json.gz' "$m"
done
# decode as generation runs it (the cache grows a token per step): what a new KV length per step costs
want grow && python3 -m npuport.cli.main profile record --hf examples/configs/tinyllama-1.1b.json --dtype bfloat16 --dev cuda \
    --scenario decode:batch=1,past=2048 --decode-cache grow --warmup 2 --steps 5 --out-dir "$W/grow/tinyllama-1.1b" \
  && python3 -m npuport.cli.main profile record --hf examples/configs/llama-2-7b.json --dtype bfloat16 --dev cuda \
    --scenario decode:batch=1,past=2048 --decode-cache grow --warmup 2 --steps 5 --out-dir "$W/grow/llama-2-7b" \
  && tar -C "$W" -czf "$OUT/grow.tgz" --exclude='*.trace.json.gz' grow
ls -la "$OUT"
