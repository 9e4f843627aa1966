"""`npuport kernels list | build | test | perf`, the work (npuport.cli.kernels declares the options): a thin shell
over npuport.ascendc_kernels (registry, build, checks, estimates); kernels perf resolves its chip with
npuport.cost.roofline.get_chip."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from npuport.ascendc_kernels.build import build_steps, find_toolchain, run_build
from npuport.ascendc_kernels.checks import run_checks
from npuport.ascendc_kernels.estimates import llama7b_estimates
from npuport.ascendc_kernels.host.loader import BUILD_DIR_ENV, default_build_dir
from npuport.ascendc_kernels.registry import KERNELS
from npuport.cli.common import emit, export_text, handle_errors, pick_format
from npuport.cli.kernels import FORMATS
from npuport.cost.roofline import get_chip
from npuport.errors import NpuportError


@handle_errors
def list_cmd(fmt: str | None, output: str | None, json_out: str | None, force: bool, quiet: bool, debug: bool) -> None:
    fmt = pick_format(fmt, output, FORMATS)
    rows = [{"name": s.name, "op": s.op, "replaces": list(s.replaces), "constraints": s.constraints.as_dict(),
             "verified": dict(s.verified), "source": str(s.source)} for s in KERNELS.values()]
    as_json = json.dumps(rows, indent=2, default=list) + "\n"
    if fmt == "json":
        emit(as_json, output, force, quiet, fmt, json_text=as_json, json_out=json_out)
        return
    table = Table(title="npuport Ascend C kernels (torch.ops.npuport.*)", show_lines=True)
    for col in ("name", "replaces", "constraints", "verified where"):
        table.add_column(col, overflow="fold")
    for s in KERNELS.values():
        c = s.constraints.as_dict()
        notes = c.pop("notes", ())
        cons = "\n".join([f"{k}: {', '.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in c.items()]
                         + [f"- {n}" for n in notes])
        table.add_row(s.name, ", ".join(s.replaces), cons, "\n".join(f"{k}: {v}" for k, v in s.verified.items()))
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(table)
    emit(export_text(console, output), output, force, quiet, fmt, json_text=as_json, json_out=json_out)


@handle_errors
def build_cmd(names: tuple[str, ...], out_dir: str | None, dry_run: bool, quiet: bool, debug: bool) -> None:
    out = Path(out_dir) if out_dir else default_build_dir()
    tc = find_toolchain()
    steps = build_steps(tc, out, list(names) or None)
    if dry_run:
        found = f"toolchain {tc.compiler}" if tc.found else "no CANN toolchain found here"
        click.echo(f"dry run: printing the commands only, nothing compiled ({found})")
        for st in steps:
            click.echo(f"# {st.what}\n{' '.join(st.argv)}")
        return
    if not tc.found:
        raise NpuportError(tc.why_not())
    run_build(steps, out)
    click.echo(f"built {len(steps)} steps into {out}; set {BUILD_DIR_ENV}={out} if that is not the default")


@handle_errors
def test_cmd(names: tuple[str, ...], quiet: bool, debug: bool) -> None:
    unknown = set(names) - set(KERNELS)
    if unknown:
        raise NpuportError("unknown kernel", "one of " + ", ".join(KERNELS), ", ".join(sorted(unknown)))
    results = run_checks(list(names) or None)
    for r in results:
        click.echo(str(r))
    failed = [r for r in results if not r]
    click.echo(f"{len(results) - len(failed)}/{len(results)} checks passed (schedule reference vs float64 golden, "
               "CPU; the compiled kernels are not exercised here)")
    if failed:
        raise click.exceptions.Exit(1)


@handle_errors
def perf_cmd(chip: str, quiet: bool, debug: bool) -> None:
    profile = get_chip(chip)
    for est in llama7b_estimates(profile):
        click.echo(est.render())
    click.echo("assumptions: " + "; ".join(dict.fromkeys(a for e in llama7b_estimates(profile)
                                                         for a in e.assumptions if not a.startswith("tiling"))))


