"""The audit's op table as CSV: one row per (op, scenario), for spreadsheets."""

from __future__ import annotations

import csv
import io
from typing import Any

COLUMNS = ["op", "kind", "class", "time_share", "scenario", "scenario_class", "scenario_time_share", "bound", "calls",
           "flops", "bytes", "estimated_time_s", "top_shape", "distinct_shapes", "dtypes", "modules", "sources", "fused",
           "coverage_status", "coverage_paths"]


def render_csv(data: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for o in data["ops"]:
        cov = o.get("coverage") or {}
        for name, sc in o["scenarios"].items():
            writer.writerow([
                o["op"], o["kind"], o["class"], f"{o['time_share']:.6g}", name, sc["class"], f"{sc['time_share']:.6g}",
                sc["bound"], sc["calls"], f"{sc['flops']:.6g}", sc["bytes"], f"{sc['estimated_time_s']:.6g}",
                sc["shapes"][0]["inputs"] if sc["shapes"] else "", sc["distinct_shapes"], ";".join(o["dtypes"]),
                ";".join(o["modules"]), ";".join(o["sources"]), int(o["fused"]), cov.get("status", ""), ";".join(cov.get("paths", [])),
            ])
    return buf.getvalue()
