"""Predicates for what a pattern's data cannot say. Each returns "reject", None (fine) or a note for the advice."""

from __future__ import annotations

from npuport.fusion.graph import Dataflow
from npuport.fusion.match import register_check
from npuport.trace.records import OpCall


@register_check("glu_operands")
def glu_operands(graph: Dataflow, nodes: dict[str, OpCall]) -> str | None:
    """silu(gate) * up: both halves from one tensor (chunk/split) or from two separate projections."""
    act, mul = nodes["anchor"], nodes["gate_mul"]
    act_root = graph.root(act.inputs[0])
    others = [t for t in mul.inputs if graph.root(t) not in graph.output_roots(act)]
    if not others:
        return "reject"  # silu(x) * silu(x): not a gated unit
    other = others[0]
    if other.shape != act.outputs[0].shape:
        return "reject"  # a scale or a mask, not the up projection
    if graph.root(other) == act_root:
        first = act.inputs[0].storage_offset <= other.storage_offset
        return None if first else "packed [up, gate]: npu_swiglu takes silu of the first half; reorder the projection's weights"
    return "separate gate and up projections: concatenate their weights into one [gate, up] projection (one GEMM) and call npu_swiglu on its output"


@register_check("rope_cos_partner")
def rope_cos_partner(graph: Dataflow, nodes: dict[str, OpCall]) -> str | None:
    """The final add must also take x * cos for the same x that was rotated."""
    x = graph.root(nodes["anchor"].inputs[0])
    add = nodes["combine"]
    for p in graph.producers_of(add):
        if p is not None and p is not nodes["times_sin"] and p.op == "aten::mul.Tensor":
            if any(graph.root(t) == x for t in p.inputs):
                nodes["times_cos"] = p
                return None
    return "reject"


@register_check("noncontiguous_copy")
def noncontiguous_copy(graph: Dataflow, nodes: dict[str, OpCall]) -> str | None:
    """A clone whose input is a transposed / permuted view (not contiguous) is a layout change."""
    src = nodes["anchor"].inputs[0] if nodes["anchor"].inputs else None
    return None if src is not None and src.stride is not None and len(src.shape) >= 3 else "reject"
