"""The device a benchmark runs on, named by its string (cpu, cuda[:i], npu[:i]): resolve, name, chip, timing clock,
synchronize, graph capture, CPU pinning.

Every accelerator specific is imported lazily inside a function (STYLE 6): `torch_npu` only when the user
asks for an npu device (through npuport.devices.device, which imports it with npuport.devices.backend, the module that
owns that import), CUDA only when one is present.
npuport/devices/device.py has no events, graphs or clock reading (it serves parity), so those live here. Clock state is read, never set: no clock, power or
persistence setting is ever changed here.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any, Callable, Iterator

import torch

from npuport.devices.backend import torch_npu_installed
from npuport.devices.device import parse_device
from npuport.devices.timer import Clock, DeviceEventClock, HostClock
from npuport.errors import NpuportError

# Device-name substrings -> chips of mappings/hardware.yaml (ordered: the first match wins).
_CHIP_NAMES = (("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100-SXM-80GB"), ("910B", "Ascend910B"),
               ("910A", "Ascend910A"), ("310P", "Ascend310P"))


def _npu_module() -> Any:
    """torch.npu, with torch_npu imported the project's way (npuport.devices.backend) when that module is there."""
    if not torch_npu_installed():
        return None
    try:
        parse_device("npu").check_present()  # imports torch_npu the project's way
    except NpuportError:
        return None
    return getattr(torch, "npu", None)


def resolve(device: str) -> str:
    """'auto' -> cuda if present, else npu if torch_npu is installed with a device, else cpu."""
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        npu = _npu_module()
        return "npu" if npu is not None and npu.is_available() else "cpu"
    kind = device.split(":", 1)[0]
    if kind not in ("cpu", "cuda", "npu") or (":" in device and not device.split(":", 1)[1].isdigit()):
        raise NpuportError(f"unknown device {device!r}", "auto, cpu, cuda[:i] or npu[:i]", device)
    if kind == "cuda" and not torch.cuda.is_available():
        raise NpuportError("no CUDA device is available", "a machine with a CUDA GPU, or cpu as the device", device)
    if kind == "npu":
        npu = _npu_module()
        if npu is None or not npu.is_available():
            raise NpuportError("no Ascend NPU is available", "torch_npu with CANN and a device, or cpu as the device", device)
    return device


def kind_of(device: str) -> str:
    return device.split(":", 1)[0]


def backend(device: str) -> Any:
    """torch.cuda or torch.npu (None for cpu)."""
    kind = kind_of(device)
    if kind == "cuda":
        return torch.cuda
    if kind == "npu":
        return _npu_module()
    return None


def index_of(device: str) -> int:
    mod = backend(device)
    if ":" in device:
        return int(device.split(":", 1)[1])
    return int(mod.current_device()) if mod is not None else 0


def clock_for(device: str) -> Clock:
    mod = backend(device)
    if mod is None:
        return HostClock()
    return DeviceEventClock(lambda: mod.Event(enable_timing=True), lambda: mod.synchronize(device))


def synchronize(device: str) -> None:
    mod = backend(device)
    if mod is not None:
        mod.synchronize(device)


def device_name(device: str) -> str:
    mod = backend(device)
    if mod is not None:
        return str(mod.get_device_name(index_of(device)))

    return platform.processor() or platform.machine() or "cpu"


def chip_for(device: str) -> str | None:
    """The hardware.yaml chip this device is, from its name (None for CPUs and unknown devices)."""
    if kind_of(device) == "cpu":
        return None
    name = device_name(device)
    for needle, chip in _CHIP_NAMES:
        if needle in name:
            return chip
    return None


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Pin the launching thread (this process's main thread) to one CPU core for the run, then restore."""
    if cpu is None:
        yield
        return
    if not hasattr(os, "sched_setaffinity"):
        raise NpuportError("CPU pinning is not supported on this OS", "Linux", os.name)
    before = os.sched_getaffinity(0)
    if cpu not in before:
        raise NpuportError(f"cannot pin to CPU {cpu}", "one of the CPUs this process may use", ", ".join(map(str, sorted(before))))
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def graph_replay(device: str, fn: Callable[[], Any], calls: int) -> Callable[[Any], None] | None:
    """Capture `calls` back-to-back calls of `fn` into a device graph; return a replayer (None on cpu, or when
    the backend cannot capture). Replays have no per-launch host gaps: the difference to eager is launch cost."""
    kind = kind_of(device)
    mod = backend(device)
    if mod is None:
        return None
    graph_cls = getattr(mod, "CUDAGraph", None) if kind == "cuda" else getattr(mod, "NPUGraph", None)
    graph_ctx = getattr(mod, "graph", None)
    if graph_cls is None or graph_ctx is None:
        return None
    side = mod.Stream()
    side.wait_stream(mod.current_stream())
    with mod.stream(side):  # warm-up on a side stream, as capture requires
        for _ in range(3):
            fn()
    mod.current_stream().wait_stream(side)
    mod.synchronize(device)
    g = graph_cls()
    with graph_ctx(g):
        for _ in range(calls):
            fn()
    mod.synchronize(device)
    return lambda _args: g.replay()


# --- clock state (read only) -------------------------------------------------------------------------------


