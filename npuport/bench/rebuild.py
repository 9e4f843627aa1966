"""Turn a `BenchCase` back into a runnable call: the aten overload, its arguments with recorded plain values
converted back to torch objects, and random input tensors of the recorded shape, dtype and stride.

Random data, never zeros (METHOD: a GEMM on zeros ran 13% faster than on random data on an H200). Integer
inputs are drawn below the smallest dimension of the op's other inputs, so index-like arguments stay valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from npuport.bench.cases import BenchCase, TensorSpec
from npuport.cost.op_costs import call_cost, itemsize
from npuport.trace.records import OpCall, TensorMeta, TensorRef


class RebuildError(Exception):
    """This case cannot be turned back into a call (unknown op, an argument recorded only by its type name)."""


def resolve_overload(op: str) -> Any:
    """'aten::add.Tensor' -> torch.ops.aten.add.Tensor; 'aten::mm' -> torch.ops.aten.mm.default."""
    ns, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns, None), name, None) if ns and name else None
    if packet is None:
        raise RebuildError(f"no operator {op} in this torch build")
    try:
        return getattr(packet, overload or "default")
    except AttributeError:
        raise RebuildError(f"operator {op} has no overload {overload or 'default'!r}") from None


_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


def _leaf(value: Any, arg_name: str, device: str, as_code: bool) -> Any:
    """A recorded plain value -> the torch object (or its source text) the op takes."""
    if isinstance(value, TensorRef):
        return f"t[{value.index}]" if as_code else value
    if arg_name == "device" and isinstance(value, str):
        return "DEVICE" if as_code else torch.device(device)
    if isinstance(value, str):
        obj = getattr(torch, value, None)
        if isinstance(obj, _TORCH_ENUMS):  # dtypes, layouts, memory formats were recorded by name
            return f"torch.{value}" if as_code else obj
        if value in ("Generator",) or value[:1].isupper():
            raise RebuildError(f"argument {arg_name!r} was recorded only as its type ({value})")
    if isinstance(value, float) and as_code and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value) if as_code else value


def convert(case: BenchCase, device: str, as_code: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of the overload, tensors still TensorRef (or 't[i]' source text)."""
    overload = resolve_overload(case.op)
    schema = overload._schema.arguments
    names = [a.name for a in schema]
    if len(case.args) > len(schema):
        raise RebuildError(f"{len(case.args)} positional arguments recorded, {case.op} takes {len(schema)}")
    unknown = [k for k in case.kwargs if k not in names]
    if unknown:
        raise RebuildError(f"recorded keyword arguments {unknown} are not in {case.op}'s schema")

    def conv(value: Any, name: str) -> Any:
        return tree_map(lambda leaf: _leaf(leaf, name, device, as_code), value,
                        is_leaf=lambda x: isinstance(x, TensorRef))

    args = [conv(v, names[i]) for i, v in enumerate(case.args)]
    kwargs = {k: conv(v, k) for k, v in case.kwargs.items()}
    return args, kwargs


def int_bound(case: BenchCase) -> int:
    """Exclusive upper bound for random integer inputs: the smallest positive dim of the floating inputs."""
    dims = [d for s in case.inputs if s.dtype.startswith(("float", "bfloat", "complex")) for d in s.shape if d > 0]
    return max(1, min(dims)) if dims else 2


def storage_numel(spec: TensorSpec) -> int:
    if any(s == 0 for s in spec.shape):
        return 0
    if spec.stride is None:
        return math.prod(spec.shape)
    return 1 + sum((size - 1) * step for size, step in zip(spec.shape, spec.stride))


def materialize(spec: TensorSpec, device: str, bound: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A tensor of the spec's shape, dtype and stride filled with random data, on `device`."""
    dtype = getattr(torch, spec.dtype)
    n = storage_numel(spec)
    if dtype == torch.bool:
        flat = torch.rand(n, device=device, generator=generator) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        flat = torch.randn(n, device=device, dtype=torch.float32, generator=generator).to(dtype) if dtype.itemsize < 4 or dtype == torch.float32 \
            else torch.randn(n, device=device, dtype=dtype, generator=generator)
    else:
        flat = torch.randint(0, bound, (n,), device=device, dtype=dtype, generator=generator)
    if spec.stride is None:
        return flat.view(spec.shape) if n else torch.empty(spec.shape, device=device, dtype=dtype)
    return torch.as_strided(flat, spec.shape, spec.stride)


def set_bytes(case: BenchCase) -> int:
    return sum(storage_numel(s) * itemsize(s.dtype) for s in case.inputs)


def rotation_sets(case: BenchCase, rotate_bytes: int, memory_cap: int, max_sets: int = 32) -> int:
    """How many independent input sets to cycle through so that the sets together exceed `rotate_bytes`
    (several times the last-level cache), within `memory_cap`."""
    one = max(1, set_bytes(case))
    want = max(1, math.ceil(rotate_bytes / one))
    fit = max(1, memory_cap // one)
    return int(min(want, fit, max_sets))


@dataclass
class Runnable:
    """A case ready to call: `fn(bound)` runs the op on one pre-bound argument set."""

    case: BenchCase
    overload: Any
    tensor_sets: list[list[torch.Tensor]]
    bound_sets: list[tuple[list[Any], dict[str, Any]]]

    def fn(self, bound: tuple[list[Any], dict[str, Any]]) -> Any:
        return self.overload(*bound[0], **bound[1])

    def call_tensors(self) -> Callable[..., Any]:
        """The op as a function of its input tensors alone (what torch.compile and alternatives wrap)."""
        template = convert(self.case, str(self.tensor_sets[0][0].device) if self.tensor_sets[0] else "cpu")
        overload = self.overload

        def run(*tensors: torch.Tensor) -> Any:
            args, kwargs = bind(template, list(tensors))
            return overload(*args, **kwargs)

        return run


def bind(template: tuple[list[Any], dict[str, Any]], tensors: list[torch.Tensor]) -> tuple[list[Any], dict[str, Any]]:
    def put(x: Any) -> Any:
        return tensors[x.index] if isinstance(x, TensorRef) else x

    args, kwargs = template
    return ([tree_map(put, a, is_leaf=lambda x: isinstance(x, TensorRef)) for a in args],
            {k: tree_map(put, v, is_leaf=lambda x: isinstance(x, TensorRef)) for k, v in kwargs.items()})


def build(case: BenchCase, device: str, sets: int = 1, seed: int = 0) -> Runnable:
    """Materialize `sets` independent input sets and bind the call to each."""
    overload = resolve_overload(case.op)
    template = convert(case, device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    bound = int_bound(case)
    tensor_sets = [[materialize(s, device, bound, gen) for s in case.inputs] for _ in range(sets)]
    return Runnable(case, overload, tensor_sets, [bind(template, ts) for ts in tensor_sets])


def meta_cost(case: BenchCase) -> tuple[float, int, bool, str]:
    """FLOPs, ideal bytes, matrix flag and costing dtype of one call, computed as the audit does
    (npuport.cost.op_costs.call_cost) from the outputs a meta-device run of the call produces."""
    overload = resolve_overload(case.op)
    tensors = [torch.empty_strided(s.shape, s.stride or _contiguous(s.shape), dtype=getattr(torch, s.dtype), device="meta")
               for s in case.inputs]
    args, kwargs = bind(convert(case, "meta"), tensors)
    try:
        out = overload(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the op rejects the rebuilt arguments: the case is not runnable
        raise RebuildError(f"{case.op} rejects the rebuilt arguments: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    metas = tuple(TensorMeta(i, s.shape, s.dtype, s.stride) for i, s in enumerate(case.inputs))
    out_metas = tuple(TensorMeta(100 + i, tuple(o.shape), str(o.dtype).removeprefix("torch.")) for i, o in enumerate(outs))
    call = OpCall(0, case.op, "compute", "backward" if case.phase == "backward" else "forward", metas, out_metas, tuple(case.args), dict(case.kwargs), "", "", None, None)
    cost = call_cost(call)
    return cost.flops, cost.bytes, cost.matrix, cost.dtype


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))
