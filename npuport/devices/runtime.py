"""The device a benchmark runs on: name, timing clock, synchronize, graph capture, CPU pinning, clock state.

Every accelerator specific is imported lazily inside a function (STYLE 6): `torch_npu` only when the user
asks for an npu device (through npuport/devices/device.py, which owns that import), CUDA only when one is present.
npuport/devices/device.py has no events, graphs or clock reading (it serves parity), so those live here. Clock state is read, never set: no clock, power or
persistence setting is ever changed here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from npuport.devices.device import parse_device
from npuport.devices.timer import Clock, DeviceEventClock, HostClock
from npuport.errors import NpuportError

# Device-name substrings -> chips of mappings/hardware.yaml (ordered: the first match wins).
_CHIP_NAMES = (("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100-SXM-80GB"), ("910B", "Ascend910B"),
               ("910A", "Ascend910A"), ("310P", "Ascend310P"))


def _npu_module() -> Any:
    """torch.npu, with torch_npu imported the project's way (npuport/devices/device.py) when that module is there."""
    if importlib.util.find_spec("torch_npu") is None:
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
        raise NpuportError("no CUDA device is available", "a machine with a CUDA GPU, or --device cpu", device)
    if kind == "npu":
        npu = _npu_module()
        if npu is None or not npu.is_available():
            raise NpuportError("no Ascend NPU is available", "torch_npu with CANN and a device, or --device cpu", device)
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


def free_memory(device: str) -> int:
    mod = backend(device)
    if mod is not None and hasattr(mod, "mem_get_info"):
        free, _total = mod.mem_get_info(index_of(device))
        return int(free)
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


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

_NV_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.memory", "utilization.gpu",
              "temperature.gpu", "power.draw", "power.limit", "pstate")
_nv_valid: list[tuple[str, ...]] = []  # the fields this nvidia-smi accepts, found on first use
_NV_REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# nvidia-smi's event-reason bits that mean the clock is held down by power, heat or a hardware slowdown.
_NV_SLOWDOWN = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


def _run(cmd: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def _num(text: str) -> float | str:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return text


def _nv_query(fields: tuple[str, ...], index: int) -> list[str] | None:
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", str(index)])
    if not out or not out.strip():
        return None
    parts = out.strip().splitlines()[0].split(",")
    return parts if len(parts) == len(fields) else None


def nvidia_clocks(index: int) -> dict[str, Any] | None:
    """Read-only nvidia-smi query of clocks, load, temperature and power (fields this driver lacks are left out)."""
    if not _nv_valid:
        if shutil.which("nvidia-smi") is None:
            return None
        ok = _NV_FIELDS if _nv_query(_NV_FIELDS, index) else tuple(f for f in _NV_FIELDS if _nv_query((f,), index))
        _nv_valid.append(ok)
    fields = _nv_valid[0]
    parts = _nv_query(fields, index) if fields else None
    if parts is None:
        return None
    values: dict[str, Any] = dict(zip(fields, (_num(v) for v in parts)))
    for name in _NV_REASON_FIELDS:
        got = _run(["nvidia-smi", f"--query-gpu={name}", "--format=csv,noheader", "-i", str(index)])
        if got:
            values["event_reasons"] = got.strip().splitlines()[0].strip()
            break
    return values


def clock_warnings(sample: dict[str, Any]) -> list[str]:
    """Why a clock sample taken under load looks throttled (empty when it does not)."""
    out = []
    sm, top = sample.get("clocks.sm"), sample.get("clocks.max.sm")
    if isinstance(sm, float) and isinstance(top, float) and top > 0 and sm < 0.85 * top:
        out.append(f"SM clock {sm:.0f} MHz under load is {sm / top:.0%} of its {top:.0f} MHz maximum")
    reasons = sample.get("event_reasons")
    if isinstance(reasons, str) and reasons.startswith("0x"):
        bits = int(reasons, 16)
        named = [name for bit, name in _NV_SLOWDOWN.items() if bits & bit]
        if named:
            out.append("clock event reasons active: " + ", ".join(named))
    return out


def cpu_clocks() -> dict[str, Any]:
    base = "/sys/devices/system/cpu/cpu0/cpufreq/"
    out: dict[str, Any] = {}
    for key in ("scaling_cur_freq", "scaling_max_freq", "cpuinfo_max_freq", "scaling_governor"):
        try:
            with open(base + key, encoding="utf-8") as fh:
                out[key] = _num(fh.read())
        except OSError:
            continue
    if not out:
        out["note"] = "the kernel exposes no cpufreq data here (common in VMs)"
    return out


def clock_state(device: str) -> dict[str, Any]:
    """What the device says about its clocks right now; {'available': False, ...} when it says nothing."""
    kind = kind_of(device)
    if kind == "cuda":
        got = nvidia_clocks(index_of(device))
        return {"available": True, "source": "nvidia-smi", **got} if got else {"available": False, "source": "nvidia-smi not found or failed"}
    if kind == "npu":
        raw = _run(["npu-smi", "info"])
        return {"available": bool(raw), "source": "npu-smi info", "raw": (raw or "").splitlines()[:40]}
    return {"available": True, "source": "/sys/devices/system/cpu/cpu0/cpufreq", **cpu_clocks()}


@dataclass
class ClockSampler:
    """Samples nvidia-smi in a background thread while the benchmark runs, so the clock is read under load."""

    device: str
    interval_s: float = 1.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "ClockSampler":
        if kind_of(self.device) == "cuda" and shutil.which("nvidia-smi"):
            index = index_of(self.device)

            def loop() -> None:
                while not self._stop.wait(self.interval_s):
                    got = nvidia_clocks(index)
                    if got:
                        self.samples.append({"t": time.monotonic(), **got})

            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def summary(self) -> dict[str, Any]:
        busy = [s for s in self.samples if isinstance(s.get("utilization.gpu"), float) and s["utilization.gpu"] >= 50]
        sm = sorted(s["clocks.sm"] for s in busy if isinstance(s.get("clocks.sm"), float))
        warnings: list[str] = []
        for s in busy:
            for w in clock_warnings(s):
                if w not in warnings:
                    warnings.append(w)
        return {"samples": len(self.samples), "busy_samples": len(busy),
                "sm_clock_mhz_under_load": {"min": sm[0], "median": sm[len(sm) // 2], "max": sm[-1]} if sm else None,
                "warnings": warnings}

