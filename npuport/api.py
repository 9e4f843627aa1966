"""The Python entry points behind each command, so everything the CLI does can be done from Python."""

from __future__ import annotations

from typing import Any, Callable

from npuport.audit import AuditReport, run_audit
from npuport.errors import NpuportError
from npuport.loading import LoadedModel, load_hf_config, load_model_file
from npuport.report.audit_json import audit_to_json
from npuport.scenarios import parse_scenarios


def load_target(model: str | None = None, hf_config: str | None = None, entry: str | None = None,
                dtype: str | None = None, attn: str | None = None, fake: bool = True, part: str = "text") -> LoadedModel:
    """The model the user named, built on fake tensors (audit) or real ones (`fake=False`: parity, bench)."""
    if hf_config:
        return load_hf_config(hf_config, dtype=dtype, attn=attn, fake=fake, part=part)
    if model:
        return load_model_file(model, entry=entry, fake=fake, dtype=dtype)
    raise NpuportError("no model given", "a model.py or --hf CONFIG.json", "nothing")


def audit_model(model: str | None = None, hf_config: str | None = None, entry: str | None = None,
                scenarios: list[str] | None = None, chip: str = "Ascend910B", torch_npu: str | None = None,
                dtype: str | None = None, attn: str | None = None, part: str = "text",
                progress: Callable[[str], None] | None = None, route_preset: str = "default",
                route_weights: str | None = None, suppress: list[str] | tuple[str, ...] = (),
                reproducibility: bool = False) -> tuple[AuditReport, dict[str, Any]]:
    """Run the audit and return the report object and its JSON form (schema npuport.audit/1)."""
    from npuport.roofline import get_chip
    from npuport.routes import weights

    get_chip(chip)  # reject bad options before loading anything
    weights(route_preset, route_weights)
    if torch_npu is not None:
        from npuport import coverage

        if torch_npu not in coverage.available_versions():
            raise NpuportError(f"no coverage data for torch_npu {torch_npu}", "one of " + ", ".join(coverage.available_versions()), torch_npu)
    parsed = parse_scenarios(scenarios)
    target = load_target(model, hf_config, entry, dtype, attn, part=part)
    if suppress:
        from npuport.rules import suppress as _suppress

        _suppress([], list(suppress))  # reject a malformed pattern before the audit runs
    report = run_audit(target, parsed, chip=chip, torch_npu=torch_npu, progress=progress,
                       route_preset=route_preset, route_weights=route_weights, reproducibility=reproducibility)
    if suppress:
        apply_suppressions(report, list(suppress))
    return report, audit_to_json(report)


def apply_suppressions(report: AuditReport, patterns: list[str]) -> None:
    """Drop findings and source diagnostics whose id matches (NPB001, NPS010-NPS019, NPB0*); note how many."""
    from npuport.rules import suppress

    ex = report.extras
    before = len(ex.get("finding_objects", [])) + len(getattr(ex.get("scan_object"), "diagnostics", []))
    if "finding_objects" in ex:
        ex["finding_objects"] = suppress(ex["finding_objects"], patterns)
    if "scan_object" in ex:
        ex["scan_object"].diagnostics = suppress(ex["scan_object"].diagnostics, patterns)
    after = len(ex.get("finding_objects", [])) + len(getattr(ex.get("scan_object"), "diagnostics", []))
    if before != after:
        report.notes.append(f"{before - after} finding(s) suppressed by {', '.join(patterns)}")


def static_scan(model: str, suppress: list[str] | tuple[str, ...] = ()):  # -> ScanReport
    """Only the CUDA-API source scan of model.py and the local modules it imports (never executed)."""
    from npuport.rules import suppress as _suppress
    from npuport.rules.source_scan import scan

    report = scan(model.split(":")[0] if ":" in model and not model.endswith(".py") else model)
    if suppress:
        report.diagnostics = _suppress(report.diagnostics, list(suppress))
    return report
