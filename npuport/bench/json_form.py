"""The bench report as one JSON object, schema npuport.bench/1 (docs/bench.md); npuport.render.bench_text shows it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import npuport
from npuport.bench import SCHEMA
from npuport.bench.harness import CaseResult
from npuport.bench.runner import BenchReport, environment


def _case_json(r: CaseResult) -> dict[str, Any]:
    c = r.case
    flops_s, bytes_s = r.achieved()
    return {
        "op": c.op, "signature": c.signature, "inputs": [s.to_json() for s in c.inputs], "dtype": c.dtype,
        "class": c.op_class, "calls": c.calls, "module": c.module, "origin": c.origin, "notes": c.notes,
        "flops": c.flops, "bytes": c.bytes, "matrix": c.matrix,
        "estimated_s": c.estimated_s, "estimate_chip": c.estimate_chip,
        "median_s": r.median_s, "measured_vs_estimated": r.vs_estimate(),
        "achieved_flops_per_s": flops_s, "achieved_bytes_per_s": bytes_s,
        "roofline_s": r.roofline_s, "bound": r.bound, "attainment": r.attainment(),
        "measured_ceiling_roofline_s": r.measured_roofline_s, "attainment_vs_measured_ceiling": r.attainment(measured=True),
        "rotating_sets": r.sets,
        "candidates": [x.to_json() for x in r.candidates],
        "kernel_check": r.kernel_check.to_json() if r.kernel_check else None,
        "error": r.error,
    }


def bench_to_json(rep: BenchReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "npuport_version": npuport.__version__,
        "model": rep.model,
        "scenario": rep.scenario,
        "scenario_sizes": rep.scenario_sizes,
        "device": {"name": rep.device, "description": rep.device_name, "chip": rep.chip, "clock": rep.clock},
        "estimate_chip": rep.estimate_chip, "estimate_chip_source": rep.estimate_chip_source,
        "environment": environment(),
        "options": asdict(rep.options),
        "cases": [_case_json(r) for r in rep.results],
        "skipped": [s.to_json() for s in rep.skipped],
        "end_to_end": rep.e2e.to_json() if rep.e2e else None,
        "clock_state": rep.clock_state,
        "warnings": rep.warnings,
        "notes": rep.notes,
        "emitted": rep.emitted,
    }
