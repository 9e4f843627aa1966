"""Audit stage: device memory per scenario from the traced steps (npuport.trace.memory) and the optimizer model
(npuport.cost.memory), the fit on every chip, and for the target chip the smallest changes that make it fit. Under
--parallel with ep= or pp= (estimated: the traced rank holds every expert and every layer) the figures are a rank of
the job's (rank_share)."""

from __future__ import annotations

import re

from npuport.audit.report import MemoryStage
from npuport.cost.inventory import Inventory
from npuport.cost.memory import GiB, RankShare, ScenarioMemory, capacities, graph_inputs, judge, plan, scenario_memory
from npuport.model.distributed import experts_of, parameter_bytes
from npuport.model.job import Layout
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario
from npuport.model.tp_plan import hf_tp_plan, styles
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


def rank_share(model: LoadedModel) -> RankShare:
    """What a rank of the job holds of the traced rank's parameters and cache where ep / pp are estimated: its
    stage's 1/pp, and 1/ep of the routed experts where the trace holds them whole. With zero= the trace's FSDP2
    already spreads every expert over the dp ranks, and a rank of the job holds as many: its 1/ep of the experts,
    sharded over the dp x tp / ep ranks holding the same ones (at tp=1, experts / dp either way), so ep divides
    nothing more there (distributed.held_share, of the parameters, divides them in every case)."""
    d = model.distributed
    layout = d.layout if d is not None else None
    ep, pp = (layout.ep, layout.pp) if layout is not None else (1, 1)
    dense, experts = parameter_bytes(model.module)
    routed = experts_of(model.module)
    if not routed:  # a module named `experts` in a model whose config names no routed experts: nothing to spread
        dense, experts = dense + experts, 0
    spread = ep if layout is not None and layout.zero == 0 else 1
    held = dense + experts / spread
    total = dense + experts
    return RankShare(params=held / pp / total if total else 1.0, cache=1.0 / pp, experts=routed // ep if experts else 0,
                     experts_share=experts / spread / held if held else 0.0,
                     tp_splits_experts=_tp_splits_experts(model))


def _tp_splits_experts(model: LoadedModel) -> bool:
    """The model's tensor-parallel plan names a module under its routed experts with a style torch applies.
    transformers' MoE plans do not (their experts are split by base_model_ep_plan), nor does a model file's."""
    known = styles()
    return any("experts" in key.split(".") for key, style in hf_tp_plan(model.module).items() if style in known)


def _share_note(layout: Layout, share: RankShare, by: dict[str, ScenarioMemory]) -> str:
    """The report's line: the memory figures are a rank of the job's, how, and what stays an estimate."""
    split = " and ".join(s for s, on in ((f"1/{layout.ep} of the routed experts (ep={layout.ep})",
                                          layout.ep > 1 and layout.zero == 0),
                                         (f"its pipeline stage's 1/{layout.pp} of the layers (pp={layout.pp})",
                                          layout.pp > 1)) if on)
    note = (f"memory: per rank of the job ({layout.describe()}): weights, gradients, optimizer states and master "
            f"weights are the rank's {share.params:.0%} of the traced parameters ({split or 'as traced'})")
    if layout.ep > 1 and layout.zero:
        note += (f"; with zero={layout.zero} the trace already spreads every expert over the dp ranks, as ep={layout.ep} "
                 "with expert data-parallel sharding does")
    if layout.pp > 1:
        note += f"; an inference step's cache is the stage's 1/{layout.pp}"
    note += ("; activations as traced (an expert rank runs as many token-expert pairs; the first stage of a 1F1B "
             "pipeline keeps pp micro-batches of its layers)")
    # the gradients a rank does not hold, counted in a backward peak when all of them were alive at it
    over = max((m.grads * (1 - share.params) / share.params for m in by.values()
                if m.kind == "train" and m.peak_phase == "backward"), default=0.0)
    if over:
        note += (f"; the traced peak keeps the gradients alive at it whole (the trace does not say how many): up to "
                 f"{over / GiB:.2f} GiB over")
    return note


def memory_stage(model: LoadedModel, scenarios: list[Scenario], traces: dict[str, Trace], inventory: Inventory,
                 optimizer: str, master_weights: bool) -> MemoryStage:
    # a sharded parameter (DTensor: FSDP2, tensor parallel) takes this rank's shard of device memory
    params = [getattr(p, "_local_tensor", p).requires_grad_(p.requires_grad) if hasattr(p, "_local_tensor") else p
              for p in model.module.parameters()]
    by: dict[str, ScenarioMemory] = {}
    notes: list[str] = []
    target = next((c for c in capacities() if c.chip == inventory.chip.name), None)
    share = rank_share(model)
    for sc in scenarios:
        trace = traces.get(sc.name)
        if trace is None or trace.memory is None:
            continue
        m = scenario_memory(sc.kind, trace.memory, params, optimizer, master_weights, share)
        if sc.mode == "reduce-overhead" and trace.memory.copied_inputs:
            copied = round(trace.memory.copied_inputs * share.cache)  # a pipeline stage copies its own cache
            graph_inputs(m, copied)
            notes.append(f"memory: {sc.name} in reduce-overhead mode holds its inputs twice: CUDA graph trees copy "
                         f"them into the graph's own buffers ({copied / GiB:.2f} GiB more)")
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
    layout = model.distributed.layout if model.distributed is not None else None
    if layout is not None and (layout.ep > 1 or layout.pp > 1):
        notes.insert(0, _share_note(layout, share, by))
    if target is None or target.usable is None:
        notes.append(f"memory: no capacity known for {inventory.chip.name}: no fit verdict or changes for it")
    elif target.assumed:
        notes.append(f"memory: the runtime reserve of {inventory.chip.name} ({target.reserve / GiB:.2f} GiB) is an assumption "
                     "(mappings/hardware.yaml)")
    notes.append("memory: allocator rounding, caching and fragmentation are not modelled; a real run reserves more "
                 "than it allocates")
    return MemoryStage(by, optimizer, master_weights, notes)
