"""Text sections for what later stages attach to the audit: fusion advice, implementation routes, CPU fallbacks,
behaviour findings and the source scan (also shown alone by `audit --static-only`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from npuport.render.fmt import add_row, fmt_share, fmt_si, fmt_time, short_source


def render_fusions(data: dict[str, Any], console: Console, limit: int = 20) -> None:
    rows = data.get("fusions")
    if not rows:
        return
    scenario = next((s["name"] for s in data["scenarios"] if s["kind"] != "decode"), data["scenarios"][0]["name"])
    rows = [r for r in rows if r["scenario"] == scenario]
    t = Table(title=f"Fusion opportunities ({scenario} forward; saving on {data['chip']}, roofline estimate)", header_style="bold")
    for col in ("pattern", "matches", "status", "module", "replacement", "saves", "why / blocked by"):
        t.add_column(col, justify="right" if col in ("matches", "saves") else "left")
    for r in rows[:limit]:
        rep = r["replacement"]
        why = r["note"] or ""
        if r["blocked_by"]:
            b = r["blocked_by"][0]
            why = f"{b['tensor']} is also read by {b['other_reader']} ({short_source(b['at'])})"
        elif r["rejected"] and not why:
            why = "; ".join(f"{x['op']}: {', '.join(x['reasons'])}" for x in r["rejected"][:2])
        saves = f"{fmt_time(r['time_saved_s'])}, {fmt_si(r['bytes_saved'], 'B')}, {r['launches_saved']} launches" if r["launches_saved"] else "-"
        add_row(t, r["pattern"], str(r["matches"]), r["status"], r["module"], rep["op"] if rep else "none fits", saves, why)
    console.print(t)


def render_routes(data: dict[str, Any], console: Console, limit: int = 12) -> None:
    routes = data.get("routes")
    if not routes:
        return
    w = data.get("route_weights", {})
    t = Table(title="Implementation routes (score 0-10; weights " + ", ".join(f"{k} {v:.0%}" for k, v in w.items()) + ")", header_style="bold")
    t.add_column("target")
    t.add_column("recommended")
    t.add_column("candidates (score)")
    for r in routes[:limit]:
        target = r["target"] + (f" @ {r['module']}" if r.get("module") else "")
        cands = ", ".join(f"{c['route']} {c['score']:.1f}" + ("" if c["dimensions"]["coverage"]["score"] > 0 else " (n/a)") for c in r["candidates"])
        add_row(t, target, r["recommended"] or "-", cands)
    console.print(t)
    console.print("  performance and coverage are evidence (roofline, coverage data, constraint checks); the other dimensions are judgements stated in mappings/routes.yaml", style="dim")


def render_fallbacks(data: dict[str, Any], console: Console) -> None:
    cov = data.get("coverage")
    if not cov or not cov.get("cpu_fallback"):
        return
    switch = f"set {cov['fallback_error_env']}=1 to make this an error" if cov.get("fallback_error_env") else "this release has no switch to make it an error"
    t = Table(title=f"Ops that leave the NPU on torch_npu {cov['version']} ({switch})", header_style="bold")
    for col in ("op", "status", "calls", "where", "bytes host<->device", "transfer estimate"):
        t.add_column(col)
    for f in cov["cpu_fallback"]:
        where = (f["modules"][0] if f["modules"] else "") + (f" @ {short_source(f['sources'][0])}" if f["sources"] else "")
        add_row(t, f["op"], f["status"], str(f["calls"]), where, fmt_si(f["bytes_crossing_host"], "B"), fmt_time(f["estimated_transfer_s"]))
    console.print(t)


_LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def render_findings(data: dict[str, Any], console: Console, limit: int = 25) -> None:
    findings = data.get("findings")
    if findings is None:
        return
    t = Table(title=f"Behaviour differences on {data['chip']} ({len(findings)} findings)", header_style="bold")
    for col in ("id", "level", "impact", "title", "calls", "share", "where", "fix"):
        t.add_column(col)

    for f in findings[:limit]:
        ev = f["evidence"][0] if f["evidence"] else {}
        where = (ev.get("module") or "(root)") + (f" @ {short_source(ev['source'])}" if ev.get("source") else "") if ev else ""
        share = fmt_share(f["time_share"]) if f.get("time_share") is not None else ""
        add_row(t, f["id"], Text(f["level"], style=_LEVEL_STYLE.get(f["level"], "")), f["impact"], f["title"], str(f["calls"]), share, where, f["fix"])
    console.print(t)
    if len(findings) > limit:
        console.print(f"  {len(findings) - limit} more findings in --format json")


def render_scan(data: dict[str, Any], console: Console, limit: int = 25) -> None:
    scan = data.get("source_scan")
    if not scan:
        return
    s = scan["summary"]
    t = Table(title="CUDA-specific source references (static scan, nothing executed)", header_style="bold")
    for col in ("id", "location", "message", "NPU equivalent", "transfer_to_npu"):
        t.add_column(col)
    for d in scan["diagnostics"][:limit]:
        add_row(t, d["id"], f"{short_source(d['file'])}:{d['line']}:{d['col']}", d["message"], d["npu_equivalent"], "auto" if d["auto"] else "manual")
    if scan["diagnostics"]:
        console.print(t)
    console.print(f"  {s['found']} CUDA reference(s) in {s['files']} file(s): {s['handled_automatically']} handled automatically by "
                  f"transfer_to_npu ({s['automatic_percent']}%), {s['manual']} need a manual change, {s['migratable']} rewritten by `npuport migrate`")
