#!/usr/bin/env bash
# The torch.compile candidate of `npuport bench` on a real NVIDIA GPU (issue 25, item 4), in one call of ~3 minutes:
#   1. `npuport bench --hf tinyllama-1.1b` prefill 1 x 2048, 10 ops, eager + compile: every op's compile column
#      timed (no `compile n/a`), `recompiles` 0, and no dynamo / inductor line on stderr
#   2. the same with BenchOptions(debug=True), 3 ops: one "torchdynamo start tracing" line per case, compile id [0/0]
#   3. the behaviour before the fix, for contrast: no reset per case (every case a recompile of one code object)
#      and the compiler's output not scoped: how many ops end `compile n/a` and how many lines reach stderr
# Usage (repo root):  PYTHONPATH=. OUT=/some/dir bash scripts/gpu_bench_compile.sh
set -u
OUT="${OUT:-$(pwd)/gpu_bench_compile_out}"
mkdir -p "$OUT"
export PYTHONPATH="${PYTHONPATH:-.}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
CFG=examples/configs/tinyllama-1.1b.json
COMMON=(--hf "$CFG" --scenario prefill:batch=1,seq=2048 --shapes 1 --device cuda --candidates eager,compile
        --no-e2e --no-kernel-check --reps 30 --warmup 5 --budget 0.2)

"$PY" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name(0))' > "$OUT/env.log" 2>&1

# 1. the CLI as a user runs it
t0=$(date +%s)
"$PY" -m npuport.cli.main bench "${COMMON[@]}" --ops 10 --wide -o "$OUT/after.txt" --json-out "$OUT/after.json" --force \
  2> "$OUT/after.err"
echo "after: rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/status.log"

# 2. --debug (BenchOptions.debug) through the Python API
t0=$(date +%s)
"$PY" - > "$OUT/debug.out" 2> "$OUT/debug.err" <<'PYEOF'
from npuport.bench.harness import BenchOptions
from npuport.bench.runner import run_bench
opts = BenchOptions(warmup=5, reps=30, budget_s=0.2, compile=True, alternatives=False, kernel_check=False, debug=True)
rep = run_bench(hf_config="examples/configs/tinyllama-1.1b.json", scenario="prefill:batch=1,seq=2048", top=3, shapes=1,
                device="cuda", options=opts, e2e=False)
for r in rep.results:
    c = next(c for c in r.candidates if c.name == "compile")
    print(r.case.label, "compile", c.ratio_to_eager, c.recompiles, c.note, c.skipped)
PYEOF
echo "debug: rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/status.log"

# 3. before the fix: no reset per case, compiler output unscoped
t0=$(date +%s)
"$PY" - "${COMMON[@]}" --ops 10 --wide -o "$OUT/before.txt" --json-out "$OUT/before.json" --force > /dev/null 2> "$OUT/before.err" <<'PYEOF'
import contextlib, sys
import torch
torch._dynamo.reset = lambda: None
import npuport.bench.runner as runner
runner.compiler_output = lambda debug=False: contextlib.nullcontext()
from npuport.cli.main import cli
cli(["bench", *sys.argv[1:]])
PYEOF
echo "before: rc=$? $(( $(date +%s) - t0 ))s" >> "$OUT/status.log"

"$PY" - "$OUT" > "$OUT/summary.txt" 2>&1 <<'PYEOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
line = re.compile(r"torch[/.]_(dynamo|inductor|functorch)|torchdynamo|recompil", re.I)
for name in ("after", "before"):
    p = out / f"{name}.json"
    if not p.is_file():
        print(name, "no JSON"); continue
    cases = json.loads(p.read_text())["cases"]
    comp = [next(c for c in k["candidates"] if c["name"] == "compile") for k in cases]
    timed = sum(1 for c in comp if c["speedup_vs_eager"])
    err = (out / f"{name}.err").read_text().splitlines()
    print(f"{name}: {timed}/{len(comp)} ops with a compile time; recompiles {[c.get('recompiles') for c in comp]}; "
          f"stderr {len(err)} lines, {sum(1 for ln in err if line.search(ln))} from the compiler")
    for k, c in zip(cases, comp):
        print(f"  {k['op']} [{k['signature']}]: {c['speedup_vs_eager'] and round(c['speedup_vs_eager'], 2)} {c['note']} {c['skipped'] or ''}")
err = (out / "debug.err").read_text().splitlines()
starts = [ln for ln in err if "torchdynamo start tracing" in ln]
ids = sorted({m for ln in starts for m in re.findall(r"\[\d+/\d+\]", ln)})
print(f"debug: stderr {len(err)} lines, {len(starts)} 'start tracing' lines, compile ids {ids}")
PYEOF
cat "$OUT/status.log" "$OUT/summary.txt"
