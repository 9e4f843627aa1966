#!/usr/bin/env python3
"""Audit speed and memory (imports, counted apart: torch, transformers, the model's modeling module, npuport):
Llama-2-7B, Llama-2-70B and DeepSeek-V3 (671B, MLA + 256-expert MoE) with the default scenarios (train 8x4096,
prefill 1x4096, decode 1 token after a 4095-token cache the model builds itself), each audited in a fresh process,
several times; prints medians.

In the same process, before the audit, the **bare** run: the same model built on fake tensors, the same inputs made
(the decode cache by the model's own prefill), each scenario's forward (and backward for train) under FakeTensorMode
alone, no recorder: what any tool tracing on fake tensors pays. With --no-reuse-too the audit runs again with every
layer recorded op by op (`npuport audit --no-reuse`), after the default one.

Targets: issue 25: 7B <= 3 s after imports and <= 1.3x the bare run; 70B <= 1.3x the 7B time; DeepSeek-V3 <= 20 s.
Earlier: 7B <= 10 s and <= 1.5 GB peak RSS on a 2-core CPU (issue 2); DeepSeek-V3 <= 60 s, <= 1.5 GB (issue 17).
Usage: python scripts/bench_audit.py [--repeats 3] [--markdown] [--models llama-2-7b,deepseek-v3] [--zoo mamba]
       [--no-bare] [--no-reuse-too]
(--zoo TYPE: the installed transformers' default config of TYPE cut to 2 layers, as scripts/zoo_sweep.py audits it)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import contextlib, json, resource, sys, time
t0 = time.perf_counter()
import importlib, torch, transformers
model_type = json.load(open(sys.argv[1]))["model_type"].replace("-", "_")
importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")  # transformers imports it lazily
from npuport.api import audit_model
from npuport.audit.json_form import audit_to_json
from npuport.model.hf.inputs import real_path
from npuport.model.loading import load_target, loss_of
from npuport.model.scenarios import parse_scenarios
imports = time.perf_counter() - t0
bare = build = None
if sys.argv[2] == "1":
    # the bare run: build, make the inputs, forward (+ backward) each default scenario under FakeTensorMode alone
    t = time.perf_counter()
    m = load_target(hf_config=sys.argv[1])
    build = time.perf_counter() - t  # transformers building the model on fake tensors: what no reuse can skip
    for sc in parse_scenarios(None):
        args, kwargs = inputs = m.make_inputs(sc)
        m.module.train(sc.kind == "train")
        with m.mode, real_path(), (contextlib.nullcontext() if sc.kind == "train" else torch.no_grad()):
            out = m.module(*args, **kwargs)
            if sc.kind == "train":
                loss_of(m, out, inputs).backward()
        del out
        for p in m.module.parameters():
            p.grad = None
    del m
    bare = time.perf_counter() - t
t1 = time.perf_counter()
report, data = audit_model(hf_config=sys.argv[1])
text = json.dumps(data)
wall = time.perf_counter() - t1
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
full = None
if sys.argv[3] == "1":
    t = time.perf_counter()
    json.dumps(audit_model(hf_config=sys.argv[1], reuse=False)[1])
    full = time.perf_counter() - t
print(json.dumps({"imports_s": imports, "audit_s": wall, "bare_s": bare, "build_s": build, "no_reuse_s": full, "peak_rss_bytes": rss,
                  "timings": report.timings, "ops": len(data["ops"]),
                  "calls": sum(s["calls"] for s in data["scenarios"])}))
"""


def run_once(config: Path, bare: bool, no_reuse: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, str(config), str(int(bare)), str(int(no_reuse))],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench_audit: the audit of {config} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--models", default="llama-2-7b,llama-2-70b,deepseek-v3", help="configs of examples/configs, comma-separated ('' for none)")
    ap.add_argument("--zoo", default="", help="model types of the installed transformers, default config cut to 2 layers, comma-separated")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare FakeTensorMode run")
    ap.add_argument("--no-reuse-too", action="store_true", help="also time the audit with every layer recorded")
    args = ap.parse_args()
    rows = {}
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    configs = {name: ROOT / "examples" / "configs" / f"{name}.json" for name in args.models.split(",") if name}
    for mt in (t for t in args.zoo.split(",") if t):
        sys.path.insert(0, str(ROOT))
        from npuport.model.hf.zoo import cut_layers, default_config

        path = tmp / f"{mt}-2-layers.json"
        path.write_text(json.dumps(cut_layers(default_config(mt), 2), default=str))
        configs[f"{mt} (2 layers)"] = path
    for name, config in configs.items():
        runs = [run_once(config, not args.no_bare, args.no_reuse_too) for _ in range(args.repeats)]
        rows[name] = {
            "audit_s": statistics.median(r["audit_s"] for r in runs),
            "audit_s_all": [round(r["audit_s"], 2) for r in runs],
            "bare_s": _median(runs, "bare_s"),
            "build_s": _median(runs, "build_s"),
            # per process: the audit against the bare run of the same process
            "ratio_bare": statistics.median(r["audit_s"] / r["bare_s"] for r in runs) if _median(runs, "bare_s") else None,
            "no_reuse_s": _median(runs, "no_reuse_s"),
            "stages": {k: statistics.median(r["timings"][k] for r in runs) for k in runs[0]["timings"]},
            "imports_s": statistics.median(r["imports_s"] for r in runs),
            "peak_rss_mb": statistics.median(r["peak_rss_bytes"] for r in runs) / 2**20,
            "calls": runs[0]["calls"],
        }
    ratio = rows["llama-2-70b"]["audit_s"] / rows["llama-2-7b"]["audit_s"] if {"llama-2-7b", "llama-2-70b"} <= set(rows) else float("nan")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    if args.markdown:
        print(f"Machine: {machine}; {args.repeats} fresh processes per model, median shown.\n")
        def s_(v: float | None) -> str:
            return f"{v:.2f} s" if v is not None else "-"

        print("| model | audit wall after imports (median) | runs | bare fake-tensor run | of it, the model's build | "
              "audit / bare | audit --no-reuse | imports | peak RSS | recorded calls |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in rows.items():
            rb = f"{r['ratio_bare']:.2f}x" if r["ratio_bare"] else "-"
            print(f"| {name} | {r['audit_s']:.2f} s | {r['audit_s_all']} | {s_(r['bare_s'])} | {s_(r['build_s'])} | {rb} | "
                  f"{s_(r['no_reuse_s'])} | {r['imports_s']:.2f} s | {r['peak_rss_mb']:.0f} MB | {r['calls']:,} |")
        print(f"\n70B / 7B time ratio: {ratio:.2f}x (target <= 1.3x); 7B target <= 3 s after imports and <= 1.3x "
              "the bare run; DeepSeek-V3 target <= 20 s.")
        stages = sorted({k for r in rows.values() for k in r["stages"]}, key=lambda k: list(next(iter(rows.values()))["stages"]).index(k) if k in next(iter(rows.values()))["stages"] else 99)
        print("\nStages of the audit (report.timings, median):\n")
        print("| model | " + " | ".join(k.removesuffix("_s") for k in stages) + " |")
        print("|---|" + "---:|" * len(stages))
        for name, r in rows.items():
            print(f"| {name} | " + " | ".join(f"{r['stages'].get(k, 0.0):.2f} s" for k in stages) + " |")
    else:
        print(json.dumps({"machine": machine, "rows": rows, "ratio_70b_7b": ratio}, indent=1))


if __name__ == "__main__":
    main()
