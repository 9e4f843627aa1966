"""The sync script on synthetic wheels built here (zip files; nothing is installed or downloaded)."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import pytest

from npuport import coverage
from npuport.coverage import sync
from tests.coverage.conftest import NPU_YAML, ROOT, TORCH_NATIVE_FUNCTIONS, build_wheel


def _script():
    spec = importlib.util.spec_from_file_location("sync_script", ROOT / "scripts" / "sync_torch_npu_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    build_wheel(folder / "torch_npu-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "torch_npu", "9.1.0",
                ["torch==9.1.0.*", "numpy"], {
                    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml": NPU_YAML,
                    "torch_npu/lib/libtorch_npu.so": b"\x7fELF" + b"\0" * 100 + b"TORCH_NPU_FALLBACK_CPU_DISABLE\0",
                })
    build_wheel(folder / "torch-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "torch", "9.1.0", [],
                {"torchgen/packaged/ATen/native/native_functions.yaml": TORCH_NATIVE_FUNCTIONS})
    build_wheel(folder / "torch_npu-9.0.0-cp310-cp310-manylinux2014_aarch64.whl", "torch_npu", "9.0.0",
                ["torch ==9.1.0"], {"torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml": NPU_YAML})
    return folder


def test_script_writes_a_loadable_reviewable_file(wheels, mappings):
    out = mappings / "coverage"
    assert _script().main(["9.1.0", "--wheel-dir", str(wheels), "--out", str(out), "--no-download"]) == 0
    text = (out / "torch_npu-9.1.0.yaml").read_text()
    assert text.startswith("# torch_npu 9.1.0 coverage, paired with torch 9.1.0. GENERATED")
    assert "  aten::mm: [op_api, acl_op]\n" in text
    assert "  aten::gelu: aten::gelu.out\n" in text
    npu = wheels / "torch_npu-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    assert sync.wheel_info(npu).sha256 in text
    db = coverage.load("9.1.0")
    assert db.fallback_error_env == "TORCH_NPU_FALLBACK_CPU_DISABLE"
    assert db.source["torch_wheel"] == "torch-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    assert db.source["script_version"] == sync.SCRIPT_VERSION
    assert db.native_composites == {"aten::scaled_dot_product_attention", "aten::lstm_cell"}
    assert set(db.dropped) == {"aten::copy_memory_", "aten::mean.names_dim", "aten::_coalesce"}
    r = coverage.resolve
    assert r("aten::mm", "9.1.0").status == "native"
    assert r("aten::gelu", "9.1.0").status == "native"
    assert r("aten::rms_norm", "9.1.0").composite_kind == "implicit"
    assert r("aten::zeros_like", "9.1.0").composite_kind == "explicit"
    assert r("aten::isin.Tensor_Tensor_out", "9.1.0").status == "cpu-fallback"
    assert r("aten::_scaled_dot_product_flash_attention", "9.1.0").status == "unsupported"
    assert r("aten::pow.Tensor_Scalar", "9.1.0").status == "cpu-fallback"
    assert r("npu::npu_rms_norm", "9.1.0").status == "npu-custom"
    assert r("aten::mean.names_dim", "9.1.0").status == "unsupported"  # not in the paired torch


def test_script_takes_wheel_paths_and_is_deterministic(wheels, tmp_path):
    npu = wheels / "torch_npu-9.0.0-cp310-cp310-manylinux2014_aarch64.whl"
    torch_wheel = wheels / "torch-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    script = _script()
    for out in (tmp_path / "a", tmp_path / "b"):
        assert script.main([str(npu), "--torch-wheel", str(torch_wheel), "--out", str(out)]) == 0
    first = (tmp_path / "a" / "torch_npu-9.0.0.yaml").read_text()
    assert first == (tmp_path / "b" / "torch_npu-9.0.0.yaml").read_text()
    assert "fallback_error_env: null" in first  # no libtorch_npu.so in that wheel


def test_mismatched_torch_wheel_is_a_user_error(wheels, tmp_path, capsys):
    npu = wheels / "torch_npu-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    bad = build_wheel(tmp_path / "torch-8.0.0-x.whl", "torch", "8.0.0", [],
                      {"torchgen/packaged/ATen/native/native_functions.yaml": TORCH_NATIVE_FUNCTIONS})
    assert _script().main([str(npu), "--torch-wheel", str(bad), "--out", str(tmp_path)]) == 2
    assert "torch wheel does not match torch-npu 9.1.0" in capsys.readouterr().err


def test_missing_wheel_without_download(tmp_path, capsys):
    assert _script().main(["1.2.3", "--wheel-dir", str(tmp_path), "--no-download", "--out", str(tmp_path)]) == 2
    assert "no torch_npu-1.2.3-*.whl" in capsys.readouterr().err


def test_paired_torch_version_forms(tmp_path):
    for req, want in (("torch==2.13.0.*", "2.13.0"), ("torch ==2.1.0", "2.1.0"), ("torch==2.6.0", "2.6.0")):
        wheel = build_wheel(tmp_path / f"w{want}.whl", "torch_npu", "1", [req], {})
        assert sync.paired_torch_version(sync.wheel_info(wheel)) == want
    assert zipfile.is_zipfile(wheel)
