"""Median and spread of repeated timings: the numbers a benchmark reports, as a pure function of samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no samples")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


@dataclass(frozen=True)
class Stats:
    """Seconds per call over `n` repetitions. `spread` is (p90 - p10) / median: a robust relative width that
    one slow outlier (a context switch, a clock change) does not move."""

    n: int
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    iqr: float

    @property
    def spread(self) -> float:
        return (self.p90 - self.p10) / self.median if self.median > 0 else 0.0

    def to_json(self) -> dict[str, float | int]:
        return {"n": self.n, "median_s": self.median, "mean_s": self.mean, "min_s": self.min, "max_s": self.max,
                "p10_s": self.p10, "p90_s": self.p90, "iqr_s": self.iqr, "spread": self.spread}


def summarize(samples: Sequence[float]) -> Stats:
    if not samples:
        raise ValueError("no timing samples")
    s = sorted(float(x) for x in samples)
    return Stats(
        n=len(s), median=quantile(s, 0.5), mean=sum(s) / len(s), min=s[0], max=s[-1],
        p10=quantile(s, 0.1), p90=quantile(s, 0.9), iqr=quantile(s, 0.75) - quantile(s, 0.25),
    )


def differs(a: Stats, b: Stats) -> bool:
    """Is the gap between two medians larger than either's own p10..p90 band? (METHOD: a difference smaller
    than the spread of one version timed twice is noise.)"""
    gap = abs(a.median - b.median)
    return gap > max(a.p90 - a.p10, b.p90 - b.p10)
