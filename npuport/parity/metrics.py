"""Error metrics between a tensor and its reference, from full tensors or from statistics.

Full tensors are compared in float64 on the host. Positions where both sides hold the same NaN / Inf count as
equal; positions where only one does are counted as mismatches and left out of the other metrics, which are
computed over the positions finite on both sides. Conventions for degenerate cases (pinned by tests):
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
from dataclasses import dataclass, field
from typing import Any

import torch

from npuport.parity.stats import Stats

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
    """Metrics of `a` (device under test) against `b` (reference)."""
    if tuple(a.shape) != tuple(b.shape):
        return _problem(f"shape {tuple(a.shape)} vs reference {tuple(b.shape)}", a.numel())
    if a.numel() == 0:
        return ZERO
    x = a.detach().reshape(-1).to(torch.float64)
    y = b.detach().reshape(-1).to(torch.float64)
    return _from_flat(x, y, rtol, atol, _TINY.get(ref_dtype or str(b.dtype).removeprefix("torch."), 1e-300), "full")


def _from_flat(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, tiny: float, basis: str) -> Metrics:
    nan_x, nan_y = torch.isnan(x), torch.isnan(y)
    inf_x, inf_y = torch.isinf(x), torch.isinf(y)
    nan_mismatch = int((nan_x != nan_y).sum())
    inf_mismatch = int(((inf_x | inf_y) & ~(nan_x | nan_y) & (x != y)).sum())
    same_special = (nan_x & nan_y) | (inf_x & inf_y & (x == y))
    finite = torch.isfinite(x) & torch.isfinite(y)
    xf, yf = x[finite], y[finite]
    diff = (xf - yf).abs()
    n = int(finite.sum())
    if n == 0:
        return Metrics(x.numel(), 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, nan_mismatch, inf_mismatch, basis)
    nd, nb, na = float(torch.linalg.vector_norm(diff)), float(torch.linalg.vector_norm(yf)), float(torch.linalg.vector_norm(xf))
    rel_l2 = nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf)
    if nd == 0 or (na == 0 and nb == 0):
        cosine = 1.0
    elif na == 0 or nb == 0:
        cosine = 0.0
    else:
        cosine = max(-1.0, min(1.0, float(torch.dot(xf, yf)) / (na * nb)))
    over = (diff > atol + rtol * yf.abs()).sum() + (~finite & ~same_special).sum()
    return Metrics(
        count=x.numel(), max_abs=float(diff.max()), max_rel=float((diff / yf.abs().clamp_min(tiny)).max()),
        rel_l2=rel_l2, cosine=cosine, rmse=nd / math.sqrt(n), frac_over_rtol=float(over) / x.numel(),
        nan_mismatch=nan_mismatch, inf_mismatch=inf_mismatch, basis=basis)


def stats_metrics(a: Stats, b: Stats, rtol: float, atol: float, ref_dtype: str | None = None) -> Metrics:
    if a.count != b.count:
        return _problem(f"{a.count} elements vs reference {b.count}", a.count, "stats")
    if a.count == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0, 0, "stats")
    nonfinite_mismatch = int(a.nonfinite != b.nonfinite)
    x = torch.tensor(a.sample, dtype=torch.float64)
    y = torch.tensor(b.sample, dtype=torch.float64)
    m = _from_flat(x, y, rtol, atol, _TINY.get(ref_dtype or "", 1e-300), "stats")
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
