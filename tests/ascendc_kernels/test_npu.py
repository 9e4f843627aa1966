"""Kernel vs reference on a real Ascend NPU (910B). Skipped cleanly where torch_npu (and so an NPU) is absent.

Run on an Ascend machine after `npuport kernels build`: pytest -m npu tests/ascendc_kernels/test_npu.py
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from npuport.ascendc_kernels.checks import CASES, OUTPUT_KINDS
from npuport.ascendc_kernels.compare import compare_output, tolerance
from npuport.ascendc_kernels.registry import get_kernel

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(importlib.util.find_spec("torch_npu") is None, reason="torch_npu not installed (no NPU)"),
]


def _npu(x):
    return x.to("npu") if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kernel}:{c.name}")
def test_kernel_matches_golden_on_npu(case):
    import torch_npu  # noqa: F401

    from npuport.ascendc_kernels import registry  # noqa: F401  (registers torch.ops.npuport)

    inputs = case.make(torch.Generator().manual_seed(0))
    spec = get_kernel(case.kernel)
    got = getattr(torch.ops.npuport, case.kernel)(**{k: _npu(v) for k, v in inputs.items()})
    gold = spec.golden(**inputs)
    dtype = next(v for k, v in inputs.items() if k in ("x", "x1", "q")).dtype
    for (name, kind), g, e in zip(OUTPUT_KINDS[case.kernel], got, gold):
        tol = tolerance(kind, torch.float32 if kind == "stat" else dtype)
        res = compare_output(name, g.cpu(), e, tol)
        assert res, str(res)
