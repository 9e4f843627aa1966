"""`npuport profile compare BASE NEW`: two measured profiles side by side (the CUDA baseline against the NPU run, or
two versions of either), per step and per piece of work.

Host times are self CPU times under the profiler (inflated by it alike on both sides when both were recorded the
same way); rows are ranked by their device time change, plus their host time change when the new step is host
bound. Each step is split into compute (kernels of compute ops), communication (collectives: `c10d::` ops, NCCL / HCCL
kernels), memory (copies and fills the runtime runs as memcpy / memset tasks) and host / idle (the step's wall time
the device is not busy). Work is matched by aten op and, where both profiles say which module ran it, by module path
(kernel names differ between vendors, the aten op and the module do not); times are per step. The rows are ordered
worst regression first; each names the kernels that ran on either side and, given the audit JSON, the fused
replacement the audit expected for that module. Where both artifacts have them, their kernels are also set side by
side per kernel class (npuport.profile.kernel_classes), the one view that needs no name in common.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from npuport.profile.join import base, steps_in
from npuport.profile.kernel_classes import kernel_classes, of_artifact

_COMM_KERNEL = re.compile(r"nccl|hccl|hcom_", re.IGNORECASE)
_MEM_KERNEL = re.compile(r"^memcpy|^memset|MEMCPY|MEMSET", re.IGNORECASE)


def _per_step(profile: dict[str, Any]) -> float:
    return 1.0 / steps_in(profile)


def _kind(op: str, kernels: dict[str, float]) -> str:
    if op.startswith("c10d::") or any(_COMM_KERNEL.search(k) for k in kernels):
        return "communication"
    if kernels and all(_MEM_KERNEL.search(k) for k in kernels):
        return "memory"
    return "compute"


def breakdown(profile: dict[str, Any], unprofiled: bool = True) -> dict[str, Any]:
    """Seconds per step: wall, compute, communication, memory, host / idle. The wall is the median of the steps run
    without the profiler where the artifact has them (`profile record`) and `unprofiled`, else the profiled steps'
    mean (an imported trace), which the profiler's own per-op cost inflates."""
    per = _per_step(profile)
    parts = {"compute": 0.0, "communication": 0.0, "memory": 0.0}
    for r in profile["ops"]:
        parts[_kind(r["op"], r.get("kernels") or {})] += float(r["device_s"]) * per
    steps = profile.get("steps") or []
    plain = (profile.get("unprofiled") or {}).get("median_s") if unprofiled else None
    wall = plain if plain is not None else (sum(s["wall_s"] for s in steps) / len(steps) if steps else sum(parts.values()))
    busy = sum(s["kernel_s"] for s in steps) / len(steps) if steps else sum(parts.values())
    return {"wall_s": wall, **{f"{k}_s": v for k, v in parts.items()}, "host_idle_s": max(wall - busy, 0.0),
            "wall_from": "unprofiled median" if plain is not None else "profiled steps"}


def _rows(profile: dict[str, Any], by_module: bool) -> dict[tuple[str, str], dict[str, Any]]:
    per = _per_step(profile)
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"s": 0.0, "host": 0.0, "calls": 0.0, "kernels": {}})
    for r in (profile.get("modules") or []) if by_module else profile["ops"]:
        row = out[((r.get("module") or "(root)") if by_module else "", base(r["op"]))]
        row["s"] += float(r["device_s"]) * per
        row["host"] += float(r.get("host_s", 0.0)) * per
        row["calls"] += r.get("calls", 0) * per
    if by_module:  # what ran outside every module (collectives, the optimizer, the loss) keeps its own row
        inside: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for r in profile.get("modules") or []:
            acc = inside[base(r["op"])]
            acc[0] += float(r["device_s"])
            acc[1] += float(r.get("host_s", 0.0))
            acc[2] += r.get("calls", 0)
        for r in profile["ops"]:
            acc = inside[base(r["op"])]
            rest = (float(r["device_s"]) - acc[0], float(r.get("host_s", 0.0)) - acc[1], r.get("calls", 0) - acc[2])
            if rest[0] > 1e-12 or rest[1] > 1e-12:
                row = out[("(outside modules)", base(r["op"]))]
                row["s"] += max(rest[0], 0.0) * per
                row["host"] += max(rest[1], 0.0) * per
                row["calls"] += max(rest[2], 0) * per
                acc[0] += max(rest[0], 0.0)
                acc[1] += max(rest[1], 0.0)
                acc[2] += max(rest[2], 0)
    kernels: dict[str, dict[str, float]] = defaultdict(dict)
    for r in profile["ops"]:
        for k, t in (r.get("kernels") or {}).items():
            kernels[base(r["op"])][k] = kernels[base(r["op"])].get(k, 0.0) + t * per
    for (_, op), row in out.items():
        row["kernels"] = dict(sorted(kernels.get(op, {}).items(), key=lambda kv: -kv[1])[:3])
    return out


def _expected(audit: dict[str, Any] | None) -> dict[str, str]:
    """Module pattern -> the fused replacement the audit found for it ('' when none)."""
    out: dict[str, str] = {}
    for f in (audit or {}).get("fusions") or []:
        repl = f.get("replacement")
        name = repl.get("op") if isinstance(repl, dict) else repl
        if name and f.get("module"):
            out.setdefault(f["module"], f"{name} ({f.get('title') or f.get('pattern')})")
    return out


def _classes(base_art: dict[str, Any], new_art: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel class (mappings/kernel_classes.yaml), the kernels and their time per step on each side: what a
    CUDA run and an NPU run have in common when their kernel names have nothing ([] unless both artifacts have
    kernel classes)."""
    a, b = of_artifact(base_art), of_artifact(new_art)
    if not a or not b:
        return []
    pa, pb = _per_step(base_art), _per_step(new_art)
    rows = []
    for c in kernel_classes().order:
        ra, rb = a.get(c) or {}, b.get(c) or {}
        if not ra and not rb:
            continue
        ta, tb = float(ra.get("device_s", 0.0)) * pa, float(rb.get("device_s", 0.0)) * pb
        rows.append({"class": c, "base_kernels": round(int(ra.get("kernels", 0)) * pa), "base_s": ta,
                     "new_kernels": round(int(rb.get("kernels", 0)) * pb), "new_s": tb, "delta_s": tb - ta,
                     "base_top": list(ra.get("top") or {})[:1], "new_top": list(rb.get("top") or {})[:1]})
    return rows


def _side(art: dict[str, Any]) -> dict[str, Any]:
    recorded = art.get("recorded") or {}
    return {"source": art.get("source"), "device": art.get("device"), "device_name": recorded.get("device_name"),
            "model": recorded.get("model"), "scenario": (art.get("scenario") or {}).get("spec"),
            "steps": steps_in(art), "step_marks": len(art.get("steps") or [])}


def _notes(base_art: dict[str, Any], new_art: dict[str, Any], both_unprofiled: bool, matched: int, by: str) -> list[str]:
    """What makes the two sides compare less well than they seem to: said in every format and on stderr."""
    notes = []
    if not both_unprofiled and any((a.get("unprofiled") or {}).get("median_s") is not None for a in (base_art, new_art)):
        notes.append("only one side has steps timed without the profiler: both walls are the profiled steps' mean, "
                     "which the profiler's per-op cost inflates")
    models = [(a.get("recorded") or {}).get("model") for a in (base_art, new_art)]
    if all(models) and models[0] != models[1]:
        notes.append(f"the sides were recorded from different models ({models[0]!r}, {models[1]!r})")
    if not matched:
        notes.append(f"no work matched by {by}: the two profiles share no op (another model, or another framework's "
                     "op names); every row is only on one side")
    for name, art in (("base", base_art), ("new", new_art)):
        if not art.get("steps"):
            notes.append(f"the {name} side has no step marks (ProfilerStep): its times are the whole trace's, taken as "
                         "one step")
    return notes


def compare(base_art: dict[str, Any], new_art: dict[str, Any], audit: dict[str, Any] | None = None) -> dict[str, Any]:
    by_module = bool(base_art.get("modules")) and bool(new_art.get("modules"))
    a, b = _rows(base_art, by_module), _rows(new_art, by_module)
    expected = _expected(audit)
    rows = []
    for key in set(a) | set(b):
        ra, rb = a.get(key), b.get(key)
        ta, tb = (ra or {}).get("s", 0.0), (rb or {}).get("s", 0.0)
        ha, hb = (ra or {}).get("host", 0.0), (rb or {}).get("host", 0.0)
        if not (ta or tb or ha or hb):
            continue
        rows.append({"module": key[0], "op": key[1], "base_s": ta, "new_s": tb, "delta_s": tb - ta,
                     "base_host_s": ha, "new_host_s": hb, "host_delta_s": hb - ha,
                     "ratio": tb / ta if ta else None, "base_calls": (ra or {}).get("calls", 0.0),
                     "new_calls": (rb or {}).get("calls", 0.0), "base_kernels": list((ra or {}).get("kernels", {})),
                     "new_kernels": list((rb or {}).get("kernels", {})),
                     "matched": ra is not None and rb is not None,
                     "expected_fused": expected.get(key[0], "")})
    # the same kind of wall on both sides: the unprofiled median only where both have it
    both = all((art.get("unprofiled") or {}).get("median_s") is not None for art in (base_art, new_art))
    ba, bb = breakdown(base_art, both), breakdown(new_art, both)
    # worst first by what the step pays: device time, and host time where the host bounds the step
    host_bound = bb["host_idle_s"] > 0.5 * bb["wall_s"]
    rows.sort(key=lambda r: -(r["delta_s"] + (r["host_delta_s"] if host_bound else 0.0)))
    matched = sum(1 for r in rows if r["matched"])
    by = "module and aten op" if by_module else "aten op"
    return {
        "schema": "npuport.profile-compare/1",
        "base": _side(base_art),
        "new": _side(new_art),
        "matched_by": by,
        "matched_rows": matched,
        "notes": _notes(base_art, new_art, both, matched, by),
        "breakdown": {"base": ba, "new": bb,
                      "delta": {k: bb[k] - ba[k] for k in ba if k.endswith("_s")}},
        "rows": rows,
        "kernel_classes": _classes(base_art, new_art),
        "only_in_base": [r["op"] if not r["module"] else f"{r['module']}:{r['op']}" for r in rows if r["new_s"] == 0],
        "only_in_new": [r["op"] if not r["module"] else f"{r['module']}:{r['op']}" for r in rows if r["base_s"] == 0],
    }
