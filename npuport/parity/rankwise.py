"""How per-rank records were matched, and the rank-by-rank comparison.

Two per-rank records with the same world size and the same layout (every entry on every rank has the same placement
on both sides) are compared rank by rank: rank r of the reference against rank r of the device under test, each
with its own first divergence. The worst rank is the one to read first: a failing rank before a passing one; among
failing ranks, the one whose first divergence comes earliest in the step (then the most failures); among passing
ranks, the largest rel_l2. Its comparison is the result's, and its first divergence is the overall one. Sides of
different layouts are gathered instead (gather.py) and compared as single records; `RankView` says which was done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from npuport.parity.compare import Comparison, compare
from npuport.parity.localize import FirstDivergence, first_divergence
from npuport.parity.ranked import RankedArtifact
from npuport.parity.tolerances import Tolerances


@dataclass
class RankResult:
    rank: int
    comparison: Comparison
    first: FirstDivergence | None

    def __bool__(self) -> bool:
        return bool(self.comparison)

    def to_json(self) -> dict[str, Any]:
        comp = self.comparison
        worst = max(comp.judged, key=lambda r: _finite(r.metrics.rel_l2), default=None)
        return {"rank": self.rank, "passed": bool(comp), "verdict": str(comp), "checked": len(comp.judged),
                "failed": len(comp.failed), "unmatched": len(comp.structural_unmatched),
                "worst_entry": None if worst is None else {"key": worst.entry.key, "rel_l2": _json_float(worst.metrics.rel_l2)},
                "first_divergence": self.first.to_json() if self.first else None}


@dataclass
class RankView:
    """How the sides' ranks were matched: `per-rank` (ranks holds one result per rank) or `gathered`."""

    mode: str
    world_sizes: dict[str, int]  # role -> world size; 1 for a single-device record or a live run
    ranks: list[RankResult] = field(default_factory=list)
    worst: int | None = None

    def suffix(self, passed: bool) -> str:
        if self.mode == "gathered":
            many = [f"{role} from {n} ranks" for role, n in self.world_sizes.items() if n > 1]
            return f" (gathered: {', '.join(many)})" if many else ""
        n = len(self.ranks)
        if passed:
            return f" on each of {n} ranks"
        failing = [r.rank for r in self.ranks if not r]
        return f" on rank {self.worst} (worst of {n}; failing ranks: {', '.join(map(str, failing))})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "world_size": self.world_sizes}
        if self.mode == "per-rank":
            worst = next(r for r in self.ranks if r.rank == self.worst)
            out.update(worst_rank=self.worst, failing=[r.rank for r in self.ranks if not r],
                       first_divergence=None if worst.first is None else {"rank": worst.rank, **worst.first.to_json()},
                       rows=[r.to_json() for r in self.ranks])
        return out


def same_layout(sides: list[RankedArtifact]) -> bool:
    """Same world size, and every entry key both sides hold on a rank has the same placement there."""
    if len({s.world_size for s in sides}) != 1:
        return False
    layouts = [s.layout() for s in sides]
    first = layouts[0]
    return all(first[k] == other[k] for other in layouts[1:] for k in first.keys() & other.keys())


def compare_ranks(ref: RankedArtifact, dev: RankedArtifact, tols: Tolerances, golden: RankedArtifact | None,
                  allow_unmatched: bool) -> RankView:
    results = []
    for r in range(ref.world_size):
        comp = compare(ref.parts[r].capture, dev.parts[r].capture, tols, golden.parts[r].capture if golden else None,
                       allow_unmatched)
        results.append(RankResult(r, comp, first_divergence(comp) if comp.failed else None))
    sizes = {"ref": ref.world_size, "dev": dev.world_size} | ({"golden": golden.world_size} if golden else {})
    return RankView("per-rank", sizes, results, _worst(results).rank)


def _worst(results: list[RankResult]) -> RankResult:
    def badness(r: RankResult) -> tuple[Any, ...]:
        if not r:
            order = r.first.result.entry.order if r.first else math.inf
            return (1, -order, len(r.comparison.failed), -r.rank)
        return (0, max((_finite(x.metrics.rel_l2) for x in r.comparison.judged), default=0.0), 0, -r.rank)
    return max(results, key=badness)


def _finite(v: float) -> float:
    return math.inf if math.isnan(v) else v


def _json_float(v: float) -> Any:
    return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf")
