"""Cases from a traced scenario and from the audit JSON alone; rebuilding calls with real tensors."""

from __future__ import annotations

import json

import pytest
import torch

from npuport.bench.cases import TensorSpec, cases_from_report, select_ops
from npuport.bench.from_json import cases_from_json, parse_signature, rule_call
from npuport.bench.rebuild import RebuildError, build, materialize, meta_cost, resolve_overload, rotation_sets
from npuport.errors import NpuportError


def test_select_ops_hot_by_default_top_n_otherwise():
    rows = [("a", "hot", 3.0), ("b", "medium", 2.0), ("c", "hot", 1.0), ("d", "cold", 0.0)]
    assert select_ops(rows, None) == ["a", "c"]
    assert select_ops(rows, 2) == ["a", "b"]
    assert select_ops(rows, 0) == ["a", "b", "c"]


def test_report_cases_carry_the_recorded_call(tiny_audit):
    cases, skipped = cases_from_report(tiny_audit, "prefill", top=10, shapes=2)
    ops = {c.op for c in cases}
    assert "aten::mm" in ops and "aten::scaled_dot_product_attention" in ops
    sdpa = next(c for c in cases if c.op == "aten::scaled_dot_product_attention")
    assert sdpa.kwargs.get("is_causal") is True and len(sdpa.inputs) == 3
    mm = next(c for c in cases if c.op == "aten::mm")
    assert mm.inputs[1].stride is not None  # the transposed weight keeps its recorded stride
    assert mm.flops == 2 * mm.inputs[0].shape[0] * mm.inputs[0].shape[1] * mm.inputs[1].shape[1]
    assert all(c.estimated_s > 0 and c.calls >= 1 for c in cases)
    # every case rebuilds and runs on the CPU, with the recorded output shape
    for c in cases:
        r = build(c, "cpu", sets=2)
        out = r.fn(r.bound_sets[0])
        assert out is not None
    every, _ = cases_from_report(tiny_audit, "prefill", every_op=True)
    assert len(every) >= len(cases)
    with pytest.raises(NpuportError):
        cases_from_report(tiny_audit, "decode")


def test_materialize_strides_random_data_and_int_bounds():
    t = materialize(TensorSpec((4, 8), "bfloat16", (1, 4)), "cpu", 2)
    assert t.stride() == (1, 4) and t.dtype == torch.bfloat16 and t.float().abs().sum() > 0
    i = materialize(TensorSpec((100,), "int64"), "cpu", 7)
    assert int(i.min()) >= 0 and int(i.max()) < 7
    b = materialize(TensorSpec((3, 0), "float32"), "cpu", 1)
    assert b.shape == (3, 0)
    bc = materialize(TensorSpec((4, 5), "float32", (0, 1)), "cpu", 1)  # broadcast (stride-0) input
    assert torch.equal(bc[0], bc[3])


def test_rotation_sets_span_the_cache_within_memory():
    from npuport.bench.cases import BenchCase

    case = BenchCase("aten::mm", "1024x1024 1024x1024", (TensorSpec((1024, 1024), "float32"),) * 2, (), {}, 1, 0.0, 0, True,
                     "float32", 0.0, "H200")
    assert rotation_sets(case, 64 << 20, 1 << 40) == 8  # 8 MiB per set
    assert rotation_sets(case, 64 << 20, 16 << 20) == 2  # memory caps it
    assert rotation_sets(case, 1 << 20, 1 << 40) == 1


def test_resolve_overload():
    assert resolve_overload("aten::mm") is torch.ops.aten.mm.default
    assert resolve_overload("aten::add.Tensor") is torch.ops.aten.add.Tensor
    with pytest.raises(RebuildError):
        resolve_overload("aten::no_such_op")


def test_shape_rules():
    assert parse_signature("2048x2048 2048x5632") == [(2048, 2048), (2048, 5632)]
    assert parse_signature("scalar 4") == [(), (4,)]
    assert parse_signature("-") == []
    notes: list[str] = []
    specs, args, kwargs = rule_call("aten::scaled_dot_product_attention", [(1, 8, 16, 4), (1, 2, 16, 4), (1, 2, 16, 4)], "bfloat16", notes)
    assert kwargs == {"is_causal": True, "enable_gqa": True} and "is_causal=True assumed" in notes[0]
    with pytest.raises(RebuildError, match="shapes\\[\\].example"):
        rule_call("aten::cat", [(2, 3), (2, 3)], "float32", [])


def test_json_cases(tiny_audit, tmp_path):
    from npuport.audit.json_form import audit_to_json
    from npuport.audit.report import AuditReport

    a = tiny_audit
    data = audit_to_json(AuditReport(a.model, a.scenarios, a.inventory, a.traces, None))  # as `npuport audit --format json` writes
    data = json.loads(json.dumps(data))
    sc, cases, skipped = cases_from_json(data, None, top=20, shapes=2)
    assert sc == "prefill"
    by_op = {c.op: c for c in cases}
    assert by_op["aten::mm"].origin == "example"  # the audit JSON carries one recorded call per shape
    for c in cases:
        r = build(c, "cpu")
        r.fn(r.bound_sets[0])
    # an audit JSON without the examples (older npuport) still rebuilds the common ops from the shape strings
    for op in data["ops"]:
        for scen in op["scenarios"].values():
            for shape in scen["shapes"]:
                shape.pop("example", None)
    sc, cases, skipped = cases_from_json(data, None, top=20, shapes=2)
    by_op = {c.op: c for c in cases}
    mm = by_op["aten::mm"]
    assert mm.origin == "shapes" and mm.flops > 0 and mm.bytes > 0
    assert by_op["aten::scaled_dot_product_attention"].flops > 0
    reasons = {s.op: s.reason for s in skipped}
    assert any("does not record" in r for r in reasons.values())
    for c in cases:
        r = build(c, "cpu")
        r.fn(r.bound_sets[0])
    with pytest.raises(NpuportError):
        cases_from_json({"schema": "other"}, None)
    with pytest.raises(NpuportError, match="not in the audit JSON"):
        cases_from_json(data, "train")


def test_json_example_field_is_exact():
    data = {"schema": "npuport.audit/1", "chip": "H200", "model": {"dtype": "bfloat16"},
            "scenarios": [{"name": "prefill", "kind": "prefill", "batch": 1, "seq": 4, "past": 0}],
            "ops": [{"op": "aten::cat", "kind": "compute", "dtypes": ["float32"], "matrix": False, "scenarios": {"prefill": {
                "class": "hot", "estimated_time_s": 1e-6, "shapes": [{"inputs": "2x3 2x3", "calls": 2, "estimated_time_s": 2e-6,
                "example": {"inputs": [{"shape": [2, 3], "dtype": "float32"}, {"shape": [2, 3], "dtype": "float32", "stride": [1, 2]}],
                            "args": [[{"tensor": 0}, {"tensor": 1}], -1], "kwargs": {}}}]}}}]}
    _, cases, skipped = cases_from_json(data, None)
    assert not skipped and cases[0].origin == "example" and cases[0].inputs[1].stride == (1, 2)
    r = build(cases[0], "cpu")
    assert r.fn(r.bound_sets[0]).shape == (2, 6)
    assert meta_cost(cases[0])[1] == (12 + 12) * 4
