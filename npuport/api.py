"""The Python facade: one function per thing the CLI does (audit, static scan, migrate, coverage, parity, bench),
so everything the CLI does can be done from Python. Nothing inside npuport imports this module."""

from __future__ import annotations

from typing import Any, Callable

from npuport import coverage
from npuport.audit.json_form import audit_to_json
from npuport.audit.pipeline import run_audit
from npuport.audit.report import AuditReport
from npuport.cost.roofline import get_chip
from npuport.errors import NpuportError
from npuport.fusion.routes import weights
from npuport.model.loading import LoadedModel, load_target
from npuport.model.scenarios import parse_scenarios
from npuport.rules import suppress as _suppress
from npuport.scan.source_scan import ScanReport, scan

__all__ = ["LoadedModel", "load_target", "audit_model", "static_scan"]


def audit_model(model: str | None = None, hf_config: str | None = None, entry: str | None = None,
                scenarios: list[str] | None = None, chip: str = "Ascend910B", torch_npu: str | None = None,
                dtype: str | None = None, attn: str | None = None, part: str = "text",
                progress: Callable[[str], None] | None = None, route_preset: str = "default",
                route_weights: str | None = None, suppress: list[str] | tuple[str, ...] = (),
                reproducibility: bool = False) -> tuple[AuditReport, dict[str, Any]]:
    """Run the audit and return the report object and its JSON form (schema npuport.audit/1)."""
    get_chip(chip)  # reject bad options before loading anything
    weights(route_preset, route_weights)
    if torch_npu is not None and torch_npu not in coverage.available_versions():
        raise NpuportError(f"no coverage data for torch_npu {torch_npu}", "one of " + ", ".join(coverage.available_versions()), torch_npu)
    parsed = parse_scenarios(scenarios)
    target = load_target(model, hf_config, entry, dtype, attn, part=part)
    if suppress:
        _suppress([], list(suppress))  # reject a malformed pattern before the audit runs
    report = run_audit(target, parsed, chip=chip, torch_npu=torch_npu, progress=progress, route_preset=route_preset,
                       route_weights=route_weights, reproducibility=reproducibility, suppress=list(suppress))
    return report, audit_to_json(report)


def static_scan(model: str, suppress: list[str] | tuple[str, ...] = ()) -> ScanReport:
    """Only the CUDA-API source scan of model.py and the local modules it imports (never executed)."""
    report = scan(model.split(":")[0] if ":" in model and not model.endswith(".py") else model)
    if suppress:
        report.diagnostics = _suppress(report.diagnostics, list(suppress))
    return report
