"""Audit stage 2: cost every recorded call on the target chip's roofline and build the inventory."""

from __future__ import annotations

from typing import Mapping

from npuport import coverage
from npuport.audit.report import CostStage
from npuport.cost.inventory import build_inventory
from npuport.cost.op_costs import op_classes
from npuport.cost.roofline import ChipProfile, load_chips
from npuport.cost.timing import Mode, timing_for
from npuport.trace.records import Trace


def native_composites_for(chip_family: str, torch_npu: str | None) -> tuple[frozenset[str], str | None]:
    """Composites the target runs as one op. NPU: from the torch_npu coverage data; CUDA: SDPA."""
    cuda = op_classes().cuda_native_composites
    if chip_family != "npu":
        return cuda, None
    try:
        return frozenset(coverage.native_composites(torch_npu)), None
    except AttributeError:
        return cuda, "coverage data lacks the NPU-native composite list"


def cost_stage(traces: dict[str, Trace], target: ChipProfile, torch_npu: str | None,
               modes: Mapping[str, Mode] | None = None) -> CostStage:
    notes: list[str] = []
    composites, note = native_composites_for(target.family, torch_npu)
    if note:
        notes.append(note)
    inventory = build_inventory(traces, target, composites, load_chips(), modes)
    assumptions = list(target.assumptions)
    model = timing_for(target)
    assumptions.append("op time = max(FLOPs / (peak x achieved fraction), bytes / (bandwidth x achieved fraction)) + a "
                       "fixed cost per kernel, per op class; the step simulates the host issuing each op (eager: a "
                       f"host cost per op) to one device queue (mappings/timing.yaml; {target.name}: {model.status})")
    if model.status != "measured":
        assumptions.append(f"{target.name}'s op-class fractions, fixed costs and host costs are {model.status}, not "
                           f"measured: {model.source}")
    if modes and "compile" in modes.values():
        assumptions.append("compile mode: the calls between two library kernels (GEMM, attention, sort, indexed store) "
                           "fused into one kernel that moves what enters and leaves it (npuport/cost/fused.py); each "
                           f"kernel launched from Python; {target.name}'s host costs for it: {model.host.compile_source}")
    if modes and "reduce-overhead" in modes.values():
        assumptions.append("reduce-overhead mode: the calls between two library kernels fused as in compile mode "
                           "(npuport/cost/fused.py), the compiled graphs replayed as device graphs: per compiled graph "
                           "its call and one replay launch on the host, no host cost per kernel; before each replay a "
                           "copy of each input tensor that is not a parameter (a decode step's KV cache: two a layer) "
                           f"into the graph's own buffers; {target.name}'s host cost of a graph call: "
                           f"{model.host.compile_source}; of each copied input: "
                           + (f"{model.host.graph_input_s * 1e6:.1f} us, {model.host.graph_input_source}"
                              if model.host.graph_input_s else "none known (not counted)"))
    if any(e.op.endswith("scaled_dot_product_attention") for e in inventory.ops):
        assumptions.append("causal attention FLOPs are counted at half (fused kernels skip masked blocks)")
    if any(e.op == "aten::_grouped_mm" for e in inventory.ops):
        assumptions.append("MoE experts traced through transformers' grouped_mm path: every routed token meets its top-k experts; "
                           "expert FLOPs are those of the active experts only, routing assumed uniform across experts")
    return CostStage(inventory, notes, assumptions)
