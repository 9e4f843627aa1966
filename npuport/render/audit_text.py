"""The audit as the terminal shows it (rich tables), rendered from the JSON object so every format agrees."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from npuport.render.audit_sections import render_fallbacks, render_findings, render_fusions, render_routes, render_scan
from npuport.render.fmt import add_row, fmt_count, fmt_share, fmt_si, fmt_time, short_source

_CLASS_STYLE = {"hot": "bold red", "medium": "yellow", "cold": "dim"}


def _bound_letter(b: str) -> str:
    return {"compute": "C", "memory": "M"}.get(b, "-")


def shape_variation(op: dict[str, Any]) -> str:
    parts = []
    for name, sc in op["scenarios"].items():
        top = " ".join(sc["shapes"][0]["inputs"].split()[:3]) if sc["shapes"] else "-"
        more = f" +{sc['distinct_shapes'] - 1}" if sc["distinct_shapes"] > 1 else ""
        parts.append(f"{name}: {top}{more}")
    return "\n".join(parts)


def render_text(data: dict[str, Any], console: Console, top: int = 30, show_views: bool = False) -> None:
    model = data["model"]
    console.print(Text.assemble(("npuport audit", "bold"), f" — {model['name']} ({model['parameters'] / 1e9:.3g} B parameters, {model['dtype']}) on ",
                                (data["chip"], "bold"), f" ({data['chip_description']})"))
    sc_names = [s["name"] for s in data["scenarios"]]
    for s in data["scenarios"]:
        desc = f"batch {s['batch']} x {s['seq']} tokens" + (", forward + backward" if s["kind"] == "train" else "") + ((f", no cache: re-runs the {s['past'] + s['seq']}-token context" if s.get("recompute") else f", cache of {s['past']} tokens") if s["past"] else "")
        console.print(f"  {s['name']:<8} {desc}: {fmt_count(s['compute_calls'])} compute ops, {fmt_si(s['flops'], 'FLOP')}, "
                      f"{fmt_si(s['bytes'], 'B')} moved, estimated {fmt_time(s['estimated_time_s'])}")
    for f in data.get("failed_scenarios", []):
        console.print(Text.assemble(f"  {f['name']:<8} ", ("could not be traced", "bold red"), f": {f['reason']}"))
    if data.get("coverage"):
        cov = data["coverage"]
        counts = ", ".join(f"{k} {v['ops']} ({fmt_share(v['time_share'])})" for k, v in cov["by_status"].items())
        console.print(f"  torch_npu {cov['version']}: {counts}")
        if cov.get("earliest_without_fallback"):
            console.print(f"  earliest checked-in torch_npu with no CPU fallback for this model: {cov['earliest_without_fallback']}")
    ops = [o for o in data["ops"] if show_views or o["kind"] == "compute"]
    shown = ops if top <= 0 else ops[:top]
    table = Table(title="Operator inventory (by estimated time share, mean over scenarios)", show_lines=False, header_style="bold")
    table.add_column("op", no_wrap=True)
    table.add_column("class")
    table.add_column("share", justify="right")
    for n in sc_names:
        table.add_column(n, justify="right")
    table.add_column("calls", justify="right")
    table.add_column("shapes by scenario (top; +distinct)")
    table.add_column("dtype")
    table.add_column("modules")
    table.add_column("fused")
    has_cov = any("coverage" in o for o in ops)
    if has_cov:
        table.add_column("NPU impl")
    for o in shown:
        cells = [o["op"], Text(o["class"], style=_CLASS_STYLE.get(o["class"], "")), fmt_share(o["time_share"])]
        for n in sc_names:
            sc = o["scenarios"].get(n)
            cells.append(f"{fmt_share(sc['time_share'])} {_bound_letter(sc['bound'])}" if sc else "")
        mods = o["modules"][:2]
        more = len(o["modules"]) - len(mods)
        where = short_source(o["sources"][0]) if o["sources"] else ""
        cells += [fmt_count(o["calls"]), shape_variation(o), ",".join(o["dtypes"]),
                  "\n".join(mods) + (f"\n+{more} more" if more > 0 else "") + (f"\n@ {where}" if where else ""),
                  "yes" if o["fused"] else "no"]
        if has_cov:
            cov = o.get("coverage") or {}
            cells.append(cov.get("status", "?") + (f" ({'/'.join(cov['paths'])})" if cov.get("paths") else ""))
        add_row(table, *cells)
    console.print(table)
    hidden = len(ops) - len(shown)
    views = [o for o in data["ops"] if o["kind"] == "view"]
    tail = []
    if hidden > 0:
        tail.append(f"{hidden} more ops not shown (--top 0 shows all)")
    if views and not show_views:
        tail.append(f"{sum(o['calls'] for o in views):,} view/metadata calls of {len(views)} ops hidden (--show-views)")
    if tail:
        console.print("  " + "; ".join(tail))
    console.print("  per scenario: time share and bound (C compute, M memory) on the roofline of " + data["chip"])
    flips = [o for o in data["ops"] if o["bound_flips"] and o["class"] != "cold"]
    if flips:
        console.print(Text("Bottleneck changes between scenarios", style="bold"))
        for o in flips[:12]:
            b = ", ".join(f"{n} {sc['bound']}" for n, sc in o["scenarios"].items() if sc["bound"] != "none")
            console.print(f"  {o['op']}: {b}")
    mt = Table(title="Modules (layer indices merged)", header_style="bold")
    mt.add_column("module")
    mt.add_column("type")
    mt.add_column("share", justify="right")
    for n in sc_names:
        mt.add_column(n, justify="right")
    for me in data["modules"][:12]:
        add_row(mt, me["module"], me["type"], fmt_share(me["time_share"]),
                   *[fmt_share(me["scenarios"][n]["time_share"]) if n in me["scenarios"] else "" for n in sc_names])
    console.print(mt)
    ct = Table(title="Estimated step time per chip (roofline lower bound)", header_style="bold")
    ct.add_column("chip")
    for n in sc_names:
        ct.add_column(n, justify="right")
    chips = list(data["scenarios"][0]["estimated_time_s_by_chip"])
    for chip in chips:
        add_row(ct, Text(chip, style="bold" if chip == data["chip"] else ""), *[fmt_time(s["estimated_time_s_by_chip"][chip]) for s in data["scenarios"]])
    console.print(ct)

    render_fallbacks(data, console)
    render_findings(data, console)
    render_scan(data, console)
    render_fusions(data, console)
    render_routes(data, console)
    for note in data["notes"]:
        console.print(f"  note: {note}", style="yellow")
    for a in data["assumptions"]:
        console.print(f"  assumption: {a}", style="dim")
