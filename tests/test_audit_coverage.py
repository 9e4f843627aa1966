"""The coverage column and summary in the audit (checked-in torch_npu data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npuport.api import audit_model

FIX = Path(__file__).resolve().parent / "fixtures" / "models"
CONFIGS = Path(__file__).resolve().parent.parent / "examples" / "configs"
coverage = pytest.importorskip("npuport.coverage")


def test_fallback_is_reported_with_cost_and_switch():
    _, data = audit_model(model=str(FIX / "uses_isin.py"), torch_npu="2.3.1")
    cov = data["coverage"]
    assert cov["version"] == "2.3.1"
    fb = {f["op"]: f for f in cov["cpu_fallback"]}
    assert "aten::isin.Tensor_Tensor" in fb
    assert fb["aten::isin.Tensor_Tensor"]["bytes_crossing_host"] > 0
    assert fb["aten::isin.Tensor_Tensor"]["estimated_transfer_s"] > 0
    assert cov["fallback_error_env"] is None  # the switch exists only from torch_npu 2.13.0
    assert any("no switch" in n for n in data["notes"])
    assert "2.3.1" in cov["releases_with_fallback"]
    assert cov["earliest_without_fallback"] is not None and cov["earliest_without_fallback"] != "2.3.1"
    isin = next(o for o in data["ops"] if o["op"] == "aten::isin.Tensor_Tensor")
    assert isin["coverage"]["status"] == "cpu-fallback"
    assert any("leave the NPU" in n for n in data["notes"])


def test_llama_runs_native_on_the_newest_release():
    _, data = audit_model(hf_config=str(CONFIGS / "llama-2-7b.json"), scenarios=["prefill:seq=64"])
    cov = data["coverage"]
    assert cov["version"] == coverage.default_version()
    assert not cov["cpu_fallback"]
    by_op = {o["op"]: o["coverage"]["status"] for o in data["ops"] if "coverage" in o}
    assert by_op["aten::mm"] == "native"
    assert by_op["aten::scaled_dot_product_attention"] == "native"
    shares = sum(v["time_share"] for v in cov["by_status"].values())
    assert shares == pytest.approx(sum(o["time_share"] for o in data["ops"] if o["kind"] == "compute"))


def test_unknown_torch_npu_version_is_a_user_error(tmp_path):
    from npuport.errors import NpuportError

    with pytest.raises(NpuportError):
        audit_model(model=str(FIX / "tiny.py"), torch_npu="1.0")
