"""Plain records of what a model ran: the contract between tracing and every analysis after it.

Nothing here holds a live tensor. A tensor is described by `TensorMeta` (shape, dtype, identity), an aten call by
`OpCall`, a torch-level API call that is a composite aten op (F.scaled_dot_product_attention) by `ApiFrame`.
Coverage, rules, fusion and bench all read these and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Phase = Literal["forward", "backward"]
OpKind = Literal["compute", "view"]


# Records are slotted: a copied layer's calls and tensors number in the millions for a per-token loop (Mamba's
# reference scan: 5 M calls at 8 x 4096 tokens), where an instance dict costs as much again as the fields.
@dataclass(frozen=True, slots=True)
class TensorMeta:
    """A tensor as seen at one op boundary."""

    id: int  # identity within one trace: the same Python tensor object keeps its id
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix: "bfloat16"
    stride: tuple[int, ...] | None = None  # only when the tensor is not contiguous
    base: int | None = None  # id of the tensor this one is a view of (views resolved to their base)
    storage_offset: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def distinct_numel(self) -> int:
        """Elements actually stored: broadcast (stride-0) dimensions are read once, not once per index."""
        if self.stride is None:
            return self.numel
        n = 1
        for size, step in zip(self.shape, self.stride):
            if step != 0:
                n *= size
        return n if self.shape else 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "shape": list(self.shape), "dtype": self.dtype}
        if self.stride is not None:
            out["stride"] = list(self.stride)
        if self.base is not None:
            out["base"] = self.base
        return out


@dataclass(frozen=True, slots=True)
class TensorRef:
    """Stands in for a tensor inside an argument tree (`OpCall.args`), pointing at `OpCall.inputs[index]`."""

    index: int


@dataclass(slots=True)
class OpCall:
    """One aten operator call, recorded as it dispatched."""

    index: int  # position in the scenario's execution order
    op: str  # "aten::mm", "aten::add.Tensor" (default overload shown bare)
    kind: OpKind
    phase: Phase
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    args: tuple[Any, ...]  # positional args with tensors replaced by TensorRef, other values as plain data
    kwargs: dict[str, Any]
    module: str  # owning module path, "model.layers.3.mlp.down_proj" ("" for the root)
    module_type: str  # "Linear"
    source: str | None  # "file.py:123" of the user-level line that produced it
    api: str | None  # torch-level API that issued it: "torch.nn.functional.linear"
    frame: int | None = None  # ApiFrame.id when issued inside a composite torch-level op
    mutated: tuple[int, ...] = ()  # indices into inputs that the op writes (in-place / out=)


@dataclass(slots=True)
class ApiFrame:
    """A torch-level call that is itself an aten composite op, kept so a backend that implements the composite
    natively (NPU: scaled_dot_product_attention) can be reported as it dispatches there."""

    id: int
    op: str  # the composite aten overload: "aten::scaled_dot_product_attention"
    api: str  # "torch.nn.functional.scaled_dot_product_attention"
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    module: str
    module_type: str
    source: str | None
    phase: Phase = "forward"


@dataclass
class CollectiveCall:
    """One collective a rank issued (npuport.trace.collectives): what it moves and over how many ranks, where it came
    from. `position` is the number of aten calls recorded before it: where it sits in the step's order."""

    index: int
    position: int
    op: str  # "c10d::_allgather_base_", "_c10d_functional::all_reduce"
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, recv, ...
    phase: Phase
    nbytes: int  # nccl-tests size: the all-gathered output, the reduce-scattered input, the all-reduced tensor
    dtype: str
    group_size: int
    reduce_op: str | None
    module: str
    module_type: str
    source: str | None
    api: str | None
    inputs: tuple[TensorMeta, ...] = ()
    outputs: tuple[TensorMeta, ...] = ()


@dataclass
class Trace:
    """Everything recorded for one scenario."""

    scenario: str
    calls: list[OpCall] = field(default_factory=list)
    frames: dict[int, ApiFrame] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # module path -> type, in registration order
    notes: list[str] = field(default_factory=list)
    memory: Any = None  # npuport.trace.memory.MemoryTrace of the step, when it was measured
    collectives: list[CollectiveCall] = field(default_factory=list)  # under a process group: what this rank issued
    reused: int = 0  # layer calls whose records were copied from an identical layer's (npuport.trace.reuse)
    copy_of: dict[int, int] = field(default_factory=dict)  # a copied call's index -> its template call's index
    frame_copy_of: dict[int, int] = field(default_factory=dict)  # a copied frame's id -> its template frame's id
    skipped: int = 0  # of those, calls that did not run at all (inference: outputs and memory replayed)
