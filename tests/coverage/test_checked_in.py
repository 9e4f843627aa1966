"""The shipped data (mappings/coverage/, generated from the real wheels) gives the statuses a Llama model needs.

Each expectation below was checked by hand against the yaml in the wheel (see docs/coverage.md).
"""

from __future__ import annotations

import pytest

from npuport import coverage

ISSUE_RELEASES = ["2.1.0.post10", "2.3.1", "2.5.1", "2.6.0", "2.7.1", "2.9.0", "2.11.0", "2.13.0"]


def test_the_issue_releases_are_checked_in():
    versions = coverage.available_versions()
    assert set(ISSUE_RELEASES) <= set(versions)
    assert versions == sorted(versions, key=coverage.database.version_key)
    assert coverage.default_version() == versions[-1]


@pytest.mark.parametrize("version", ["2.13.0", "2.14.0"])
def test_llama_ops(version):
    if version not in coverage.available_versions():
        pytest.skip(f"{version} not checked in")
    r = coverage.resolve
    assert r("aten::mm", version).status == "native"
    assert r("aten::bmm", version).status == "native"
    assert r("aten::addmm", version).status == "native"
    rms = r("aten::rms_norm", version)
    assert (rms.status, rms.composite_kind) == ("composite", "implicit")
    sdpa = r("aten::scaled_dot_product_attention", version)
    assert sdpa.status == "native" and "op_api" in sdpa.paths
    assert "aten::scaled_dot_product_attention" in coverage.native_composites(version)
    assert {"aten::matmul", "aten::softmax.int"} <= coverage.native_composites(version)
    flash = r("aten::_scaled_dot_product_flash_attention", version)
    assert flash.status == "unsupported"  # CUDA-only kernel, and no CPU kernel for the fallback
    gelu = r("aten::gelu", version)  # 2.13 dropped 'gelu' from the yaml but kept 'gelu.out'
    assert gelu.status == "native" and "aten::gelu.out" in gelu.detail
    for op in ("aten::_softmax", "aten::native_layer_norm", "aten::silu", "aten::embedding", "aten::index_put_",
               "aten::cat", "aten::mul.Tensor", "aten::add.Tensor"):
        assert r(op, version).status == "native", op
    assert r("npu::npu_rms_norm", version).status == "npu-custom"
    assert coverage.custom_op_schema("npu::npu_rms_norm", version) == (
        "npu::npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)")


def test_isin_tensor_tensor_out_history():
    # Not in torch_npu 2.3.1's yaml: a CPU fallback there; registered (op_api) in every other checked-in release.
    old = coverage.resolve("aten::isin.Tensor_Tensor_out", "2.3.1")
    assert old.status == "cpu-fallback" and "no switch" in old.risk
    assert coverage.resolve("aten::isin.Tensor_Tensor_out", "2.13.0").status == "native"


def test_gelu_functional_dropped_after_2_9():
    # the yaml lists gelu up to 2.9.0; 2.11.0 and later keep only gelu.out (the functional runs through it)
    assert "aten::gelu" in coverage.load("2.9.0").native
    assert "aten::gelu" not in coverage.load("2.11.0").native
    assert "aten::gelu" not in coverage.load("2.13.0").native
    assert "aten::gelu.out" in coverage.load("2.13.0").native


def test_acl_only_ops_carry_the_risk():
    lstm = coverage.resolve("aten::lstm_cell", "2.13.0")
    assert lstm.paths == ("acl_op",) and lstm.risk == coverage.ACL_ONLY_RISK


def test_fallback_switch_from_2_13():
    assert coverage.first_release_with_switch() == "2.13.0"
    assert coverage.load("2.13.0").fallback_error_env == coverage.FALLBACK_ERROR_ENV
    assert coverage.load("2.11.0").fallback_error_env is None


def test_counts_2_13_match_the_facts():
    # docs/coverage.md and ../shared/facts: 1077 aten overloads, 419 custom ops in 2.13.0/2.14.0
    db = coverage.load("2.13.0")
    assert len(db.native) == 1077 and len(db.custom) == 419
    assert db.torch == "2.13.0" and len(db.source["torch_sha256"]) == 64


def test_cpu_trace_artifact_is_recognised():
    # A CPU trace of SDPA shows this CPU-only kernel; the audit must report SDPA as one native op instead.
    r = coverage.resolve("aten::_scaled_dot_product_flash_attention_for_cpu", "2.13.0")
    assert r.status == "cpu-fallback"
