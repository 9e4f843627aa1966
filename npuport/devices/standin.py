"""The NPU stand-ins, for machines without one: `present_backend()` is a CPU-backed torch_npu that parity tests
drive as if an NPU ran (it says "standin" in its name and versions, so no report claims a real NPU), and
`absent_npu_module()` is the torch.npu an audit of already-migrated code sees: no device, every query answering
like a machine without an NPU."""

from __future__ import annotations

import types
from typing import Any


def present_backend() -> Any:
    """A CPU-backed object with the torch_npu attributes npuport touches; records what was set on it."""
    ns = types.SimpleNamespace
    calls: list[Any] = []
    npu = ns(matmul=ns(allow_hf32=False), conv=ns(allow_hf32=True), config=ns(allow_internal_format=False),
             is_available=lambda: True, synchronize=lambda: None,
             manual_seed_all=lambda s: calls.append(("manual_seed_all", s)),
             set_option=lambda opts: calls.append(("set_option", dict(opts))),
             use_compatible_impl=lambda flag: calls.append(("use_compatible_impl", flag)),
             get_device_name=lambda: "CPU stand-in", max_memory_allocated=lambda: None)
    return ns(__version__="standin", npu=npu, calls=calls)


def absent_npu_module() -> types.ModuleType:
    """torch.npu stand-in: no device, every query answers like a machine without an NPU."""
    mod = types.ModuleType("torch.npu", "npuport stand-in: no NPU present")
    mod.is_available = lambda: False  # type: ignore[attr-defined]
    mod.device_count = lambda: 0  # type: ignore[attr-defined]
    mod.current_device = lambda: 0  # type: ignore[attr-defined]
    for name in ("set_device", "synchronize", "manual_seed", "manual_seed_all", "empty_cache", "set_compile_mode"):
        setattr(mod, name, lambda *a, **k: None)
    mod.__npuport_fake__ = True  # type: ignore[attr-defined]
    return mod
