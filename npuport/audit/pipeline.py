"""The audit pipeline: trace -> cost -> coverage -> findings -> advice, each stage a function of what the earlier
ones returned (npuport.audit.report), composed here into one AuditReport. The target chip comes in resolved
(a ChipProfile): the caller checks the user's chip name once, before anything loads."""

from __future__ import annotations

import time
from typing import Callable

from npuport.audit.advice import advice_stage
from npuport.audit.comm_stage import comm_stage
from npuport.audit.cost_stage import cost_stage
from npuport.audit.coverage import coverage_stage
from npuport.audit.findings import apply_suppressions, findings_stage
from npuport.audit.memory_stage import memory_stage
from npuport.audit.report import AuditReport
from npuport.audit.trace_stage import trace_stage
from npuport.cost.memory import default_optimizer
from npuport.cost.roofline import ChipProfile, get_chip
from npuport.cost.timing import as_mode
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario

Progress = Callable[[str], None]


def run_audit(
    model: LoadedModel,
    scenarios: list[Scenario],
    target: ChipProfile,
    torch_npu: str | None = None,
    progress: Progress | None = None,
    route_preset: str = "default",
    route_weights: str | None = None,
    reproducibility: bool = False,
    suppress: list[str] | tuple[str, ...] = (),
    baseline_chip: str | None = None,
    optimizer: str | None = None,
    master_weights: bool = False,
    reuse: bool = True,
) -> AuditReport:
    traced = trace_stage(model, scenarios, progress, reuse=reuse)
    timings = traced.timings
    if progress:
        progress("costing ops and steps (mappings/timing.yaml)")
    t0 = time.perf_counter()
    cost = cost_stage(traced.traces, target, torch_npu, {sc.name: as_mode(sc.mode) for sc in traced.scenarios})
    timings["inventory_s"] = time.perf_counter() - t0
    report = AuditReport(model, traced.scenarios, cost.inventory, traced.traces, torch_npu, traced.notes + cost.notes,
                         cost.assumptions, timings, failed=traced.failed, baseline_chip=baseline_chip)
    if target.family == "npu" or torch_npu:
        t0 = time.perf_counter()
        report.coverage = coverage_stage(cost.inventory, torch_npu)
        report.torch_npu = report.coverage.version
        report.notes.extend(report.coverage.notes)
        timings["coverage_s"] = time.perf_counter() - t0
    if model.distributed is not None:
        t0 = time.perf_counter()
        baseline = get_chip(baseline_chip) if baseline_chip else None
        report.comm = comm_stage(model, report.scenarios, report.traces, report.inventory, target, baseline,
                                 report.torch_npu or (torch_npu if torch_npu else None))
        if report.comm is not None:
            report.notes.extend(report.comm.notes)
        timings["communication_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.memory = memory_stage(model, report.scenarios, report.traces, report.inventory, optimizer or default_optimizer(),
                                 master_weights)
    report.notes.extend(report.memory.notes)
    timings["memory_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.findings = findings_stage(model, report.scenarios, report.traces, report.inventory, report.torch_npu, reproducibility)
    timings["rules_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.advice = advice_stage(report.traces, report.inventory, report.torch_npu,
                                 report.coverage.by_op if report.coverage else {}, route_preset, route_weights)
    timings["fusion_s"] = time.perf_counter() - t0
    if suppress:
        note = apply_suppressions(report.findings, list(suppress))
        if note:
            report.notes.append(note)
    return report
