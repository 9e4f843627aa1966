"""Evaluate behaviour rules over recorded traces: a pure function from `Trace`s to `Finding`s.

Each rule is tried on every compute call and every torch-level composite frame of every scenario; hits are
grouped by (scenario, op, module, source line, detail) into `Evidence` carrying call counts and time share, so
a report can point at the exact line and say how much of the step it costs.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from npuport.cost.op_costs import call_cost
from npuport.cost.roofline import default_chip, get_chip
from npuport.errors import NpuportError
from npuport.rules import predicates
from npuport.rules.catalog import LEVELS, Condition, Rule, load_rules
from npuport.rules.sites import Context, Site
from npuport.trace.records import OpCall, TensorMeta, Trace

MAX_EVIDENCE = 25


@dataclass
class Evidence:
    scenario: str
    op: str
    module: str  # module path, "" for the root module
    module_type: str
    source: str | None  # "file.py:123"
    calls: int
    time_share: float | None  # share of the scenario's estimated time (None when unknown)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finding:
    id: str
    title: str
    level: str  # 'error' | 'warning' | 'info', after --chip overrides
    impact: str  # 'numerics' | 'performance' | 'crash'
    message: str
    fix: str
    source: str
    evidence: list[Evidence] = field(default_factory=list)
    explanation: str = ""
    detection: str = "trace"  # 'trace' (proven from the recorded calls) | 'presence' (op present, risk depends on config)
    chip: str = ""
    fact: str = ""
    evidence_omitted: int = 0
    # totals over every matching call, the evidence beyond MAX_EVIDENCE included (None: sum the evidence kept)
    total_calls: int | None = None
    total_share: dict[str, float] | None = None

    @property
    def calls(self) -> int:
        return self.total_calls if self.total_calls is not None else sum(e.calls for e in self.evidence)

    @property
    def time_share(self) -> float | None:
        """The largest share of one scenario's estimated time spent in the matching calls (shares of different
        scenarios are not added: each is a fraction of its own step)."""
        per = self.total_share if self.total_share is not None else _share_by_scenario(self.evidence)
        return max(per.values()) if per else None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("evidence", "total_calls", "total_share")}
        out["evidence"] = [e.to_json() for e in self.evidence]
        out["calls"] = self.calls
        out["time_share"] = self.time_share
        return out


# ---------------------------------------------------------------- matching
def _op_matches(names: frozenset[str], op: str, base: str) -> bool:
    return base in names or op in names or op.split(".", 1)[0] in names


def _api_matches(patterns: Sequence[str], api: str | None) -> bool:
    return api is not None and any(fnmatch.fnmatchcase(api, p) for p in patterns)


def _same(value: Any, want: Any) -> bool:
    if isinstance(value, bool) or isinstance(want, bool):  # True must not equal 1 in a rule
        return value is want
    return value == want


def _compare(value: Any, tests: tuple[tuple[str, Any], ...]) -> bool:
    for cmp, want in tests:
        if cmp == "is_set":
            if (value is not None) != bool(want):
                return False
            continue
        if value is None or isinstance(value, TensorMeta):
            return False
        try:
            ok = {
                "eq": lambda: _same(value, want),
                "ne": lambda: not _same(value, want),
                "in": lambda: value in want,
                "not_in": lambda: value not in want,
                "gt": lambda: value > want,
                "ge": lambda: value >= want,
                "lt": lambda: value < want,
                "le": lambda: value <= want,
            }[cmp]()
        except TypeError:
            return False
        if not ok:
            return False
    return True


def _condition_holds(cond: Condition, site: Site) -> bool:
    if cond.subject == "arg":
        value = site.arg(cond.key)
    elif cond.subject == "output_numel":
        value = site.outputs[0].numel if site.outputs else None
    else:
        value = len(site.inputs[cond.key].shape) if cond.key < len(site.inputs) else None
    return _compare(value, cond.tests)


def _static_match(rule: Rule, site: Site) -> bool:
    base = site.name
    if rule.ops and not _op_matches(rule.ops, site.op, base):
        return False
    if rule.exclude_ops and _op_matches(rule.exclude_ops, site.op, base):
        return False
    if rule.apis and not _api_matches(rule.apis, site.api):
        return False
    if rule.exclude_apis and _api_matches(rule.exclude_apis, site.api):
        return False
    if rule.exclude_frames and site.call is not None and site.call.frame is not None and site.frame_op in rule.exclude_frames:
        return False
    if rule.module_types and site.module_type not in rule.module_types:
        return False
    if rule.phases and site.phase not in rule.phases:
        return False
    if rule.dtypes and not any(t.dtype in rule.dtypes for t in site.tensors()):
        return False
    if rule.self_dtypes and (site.first_input is None or site.first_input.dtype not in rule.self_dtypes):
        return False
    return all(_condition_holds(c, site) for c in rule.where)


def site_hit(rule: Rule, site: Site, ctx: Context) -> str | None:
    """The detail string when `rule` fires on `site` ('' when it fires without one), else None."""
    if not _static_match(rule, site):
        return None
    if rule.predicate is None:
        return ""
    got = predicates.REGISTRY[rule.predicate].func(site, ctx, **rule.predicate_params)
    return (got if isinstance(got, str) else "") if got else None


# the predicates that read a collective site (recorded apart from the aten calls, with no call or frame behind it)
COLLECTIVE_PREDICATES = frozenset({"collective", "hccl_unsupported"})


def iter_sites(trace: Trace) -> Iterator[Site]:
    """Compute calls, composite frames and collectives; views move no data and are left to rules over their consumers."""
    for c in trace.calls:
        if c.kind == "compute":
            yield Site.of_call_in(c, trace)
    for f in trace.frames.values():
        yield Site.of_frame(f)
    for col in trace.collectives:
        yield Site.of_collective(col)


# ---------------------------------------------------------------- time share
class _Shares:
    """Time share of a call or frame in its scenario: the audit's callback, or a roofline estimate on `chip`."""

    def __init__(self, chip: str, callback: Callable[[OpCall], float] | None) -> None:
        self.chip, self.callback = chip, callback
        self._per_trace: dict[int, dict[int, float]] = {}
        self._per_frame: dict[int, dict[int, float]] = {}

    def _table(self, trace: Trace) -> dict[int, float]:
        key = id(trace)
        if key not in self._per_trace:
            if self.callback is not None:
                table = {c.index: float(self.callback(c)) for c in trace.calls if c.kind == "compute"}
            else:
                chip = get_chip(self.chip)
                secs = {}
                for c in trace.calls:
                    if c.kind == "compute":
                        cost = call_cost(c)
                        secs[c.index] = chip.roofline(cost.flops, cost.bytes, cost.dtype, cost.matrix)[0]
                total = sum(secs.values())
                table = {i: (s / total if total else 0.0) for i, s in secs.items()}
            self._per_trace[key] = table
        return self._per_trace[key]

    def of(self, trace: Trace, site: Site) -> float | None:
        table = self._table(trace)
        if site.call is not None:
            return table.get(site.call.index)
        if site.frame is None:  # a collective: communication, not a share of compute time
            return None
        return self._frames(trace, table).get(site.frame.id, 0.0)

    def _frames(self, trace: Trace, table: dict[int, float]) -> dict[int, float]:
        """Each frame's share: the sum over the calls it issued, made in one pass over the trace (it was one pass per
        frame site)."""
        key = id(trace)
        got = self._per_frame.get(key)
        if got is None:
            got = self._per_frame[key] = {}
            for c in trace.calls:
                if c.frame is not None:
                    got[c.frame] = got.get(c.frame, 0.0) + table.get(c.index, 0.0)
        return got


# ---------------------------------------------------------------- evaluation
def _npu_chip(chip: str) -> str:
    profile = get_chip(chip)
    if profile.family != "npu":
        raise NpuportError("behaviour rules describe Ascend NPU chips", "--chip Ascend910B, Ascend910A or Ascend310P", chip)
    return profile.name


def _kept(evidence: list[Evidence]) -> list[Evidence]:
    """The first MAX_EVIDENCE places, in their order, with every op the rule matched among them: a report that reads
    the evidence's ops (an unsupported op's action takes the rule's fix) must see each, however many layers one
    op's places fill first."""
    if len(evidence) <= MAX_EVIDENCE:
        return evidence
    first: dict[str, int] = {}
    for i, e in enumerate(evidence):
        first.setdefault(e.op, i)
    keep = set(list(first.values())[:MAX_EVIDENCE])
    for i in range(len(evidence)):
        if len(keep) >= MAX_EVIDENCE:
            break
        keep.add(i)
    return [evidence[i] for i in sorted(keep)]


def _finding(rule: Rule, chip: str, groups: dict[tuple, list]) -> Finding:
    evidence = [
        Evidence(scenario=k[0], op=k[1], module=k[2], module_type=v[2], source=k[3], calls=v[0], time_share=v[1], detail=k[4])
        for k, v in groups.items()
    ]
    evidence.sort(key=lambda e: (-(e.time_share or 0.0), -e.calls, e.scenario, e.source or ""))
    calls = sum(e.calls for e in evidence)
    scenarios = sorted({e.scenario for e in evidence})
    top = evidence[0]
    where = f"{top.op} in {top.module or '<root>'} ({top.module_type}) at {top.source or '?'}"
    message = f"{rule.title}: {calls} call(s) at {len(evidence)} place(s) in {', '.join(scenarios)}; first: {where}"
    if top.detail:
        message += f" ({top.detail})"
    return Finding(
        id=rule.id, title=rule.title, level=rule.level_on(chip), impact=rule.impact, message=message, fix=rule.fix,
        source=rule.source, evidence=_kept(evidence), explanation=rule.explanation, detection=rule.detection,
        chip=chip, fact=rule.fact, evidence_omitted=max(0, len(evidence) - MAX_EVIDENCE),
        total_calls=calls, total_share=_share_by_scenario(evidence),
    )


def _share_by_scenario(evidence: list[Evidence]) -> dict[str, float]:
    per: dict[str, float] = {}
    for e in evidence:
        if e.time_share is not None:
            per[e.scenario] = per.get(e.scenario, 0.0) + e.time_share
    return per


def evaluate(
    traces: Mapping[str, Trace],
    *,
    chip: str | None = None,
    torch_npu: str | None = None,
    time_share: Callable[[OpCall], float] | None = None,
    reproducibility: bool = False,
    rules: Sequence[Rule] | None = None,
) -> list[Finding]:
    """Findings of the behaviour rules over `traces` (scenario name -> Trace) for `chip` (default: hardware.yaml's
    default_target) and `torch_npu`.

    `time_share(call)` is the call's share of its scenario's estimated time (from the audit); without it a
    roofline estimate on `chip` is used. `reproducibility=True` turns on the rules that matter only when
    results must repeat exactly (nondeterministic ops, HCCL determinism, parity settings).
    """
    chip = _npu_chip(default_chip() if chip is None else chip)
    rules = [r for r in (rules if rules is not None else load_rules()) if r.applies_to(chip, torch_npu, reproducibility)]
    shares = _Shares(chip, time_share)
    hits: dict[str, dict[tuple, list]] = {}

    def add(rule: Rule, scenario: str, trace: Trace, site: Site, detail: str) -> None:
        key = (scenario, site.op, site.module, site.source, detail)
        group = hits.setdefault(rule.id, {}).setdefault(key, [0, None, site.module_type])
        group[0] += 1
        share = shares.of(trace, site)
        if share is not None:
            group[1] = (group[1] or 0.0) + share

    site_rules = [r for r in rules if r.scope == "sites"]
    by_op: dict[tuple[str, bool], list[Rule]] = {}  # the op filters depend on the op name alone: decide them once per op

    def candidates(site: Site) -> list[Rule]:
        key = (site.op, site.collective is not None)
        got = by_op.get(key)
        if got is None:
            base = site.name
            got = by_op[key] = [
                r for r in site_rules
                if (not r.ops or _op_matches(r.ops, site.op, base)) and not (r.exclude_ops and _op_matches(r.exclude_ops, site.op, base))
                and (site.collective is None or r.predicate in COLLECTIVE_PREDICATES)
            ]
        return got

    # A copied layer's call is its template call with other ids and module path (npuport.trace.reuse): a rule that
    # reads nothing else (no predicate, or a `local` one) fires on it exactly as on the template, decided once per
    # template call. With `--no-reuse` every call is its own template and each is decided, as before.
    once = {r.id for r in site_rules
            if r.predicate is None or getattr(predicates.REGISTRY.get(r.predicate), "local", False)}
    for scenario, trace in traces.items():
        ctx = Context(chip, torch_npu, reproducibility, trace, traces)
        decided: dict[tuple[str, int, str], str | None] = {}
        copy_of, frame_copy_of = trace.copy_of, trace.frame_copy_of
        for site in iter_sites(trace):
            if site.call is not None and copy_of:
                tpl = ("c", copy_of.get(site.call.index, site.call.index))
            elif site.frame is not None and frame_copy_of:
                tpl = ("f", frame_copy_of.get(site.frame.id, site.frame.id))
            else:
                tpl = None
            for rule in candidates(site):
                if tpl is not None and rule.id in once:
                    key = (tpl[0], tpl[1], rule.id)
                    if key in decided:
                        detail = decided[key]
                    else:
                        detail = decided[key] = site_hit(rule, site, ctx)
                else:
                    detail = site_hit(rule, site, ctx)
                if detail is not None:
                    add(rule, scenario, trace, site, detail)
    for rule in (r for r in rules if r.scope == "traces"):
        first = next(iter(traces.values()), None)
        if first is None or rule.predicate is None:  # the catalog requires a predicate of every trace rule
            continue
        ctx = Context(chip, torch_npu, reproducibility, first, traces)
        for scenario, site, detail in predicates.REGISTRY[rule.predicate].func(traces, ctx, **rule.predicate_params):
            add(rule, scenario, traces[scenario], site, detail)

    by_id = {r.id: r for r in rules}
    findings = [_finding(by_id[rid], chip, groups) for rid, groups in hits.items()]
    rank = {lvl: i for i, lvl in enumerate(LEVELS)}
    findings.sort(key=lambda f: (-rank[f.level], -(f.time_share or 0.0), f.id))
    return findings
