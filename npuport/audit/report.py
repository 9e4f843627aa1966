"""The audit's typed report: one dataclass per stage, composed by `npuport.audit.pipeline.run_audit`.

Stages run in this order and each reads only what the earlier ones returned:
trace (TraceStage) -> cost (CostStage) -> coverage (CoverageStage, NPU targets) -> findings (FindingsStage)
-> advice (AdviceStage, which reads the coverage status of each hot op); one rank of a distributed job adds its
communication (CommStage) after coverage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npuport.audit.comm_stage import CommStage
from npuport.cost.inventory import Inventory
from npuport.cost.memory import ScenarioMemory
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario
from npuport.rules.engine import Finding
from npuport.scan.source_scan import Diagnostic, ScanReport
from npuport.trace.records import Trace


@dataclass
class TraceStage:
    """What ran: the scenarios as they really ran, one trace each, and the scenarios that could not be traced."""

    scenarios: list[Scenario]
    traces: dict[str, Trace]
    failed: list[tuple[str, str]]  # (scenario, one-line reason)
    notes: list[str]
    timings: dict[str, float]


@dataclass
class CostStage:
    """The inventory on the target chip and the assumptions its numbers rest on."""

    inventory: Inventory
    notes: list[str]
    assumptions: list[str]


@dataclass
class CoverageStage:
    """Each compute op's status on one torch_npu release, and the summary the JSON form carries as `coverage`."""

    version: str
    by_op: dict[str, dict[str, Any]]
    summary: dict[str, Any]
    notes: list[str]


@dataclass
class FindingsStage:
    """Behaviour findings over the traces (None off NPU targets) and the source scan (None without source files)."""

    findings: list[Finding] | None = None
    scan: ScanReport | None = None

    def items(self) -> list[Finding | Diagnostic]:
        """Every finding and source diagnostic, for --fail-on."""
        return list(self.findings or []) + list(self.scan.diagnostics if self.scan else [])


@dataclass
class AdviceStage:
    """Fusion opportunities and the scored implementation routes."""

    fusions: list[dict[str, Any]]
    routes: list[dict[str, Any]]
    weights: dict[str, float]


@dataclass
class MemoryStage:
    """Per scenario: what the device holds, whether it fits each chip, and what to change when it does not."""

    by_scenario: dict[str, ScenarioMemory]
    optimizer: str
    master_weights: bool
    notes: list[str]


@dataclass
class AuditReport:
    model: LoadedModel
    scenarios: list[Scenario]
    inventory: Inventory
    traces: dict[str, Trace]
    torch_npu: str | None
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    failed: list[tuple[str, str]] = field(default_factory=list)
    baseline_chip: str | None = None  # the CUDA chip the model comes from, for the step-time comparison
    coverage: CoverageStage | None = None
    findings: FindingsStage = field(default_factory=FindingsStage)
    advice: AdviceStage | None = None
    memory: MemoryStage | None = None
    comm: CommStage | None = None  # one rank of a distributed job: its collectives (npuport.audit.comm_stage)
