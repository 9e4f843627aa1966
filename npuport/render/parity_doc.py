"""Markdown and HTML parity reports with an error-per-layer chart (log scale), from the JSON form."""

from __future__ import annotations

import html
import math
import re
from typing import Any

from npuport.render.parity_text import look_at

_LAYER = re.compile(r"^(.*?\.\d+)(\.|$)")


def layer_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer ('model.layers.3', 'lm_head', ...) in execution order: the worst rel_l2 of its module outputs,
    and with a golden the worst dev and ref errors against it."""
    groups: dict[str, dict[str, Any]] = {}
    for e in data["entries"]:
        if e["io"] != "out":
            continue
        m = _LAYER.match(e["module"])
        name = m.group(1) if m else (e["module"] or "<model>")
        g = groups.setdefault(name, {"layer": name, "order": e["order"], "rel_l2": 0.0, "dev_err": None, "ref_err": None, "passed": True})
        g["rel_l2"] = max(g["rel_l2"], _num(e["metrics"]["rel_l2"]))
        if e.get("golden"):
            g["dev_err"] = max(g["dev_err"] or 0.0, _num(e["golden"]["dev_err"]))
            g["ref_err"] = max(g["ref_err"] or 0.0, _num(e["golden"]["ref_err"]))
        g["passed"] = g["passed"] and e["passed"]
    return sorted(groups.values(), key=lambda g: g["order"])


def _num(v: Any) -> float:
    return math.inf if isinstance(v, str) else float(v)


def _bar(v: float, lo: float = 1e-8, hi: float = 1.0, width: int = 30) -> str:
    if v <= 0:
        return ""
    frac = (math.log10(min(max(v, lo), hi)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return "#" * max(1, round(frac * width))


def render_markdown(data: dict[str, Any]) -> str:
    v = data["verdict"]
    lines = ["# npuport parity report", "", f"**{v['text']}**", "", "What to look at:", ""]
    lines += [f"- {line}" for line in look_at(data)] + [""]
    for s in data["sides"]:
        lines.append(f"- {s['role']}: {s['label']} ({s['source']})")
    sc = data.get("scenario") or {}
    if sc:
        mode = sc.get("mode", "eager")
        how = ("" if mode == "eager" else f", {mode} mode" if mode != "mixed"
               else ", " + ", ".join(f"{role} {m}" for role, m in (sc.get("modes") or {}).items()))
        lines.append(f"- scenario: {sc.get('name')} batch {sc.get('batch')} x {sc.get('seq')} tokens{how}")
    lines += ["", "## Error per layer (log scale, 1e-8 .. 1)", "", "```"]
    series = layer_series(data)
    rel = any(g["dev_err"] is not None for g in series)
    for g in series:
        val = g["dev_err"] if rel else g["rel_l2"]
        mark = " " if g["passed"] else "!"
        extra = f" ref {g['ref_err']:.2e}" if rel and g["ref_err"] is not None else ""
        lines.append(f"{mark} {g['layer'][:32]:32s} {val:9.2e}{extra} |{_bar(val)}")
    lines += ["```", "", ("Values: dev error against the float64 golden (ref's alongside)." if rel else
                          "Values: rel_l2 of dev against ref."), ""]
    lines += ["## Failing entries", ""]
    bad = [e for e in data["entries"] if not e["passed"] and e["io"] != "in"]
    if not bad:
        lines.append("None.")
    else:
        lines += ["| entry | dtype | rel_l2 | cosine | reason |", "|---|---|---|---|---|"]
        for e in bad[:50]:
            m = e["metrics"]
            lines.append(f"| `{e['key']}` | {e['dtype']} | {_fmt(m['rel_l2'])} | {_fmt(m['cosine'])} | {e['reason']} |")
    fd = data.get("first_divergence")
    if fd:
        lines += ["", "## First divergence", "", f"`{fd['call_key']}` ({fd['entry']}): {fd['reason']}"]
        rp = fd.get("replay")
        if rp:
            lines.append(f"\nReplay on dev with the {rp['inputs_from']} inputs: **{rp['verdict']}** the error ({rp['reason']}).")
            if rp.get("culprit_op"):
                c = rp["culprit_op"]
                lines.append(f"First failing op: `{c['op']}` in `{c['module'] or '<model>'}`: rel_l2 {_fmt(c['rel_l2'])} against float64 on its own inputs.")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    return v if isinstance(v, str) else (f"{v:.3g}" if v is not None else "-")


def render_html(data: dict[str, Any]) -> str:
    md_title = html.escape(data["verdict"]["text"])
    look = "".join(f"<li>{html.escape(line)}</li>" for line in look_at(data))
    series = layer_series(data)
    rel = any(g["dev_err"] is not None for g in series)
    svg = _svg(series, rel)
    rows = "".join(
        f"<tr class={'ok' if e['passed'] else 'bad'}><td><code>{html.escape(e['key'])}</code></td><td>{e['dtype']}</td>"
        f"<td>{_fmt(e['metrics']['rel_l2'])}</td><td>{_fmt(e['metrics']['cosine'])}</td><td>{html.escape(e['reason'])}</td></tr>"
        for e in data["entries"] if e["io"] != "in")
    sides = "".join(f"<li>{html.escape(s['role'])}: {html.escape(s['label'])} ({s['source']})</li>" for s in data["sides"])
    fd = data.get("first_divergence")
    fd_html = ""
    if fd:
        fd_html = f"<h2>First divergence</h2><p><code>{html.escape(fd['call_key'])}</code>: {html.escape(fd['reason'])}</p>"
        rp = fd.get("replay")
        if rp:
            fd_html += f"<p>Replay with {rp['inputs_from']} inputs: <b>{rp['verdict']}</b> the error. {html.escape(rp['reason'])}</p>"
            if rp.get("culprit_op"):
                fd_html += f"<p>First failing op: <code>{html.escape(rp['culprit_op']['op'])}</code></p>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>npuport parity</title>
<style>body{{font-family:sans-serif;margin:2em}} td{{padding:2px 8px}} tr.bad{{background:#fdd}} code{{font-size:90%}}</style>
</head><body><h1>npuport parity</h1><p><b>{md_title}</b></p><p>What to look at:</p><ul>{look}</ul><ul>{sides}</ul>
<h2>Error per layer</h2>{svg}{fd_html}
<h2>Entries</h2><table><tr><th>entry</th><th>dtype</th><th>rel_l2</th><th>cosine</th><th>reason</th></tr>{rows}</table>
</body></html>
"""


def _svg(series: list[dict[str, Any]], rel: bool, w: int = 900, h: int = 300) -> str:
    if not series:
        return "<p>no module outputs</p>"
    lo, hi = 1e-9, 1.0
    pad = 50
    step = (w - 2 * pad) / max(1, len(series) - 1)

    def y(v: float | None) -> float:
        v = min(max(v or lo, lo), hi)
        return pad + (h - 2 * pad) * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    def line(key: str, color: str) -> str:
        pts = " ".join(f"{pad + i * step:.1f},{y(g[key]):.1f}" for i, g in enumerate(series))
        return f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>'

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="border:1px solid #ccc">']
    for exp in range(-9, 1, 3):
        parts.append(f'<text x="4" y="{y(10.0 ** exp) + 4:.1f}" font-size="10">1e{exp}</text>'
                     f'<line x1="{pad}" x2="{w - pad}" y1="{y(10.0 ** exp):.1f}" y2="{y(10.0 ** exp):.1f}" stroke="#eee"/>')
    if rel:
        parts += [line("dev_err", "#c00"), line("ref_err", "#06c")]
        parts.append(f'<text x="{pad}" y="14" font-size="12" fill="#c00">dev vs golden</text>'
                     f'<text x="{pad + 110}" y="14" font-size="12" fill="#06c">ref vs golden</text>')
    else:
        parts.append(line("rel_l2", "#c00"))
        parts.append(f'<text x="{pad}" y="14" font-size="12" fill="#c00">rel_l2 dev vs ref</text>')
    for i, g in enumerate(series):
        if not g["passed"]:
            parts.append(f'<circle cx="{pad + i * step:.1f}" cy="{y(g["dev_err"] if rel else g["rel_l2"]):.1f}" r="4" fill="#c00"/>')
    parts.append(f'<text x="{pad}" y="{h - 8}" font-size="10">{html.escape(series[0]["layer"])} .. {html.escape(series[-1]["layer"])} (execution order)</text>')
    parts.append("</svg>")
    return "".join(parts)
