from __future__ import annotations

import pytest

from npuport import coverage
from npuport.errors import NpuportError


def test_cost_uses_the_mapped_link_rate():
    rate = coverage.link_rate()
    assert rate == coverage.link_rate("pcie4_x16") == 31507692307
    assert coverage.fallback_cost_s(int(rate)) == pytest.approx(1.0)
    assert coverage.fallback_cost_s(2_000_000, link_bytes_per_s=1e6) == pytest.approx(2.0)
    assert coverage.fallback_cost_s(0) == 0.0
    with pytest.raises(NpuportError, match="unknown host link"):
        coverage.link_rate("nvlink")
    with pytest.raises(NpuportError, match="positive"):
        coverage.fallback_cost_s(1, link_bytes_per_s=0)


def test_env_name():
    assert coverage.FALLBACK_ERROR_ENV == "TORCH_NPU_FALLBACK_CPU_DISABLE"
