"""Small coverage databases written into a temporary mappings/ (NPUPORT_MAPPINGS), and synthetic wheels."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable

import pytest

from npuport.coverage.sync import render_document

ROOT = Path(__file__).resolve().parents[2]

TORCH_NATIVE_FUNCTIONS = """\
- func: mm(Tensor self, Tensor mat2) -> Tensor
  structured_delegate: mm.out
- func: mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU: mm_out_cpu
    CUDA: mm_out_cuda
- func: gelu(Tensor self, *, str approximate='none') -> Tensor
  structured_delegate: gelu.out
- func: gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU, CUDA: gelu_out
- func: rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor
- func: scaled_dot_product_attention(Tensor query, Tensor key, Tensor value) -> Tensor
- func: _scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value) -> (Tensor, Tensor)
  dispatch:
    CUDA: _scaled_dot_product_flash_attention_cuda
- func: zeros_like(Tensor self) -> Tensor
  dispatch:
    CompositeExplicitAutograd: zeros_like
  autogen: zeros_like.out
- func: isin.Tensor_Tensor_out(Tensor elements, Tensor test_elements, *, Tensor(a!) out) -> Tensor(a!)
  dispatch:
    CPU, CUDA: isin_Tensor_Tensor_out
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  structured: True
  ufunc_inner_loop:
    Generic: add (AllAndComplex)
  dispatch:
    SparseCPU: add_out_sparse_cpu
- func: pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor
  dispatch:
    CPU: pow
- func: lstm_cell(Tensor input, Tensor[] hx, Tensor w_ih, Tensor w_hh) -> (Tensor, Tensor)
- func: _nested_thing(Tensor self) -> Tensor
  dispatch: {}
- func: view(Tensor(a) self, SymInt[] size) -> Tensor(a)
  dispatch:
    CPU, Meta: view
"""

NPU_YAML = """\
backend: NPU
cpp_namespace: at_npu::native
supported:
- view
- func: mm(Tensor self, Tensor mat2) -> Tensor
  impl_ns: acl_op, op_api
- func: gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out) -> Tensor(a!)
  impl_ns: op_api
- func: scaled_dot_product_attention(Tensor query, Tensor key, Tensor value) -> Tensor
  impl_ns: op_api
- func: lstm_cell(Tensor input, Tensor[] hx, Tensor w_ih, Tensor w_hh) -> (Tensor, Tensor)
  impl_ns: acl_op
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  impl_ns: acl_op, op_api, dvm
- func: _coalesce(Tensor self) -> Tensor
  sparse: op_api
- copy_memory_
- func: mean.names_dim(Tensor self, Dimname[1] dim) -> Tensor
  impl_ns: acl_op, op_api
custom:
- func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)
  impl_ns: op_api, acl_op
  exposed: true
- func: copy_memory_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
symint:
- view
"""


def build_wheel(path: Path, dist: str, version: str, requires: list[str], members: dict[str, bytes | str]) -> Path:
    """A minimal but valid-looking wheel: METADATA plus the given members."""
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {dist.replace('_', '-')}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{info}/METADATA", "\n".join(meta) + "\n\nlong description: Requires-Dist: not-a-header\n")
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def mappings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty mappings/ with the shipped host_link.yaml (and kernels.yaml: `coverage show` names npuport's own
    Ascend C kernel for an op), selected through NPUPORT_MAPPINGS."""
    root = tmp_path / "mappings"
    (root / "coverage").mkdir(parents=True)
    shutil.copy(ROOT / "npuport" / "mappings" / "coverage" / "host_link.yaml", root / "coverage" / "host_link.yaml")
    shutil.copy(ROOT / "npuport" / "mappings" / "kernels.yaml", root / "kernels.yaml")
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    return root


def document(version: str, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "npuport.coverage/1",
        "torch_npu": version,
        "torch": "2.99.0",
        "source": {
            "torch_npu_wheel": f"torch_npu-{version}-fixture.whl", "torch_npu_sha256": "0" * 64,
            "torch_npu_yaml": "fixture", "torch_wheel": "torch-fixture.whl", "torch_sha256": "1" * 64,
            "torch_yaml": "fixture", "script": "tests", "script_version": 1,
        },
        "fallback_error_env": None,
        "native": {"aten::mm": ["op_api", "acl_op"], "aten::matmul": ["op_api"], "aten::lstm_cell": ["acl_op"],
                   "aten::pow.Tensor_Scalar": ["op_api"], "aten::gelu.out": ["op_api"]},
        "native_composites": ["aten::lstm_cell", "aten::matmul"],
        "autograd": [],
        "quant": {},
        "sparse": {},
        "dropped": {},
        "custom": {"npu::npu_rms_norm": {"schema": "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
                                         "paths": ["op_api"], "exposed": True}},
        "delegates": {"aten::gelu": "aten::gelu.out", "aten::isin.Tensor_Tensor": "aten::isin.Tensor_Tensor_out"},
        "torch_tables": {"implicit": ["aten::rms_norm"], "explicit": ["aten::zeros_like"],
                         "cpu": ["aten::isin.Tensor_Tensor_out", "aten::mean.dim"], "none": ["aten::_flash"]},
    }
    doc.update(overrides)
    return doc


@pytest.fixture
def write_db(mappings: Path) -> Callable[..., Path]:
    def write(version: str, **overrides: Any) -> Path:
        path = mappings / "coverage" / f"torch_npu-{version}.yaml"
        path.write_text(render_document(document(version, **overrides)), encoding="utf-8")
        return path

    return write
