"""The inline style sheet and script of the HTML audit report (npuport.render.audit_html). Nothing here is fetched:
the report is one offline file. The script only adds behaviour (sort by a header click, a filter box per table);
with scripts off every table is still complete and the filter boxes stay hidden."""

from __future__ import annotations

CSS = """
:root{--fg:#1f2933;--muted:#616e7c;--line:#e4e7eb;--bg:#fff;--soft:#f5f7fa;--accent:#0b5cad;
--hot:#b42318;--hot-bg:#fee4e2;--amber:#a15c07;--amber-bg:#fef0c7;--cold:#667085;--cold-bg:#f2f4f7;
--ok:#067647;--ok-bg:#dcfae6;--info:#175cd3;--info-bg:#e0eaff}
*{box-sizing:border-box}
html{color-scheme:light;scroll-behavior:smooth}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,
"Noto Sans","Helvetica Neue",Arial,sans-serif;-webkit-text-size-adjust:100%}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:.86em}
a{color:var(--accent)}
[hidden]{display:none!important}
nav.top{position:sticky;top:0;z-index:10;background:rgba(255,255,255,.96);border-bottom:1px solid var(--line);
box-shadow:0 1px 3px rgba(16,24,40,.06)}
nav.top .in{max-width:1200px;margin:0 auto;padding:6px 24px;display:flex;flex-wrap:wrap;gap:2px 4px;align-items:center}
nav.top b{margin-right:10px;font-size:14px;overflow-wrap:anywhere}
nav.top a{font-size:13px;text-decoration:none;padding:3px 9px;border-radius:999px;color:var(--fg)}
nav.top a:hover,nav.top a:focus{background:var(--soft);color:var(--accent)}
main{max-width:1200px;margin:0 auto;padding:8px 24px 48px}
section{margin:0 0 40px;scroll-margin-top:56px}
h1{font-size:25px;line-height:1.25;margin:22px 0 4px;overflow-wrap:anywhere}
h2{font-size:20px;line-height:1.3;margin:0 0 12px;padding-top:16px;border-top:2px solid var(--line);overflow-wrap:anywhere}
h3{font-size:15px;margin:18px 0 6px}
p{margin:6px 0;overflow-wrap:anywhere}
.meta{color:var(--muted);font-size:13px;margin:0 0 16px;overflow-wrap:anywhere}
.card{border:1px solid var(--line);border-radius:12px;padding:18px 22px;background:linear-gradient(#fbfcfe,#fff);
box-shadow:0 1px 2px rgba(16,24,40,.05)}
.answers{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px;margin:4px 0 14px}
.answer{border-radius:10px;padding:12px 14px;border:1px solid var(--line);border-left-width:6px;background:#fff}
.answer .q{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600}
.answer .a{font-size:15px;overflow-wrap:anywhere}
.answer .a b{font-size:17px}
.answer.ok{border-left-color:var(--ok)}.answer.warn{border-left-color:#f79009}.answer.bad{border-left-color:var(--hot)}
.answer.muted{border-left-color:#98a2b3}
.alert{background:var(--hot-bg);color:var(--hot);border-radius:8px;padding:6px 10px}
ol.actions{margin:6px 0 16px;padding-left:26px}
ol.actions li{margin:6px 0;overflow-wrap:anywhere}
ol.actions .where{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em;background:var(--soft);
padding:1px 5px;border-radius:4px}
ol.actions .fix{color:var(--muted)}
.tier{display:inline-block;font-size:11px;font-weight:600;border-radius:999px;padding:0 7px;margin-right:6px;
vertical-align:1px}
.tier0{background:var(--hot-bg);color:var(--hot)}.tier1{background:var(--amber-bg);color:var(--amber)}
.tier2{background:var(--info-bg);color:var(--info)}
ul.after,ul.lines{margin:8px 0;padding-left:22px;color:#344054}
ul.after li,ul.lines li{margin:2px 0;overflow-wrap:anywhere}
.tbl{margin:10px 0 16px}
.tbl h3{margin:14px 0 6px}
.tools{display:flex;gap:10px;align-items:center;margin:0 0 6px}
.tools input{font:inherit;font-size:13px;padding:4px 9px;border:1px solid #d0d5dd;border-radius:6px;width:260px;max-width:60%}
.tools .count{font-size:12px;color:var(--muted)}
.scroll{overflow-x:auto;width:fit-content;max-width:100%;border:1px solid var(--line);border-radius:8px}
.scroll.tall{max-height:75vh;overflow-y:auto}
table.data{border-collapse:collapse;font-size:13px;width:auto;min-width:50%}
table.data th,table.data td{padding:5px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top;
overflow-wrap:anywhere;min-width:3.5em}
table.data th{background:var(--soft);font-weight:600;position:sticky;top:0;z-index:1;overflow-wrap:normal;
white-space:normal;min-width:4em}
table.data th.sortable{cursor:pointer;user-select:none}
table.data th.sortable:hover{background:#eaeef3}
table.data th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}
table.data th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
table.data tbody tr:nth-child(even){background:#fafbfc}
table.data tbody tr:hover{background:#f0f5ff}
table.data .r{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
table.data td.k{white-space:nowrap}
table.data td code{font-size:12px}
.tag{display:inline-block;border-radius:5px;padding:0 6px;font-weight:600;font-size:12px;white-space:nowrap}
.t-hot,.t-error,.t-cpu-fallback,.t-cpu-path,.t-unsupported{background:var(--hot-bg);color:var(--hot)}
.t-medium,.t-warning,.t-blocked,.t-conditional{background:var(--amber-bg);color:var(--amber)}
.t-cold,.t-fused,.t-no-replacement{background:var(--cold-bg);color:var(--cold)}
.t-info,.t-composite,.t-npu-custom{background:var(--info-bg);color:var(--info)}
.t-native,.t-proposed{background:var(--ok-bg);color:var(--ok)}
details{margin:8px 0;border:1px solid var(--line);border-radius:8px;padding:0 12px}
details>summary{cursor:pointer;padding:8px 0;font-weight:600}
details>summary .n{color:var(--muted);font-weight:400}
details[open]{padding-bottom:10px}
figure{margin:14px 0 22px}
figure svg.chart{display:block;width:100%;height:auto;max-width:100%}
figcaption{font-size:13px;color:var(--muted);margin-top:4px;overflow-wrap:anywhere}
svg.chart text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",Arial,sans-serif;fill:#344054}
svg.chart .ttl{font-size:16px;font-weight:600;fill:#1f2933}
svg.chart .ax{font-size:12px;fill:#475467}
svg.chart .tick{font-size:11px;fill:#667085}
svg.chart .lbl{font-size:12px}
svg.chart .val{font-size:10px;fill:#475467}
svg.chart .grid{stroke:#eaecf0;stroke-width:1}
svg.chart rect.bar:hover,svg.chart circle.pt:hover{stroke:#101828;stroke-width:1.5}
footer{max-width:1200px;margin:0 auto;padding:12px 24px 32px;color:var(--muted);font-size:12px;border-top:1px solid var(--line)}
@media print{nav.top{display:none}.scroll.tall{max-height:none}details{border:0}}
"""

JS = """
(function () {
  "use strict";
  function num(td) {
    var v = td ? td.getAttribute("data-v") : null;
    return v === null ? null : parseFloat(v);
  }
  function text(td) { return td ? td.textContent.trim() : ""; }
  function setup(table) {
    var body = table.tBodies[0];
    if (!body || !table.tHead) { return; }
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.classList.add("sortable");
      th.tabIndex = 0;
      th.title = "sort by " + th.textContent.trim();
      function sort() {
        var asc = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col], xs = text(x), ys = text(y);
          if (xs === "" || ys === "") { return xs === ys ? 0 : (xs === "" ? 1 : -1); }  // empty cells last
          var xn = num(x), yn = num(y), c;
          if (xn !== null && yn !== null) { c = xn - yn; }
          else if (xn !== null || yn !== null) { c = xn !== null ? -1 : 1; }
          else { c = xs.localeCompare(ys, undefined, {numeric: true, sensitivity: "base"}); }
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
    var wrap = table.closest(".tbl"), tools = wrap ? wrap.querySelector(".tools") : null;
    if (!tools) { return; }
    var input = tools.querySelector("input"), count = tools.querySelector(".count"), total = body.rows.length;
    function filter() {
      var q = input.value.trim().toLowerCase(), shown = 0;
      Array.prototype.forEach.call(body.rows, function (r) {
        var keep = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
        r.hidden = !keep;
        if (keep) { shown += 1; }
      });
      count.textContent = q ? shown + " of " + total + " rows" : total + " rows";
    }
    input.addEventListener("input", filter);
    tools.hidden = false;
    filter();
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.data"), setup);
})();
"""
