"""The HTML audit report without a browser: it carries every section and every table of the document (each row and
cell, as the markdown does), fetches nothing, escapes model text, and draws its charts (the browser test,
test_html_browser.py, checks the layout)."""

from __future__ import annotations

import copy
import html
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from npuport.render.audit_doc import build
from npuport.render.audit_html import render_html, sort_value


class Tables(HTMLParser):
    """Every <table id=...> of a page: its header names and its body rows as cell texts (<br> read as a newline)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, list[Any]]] = {}
        self.current: str | None = None
        self.cell: list[str] | None = None
        self.row: list[str] | None = None
        self.in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self.current = str(a["id"])
            self.tables[self.current] = {"head": [], "rows": []}
        elif self.current is None:
            return
        elif tag == "thead":
            self.in_head = True
        elif tag == "tbody":
            self.in_head = False
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.current is None:
            return
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[self.current]["head" if self.in_head else "rows"].append(self.row)
            self.row = None
        elif tag == "table":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def parse_tables(page: str) -> dict[str, dict[str, list[Any]]]:
    p = Tables()
    p.feed(page)
    return p.tables


class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skip = tag in ("script", "style", "svg") or self.skip

    def handle_endtag(self, tag: str) -> None:
        self.skip = self.skip and tag not in ("script", "style", "svg")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def page_text(page: str) -> str:
    """What a reader sees outside the charts, whitespace dropped (the layout splits a line over elements)."""
    p = Text()
    p.feed(page)
    return squeeze("".join(p.parts))


def test_every_section_and_every_table_in_full(gpt_audit: dict[str, Any]) -> None:
    page = render_html(gpt_audit)
    tables = parse_tables(page)
    text = page_text(page)
    sections = build(gpt_audit, top=0)
    for sec in sections:
        assert f'<section id="sec-{sec.id}">' in page
        assert re.search(rf"<h[12]>{re.escape(html.escape(sec.title))}</h[12]>", page), sec.title
        for t in sec.tables + sec.details:
            got = tables[f"tbl-{t.id}"]
            assert got["head"] == [[c.name for c in t.columns]], t.id
            assert got["rows"] == t.rows, t.id  # every row, every cell, as the document has it
        for line in sec.lines + sec.items + [sec.items_title] + sec.after:
            assert squeeze(line) in text, line
    # the nav links every section; the detail tables are folded
    for sec in sections:
        assert f'href="#sec-{sec.id}"' in page
    assert page.count("<details") == sum(len(s.details) for s in sections)


def test_offline_one_file(gpt_audit: dict[str, Any]) -> None:
    page = render_html(gpt_audit)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"<link\b|@import|url\(\s*['\"]?(?:https?:)?//|<img\b|<iframe\b", page, re.I)
    assert not re.search(r"<script\b[^>]*\bsrc=", page, re.I)
    assert page.count("<script>") == 1 and "<style>" in page
    assert render_html(gpt_audit) == page  # deterministic: no dates, no random ids


def test_model_text_is_escaped(gpt_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(gpt_audit)
    data["model"]["name"] = "<script>alert(1)</script> & co"
    data["ops"][0]["op"] = "aten::evil<b>&"
    data["notes"].append('a note with <i>markup</i> & "quotes"')
    page = render_html(data)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page
    assert "evil<b>" not in page and "evil&lt;b&gt;&amp;" in page
    assert "<i>markup</i>" not in page and "&lt;i&gt;markup&lt;/i&gt;" in page
    assert page.count("<script>") == 1


def test_charts(gpt_audit: dict[str, Any]) -> None:
    page = render_html(gpt_audit)
    for cid in ("chart-ops", "chart-modules", "chart-roofline", "chart-coverage"):
        m = re.search(rf'<svg id="{cid}" class="chart" viewBox="0 0 \d+ \d+"[^>]*>(.*?)</svg>', page, re.S)
        assert m, cid
        svg = m.group(1)
        assert f'<title id="{cid}-title">' in svg and 'class="ttl"' in svg  # a title
        assert svg.count("<title>") >= 2  # tooltips on the marks
        assert 'class="ax"' in svg  # an axis label
    # the roofline reads the bandwidth the estimate used from the ops (Ascend 910B: 1.42 TB/s)
    assert gpt_audit["chip"] != "Ascend910B" or "bandwidth 1.42 TB/s and peak" in page
    # without coverage there is no coverage chart and no coverage section
    data = copy.deepcopy(gpt_audit)
    data.pop("coverage")
    assert 'id="chart-coverage"' not in render_html(data)


def test_status_cells_are_coloured(gpt_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(gpt_audit)
    cov = data["coverage"]
    cov["by_status"]["cpu-fallback"] = {"ops": 1, "calls": 3, "time_share": 0.05}
    cov["cpu_fallback"].append({"op": "aten::gelu", "status": "cpu-fallback", "calls": 3, "modules": ["blocks.*.mlp"],
                                "sources": ["model.py:62"], "bytes_crossing_host": 1000, "estimated_transfer_s": 1e-5,
                                "detail": "CPU kernel only"})
    page = render_html(data)
    assert '<span class="tag t-cpu-fallback">cpu-fallback</span>' in page
    assert '<span class="tag t-hot">hot</span>' in page and '<span class="tag t-warning">warning</span>' in page
    assert 'class="answer warn"' in page  # runs, with a CPU fallback


@pytest.mark.parametrize("text, value", [("3.5 ms", 3.5e-3), ("422 µs", 422e-6), ("2.30 s", 2.3), ("1.2 TFLOP", 1.2e12),
                                         ("599 MB", 599e6), ("12.5% C", 0.125), ("1,024", 1024.0), ("0.50x", 0.5),
                                         ("0", 0.0), ("-", None), ("", None), ("prefill", None), ("1.42 TB/s", 1.42e12)])
def test_sort_values(text: str, value: float | None) -> None:
    got = sort_value(text)
    assert got == pytest.approx(value) if value is not None else got is None
    assert sort_value("<0.1%") is not None and sort_value("<0.1%") < 0.001  # type: ignore[operator]
