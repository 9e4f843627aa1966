"""Join a measured profile (artifact dict, npuport.profile/1) to an audit's estimate (npuport.audit/1 dict) for one
scenario: per op estimated time and share against measured device time and share, their ratio, the ops only one
side has, per op class the summed estimate against the measurement, and the half-L1 distance between the two share
distributions (for a step recorded under torch.compile, whose pointwise ops ran fused, or replayed as a CUDA graph,
whose kernels carry no aten op, its kernels per step instead of the distance). Names are matched without their overload (`aten::add.Tensor` ~ `aten::add`); a measured op the audit
does not list has its time rolled up, through the profile's `parents`, into the nearest enclosing op it does list
(`_scaled_dot_product_flash_attention_for_cpu` into `scaled_dot_product_attention`); what reaches the top level
unmatched stays "only in the profile".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from npuport.cost.roofline import load_chips
from npuport.cost.timing import op_class as timing_class
from npuport.errors import NpuportError
from npuport.profile.kernel_classes import compare as compare_classes
from npuport.profile.kernel_classes import estimate_class, of_artifact

_DEPTH = 16


def base(op: str) -> str:
    """'aten::add.Tensor' -> 'aten::add'."""
    ns, sep, rest = op.partition("::")
    return ns + sep + rest.split(".")[0] if sep else op.split(".")[0]


def op_class(op: str, kind: str = "compute") -> str:
    """The op class of mappings/timing.yaml (matmul, attention, reduction, cast, copy, cat, elementwise, view)."""
    return timing_class(base(op).partition("::")[2] or op, kind)


_ALIASES = {"aten::_index_put_impl": "aten::index_put"}  # what the kernel-launching op is, for the op the audit lists


def _alias(op: str, audited: set[str]) -> str:
    """The audited op a measured op that the audit does not list stands for: its in-place / out-of-place twin
    (`add_` ~ `add`: gradient accumulation, cache updates), a known implementation op, or, for an attention kernel
    (a backend's forward or backward the audit records as `scaled_dot_product_attention`), the audit's attention."""
    for cand in (op.rstrip("_"), op + "_", _ALIASES.get(op.rstrip("_"), "")):
        if cand in audited:
            return cand
    if op_class(op) == "attention":
        fused = [a for a in audited if op_class(a) == "attention"]
        if len(fused) == 1:
            return fused[0]
    return op


def _rolled(profile: dict[str, Any], audited: set[str]) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """Measured device time per step per audit op name (base names), measured calls per step, and the time of
    unmatched ops per step (a recorded profile holds several steps; the audit estimates one)."""
    per = 1.0 / steps_in(profile)
    parents: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_calls: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # where an op sits, by calls
    # where an op's callees' time sits: its calls' kernels and their callees' per parent (recorded traces since
    # 2026-12-04); older artifacts fall back to the op's own kernels per parent, then to its calls
    within: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: dict[str, int] = defaultdict(int)
    for r in profile["ops"]:
        calls[base(r["op"])] += int(r.get("calls", 0))
        for p, t in (r.get("parents_inclusive") or {}).items():
            within[base(r["op"])][base(p) if p else ""] += t * per
        for p, t in (r.get("parents") or {"": r["device_s"]}).items():
            parents[base(r["op"])][base(p) if p else ""] += t * per
        for p, n in (r.get("parent_calls") or {}).items():
            by_calls[base(r["op"])][base(p) if p else ""] += n
    calls = {b: round(c * per) for b, c in calls.items()}
    measured: dict[str, float] = defaultdict(float)
    only: dict[str, float] = defaultdict(float)

    def place(op: str, t: float, origin: str, depth: int) -> None:
        if op in audited:
            measured[op] += t
            return
        if op == "" or depth > _DEPTH or (op not in parents and op not in by_calls):
            only[origin] += t
            return
        split = within[op] if op in within else parents[op]
        total = sum(split.values())
        if not total and by_calls.get(op):  # an op without kernels of its own: its parents by calls
            split = by_calls[op]
            total = sum(split.values())
        for p, pt in split.items():
            place(p, t * pt / total if total else 0.0, origin, depth + 1)

    def outer(op: str, t: float, depth: int) -> float:
        """Place time `t` met at `op` with the outermost audited op at or above it: the audit records the op its
        dispatch mode saw, the outermost one (`_to_copy`, not the `copy_` inside it that launched the kernel), so
        an enclosing audited op takes the time before `op` does. Returns what found no audited op on the way up."""
        if op == "" or depth > _DEPTH:
            return t
        # only where the profile says where the time sat (its callees' time per parent, or its own kernels'): a
        # split by call counts would send a `to` inside `pow` (which copies nothing) a share of every cast
        split = within[op] if op in within else parents.get(op, {})
        total = sum(split.values())
        left = sum(outer(p, t * pt / total, depth + 1) for p, pt in split.items()) if total else t
        name = op if op in audited else _alias(op, audited)
        if name in audited and left:
            measured[name] += left
            return 0.0
        return left

    for b, split in parents.items():
        name = b if b in audited else _alias(b, audited)
        for p, t in split.items():
            if not t:
                continue
            left = outer(p, t, 0)  # an audited op enclosing this call takes its time first
            if not left:
                continue
            if name in audited:
                measured[name] += left
            else:
                place(p, left, b, 0)
    return measured, calls, only


def _device_note(audit_json: dict[str, Any], profile: dict[str, Any]) -> str | None:
    """A profile measured on another kind of device than the chip the audit estimates: the estimate is not held
    against its own measurement (a CPU run against a GPU estimate, a CUDA run against an NPU estimate)."""
    chip = audit_json.get("chip")
    name = chip.get("name") if isinstance(chip, dict) else chip
    family = _chip_family(str(name)) if name else None
    ran = str(profile.get("device") or "")
    if not family or not ran or ran.split(":")[0] == family:
        return None
    where = (profile.get("recorded") or {}).get("device_name") or ran
    return (f"the profile ran on {where} ({ran}), the audit estimates {name} ({family}): the estimate is not held "
            "against a run on its own kind of device")


def _chip_family(name: str) -> str | None:
    chip = load_chips().get(name)
    return chip.family if chip is not None else None


def steps_in(profile: dict[str, Any]) -> int:
    """How many steps the profile's op times add up over (1 for a trace without ProfilerStep marks)."""
    return max(len(profile.get("steps") or []), 1)


def _module_rows(audit_json: dict[str, Any], profile: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    """Per module pattern: estimated against measured device time per step and their shares."""
    est = {m["module"]: float(m["scenarios"][scenario]["estimated_time_s"]) for m in audit_json.get("modules", [])
           if scenario in (m.get("scenarios") or {})}
    meas: dict[str, float] = defaultdict(float)
    per = 1.0 / steps_in(profile)
    for r in profile.get("modules") or []:
        meas[r["module"] or "(root)"] += float(r["device_s"]) * per
    if not meas:
        return []
    te, tm = sum(est.values()) or 1.0, sum(meas.values()) or 1.0
    rows: list[dict[str, Any]] = [{"module": k, "estimated_s": est.get(k, 0.0), "measured_s": meas.get(k, 0.0),
             "estimated_share": est.get(k, 0.0) / te, "measured_share": meas.get(k, 0.0) / tm}
            for k in set(est) | set(meas)]
    rows.sort(key=lambda r: -(float(r["measured_s"]) + float(r["estimated_s"])))
    return rows


def _step(audit_sc: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """The estimated step (wall, host, device) against the measured one: the unprofiled wall time when the profile
    was recorded by npuport (the profiler's own cost inflates the traced steps), else the traced steps' mean."""
    steps = profile.get("steps") or []
    n = max(len(steps), 1)
    plain = (profile.get("unprofiled") or {}).get("median_s")
    measured = {"step_s": plain if plain is not None else sum(s["wall_s"] for s in steps) / n,
                "step_from": "unprofiled median" if plain is not None else "profiled steps (mean)",
                "device_s": sum(s["kernel_s"] for s in steps) / n,
                "host_s": sum(s.get("host_s", 0.0) for s in steps) / n}
    issued = (profile.get("unprofiled") or {}).get("host_median_s")
    if issued is not None:  # recorded with the host's issue time: the host side without the profiler's cost
        measured["host_issue_s"] = issued
    est = audit_sc.get("step") or {"step_s": audit_sc.get("estimated_time_s", 0.0)}
    out = {"estimated": est, "measured": measured}
    if measured["step_s"] and est.get("step_s"):
        out["error"] = est["step_s"] / measured["step_s"] - 1.0
    if issued and est.get("host_s"):
        out["host_error"] = est["host_s"] / issued - 1.0
    if measured["device_s"] and est.get("device_s"):
        out["device_error"] = est["device_s"] / measured["device_s"] - 1.0
    return out


def _compiled_kernels(profile: dict[str, Any], audit_sc: dict[str, Any]) -> dict[str, Any]:
    """A compiled step's kernels per step: the generated (Triton) ones, named after the ops they fuse, and the library
    ones, under their aten op; against the kernels the audit's compile-mode step launches."""
    per = 1.0 / steps_in(profile)
    gen = [r for r in profile["ops"] if r["op"].startswith("triton")]
    lib = [r for r in profile["ops"] if r["op"].startswith("aten::") and r.get("device_s", 0.0) > 0]
    return {"generated": round(sum(r["calls"] for r in gen) * per), "generated_s": sum(r["device_s"] for r in gen) * per,
            "library": round(sum(r["calls"] for r in lib) * per), "library_s": sum(r["device_s"] for r in lib) * per,
            "estimated_kernels": (audit_sc.get("step") or {}).get("kernels")}


def _captured_kernels(profile: dict[str, Any], audit_sc: dict[str, Any]) -> dict[str, Any]:
    """A replayed graph's kernels per step (the replay launches them with no aten op around them); for a compiled
    step replayed as graphs (reduce-overhead), against the kernels the audit's compiled step launches."""
    per = 1.0 / steps_in(profile)
    totals = profile.get("totals") or {}
    return {"kernels": round(int(totals.get("kernels", 0)) * per), "kernels_s": float(totals.get("kernel_s", 0.0)) * per,
            "estimated_kernels": (audit_sc.get("step") or {}).get("kernels")}


def _estimated_classes(audit_json: dict[str, Any], audit_sc: dict[str, Any], scenario: str) -> dict[str, dict[str, float]]:
    """The audit's kernels of the step per kernel class: a graph or compiled step's as simulated (`step.timing_classes`,
    by timing class), an eager step's one kernel per compute call of each op."""
    acc: dict[str, dict[str, float]] = defaultdict(lambda: {"kernels": 0, "device_s": 0.0})
    by_timing = (audit_sc.get("step") or {}).get("timing_classes")
    if by_timing:
        for cls, v in by_timing.items():
            row = acc[estimate_class(cls)]
            row["kernels"] += v["kernels"]
            row["device_s"] += v["device_s"]
        return dict(acc)
    for op in audit_json.get("ops", []):
        sc = (op.get("scenarios") or {}).get(scenario)
        kind = op.get("kind", "compute")
        if sc is None or kind == "view" or not sc.get("estimated_time_s"):
            continue
        row = acc[estimate_class(op_class(op["op"], kind))]
        row["kernels"] += int(sc.get("calls") or 0)
        row["device_s"] += float(sc["estimated_time_s"])
    return dict(acc)


def join(audit_json: dict[str, Any], profile: dict[str, Any], scenario: str) -> dict[str, Any]:
    names = [s["name"] for s in audit_json.get("scenarios", [])]
    if scenario not in names:
        raise NpuportError(f"the audit has no scenario {scenario!r} to join the profile to", "one of " + ", ".join(names), scenario)
    est: dict[str, float] = defaultdict(float)
    kinds: dict[str, str] = {}
    sources: dict[str, list[str]] = {}  # the source lines the audit traced each op to (a recorded profile has none)
    for op in audit_json.get("ops", []):
        sc = (op.get("scenarios") or {}).get(scenario)
        if sc is None:
            continue
        b = base(op["op"])
        est[b] += float(sc.get("estimated_time_s") or 0.0)
        kinds.setdefault(b, op.get("kind", "compute"))
        sources.setdefault(b, [])
        sources[b] += [x for x in op.get("sources") or [] if x not in sources[b]]
    measured, calls, only = _rolled(profile, set(est))
    est_total = sum(est.values())
    meas_total = sum(measured.values()) + sum(only.values())
    rows: list[dict[str, Any]] = []
    for b in sorted(set(est) | set(measured), key=lambda k: -(measured.get(k, 0.0) + est.get(k, 0.0))):
        e, m = est.get(b, 0.0), measured.get(b, 0.0)
        rows.append({"op": b, "class": op_class(b, kinds.get(b, "compute")), "estimated_s": e, "measured_s": m,
                     "ratio": m / e if e else None, "estimated_share": e / est_total if est_total else 0.0,
                     "measured_share": m / meas_total if meas_total else 0.0, "measured_calls": calls.get(b, 0),
                     "sources": sources.get(b, [])[:5]})
    only_rows: list[dict[str, Any]] = [{"op": k, "class": op_class(k), "measured_s": t, "measured_share": t / meas_total if meas_total else 0.0}
                 for k, t in sorted(only.items(), key=lambda kv: -kv[1]) if t > 0]
    classes: dict[str, dict[str, float]] = defaultdict(lambda: {"estimated_s": 0.0, "measured_s": 0.0})
    for r in rows:
        classes[r["class"]]["estimated_s"] += r["estimated_s"]
        classes[r["class"]]["measured_s"] += r["measured_s"]
    for r in only_rows:
        classes[r["class"]]["measured_s"] += r["measured_s"]
    class_rows = [{"class": c, **v, "ratio": v["measured_s"] / v["estimated_s"] if v["estimated_s"] else None}
                  for c, v in sorted(classes.items(), key=lambda kv: -kv[1]["measured_s"])]
    est_shares = {r["op"]: r["estimated_share"] for r in rows}
    meas_shares = {r["op"]: r["measured_share"] for r in rows} | {"only:" + r["op"]: r["measured_share"] for r in only_rows}
    distance = 0.5 * sum(abs(est_shares.get(k, 0.0) - meas_shares.get(k, 0.0)) for k in set(est_shares) | set(meas_shares))
    audit_sc = next(s for s in audit_json.get("scenarios", []) if s["name"] == scenario)
    recorded = profile.get("scenario") or {}
    shape_note = None
    if recorded and any(recorded.get(k) != audit_sc.get(k) for k in ("batch", "seq", "past")):
        shape_note = (f"the profile measured {recorded.get('spec', recorded)} but the audit's {scenario} is "
                      f"batch={audit_sc.get('batch')},seq={audit_sc.get('seq')},past={audit_sc.get('past')}: "
                      "times do not compare, shares only roughly")
    where = _device_note(audit_json, profile)
    if where:
        shape_note = where + (f"; {shape_note}" if shape_note else "")
    # `profile record` names the model it ran; an imported trace does not, and then nothing is said
    ran = (profile.get("recorded") or {}).get("model")
    audited = (audit_json.get("model") or {}).get("name")
    if ran and audited and ran != audited:
        shape_note = (f"the profile was recorded from model {ran!r}, the audit is of {audited!r}: a different model, "
                      "nothing here compares" + (f"; {shape_note}" if shape_note else ""))
    skipped = ((profile.get("recorded") or {}).get("compile") or {}).get("cudagraph_skips_after_steps") or 0
    if recorded.get("mode") == "reduce-overhead" and skipped:
        # torch fell back to running a compiled graph without its device graph (a CPU tensor, a mutated input, ...)
        shape_note = (f"torch.compile could not replay {skipped} of the step's compiled graphs as device graphs "
                      "(cudagraph skips; --debug shows why): those ran as mode=compile does"
                      + (f"; {shape_note}" if shape_note else ""))
    step_mode = (audit_sc.get("step") or {}).get("mode")
    if recorded.get("mode") and step_mode and recorded["mode"] != step_mode:
        shape_note = (f"the profile ran in {recorded['mode']} mode, the audit's {scenario} is timed in {step_mode} mode: "
                      "step times do not compare" + (f"; {shape_note}" if shape_note else ""))
    # a graph replay (CUDA graphs, or torch.compile's reduce-overhead replaying its compiled graphs); a reduce-overhead
    # step whose graphs torch did not replay launched its compiled kernels one by one, as compile mode does
    graphed = recorded.get("mode") == "reduce-overhead"
    compiled = recorded.get("mode") == "compile" or (graphed and bool(skipped))
    captured = recorded.get("mode") == "graph" or (graphed and not skipped)
    return {
        "scenario": scenario,
        "shape_note": shape_note,
        # a compiled step's pointwise ops ran fused across op boundaries: no per-op shares to compare, its kernels
        "compiled": _compiled_kernels(profile, audit_sc) if compiled else None,
        # a graph replay's kernels carry no aten op at all: its kernels per step
        "captured": _captured_kernels(profile, audit_sc) if captured else None,
        "step": _step(audit_sc, profile),
        "modules": _module_rows(audit_json, profile, scenario),
        "source": profile.get("source"),
        "device": profile.get("device"),
        "device_time": profile.get("device_time"),
        "estimated_s": est_total,
        "measured_s": meas_total,
        "ratio": meas_total / est_total if est_total else None,
        "distance": None if compiled or captured else distance,
        "ops": rows,
        "only_in_profile": only_rows,
        "only_in_audit": [r["op"] for r in rows if r["measured_s"] == 0.0 and r["measured_calls"] == 0 and r["estimated_s"] > 0],
        "classes": class_rows,
        # every kernel by the kind of work its name says it does, against the audit's kernels of the step ([] for an
        # artifact written before kernel classes)
        "kernel_classes": compare_classes(_estimated_classes(audit_json, audit_sc, scenario),
                                          of_artifact(profile), steps_in(profile)),
        "steps": profile.get("steps", []),
    }
