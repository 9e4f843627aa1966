"""Resolution logic on small fixture databases."""

from __future__ import annotations

import pytest

from npuport import coverage
from npuport.errors import NpuportError


def test_native_with_paths_and_acl_only_risk(write_db):
    write_db("1.0.0")
    mm = coverage.resolve("aten::mm", "1.0.0")
    assert (mm.status, mm.paths, mm.risk) == ("native", ("op_api", "acl_op"), None)
    lstm = coverage.resolve("aten::lstm_cell", "1.0.0")
    assert lstm.status == "native" and lstm.risk == coverage.ACL_ONLY_RISK
    assert "CompositeImplicitAutograd" in lstm.detail


def test_default_overload_is_bare_and_malformed_names_raise(write_db):
    write_db("1.0.0")
    assert coverage.resolve("aten::mm.default", "1.0.0").op == "aten::mm"
    for bad in ("mm", "aten::", "aten::mm.", "torch.mm", ""):
        with pytest.raises(NpuportError, match="not an operator overload name"):
            coverage.resolve(bad, "1.0.0")


def test_structured_delegate_follows_the_out_variant(write_db):
    write_db("1.0.0")
    gelu = coverage.resolve("aten::gelu", "1.0.0")
    assert gelu.status == "native" and gelu.paths == ("op_api",) and "aten::gelu.out" in gelu.detail
    isin = coverage.resolve("aten::isin.Tensor_Tensor", "1.0.0")
    assert isin.status == "cpu-fallback" and "aten::isin.Tensor_Tensor_out" in isin.detail


def test_composites(write_db):
    write_db("1.0.0")
    rms = coverage.resolve("aten::rms_norm", "1.0.0")
    assert (rms.status, rms.composite_kind, rms.all_children_native) == ("composite", "implicit", None)
    zeros = coverage.resolve("aten::zeros_like", "1.0.0")
    assert (zeros.status, zeros.composite_kind) == ("composite", "explicit")


def test_composite_children(write_db):
    write_db("1.0.0")
    good = coverage.resolve_composite_children("aten::rms_norm", ["aten::pow.Tensor_Scalar", "aten::mm"], "1.0.0")
    assert good.all_children_native is True and [c.op for c in good.children] == ["aten::pow.Tensor_Scalar", "aten::mm"]
    bad = coverage.resolve("aten::rms_norm", "1.0.0", children=["aten::mean.dim", "aten::mm", "aten::mean.dim"])
    assert bad.all_children_native is False and len(bad.children) == 2
    assert "aten::mean.dim (cpu-fallback)" in bad.detail
    assert coverage.resolve("aten::mm", "1.0.0", children=["aten::mean.dim"]).children == ()  # not a composite


def test_fallback_and_unsupported(write_db):
    write_db("1.0.0")
    write_db("2.0.0", fallback_error_env="TORCH_NPU_FALLBACK_CPU_DISABLE")
    old = coverage.resolve("aten::mean.dim", "1.0.0")
    assert old.status == "cpu-fallback" and "no switch" in old.risk and "from torch_npu 2.0.0" in old.risk
    new = coverage.resolve("aten::mean.dim", "2.0.0")
    assert "TORCH_NPU_FALLBACK_CPU_DISABLE=1" in new.risk
    assert coverage.resolve("aten::_flash", "2.0.0").status == "unsupported"
    missing = coverage.resolve("aten::not_in_torch", "2.0.0")
    assert missing.status == "unsupported" and "not an operator of torch 2.99.0" in missing.detail


def test_npu_custom_and_other_namespaces(write_db):
    write_db("1.0.0")
    r = coverage.resolve("npu::npu_rms_norm", "1.0.0")
    assert (r.status, r.paths) == ("npu-custom", ("op_api",))
    assert coverage.resolve("npu::npu_nope", "1.0.0").status == "unsupported"
    assert coverage.custom_op_schema("npu::npu_rms_norm", "1.0.0").startswith("npu::npu_rms_norm(Tensor self")
    assert coverage.custom_op_schema("npu_rms_norm", "1.0.0") is not None
    assert coverage.custom_op_schema("npu::npu_nope", "1.0.0") is None
    other = coverage.resolve("torchvision::nms", "1.0.0")  # torchvision is not installed here: no kernel at all
    assert other.status == "unsupported" and "no NPU, composite or CPU kernel" in other.detail


def test_other_namespaces_follow_what_their_library_registered(write_db):
    """An op of another library is decided by its registrations in the traced environment: FSDP2's fsdp:: copies are
    registered for PrivateUse1 by torch itself; a library op with a CPU kernel only goes through the CPU fallback."""
    import torch
    import torch.distributed.fsdp  # noqa: F401 - registers fsdp::*

    write_db("1.0.0")
    assert coverage.resolve("fsdp::all_gather_copy_in", "1.0.0").status == "native"
    lib = torch.library.Library("npuport_test_ns", "DEF")
    lib.define("cpu_only(Tensor x) -> Tensor")
    lib.impl("cpu_only", lambda x: x.clone(), "CPU")
    got = coverage.resolve("npuport_test_ns::cpu_only", "1.0.0")
    assert got.status == "cpu-fallback" and "CPU only" in got.detail


def test_versions_order_default_and_unknown(write_db):
    for v in ("2.10.0", "2.1.0.post10", "2.1.0", "2.9.0", "2.1.0rc1"):
        write_db(v)
    assert coverage.available_versions() == ["2.1.0rc1", "2.1.0", "2.1.0.post10", "2.9.0", "2.10.0"]
    assert coverage.default_version() == "2.10.0"
    assert coverage.resolve("aten::mm").version == "2.10.0"
    with pytest.raises(NpuportError, match=r"no coverage data for torch_npu 3\.0.*2\.1\.0rc1, 2\.1\.0"):
        coverage.resolve("aten::mm", "3.0")


def test_native_composites_and_earliest_without_fallback(write_db):
    write_db("1.0.0")
    write_db("2.0.0", native={"aten::mm": ["op_api"], "aten::mean.dim": ["op_api"]}, native_composites=[],
             torch_tables={"implicit": ["aten::rms_norm"], "explicit": [], "cpu": ["aten::isin.Tensor_Tensor_out"], "none": []})
    assert coverage.native_composites("1.0.0") == frozenset({"aten::lstm_cell", "aten::matmul"})
    assert coverage.earliest_without_fallback(["aten::mm", "aten::mean.dim"]) == "2.0.0"
    assert coverage.earliest_without_fallback(["aten::mm"]) == "1.0.0"
    assert coverage.earliest_without_fallback(["aten::isin.Tensor_Tensor_out"]) is None
