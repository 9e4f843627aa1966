"""Device memory on fake tensors, checked by hand: storages counted once, the optimizer model's arithmetic, a
decode cache, the fit verdict, and the JSON fields (scenarios[].memory, docs/audit-json.md)."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport.api import audit_model
from npuport.cost.memory import capacities, optimizer_memory
from npuport.trace.memory import MemoryTracker
from npuport.trace.modules import ModuleStack

MODEL = '''
import torch

def build_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))

def example_inputs(scenario):
    if scenario.kind == "decode":
        return None
    return (torch.randn(scenario.batch, 64),), {}

def loss_fn(out, inputs):
    return out.square().mean()
'''
P1, P2 = 64 * 32 + 32, 32 * 8 + 8  # parameters of the two Linear layers
PARAM_BYTES = (P1 + P2) * 4


def test_a_storage_is_counted_once_and_freed() -> None:
    with FakeTensorMode():
        root = torch.nn.Identity()
        with MemoryTracker(ModuleStack(root)) as mem:
            a = torch.empty(1000)
            v = a.view(10, 100)
            v.add_(1)
            assert mem.live == 4000  # a view and an in-place op share a's storage
            b = a + 1
            assert mem.live == 8000
            del b
            gc.collect()
            assert mem.live == 4000
    assert mem.result.peak == 8000


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("m") / "tiny_mlp.py"
    path.write_text(MODEL)
    return path


def test_training_memory_by_hand(tiny: Path) -> None:
    _, d = audit_model(model=str(tiny), scenarios=["train:batch=4,seq=1"])
    m = d["scenarios"][0]["memory"]
    assert m["weights_bytes"] == PARAM_BYTES
    assert m["grads_bytes"] == PARAM_BYTES
    assert m["optimizer"] == "adamw"
    assert m["optimizer_states_bytes"] == 2 * PARAM_BYTES  # exp_avg, exp_avg_sq in float32
    assert m["optimizer_step_temporary_bytes"] == PARAM_BYTES  # foreach sqrt(exp_avg_sq)
    assert m["held_bytes"] == PARAM_BYTES + 2 * PARAM_BYTES  # weights + states; gradients set to None
    # alive when forward returned: ReLU's output (4x32: its own backward and the second Linear's weight gradient
    # read it; the first Linear's output is freed once ReLU ran), the model's output (4x8, which square() saves and
    # the caller holds) and the scalar loss; square()'s own output is freed after mean()
    assert m["activations_bytes"] == (4 * 32 + 4 * 8 + 1) * 4
    # a model this small peaks in the optimizer step (after backward + states + temporary), on both steps
    states, temp = 2 * PARAM_BYTES, PARAM_BYTES
    opt_step = m["step0_peak_bytes"]
    assert opt_step > m["traced_peak_bytes"]
    assert m["peak_bytes"] == max(m["traced_peak_bytes"] + states, opt_step)
    # alive at the step: weights, gradients, the inputs and the output the caller still holds (the loss is dropped)
    assert opt_step - states - temp == 2 * PARAM_BYTES + 4 * 64 * 4 + 4 * 8 * 4


def test_optimizer_models_by_hand() -> None:
    w, b = torch.empty(32, 64), torch.empty(32)
    assert optimizer_memory([w, b], "sgd", False).states == (32 * 64 + 32) * 4
    ada = optimizer_memory([w, b], "adafactor", False)
    assert ada.states == (32 + 64) * 4 + 32 * 4  # a row and a column vector for the matrix, the bias in full
    eight = optimizer_memory([w], "adamw8bit", False)
    assert eight.states == 2 * (32 * 64 + 4 * math.ceil(32 * 64 / 2048))
    half = torch.empty(32, 64, dtype=torch.bfloat16)
    assert optimizer_memory([half], "adamw", False).states == 2 * 32 * 64 * 2  # states in the parameter's dtype
    mixed = optimizer_memory([half], "adamw", True)
    assert mixed.states == 2 * 32 * 64 * 4 and mixed.master_weights == 32 * 64 * 4  # 2 + 2 + 12 bytes per parameter


def test_decode_cache_is_the_inputs(tmp_path: Path) -> None:
    path = tmp_path / "kv.py"
    path.write_text('''
import torch

class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(16, 16)

    def forward(self, x, k_cache, v_cache):
        q = self.q(x)
        att = (q @ k_cache.transpose(-1, -2)).softmax(-1)
        return att @ v_cache

def build_model():
    return Attn()

def example_inputs(scenario):
    b, past = scenario.batch, scenario.past
    return (torch.randn(b, 1, 16), torch.randn(b, past, 16), torch.randn(b, past, 16)), {}
''')
    _, d = audit_model(model=str(path), scenarios=["decode:batch=2,past=128"])
    m = d["scenarios"][0]["memory"]
    assert m["inputs_bytes"] == 2 * 1 * 16 * 4 + 2 * (2 * 128 * 16 * 4)
    assert m["weights_bytes"] == (16 * 16 + 16) * 4


def test_fit_verdicts_follow_capacity_minus_reserve(tiny: Path) -> None:
    _, d = audit_model(model=str(tiny), scenarios=["prefill:batch=1,seq=1"])
    m = d["scenarios"][0]["memory"]
    caps = {c.chip: c for c in capacities()}
    assert {"Ascend910B", "Ascend910B4", "Ascend910A", "H200", "H100-SXM", "A100-SXM-80GB", "A100-SXM-40GB"} <= set(caps)
    for row in m["fit"]:
        c = caps[row["chip"]]
        if c.capacity is None:
            assert row["fits"] is None
            continue
        assert row["usable_bytes"] == c.capacity - c.reserve
        assert row["margin_bytes"] == row["usable_bytes"] - m["peak_bytes"] and row["fits"] is True


MEMORY = {"peak_bytes", "weights_bytes", "inputs_bytes", "traced_peak_bytes", "traced_peak_phase", "traced_peak_module",
          "held_bytes", "fit", "changes"}
TRAIN = {"activations_bytes", "grads_bytes", "optimizer", "optimizer_states_bytes", "optimizer_step_temporary_bytes",
         "master_weights_bytes", "step0_peak_bytes", "activations_by_module"}
FIT = {"chip", "capacity_bytes", "reserve_bytes", "reserve_assumed", "usable_bytes", "fits", "margin_bytes", "verdict"}


def test_json_fields_are_frozen(tiny: Path) -> None:
    _, d = audit_model(model=str(tiny), scenarios=["train:batch=4,seq=1", "prefill:batch=1,seq=1"])
    d = json.loads(json.dumps(d))
    for sc in d["scenarios"]:
        assert MEMORY <= set(sc["memory"])
        assert FIT <= set(sc["memory"]["fit"][0])
    assert TRAIN <= set(d["scenarios"][0]["memory"])


def test_changes_make_an_oversized_step_fit() -> None:
    root = Path(__file__).resolve().parents[2]
    _, d = audit_model(hf_config=str(root / "examples" / "configs" / "tinyllama-1.1b.json"),
                       scenarios=["train:batch=32,seq=2048"])
    m = d["scenarios"][0]["memory"]
    target = next(f for f in m["fit"] if f["chip"] == d["chip"])
    assert target["fits"] is False
    assert m["changes"] and any(c["fits"] for c in m["changes"])
    for c in m["changes"]:
        assert c["fits"] == (c["peak_bytes"] <= target["usable_bytes"])


def test_a_model_no_single_change_fits_gets_the_fewest_devices() -> None:
    """Hundreds of billions of parameters on one 64 GB chip: training is planned as full recomputation with ZeRO-3
    across the fewest devices (micro-batching when the kept activations alone are too many), serving as the weights
    and cache split across the fewest devices past one 8-device node; each checked by hand."""
    from types import SimpleNamespace

    from npuport.cost.memory import OptimizerMemory, ScenarioMemory, plan

    gib = 2**30
    usable = 60 * gib
    train = ScenarioMemory("train", weights=1250 * gib, inputs=1 * gib, traced_peak=1250 * gib + 1 * gib + 1250 * gib + 3400 * gib,
                           peak_phase="backward", peak_module="", grads=1250 * gib,
                           optimizer=OptimizerMemory("adamw", 2500 * gib, 1250 * gib, 0))
    train.peak = 7651 * gib
    plan(train, usable, 30.0, 61, SimpleNamespace(batch=8, seq=4096, past=0))
    last = train.changes[-1]
    # kept activations 3400 * 2 / 34 = 200 GiB: micro-batch 1 keeps 25 GiB; held 5000 GiB: over 128 devices 39.1 GiB
    # (65.1 GiB in all: over), over 256 devices 19.5 GiB (45.5 GiB: fits)
    assert last["change"] == ("full activation recomputation with ZeRO-3 / FSDP across 256 devices, micro-batch 1 with 8 "
                              "gradient-accumulation steps")
    assert last["fits"] and last["peak_bytes"] == 1 * gib + 200 * gib // 8 + 5000 * gib // 256
    assert last["extra_time_s"] == 10.0
    assert not any(c["fits"] for c in train.changes[:-1])

    serve = ScenarioMemory("decode", weights=1250 * gib, inputs=2 * gib, traced_peak=1253 * gib, peak_phase="forward",
                           peak_module="")
    serve.peak = 1253 * gib
    plan(serve, usable, 0.1, 61, SimpleNamespace(batch=1, seq=1, past=4095))
    split = [c for c in serve.changes if c["fits"]]
    assert [c["change"] for c in split] == ["weights and cache split across 32 devices"]  # 1253 / 16 = 78 GiB: over
    assert split[0]["peak_bytes"] == 1253 * gib // 32

    small = ScenarioMemory("decode", weights=100 * gib, inputs=1 * gib, traced_peak=101 * gib, peak_phase="forward",
                           peak_module="")
    small.peak = 101 * gib
    plan(small, usable, 0.1, 32, SimpleNamespace(batch=1, seq=1, past=4095))
    assert [c["change"] for c in small.changes if c["fits"]] == ["tensor parallel degree 2"]  # within a node: as before
