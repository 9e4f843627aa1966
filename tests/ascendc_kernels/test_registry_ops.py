"""The registry (fusion-advisor API), torch.ops.npuport registration, meta kernels and device dispatch."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport.ascendc_kernels import registry, torch_ops
from npuport.ascendc_kernels.registry import KERNELS, PATTERNS, check_constraints, get_kernel
from npuport.errors import NpuportError


def test_registry_contents():
    assert set(KERNELS) == {"rms_norm", "add_rms_norm", "layer_norm", "flash_attention"}
    assert get_kernel("layer_norm").replaces == ("layer_norm", "add_layer_norm")
    assert get_kernel("flash_attention").replaces == ("attention",)
    for spec in KERNELS.values():
        assert spec.op == f"npuport::{spec.name}" and set(spec.replaces) <= set(PATTERNS)
        assert spec.source.is_file() and callable(spec.reference) and callable(spec.perf_model)
        assert "not yet" in spec.verified["npu numerics"]
    with pytest.raises(NpuportError, match="unknown kernel"):
        get_kernel("softmax")


def test_duplicates_and_unknown_patterns_fail_at_build():
    spec = get_kernel("rms_norm")
    with pytest.raises(NpuportError, match="registered twice"):
        registry._build((spec, spec))
    with pytest.raises(NpuportError, match="unknown patterns"):
        registry._build((dataclasses.replace(spec, replaces=("swiglu",)),))


def test_reimport_and_reload_do_not_reregister():
    before = len(torch_ops._libhold.LIBS)
    importlib.reload(registry)
    importlib.reload(torch_ops)
    torch_ops.ensure_registered()
    assert len(torch_ops._libhold.LIBS) == before == 1
    x = torch.randn(3, 8)
    assert torch.ops.npuport.rms_norm(x, torch.ones(8))[0].shape == (3, 8)


@pytest.mark.parametrize("kw, expect", [
    (dict(dtype="bfloat16", chip="Ascend910B", head_dim=128, layout="BSND", mask="causal", heads_q=32, heads_kv=8), []),
    (dict(dtype="float32", chip="Ascend910B", head_dim=128), ["dtype float32"]),
    (dict(dtype="float16", chip="Ascend910A", head_dim=512), ["chip Ascend910A", "head_dim 512 > 256"]),
    (dict(dtype="float16", chip="Ascend910B", head_dim=72, layout="TND"), ["not a multiple of 16", "layout TND"]),
    (dict(dtype="float16", chip="Ascend910B", heads_q=6, heads_kv=4, mask="alibi"), ["mask alibi", "heads_q 6"]),
])
def test_check_constraints_attention(kw, expect):
    got = check_constraints("flash_attention", **kw)
    assert len(got) == len(expect) and all(any(e in g for g in got) for e in expect), got


def test_check_constraints_norms():
    assert check_constraints("rms_norm", dtype="torch.bfloat16", chip="ascend910b", hidden=4096,
                             param_dtype="float32") == []
    assert check_constraints("add_rms_norm", dtype="int8", chip="Ascend910B") == ["dtype int8 not in "
                                                                                  "['float16', 'bfloat16', 'float32']"]
    with pytest.raises(NpuportError, match="unknown shape keys"):
        check_constraints("rms_norm", dtype="float16", chip="Ascend910B", hidden_size=4096)


def test_ops_on_cpu_run_the_reference():
    x, g = torch.randn(4, 33, dtype=torch.bfloat16), torch.rand(33, dtype=torch.bfloat16)
    y, rstd = torch.ops.npuport.rms_norm(x, g, 1e-6)
    ry, rr = get_kernel("rms_norm").reference(x, g, 1e-6)
    assert torch.equal(y, ry) and torch.equal(rstd, rr) and rstd.shape == (4, 1)
    y, r, s = torch.ops.npuport.add_rms_norm(x, x, g)
    assert torch.equal(s, (x.float() * 2).to(x.dtype))
    y, m, r, s = torch.ops.npuport.layer_norm(x, g, None, None)
    assert s.numel() == 0 and m.shape == (4, 1)
    q = torch.randn(1, 5, 2, 16, dtype=torch.float16)
    out, lse = torch.ops.npuport.flash_attention(q, q[:, :, :1], q[:, :, :1], None, True, None, "BSND")
    assert out.shape == q.shape and lse.shape == (1, 2, 5) and lse.dtype == torch.float32


def test_meta_kernels_under_fake_tensor_mode():
    with FakeTensorMode():
        x = torch.empty(2, 7, 4096, dtype=torch.bfloat16)
        g = torch.empty(4096, dtype=torch.float32)
        y, rstd = torch.ops.npuport.rms_norm(x, g)
        assert y.shape == x.shape and y.dtype == x.dtype and rstd.shape == (2, 7, 1) and rstd.dtype == torch.float32
        y, rstd, s = torch.ops.npuport.add_rms_norm(x, x, g)
        assert s.shape == x.shape and rstd.shape == (2, 7, 1)
        y, m, r, s = torch.ops.npuport.layer_norm(x, g, g, x)
        assert s.shape == x.shape and m.shape == r.shape == (2, 7, 1)
        y, m, r, s = torch.ops.npuport.layer_norm(x, g)
        assert s.shape == (0,)
        q = torch.empty(2, 4096, 32, 128, dtype=torch.float16)
        kv = torch.empty(2, 4096, 8, 128, dtype=torch.float16)
        out, lse = torch.ops.npuport.flash_attention(q, kv, kv, None, True, None, "BSND")
        assert out.shape == q.shape and lse.shape == (2, 32, 4096)
        out, lse = torch.ops.npuport.flash_attention(q.transpose(1, 2), kv.transpose(1, 2), kv.transpose(1, 2))
        assert out.shape == (2, 32, 4096, 128) and lse.shape == (2, 32, 4096)


def test_npu_dispatch_without_extension_raises_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("NPUPORT_ASCENDC_BUILD", str(tmp_path))
    impl = torch_ops._npu("rms_norm")
    with pytest.raises(NpuportError, match="extension is not built"):
        impl(torch.randn(2, 8), torch.ones(8))


def test_no_torch_npu_import_at_module_level():
    import sys
    assert "torch_npu" not in sys.modules  # importing the registry and running ops on CPU never loads it
    for path in registry.HERE.rglob("*.py"):
        top = [ln for ln in path.read_text().splitlines() if ln.startswith(("import torch_npu", "from torch_npu"))]
        assert not top, path
