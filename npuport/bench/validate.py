"""Validate the harness: a large GEMM and a large device-to-device copy timed through the bench path (a
`BenchCase` like any recorded op) and independently (triton.testing.do_bench, and hand-written device events),
which must agree within a tolerance (5%).

    python -m npuport.bench.validate --device cuda [--gemm 8192] [--copy-gib 4] [--json FILE]

Exit 0 when every row agrees, 1 otherwise. On cpu the independent measurement is a perf_counter loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

import torch

from npuport.bench.cases import BenchCase, TensorSpec
from npuport.bench.harness import BenchOptions, bench_case
from npuport.devices import clocks
from npuport.devices import runtime as dev
from npuport.devices.memory import free_memory
from npuport.trace.records import TensorRef


def gemm_case(n: int, dtype: str = "bfloat16") -> BenchCase:
    spec = TensorSpec((n, n), dtype)
    return BenchCase("aten::mm", f"{n}x{n} {n}x{n}", (spec, spec), (TensorRef(0), TensorRef(1)), {}, 1,
                     2.0 * n * n * n, 3 * n * n * torch.finfo(getattr(torch, dtype)).bits // 8, True, dtype, 0.0, "-")


def copy_case(nbytes: int, dtype: str = "bfloat16") -> BenchCase:
    n = nbytes // (torch.finfo(getattr(torch, dtype)).bits // 8)
    spec = TensorSpec((n,), dtype)
    return BenchCase("aten::copy_", f"{n} {n}", (spec, spec), (TensorRef(0), TensorRef(1)), {}, 1, 0.0, 2 * nbytes,
                     False, dtype, 0.0, "-")


def _events_median(fn: Callable[[], Any], where: str, reps: int = 30, warmup: int = 5) -> float:
    """Hand-written: one event pair per call, one synchronize at the end (seconds)."""
    mod = dev.backend(where)
    for _ in range(warmup):
        fn()
    if mod is None:
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)
    mod.synchronize()
    pairs = []
    for _ in range(reps):
        s, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    mod.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / 1e3


def _do_bench(fn: Callable[[], Any], where: str) -> float | None:
    if dev.kind_of(where) != "cuda":
        return None
    try:
        from triton.testing import do_bench  # noqa: PLC0415 - optional dependency, imported where it is used
    except ImportError:
        return None
    return float(do_bench(fn, warmup=50, rep=300, return_mode="median")) / 1e3


def validate(where: str = "cuda", gemm_n: int = 8192, copy_bytes: int = 4 << 30, tolerance: float = 0.05,
             reps: int = 50) -> dict[str, Any]:
    where = dev.resolve(where)
    clock = dev.clock_for(where)
    sync = (lambda: dev.synchronize(where)) if dev.kind_of(where) != "cpu" else None
    opts = BenchOptions(warmup=10, reps=reps, budget_s=2.0, compile=False, alternatives=False, kernel_check=True)
    cap = int(free_memory(where) * 0.8)
    rows = []
    for case in (gemm_case(gemm_n), copy_case(copy_bytes)):
        res = bench_case(case, where, clock, opts, None, cap, sync)
        ts = [torch.randn(s.shape, device=where, dtype=torch.float32).to(getattr(torch, s.dtype)) for s in case.inputs]
        fn = (lambda: torch.mm(ts[0], ts[1])) if case.op == "aten::mm" else (lambda: ts[0].copy_(ts[1]))
        events = _events_median(fn, where)
        triton = _do_bench(fn, where)
        harness = res.median_s
        row: dict[str, Any] = {
            "case": case.label, "harness_s": harness, "do_bench_s": triton, "events_s": events, "error": res.error,
            "rotating_sets": res.sets,
            "rel_diff_vs_do_bench": (harness - triton) / triton if harness and triton else None,
            "rel_diff_vs_events": (harness - events) / events if harness and events else None,
            "rate": (case.flops / harness / 1e12 if case.flops else case.bytes / harness / 1e12) if harness else None,
            "rate_unit": "TFLOP/s" if case.flops else "TB/s (read + write)",
            "kernel_check": res.kernel_check.to_json() if res.kernel_check else None,
        }
        # the test: within tolerance of an independent measurement (do_bench or hand-written events);
        # both are reported, so a disagreement between the two references stays visible
        refs = [r for r in (triton, events) if r]
        row["agrees"] = bool(harness and any(abs(harness - r) / r <= tolerance for r in refs))
        row["agrees_with"] = [name for name, r in (("do_bench", triton), ("events", events))
                              if harness and r and abs(harness - r) / r <= tolerance]
        rows.append(row)
        del ts, res
        if dev.kind_of(where) == "cuda":
            torch.cuda.empty_cache()
    return {"device": where, "device_name": dev.device_name(where), "tolerance": tolerance, "rows": rows,
            "clock_state": clocks.clock_state(where), "ok": all(r["agrees"] for r in rows)}


def _fmt(s: float | None) -> str:
    return f"{s * 1e3:9.4f} ms" if s else "        -   "


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="validate npuport bench's timer against independent measurements")
    p.add_argument("--device", default="auto")
    p.add_argument("--gemm", type=int, default=8192)
    p.add_argument("--copy-gib", type=float, default=4.0)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    out = validate(a.device, a.gemm, int(a.copy_gib * (1 << 30)), a.tolerance)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1, default=str)
    print(f"harness validation on {out['device_name']} (tolerance {out['tolerance']:.0%})")
    for r in out["rows"]:
        d = r["rel_diff_vs_do_bench"] if r["rel_diff_vs_do_bench"] is not None else r["rel_diff_vs_events"]
        kc = (r["kernel_check"] or {}).get("kernel") or ""
        print(f"  {r['case'][:40]:40s} harness {_fmt(r['harness_s'])}  do_bench {_fmt(r['do_bench_s'])}  events {_fmt(r['events_s'])}"
              f"  diff {d:+.2%}  {r['rate'] or 0:.1f} {r['rate_unit']}  {'OK' if r['agrees'] else 'MISMATCH'}  {kc[:50]}"
              if d is not None else f"  {r['case']}: {r['error']}")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
