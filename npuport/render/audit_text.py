"""The audit as the terminal shows it: the answer first, then each section of the document (npuport.render.audit_doc),
with the columns chosen for the console's width so that no cell the user needs is cut to an ellipsis: 80 columns
get a compact table, wider terminals more columns, `wide` all of them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from npuport.render.audit_doc import Section, build, scan_section, summary
from npuport.render.table import Fitted, Table, fit_table


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
        got = fit_table(t, console.width, wide)
        console.print(got.table)
        _dim_lines(console, left_out(t, got))
    _dim_lines(console, sec.after + sec.hints)


def _dim_lines(console: Console, lines: list[str]) -> None:
    """Lines under a table, indented by two (plus their own indent), wrapped lines aligned with their first."""
    if not lines:
        return
    grid = RichTable.grid(padding=(0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        grid.add_row(" " * (2 + indent), Text(line.strip(), style="dim"))
    console.print(grid)


def left_out(t: Table, got: Fitted) -> list[str]:
    """What the terminal left out of a table and how to see it: rows beyond --top, columns beyond the width."""
    out = []
    if got.hidden_rows > 0:
        more = (t.more or "{n} more rows").format(n=got.hidden_rows)
        if got.hidden_rows == 1 and more.endswith("s"):  # "1 more row", "1 more module"
            more = more[:-1]
        out.append(f"{more} not shown: --top 0 shows all (--format markdown / html / json always do)")
    if got.hidden_columns:
        n = len(got.hidden_columns)
        out.append(f"{n} column{'s' if n > 1 else ''} left out at this width ({', '.join(got.hidden_columns)}): "
                   "--wide, or --format markdown / html")
    return out


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
