"""`npuport audit`: parse options, run the audit, render it."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click
from rich.console import Console

from npuport import api
from npuport.api import AuditOptions, ModelSpec, fail_on, static_scan
from npuport.cli.common import handle_errors, progress_printer, write_output
from npuport.cost.roofline import default_chip
from npuport.errors import NpuportError
from npuport.render.audit_csv import render_csv
from npuport.render.audit_html import render_html
from npuport.render.audit_markdown import render_markdown
from npuport.render.audit_text import render_scan, render_text

FORMATS = ("text", "json", "markdown", "csv", "html")
_EXT = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".html": "html", ".htm": "html", ".txt": "text"}
DEFAULT_CHIP = default_chip()  # mappings/hardware.yaml default_target


@click.command("audit")
@click.argument("model", required=False)
@click.option("--hf", "hf_config", metavar="CONFIG.json", help="Build a Hugging Face architecture from its config.json (no weights, no download).")
@click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model (or MODEL as file.py:function).")
@click.option("--scenario", "scenarios", multiple=True, metavar="NAME[:batch=N,seq=N,past=N]",
              help="train, prefill, decode (repeatable or joined with +). Default: all three.")
@click.option("--chip", default=DEFAULT_CHIP, show_default=True, help="Target chip from mappings/hardware.yaml.")
@click.option("--torch-npu", "torch_npu", metavar="VERSION", help="torch_npu release to check coverage against (default: newest checked in).")
@click.option("--dtype", help="Trace in this dtype (float32, float16, bfloat16). Default: the config's, else bfloat16 for --hf; as built for a model file.")
@click.option("--attn", default="auto", show_default=True, help="Attention implementation for --hf builds: auto (SDPA where the class has it, else its own default), sdpa, eager.")
@click.option("--hf-part", "hf_part", type=click.Choice(["text", "full"]), default="text", show_default=True, help="For a composite (multimodal) config: its text decoder, or the full model.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: from -o's extension, else text).")
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE (refuses to replace an existing file without --force).")
@click.option("--force", is_flag=True, help="Allow -o to replace an existing file.")
@click.option("--top", default=30, show_default=True, help="Ops shown in the text table (0: all).")
@click.option("--show-views", is_flag=True, help="Also list view / metadata ops in the text table.")
@click.option("--preset", default="default", show_default=True, help="Route-scoring preset: default, fast-poc, long-term-training.")
@click.option("--weights", metavar="DIM=W,...", help="Override route-scoring weights, e.g. performance=0.5,dev_time=0.1.")
@click.option("--static-only", is_flag=True, help="Only scan the source for CUDA-specific APIs (AST, nothing executed).")
@click.option("--suppress", "suppressions", multiple=True, metavar="ID[-ID]|PATTERN", help="Hide findings by id, range or wildcard (NPB001, NPS010-NPS019, NPB0*). Repeatable.")
@click.option("--fail-on", "fail_on_level", type=click.Choice(["error", "warning", "info"]), help="Exit 1 when a finding at this level or above remains.")
@click.option("--reproducibility", is_flag=True, help="Flag nondeterministic ops (for runs that must reproduce bit for bit).")
@click.option("--quiet", is_flag=True, help="No progress messages on stderr.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@handle_errors
def audit(model: str | None, hf_config: str | None, entry: str | None, scenarios: tuple[str, ...], chip: str,
          torch_npu: str | None, dtype: str | None, attn: str, hf_part: str, fmt: str | None, output: str | None, force: bool,
          top: int, show_views: bool, preset: str, weights: str | None, static_only: bool, suppressions: tuple[str, ...],
          fail_on_level: str | None, reproducibility: bool, quiet: bool, debug: bool) -> None:
    """Inventory every op MODEL runs, on fake tensors: module, source line, shapes per scenario, dtypes, FLOPs,
    bytes, roofline time share on the target chip, and hot / medium / cold class.

    MODEL is a model.py defining build_model() and example_inputs(scenario) (see docs/model-files.md).
    """
    if (model is None) == (hf_config is None):
        raise NpuportError("give exactly one model", "MODEL (a model.py) or --hf CONFIG.json", f"MODEL={model!r}, --hf={hf_config!r}")
    fmt = fmt or (_EXT.get(Path(output).suffix.lower(), "text") if output else "text")
    inputs = [Path(p) for p in (model.split(":")[0] if model else None, hf_config) if p]
    if output:  # fail before the (long) audit, not after it
        target = Path(output)
        if target.exists() and not force:
            raise NpuportError(f"{target} already exists", "a new output path, or --force to replace it", str(target))
    if static_only:
        _static(model, hf_config, fmt, output, force, suppressions, fail_on_level, inputs, quiet)
        return
    with contextlib.redirect_stdout(sys.stderr):  # what the user's model prints must not corrupt the report on stdout
        report, data = api.audit(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn, part=hf_part),
                             AuditOptions(scenarios=scenarios, chip=chip, torch_npu=torch_npu, route_preset=preset,
                                          route_weights=weights, suppress=suppressions, reproducibility=reproducibility),
                             progress=progress_printer(not quiet))
    text = _render(data, fmt, top, show_views)
    if output:
        write_output(output, text, force, protected=inputs)
        if not quiet:
            click.echo(f"npuport: wrote {fmt} report to {output}", err=True)
    else:
        sys.stdout.write(text)
    for name, reason in report.failed:
        click.echo(f"npuport: scenario {name} could not be traced: {reason}", err=True)
    _exit_on(report.findings.items(), fail_on_level)
    if report.failed:
        raise click.exceptions.Exit(1)


def _exit_on(items: list, level: str | None) -> None:
    if fail_on(items, level):
        click.echo(f"npuport: findings at level {level} or above remain (--fail-on {level})", err=True)
        raise click.exceptions.Exit(1)


def _static(model: str | None, hf_config: str | None, fmt: str, output: str | None, force: bool,
            suppressions: tuple[str, ...], level: str | None, inputs: list[Path], quiet: bool) -> None:
    if model is None:
        raise NpuportError("--static-only scans source files", "a model.py (not --hf)", f"--hf {hf_config}")
    rep = static_scan(model, suppressions)
    if fmt == "json":
        text = json.dumps(rep.to_json(), indent=1) + "\n"
    elif fmt == "text":
        console = Console(record=True, width=200, file=open("/dev/null", "w"))
        render_scan({"source_scan": rep.to_json()}, console)
        text = console.export_text()
    else:
        raise NpuportError("--static-only writes text or json", "--format text or json", fmt)
    if output:
        write_output(output, text, force, protected=inputs)
    else:
        sys.stdout.write(text)
    _exit_on(list(rep.diagnostics), level)


def _render(data: dict, fmt: str, top: int, show_views: bool) -> str:
    if fmt == "json":
        return json.dumps(data, indent=1, sort_keys=False) + "\n"
    if fmt == "markdown":
        return render_markdown(data)
    if fmt == "csv":
        return render_csv(data)
    if fmt == "html":
        return render_html(data)

    console = Console(record=True, width=200 if not sys.stdout.isatty() else None, file=open("/dev/null", "w"))
    render_text(data, console, top=top, show_views=show_views)
    return console.export_text(styles=sys.stdout.isatty())
