from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from npuport.rules import evaluate
from npuport.trace.records import Trace
from npuport.trace.run import new_fake_mode, trace_module
from tests.rules import npu_standins

npu_standins.ensure()


class Fn(torch.nn.Module):
    """A model that is one function of its inputs: the smallest thing that can trigger a rule."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def trace_of(model: Callable[[], torch.nn.Module] | Callable[..., Any], inputs: Callable[[], tuple], *,
             train: bool = False, module: bool = False, eval_mode: bool = False, scenario: str = "s") -> Trace:
    mode = new_fake_mode()
    with mode:
        m = model() if module else Fn(model)
        if eval_mode:
            m.eval()
    return trace_module(m, lambda: (inputs(), {}), scenario=scenario, train=train, mode=mode)


def ids(traces: Mapping[str, Trace] | Trace, **kw: Any) -> set[str]:
    if isinstance(traces, Trace):
        traces = {traces.scenario: traces}
    return {f.id for f in evaluate(traces, **kw)}
