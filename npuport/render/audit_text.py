"""The audit as the terminal shows it: the answer first, then each section of the document (npuport.render.audit_doc),
with the columns chosen for the console's width so that no cell the user needs is cut to an ellipsis: 80 columns
get a compact table, wider terminals more columns, `wide` all of them."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from npuport.render.audit_doc import Section, Table, build, scan_section, summary

_STYLE = {
    "class": {"hot": "bold red", "medium": "yellow", "cold": "dim"},
    "level": {"error": "bold red", "warning": "yellow", "info": "dim"},
    "status": {"cpu-fallback": "bold red", "unsupported": "bold red", "proposed": "green", "blocked": "yellow"},
}


def _cell(text: str, kind: str) -> Text:
    style = _STYLE.get(kind, {}).get(text.split(" ")[0], "")
    return Text(text, style=style)


_GAP = 3  # SIMPLE_HEAD box without edges: one space of padding either side of a one-space column divider


def _words_width(texts: list[str]) -> int:
    return max((len(w) for t in texts for w in t.split()), default=1)


def _line_width(texts: list[str]) -> int:
    return max((len(line) for t in texts for line in t.splitlines() or [""]), default=1)


def _widths(t: Table, keep: list[int], rows: list[list[str]], width: int) -> dict[int, int] | None:
    """Each kept column's width: its natural width when all fit, else at least its longest word with the rest of
    the room shared out by how much each column wants; None when even the longest words do not fit."""
    cells = {i: [t.columns[i].name] + [r[i] for r in rows] for i in keep}
    # a number keeps its unit (right-aligned columns never wrap their cells); other cells wrap between words
    lo = {i: max(_words_width(c[:1]), _line_width(c[1:])) if t.columns[i].align == "right" else _words_width(c)
          for i, c in cells.items()}
    hi = {i: max(lo[i], _line_width(c)) for i, c in cells.items()}
    room = width - _GAP * (len(keep) - 1)
    if sum(lo.values()) > room:
        return None
    if sum(hi.values()) <= room:
        return hi
    extra, want = room - sum(lo.values()), sum(hi[i] - lo[i] for i in keep)
    return {i: lo[i] + (hi[i] - lo[i]) * extra // want for i in keep}


def _rich(t: Table, keep: list[int], rows: list[list[str]], widths: dict[int, int]) -> RichTable:
    rt = RichTable(title=t.title or None, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                   pad_edge=False, expand=False, show_edge=False)
    for i in keep:
        c = t.columns[i]
        rt.add_column(c.name, justify="right" if c.align == "right" else "left", overflow="fold", width=widths[i])
    for row in rows:
        rt.add_row(*(_cell(row[i], t.columns[i].kind) for i in keep))
    return rt


def _as_list(t: Table, rows: list[list[str]], keep: list[int]) -> RichTable:
    """A table too wide for the terminal as a list: each row's always-shown cells on one line, then one indented
    line per other column worth showing (the essential ones and those that fitted)."""
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    base = [i for i, c in enumerate(t.columns) if c.priority == 0]
    extra = [i for i, c in enumerate(t.columns) if c.priority and (c.essential or i in keep)]
    for row in rows:
        head = Text("  ").join(_cell(row[i], t.columns[i].kind) for i in base if row[i])
        grid.add_row("-", head)
        for i in extra:
            if row[i]:
                grid.add_row("", Text(f"{t.columns[i].name}: " + " ".join(row[i].split())))
    return grid


def _table(t: Table, width: int, wide: bool) -> tuple[RichTable, int]:
    """The table with the columns that fit `width` (all when `wide`), and how many rows it leaves out.

    Columns of priority 0 are always shown; the others are added by rising priority while every shown column can
    still be as wide as its longest word, so a cell wraps between words and is never cut to an ellipsis. When an
    essential column (a module, a source line) does not fit, the table is printed as a list instead."""
    rows = t.rows if t.limit is None else t.rows[: t.limit]
    if wide:
        keep = list(range(len(t.columns)))
        return _rich(t, keep, rows, _widths(t, keep, rows, 10**6) or {}), len(t.rows) - len(rows)
    keep = [i for i, c in enumerate(t.columns) if c.priority == 0]
    for i in sorted((i for i, c in enumerate(t.columns) if c.priority), key=lambda i: t.columns[i].priority):
        if _widths(t, sorted(keep + [i]), rows, width) is not None:
            keep = sorted(keep + [i])
    widths = _widths(t, keep, rows, width)
    if widths is None or any(c.essential and i not in keep for i, c in enumerate(t.columns)):
        return _as_list(t, rows, keep), len(t.rows) - len(rows)
    return _rich(t, keep, rows, widths), len(t.rows) - len(rows)


def print_section(sec: Section, console: Console, wide: bool = False) -> None:
    if sec.id == "summary":
        console.print(Text(sec.title, style="bold"))
    else:
        console.print()
        console.print(Text(sec.title, style="bold underline"))
    for line in sec.lines:
        console.print(Text(line))
    if sec.items:
        console.print(Text(sec.items_title))
        grid = RichTable.grid(padding=(0, 1))
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(overflow="fold")
        for i, item in enumerate(sec.items, 1):
            grid.add_row(f"  {i}.", Text(item))
        console.print(grid)
    for t in sec.tables:
        rt, hidden = _table(t, console.width, wide)
        console.print(rt)
        if hidden > 0 and t.more:
            console.print(Text("  " + t.more.format(n=hidden), style="dim"))
    if sec.after or sec.hints:
        grid = RichTable.grid(padding=(0, 0))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for line in sec.after + sec.hints:
            indent = len(line) - len(line.lstrip(" "))
            grid.add_row(" " * (2 + indent), Text(line.strip(), style="dim"))
        console.print(grid)


def render_text(data: dict[str, Any], console: Console, top: int = 30, show_views: bool = False, wide: bool = False) -> None:
    for sec in build(data, top=top, show_views=show_views):
        print_section(sec, console, wide)


def render_summary(data: dict[str, Any], console: Console) -> None:
    """Only the first screen (the answer)."""
    print_section(summary(data), console)


def render_scan(data: dict[str, Any], console: Console, wide: bool = False) -> None:
    """The CUDA-API source scan alone (`audit --static-only`)."""
    sec = scan_section(data)
    if sec is not None:
        print_section(sec, console, wide)
