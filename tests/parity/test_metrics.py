"""Metrics against hand-computed values, including NaN, Inf, zeros, empty tensors and bfloat16."""

from __future__ import annotations

import math

import pytest
import torch

from npuport.parity.metrics import stats_metrics, tensor_metrics
from npuport.parity.stats import tensor_stats


def m(a, b, rtol=1e-3, atol=0.0, dtype=torch.float64):
    return tensor_metrics(torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype), rtol, atol)


def test_hand_computed_values():
    r = m([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0])
    assert r.max_abs == 1.0
    assert r.max_rel == pytest.approx(0.2)
    assert r.rel_l2 == pytest.approx(1 / math.sqrt(1 + 4 + 9 + 25))
    assert r.cosine == pytest.approx(34 / (math.sqrt(30) * math.sqrt(39)))
    assert r.rmse == pytest.approx(0.5)
    assert r.frac_over_rtol == 0.25
    assert (r.nan_mismatch, r.inf_mismatch) == (0, 0)


def test_identical_is_zero_error():
    r = m([1.0, -2.0], [1.0, -2.0])
    assert (r.max_abs, r.rel_l2, r.cosine, r.frac_over_rtol) == (0.0, 0.0, 1.0, 0.0)


def test_nan_in_same_place_is_equal_but_mismatch_counts():
    same = m([float("nan"), 1.0], [float("nan"), 1.0])
    assert same.nan_mismatch == 0 and same.rel_l2 == 0.0 and same.frac_over_rtol == 0.0
    diff = m([float("nan"), 1.0, 2.0], [0.0, 1.0, 2.0])
    assert diff.nan_mismatch == 1 and diff.rel_l2 == 0.0  # the rest is compared over finite positions
    assert diff.frac_over_rtol == pytest.approx(1 / 3)


def test_inf_sign_and_position():
    assert m([float("inf"), 1.0], [float("inf"), 1.0]).inf_mismatch == 0
    assert m([float("inf"), 1.0], [float("-inf"), 1.0]).inf_mismatch == 1
    assert m([float("inf"), 1.0], [3.0, 1.0]).inf_mismatch == 1


def test_zeros():
    both = m([0.0, 0.0], [0.0, 0.0])
    assert (both.rel_l2, both.cosine) == (0.0, 1.0)
    ref_zero = m([1e-3, 0.0], [0.0, 0.0])
    assert ref_zero.rel_l2 == math.inf and ref_zero.cosine == 0.0


def test_empty_tensors():
    r = tensor_metrics(torch.empty(0, 4), torch.empty(0, 4), 1e-3, 0.0)
    assert (r.count, r.rel_l2, r.cosine, r.max_abs) == (0, 0.0, 1.0, 0.0)


def test_shape_mismatch_is_a_problem():
    r = tensor_metrics(torch.zeros(2, 3), torch.zeros(3, 2), 1e-3, 0.0)
    assert r.problem and "shape" in r.problem


def test_bf16_rounding_error_is_its_unit_roundoff():
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=torch.float64)
    r = tensor_metrics(x.to(torch.bfloat16), x, 1.6e-2, 1e-5)
    assert 5e-4 < r.rel_l2 < 3.9e-3  # unit roundoff 2^-8
    assert r.max_rel <= 2 ** -8 + 1e-12
    assert r.frac_over_rtol == 0.0


def test_stats_metrics_exact_and_lower_bound():
    torch.manual_seed(0)
    a = torch.randn(1000)
    sa = tensor_stats(a)
    assert stats_metrics(sa, sa, 1e-3, 0.0).rel_l2 == 0.0
    b = a * 1.1
    r = stats_metrics(tensor_stats(b), sa, 1e-3, 0.0)
    assert r.basis == "stats"
    assert r.rel_l2 == pytest.approx(0.1, rel=1e-5)  # samples and norms agree on a uniform scale
    nan = a.clone()
    nan[3] = float("nan")
    assert stats_metrics(tensor_stats(nan), sa, 1e-3, 0.0).nan_mismatch >= 1
