"""Performance models: estimates in roofline units at Llama-2-7B shapes, labelled as estimates."""

from __future__ import annotations

import dataclasses

import pytest

from npuport.ascendc_kernels.estimates import llama7b_estimates
from npuport.ascendc_kernels.flash_attention.perf import flash_attention_perf
from npuport.ascendc_kernels.rms_norm.perf import rms_norm_perf
from npuport.cost.roofline import get_chip

CHIP = get_chip("Ascend910B")


def test_llama_estimates_are_sane():
    ests = llama7b_estimates(CHIP)
    assert [e.kernel for e in ests] == ["rms_norm", "add_rms_norm", "layer_norm", "flash_attention",
                                        "flash_attention"]
    for e in ests:
        assert 0 < e.roofline_s <= e.modeled_s and 0 < e.attainment <= 1
        assert e.bound in ("memory", "vector", "cube") and "ESTIMATE" in e.render()
        assert any("assumed" in a for a in e.assumptions)
    norm = ests[0]
    assert norm.bound == "memory"
    # compulsory bytes: read x, write y (bf16), rstd, gamma per core
    assert norm.hbm_bytes == pytest.approx(2 * 32768 * 4096 * 2, rel=0.01)


def test_attention_counts_follow_the_tiling():
    causal = flash_attention_perf(8, 32, 32, 4096, 4096, 128, "bfloat16", CHIP, mask="causal")
    full = flash_attention_perf(8, 32, 32, 4096, 4096, 128, "bfloat16", CHIP, mask="none")
    dense = 4 * 8 * 32 * 4096 * 4096 * 128
    assert full.cube_flops == pytest.approx(dense, rel=1e-6)
    assert 0.5 * dense < causal.cube_flops < 0.53 * dense  # half, plus the diagonal blocks' waste


def test_model_reads_the_chip_profile():
    slow = dataclasses.replace(CHIP, memory_bandwidth=CHIP.memory_bandwidth / 2)
    a, b = rms_norm_perf(4096, 4096, "bfloat16", CHIP), rms_norm_perf(4096, 4096, "bfloat16", slow)
    assert b.memory_s == pytest.approx(2 * a.memory_s)
