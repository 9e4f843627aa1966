"""Match two captures entry by entry and judge each entry against its dtype's tolerance.

Matching is by key (module path, call index, input/output, leaf path; ops add name and occurrence): an entry
present on one side only is listed, never dropped. Without a golden the verdict is absolute (rel_l2 and cosine
of dev against ref). With a float64 golden it is relative: the dev side's error against the golden must stay
within k times the ref side's error against it (the test that tells "NPU worse than CUDA" from "both drift as
bf16 does"). Every result is truthy when it passed and says which tolerance would have made it pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from npuport.parity.entries import Capture, Entry
from npuport.parity.metrics import Metrics, stats_metrics_many, tensor_metrics
from npuport.parity.tolerances import INTEGER, Tolerance, Tolerances

JUDGED = ("out", "op", "grad", "grad_out")  # inputs are judged only to localise (they are someone's output)
STRUCTURAL = ("in", "out", "grad", "grad_out")  # an unmatched op entry is reported but does not fail the run


@dataclass(frozen=True)
class GoldenCheck:
    dev_err: float
    ref_err: float
    k: float
    floor: float

    @property
    def limit(self) -> float:
        return self.k * max(self.ref_err, self.floor)

    @property
    def ratio(self) -> float:
        base = max(self.ref_err, self.floor)
        return self.dev_err / base if base > 0 else (0.0 if self.dev_err == 0 else math.inf)

    def to_json(self) -> dict[str, Any]:
        return {"dev_err": self.dev_err, "ref_err": self.ref_err, "k": self.k, "floor": self.floor,
                "limit": self.limit, "ratio": self.ratio if math.isfinite(self.ratio) else "inf"}


@dataclass
class EntryResult:
    entry: Entry
    metrics: Metrics
    tolerance: str
    passed: bool
    reason: str
    would_pass: str
    golden: GoldenCheck | None = None

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"{self.entry.key}: {'ok' if self.passed else 'FAIL'}: {self.reason}; {self.would_pass}"


@dataclass
class Comparison:
    results: list[EntryResult]
    ref_only: list[str]
    dev_only: list[str]
    golden_missing: list[str]
    relative: bool
    allow_unmatched: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> list[EntryResult]:
        return [r for r in self.results if r.entry.io in JUDGED]

    @property
    def failed(self) -> list[EntryResult]:
        return [r for r in self.judged if not r.passed]

    @property
    def structural_unmatched(self) -> list[str]:
        return [k for k in self.ref_only + self.dev_only if not _is_op_key(k)]

    def __bool__(self) -> bool:
        return not self.failed and (self.allow_unmatched or not self.structural_unmatched)

    def __str__(self) -> str:
        basis = "relative to the float64 golden" if self.relative else "absolute, no golden"
        if self:
            return f"PASS: {len(self.judged)} entries within tolerance ({basis})"
        parts = []
        if self.failed:
            parts.append(f"{len(self.failed)} of {len(self.judged)} entries exceed tolerance")
        if self.structural_unmatched and not self.allow_unmatched:
            parts.append(f"{len(self.structural_unmatched)} module entries present on one side only")
        return f"DIVERGED: {'; '.join(parts)} ({basis})"


def _is_op_key(key: str) -> bool:
    return "/aten::" in key or "/" in key.split(":", 1)[0]


class _Side:
    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self.keys = cap.by_key()

    def full(self, blob: int) -> bool:
        return blob in self.cap.full


PairKey = tuple[int, int, int, str]  # (which pair: 0 dev-ref, 1 dev-golden, 2 ref-golden; blob; reference blob; basis)


@dataclass
class _Plan:
    """One matched entry: its tolerance and the pairs whose metrics judge it."""

    e: Entry
    de: Entry
    ge: Entry | None
    tkey: str
    tol: Tolerance
    basis: str
    golden: bool  # judged against the golden: pairs 1 and 2 as well


def compare(ref: Capture, dev: Capture, tol: Tolerances, golden: Capture | None = None,
            allow_unmatched: bool = False) -> Comparison:
    r, d = _Side(ref), _Side(dev)
    g = _Side(golden) if golden is not None else None
    plans: list[_Plan] = []
    missing: list[str] = []
    for e in sorted(ref.entries, key=lambda x: x.order):
        de = d.keys.get(e.key)
        if de is None:
            continue
        ge = g.keys.get(e.key) if g is not None else None
        if g is not None and ge is None and e.io in JUDGED:
            missing.append(e.key)
        plans.append(_plan(e, de, ge, r, d, g, tol))
    cache = _metrics(plans, r, d, g)
    results = [_judge(p, cache, tol) for p in plans]
    ref_only = [e.key for e in ref.entries if e.key not in d.keys]
    dev_only = [e.key for e in dev.entries if e.key not in r.keys]
    notes = []
    if ref.compiled != dev.compiled:  # one side ran under torch.compile: it has no module entries to match
        allow_unmatched = True
        notes.append(f"ref ran {_how(ref)}, dev {_how(dev)}: compared on the entries both have (the model's inputs, "
                     "outputs and gradients); the eager side's module entries have no compiled counterpart")
    return Comparison(results, ref_only, dev_only, missing, golden is not None, allow_unmatched, notes)


def _how(cap: Capture) -> str:
    return f"under torch.compile ({cap.compiled})" if cap.compiled else "eagerly"



def _plan(e: Entry, de: Entry, ge: Entry | None, r: _Side, d: _Side, g: _Side | None, tols: Tolerances) -> _Plan:
    tkey = tols.key_for(e.dtype)
    sides = [(e, r), (de, d)] + ([(ge, g)] if ge is not None and g is not None else [])
    basis = "full" if all(s.full(x.blob) for x, s in sides) else "stats"
    against = ge is not None and g is not None and de.dtype == e.dtype and tkey != INTEGER
    return _Plan(e, de, ge, tkey, tols.by_dtype[tkey], basis, against)


def _pairs(p: _Plan, r: _Side, d: _Side, g: _Side | None) -> list[tuple[PairKey, Entry, Entry, _Side, _Side]]:
    """(key, entry, reference entry, their sides) of each pair the plan needs, dev against ref first."""
    out = [((0, p.de.blob, p.e.blob, p.basis), p.de, p.e, d, r)]
    if p.golden and p.ge is not None and g is not None:
        out.append(((1, p.de.blob, p.ge.blob, p.basis), p.de, p.ge, d, g))
        out.append(((2, p.e.blob, p.ge.blob, p.basis), p.e, p.ge, r, g))
    return out


def _metrics(plans: list[_Plan], r: _Side, d: _Side, g: _Side | None) -> dict[PairKey, Metrics]:
    """Every pair's metrics, each pair once: full tensors one pair at a time in entry order (read from the artifact
    then, released after), statistics all in one batch (stats_metrics_many)."""
    cache: dict[PairKey, Metrics] = {}
    stats: dict[PairKey, tuple[Entry, Entry, _Side, _Side, Tolerance]] = {}
    for p in plans:
        for key, a, b, sa, sb in _pairs(p, r, d, g):
            if key in cache or key in stats:
                continue
            if p.basis == "full":
                cache[key] = tensor_metrics(sa.cap.full[a.blob], sb.cap.full[b.blob], p.tol.rtol, p.tol.atol, b.dtype)
            else:
                stats[key] = (a, b, sa, sb, p.tol)
    if stats:
        for side in (r, d, g):
            if side is not None:
                side.cap.prefetch_stats({x.blob for a, b, sa, sb, _ in stats.values() for x, s in ((a, sa), (b, sb)) if s is side})
        pairs = [(sa.cap.stats_of(a.blob), sb.cap.stats_of(b.blob), t.rtol, t.atol, b.dtype) for a, b, sa, sb, t in stats.values()]
        cache.update(zip(stats, stats_metrics_many(pairs)))
    return cache


def _judge(p: _Plan, cache: dict[PairKey, Metrics], tols: Tolerances) -> EntryResult:
    e, de, ge, tkey, tol, basis = p.e, p.de, p.ge, p.tkey, p.tol, p.basis
    m = cache[(0, de.blob, e.blob, basis)]
    if de.dtype != e.dtype:
        return EntryResult(e, m, tkey, False, f"dtype {de.dtype} vs reference {e.dtype}", "no tolerance: dtypes differ")
    if not p.golden or ge is None:
        return _absolute(e, m, tkey, tol)
    mdev = cache[(1, de.blob, ge.blob, basis)]
    mref = cache[(2, e.blob, ge.blob, basis)]
    k = tol.k * (tols.stats_k_factor if basis == "stats" else 1.0)
    check = GoldenCheck(mdev.rel_l2, mref.rel_l2, k, tol.floor)
    if mdev.problem or mref.problem:
        return EntryResult(e, m, tkey, False, mdev.problem or mref.problem or "", "no tolerance: shapes differ", check)
    bad_dev = mdev.nan_mismatch + mdev.inf_mismatch
    if bad_dev > mref.nan_mismatch + mref.inf_mismatch:
        return EntryResult(e, m, tkey, False, f"{bad_dev} NaN/Inf positions differ from the golden (reference: "
                           f"{mref.nan_mismatch + mref.inf_mismatch})", "no tolerance: non-finite values", check)
    ok = check.dev_err <= check.limit
    sign = "<=" if ok else ">"
    reason = (f"rel_l2 vs golden {check.dev_err:.3g} {sign} {k:g} x max(reference's {check.ref_err:.3g}, floor {tol.floor:.3g})"
              f" = {check.limit:.3g} [{tkey}]")
    return EntryResult(e, m, tkey, ok, reason, f"would pass with k >= {check.ratio:.3g}", check)


def _absolute(e: Entry, m: Metrics, tkey: str, tol: Tolerance) -> EntryResult:
    if m.problem:
        return EntryResult(e, m, tkey, False, m.problem, "no tolerance: shapes differ")
    if m.nan_mismatch or m.inf_mismatch:
        return EntryResult(e, m, tkey, False, f"{m.nan_mismatch} NaN and {m.inf_mismatch} Inf positions differ",
                           "no tolerance: non-finite values")
    problems = []
    if m.rel_l2 > tol.rel_l2:
        problems.append(f"rel_l2 {m.rel_l2:.3g} > {tol.rel_l2:.3g}")
    if m.cosine < tol.cosine:
        problems.append(f"cosine {m.cosine:.10g} < {tol.cosine:.10g}")
    would = f"would pass with rel_l2 <= {m.rel_l2:.3g} and cosine >= {math.floor(m.cosine * 1e10) / 1e10:.10g}"
    if problems:
        return EntryResult(e, m, tkey, False, "; ".join(problems) + f" [{tkey}]", would)
    return EntryResult(e, m, tkey, True, f"rel_l2 {m.rel_l2:.3g} <= {tol.rel_l2:.3g}, cosine {m.cosine:.10g} [{tkey}]", would)
