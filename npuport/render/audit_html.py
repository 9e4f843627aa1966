"""The audit as one self-contained HTML file (no scripts, no external assets) with a time-share chart."""

from __future__ import annotations

import html
from typing import Any

from npuport.render.fmt import fmt_share, fmt_si, fmt_time, short_source

_COLORS = {"hot": "#c0392b", "medium": "#d68910", "cold": "#95a5a6"}


def _chart(data: dict[str, Any], top: int = 20) -> str:
    """Horizontal bars of each op's time share per scenario, drawn as inline SVG."""
    ops = [o for o in data["ops"] if o["kind"] == "compute"][:top]
    names = [s["name"] for s in data["scenarios"]]
    bar_h, gap, label_w, width = 10, 6, 300, 420
    row_h = bar_h * len(names) + gap
    height = row_h * len(ops) + 30
    shades = ["#2e86c1", "#28b463", "#884ea0", "#ca6f1e"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 80}" height="{height}" role="img" aria-label="time share per op">']
    for i, n in enumerate(names):
        parts.append(f'<rect x="{label_w + i * 110}" y="2" width="10" height="10" fill="{shades[i % 4]}"/>'
                     f'<text x="{label_w + i * 110 + 14}" y="11" font-size="11">{html.escape(n)}</text>')
    for r, o in enumerate(ops):
        y0 = 24 + r * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y0 + bar_h * len(names) / 2 + 4}" font-size="11" text-anchor="end">{html.escape(o["op"])}</text>')
        for i, n in enumerate(names):
            share = o["scenarios"].get(n, {}).get("time_share", 0.0)
            w = max(share * width, 0.5 if share else 0)
            parts.append(f'<rect x="{label_w}" y="{y0 + i * bar_h}" width="{w:.1f}" height="{bar_h - 1}" fill="{shades[i % 4]}">'
                         f'<title>{html.escape(o["op"])} {n}: {fmt_share(share)}</title></rect>')
            if share:
                parts.append(f'<text x="{label_w + w + 3:.1f}" y="{y0 + i * bar_h + 8}" font-size="9">{fmt_share(share)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(data: dict[str, Any], top: int = 60) -> str:
    esc = html.escape
    m = data["model"]
    names = [s["name"] for s in data["scenarios"]]
    rows = []
    for o in [o for o in data["ops"] if o["kind"] == "compute"][:top]:
        per = "".join(f"<td>{fmt_share(o['scenarios'][n]['time_share'])} {o['scenarios'][n]['bound']}</td>" if n in o["scenarios"] else "<td></td>" for n in names)
        shapes = "<br>".join(esc(f"{n}: {sc['shapes'][0]['inputs']}") for n, sc in o["scenarios"].items() if sc["shapes"])
        cov = (o.get("coverage") or {}).get("status", "")
        rows.append(f"<tr><td><code>{esc(o['op'])}</code></td><td style='color:{_COLORS.get(o['class'], '#000')}'>{o['class']}</td>"
                    f"<td>{fmt_share(o['time_share'])}</td>{per}<td>{o['calls']:,}</td><td>{shapes}</td><td>{esc(', '.join(o['dtypes']))}</td>"
                    f"<td>{'<br>'.join(esc(x) for x in o['modules'][:3])}</td><td>{esc(short_source(o['sources'][0]) if o['sources'] else '')}</td>"
                    f"<td>{'yes' if o['fused'] else 'no'}</td><td>{esc(cov)}</td></tr>")
    scen = "".join(f"<tr><td>{esc(s['name'])}</td><td>{s['batch']} x {s['seq']}{((', no cache, re-runs ' + str(s['past'] + s['seq']) + ' tokens') if s.get('recompute') else (', cache ' + str(s['past']))) if s['past'] else ''}</td>"
                   f"<td>{s['compute_calls']:,}</td><td>{fmt_si(s['flops'], 'FLOP')}</td><td>{fmt_si(s['bytes'], 'B')}</td>"
                   f"<td>{fmt_time(s['estimated_time_s'])}</td></tr>" for s in data["scenarios"])
    scen += "".join(f"<tr><td>{esc(f['name'])}</td><td colspan='5'><b>could not be traced</b>: {esc(f['reason'])}</td></tr>"
                    for f in data.get("failed_scenarios", []))
    notes = "".join(f"<li>{esc(n)}</li>" for n in data["notes"] + [f"assumption: {a}" for a in data["assumptions"]])
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>npuport audit: {esc(m['name'])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ddd;padding:3px 6px;vertical-align:top}}th{{background:#f4f4f4}}code{{font-size:12px}}</style></head>
<body><h1>npuport audit: {esc(m['name'])}</h1>
<p>{m['parameters'] / 1e9:.3g} B parameters, {esc(m['dtype'])}; target <b>{esc(data['chip'])}</b> ({esc(data['chip_description'])}); schema {esc(data['schema'])}</p>
<table><tr><th>scenario</th><th>shape</th><th>compute ops</th><th>FLOPs</th><th>bytes</th><th>estimated time</th></tr>{scen}</table>
<h2>Time share per op</h2>{_chart(data)}
<h2>Operator inventory</h2>
<table><tr><th>op</th><th>class</th><th>share</th>{head}<th>calls</th><th>shapes</th><th>dtypes</th><th>modules</th><th>source</th><th>fused</th><th>NPU impl</th></tr>
{''.join(rows)}</table>
<h2>Notes</h2><ul>{notes}</ul></body></html>
"""
