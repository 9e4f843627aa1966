#!/usr/bin/env python3
"""Where an eager decode step's host time goes on a GPU (a diagnostic for docs/profile.md, run on the lent H200).

Per model: timed decode steps (as `npuport profile record` times them: cache restored to `past` tokens between steps,
outside the timing) with the default SDPA backends and with cuDNN attention disabled; per variant the median host
issue time and wall time, the caching allocator's device allocations / frees during the timed steps, and one
profiled step's CUDA runtime calls summed by name (cudaMalloc, cudaFree, synchronizations, launches).

Usage there: python3 scripts/diag_decode_host.py --model llama-2-7b --model tinyllama-1.1b
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.model.loading import load_target  # noqa: E402
from npuport.model.scenarios import parse_scenario  # noqa: E402
from npuport.profile.record import _restore_cache, _step  # noqa: E402


def timed(model, sc, inputs, steps: int) -> dict:
    walls, hosts = [], []
    before = torch.cuda.memory_stats()
    for _ in range(steps):
        torch.cuda.synchronize()
        gc.disable()
        t0 = time.perf_counter()
        _step(model, sc, inputs)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
        hosts.append(t1 - t0)
        gc.enable()
        _restore_cache(inputs, sc.past)
    after = torch.cuda.memory_stats()
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")}
    return {"wall_ms": round(statistics.median(walls) * 1e3, 2), "host_ms": round(statistics.median(hosts) * 1e3, 2),
            "host_all_ms": [round(h * 1e3, 1) for h in hosts], **d}


def runtime_calls(model, sc, inputs) -> dict:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _step(model, sc, inputs)
        torch.cuda.synchronize()
    _restore_cache(inputs, sc.past)
    tot: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.name.startswith("cuda") or e.name.startswith("cudnn") or "Sync" in e.name:
            tot[e.name][0] += 1
            tot[e.name][1] += e.cpu_time_total / 1e3
    return {k: [v[0], round(v[1], 2)] for k, v in sorted(tot.items(), key=lambda kv: -kv[1][1])[:8]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--before", default="", help="scenarios run (3 steps each) before decode, as record runs them")
    ap.add_argument("--empty-cache", action="store_true", help="empty the caching allocator after --before")
    args = ap.parse_args()
    sc = parse_scenario("decode:batch=1,past=2048")
    for name in args.model:
        model = load_target(None, str(ROOT / "examples" / "configs" / f"{name}.json"), None, "bfloat16", "auto",
                            fake=False, part=None, device="cuda")
        model.module.train(False)
        for spec in filter(None, args.before.split(",")):
            other = parse_scenario(spec)
            ins = model.make_inputs(other)
            model.module.train(other.kind == "train")
            for _ in range(3):
                _step(model, other, ins)
            torch.cuda.synchronize()
            model.module.train(False)
            del ins
        if args.empty_cache:
            gc.collect()
            torch.cuda.empty_cache()
        inputs = model.make_inputs(sc)
        for _ in range(3):
            _step(model, sc, inputs)
            _restore_cache(inputs, sc.past)
        res = {"model": name, "before": args.before, "empty_cache": args.empty_cache, "default": timed(model, sc, inputs, args.steps)}
        res["runtime_calls_ms"] = runtime_calls(model, sc, inputs)
        torch.backends.cuda.enable_cudnn_sdp(False)
        for _ in range(3):
            _step(model, sc, inputs)
            _restore_cache(inputs, sc.past)
        res["no_cudnn_sdp"] = timed(model, sc, inputs, args.steps)
        res["no_cudnn_runtime_calls_ms"] = runtime_calls(model, sc, inputs)
        torch.backends.cuda.enable_cudnn_sdp(True)
        print(json.dumps(res), flush=True)
        del model, inputs
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
