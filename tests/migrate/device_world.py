"""Run the device logic of a training script on the CPU against a stand-in torch, as it would run on a CUDA
machine (torch.cuda available) or on an Ascend machine (torch.npu available after `import torch_npu`, no CUDA).

Every torch call the script makes is recorded with its arguments; tensors are stand-ins that record
`.to()` / `.pin_memory()`. What the script decides (its branches, the values it computes) is what the tests
compare: the migrated script on the NPU must take the branches the original took on CUDA.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import os
import types
from typing import Any, Callable


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def fn(self, name: str, result: Any = None) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, tuple(sorted(kwargs.items()))))
            return result(*args, **kwargs) if callable(result) else result
        return call


class _Tensor:
    def __init__(self, rec: _Recorder) -> None:
        self.rec = rec

    def to(self, device: Any, **kwargs: Any) -> "_Tensor":
        self.rec.calls.append(("Tensor.to", (device,), tuple(sorted(kwargs.items()))))
        return self

    def pin_memory(self) -> "_Tensor":
        self.rec.calls.append(("Tensor.pin_memory", (), ()))
        return self

    def cuda(self) -> "_Tensor":
        self.rec.calls.append(("Tensor.cuda", (), ()))
        return self

    def npu(self) -> "_Tensor":  # what torch_npu adds
        self.rec.calls.append(("Tensor.npu", (), ()))
        return self


class _Props:
    total_memory = 64 << 30
    name = "stand-in"

    def __getattr__(self, item: str) -> Any:  # fields the device does not fill
        raise AttributeError(f"device properties have no field {item!r} on this device")


def _namespace(rec: _Recorder, prefix: str, available: bool) -> types.SimpleNamespace:
    """torch.cuda or torch.npu: the calls the fixtures make, each recorded."""
    props = _Props()
    ns = types.SimpleNamespace()
    for name in ("set_device", "synchronize", "reset_peak_memory_stats", "manual_seed", "empty_cache"):
        setattr(ns, name, rec.fn(f"{prefix}.{name}"))
    ns.is_available = rec.fn(f"{prefix}.is_available", available)
    ns.is_bf16_supported = rec.fn(f"{prefix}.is_bf16_supported", available)
    ns.device_count = rec.fn(f"{prefix}.device_count", 1 if available else 0)
    ns.max_memory_allocated = rec.fn(f"{prefix}.max_memory_allocated", 0)
    ns.get_device_properties = rec.fn(f"{prefix}.get_device_properties", props)
    ns.amp = types.SimpleNamespace(GradScaler=rec.fn(f"{prefix}.amp.GradScaler"))
    return ns


def _torch(rec: _Recorder, world: str) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.float32, torch.bfloat16, torch.float16 = "float32", "bfloat16", "float16"
    torch.cuda = _namespace(rec, "cuda", world == "cuda")
    if world == "npu":
        torch.npu = None  # set by `import torch_npu`, as the real one does
    torch.zeros = lambda *a, **k: _Tensor(rec)
    torch.nn = types.SimpleNamespace(Linear=lambda *a, **k: _Tensor(rec))
    torch.device = lambda s: s
    torch.amp = types.SimpleNamespace(autocast=rec.fn("amp.autocast", contextlib.nullcontext()))
    torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace()),
                                           cudnn=types.SimpleNamespace())

    def adamw(params: Any, lr: float = 1e-3, fused: bool | None = None) -> tuple:
        rec.calls.append(("optim.AdamW", (), (("fused", fused),)))
        return ("AdamW", fused)

    torch.optim = types.SimpleNamespace(AdamW=adamw)
    dist = types.ModuleType("torch.distributed")
    dist.init_process_group = rec.fn("distributed.init_process_group")
    torch.distributed = dist
    return torch


def run(sources: dict[str, str], entry: str, world: str, env: dict[str, str] | None = None) -> tuple[dict, list]:
    """Execute `sources[entry]` (other entries are importable sibling modules) in `world` ("cuda" or "npu").
    Returns (the entry module's globals that are plain values, the recorded calls)."""
    rec = _Recorder()
    torch = _torch(rec, world)
    modules: dict[str, types.ModuleType] = {"torch": torch, "torch.distributed": torch.distributed}
    real_import = builtins.__import__

    def load(name: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": fake_import}
        modules[name] = mod
        exec(compile(sources[name], f"{name}.py", "exec"), mod.__dict__)
        return mod

    def fake_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name == "torch_npu":
            if world != "npu":
                raise ImportError("torch_npu needs an Ascend machine")
            torch.npu = _namespace(rec, "npu", True)
            return types.ModuleType("torch_npu")
        if name in modules:
            return modules[name] if fromlist or "." not in name else modules[name.split(".")[0]]
        if name in sources:
            return load(name)
        return real_import(name, globals, locals, fromlist, level)

    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        mod = load(entry)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    plain = {k: v for k, v in vars(mod).items() if isinstance(v, (str, int, float, bool, tuple)) and not k.startswith("__")}
    return plain, rec.calls


def as_cuda(value: Any) -> Any:
    """What an NPU-world value would have been on CUDA: device and backend names mapped back."""
    if isinstance(value, str):
        return value.replace("npu", "cuda").replace("hccl", "nccl")
    if isinstance(value, tuple):
        return tuple(as_cuda(v) for v in value)
    return value


_ = inspect  # the AdamW stand-in's signature is read by the fixtures through inspect
