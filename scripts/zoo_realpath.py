#!/usr/bin/env python3
"""Does the fake-tensor trace take the path a real run takes, for every causal-LM type of the installed transformers?

For each type, the default config cut to 2 layers and shrunk to small widths (npuport.model.hf.zoo.tiny) is built twice,
on fake tensors (as the audit builds it) and on real CPU tensors, and each scenario (train 1 x 16, prefill 1 x 16,
decode after 16 tokens) runs under npuport's recorder on both. The aten ops that compute (views left out: autograd
regenerates them differently on real tensors) must be the same multiset; the only accepted difference is the real
run's host read of a value (aten::_local_scalar_dense), which fake tensors cannot answer.

    python scripts/zoo_realpath.py                 # every type (types whose tiny build fails on real tensors are skipped)
    python scripts/zoo_realpath.py llama gemma3    # some types
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections import Counter
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402

from npuport.model.hf.zoo import causal_lm_types, cut_layers, default_config, for_each_type, tiny  # noqa: E402

SCENARIOS = ["train:batch=1,seq=16", "prefill:batch=1,seq=16", "decode:batch=1,past=16"]
ALLOWED = {"aten::_local_scalar_dense"}


def compare(model_type: str, folder: str) -> dict:
    from npuport.audit.trace_stage import trace_scenario
    from npuport.errors import NpuportError
    from npuport.model.loading import load_hf_config
    from npuport.model.scenarios import parse_scenarios

    row: dict = {"type": model_type}
    try:
        raw = tiny(cut_layers(default_config(model_type), 2))
        path = Path(folder) / f"{model_type}.json"
        path.write_text(json.dumps(raw, default=str))
        real = load_hf_config(path, dtype="bfloat16", fake=False)
    except Exception as exc:  # transformers cannot build it on real tensors: nothing to compare against
        row["status"] = "skip"
        row["reason"] = f"real build: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
        return row
    fake = load_hf_config(path, dtype="bfloat16")
    diffs = {}
    for sc in parse_scenarios(SCENARIOS):
        try:
            torch.manual_seed(0)
            got_real, _ = trace_scenario(real, sc)
        except NpuportError as exc:
            diffs[sc.name] = f"real run fails: {exc.render()[:120]}"
            continue
        try:
            torch.manual_seed(0)
            got_fake, _ = trace_scenario(fake, sc)
        except NpuportError as exc:
            diffs[sc.name] = f"fake trace fails: {exc.render()[:160]}"
            continue
        if (got_real is None) != (got_fake is None):
            diffs[sc.name] = "one side skipped the scenario"
            continue
        if got_real is None:
            continue
        a = Counter(c.op for c in got_fake.calls if c.kind == "compute")
        b = Counter(c.op for c in got_real.calls if c.kind == "compute")
        d = {op: (a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op] and op not in ALLOWED}
        if d:
            diffs[sc.name] = d
    if any(isinstance(v, str) and v.startswith("real run fails") for v in diffs.values()):
        row["status"] = "real-fails"  # the tiny config does not run in transformers itself: nothing to compare
    elif any(isinstance(v, str) for v in diffs.values()):
        row["status"] = "fake-fails"
    else:
        row["status"] = "same" if not diffs else "differs"
    row["diffs"] = {k: (v if isinstance(v, str) else {op: list(n) for op, n in sorted(v.items())}) for k, v in diffs.items()}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="*")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    types = args.types or causal_lm_types()
    import npuport.audit.trace_stage  # noqa: F401  - imported before forking

    rows: list[dict] = []
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, {len(types)} types", flush=True)
    for row in for_each_type(types, compare, args.workers, args.timeout):
        rows.append(row)
        detail = row.get("reason") or json.dumps(row.get("diffs", {}))[:300]
        print(f"{row['type']:<28} {row['status']:<8} {detail if row['status'] != 'same' else ''}", flush=True)
    counts = Counter(r["status"] for r in rows)
    print(f"\n# summary: {dict(counts)}")
    if args.json:
        Path(args.json).write_text(json.dumps(sorted(rows, key=lambda r: r["type"]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
