#!/usr/bin/env bash
# Held-out models for the step-time check (docs/profile.md, "Held out: two models nothing was fit to"), on a lent GPU
# in one call: `npuport profile record` of Qwen2-7B (dense, GQA, 152k vocabulary) with train 1x2048, prefill 1x2048
# and decode 1 token after 2048, and of DeepSeek-V2-Lite (MLA without a query LoRA, 64 routed + 2 shared experts,
# top-6, one dense layer first) with prefill 1x2048, decode after 2048 and train 1x1024 (at 1x2048 its weights,
# gradients and activations do not fit an 80 GB card: `npuport audit` says 78 GiB before any optimizer), eager, bf16.
# Artifacts (JSON, no raw traces) come back packed per model.
# Usage there: bash scripts/profile_gpu_heldout.sh OUT_DIR
set -u
OUT=${1:?out dir}
mkdir -p "$OUT"
source scripts/gpu_env.sh
W=$(mktemp -d)
rec() {  # model, scenarios...
  local m=$1
  shift
  SECONDS=0
  python3 -m npuport.cli.main profile record --hf examples/configs/$m.json --dtype bfloat16 --dev cuda "$@" \
      --warmup 2 --steps 5 --out-dir "$W/$m" 2>&1 | tail -4
  echo "$m: ${SECONDS}s"
  tar -C "$W" -czf "$OUT/$m.tgz" --exclude='*.trace.json.gz' "$m"
}
rec qwen2-7b --scenario train:batch=1,seq=2048 --scenario prefill:batch=1,seq=2048 --scenario decode:batch=1,past=2048
rec deepseek-v2-lite --scenario prefill:batch=1,seq=2048 --scenario decode:batch=1,past=2048 --scenario train:batch=1,seq=1024
ls -la "$OUT"
