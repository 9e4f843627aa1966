"""Devices parity runs on: cpu, cpu64 (the float64 golden), cuda[:i], npu[:i] and a fault-injection CPU.

The device specifics parity needs (seeding, numerics settings, synchronize, versions) live here; torch_npu itself
is imported only through npuport.devices.backend, on the first use of an npu device, because importing it changes
how `import torch` behaves (backend autoload). Tests drive the npu code path with a CPU-backed stand-in
(npuport.devices.standin; `NPUPORT_NPU_STANDIN=1` when torch_npu is absent); the stand-in says so in its name and
versions, so a report never claims a real NPU ran.
"""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from npuport.devices import nvidia
from npuport.devices.backend import STANDIN_ENV, cann_version, import_torch_npu, npu_driver, torch_npu_installed
from npuport.devices.standin import present_backend
from npuport.errors import NpuportError

SPEC_HELP = "cpu, cpu64, cuda[:i], npu[:i], or cpu-fault:OP@MODULE[*SCALE]"


@dataclass(frozen=True)
class NumericsPolicy:
    """What a parity run pins so both sides compute the same thing: no TF32/HF32, deterministic kernels."""

    deterministic: bool = True
    allow_tf32: bool = False  # CUDA TF32 and NPU HF32 alike: "unless asked"
    npu_compatible_impl: bool = True
    npu_precision_mode: str = "must_keep_origin_dtype"

    def to_json(self) -> dict[str, Any]:
        return {"deterministic": self.deterministic, "allow_tf32": self.allow_tf32,
                "npu_compatible_impl": self.npu_compatible_impl, "npu_precision_mode": self.npu_precision_mode}


@dataclass(frozen=True)
class FaultSpec:
    """Perturb every output of `op` whose innermost module is `module`: out * (1 + scale * (+1, -1, +1, ...))."""

    op: str
    module: str
    scale: float = 0.05


@dataclass
class Device:
    """One side of a comparison. Subclasses add the backend specifics; the CPU base class has none."""

    spec: str
    kind: str = "cpu"
    torch_device: str = "cpu"
    float64: bool = False  # cpu64: run the model in float64 (the golden)
    fault: FaultSpec | None = None
    standin: bool = False
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.standin:
            return f"{self.spec} (CPU stand-in, not a real NPU)"
        return self.spec

    def check_present(self) -> None:
        """Raise a one-line NpuportError (exit 2) when the device cannot run here."""

    def synchronize(self) -> None:
        """Wait for queued kernels (timing, and before reading results)."""

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def versions(self) -> dict[str, Any]:
        return {"torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor() or platform.machine()}

    def set_numerics_policy(self, policy: NumericsPolicy) -> dict[str, Any]:
        """Apply `policy`; return what is in force afterwards (read back, not assumed) for the manifest."""
        if policy.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)  # warn, so nondeterministic ops are reported
        self.settings = {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                         "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
                         "float32_matmul_precision": torch.get_float32_matmul_precision(),
                         "num_threads": torch.get_num_threads()}
        return self.settings

    def memory_peak(self) -> int | None:
        return None

    def reset_memory_peak(self) -> None:
        """Start a new peak for `memory_peak` (benchmarks measure each variant's own)."""


class CudaDevice(Device):
    def check_present(self) -> None:
        if not torch.cuda.is_available():
            raise NpuportError(f"device {self.spec!r} is not present", "a machine with a CUDA GPU and a CUDA build of torch",
                               f"torch {torch.__version__}, torch.cuda.is_available() is False")
        index = torch.device(self.torch_device).index or 0
        if index >= torch.cuda.device_count():
            raise NpuportError(f"device {self.spec!r} is not present", f"an index below {torch.cuda.device_count()}", self.spec)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)

    def versions(self) -> dict[str, Any]:
        out = super().versions()
        props = torch.cuda.get_device_properties(self.torch_device)
        out.update({"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "gpu": props.name,  # type: ignore[no-untyped-call]  # torch leaves cudnn.version() unannotated
                    "capability": f"{props.major}.{props.minor}", "driver": nvidia.driver_version()})
        return out

    def set_numerics_policy(self, policy: NumericsPolicy) -> dict[str, Any]:
        if policy.deterministic:
            # cuBLAS needs this before its first handle for deterministic GEMMs; harmless if already set.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = policy.allow_tf32
        torch.backends.cudnn.allow_tf32 = policy.allow_tf32
        torch.set_float32_matmul_precision("high" if policy.allow_tf32 else "highest")
        out = super().set_numerics_policy(policy)
        out.update({"cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                    "cudnn_deterministic": torch.backends.cudnn.deterministic,
                    "cudnn_benchmark": torch.backends.cudnn.benchmark,
                    "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG")})
        self.settings = out
        return out

    def memory_peak(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.torch_device))

    def reset_memory_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.torch_device)


class NpuDevice(Device):
    """Ascend NPU through torch_npu (imported on first use), or the CPU stand-in backend in tests."""

    backend: Any = None

    def _npu(self) -> Any:
        if self.backend is None:
            self.backend = import_torch_npu(self.spec)
        return self.backend

    def check_present(self) -> None:
        npu = self._npu()
        if not self.standin and not npu.npu.is_available():
            raise NpuportError(f"device {self.spec!r} is not present", "an Ascend NPU visible to torch_npu", "torch.npu.is_available() is False")

    def synchronize(self) -> None:
        self._npu().npu.synchronize()

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        self._npu().npu.manual_seed_all(seed)

    def versions(self) -> dict[str, Any]:
        out = super().versions()
        npu = self._npu()
        out.update({"torch_npu": getattr(npu, "__version__", None), "cann": cann_version(npu),
                    "soc": _call(npu.npu, "get_device_name"), "driver": npu_driver(), "standin": self.standin})
        return out

    def set_numerics_policy(self, policy: NumericsPolicy) -> dict[str, Any]:
        npu = self._npu().npu
        npu.matmul.allow_hf32 = policy.allow_tf32
        npu.conv.allow_hf32 = policy.allow_tf32  # defaults to True on NPU, like cuDNN's TF32 default
        npu.set_option({"ACL_PRECISION_MODE": policy.npu_precision_mode})
        npu.config.allow_internal_format = False  # NZ / 5HD paths can change numbers
        if policy.npu_compatible_impl and hasattr(npu, "use_compatible_impl"):
            npu.use_compatible_impl(True)  # exact-erf gelu, PyTorch-aligned matmul / pooling paths
        out = super().set_numerics_policy(policy)
        out.update({"npu_matmul_allow_hf32": npu.matmul.allow_hf32, "npu_conv_allow_hf32": npu.conv.allow_hf32,
                    "ACL_PRECISION_MODE": policy.npu_precision_mode,
                    "allow_internal_format": npu.config.allow_internal_format,
                    "compatible_impl": policy.npu_compatible_impl,
                    "TORCH_NPU_USE_COMPATIBLE_IMPL": os.environ.get("TORCH_NPU_USE_COMPATIBLE_IMPL"),
                    "HCCL_DETERMINISTIC": os.environ.get("HCCL_DETERMINISTIC")})
        self.settings = out
        return out

    def memory_peak(self) -> int | None:
        peak: int | None = _call(self._npu().npu, "max_memory_allocated")  # torch_npu is untyped
        return peak

    def reset_memory_peak(self) -> None:
        _call(self._npu().npu, "reset_peak_memory_stats")


@contextlib.contextmanager
def preserved_numerics() -> Iterator[None]:
    """Restore torch's global numerics flags afterwards, so a parity run inside a bigger program (or a test
    session) does not leave deterministic mode or TF32 settings behind."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != saved[:2]:
            # only when changed: the call imports torch._inductor (1.2 s on a 2-core CPU), which comparing two
            # records never needs
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.set_float32_matmul_precision(saved[2])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[3], saved[4]
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[5], saved[6]


def parse_device(spec: str) -> Device:
    """A device from its command-line spelling. Does not check that it is present (check_present does)."""
    text = spec.strip()
    if text == "cpu":
        return Device(spec=text)
    if text == "cpu64":
        return Device(spec=text, float64=True)
    if text.startswith("cpu-fault:"):
        return Device(spec=text, fault=_parse_fault(text))
    base, _, index = text.partition(":")
    if index and not index.isdigit():
        raise NpuportError(f"bad device {spec!r}", SPEC_HELP, spec)
    if base == "cuda":
        return CudaDevice(spec=text, kind="cuda", torch_device=f"cuda:{index or 0}")
    if base == "npu":
        if torch_npu_installed() or os.environ.get(STANDIN_ENV) != "1":
            return NpuDevice(spec=text, kind="npu", torch_device=f"npu:{index or 0}")
        dev = NpuDevice(spec=text, kind="npu", torch_device="cpu", standin=True)
        dev.backend = present_backend()
        return dev
    raise NpuportError(f"unknown device {spec!r}", SPEC_HELP, spec)


def _parse_fault(text: str) -> FaultSpec:
    body = text.removeprefix("cpu-fault:")
    body, star, scale = body.partition("*")
    op, at, module = body.partition("@")
    if not at or not op.startswith("aten::") or not module:
        raise NpuportError(f"bad fault device {text!r}", "cpu-fault:aten::OP.overload@module.path[*SCALE]", text)
    try:
        value = float(scale) if star else 0.05
    except ValueError:
        raise NpuportError(f"bad fault scale in {text!r}", "a number after '*'", scale) from None
    return FaultSpec(op=op, module=module, scale=value)


def _call(obj: Any, name: str) -> Any:
    fn = getattr(obj, name, None)
    try:
        return fn() if callable(fn) else None
    except Exception:
        return None


