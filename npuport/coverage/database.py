"""Load and validate mappings/coverage/torch_npu-<version>.yaml (format in docs/coverage.md, schema in
schemas/coverage.torch_npu.schema.json); cached per file. mappings/coverage/releases.yaml lists every published
release with its build time and the file holding its data (releases with identical registrations share one), so any
version string resolves to data: its own, an alias's, or the nearest earlier release's, with a note."""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked, mappings_dir

SCHEMA = "npuport.coverage/1"
_FILE = re.compile(r"^torch_npu-(?P<version>[0-9][0-9A-Za-z.+]*)\.yaml$")
INDEX_FILE = "coverage/releases.yaml"
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
    views: frozenset[str] = frozenset()  # overloads that alias their input (no kernel); empty in files before v2
    metadata: frozenset[str] = frozenset()  # overloads that read sizes / strides / dtype on the host

    @property
    def built(self) -> str | None:
        """Build time of the release this file was read from (zip time of torch_npu/version.py), if recorded."""
        value = self.source.get("torch_npu_built")
        return str(value) if value else None

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
    """The coverage database of one release (default: the newest checked in). Any version string is accepted that
    resolve_version accepts: an alias loads the data it shares, an unlisted release the nearest earlier one's."""
    data = default_version() if version is None else resolve_version(version).data
    path = coverage_dir() / f"torch_npu-{data}.yaml"
    if not path.is_file():
        raise MappingError(INDEX_FILE, data, "data", f"no file {path.name} for this release")
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


@functools.lru_cache(maxsize=256)  # every release's file stays loaded: `coverage show` and the audit visit them all
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
        views=frozenset(_names(doc.get("views") or [], name, "views", "aten::")),
        metadata=frozenset(_names(doc.get("metadata") or [], name, "metadata", "aten::")),
    )


# --- published releases: mappings/coverage/releases.yaml -----------------------------------------------------------

@dataclass(frozen=True)
class Release:
    """One published torch-npu release and the file that holds its data."""

    version: str
    data: str  # the release whose torch_npu-<data>.yaml holds this one's registrations (itself, or an alias target)
    built: str | None  # 'YYYY-MM-DDTHH:MM:SS', zip time of torch_npu/version.py in the wheel
    torch: str | None
    git: str | None = None


def releases() -> dict[str, Release]:
    """Every release with data: the index's (aliases included) plus data files the index does not list."""
    folder = coverage_dir()
    index = folder / "releases.yaml"
    stamp = index.stat().st_mtime_ns if index.is_file() else 0
    return dict(_releases(str(folder), folder.stat().st_mtime_ns if folder.is_dir() else 0, stamp))


@functools.lru_cache(maxsize=8)
def _releases(folder: str, folder_mtime: int, index_mtime: int) -> tuple[tuple[str, Release], ...]:
    found: dict[str, Release] = {}
    if index_mtime:
        doc = load_checked(INDEX_FILE)  # schemas/coverage.releases.schema.json
        for version, e in doc["releases"].items():
            found[str(version)] = Release(str(version), str(e["data"]), e.get("built"), e.get("torch"), e.get("git"))
    files = available_versions()
    for version, release in found.items():
        if release.data not in files:
            raise MappingError(INDEX_FILE, version, "data", f"no file torch_npu-{release.data}.yaml")
    for version in files:
        if version not in found:  # a file the index does not list (a site's own, a test's): its own data
            db = load_file(version)
            found[version] = Release(version, version, db.built, db.torch)
    return tuple(sorted(found.items(), key=lambda kv: version_key(kv[0])))


def load_file(version: str) -> CoverageDB:
    """torch_npu-<version>.yaml itself, with no version resolution."""
    path = coverage_dir() / f"torch_npu-{version}.yaml"
    return _load(str(path), path.stat().st_mtime_ns)


def published_versions() -> list[str]:
    """Every release with data (own or an alias's), oldest version first."""
    return list(releases())


def aliases(data: str) -> list[str]:
    """The releases other than `data` itself whose registrations torch_npu-<data>.yaml holds."""
    return [v for v, r in releases().items() if r.data == data and v != data]


_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(?:rc|c)\.?(\d+))?(?:[.-]?post\.?(\d+))?(?:\+[0-9A-Za-z.]+)?$")


def canonical_version(text: str) -> str:
    """'2.3.1post5' / 'v2.3.1.post5' / '2.3.1-post5' -> '2.3.1.post5'; '2.1' -> '2.1.0'; '2.1.0+cpu' -> '2.1.0'."""
    match = _VERSION.match(str(text).strip().lower())
    if not match:
        raise NpuportError("not a torch_npu version", "a release such as 2.1.0.post10, 2.6.0rc1 or 2.14.0", repr(text))
    parts = match.group(1).split(".")
    release = ".".join(parts + ["0"] * (3 - len(parts)))
    rc = f"rc{int(match.group(2))}" if match.group(2) is not None else ""
    post = f".post{int(match.group(3))}" if match.group(3) is not None else ""
    return release + rc + post


@dataclass(frozen=True)
class VersionChoice:
    requested: str
    data: str  # the version whose file is loaded
    release: str | None  # the published release the request names; None when an earlier one stands in for it
    note: str | None  # for a person: why the data is not the requested release's own


def resolve_version(text: str) -> VersionChoice:
    """The data for a version string: the release's own file, the file it shares (an alias), or the nearest
    earlier release's with a note (2.3.1.post5 -> 2.3.1.post4 when no .post5 was published). Earlier means by
    version within the same major release; a version before every release with data is an error."""
    known = releases()
    if text in known:  # names exactly as the index or a file spells them
        version = text
    else:
        version = canonical_version(text)
    if version in known:
        release = known[version]
        note = None if release.data == version else (
            f"torch_npu {version} registers the same operators as {release.data} (same torch {release.torch}): "
            f"showing {release.data}'s data")
        return VersionChoice(text, release.data, version, note)
    key = version_key(version)
    earlier = [v for v in known if version_key(v) < key and version_key(v)[0][0] == key[0][0]]
    if not earlier:
        names = list(known)
        shown = ", ".join(names) if len(names) <= 10 else ", ".join(names[:3]) + ", ..., " + ", ".join(names[-2:])
        raise NpuportError(f"no coverage data for torch_npu {version}",
                           f"a release with data, or a later one of the same major version: {shown}", text)
    nearest = max(earlier, key=version_key)
    built = known[nearest].built
    when = f", built {built[:10]}" if built else ""
    newest = max(known, key=version_key)
    why = "is newer than every release with data" if nearest == newest else "is not a release with data"
    note = f"torch_npu {version} {why}; using the nearest earlier release, {nearest}{when}"
    return VersionChoice(text, known[nearest].data, None, note)


def build_date(version: str) -> str | None:
    """Build time of a release (or of the release a version string resolves to)."""
    known = releases()
    if version in known:
        return known[version].built
    choice = resolve_version(version)
    return known[choice.release].built if choice.release else None


def by_build_date(versions: Iterable[str]) -> list[str]:
    """Releases ordered by build time (those with none recorded last, by version): torch_npu builds post releases
    of old lines long after newer lines (2.1.0.post10, built 2025-01, came after 2.3.1, built 2024-07)."""
    known = releases()

    def key(v: str) -> tuple[Any, ...]:
        built = known[v].built if v in known else None
        return (built is None, built or "", version_key(v))

    return sorted(versions, key=key)


def is_prerelease(version: str) -> bool:
    return version_key(version)[1] != 10**9


def earliest_by_build_date(ok: Callable[[str], bool], *, prereleases: bool = False) -> str | None:
    """The earliest-built data release for which ok(version) holds (release candidates only with prereleases).

    Each data file is tried once, as the earliest-built release of those sharing it. resolve.py's
    earliest_without_fallback is meant to be: earliest_by_build_date(lambda v: no op of `ops` falls back on v)."""
    for version in by_build_date(available_versions()):
        if (prereleases or not is_prerelease(version)) and ok(version):
            return version
    return None


# --- views, metadata and unknown names ------------------------------------------------------------------------------

VIEW_COST = ("no kernel: the result shares its input's storage and nothing moves. On the NPU a non-contiguous result "
             "costs a copy later, when an op that needs contiguous input reads it: torch_npu runs permute, slice, "
             "select, broadcast and reshape patterns as one kernel (torch_npu/csrc/framework/contiguous/), other "
             "layouts as a general strided copy")
METADATA_COST = "no kernel: reads sizes, strides or dtype that the tensor keeps on the host; no device work, no sync"


def view_kind(op: str, db: CoverageDB) -> str | None:
    """'view' (aliases its input), 'metadata' (reads host-side metadata) or None, from the paired torch's schema.

    A name without an overload whose overloads are all metadata counts too: 'aten::size' (size.int,
    size.Dimname), which the JIT registers but native_functions.yaml does not list."""
    if op in db.views:
        return "view"
    if op in db.metadata:
        return "metadata"
    if op.startswith("aten::") and "." not in op.split("::", 1)[1]:
        overloads = [m for m in db.metadata if m.startswith(op + ".")]
        if overloads and op not in db.aten_ops():
            return "metadata"
    return None


def view_answer(op: str, status: str, db: CoverageDB) -> tuple[str, str] | None:
    """('view', detail) when `op`, resolved to `status` on `db`'s release, runs no kernel on the NPU; None otherwise.

    Only ops that reach the NPU count (native, composite; a metadata name like aten::size that torch does not list
    resolves to unsupported): a view with only a CPU kernel still falls back, and one torch_npu implements with an
    acl_op / op_api kernel (view_as_real, view_as_complex; _conj only in the four releases whose yaml registers it,
    2.1.0.post6, 2.2.0.post2, 2.3.1rc1, 2.3.1) runs that kernel. resolve.py is meant to return
    Resolution(op, version, "view", paths, None, detail) when this gives an answer."""
    kind = view_kind(op, db)
    if kind is None or status not in ("native", "composite", "unsupported"):
        return None
    if db.native.get(op, ("core",)) != ("core",):  # torch_npu runs an ACL / aclnn kernel for it (view_as_real)
        return None
    if status == "unsupported" and (kind != "metadata" or op in db.aten_ops()):
        return None
    if kind == "metadata":
        return kind, f"metadata op: {METADATA_COST}"
    return kind, f"view op (torch {db.torch} has a view_copy twin for it): {VIEW_COST}"


def op_names(db: CoverageDB) -> frozenset[str]:
    """Every operator name a release's data knows: aten overloads of its torch, npu:: ops, yaml names torch lacks,
    and names like aten::size whose overloads are all metadata."""
    bases = {m.split(".", 1)[0] for m in db.metadata if "." in m.split("::", 1)[1]}
    return db.aten_ops() | frozenset(db.custom) | frozenset(db.dropped) | frozenset(b for b in bases if view_kind(b, db))


DATA_NAMESPACES = ("aten", "npu")  # the namespaces the checked-in data covers


def live_namespaces() -> frozenset[str]:
    """The namespaces with at least one operator registered in this process's torch (none without torch). Read each
    time: importing a library (torch.distributed.fsdp) registers more."""
    try:
        import torch  # noqa: PLC0415 - only for ops outside aten / npu: `coverage` commands must start without torch
    except ImportError:
        return frozenset()
    return frozenset(n.split("::", 1)[0] for n in torch._C._dispatch_get_all_op_names() if "::" in n)


def check_known(op: str, version: str | None = None) -> None:
    """Raise NpuportError naming the nearest operator names when an aten:: / npu:: op is in no release's data.

    Ops of other namespaces are left to the caller (their library, not torch_npu, decides) when the running torch
    registers any op of that namespace (fsdp:: once torch.distributed.fsdp is imported, prims::, c10d::); a namespace
    that neither the data nor the running torch knows (a typo: atne::mm) raises "no coverage data for namespace",
    naming the nearest namespaces, the data's first."""
    ns = op.split("::", 1)[0]
    if ns == "higher_order":  # the audit's name for a torch higher-order operator (FlexAttention): resolve words it
        return
    if ns not in DATA_NAMESPACES:
        live = live_namespaces()
        if ns in live:
            return
        nearest = (difflib.get_close_matches(ns, DATA_NAMESPACES, n=2, cutoff=0.6)
                   + difflib.get_close_matches(ns, sorted(live - set(DATA_NAMESPACES)), n=2, cutoff=0.6))
        hint = "nearest: " + ", ".join(f"{n}::" for n in nearest) if nearest else "no namespace is close"
        raise NpuportError(f"no coverage data for namespace {ns}::",
                           f"aten:: or npu::, the torch_npu data's namespaces, or a namespace the running torch "
                           f"registers; {hint}", op)
    chosen = load(version)
    if op in op_names(chosen):
        return
    token = re.compile(rf"(?m)(?:^|\s){re.escape(op)}(?::|$)")  # as a key ('  aten::x: ...') or list item ('- aten::x')
    for v in available_versions():  # the text, not the parsed file: a miss reads every release
        if v != chosen.version and token.search((coverage_dir() / f"torch_npu-{v}.yaml").read_text(encoding="utf-8")):
            return
    nearest = difflib.get_close_matches(op, sorted(op_names(chosen)), n=3, cutoff=0.6)
    hint = "nearest: " + ", ".join(nearest) if nearest else "no name is close"
    raise NpuportError(f"unknown operator {op}",
                       f"an operator of torch_npu {chosen.version} / torch {chosen.torch}; {hint}", op)
