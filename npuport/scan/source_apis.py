"""mappings/source_apis.yaml as typed data: diagnostic ids (NPS...) and the CUDA -> NPU API tables."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Mapping

from npuport.errors import MappingError
from npuport.mappings import check_fields, load_yaml

FILE = "source_apis.yaml"
_ID = re.compile(r"^NPS\d{3}$")
_DIAG_FIELDS = {"title": str, "level": str, "auto": bool, "migrate": bool, "npu": str, "fix": str, "source": str}


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
    data = load_yaml(FILE)
    check_fields(data, file=FILE, entry="-", required={"schema": str, "diagnostics": dict, "npu_names": list, "groups": dict,
                 "renamed": dict, "no_equivalent": dict, "torch_apis": dict, "imports": dict, "env_vars": dict},
                 optional={"npu_device_properties": dict})
    if data["schema"] != "npuport.source_apis/1":
        raise MappingError(FILE, "-", "schema", "expected npuport.source_apis/1")
    diags: dict[str, DiagnosticInfo] = {}
    for did, raw in data["diagnostics"].items():
        if not _ID.match(str(did)):
            raise MappingError(FILE, str(did), "id", "expected NPS followed by three digits")
        check_fields(raw, file=FILE, entry=did, required=_DIAG_FIELDS)
        if raw["level"] not in ("info", "warning", "error"):
            raise MappingError(FILE, did, "level", "expected info, warning or error")
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
        npu_device_properties=frozenset(_string_list(data.get("npu_device_properties", {}), "npu_device_properties")),
    )


def _string_list(raw: object, entry: str) -> list[str]:
    """A `{fields: [...], source: ...}` block: the list, checked; the source is required."""
    if not raw:
        return []
    if not isinstance(raw, dict) or not isinstance(raw.get("fields"), list) or not isinstance(raw.get("source"), str):
        raise MappingError(FILE, entry, "fields", "expected {fields: [names], source: text}")
    return [str(x) for x in raw["fields"]]
