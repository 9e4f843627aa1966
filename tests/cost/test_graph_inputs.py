"""What a reduce-overhead replay copies into its graph: one copy per input tensor (npuport.trace.memory counts them),
each costing the host graph_input_s (mappings/timing.yaml), scaled with the host's probe like every host cost."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from npuport.cost.inventory import GraphInputs, step_time
from npuport.cost.roofline import get_chip
from npuport.cost.timing import timing_for
from npuport.trace.memory import MemoryTrace, MemoryTracker
from npuport.trace.modules import ModuleStack


def _seeded(inputs: list) -> MemoryTrace:
    """The inputs made before the tracker runs, as an audit makes them (a view made under it is an op of the step)."""
    model = torch.nn.Linear(4, 4)
    with MemoryTracker(ModuleStack(model)) as mem:
        mem.seed(model, inputs)
    return mem.result


def test_each_input_tensor_is_one_copy_however_its_storage_is_shared():
    buf = torch.zeros(2, 4, 8)  # k and v as views of one buffer: two graph inputs, one storage
    ids = torch.zeros(1, 3, dtype=torch.long)
    got = _seeded([ids, [(buf[0], buf[1])]])
    assert (got.inputs, got.input_tensors, got.copied_inputs) == (ids.nbytes + buf.nbytes, 3, ids.nbytes + buf.nbytes)
    # one object passed twice (labels = input_ids) is one graph input; a weight passed in is not copied
    model = torch.nn.Linear(4, 4)
    with MemoryTracker(ModuleStack(model)) as mem:
        mem.seed(model, [ids, ids, model.weight])
    assert (mem.result.inputs, mem.result.input_tensors) == (ids.nbytes, 1)


def test_an_input_marked_static_is_not_copied():
    """torch._dynamo.mark_static_address (transformers' StaticCache marks its cache so): the graph reads the tensor in
    place, so the replay neither copies it nor holds it twice; it is still an input in memory."""
    ids, cache = torch.zeros(1, 3, dtype=torch.long), torch.zeros(2, 4, 8)
    torch._dynamo.mark_static_address(cache)
    other = torch.zeros(2, 4, 8)
    got = _seeded([ids, [cache, other]])
    assert got.inputs == ids.nbytes + cache.nbytes + other.nbytes
    assert (got.input_tensors, got.copied_inputs) == (2, ids.nbytes + other.nbytes)


def test_the_copies_cost_the_host_per_tensor_scaled_with_the_probe_and_nothing_when_unknown():
    from npuport.api import audit_model

    chip = get_chip("H200")
    tm = timing_for(chip)
    per = tm.host.graph_input_s
    assert per is not None and per > 0  # the H200 entry has its measured value
    report, _ = audit_model(model="examples/gpt/model.py", chip="H200", scenarios=["decode:batch=1,past=64,mode=reduce-overhead"])
    calls = report.inventory.calls["decode"]
    inputs = report.inventory.totals["decode"].graph_inputs
    assert inputs.tensors > 1 and inputs.bytes > 0
    base = step_time(calls, chip, "reduce-overhead", graph_inputs=GraphInputs())
    with_copies = step_time(calls, chip, "reduce-overhead", graph_inputs=inputs)
    assert with_copies.kernels == base.kernels + inputs.tensors
    assert with_copies.host_s - base.host_s == pytest.approx(inputs.tensors * per)
    slow = replace(tm, host=tm.host.scaled(2 * float(tm.host.reference_probe_s or 0)))
    twice = step_time(calls, chip, "reduce-overhead", model=slow, graph_inputs=inputs)
    assert twice.host_s == pytest.approx(2 * with_copies.host_s)
    unknown = replace(tm, host=replace(tm.host, graph_input_s=None))
    free = step_time(calls, chip, "reduce-overhead", model=unknown, graph_inputs=inputs)
    assert free.kernels == with_copies.kernels and free.host_s == pytest.approx(base.host_s)

