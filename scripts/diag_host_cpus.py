#!/usr/bin/env python3
"""Is a lent GPU host's two-state speed a matter of which CPU the process runs on? (a diagnostic for docs/profile.md,
run on the lent H200).

The host probe of `npuport profile record` (seconds per eager tiny add on the device) reads about 10.5 or about
16.5 us on these machines and moves between the two within a run. Here: the probe on each CPU the process may use
(pinned with os.sched_setaffinity), several times; then eager decode steps of a model (as `profile record` times them)
pinned to the fastest and the slowest CPU found and unpinned, each with its probes.

Usage there: python3 scripts/diag_host_cpus.py --model tinyllama-1.1b [--rounds 3] [--steps 15]
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


def probes_per_cpu(cpus: list[int], rounds: int) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {c: [] for c in cpus}
    for _ in range(rounds):
        for c in cpus:
            os.sched_setaffinity(0, {c})
            time.sleep(0.01)
            out[c].append(host_probe("cuda", calls=300, repeats=3))
    return out


def decode_steps(model, sc, inputs, steps: int) -> dict:  # noqa: ANN001 - a diagnostic
    walls, probes = [], []
    for _ in range(steps):
        probes.append(host_probe("cuda", calls=300, repeats=1))
        torch.cuda.synchronize()
        gc.disable()
        t0 = time.perf_counter()
        _step(model, sc, inputs)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
        gc.enable()
        _restore_cache(inputs, sc.past)
    return {"step_ms": round(statistics.median(walls) * 1e3, 2), "steps_ms": [round(w * 1e3, 1) for w in walls],
            "probe_us": round(statistics.median(probes) * 1e6, 2), "probes_us": [round(p * 1e6, 1) for p in probes]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tinyllama-1.1b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    torch.ones(1, device="cuda")
    per_cpu = probes_per_cpu(allowed, args.rounds)
    med = {c: statistics.median(v) for c, v in per_cpu.items()}
    print(json.dumps({"cpus": len(allowed), "probe_us_per_cpu": {c: [round(x * 1e6, 1) for x in v] for c, v in per_cpu.items()}}),
          flush=True)
    fast, slow = min(med, key=med.get), max(med, key=med.get)  # type: ignore[arg-type]
    sc = parse_scenario("decode:batch=1,past=2048")
    model = load_target(None, str(ROOT / "examples" / "configs" / f"{args.model}.json"), None, "bfloat16", "auto",
                        fake=False, part=None, device="cuda")
    model.module.train(False)
    inputs = model.make_inputs(sc)
    for _ in range(3):
        _step(model, sc, inputs)
        _restore_cache(inputs, sc.past)
    res = {"model": args.model, "fast_cpu": fast, "slow_cpu": slow}
    for label, cpus in (("unpinned", set(allowed)), ("fast", {fast}), ("slow", {slow}), ("unpinned_again", set(allowed)),
                        ("fast_again", {fast})):
        os.sched_setaffinity(0, cpus)
        res[label] = decode_steps(model, sc, inputs, args.steps)
    os.sched_setaffinity(0, set(allowed))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
