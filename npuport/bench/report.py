"""The bench report as JSON (schema npuport.bench/1, docs/bench.md) and as a rich text table."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.markup import escape
from rich.table import Table

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
        "device": {"name": rep.device, "description": rep.device_name, "chip": rep.chip, "clock": rep.clock},
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


def _t(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.1f} ns"


def _rate(r: CaseResult) -> str:
    flops_s, bytes_s = r.achieved()
    if r.bound == "compute" or (r.bound is None and r.case.matrix):
        return f"{flops_s / 1e12:.1f} TFLOP/s" if flops_s else "-"
    return f"{bytes_s / 1e9:.0f} GB/s" if bytes_s else (f"{flops_s / 1e12:.2f} TFLOP/s" if flops_s else "-")


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def _others(r: CaseResult) -> str:
    parts = []
    for c in r.candidates:
        if c.name == "eager":
            continue
        parts.append(f"{c.name} {c.ratio_to_eager:.2f}x" if c.ratio_to_eager else f"{c.name} n/a")
    return ", ".join(parts) or "-"


def render_text(rep: BenchReport, console: Any) -> None:
    chip = rep.chip or "no chip profile"
    console.print("[bold]npuport bench[/bold] " + escape(f"{rep.model.get('name')} / {rep.scenario} on {rep.device} ({rep.device_name}; "
                  f"roofline {chip}; {rep.clock})"))
    table = Table(show_lines=False, pad_edge=False)
    for col, just in (("op [input shapes]", "left"), ("dtype", "left"), ("calls", "right"), ("median", "right"),
                      ("spread", "right"), ("estimate", "right"), ("meas/est", "right"), ("achieved", "right"),
                      ("roofline", "right"), ("vs measured ceiling", "right"), ("candidates (speedup vs eager)", "left"),
                      ("kernel path", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rep.results:
        m = r.eager
        kc = r.kernel_check
        kernel = "-" if kc is None or kc.verdict == "none" else f"{kc.verdict}: {kc.path or '?'}"
        if r.error:
            table.add_row(escape(r.case.label), r.case.dtype, str(r.case.calls), "error", "", "", "", "", "", "", escape(r.error[:80]), "")
            continue
        vs = r.vs_estimate()
        table.add_row(escape(r.case.label), r.case.dtype, str(r.case.calls), _t(m.stats.median if m else None),
                      _pct(m.stats.spread if m else None), _t(r.case.estimated_s), f"{vs:.2f}x" if vs else "-",
                      _rate(r), _pct(r.attainment()), _pct(r.attainment(measured=True)), escape(_others(r)), escape(kernel))
    console.print(table)
    if rep.e2e is not None:
        console.print(escape(f"end-to-end: {rep.e2e.verdict()}"))
        for n in rep.e2e.notes:
            console.print(escape(f"  note: {n}"))
    for s in rep.skipped:
        console.print(escape(f"skipped: {s.op} [{s.signature}]: {s.reason}"))
    for w in rep.warnings:
        console.print("[yellow]warning:[/yellow] " + escape(w))
    for n in rep.notes:
        console.print(escape(f"note: {n}"))
    under = (rep.clock_state.get("under_load") or {}).get("sm_clock_mhz_under_load")
    before = rep.clock_state.get("before") or {}
    if before.get("clocks.max.sm"):
        console.print(f"clocks: SM max {before['clocks.max.sm']} MHz; under load {under or 'not sampled'}; "
                      f"before: SM {before.get('clocks.sm')} MHz, {before.get('pstate', '')}, reasons {before.get('event_reasons', '?')}")
    if rep.emitted:
        console.print(f"wrote {len(rep.emitted)} repro script(s) to {rep.emitted[0].rsplit('/', 1)[0]}")
