"""Kernel-path check: which kernel an op really ran, against mappings/kernel_expectations.yaml (schema:
schemas/kernel_expectations.schema.json).

`check()` is a pure function of the recorded names (tested on names alone); `record_names()` runs a call under
torch.profiler and returns the device kernel names and the aten ops the CPU side dispatched.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from npuport.devices.profiler_chatter import without_profiler_chatter
from npuport.errors import MappingError
from npuport.mappings import load_checked

_FILE = "kernel_expectations.yaml"


@dataclass(frozen=True)
class KernelPath:
    name: str
    verdict: str
    patterns: tuple[re.Pattern[str], ...]

    def first_match(self, names: Sequence[str]) -> str | None:
        for n in names:
            if any(p.search(n) for p in self.patterns):
                return n
        return None


@dataclass(frozen=True)
class Expectation:
    id: str
    title: str
    device: str
    ops: frozenset[str]
    dtypes: frozenset[str] | None
    expect: str
    paths: tuple[KernelPath, ...]
    source: str

    def applies(self, op: str, dtype: str, device_kind: str) -> bool:
        return device_kind == self.device and op in self.ops and (self.dtypes is None or dtype in self.dtypes)


@dataclass(frozen=True)
class KernelCheck:
    """Truthy when the expected path was taken (or nothing is expected for this op on this device)."""

    verdict: str  # ok | warn | fail | unknown | none (no expectation) | unavailable (no names recorded)
    expectation: str | None = None
    path: str | None = None
    kernel: str | None = None  # the name that decided the path
    kernels: tuple[str, ...] = ()  # device kernels seen, costliest first
    message: str = ""

    def __bool__(self) -> bool:
        return self.verdict in ("ok", "none", "unavailable")

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "expectation": self.expectation, "path": self.path, "kernel": self.kernel,
                "kernels": list(self.kernels), "message": self.message}


@dataclass(frozen=True)
class SingleOpPattern:
    """A pattern id that stands for one aten op, and how that op's arguments map onto a kernel reference."""

    id: str
    op: str
    arguments: dict[str, str]  # op schema argument -> reference keyword
    defaults_only: dict[str, Any]  # op arguments that must have this value for the reference to stand in
    dropped: frozenset[str]  # op arguments the reference does not take


@dataclass(frozen=True)
class Expectations:
    items: tuple[Expectation, ...]
    single_op_patterns: dict[str, SingleOpPattern] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def load_expectations() -> Expectations:
    data = load_checked(_FILE)  # fields, types, devices and verdicts: the schema
    items: list[Expectation] = []
    seen: set[str] = set()
    for raw in data.get("expectations", []):
        eid = raw["id"]
        if eid in seen:
            raise MappingError(_FILE, eid, "id", "duplicate id")
        seen.add(eid)
        paths = []
        for p in raw["paths"]:
            try:
                pats = tuple(re.compile(m, re.IGNORECASE) for m in p["match"])
            except re.error as exc:
                raise MappingError(_FILE, eid, "match", f"bad regular expression: {exc}") from None
            paths.append(KernelPath(p["name"], p["verdict"], pats))
        items.append(Expectation(eid, raw["title"], raw["device"], frozenset(raw["ops"]),
                                 frozenset(raw["dtypes"]) if raw.get("dtypes") else None, raw["expect"], tuple(paths), raw["source"]))
    singles: dict[str, SingleOpPattern] = {}
    for pid, raw in (data.get("single_op_patterns") or {}).items():
        singles[pid] = SingleOpPattern(pid, raw["op"], dict(raw["arguments"]), dict(raw.get("defaults_only") or {}),
                                       frozenset(raw.get("dropped") or ()))
    return Expectations(tuple(items), singles)


def check(op: str, dtype: str, device_kind: str, kernels: Sequence[str], aten_ops: Sequence[str] = (),
          expectations: Expectations | None = None, label: str | None = None) -> KernelCheck:
    """The path `op` took, judged by the first expectation that applies to it on this device."""
    exps = expectations or load_expectations()
    exp = next((e for e in exps.items if e.applies(op, dtype, device_kind)), None)
    if exp is None:
        return KernelCheck("none", kernels=tuple(kernels))
    names = list(kernels) + list(aten_ops)
    if not names:
        return KernelCheck("unavailable", exp.id, kernels=(), message="the profiler recorded no kernel names")
    what = label or op
    for path in exp.paths:
        hit = path.first_match(kernels) or path.first_match(aten_ops)
        if hit is None:
            continue
        shown = hit
        if hit not in kernels and kernels:  # decided by the dispatched aten op: show the kernel that ran too
            shown = f"{hit} -> {kernels[0]}"
        if path.verdict == "ok":
            return KernelCheck("ok", exp.id, path.name, shown, tuple(kernels), f"{what} {dtype}: {path.name} ({shown})")
        return KernelCheck(path.verdict, exp.id, path.name, shown, tuple(kernels),
                           f"expected fused path not taken: {what} {dtype}: expected {exp.expect}, ran {path.name} ({shown})")
    seen = ", ".join(list(kernels)[:3]) or ", ".join(list(aten_ops)[:3])
    return KernelCheck("unknown", exp.id, None, None, tuple(kernels),
                       f"expected fused path not taken: {what} {dtype}: expected {exp.expect}, saw no known path ({seen})")


def device_us(ev: Any) -> float:
    """Microseconds a device-side profiler event (a kernel, a memcpy) took."""
    tr = getattr(ev, "time_range", None)
    if tr is not None:
        return float(tr.elapsed_us())
    return float(getattr(ev, "device_time_total", 0.0) or 0.0)


def record_names(device_kind: str, fn: Callable[[], Any], iters: int = 2,
                 sync: Callable[[], None] | None = None) -> tuple[list[str], list[str]]:
    """(device kernel names by total device time, aten ops dispatched on the CPU side) of `fn()` run `iters`
    times under torch.profiler. On cpu there are no device kernels: the aten ops are the names."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 - optional dependency, imported where it is used

    activities = [ProfilerActivity.CPU]
    if device_kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    elif device_kind == "npu" and hasattr(ProfilerActivity, "PrivateUse1"):
        activities.append(ProfilerActivity.PrivateUse1)
    fn()  # first call outside the profile: lazy init, autotuning, handle creation
    if sync:
        sync()
    with without_profiler_chatter(), profile(activities=activities) as prof:
        for _ in range(iters):
            fn()
        if sync:
            sync()
    device_time: dict[str, float] = {}
    aten: list[str] = []
    cpu_type = getattr(torch.autograd, "DeviceType", None)
    for ev in prof.events():
        dtype = getattr(ev, "device_type", None)
        is_cpu = cpu_type is None or dtype is None or dtype == cpu_type.CPU
        if is_cpu:
            if ev.name not in aten and "::" in ev.name:
                aten.append(ev.name)
        else:
            device_time[ev.name] = device_time.get(ev.name, 0.0) + device_us(ev)
    kernels = sorted(device_time, key=lambda k: -device_time[k])
    return kernels, aten
