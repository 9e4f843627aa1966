"""Screenshots of the HTML audit report for docs/report-html.md: the top of the page at 1280x900 and each chart, for
the Llama-2-7B config (examples/configs/llama-2-7b.json, the default scenarios), taken with headless Chromium from
the OS packages (`apt-get install chromium`).

    python scripts/html_screenshots.py                    # audits the config, writes docs/img/report-*.png
    python scripts/html_screenshots.py --json llama.json  # renders a saved `npuport audit ... --format json`

Prints what it wrote and the Chromium version, for the "taken on" line of docs/report-html.md."""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from npuport.render.audit_html import render_html
from npuport.render.html_assets import CSS
from npuport.render.html_charts import coverage_chart, modules_chart, ops_chart, roofline_chart

WIDTH, HEIGHT = 1280, 900
CONTENT = 1152  # the width of <main> at a 1280 px window (max-width 1200 less 2 x 24 px padding)
CHARTS = {"ops": ops_chart, "modules": modules_chart, "roofline": roofline_chart, "coverage": coverage_chart}


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("no Chromium on PATH: apt-get install chromium")


def shoot(exe: str, page: Path, out: Path, height: int, profile: Path) -> None:
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={profile}", "--hide-scrollbars", "--force-device-scale-factor=1",
           f"--window-size={WIDTH},{height}", "--virtual-time-budget=3000", f"--screenshot={out}", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not out.exists():
        sys.exit(f"chromium failed on {page}: {done.stderr[-2000:]}")


def chart_page(figure: str) -> tuple[str, int]:
    """One chart on a page of the report's own style, and the window height that shows it whole with its caption."""
    m = re.search(r'viewBox="0 0 (\d+) (\d+)"', figure)
    assert m, "a chart without a viewBox"
    height = math.ceil(int(m.group(2)) * CONTENT / int(m.group(1))) + 110
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><style>{CSS}</style></head>'
            f'<body><main style="padding-top:16px">{figure}</main></body></html>')
    return page, height


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="a saved audit JSON (default: audit examples/configs/llama-2-7b.json now)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"), help="folder for the PNGs (default docs/img)")
    args = ap.parse_args()
    if args.json:
        data: dict[str, Any] = json.loads(Path(args.json).read_text())
    else:
        from npuport.api import audit_model  # the tracing stack, only when it audits
        _, data = audit_model(hf_config=str(ROOT / "examples" / "configs" / "llama-2-7b.json"))
        data = json.loads(json.dumps(data))
    exe = browser()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        report = t / "report.html"
        report.write_text(render_html(data), encoding="utf-8")
        shoot(exe, report, out / "report-top.png", HEIGHT, t / "profile")
        written.append(out / "report-top.png")
        for name, draw in CHARTS.items():
            figure = draw(data)
            if not figure:
                continue
            page, height = chart_page(figure)
            path = t / f"chart-{name}.html"
            path.write_text(page, encoding="utf-8")
            shoot(exe, path, out / f"report-chart-{name}.png", height, t / "profile")
            written.append(out / f"report-chart-{name}.png")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    for p in written:
        print(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
    print(f"{data['model']['name']} on {data['chip']}, scenarios {', '.join(s['name'] for s in data['scenarios'])}; "
          f"{version}; {platform.platform()}")


if __name__ == "__main__":
    main()
