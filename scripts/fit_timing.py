#!/usr/bin/env python3
"""Fit the per-class device-time parameters of mappings/timing.yaml to a calibration file written by
scripts/calibrate_timing.py: for each op class, the compute efficiency ec, memory efficiency em and fixed cost t0 of

    time = max(FLOPs / (peak x ec), bytes / (bandwidth x em)) + t0

(fit to each microbenchmark's CUPTI kernel time where the calibration recorded it, else its replay time) that
minimise the mean absolute log error over the class's microbenchmarks (a grid search: the fit is small and
must be reproducible, not clever). Prints the YAML block and each class's fit error.

Usage: python scripts/fit_timing.py docs/measured/h200-calibration.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.cost.roofline import get_chip  # noqa: E402
from npuport.cost.timing import SMALL_SORT_MAX  # noqa: E402

EC = [x / 100 for x in range(20, 101, 2)]
EM = ([x / 10000 for x in range(2, 20, 2)] + [x / 1000 for x in range(2, 60, 2)]
      + [x / 100 for x in range(6, 101, 2)])  # slow classes (sort) sit far below 6%
# a radix sort's several kernels cost tens of microseconds however few the keys
T0 = [x * 0.1e-6 for x in range(0, 121, 2)] + [x * 1e-6 for x in range(13, 101)]


def _fit_class(r: dict[str, Any]) -> str:
    """The timing.yaml class a calibration row is fit into: the class variants it knows (a widening cast, a
    multiply with a broadcast operand, top-k, a radix sort, the backward and accumulating kernels)."""
    name = r["name"]
    return ("cast_widen" if name.startswith("cast bf16->fp32") else "cast" if name.startswith("cast ")
            else "broadcast" if (" by a " in name and "fp32" in name) else "broadcast_half" if " by a " in name
            else "topk" if name.startswith("topk")
            # longer than the in-place sort takes: a radix sort (npuport.cost.timing.SMALL_SORT_MAX)
            else "sort_radix" if name.startswith("sort ") and int(name.split()[1]) > SMALL_SORT_MAX
            else "attention_backward" if name.startswith("sdpa causal backward")
            else "grouped_matmul_wgrad" if name.startswith("grouped_mm weight gradient")
            else "scatter_accumulate_unique" if name.startswith("index_put accumulate") and "permutation" in name
            else "scatter_accumulate" if name.startswith("index_put accumulate")
            else "scatter_store" if name.startswith("index_put_ store") else r["class"])


def fit(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per class {compute, memory, fixed_s, runs, error, worst}, plus "kernel_gap_s" under the key "_gap" and the
    host's extra cost per class under "_host"."""
    chip = get_chip(data["chip"])
    by_class: dict[str, list[dict]] = {}
    for r in data["rows"]:
        if r["name"].startswith("contiguous of a transpose 1x"):  # already contiguous: no kernel runs
            continue
        if r["name"].endswith("(rows even)"):  # reference only: a router never splits rows evenly
            continue
        by_class.setdefault(_fit_class(r), []).append(r)
    out: dict[str, dict[str, float]] = {}
    for cls, rows in by_class.items():
        matrix = cls in ("matmul", "grouped_matmul", "grouped_matmul_wgrad", "attention", "attention_backward")
        pairs = []
        for r in rows:
            dtype = "float32" if "fp32" in r["name"] and not r["name"].startswith("cast") else "bfloat16"
            peak = chip.peak_flops(dtype, matrix)
            # fit the kernel's own duration (what a profile records per op) where the calibration has it
            pairs.append((r["flops"] / peak, r["bytes"] / chip.memory_bandwidth, r.get("kernel_s") or r["time_s"]))
        best = None
        for ec in EC if any(c for c, _, _ in pairs) else [1.0]:
            for em in EM:
                for t0 in T0:
                    err = statistics.fmean(abs(math.log((max(c / ec, m / em) + t0) / t)) for c, m, t in pairs)
                    if best is None or err < best[0]:
                        best = (err, ec, em, t0)
        assert best is not None
        err, ec, em, t0 = best
        worst = max(abs(math.log((max(c / ec, m / em) + t0) / t)) for c, m, t in pairs)
        out[cls] = {"compute": ec, "memory": em, "fixed_s": t0, "runs": len(rows), "error": math.exp(err),
                    "worst": math.exp(worst)}
    # the gap between back-to-back kernels: a graph of 1000 dependent tiny adds per add, minus a tiny add's own
    # kernel time (graphs of 10 calls, as the rows are timed, carry the graph launch in their per-call time)
    # the host's cost per call beyond a tiny add's, in tiny adds (calibrate_timing.host_issue), per class: the median
    # over its microbenchmarks; a backward's row times a whole autograd.grad call, not one op, and is left out
    extras: dict[str, list[float]] = {}
    for r in data["rows"]:
        if r.get("host_extra") is not None and "backward" not in r["name"] and "gradient" not in r["name"]:
            extras.setdefault(_fit_class(r), []).append(r["host_extra"])
    if extras:
        out["_host"] = {c: statistics.median(v) for c, v in sorted(extras.items())}
    floor = data["floors"].get("device_floor_per_kernel_s")
    adds = [r["kernel_s"] for r in data["rows"] if r["name"].startswith("add bf16") and r.get("kernel_s")
            and r["bytes"] < 1e5]
    if floor and adds:
        out["_gap"] = {"kernel_gap_s": max(floor - min(adds), 0.0), "floor": floor, "add": min(adds)}
    return out


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    print(f"# fit by scripts/fit_timing.py from {sys.argv[1]} ({data['device_name']}, torch {data['torch']}, {data['date']})")
    for cls, f in fit(data).items():
        if cls == "_host":
            print("  class_extra: {" + ", ".join(f"{c}: {v:.2g}" for c, v in f.items()) + "}   # host per call beyond a tiny add, in tiny adds")
            continue
        if cls == "_gap":
            print(f"  kernel_gap_s: {f['kernel_gap_s']:.2e}   # 1000-add graph per add {f['floor']:.3g} s minus a "
                  f"tiny add's kernel {f['add']:.3g} s")
            continue
        print(f"  {cls}: {{compute: {f['compute']:.3g}, memory: {f['memory']:.3g}, fixed_s: {f['fixed_s']:.2e}}}   "
              f"# {f['runs']:.0f} runs, x{f['error']:.2f} mean, worst x{f['worst']:.2f}")
    print(f"  floor per kernel: {data['floors'].get('device_floor_per_kernel_s', 0):.2e} s; host per eager op "
          f"{data['floors']['host_per_compute_op_s']:.2e} s, per view {data['floors']['host_per_view_op_s']:.2e} s")


if __name__ == "__main__":
    main()
