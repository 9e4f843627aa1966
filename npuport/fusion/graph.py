"""Dataflow over recorded calls: who produced each tensor and who reads it, with views resolved to their bases.

Built per phase (forward and backward are separate graphs), from `OpCall` records only. A view, or an op that
moves no data (`_unsafe_view`, `detach`), is not a node: its output is the same value as its input, so readers of
a view are readers of the base. That is what makes "does anything else read this intermediate?" answerable.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from npuport.cost.op_costs import base_name, op_classes
from npuport.trace.records import OpCall, TensorMeta


class Dataflow:
    def __init__(self, calls: Iterable[OpCall]) -> None:
        no_traffic = op_classes().no_traffic
        self._alias: dict[int, int] = {}
        self.nodes: list[OpCall] = []
        self.producer: dict[int, OpCall] = {}
        self.consumers: dict[int, list[OpCall]] = defaultdict(list)
        for call in calls:
            if call.kind == "view" or base_name(call.op) in no_traffic:
                if call.inputs:
                    src = self.root(call.inputs[0])
                    for out in call.outputs:
                        if out.id != call.inputs[0].id:
                            self._alias[out.id] = src
                continue
            self.nodes.append(call)
            seen: set[int] = set()
            for t in call.inputs:
                r = self.root(t)
                if r not in seen:
                    seen.add(r)
                    self.consumers[r].append(call)
            for t in call.outputs:
                self.producer[self.root(t)] = call

    def root(self, t: TensorMeta) -> int:
        """The value a tensor is: its view base, followed through aliasing ops."""
        r = t.base if t.base is not None else t.id
        seen = 0
        while r in self._alias and seen < 64:
            r = self._alias[r]
            seen += 1
        return r

    def producers_of(self, call: OpCall) -> list[OpCall | None]:
        """Producer of each input (None for model inputs, parameters and constants)."""
        return [self.producer.get(self.root(t)) for t in call.inputs]

    def readers(self, call: OpCall) -> list[OpCall]:
        """Every call that reads any output of `call` (directly or through a view)."""
        out: list[OpCall] = []
        for t in call.outputs:
            for c in self.consumers.get(self.root(t), []):
                if c is not call and c not in out:
                    out.append(c)
        return out

    def output_roots(self, call: OpCall) -> set[int]:
        return {self.root(t) for t in call.outputs}
