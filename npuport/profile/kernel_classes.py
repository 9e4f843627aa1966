"""Device kernels by the kind of work they do (mappings/kernel_classes.yaml): a measured step's kernels summed per
class from their names, set beside the classes of the kernels the audit estimated for the step.

Why: a compiled step's generated kernels and a replayed graph's kernels carry no aten op, so the per-op join has
nothing to compare them by; their names still say what they are (a cuBLAS GEMM, a cuDNN attention, an Inductor
kernel, a copy), and so do the NPU's (MatMulV2, FlashAttentionScore, TransData). Kernel names differ between
vendors; these classes do not, so they also set a CUDA run beside an NPU run.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from npuport.errors import MappingError
from npuport.mappings import load_checked

_FILE = "kernel_classes.yaml"
OTHER = "other"


@dataclass(frozen=True)
class _Entry:
    cls: str
    devices: frozenset[str]
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class KernelClasses:
    order: tuple[str, ...]
    entries: tuple[_Entry, ...]
    estimate: Mapping[str, str]
    prefix: Mapping[str, re.Pattern[str]]  # device -> what is taken off a name first (an Ascend kernel's calling API)


@functools.lru_cache(maxsize=1)
def kernel_classes() -> KernelClasses:
    data = load_checked(_FILE)  # schemas/kernel_classes.schema.json
    order = tuple(data["order"])
    if OTHER not in order:
        raise MappingError(_FILE, "order", "order", f"must list {OTHER!r}, the class of a name nothing matches")
    entries = []
    for k, raw in enumerate(data["classes"]):
        if raw["class"] not in order:
            raise MappingError(_FILE, f"classes[{k}]", "class", f"{raw['class']!r} is not in order")
        try:
            # one expression per entry: a name is searched once per entry, not once per expression
            pattern = re.compile("|".join(f"(?:{m})" for m in raw["match"]), re.IGNORECASE)
        except re.error as exc:
            raise MappingError(_FILE, f"classes[{k}]", "match", f"not a regular expression: {exc}") from None
        entries.append(_Entry(raw["class"], frozenset(raw["devices"]), pattern))
    for timing_cls, cls in data["estimate_classes"].items():
        if cls not in order:
            raise MappingError(_FILE, f"estimate_classes.{timing_cls}", "", f"{cls!r} is not in order")
    prefix = {}
    for device, expr in (data.get("name_prefix") or {}).items():
        try:
            prefix[device] = re.compile(expr)
        except re.error as exc:
            raise MappingError(_FILE, "name_prefix", device, f"not a regular expression: {exc}") from None
    return KernelClasses(order, tuple(entries), dict(data["estimate_classes"]), prefix)


@functools.lru_cache(maxsize=4096)
def classify(name: str, device: str = "cuda") -> str:
    """The class of a kernel recorded under `name` on `device` ("cuda" or "npu"); `other` when no entry matches.
    The device's name prefix (an Ascend kernel's calling API) is taken off first. A device npuport has no entries for
    is read with every entry."""
    kc = kernel_classes()
    entries = kc.entries
    strip = kc.prefix.get(device)
    if strip is not None:
        name = strip.sub("", name, count=1) or name
    known = any(device in e.devices for e in entries)
    for e in entries:
        if (not known or device in e.devices) and e.pattern.search(name):
            return e.cls
    return OTHER


def estimate_class(timing_cls: str) -> str:
    """The class the audit's kernels of timing class `timing_cls` (or `generated`) are counted under."""
    kc = kernel_classes()
    cls = kc.estimate.get(timing_cls, timing_cls)
    return cls if cls in kc.order else OTHER


_TOP = 3  # kernel names kept per class in the artifact (by time): what the class was made of


def summarize(kernels: Iterable[tuple[str, int, float]], device: str) -> dict[str, dict[str, Any]]:
    """(name, launches, device seconds) per kernel name -> {class: {"kernels", "device_s", "top": {name: s}}}, the
    classes in the file's order."""
    acc: dict[str, list[Any]] = {}
    for name, n, t in kernels:
        row = acc.setdefault(classify(name, device), [0, 0.0, []])
        row[0] += n
        row[1] += t
        row[2].append((t, name))
    order = kernel_classes().order
    return {c: {"kernels": acc[c][0], "device_s": acc[c][1],
                "top": {name: t for t, name in sorted(acc[c][2], key=lambda x: (-x[0], x[1]))[:_TOP]}}
            for c in order if c in acc}


def of_artifact(profile: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """A profile artifact's kernels per class: from its `kernel_names` by this process's mappings (so an artifact
    written before a pattern was fixed is classed by the fixed one), else the classes it was written with (artifacts
    of 2026-12-05 before `kernel_names`), else None (older ones)."""
    names = profile.get("kernel_names")
    if names:
        return summarize(((k, int(v["kernels"]), float(v["device_s"])) for k, v in names.items()),
                         str(profile.get("device") or "cuda"))
    return profile.get("kernel_classes") or None


def compare(estimated: Mapping[str, Mapping[str, float]] | None, measured: Mapping[str, Mapping[str, Any]] | None,
            steps: int) -> list[dict[str, Any]]:
    """Per class, the estimated step's kernels and device time against the measured ones per step (`measured` holds
    all `steps` steps of a profile); [] when the profile has no kernel classes (an artifact from before them)."""
    if not measured:
        return []
    per = 1.0 / max(steps, 1)
    est = estimated or {}
    rows = []
    for c in kernel_classes().order:
        e, m = est.get(c), measured.get(c)
        if e is None and m is None:
            continue
        ek, es = (int(e["kernels"]), float(e["device_s"])) if e else (0, 0.0)
        mk, ms = (round(int(m["kernels"]) * per), float(m["device_s"]) * per) if m else (0, 0.0)
        rows.append({"class": c, "estimated_kernels": ek, "estimated_s": es, "measured_kernels": mk,
                     "measured_s": ms, "ratio": ms / es if es else None,
                     "top": list((m or {}).get("top", {}))[:_TOP]})
    return rows
