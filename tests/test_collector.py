"""The audit runs with Python's cyclic collector paused (npuport.audit.collector) and hands it back as it found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from npuport import api
from npuport.audit.collector import collector_paused

GPT = Path(__file__).resolve().parents[1] / "examples" / "gpt" / "model.py"


@pytest.fixture
def collector_on() -> object:
    was = gc.isenabled()
    gc.enable()
    yield None
    if not was:
        gc.disable()


def test_paused_inside_restored_after_even_on_error(collector_on: object) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("a stage failed")
    assert gc.isenabled()
    # a caller that turned it off keeps it off
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
    gc.enable()


def test_the_audit_runs_paused_and_leaves_the_callers_setting(collector_on: object) -> None:
    seen: list[bool] = []
    api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=("prefill:batch=1,seq=16",)),
              progress=lambda _msg: seen.append(gc.isenabled()))
    assert seen and not any(seen)  # every stage's progress line came with the collector paused
    assert gc.isenabled()
