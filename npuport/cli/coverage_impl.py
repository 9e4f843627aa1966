"""`npuport coverage show|diff|list`, the work (npuport.cli.coverage declares the options): npuport.api
coverage_show / coverage_diff / coverage_list, printed as text or JSON."""

from __future__ import annotations

import json
from typing import Any

import click

from npuport.api import coverage_diff, coverage_list, coverage_show
from npuport.cli.common import emit, handle_errors, pick_format
from npuport.cli.coverage import FORMATS


def _json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def _out(text: str, data: Any, kw: dict[str, Any]) -> None:
    fmt = pick_format(kw["fmt"], kw["output"], FORMATS)
    emit(_json(data) if fmt == "json" else text, kw["output"], kw["force"], kw["quiet"], fmt, json_text=_json(data),
         json_out=kw["json_out"])


@handle_errors
def show(op: str, version: str | None, **kw: Any) -> None:
    chosen, rows = coverage_show(op, version)
    lines = [f"{rows[0].op}", f"  {'torch_npu':<14}{'status':<22}{'paths':<22}risk"]
    for r in rows:
        mark = "*" if r.version == chosen else " "
        kind = f" ({r.composite_kind})" if r.composite_kind else ""
        lines.append(f"{mark} {r.version:<14}{(r.status + kind):<22}{', '.join(r.paths) or '-':<22}{r.risk or ''}")
    picked = next(r for r in rows if r.version == chosen)
    lines.append(f"\n{chosen}: {picked.detail}")
    _out("\n".join(lines) + "\n", [_as_dict(r) for r in rows], kw)


@handle_errors
def diff(old: str, new: str, **kw: Any) -> None:
    result = coverage_diff(old, new)
    sections = {"added": result.added, "removed": result.removed, "changed": result.changed}
    data = {"old": old, "new": new, **{k: [
        {"op": c.op, "before": _as_dict(c.before), "after": _as_dict(c.after)} for c in v
    ] for k, v in sections.items()}}
    lines = [f"torch_npu {old} -> {new}: {len(result.added)} added, {len(result.removed)} removed, {len(result.changed)} changed"]
    for name, changes in sections.items():
        if changes:
            lines.append(f"\n{name}:")
            lines.extend(f"  {change.describe()}" for change in changes)
    _out("\n".join(lines) + "\n", data, kw)


@handle_errors
def list_ops(status: str, version: str | None, **kw: Any) -> None:
    chosen, rows = coverage_list(status, version)
    lines = []
    for r in rows:
        extra = ", ".join(r.paths) or (r.composite_kind or "")
        lines.append(f"{r.op}" + (f"  [{extra}]" if extra else ""))
    _out("".join(line + "\n" for line in lines), {"torch_npu": chosen, "status": status, "ops": [_as_dict(r) for r in rows]}, kw)
    if not kw["quiet"] and pick_format(kw["fmt"], kw["output"], FORMATS) == "text":
        click.echo(f"# {len(rows)} ops {status} on torch_npu {chosen}", err=True)


def _as_dict(r: Any) -> dict[str, Any]:
    return {"op": r.op, "torch_npu": r.version, "status": r.status, "paths": list(r.paths), "risk": r.risk,
            "composite_kind": r.composite_kind, "detail": r.detail}
