"""The summary's answers as data, from the audit's JSON form: will the model run on the target, what computes
differently, what runs slowly. Each finding of mappings/behaviours.yaml is counted under the question its `impact`
answers: `crash` under "Runs?", `numerics` under "Computes differently?", `performance` under the slow paths, so a
finding that stops the run is never counted as a numeric difference. An op with no NPU kernel (`unsupported`) fails at
run time: it is a "no" to "Runs?", not an op that leaves the NPU at a transfer cost.

npuport.audit.json_form attaches the same object to the JSON as `answers` (docs/audit-json.md); the renderers phrase
it (npuport.render.audit_doc)."""

from __future__ import annotations

from typing import Any

LEVELS = ("error", "warning", "info")
IMPACTS = ("crash", "numerics", "performance")
# findings that only restate coverage's unsupported ops (mappings/behaviours.yaml, predicate coverage_status)
RESTATES_COVERAGE = frozenset({"NPB041"})


def unsupported_ops(cov: dict[str, Any]) -> list[dict[str, Any]]:
    """The ops with no NPU kernel on the checked release (older JSON carries them only in `cpu_fallback`)."""
    if "unsupported" in cov:
        return list(cov["unsupported"])
    return [f for f in cov.get("cpu_fallback", []) if f["status"] == "unsupported"]


def leaving_ops(cov: dict[str, Any]) -> list[dict[str, Any]]:
    """The ops that run, but on the host: CPU fallbacks and kernels that take their own host path."""
    return [f for f in cov.get("cpu_fallback", []) if f["status"] != "unsupported"]


def _ids(findings: list[dict[str, Any]]) -> list[str]:
    return [f["id"] for f in sorted(findings, key=lambda f: LEVELS.index(f["level"]) if f["level"] in LEVELS else 3)]


def _tally(findings: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {lvl: sum(1 for f in findings if f["level"] == lvl) for lvl in LEVELS}
    out["findings"] = _ids(findings)
    return out


def by_impact(findings: list[dict[str, Any]], impact: str) -> list[dict[str, Any]]:
    """Findings about `impact`; a finding without one (older JSON) counts as numerics, as the summary counted it."""
    return [f for f in findings if (f.get("impact") or "numerics") == impact]


def answers(data: dict[str, Any]) -> dict[str, Any]:
    """`runs`: {answer: yes / no / at-risk / with-cpu-fallbacks / not-checked, unsupported_ops, failing_findings,
    at_risk_findings, crash_notes, cpu_fallback_ops, conditional_ops}; `computes_differently` and `slow_paths`:
    {error, warning, info, findings (ids, errors first)}, or null where behaviour rules did not run (not an NPU)."""
    cov = data.get("coverage")
    findings = data.get("findings")
    crash = by_impact(findings or [], "crash")
    unsupported = [f["op"] for f in unsupported_ops(cov)] if cov else []
    # NPB041 says what coverage says (an unsupported op): named once, as the op. A crash finding about an unsupported
    # op that says more (NPB076: FlexAttention refuses NPU tensors, and the fused attention to call instead) stays
    failing = [f for f in crash if f["level"] == "error"
               and not (f["id"] in RESTATES_COVERAGE and f["evidence"]
                        and all(e["op"] in unsupported for e in f["evidence"]))]
    at_risk = [f for f in crash if f["level"] == "warning"]
    fallback = leaving_ops(cov) if cov else []
    if cov is None and findings is None:
        answer = "not-checked"
    elif unsupported or failing:
        answer = "no"
    elif at_risk:
        answer = "at-risk"
    elif fallback:
        answer = "with-cpu-fallbacks"
    else:
        answer = "yes"
    runs = {"answer": answer, "checked_release": cov["version"] if cov else None, "unsupported_ops": unsupported,
            "failing_findings": _ids(failing), "at_risk_findings": _ids(at_risk),
            "crash_notes": _ids([f for f in crash if f["level"] == "info"]),
            "cpu_fallback_ops": [f["op"] for f in fallback],
            "conditional_ops": [f["op"] for f in (cov or {}).get("conditional", [])]}
    return {"runs": runs,
            "computes_differently": None if findings is None else _tally(by_impact(findings, "numerics")),
            "slow_paths": None if findings is None else _tally(by_impact(findings, "performance"))}
