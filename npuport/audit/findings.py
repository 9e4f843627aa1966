"""Audit stage 4: behaviour rules over the recorded calls (NPU targets) and the CUDA-API source scan of the
model's files, with the user's suppressions applied."""

from __future__ import annotations

from npuport.audit.report import FindingsStage
from npuport.cost.inventory import Inventory
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario
from npuport.rules import evaluate, suppress
from npuport.rules.engine import Evidence, Finding
from npuport.scan.source_scan import scan
from npuport.trace.records import Trace


def findings_stage(model: LoadedModel, scenarios: list[Scenario], traces: dict[str, Trace], inventory: Inventory,
                   torch_npu: str | None, reproducibility: bool = False) -> FindingsStage:
    out = FindingsStage()
    chip = inventory.chip
    if chip.family == "npu":
        # each recorded call's share of its scenario, as the inventory costs it (a native composite's time is
        # spread over the CPU-traced calls it stands for)
        shares: dict[int, float] = {}
        for name, trace in traces.items():
            total = inventory.totals[name].time_s or 1.0
            for rc in inventory.calls[name]:
                for i in rc.indices:
                    shares[id(trace.calls[i])] = rc.time_s / total / len(rc.indices)
        findings = evaluate(traces, chip=chip.name, torch_npu=torch_npu,
                            time_share=lambda call: shares.get(id(call), 0.0), reproducibility=reproducibility)
        out.findings = findings + _recompute_findings(model, scenarios, inventory)
    if model.source_files:
        out.scan = scan(model.source_files[0])
    return out


def apply_suppressions(stage: FindingsStage, patterns: list[str]) -> str | None:
    """Drop findings and source diagnostics whose id matches (NPB001, NPS010-NPS019, NPB0*); a note of how many."""
    before = len(stage.items())
    if stage.findings is not None:
        stage.findings = suppress(stage.findings, patterns)
    if stage.scan is not None:
        stage.scan.diagnostics = suppress(stage.scan.diagnostics, patterns)
    dropped = before - len(stage.items())
    return f"{dropped} finding(s) suppressed by {', '.join(patterns)}" if dropped else None


def _recompute_findings(model: LoadedModel, scenarios: list[Scenario], inventory: Inventory) -> list[Finding]:
    """A decode with no cache re-runs the whole context for every new token: say so, with where the time goes."""
    out = []
    for sc in scenarios:
        if not sc.recompute:
            continue
        total = inventory.totals[sc.name]
        out.append(Finding(
            id="NPD001", title="decode without a KV cache", level="warning", impact="performance",
            message=(f"decode re-runs the whole {sc.past + sc.seq}-token context for each new token "
                     f"({total.flops / max(1, sc.batch):.3g} FLOPs per token per sequence, growing with the context)"),
            fix="keep the attention keys / values of past tokens (a KV cache) and run only the new token per step",
            source="npuport: traced decode inputs hold the whole context and no cache",
            evidence=[Evidence(scenario=sc.name, op="(model forward)", module="", module_type=type(model.module).__name__,
                               source=None, calls=1, time_share=1.0)],
            detection="trace", chip=inventory.chip.name,
        ))
    return out
