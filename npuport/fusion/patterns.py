"""Load fusion patterns and replacements from mappings/fusions.yaml, validated at load (schemas/fusions.schema.json)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from npuport.errors import MappingError
from npuport.mappings import load_checked

_FILE = "fusions.yaml"


@dataclass(frozen=True)
class Step:
    name: str
    dir: str
    sources: tuple[str, ...]  # names tried in order; the first that matched is used
    ops: frozenset[str]
    optional: bool = False
    max: int = 1


@dataclass(frozen=True)
class Pattern:
    id: str
    title: str
    anchor: frozenset[str]
    steps: tuple[Step, ...]
    output: tuple[str, ...]
    returns: tuple[str, ...]
    replacements: tuple[str, ...]
    check: str | None
    source: str


@dataclass(frozen=True)
class Replacement:
    id: str
    kind: str  # torch_npu | npuport_kernel | aten | native
    op: str
    call: str = ""
    kernel: str | None = None
    constraints: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class FusionData:
    patterns: tuple[Pattern, ...]
    sdpa: dict[str, Any]
    replacements: dict[str, Replacement]


def _step(pid: str, raw: dict, known: set[str]) -> Step:
    sources = tuple([raw["from"]] if isinstance(raw["from"], str) else raw["from"])
    for s in sources:
        if s not in known:
            raise MappingError(_FILE, f"{pid}.{raw['name']}", "from", f"{s!r} is not an earlier step")
    return Step(raw["name"], raw["dir"], sources, frozenset(raw["ops"]), raw.get("optional", False), raw.get("max", 1))


@functools.lru_cache(maxsize=1)
def load_fusions() -> FusionData:
    data = load_checked(_FILE)  # fields, types, step directions and replacement kinds: the schema
    reps: dict[str, Replacement] = {}
    for rid, raw in data["replacements"].items():
        reps[rid] = Replacement(rid, raw["kind"], raw["op"], raw.get("call", ""), raw.get("kernel"), dict(raw.get("constraints", {})), raw["source"])
    patterns: list[Pattern] = []
    seen: set[str] = set()
    for raw in data["patterns"]:
        pid = raw["id"]
        if pid in seen:
            raise MappingError(_FILE, pid, "id", "duplicate pattern id")
        seen.add(pid)
        known = {"anchor"}
        steps = []
        for s in raw["steps"]:
            step = _step(pid, s, known)
            known.add(step.name)
            steps.append(step)
        for name in list(raw["output"]) + list(raw.get("returns", [])):
            if name not in known:
                raise MappingError(_FILE, pid, "output/returns", f"{name!r} is not a step")
        for rid in raw["replacements"]:
            if rid not in reps:
                raise MappingError(_FILE, pid, "replacements", f"{rid!r} is not defined under replacements")
        patterns.append(Pattern(pid, raw["title"], frozenset(raw["anchor"]), tuple(steps), tuple(raw["output"]),
                                tuple(raw.get("returns", [])), tuple(raw["replacements"]), raw.get("check"), raw["source"]))
    for rid in data["sdpa"]["replacements"]:
        if rid not in reps:
            raise MappingError(_FILE, "sdpa", "replacements", f"{rid!r} is not defined under replacements")
    return FusionData(tuple(patterns), dict(data["sdpa"]), reps)
