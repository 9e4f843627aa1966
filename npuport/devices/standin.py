"""The NPU stand-ins, for machines without one: `present_backend()` is a CPU-backed torch_npu that parity tests
and `profile record --dev npu` drive as if an NPU ran (it says "standin" in its name and versions, so no report
claims a real NPU), and `absent_npu_module()` is the torch.npu an audit of already-migrated code sees: no device,
every query answering like a machine without an NPU.

The stand-in's `profiler` is torch_npu.profiler's API over torch.profiler on the CPU. Its trace handler writes what
the Ascend PyTorch profiler's text export holds for CPU activity: a `{worker}_{timestamp}_ascend_pt` folder whose
ASCEND_PROFILER_OUTPUT/trace_view.json is a bare JSON array, timestamps as µs strings, every torch op and
record_function range a "cpu_op" with its "Sequence number" (Ascend/pytorch@9e73e708,
torch_npu/profiler/analysis/prof_parse/_fwk_file_parser.py, prof_bean/_torch_op_bean.py). It has no device
tasks, so an import reads it as the CPU run it is. What the caller asked of the profiler is kept in `calls`."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable


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
    return ns(__version__="standin", npu=npu, calls=calls, profiler=_profiler(calls))


def _profiler(calls: list[Any]) -> Any:
    """torch_npu.profiler as far as npuport.profile.npu_profiler uses it (see the module doc)."""
    import torch.profiler  # noqa: PLC0415 - only a recording through the stand-in needs the profiler

    ns = types.SimpleNamespace

    def schedule(wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0) -> Any:
        return torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)

    def config(**kwargs: Any) -> Any:
        return ns(**kwargs)

    def handler(dir_name: str, worker_name: str | None = None, analyse_flag: bool = True,
                async_mode: bool = False) -> Callable[[Any], None]:
        def write(prof: Any) -> None:
            worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
            out = Path(dir_name) / f"{worker}_{time.time_ns() // 1_000_000}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
            out.mkdir(parents=True)
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(raw))
                events = json.loads(raw.read_text(encoding="utf-8"))
            (out / "trace_view.json").write_text(json.dumps(_as_ascend(events)), encoding="utf-8")
        return write

    def profile(*, activities: Any = None, schedule: Any = None, on_trace_ready: Any = None,
                record_shapes: bool = False, **kwargs: Any) -> Any:
        calls.append(("profiler.profile", {"activities": list(activities or ()), "record_shapes": record_shapes,
                                           **kwargs}))
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                      on_trace_ready=on_trace_ready, record_shapes=record_shapes)

    return ns(profile=profile, schedule=schedule, tensorboard_trace_handler=handler, _ExperimentalConfig=config,
              ProfilerActivity=ns(CPU="CPU", NPU="NPU"),
              ProfilerLevel=ns(Level0="Level0", Level1="Level1", Level2="Level2", Level_none="Level_none"),
              AiCMetrics=ns(AiCoreNone="AiCoreNone", PipeUtilization="PipeUtilization"),
              ExportType=ns(Text="text", Db="db"))


def _as_ascend(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """A Kineto Chrome trace's CPU side as torch_npu writes it: torch ops and record_function ranges (ProfilerStep#N
    and npuport's marks among them) as "cpu_op" X events with µs-string timestamps, process and thread names kept."""
    out: list[dict[str, Any]] = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            out.append({"ph": "M", "name": e["name"], "pid": e.get("pid"), "tid": e.get("tid"), "args": e.get("args", {})})
        elif e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            args = e.get("args") or {}
            kept = {k: args[k] for k in ("Sequence number", "Fwd thread id") if k in args}
            out.append({"ph": "X", "name": e.get("name"), "pid": e.get("pid"), "tid": e.get("tid"),
                        "ts": f"{float(e['ts']):.3f}", "dur": float(e.get("dur", 0.0)), "cat": "cpu_op", "args": kept})
    return out


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
