#!/usr/bin/env bash
# npuport bench on a real NVIDIA GPU (issue 8, item 6), in one call of at most ~5 minutes:
#   1. harness validation: bf16 8192^3 GEMM and a 4 GiB device-to-device copy timed by npuport's bench path
#      and by triton.testing.do_bench / hand-written CUDA events (must agree within 5%)
#   2. SDPA kernel-path check: bf16 causal, fp32 causal, bf16 additive float mask, bf16 bool mask (MHA and GQA)
#   3. npuport bench --hf tinyllama-1.1b, prefill batch 1 x 2048, top 10 ops, end-to-end step, --emit repro scripts
#   4. two emitted repro scripts run standalone on the GPU
#   5. llama-2-7b prefill (top 6, eager + alternatives) if time is left
# Usage (repo root):  PYTHONPATH=. OUT=/some/dir bash scripts/gpu_bench.sh
# Every step logs to $OUT/<step>.log; a failing step is reported and the rest still runs. Read-only towards the
# GPU's settings: nvidia-smi is only queried, never used to set clocks or power.
set -u
OUT="${OUT:-$(pwd)/gpu_bench_out}"
mkdir -p "$OUT"
export PYTHONPATH="${PYTHONPATH:-.}"
PY="${PYTHON:-python3}"
START=$(date +%s)
BUDGET="${BUDGET_S:-290}"
: > "$OUT/status.tsv"

left() { echo $(( BUDGET - ($(date +%s) - START) )); }

step() {  # step NAME TIMEOUT_S command...
  local name="$1" limit="$2"; shift 2
  local rem; rem=$(left)
  if (( rem < 15 )); then echo -e "$name\tskipped (time budget)\t0" >> "$OUT/status.tsv"; return; fi
  (( limit > rem )) && limit=$rem
  local t0; t0=$(date +%s)
  echo "=== $name (limit ${limit}s) ===" >&2
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo -e "$name\trc=$rc\t$(( $(date +%s) - t0 ))s" >> "$OUT/status.tsv"
  tail -n 5 "$OUT/$name.log" | grep -v '^USDT' >&2
}

# 0. environment and clocks as found (read only)
step env 30 bash -c "nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE; $PY -c 'import torch, transformers, sys; print(sys.version); print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0)); print(\"transformers\", transformers.__version__); import triton; print(\"triton\", triton.__version__)'"

# 1. harness vs do_bench / CUDA events
step validate 90 "$PY" -m npuport.bench.validate --device cuda --gemm 8192 --copy-gib 4 --json "$OUT/validate.json"

# 2. SDPA kernel path by dtype and mask
step sdpa_paths 75 "$PY" - "$OUT/sdpa_paths.json" <<'PYEOF'
import json, sys, torch
from npuport.bench import device as dev
from npuport.bench.cases import BenchCase, TensorSpec
from npuport.bench.harness import BenchOptions, bench_case
from npuport.bench.rebuild import meta_cost
from npuport.cost.roofline import get_chip
from npuport.trace.records import TensorRef

where = "cuda"
clock, sync = dev.clock_for(where), (lambda: dev.synchronize(where))
opts = BenchOptions(warmup=5, reps=30, budget_s=0.3, compile=False, alternatives=True, kernel_check=True)
chip = get_chip(dev.chip_for(where) or "H200")
rows = []
variants = []
for gqa in (False, True):
    kv = 4 if gqa else 32
    for dtype, mask in (("bfloat16", "causal"), ("float32", "causal"), ("bfloat16", "additive"), ("bfloat16", "bool"), ("float16", "causal")):
        variants.append((gqa, kv, dtype, mask))
for gqa, kv, dtype, mask in variants:
    q, k = TensorSpec((1, 32, 2048, 64), dtype), TensorSpec((1, kv, 2048, 64), dtype)
    specs = [q, k, k]
    kwargs = {}
    if mask == "causal":
        kwargs["is_causal"] = True
    else:
        specs.append(TensorSpec((1, 1, 2048, 2048), dtype if mask == "additive" else "bool"))
        kwargs["attn_mask"] = TensorRef(3)
    if gqa:
        kwargs["enable_gqa"] = True
    case = BenchCase("aten::scaled_dot_product_attention", " ".join("x".join(map(str, s.shape)) for s in specs), tuple(specs),
                     (TensorRef(0), TensorRef(1), TensorRef(2)), kwargs, 1, 0.0, 0, True, dtype, 0.0, "-")
    case.flops, case.bytes, case.matrix, case.dtype = meta_cost(case)
    label = f"{dtype} {mask}{' gqa' if gqa else ''}"
    try:
        r = bench_case(case, where, clock, opts, chip, int(dev.free_memory(where) * 0.5), sync)
        kc = r.kernel_check
        rows.append({"variant": label, "median_s": r.median_s, "tflops": (case.flops / r.median_s / 1e12) if r.median_s else None,
                     "verdict": kc.verdict if kc is not None else None, "path": kc.path if kc is not None else None, "kernel": kc.kernel if kc is not None else None,
                     "kernels": list(kc.kernels[:5]) if kc is not None else [], "message": kc.message if kc is not None else r.error,
                     "candidates": [c.to_json() for c in r.candidates], "error": r.error})
    except Exception as exc:  # one variant failing must not hide the others
        rows.append({"variant": label, "error": f"{type(exc).__name__}: {exc}"})
    print(rows[-1]["variant"], rows[-1].get("verdict"), rows[-1].get("path"), rows[-1].get("kernel"), rows[-1].get("median_s"), rows[-1].get("error"))
json.dump(rows, open(sys.argv[1], "w"), indent=1, default=str)
PYEOF

# 3. the CLI on an HF example architecture (random weights; the step end-to-end in bf16 on the GPU)
step bench_tinyllama 170 "$PY" -m npuport.cli.main bench --hf examples/configs/tinyllama-1.1b.json \
  --scenario prefill:batch=1,seq=2048 --ops 10 --shapes 1 --device cuda --candidates eager,compile,graph,alt --emit "$OUT/repro" \
  --json-out "$OUT/bench_tinyllama.json" -o "$OUT/bench_tinyllama.txt" --force
cat "$OUT/bench_tinyllama.txt" 2>/dev/null | head -60 >&2

# 4. emitted repro scripts run without npuport
step repro 40 bash -c "cd '$OUT/repro' && for f in \$(ls *.py | head -1) \$(ls *scaled_dot* 2>/dev/null | head -1); do env -u PYTHONPATH $PY -I \"\$f\" --device cuda --reps 20 || echo \"FAILED \$f\"; done; f=\$(ls *scaled_dot* 2>/dev/null | head -1); [ -n \"\$f\" ] && env -u PYTHONPATH $PY -I \"\$f\" --device cuda --reps 5 --profile | head -25"

# 5. a 7B architecture if time is left
if (( $(left) > 70 )); then
  step bench_llama7b $(( $(left) - 25 )) "$PY" -m npuport.cli.main bench --hf examples/configs/llama-2-7b.json \
    --scenario prefill:batch=1,seq=2048 --ops 6 --shapes 1 --device cuda --candidates eager,alt \
    --json-out "$OUT/bench_llama7b.json" -o "$OUT/bench_llama7b.txt" --force
fi
step clocks_after 15 nvidia-smi -q -d CLOCK,PERFORMANCE

# summary (last, so it is in the tail of the output)
"$PY" - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as exc:
        return None
print("\n================ npuport bench on GPU: summary ================")
print(open(os.path.join(out, "status.tsv")).read().rstrip())
v = load("validate.json")
if v:
    print(f"\nharness validation ({v['device_name']}, tolerance {v['tolerance']:.0%}):")
    for r in v["rows"]:
        d = r["rel_diff_vs_do_bench"]; e = r["rel_diff_vs_events"]
        fmt = lambda x: f"{x * 1e3:.4f} ms" if x else "-"
        print(f"  {r['case'][:34]:34s} harness {fmt(r['harness_s'])} do_bench {fmt(r['do_bench_s'])} events {fmt(r['events_s'])} "
              f"diff {d if d is None else f'{d:+.2%}'} / {e if e is None else f'{e:+.2%}'}  {r['rate'] or 0:.1f} {r['rate_unit']}  "
              f"{'OK' if r['agrees'] else 'MISMATCH'}  {((r.get('kernel_check') or {}).get('kernel') or '')[:60]}")
s = load("sdpa_paths.json")
if s:
    print("\nSDPA kernel path (q 1x32x2048x64):")
    for r in s:
        t = f"{r['median_s'] * 1e3:.3f} ms" if r.get("median_s") else "-"
        print(f"  {r['variant']:24s} {str(r.get('verdict')):8s} {str(r.get('path')):17s} {t:>10s}  {str(r.get('kernel'))[:70]}  {r.get('error') or ''}")
for name in ("bench_tinyllama.json", "bench_llama7b.json"):
    b = load(name)
    if not b:
        continue
    print(f"\n{name}: {b['model'].get('name')} {b['scenario']} on {b['device']['description']} (chip {b['device']['chip']})")
    for c in b["cases"][:12]:
        comp = next((x for x in c["candidates"] if x["name"] == "compile"), None)
        kc = c.get("kernel_check") or {}
        med = f"{c['median_s'] * 1e6:.1f} us" if c.get("median_s") else "-"
        att = f"{c['attainment']:.0%}" if c.get("attainment") else "-"
        me = f"{c['measured_vs_estimated']:.2f}x" if c.get("measured_vs_estimated") else "-"
        cs = f"{comp['speedup_vs_eager']:.2f}x" if comp and comp.get("speedup_vs_eager") else "-"
        print(f"  {c['op'][6:32]:26s} {c['signature'][:30]:30s} x{c['calls']:<3d} {med:>10s} att {att:>4s} meas/est {me:>6s} compile {cs:>6s} {kc.get('verdict', '-')}:{kc.get('path') or ''} {c.get('error') or ''}")
    e = b.get("end_to_end") or {}
    print("  end-to-end:", e.get("verdict"))
    for w in b.get("warnings", [])[:6]:
        print("  warning:", w[:200])
    ul = (b.get("clock_state") or {}).get("under_load") or {}
    print("  SM clock under load:", ul.get("sm_clock_mhz_under_load"), "warnings:", ul.get("warnings"))
print(f"\nlogs and JSON in {out}")
PYEOF
