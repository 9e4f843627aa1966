"""Flatten whatever a module returns or takes (tensors, tuples, dicts, transformers ModelOutput, dataclasses) into
named tensor leaves, and back.

Leaf names are stable paths ('[0]', '.logits', '[1][0]'), so two runs match entry by entry even when one side
returns a ModelOutput and the other a plain tuple would not: the structure itself is part of the name.
A tree spec is plain JSON (never pickle): tensors become {"t": index}, Python scalars stay, anything else is
recorded as {"opaque": "TypeName"} and rebuilt as None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Iterator

import torch

Spec = Any  # JSON: {"t": i} | {"v": scalar} | {"tuple"/"list": [...]} | {"dict": [[key, spec]...], "cls": name} | {"opaque": name}


def leaf_paths(spec: Spec, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(leaf path, tensor index) for every tensor in a spec, depth first: '[0]', '.logits', '.kwargs.mask'."""
    if "t" in spec:
        yield prefix, spec["t"]
    elif "dict" in spec:
        for key, value in spec["dict"]:
            yield from leaf_paths(value, f"{prefix}.{key}")
    else:
        for i, value in enumerate(spec.get("tuple", spec.get("list", []))):
            yield from leaf_paths(value, f"{prefix}[{i}]")


def flatten(obj: Any, prefix: str, out: list[tuple[str, torch.Tensor]]) -> None:
    """Append (leaf path, tensor) for every tensor in `obj`: the same paths as leaf_paths(to_spec(obj)), in one
    pass and without building a spec (this runs in every module hook)."""
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            if isinstance(value, torch.Tensor):
                out.append((f"{prefix}[{i}]", value))
            elif value is not None and not isinstance(value, (bool, int, float, str)):
                flatten(value, f"{prefix}[{i}]", out)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if value is not None and not isinstance(value, (bool, int, float, str)):
                flatten(value, f"{prefix}.{key}", out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            flatten(getattr(obj, f.name), f"{prefix}.{f.name}", out)


_SCALARS = (bool, int, float, str)
_ARG_LEAVES = tuple(f".args[{i}]" for i in range(8))
_KWARG_LEAVES: dict[str, str] = {}


def call_leaves(args: tuple, kwargs: dict[str, Any], out: list[tuple[str, torch.Tensor]]) -> None:
    """flatten(args, ".args", out) then flatten(kwargs, ".kwargs", out), the same leaves in the same order, with the
    plain tensors of a call (a decoder layer's hidden states, position ids, cos and sin) taken without the generic
    walk: the lean capture runs this for every module call that is not one tensor in, one tensor out."""
    for i, value in enumerate(args):
        if type(value) is torch.Tensor:
            out.append((_ARG_LEAVES[i] if i < 8 else f".args[{i}]", value))
        elif value is not None and not isinstance(value, _SCALARS):
            flatten(value, f".args[{i}]", out)
    for key, value in kwargs.items():
        if value is None or isinstance(value, _SCALARS):
            continue
        leaf = _KWARG_LEAVES.get(key)
        if leaf is None:
            leaf = _KWARG_LEAVES[key] = f".kwargs.{key}"
        if type(value) is torch.Tensor:
            out.append((leaf, value))
        elif type(value) is tuple and all(type(v) is torch.Tensor for v in value):  # rotary (cos, sin)
            out.extend((f"{leaf}[{j}]", v) for j, v in enumerate(value))
        else:
            flatten(value, leaf, out)


def opaque_types(obj: Any) -> list[str]:
    """Type names of non-tensor, non-scalar objects (a KV cache object, say) that a spec cannot hold."""
    found: list[str] = []
    _spec(obj, [], found)
    return sorted(set(found))


def to_spec(obj: Any) -> tuple[Spec, list[torch.Tensor]]:
    """A JSON spec of `obj` and its tensors in leaf order."""
    tensors: list[torch.Tensor] = []
    return _spec(obj, tensors, []), tensors


def _spec(obj: Any, tensors: list[torch.Tensor], opaque: list[str]) -> Spec:
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"t": len(tensors) - 1}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"v": obj}
    if isinstance(obj, torch.dtype):
        return {"dtype": str(obj).removeprefix("torch.")}
    if isinstance(obj, Mapping):
        return {"dict": [[str(k), _spec(v, tensors, opaque)] for k, v in obj.items()], "cls": type(obj).__name__}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"dict": [[f.name, _spec(getattr(obj, f.name), tensors, opaque)] for f in dataclasses.fields(obj)], "cls": type(obj).__name__}
    if isinstance(obj, tuple):
        return {"tuple": [_spec(v, tensors, opaque) for v in obj]}
    if isinstance(obj, list):
        return {"list": [_spec(v, tensors, opaque) for v in obj]}
    opaque.append(type(obj).__name__)
    return {"opaque": type(obj).__name__}


def from_spec(spec: Spec, tensors: list[torch.Tensor]) -> Any:
    """Rebuild plain containers (dicts stay dicts; a ModelOutput comes back as a dict) with the given tensors."""
    if "t" in spec:
        return tensors[spec["t"]]
    if "v" in spec:
        return spec["v"]
    if "dtype" in spec:
        return getattr(torch, spec["dtype"])
    if "dict" in spec:
        return {k: from_spec(v, tensors) for k, v in spec["dict"]}
    if "tuple" in spec:
        return tuple(from_spec(v, tensors) for v in spec["tuple"])
    if "list" in spec:
        return [from_spec(v, tensors) for v in spec["list"]]
    return None  # opaque: replayed as None (documented in docs/parity.md)


def map_tensors(obj: Any, fn: Any) -> Any:
    """`obj` with every tensor replaced by fn(tensor); containers rebuilt as plain tuple / list / dict."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    return obj
