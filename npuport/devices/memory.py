"""Free memory, read one way: what an accelerator's driver reports (plus, where asked, what the caching
allocator holds unused), else what the host has available."""

from __future__ import annotations

from typing import Any

import torch

HOST_DEFAULT = 8 << 30  # when even the host cannot say


def device_free_bytes(device: str | torch.device, include_cached: bool = False) -> int | None:
    """Bytes free on a cuda / npu device as its driver reports them; with include_cached, plus what the caching
    allocator holds unused (a new allocation can use both). None for the CPU and for backends that do not say."""
    dev = torch.device(device)
    backend = getattr(torch, dev.type, None) if dev.type in ("cuda", "npu") else None
    if backend is None or not hasattr(backend, "mem_get_info"):
        return None
    try:
        free, _ = backend.mem_get_info(dev)
        cached = _cached_unused(backend, dev) if include_cached else 0
    except Exception:  # a stand-in backend or an old runtime
        return None
    return int(free) + max(cached, 0)


def _cached_unused(backend: Any, dev: torch.device) -> int:
    """Reserved minus allocated bytes of the caching allocator, from one read of its nested statistics where the
    backend has them: memory_reserved() and memory_allocated() each flatten every statistic into a new dict, about
    a few hundred microseconds of host time together on an H200 host, paid by every stats-only capture session."""
    nested = getattr(backend, "memory_stats_as_nested_dict", None)
    stats = nested(dev) if nested is not None else None
    if stats:
        return int(stats["reserved_bytes"]["all"]["current"]) - int(stats["allocated_bytes"]["all"]["current"])
    return int(backend.memory_reserved(dev)) - int(backend.memory_allocated(dev))


def host_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_memory(device: str) -> int:
    """Free bytes on `device`: the driver's answer for an accelerator, the host's for the CPU (8 GiB if unknown)."""
    got = device_free_bytes(device)
    if got is None:
        got = host_available_bytes()
    return HOST_DEFAULT if got is None else got
