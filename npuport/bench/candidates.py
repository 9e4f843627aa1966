"""Ways to run the same op, timed side by side: eager, a captured device graph, and registered alternatives
(built-in ones below, and the references of npuport/ascendc_kernels/registry.py when present); torch.compile is
npuport.bench.compiler.

An alternative registers with `@alternative(op, name)`; duplicates are rejected at import (STYLE 4). Each
returns a `Prepared` (what to call, on which argument sets) or raises `Unsupported` with a one-line reason.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable

from torch.nn.attention import SDPBackend, sdpa_kernel

from npuport.ascendc_kernels import registry  # type: ignore[attr-defined]
from npuport.bench.kernels import load_expectations
from npuport.bench.rebuild import Runnable
from npuport.devices.runtime import graph_replay


class Unsupported(Exception):
    """This candidate cannot run this case (backend rejects the inputs, no device graph on cpu, ...)."""


@dataclass
class Prepared:
    name: str
    fn: Callable[[Any], Any]
    inputs: list[Any]
    calls_per_sample: int = 1
    note: str = ""
    timing: Callable[[], AbstractContextManager[Any]] = nullcontext  # entered around the timed calls
    recompiles: Callable[[], int] | None = None  # torch.compile: recompiles of this case so far


Factory = Callable[[Runnable, str], Prepared]
_ALTERNATIVES: dict[str, dict[str, Factory]] = {}


def alternative(op: str, name: str) -> Callable[[Factory], Factory]:
    def register(fn: Factory) -> Factory:
        per_op = _ALTERNATIVES.setdefault(op, {})
        if name in per_op:
            raise ValueError(f"alternative {name!r} for {op} is registered twice")
        per_op[name] = fn
        return fn

    return register


def eager(r: Runnable, device: str) -> Prepared:
    return Prepared("eager", r.fn, r.bound_sets)


def graphed(r: Runnable, device: str, calls: int) -> Prepared:
    """Eager calls captured into one device graph (rotating through the input sets inside the graph)."""
    sets = r.bound_sets
    counter = iter(range(10**9))

    def one() -> None:
        r.fn(sets[next(counter) % len(sets)])

    try:
        replay = graph_replay(device, one, calls)
    except Exception as exc:  # noqa: BLE001 - some ops cannot be captured (host syncs, dynamic allocations)
        raise Unsupported(f"graph capture failed: {type(exc).__name__}: {first_line(exc)}") from None
    if replay is None:
        raise Unsupported("no device graph on this device")
    return Prepared("graph", replay, [None], calls_per_sample=calls, note=f"{calls} calls per replay")


def alternatives_for(op: str) -> dict[str, Factory]:
    out = dict(_ALTERNATIVES.get(op, {}))
    out.update(_kernel_references(op))
    return out


def _kernel_references(op: str) -> dict[str, Factory]:
    """npuport kernels whose `replaces` names a single-op pattern standing for `op`: their PyTorch reference,
    called with the op's arguments renamed as mappings/kernel_expectations.yaml says."""
    singles = load_expectations().single_op_patterns
    out: dict[str, Factory] = {}
    for name, entry in getattr(registry, "KERNELS", {}).items():
        ref = getattr(entry, "reference", None)
        pattern = next((singles[p] for p in getattr(entry, "replaces", ()) if p in singles and singles[p].op == op), None)
        if ref is None or pattern is None:
            continue

        def factory(r: Runnable, device: str, ref: Callable[..., Any] = ref, name: str = name, pat: Any = pattern) -> Prepared:
            sets = [reference_arguments(r.overload, b, pat) for b in r.bound_sets]
            fn = lambda kw: ref(**kw)  # noqa: E731
            try_once(fn, sets[0], f"npuport {name} reference")
            return Prepared(f"npuport:{name}", fn, sets, note="PyTorch reference of the npuport kernel")

        out[f"npuport:{name}"] = factory
    return out


def reference_arguments(overload: Any, bound: tuple[list[Any], dict[str, Any]], pattern: Any) -> dict[str, Any]:
    """The op's bound arguments as the reference's keywords (Unsupported when an argument has no counterpart)."""
    names = [a.name for a in overload._schema.arguments]
    given = dict(zip(names, bound[0]))
    given.update(bound[1])
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in pattern.defaults_only:
            if value != pattern.defaults_only[key]:
                raise Unsupported(f"the reference needs {key}={pattern.defaults_only[key]!r}, the call has {value!r}")
            continue
        if key in pattern.dropped:
            continue
        if key not in pattern.arguments:
            raise Unsupported(f"the reference has no counterpart for argument {key!r}")
        out[pattern.arguments[key]] = value
    return out


def try_once(fn: Callable[[Any], Any], args: Any, what: str) -> None:
    try:
        fn(args)
    except Exception as exc:  # noqa: BLE001
        raise Unsupported(f"{what} rejects these inputs: {type(exc).__name__}: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def _sdpa_backend(backend_name: str) -> Factory:
    def factory(r: Runnable, device: str) -> Prepared:
        backend = getattr(SDPBackend, backend_name, None)
        if backend is None:
            raise Unsupported(f"this torch has no SDPBackend.{backend_name}")

        def fn(b: Any) -> Any:
            with sdpa_kernel([backend]):
                return r.fn(b)

        with warnings.catch_warnings():  # the backend explains its refusal as a warning: the reason is kept
            warnings.simplefilter("ignore")
            try_once(fn, r.bound_sets[0], f"SDPA {backend_name.lower()} backend")
        return Prepared(f"sdpa[{backend_name.lower()}]", fn, r.bound_sets, note="forced with torch.nn.attention.sdpa_kernel")

    return factory


for _name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
    alternative("aten::scaled_dot_product_attention", f"sdpa[{_name.lower()}]")(_sdpa_backend(_name))
