"""`npuport kernels list | build | test | perf`: the Ascend C kernels, their build, CPU checks and estimates.

A thin shell over npuport.ascendc_kernels (registry, build, checks, estimates). Exit codes: 0 ok, 1 a check
failed, 2 a user error or a missing toolchain (one `error:` line on stderr, no traceback).
"""

from __future__ import annotations

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
from npuport.cli.common import handle_errors
from npuport.cost.roofline import default_chip, get_chip
from npuport.errors import NpuportError

DEFAULT_CHIP = default_chip()  # mappings/hardware.yaml default_target


@click.group("kernels")
def kernels() -> None:
    """Ascend C kernels (rms_norm, add_rms_norm, layer_norm, flash_attention): list, build, test, perf."""


@kernels.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@handle_errors
def list_cmd(as_json: bool) -> None:
    """The kernels, the fusion patterns they replace, their constraints and what was verified where."""
    if as_json:
        rows = [{"name": s.name, "op": s.op, "replaces": list(s.replaces), "constraints": s.constraints.as_dict(),
                 "verified": dict(s.verified), "source": str(s.source)} for s in KERNELS.values()]
        click.echo(json.dumps(rows, indent=2, default=list))
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
    Console(width=160).print(table)


@kernels.command("build")
@click.option("--kernel", "names", multiple=True, help="Kernel to build (repeatable; default all).")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Build directory.")
@click.option("--dry-run", is_flag=True, help="Print the commands without running them (compiles nothing).")
@handle_errors
def build_cmd(names: tuple[str, ...], out: Path | None, dry_run: bool) -> None:
    """Compile the kernels with the CANN toolchain (bisheng) and build the torch_npu extension."""
    out = out or default_build_dir()
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


@kernels.command("test")
@click.option("--kernel", "names", multiple=True, help="Kernel to check (repeatable; default all).")
@handle_errors
def test_cmd(names: tuple[str, ...]) -> None:
    """Schedule reference vs float64 golden on awkward shapes, on CPU (not the compiled kernel)."""
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


@kernels.command("perf")
@click.option("--chip", default=DEFAULT_CHIP, show_default=True, help="Chip profile (mappings/hardware.yaml).")
@handle_errors
def perf_cmd(chip: str) -> None:
    """Estimated time of each kernel at Llama-2-7B shapes (a model, not a measurement)."""
    profile = get_chip(chip)
    for est in llama7b_estimates(profile):
        click.echo(est.render())
    click.echo("assumptions: " + "; ".join(dict.fromkeys(a for e in llama7b_estimates(profile)
                                                         for a in e.assumptions if not a.startswith("tiling"))))
