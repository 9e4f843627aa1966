"""The audit as one markdown document (for issues, PRs and migration plans): the whole document of
npuport.render.audit_doc, every table in full, the long detail tables folded in <details> blocks."""

from __future__ import annotations

import re
from typing import Any

from npuport.render.audit_doc import Section, build
from npuport.render.table import Table

_TAG = re.compile(r"<([A-Za-z/!?][^<>\n]*)>")
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def _text(text: str) -> str:
    """Model text as markdown shows it: `<Func>` in a module path is not an HTML tag (GitHub would drop it), so a
    `<` that would open a tag and its `>` are written as entities; a `<` before a space or a digit ('max() < C') is
    text already and stays as it is."""
    return _TAG_OPEN.sub("&lt;", _TAG.sub(r"&lt;\1&gt;", text))


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|").replace("\n", "<br>")


def _code_cell(text: str) -> str:
    """Each line its own code span (a <br> inside one would show as text); a code span shows < and > as they are,
    and a table still needs its | escaped."""
    return "<br>".join(f"`{line.replace('|', chr(92) + '|')}`" if line else "" for line in text.split("\n"))


def _table(t: Table) -> list[str]:
    out = [f"**{_text(t.title)}**", ""] if t.title else []
    out.append("| " + " | ".join(_cell(c.name) for c in t.columns) + " |")
    out.append("|" + "|".join("---:" if c.align == "right" else "---" for c in t.columns) + "|")
    for row in t.rows:
        out.append("| " + " | ".join(_code_cell(v) if c.kind == "code" and v else _cell(v) for c, v in zip(t.columns, row)) + " |")
    return out + [""]


def _section(sec: Section, level: int) -> list[str]:
    out = [f"{'#' * level} {_text(sec.title)}", ""]
    out += [f"{_text(line)}  " for line in sec.lines]
    if sec.lines:
        out.append("")
    if sec.items:
        out += [_text(sec.items_title), ""] + [f"{i}. {_text(item)}" for i, item in enumerate(sec.items, 1)] + [""]
    for t in sec.tables:
        out += _table(t)
    out += [f"- {_text(line.strip())}" if not line.startswith("  ") else f"  - {_text(line.strip())}" for line in sec.after]
    if sec.after:
        out.append("")
    for t in sec.details:
        out += ["<details>", f"<summary>{_text(t.title)} ({len(t.rows)} rows)</summary>", ""]
        out += _table(Table(t.id, "", t.columns, t.rows))
        out += ["</details>", ""]
    return out


def render_markdown(data: dict[str, Any], top: int = 0) -> str:
    """Every section in full (`top` is accepted for symmetry with the text view; markdown never cuts a table)."""
    sections = build(data, top=0, show_views=False)
    lines = _section(sections[0], 1)
    for sec in sections[1:]:
        lines += _section(sec, 2)
    lines.append(f"*{data['schema']}, npuport {data['npuport_version']}; torch {data['environment']['torch']}*")
    return "\n".join(lines).rstrip() + "\n"
