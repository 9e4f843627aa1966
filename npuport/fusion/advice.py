"""Fusion advice: matches -> the replacement that fits (or why none does) -> estimated saving on the chip."""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

from npuport.cost.inventory import module_pattern
from npuport.cost.op_costs import call_cost, itemsize
from npuport.cost.roofline import ChipProfile
from npuport.fusion import checks as _checks  # noqa: F401 - registers the pattern predicates
from npuport.fusion.constraints import Facts, violations
from npuport.fusion.graph import Dataflow
from npuport.fusion.match import Match, find_matches
from npuport.fusion.patterns import FusionData, load_fusions
from npuport.trace.records import ApiFrame, TensorMeta, TensorRef, Trace


@dataclass
class Advice:
    pattern: str
    title: str
    scenario: str
    status: str  # proposed | blocked | no-replacement
    module: str
    source: str | None
    replacement: dict[str, Any] | None
    rejected: list[dict[str, Any]]
    blocked_by: list[dict[str, str]]
    note: str | None
    bytes_saved: int
    launches_saved: int
    unfused_s: float
    fused_s: float
    ops: list[str] = field(default_factory=list)
    dtype: str = ""
    compiled: str | None = None  # in a torch.compile scenario: what Inductor already does with the chain


def _bytes(ts: list[TensorMeta]) -> int:
    seen: dict[int, TensorMeta] = {t.id: t for t in ts}
    return sum(t.distinct_numel * itemsize(t.dtype) for t in seen.values())


def _saving(graph: Dataflow, m: Match, chip: ChipProfile) -> tuple[int, int, float, float]:
    nodes = list({c.index: c for c in m.nodes.values()}.values())
    inside = {graph.root(t) for c in nodes for t in c.outputs}
    ext_in = [t for c in nodes for t in c.inputs if graph.root(t) not in inside]
    kept = [m.output] + [m.nodes[n] for n in m.pattern.returns if n in m.nodes]
    outs = [t for c in kept for t in c.outputs]
    fused_bytes = _bytes(ext_in) + _bytes(outs)
    costs = [call_cost(c) for c in nodes]
    before = sum(chip.roofline(c.flops, c.bytes, c.dtype, c.matrix)[0] for c in costs)
    flops = sum(c.flops for c in costs)
    matrix = any(c.matrix for c in costs)
    dtype = costs[0].dtype
    after = chip.roofline(flops, fused_bytes, dtype, matrix)[0]
    return max(0, sum(c.bytes for c in costs) - fused_bytes), len(nodes) - 1, before, min(after, before)


def _facts(m: Match, chip: str, torch_npu: str | None) -> Facts:
    a = m.anchor
    x = a.inputs[0] if a.inputs else (a.outputs[0] if a.outputs else None)
    dtype = x.dtype if x is not None else "float32"
    if m.pattern.id in ("add_rms_norm", "rms_norm"):
        src = m.nodes.get("cast_in") or m.nodes.get("square")
        dtype = src.inputs[0].dtype if src is not None and src.inputs else dtype
    if m.pattern.id.startswith("rope") and m.output.outputs:
        x = m.output.outputs[0]  # the rotated tensor itself (the anchor only sees half of it)
    head_dim = x.shape[-1] if x is not None and x.shape else None
    rank = len(x.shape) if x is not None else None
    hidden = x.shape[-1] if "norm" in m.pattern.id and x is not None and x.shape else None
    return Facts(dtype=dtype, chip=chip, torch_npu=torch_npu, rank=rank,
                 head_dim=head_dim if m.pattern.id.startswith("rope") else None, hidden=hidden)


def _choose(data: FusionData, rep_ids: tuple[str, ...], facts: Facts) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The first replacement that fits, and every one that does not with its reasons. Replacements after the
    chosen one are still checked (as `fits`) so route scoring knows every option's coverage."""
    rejected: list[dict[str, Any]] = []
    chosen: dict[str, Any] | None = None
    also: list[dict[str, Any]] = []
    for rid in rep_ids:
        rep = data.replacements[rid]
        bad = violations(rep, facts)
        if not bad and chosen is None:
            chosen = {"id": rid, "kind": rep.kind, "op": rep.op, "call": rep.call, "source": rep.source, "also_fits": also}
        elif not bad:
            also.append({"id": rid, "kind": rep.kind, "op": rep.op})
        else:
            rejected.append({"id": rid, "op": rep.op, "kind": rep.kind, "reasons": bad})
    return chosen, rejected


def _sdpa_facts(frame: ApiFrame, chip: str, torch_npu: str | None) -> Facts:
    def tensor(i: int, name: str) -> TensorMeta | None:
        ref = frame.args[i] if len(frame.args) > i else frame.kwargs.get(name)
        return frame.inputs[ref.index] if isinstance(ref, TensorRef) else None

    q, k, mask = tensor(0, "query"), tensor(1, "key"), tensor(3, "attn_mask")
    mask_kind = "none" if mask is None else ("bool" if mask.dtype == "bool" else "float")
    return Facts(dtype=q.dtype if q else "float32", chip=chip, torch_npu=torch_npu, rank=len(q.shape) if q else None,
                 head_dim=q.shape[-1] if q else None, heads=q.shape[1] if q and len(q.shape) == 4 else None,
                 kv_heads=k.shape[1] if k and len(k.shape) == 4 else None, batch=q.shape[0] if q else None, mask=mask_kind)


def _against_compiled(m: Match, saved: tuple[int, int, float, float], mode: str,
                      kernels: Mapping[int, int]) -> tuple[tuple[int, int, float, float], str]:
    """A chain in a torch.compile step already runs as Inductor's kernels (npuport.cost.fused): what a fused op saves
    is counted against those kernels, not against the eager launches. Inside one generated kernel nothing is left to
    save: that kernel moves the chain's outside traffic only, as the fused op would."""
    used = {kernels[c.index] for c in m.nodes.values() if c.index in kernels}
    bytes_saved, _, before, after = saved
    if len(used) <= 1:
        return (0, 0, after, after), (f"torch.compile (mode={mode}) already fuses this chain into its generated "
                                      "kernel: nothing to save against it")
    return (bytes_saved, len(used) - 1, before, after), (
        f"under torch.compile (mode={mode}) this chain runs as {len(used)} kernels: launches saved are counted "
        "against those; bytes and time against the eager ops (an upper bound)")


def advise(traces: Mapping[str, Trace], chip: ChipProfile, torch_npu: str | None = None,
           compiled: Mapping[str, tuple[str, Mapping[int, int]]] | None = None) -> list[Advice]:
    """Fusion opportunities in the forward pass of each scenario, with their replacement and saving. `compiled`:
    for each scenario in a torch.compile mode, (mode, trace index -> compiled kernel) (Inventory.compiled_kernels)."""
    data = load_fusions()
    out: list[Advice] = []
    chosen: dict[tuple, tuple[dict[str, Any] | None, list[dict[str, Any]]]] = {}

    def choose(rep_ids: tuple[str, ...], facts: Facts) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        # every layer's match asks the same question (its replacements against the same facts): checked once, each
        # Advice getting its own copy of the answer
        key = (rep_ids, facts)
        if key not in chosen:
            chosen[key] = _choose(data, rep_ids, facts)
        return copy.deepcopy(chosen[key])

    for name, trace in traces.items():
        graph = Dataflow(c for c in trace.calls if c.phase == "forward")
        for m in find_matches(graph, data.patterns):
            facts = _facts(m, chip.name, torch_npu)
            rep, rejected = choose(tuple(m.pattern.replacements), facts)
            saved = _saving(graph, m, chip)
            said = None
            if name in (compiled or {}):
                mode, kernels = (compiled or {})[name]
                saved, said = _against_compiled(m, saved, mode, kernels)
            status = "blocked" if m.blocked else ("proposed" if rep else "no-replacement")
            out.append(Advice(m.pattern.id, m.pattern.title, name, status, module_pattern(m.anchor.module), m.anchor.source,
                              rep, rejected, m.blocked[:3], m.note, *saved,
                              ops=[c.op for c in sorted({c.index: c for c in m.nodes.values()}.values(), key=lambda c: c.index)],
                              dtype=facts.dtype, compiled=said))
        for frame in trace.frames.values():
            if frame.op != "aten::scaled_dot_product_attention" or frame.phase != "forward":
                continue
            facts = _sdpa_facts(frame, chip.name, torch_npu)
            rep, rejected = choose(tuple(data.sdpa["replacements"]), facts)
            note = None
            if rejected and rep is not None:
                note = "NPU SDPA leaves its fused path: " + "; ".join(rejected[0]["reasons"])
            status = "fused" if rep and rep["kind"] == "native" else ("proposed" if rep else "no-replacement")
            out.append(Advice("sdpa", data.sdpa["title"], name, status, module_pattern(frame.module), frame.source, rep, rejected, [],
                              note, 0, 0, 0.0, 0.0, ops=[frame.op], dtype=facts.dtype))
    return out


def summarize(advice: list[Advice]) -> list[dict[str, Any]]:
    """Group identical advice (same pattern, scenario, module, status, replacement) into JSON rows."""
    groups: dict[tuple, list[Advice]] = defaultdict(list)
    for a in advice:
        key = (a.scenario, a.pattern, a.module, a.status, (a.replacement or {}).get("id"), a.note, a.compiled)
        groups[key].append(a)
    rows = []
    for (scenario, pattern, module, status, _rid, note, compiled), items in groups.items():
        first = items[0]
        sources = sorted({a.source for a in items if a.source})
        rows.append({
            "pattern": pattern, "title": first.title, "scenario": scenario, "status": status, "matches": len(items),
            "module": module, "sources": sources[:6], "ops": first.ops, "dtype": first.dtype,
            "replacement": first.replacement, "rejected": first.rejected, "blocked_by": first.blocked_by, "note": note,
            "compiled": compiled,
            "bytes_saved": sum(a.bytes_saved for a in items), "launches_saved": sum(a.launches_saved for a in items),
            "unfused_time_s": sum(a.unfused_s for a in items), "fused_time_s": sum(a.fused_s for a in items),
            "time_saved_s": sum(a.unfused_s - a.fused_s for a in items),
        })
    rows.sort(key=lambda r: (r["scenario"], -r["time_saved_s"], r["pattern"]))
    return rows
