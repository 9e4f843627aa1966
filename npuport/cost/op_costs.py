"""FLOPs and ideal bytes of one recorded op call: a pure function of its `OpCall` metadata.

FLOPs reuse torch.utils.flop_counter's registry where it has a formula and add the few it lacks (grouped GEMM,
CPU-variant attention, vector ops). Bytes are the ideal traffic: each distinct input element read once, each
output element written once; views move nothing; gather-like ops read only the rows they return.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.utils import flop_counter

from npuport.mappings import load_checked
from npuport.trace.records import ApiFrame, OpCall, TensorMeta, TensorRef

_ITEMSIZE: dict[str, int] = {}


def itemsize(dtype: str) -> int:
    if dtype not in _ITEMSIZE:
        dt = getattr(torch, dtype, None)
        _ITEMSIZE[dtype] = dt.itemsize if isinstance(dt, torch.dtype) else 4
    return _ITEMSIZE[dtype]


@dataclass(frozen=True)
class OpClasses:
    matrix: frozenset[str]
    causal: frozenset[str]
    vector_factor: dict[str, float]
    no_traffic: frozenset[str]
    gather_like: frozenset[str]
    indexed_write: frozenset[str]
    data_movement: frozenset[str]
    fused: frozenset[str]
    hot_share: float
    medium_min_share: float
    cuda_native_composites: frozenset[str]


@functools.lru_cache(maxsize=1)
def op_classes() -> OpClasses:
    d = load_checked("op_classes.yaml")  # schemas/op_classes.schema.json
    return OpClasses(
        matrix=frozenset(d["matrix_ops"]),
        causal=frozenset(d["causal_attention_ops"]),
        vector_factor={k: float(v) for k, v in d["vector_flops_per_element"].items()},
        no_traffic=frozenset(d["no_traffic_ops"]),
        gather_like=frozenset(d["gather_like_ops"]),
        indexed_write=frozenset(d["indexed_write_ops"]),
        data_movement=frozenset(d["data_movement_ops"]),
        fused=frozenset(d["fused_ops"]),
        hot_share=float(d["classes"]["hot_cumulative_share"]),
        medium_min_share=float(d["classes"]["medium_min_share"]),
        cuda_native_composites=frozenset(d["cuda_native_composites"]["ops"]),
    )


@functools.lru_cache(maxsize=4096)  # a few hundred distinct ops, asked for on every call of every step
def base_name(op: str) -> str:
    """'aten::add.Tensor' -> 'add'; 'npu::npu_rms_norm' -> 'npu_rms_norm'."""
    return op.split("::", 1)[-1].split(".", 1)[0]


@dataclass(frozen=True)
class CallCost:
    flops: float
    bytes: int
    matrix: bool
    dtype: str


def _grouped_mm_flops(a: Sequence[int], b: Sequence[int], *rest: Any, out_shape: Any = None, **kw: Any) -> int:
    # a: (M_total, K) rows grouped by offs, b: (G, K, N): every row meets one group's K x N weight once.
    if len(a) == 2 and len(b) == 3:
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 3 and len(b) == 3:  # batched form (G, M, K) x (G, K, N)
        return 2 * a[0] * a[1] * a[2] * b[2]
    if len(a) == 2 and len(b) == 2:  # groups along K (a weight gradient): (K, M_total) x (M_total, N) -> (G, K, N)
        return 2 * a[0] * a[1] * b[1]
    if len(a) == 3 and len(b) == 2:  # groups along N: (G, M, K) x (K, N_total) -> (M, N_total)
        return 2 * a[1] * a[2] * b[1]
    return 2 * _prod(out_shape[0] if out_shape else ()) * a[-1]


def sdpa_flops(q: Sequence[int], k: Sequence[int], v: Sequence[int]) -> int:
    """QK^T and PV of attention, counted per query head, so grouped KV heads (GQA, enable_gqa=True) work too.

    Same count as torch.utils.flop_counter.sdpa_flop_count, which rejects differing head counts. The backward
    is 2.5 times this (recomputed QK^T plus dV, dP, dQ, dK), as flop_counter's sdpa_backward_flop_count counts it.
    """
    *batch, sq, d = q
    sk, dv = k[-2], v[-1]
    n = 1
    for b in batch:
        n *= b
    return 2 * n * sq * sk * d + 2 * n * sq * sk * dv


def _sdpa_cpu_flops(q: Sequence[int], k: Sequence[int], v: Sequence[int], *rest: Any, out_shape: Any = None, **kw: Any) -> int:
    return flop_counter.sdpa_flop_count(q, k, v)


def _sdpa_cpu_bwd_flops(g: Sequence[int], q: Sequence[int], k: Sequence[int], v: Sequence[int], *rest: Any, out_shape: Any = None, **kw: Any) -> int:
    return flop_counter.sdpa_backward_flop_count(g, q, k, v)


def _mv_flops(a: Sequence[int], b: Sequence[int], *rest: Any, out_shape: Any = None, **kw: Any) -> int:
    return 2 * _prod(a)


def _addbmm_flops(inp: Any, a: Sequence[int], b: Sequence[int], *rest: Any, out_shape: Any = None, **kw: Any) -> int:
    return 2 * a[0] * a[1] * a[2] * b[2]


_EXTRA: dict[str, Callable[..., int]] = {
    "_grouped_mm": _grouped_mm_flops,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu_flops,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_cpu_bwd_flops,
    "mv": _mv_flops,
    "dot": _mv_flops,
    "addbmm": _addbmm_flops,
}


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@functools.lru_cache(maxsize=None)
def _formula(name: str) -> Callable[..., int] | None:
    if name in _EXTRA:
        return _EXTRA[name]
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    return flop_counter.flop_registry.get(packet)


def _shapes(tree: Any, inputs: Sequence[TensorMeta]) -> Any:
    if isinstance(tree, TensorRef):
        return torch.Size(inputs[tree.index].shape)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_shapes(x, inputs) for x in tree) if not isinstance(tree, torch.Size) else tree
    if isinstance(tree, dict):
        return {k: _shapes(v, inputs) for k, v in tree.items()}
    return tree


@functools.lru_cache(maxsize=None)
def _is_causal_position(name: str) -> int | None:
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    for i, arg in enumerate(packet.default._schema.arguments):
        if arg.name == "is_causal":
            return i
    return None


def is_causal_call(op: str, args: tuple, kwargs: dict) -> bool:
    """A causal attention call (its FLOPs are counted at half: fused kernels skip the masked blocks)."""
    name = base_name(op)
    return name in op_classes().causal and _is_causal(args, kwargs, name)


def _is_causal(args: tuple, kwargs: dict, name: str) -> bool:
    if kwargs.get("is_causal"):
        return True
    pos = _is_causal_position(name)
    return pos is not None and len(args) > pos and args[pos] is True


def _frozen(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    return x


_FLOPS: dict[tuple, float | None] = {}  # a layer's GEMMs repeat in every layer: each shape is counted once


def matrix_flops(name: str, args: tuple, kwargs: dict, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]) -> float | None:
    """FLOPs from a registered formula, or None when the op has none."""
    try:
        key = (name, tuple(i.shape for i in inputs), tuple(o.shape for o in outputs), _frozen(args), _frozen(kwargs))
        hash(key)
    except TypeError:  # an argument that is not hashable: counted every time
        return _matrix_flops(name, args, kwargs, inputs, outputs)
    if key not in _FLOPS:
        if len(_FLOPS) > 65536:
            _FLOPS.clear()
        _FLOPS[key] = _matrix_flops(name, args, kwargs, inputs, outputs)
    return _FLOPS[key]


# FlexAttention's operators (npuport.trace.flex): the backward recomputes QK^T and forms dV, dP, dQ, dK (2.5 times the
# forward, as torch.utils.flop_counter's flex_attention_backward_flop counts it)
_FLEX = {"flex_attention": 1.0, "flex_attention_backward": 2.5}


def flex_flops(name: str, args: tuple, kwargs: dict, inputs: Sequence[TensorMeta]) -> float:
    """QK^T and PV over the (query block, key block) tiles the block mask keeps (`block_share`, recorded per call);
    every tile when the share is unknown (a mask_mod that reads the step's tensors): counted dense. q, k and v are
    found through the call's arguments: one tensor passed as two of them is one input of the call."""
    refs = [a for a in args[:3] if isinstance(a, TensorRef)]
    q, k, v = ((inputs[a.index].shape for a in refs) if len(refs) == 3 else (i.shape for i in inputs[:3]))
    share = kwargs.get("block_share")
    return _FLEX[name] * sdpa_flops(q, k, v) * (1.0 if share is None else float(share))


def _matrix_flops(name: str, args: tuple, kwargs: dict, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]) -> float | None:
    if name == "scaled_dot_product_attention":
        q, k, v = (inputs[a.index].shape for a in args[:3])
        flops = float(sdpa_flops(q, k, v))
    elif name in _FLEX:
        flops = flex_flops(name, args, kwargs, inputs)
    else:
        formula = _formula(name)
        if formula is None:
            return None
        sargs = _shapes(args, inputs)
        skw = {k: v for k, v in _shapes(kwargs, inputs).items()}
        out_shapes = [torch.Size(o.shape) for o in outputs]
        try:
            flops = float(formula(*sargs, out_val=out_shapes[0] if len(out_shapes) == 1 else out_shapes, **skw))
        except TypeError:  # our extra formulas take out_shape, the registry's take out_val
            flops = float(formula(*sargs, out_shape=out_shapes, **skw))
    if name in op_classes().causal and _is_causal(args, kwargs, name):
        flops /= 2
    return flops


def _bytes(name: str, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta], classes: OpClasses) -> int:
    if name in classes.no_traffic:
        return 0
    written = sum(o.numel * itemsize(o.dtype) for o in outputs)
    if name in classes.gather_like and inputs:
        # the table is read only where indexed: as many elements as the output, plus the indices
        read = written + sum(i.distinct_numel * itemsize(i.dtype) for i in inputs[1:])
        return read + written
    if name in classes.indexed_write and len(inputs) >= 2:
        touched = _touched(name, inputs)
        if touched is not None:
            rest = sum(i.distinct_numel * itemsize(i.dtype) for i in inputs[1:])
            return rest + 2 * touched * itemsize(inputs[0].dtype)
    if name == "_grouped_mm" and len(inputs) >= 2 and len(inputs[0].shape) == 2 and len(inputs[1].shape) == 3:
        # experts' weights (G, K, N) are read only for the groups that get rows: with fewer rows than experts (a
        # decode token's top-k) at most one expert per row, the rest of the weight tensor is never touched
        rows, groups = inputs[0].shape[0], inputs[1].shape[0]
        w = inputs[1].distinct_numel * itemsize(inputs[1].dtype) * min(groups, rows) / max(groups, 1)
        rest = sum(i.distinct_numel * itemsize(i.dtype) for k, i in enumerate(inputs) if k != 1)
        return int(rest + w) + written
    read = sum(i.distinct_numel * itemsize(i.dtype) for i in inputs)
    return read + written


def _touched(name: str, inputs: Sequence[TensorMeta]) -> int | None:
    """Elements an in-place indexed write reads and writes in the tensor it writes into (inputs[0]): a scatter's
    index count, an index_add_ / index_copy_ source's, an index_put_ values' count; None when that count is unknown
    (a boolean mask, values broadcast to fewer elements than the indices select)."""
    if any(i.dtype in ("bool", "uint8") for i in inputs[1:]):
        return None
    if name.startswith("scatter"):  # scatter_(dim, index, src | value): one element per index
        return inputs[1].numel
    values = inputs[-1]
    indices = [i for i in inputs[1:-1] if i.dtype in ("int64", "int32")]
    if not indices or values.distinct_numel < max(i.numel for i in indices):
        return None
    return values.numel


def call_cost(call: OpCall) -> CallCost:
    """FLOPs, ideal bytes and costing unit of one aten call."""
    name = base_name(call.op)
    classes = op_classes()
    if call.kind == "view":
        dtype = call.outputs[0].dtype if call.outputs else "float32"
        return CallCost(0.0, 0, False, dtype)
    return _cost(name, call.args, call.kwargs, call.inputs, call.outputs, classes)


# FSDP2's copy-in before each all-gather: the rank's shards of the unit's parameters copied into its slice of the
# all-gather buffer by one torch._foreach_copy_ (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
# `all_gather_copy_in_cuda`: narrow the output to this rank's slice, split it, _foreach_copy_ the inputs in). It reads
# the shard and writes as many bytes; the rest of the buffer it returns is not touched (the all-gather fills it), and
# nothing is computed.
_COPY_IN = "all_gather_copy_in"


def _copy_in_cost(args: tuple, inputs: Sequence[TensorMeta]) -> CallCost:
    refs = args[0] if args and isinstance(args[0], (list, tuple)) else ()
    shards = [inputs[r.index] for r in refs if isinstance(r, TensorRef)] or list(inputs[:-1])
    dtype = shards[0].dtype if shards else "float32"
    return CallCost(0.0, 2 * sum(t.numel * itemsize(t.dtype) for t in shards), False, dtype)


def _cost(name: str, args: tuple, kwargs: dict, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta], classes: OpClasses) -> CallCost:
    if name == _COPY_IN:
        return _copy_in_cost(args, inputs)
    matrix = name in classes.matrix
    dtype = (inputs[0].dtype if matrix and inputs else outputs[0].dtype if outputs else inputs[0].dtype if inputs else "float32")
    flops: float | None = None
    if matrix:
        flops = matrix_flops(name, args, kwargs, inputs, outputs)
    if flops is None:
        if name in classes.data_movement or name in classes.no_traffic:
            flops = 0.0
        else:
            per = classes.vector_factor.get(name, 1.0)
            elems = max((o.numel for o in outputs), default=0)
            if name.startswith(("sum", "mean", "amax", "amin", "max", "min", "norm", "var", "std", "prod")) and inputs:
                elems = max(elems, inputs[0].numel)  # reductions touch every input element
            flops = per * elems
    return CallCost(float(flops), _bytes(name, inputs, outputs, classes), matrix, dtype)


def frame_cost(frame: ApiFrame, children: Sequence[OpCall]) -> CallCost:
    """Cost of a composite op reported as one native op: its own formula if it has one, else the sum of the
    FLOPs of the ops it decomposed into; bytes are the composite's own inputs and outputs (intermediates stay
    on chip in a native implementation)."""
    name = base_name(frame.op)
    classes = op_classes()
    matrix = name in classes.matrix
    flops = matrix_flops(name, frame.args, frame.kwargs, frame.inputs, frame.outputs) if matrix else None
    if flops is None:
        flops = sum(call_cost(c).flops for c in children)
    dtype = frame.inputs[0].dtype if frame.inputs else (frame.outputs[0].dtype if frame.outputs else "float32")
    return CallCost(float(flops), _bytes(name, frame.inputs, frame.outputs, classes), matrix or any(call_cost(c).matrix for c in children), dtype)


def backward_frame_cost(frame: ApiFrame, children: Sequence[OpCall]) -> CallCost:
    """Backward of a natively implemented composite: one kernel reads the forward inputs, outputs and output
    gradients and writes the input gradients (2 x (inputs + outputs) bytes); FLOPs from the composite's backward
    formula when there is one (SDPA), else from the CPU decomposition's backward ops."""
    name = base_name(frame.op)
    flops: float | None = None
    if name == "scaled_dot_product_attention" and len(frame.args) >= 3:
        q, k, v = (frame.inputs[a.index].shape for a in frame.args[:3])
        flops = 2.5 * sdpa_flops(q, k, v)
        if _is_causal(frame.args, frame.kwargs, name):
            flops /= 2
    if flops is None:
        flops = sum(call_cost(c).flops for c in children)
    classes = op_classes()
    io = _bytes(name, frame.inputs, frame.outputs, classes)
    dtype = frame.inputs[0].dtype if frame.inputs else "float32"
    return CallCost(flops, 2 * io, name in classes.matrix or any(call_cost(c).matrix for c in children), dtype)
