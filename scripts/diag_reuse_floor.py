#!/usr/bin/env python3
"""What recording the copied layers' calls costs in the trace stage (issue 25, the 70B / 7B target): the audit's
trace stage timed as it is, and again with each copied call replaced by its template's own record (no per-call copy:
the inventory that follows is wrong, only the trace times mean anything). If the 70B - 7B difference in trace time
stays most of what it was, what remains per copied layer is not the records but running the copies (the stand-in
forward, the replayed autograd node, the hooks and the model's own per-layer Python), which only not calling the
copied layers at all would remove.

Usage: python scripts/diag_reuse_floor.py [--repeats 3] [--models llama-2-7b,llama-2-70b]
Each (model, way) in a fresh process after one warm-up audit; medians of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, importlib, statistics
import torch, transformers
cfg, way, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
mt = json.load(open(cfg))["model_type"]
importlib.import_module(f"transformers.models.{mt}.modeling_{mt}")
import npuport.trace.reuse as reuse
from npuport.api import audit_model
if way == "no-copies":
    reuse.LayerReuse._copy_call = lambda self, call, ids, frames, old, new, index: call
audit_model(hf_config=cfg)
runs = [audit_model(hf_config=cfg)[0].timings for _ in range(repeats)]
keys = ("trace_train_s", "trace_prefill_s", "trace_decode_s")
print(json.dumps({k: statistics.median(r[k] for r in runs) for k in keys}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="llama-2-7b,llama-2-70b")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("| model | way | trace train | prefill | decode | sum |")
    print("|---|---|---:|---:|---:|---:|")
    for name in a.models.split(","):
        cfg = ROOT / "examples" / "configs" / f"{name}.json"
        for way in ("as it is", "no-copies"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(cfg), way, str(a.repeats)], env=env,
                                 capture_output=True, text=True, check=True)
            t = json.loads(out.stdout.strip().splitlines()[-1])
            cells = [t["trace_train_s"], t["trace_prefill_s"], t["trace_decode_s"]]
            print(f"| {name} | {way} | " + " | ".join(f"{v:.3f} s" for v in cells) + f" | {sum(cells):.3f} s |")


if __name__ == "__main__":
    main()
