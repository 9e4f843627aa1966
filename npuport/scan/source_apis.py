"""mappings/source_apis.yaml as typed data: diagnostic ids (NPS...) and the CUDA -> NPU API tables (schema:
schemas/source_apis.schema.json)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

from npuport.errors import MappingError
from npuport.mappings import load_checked

FILE = "source_apis.yaml"


@dataclass(frozen=True)
class DiagnosticInfo:
    id: str
    title: str
    level: str
    auto: bool  # transfer_to_npu handles it at run time
    migrate: bool  # `npuport migrate` rewrites it
    npu: str
    fix: str
    source: str


@dataclass(frozen=True)
class SourceApis:
    diagnostics: Mapping[str, DiagnosticInfo]
    npu_names: frozenset[str]
    groups: Mapping[str, str]  # torch.cuda.<name> -> diagnostic id
    renamed: Mapping[str, str | None]
    no_equivalent: Mapping[str, str]
    torch_apis: Mapping[str, str]  # dotted prefix -> id
    imports: Mapping[str, str]  # module prefix -> id
    env_vars: Mapping[str, str]
    npu_device_properties: frozenset[str] = frozenset()  # fields torch.npu.get_device_properties fills


def _check_id(entry: str, value: str, known: Mapping[str, DiagnosticInfo], field: str) -> None:
    if value not in known:
        raise MappingError(FILE, entry, field, f"unknown diagnostic id {value!r}")


@functools.lru_cache(maxsize=1)
def load_source_apis() -> SourceApis:
    data = load_checked(FILE)  # fields, types, id pattern and levels: schemas/source_apis.schema.json
    diags: dict[str, DiagnosticInfo] = {}
    for did, raw in data["diagnostics"].items():
        diags[did] = DiagnosticInfo(id=did, **raw)
    groups: dict[str, str] = {}
    for did, names in data["groups"].items():
        _check_id(f"groups.{did}", did, diags, "id")
        for n in names:
            groups[n] = did
    for section in ("torch_apis", "imports"):
        for key, did in data[section].items():
            _check_id(f"{section}.{key}", did, diags, "id")
    return SourceApis(
        diagnostics=diags, npu_names=frozenset(data["npu_names"]), groups=groups, renamed=dict(data["renamed"]),
        no_equivalent=dict(data["no_equivalent"]), torch_apis=dict(data["torch_apis"]), imports=dict(data["imports"]),
        env_vars=dict(data["env_vars"]),
        npu_device_properties=frozenset((data.get("npu_device_properties") or {}).get("fields", [])),
    )
