"""Load mappings/behaviours.yaml into `Rule` objects, checking every field at load.

A typo in a rule (an unknown match key, a chip that does not exist, a predicate that is not registered, a bad
version range) fails here, naming the file, the rule id and the field, so a rule never silently stops firing.
Fields and types are checked by schemas/behaviours.schema.json; the cross-references stay here.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from npuport.cost.roofline import load_chips, npu_chips
from npuport.errors import MappingError
from npuport.mappings import check_document, load_yaml
from npuport.rules import predicates

FILE = "behaviours.yaml"
LEVELS = ("info", "warning", "error")  # in rising order (the engine ranks by it); the schema lists the same values
_VERSION_TERM = re.compile(r"^(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)(?:\.post\d+|rc\d+)?$")


@dataclass(frozen=True)
class Condition:
    """One `where:` item: a value picked from a site (`arg`, `output_numel` or `input_rank`) and comparisons."""

    subject: str  # "arg" | "output_numel" | "input_rank"
    key: Any  # the argument name, or the input position for input_rank
    tests: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    impact: str
    level: str
    detection: str
    explanation: str
    fix: str
    source: str
    fact: str = ""
    scope: str = "sites"
    chips: tuple[str, ...] = ()  # the loader fills in hardware.yaml `npu_chips` for a rule that lists none
    levels: Mapping[str, str] = field(default_factory=dict)
    reproducibility: bool = False
    torch_npu: tuple[tuple[str, tuple[int, ...]], ...] = ()
    torch_npu_text: str = ""
    ops: frozenset[str] = frozenset()
    exclude_ops: frozenset[str] = frozenset()
    apis: tuple[str, ...] = ()
    exclude_apis: tuple[str, ...] = ()
    exclude_frames: frozenset[str] = frozenset()
    module_types: frozenset[str] = frozenset()
    phases: frozenset[str] = frozenset()
    dtypes: frozenset[str] = frozenset()
    self_dtypes: frozenset[str] = frozenset()
    where: tuple[Condition, ...] = ()
    predicate: str | None = None
    predicate_params: Mapping[str, Any] = field(default_factory=dict)

    def level_on(self, chip: str) -> str:
        return self.levels.get(chip, self.level)

    def applies_to(self, chip: str, torch_npu: str | None, reproducibility: bool) -> bool:
        if chip not in self.chips or (self.reproducibility and not reproducibility):
            return False
        return torch_npu is None or version_in_range(torch_npu, self.torch_npu)


def parse_version(text: str) -> tuple[int, ...]:
    m = re.match(r"^(\d+(?:\.\d+)*)", text.strip())
    if not m:
        raise ValueError(text)
    return tuple(int(p) for p in m.group(1).split("."))


def parse_range(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """'>=2.1,<2.6' -> (('>=', (2, 1)), ('<', (2, 6))); ValueError when a term does not parse."""
    terms = []
    for term in text.split(","):
        m = _VERSION_TERM.match(term.strip())
        if not m:
            raise ValueError(term)
        terms.append((m.group(1), parse_version(m.group(2))))
    return tuple(terms)


def version_in_range(version: str, terms: tuple[tuple[str, tuple[int, ...]], ...]) -> bool:
    v = parse_version(version)
    for op, bound in terms:
        width = max(len(v), len(bound))
        a, b = v + (0,) * (width - len(v)), bound + (0,) * (width - len(bound))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


def _strings(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(raw.get(key) or [])  # lists of strings: the schema checked them


def _conditions(items: list, rid: str) -> tuple[Condition, ...]:
    out = []
    for i, item in enumerate(items):
        where = f"match.where[{i}]"
        subjects = [k for k in ("arg", "output_numel", "input_rank") if k in item]
        if len(subjects) != 1:
            raise MappingError(FILE, rid, where, "needs exactly one of arg, output_numel, input_rank")
        subject = subjects[0]
        tests = tuple((k, v) for k, v in item.items() if k != subject)  # comparators: the schema allows only eq ne in not_in gt ge lt le is_set
        if not tests:
            raise MappingError(FILE, rid, where, "needs at least one comparator")
        out.append(Condition(subject, item[subject], tests))
    return tuple(out)


def _predicate(spec: Any, rid: str) -> tuple[str | None, dict[str, Any]]:
    if spec is None:
        return None, {}
    if isinstance(spec, str):
        name, params = spec, {}
    else:
        params = dict(spec)
        name = params.pop("name")  # a string: the schema requires it
    fn = predicates.REGISTRY.get(name)
    if fn is None:
        raise MappingError(FILE, rid, "match.predicate", f"unknown predicate {name!r} (registered: {', '.join(sorted(predicates.REGISTRY))})")
    try:
        inspect.signature(fn.func).bind(None, None, **params)
    except TypeError as exc:
        raise MappingError(FILE, rid, "match.predicate", f"bad parameters for {name}: {exc}") from None
    return name, params


def _rule(raw: Any, chips: set[str], default_chips: tuple[str, ...]) -> Rule:
    # fields, types, the id pattern and the impact / level / detection / scope values: the schema checked them
    rid = raw["id"]
    rule_chips = tuple(raw.get("chips") or default_chips)
    for chip in rule_chips:
        if chip not in chips:
            raise MappingError(FILE, rid, "chips", f"unknown chip {chip!r} (hardware.yaml has {', '.join(sorted(chips))})")
    levels = raw.get("levels") or {}
    for chip, level in levels.items():
        if chip not in chips:
            raise MappingError(FILE, rid, "levels", f"unknown chip {chip!r}")
    version_text = raw.get("torch_npu") or ""
    try:
        version_range = parse_range(version_text) if version_text else ()
    except ValueError as exc:
        raise MappingError(FILE, rid, "torch_npu", f"bad version term {exc} (expected e.g. '>=2.1,<2.6')") from None
    match = raw["match"]
    if not match:
        raise MappingError(FILE, rid, "match", "empty: a rule must say what it applies to")
    name, params = _predicate(match.get("predicate"), rid)
    scope = raw.get("scope", "sites")
    if scope == "traces" and (name is None or not predicates.REGISTRY[name].over_traces):
        raise MappingError(FILE, rid, "scope", "scope 'traces' needs a predicate registered with over_traces=True")
    if name is not None and predicates.REGISTRY[name].over_traces and scope != "traces":
        raise MappingError(FILE, rid, "match.predicate", f"{name} works over whole traces: set scope: traces")
    return Rule(
        id=rid, title=raw["title"], impact=raw["impact"], level=raw["level"], detection=raw["detection"],
        explanation=" ".join(raw["explanation"].split()), fix=raw["fix"], source=raw["source"],
        fact=raw.get("fact", ""), scope=scope, chips=rule_chips, levels=dict(levels),
        reproducibility=bool(raw.get("reproducibility", False)), torch_npu=version_range, torch_npu_text=version_text,
        ops=frozenset(_strings(match, "ops")), exclude_ops=frozenset(_strings(match, "exclude_ops")),
        apis=_strings(match, "apis"), exclude_apis=_strings(match, "exclude_apis"),
        exclude_frames=frozenset(_strings(match, "exclude_frames")),
        module_types=frozenset(_strings(match, "module_types")), phases=frozenset(_strings(match, "phases")),
        dtypes=frozenset(_strings(match, "dtypes")), self_dtypes=frozenset(_strings(match, "self_dtypes")),
        where=_conditions(match.get("where") or [], rid), predicate=name, predicate_params=params,
    )


def rules_from_data(data: Any, chips: set[str]) -> list[Rule]:
    """Build and check rules from parsed YAML (split out so tests can feed broken documents)."""
    if not isinstance(data, dict) or data.get("schema") != "npuport.behaviours/1":
        raise MappingError(FILE, "-", "schema", "expected schema: npuport.behaviours/1")
    check_document(data, FILE)  # schemas/behaviours.schema.json
    default_chips = npu_chips()
    rules: list[Rule] = []
    seen: set[str] = set()
    for raw in data["rules"]:
        rule = _rule(raw, chips, default_chips)
        if rule.id in seen:
            raise MappingError(FILE, rule.id, "id", "duplicate rule id")
        seen.add(rule.id)
        rules.append(rule)
    return rules


@functools.lru_cache(maxsize=1)
def _cached() -> tuple[Rule, ...]:
    return tuple(rules_from_data(load_yaml(FILE), set(load_chips())))


def load_rules() -> list[Rule]:
    """The shipped rules, schema-checked (a broken file raises MappingError naming file, rule and field)."""
    return list(_cached())
