"""Device helpers that run anywhere: resolution, clock-state parsing (faked nvidia-smi samples), validation on cpu."""

from __future__ import annotations

import pytest

from npuport.devices import clocks
from npuport.devices import runtime as dev
from npuport.errors import NpuportError


def test_resolve_and_clock_on_cpu():
    assert dev.resolve("cpu") == "cpu"
    assert dev.clock_for("cpu").kind == "host-monotonic"
    assert dev.chip_for("cpu") is None
    with pytest.raises(NpuportError):
        dev.resolve("tpu")
    with pytest.raises(NpuportError):
        dev.resolve("cuda:x")
    state = clocks.clock_state("cpu")
    assert state["available"]


def test_throttle_warnings_from_a_clock_sample():
    cool = {"clocks.sm": 1980.0, "clocks.max.sm": 1980.0, "event_reasons": "0x0000000000000000"}
    assert clocks.clock_warnings(cool) == []
    hot = {"clocks.sm": 1200.0, "clocks.max.sm": 1980.0, "event_reasons": "0x0000000000000040"}
    got = clocks.clock_warnings(hot)
    assert any("61%" in w for w in got) and any("hardware thermal slowdown" in w for w in got)
    idle = {"event_reasons": "0x0000000000000001"}  # GPU idle is not a slowdown
    assert clocks.clock_warnings(idle) == []


def test_sampler_summary_uses_busy_samples_only():
    s = clocks.ClockSampler("cpu")
    s.samples = [{"utilization.gpu": 0.0, "clocks.sm": 345.0, "clocks.max.sm": 1980.0},
                 {"utilization.gpu": 99.0, "clocks.sm": 1980.0, "clocks.max.sm": 1980.0},
                 {"utilization.gpu": 97.0, "clocks.sm": 1500.0, "clocks.max.sm": 1980.0}]
    out = s.summary()
    assert out["busy_samples"] == 2 and out["sm_clock_mhz_under_load"]["min"] == 1500.0
    assert out["warnings"]


def test_pinning_restores_affinity():
    import os

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity API")
    before = os.sched_getaffinity(0)
    core = min(before)
    with dev.pinned(core):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(NpuportError):
        with dev.pinned(10_000):
            pass


def test_validate_runs_on_cpu():
    from npuport.bench.validate import validate

    out = validate("cpu", gemm_n=128, copy_bytes=1 << 20, tolerance=10.0, reps=5)
    assert [r["case"].split()[0] for r in out["rows"]] == ["aten::mm", "aten::copy_"]
    assert all(r["harness_s"] and r["events_s"] for r in out["rows"])
