"""Error metrics between a tensor and its reference, from full tensors or from statistics.

Full tensors are compared on the host in one pass of chunks, in float32 where that loses nothing and in float64
otherwise (sweep.py). Positions where both sides hold the same NaN / Inf count as equal; positions where only one
does are counted as mismatches and left out of the other metrics, which are computed over the positions finite on
both sides. Conventions for degenerate cases (pinned by tests):
- empty tensors: every error 0, cosine 1;
- rel_l2 = |a - b| / |b|; with |b| = 0 it is 0 when a == b, else inf;
- cosine: 1 when both norms are 0, 0 when exactly one is;
- max_rel = max |a - b| / max(|b|, tiny) with tiny the smallest normal of the reference dtype.

From statistics (a stats-only artifact): the 64 samples sit at the same positions on every device, so the
elementwise metrics are computed over them; rel_l2 is then the larger of the sample estimate and the relative
difference of the norms (a lower bound of the true rel_l2, by the triangle inequality).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from npuport.parity.stats import Stats
from npuport.parity.sweep import Sums, cosine, exact_sums, sweep

_TINY = {"float16": 6.1e-5, "bfloat16": 1.18e-38, "float32": 1.18e-38, "float64": 2.2e-308}


@dataclass(frozen=True)
class Metrics:
    count: int
    max_abs: float
    max_rel: float
    rel_l2: float
    cosine: float
    rmse: float
    frac_over_rtol: float
    nan_mismatch: int
    inf_mismatch: int
    basis: str = "full"  # full | stats
    problem: str | None = None  # shape / dtype mismatch: no numbers are comparable
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: _num(getattr(self, k)) for k in
                               ("count", "max_abs", "max_rel", "rel_l2", "cosine", "rmse", "frac_over_rtol", "nan_mismatch", "inf_mismatch")}
        out["basis"] = self.basis
        if self.problem:
            out["problem"] = self.problem
        out.update({k: _num(v) for k, v in self.extra.items()})
        return out


def _num(v: float | int) -> float | int | str:
    """JSON has no NaN / Inf: they are written as strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


ZERO = Metrics(0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0, 0)


def tensor_metrics(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, ref_dtype: str | None = None) -> Metrics:
    """Metrics of `a` (device under test) against `b` (reference), in one chunked pass (sweep.py)."""
    if tuple(a.shape) != tuple(b.shape):
        return _problem(f"shape {tuple(a.shape)} vs reference {tuple(b.shape)}", a.numel())
    if a.numel() == 0:
        return ZERO
    tiny = _TINY.get(ref_dtype or str(b.dtype).removeprefix("torch."), 1e-300)
    return _from_sums(sweep(a, b, rtol, atol, tiny), "full")


def _from_sums(s: Sums, basis: str) -> Metrics:
    if s.finite == 0:
        return Metrics(s.count, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, s.nan_mismatch, s.inf_mismatch, basis)
    nd, nb, na = math.sqrt(s.sd), math.sqrt(s.sb), math.sqrt(s.sa)
    rel_l2 = nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf)
    if nd == 0 or (na == 0 and nb == 0):
        cos = 1.0
    elif na == 0 or nb == 0:
        cos = 0.0
    else:
        cos = cosine(s.sa, s.sb, s.sd, s.sab)
    return Metrics(count=s.count, max_abs=s.max_abs, max_rel=s.max_rel, rel_l2=rel_l2, cosine=cos,
                   rmse=nd / math.sqrt(s.finite), frac_over_rtol=s.over / s.count, nan_mismatch=s.nan_mismatch,
                   inf_mismatch=s.inf_mismatch, basis=basis)


def stats_metrics(a: Stats, b: Stats, rtol: float, atol: float, ref_dtype: str | None = None) -> Metrics:
    return stats_metrics_many([(a, b, rtol, atol, ref_dtype)])[0]


def stats_metrics_many(pairs: Sequence[tuple[Stats, Stats, float, float, str | None]]) -> list[Metrics]:
    """stats_metrics of many pairs: the samples of all of them in one (pairs, SAMPLE) float64 sweep, since a few
    thousand entries of 64 samples each cost far more in per-entry tensor operations than in arithmetic."""
    width = max((len(a.sample) for a, b, *_ in pairs if a.count == b.count and a.count), default=0)
    rows = [(a, b, rtol, atol, dt) for a, b, rtol, atol, dt in pairs if a.count == b.count and a.count]
    sums: list[list[float]] = []
    if rows:
        pad = (math.nan,) * width
        x = torch.tensor([a.sample if len(a.sample) == width else a.sample + pad[len(a.sample):] for a, *_ in rows],
                         dtype=torch.float64)
        y = torch.tensor([b.sample if len(b.sample) == width else b.sample + pad[len(b.sample):] for _, b, *_ in rows],
                         dtype=torch.float64)
        col = lambda v: torch.tensor(v, dtype=torch.float64)[:, None]  # noqa: E731
        rtol, atol = col([r[2] for r in rows]), col([r[3] for r in rows])
        tiny = col([_TINY.get(r[4] or "", 1e-300) for r in rows])
        # padding is NaN on both sides at the same positions: equal specials, outside every sum. Blocks of fewer
        # elements than torch's parallel grain (32768) run on one thread: no barrier to wait at on a busy machine
        step = max(1, 32_000 // max(1, width))
        sums = torch.cat([exact_sums(x[i: i + step], y[i: i + step], rtol[i: i + step], atol[i: i + step], tiny[i: i + step])
                          for i in range(0, len(rows), step)]).tolist()
    found = iter(sums)
    return [_stats_pair(a, b, Sums.of_row(len(a.sample), next(found))) if a.count == b.count and a.count
            else _stats_degenerate(a, b) for a, b, *_ in pairs]


def _stats_degenerate(a: Stats, b: Stats) -> Metrics:
    if a.count != b.count:
        return _problem(f"{a.count} elements vs reference {b.count}", a.count, "stats")
    return Metrics(0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0, 0, "stats")


def _stats_pair(a: Stats, b: Stats, s: Sums) -> Metrics:
    nonfinite_mismatch = int(a.nonfinite != b.nonfinite)
    m = _from_sums(s, "stats")
    norm_rel = abs(a.norm - b.norm) / b.norm if b.norm > 0 else (0.0 if a.norm == 0 else math.inf)
    if not (math.isfinite(a.norm) and math.isfinite(b.norm)):
        norm_rel = 0.0 if a.nonfinite and b.nonfinite else math.inf
    exact = a.checksum == b.checksum and a.row() == b.row()
    rel_l2 = 0.0 if exact else max(m.rel_l2, norm_rel)
    extra = {"norm_rel": norm_rel, "mean_abs_diff": abs(a.mean - b.mean), "max_diff": abs(a.max - b.max),
             "min_diff": abs(a.min - b.min), "checksum_equal": float(a.checksum == b.checksum)}
    return Metrics(a.count, m.max_abs, m.max_rel, rel_l2, m.cosine, m.rmse, m.frac_over_rtol,
                   max(m.nan_mismatch, nonfinite_mismatch), m.inf_mismatch, "stats", extra=extra)


def _problem(text: str, count: int, basis: str = "full") -> Metrics:
    return Metrics(count, math.inf, math.inf, math.inf, 0.0, math.inf, 1.0, 0, 0, basis, problem=text)
