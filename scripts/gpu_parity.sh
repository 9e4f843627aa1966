#!/usr/bin/env bash
# Issue 6, item 9: parity on a real NVIDIA GPU, in one go (about 4-5 minutes on an H200 host).
#
#   PYTHONPATH=. OUT=/some/folder bash scripts/gpu_parity.sh
#
# Steps (each logged to $OUT/<step>.log; a failing step is reported and the rest still run):
#   env            nvidia-smi, torch / transformers versions
#   gpu_check      the CUDA device path: versions(), numerics policy read back
#   gpt2_fp32      npuport parity --ref cuda --dev cpu, GPT-2 (124M) fp32, float64 golden
#   llama_bf16     npuport parity --ref cuda --dev cpu, TinyLlama-1.1B shape, bf16, float64 golden
#   record_gpt2    npuport parity record --dev cuda (full: tensors + weights), then
#   compare_gpt2   npuport parity compare --ref REF --dev cpu --golden cpu64 (another process: the other machine)
#   record_llama   npuport parity record --dev cuda --stats-only (TinyLlama bf16), then
#   compare_llama  npuport parity compare --ref REF --dev cpu --golden cpu64
#   fault_cuda     --ref cuda --dev cpu-fault:... on GPT-2: localisation names the injected module and op
#   bench          scripts/bench_parity.py: capture overhead (target stats-only <= 1.3x at 1 x 2048), sizes, compare rate
# Exit status of a parity step: 0 pass, 1 divergence (a result, not a script failure), 2 error.
# Artifacts go to $SCRATCH (not $OUT: weights are hundreds of MB); their manifests and sizes are copied to $OUT.
set -u

OUT=${OUT:-./gpu_parity_out}
SCRATCH=${SCRATCH:-/tmp/npuport_gpu_parity}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$SCRATCH"
export PYTHONPATH=${PYTHONPATH:-.}
export PYTHONUNBUFFERED=1
NPUPORT="$PY -m npuport.cli.main"
CFG=examples/configs
SUMMARY="$OUT/summary.tsv"
printf 'step\trc\tseconds\tresult\n' > "$SUMMARY"

step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0 t1 rc result
  echo "== $name: $*" | tee -a "$OUT/commands.txt"
  t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local one=divergence
  case $name in env|gpu_check|bench) one="failed: $(tail -n 1 "$OUT/$name.log" | cut -c1-150)" ;; esac
  case $rc in
    0) result=pass ;;
    1) result=$one ;;
    2) result="error: $(grep -m1 '^error:' "$OUT/$name.log" | cut -c1-150)" ;;
    124) result="timed out after ${limit}s" ;;
    *) result="failed (rc $rc): $(tail -n 1 "$OUT/$name.log" | cut -c1-150)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" "$result" >> "$SUMMARY"
  echo "   -> rc $rc ($result)"
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch, transformers, sys; print(sys.version); print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else None); print(\"transformers\", transformers.__version__)'"

step gpu_check 60 $PY -c "
import json
from npuport.devices.device import parse_device, NumericsPolicy, preserved_numerics
d = parse_device('cuda'); d.check_present()
with preserved_numerics():
    print(json.dumps({'versions': d.versions(), 'policy_in_force': d.set_numerics_policy(NumericsPolicy())}, indent=1, default=str))
"

S128="prefill:batch=1,seq=128"
step gpt2_fp32 120 $NPUPORT parity --ref cuda --dev cpu --hf $CFG/gpt2.json --dtype float32 --scenario $S128 \
  --golden cpu64 --json-out "$OUT/gpt2_fp32.json" --top 15 --force
step llama_bf16 150 $NPUPORT parity --ref cuda --dev cpu --hf $CFG/tinyllama-1.1b.json --dtype bfloat16 --scenario $S128 \
  --golden cpu64 --json-out "$OUT/llama_bf16.json" -o "$OUT/llama_bf16.md" --force
[ -f "$OUT/llama_bf16.json" ] && $PY -c "
import json, sys; from npuport.render.parity_doc import render_html
d = json.load(open('$OUT/llama_bf16.json')); open('$OUT/llama_bf16.html', 'w').write(render_html(d))" 2>>"$OUT/llama_bf16.log"

step record_gpt2 120 $NPUPORT parity record --dev cuda --hf $CFG/gpt2.json --dtype float32 --scenario $S128 \
  --out-dir "$SCRATCH/ref_gpt2_full" --force
step compare_gpt2 120 $NPUPORT parity compare --hf $CFG/gpt2.json --ref "$SCRATCH/ref_gpt2_full" --dev cpu --golden cpu64 \
  --json-out "$OUT/compare_gpt2.json" --top 15 --force

step record_llama 150 $NPUPORT parity record --dev cuda --hf $CFG/tinyllama-1.1b.json --dtype bfloat16 --scenario $S128 \
  --stats-only --out-dir "$SCRATCH/ref_llama_stats" --force
step compare_llama 150 $NPUPORT parity compare --hf $CFG/tinyllama-1.1b.json --ref "$SCRATCH/ref_llama_stats" --dev cpu \
  --golden cpu64 --json-out "$OUT/compare_llama.json" --top 15 --force

step fault_cuda 120 $NPUPORT parity --ref cuda --dev 'cpu-fault:aten::tanh@transformer.h.3.mlp.act*0.05' --hf $CFG/gpt2.json \
  --dtype float32 --scenario $S128 --golden cpu64 --json-out "$OUT/fault_cuda.json" --top 10 --force

step bench 240 $PY scripts/bench_parity.py --device cuda --config $CFG/tinyllama-1.1b.json --dtype bfloat16 --seq 2048 \
  --json "$OUT/bench.json" --scratch "$SCRATCH/bench"

for d in "$SCRATCH"/ref_*; do
  [ -f "$d/manifest.json" ] || continue
  name=$(basename "$d")
  cp "$d/manifest.json" "$OUT/$name.manifest.json"
  du -b "$d"/* > "$OUT/$name.sizes.txt" 2>/dev/null
done

echo
echo "=== summary (logs and JSON under $OUT) ==="
column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"
for f in gpt2_fp32 llama_bf16 compare_gpt2 compare_llama fault_cuda; do
  [ -f "$OUT/$f.json" ] && $PY -c "
import json; d = json.load(open('$OUT/$f.json')); v = d['verdict']; fd = d['first_divergence']
print('$f:', v['text'][:220])" 2>/dev/null
done
[ -f "$OUT/bench.json" ] && $PY -c "
import json; b = json.load(open('$OUT/bench.json'))
for k, v in b['variants'].items(): print(f'bench {k:24s} plain {v[\"plain_ms\"]:7.2f} ms  capture {v[\"capture_ms\"]:7.2f} ms  {v[\"ratio\"]:.2f}x')
print('bench stats-only artifact', round(b.get('artifact_stats_bytes', 0) / 2**20, 2), 'MiB; compare full', round(b.get('compare_full', {}).get('GB_per_s', 0), 2), 'GB/s')"
exit 0
