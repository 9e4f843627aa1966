"""Whether a collective runs on torch_npu's HCCL process group, per torch_npu release (data: mappings/hccl.yaml).

    hccl_support(release, op, dtype, reduce_op=None) -> HcclSupport(status, note, source, ...)
    map_backend(backend, release=None, keyword=True) -> BackendMapping   ("cuda:nccl,cpu:gloo" -> "npu:hccl,cpu:gloo")
    hccl_env(name) -> EnvEquivalent | None;  env_table();  hccl_releases();  resolve_release(release)

`op` is what a TorchDispatchMode records ('c10d.allreduce_', 'c10d::_allgather_base_', '_c10d_functional.all_reduce'
with or without '.default') or a ProcessGroup method name ('allreduce'). A release missing from the data is answered
for the nearest earlier one, and the note says so. Statuses: supported, emulated (built from other calls), raises
(torch_npu rejects it), absent (ProcessGroupHCCL lacks the method: c10d raises "Backend hccl does not support ...").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from npuport.coverage.database import version_key
from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked

_FILE = "hccl.yaml"
STATUSES = ("supported", "emulated", "absent", "raises")  # mildest first
_DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32",
                  "short": "int16", "char": "int8", "byte": "uint8", "cfloat": "complex64", "cdouble": "complex128"}


@dataclass(frozen=True)
class HcclSupport:
    """The answer for one (release, op, dtype, reduce op); truthy when the call runs (supported or emulated)."""

    status: str
    note: str
    source: str
    release: str  # the release of the data that answered
    method: str | None = None  # the ProcessGroupHCCL method the op reaches
    hccl_api: str | None = None

    def __bool__(self) -> bool:
        return self.status in ("supported", "emulated")


@dataclass(frozen=True)
class BackendMapping:
    backend: str  # as the CUDA code wrote it
    target: str  # what to write for the NPU
    transfer_to_npu: str  # what torch_npu.contrib.transfer_to_npu turns `backend` into at that release
    note: str
    source: str


@dataclass(frozen=True)
class EnvEquivalent:
    nccl: str | None
    hccl: str
    reader: str  # cann | torch_npu
    since: str | None
    meaning: str
    source: str


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    """hccl.yaml, schema-checked, plus the cross-references a schema cannot state."""
    doc: dict[str, Any] = load_checked(_FILE)
    releases = doc["releases"]

    def check_since(entries: Sequence[Mapping[str, Any]], entry: str) -> None:
        seen = [e["release"] for e in entries]
        for r in seen:
            if r not in releases:
                raise MappingError(_FILE, entry, "release", f"{r!r} is not under releases")
        if seen != sorted(seen, key=version_key) or len(set(seen)) != len(seen):
            raise MappingError(_FILE, entry, "release", "entries must go from the oldest release to the newest")

    for name, op in doc["ops"].items():
        check_since(op["since"], f"ops.{name}.since")
    for name, entries in doc["reduce_ops"].items():
        check_since(entries, f"reduce_ops.{name}")
    for part in ("mapped", "reductions", "casts"):
        check_since(doc["dtypes"][part], f"dtypes.{part}")
    check_since(doc["backend"]["transfer_to_npu"], "backend.transfer_to_npu")
    for name, route in doc["dispatch_ops"].items():
        for key in ("method", "method_before"):
            if key in route and route[key] not in doc["ops"]:
                raise MappingError(_FILE, f"dispatch_ops.{name}", key, f"{route[key]!r} is not under ops")
    for cast in doc["dtypes"]["casts"]:
        for method in cast["ops"]:
            if method not in doc["ops"]:
                raise MappingError(_FILE, "dtypes.casts", "ops", f"{method!r} is not under ops")
    return doc


def hccl_releases() -> tuple[str, ...]:
    """The torch_npu releases hccl.yaml describes, oldest first."""
    return tuple(sorted(_data()["releases"], key=version_key))


def resolve_release(release: str) -> tuple[str, str]:
    """(release in the data, note): the release itself, else the nearest earlier one with a note saying so."""
    text = str(release).strip().removeprefix("torch_npu-").removeprefix("torch_npu==")
    known = hccl_releases()
    if text in known:
        return text, ""
    earlier = [r for r in known if version_key(r) <= version_key(text)]
    if not earlier:
        raise NpuportError(f"no HCCL data for torch_npu {text} or any earlier release", "one of " + ", ".join(known), text)
    return earlier[-1], (f"torch_npu {text} is not in hccl.yaml; answered for the nearest earlier release {earlier[-1]} "
                         "(a .postN build can come from a newer Ascend/pytorch branch: check its COMPATIBILITY.md)")


def _pick(entries: Sequence[Mapping[str, Any]], release: str) -> Mapping[str, Any] | None:
    """The entry in force at `release`: the last whose release is not later."""
    found = None
    for entry in entries:
        if version_key(entry["release"]) <= version_key(release):
            found = entry
    return found


def _op_name(op: str) -> str:
    """'torch.ops.c10d.allreduce_.default' / 'c10d::allreduce_' -> 'c10d.allreduce_'; a bare name stays."""
    text = str(op).strip().removeprefix("torch.ops.").replace("::", ".")
    parts = text.split(".")
    if len(parts) == 3:  # namespace.name.overload: collective ops have one overload
        parts = parts[:2]
    return ".".join(parts)


def _route(op: str, release: str) -> tuple[str, list[str], list[str]]:
    """(method, notes, sources) for an op name or a method name at a release."""
    data = _data()
    name = _op_name(op)
    if name in data["ops"]:
        return name, [], []
    route = data["dispatch_ops"].get(name)
    if route is None:
        known = sorted(data["dispatch_ops"])
        raise NpuportError(f"unknown collective op {op!r}", "a c10d / _c10d_functional op name such as " + ", ".join(known[:4])
                           + ", or a ProcessGroup method such as allreduce", str(op))
    torch = data["releases"][release]["torch"]
    notes = [route.get("note", "")]
    if "torch_before" in route and version_key(torch) < version_key(route["torch_before"]):
        notes = [f"torch {torch} has no native functional collectives: this reaches {route['method_before']}"]
        return route["method_before"], notes, [route["source"]]
    return route["method"], notes, [route["source"]]


def _dtype(dtype: str) -> str:
    text = str(dtype).strip().removeprefix("torch.")
    return _DTYPE_ALIASES.get(text, text)


def _reduce_op(reduce_op: str | None) -> str:
    text = "SUM" if reduce_op is None else str(reduce_op).strip().removeprefix("ReduceOp.").removeprefix("RedOpType.").upper()
    if text not in _data()["reduce_ops"]:
        raise NpuportError(f"unknown ReduceOp {reduce_op!r}", "one of " + ", ".join(_data()["reduce_ops"]), str(reduce_op))
    return text


def hccl_support(release: str, op: str, dtype: str, reduce_op: str | None = None) -> HcclSupport:
    """Whether `op` on a `dtype` tensor (with `reduce_op`, SUM when None, for reductions) runs on torch_npu `release`."""
    data = _data()
    rel, rel_note = resolve_release(release)
    method, notes, sources = _route(op, rel)
    spec = data["ops"][method]
    entry = _pick(spec["since"], rel)
    if entry is None:
        return HcclSupport("absent", _join([rel_note, f"ProcessGroupHCCL has no {method} at {rel}"]), spec["since"][0]["source"],
                           rel, method, spec["hccl_api"])
    status = entry["status"]
    notes += [entry.get("note", ""), f"via {entry['via']}" if "via" in entry else ""]
    sources.append(entry["source"])
    if status in ("supported", "emulated"):
        status = _check_dtype(method, spec, _dtype(dtype), reduce_op, rel, status, notes, sources)
    return HcclSupport(status, _join([rel_note, *notes]), _join(sources, " | "), rel, method, spec["hccl_api"])


def _check_dtype(method: str, spec: Mapping[str, Any], dtype: str, reduce_op: str | None, rel: str, status: str,
                 notes: list[str], sources: list[str]) -> str:
    """The worse of `status` and what the dtype tables and the ReduceOp say; appends their notes and sources."""
    data = _data()
    mapped = _pick(data["dtypes"]["mapped"], rel)
    assert mapped is not None  # the schema requires an entry at the oldest release
    if dtype not in mapped["dtypes"]:
        notes.append(f"{dtype} has no HCCL type: \"Unsupported data type for HCCL process group\""
                     + ("; torch.distributed views complex tensors as real before the backend sees them" if dtype.startswith("complex") else ""))
        sources.append(mapped["source"])
        return "raises"
    if not spec["reduction"]:
        return status
    cast = _pick(data["dtypes"]["casts"], rel)
    effective = dtype
    if cast is not None and method in cast["ops"] and dtype in cast["dtypes"]:
        effective = cast["to"]
        notes.append(f"{dtype} is cast to {effective} around the call")
        sources.append(cast["source"])
    reductions = _pick(data["dtypes"]["reductions"], rel)
    assert reductions is not None
    if effective not in reductions["dtypes"]:
        notes.append(f"HCCL {method}: Unsupported data type {dtype} (reductions take " + ", ".join(reductions["dtypes"]) + ")"
                     + (f"; {reductions['note']}" if "note" in reductions else ""))
        sources.append(reductions["source"])
        return "raises"
    name = _reduce_op(reduce_op)
    red = _pick(data["reduce_ops"][name], rel)
    assert red is not None
    sources.append(red["source"])
    notes += [f"ReduceOp.{name}: {red['note']}" if "note" in red else "", f"ReduceOp.{name} via {red['via']}" if "via" in red else ""]
    worst = max(status, red["status"], key=STATUSES.index)
    if effective in red.get("unsupported_dtypes", ()):
        notes.append(f"ReduceOp.{name} does not take {effective}" + (f": {red['unsupported_note']}" if "unsupported_note" in red else ""))
        worst = "raises"
    return str(worst)


def _join(parts: Sequence[str], sep: str = "; ") -> str:
    out: list[str] = []
    for p in parts:
        if p and p not in out:
            out.append(" ".join(p.split()))
    return sep.join(out)


def map_backend(backend: str, release: str | None = None, *, keyword: bool = True) -> BackendMapping:
    """The NPU spelling of a CUDA backend string, and what transfer_to_npu makes of it at `release` (newest if None)
    when it is passed as backend=... (keyword) or positionally."""
    data = _data()["backend"]
    rel, rel_note = resolve_release(release) if release is not None else (hccl_releases()[-1], "")
    target = backend
    for old, new in data["replacements"].items():
        target = target.replace(old, new)
    rule = _pick(data["transfer_to_npu"], rel)
    assert rule is not None
    converted = backend
    for old, new in rule["keyword" if keyword else "positional"].items():
        converted = converted.replace(old, new)
    notes = [rel_note]
    if "nccl" in backend:
        notes.append("without torch_npu.contrib.transfer_to_npu, PyTorch raises \"Distributed package doesn't have NCCL built in\"")
    if converted != target:
        notes.append(f"transfer_to_npu at {rel} gives {converted!r}, not {target!r}" + (f": {rule['note']}" if "note" in rule else ""))
    return BackendMapping(backend, target, converted, _join(notes), _join([data["replacements_source"], rule["source"]], " | "))


@functools.lru_cache(maxsize=1)
def env_table() -> tuple[EnvEquivalent, ...]:
    return tuple(EnvEquivalent(e["nccl"], e["hccl"], e["reader"], e.get("since"), e["meaning"], e["source"]) for e in _data()["env"])


def hccl_env(name: str) -> EnvEquivalent | None:
    """The row for an NCCL / TORCH_NCCL variable (or an HCCL one); None when hccl.yaml has no counterpart."""
    for row in env_table():
        if name in (row.nccl, row.hccl):
            return row
    return None


def init_options() -> tuple[tuple[str, str, str], ...]:
    """(NCCL option, HCCL option, source) for init_process_group(pg_options=...)."""
    return tuple((o["nccl"], o["hccl"], o["source"]) for o in _data()["init_options"])
