"""HCCL support lookups (npuport/coverage/hccl.py over mappings/hccl.yaml): ops, dtypes, ReduceOps per torch_npu
release, the op names a dispatch mode records, backend strings and environment variables."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
import torch.distributed  # noqa: F401 - registers the c10d ops
import torch.distributed._functional_collectives  # noqa: F401 - registers the _c10d_functional ops
import yaml

from npuport import mappings
from npuport.coverage import hccl
from npuport.coverage.database import available_versions
from npuport.errors import MappingError, NpuportError

RELEASES = hccl.hccl_releases()


def test_the_releases_are_ones_npuport_has_coverage_for() -> None:
    # every HCCL release is a coverage release; a coverage release without its own HCCL entry (a post release)
    # resolves to the nearest earlier one
    assert set(RELEASES) <= set(available_versions())
    assert hccl.resolve_release("2.10.0.post7")[0] == "2.9.0"


def test_a_supported_op() -> None:
    r = hccl.hccl_support("2.9.0", "c10d._allgather_base_", "bfloat16")
    assert r and r.status == "supported" and r.method == "_allgather_base" and r.hccl_api == "HcclAllGather"
    assert "v7.3.0-pytorch2.9.0" in r.source or "ProcessGroupHCCL.cpp" in r.source
    assert r.release == "2.9.0" and r.note == ""


@pytest.mark.parametrize("name", ["c10d.allreduce_", "c10d::allreduce_", "c10d::allreduce_.default",
                                  "torch.ops.c10d.allreduce_.default", "allreduce"])
def test_op_name_spellings(name: str) -> None:
    assert hccl.hccl_support("2.11.0", name, "float16").method == "allreduce"


def test_emulated_ops() -> None:
    gather = hccl.hccl_support("2.5.1", "c10d.gather_", "float32")
    assert gather.status == "emulated" and "via allgather" in gather.note and "does not support gather" in gather.note
    assert "TORCH_NPU_USE_COMPATIBLE_IMPL" in hccl.hccl_support("2.11.0", "c10d.gather_", "float32").note
    avg = hccl.hccl_support("2.5.1", "c10d.allreduce_", "float32", "avg")
    assert avg.status == "emulated" and "SUM, then an in-place divide" in avg.note


@pytest.mark.parametrize("release", RELEASES)
def test_float64_reductions_raise_and_gathers_do_not(release: str) -> None:
    r = hccl.hccl_support(release, "c10d.allreduce_", "float64")
    assert not r and r.status == "raises" and "Unsupported data type float64" in r.note
    assert hccl.hccl_support(release, "c10d._reduce_scatter_base_", "torch.float64").status == "raises"
    assert hccl.hccl_support(release, "c10d.broadcast_", "float64").status == "supported"


AVG = {"2.1.0.post10": "raises", "2.3.1": "raises", "2.5.1": "emulated", "2.6.0": "emulated", "2.7.1": "emulated",
       "2.9.0": "emulated", "2.11.0": "emulated", "2.13.0": "emulated", "2.14.0": "emulated"}
PREMUL = {r: ("emulated" if r in ("2.11.0", "2.13.0", "2.14.0") else "raises") for r in AVG}


@pytest.mark.parametrize("release", RELEASES)
def test_reduce_ops_per_release(release: str) -> None:
    """AVG: rejected in 6.0.x ("Cannot use ReduceOp.AVG"), SUM then divide from 7.0.0; PREMUL_SUM from 26.x; the
    bitwise ops never; integer AVG fails in the divide."""
    assert hccl.hccl_support(release, "c10d.allreduce_", "float32", "avg").status == AVG[release]
    assert hccl.hccl_support(release, "c10d.reduce_scatter_", "bfloat16", "AVG").status == AVG[release]
    assert hccl.hccl_support(release, "c10d.allreduce_", "float16", "premul_sum").status == PREMUL[release]
    assert hccl.hccl_support(release, "c10d.allreduce_", "int32", "ReduceOp.BAND").status == "raises"
    assert hccl.hccl_support(release, "c10d.allreduce_", "int32", "avg").status == "raises"
    assert hccl.hccl_support(release, "c10d.allreduce_", "int32", "max").status == "supported"


def test_bool_is_cast_for_allreduce_but_not_for_reduce_scatter() -> None:
    ok = hccl.hccl_support("2.7.1", "c10d.allreduce_", "bool")
    assert ok.status == "supported" and "bool is cast to int32" in ok.note
    assert hccl.hccl_support("2.7.1", "c10d._reduce_scatter_base_", "bool").status == "raises"


def test_coalesced_methods_arrive_with_7_0_0() -> None:
    assert hccl.hccl_support("2.3.1", "c10d.allreduce_coalesced_", "float32").status == "raises"
    assert hccl.hccl_support("2.5.1", "c10d.allreduce_coalesced_", "float32").status == "supported"
    assert hccl.hccl_support("2.3.1", "c10d.allgather_into_tensor_coalesced_", "float32").status == "absent"


def test_native_functional_all_gather_needs_the_coalesced_method() -> None:
    """torch >= 2.3 routes _c10d_functional.all_gather_into_tensor to allgather_into_tensor_coalesced, which
    torch_npu 2.3.1 (6.0.rc2) lacks; torch 2.1 has no native functional collectives."""
    old = hccl.hccl_support("2.3.1", "_c10d_functional.all_gather_into_tensor", "bfloat16")
    assert old.status == "absent" and old.method == "allgather_into_tensor_coalesced"
    assert "TORCH_DISABLE_NATIVE_FUNCOL" in old.note
    assert hccl.hccl_support("2.5.1", "_c10d_functional.all_gather_into_tensor", "bfloat16").status == "supported"
    first = hccl.hccl_support("2.1.0.post10", "_c10d_functional.all_gather_into_tensor", "bfloat16")
    assert first.status == "supported" and first.method == "_allgather_base" and "torch 2.1.0" in first.note


def test_an_unknown_release_resolves_to_the_nearest_earlier() -> None:
    r = hccl.hccl_support("2.10.0", "c10d.allreduce_", "float32", "avg")
    assert r.release == "2.9.0" and r.status == "emulated"
    assert "2.10.0 is not in hccl.yaml" in r.note and "nearest earlier release 2.9.0" in r.note
    release, note = hccl.resolve_release("2.3.1.post4")  # the 6.0.0 build: the note tells the user to check
    assert release == "2.3.1" and "COMPATIBILITY.md" in note
    assert hccl.resolve_release("2.14.0") == ("2.14.0", "")
    with pytest.raises(NpuportError, match="no HCCL data for torch_npu 1.11.0"):
        hccl.hccl_support("1.11.0", "c10d.allreduce_", "float32")


def test_unknown_names_are_user_errors() -> None:
    with pytest.raises(NpuportError, match="unknown collective op"):
        hccl.hccl_support("2.9.0", "aten::mm", "float32")
    with pytest.raises(NpuportError, match="unknown ReduceOp"):
        hccl.hccl_support("2.9.0", "c10d.allreduce_", "float32", "median")


def test_complex_has_no_hccl_type() -> None:
    r = hccl.hccl_support("2.14.0", "c10d.allgather_", "complex64")
    assert r.status == "raises" and "views complex tensors as real" in r.note


@pytest.mark.parametrize("backend, release, keyword, target, converted", [
    ("nccl", "2.1.0.post10", True, "hccl", "hccl"),
    ("gloo", "2.14.0", True, "gloo", "gloo"),
    ("cuda:nccl,cpu:gloo", "2.7.1", True, "npu:hccl,cpu:gloo", "cuda:hccl,cpu:gloo"),
    ("cuda:nccl,cpu:gloo", "2.9.0", True, "npu:hccl,cpu:gloo", "cuda:hccl,cpu:gloo"),
    ("cuda:nccl,cpu:gloo", "2.9.0", False, "npu:hccl,cpu:gloo", "npu:hccl,cpu:gloo"),
    ("cuda:nccl,cpu:gloo", "2.11.0", True, "npu:hccl,cpu:gloo", "npu:hccl,cpu:gloo"),
])
def test_backend_strings(backend: str, release: str, keyword: bool, target: str, converted: str) -> None:
    m = hccl.map_backend(backend, release, keyword=keyword)
    assert (m.target, m.transfer_to_npu) == (target, converted)
    assert ("doesn't have NCCL built in" in m.note) == ("nccl" in backend)
    assert ("not 'npu:hccl,cpu:gloo'" in m.note) == (converted != target)


def test_env_equivalents() -> None:
    assert hccl.hccl_env("NCCL_ALGO").hccl == "HCCL_ALGO"  # type: ignore[union-attr]
    row = hccl.hccl_env("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    assert row is not None and row.hccl == "HCCL_ASYNC_ERROR_HANDLING" and row.reader == "torch_npu"
    assert hccl.hccl_env("HCCL_BUFFSIZE").nccl == "NCCL_BUFFSIZE"  # type: ignore[union-attr]
    assert hccl.hccl_env("NCCL_NVLS_ENABLE") is None
    assert any("hccl_config" in h for _, h, _ in hccl.init_options())


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_every_fact_carries_a_source() -> None:
    doc = mappings.load_yaml("hccl.yaml")
    facts = [(p, d) for p, d in _walk(doc) if p and {"status", "dtypes", "method", "hccl", "tag"} & set(d)]
    assert len(facts) > 80
    assert [p for p, d in facts if not d.get("source")] == []


def test_every_collective_op_torch_registers_is_mapped() -> None:
    """Against the op list of the installed torch (not written here): every c10d / _c10d_functional collective a
    dispatch mode can record has a route, bar the waits, helpers and ops without a backend method."""
    ops = {name.replace("::", ".") for name in torch._C._dispatch_get_all_op_names()
           if name.startswith(("c10d::", "_c10d_functional::"))}
    helpers = {"_c10d_functional.wait_tensor", "_c10d_functional._wrap_tensor_autograd", "c10d.check_for_nan"}
    missing = sorted(ops - helpers - set(mappings.load_yaml("hccl.yaml")["dispatch_ops"]))
    assert missing == []


def test_cross_references_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = Path(mappings.__file__).resolve().parent
    root = tmp_path / "mappings"
    shutil.copytree(shipped, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    doc = yaml.safe_load((root / "hccl.yaml").read_text())
    doc["ops"]["allreduce_coalesced"]["since"].reverse()
    (root / "hccl.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    hccl._data.cache_clear()
    hccl.env_table.cache_clear()
    try:
        with pytest.raises(MappingError, match="ops.allreduce_coalesced.since.*oldest release to the newest"):
            hccl.hccl_releases()
    finally:
        hccl._data.cache_clear()
        hccl.env_table.cache_clear()
