"""Parameters made at the cost of their metadata while a model is built on fake tensors.

Why: under FakeTensorMode, each `torch.empty` in a module's `__init__` and the `detach` that `nn.Parameter` makes of
it go through the fake dispatcher and its cache (about 60 and 90 us on the project's CPU), about 150 us per
parameter before the module's own Python runs. DeepSeek-V3's own model.py has 45,000 parameters (an `nn.Linear` per
expert) and spent about a third of its audit building them (docs/performance.md). The mode itself makes each fake
output as `FakeTensor(mode, meta_tensor, device)` around the meta kernel's result; doing that directly costs about
15 us.

Only calls with no values to lose are taken this way: `torch.empty`, `torch.zeros` and `torch.ones` on the CPU (the
device fake tensors are traced on) given a size and at most `dtype`, `device` and `requires_grad` (a fake tensor holds
no values: zeros and ones are an empty tensor of the same layout), and `Tensor.detach` of a fake tensor of this mode that carries no constant. Every other call goes
the usual way. At the first use in a process both ways build the same small module and must agree on every attribute
a trace reads (type, parameter-ness, shape, strides, dtype, device, requires_grad, leaf); where they do not (another
torch release), the fast way is not used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

try:  # torch-internal helpers (npuport accepts torch 2.1 and later): without them, models build the usual way
    from torch._subclasses.fake_tensor import in_kernel_invocation_manager, unset_fake_temporarily
except ImportError:  # pragma: no cover - depends on the torch release
    in_kernel_invocation_manager = unset_fake_temporarily = None  # type: ignore[assignment]
from torch.overrides import TorchFunctionMode

_FACTORIES = (torch.empty, torch.zeros, torch.ones)
_PLAIN_KWARGS = frozenset(("dtype", "device", "requires_grad"))
_agrees: bool | None = None  # the self-check's answer, once per process


class _FastFactories(TorchFunctionMode):
    def __init__(self, mode: FakeTensorMode) -> None:
        super().__init__()
        self.fake = mode

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _FACTORIES and kwargs.keys() <= _PLAIN_KWARGS:
            out = self._factory(func, args, kwargs)
            if out is not None:
                return out
        elif func is torch.Tensor.detach and not kwargs and len(args) == 1:
            out = self._detach(args[0])
            if out is not None:
                return out
        return func(*args, **kwargs)

    def _factory(self, func: Any, args: tuple, kwargs: dict) -> FakeTensor | None:
        asked = kwargs.get("device")
        device = torch.device(asked if asked is not None else torch.get_default_device())  # an int is a CUDA index
        if device.type != "cpu":  # the audit's fake device; others (meta, an accelerator) go the usual way
            return None
        with unset_fake_temporarily():
            meta = func(*args, dtype=kwargs.get("dtype"), device="meta", requires_grad=bool(kwargs.get("requires_grad")))
            return FakeTensor(self.fake, meta, device)

    def _detach(self, t: Any) -> FakeTensor | None:
        if type(t) is not FakeTensor or t.fake_mode is not self.fake or t.constant is not None:
            return None
        with in_kernel_invocation_manager(self.fake):
            meta = t.detach()  # the meta kernel on the tensor itself: an alias of its meta storage
        if type(meta) is not torch.Tensor or meta.device.type != "meta":
            return None
        with unset_fake_temporarily():
            return FakeTensor(self.fake, meta, t.fake_device)


@contextlib.contextmanager
def fast_fake_build(mode: Any) -> Iterator[None]:
    """While a model is built under `mode` (a FakeTensorMode): its parameters made directly (see the module's
    docstring). Anything else for `mode` (a null context: real tensors) changes nothing."""
    if not isinstance(mode, FakeTensorMode) or unset_fake_temporarily is None or not _fast_agrees(mode):
        yield
        return
    with _FastFactories(mode):
        yield


def _describe(t: torch.Tensor) -> tuple:
    return (type(t), isinstance(t, torch.nn.Parameter), getattr(t, "_is_param", False), tuple(t.shape), t.stride(),
            t.storage_offset(), t.dtype, t.device, t.requires_grad, t.is_leaf, t.grad_fn is None,
            getattr(t, "fake_mode", None) is not None)


def _probe() -> list[tuple]:
    lin = torch.nn.Linear(4, 3, dtype=torch.bfloat16)
    made = [torch.nn.Parameter(torch.zeros(2, 5)), torch.nn.Parameter(torch.ones((3,)), requires_grad=False),
            torch.empty(2, 2, requires_grad=True), torch.empty([1, 6], dtype=torch.float16)]
    return [_describe(t) for t in (lin.weight, lin.bias, *made)]


def _fast_agrees(mode: FakeTensorMode) -> bool:
    global _agrees
    if _agrees is None:
        try:
            with mode:
                usual = _probe()
                with _FastFactories(mode):
                    fast = _probe()
            _agrees = usual == fast
        except Exception:  # another torch release's internals: build the usual way  # noqa: BLE001
            _agrees = False
    return _agrees
