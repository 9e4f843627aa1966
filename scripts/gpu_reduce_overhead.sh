#!/usr/bin/env bash
# torch.compile(mode="reduce-overhead") on the lent H200 (docs/profile.md, "Reduce-overhead mode"), and compiled
# parity on real CUDA (docs/parity.md, "Compiled steps"), in one call:
#   1. `npuport profile record` of each model's prefill 1x2048 and decode 1 token after 2048 in bf16 with
#      mode=reduce-overhead and, beside it in the same process order, mode=compile (same machine, same hour);
#   2. `npuport parity run` of TinyLlama's prefill 1x512 with mode=compile on cuda against the float64 golden, and a
#      CUDA eager record compared with the compiled CUDA step (mixed modes).
# Artifacts (JSON, no raw traces) come back packed per mode and model; parity reports as JSON and text.
# Usage there: bash scripts/gpu_reduce_overhead.sh OUT_DIR [MODEL...]   (default: tinyllama-1.1b llama-2-7b olmoe-1b-7b)
#   PARITY=0 skips part 2; MODES=... replaces "reduce-overhead compile"; KINDS=... replaces "prefill decode"
#   (train, prefill, decode: train is batch 1 x 2048, forward and backward)
set -u
OUT=${1:?out dir}
shift
MODELS=${*:-tinyllama-1.1b llama-2-7b olmoe-1b-7b}
mkdir -p "$OUT"
source scripts/gpu_env.sh
W=$(mktemp -d)
for m in $MODELS; do
  for mode in ${MODES:-reduce-overhead compile}; do
    SECONDS=0
    python3 -m npuport.cli.main profile record --hf examples/configs/$m.json --dtype bfloat16 --dev cuda \
        $(for k in ${KINDS:-prefill decode}; do [ $k = train ] && echo "--scenario train:batch=1,seq=2048,mode=$mode"; \
          [ $k = prefill ] && echo "--scenario prefill:batch=1,seq=2048,mode=$mode"; \
          [ $k = decode ] && echo "--scenario decode:batch=1,past=2048,mode=$mode"; done) \
        --warmup 2 --steps 5 --out-dir "$W/$mode/$m" 2>&1 | tail -3
    echo "$m $mode: ${SECONDS}s"
    # packed as each one ends: what a run cut short had finished still comes back
    tar -C "$W" -czf "$OUT/$mode-$m.tgz" --exclude='*.trace.json.gz' "$mode/$m"
  done
done
if [ "${PARITY:-1}" = 1 ]; then
  C=examples/configs/tinyllama-1.1b.json
  S=prefill:batch=1,seq=512
  python3 -m npuport.cli.main parity run --ref cuda --dev cuda --hf $C --dtype bfloat16 --scenario $S,mode=compile \
      --golden cpu64 -o "$OUT/parity_compile_cuda.txt" --json-out "$OUT/parity_compile_cuda.json" 2>&1 | tail -3
  echo "parity compile cuda: rc $?"
  python3 -m npuport.cli.main parity record --dev cuda --hf $C --dtype bfloat16 --scenario $S --out-dir "$W/eager" 2>&1 | tail -2
  python3 -m npuport.cli.main parity run --ref "$W/eager" --dev cuda --hf $C --dtype bfloat16 --scenario $S,mode=compile \
      -o "$OUT/parity_eager_vs_compiled.txt" --json-out "$OUT/parity_eager_vs_compiled.json" 2>&1 | tail -3
  echo "parity eager record vs compiled cuda: rc $?"
fi
ls -la "$OUT"
