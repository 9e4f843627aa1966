"""Comparing a kernel's (or schedule reference's) outputs with the float64 golden, with explicit tolerances.

A result is truthy when every output passes; its text gives the max errors, the tolerance used and the
smallest atol that would have passed at the same rtol (so a failure says how far off it is).
Tolerances are per output dtype (mappings/kernels.yaml `tolerances`): the schedule reference rounds each output
once from fp32, so the budget is a few units in the last place of that dtype plus fp32 accumulation error;
attention's P is rounded to the input dtype before P V, which the looser attention entries cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from npuport.ascendc_kernels.tiling_base import dtype_name
from npuport.mappings import load_checked


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol={self.atol:g}, rtol={self.rtol:g}"


def load_tolerances() -> dict[tuple[str, str], Tolerance]:
    """(kind, output dtype) -> tolerance from mappings/kernels.yaml. 'norm' = y of the norms, 'stat' = fp32 rstd / mean / lse."""
    raw = load_checked("kernels.yaml")["tolerances"]
    return {(kind, dtype): Tolerance(float(v["atol"]), float(v["rtol"]))
            for kind, table in raw.items() for dtype, v in table.items() if dtype != "source"}


TOLERANCES: dict[tuple[str, str], Tolerance] = load_tolerances()


def tolerance(kind: str, dtype: torch.dtype | str) -> Tolerance:
    return TOLERANCES[(kind, dtype_name(dtype))]


@dataclass(frozen=True)
class OutputCompare:
    name: str
    max_abs: float
    max_rel: float
    tol: Tolerance
    needed_atol: float  # the smallest atol that passes at tol.rtol
    mismatch: str  # '' or why shapes / non-finite patterns differ

    def __bool__(self) -> bool:
        return not self.mismatch and self.needed_atol <= self.tol.atol

    def __str__(self) -> str:
        status = "PASS" if self else "FAIL"
        if self.mismatch:
            return f"{status} {self.name}: {self.mismatch}"
        return (f"{status} {self.name}: max_abs={self.max_abs:.3g} max_rel={self.max_rel:.3g} ({self.tol}; "
                f"would pass with atol>={self.needed_atol:.3g})")


@dataclass(frozen=True)
class CompareResult:
    case: str
    outputs: tuple[OutputCompare, ...]

    def __bool__(self) -> bool:
        return all(self.outputs)

    def __str__(self) -> str:
        return f"{'PASS' if self else 'FAIL'} {self.case}\n" + "\n".join(f"  {o}" for o in self.outputs)


def compare_output(name: str, got: torch.Tensor, golden: torch.Tensor, tol: Tolerance) -> OutputCompare:
    """Non-finite values must match exactly in position and value (e.g. lse = -inf on fully masked rows)."""
    if tuple(got.shape) != tuple(golden.shape):
        return OutputCompare(name, math.inf, math.inf, tol, math.inf,
                             f"shape {tuple(got.shape)} != golden {tuple(golden.shape)}")
    g, e = got.double(), golden.double()
    fin_g, fin_e = torch.isfinite(g), torch.isfinite(e)
    if not torch.equal(fin_g, fin_e) or not torch.equal(g[~fin_e], e[~fin_e]):
        bad = int((fin_g != fin_e).sum()) or int((g[~fin_e] != e[~fin_e]).sum())
        return OutputCompare(name, math.inf, math.inf, tol, math.inf, f"{bad} non-finite values differ")
    if not fin_e.any():
        return OutputCompare(name, 0.0, 0.0, tol, 0.0, "")
    diff = (g - e)[fin_e].abs()
    ref = e[fin_e].abs()
    needed = float((diff - tol.rtol * ref).clamp_min(0).max())
    max_rel = float((diff / ref.clamp_min(1e-30)).max())
    return OutputCompare(name, float(diff.max()), max_rel, tol, needed, "")
