#!/usr/bin/env python3
"""What keeping mapping files parsed saves (npuport.mappings.parsed): each shipped mapping file parsed from YAML (the C
loader) and validated against its schema, against the same data read back from the cache; then audits of the given
configs, each in a fresh process, first with an empty cache folder (cold: every file parsed, checked and stored) and
then again (warm: read back), with the audit's coverage stage and total wall time after imports.

Usage: python scripts/bench_mappings_cache.py [--repeats 3] [--models deepseek-v3,llama-2-7b]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import importlib, json, sys, time
import torch, transformers
model_type = json.load(open(sys.argv[1]))["model_type"].replace("-", "_")
importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
from npuport.api import audit_model
t = time.perf_counter()
report, data = audit_model(hf_config=sys.argv[1])
print(json.dumps({"audit_s": time.perf_counter() - t, "coverage_s": report.timings["coverage_s"]}))
"""


def files_table(repeats: int) -> dict:
    from npuport import mappings  # noqa: PLC0415 - after the cache folder is chosen
    from npuport.mappings import parsed  # noqa: PLC0415

    names = sorted(str(p.relative_to(mappings._SHIPPED)) for p in
                   [*mappings._SHIPPED.glob("*.yaml"), *mappings._SHIPPED.glob("coverage/*.yaml")])
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            os.environ["NPUPORT_CACHE_DIR"] = d
            for when in (cold, warm):
                mappings._load_cached.cache_clear()
                mappings._VALIDATED.clear()
                t = time.perf_counter()
                for n in names:
                    mappings.load_checked(n)
                when.append(time.perf_counter() - t)
    size = sum((mappings._SHIPPED / n).stat().st_size for n in names)
    assert parsed  # the module under test
    return {"files": len(names), "bytes": size, "cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
            "cold_runs": cold, "warm_runs": warm}


def audits(models: list[str], repeats: int) -> dict:
    out = {}
    for m in models:
        cfg = ROOT / "examples" / "configs" / f"{m}.json"
        cold, warm = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ, PYTHONPATH=str(ROOT), NPUPORT_CACHE_DIR=d)
                for when in (cold, warm):
                    r = subprocess.run([sys.executable, "-c", CHILD, str(cfg)], capture_output=True, text=True, env=env)
                    if r.returncode:
                        sys.exit(f"bench_mappings_cache: the audit of {cfg} failed:\n{r.stderr[-2000:]}")
                    when.append(json.loads(r.stdout.strip().splitlines()[-1]))
        out[m] = {k: {f: statistics.median(x[f] for x in runs) for f in ("audit_s", "coverage_s")}
                  for k, runs in (("cold", cold), ("warm", warm))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="deepseek-v3,llama-2-7b")
    a = ap.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; medians of {a.repeats}")
    ft = files_table(a.repeats)
    print(f"every shipped mapping file ({ft['files']} files, {ft['bytes'] / 1e6:.1f} MB of YAML) loaded and checked: "
          f"cold {ft['cold_s']:.2f} s (parse, validate, store), warm {ft['warm_s']:.3f} s (read back), "
          f"{ft['cold_s'] / ft['warm_s']:.0f}x")
    print("| model | audit cold | audit warm | coverage stage cold | coverage stage warm |")
    print("|---|---:|---:|---:|---:|")
    for m, r in audits([m for m in a.models.split(",") if m], a.repeats).items():
        print(f"| {m} | {r['cold']['audit_s']:.2f} s | {r['warm']['audit_s']:.2f} s | {r['cold']['coverage_s']:.2f} s | "
              f"{r['warm']['coverage_s']:.3f} s |")


if __name__ == "__main__":
    main()
