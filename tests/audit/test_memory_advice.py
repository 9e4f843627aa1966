"""The changes the memory plan proposes name their numbers: 'split 4 ways', not 'split t ways'."""

from __future__ import annotations

import re
from types import SimpleNamespace

from npuport.cost.memory import GiB, OptimizerMemory, ScenarioMemory, plan


def _notes(m: ScenarioMemory) -> list[str]:
    return [c["note"] for c in m.changes]


def test_tensor_parallel_names_its_degree() -> None:
    # a train step of 100 GiB that only tensor parallelism fits on 60 GiB (batch 1: no micro-batching)
    m = ScenarioMemory("train", weights=20 * GiB, inputs=0, traced_peak=80 * GiB, peak_phase="backward", peak_module="",
                       grads=20 * GiB, optimizer=OptimizerMemory("adamw", 20 * GiB, 20 * GiB, 0), peak=100 * GiB)
    plan(m, 60 * GiB, 1.0, 0, SimpleNamespace(batch=1, past=0, seq=4096))
    tp = next(c for c in m.changes if c["change"].startswith("tensor parallel degree"))
    degree = int(re.search(r"degree (\d+)", tp["change"]).group(1))
    assert tp["note"] == f"weights, gradients, states and activations split {degree} ways"
    assert not any(re.search(r"\b[tn] ways", n) for n in _notes(m))


def test_sharding_across_many_devices_names_the_count() -> None:
    # hundreds of GiB that no single change fits: every byte sharded over the fewest devices
    m = ScenarioMemory("train", weights=1000 * GiB, inputs=0, traced_peak=3000 * GiB, peak_phase="backward",
                       peak_module="", grads=1000 * GiB, optimizer=OptimizerMemory("adamw", 2000 * GiB, 1000 * GiB, 0),
                       peak=5000 * GiB)
    plan(m, 60 * GiB, 10.0, 32, SimpleNamespace(batch=8, past=0, seq=4096))
    last = m.changes[-1]
    n = int(re.search(r"across (\d+) devices", last["change"]).group(1))
    assert last["note"].startswith(f"weights, gradients and states sharded {n} ways")
    assert not any(re.search(r"\b[tn] ways", note) for note in _notes(m))


def test_inference_split_names_its_degree() -> None:
    m = ScenarioMemory("decode", weights=80 * GiB, inputs=10 * GiB, traced_peak=95 * GiB, peak_phase="forward",
                       peak_module="", peak=95 * GiB)
    plan(m, 60 * GiB, 0.1, 32, SimpleNamespace(batch=1, past=4096, seq=1))
    tp = next(c for c in m.changes if c["change"] == "tensor parallel degree 2")
    assert tp["note"] == "weights and cache split 2 ways"
