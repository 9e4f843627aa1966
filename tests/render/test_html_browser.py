"""The HTML audit report in a real browser: headless Chromium from the OS packages loads the report of a small real
audit at 1280x900 and a probe script appended to it measures, after load, that nothing overflows the page
sideways, that every section and every chart is there with a usable size, and that a click on a header sorts a
table and the filter box hides rows. The probe writes its results as JSON into <pre id="results">; Chromium's
--dump-dom hands the page back. Skips only where no Chromium binary is installed (CI installs one when it can)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from npuport.render.audit_doc import build
from npuport.render.audit_html import render_html

WIDTH, HEIGHT = 1280, 900
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# runs before the report's own script: catches its errors
CATCH = "<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message));});</script>"

PROBE = """
<pre id="results"></pre>
<script>
window.addEventListener("load", function () {
  var out = {errors: window.__errors}, de = document.documentElement, vw = window.innerWidth;
  function box(el) { var r = el.getBoundingClientRect(); return {w: r.width, h: r.height, left: r.left, right: r.right}; }
  out.page = {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth, innerWidth: vw};
  out.sections = Array.prototype.map.call(document.querySelectorAll("main > section"), function (s) { return s.id; });
  out.charts = Array.prototype.map.call(document.querySelectorAll("svg.chart"), function (c) {
    var b = box(c); b.id = c.id; return b; });
  // anything outside a table's own scroll box whose right edge passes the window
  out.wide = [];
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
    if (el.closest(".scroll") || el.closest("svg") || el.closest("script")) { return; }
    var r = el.getBoundingClientRect();
    if (r.width && r.right > de.clientWidth + 0.5) { out.wide.push(el.tagName + "." + el.className + " " + r.right); }
  });
  out.tables = {};
  Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (t) {
    var s = t.closest(".scroll");
    out.tables[t.id] = {rows: t.tBodies[0].rows.length, fits: t.scrollWidth <= s.clientWidth + 1, box: box(s)};
  });
  var t = document.getElementById("tbl-ops"), heads = t.tHead.rows[0].cells;
  function column(i, attr) {
    return Array.prototype.map.call(t.tBodies[0].rows, function (r) {
      return attr ? parseFloat(r.cells[i].getAttribute(attr)) : r.cells[i].textContent.trim(); });
  }
  var names = Array.prototype.map.call(heads, function (h) { return h.textContent.trim(); });
  var calls = names.indexOf("calls"), before = column(0);
  heads[calls].click();
  var asc = {ops: column(0), values: column(calls, "data-v"), aria: heads[calls].getAttribute("aria-sort")};
  heads[calls].click();
  var desc = {ops: column(0), values: column(calls, "data-v"), aria: heads[calls].getAttribute("aria-sort")};
  out.sort = {before: before, asc: asc, desc: desc};
  var tools = t.closest(".tbl").querySelector(".tools"), input = tools.querySelector("input");
  function visible() {
    return Array.prototype.filter.call(t.tBodies[0].rows, function (r) { return r.getClientRects().length > 0; })
      .map(function (r) { return r.cells[0].textContent.trim(); });
  }
  var all = visible();
  input.value = "gelu";
  input.dispatchEvent(new Event("input"));
  var some = visible(), count = tools.querySelector(".count").textContent;
  input.value = "";
  input.dispatchEvent(new Event("input"));
  out.filter = {toolsShown: !tools.hidden, all: all, some: some, count: count, restored: visible().length};
  document.getElementById("results").textContent = JSON.stringify(out);
});
</script>
"""


def chromium() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def run_in_browser(page: str, tmp: Path, browser: str) -> dict[str, Any]:
    probe = page.replace("<head>", "<head>" + CATCH, 1).replace("</body>", PROBE + "</body>", 1)
    path = tmp / "report.html"
    path.write_text(probe, encoding="utf-8")
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp / 'profile'}", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=5000",
           "--dump-dom", path.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="results">(.*?)</pre>', done.stdout, re.S)
    assert m and m.group(1), "the probe wrote no results: " + done.stdout[-1000:] + done.stderr[-1000:]
    return json.loads(html.unescape(m.group(1)))  # type: ignore[no-any-return]


NO_BROWSER = "no Chromium binary (" + ", ".join(BROWSERS) + ") on PATH: install the OS package `chromium`"


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason=NO_BROWSER)  # decided before the audit fixture runs
def test_the_report_in_chromium(gpt_audit: dict[str, Any], tmp_path: Path) -> None:
    browser = chromium()
    assert browser is not None
    got = run_in_browser(render_html(gpt_audit), tmp_path, browser)
    assert got["errors"] == []
    # readable at 1280 px: no sideways scrolling of the page, nothing outside a table's own box past the window
    page = got["page"]
    assert page["innerWidth"] == WIDTH
    assert page["scrollWidth"] <= page["clientWidth"] <= WIDTH, page
    assert got["wide"] == []
    # every section of the document, in its order
    assert got["sections"] == [f"sec-{s.id}" for s in build(gpt_audit, top=0)]
    # the charts: all four, each large enough to read and inside the window
    assert [c["id"] for c in got["charts"]] == ["chart-coverage", "chart-ops", "chart-roofline", "chart-modules"]
    for c in got["charts"]:
        assert c["w"] > 100 and c["h"] > 100 and c["left"] >= 0 and c["right"] <= page["clientWidth"], c
    # every table is complete; the inventory fits its box at 1280 px (its last column, NPU impl, is visible)
    tables = got["tables"]
    for sec in build(gpt_audit, top=0):
        for t in sec.tables + sec.details:
            assert tables[f"tbl-{t.id}"]["rows"] == len(t.rows), t.id
    assert tables["tbl-ops"]["fits"], tables["tbl-ops"]
    # a click on "calls" sorts ascending, a second descending, by the number (not the text)
    s = got["sort"]
    assert s["asc"]["aria"] == "ascending" and s["desc"]["aria"] == "descending"
    assert s["asc"]["values"] == sorted(s["asc"]["values"]) and s["desc"]["values"] == sorted(s["desc"]["values"], reverse=True)
    assert s["asc"]["ops"] != s["before"] and sorted(s["asc"]["ops"]) == sorted(s["before"])
    # the filter box hides the rows without the text, and clearing it shows them all again
    f = got["filter"]
    assert f["toolsShown"] and len(f["all"]) == tables["tbl-ops"]["rows"]
    assert 0 < len(f["some"]) < len(f["all"]) and all("gelu" in op for op in f["some"]), f
    assert f["count"] == f"{len(f['some'])} of {len(f['all'])} rows" and f["restored"] == len(f["all"])
