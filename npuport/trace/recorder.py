"""Record every aten call a model makes, with its module, source line and torch-level API.

Two tiny modes do the recording and nothing else (STYLE 5):
- `_ApiMode` (a TorchFunctionMode, above autograd) notes which torch-level API is running, opens an `ApiFrame`
  when that API is itself a composite aten op, and tags the autograd nodes it creates so backward ops can be
  attributed to the forward module and line that caused them;
- `_OpRecorder` (a TorchDispatchMode, below autograd) turns each aten call into an `OpCall`.
All costing and classification happens later, over the records.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterator

import torch
from torch._ops import HigherOrderOperator
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

from npuport.trace import collectives, flex, naming
from npuport.trace.modules import ModuleStack
from npuport.trace.records import ApiFrame, CollectiveCall, OpCall, Phase, TensorMeta, TensorRef, Trace
from npuport.trace.reuse import META_KEY, LayerReuse, ReuseTag

_NOT_OPERATORS = frozenset({"prim", "profiler"})


def _dtensor_type() -> type | None:
    """DTensor (tensor / sequence parallel, FSDP2's parameters) when the traced code has loaded it: only then can a
    DTensor reach the recorder, and a model without one does not pay for importing it."""
    mod = sys.modules.get("torch.distributed.tensor")
    return getattr(mod, "DTensor", None) if mod is not None else None

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_NPUPORT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP_PREFIXES = (_TORCH_DIR, _NPUPORT_DIR, "<frozen", os.path.dirname(os.__file__) + os.sep + "contextlib.py")
_META_KEY = META_KEY
# Property reads and trivial metadata queries never dispatch compute; skip them before any bookkeeping.
_FAST_NAMES = frozenset({"__get__", "__set__", "dim", "size", "numel", "is_floating_point", "__len__", "stride"})


def user_source(skip: int = 1, stop: FrameType | None = None) -> str | None:
    """file:line of the innermost frame outside torch and npuport: the model code that issued the op. `stop` is the
    frame that entered the recorder: an op whose stack reaches it without model code in between was issued by the
    step's driver itself (FSDP's root hooks, the loss seed), and whatever called the audit (the CLI's click, a
    notebook cell) is not its source."""
    frame: FrameType | None = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_SKIP_PREFIXES):
            return f"{filename}:{frame.f_lineno}"
        if frame is stop:  # its own line counts (`with Recorder(m): y = m(x) * 2` in a user's script); above it, none
            return None
        frame = frame.f_back
    return None


@dataclass
class _Context:
    """What is running right now, shared by the two modes."""

    api: str | None = None
    frame: ApiFrame | None = None
    pending_frame: dict[str, Any] | None = None
    source: str | None = None
    source_known: bool = False
    tensor_ids: WeakIdKeyDictionary = field(default_factory=WeakIdKeyDictionary)
    next_id: int = 0
    # view output id -> base id, known at dispatch time (autograd sets ._base only after dispatch returns)
    view_bases: dict[int, int] = field(default_factory=dict)
    # while loss.backward() runs: where ops with no autograd node (the gradient seed) are attributed
    backward_tag: tuple | None = None
    # the frame that entered the Recorder: where the search for an op's source line gives up (user_source)
    boundary: FrameType | None = None
    # while a repeated layer's copy runs (npuport.trace.reuse): nothing is recorded, its autograd nodes get reuse_tag
    dormant: bool = False
    reuse_tag: ReuseTag | None = None
    # while a higher-order operator's Python kernels run (FlexAttention's autograd builds its score_mod graphs): the
    # scratch tensors they make are tracing work, not the step's; only the operator itself is recorded
    in_hop: bool = False

    def tid(self, t: torch.Tensor) -> int:
        got = self.tensor_ids.get(t)
        if got is None:
            got = self.next_id
            self.next_id += 1
            self.tensor_ids[t] = got
        return got

    def meta(self, t: torch.Tensor) -> TensorMeta:
        shape = tuple(int(s) for s in t.shape)
        stride = None
        if t.layout == torch.strided and not t.is_contiguous():
            stride = tuple(int(s) for s in t.stride())
        tid = self.tid(t)
        base_id = self.view_bases.get(tid)
        if base_id is None and t._base is not None:
            base_id = self.tid(t._base)
        return TensorMeta(
            id=tid,
            shape=shape,
            dtype=str(t.dtype).removeprefix("torch."),
            stride=stride,
            base=base_id,
            storage_offset=int(t.storage_offset()) if t.layout == torch.strided else 0,
        )


def _plain(value: Any) -> Any:
    """Non-tensor argument values as JSON-friendly data."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.SymInt):
        return int(value)
    return type(value).__name__


def _capture_args(ctx: _Context, args: tuple, kwargs: dict) -> tuple[tuple, dict, list[TensorMeta], dict[int, int]]:
    """Replace tensors by TensorRef (deduplicated by identity) and other leaves by plain values."""
    inputs: list[TensorMeta] = []
    slot: dict[int, int] = {}  # id(tensor) -> index in inputs

    def conv(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            key = id(x)
            if key not in slot:
                slot[key] = len(inputs)
                inputs.append(ctx.meta(x))
            return TensorRef(slot[key])
        return _plain(x)

    return tuple(tree_map(conv, list(args))), tree_map(conv, dict(kwargs)), inputs, slot


TICK_EVERY = 2000  # recorded calls between two progress ticks


class _OpRecorder(TorchDispatchMode):
    # higher-order operators reach __torch_dispatch__ too: FlexAttention's are recorded as one op each (npuport.trace.flex)
    supports_higher_order_operators = True

    def __init__(self, ctx: _Context, modules: ModuleStack, trace: Trace, tick: Callable[[int], None] | None = None,
                 reuse: LayerReuse | None = None) -> None:
        super().__init__()
        self.ctx, self.modules, self.trace, self.tick, self.reuse = ctx, modules, trace, tick, reuse
        self.dtensor = _dtensor_type()
        # called with every op's output, recorded or not (npuport.trace.memory counts storages here rather than in a
        # dispatch mode of its own: one Python mode less on every op)
        self.observers: list[Callable[[Any], None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            return self._higher_order(func, args, kwargs)
        if func.namespace in _NOT_OPERATORS or self.ctx.in_hop:  # prim.device, record_function markers: not operators
            return self._observed(func(*args, **kwargs))
        dtensor = self.dtensor
        if dtensor is not None and dtensor in types:
            # let DTensor unwrap to its local shards and redispatch: the local ops and the collectives of its
            # redistributions then come back here as plain tensors (as CommDebugMode does)
            return NotImplemented
        if collectives.is_wait(func):  # completion of an async collective: no traffic, no kernel of its own
            return self._observed(func(*args, **kwargs))
        out = self._observed(func(*args, **kwargs))
        if self.reuse is not None:
            if self.ctx.dormant:  # a repeated layer's forward: its records are copied from the template's
                return out
            node = torch._C._current_autograd_node()
            if node is not None:
                tag = node.metadata.get(_META_KEY)  # type: ignore[attr-defined]  # a property, typed as a method
                if type(tag) is ReuseTag:  # its backward: counted here, copied when the step is over
                    self.reuse.skip_backward(tag, args, kwargs, out)
                    return out
                if tag is None and self.reuse.accumulating(node):  # a skipped copy's weight gradient stored
                    return out
        if collectives.is_collective(func):
            self._record_collective(func, args, kwargs, out)
        else:
            self._record(func, args, kwargs, out)
        return out

    def _higher_order(self, func: HigherOrderOperator, args: tuple, kwargs: dict) -> Any:
        """A higher-order operator: FlexAttention's recorded as one attention op over its tensors; any other is
        refused, as torch refuses it for a mode that does not handle it."""
        name = flex.hop_name(func)
        if name is None:
            raise NotImplementedError(f"npuport cannot trace the higher-order operator {func.name()}: only "
                                      f"FlexAttention's (flex_attention, flex_attention_backward) are recorded")
        out = self._observed(func(*args, **kwargs))
        tensors, plain, outs = flex.normalize(func, args, out, self.trace)
        if self.reuse is not None:
            if self.ctx.dormant:
                return out
            node = torch._C._current_autograd_node()
            tag = node.metadata.get(_META_KEY) if node is not None else None  # type: ignore[attr-defined]
            if type(tag) is ReuseTag:
                self.reuse.skip_backward(tag, tensors, {}, outs)
                return out
        self._record(name, tensors, plain, outs)
        return out

    def _observed(self, out: Any) -> Any:
        for fn in self.observers:
            fn(out)
        return out

    def _record_collective(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        ctx = self.ctx
        info = collectives.describe(func, args, kwargs, out)
        node = torch._C._current_autograd_node()
        tag = node.metadata.get(_META_KEY) if node is not None else None  # type: ignore[attr-defined]
        phase: Phase = "backward" if node is not None or ctx.backward_tag is not None else "forward"
        source: str | None
        api: str | None
        if tag:
            module, module_type, source, api = tag[0], tag[1], tag[2], f"backward of {tag[3]}"
        else:
            module, module_type = self.modules.current_frame()
            source, api = user_source(2, ctx.boundary), ctx.api
        owner = collectives.current_owner()
        if owner is not None:  # an FSDP unit's all-gather / reduce-scatter: the unit that owns the parameters
            module, module_type = owner, self.modules.types.get(owner, module_type)
        _, _, inputs, _ = _capture_args(ctx, args, kwargs)
        outs = tuple(ctx.meta(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        self.trace.collectives.append(CollectiveCall(
            index=len(self.trace.collectives), position=len(self.trace.calls), op=naming.op_name(func), kind=info.kind,
            phase=phase, nbytes=info.nbytes, dtype=info.dtype, group_size=info.group_size, reduce_op=info.reduce_op,
            module=module, module_type=module_type, source=source, api=api, inputs=tuple(inputs), outputs=outs))

    def _record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """One call: `func` an aten overload, or the recorded name of a higher-order operator's call (never a view,
        writes none of its arguments)."""
        ctx = self.ctx
        cargs, ckwargs, inputs, slot = _capture_args(ctx, args, kwargs)
        named = isinstance(func, str)
        view = False if named else naming.is_view(func)
        out_tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if view and inputs:
            root = inputs[0].base if inputs[0].base is not None else inputs[0].id
            for t in out_tensors:
                tid = ctx.tid(t)
                if tid != inputs[0].id:
                    ctx.view_bases[tid] = root
        outs = tuple(ctx.meta(t) for t in out_tensors)
        mutated = []
        for pos, name in () if named else naming.written_arguments(func):
            target = args[pos] if pos < len(args) else kwargs.get(name)
            if isinstance(target, torch.Tensor) and id(target) in slot:
                mutated.append(slot[id(target)])
        node = torch._C._current_autograd_node()
        phase: Phase
        if node is None and ctx.backward_tag is not None:  # the seed of loss.backward(): the user's loss line
            phase = "backward"
            module, module_type, source, api = ctx.backward_tag
            frame_id = None
        elif node is not None:
            phase = "backward"
            tag = node.metadata.get(_META_KEY)  # type: ignore[attr-defined]  # torch's stub types Node.metadata as a method; it is a property
            module, module_type, source, api, frame_id = tag if tag else ("", "", None, "backward", None)
            api = f"backward of {api}" if tag else api
            if self.reuse is not None and module:
                self.reuse.recorded_backward(module)
        else:
            phase = "forward"
            module, module_type = self.modules.current_frame()
            if not ctx.source_known:
                ctx.source, ctx.source_known = user_source(2, ctx.boundary), True
            source, api = ctx.source, ctx.api
            frame_id = self._frame_id(module, module_type, source)
        self.trace.calls.append(
            OpCall(
                index=len(self.trace.calls),
                op=func if named else naming.op_name(func),
                kind="view" if view else "compute",
                phase=phase,
                inputs=tuple(inputs),
                outputs=outs,
                args=cargs,
                kwargs=ckwargs,
                module=module,
                module_type=module_type,
                source=source,
                api=api,
                frame=frame_id,
                mutated=tuple(mutated),
            )
        )
        if self.tick is not None and len(self.trace.calls) % TICK_EVERY == 0:
            self.tick(len(self.trace.calls))

    def _frame_id(self, module: str, module_type: str, source: str | None) -> int | None:
        ctx = self.ctx
        if ctx.frame is None and ctx.pending_frame is not None:
            pend = ctx.pending_frame
            ctx.pending_frame = None
            cargs, ckwargs, inputs, _ = _capture_args(ctx, pend["args"], pend["kwargs"])
            frame = ApiFrame(
                id=len(self.trace.frames), op=pend["op"], api=pend["api"], inputs=tuple(inputs), outputs=(),
                args=cargs, kwargs=ckwargs, module=module, module_type=module_type, source=source,
            )
            self.trace.frames[frame.id] = frame
            ctx.frame = frame
        return ctx.frame.id if ctx.frame is not None else None


class _ApiMode(TorchFunctionMode):
    def __init__(self, ctx: _Context, modules: ModuleStack) -> None:
        super().__init__()
        self.ctx, self.modules = ctx, modules

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _FAST_NAMES:
            return func(*args, **kwargs)
        ctx = self.ctx
        if ctx.dormant:  # a repeated layer's copy: only its autograd nodes are marked, for its backward
            out = func(*args, **kwargs)
            if torch.is_grad_enabled():
                self._tag_nodes(out, ctx.reuse_tag)
            return out
        saved = (ctx.api, ctx.frame, ctx.pending_frame, ctx.source, ctx.source_known, ctx.in_hop)
        ctx.in_hop = ctx.in_hop or isinstance(func, HigherOrderOperator)
        ctx.api = naming.api_name(func)
        ctx.frame, ctx.source, ctx.source_known = None, None, False
        composite = naming.resolve_composite(name, args, kwargs) if name else None
        ctx.pending_frame = {"op": composite, "api": ctx.api, "args": args, "kwargs": kwargs} if composite else None
        try:
            out = func(*args, **kwargs)
            frame = ctx.frame
            if frame is not None:
                frame.outputs = tuple(ctx.meta(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            if torch.is_grad_enabled():
                self._tag_nodes(out)
            return out
        finally:
            ctx.api, ctx.frame, ctx.pending_frame, ctx.source, ctx.source_known, ctx.in_hop = saved

    def _tag_nodes(self, out: Any, tag: Any = None) -> None:
        """Tag the autograd nodes this call created with its module, line, API and frame (for backward ops), or with
        the given tag."""
        ctx = self.ctx
        todo: deque = deque()
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                todo.append(t.grad_fn)
        if not todo:
            return
        if tag is None:
            module, module_type = self.modules.current_frame()
            tag = (module, module_type, ctx.source, ctx.api, ctx.frame.id if ctx.frame is not None else None)
        while todo:
            node = todo.popleft()
            if node is None or _META_KEY in node.metadata:
                continue
            node.metadata[_META_KEY] = tag
            for nxt, _ in node.next_functions:
                if nxt is not None and type(nxt).__name__ != "AccumulateGrad":
                    todo.append(nxt)


class Recorder:
    """Context manager: `with Recorder(model, "train") as rec: ...; rec.trace` holds the records."""

    def __init__(self, model: torch.nn.Module, scenario: str, tick: Callable[[int], None] | None = None,
                 reuse: bool = False) -> None:
        self.trace = Trace(scenario=scenario)
        self._modules = ModuleStack(model)
        self.trace.modules = self._modules.types
        self._ctx = _Context()
        # repeated layers recorded once (npuport.trace.reuse); never where parameters are DTensors (a rank's
        # shards and collectives are recorded in full)
        dtensor = _dtensor_type()
        sharded = dtensor is not None and any(isinstance(p, dtensor) for p in model.parameters())
        self._reuse = LayerReuse(model, self._ctx, self.trace, self._modules.names) if reuse and not sharded else None
        self._api = _ApiMode(self._ctx, self._modules)
        # tick(n): n ops recorded so far
        self._ops = _OpRecorder(self._ctx, self._modules, self.trace, tick, self._reuse)

    @property
    def stack(self) -> ModuleStack:
        """The module stack the recorder keeps (other instruments of the same run read it)."""
        return self._modules

    @property
    def memory(self) -> Any:
        """The MemoryTracker observing this step (set by it), which a skipped layer's effect is replayed on."""
        return self._reuse.memory if self._reuse is not None else None

    @memory.setter
    def memory(self, tracker: Any) -> None:
        if self._reuse is not None:
            self._reuse.memory = tracker

    @property
    def observers(self) -> list[Callable[[Any], None]]:
        """Functions called with the output of every op the step dispatches (recorded or not)."""
        return self._ops.observers

    def __enter__(self) -> "Recorder":
        self._ctx.boundary = sys._getframe(1)
        self._owners = collectives.fsdp_attribution()
        self._owners.__enter__()
        self._flex = flex.traceable()
        self._flex.__enter__()
        self._modules.__enter__()
        if self._reuse is not None:
            self._reuse.__enter__()
        self._api.__enter__()
        self._ops.__enter__()
        return self

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), with the ops autograd runs outside any node (the ones-like seed) attributed to the op
        that produced the loss: its module and the user's source line, not the caller of the audit."""
        tid = self._ctx.tensor_ids.get(loss)
        tag: tuple[str, str, str | None, str] = ("", "", None, "backward seed")
        if tid is not None:
            for call in reversed(self.trace.calls):
                if any(o.id == tid for o in call.outputs):
                    tag = (call.module, call.module_type, call.source, f"backward seed of {call.api or call.op}")
                    break
        self._ctx.backward_tag = tag
        try:
            loss.backward()
        finally:
            self._ctx.backward_tag = None

    def __exit__(self, *exc: object) -> None:
        self._ops.__exit__(*exc)
        self._api.__exit__(*exc)
        if self._reuse is not None:
            self._reuse.__exit__(*exc)
            self._reuse.finish()
            self.trace.notes.extend(self._reuse.notes)
        self._modules.__exit__(*exc)
        self._owners.__exit__(None, None, None)
        self._flex.__exit__(None, None, None)
        self._ctx.boundary = None


def iter_compute(trace: Trace) -> Iterator[OpCall]:
    return (c for c in trace.calls if c.kind == "compute")
