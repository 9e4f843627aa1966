"""The fake-tensor setting a trace runs in: the FakeTensorMode models are built and traced under, quiet torch logs, and
`trace_module` / `trace_callable` to record one step with the Recorder (tests and small tools; the audit's
trace_stage drives the Recorder itself)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from types import FrameType
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from npuport.trace.recorder import Recorder
from npuport.trace.records import Trace

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """torch logs a traceback at ERROR level when a fake-tensor kernel raises; npuport reports the error itself in
    one line (--debug shows the traceback), so these logs never reach the terminal."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    if not logging.getLogger("npuport").isEnabledFor(logging.DEBUG):
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


@contextlib.contextmanager
def tolerant_swap():  # noqa: ANN202 - a context manager
    """`model.to(dtype)` in build_model under fake tensors: torch swaps each fake parameter in place
    (torch.utils.swap_tensors), which refuses a tied weight (two modules hold it). The parameter then takes the
    converted data instead, so it keeps its identity and stays tied, as `.to()` leaves it on real tensors."""
    original = torch.utils.swap_tensors

    def swap(t1: torch.Tensor, t2: torch.Tensor) -> None:
        try:
            original(t1, t2)
        except RuntimeError:
            if not (isinstance(t1, torch.nn.Parameter) and t1.shape == t2.shape):
                raise
            with torch.no_grad():
                t1.data = t2.data

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


def _deepcopy_fake(self: FakeTensor, memo: dict[int, Any]) -> torch.Tensor:
    if id(self) in memo:
        return memo[id(self)]
    if self.requires_grad and not self.is_leaf:  # what torch says for a real tensor
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol "
                           "at the moment.")
    with torch.no_grad():  # a new storage and the bytes copied into it (aten::copy_, as a real deepcopy records)
        if 0 in self.stride():  # an expanded view: copying into the same layout would write one element twice
            out = self.clone(memory_format=torch.preserve_format)
        else:
            out = self.new_empty_strided(self.size(), self.stride())
            out.copy_(self)
    if self.requires_grad:
        out.requires_grad_()
    memo[id(self)] = out
    return out


@contextlib.contextmanager
def fake_deepcopy() -> Iterator[None]:
    """`copy.deepcopy` of a fake tensor as a real run does it: a new tensor of the same layout, the data copied (a copy,
    recorded where a recorder runs). torch's own Tensor.__deepcopy__ also deep-copies a fake tensor's
    attributes, its FakeTensorMode among them, and fails to set a meta tensor's storage from a CPU one; the
    half-made tensor it leaves behind later corrupted the heap (Dory copies its recurrent cache layers so)."""
    own = FakeTensor.__dict__.get("__deepcopy__")
    FakeTensor.__deepcopy__ = _deepcopy_fake  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        if own is None:
            del FakeTensor.__deepcopy__
        else:
            FakeTensor.__deepcopy__ = own  # type: ignore[method-assign]


class _InferenceAsNoGrad:
    """Counts the inference-mode blocks entered while `inference_as_no_grad` is active, and where ('model.py:12'):
    a training step cannot pass through one (its tensors cannot be saved for backward), which no_grad hides."""

    entered = 0
    sites: list[str] = []


def inference_sites() -> list[str]:
    """Where the inference-mode blocks of the scenario being traced were entered ('model.py:12')."""
    return list(_InferenceAsNoGrad.sites)


def _entered_at() -> str:
    """'file.py:12' of the `with torch.inference_mode():` line, or of the function an `@torch.inference_mode()`
    decorates (torch's decorator wrapper enters the mode, its `func` is the decorated function)."""
    frame: FrameType | None = sys._getframe(2)  # above no_grad_enter and its caller
    while frame is not None:
        if frame.f_code.co_filename.startswith(_TORCH_DIR):
            func = frame.f_locals.get("func")
            code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
            if code is not None and not code.co_filename.startswith(_TORCH_DIR):
                return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
            frame = frame.f_back
            continue
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    return "an unknown line"


@contextlib.contextmanager
def inference_as_no_grad(rewrite: bool = True) -> Iterator[type[_InferenceAsNoGrad]]:
    """`torch.inference_mode()` (a decorator on many inference forwards: DeepSeek-V3's model.py, gpt-fast) run as
    `torch.no_grad()` while tracing. On a device both run the same kernels (inference mode only skips autograd's
    version counters and view tracking), but under inference mode composite ops reach the recorder whole
    (aten::linear, aten::einsum instead of the matmuls they run), which the cost model cannot price. `rewrite` False
    (a training step): the blocks run as inference mode, only counted and placed, so that a tensor made in one and
    saved for backward fails as on a device, and one that is not passes."""
    cls = torch.autograd.grad_mode.inference_mode
    enter, exit_ = cls.__enter__, cls.__exit__
    _InferenceAsNoGrad.entered = 0
    _InferenceAsNoGrad.sites = []

    def no_grad_enter(self: Any) -> None:
        self._npuport_grad = torch.is_grad_enabled()
        if self.mode:
            _InferenceAsNoGrad.entered += 1
            site = _entered_at()
            if site not in _InferenceAsNoGrad.sites:  # a decorated layer's forward enters once per layer
                _InferenceAsNoGrad.sites.append(site)
            if not rewrite:  # a training step: inference mode as it is, so a tensor it makes and backward saves fails
                enter(self)  # as a real step does ("Inference tensors cannot be saved for backward")
                return
            torch.set_grad_enabled(False)

    def no_grad_exit(self: Any, *exc: object) -> None:
        if not rewrite and self.mode:
            exit_(self, *exc)
            return
        torch.set_grad_enabled(self._npuport_grad)

    cls.__enter__, cls.__exit__ = no_grad_enter, no_grad_exit  # type: ignore[method-assign,assignment]
    try:
        yield _InferenceAsNoGrad
    finally:
        cls.__enter__, cls.__exit__ = enter, exit_  # type: ignore[method-assign]


def new_fake_mode() -> FakeTensorMode:
    """Fake tensors: shapes, dtypes and strides propagate, no memory is allocated, no kernel runs.

    Real tensors created outside the mode (a buffer computed at import time) are accepted and converted.
    """
    return FakeTensorMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def fake_mode_active(mode: FakeTensorMode) -> Iterator[FakeTensorMode]:
    with mode:
        yield mode


def trace_callable(model: torch.nn.Module, step: Callable[[], Any], scenario: str, mode: FakeTensorMode) -> Trace:
    """Record everything `step()` dispatches; `model` names the modules. `step` runs inside `mode`."""
    with mode:
        with Recorder(model, scenario) as rec:
            step()
    return rec.trace


def trace_module(
    model: torch.nn.Module,
    inputs: Callable[[], tuple[tuple, dict]] | tuple,
    scenario: str = "prefill",
    train: bool = False,
    loss: Callable[[Any], torch.Tensor] | None = None,
    mode: FakeTensorMode | None = None,
) -> Trace:
    """Convenience for tests and small tools: trace `model(*args, **kwargs)` on fake tensors.

    `model` must have been built under the same fake `mode` (or be small enough to convert). With `train=True`
    the output (or `loss(output)`) is reduced to a scalar and backpropagated.
    """
    mode = mode or new_fake_mode()
    with mode:  # inputs are made before recording starts: their creation is not part of the model
        args, kwargs = inputs() if callable(inputs) else (inputs, {})

    def step() -> None:
        ctx = contextlib.nullcontext() if train else torch.no_grad()
        with ctx:
            out = model(*args, **kwargs)
            if train:
                value = loss(out) if loss is not None else (out if isinstance(out, torch.Tensor) else out[0]).float().sum()
                value.backward()

    return trace_callable(model, step, scenario, mode)
