"""The decode scenario's cache built with each set of identical decoder layers run once.

A decode step needs the cache the model itself returns after `past` tokens, so the model runs a prefill of `past`
tokens first (on fake tensors, not recorded: npuport.model.hf.inputs). For Llama-2-70B that is 80 decoder layers
over 4,095 tokens, the audit's largest cost after recording (docs/performance.md). The layers of one group
(npuport.trace.reuse.groups_of: same code, configuration and parameter shapes) given the same input signature write
caches of the same shapes, each into its own slot. Here the first of them runs; the others do not: each gets a copy
of the slot its template filled (new fake tensors of the same shapes, strides and dtypes) and outputs of the
template's shapes, strides and dtypes.

Only where that is certain: the cache is an object with a `layers` list (transformers' Cache), the layer knows its
slot (a `layer_idx`-style attribute on it or a submodule), the template changed exactly its own slot, and it returned
only new tensors and plain values. Anything else runs in full, as before. Only in the audit, on fake tensors
(`allowed`), and not with its `--no-reuse`: a real run's cache needs the values every layer computes.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from npuport.trace.reuse import OWN_INDEX, PRIMITIVE, OutShape, call_signature, groups_of, storage_of

# off unless the audit turns it on: a real run (parity, profile, bench) needs the cache's real values, which only
# running every layer gives
_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar("npuport_prefill_once", default=False)


@contextlib.contextmanager
def allowed(on: bool) -> Iterator[None]:
    """Within the block, cache-building prefills skip identical layers (`on`) or run every layer."""
    token = _allowed.set(on)
    try:
        yield
    finally:
        _allowed.reset(token)


@dataclass
class _Template:
    slot: int | None  # the cache slot it filled; None: its copies run in full
    spec: Any = None
    leaves: list[Any] | None = None  # its outputs: tensors as OutShape, other values as they are


@contextlib.contextmanager
def layers_once(model: torch.nn.Module) -> Iterator[None]:
    """Around a cache-building prefill of `model`: identical layers after the first run as their template did."""
    first = next(model.parameters(), None)
    groups: dict[torch.nn.Module, tuple] = groups_of(model) if _allowed.get() and isinstance(first, FakeTensor) else {}
    templates: dict[tuple, _Template] = {}
    patched: list[tuple[torch.nn.Module, Any]] = []
    for mod, key in groups.items():
        patched.append((mod, mod.__dict__.get("forward")))
        mod.forward = _forward(mod, mod.forward, key, templates)  # on the instance: undone below
    try:
        yield
    finally:
        for mod, own in patched:
            if own is None:
                mod.__dict__.pop("forward", None)
            else:
                mod.forward = own


def _forward(mod: torch.nn.Module, original: Any, group: tuple, templates: dict[tuple, _Template]) -> Any:
    def forward(*args: Any, **kwargs: Any) -> Any:
        cache = _cache_of(args, kwargs)
        slot = _own_slot(mod)
        signature, tensors = call_signature(args, kwargs)
        key = (group, signature)
        tpl = templates.get(key)
        if tpl is not None and tpl.slot is not None and cache is not None and slot is not None \
                and tpl.leaves is not None and _reach(cache, slot) and (own := _clone(cache.layers[tpl.slot])) is not None:
            cache.layers[slot] = own
            made = [torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device=x.device) if isinstance(x, OutShape)
                    else x for x in tpl.leaves]
            return tree_unflatten(made, tpl.spec)
        before = _slots(cache)
        out = original(*args, **kwargs)
        if tpl is None:
            templates[key] = _profile(out, cache, slot, before, tensors)
        return out

    return forward


def _profile(out: Any, cache: Any, slot: int | None, before: list[dict[str, Any]] | None,
             inputs: list[torch.Tensor]) -> _Template:
    """What a template did, and whether its copies may be made from it."""
    after = _slots(cache)
    if slot is None or before is None or after is None:
        return _Template(None)
    before = before + [{} for _ in range(len(after) - len(before))]  # slots a lazily grown cache appended
    # entry 0 is the cache's own state: a template that changed it, or any slot but its own, is not copied
    if [i - 1 for i, (a, b) in enumerate(zip(before, after)) if not _same(a, b)] != [slot]:
        return _Template(None)
    if _clone(cache.layers[slot]) is None:
        return _Template(None)
    leaves, spec = tree_flatten(out)
    if any(not isinstance(x, (torch.Tensor, *PRIMITIVE)) for x in leaves):
        return _Template(None)
    outs = [x for x in leaves if isinstance(x, torch.Tensor)]
    known = {storage_of(t) for t in inputs}
    stores = [storage_of(t) for t in outs]
    if any(t.layout != torch.strided for t in outs) or any(s in known for s in stores) or len(set(stores)) != len(stores):
        return _Template(None)
    return _Template(slot, spec, [OutShape(tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
                                  if isinstance(x, torch.Tensor) else x for x in leaves])


def _cache_of(args: tuple, kwargs: dict) -> Any:
    for value in (*kwargs.values(), *args):
        if isinstance(getattr(value, "layers", None), list):
            return value
    return None


# the attributes a layer's own index goes by, in a fixed order (a set's order changes with the process's hash seed);
# a 1-based one (`layer_number`) names no slot its template filled, so its copies run in full
_SLOT_NAMES = tuple(sorted(OWN_INDEX, key=lambda n: (n != "layer_idx", n)))


def _own_slot(mod: torch.nn.Module) -> int | None:
    for sub in mod.modules():
        for name in _SLOT_NAMES:
            value = vars(sub).get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _slots(cache: Any) -> list[dict[str, Any]] | None:
    """The cache's own state (first) and each slot's, as they are now: attribute -> the object, or for a list,
    tuple or dict the objects in it (a linear-attention slot keeps its states in a list it writes into)."""
    if cache is None:
        return None
    own = {k: v for k, v in vars(cache).items() if k != "layers"} if hasattr(cache, "__dict__") else {}
    return [_state(own)] + [_state(vars(layer)) if hasattr(layer, "__dict__") else {} for layer in cache.layers]


def _state(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, (list, tuple)):
            out[k] = (type(v), *v)
        elif isinstance(v, dict):
            out[k] = (dict, *v.items())
        else:
            out[k] = v
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(_one(a[k], b[k]) for k in a)


def _one(x: Any, y: Any) -> bool:
    if x is y or isinstance(x, PRIMITIVE) and isinstance(y, PRIMITIVE) and x == y:
        return True
    if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
        return all(_one(p, q) for p, q in zip(x, y))
    return False


def _reach(cache: Any, slot: int) -> bool:
    """Whether the cache has slot `slot`, growing it as its own update would (a lazily grown cache: one kind of
    slot appended up to the index asked for)."""
    grow = getattr(cache, "layer_class_to_replicate", None)
    while len(cache.layers) <= slot and grow is not None:
        cache.layers.append(grow())
    return slot < len(cache.layers)


def _clone(layer: Any) -> Any:
    """A slot like `layer`, with tensors of its own: each a view, as the template's is, of a new storage of the
    template's storage's size (a sliding-window slot keeps a view of its whole prefill: the memory counts it), views of
    one storage onto one new storage; lists, tuples and dicts of them made anew. None when a tensor sits deeper."""
    made = copy.copy(layer)
    bases: dict[int, torch.Tensor] = {}

    def like(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        base = bases.get(storage_of(t))
        if base is None:
            n = t.untyped_storage().nbytes() // t.element_size()
            base = bases[storage_of(t)] = torch.empty(n, dtype=t.dtype, device=t.device)
        return base.as_strided(t.shape, t.stride(), t.storage_offset())

    for k, v in vars(layer).items():
        if isinstance(v, (list, tuple)):
            items = list(v)
        elif isinstance(v, dict):
            items = list(v.values())
        else:
            if _holds_tensors(v):
                return None
            setattr(made, k, like(v))
            continue
        if any(isinstance(x, (list, tuple, dict)) or _holds_tensors(x) for x in items):
            return None
        if isinstance(v, dict):
            setattr(made, k, {key: like(x) for key, x in v.items()})
        else:
            setattr(made, k, type(v)(like(x) for x in v) if isinstance(v, tuple) else [like(x) for x in v])
    return made


def _holds_tensors(x: Any) -> bool:
    """An object (not a tensor) with tensors among its attributes: a copy could not give the slot its own."""
    return not isinstance(x, torch.Tensor) and hasattr(x, "__dict__") and \
        any(isinstance(v, torch.Tensor) for v in vars(x).values())
