"""Audit stage 5: fusion opportunities (proposed / blocked) and the scored implementation routes per hot op and
chain; a hot op's route depends on its coverage status from stage 3."""

from __future__ import annotations

from typing import Any

from npuport.audit.report import AdviceStage
from npuport.cost.inventory import Inventory
from npuport.fusion import routes as routes_mod
from npuport.fusion.advice import advise, summarize
from npuport.trace.records import Trace


def advice_stage(traces: dict[str, Trace], inventory: Inventory, torch_npu: str | None,
                 coverage_by_op: dict[str, dict[str, Any]], preset: str = "default",
                 overrides: str | None = None) -> AdviceStage:
    w = routes_mod.weights(preset, overrides)
    # a scenario under torch.compile: its chains are held against the kernels Inductor makes of them
    compiled = {name: (totals.step.mode if totals.step else "compile", inventory.compiled_kernels(name))
                for name, totals in inventory.totals.items() if name in inventory.compiled}
    rows = summarize(advise(traces, inventory.chip, torch_npu, compiled))
    out = []
    for entry in inventory.ops:
        if entry.cls == "hot" and entry.kind == "compute":
            out.append(routes_mod.score_op(entry.op, (coverage_by_op.get(entry.op) or {}).get("status"), w))
    seen: set[tuple[str, str]] = set()
    # a chain's route is scored once, on an eager scenario's row where there is one: in a compiled scenario the chain
    # saves nothing against Inductor's kernels, which would make eager win for every scenario
    for row in sorted(rows, key=lambda r: r["scenario"] in compiled):
        key = (row["pattern"], row["module"])
        if key in seen or row["status"] in ("fused",):
            continue
        seen.add(key)
        out.append(routes_mod.score_fusion(row, row["unfused_time_s"], row["fused_time_s"], w))
    return AdviceStage(rows, out, w)
