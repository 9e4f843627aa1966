"""Audit stage 3 (NPU targets or --torch-npu): a status per op on one torch_npu release, a summary by status with
time share, the cost of CPU fallbacks, and the earliest checked-in release that runs the model without one."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from npuport import coverage
from npuport.audit.report import CoverageStage
from npuport.cost.inventory import Inventory

_BAD = ("cpu-fallback", "unsupported")


def _resolution_json(res: Any) -> dict[str, Any]:
    return {"status": res.status, "paths": list(res.paths), "risk": res.risk, "detail": res.detail,
            "composite_kind": res.composite_kind}


def coverage_stage(inv: Inventory, version: str | None) -> CoverageStage:
    version = version or coverage.default_version()
    by_op: dict[str, dict[str, Any]] = {}
    summary: dict[str, dict[str, float]] = defaultdict(lambda: {"ops": 0, "calls": 0, "time_share": 0.0})
    fallback: list[dict[str, Any]] = []
    for entry in inv.ops:
        if entry.kind != "compute":
            continue
        res = coverage.resolve(entry.op, version)
        by_op[entry.op] = _resolution_json(res)
        row = summary[res.status]
        row["ops"] += 1
        row["calls"] += entry.calls
        row["time_share"] += entry.time_share
        if res.status in _BAD:
            crossing = 0
            for calls in inv.calls.values():
                crossing += sum(c.cost.bytes for c in calls if c.op == entry.op)
            fallback.append({
                "op": entry.op, "status": res.status, "calls": entry.calls, "modules": [m for m, _ in entry.merged("modules").most_common(4)],
                "sources": [s for s, _ in entry.merged("sources").most_common(4)],
                "bytes_crossing_host": crossing, "estimated_transfer_s": coverage.fallback_cost_s(crossing),
                "detail": res.detail,
            })
    earliest = None
    ops = list(by_op)
    with_fallback: dict[str, list[str]] = {}
    for v in coverage.available_versions():
        bad = [op for op in ops if coverage.resolve(op, v).status in _BAD]
        if bad:
            with_fallback[v] = bad
        elif earliest is None:
            earliest = v
    switch = coverage.load(version).fallback_error_env  # None before the release that introduced it
    summary_json = {
        "version": version,
        "by_status": dict(sorted(summary.items())),
        "cpu_fallback": fallback,
        "fallback_error_env": switch,
        "earliest_without_fallback": earliest,
        "releases_with_fallback": with_fallback,
        "checked_versions": coverage.available_versions(),
    }
    notes = []
    if fallback:
        names = ", ".join(f["op"] for f in fallback[:5])
        how = (f"set {switch}=1 to make a CPU fallback an error" if switch else
               f"torch_npu {version} has no switch to make a CPU fallback an error (it only warns)")
        notes.append(f"{len(fallback)} op(s) leave the NPU on torch_npu {version}: {names}; {how}")
    return CoverageStage(version, by_op, summary_json, notes)
