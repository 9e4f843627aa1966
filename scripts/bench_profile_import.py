#!/usr/bin/env python3
"""Import time and peak memory of `npuport profile import` on a large trace (docs/profile.md "Import").

The trace is the real H200 training step of the GPT example (tests/fixtures/profiles/gpt_train_h200.trace.json.gz)
repeated with shifted timestamps, ids and correlation ids until the JSON text reaches --mb megabytes (written
uncompressed, as torch.profiler writes it). The import runs in a child process so its peak RSS is its own.

Usage: python scripts/bench_profile_import.py --mb 1024 [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "fixtures" / "profiles" / "gpt_train_h200.trace.json.gz"
CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from npuport.profile.artifact import import_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # torch and npuport imported, nothing read yet
t0 = time.perf_counter()
art = import_trace(sys.argv[1])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_before_reading_mb": base,
                  "ops": art["totals"]["ops"], "calls": art["totals"]["calls"], "kernels": art["totals"]["kernels"],
                  "steps": len(art["steps"])}))
"""


def _shift(e: dict, k: int, span: float, ids: int) -> dict:
    e = dict(e)
    if "ts" in e:
        e["ts"] = float(e["ts"]) + k * span
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("External id", "correlation", "Sequence number"):
            if isinstance(args.get(key), int):
                args[key] = args[key] + k * ids
        e["args"] = args
    if isinstance(e.get("id"), int):
        e["id"] = e["id"] + k * ids
    if str(e.get("name", "")).startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{k + 1}"
    return e


def write_trace(path: Path, mb: int) -> int:
    events = json.load(gzip.open(SRC, "rt"))["traceEvents"]
    ts = [float(e["ts"]) for e in events if "ts" in e]
    span = max(ts) - min(ts) + 1000.0
    ids = 10 ** 7
    target, k = mb * 1_000_000, 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write('{"schemaVersion": 1, "traceEvents": [\n')
        first = True
        while fh.tell() < target:
            for e in events:
                fh.write(("" if first else ",\n") + json.dumps(_shift(e, k, span, ids)))
                first = False
            k += 1
        fh.write("\n]}\n")
    return k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / f"big-{args.mb}mb.trace.json"
        t0 = time.perf_counter()
        copies = write_trace(path, args.mb)
        size = path.stat().st_size
        print(f"wrote {path.name}: {size / 1e6:.0f} MB, {copies} copies of the H200 GPT train step "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(ROOT)], capture_output=True, text=True,
                             check=True)
        res = json.loads(out.stdout)
        print(json.dumps({"trace_mb": round(size / 1e6), **res,
                          "parent_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
