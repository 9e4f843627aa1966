"""`npuport coverage show|diff|list`: torch_npu coverage of aten overloads, from mappings/coverage/."""

from __future__ import annotations

import json
from typing import Any

import click

from npuport.api import STATUSES, coverage_diff, coverage_list, coverage_show
from npuport.cli.common import handle_errors

_VERSION = click.option("--torch-npu", "version", default=None, metavar="VERSION",
                        help="torch_npu release (default: the newest checked in)")
_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)


@click.group("coverage")
def coverage() -> None:
    """Which aten overloads each torch_npu release runs natively, decomposes, falls back to the CPU, or fails."""


@coverage.command("show")
@click.argument("op")
@_VERSION
@_FORMAT
@handle_errors
def show(op: str, version: str | None, fmt: str) -> None:
    """Status of OP (aten::add.Tensor, aten::mm, npu::npu_rms_norm) across all checked-in releases."""
    chosen, rows = coverage_show(op, version)
    if fmt == "json":
        click.echo(json.dumps([_as_dict(r) for r in rows], indent=2))
        return
    click.echo(f"{rows[0].op}")
    click.echo(f"  {'torch_npu':<14}{'status':<22}{'paths':<22}risk")
    for r in rows:
        mark = "*" if r.version == chosen else " "
        kind = f" ({r.composite_kind})" if r.composite_kind else ""
        click.echo(f"{mark} {r.version:<14}{(r.status + kind):<22}{', '.join(r.paths) or '-':<22}{r.risk or ''}")
    picked = next(r for r in rows if r.version == chosen)
    click.echo(f"\n{chosen}: {picked.detail}")


@coverage.command("diff")
@click.argument("old")
@click.argument("new")
@_FORMAT
@handle_errors
def diff(old: str, new: str, fmt: str) -> None:
    """Ops that start or stop running on the NPU, or otherwise change status, from OLD to NEW."""
    result = coverage_diff(old, new)
    sections = {"added": result.added, "removed": result.removed, "changed": result.changed}
    if fmt == "json":
        click.echo(json.dumps({"old": old, "new": new, **{k: [
            {"op": c.op, "before": _as_dict(c.before), "after": _as_dict(c.after)} for c in v
        ] for k, v in sections.items()}}, indent=2))
        return
    click.echo(f"torch_npu {old} -> {new}: {len(result.added)} added, {len(result.removed)} removed, "
               f"{len(result.changed)} changed")
    for name, changes in sections.items():
        if changes:
            click.echo(f"\n{name}:")
            for change in changes:
                click.echo(f"  {change.describe()}")


@coverage.command("list")
@click.option("--status", type=click.Choice(STATUSES), required=True)
@_VERSION
@_FORMAT
@handle_errors
def list_ops(status: str, version: str | None, fmt: str) -> None:
    """Every op of one release with the given status."""
    chosen, rows = coverage_list(status, version)
    if fmt == "json":
        click.echo(json.dumps({"torch_npu": chosen, "status": status,
                               "ops": [_as_dict(r) for r in rows]}, indent=2))
        return
    for r in rows:
        extra = ", ".join(r.paths) or (r.composite_kind or "")
        click.echo(f"{r.op}" + (f"  [{extra}]" if extra else ""))
    click.echo(f"# {len(rows)} ops {status} on torch_npu {chosen}", err=True)


def _as_dict(r: Any) -> dict[str, Any]:
    return {"op": r.op, "torch_npu": r.version, "status": r.status, "paths": list(r.paths), "risk": r.risk,
            "composite_kind": r.composite_kind, "detail": r.detail}
