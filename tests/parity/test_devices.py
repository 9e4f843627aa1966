"""Device specs, the CPU-backed npu stand-in, absent devices, fault specs."""

from __future__ import annotations

import pytest
import torch

from npuport.devices.device import NpuDevice, NumericsPolicy, parse_device
from npuport.errors import NpuportError


def test_specs():
    assert parse_device("cpu").torch_device == "cpu"
    assert parse_device("cpu64").float64
    assert parse_device("cuda:1").torch_device == "cuda:1"
    f = parse_device("cpu-fault:aten::mul.Tensor@model.layers.1.mlp*0.2").fault
    assert (f.op, f.module, f.scale) == ("aten::mul.Tensor", "model.layers.1.mlp", 0.2)
    for bad in ("tpu", "cuda:x", "cpu-fault:mul@x", "cpu-fault:aten::mul.Tensor@m*abc"):
        with pytest.raises(NpuportError):
            parse_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_absent_is_a_clear_error():
    with pytest.raises(NpuportError, match="is not present"):
        parse_device("cuda").check_present()


def test_npu_without_torch_npu_or_standin_is_absent(monkeypatch):
    monkeypatch.delenv("NPUPORT_NPU_STANDIN", raising=False)
    dev = parse_device("npu")
    with pytest.raises(NpuportError, match="torch_npu is not installed"):
        dev.check_present()


def test_standin_npu_code_path(standin_npu):
    dev = parse_device("npu:0")
    assert isinstance(dev, NpuDevice) and dev.standin and dev.torch_device == "cpu"
    assert "not a real NPU" in dev.label
    dev.check_present()
    settings = dev.set_numerics_policy(NumericsPolicy())
    assert settings["npu_matmul_allow_hf32"] is False and settings["npu_conv_allow_hf32"] is False
    assert settings["ACL_PRECISION_MODE"] == "must_keep_origin_dtype" and settings["deterministic_algorithms"]
    calls = dev.backend.calls
    assert ("set_option", {"ACL_PRECISION_MODE": "must_keep_origin_dtype"}) in calls
    assert ("use_compatible_impl", True) in calls
    dev.seed(3)
    assert ("manual_seed_all", 3) in calls
    v = dev.versions()
    assert v["standin"] is True and v["torch_npu"] == "standin"


def test_parity_run_restores_global_numerics(llama_config):
    from npuport.parity.run import run_parity
    from npuport.parity.session import RunOptions, Target

    before = (torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision())
    assert run_parity("cpu", "cpu", Target(hf_config=llama_config), RunOptions(scenario="prefill:batch=1,seq=8"))
    assert (torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision()) == before


def test_preserved_numerics_restores_and_leaves_unchanged_flags_alone(monkeypatch):
    """Restoring a deterministic flag nobody changed would import torch._inductor (1.2 s on the 2-core CPU) for
    every comparison of two records."""
    from npuport.devices.device import preserved_numerics

    before = torch.are_deterministic_algorithms_enabled()
    calls: list[bool] = []
    real = torch.use_deterministic_algorithms
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda mode, **kw: (calls.append(mode), real(mode, **kw)))
    with preserved_numerics():
        pass
    assert calls == []
    with preserved_numerics():
        real(not before)
    assert calls == [before] and torch.are_deterministic_algorithms_enabled() == before
