"""What a collective call is, as the recorder sees it below autograd: its kind, the bytes it moves, its group.

Distributed code reaches the dispatcher through two op families: `c10d::*` (torch.distributed's eager API, FSDP2:
`c10d::_allgather_base_`, `c10d::allreduce_`, ...) and `_c10d_functional::*` (functional collectives: DTensor, tensor
parallel, expert parallel). Under a fake process group on fake tensors both run their Meta kernels: nothing is sent,
the shapes are exact. `wait_tensor` is a completion wait, not traffic.

Bytes follow the nccl-tests convention (NVIDIA/nccl-tests doc/PERFORMANCE.md), so a figure here compares with a
measured busbw table: all_reduce, broadcast, reduce, send/recv: the tensor; all_gather: the gathered (output)
buffer; reduce_scatter: the input buffer; all_to_all: the input buffer.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import ProcessGroup, _resolve_process_group

NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd"})
WAITS = frozenset({"wait_tensor", "wait"})

# op base name -> collective kind (the names nccl and HCCL give the operation)
_KINDS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall_base_": "all_to_all", "alltoall_": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast_": "broadcast", "broadcast": "broadcast", "reduce_": "reduce",
    "scatter_": "scatter", "gather_": "gather", "send": "send", "recv_": "recv", "recv_any_source_": "recv",
    "barrier": "barrier", "monitored_barrier_": "barrier",
}
# kinds whose nccl-tests size is the output buffer (the gathered tensor), not the input
_OUTPUT_SIZED = frozenset({"all_gather", "gather"})
_REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})


@dataclass(frozen=True)
class Collective:
    """One collective call: kind, bytes (nccl-tests size), dtype, group size, reduce op (reductions only)."""

    kind: str
    nbytes: int
    dtype: str
    group_size: int
    reduce_op: str | None


def is_collective(func: Any) -> bool:
    return func.namespace in NAMESPACES and _base(func) not in WAITS


def is_wait(func: Any) -> bool:
    return func.namespace in NAMESPACES and _base(func) in WAITS


def _base(func: Any) -> str:
    return str(func._schema.name).split("::", 1)[1]


def kind_of(op_base: str) -> str:
    """'allreduce_' -> 'all_reduce'; an op this table does not know keeps its own name."""
    return _KINDS.get(op_base, op_base)


def describe(func: Any, args: tuple, kwargs: dict, out: Any) -> Collective:
    kind = kind_of(_base(func))
    flat_in = _tensors(args, kwargs, func, outputs=False)
    flat_out = _tensors(args, kwargs, func, outputs=True) or _flat(out)
    sized = flat_out if kind in _OUTPUT_SIZED else flat_in or flat_out
    nbytes = 0 if kind == "barrier" else sum(t.numel() * t.element_size() for t in sized)
    dtype = str((sized or flat_in or [torch.empty(0)])[0].dtype).removeprefix("torch.")
    return Collective(kind, int(nbytes), dtype, _group_size(func, args, kwargs), _reduce_op(args, kwargs) if kind in _REDUCING else None)


def _flat(x: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            out += _flat(v)
    return out


def _tensors(args: tuple, kwargs: dict, func: Any, outputs: bool) -> list[torch.Tensor]:
    """The op's input (or written output) tensors by its schema: c10d ops write their `output*` arguments; a
    functional op returns its result and reads its first argument."""
    found: list[torch.Tensor] = []
    for i, a in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(a.name)
        written = a.alias_info is not None and a.alias_info.is_write
        is_out = a.name.startswith("output") or (written and not a.name.startswith(("input", "tensors")))
        if func.namespace == "c10d" and a.name == "tensors":  # in-place list ops (allreduce_, broadcast_): both
            found += _flat(value)
            continue
        if is_out == outputs:
            found += _flat(value)
    return found


def _script_class(x: Any) -> str | None:
    """The TorchScript class name of a ScriptObject argument ('ProcessGroup', 'ReduceOp'), else None."""
    if not isinstance(x, torch.ScriptObject):
        return None
    kind: Any = x._type()  # torch's stubs type it as a bare ClassType
    return str(kind.name())


def _group_size(func: Any, args: tuple, kwargs: dict) -> int:
    """From the op's ProcessGroup object (c10d ops), else its group_size or group_name argument (functional ops)."""
    named: dict[str, Any] = {a.name: (args[i] if i < len(args) else kwargs.get(a.name))
                             for i, a in enumerate(func._schema.arguments)}
    for value in named.values():
        if _script_class(value) == "ProcessGroup":
            return int(ProcessGroup.unbox(value).size())
    size, name = named.get("group_size"), named.get("group_name")
    if isinstance(size, int):
        return size
    if isinstance(name, str):
        with contextlib.suppress(Exception):
            return int(_resolve_process_group(name).size())  # type: ignore[arg-type]  # GroupName is a str
    return 1


@functools.lru_cache(maxsize=1)
def _red_names() -> dict[int, str]:
    return {int(v.value): k.lower() for k, v in dist.ReduceOp.RedOpType.__members__.items()}


def _reduce_op(args: tuple, kwargs: dict) -> str | None:
    for a in list(args) + list(kwargs.values()):
        if _script_class(a) == "ReduceOp":
            op: Any = a
            with contextlib.suppress(Exception):
                return _red_names().get(int(op.op()), "sum")  # ReduceOp's TorchScript class has an op() accessor
        if isinstance(a, str) and a.lower() in ("sum", "avg", "product", "min", "max", "premul_sum", "band", "bor", "bxor"):
            return a.lower()
    return "sum"


# The FSDP unit whose parameters a collective gathers or whose gradients it reduces. FSDP2 issues them from hooks
# (a backward all-gather is a prefetch issued while another layer runs), so the module stack does not know the
# owner; FSDPParamGroup does (its _module_fqn), and its unshard / post_backward are where it issues them.
_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("npuport_fsdp_owner", default=None)


def current_owner() -> str | None:
    return _OWNER.get()


@contextlib.contextmanager
def fsdp_attribution() -> Iterator[None]:
    """While active, FSDP2's collectives are attributed to the module that owns the parameters they move."""
    mod = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_param_group")
    FSDPParamGroup = getattr(mod, "FSDPParamGroup", None)  # noqa: N806 - the class
    if FSDPParamGroup is None:  # the model does not use FSDP2 (or this torch has none): nothing to attribute
        yield
        return
    saved = {name: getattr(FSDPParamGroup, name) for name in ("unshard", "post_backward") if hasattr(FSDPParamGroup, name)}

    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def owned(self: Any, *a: Any, **k: Any) -> Any:
            token = _OWNER.set(getattr(self, "_module_fqn", None) or "")
            try:
                return method(self, *a, **k)
            finally:
                _OWNER.reset(token)
        return owned

    for name, method in saved.items():
        setattr(FSDPParamGroup, name, wrap(method))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(FSDPParamGroup, name, method)
