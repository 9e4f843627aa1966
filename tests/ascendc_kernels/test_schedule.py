"""Schedule references vs float64 golden on awkward shapes, with explicit tolerances; baselines vs torch."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from npuport.ascendc_kernels.checks import CASES, Case, _attn, _norm, run_case
from npuport.ascendc_kernels.compare import Tolerance, compare_output
from npuport.ascendc_kernels.flash_attention.reference import (
    flash_attention_golden,
    flash_attention_reference,
    flash_attention_schedule,
)
from npuport.ascendc_kernels.layer_norm.reference import layer_norm_reference
from npuport.ascendc_kernels.rms_norm.reference import rms_norm_reference

F16, BF16 = torch.float16, torch.bfloat16


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kernel}:{c.name}")
def test_shipped_cases(case):
    result = run_case(case)
    assert result, str(result)


EXTRA = [
    *(Case("flash_attention", f"gqa {nq}:{nkv} {lay} {dt} causal={c}", _attn(2, nq, nkv, 45, 45, 32, dt, lay, c),
           {"q_tile": 16, "kv_tile": 16})
      for (nq, nkv), lay, dt, c in itertools.product([(4, 4), (4, 2), (8, 2), (8, 1)], ["BNSD", "BSND"], [F16, BF16],
                                                      [False, True])),
    *(Case("flash_attention", f"{m} mask {dt}", _attn(2, 2, 1, 33, 70, 16, dt, mask=m), {"q_tile": 16, "kv_tile": 32})
      for m, dt in itertools.product(["bool", "additive"], [F16, BF16])),
    *(Case(k, f"{k} {r}x{h} {dt}", _norm(r, h, dt, two=(k == "add_rms_norm"), beta=(k == "layer_norm"),
                                         residual=(k == "layer_norm")), {"max_rows_per_tile": 4})
      for k, (r, h), dt in itertools.product(["rms_norm", "add_rms_norm", "layer_norm"], [(1, 3), (49, 127)],
                                             [F16, BF16, torch.float32])),
]


@pytest.mark.parametrize("case", EXTRA, ids=lambda c: c.name)
def test_extra_grid(case):
    result = run_case(case, seed=1)
    assert result, str(result)


def test_fully_masked_rows_give_zero_and_minus_inf():
    q = torch.randn(1, 2, 5, 16).half()
    k, v = (torch.randn(1, 2, 7, 16).half() for _ in range(2))
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False
    out, lse = flash_attention_schedule(q, k, v, mask, tiling=None)
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
    assert bool((lse[:, :, 2] == float("-inf")).all()) and bool(torch.isfinite(lse[:, :, [0, 1, 3, 4]]).all())
    ref_out, ref_lse = flash_attention_reference(q, k, v, mask)
    assert torch.equal(ref_out[:, :, 2], out[:, :, 2]) and torch.equal(ref_lse[:, :, 2], lse[:, :, 2])
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
@pytest.mark.parametrize("causal", [False, True])
def test_baseline_matches_sdpa(layout, causal):
    q, k, v = (torch.randn(2, 4, 33, 32) for _ in range(3))
    kk, vv = k[:, :2], v[:, :2]
    want = F.scaled_dot_product_attention(q, kk.repeat_interleave(2, 1), vv.repeat_interleave(2, 1),
                                          is_causal=causal)
    args = [t.transpose(1, 2) if layout == "BSND" else t for t in (q, kk, vv)]
    got, lse = flash_attention_reference(*args, is_causal=causal, layout=layout)
    got = got.transpose(1, 2) if layout == "BSND" else got
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert lse.shape == (2, 4, 33)


def test_baseline_bool_mask_polarity_matches_sdpa():
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    m = torch.rand(9, 9) > 0.3
    m[:, 0] = True
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert torch.allclose(flash_attention_reference(q, k, v, m)[0], want, atol=1e-5)


def test_norm_baselines_match_torch():
    x, g, b = torch.randn(7, 65), torch.rand(65), torch.randn(65)
    assert torch.allclose(rms_norm_reference(x, g, 1e-6)[0], F.rms_norm(x, (65,), g, 1e-6), atol=1e-6)
    assert torch.allclose(layer_norm_reference(x, g, b, None, 1e-5)[0], F.layer_norm(x, (65,), g, b, 1e-5),
                          atol=1e-5)


def test_schedule_is_closer_to_golden_than_tolerance_needs_and_result_explains_itself():
    q, k, v = (torch.randn(1, 1, 20, 16).half() for _ in range(3))
    got = flash_attention_schedule(q, k, v, is_causal=True)[0]
    gold = flash_attention_golden(q, k, v, is_causal=True)[0]
    tight = compare_output("out", got, gold, Tolerance(0.0, 0.0))
    assert not tight and "would pass with atol>=" in str(tight)
    assert compare_output("out", got, gold, Tolerance(tight.needed_atol, 0.0))
