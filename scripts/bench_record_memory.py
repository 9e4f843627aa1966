#!/usr/bin/env python3
"""Peak memory and wall time of an audit whose trace holds many records: a Mamba-1 model (transformers'
MambaConfig defaults: Mamba-130M, 32 layers, hidden 768), whose reference selective scan runs a Python loop over the
tokens, so every token adds about a dozen recorded calls per layer and the copied layers' records are most of the
memory. Each run is a fresh process (`npuport.api.audit_model`, after its imports); peak RSS is the process's
maximum resident set.

Several checkouts side by side (the same script, one process per checkout and run, alternating):
    python scripts/bench_record_memory.py --checkout . --checkout /tmp/old-npuport --scenario train:batch=1,seq=256
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
import transformers.models.mamba.modeling_mamba  # imports outside the timing
from npuport.api import audit_model
t = time.perf_counter()
report, _ = audit_model(hf_config=sys.argv[1], scenarios=sys.argv[2:])
wall = time.perf_counter() - t
calls = sum(len(t.calls) for t in report.traces.values())
print(json.dumps({"s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "calls": calls}))
"""


def mamba_config(folder: Path) -> Path:
    from transformers import MambaConfig

    path = folder / "mamba-130m.json"
    MambaConfig().to_json_file(str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkout", action="append", help="a checkout of npuport to run (repeatable; default: this one)")
    ap.add_argument("--scenario", action="append", help="audit scenarios (default: train:batch=1,seq=256)")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    checkouts = [Path(c).resolve() for c in (a.checkout or [str(ROOT)])]
    scenarios = a.scenario or ["train:batch=1,seq=256"]
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"scenarios {' '.join(scenarios)}; {a.repeats} fresh process(es) per checkout, median shown")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = mamba_config(Path(tmp))
        runs: dict[Path, list[dict]] = {c: [] for c in checkouts}
        for _ in range(a.repeats):
            for c in checkouts:
                env = dict(os.environ, PYTHONPATH=str(c))
                out = subprocess.run([sys.executable, "-c", CHILD, str(cfg), *scenarios], env=env, cwd=tmp,
                                     capture_output=True, text=True, check=True)
                runs[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| checkout | recorded calls | audit wall after imports | peak RSS |")
    print("|---|---:|---:|---:|")
    for c, rs in runs.items():
        print(f"| {c} | {rs[0]['calls']:,} | {statistics.median(r['s'] for r in rs):.1f} s | "
              f"{statistics.median(r['rss_mb'] for r in rs):,.0f} MB |")


if __name__ == "__main__":
    main()
