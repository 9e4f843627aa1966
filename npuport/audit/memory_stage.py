"""Audit stage: device memory per scenario from the traced steps (npuport.trace.memory) and the optimizer model
(npuport.cost.memory), the fit on every chip, and for the target chip the smallest changes that make it fit."""

from __future__ import annotations

import re

from npuport.audit.report import MemoryStage
from npuport.cost.inventory import Inventory
from npuport.cost.memory import GiB, ScenarioMemory, capacities, graph_inputs, judge, plan, scenario_memory
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario
from npuport.trace.records import Trace

_INDEXED = re.compile(r"^(.*)\.(\d+)$")


def layer_count(trace: Trace) -> int:
    """The length of the model's longest ModuleList of blocks (its layers), from the traced module paths."""
    groups: dict[str, set[str]] = {}
    for path in trace.modules:
        m = _INDEXED.match(path)
        if m:
            groups.setdefault(m.group(1), set()).add(m.group(2))
    return max((len(v) for v in groups.values()), default=0)


def memory_stage(model: LoadedModel, scenarios: list[Scenario], traces: dict[str, Trace], inventory: Inventory,
                 optimizer: str, master_weights: bool) -> MemoryStage:
    # a sharded parameter (DTensor: FSDP2, tensor parallel) takes this rank's shard of device memory
    params = [getattr(p, "_local_tensor", p).requires_grad_(p.requires_grad) if hasattr(p, "_local_tensor") else p
              for p in model.module.parameters()]
    by: dict[str, ScenarioMemory] = {}
    notes: list[str] = []
    target = next((c for c in capacities() if c.chip == inventory.chip.name), None)
    for sc in scenarios:
        trace = traces.get(sc.name)
        if trace is None or trace.memory is None:
            continue
        m = scenario_memory(sc.kind, trace.memory, params, optimizer, master_weights)
        if sc.mode == "reduce-overhead" and trace.memory.copied_inputs:
            graph_inputs(m, trace.memory.copied_inputs)
            notes.append(f"memory: {sc.name} in reduce-overhead mode holds its inputs twice: CUDA graph trees copy "
                         f"them into the graph's own buffers ({trace.memory.copied_inputs / GiB:.2f} GiB more)")
        if sc.mode in ("compile", "reduce-overhead") and sc.kind == "train":
            # the trace runs the eager ops; Inductor's fused kernels keep their intermediates on chip, and its training
            # partitioner recomputes cheap forward values in backward rather than saving them
            notes.append(f"memory: {sc.name} under torch.compile is measured on its eager ops: the compiled step saves "
                         "fewer activations for backward (fused intermediates, recomputed pointwise values), so its peak "
                         "can be lower than shown"
                         + ("; the replayed graphs' private memory pools can raise it" if sc.mode == "reduce-overhead" else "")
                         + " (not modelled)")
        judge(m)
        if target is not None and target.usable is not None:
            plan(m, target.usable, inventory.totals[sc.name].time_s, layer_count(trace), sc)
        by[sc.name] = m
    if target is None or target.usable is None:
        notes.append(f"memory: no capacity known for {inventory.chip.name}: no fit verdict or changes for it")
    elif target.assumed:
        notes.append(f"memory: the runtime reserve of {inventory.chip.name} ({target.reserve / GiB:.2f} GiB) is an assumption "
                     "(mappings/hardware.yaml)")
    notes.append("memory: allocator rounding, caching and fragmentation are not modelled; a real run reserves more "
                 "than it allocates")
    return MemoryStage(by, optimizer, master_weights, notes)
