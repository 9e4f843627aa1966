"""Load and validate mappings/coverage/torch_npu-<version>.yaml (format in docs/coverage.md, schema in
schemas/coverage.torch_npu.schema.json); cached per file."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked, mappings_dir

SCHEMA = "npuport.coverage/1"
_FILE = re.compile(r"^torch_npu-(?P<version>[0-9][0-9A-Za-z.+]*)\.yaml$")
KNOWN_PATHS = frozenset({"op_api", "acl_op", "dvm", "core", "composite_explicit"})
TORCH_GROUPS = ("implicit", "explicit", "cpu", "none")


@dataclass(frozen=True)
class CustomEntry:
    schema: str
    paths: tuple[str, ...]
    exposed: bool


@dataclass(frozen=True)
class CoverageDB:
    """One torch_npu release's registrations plus the paired torch's dispatch facts for everything else."""

    version: str
    torch: str
    file: str
    source: Mapping[str, Any]
    fallback_error_env: str | None
    native: Mapping[str, tuple[str, ...]]
    native_composites: frozenset[str]
    autograd: frozenset[str]
    quant: Mapping[str, tuple[str, ...]]
    sparse: Mapping[str, tuple[str, ...]]
    dropped: Mapping[str, str]
    custom: Mapping[str, CustomEntry]
    delegates: Mapping[str, str]
    torch_category: Mapping[str, str]  # aten overload -> implicit | explicit | cpu | none (only non-native ones)

    def aten_ops(self) -> frozenset[str]:
        """Every aten overload of the paired torch release."""
        return frozenset(self.native) | frozenset(self.delegates) | frozenset(self.torch_category)


def version_key(version: str) -> tuple[Any, ...]:
    """PEP 440 order for the releases torch_npu uses: 2.1.0rc1 < 2.1.0 < 2.1.0.post10 < 2.3.1."""
    match = re.match(r"^(\d+(?:\.\d+)*)(?:rc(\d+))?(?:\.post(\d+))?", version)
    if not match:
        return ((0,), 0, 0, version)
    release = tuple(int(p) for p in match.group(1).split("."))
    release += (0,) * (4 - len(release))
    rc = int(match.group(2)) if match.group(2) is not None else 10**9
    post = int(match.group(3)) if match.group(3) is not None else -1
    return (release, rc, post, version)


def coverage_dir() -> Path:
    return mappings_dir() / "coverage"


def available_versions() -> list[str]:
    """Checked-in torch_npu releases, oldest first."""
    folder = coverage_dir()
    if not folder.is_dir():
        return []
    return list(_versions(str(folder), folder.stat().st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _versions(folder: str, mtime_ns: int) -> tuple[str, ...]:
    found = [m["version"] for p in Path(folder).glob("torch_npu-*.yaml") if (m := _FILE.match(p.name))]
    return tuple(sorted(found, key=version_key))


def default_version() -> str:
    versions = available_versions()
    if not versions:
        raise NpuportError("no torch_npu coverage data is checked in", f"files torch_npu-<version>.yaml in {coverage_dir()}")
    return versions[-1]


def load(version: str | None = None) -> CoverageDB:
    """The coverage database of one release (default: the newest checked in)."""
    version = default_version() if version is None else str(version).strip()
    if version not in available_versions():
        raise NpuportError(
            f"no coverage data for torch_npu {version}", "one of " + ", ".join(available_versions()), version
        )
    path = coverage_dir() / f"torch_npu-{version}.yaml"
    return _load(str(path), path.stat().st_mtime_ns)


def _paths(value: Any, file: str, entry: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p in KNOWN_PATHS for p in value):
        raise MappingError(file, entry, field, f"expected a non-empty list of {sorted(KNOWN_PATHS)}, got {value!r}")
    return tuple(value)


def _names(value: Any, file: str, entry: str, prefix: str) -> list[str]:
    if not isinstance(value, (list, dict)):
        raise MappingError(file, entry, "-", f"expected a list or mapping, got {type(value).__name__}")
    for name in value:
        if not isinstance(name, str) or not name.startswith(prefix):
            raise MappingError(file, entry, str(name), f"operator names must start with {prefix!r}")
    return list(value)


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> CoverageDB:
    name = f"coverage/{Path(path).name}"
    # the schema checks the top level, `source` and the custom entries; the operator tables are checked here, once
    doc = load_checked(name)
    if f"torch_npu-{doc['torch_npu']}.yaml" != Path(path).name:
        raise MappingError(name, "<top>", "torch_npu", f"{doc['torch_npu']!r} does not match the file name")
    native = {op: _paths(p, name, op, "native") for op in _names(doc["native"], name, "native", "aten::") for p in [doc["native"][op]]}
    for section in ("native_composites", "autograd"):
        missing = [op for op in _names(doc[section], name, section, "aten::") if op not in native]
        if missing:
            raise MappingError(name, section, missing[0], "listed here but not under native")
    custom = {}
    for op in _names(doc["custom"], name, "custom", "npu::"):
        entry = doc["custom"][op]
        custom[op] = CustomEntry(entry["schema"], _paths(entry["paths"], name, op, "paths"), entry["exposed"])
    tables = doc["torch_tables"]
    category: dict[str, str] = {}
    for group in TORCH_GROUPS:
        for op in _names(tables[group], name, f"torch_tables.{group}", "aten::"):
            if op in category or op in native:
                raise MappingError(name, f"torch_tables.{group}", op, "operator listed twice")
            category[op] = group
    delegates = {op: str(out) for op in _names(doc["delegates"], name, "delegates", "aten::") for out in [doc["delegates"][op]]}
    return CoverageDB(
        version=doc["torch_npu"],
        torch=doc["torch"],
        file=name,
        source=dict(doc["source"]),
        fallback_error_env=doc.get("fallback_error_env"),
        native=native,
        native_composites=frozenset(doc["native_composites"]),
        autograd=frozenset(doc["autograd"]),
        quant={op: _paths(p, name, op, "quant") for op, p in doc["quant"].items()},
        sparse={op: _paths(p, name, op, "sparse") for op, p in doc["sparse"].items()},
        dropped={str(k): str(v) for k, v in doc["dropped"].items()},
        custom=custom,
        delegates=delegates,
        torch_category=category,
    )
