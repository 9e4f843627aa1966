#!/usr/bin/env python3
"""Is a lent GPU host's two-state speed a matter of which CPU the process runs on? (a diagnostic for docs/profile.md,
run on the lent H200).

The host probe of `npuport profile record` (seconds per eager tiny add on the device) reads about 10.5 or about
16.5 us on these machines and moves between the two within a run. Here: the probe on each CPU the process may use
(pinned with os.sched_setaffinity), several times; then eager decode steps of a model (as `profile record` times them)
pinned to the fastest and the slowest CPU found and unpinned, each with its probes.

Usage there: python3 scripts/diag_host_cpus.py --model tinyllama-1.1b [--rounds 3] [--steps 15] [--scenario S] [--json F]
Anywhere, on what came back: python3 scripts/diag_host_cpus.py --summarize F.json [F.json ...]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.model.loading import load_target  # noqa: E402
from npuport.model.scenarios import parse_scenario  # noqa: E402
from npuport.profile.record import _restore_cache, _step, host_probe  # noqa: E402


def probes_per_cpu(cpus: list[int], rounds: int, py: dict[int, list[float]]) -> dict[int, list[float]]:
    """The device probe on each CPU (pinned), `rounds` times; the pure-Python probe per CPU goes into `py`."""
    out: dict[int, list[float]] = {c: [] for c in cpus}
    for _ in range(rounds):
        for c in cpus:
            os.sched_setaffinity(0, {c})
            time.sleep(0.01)
            out[c].append(host_probe("cuda", calls=300, repeats=3))
            py.setdefault(c, []).append(python_probe())
    return out


def python_probe(calls: int = 3000) -> float:
    """Seconds per pure-Python call: the interpreter's speed alone, with no torch and no device."""
    def f(a: int) -> int:
        return a + 1
    t0 = time.perf_counter()
    for i in range(calls):
        f(i)
    return (time.perf_counter() - t0) / calls


def cpu_torch_probe(calls: int = 300) -> float:
    """Seconds per eager torch.add of 8 elements on the CPU: torch's dispatch with no device launch."""
    x = torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(calls):
        torch.add(x, x)
    return (time.perf_counter() - t0) / calls


def decode_steps(model, sc, inputs, steps: int) -> dict:  # noqa: ANN001 - a diagnostic
    """Per step: the device probe before and after it, the pure-Python and CPU-torch probes, the wall time and
    the host issue time (until the call returned), so which host component moves with the step can be read."""
    rows = []
    for _ in range(steps):
        py = python_probe()
        cpu = cpu_torch_probe()
        before = host_probe("cuda", calls=300, repeats=1)
        torch.cuda.synchronize()
        gc.disable()
        t0 = time.perf_counter()
        _step(model, sc, inputs)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        gc.enable()
        after = host_probe("cuda", calls=300, repeats=1)
        rows.append({"wall_ms": round((t2 - t0) * 1e3, 2), "issue_ms": round((t1 - t0) * 1e3, 2),
                     "probe_before_us": round(before * 1e6, 2), "probe_after_us": round(after * 1e6, 2),
                     "python_ns": round(py * 1e9, 1), "cpu_torch_us": round(cpu * 1e6, 2)})
        _restore_cache(inputs, sc.past)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return {"median": med, "steps": rows}


def summarize(paths: list[str]) -> None:
    """For JSON written with --json: per model, how well each probe follows the steps' host issue time. A probe
    that tracks the host speed keeps issue time / probe constant: the share of steps within 15% of that ratio's
    median, its 90th-percentile deviation, and the correlation; and how many steps' two device probes (before and
    after) fell on different sides of the two host states' midpoint."""
    print("| model | probe | issue / probe (median) | steps within 15% of it | 90th pct. deviation | correlation |")
    print("|---|---|---:|---:|---:|---:|")
    for path in paths:
        d = json.loads(Path(path).read_text())
        rows = [r for k in ("unpinned", "fast", "slow", "unpinned_again", "fast_again") for r in d[k]["steps"]]
        y = [r["issue_ms"] for r in rows]
        probes = {"device, before": [r["probe_before_us"] for r in rows],
                  "device, after": [r["probe_after_us"] for r in rows],
                  "device, mean of both": [(r["probe_before_us"] + r["probe_after_us"]) / 2 for r in rows],
                  "pure Python": [r["python_ns"] for r in rows], "CPU torch": [r["cpu_torch_us"] for r in rows]}
        for name, x in probes.items():
            ratios = [b / a for a, b in zip(x, y)]
            med = statistics.median(ratios)
            dev = sorted(abs(r / med - 1) for r in ratios)
            within = sum(e <= 0.15 for e in dev)
            print(f"| {d['model']} | {name} | {med:.3g} | {within} of {len(dev)} | {dev[int(0.9 * len(dev))]:.0%} | "
                  f"{statistics.correlation(x, y):.2f} |")
        before, after = probes["device, before"], probes["device, after"]
        mid = (min(before) + max(before)) / 2
        switched = sum((b > mid) != (a > mid) for b, a in zip(before, after))
        print(f"| {d['model']} | steps whose probes before and after differ in state | | {switched} of {len(rows)} | | |")
        per_cpu = d["per_cpu"]["probe_us_per_cpu"]
        allp = [x for v in per_cpu.values() for x in v]
        mid = (min(allp) + max(allp)) / 2
        both = sum(min(v) < mid < max(v) for v in per_cpu.values())
        print(f"| {d['model']} | CPUs whose pinned probes fell in both states ({len(next(iter(per_cpu.values())))} rounds) "
              f"| | {both} of {len(per_cpu)} | | |")
        for label in ("unpinned", "fast", "slow", "unpinned_again", "fast_again"):
            m = d[label]["median"]
            print(f"| {d['model']} | {d.get('scenario', 'decode')} pinned: {label} (CPU {d.get(label.split('_')[0] + '_cpu', 'any')}) | "
                  f"{m['issue_ms']:.1f} ms, probe {m['probe_before_us']:.1f} µs | | | |")


def main() -> None:
    if sys.argv[1:2] == ["--summarize"]:
        summarize(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tinyllama-1.1b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--scenario", default="decode:batch=1,past=2048")
    ap.add_argument("--json", default="", help="write every step's row here")
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    torch.ones(1, device="cuda")
    py: dict[int, list[float]] = {}
    per_cpu = probes_per_cpu(allowed, args.rounds, py)
    med = {c: statistics.median(v) for c, v in per_cpu.items()}
    cpu_table = {"cpus": len(allowed), "probe_us_per_cpu": {c: [round(x * 1e6, 1) for x in v] for c, v in per_cpu.items()},
            "python_ns_per_cpu": {c: [round(x * 1e9, 1) for x in v] for c, v in py.items()}}
    print(json.dumps(cpu_table), flush=True)
    fast, slow = min(med, key=med.get), max(med, key=med.get)  # type: ignore[arg-type]
    sc = parse_scenario(args.scenario)
    model = load_target(None, str(ROOT / "examples" / "configs" / f"{args.model}.json"), None, "bfloat16", "auto",
                        fake=False, part=None, device="cuda")
    model.module.train(False)
    inputs = model.make_inputs(sc)
    for _ in range(3):
        _step(model, sc, inputs)
        _restore_cache(inputs, sc.past)
    res = {"model": args.model, "scenario": sc.name, "fast_cpu": fast, "slow_cpu": slow}
    for label, cpus in (("unpinned", set(allowed)), ("fast", {fast}), ("slow", {slow}), ("unpinned_again", set(allowed)),
                        ("fast_again", {fast})):
        os.sched_setaffinity(0, cpus)
        res[label] = decode_steps(model, sc, inputs, args.steps)
    os.sched_setaffinity(0, set(allowed))
    res["per_cpu"] = cpu_table
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: (v["median"] if isinstance(v, dict) and "median" in v else v) for k, v in res.items()
                      if k != "per_cpu"}), flush=True)


if __name__ == "__main__":
    main()
