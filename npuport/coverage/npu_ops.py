"""Audit already-migrated code on a machine without an NPU: a stand-in `torch_npu` for fake-tensor tracing.

    with fake_torch_npu("2.13.0"):
        import torch_npu                                  # the stand-in, unless the real one imports
        y, rstd = torch_npu.npu_rms_norm(x, w, 1e-6)      # torch.ops.npu.npu_rms_norm, Meta kernel

On entry, every custom op of the chosen release is defined as torch.ops.npu.<op> from its checked-in schema, and
the ops in meta_kernels.META get a Meta kernel (FakeTensorMode uses it). torch.library registrations are
process-wide and cannot be taken back cleanly, so they are made once and kept; what *is* undone on exit:
sys.modules['torch_npu'], torch.npu, Tensor.npu and Module.npu (added only when absent).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import threading
import types
from typing import Any, Iterator

import torch

from npuport.coverage.database import load
from npuport.coverage.meta_kernels import META
from npuport.devices.backend import try_import_torch_npu
from npuport.devices.standin import absent_npu_module

_LOCK = threading.RLock()
_LIBRARY: Any = None  # kept alive for the process: dropping it would unregister everything
_DEFINED: dict[str, str] = {}  # npu::<op> -> schema it was defined with (first release wins)
_SKIPPED: dict[str, str] = {}  # npu::<op> -> why it could not be defined
_DEPTH = 0
_SAVED: dict[str, Any] = {}
_MISSING = object()


def _library() -> Any:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("npu", "FRAGMENT")
    return _LIBRARY


def _op_exists(name: str) -> bool:
    base, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"npu::{base}", overload)
        return True
    except RuntimeError:
        return False


def register_npu_ops(version: str | None = None) -> dict[str, str]:
    """Define the release's npu:: schemas and the known Meta kernels (idempotent). Returns {op: why} for skips."""
    db = load(version)
    lib = _library()
    with _LOCK:
        for qualified, entry in db.custom.items():
            name = qualified.split("::", 1)[1]
            if qualified in _DEFINED or qualified in _SKIPPED:
                continue
            if _op_exists(name):  # defined by someone else (the real torch_npu, a test)
                _DEFINED[qualified] = entry.schema
                continue
            try:
                lib.define(entry.schema)
                _DEFINED[qualified] = entry.schema
            except RuntimeError as exc:
                _SKIPPED[qualified] = str(exc).splitlines()[0]
        for name, fn in META.items():
            qualified = f"npu::{name}"
            if qualified not in _DEFINED:
                continue
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "Meta"):
                continue
            lib.impl(name, fn, "Meta")
    return dict(_SKIPPED)


class _FakeTorchNpu(types.ModuleType):
    """torch_npu.<op> -> torch.ops.npu.<op>; torch_npu.npu -> the device stand-in."""

    __npuport_fake__ = True

    def __init__(self, version: str, device: types.ModuleType) -> None:
        super().__init__("torch_npu", "npuport stand-in for torch_npu (shapes only, no kernels)")
        self.__version__ = version
        # a spec, so importlib.util.find_spec("torch_npu") answers instead of raising ValueError: libraries probe
        # for torch_npu that way (transformers does on every config), and the stand-in stays for the process once
        # a model file imports torch_npu; its device stand-in says no NPU is available
        self.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None, origin="npuport stand-in")
        self.npu = device

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if f"npu::{name}" in _DEFINED or any(op.startswith(f"npu::{name}.") for op in _DEFINED):
            return getattr(torch.ops.npu, name)
        raise AttributeError(f"the torch_npu stand-in has no {name!r} (not a custom op of this release)")


def _to_npu(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Tensor.npu / Module.npu in a shapes-only audit: stay where you are."""
    return self


def _install(version: str, device_stand_in: bool) -> None:
    device = absent_npu_module()
    _SAVED["module"] = sys.modules.get("torch_npu", _MISSING)
    sys.modules["torch_npu"] = _FakeTorchNpu(version, device)
    if device_stand_in:
        for owner, attr, value in ((torch, "npu", device), (torch.Tensor, "npu", _to_npu), (torch.nn.Module, "npu", _to_npu)):
            key = f"{owner.__name__}.{attr}"
            if not hasattr(owner, attr):
                _SAVED[key] = (owner, attr)
                setattr(owner, attr, value)


def _uninstall() -> None:
    previous = _SAVED.pop("module", _MISSING)
    if previous is _MISSING:
        sys.modules.pop("torch_npu", None)
    else:
        sys.modules["torch_npu"] = previous
    for key in [k for k in _SAVED]:
        owner, attr = _SAVED.pop(key)
        if hasattr(owner, attr):
            delattr(owner, attr)


@contextlib.contextmanager
def fake_torch_npu(version: str | None = None, *, device_stand_in: bool = True, prefer_real: bool = True) -> Iterator[types.ModuleType]:
    """Yield torch_npu: the real one if it imports (prefer_real), else the stand-in for `version` (default newest).

    Re-entrant: nested entries share the outer stand-in; the outermost exit restores sys.modules and torch.
    """
    global _DEPTH
    real = try_import_torch_npu() if prefer_real else None
    if real is not None:
        yield real
        return
    db = load(version)
    register_npu_ops(db.version)
    with _LOCK:
        if _DEPTH == 0:
            _install(db.version, device_stand_in)
        _DEPTH += 1
    try:
        yield sys.modules["torch_npu"]
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                _uninstall()


def defined_ops() -> dict[str, str]:
    """npu:: ops defined so far in this process, with their schema."""
    return dict(_DEFINED)
