"""The audit report as one JSON object, schema "npuport.audit/1" (documented in docs/audit-json.md).

Field names here are a contract frozen by tests/report/test_audit_json.py: add fields freely, never rename.
"""

from __future__ import annotations

import platform
from typing import Any

import torch

import npuport
from npuport.audit.report import AuditReport
from npuport.cost.inventory import OpEntry, ScenarioOpStats
from npuport.cost.timing import StepTime
from npuport.render.answers import answers
from npuport.rules.engine import Finding
from npuport.scan.source_apis import load_source_apis

SCHEMA = "npuport.audit/1"
MAX_SHAPES = 12
MAX_MODULES = 12


def _shapes(stats: ScenarioOpStats) -> list[dict[str, Any]]:
    rows = sorted(stats.shapes.items(), key=lambda kv: (-stats.shape_time[kv[0]], -kv[1]))
    out = []
    for sig, n in rows[:MAX_SHAPES]:
        row = {"inputs": sig, "calls": n, "estimated_time_s": stats.shape_time[sig]}
        if sig in stats.examples:
            row["example"] = stats.examples[sig]
        out.append(row)
    return out


def _scenario_op(stats: ScenarioOpStats) -> dict[str, Any]:
    return {
        "calls": stats.calls,
        "flops": stats.flops,
        "bytes": stats.bytes,
        "estimated_time_s": stats.time_s,
        "time_share": stats.share,
        "bound": stats.bound,
        "class": stats.cls,
        "shapes": _shapes(stats),
        "distinct_shapes": len(stats.shapes),
        "phases": dict(stats.phases),
    }


def op_json(entry: OpEntry, coverage_by_op: dict[str, dict[str, Any]]) -> dict[str, Any]:
    modules = entry.merged("modules")
    sources = entry.merged("sources")
    flops, nbytes = entry.flops, entry.bytes
    out: dict[str, Any] = {
        "op": entry.op,
        "kind": entry.kind,
        "calls": entry.calls,
        "modules": [m for m, _ in modules.most_common(MAX_MODULES)],
        "module_types": sorted(entry.merged("module_types")),
        "sources": [s for s, _ in sources.most_common(MAX_MODULES)],
        "apis": [a for a, _ in entry.merged("apis").most_common(6)],
        "shapes": {name: _shapes(s) for name, s in entry.by_scenario.items()},
        "dtypes": sorted(entry.merged("dtypes")),
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": flops / nbytes if nbytes else None,
        "time_share": entry.time_share,
        "bound": entry.bound,
        "bound_flips": entry.bound_flips,
        "class": entry.cls,
        "fused": entry.fused,
        "matrix": entry.matrix,
        "native_composite_of": sorted(entry.merged("children")),
        "scenarios": {name: _scenario_op(s) for name, s in entry.by_scenario.items()},
    }
    cov = coverage_by_op.get(entry.op)
    if cov is not None:
        out["coverage"] = cov
    return out


def _as_graph(graph: StepTime | None, family: str, kind: str) -> dict[str, Any]:
    """A host-bound eager step's wall time as one captured graph, with its host and device time and how a run
    captures it on the chip's family (absent for other steps)."""
    if graph is None:
        return {}
    return {"as_graph": {"step_s": graph.step_s, "host_s": graph.host_s, "device_s": graph.device_s,
                         "how": _graph_how(family, kind)}}


def _graph_how(family: str, kind: str) -> str:
    """The APIs that capture a step as a graph, named after mappings/source_apis.yaml's diagnostics for CUDA graphs
    (NPS040: the NPU's graph class, inference only) and torch.compile (NPS084: its NPU backends), whose sources and
    caveats are there."""
    if family != "npu":
        # the eager kernels captured; torch.compile(mode="reduce-overhead") fuses them too: its own scenario mode
        return "CUDA graphs (or --scenario ...,mode=reduce-overhead for torch.compile's)"
    if kind == "train":  # NPU graphs are inference-only (NPS040's fix)
        return "torch.compile: NPS084"
    # "torch.npu.NPUGraph / graph / make_graphed_callables": the class, by its short name
    graphs = load_source_apis().diagnostics["NPS040"].npu.split(" / ")[0].rsplit(".", 1)[-1]
    return f"{graphs} or torch.compile: NPS040, NPS084"


def audit_to_json(report: AuditReport) -> dict[str, Any]:
    inv = report.inventory
    m = report.model
    cov_by_op = report.coverage.by_op if report.coverage else {}
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "npuport_version": npuport.__version__,
        "model": {
            "name": m.name,
            "origin": m.origin,
            "entry": m.entry,
            "parameters": m.parameters,
            "dtype": m.dtype,
            "dtype_source": m.dtype_source,
            "attn": m.attn,
            "max_positions": m.max_positions,
        },
        "chip": inv.chip.name,
        "chip_description": inv.chip.description,
        "chip_rates": {"memory_bandwidth": inv.chip.memory_bandwidth, "matrix_peak": dict(inv.chip.matrix_peak),
                       "vector_peak": inv.chip.vector_peak},
        "baseline_chip": report.baseline_chip,
        "torch_npu": report.torch_npu,
        "environment": {"torch": torch.__version__, "python": platform.python_version()},
        "scenarios": [
            {
                **sc.to_json(),
                "calls": inv.totals[sc.name].calls,
                "compute_calls": inv.totals[sc.name].compute_calls,
                "flops": inv.totals[sc.name].flops,
                "bytes": inv.totals[sc.name].bytes,
                "estimated_time_s": inv.totals[sc.name].time_s,
                "estimated_time_s_by_chip": inv.totals[sc.name].time_by_chip,
                "roofline_time_s": inv.totals[sc.name].roofline_s,
                **({"step": step.to_json() | _as_graph(inv.totals[sc.name].as_graph, inv.chip.family, sc.kind)}
                   if (step := inv.totals[sc.name].step) is not None else {}),
                **({"memory": report.memory.by_scenario[sc.name].to_json()}
                   if report.memory and sc.name in report.memory.by_scenario else {}),
                **({"communication": report.comm.by_scenario[sc.name].to_json()}
                   if report.comm and sc.name in report.comm.by_scenario else {}),
            }
            for sc in report.scenarios
        ],
        "ops": [op_json(e, cov_by_op) for e in inv.ops],
        "modules": [
            {
                "module": me.module,
                "type": me.module_type,
                "time_share": me.time_share,
                "scenarios": {sc: {"calls": c, "estimated_time_s": t, "time_share": s} for sc, (c, t, s) in me.by_scenario.items()},
            }
            for me in inv.modules
        ],
        "native_composites": sorted(inv.native_composites),
        "assumptions": report.assumptions,
        "notes": report.notes,
        "failed_scenarios": [{"name": n, "reason": r} for n, r in report.failed],
    }
    if report.comm is not None:
        data["distributed"] = report.comm.to_json()
    if report.findings.findings is not None:
        data["findings"] = [_finding_json(f) for f in report.findings.findings]
    if report.findings.scan is not None:
        data["source_scan"] = report.findings.scan.to_json()
    if report.coverage is not None:
        data["coverage"] = report.coverage.summary
    if report.advice is not None:
        data["fusions"] = report.advice.fusions
        data["routes"] = report.advice.routes
        data["route_weights"] = report.advice.weights
    data["answers"] = answers(data)  # the summary's questions, findings counted by their impact
    return data


def _finding_json(f: Finding) -> dict[str, Any]:
    """A finding with its share of each scenario's time: `time_share` is the largest of them, this says whose."""
    out = f.to_json()
    per: dict[str, float] = dict(f.total_share) if f.total_share is not None else {}
    if f.total_share is None:
        for e in f.evidence:
            if e.time_share is not None:
                per[e.scenario] = per.get(e.scenario, 0.0) + e.time_share
    out["time_share_by_scenario"] = per
    return out
