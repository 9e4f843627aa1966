"""Candidates side by side, roofline units, end-to-end verdicts: on the CPU, with the real clock or a fake one."""

from __future__ import annotations

import pytest

from npuport.bench.cases import cases_from_report
from npuport.bench.endtoend import EXCESS_TOLERANCE, EndToEnd
from npuport.bench.harness import BenchOptions, bench_case
from npuport.bench.runner import BenchReport, _collect_warnings
from npuport.cost.roofline import get_chip
from npuport.devices.timer import HostClock, Measurement
from npuport.devices.timing_stats import summarize

QUICK = BenchOptions(warmup=1, reps=5, min_reps=3, budget_s=0.05, compile=False, kernel_check=True, rotate_bytes=1 << 20)


class Ticking:
    """A fake clock advancing 0.5 us per read: every sample (two reads) is exactly 0.5 us whatever the op does."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += 500
        return self.t


def test_case_in_roofline_units_with_a_fake_clock(tiny_audit):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=1, shapes=1)
    res = bench_case(cases[0], "cpu", HostClock(Ticking()), QUICK, get_chip("H200"), 1 << 30)
    assert res.error is None and res.median_s == pytest.approx(5e-7)
    flops_s, bytes_s = res.achieved()
    assert flops_s == pytest.approx(cases[0].flops / 5e-7)
    assert res.roofline_s is not None and res.attainment() == pytest.approx(res.roofline_s / 5e-7)
    # the H200 profile carries measured ceilings (bf16 matmul 769 TFLOP/s, copy 4.3 TB/s): a slower roofline
    assert res.measured_roofline_s is not None and res.measured_roofline_s >= res.roofline_s
    assert res.vs_estimate() == pytest.approx(5e-7 / cases[0].estimated_s)
    assert res.sets >= 1


def test_sdpa_alternatives_side_by_side(tiny_audit):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    sdpa = next(c for c in cases if c.op == "aten::scaled_dot_product_attention")
    res = bench_case(sdpa, "cpu", HostClock(), QUICK, None, 1 << 30)
    names = {c.name: c for c in res.candidates}
    assert names["eager"].ratio_to_eager == pytest.approx(1.0)
    assert names["sdpa[math]"].measurement is not None and names["sdpa[math]"].ratio_to_eager > 0
    assert names["sdpa[cudnn_attention]"].skipped  # no cuDNN on a CPU: skipped with its reason
    assert res.kernel_check is not None and res.kernel_check.verdict == "ok"


def test_compile_candidate_can_be_disabled_and_errors_stay_per_case(tiny_audit):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=1, shapes=1)
    res = bench_case(cases[0], "cpu", HostClock(), QUICK, None, memory_cap=16)
    assert res.error and "GiB" in res.error and not res.candidates
    res = bench_case(cases[0], "cpu", HostClock(), QUICK, None, 1 << 30)
    assert [c.name for c in res.candidates] == ["eager"]


def _m(seconds: float) -> Measurement:
    return Measurement(summarize([seconds] * 5), (seconds,) * 5, 1, "device-events")


def test_end_to_end_flags_each_op_faster_step_slower():
    ok = EndToEnd(_m(1.0e-3), ops_sum_s=0.95e-3, ops_estimated_s=0.0, measured_calls=10, total_calls=10)
    assert not ok.flagged and "sum of its ops" in ok.verdict()
    slow = EndToEnd(_m(2.0e-3), ops_sum_s=1.0e-3, ops_estimated_s=0.0, measured_calls=10, total_calls=10,
                    kernel_time_s=1.1e-3, kernels=14)
    assert slow.flagged and slow.gap_s == pytest.approx(1e-3)
    text = slow.verdict()
    assert "each op faster, the step slower" in text and "idle 0.900 ms" in text and "14 kernels" in text
    none = EndToEnd(None, 1.0, 0.0, 1, 1, error="no model")
    assert not none.flagged and "not timed" in none.verdict()


def test_end_to_end_says_op_timings_that_exceed_the_step_do_not_add_up():
    # the numbers of a noisy CPU run: the ops' sum is 59x the step, which "the step is the sum of its ops" contradicted
    noisy = EndToEnd(_m(0.386e-3), ops_sum_s=22.0e-3, ops_estimated_s=0.804e-3, measured_calls=10, total_calls=12)
    text = noisy.verdict()
    assert noisy.ops_exceed_step and not noisy.flagged
    assert "do not add up" in text and "sum of its ops" not in text and "59.1x" in text
    assert "step 0.386 ms vs ops 22.804 ms" in text
    assert noisy.to_json()["ops_exceed_step"] is True and noisy.to_json()["verdict"] == text
    # a sum a little above the step is the normal cost of timing ops alone: still the sum of its ops
    near = EndToEnd(_m(1.0e-3), ops_sum_s=(1 + EXCESS_TOLERANCE) * 1.0e-3 * 0.99, ops_estimated_s=0.0, measured_calls=1,
                    total_calls=1)
    assert not near.ops_exceed_step and "sum of its ops" in near.verdict()
    over = EndToEnd(_m(1.0e-3), ops_sum_s=(1 + EXCESS_TOLERANCE) * 1.0e-3 * 1.01, ops_estimated_s=0.0, measured_calls=1,
                    total_calls=1)
    assert over.ops_exceed_step and "do not add up" in over.verdict()
    assert not EndToEnd(None, 1.0, 0.0, 1, 1, error="no model").ops_exceed_step
    # the report warns about it as it does about a step slower than its ops
    rep = BenchReport({}, "prefill", "cpu", "x86_64", None, "host-monotonic", QUICK, [], [], e2e=noisy)
    _collect_warnings(rep)
    assert rep.warnings == [text]
