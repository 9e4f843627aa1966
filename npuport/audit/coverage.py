"""Audit stage 3 (NPU targets or --torch-npu): a status per op on one torch_npu release, a summary by status with
time share, the cost of CPU fallbacks (and of registered kernels that take their own host path on the recorded calls
and target chip: cpu-path), the ops whose host path npuport cannot decide (conditional), and the earliest checked-in
release that runs the model without leaving the NPU."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from npuport import coverage
from npuport.audit.report import CoverageStage
from npuport.cost.inventory import Inventory, ReportedCall
from npuport.coverage.database import by_build_date, is_prerelease

_BAD = ("cpu-fallback", "unsupported")


def _resolution_json(res: Any, folded: Any = None) -> dict[str, Any]:
    out = {"status": res.status, "paths": list(res.paths), "risk": res.risk, "detail": res.detail,
           "composite_kind": res.composite_kind}
    if res.sources:  # a recorded conditional host path was checked against the calls
        out["condition"] = res.condition
        out["kernel_sources"] = list(res.sources)
        if folded is not None:
            out["calls_by_status"] = {k: len(v) for k, v in sorted(folded.by_status.items())}
    return out


def _where(calls: list[ReportedCall]) -> tuple[list[str], list[str]]:
    modules: dict[str, int] = defaultdict(int)
    sources: dict[str, int] = defaultdict(int)
    for c in calls:
        modules[c.module] += 1
        if c.source:
            sources[c.source] += 1
    return _top(modules), _top(sources)


def _top(counts: dict[str, int]) -> list[str]:
    return [k for k, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:4]]


def _leaves(op: str, version: str, calls: list[ReportedCall], chip: str | None) -> bool:
    status = coverage.resolve(op, version).status
    if status in _BAD:
        return True
    return (status == "native" and coverage.has_conditions(op, version)
            and coverage.resolve_calls(op, version, calls, chip=chip).resolution.status == "cpu-path")


def coverage_stage(inv: Inventory, version: str | None, chip: str | None = None) -> CoverageStage:
    """chip: the target chip profile name the kernels' conditions are checked against (default: the inventory's)."""
    version = version or coverage.default_version()
    chip = chip or inv.chip.name
    calls_of: dict[str, list[ReportedCall]] = defaultdict(list)
    for calls in inv.calls.values():
        for c in calls:
            calls_of[c.op].append(c)
    by_op: dict[str, dict[str, Any]] = {}
    summary: dict[str, dict[str, float]] = defaultdict(lambda: {"ops": 0, "calls": 0, "time_share": 0.0})
    fallback: list[dict[str, Any]] = []
    unsupported: list[dict[str, Any]] = []
    conditional: list[dict[str, Any]] = []
    for entry in inv.ops:
        if entry.kind != "compute":
            continue
        folded = coverage.resolve_calls(entry.op, version, calls_of[entry.op], chip=chip)
        res = folded.resolution
        by_op[entry.op] = _resolution_json(res, folded)
        row = summary[res.status]
        row["ops"] += 1
        row["calls"] += entry.calls
        row["time_share"] += entry.time_share
        if res.status == "unsupported":  # no kernel: the op raises, nothing crosses to the host
            where = {"op": entry.op, "calls": entry.calls, "modules": [m for m, _ in entry.merged("modules").most_common(4)],
                     "sources": [s for s, _ in entry.merged("sources").most_common(4)]}
            unsupported.append({**where, "detail": res.detail})
            # kept in cpu_fallback for readers of earlier reports, with no transfer: it is a failure, not a cost
            fallback.append({**where, "status": res.status, "bytes_crossing_host": 0, "estimated_transfer_s": 0.0,
                             "detail": res.detail})
        elif res.status in _BAD:
            crossing = sum(c.cost.bytes for c in calls_of[entry.op])
            fallback.append({
                "op": entry.op, "status": res.status, "calls": entry.calls, "modules": [m for m, _ in entry.merged("modules").most_common(4)],
                "sources": [s for s, _ in entry.merged("sources").most_common(4)],
                "bytes_crossing_host": crossing, "estimated_transfer_s": coverage.fallback_cost_s(crossing),
                "detail": res.detail,
            })
        elif res.status == "cpu-path":
            host = cast(list[ReportedCall], folded.by_status.get("cpu-path", []))
            crossing = sum(c.cost.bytes for c in host)
            modules, sources = _where(host)
            fallback.append({
                "op": entry.op, "status": res.status, "calls": len(host), "modules": modules, "sources": sources,
                "bytes_crossing_host": crossing, "estimated_transfer_s": coverage.fallback_cost_s(crossing),
                "detail": res.detail, "condition": res.condition, "kernel_sources": list(res.sources),
            })
        elif res.status == "conditional":
            open_calls = cast(list[ReportedCall], folded.by_status.get("conditional", []))
            modules, sources = _where(open_calls)
            conditional.append({"op": entry.op, "calls": len(open_calls), "modules": modules, "sources": sources,
                                "condition": res.condition, "detail": res.detail, "kernel_sources": list(res.sources)})
    earliest = None
    ops = list(by_op)
    with_fallback: dict[str, list[str]] = {}
    conditions = coverage.load_conditions()
    # ops with a conditional host path in some release: a release whose kernels nobody read cannot vouch for them
    watched = {op for e in conditions.entries for op in e.ops} & set(ops)
    # released builds (no release candidates) oldest-built first, until the first one that runs every op on the NPU:
    # "earliest" is by build date (2.1.0.post10, built 2025-01, is later than 2.3.1, built 2024-07), and a walk
    # that stops there reads a few of the 57 data files instead of all of them
    checked: list[str] = []
    for v in by_build_date(coverage.available_versions()):
        if is_prerelease(v):
            continue
        checked.append(v)
        bad = [op for op in ops if _leaves(op, v, calls_of[op], chip)]
        if bad:
            with_fallback[v] = bad
        elif not watched or v in conditions.builds:
            earliest = v
            break
    switch = coverage.load(version).fallback_error_env  # None before the release that introduced it
    summary_json = {
        "version": version,
        "by_status": dict(sorted(summary.items())),
        "cpu_fallback": fallback,
        "unsupported": unsupported,
        "conditional": conditional,
        "fallback_error_env": switch,
        "earliest_without_fallback": earliest,
        "releases_with_fallback": with_fallback,
        "checked_versions": checked,
    }
    return CoverageStage(version, by_op, summary_json, _notes(fallback, conditional, version, switch, chip))


def _notes(fallback: list[dict[str, Any]], conditional: list[dict[str, Any]], version: str, switch: str | None,
           chip: str) -> list[str]:
    notes = []
    fail = [f["op"] for f in fallback if f["status"] == "unsupported"]
    if fail:
        notes.append(f"{len(fail)} op(s) have no NPU kernel on torch_npu {version} and fail at run time: "
                     f"{', '.join(fail[:5])}")
    leave = [f for f in fallback if f["status"] == "cpu-fallback"]
    if leave:
        names = ", ".join(f["op"] for f in leave[:5])
        how = (f"set {switch}=1 to make a CPU fallback an error" if switch else
               f"torch_npu {version} has no switch to make a CPU fallback an error (it only warns)")
        notes.append(f"{len(leave)} op(s) leave the NPU on torch_npu {version}: {names}; {how}")
    host = [f for f in fallback if f["status"] == "cpu-path"]
    if host:
        names = ", ".join(f"{f['op']} ({f['condition']})" for f in host[:3])
        notes.append(f"{len(host)} registered op(s) compute on the host inside torch_npu {version}'s own kernel on "
                     f"{chip}: {names}")
    if conditional:
        names = ", ".join(f["op"] for f in conditional[:5])
        notes.append(f"{len(conditional)} op(s) may compute on the host on torch_npu {version}, depending on what the "
                     f"trace does not show (CANN version, acl_op path): {names}")
    return notes
