from __future__ import annotations

import pytest

from npuport.errors import NpuportError
from npuport.fusion.routes import score_fusion, score_op, weights


def test_default_weights_are_the_seeds():
    w = weights()
    assert w == pytest.approx({"performance": 0.30, "coverage": 0.25, "dev_time": 0.20, "maintainability": 0.10,
                               "cross_hardware": 0.10, "community": 0.05})


def test_presets_and_overrides_normalize():
    w = weights("fast-poc")
    assert w["dev_time"] > w["performance"] and sum(w.values()) == pytest.approx(1.0)
    w = weights("default", "performance=1,coverage=1,dev_time=0,maintainability=0,cross_hardware=0,community=0")
    assert w["performance"] == pytest.approx(0.5)


@pytest.mark.parametrize("bad", ["speed=1", "performance=x", "performance"])
def test_bad_overrides(bad):
    with pytest.raises(NpuportError):
        weights("default", bad)
    with pytest.raises(NpuportError):
        weights("nope")


ROW = {"pattern": "rms_norm", "module": "m", "scenario": "prefill", "replacement": {"id": "npu_rms_norm", "kind": "torch_npu"},
       "rejected": []}


def test_fused_op_wins_when_it_fits():
    r = score_fusion(ROW, unfused_s=3.0, fused_s=1.0, w=weights())
    assert r["recommended"] == "torch_npu_fused"
    dims = next(c for c in r["candidates"] if c["route"] == "torch_npu_fused")["dimensions"]
    assert dims["coverage"]["basis"] == "evidence" and dims["dev_time"]["basis"] == "judgement"


def test_constraint_failure_removes_the_route():
    row = dict(ROW, replacement=None, rejected=[{"id": "npu_rms_norm", "kind": "torch_npu", "op": "npu::npu_rms_norm", "reasons": ["no bfloat16 on Ascend310P"]}])
    r = score_fusion(row, unfused_s=3.0, fused_s=1.0, w=weights())
    assert r["recommended"] != "torch_npu_fused"
    c = next(c for c in r["candidates"] if c["route"] == "torch_npu_fused")
    assert c["dimensions"]["coverage"]["score"] == 0 and "bfloat16" in c["dimensions"]["coverage"]["why"]


def test_eager_performance_is_the_roofline_ratio():
    r = score_fusion(ROW, unfused_s=4.0, fused_s=1.0, w=weights("default", "performance=1,coverage=0,dev_time=0,maintainability=0,cross_hardware=0,community=0"))
    eager = next(c for c in r["candidates"] if c["route"] == "eager")
    assert eager["score"] == pytest.approx(10 * 0.75 * 0.25, abs=0.01)


def test_op_routes_use_coverage():
    assert score_op("aten::mm", "native", weights())["recommended"] == "cann_aclnn"
    fb = score_op("aten::isin.Tensor_Tensor_out", "cpu-fallback", weights())
    assert fb["recommended"] != "cann_aclnn"
    assert any(c["route"] == "catlass" for c in score_op("aten::mm", "native", weights())["candidates"])
    # a kernel that computes on the host under a condition the trace shows (cpu-path) is no library route; one whose
    # host path depends on what the trace cannot decide (conditional) counts half, as a composite does
    def lib_cov(status: str) -> float:
        r = score_op("aten::logit", status, weights())
        return next(c for c in r["candidates"] if c["route"] == "cann_aclnn")["dimensions"]["coverage"]["score"]
    assert (lib_cov("cpu-path"), lib_cov("conditional"), lib_cov("composite"), lib_cov("native")) == (0.0, 5.0, 5.0, 10.0)
