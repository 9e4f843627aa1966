"""A ParityResult as one JSON object, schema npuport.parity/1 (frozen field names; docs/parity.md).
npuport.render.parity_text and npuport.render.parity_doc show it."""

from __future__ import annotations

import math
from typing import Any

from npuport.parity.compare import EntryResult
from npuport.parity.run import ParityResult

SCHEMA = "npuport.parity/1"


def _f(v: float | None) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def entry_json(r: EntryResult) -> dict[str, Any]:
    e = r.entry
    out: dict[str, Any] = {"key": e.key, "module": e.module, "call": e.call, "io": e.io, "leaf": e.leaf, "op": e.op,
                           "order": e.order, "dtype": e.dtype, "shape": list(e.shape), "tolerance": r.tolerance,
                           "metrics": r.metrics.to_json(), "golden": r.golden.to_json() if r.golden else None,
                           "passed": r.passed, "reason": r.reason, "would_pass": r.would_pass}
    return out


def to_json(res: ParityResult) -> dict[str, Any]:
    comp = res.comparison
    out = {
        "schema": SCHEMA,
        "verdict": {"passed": bool(res), "text": res.verdict_line, "mode": "relative" if comp.relative else "absolute",
                    "checked": len(comp.judged), "failed": len(comp.failed), "unmatched": len(comp.structural_unmatched),
                    "exit_code": 0 if res else 1},
        "scenario": res.scenario,
        "sides": [s.to_json() for s in res.sides],
        "tolerances": {k: t.to_json() for k, t in res.tolerances.by_dtype.items()},
        "entries": [entry_json(r) for r in comp.results],
        "unmatched": {"ref_only": comp.ref_only, "dev_only": comp.dev_only, "golden_missing": comp.golden_missing},
        "first_divergence": res.first.to_json() if res.first else None,
        "warnings": res.warnings,
    }
    if res.ranks is not None:  # per-rank records only: a single-device comparison's object is unchanged
        out["ranks"] = res.ranks.to_json()
    return out
