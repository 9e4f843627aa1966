#!/usr/bin/env python3
"""Regenerate tests/golden/*.json: the pinned inventory of the shipped GPT example (CPU, fake tensors).

Run after an intended change in tracing or costing, and review the diff: python scripts/regen_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.api import audit_model  # noqa: E402


def golden_view(data: dict) -> dict:
    """The parts of an audit that must not change by accident: op set, counts, FLOPs, bytes, classes, bounds."""
    ops = {}
    for o in data["ops"]:
        ops[o["op"]] = {
            name: {
                "calls": s["calls"],
                "flops": int(s["flops"]),
                "bytes": int(s["bytes"]),
                "class": s["class"],
                "bound": s["bound"],
                "top_shape": s["shapes"][0]["inputs"] if s["shapes"] else None,
            }
            for name, s in sorted(o["scenarios"].items())
        }
    return {"model": data["model"]["name"], "chip": data["chip"], "scenarios": [s["name"] for s in data["scenarios"]],
            "ops": dict(sorted(ops.items()))}


GOLDENS = {"gpt_inventory.json": {"model": str(ROOT / "examples" / "gpt" / "model.py")}}


def main() -> None:
    out_dir = ROOT / "tests" / "golden"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, kwargs in GOLDENS.items():
        _, data = audit_model(**kwargs)
        (out_dir / name).write_text(json.dumps(golden_view(data), indent=1) + "\n")
        print(f"wrote tests/golden/{name}")
        if name == "gpt_inventory.json":  # the report views of the same audit (tests/report/test_audit_views.py)
            sys.path.insert(0, str(ROOT / "tests" / "report"))
            from test_audit_views import views

            (out_dir / "report").mkdir(exist_ok=True)
            for view, text in views(json.loads(json.dumps(data))).items():
                (out_dir / "report" / view).write_text(text, encoding="utf-8")
                print(f"wrote tests/golden/report/{view}")


if __name__ == "__main__":
    main()
