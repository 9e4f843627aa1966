"""What a rule looks at: a `Site` (one recorded aten call or one torch-level composite frame) and the `Context`
of the evaluation (chip, scenario, the whole trace for dataflow questions).

Arguments are read by schema name, so a rule can say `approximate` or `sorted` whether the model passed it by
keyword, by position or not at all (then the schema default applies).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import torch

from npuport.cost.op_costs import base_name
from npuport.trace.records import ApiFrame, CollectiveCall, OpCall, TensorMeta, TensorRef, Trace

_MISSING = object()


@functools.lru_cache(maxsize=None)
def schema_arguments(op: str) -> tuple[tuple[str, Any], ...] | None:
    """(name, default) of each schema argument of 'ns::name.overload', or None when the op is not registered here."""
    ns, _, rest = op.partition("::")
    if not rest:
        return None
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        overload_obj = getattr(packet, overload or "default")
        args = overload_obj._schema.arguments
    except (AttributeError, RuntimeError):
        return None
    out = []
    for a in args:
        default = a.default_value if a.has_default_value() else _MISSING
        if isinstance(default, torch.dtype):
            default = str(default).removeprefix("torch.")
        out.append((a.name, default))
    return tuple(out)


@dataclass(frozen=True)
class Site:
    """One place a rule can fire: an aten call (`call`) or a composite torch-level call (`frame`)."""

    op: str
    api: str | None
    phase: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    module: str
    module_type: str
    source: str | None
    call: OpCall | None = None
    frame: ApiFrame | None = None
    frame_op: str | None = None  # for a call issued inside a composite frame: that frame's op
    collective: CollectiveCall | None = None  # a collective the rank issued: only the collective predicates read it

    @classmethod
    def of_call_in(cls, c: OpCall, trace: Trace) -> "Site":
        frame = trace.frames.get(c.frame) if c.frame is not None else None
        return cls(c.op, c.api, c.phase, c.inputs, c.outputs, c.args, c.kwargs, c.module, c.module_type, c.source,
                   call=c, frame_op=frame.op if frame is not None else None)

    @classmethod
    def of_call(cls, c: OpCall) -> "Site":
        return cls(c.op, c.api, c.phase, c.inputs, c.outputs, c.args, c.kwargs, c.module, c.module_type, c.source, call=c)

    @classmethod
    def of_collective(cls, c: CollectiveCall) -> "Site":
        """A collective the rank issued (recorded apart from the aten calls): its reduce op as a plain argument."""
        return cls(c.op, c.api, c.phase, c.inputs, c.outputs, (c.reduce_op,) if c.reduce_op else (), {}, c.module,
                   c.module_type, c.source, collective=c)

    @classmethod
    def of_frame(cls, f: ApiFrame) -> "Site":
        return cls(f.op, f.api, f.phase, f.inputs, f.outputs, f.args, f.kwargs, f.module, f.module_type, f.source, frame=f)

    @property
    def name(self) -> str:
        return base_name(self.op)

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, TensorRef):
            return self.inputs[value.index]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        return value

    def has_arg(self, name: str) -> bool:
        """Did the caller pass `name` (keyword or position)?"""
        if name in self.kwargs:
            return True
        names = schema_arguments(self.op)
        if names is None:
            return False
        for pos, (n, _) in enumerate(names):
            if n == name:
                return pos < len(self.args)
        return False

    def arg(self, name: str, default: Any = None) -> Any:
        """The value of argument `name` (TensorMeta for tensors), else the schema default, else `default`."""
        if name in self.kwargs:
            return self._resolve(self.kwargs[name])
        names = schema_arguments(self.op)
        if names is None:
            return default
        for pos, (n, schema_default) in enumerate(names):
            if n == name:
                if pos < len(self.args):
                    return self._resolve(self.args[pos])
                return default if schema_default is _MISSING else schema_default
        return default

    def positional(self, pos: int, default: Any = None) -> Any:
        return self._resolve(self.args[pos]) if pos < len(self.args) else default

    def tensors(self) -> Iterator[TensorMeta]:
        yield from self.inputs
        yield from self.outputs

    @property
    def first_input(self) -> TensorMeta | None:
        return self.inputs[0] if self.inputs else None


@dataclass
class Context:
    """Everything a predicate may consult besides the site itself."""

    chip: str
    torch_npu: str | None
    reproducibility: bool
    trace: Trace
    traces: Mapping[str, Trace]
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)  # predicates memoise per evaluation here
    _consumers: dict[int, list[OpCall]] | None = field(default=None, repr=False)
    _producers: dict[int, OpCall] | None = field(default=None, repr=False)
    _grad_frames: set[int] | None = field(default=None, repr=False)

    def consumers(self, tensor_id: int) -> list[OpCall]:
        """Calls that take tensor `tensor_id` as an input, in execution order."""
        if self._consumers is None:
            index: dict[int, list[OpCall]] = {}
            for c in self.trace.calls:
                for t in {m.id for m in c.inputs}:
                    index.setdefault(t, []).append(c)
            self._consumers = index
        return self._consumers.get(tensor_id, [])

    def producer(self, tensor_id: int) -> OpCall | None:
        """The call that returned tensor `tensor_id` (the first one, if several did)."""
        if self._producers is None:
            index: dict[int, OpCall] = {}
            for c in self.trace.calls:
                for m in c.outputs:
                    index.setdefault(m.id, c)
            self._producers = index
        return self._producers.get(tensor_id)

    def frame_needs_grad(self, frame_id: int) -> bool:
        """True when some backward call was attributed to this frame (the scenario trains through it)."""
        if self._grad_frames is None:
            self._grad_frames = {c.frame for c in self.trace.calls if c.phase == "backward" and c.frame is not None}
        return frame_id in self._grad_frames

    @property
    def is_inference(self) -> bool:
        return not any(c.phase == "backward" for c in self.trace.calls)
