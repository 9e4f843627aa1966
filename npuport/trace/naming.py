"""Names and static facts about operator overloads, cached per overload object (they never change at run time)."""

from __future__ import annotations

import functools
from typing import Any

import torch


@functools.lru_cache(maxsize=None)
def op_name(func: Any) -> str:
    """'aten::add.Tensor' for an OpOverload; the default overload is shown bare ('aten::mm')."""
    schema = func._schema
    overload = schema.overload_name
    return f"{schema.name}.{overload}" if overload and overload != "default" else schema.name


@functools.lru_cache(maxsize=None)
def is_view(func: Any) -> bool:
    """True when every output aliases an input without writing it (view, t, slice, expand, detach, ...)."""
    try:
        return bool(func.is_view)
    except AttributeError:  # older torch: derive from the schema's alias annotations
        rets = func._schema.returns
        return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


@functools.lru_cache(maxsize=None)
def written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of every schema argument the op writes (in-place self, out=)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            out.append((i, arg.name))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def composite_candidate(name: str) -> bool:
    """Does aten::<name> have any overload implemented as CompositeImplicitAutograd (decomposed above autograd)?"""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or not hasattr(packet, "overloads"):
        return False
    for overload in packet.overloads():
        qual = f"aten::{name}" + ("" if overload == "default" else f".{overload}")
        if _has_composite_kernel(qual):
            return True
    return False


def _has_composite_kernel(qual: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CompositeImplicitAutograd"))
    except RuntimeError:  # TorchScript-only overloads (aten::add.t) are not in the dispatcher
        return False


@functools.lru_cache(maxsize=None)
def _schema_arg_names(name: str) -> frozenset[str]:
    packet = getattr(torch.ops.aten, name)
    names: set[str] = set()
    for overload in packet.overloads():
        try:
            names.update(a.name for a in getattr(packet, overload)._schema.arguments)
        except (AttributeError, RuntimeError):
            continue
    return frozenset(names)


def resolve_composite(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The composite aten overload a torch-level call maps to ('aten::softmax.int'), or None.

    Python wrappers sometimes pass extra keywords (F.softmax's _stacklevel); those are dropped before resolving.
    """
    if not composite_candidate(name):
        return None
    qual = f"aten::{name}"
    try:
        overload = torch._C._jit_resolve_packet(qual, *args, **kwargs)
    except Exception:
        allowed = _schema_arg_names(name)
        trimmed = {k: v for k, v in kwargs.items() if k in allowed}
        try:
            overload = torch._C._jit_resolve_packet(qual, *args, **trimmed)
        except Exception:
            return None
    full = qual if overload in ("", "default") else f"{qual}.{overload}"
    if not _has_composite_kernel(full):
        return None
    return full


def api_name(func: Any) -> str:
    """A readable torch-level name: 'torch.nn.functional.linear', 'Tensor.add', 'torch.matmul'."""
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", name)
    module = getattr(func, "__module__", None)
    if qual.startswith("_VariableFunctionsClass."):
        return "torch." + name
    if qual.startswith(("TensorBase.", "_TensorBase.")):
        return "Tensor." + qual.split(".", 1)[1]
    if qual.startswith("Tensor."):
        return qual
    if module in (None, "torch._C._nn", "torch._C._VariableFunctions", "torch._C"):
        if module == "torch._C._nn":
            return f"torch.nn.functional.{name}"
        return f"torch.{name}"
    return f"{module}.{qual}"
