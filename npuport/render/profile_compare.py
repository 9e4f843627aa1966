"""`npuport profile compare` as text, markdown and CSV, from its JSON form (schema npuport.profile-compare/1): the
step split first (where the difference is: compute, communication, memory, host / idle), then the work that
changed most, worst regression first."""

from __future__ import annotations

import csv
import io
from html import escape as html_escape
from typing import Any

from rich.markup import escape

from npuport.render.audit_html import table_html
from npuport.render.fmt import fmt_time, short_kernel_name
from npuport.render.html_assets import CSS, JS
from npuport.render.table import Column, Table, fit

_PARTS = (("wall_s", "step (wall)"), ("compute_s", "compute"), ("communication_s", "communication"),
          ("memory_s", "memory (copies, fills)"), ("host_idle_s", "host / idle"))


def _side(d: dict[str, Any], wall_from: str | None = None) -> str:
    marks = d.get("step_marks", d["steps"])
    steps = f"{marks} step(s)" if marks else "no step marks"
    what = ", ".join(x for x in (d.get("model"), d.get("scenario")) if x)
    wall = f", wall: {wall_from}" if wall_from else ""
    return f"{d.get('device_name') or d.get('device') or '?'} ({d.get('source')}, {steps}{wall}){': ' + what if what else ''}"


def _ratio(r: float | None) -> str:
    return f"{r:.2f}x" if r else "-"


def answer(data: dict[str, Any]) -> list[str]:
    b = data["breakdown"]
    base, new = b["base"]["wall_s"], b["new"]["wall_s"]
    lines = [f"base: {_side(data['base'], b['base'].get('wall_from'))}", f"new:  {_side(data['new'], b['new'].get('wall_from'))}",
             f"step: {fmt_time(base)} -> {fmt_time(new)} ({_ratio(new / base if base else None)}); work matched by "
             f"{data['matched_by']}" + (f" ({data['matched_rows']} rows on both sides)" if "matched_rows" in data else "")]
    lines += [f"note: {n}" for n in data.get("notes") or []]
    worst = max(((k, v) for k, v in b["delta"].items() if k != "wall_s"), key=lambda kv: abs(kv[1]), default=None)
    if worst and worst[1]:
        label = dict(_PARTS)[worst[0]]
        lines.append(f"largest change: {label} {'+' if worst[1] > 0 else '-'}{fmt_time(abs(worst[1]))} per step")
    return lines


def breakdown_table(data: dict[str, Any]) -> Table:
    b = data["breakdown"]
    rows = [[label, fmt_time(b["base"][k]), fmt_time(b["new"][k]),
             ("+" if b["delta"][k] >= 0 else "-") + fmt_time(abs(b["delta"][k]))] for k, label in _PARTS]
    return Table("breakdown", "Per step", [Column("part", essential=True), Column("base", "right"),
                                           Column("new", "right"), Column("change", "right")], rows)


def rows_table(data: dict[str, Any], top: int) -> Table:
    """Which module and op changed comes first and stays (the module names the row: essential where rows have one),
    then the device and host change; kernel names are shortened, and a column no row fills is left out."""
    has_module = any(r["module"] for r in data["rows"])
    cols = [Column("module", kind="code", essential=True), Column("op", kind="code", essential=True),
            Column("base", "right"), Column("new", "right"), Column("change", "right"),
            Column("host change", "right", priority=1), Column("ratio", "right", priority=2),
            Column("audit expected", priority=3), Column("kernels base", kind="code", priority=4),
            Column("kernels new", kind="code", priority=4)]
    rows = [[r["module"] or "-", r["op"], fmt_time(r["base_s"]), fmt_time(r["new_s"]),
             ("+" if r["delta_s"] >= 0 else "-") + fmt_time(abs(r["delta_s"])),
             ("+" if r["host_delta_s"] >= 0 else "-") + fmt_time(abs(r["host_delta_s"])), _ratio(r["ratio"]),
             r["expected_fused"] or "-", ", ".join(short_kernel_name(k, 40) for k in r["base_kernels"]) or "-",
             ", ".join(short_kernel_name(k, 40) for k in r["new_kernels"]) or "-"]
            for r in data["rows"]]
    # a column every row leaves empty ("-": no module on either side, no kernels in a CPU run, no audit given)
    keep = [i for i, c in enumerate(cols)
            if c.name in ("op", "base", "new", "change") or (c.name == "module" and has_module)
            or any(row[i] != "-" for row in rows)]
    return Table("rows", "Per op and module, per step, worst regression first", [cols[i] for i in keep],
                 [[row[i] for i in keep] for row in rows], limit=top or None, more="{n} more rows: --top 0 for all")


def classes_table(data: dict[str, Any]) -> Table | None:
    """Per kernel class, per step: None unless both sides' artifacts have kernel classes."""
    rows = [[r["class"], str(r["base_kernels"]), fmt_time(r["base_s"]), str(r["new_kernels"]), fmt_time(r["new_s"]),
             ("+" if r["delta_s"] >= 0 else "-") + fmt_time(abs(r["delta_s"])),
             ", ".join(short_kernel_name(k, 48) for k in r["base_top"] + r["new_top"]) or "-"]
            for r in data.get("kernel_classes") or []]
    if not rows:
        return None
    return Table("kernel_classes", "Kernels per class, per step",
                 [Column("class", essential=True), Column("base kernels", "right"), Column("base", "right"),
                  Column("new kernels", "right"), Column("new", "right"), Column("change", "right"),
                  Column("costliest (base, new)", kind="code", priority=2)], rows)


def _tables(data: dict[str, Any], top: int) -> list[Table]:
    return [t for t in (breakdown_table(data), classes_table(data), rows_table(data, top)) if t is not None]


def render_text(data: dict[str, Any], console: Any, top: int, wide: bool = False) -> None:
    console.print("[bold]npuport profile compare[/bold]")
    for line in answer(data):
        console.print(escape(line))
    for t in _tables(data, top):
        table, left = fit(t, console.width, wide)
        console.print(table)
        if left:
            console.print(escape(t.more.format(n=left)))


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|")


def render_markdown(data: dict[str, Any]) -> str:
    out = ["# npuport profile compare", ""] + [f"- {_md_cell(x)}" for x in answer(data)] + [""]
    for t in _tables(data, 0):
        out += [f"## {t.title}", "", "| " + " | ".join(c.name for c in t.columns) + " |",
                "|" + "|".join("---:" if c.align == "right" else "---" for c in t.columns) + "|"]
        out += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in t.rows]
        out.append("")
    return "\n".join(out)


def render_csv(data: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["module", "op", "base_s", "new_s", "delta_s", "ratio", "host_delta_s", "base_calls", "new_calls", "base_kernels",
                "new_kernels", "expected_fused"])
    for r in data["rows"]:
        w.writerow([r["module"], r["op"], f"{r['base_s']:.9g}", f"{r['new_s']:.9g}", f"{r['delta_s']:.9g}",
                    "" if r["ratio"] is None else f"{r['ratio']:.6g}", f"{r['host_delta_s']:.9g}", f"{r['base_calls']:.6g}", f"{r['new_calls']:.6g}",
                    ";".join(r["base_kernels"]), ";".join(r["new_kernels"]), r["expected_fused"]])
    return buf.getvalue()


def render_html(data: dict[str, Any]) -> str:
    """One offline page: the answer, the per-step split, every row (sortable and filterable by the inline script)."""
    lines = "".join(f"<p>{html_escape(x)}</p>" for x in answer(data))
    tables = "".join(table_html(t) for t in _tables(data, 0))
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>npuport profile compare</title><style>{CSS}</style></head>\n"
            f'<body><main><section id="sec-compare"><h2>npuport profile compare</h2>{lines}{tables}</section></main>\n'
            f"<footer>{html_escape(data['schema'])}. One offline file.</footer><script>{JS}</script></body></html>\n")
