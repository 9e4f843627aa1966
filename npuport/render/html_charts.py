"""Inline SVG charts of the HTML audit report, drawn from the audit's JSON form alone: time share per op and per
module per scenario (grouped bars), a roofline of the ops on the target chip, and coverage by status. Each chart is
a <figure> holding one scalable <svg> (viewBox, width 100%) with a title, axis labels, a legend and a <title>
tooltip on every mark, then a caption saying how to read it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

from npuport.render.fmt import fmt_count, fmt_share, fmt_si, fmt_time

SERIES = ["#0077bb", "#ee7733", "#009988", "#aa3377", "#33bbee", "#bbbb33", "#777777"]
STATUS_COLORS = {"native": "#12805c", "composite": "#3b82c4", "npu-custom": "#7a5af8", "conditional": "#b54708",
                 "cpu-path": "#e8590c", "cpu-fallback": "#d92d20", "unsupported": "#7a0f0a"}
STATUS_ORDER = list(STATUS_COLORS)
WIDTH = 960
MIN_SHARE = 0.001  # the roofline draws the op/scenario dots of at least this share of the scenario's time


def _e(text: object) -> str:
    return escape(str(text))


def _clip(text: str, n: int) -> str:
    """Shorten to n characters with an ellipsis in the middle (the start and the end of a name tell most)."""
    if len(text) <= n:
        return text
    head = n // 3
    return text[:head] + "…" + text[len(text) - (n - head - 1):]


def _nice_step(vmax: float, ticks: int = 5) -> float:
    raw = max(vmax, 1e-12) / ticks
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _svg(cid: str, title: str, height: float, body: list[str]) -> str:
    """One chart: the title as a tooltip and as text at its top, then the marks."""
    return (f'<svg id="{cid}" class="chart" viewBox="0 0 {WIDTH} {height:.0f}" width="{WIDTH}" height="{height:.0f}" '
            f'role="img" aria-labelledby="{cid}-title" preserveAspectRatio="xMinYMin meet">'
            f'<title id="{cid}-title">{_e(title)}</title><text class="ttl" x="0" y="20">{_e(title)}</text>'
            + "".join(body) + "</svg>")


def _legend(items: list[tuple[str, str]], x: float, y: float, shape: str = "rect") -> tuple[list[str], float]:
    """Swatches and names in a row that wraps at the chart's width; returns the parts and the y below them."""
    out: list[str] = []
    cx = x
    for color, name in items:
        w = 22 + 7.0 * len(name) + 16
        if cx + w > WIDTH and cx > x:
            cx, y = x, y + 18
        if shape == "circle":
            out.append(f'<circle cx="{cx + 6:.1f}" cy="{y - 4:.1f}" r="5.5" fill="{color}" fill-opacity=".8"/>')
        elif shape == "line":
            out.append(f'<line x1="{cx:.1f}" x2="{cx + 14:.1f}" y1="{y - 4:.1f}" y2="{y - 4:.1f}" stroke="{color}" stroke-width="3"/>')
        else:
            out.append(f'<rect x="{cx:.1f}" y="{y - 10:.1f}" width="12" height="12" rx="2" fill="{color}"/>')
        out.append(f'<text class="lbl" x="{cx + 18:.1f}" y="{y:.1f}">{_e(name)}</text>')
        cx += w
    return out, y + 14


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def grouped_bars(cid: str, title: str, axis: str, labels: list[str], series: list[str], values: list[list[float]],
                 tips: list[list[str]]) -> str:
    """Horizontal bars: one group per label, one bar per series, values in 0..1 shown as percentages."""
    n = max(len(series), 1)
    bar = 13.0 if n == 1 else max(6.0, min(11.0, 30.0 / n))
    group = bar * n + 10
    label_w, right = 260.0, 56.0
    parts, y = _legend([(SERIES[i % len(SERIES)], s) for i, s in enumerate(series)], label_w, 44)
    top = y + 8
    plot_w = WIDTH - label_w - right
    vmax = max((v for row in values for v in row), default=0.0)
    step = _nice_step(vmax or 0.01)
    xmax = max(step, math.ceil(vmax / step - 1e-9) * step)
    bottom = top + group * len(labels)

    def x(v: float) -> float:
        return label_w + plot_w * v / xmax

    ticks = int(round(xmax / step))
    for k in range(ticks + 1):
        v = k * step
        parts.append(f'<line class="grid" x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top - 4:.1f}" y2="{bottom:.1f}"/>'
                     f'<text class="tick" x="{x(v):.1f}" y="{bottom + 15:.1f}" text-anchor="middle">{v * 100:.4g}%</text>')
    for g, label in enumerate(labels):
        y0 = top + g * group
        if g % 2 == 0:
            parts.append(f'<rect x="0" y="{y0 - 3:.1f}" width="{WIDTH}" height="{group - 4:.1f}" fill="#f7f9fc"/>')
        parts.append(f'<text class="lbl" x="{label_w - 10:.1f}" y="{y0 + bar * n / 2 + 4:.1f}" text-anchor="end">'
                     f'<title>{_e(label)}</title>{_e(_clip(label, 38))}</text>')
        for i in range(len(series)):
            v = values[g][i]
            w = max(x(v) - label_w, 1.0 if v > 0 else 0.0)
            yb = y0 + i * bar
            parts.append(f'<rect class="bar" x="{label_w:.1f}" y="{yb:.1f}" width="{w:.1f}" height="{bar - 1.5:.1f}" '
                         f'fill="{SERIES[i % len(SERIES)]}"><title>{_e(tips[g][i])}</title></rect>')
            if v > 0:
                parts.append(f'<text class="val" x="{label_w + w + 4:.1f}" y="{yb + bar - 3:.1f}">{fmt_share(v)}</text>')
    parts.append(f'<line x1="{label_w}" x2="{label_w}" y1="{top - 4:.1f}" y2="{bottom:.1f}" stroke="#98a2b3"/>')
    parts.append(f'<text class="ax" x="{label_w + plot_w / 2:.1f}" y="{bottom + 36:.1f}" text-anchor="middle">{_e(axis)}</text>')
    return _svg(cid, title, bottom + 48, parts)


def ops_chart(data: dict[str, Any], top: int = 20) -> str:
    names = [s["name"] for s in data["scenarios"]]
    compute = [o for o in data["ops"] if o["kind"] == "compute"]
    ops = compute[:top]
    if not ops or not names:
        return ""
    values, tips = [], []
    for o in ops:
        row, tip = [], []
        for n in names:
            sc = o["scenarios"].get(n)
            share = sc["time_share"] if sc else 0.0
            row.append(share)
            tip.append(f"{o['op']} in {n}: {fmt_share(share)} of the step" + (
                f" ({fmt_time(sc['estimated_time_s'])}, {fmt_count(sc['calls'])} calls, {sc['bound']}-bound)" if sc else " (not called)"))
        values.append(row)
        tips.append(tip)
    title = f"Time share per operator and scenario (top {len(ops)} of {len(compute)} compute ops)"
    svg = grouped_bars("chart-ops", title, f"share of the scenario's estimated step time on {data['chip']}",
                       [o["op"] for o in ops], names, values, tips)
    return _figure(svg, "Each bar is one operator's share of one scenario's estimated device time (mappings/timing.yaml), "
                        "ops ordered by their mean share over the scenarios; hover a bar for its time, calls and bound.")


def modules_chart(data: dict[str, Any], top: int = 20) -> str:
    names = [s["name"] for s in data["scenarios"]]
    mods = data.get("modules") or []
    shown = mods[:top]
    if not shown or not names:
        return ""
    values, tips = [], []
    for me in shown:
        row, tip = [], []
        for n in names:
            sc = me["scenarios"].get(n)
            share = sc["time_share"] if sc else 0.0
            row.append(share)
            tip.append(f"{me['module']} ({me['type']}) in {n}: {fmt_share(share)} of the step"
                       + (f" ({fmt_time(sc['estimated_time_s'])}, {fmt_count(sc['calls'])} calls)" if sc else ""))
        values.append(row)
        tips.append(tip)
    title = f"Time share per module and scenario (top {len(shown)} of {len(mods)}, layer indices merged)"
    svg = grouped_bars("chart-modules", title, f"share of the scenario's estimated step time on {data['chip']}",
                       [me["module"] for me in shown], names, values, tips)
    return _figure(svg, "Modules with their layer indices merged (model.layers.*.mlp stands for every layer's MLP); "
                        "a module's share counts the ops it issues itself and those of its children.")


@dataclass
class _Point:
    op: str
    scenario: int
    intensity: float
    rate: float
    share: float
    tip: str


def _log_range(values: list[float], headroom: float = 0.0, span: int = 3) -> tuple[int, int]:
    """Whole decades around the values (at least `span` of them), with `headroom` decades above the largest."""
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)) + headroom)
    while hi - lo < span:
        lo, hi = (lo - 1, hi) if (hi - lo) % 2 else (lo, hi + 1)
    return lo, hi


def _radius(share: float) -> float:
    """A dot's radius: its area grows with the op's share of the scenario's time."""
    return 3.0 + 11.0 * math.sqrt(max(share, 0.0))


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return not (a[2] < b[0] or a[0] > b[2] or a[3] < b[1] or a[1] > b[3])


def _decade(k: int, unit: str) -> str:
    if unit:
        return fmt_si(10.0 ** k, unit)
    return f"{10.0 ** k:g}" if -3 <= k <= 4 else f"1e{k}"


def roofline_chart(data: dict[str, Any]) -> str:
    """Ops on the target chip's roofline: the ceiling from the JSON's chip_rates (older JSON without them: read from
    the ops, the largest bytes / time and FLOPs / time)."""
    names = [s["name"] for s in data["scenarios"]]
    pts: list[_Point] = []
    bw, peak_m, peak_v, no_flops = 0.0, 0.0, 0.0, set()
    for o in data["ops"]:
        if o["kind"] != "compute":
            continue
        for i, n in enumerate(names):
            sc = o["scenarios"].get(n)
            if not sc or not sc["estimated_time_s"]:
                continue
            t = sc["estimated_time_s"]
            bw = max(bw, sc["bytes"] / t)
            if sc["bound"] == "compute":
                if o["matrix"]:
                    peak_m = max(peak_m, sc["flops"] / t)
                else:
                    peak_v = max(peak_v, sc["flops"] / t)
            if sc["flops"] <= 0 or sc["bytes"] <= 0:
                no_flops.add(o["op"])
                continue
            ai, rate = sc["flops"] / sc["bytes"], sc["flops"] / t
            pts.append(_Point(o["op"], i, ai, rate, sc["time_share"],
                              f"{o['op']} in {n}: {ai:.3g} FLOP/B, {fmt_si(rate, 'FLOP/s')} at the estimate, "
                              f"{fmt_share(sc['time_share'])} of the step ({fmt_time(t)}, {sc['bound']}-bound)"))
    # a dot under MIN_SHARE of its scenario's time is not drawn: it would stretch the axes over decades nobody reads
    small = [p for p in pts if p.share < MIN_SHARE]
    pts = [p for p in pts if p.share >= MIN_SHARE] or pts
    if len(pts) == len(small):
        small = []
    if not pts or bw <= 0:
        return ""
    peak = max(peak_m, peak_v)
    rates = data.get("chip_rates")
    if rates:  # the chip's own figures (hardware.yaml); estimates sit under them by their class's achieved fraction
        bw = float(rates["memory_bandwidth"])
        dtypes = {d for o in data["ops"] for d in (o.get("dtypes") or [])}
        matrix = [v for k, v in rates["matrix_peak"].items() if k in dtypes] or list(rates["matrix_peak"].values())
        peak = max(matrix) if peak_m or not peak_v else float(rates["vector_peak"])
    ridge = peak / bw if peak else 0.0
    xs = [p.intensity for p in pts] + ([ridge] if ridge else [])
    ys = [p.rate for p in pts] + ([peak] if peak else [])
    xlo, xhi = _log_range(xs)
    ylo, yhi = _log_range(ys, headroom=0.5)
    title = f"Roofline of the operators on {data['chip']}"
    left, right, plot_top, plot_h = 92.0, 28.0, 74.0, 400.0
    plot_w = WIDTH - left - right
    bottom = plot_top + plot_h

    def px(v: float) -> float:
        return left + plot_w * (math.log10(v) - xlo) / (xhi - xlo)

    def py(v: float) -> float:
        return bottom - plot_h * (math.log10(v) - ylo) / (yhi - ylo)

    parts, _ = _legend([(SERIES[i % len(SERIES)], n) for i, n in enumerate(names)], left, 44, "circle")
    roof_items, _ = _legend([("#101828", "roofline ceiling")], WIDTH - 190, 44, "line")
    parts += roof_items
    for k in range(xlo, xhi + 1):
        parts.append(f'<line class="grid" x1="{px(10.0 ** k):.1f}" x2="{px(10.0 ** k):.1f}" y1="{plot_top}" y2="{bottom}"/>'
                     f'<text class="tick" x="{px(10.0 ** k):.1f}" y="{bottom + 16}" text-anchor="middle">{_decade(k, "")}</text>')
    for k in range(ylo, yhi + 1):
        parts.append(f'<line class="grid" x1="{left}" x2="{WIDTH - right}" y1="{py(10.0 ** k):.1f}" y2="{py(10.0 ** k):.1f}"/>'
                     f'<text class="tick" x="{left - 6}" y="{py(10.0 ** k) + 4:.1f}" text-anchor="end">{_decade(k, "FLOP/s")}</text>')
    parts.append(f'<rect x="{left}" y="{plot_top}" width="{plot_w:.1f}" height="{plot_h}" fill="none" stroke="#98a2b3"/>')
    # the ceiling: bandwidth x intensity up to the ridge point, then the peak
    x0 = max(10.0 ** xlo, 10.0 ** ylo / bw)
    x1 = min(ridge, 10.0 ** xhi) if peak else min(10.0 ** xhi, 10.0 ** yhi / bw)
    roof = [(px(x0), py(bw * x0)), (px(x1), py(bw * x1))]
    if peak:
        roof.append((px(10.0 ** xhi), py(peak)))
    pts_attr = " ".join(f"{a:.1f},{b:.1f}" for a, b in roof)
    parts.append(f'<polyline points="{pts_attr}" fill="none" stroke="#101828" stroke-width="2.5">'
                 f'<title>memory bandwidth {fmt_si(bw, "B/s")}' + (f", peak {fmt_si(peak, 'FLOP/s')}" if peak else "")
                 + "</title></polyline>")
    if peak_m and peak_v and abs(peak_m - peak_v) / peak > 0.01:
        low = min(peak_m, peak_v)
        kind = "vector" if low == peak_v else "matrix"
        parts.append(f'<line x1="{px(low / bw):.1f}" x2="{px(10.0 ** xhi):.1f}" y1="{py(low):.1f}" y2="{py(low):.1f}" '
                     f'stroke="#475467" stroke-width="1.5" stroke-dasharray="6 4"><title>{kind} peak {fmt_si(low, "FLOP/s")}</title></line>'
                     f'<text class="tick" x="{WIDTH - right - 6:.1f}" y="{py(low) - 6:.1f}" text-anchor="end">{kind} peak {fmt_si(low, "FLOP/s")}</text>')
    placed: list[tuple[float, float, float, float]] = []  # label boxes, so that labels do not overlap
    # the bandwidth, written along the slope part of the ceiling, a little above it
    xm = 10.0 ** (math.log10(x0) + 0.35 * (math.log10(x1) - math.log10(x0)))
    angle = math.degrees(math.atan2(py(bw * x1) - py(bw * x0), px(x1) - px(x0)))
    parts.append(f'<text class="tick" transform="translate({px(xm):.1f} {py(bw * xm) - 7:.1f}) rotate({angle:.1f})">'
                 f'memory bandwidth {fmt_si(bw, "B/s")}</text>')
    if peak:
        ridge_label = f"ridge {ridge:.3g} FLOP/B, peak {fmt_si(peak, 'FLOP/s')}"
        placed.append((px(ridge) - 10 - 7.0 * len(ridge_label), py(peak) - 26, px(ridge) - 10, py(peak) - 8))
        parts.append(f'<line x1="{px(ridge):.1f}" x2="{px(ridge):.1f}" y1="{py(peak):.1f}" y2="{bottom}" stroke="#101828" '
                     f'stroke-dasharray="2 3"/>'
                     f'<rect x="{px(ridge) - 5:.1f}" y="{py(peak) - 5:.1f}" width="10" height="10" fill="#fff" stroke="#101828" '
                     f'stroke-width="2" transform="rotate(45 {px(ridge):.1f} {py(peak):.1f})"><title>ridge point: {ridge:.3g} FLOP/B '
                     f'({fmt_si(peak, "FLOP/s")} / {fmt_si(bw, "B/s")})</title></rect>'
                     f'<text class="lbl" x="{px(ridge) - 10:.1f}" y="{py(peak) - 12:.1f}" text-anchor="end">{_e(ridge_label)}</text>')
    for p in sorted(pts, key=lambda p: -p.share):
        parts.append(f'<circle class="pt" cx="{px(p.intensity):.1f}" cy="{py(p.rate):.1f}" r="{_radius(p.share):.1f}" '
                     f'fill="{SERIES[p.scenario % len(SERIES)]}" fill-opacity=".72" stroke="#fff" stroke-width=".8">'
                     f'<title>{_e(p.tip)}</title></circle>')
    # labels for the dots that matter (4% of a scenario or more): below the dot, else above, right, left; never
    # over another label, a dot or the ridge label, never outside the plot
    dots = [(px(p.intensity) - _radius(p.share), py(p.rate) - _radius(p.share), px(p.intensity) + _radius(p.share),
             py(p.rate) + _radius(p.share)) for p in pts if p.share >= 0.01]
    for (ax, ay), (bx, by) in zip(roof, roof[1:]):  # the ceiling, as small boxes every 8 px along it
        steps = max(1, int(math.hypot(bx - ax, by - ay) / 8))
        placed += [(ax + (bx - ax) * i / steps - 2, ay + (by - ay) * i / steps - 2, ax + (bx - ax) * i / steps + 2,
                    ay + (by - ay) * i / steps + 2) for i in range(steps + 1)]
    labels = 0
    for p in sorted(pts, key=lambda p: -p.share):
        if p.share < 0.04 or labels >= 14:
            break
        label = p.op.removeprefix("aten::")
        cx, cy, r, w = px(p.intensity), py(p.rate), _radius(p.share), 6.0 * len(label)
        own = (cx - r, cy - r, cx + r, cy + r)
        spots = ((cx - w / 2, cy + r + 13), (cx - w / 2, cy - r - 5), (cx + r + 4, cy + 4), (cx - r - 4 - w, cy + 4),
                 (cx + r, cy + r + 13), (cx - r - w, cy + r + 13), (cx + r, cy - r - 5), (cx - r - w, cy - r - 5))
        for lx, ly in spots:
            box = (lx, ly - 10, lx + w, ly + 2)
            inside = left < box[0] and box[2] < WIDTH - right and plot_top < box[1] and box[3] < bottom
            if inside and not any(_overlap(box, b) for b in placed + [d for d in dots if d != own]):
                placed.append(box)
                parts.append(f'<text class="val" x="{lx:.1f}" y="{ly:.1f}">{_e(label)}</text>')
                labels += 1
                break
    parts.append(f'<text class="ax" x="{left + plot_w / 2:.1f}" y="{bottom + 38}" text-anchor="middle">'
                 "arithmetic intensity (FLOP per byte of ideal traffic, log scale)</text>")
    parts.append(f'<text class="ax" transform="translate(16 {plot_top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
                 "FLOP/s at the roofline estimate (log)</text>")
    if rates:
        how = (f"bandwidth {fmt_si(bw, 'B/s')} and peak {fmt_si(peak, 'FLOP/s')}: {data['chip']}'s figures "
               f"(mappings/hardware.yaml); ridge point {ridge:.3g} FLOP/B; each op sits under them by the fraction of "
               "peak its class achieves (mappings/timing.yaml)")
    elif peak:
        how = (f"bandwidth {fmt_si(bw, 'B/s')} = the largest bytes/time of any op; peak {fmt_si(peak, 'FLOP/s')} = the "
               f"largest FLOPs/time of a compute-bound op; ridge point {ridge:.3g} FLOP/B")
    else:
        how = (f"bandwidth {fmt_si(bw, 'B/s')} = the largest bytes/time of any op; no op is compute-bound in these "
               f"scenarios, so the peak (and the ridge point) cannot be read from the report: it is above "
               f"{fmt_si(max(p.rate for p in pts), 'FLOP/s')}, the highest rate an op reaches")
    skipped = f" {len(no_flops)} op(s) with no FLOPs or no bytes (copies, lookups) are not drawn." if no_flops else ""
    if small:
        skipped += f" {len(small)} dot(s) under {fmt_share(MIN_SHARE)} of their scenario's time are left out."
    caption = ("Each dot is one operator in one scenario: x its arithmetic intensity, y its FLOPs over its estimated "
               "time; dot area grows with its share of the scenario's time. The ceiling is derived from the ops "
               f"themselves (the report carries no chip figures): {how}.{skipped}")
    return _figure(_svg("chart-roofline", title, bottom + 50, parts), caption)


def coverage_chart(data: dict[str, Any]) -> str:
    cov = data.get("coverage")
    if not cov or not cov.get("by_status"):
        return ""
    by = cov["by_status"]
    order = [s for s in STATUS_ORDER if s in by] + [s for s in by if s not in STATUS_ORDER]
    n_ops = sum(v["ops"] for v in by.values())
    n_time = sum(v["time_share"] for v in by.values())
    title = f"Coverage on torch_npu {cov['version']} by status"
    label_w, right = 200.0, 20.0
    plot_w = WIDTH - label_w - right
    parts, y = _legend([(STATUS_COLORS.get(s, "#98a2b3"), f"{s} ({by[s]['ops']} op{'' if by[s]['ops'] == 1 else 's'}, {fmt_share(by[s]['time_share'])})")
                      for s in order], label_w, 44)
    top, bar, gap = y + 10, 34.0, 18.0
    rows = [(f"operators ({n_ops})", "ops", float(n_ops)), ("estimated time", "time_share", n_time)]
    for r, (label, key, total) in enumerate(rows):
        y0 = top + r * (bar + gap)
        parts.append(f'<text class="lbl" x="{label_w - 10}" y="{y0 + bar / 2 + 4:.1f}" text-anchor="end">{_e(label)}</text>')
        x = label_w
        for s in order:
            v = float(by[s][key])
            w = plot_w * v / total if total else 0.0
            if w <= 0:
                continue
            shown = str(by[s]["ops"]) if key == "ops" else fmt_share(by[s]["time_share"])
            tip = (f"{s}: {by[s]['ops']} of {n_ops} ops, {fmt_count(int(by[s]['calls']))} calls, "
                   f"{fmt_share(by[s]['time_share'])} of the estimated time")
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{y0:.1f}" width="{max(w, 1.0):.1f}" height="{bar}" '
                         f'fill="{STATUS_COLORS.get(s, "#98a2b3")}"><title>{_e(tip)}</title></rect>')
            if w > 8 * len(f"{s} {shown}") + 8:
                parts.append(f'<text class="lbl" x="{x + 6:.1f}" y="{y0 + bar / 2 + 4:.1f}" style="fill:#fff">{_e(s)} {_e(shown)}</text>')
            x += w
    bottom = top + 2 * bar + gap
    for k in range(5):
        xv = label_w + plot_w * k / 4
        parts.append(f'<text class="tick" x="{xv:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">{k * 25}%</text>')
    parts.append(f'<text class="ax" x="{label_w + plot_w / 2:.1f}" y="{bottom + 36:.1f}" text-anchor="middle">'
                 "share of the model's compute ops, and of its estimated time (mean over scenarios)</text>")
    svg = _svg("chart-coverage", title, bottom + 48, parts)
    bad = [s for s in ("cpu-path", "cpu-fallback", "unsupported") if s in by]
    caption = (f"Status of each compute op on torch_npu {cov['version']}: native and composite run on the NPU; "
               + (f"{' and '.join(bad)} ops leave it (see the table below)." if bad else
                  "no op falls back to the CPU or is missing.")
               + (" conditional ops compute on the host only under a condition the trace does not show."
                  if "conditional" in by else ""))
    return _figure(svg, caption)
