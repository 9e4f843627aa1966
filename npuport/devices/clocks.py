"""Clock state of the device a benchmark runs on, read (never set) before, during and after the run: GPU clocks,
load, temperature and power from nvidia-smi, npu-smi's report, or the CPU's cpufreq data."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from npuport.devices import nvidia
from npuport.devices.runtime import index_of, kind_of

_NV_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.memory", "utilization.gpu",
              "temperature.gpu", "power.draw", "power.limit", "pstate")

_nv_valid: list[tuple[str, ...]] = []  # the fields this nvidia-smi accepts, found on first use

_NV_REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")

# nvidia-smi's event-reason bits that mean the clock is held down by power, heat or a hardware slowdown.
_NV_SLOWDOWN = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}

def _num(text: str) -> float | str:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return text

def nvidia_clocks(index: int) -> dict[str, Any] | None:
    """Read-only nvidia-smi query of clocks, load, temperature and power (fields this driver lacks are left out)."""
    if not _nv_valid:
        if not nvidia.nvidia_smi_present():
            return None
        ok = _NV_FIELDS if nvidia.query(_NV_FIELDS, index) else tuple(f for f in _NV_FIELDS if nvidia.query((f,), index))
        _nv_valid.append(ok)
    fields = _nv_valid[0]
    parts = nvidia.query(fields, index) if fields else None
    if parts is None:
        return None
    values: dict[str, Any] = dict(zip(fields, (_num(v) for v in parts)))
    for name in _NV_REASON_FIELDS:
        got = nvidia.query((name,), index, units=True)
        if got:
            values["event_reasons"] = got[0].strip()
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
        raw = nvidia.run_tool(["npu-smi", "info"])
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
        if kind_of(self.device) == "cuda" and nvidia.nvidia_smi_present():
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
