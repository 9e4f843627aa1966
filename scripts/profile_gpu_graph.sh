#!/usr/bin/env bash
# Graph mode on the lent H200: prefill and decode of TinyLlama-1.1B and Llama-2-7B captured once as a CUDA graph and
# replayed (npuport profile record, scenario mode=graph), for the check of the graph-mode estimate (docs/profile.md).
# Usage there: bash scripts/profile_gpu_graph.sh   (writes $OUT/graph.tgz)
set -u
python3 -m pip install -q --no-deps --no-compile --target /tmp/tf .gpuwheels/*.whl 2>/dev/null; export PYTHONPATH=/tmp/tf:$PWD PYTHONUNBUFFERED=1
W=$(mktemp -d)
for m in tinyllama-1.1b llama-2-7b; do
python3 -m npuport.cli.main profile record --hf examples/configs/$m.json --dtype bfloat16 --dev cuda --scenario prefill:batch=1,seq=2048,mode=graph --scenario decode:batch=1,past=2048,mode=graph --warmup 2 --steps 5 --out-dir "$W/graph/$m" 2>&1 | tail -5
done
tar -C "$W" -czf "$OUT/graph.tgz" --exclude='*.trace.json.gz' graph; ls -la $OUT
