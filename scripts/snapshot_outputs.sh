#!/usr/bin/env bash
# Write every user-facing output of npuport for a fixed set of inputs into DIR, so a restructuring can be checked
# to change nothing: run it before and after, then `diff -r BEFORE AFTER` (volatile fields are masked).
# Usage: bash scripts/snapshot_outputs.sh DIR      (CPU only; about two minutes on a 2-core machine)
set -uo pipefail
out=${1:?usage: snapshot_outputs.sh DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$root"
run() {  # run NAME CMD...: stdout to NAME.out, stderr to NAME.err, exit code to NAME.rc
  local name=$1; shift
  "$@" >"$out/$name.out" 2>"$out/$name.err"; echo $? >"$out/$name.rc"
}
tmp=$(mktemp -d)
gpt=examples/gpt/model.py
for f in json markdown csv html; do
  run "audit_gpt_$f" npuport audit $gpt -o "$tmp/gpt.$f" --quiet
  cp "$tmp/gpt.$f" "$out/audit_gpt.$f" 2>/dev/null
done
run audit_gpt_text npuport audit $gpt --top 0
run audit_gpt_static npuport audit $gpt --static-only
run audit_scan_static npuport audit tests/fixtures/source_scan/model.py --static-only
run audit_llama_text npuport audit --hf examples/configs/llama-2-7b.json --chip H100-SXM
run audit_llama_json npuport audit --hf examples/configs/llama-2-7b.json --format json --torch-npu 2.3.1
run audit_mixtral_json npuport audit --hf examples/configs/mixtral-8x7b.json --format json --scenario decode:batch=4,past=512
run audit_uses_isin npuport audit tests/fixtures/models/uses_isin.py --format json --suppress 'NPS0*'
run audit_bad_chip npuport audit $gpt --chip NoSuchChip
run audit_syntax npuport audit tests/fixtures/models/syntax_error.py
for d in nanogpt_like/train.py llmc_like/train_gpt2.py kernels_program/train.py held/train.py; do
  run "migrate_${d%%/*}" npuport migrate "tests/fixtures/migrate/$d" --root tests/fixtures/migrate
done
run coverage_show npuport coverage show aten::mm
run coverage_show_isin npuport coverage show aten::isin.Tensor_Tensor
run coverage_diff npuport coverage diff 2.1.0.post10 2.14.0 --format json
run coverage_list npuport coverage list --status cpu-fallback
run kernels_list npuport kernels list
run kernels_list_json npuport kernels list --json
run kernels_perf npuport kernels perf
run kernels_test npuport kernels test
run parity_fault npuport parity run --ref cpu --dev 'cpu-fault:aten::mm@transformer.h.1.mlp*1.01' $gpt --quiet --format json
run parity_same npuport parity run --ref cpu --dev cpu $gpt --quiet
run bench_from_bad npuport bench --from "$tmp/nope.json"
rm -rf "$tmp"
# Mask what changes from run to run: elapsed times, dates, temp paths, measured host numbers.
sed -i -E -e 's/[0-9]+(\.[0-9]+)? ?s elapsed/<t> elapsed/g' -e 's#/tmp/tmp[A-Za-z0-9._]+#<tmp>#g' \
  -e 's/"(elapsed_s|seconds|wall_s|created|timestamp|date|time_s|host_s)": [^,}]+/"\1": <v>/g' "$out"/* 2>/dev/null
echo "wrote $(ls "$out" | wc -l) files to $out"
