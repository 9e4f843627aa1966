"""Find each pattern's chains in a dataflow graph and apply the single-consumer rule.

A match is proposed only when every intermediate it would remove has no reader outside the match, or the fused
op also returns that intermediate (npu_add_rms_norm returns x1 + x2). Otherwise it is reported as blocked,
naming the tensor and the other reader — fusing it would recompute or re-materialise the value (seed §4.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from npuport.fusion.graph import Dataflow
from npuport.fusion.patterns import Pattern, Step
from npuport.trace.records import OpCall

Check = Callable[[Dataflow, dict[str, OpCall]], str | None]
CHECKS: dict[str, Check] = {}


def register_check(name: str) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        if name in CHECKS:
            raise ValueError(f"fusion check {name!r} registered twice")
        CHECKS[name] = fn
        return fn

    return deco


@dataclass
class Match:
    pattern: Pattern
    nodes: dict[str, OpCall]
    blocked: list[dict[str, str]] = field(default_factory=list)  # [{tensor, produced_by, other_reader, at}]
    note: str | None = None  # what a check found (e.g. "separate projections: concatenate the weights")

    @property
    def output(self) -> OpCall:
        for name in self.pattern.output:
            if name in self.nodes:
                return self.nodes[name]
        return self.nodes["anchor"]

    @property
    def anchor(self) -> OpCall:
        return self.nodes["anchor"]


def _source(nodes: dict[str, OpCall], step: Step) -> OpCall | None:
    for name in step.sources:
        if name in nodes:
            return nodes[name]
    return None


def _walk(graph: Dataflow, step: Step, start: OpCall, taken: set[int], used: set[int]) -> list[OpCall] | None:
    """Nodes this step adds ([] for an absent optional or an empty skip), or None if the step fails."""
    def free(c: OpCall | None) -> bool:
        return c is not None and c.op in step.ops and c.index not in taken and c.index not in used

    if step.dir == "up":
        for p in graph.producers_of(start):
            if p is not None and free(p):
                return [p]
    elif step.dir == "down":
        for r in graph.readers(start):
            if free(r):
                return [r]
    elif step.dir in ("skip", "skip_down"):
        chain: list[OpCall] = []
        cur = start
        for _ in range(step.max):
            nxt = graph.producers_of(cur) if step.dir == "skip" else graph.readers(cur)
            cand = next((c for c in nxt if free(c) and c not in chain), None)
            if cand is None:
                break
            chain.append(cand)
            cur = cand
        return chain
    return [] if step.optional else None


def match_pattern(graph: Dataflow, pattern: Pattern, taken: set[int]) -> list[Match]:
    matches = []
    for call in graph.nodes:
        if call.op not in pattern.anchor or call.index in taken:
            continue
        nodes: dict[str, OpCall] = {"anchor": call}
        used = {call.index}
        ok = True
        for step in pattern.steps:
            src = _source(nodes, step)
            if src is None:
                ok = step.optional
                if not ok:
                    break
                continue
            found = _walk(graph, step, src, taken, used)
            if found is None:
                ok = False
                break
            if found:
                # a skip chain is known by its last node; the others are kept under numbered names
                for i, c in enumerate(found[:-1]):
                    nodes[f"{step.name}#{i}"] = c
                nodes[step.name] = found[-1]
                used.update(c.index for c in found)
        if not ok:
            continue
        m = Match(pattern, nodes)
        if pattern.check:
            verdict = CHECKS[pattern.check](graph, nodes)
            if verdict == "reject":
                continue
            m.note = verdict
            used = {c.index for c in nodes.values()}  # a check may add the partner it found
        m.blocked = _outside_readers(graph, m)
        taken.update(used)
        matches.append(m)
    return matches


def _outside_readers(graph: Dataflow, m: Match) -> list[dict[str, str]]:
    inside = {c.index for c in m.nodes.values()}
    exempt = {m.output.index} | {m.nodes[n].index for n in m.pattern.returns if n in m.nodes}
    blocked = []
    for name, call in m.nodes.items():
        if call.index in exempt:
            continue
        for reader in graph.readers(call):
            if reader.index not in inside:
                blocked.append({
                    "tensor": f"output of {call.op} ({name})",
                    "produced_at": call.source or "",
                    "other_reader": f"{reader.op} in {reader.module or '(root)'}",
                    "at": reader.source or "",
                })
    return blocked


def find_matches(graph: Dataflow, patterns: tuple[Pattern, ...]) -> list[Match]:
    taken: set[int] = set()
    out: list[Match] = []
    for p in patterns:
        out.extend(match_pattern(graph, p, taken))
    return out
