#!/usr/bin/env bash
# Issues 6 and 25: the --stats-only capture overhead on a real NVIDIA GPU, in one go (about 8 minutes on an H200 host).
#
#   PYTHONPATH=. OUT=/some/folder bash scripts/gpu_parity_overhead.sh
#
# Steps (each logged to $OUT/<step>.log):
#   tests     the parity tests with CUDA present (Triton statistics against torch, lean recorder on the GPU)
#   bench1/2  scripts/bench_parity.py --overhead-only --repeats 21, twice (the spread between two runs is the noise)
#   msprobe   scripts/bench_capture_msprobe.py (issue 25): one-shot and steady against msprobe's statistics dump, in one
#             process (msprobe levels L0 and L1 where `mindstudio-probe` is importable, npuport only otherwise)
#   profile   scripts/profile_parity_capture.py: device busy time, host time per part, kernel bandwidth, cProfile
set -u
OUT=${OUT:-./gpu_overhead_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
CFG=examples/configs/tinyllama-1.1b.json
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > "$OUT/env.log" 2>&1
$PY -c 'import torch, triton, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "transformers", transformers.__version__)' >> "$OUT/env.log" 2>&1
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/parity > "$OUT/tests.log" 2>&1; echo "tests rc $?"; tail -n 2 "$OUT/tests.log"
for i in 1 2; do
  timeout 200 $PY scripts/bench_parity.py --device cuda --config $CFG --dtype bfloat16 --seq 2048 --repeats 21 --overhead-only \
    --json "$OUT/bench$i.json" > "$OUT/bench$i.log" 2>&1; echo "bench$i rc $?"
done
LEVELS=L0,L1
$PY -c 'import msprobe.pytorch' > /dev/null 2>&1 || LEVELS=
timeout 300 $PY scripts/bench_capture_msprobe.py --config $CFG --repeats 15 --levels "$LEVELS" --json "$OUT/msprobe.json" \
  > "$OUT/msprobe.log" 2>&1; echo "msprobe rc $?"
timeout 200 $PY scripts/profile_parity_capture.py --device cuda --config $CFG --json "$OUT/profile.json" --cprofile "$OUT/cprofile.txt" \
  > "$OUT/profile.log" 2>&1; echo "profile rc $?"
cat "$OUT/env.log"; grep -h "ratio\|target" "$OUT"/bench1.log "$OUT"/bench2.log; grep -A 9 "^variant" "$OUT/msprobe.log"
tail -n 25 "$OUT/profile.log"
