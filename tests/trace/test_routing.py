"""MoE code that reads its routing on the host (npuport.trace.routing), traced with balanced routing: the per-expert
shapes are T // E rows, the same ops as a real run, the FLOPs of the real step; reads that are not routing still fail,
and models that never read routing are traced exactly as before."""

from __future__ import annotations

import contextlib
import importlib.util
from collections import Counter
from pathlib import Path

import pytest
import torch

from npuport.api import audit_model
from npuport.errors import NpuportError
from npuport.trace.routing import balanced, balanced_routing
from npuport.trace.run import new_fake_mode, trace_callable, trace_module

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "moe_host_routing.py"
BATCH, SEQ = 2, 8  # 16 tokens, top-2 over 8 experts: 32 routed pairs, 4 per expert


def _fixture():
    spec = importlib.util.spec_from_file_location("moe_host_routing", FIXTURE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_balanced_spreads_the_remainder_over_the_first_experts() -> None:
    assert balanced(32, 8) == [4] * 8
    assert balanced(10, 4) == [3, 3, 2, 2] and sum(balanced(1001, 64)) == 1001


def _up_rows(trace) -> Counter:
    """Rows of each expert's first matmul (the input of `up`), by expert."""
    out: Counter = Counter()
    for c in trace.calls:  # mm after linear's decomposition; linear itself under inference mode
        if c.op in ("aten::mm", "aten::linear") and c.module.endswith(".up"):
            out[c.module] += c.inputs[0].numel // c.inputs[0].shape[-1]
    return out


@pytest.mark.parametrize("block", ["WhereLoopMoE", "SplitMoE", "SplitMoE-histc", "NumpyLoopMoE", "MaskLoopMoE",
                                   "MaskLoopMoE-hit"])
def test_each_expert_gets_a_balanced_share(block: str) -> None:
    mod = _fixture()
    mode = new_fake_mode()
    with mode:
        model = {"SplitMoE-histc": lambda: mod.SplitMoE(histc=True), "MaskLoopMoE-hit": lambda: mod.MaskLoopMoE(True)
                 }.get(block, getattr(mod, block.split("-")[0]))()
    inputs = lambda: ((torch.randn(BATCH, SEQ, mod.HIDDEN),), {})  # noqa: E731
    with pytest.raises(Exception, match="DataDependent|DynamicOutputShape|local_scalar_dense|nonzero|bincount|numpy"):
        with torch.no_grad():
            trace_module(model, inputs, mode=mode)
    with balanced_routing() as routing, torch.no_grad():
        trace = trace_module(model, inputs, mode=mode)
    assert routing.answered > 0
    rows = _up_rows(trace)
    assert len(rows) == mod.EXPERTS and set(rows.values()) == {BATCH * SEQ * mod.TOP_K // mod.EXPERTS}


def test_the_same_ops_as_a_real_cpu_run() -> None:
    mod = _fixture()
    torch.manual_seed(0)
    real = mod.build_model()
    x = torch.randn(BATCH, SEQ, mod.HIDDEN)
    with torch.no_grad():  # real tensors, no fake mode: nothing to answer
        real_trace = trace_callable(real, lambda: real(x), "prefill", contextlib.nullcontext())
    mode = new_fake_mode()
    with mode:
        fake = mod.build_model()
    with balanced_routing(), torch.no_grad():
        fake_trace = trace_module(fake, lambda: ((torch.randn(BATCH, SEQ, mod.HIDDEN),), {}), mode=mode)
    # blocks 0-3 of the fixture; the last two call one_hot, which fake tensors decompose (unsqueeze == arange) where a
    # real run calls the native kernel (with its own value check): a difference of one_hot, not of the routing
    compute = lambda t: Counter(c.op for c in t.calls if c.kind == "compute" and "mm" not in c.op  # noqa: E731
                                and c.module.split(".")[0] in {"0", "1", "2", "3"})
    # the experts a real router skips (no token) do not run: compare what does not depend on the draw. The one
    # documented difference of fake tracing (tests/test_zoo_families.py): reading values back is _local_scalar_dense
    # per element there, where a real `.tolist()` copies the tensor to the host once (nothing on a CPU tensor)
    assert set(compute(fake_trace)) - {"aten::_local_scalar_dense"} == set(compute(real_trace))


def test_inference_mode_where_is_answered_too() -> None:
    """Under torch.inference_mode (DeepSeek-V3's inference model.py) `torch.where(mask)` dispatches aten.where, not
    nonzero."""
    mod = _fixture()
    mode = new_fake_mode()
    with mode:
        model = mod.WhereLoopMoE()
    with balanced_routing(), torch.inference_mode():
        trace = trace_module(model, lambda: ((torch.randn(BATCH, SEQ, mod.HIDDEN),), {}), mode=mode)
    assert any(c.op == "aten::where" for c in trace.calls)
    assert set(_up_rows(trace).values()) == {BATCH * SEQ * mod.TOP_K // mod.EXPERTS}


def test_a_one_hot_of_labels_is_not_routing() -> None:
    """Counts of a one-hot made from anything but a top-k's indices (class labels) are not answered."""

    class LabelCounts(torch.nn.Module):
        def forward(self, labels):
            onehot = torch.zeros(labels.shape[0], 8, dtype=torch.long).scatter(1, labels[:, None], 1)
            return torch.ones(sum(onehot.sum(0).tolist()))

    mode = new_fake_mode()
    with mode:
        model = LabelCounts()
    with balanced_routing() as routing, pytest.raises(Exception, match="DataDependent|local_scalar_dense"):
        trace_module(model, lambda: ((torch.randint(0, 8, (16,)),), {}), mode=mode)
    assert routing.answered == 0


def test_a_read_that_is_not_routing_still_fails() -> None:
    class Branches(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x  # a value, not routing: nothing to answer

    mode = new_fake_mode()
    with mode:
        model = Branches()
    with balanced_routing() as routing, pytest.raises(Exception, match="DataDependent|local_scalar_dense"):
        trace_module(model, lambda: ((torch.randn(4),), {}), mode=mode)
    assert routing.answered == 0


def test_the_audit_traces_every_scenario_and_says_how() -> None:
    _, data = audit_model(model=str(FIXTURE), scenarios=[f"train:batch={BATCH},seq={SEQ}",
                                                           f"prefill:batch={BATCH},seq={SEQ}"])
    assert data["failed_scenarios"] == []
    notes = [n for n in data["notes"] if "expert routing" in n]
    assert [n.split(":")[0] for n in notes] == ["train", "prefill"]
    assert abs(sum(o["time_share"] for o in data["ops"]) - 1.0) < 1e-9
    assert any(o["op"] == "aten::bincount" for o in data["ops"])


def test_a_model_that_needs_no_answers_is_traced_without_them(tmp_path: Path) -> None:
    _, data = audit_model(model=str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "tiny.py"),
                          scenarios=["prefill:batch=1,seq=4"])
    assert not any("expert routing" in n for n in data["notes"])


def test_a_value_read_that_routing_cannot_answer_reports_the_first_failure(tmp_path: Path) -> None:
    model = tmp_path / "branches.py"
    model.write_text("import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return x * 2 if x.sum() > 0 else x\n\n\ndef build_model():\n    return M()\n\n\n"
                     "def example_inputs(scenario):\n    return (torch.randn(scenario.batch, 4),)\n")
    with pytest.raises(NpuportError, match="does not read tensor values"):
        audit_model(model=str(model), scenarios=["prefill:batch=1,seq=4"])


def test_a_value_assertion_is_taken_as_holding_and_noted(tmp_path: Path) -> None:
    """`torch._check_tensor_all` (transformers' torch_compilable_check: ProphetNet's decode checks its position ids
    with it) reads a flag on the host only to raise on a broken input: traced as holding, the flag's reduction kept in
    the inventory, the note saying that a device synchronises there; an `if` on a value is still not answered."""
    model = tmp_path / "asserts.py"
    model.write_text("import torch\n\n\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.lin = torch.nn.Linear(4, 4)\n\n    def forward(self, x):\n"
                     "        torch._check_tensor_all(x.abs() >= 0, lambda: 'bad input')\n        return self.lin(x)\n\n\n"
                     "def build_model():\n    return M()\n\n\n"
                     "def example_inputs(scenario):\n    return (torch.randn(scenario.batch, 4),)\n")
    _, data = audit_model(model=str(model), scenarios=["prefill:batch=1,seq=4"])
    assert data["failed_scenarios"] == []
    notes = [n for n in data["notes"] if "asserts on tensor values" in n]
    assert len(notes) == 1 and notes[0].startswith("prefill:") and "synchronisation" in notes[0]
    assert not any("expert routing" in n for n in data["notes"])
    assert any(o["op"] == "aten::_is_all_true" for o in data["ops"])
    # the flag of anything but `_is_all_true` is not an assertion: still a failure
    with new_fake_mode(), balanced_routing() as routing:
        with pytest.raises(Exception, match="DataDependent|local_scalar_dense"):
            bool((torch.randn(4) > 0).all())
        torch._check_tensor_all(torch.randn(4) > 0)
    assert routing.asserted == 1 and routing.answered == 0
