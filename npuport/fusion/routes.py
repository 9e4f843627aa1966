"""Score implementation routes for each hot op and each fusion chain (mappings/routes.yaml).

score = sum(weight[d] * score[d]) on a 0-10 scale. `performance` and `coverage` come from evidence where the audit
has it (roofline times, coverage data, constraint checks); the other dimensions are stated judgements.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked

_FILE = "routes.yaml"


@dataclass(frozen=True)
class RouteSpec:
    id: str
    title: str
    applies_to: tuple[str, ...]
    expected_attainment: float
    scores: dict[str, float]
    why: str
    ops: tuple[str, ...] = ()


@functools.lru_cache(maxsize=1)
def load_routes() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float]], dict[str, RouteSpec]]:
    d = load_checked(_FILE)  # fields and types: schemas/routes.schema.json
    dims = d["dimensions"]
    for where, table in [(f"presets.{p}", w) for p, w in d["presets"].items()] + [(f"routes.{r}", v["scores"]) for r, v in d["routes"].items()]:
        for dim in table:
            if dim not in dims:
                raise MappingError(_FILE, where, str(dim), f"not a dimension (one of {', '.join(dims)})")
    routes = {}
    for rid, raw in d["routes"].items():
        routes[rid] = RouteSpec(rid, raw["title"], tuple(raw["applies_to"]), float(raw["expected_attainment"]),
                                {k: float(v) for k, v in raw["scores"].items()}, raw["why"], tuple(raw.get("ops", [])))
    return dims, d["presets"], routes


def weights(preset: str = "default", overrides: str | None = None) -> dict[str, float]:
    """Dimension weights: the defaults, a preset, then `perf=0.4,dev_time=0.1` style overrides; normalized to 1."""
    dims, presets, _ = load_routes()
    if preset not in presets:
        raise NpuportError(f"unknown route preset {preset!r}", "one of " + ", ".join(presets), preset)
    w = {k: float(v["weight"]) for k, v in dims.items()}
    w.update(presets[preset])
    if overrides:
        for part in overrides.split(","):
            key, eq, val = part.partition("=")
            key = {"perf": "performance"}.get(key.strip(), key.strip())
            try:
                value = float(val)
            except ValueError:
                value = -1.0
            if not eq or key not in w or value < 0:
                raise NpuportError(f"bad --weights entry {part!r}", f"DIM=NUMBER with DIM one of {', '.join(w)}", part)
            w[key] = value
    total = sum(w.values())
    if total <= 0:
        raise NpuportError("route weights sum to zero", "at least one positive weight", overrides or preset)
    return {k: v / total for k, v in w.items()}


def _score(route: RouteSpec, perf: float, coverage: float, w: Mapping[str, float], perf_why: str, cov_why: str) -> dict[str, Any]:
    dims = {"performance": (perf, "evidence", perf_why), "coverage": (coverage, "evidence", cov_why)}
    for k, v in route.scores.items():
        dims[k] = (v, "judgement", route.why)
    total = sum(w[k] * dims[k][0] for k in w if k in dims)
    return {"route": route.id, "title": route.title, "score": round(total, 2),
            "dimensions": {k: {"score": round(v[0], 2), "basis": v[1], "why": v[2]} for k, v in dims.items()}}


def score_op(op: str, coverage_status: str | None, w: Mapping[str, float]) -> dict[str, Any]:
    """Routes for a hot aten op: the library op when the release implements it, or a kernel of one's own."""
    _, _, routes = load_routes()
    cands = []
    native = coverage_status in ("native", "npu-custom", None)
    for r in routes.values():
        if "op" not in r.applies_to or (r.ops and op not in r.ops):
            continue
        if r.id == "eager":
            continue  # for a single op eager *is* the library op; scored as cann_aclnn
        if r.id == "cann_aclnn":
            # composite: runs as other NPU ops; conditional: the kernel computes on the host only under a condition
            # the trace cannot decide (a CANN version, the acl_op path); cpu-path / cpu-fallback: on the host
            cov = 10.0 if native else (5.0 if coverage_status in ("composite", "conditional") else 0.0)
            cov_why = f"torch_npu coverage: {coverage_status or 'not checked'}"
        else:
            cov, cov_why = 8.0, "a custom kernel can cover every shape the model records (judgement)"
        perf = 10 * r.expected_attainment
        cands.append(_score(r, perf, cov, w, f"expected roofline attainment {r.expected_attainment:.0%} (judgement per route)", cov_why))
    cands.sort(key=lambda c: -c["score"])
    viable = [c for c in cands if c["dimensions"]["coverage"]["score"] > 0]
    return {"target": op, "kind": "op", "recommended": viable[0]["route"] if viable else None, "candidates": cands}


def score_fusion(row: Mapping[str, Any], unfused_s: float, fused_s: float, w: Mapping[str, float]) -> dict[str, Any]:
    """Routes for one fusion chain: the vendor fused op, our kernel, Triton-Ascend, or leaving it unfused."""
    _, _, routes = load_routes()
    rejected = {r["kind"]: r for r in row.get("rejected", [])}
    rep = row.get("replacement") or {}
    fits = {rep.get("kind")} | {x["kind"] for x in rep.get("also_fits", [])}
    cands = []
    ratio = fused_s / unfused_s if unfused_s > 0 else 1.0
    for r in routes.values():
        if "fusion" not in r.applies_to:
            continue
        if r.id == "eager":
            perf, perf_why = 10 * r.expected_attainment * ratio, f"unfused chain: {ratio:.0%} of the fused roofline speed"
            cov, cov_why = 10.0, "runs everywhere"
        else:
            perf, perf_why = 10 * r.expected_attainment, f"expected attainment {r.expected_attainment:.0%} of the fused roofline (judgement)"
            kind = {"torch_npu_fused": "torch_npu", "npuport_kernel": "npuport_kernel"}.get(r.id)
            if kind is None:
                cov, cov_why = 7.0, "write once for the recorded shapes (judgement)"
            elif kind in fits or (kind == "torch_npu" and "native" in fits):
                cov, cov_why = 10.0, "constraints hold for every recorded match"
            elif kind in rejected:
                cov, cov_why = 0.0, "; ".join(rejected[kind]["reasons"])
            else:
                cov, cov_why = 0.0, "no such replacement for this pattern"
        cands.append(_score(r, perf, cov, w, perf_why, cov_why))
    viable = [c for c in cands if c["dimensions"]["coverage"]["score"] > 0]
    cands.sort(key=lambda c: -c["score"])
    best = max(viable, key=lambda c: c["score"]) if viable else None
    return {"target": row["pattern"], "kind": "fusion", "module": row["module"], "scenario": row["scenario"],
            "recommended": best["route"] if best else None, "candidates": cands}
