"""torch_npu's registrations, read from torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml (sync time only).

Rules follow torchnpugen/gen_backend_stubs.py (shipped in the 2.11+ wheels):
- `supported:` a string entry is always registered at PrivateUse1; a dict entry only when it has `impl_ns`,
  `op_api` or `device_check` (so `_coalesce`, which only says `sparse: op_api`, is sparse-only);
- `autograd:` entries are registered at AutogradPrivateUse1 (forward and backward in one kernel);
- `quant:` entries only at QuantizedPrivateUse1; `sparse: op_api` adds SparsePrivateUse1; `symint:` only names;
- `custom:` (and `custom_autograd:`) define npu:: operators with their schema.
Implementation paths: `impl_ns` lists acl_op (ACL single-op, JIT compiled), op_api (aclnn two-stage API) and dvm
(2.13+, lazy fusion); `op_api: true` without impl_ns is a core kernel with an aclnn branch; nothing is a core kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from npuport.coverage.names import schema_name

_PATH_ORDER = ("op_api", "acl_op", "dvm", "core", "composite_explicit")
YAML_PATH = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"


@dataclass(frozen=True)
class CustomOp:
    schema: str  # 'npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)'
    paths: tuple[str, ...]
    exposed: bool  # also reachable as torch_npu.<name>


@dataclass
class NpuRegistrations:
    native: dict[str, tuple[str, ...]] = field(default_factory=dict)
    autograd: set[str] = field(default_factory=set)
    quant: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sparse: dict[str, tuple[str, ...]] = field(default_factory=dict)
    custom: dict[str, CustomOp] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # supported entries that register nothing dense


def _ordered(paths: set[str]) -> tuple[str, ...]:
    return tuple(sorted(paths, key=lambda p: (_PATH_ORDER.index(p) if p in _PATH_ORDER else len(_PATH_ORDER), p)))


def entry_paths(entry: Any) -> tuple[str, ...]:
    """Implementation paths of one yaml entry (string entries and entries without impl_ns are core kernels)."""
    if not isinstance(entry, dict):
        return ("core",)
    impl = entry.get("impl_ns")
    paths = {p.strip() for p in str(impl).split(",") if p.strip()} if impl else set()
    if not paths:
        paths.add("core")
        if entry.get("op_api") is True:
            paths.add("op_api")
    if entry.get("dispatch") and not impl:
        paths = {"composite_explicit" if "CompositeExplicitAutograd" in entry["dispatch"] else "core"}
    return _ordered(paths)


def _name(entry: Any) -> str:
    return schema_name(entry["func"] if isinstance(entry, dict) else str(entry))


def parse_npu_yaml(text: bytes | str) -> NpuRegistrations:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader) or {}
    regs = NpuRegistrations()
    for entry in data.get("supported") or []:
        name = _name(entry)
        if isinstance(entry, dict) and not ({"impl_ns", "op_api", "device_check"} & set(entry)):
            regs.skipped[name] = "dict entry without impl_ns/op_api/device_check: not registered at PrivateUse1"
        else:
            regs.native[name] = entry_paths(entry)
        if isinstance(entry, dict) and entry.get("sparse"):
            regs.sparse[name] = _ordered({p.strip() for p in str(entry["sparse"]).split(",")})
    for entry in data.get("autograd") or []:
        name = _name(entry)
        regs.autograd.add(name)
        regs.native[name] = entry_paths(entry)
    for entry in data.get("quant") or []:
        regs.quant[_name(entry)] = entry_paths(entry)
    for entry in (data.get("custom") or []) + (data.get("custom_autograd") or []):
        func = str(entry["func"]).strip()
        regs.custom[schema_name(func)] = CustomOp(
            schema=" ".join(func.split()), paths=entry_paths(entry), exposed=bool(entry.get("exposed", False))
        )
    return regs
