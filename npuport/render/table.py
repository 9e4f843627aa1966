"""A table every view can show: columns with an alignment, a priority (which the terminal drops first when it is
narrow) and a kind (for colour); rows of plain strings. `fit` renders one for a terminal of a given width so that
no cell is cut to an ellipsis: columns are added by priority while every shown column can be as wide as its longest
word, numbers keep their units, and a table whose essential column does not fit becomes a list."""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table as RichTable
from rich.text import Text


@dataclass
class Column:
    name: str
    align: str = "left"  # left | right
    priority: int = 0  # 0: always shown; otherwise the terminal adds columns by rising priority while they fit
    kind: str = ""  # what the cells hold, for styling: class | level | status | code | "" (plain)
    essential: bool = False  # when it does not fit the terminal, the table becomes a list rather than drop it


@dataclass
class Table:
    id: str
    title: str
    columns: list[Column]
    rows: list[list[str]]
    limit: int | None = None  # rows the terminal shows (None: all); markdown and HTML always show all
    more: str = ""  # what the terminal says about the rows it leaves out ("{n}" is their count)


_STYLE = {
    "class": {"hot": "bold red", "medium": "yellow", "cold": "dim"},
    "level": {"error": "bold red", "warning": "yellow", "info": "dim"},
    "status": {"cpu-fallback": "bold red", "cpu-path": "bold red", "unsupported": "bold red", "conditional": "yellow",
               "proposed": "green", "blocked": "yellow",
               "FAIL": "bold red", "ok": "green", "error": "bold red", "fail": "bold red", "warn": "yellow"},
}


def cell(text: str, kind: str) -> Text:
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
        rt.add_row(*(cell(row[i], t.columns[i].kind) for i in keep))
    return rt


def _as_list(t: Table, rows: list[list[str]], keep: list[int]) -> RichTable:
    """A table too wide for the terminal as a list: each row's first cell, then its other always-shown cells each
    after its column's name (a number without its column would not say which scenario or chip it is for), then one
    indented line per other column worth showing (the essential ones and those that fitted)."""
    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    base = [i for i, c in enumerate(t.columns) if c.priority == 0]
    for row in rows:
        first = [cell(_flat(row[base[0]]), t.columns[base[0]].kind)] if base and row[base[0]] else []
        named = [Text(f"{t.columns[i].name}: ").append_text(cell(_flat(row[i]), t.columns[i].kind))
                 for i in base[1:] if row[i]]
        head = Text("  ").join(first + named)
        grid.add_row("-", head)
        for i in _list_extra(t, keep):
            if row[i]:
                grid.add_row("", Text(f"{t.columns[i].name}: " + _flat(row[i])))
    return grid


def _flat(text: str) -> str:
    """A cell's lines as one (a list line wraps by itself)."""
    return " ".join(text.split())


def _list_extra(t: Table, keep: list[int]) -> list[int]:
    """The columns a list shows on lines of their own: those that fitted, the essential ones, and every column at
    least as important as an essential one (a list has the room a table lacked)."""
    bar = max((c.priority for c in t.columns if c.essential), default=0)
    return [i for i, c in enumerate(t.columns) if c.priority and (c.essential or i in keep or c.priority <= bar)]


@dataclass
class Fitted:
    """A table as the terminal shows it, and what it leaves out: rows beyond the table's limit and the names of the
    columns that did not fit the width."""

    table: RichTable
    hidden_rows: int
    hidden_columns: list[str]


def fit_table(t: Table, width: int, wide: bool) -> Fitted:
    """The table with the columns that fit `width` (all when `wide`), the rows it leaves out and the columns it drops.

    Columns of priority 0 are always shown; the others are added by rising priority while every shown column can
    still be as wide as its longest word, so a cell wraps between words and is never cut to an ellipsis. When an
    essential column (a module, a source line) does not fit, the table is printed as a list instead."""
    rows = t.rows if t.limit is None else t.rows[: t.limit]
    hidden = len(t.rows) - len(rows)
    if wide:
        keep = list(range(len(t.columns)))
        return Fitted(_rich(t, keep, rows, _widths(t, keep, rows, 10**6) or {}), hidden, [])
    keep = [i for i, c in enumerate(t.columns) if c.priority == 0]
    for i in sorted((i for i, c in enumerate(t.columns) if c.priority), key=lambda i: t.columns[i].priority):
        if _widths(t, sorted(keep + [i]), rows, width) is not None:
            keep = sorted(keep + [i])
    widths = _widths(t, keep, rows, width)
    if widths is None or any(c.essential and i not in keep for i, c in enumerate(t.columns)):
        shown = set(keep) | set(_list_extra(t, keep))
        return Fitted(_as_list(t, rows, keep), hidden, [c.name for i, c in enumerate(t.columns) if i not in shown])
    return Fitted(_rich(t, keep, rows, widths), hidden, [c.name for i, c in enumerate(t.columns) if i not in keep])


def fit(t: Table, width: int, wide: bool) -> tuple[RichTable, int]:
    """fit_table's table and the number of rows it leaves out."""
    got = fit_table(t, width, wide)
    return got.table, got.hidden_rows
