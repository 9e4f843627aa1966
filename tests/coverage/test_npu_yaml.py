from __future__ import annotations

from npuport.coverage.npu_yaml import entry_paths, parse_npu_yaml
from tests.coverage.conftest import NPU_YAML


def test_registration_rules():
    regs = parse_npu_yaml(NPU_YAML)
    assert regs.native["view"] == ("core",)
    assert regs.native["mm"] == ("op_api", "acl_op")
    assert regs.native["add.Tensor"] == ("op_api", "acl_op", "dvm")
    assert regs.native["lstm_cell"] == ("acl_op",)
    assert "_coalesce" not in regs.native and "_coalesce" in regs.skipped and regs.sparse["_coalesce"] == ("op_api",)
    assert regs.custom["npu_rms_norm"].exposed and regs.custom["npu_rms_norm"].paths == ("op_api", "acl_op")
    assert regs.custom["copy_memory_"].paths == ("core",)


def test_entry_paths():
    assert entry_paths({"func": "clone", "op_api": True}) == ("op_api", "core")
    assert entry_paths({"func": "x", "dispatch": {"CompositeExplicitAutograd": "x"}}) == ("composite_explicit",)
    assert entry_paths("copy_") == ("core",)
