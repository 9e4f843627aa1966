"""The bench report as the terminal shows it, rendered from its JSON form (schema npuport.bench/1): the answer first
(how the measured hot ops compare with their estimate and roofline, whether each ran the kernel it should, the
whole step against the op sum), then the table per op and shape."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from npuport.render.table import Column, Table, fit


def _t(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.1f} ns"


def _rate(c: dict[str, Any]) -> str:
    flops_s, bytes_s = c["achieved_flops_per_s"], c["achieved_bytes_per_s"]
    if c["bound"] == "compute" or (c["bound"] is None and c["matrix"]):
        return f"{flops_s / 1e12:.1f} TFLOP/s" if flops_s else "-"
    return f"{bytes_s / 1e9:.0f} GB/s" if bytes_s else (f"{flops_s / 1e12:.2f} TFLOP/s" if flops_s else "-")


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def _others(c: dict[str, Any]) -> str:
    parts = []
    for cand in c["candidates"]:
        if cand["name"] == "eager":
            continue
        ratio = cand["speedup_vs_eager"]
        parts.append(f"{cand['name']} {ratio:.2f}x" if ratio else f"{cand['name']} n/a")
    return ", ".join(parts) or "-"


def _eager_timing(c: dict[str, Any]) -> dict[str, Any] | None:
    return next((cand["timing"] for cand in c["candidates"] if cand["name"] == "eager"), None)


def answer(data: dict[str, Any]) -> list[str]:
    """The first lines: measured against estimated, the op furthest from its roofline, the kernel paths, the step."""
    ok = [c for c in data["cases"] if not c["error"] and c["median_s"]]
    out = []
    if ok:
        measured = sum(c["median_s"] * c["calls"] for c in ok)
        estimated = sum(c["estimated_s"] * c["calls"] for c in ok if c["estimated_s"])
        on = _estimate_chip(data)
        ratio = f" ({measured / estimated:.2f}x the {on + ' ' if on else ''}roofline estimate of {_t(estimated)})" if estimated else ""
        out.append(f"measured: {len(ok)} op shapes take {_t(measured)} per step{ratio}")
        rated = [c for c in ok if c["attainment"] is not None]
        if rated:
            worst = min(rated, key=lambda c: c["attainment"])
            out.append(f"furthest from its roofline: {worst['op']} [{worst['signature']}] at {_pct(worst['attainment'])} "
                       f"({worst['calls']} calls per step)")
    failed = [c for c in data["cases"] if c["error"]]
    if failed:
        out.append(f"not timed: {len(failed)} op shape(s) failed on the device (see the table)")
    checks = [c["kernel_check"] for c in data["cases"] if c["kernel_check"] and c["kernel_check"]["verdict"] != "none"]
    bad = [k for k in checks if k["verdict"] in ("warn", "fail")]
    if checks:
        out.append(f"kernel paths: {len(checks) - len(bad)} of {len(checks)} as expected" + (f"; check: {bad[0]['message']}" if bad else ""))
    e2e = data["end_to_end"]
    if e2e is not None:
        out.append(f"whole step: {e2e['verdict']}")
    return out


def _step(data: dict[str, Any]) -> str:
    """The scenario with its sizes (a report of schema 1 before they were kept: the name alone)."""
    s = data.get("scenario_sizes")
    if not s:
        return str(data["scenario"])
    return (f"{data['scenario']} (batch {s['batch']} x {s['seq']}" + (f", past {s['past']}" if s.get("past") else "")
            + (f", {s['mode']} mode" if s.get("mode", "eager") != "eager" else "") + ")")


def _estimate_chip(data: dict[str, Any]) -> str | None:
    """The chip the estimates are for (a report from before `estimate_chip` was kept: its cases' own)."""
    return data.get("estimate_chip") or next((c.get("estimate_chip") for c in data["cases"] if c.get("estimate_chip")), None)


def render_text(data: dict[str, Any], console: Any, wide: bool = False) -> None:
    dev = data["device"]
    chip = dev["chip"] or "no chip profile"
    est = _estimate_chip(data)
    why = data.get("estimate_chip_source")
    est_text = f"; estimates {est}" + (f" ({why})" if why else "") if est else ""
    console.print("[bold]npuport bench[/bold] " + escape(f"{data['model'].get('name')} / {_step(data)} on {dev['name']} "
                  f"({dev['description']}; roofline {chip}{est_text}; {dev['clock']})"))
    for line in answer(data):
        console.print(escape(line))
    cols = [Column("op [input shapes]", kind="code"), Column("dtype", priority=2), Column("calls", "right", priority=1),
            Column("median", "right"), Column("spread", "right", priority=3), Column("estimate", "right", priority=1),
            Column("meas/est", "right"), Column("achieved", "right", priority=4), Column("roofline", "right", priority=2),
            Column("vs measured ceiling", "right", priority=5), Column("candidates (speedup vs eager)", priority=3),
            Column("kernel path", kind="status", priority=4)]
    rows = []
    for c in data["cases"]:
        label = f"{c['op']} [{c['signature']}]"
        m = _eager_timing(c)
        kc = c["kernel_check"]
        kernel = "-" if kc is None or kc["verdict"] == "none" else f"{kc['verdict']}: {kc['path'] or '?'}"
        if c["error"]:
            rows.append([label, c["dtype"], str(c["calls"]), "error", "", "", "", "", "", "", c["error"][:80], ""])
            continue
        vs = c["measured_vs_estimated"]
        rows.append([label, c["dtype"], str(c["calls"]), _t(m["median_s"] if m else None), _pct(m["spread"] if m else None),
                     _t(c["estimated_s"]), f"{vs:.2f}x" if vs else "-", _rate(c), _pct(c["attainment"]),
                     _pct(c["attainment_vs_measured_ceiling"]), _others(c), kernel])
    table, _ = fit(Table("cases", "", cols, rows), console.width, wide)
    console.print(table)
    e2e = data["end_to_end"]
    if e2e is not None:
        console.print(escape(f"end-to-end: {e2e['verdict']}"))
        for n in e2e["notes"]:
            console.print(escape(f"  note: {n}"))
    for s in data["skipped"]:
        console.print(escape(f"skipped: {s['op']} [{s['signature']}]: {s['reason']}"))
    for w in data["warnings"]:
        console.print("[yellow]warning:[/yellow] " + escape(w))
    for n in data["notes"]:
        console.print(escape(f"note: {n}"))
    clock_state = data["clock_state"]
    under = (clock_state.get("under_load") or {}).get("sm_clock_mhz_under_load")
    before = clock_state.get("before") or {}
    if before.get("clocks.max.sm"):
        console.print(f"clocks: SM max {before['clocks.max.sm']} MHz; under load {under or 'not sampled'}; "
                      f"before: SM {before.get('clocks.sm')} MHz, {before.get('pstate', '')}, reasons {before.get('event_reasons', '?')}")
    if data["emitted"]:
        console.print(f"wrote {len(data['emitted'])} repro script(s) to {data['emitted'][0].rsplit('/', 1)[0]}")
