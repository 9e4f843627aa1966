"""`npuport coverage show|diff|list`, the work (npuport.cli.coverage declares the options): npuport.api
coverage_show / coverage_diff / coverage_list, printed as text or JSON.

Two answers are made here from npuport.coverage.database until resolve.py gives them itself: a view or metadata op
(aten::view, aten::t, aten::size) shows status `view` (database.view_answer), and an aten::/npu:: name that no
release knows, or a namespace that neither the data nor the running torch knows, is a user error naming the nearest
names (database.check_known)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click

from npuport.api import coverage_diff, coverage_list, coverage_show
from npuport.cli.common import emit, handle_errors, pick_format, say
from npuport.cli.coverage import FORMATS
from npuport.coverage import host_paths
from npuport.coverage.database import aliases, check_known, load, releases, resolve_version, view_answer, view_kind
from npuport.coverage.names import normalize_op


def _json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def _out(text: str, data: Any, kw: dict[str, Any]) -> None:
    fmt = pick_format(kw["fmt"], kw["output"], FORMATS)
    emit(_json(data) if fmt == "json" else text, kw["output"], kw["force"], kw["quiet"], fmt, json_text=_json(data),
         json_out=kw["json_out"])


def _note(version: str | None, kw: dict[str, Any]) -> None:
    """A line on stderr when a version string stands for another release's data (an alias, an unlisted post)."""
    if version is not None:
        note = resolve_version(version).note
        if note:
            say(kw["quiet"], note)


def _viewed(r: Any) -> Any:
    """The resolution with status `view` when the op runs no kernel on the NPU (database.view_answer)."""
    answer = view_answer(r.op, r.status, load(r.version))
    if answer is None:
        return r
    detail = answer[1]
    if r.status in ("native", "composite"):
        detail = f"{detail}. Dispatch: {r.detail}"
    return replace(r, status="view", risk=None, composite_kind=None, detail=detail)


def _kind(r: Any) -> str | None:
    """'view' or 'metadata' for a row shown as a view."""
    return view_kind(r.op, load(r.version)) if r.status == "view" else None


@handle_errors
def show(op: str, version: str | None, **kw: Any) -> None:
    name = normalize_op(op)
    _note(version, kw)
    check_known(name, version)
    chosen, rows = coverage_show(name, version)
    rows = [_viewed(r) for r in rows]
    known = releases()
    picked = next(r for r in rows if r.version == chosen)
    # the kernel's recorded host paths on the release asked for (an alias has its own kernels: read, carried or none)
    release = (resolve_version(version).release if version is not None else None) or chosen
    # the answer first: the chosen (else the newest) release's status in one line, its detail, then the table
    lines = [_answer(picked, release), f"{chosen}: {picked.detail}"]
    for h in host_paths(name, release):
        lines.append(f"{release}: the kernel computes on the host CPU when {h.condition} ({h.outcome}; {h.evidence})")
    lines += ["", f"  {'torch_npu':<14}{'built':<12}{'status':<22}{'paths':<22}risk"]
    for r in rows:
        mark = "*" if r.version == chosen else " "
        built = (known[r.version].built or "-")[:10] if r.version in known else "-"
        same = aliases(r.version)
        tail = f"  [same data: {', '.join(same)}]" if same else ""
        lines.append(f"{mark} {r.version:<14}{built:<12}{(r.status + _kind_note(r)):<22}{', '.join(r.paths) or '-':<22}"
                     f"{r.risk or ''}{tail}".rstrip())
    _out("\n".join(lines) + "\n", [{**_as_dict(r), "host_paths": _host_paths(name, r)} for r in rows], kw)


def _kind_note(r: Any) -> str:
    """' (implicit)' / ' (explicit)' for a composite, ' (metadata)' for a metadata op shown as a view."""
    return f" ({r.composite_kind})" if r.composite_kind else (" (metadata)" if _kind(r) == "metadata" else "")


def _answer(r: Any, release: str) -> str:
    """One line: 'aten::mm on torch_npu 2.14.0: native via op_api, acl_op; risk: ...'. `release` is the release asked
    for; where its data is another release's (an alias), that one is named too."""
    where = release if release == r.version else f"{release} (data of {r.version})"
    paths = f" via {', '.join(r.paths)}" if r.paths else ""
    risk = f"; risk: {r.risk}" if r.risk else ""
    return f"{r.op} on torch_npu {where}: {r.status}{_kind_note(r)}{paths}{risk}"


def _host_paths(op: str, r: Any) -> list[dict[str, Any]]:
    """A row's recorded host paths (conditions.yaml), not evaluated: `coverage show` takes no call or chip."""
    if r.status != "native":
        return []
    return [{"id": h.id, "outcome": h.outcome, "condition": h.condition, "sources": list(h.sources),
             "inferred_from": h.inferred_from, "evidence": h.evidence} for h in host_paths(op, r.version)]


@handle_errors
def diff(old: str, new: str, **kw: Any) -> None:
    _note(old, kw)
    _note(new, kw)
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
    _note(version, kw)
    if status == "view":  # views resolve to native or composite underneath
        chosen, native = coverage_list("native", version)
        rows = [v for r in native + coverage_list("composite", version)[1] if (v := _viewed(r)).status == "view"]
        rows.sort(key=lambda r: r.op)
    else:
        chosen, rows = coverage_list(status, version)
        rows = [r for r in rows if _viewed(r).status == status]
    lines = []
    for r in rows:
        extra = ", ".join(r.paths) or (r.composite_kind or "")
        lines.append(f"{r.op}" + (f"  [{extra}]" if extra else ""))
    _out("".join(line + "\n" for line in lines), {"torch_npu": chosen, "status": status, "ops": [_as_dict(r) for r in rows]}, kw)
    if not kw["quiet"] and pick_format(kw["fmt"], kw["output"], FORMATS) == "text":
        click.echo(f"# {len(rows)} ops {status} on torch_npu {chosen}", err=True)


def _as_dict(r: Any) -> dict[str, Any]:
    known = releases()
    return {"op": r.op, "torch_npu": r.version, "status": r.status, "paths": list(r.paths), "risk": r.risk,
            "composite_kind": r.composite_kind, "detail": r.detail, "view_kind": _kind(r),
            "built": known[r.version].built if r.version in known else None, "same_data": aliases(r.version)}
