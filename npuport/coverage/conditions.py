"""Conditional paths inside registered torch_npu kernels (mappings/coverage/conditions.yaml, format in docs/coverage.md).

A registered kernel is `native` to the coverage tables, yet some compute on the host: always (polar on 2.3.1), off
the 910B-class chips (logit), for some arguments (_masked_softmax unless 4-D, dim=-1, mask_type=2) or dtypes
(adaptive_max_pool3d in float64), or under facts a trace does not hold (the CANN version; whether torch_npu picks the
acl_op kernel). Each condition evaluates to True, False or None (cannot tell) on one recorded call and target chip.

A release whose op-plugin source nobody could read (`carried:` in the file) takes the conditions of an earlier-built
release whose source was read, for the ops it registers the same way; those are marked inferred, not verified, in
every text npuport prints about them.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Protocol, Sequence

from npuport.coverage.database import Release, load, resolve_version
from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked, mappings_dir
from npuport.trace.records import TensorMeta, TensorRef

FILE = "coverage/conditions.yaml"
OUTCOMES = ("cpu-path", "conditional")
# decided from the recorded call and the target chip / needing a fact of the installation
TRACE_KINDS = frozenset({"always", "chip_in", "chip_not_in", "rank_not", "dtype_in", "not_equal", "not_last_dim_of",
                         "non_integral", "downscale_above"})
ENV_KINDS = frozenset({"cann_below", "acl_op_path"})
_SOURCE = re.compile(r"^(?P<path>[^:@ ]+):(?P<lines>[0-9,\-]+)@(?P<commit>[0-9a-f]{12})$")
_INT64 = 2**63


class CallLike(Protocol):
    """What a condition reads of a call: npuport.trace.records.OpCall and npuport.cost.inventory.ReportedCall."""

    inputs: tuple[TensorMeta, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Condition:
    kind: str
    value: Any
    arg: str | None = None

    def text(self) -> str:
        v = self.value
        show = ", ".join(v) if isinstance(v, (list, tuple)) else str(v)
        texts = {
            "always": lambda: "on every call",
            "chip_in": lambda: f"the chip is one of {show}",
            "chip_not_in": lambda: f"the chip is none of {show}",
            "cann_below": lambda: f"the CANN version is below {v}",
            "acl_op_path": lambda: ("torch_npu runs the acl_op kernel (jit compile enabled, the ACL default of the chip, "
                                    "or an input in a private format)"),
            "rank_not": lambda: f"{self.arg} is not {v}-D",
            "dtype_in": lambda: f"{self.arg} is {show}",
            "not_equal": lambda: f"{self.arg} is not {v}",
            "not_last_dim_of": lambda: f"{self.arg} is given and is neither -1 nor {v}.dim()-1",
            "non_integral": lambda: f"{self.arg} is not an integer value (fractional, infinite or beyond int64)",
            "downscale_above": lambda: f"{self.arg} shrinks by more than {float(v):g}x in H or W (1/scale, or input/output size)",
        }
        return texts[self.kind]()


@dataclass(frozen=True)
class ConditionEntry:
    id: str
    ops: tuple[str, ...]
    outcome: str  # one of OUTCOMES
    when: tuple[Condition, ...]  # any one met -> the call takes the CPU path
    releases: Mapping[str, tuple[str, ...]]  # release -> sources "path:lines@commit"
    aclnn: str | None = None
    note: str | None = None
    # release whose source was not read -> the read release (in `releases`) its conditions are carried from
    carried: Mapping[str, str] = field(default_factory=dict)
    # read only at an op-plugin commit no release is known to be built from (`unreleased` in the file): its sources,
    # applied to the unread releases that register the op
    unreleased: tuple[str, ...] = ()

    def text(self) -> str:
        return " or ".join(c.text() for c in self.when)

    def read_at(self, version: str) -> str | None:
        """The release whose source the conditions rest on for `version`: itself, the one it is carried from, or None."""
        return version if version in self.releases else self.carried.get(version)

    def sources_for(self, version: str) -> tuple[str, ...]:
        read = self.read_at(version)
        return self.releases[read] if read else ()

    def inferred(self, version: str | None) -> str | None:
        """For a release whose source nobody read, what the evidence is; None where the source was read."""
        if version is None or version in self.releases:
            return None
        if version not in self.carried:
            return unreleased_note(self.unreleased) if self.unreleased else None
        ref = self.carried[version]
        return carried_note(ref, self.releases[ref])


def unreleased_note(sources: Iterable[str]) -> str:
    """What npuport says of a condition read only at an op-plugin commit no release is known to be built from."""
    return ("inferred, not verified: source at this release's commit not read; condition read at an op-plugin "
            f"commit no release is known to be built from ({', '.join(sources)})")


def carried_note(ref: str, sources: Iterable[str]) -> str:
    """What npuport says of a condition it carries to a release whose source nobody read."""
    return (f"inferred, not verified: source at this release's commit not read; condition carried from {ref} "
            f"(read at {', '.join(sources)})")


@dataclass(frozen=True)
class ConditionDB:
    builds: Mapping[str, Mapping[str, str]]
    families: Mapping[str, tuple[str, ...]]
    chips: Mapping[str, str]  # npuport chip profile -> SoC family
    entries: tuple[ConditionEntry, ...]
    carried: Mapping[str, str] = field(default_factory=dict)  # unread release -> the read release it is carried from

    def for_op(self, op: str, version: str) -> tuple[ConditionEntry, ...]:
        """The entries of op's kernel on `version`: read at its commit, or carried from `carried[version]` when op is
        still registered there as it is on that release (the same op_api / acl_op paths)."""
        read = tuple(e for e in self.entries if op in e.ops and version in e.releases)
        if read or version not in self.carried:
            return read
        carried = tuple(e for e in self.entries if op in e.ops and version in e.carried)
        if carried and registered_alike(op, version, self.carried[version]):
            return carried
        # an op no read release registers, whose kernel was read at a later commit only: for the releases that
        # register it (their own source unread)
        later = tuple(e for e in self.entries if op in e.ops and e.unreleased)
        return later if later and registered(op, version) else ()


def registered(op: str, version: str) -> bool:
    """Whether the coverage data of published release `version` registers op for the NPU."""
    try:
        return resolve_version(version).release is not None and op in load(version).native
    except NpuportError:
        return False


def registered_alike(op: str, version: str, ref: str) -> bool:
    """Whether the coverage data of published release `version` registers op with the paths it has on `ref`."""
    try:
        if resolve_version(version).release is None or resolve_version(ref).release is None:
            return False  # a version with no data of its own stands for another release's: nothing to compare
        paths = load(version).native.get(op)
        return paths is not None and paths == load(ref).native.get(op)
    except NpuportError:
        return False


def carry_source(version: str, read: Iterable[str], known: Mapping[str, Release]) -> str | None:
    """The release an unread `version` takes its conditions from: of the releases whose source was read (`read`),
    the nearest one built before it (coverage/releases.yaml `built`) with the same paired torch, else with any."""
    me = known.get(version)
    if me is None or not me.built:
        return None
    earlier = [v for v in read if v in known and known[v].built and str(known[v].built) < str(me.built)]
    same = [v for v in earlier if known[v].torch == me.torch]
    pool = same or earlier
    return max(pool, key=lambda v: str(known[v].built)) if pool else None


@dataclass(frozen=True)
class Verdict:
    """What the recorded facts say about one call: `outcome` cpu-path / conditional, or None (the NPU path)."""

    outcome: str | None
    met: tuple[str, ...] = ()  # conditions that hold (the CPU path is taken)
    open: tuple[str, ...] = ()  # conditions npuport could not decide
    entries: tuple[ConditionEntry, ...] = field(default=())
    version: str | None = None  # the release evaluated (its carried entries' texts say so)

    @property
    def condition(self) -> str:
        """The conditions that hold (else those left open, else all), with the carried note where there is one."""
        text = "; ".join(self.met or self.open or tuple(e.text() for e in self.entries))
        return text + (f" [{self.note}]" if self.note else "")

    @property
    def inferred_from(self) -> str | None:
        """The read release the conditions were carried from, when this release's source was not read."""
        version = self.version
        if version is None:
            return None
        return next((e.carried[version] for e in self.entries if version in e.carried and e.inferred(version)), None)

    @property
    def note(self) -> str | None:
        """For a release whose source was not read: inferred, not verified, carried from which release's lines (or
        read at which later commit)."""
        ref = self.inferred_from
        if ref is None:
            later = next((e for e in self.entries if self.version and e.unreleased
                          and self.version not in e.releases and self.version not in e.carried), None)
            return unreleased_note(later.unreleased) if later is not None else None
        return carried_note(ref, dict.fromkeys(s for e in self.entries if e.inferred(self.version) for s in e.releases[ref]))


def load_conditions() -> ConditionDB:
    """The checked-in conditions (an empty database where mappings/ has no conditions.yaml: test fixtures)."""
    path = mappings_dir() / FILE
    if not path.is_file():
        return ConditionDB({}, {}, {}, (), {})
    return _load(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> ConditionDB:
    doc = load_checked(FILE)  # shapes: schemas/coverage.conditions.schema.json; cross-references below
    builds = {str(k): dict(v) for k, v in doc["builds"].items()}
    families = {str(k): tuple(v) for k, v in doc["soc_families"]["families"].items()}
    chips: dict[str, str] = {}
    for chip, spec in doc["chips"].items():
        if spec["family"] not in families:
            raise MappingError(FILE, f"chips.{chip}", "family", f"{spec['family']!r} is not under soc_families")
        chips[str(chip)] = spec["family"]
    carried: dict[str, str] = {}
    for version, spec in (doc.get("carried") or {}).items():
        version, ref = str(version), str(spec["inferred_from"])
        if version in builds:
            raise MappingError(FILE, f"carried.{version}", "inferred_from", "its source was read: it is under builds")
        if ref not in builds:
            raise MappingError(FILE, f"carried.{version}", "inferred_from", f"{ref!r} is not under builds")
        carried[version] = ref
    entries, seen = [], set()
    for raw in doc["entries"]:
        if raw["id"] in seen:
            raise MappingError(FILE, raw["id"], "id", "listed twice")
        seen.add(raw["id"])
        entry = _entry(raw, builds, families)
        entries.append(replace(entry, carried={v: ref for v, ref in carried.items() if ref in entry.releases}))
    return ConditionDB(builds, families, chips, tuple(entries), carried)


def _entry(raw: Mapping[str, Any], builds: Mapping[str, Mapping[str, str]], families: Mapping[str, Any]) -> ConditionEntry:
    name = raw["id"]
    when = []
    for spec in raw["when"]:
        arg = spec.get("arg")
        kind = next(k for k in spec if k != "arg")
        if kind in ("chip_in", "chip_not_in") and not set(spec[kind]) <= set(families):
            raise MappingError(FILE, name, kind, f"names no SoC family: {sorted(set(spec[kind]) - set(families))}")
        when.append(Condition(kind, tuple(spec[kind]) if isinstance(spec[kind], list) else spec[kind], arg))
    kinds = {c.kind for c in when}
    wanted = TRACE_KINDS if raw["outcome"] == "cpu-path" else ENV_KINDS
    if not kinds <= wanted:
        raise MappingError(FILE, name, "when", f"a {raw['outcome']} entry takes only {sorted(wanted)}, got {sorted(kinds - wanted)}")
    releases = {}
    for version, sources in (raw.get("releases") or {}).items():
        build = builds.get(str(version))
        if build is None:
            raise MappingError(FILE, name, "releases", f"{version!r} is not under builds")
        for s in sources:
            m = _SOURCE.match(s)
            if m is None or not build["op_plugin"].startswith(m["commit"]):
                raise MappingError(FILE, name, f"releases.{version}", f"{s!r} does not cite op-plugin {build['op_plugin'][:12]}")
        releases[str(version)] = tuple(sources)
    unreleased = tuple((raw.get("unreleased") or {}).get("sources", ()))
    if not releases and not unreleased:
        raise MappingError(FILE, name, "releases", "no release and no unreleased source: nothing says where it was read")
    return ConditionEntry(name, tuple(raw["ops"]), raw["outcome"], tuple(when), releases, raw.get("aclnn"), raw.get("note"),
                          unreleased=unreleased)


def conditions_for(op: str, version: str) -> tuple[ConditionEntry, ...]:
    return load_conditions().for_op(op, version)


def evaluate(entries: Sequence[ConditionEntry], call: CallLike | None = None, chip: str | None = None,
             cann: str | None = None, op: str | None = None, version: str | None = None) -> Verdict:
    """Fold the entries of one op over one call: cpu-path if a condition holds, conditional if one cannot be decided
    (no call, a chip npuport cannot place, an unknown CANN version, the acl_op choice), else None (the NPU path).
    version: the release the entries were looked up for (Verdict.condition then says whether they were carried)."""
    db = load_conditions()
    met: list[str] = []
    open_: list[str] = []
    for e in entries:
        for c in e.when:
            held = _holds(c, call, chip, cann, op or e.ops[0], db)
            if held:
                met.append(c.text())
            elif held is None:
                open_.append(c.text())
    outcome = "cpu-path" if met else "conditional" if open_ else None
    return Verdict(outcome, tuple(dict.fromkeys(met)), tuple(dict.fromkeys(open_)), tuple(entries), version)


def cann_key(version: str) -> tuple[int, int, int, int]:
    """'8.2.RC1' < '8.3.RC1' < '8.3.0' < '8.5.0'; NpuportError for anything else."""
    m = re.match(r"^(\d+)\.(\d+)\.(?:RC(\d+)|(\d+))(?:\.\w+)?$", version.strip())
    if m is None:
        raise NpuportError("not a CANN version", "e.g. 8.3.RC1 or 8.5.0", version)
    return (int(m[1]), int(m[2]), 0 if m[3] else 1, int(m[3] or m[4]))


def _holds(c: Condition, call: CallLike | None, chip: str | None, cann: str | None, op: str, db: ConditionDB) -> bool | None:
    if c.kind == "always":
        return True
    if c.kind in ("chip_in", "chip_not_in"):
        family = db.chips.get(chip) if chip else None
        if family is None:
            return None
        return (family in c.value) == (c.kind == "chip_in")
    if c.kind == "cann_below":
        return None if cann is None else cann_key(cann) < cann_key(str(c.value))
    if c.kind == "acl_op_path" or call is None:
        return None
    bound = bind_args(op, call)
    if bound is None or c.arg not in bound:
        return None
    return _arg_test(c, bound[c.arg], bound)


def _arg_test(c: Condition, value: Any, bound: Mapping[str, Any]) -> bool | None:
    if c.kind == "not_equal":
        return value is None or value != c.value
    if c.kind == "non_integral":
        return _non_integral(value)
    if c.kind == "not_last_dim_of":
        ref = bound.get(str(c.value))
        if value is None:
            return False
        if not isinstance(ref, TensorMeta) or not isinstance(value, int):
            return None
        return value not in (-1, len(ref.shape) - 1)
    if not isinstance(value, TensorMeta):
        return None
    if c.kind == "rank_not":
        return len(value.shape) != c.value
    if c.kind == "dtype_in":
        return value.dtype in c.value
    if c.kind == "downscale_above":
        return _downscale_above(value, bound, float(c.value))
    return None


def _non_integral(value: Any) -> bool | None:
    """op-plugin's correction_fits_aclnn_int64, inverted: None, bool and int fit; a float fits when finite, whole and
    inside int64."""
    if value is None or isinstance(value, (bool, int)):
        return False
    if isinstance(value, float):
        return not math.isfinite(value) or value != math.trunc(value) or not -_INT64 <= value <= _INT64
    return True  # a complex scalar is neither integral nor floating: the kernel takes the CPU path


def _downscale_above(t: TensorMeta, bound: Mapping[str, Any], limit: float) -> bool | None:
    """op-plugin's compute_scale per H and W: 1/scale when a positive scale is given, else input/output size."""
    out = bound.get("output_size")
    if len(t.shape) != 4 or not isinstance(out, (list, tuple)) or len(out) != 2:
        return None
    for size, target, scale in zip(t.shape[2:], out, (bound.get("scales_h"), bound.get("scales_w"))):
        real = 1.0 / scale if scale is not None and scale > 0 else (size / target if target else 0.0)
        if real > limit:
            return True
    return False


def bind_args(op: str, call: CallLike) -> dict[str, Any] | None:
    """The call's arguments by schema name, tensors as their TensorMeta, defaults filled in; None when the traced
    torch has no such overload."""
    names = _schema(op)
    if names is None:
        return None
    bound: dict[str, Any] = {}
    for (name, _), value in zip(names, call.args):
        bound[name] = value
    bound.update(call.kwargs)
    for name, default in names:
        bound.setdefault(name, default)
    return {k: (call.inputs[v.index] if isinstance(v, TensorRef) and v.index < len(call.inputs) else v)
            for k, v in bound.items()}


@functools.lru_cache(maxsize=256)
def _schema(op: str) -> tuple[tuple[str, Any], ...] | None:
    import torch  # noqa: PLC0415 - only when a condition reads an argument: `coverage` commands start without torch

    ns, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        schema = getattr(packet, overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None
    return tuple((a.name, a.default_value if a.has_default_value() else None) for a in schema.arguments)
