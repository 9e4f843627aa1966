"""The audit as one self-contained, offline HTML file: the document of npuport.render.audit_doc (every section, every
table in full, the detail tables folded in <details>), with the answer first as a card, a sticky navigation bar,
inline SVG charts (npuport.render.html_charts) and tables that sort and filter through a few lines of inline script
(npuport.render.html_assets). Nothing is fetched: no external style sheet, script, font or image."""

from __future__ import annotations

import re
from html import escape
from typing import Any

from npuport.render.audit_doc import Section, actions, build
from npuport.render.html_assets import CSS, JS
from npuport.render.html_charts import coverage_chart, modules_chart, ops_chart, roofline_chart
from npuport.render.table import Column, Table

NAV = {"summary": "Answer", "scenarios": "Scenarios", "coverage": "Coverage", "findings": "Findings",
       "source_scan": "Source scan", "fusions": "Fusions", "inventory": "Operators", "modules": "Modules",
       "chips": "Chips", "routes": "Routes", "notes": "Notes"}
FILTER_MIN_ROWS = 6  # a table this long or longer gets a filter box (shorter ones have nothing to filter)
TALL_ROWS = 30  # a table longer than this scrolls inside its own box, its header sticky
_RIGHT = ' class="r"'
_TIER = {0: ("blocks or breaks", "tier0"), 1: ("runs differently", "tier1"), 2: ("performance", "tier2")}

_NUM = re.compile(r"^\s*(<)?(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[+-]?\d+)?)\s*"
                  r"(%|x|ns|µs|us|ms|s|[kMGTP]?(?:FLOP/s|FLOP|B/s|B))?(?:\s|$)")
_SCALE = {"%": 0.01, "ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def sort_value(text: str) -> float | None:
    """The number a formatted cell stands for ('3.5 ms' -> 0.0035, '1.2 TFLOP' -> 1.2e12, '12.5% C' -> 0.125,
    '1,024' -> 1024, '<0.1%' -> just under 0.001), or None when it is not a number."""
    m = _NUM.match(text)
    if not m:
        return None
    value = float(m.group(2).replace(",", ""))
    unit = m.group(3) or ""
    if unit in _SCALE:
        value *= _SCALE[unit]
    elif unit[:1] in _SCALE and unit not in ("s", "x"):
        value *= _SCALE[unit[:1]]
    return value * 0.999 if m.group(1) else value


def _e(text: object) -> str:
    return escape(str(text))


_BREAK = re.compile(r"([._/,:])(?=[^\s._/,:])")
_SEGMENT = re.compile(r"[^\s._/,:]*[._/,:]*")


def _multiline(text: str, breaks: bool = True) -> str:
    """Escaped, lines kept, and a break opportunity (<wbr>) after each . _ / , : inside a word so that module paths,
    op names and file paths wrap where a person would break them."""
    lines = [_e(line) for line in text.split("\n")]
    return "<br>".join(_BREAK.sub(r"\1<wbr>", line) if breaks else line for line in lines)


def _min_ch(col: Column, cells: list[str]) -> int:
    """Characters the column keeps unbroken: its longest segment between break opportunities, at most 16 (longer
    ones wrap anywhere). The table gets no narrower than this, so a squeezed column never wraps a short word."""
    if col.align == "right":
        return 0
    longest = max((len(seg) for c in cells for seg in _SEGMENT.findall(c)), default=0)
    return min(longest, 16)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"


def _cell(col: Column, value: str) -> str:
    if not value:
        return "<td></td>"
    if col.kind in ("class", "level", "status"):
        head, _, rest = value.partition(" ")
        body = f'<span class="tag t-{_slug(head)}">{_e(head)}</span>' + (f" {_multiline(rest)}" if rest else "")
        return f"<td>{body}</td>"
    if col.kind == "code":
        return f"<td><code>{_multiline(value)}</code></td>"
    if col.align == "right":
        v = sort_value(value)
        attr = f' data-v="{v:.6g}"' if v is not None else ""
        return f'<td class="r"{attr}>{_multiline(value, breaks=False)}</td>'
    return f"<td>{_multiline(value)}</td>"


def table_html(t: Table, title: str | None = None) -> str:
    """One table, every row: a filter box the script shows (long tables), the table in a box that scrolls sideways
    when it is wider than the page."""
    heading = t.title if title is None else title
    head = ""
    for i, c in enumerate(t.columns):
        ch = _min_ch(c, [r[i] for r in t.rows if i < len(r)])
        style = f' style="min-width:calc({ch}ch + 18px)"' if ch > 4 else ""
        head += f'<th scope="col"{_RIGHT if c.align == "right" else ""}{style}>{_e(c.name)}</th>'
    rows = "".join("<tr>" + "".join(_cell(c, v) for c, v in zip(t.columns, row)) + "</tr>" for row in t.rows)
    tools = ""
    if len(t.rows) >= FILTER_MIN_ROWS:
        label = f"filter the rows of {heading or t.id}"
        tools = (f'<div class="tools" hidden><input type="search" placeholder="Filter {len(t.rows)} rows" '
                 f'aria-label="{_e(label)}" aria-controls="tbl-{_e(t.id)}"><span class="count"></span></div>')
    tall = " tall" if len(t.rows) > TALL_ROWS else ""
    h3 = f"<h3>{_e(heading)}</h3>" if heading else ""
    return (f'<div class="tbl">{h3}{tools}<div class="scroll{tall}"><table id="tbl-{_e(t.id)}" class="data">'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></div>")


def _lines(lines: list[str]) -> str:
    if len(lines) > 2:
        return '<ul class="lines">' + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>"
    return "".join(f"<p>{_e(line)}</p>" for line in lines)


def _after(lines: list[str]) -> str:
    """The lines after the tables; an indented line belongs to the line above it."""
    if not lines:
        return ""
    out, open_sub = ['<ul class="after">'], False
    for i, line in enumerate(lines):
        if line.startswith("  "):
            if not open_sub:
                out.append("<ul>")
                open_sub = True
            out.append(f"<li>{_e(line.strip())}</li>")
            continue
        if open_sub:
            out.append("</ul></li>")
            open_sub = False
        elif i:
            out.append("</li>")
        out.append(f"<li>{_e(line)}")
    out.append("</ul></li></ul>" if open_sub else "</li></ul>")
    return "".join(out)


def _details(tables: list[Table]) -> str:
    return "".join(f'<details id="details-{_e(t.id)}"><summary>{_e(t.title)} <span class="n">({len(t.rows)} rows)</span>'
                   f"</summary>{table_html(t, '')}</details>" for t in tables)


def _tone(question: str, answer: str) -> str:
    a = answer.lower()
    if a.startswith("not checked"):
        return "muted"
    if question.startswith("Runs on"):
        return "bad" if answer.startswith("NO") else "warn" if a.startswith(("at risk", "yes, with")) else "ok"
    errors = re.search(r"(\d+) error", answer)
    warnings = re.search(r"(\d+) warning", answer)
    if errors and int(errors.group(1)):
        return "bad"
    if warnings and int(warnings.group(1)):
        return "warn"
    return "ok" if errors or warnings else "muted"


def _answer_tile(line: str) -> str:
    question, sep, answer = line.partition("? ")
    if not sep:
        return f"<p>{_e(line)}</p>"
    head, colon, rest = answer.partition(": ")
    if not colon:
        head, _, rest = answer.partition(" (")
        rest = f"({rest}" if rest else ""
    return (f'<div class="answer {_tone(question, answer)}"><div class="q">{_e(question)}?</div>'
            f'<div class="a"><b>{_e(head)}</b>{": " if colon else " "}{_e(rest)}</div></div>')


def _actions(data: dict[str, Any], sec: Section) -> str:
    """The top actions as an ordered list: what, where (file:line), the fix, tagged by risk tier. Formatted from
    audit_doc.actions when it yields the section's items, else the items as they are."""
    acts = actions(data)[:len(sec.items)]
    out = [f"<h3>{_e(sec.items_title)}</h3>", '<ol class="actions">']
    if [a.line() for a in acts] == sec.items:
        for a in acts:
            label, cls = _TIER.get(a.tier, ("", "tier2"))
            where = f' at <span class="where">{_e(a.where)}</span>' if a.where else ""
            out.append(f'<li><span class="tier {cls}">{_e(label)}</span><b>{_e(a.what)}</b>{where}: '
                       f'<span class="fix">{_e(a.fix)}</span></li>')
    else:
        out += [f"<li>{_e(item)}</li>" for item in sec.items]
    return "".join(out + ["</ol>"])


def _summary(data: dict[str, Any], sec: Section) -> str:
    m = data["model"]
    meta = [f"{m['parameters'] / 1e9:.3g} B parameters", str(m["dtype"]), f"target {data.get('chip_description') or data['chip']}"]
    if data.get("baseline_chip"):
        meta.append(f"compared with {data['baseline_chip']}")
    meta += [f"{len(data['scenarios'])} scenario(s)", f"npuport {data['npuport_version']}"]
    tiles = [line for line in sec.lines if line.startswith(("Runs on", "Computes differently", "Slow paths"))]
    others = [line for line in sec.lines if line not in tiles]
    body = [f'<section id="sec-{_e(sec.id)}"><h1>{_e(sec.title)}</h1><p class="meta">{_e(" · ".join(meta))}</p>',
            '<div class="card">', '<div class="answers">' + "".join(_answer_tile(t) for t in tiles) + "</div>"]
    body += [f'<p class="alert">{_e(line)}</p>' if line.startswith("Scenario ") else f"<p>{_e(line)}</p>" for line in others]
    if sec.items:
        body.append(_actions(data, sec))
    for t in sec.tables:
        body.append(table_html(t, t.title or "Estimated step time per scenario"))
    body.append(_after(sec.after))
    body.append(_details(sec.details))
    return "".join(body) + "</div></section>"


def _charts(data: dict[str, Any], sec_id: str) -> str:
    if sec_id == "coverage":
        return coverage_chart(data)
    if sec_id == "inventory":
        return ops_chart(data) + roofline_chart(data)
    if sec_id == "modules":
        return modules_chart(data)
    return ""


def _section(data: dict[str, Any], sec: Section) -> str:
    body = [f'<section id="sec-{_e(sec.id)}"><h2>{_e(sec.title)}</h2>', _lines(sec.lines)]
    if sec.items:
        body.append(_actions(data, sec))
    body.append(_charts(data, sec.id))
    body += [table_html(t) for t in sec.tables]
    body.append(_after(sec.after))
    body.append(_details(sec.details))
    return "".join(body) + "</section>"


def render_html(data: dict[str, Any], top: int = 0) -> str:
    """Every section in full (`top` is accepted for symmetry with the text view; HTML never cuts a table)."""
    sections = build(data, top=0, show_views=False)
    m = data["model"]
    nav = "".join(f'<a href="#sec-{_e(s.id)}">{_e(NAV.get(s.id, s.title))}</a>' for s in sections)
    parts = [_summary(data, sections[0])] + [_section(data, s) for s in sections[1:]]
    env = data.get("environment") or {}
    foot = f"{data['schema']}, npuport {data['npuport_version']}; torch {env.get('torch', '?')}, python {env.get('python', '?')}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>npuport audit: {_e(m['name'])} on {_e(data['chip'])}</title><style>{CSS}</style></head>\n"
            f'<body><nav class="top" aria-label="sections"><div class="in"><b>npuport audit: {_e(m["name"])}</b>{nav}</div></nav>\n'
            f"<main>\n" + "\n".join(parts) + "\n</main>\n"
            f"<footer>{_e(foot)}. One offline file: no network access, the charts are inline SVG and the "
            f"table sorting and filtering an inline script.</footer>\n"
            f"<script>{JS}</script>\n</body></html>\n")
