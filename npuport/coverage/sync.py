"""Build one normalized coverage document from a torch-npu wheel and the paired torch's dispatch tables (wheels
read as zip files, never installed).

The document is what mappings/coverage/torch_npu-<version>.yaml holds; docs/coverage.md describes its schema.
The torch side comes from the paired torch wheel, or, when that wheel cannot be had, from checked-in coverage
files of the same torch release (`torch_side_from_data`): npuport needs from torch only its dispatch categories.
Only scripts/sync_torch_npu_coverage.py and the tests call this module.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from npuport.coverage.database import version_key
from npuport.coverage.dispatch_tables import CIA, TorchTables, parse_native_functions, tables_from_documents
from npuport.coverage.names import schema_name
from npuport.coverage.npu_yaml import YAML_PATH, NpuRegistrations, parse_npu_yaml
from npuport.errors import NpuportError

SCRIPT_VERSION = 2
SCHEMA = "npuport.coverage/1"
TORCH_YAML_PATH = "torchgen/packaged/ATen/native/native_functions.yaml"
LIBRARY_PATH = "torch_npu/lib/libtorch_npu.so"
VERSION_PATH = "torch_npu/version.py"
FALLBACK_ENV = b"TORCH_NPU_FALLBACK_CPU_DISABLE"


@dataclass(frozen=True)
class WheelInfo:
    path: Path
    name: str  # distribution name from METADATA
    version: str
    requires: tuple[str, ...]
    sha256: str


def wheel_info(path: Path) -> WheelInfo:
    """Name, version, Requires-Dist and sha256 of a wheel file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    with zipfile.ZipFile(path) as zf:
        meta = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if not meta:
            raise NpuportError("not a wheel: no *.dist-info/METADATA", "a .whl file", str(path))
        lines = zf.read(meta[0]).decode("utf-8", "replace").splitlines()
    fields: dict[str, list[str]] = {}
    for line in lines:
        if not line.strip():
            break  # the description body follows the first blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), []).append(value.strip())
    return WheelInfo(
        path=path,
        name=fields.get("Name", ["?"])[0],
        version=fields.get("Version", ["?"])[0],
        requires=tuple(fields.get("Requires-Dist", [])),
        sha256=digest.hexdigest(),
    )


@dataclass(frozen=True)
class ReleaseStamp:
    """When and from which commit a torch-npu wheel was built, read from the wheel itself."""

    built: str | None  # 'YYYY-MM-DDTHH:MM:SS': zip time of torch_npu/version.py (the build machine's clock, no zone)
    git: str | None  # git_version in torch_npu/version.py


def release_stamp(path: Path) -> ReleaseStamp:
    """The build time and commit of a torch-npu wheel. The build writes every member with one timestamp (the
    wheel's RECORD, rewritten at upload, may differ), so torch_npu/version.py's zip time is the build time."""
    with zipfile.ZipFile(path) as zf:
        try:
            info = zf.getinfo(VERSION_PATH)
        except KeyError:
            return ReleaseStamp(None, None)
        text = zf.read(info).decode("utf-8", "replace")
    built = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*info.date_time)
    match = re.search(r"^git_version\s*=\s*['\"]([0-9a-fA-F]{7,40})['\"]", text, re.M)
    return ReleaseStamp(built, match.group(1) if match else None)


def paired_torch_version(info: WheelInfo) -> str:
    """'torch==2.13.0.*' / 'torch ==2.1.0' in Requires-Dist -> '2.13.0'."""
    for req in info.requires:
        match = re.match(r"^torch\s*\(?\s*==\s*([0-9][0-9a-zA-Z.+]*?)(?:\.\*)?\s*\)?\s*(;.*)?$", req)
        if match:
            return match.group(1)
    raise NpuportError("torch-npu wheel pins no torch version", "Requires-Dist: torch==X", ", ".join(info.requires))


def paired_torch(info: WheelInfo) -> tuple[str, str]:
    """(torch version, how it was found). torch-npu up to 2.2.0 (and 2.3.1rc1) pins no torch in Requires-Dist; its
    release number names the torch it was built for (torch_npu 2.1.0rc1 -> torch 2.1.0)."""
    try:
        return paired_torch_version(info), "requires-dist"
    except NpuportError:
        match = re.match(r"^(\d+\.\d+\.\d+)", info.version)
        if not match:
            raise
        return match.group(1), "release-number"


def read_member(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        try:
            return zf.read(member)
        except KeyError:
            raise NpuportError(f"{member} is missing from the wheel", "a torch/torch-npu wheel", str(path)) from None


def has_fallback_switch(path: Path) -> bool:
    """Does libtorch_npu.so in the wheel read TORCH_NPU_FALLBACK_CPU_DISABLE? (streamed, never extracted)."""
    with zipfile.ZipFile(path) as zf:
        if LIBRARY_PATH not in zf.namelist():
            return False
        tail = b""
        with zf.open(LIBRARY_PATH) as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                if FALLBACK_ENV in tail + block:
                    return True
                tail = block[-len(FALLBACK_ENV):]
    return False


@dataclass(frozen=True)
class TorchSide:
    """PyTorch's dispatch tables standing for one torch release, and where they were read."""

    version: str  # the torch release the tables stand for
    tables: TorchTables
    wheel: str  # the torch wheel read (for reused data: the wheel that data was read from)
    sha256: str
    yaml: str
    origin: str  # 'wheel' | 'torch X wheel, nearest obtainable to Y' | 'coverage data of torch X: files'


def torch_side_from_wheel(path: Path, stands_for: str | None = None) -> TorchSide:
    """The tables of a torch wheel; `stands_for`: the paired release when this wheel is another (nearest) one."""
    info = wheel_info(path)
    version = info.version.split("+")[0]
    tables = parse_native_functions(read_member(path, TORCH_YAML_PATH))
    if stands_for is None or stands_for == version:
        return TorchSide(version, tables, path.name, info.sha256, TORCH_YAML_PATH, "wheel")
    origin = f"torch {version} wheel, the nearest obtainable to torch {stands_for}"
    return TorchSide(stands_for, tables, path.name, info.sha256, TORCH_YAML_PATH, origin)


def torch_side_from_data(torch_version: str, docs: Mapping[str, Mapping[str, Any]]) -> TorchSide:
    """The tables of `torch_version` rebuilt from coverage documents ({file name: parsed document}) paired with it.

    Ops that every one of those releases registers keep an unknown category (TorchTables.uncategorized);
    build_document raises MissingCategories if a new release needs one of them."""
    same = {name: doc for name, doc in sorted(docs.items()) if doc.get("torch") == torch_version}
    if not same:
        raise NpuportError(f"no checked-in coverage data paired with torch {torch_version}",
                           "a torch_npu-<version>.yaml whose `torch` is that release, or the torch wheel")
    first = next(iter(same.values()))["source"]
    origin = f"coverage data of torch {torch_version}: " + ", ".join(same)
    return TorchSide(torch_version, tables_from_documents(same.values()), str(first["torch_wheel"]),
                     str(first["torch_sha256"]), str(first["torch_yaml"]), origin)


class MissingCategories(NpuportError):
    """Rebuilt torch tables lack the category of ops this release does not register (fill them from a torch wheel)."""

    def __init__(self, names: Iterable[str], torch_version: str) -> None:
        self.names = sorted(names)
        super().__init__(f"the checked-in data of torch {torch_version} does not record the dispatch category of "
                         f"{len(self.names)} op(s) this release leaves to torch", "a torch wheel to read them from",
                         ", ".join(self.names[:8]))


def build_document(npu_wheel: Path, torch: Path | TorchSide, *, scan_library: bool = True) -> dict[str, Any]:
    """Everything one coverage file holds, as plain data (sorted, ready for render_document).

    torch: the paired torch wheel (its version must match the pin), or a TorchSide from torch_side_from_wheel /
    torch_side_from_data."""
    npu = wheel_info(npu_wheel)
    wanted, pin = paired_torch(npu)
    side = torch_side_from_wheel(torch) if isinstance(torch, Path) else torch
    if side.version != wanted:
        raise NpuportError(
            f"torch wheel does not match torch-npu {npu.version}", f"torch {wanted}", f"{side.wheel} ({side.version})"
        )
    regs = parse_npu_yaml(read_member(npu_wheel, YAML_PATH))
    switch = has_fallback_switch(npu_wheel) if scan_library else False
    return _document(npu, release_stamp(npu_wheel), pin, side, regs, switch)


def _document(npu: WheelInfo, stamp: ReleaseStamp, pin: str, side: TorchSide, regs: NpuRegistrations,
              switch: bool) -> dict[str, Any]:
    tables = side.tables
    aten = lambda name: f"aten::{name}"  # noqa: E731
    dropped = {aten(n): f"not an aten overload in torch {side.version}" for n in regs.native if n not in tables.keys}
    dropped.update({aten(n): why for n, why in regs.skipped.items()})
    native = {aten(n): list(p) for n, p in regs.native.items() if n in tables.keys}
    unknown = [n for n in tables.keys if aten(n) not in native and n in tables.uncategorized]
    if unknown:
        raise MissingCategories(unknown, side.version)
    groups: dict[str, list[str]] = {"implicit": [], "explicit": [], "cpu": [], "none": []}
    delegates: dict[str, str] = {}
    for name in tables.keys:
        if aten(name) in native:
            continue
        kind = tables.category(name)
        if kind == "delegate":
            delegates[aten(name)] = aten(tables.structured_delegate[name])
        else:
            groups[kind].append(aten(name))
    source: dict[str, Any] = {
        "torch_npu_wheel": npu.path.name,
        "torch_npu_sha256": npu.sha256,
        "torch_npu_yaml": YAML_PATH,
        "torch_npu_built": stamp.built,
        "torch_npu_git": stamp.git,
        "torch_pin": pin,
        "torch_wheel": side.wheel,
        "torch_sha256": side.sha256,
        "torch_yaml": side.yaml,
        "torch_tables_from": side.origin,
        "script": "scripts/sync_torch_npu_coverage.py",
        "script_version": SCRIPT_VERSION,
    }
    return {
        "schema": SCHEMA,
        "torch_npu": npu.version,
        "torch": side.version,
        "source": {k: v for k, v in source.items() if v is not None},
        "fallback_error_env": FALLBACK_ENV.decode() if switch else None,
        "native": dict(sorted(native.items())),
        "native_composites": sorted(n for n in native if CIA in tables.keys[n.split("::", 1)[1]]),
        "autograd": sorted(aten(n) for n in regs.autograd if aten(n) in native),
        "quant": {aten(n): list(p) for n, p in sorted(regs.quant.items())},
        "sparse": {aten(n): list(p) for n, p in sorted(regs.sparse.items())},
        "dropped": dict(sorted(dropped.items())),
        "custom": {
            f"npu::{n}": {"schema": c.schema, "paths": list(c.paths), "exposed": c.exposed}
            for n, c in sorted(regs.custom.items())
        },
        "delegates": dict(sorted(delegates.items())),
        "torch_tables": {k: sorted(v) for k, v in groups.items()},
        "views": sorted(aten(n) for n in tables.views if n in tables.keys),
        "metadata": sorted(aten(n) for n in tables.metadata if n in tables.keys),
    }


def data_digest(doc: Mapping[str, Any]) -> str:
    """A digest of what a coverage document says about operators (everything but the release name and `source`):
    two releases with the same digest share one data file."""
    body = {k: v for k, v in doc.items() if k not in ("torch_npu", "source")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


_SECTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):")
_CHECKED = {"aten": ("supported", "autograd"), "custom": ("custom", "custom_autograd"), "quant": ("quant",)}


def yaml_entry_names(text: bytes | str) -> dict[str, set[str]]:
    """Operator names per top-level section of npu_native_functions_by_codegen.yaml, read line by line: no YAML
    parser and none of npu_yaml.py's rules, so the data can be checked against a count made another way."""
    lines = (text.decode("utf-8") if isinstance(text, bytes) else text).splitlines()
    sections: dict[str, set[str]] = {}
    section, item_indent, entry_func = None, None, False
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        head = _SECTION.match(line)
        if head:
            section, item_indent = head.group(1), None
            sections.setdefault(section, set())
            continue
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if section is None:
            continue
        if body.startswith("- ") and (item_indent is None or indent == item_indent):
            item_indent = indent
            body = body[2:].strip()
            entry_func = False
            if ":" not in body.split("(", 1)[0]:  # a bare name: '- add.Tensor'
                sections[section].add(_bare(body))
                continue
        if body.startswith("func:") and not entry_func:
            entry_func = True
            sections[section].add(_bare(body[len("func:"):]))
    return sections


def _bare(text: str) -> str:
    return schema_name(text.strip().strip("'\""))


@dataclass(frozen=True)
class WheelCheck:
    """The registrations counted straight from a wheel's yaml against what a coverage document records for them.
    Truthy when every section agrees name for name."""

    wheel: str
    data: str
    counts: dict[str, tuple[int, int]]  # section -> (names in the wheel, names in the data)
    only_wheel: dict[str, list[str]] = field(default_factory=dict)
    only_data: dict[str, list[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not any(self.only_wheel.values()) and not any(self.only_data.values())

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {w}/{d}" for k, (w, d) in self.counts.items())
        head = f"{self.wheel} vs {self.data}: {'match' if self else 'MISMATCH'} (wheel/data: {counts})"
        extra = [f"  {k}: only in the wheel: {', '.join(v[:10])}" for k, v in self.only_wheel.items() if v]
        extra += [f"  {k}: only in the data: {', '.join(v[:10])}" for k, v in self.only_data.items() if v]
        return "\n".join([head, *extra])


def check_wheel(npu_wheel: Path, doc: Mapping[str, Any], data_name: str | None = None) -> WheelCheck:
    """Compare the wheel's own yaml, counted by yaml_entry_names, with a coverage document: every supported /
    autograd name must be under `native` or `dropped`, every custom name under `custom`, every quant name under
    `quant`, and the other way round."""
    found = yaml_entry_names(read_member(npu_wheel, YAML_PATH))
    bare = lambda names: {str(n).split("::", 1)[1] for n in names}  # noqa: E731
    recorded = {"aten": bare(doc["native"]) | bare(doc["dropped"]), "custom": bare(doc["custom"]), "quant": bare(doc["quant"])}
    counts, only_wheel, only_data = {}, {}, {}
    for key, sections in _CHECKED.items():
        names = set().union(*(found.get(s, set()) for s in sections))
        counts[key] = (len(names), len(recorded[key]))
        only_wheel[key] = sorted(names - recorded[key])
        only_data[key] = sorted(recorded[key] - names)
    return WheelCheck(npu_wheel.name, data_name or f"torch_npu {doc['torch_npu']}", counts, only_wheel, only_data)


def release_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    """One line of mappings/coverage/releases.yaml for the release a document was built from (data: itself)."""
    src = doc["source"]
    return {"built": src.get("torch_npu_built"), "git": src.get("torch_npu_git"), "torch": doc["torch"],
            "data": doc["torch_npu"], "wheel": src["torch_npu_wheel"], "sha256": src["torch_npu_sha256"],
            "digest": data_digest(doc)[:16]}


def build_order(version: str, entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """Order releases by build time; releases with no recorded time after the others, by version."""
    built = entry.get("built")
    return (built is None, built or "", version_key(version))


def place(index: dict[str, dict[str, Any]], version: str, entry: dict[str, Any]) -> tuple[str, str | None]:
    """Add a release to the index (version -> entry) and point it and every release with the same data digest at
    the earliest built of them, which keeps the one data file. Returns (data version, data version it replaces or
    None): the caller writes the first file and removes the second."""
    index[version] = dict(entry)
    group = sorted((v for v, e in index.items() if e["digest"] == entry["digest"]), key=lambda v: build_order(v, index[v]))
    holder = group[0]
    replaced = {index[v]["data"] for v in group if v != version} - {holder}
    for v in group:
        index[v]["data"] = holder
    return holder, (sorted(replaced)[0] if replaced else None)


_INDEX_HEADER = """\
# Every torch-npu release published on the package index, its build time and the coverage file with its data.
# GENERATED by scripts/sync_torch_npu_coverage.py: do not edit by hand (schema: docs/coverage.md).
# built: zip time of torch_npu/version.py inside the wheel (the build machine's clock, no time zone).
# data: the release whose torch_npu-<data>.yaml holds this release's registrations (itself, or an earlier-built
# release with identical registrations and the same torch: an alias).
"""


def render_index(index: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [_INDEX_HEADER.rstrip("\n"), "schema: npuport.coverage.releases/1", "source:",
             "  index: https://pypi.org/simple/torch-npu/", "  script: scripts/sync_torch_npu_coverage.py",
             f"  script_version: {SCRIPT_VERSION}", "releases:"]
    for version in sorted(index, key=version_key):
        entry = {k: index[version][k] for k in ("built", "git", "torch", "data", "wheel", "sha256", "digest")}
        lines.append(f"  {_scalar(version)}: {_flow(entry)}")
    return "\n".join(lines) + "\n"


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:]*$")
_HEADER = """\
# torch_npu {torch_npu} coverage, paired with torch {torch}{built}. GENERATED: do not edit by hand.
# Regenerate: python scripts/sync_torch_npu_coverage.py {torch_npu}   (schema: docs/coverage.md)
"""


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text not in ("null", "true", "false", "yes", "no", "on", "off"):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def _flow(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    return _scalar(value)


def render_document(doc: dict[str, Any]) -> str:
    """Block style at the top, one op per line below: a diff of two syncs reads op by op."""
    built = (doc.get("source") or {}).get("torch_npu_built")
    lines = [_HEADER.format(torch_npu=doc["torch_npu"], torch=doc["torch"], built=f", built {built}" if built else "").rstrip("\n")]
    for key, value in doc.items():
        if isinstance(value, dict) and key in ("source", "torch_tables"):
            lines.append(f"{key}:")
            for sub, item in value.items():
                if isinstance(item, list):
                    lines.append(f"  {sub}:" + (" []" if not item else ""))
                    lines.extend(f"  - {_scalar(v)}" for v in item)
                else:
                    lines.append(f"  {sub}: {_scalar(item)}")
        elif isinstance(value, dict):
            lines.append(f"{key}:" + (" {}" if not value else ""))
            lines.extend(f"  {_scalar(k)}: {_flow(v)}" for k, v in value.items())
        elif isinstance(value, list):
            lines.append(f"{key}:" + (" []" if not value else ""))
            lines.extend(f"- {_scalar(v)}" for v in value)
        else:
            lines.append(f"{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"
