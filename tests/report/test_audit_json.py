"""Freeze the npuport.audit/1 field names (docs/audit-json.md). Adding fields is fine; renaming breaks users."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npuport.api import audit_model

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "models"

TOP = {"schema", "npuport_version", "model", "chip", "chip_description", "torch_npu", "environment", "scenarios", "ops",
       "modules", "native_composites", "assumptions", "notes"}
MODEL = {"name", "origin", "parameters", "dtype", "max_positions"}
SCENARIO = {"name", "kind", "batch", "seq", "past", "calls", "compute_calls", "flops", "bytes", "estimated_time_s",
            "estimated_time_s_by_chip"}
OP = {"op", "kind", "calls", "modules", "module_types", "sources", "apis", "shapes", "dtypes", "flops", "bytes",
      "arithmetic_intensity", "time_share", "bound", "bound_flips", "class", "fused", "matrix", "native_composite_of", "scenarios"}
OP_SCENARIO = {"calls", "flops", "bytes", "estimated_time_s", "time_share", "bound", "class", "shapes", "distinct_shapes", "phases"}
SHAPE = {"inputs", "calls", "estimated_time_s"}
MODULE = {"module", "type", "time_share", "scenarios"}


@pytest.fixture(scope="module")
def data():
    _, d = audit_model(model=str(FIX / "tiny.py"))
    return json.loads(json.dumps(d))  # must be plain JSON


def test_top_level_fields(data):
    assert TOP <= set(data)
    assert data["schema"] == "npuport.audit/1"
    assert MODEL <= set(data["model"])


def test_scenario_fields(data):
    for sc in data["scenarios"]:
        assert SCENARIO <= set(sc)
        assert data["chip"] in sc["estimated_time_s_by_chip"]


def test_op_fields(data):
    assert data["ops"]
    for op in data["ops"]:
        assert OP <= set(op), OP - set(op)
        assert op["class"] in {"hot", "medium", "cold"}
        assert op["bound"] in {"compute", "memory", "mixed", "none"}
        assert op["kind"] in {"compute", "view"}
        for name, sc in op["scenarios"].items():
            assert OP_SCENARIO <= set(sc)
            for shape in sc["shapes"]:
                assert SHAPE <= set(shape)
        assert set(op["shapes"]) == set(op["scenarios"])


def test_module_fields(data):
    for m in data["modules"]:
        assert MODULE <= set(m)


def test_documented_fields_match(root):
    doc = (root / "docs" / "audit-json.md").read_text()
    for field in TOP | OP | SCENARIO | OP_SCENARIO:
        assert f"`{field}`" in doc, f"docs/audit-json.md does not document {field}"
