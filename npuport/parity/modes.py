"""The dispatch modes a parity run uses. Each is tiny: it records or adjusts one thing and forwards the op.

- `OpTap`: calls back with every non-view op, its arguments and outputs (op capture, op sequence, op replay).
- `FaultMode`: the fault-injection device: perturbs one op's outputs inside one module.
- `Float64Mode`: the cpu64 golden: low-precision dtype requests become float64, so a model that casts to float32
  internally (RMSNorm, rotary) still computes its golden in float64.
No torch function is monkeypatched; the modes sit below autograd in the dispatcher.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_map

from npuport.devices.device import FaultSpec
from npuport.parity.shards import map_local
from npuport.trace.naming import is_view, op_name, written_arguments

_LOW = (torch.float32, torch.float16, torch.bfloat16)


class OpTap(TorchDispatchMode):
    def __init__(self, on_op: Callable[[Any, tuple, dict, Any], None]) -> None:
        super().__init__()
        self.on_op = on_op
        self.enabled = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.enabled and not is_view(func):
            with _disable_current_modes():
                self.on_op(func, args, kwargs, out)
        return out


class FaultMode(TorchDispatchMode):
    """out * (1 + scale * s) with s = +1, -1, +1, ... over the flattened output: not removable by a norm."""

    def __init__(self, spec: FaultSpec, current_module: Callable[[], str | None]) -> None:
        super().__init__()
        self.spec = spec
        self.current_module = current_module
        self.hits = 0
        self.seen: set[str] = set()  # the ops that ran inside the module: what to say when the fault never fired

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.current_module() != self.spec.module:
            return out
        name = op_name(func)
        self.seen.add(name)
        if name != self.spec.op:
            return out
        self.hits += 1
        with _disable_current_modes():
            if written_arguments(func) and isinstance(out, torch.Tensor):
                out.mul_(_factor(out, self.spec.scale))
                return out
            return tree_map(lambda t: _perturb(t, self.spec.scale) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)


def _perturb(t: torch.Tensor, scale: float) -> torch.Tensor:
    # a sharded output (DTensor) is perturbed shard by shard: a plain factor times a DTensor would be refused
    return map_local(t, lambda x: x * _factor(x, scale))


def _factor(t: torch.Tensor, scale: float) -> torch.Tensor:
    sign = 1.0 - 2.0 * (torch.arange(t.numel(), device=t.device) % 2).to(t.dtype)
    return (1.0 + scale * sign).reshape(t.shape)


class Float64Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in _LOW:
            kwargs["dtype"] = torch.float64
        if not written_arguments(func):  # an in-place op must keep writing its own argument
            args = tree_map(_up, args)
            kwargs = {k: tree_map(_up, v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.to(torch.float64)
    return x
