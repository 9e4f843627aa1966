"""`npuport audit`, the work (npuport.cli.audit declares the options): flags -> api.ModelSpec + api.AuditOptions,
api.audit, rendered with npuport.render."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from npuport import api
from npuport.api import AuditOptions, ModelSpec, fail_on, static_scan
from npuport.cli.audit import given_optimizer
from npuport.cli.common import emit, export_text, handle_errors, pick_format, progress_printer, quiet_stderr, text_width
from npuport.cost.host_probe import parse_host_probe
from npuport.errors import NpuportError
from npuport.render.audit_csv import render_csv
from npuport.render.audit_html import render_html
from npuport.render.audit_markdown import render_markdown
from npuport.render.audit_text import render_scan, render_text

FORMATS = ("text", "json", "markdown", "csv", "html")


@handle_errors
def audit(model: str | None, hf_config: str | None, entry: str | None, scenarios: tuple[str, ...], chip: str,
          from_chip: str, torch_npu: str | None, dtype: str | None, attn: str, hf_part: str, fmt: str | None,
          output: str | None, json_out: str | None, force: bool, top: int, wide: bool, show_views: bool, preset: str,
          weights: str | None, static_only: bool, suppressions: tuple[str, ...], fail_on_level: str | None,
          reproducibility: bool, optimizer: str, master_weights: bool, profiles: tuple[str, ...], profile_scenario: str | None,
          world_size: int | None, rank: int, parallel: str | None, quiet: bool, debug: bool, no_reuse: bool = False,
          host_probe: str | None = None) -> None:
    fmt = pick_format(fmt, output, FORMATS)
    inputs = [Path(p) for p in (model.split(":")[0] if model else None, hf_config, *profiles) if p]
    if static_only:
        assert model is not None  # checked in npuport.cli.audit
        _static(model, fmt, output, json_out, force, suppressions, fail_on_level, inputs, quiet, wide)
        return
    # what the user's model prints must not corrupt the report on stdout: it goes to stderr, even with --quiet
    with quiet_stderr(quiet), contextlib.redirect_stdout(sys.stderr):
        report, data = api.audit(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn, part=hf_part),
                                 AuditOptions(scenarios=scenarios, chip=chip, baseline_chip=from_chip, torch_npu=torch_npu,
                                              route_preset=preset, route_weights=weights, suppress=suppressions,
                                              reproducibility=reproducibility, optimizer=given_optimizer(optimizer),
                                              master_weights=master_weights, profiles=tuple(profiles),
                                              profile_scenario=profile_scenario, world_size=world_size, rank=rank,
                                              parallel=parallel, reuse=not no_reuse,
                                              host_probe=parse_host_probe(host_probe) if host_probe else None),
                                 progress=progress_printer(not quiet))
    text = _render(data, fmt, top, show_views, wide, output)
    emit(text, output, force, quiet, fmt, json_text=json.dumps(data, indent=1) + "\n", json_out=json_out, protected=inputs)
    if debug and report.comm is not None:  # what torch warned while sharding: kept off the terminal unless asked
        for line in report.comm.distributed.library_warnings:
            click.echo(f"npuport: debug: while sharding: {line}", err=True)
    if not quiet:
        for name, reason in report.failed:
            click.echo(f"npuport: scenario {name} could not be traced: {reason}", err=True)
        for j in data.get("profile") or []:  # a profile that does not measure what the audit estimates: said here too
            if j.get("shape_note"):
                click.echo(f"npuport: warning: --profile for {j['scenario']}: {j['shape_note']}", err=True)
    _exit_on(report.findings.items(), fail_on_level, quiet)
    if report.failed:
        raise click.exceptions.Exit(1)


def _exit_on(items: list[Any], level: str | None, quiet: bool) -> None:
    if fail_on(items, level):
        if not quiet:
            click.echo(f"npuport: findings at level {level} or above remain (--fail-on {level})", err=True)
        raise click.exceptions.Exit(1)


def _static(model: str, fmt: str, output: str | None, json_out: str | None, force: bool, suppressions: tuple[str, ...],
            level: str | None, inputs: list[Path], quiet: bool, wide: bool) -> None:
    rep = static_scan(model, suppressions)
    as_json = json.dumps(rep.to_json(), indent=1) + "\n"
    if fmt == "json":
        text = as_json
    elif fmt == "text":
        console = Console(record=True, width=text_width(wide, output), file=io.StringIO())
        render_scan({"source_scan": rep.to_json()}, console, wide=wide)
        text = export_text(console, output)
    else:
        raise NpuportError("--static-only writes text or json", "--format text or json", fmt)
    emit(text, output, force, quiet, fmt, json_text=as_json, json_out=json_out, protected=inputs)
    _exit_on(list(rep.diagnostics), level, quiet)


def _render(data: dict[str, Any], fmt: str, top: int, show_views: bool, wide: bool, output: str | None) -> str:
    if fmt == "json":
        return json.dumps(data, indent=1, sort_keys=False) + "\n"
    if fmt == "markdown":
        return render_markdown(data)
    if fmt == "csv":
        return render_csv(data)
    if fmt == "html":
        return render_html(data)
    console = Console(record=True, width=text_width(wide, output), file=io.StringIO())
    render_text(data, console, top=top, show_views=show_views, wide=wide)
    return export_text(console, output)

