"""layer_norm performance model for a chip profile (an estimate, see perf_base)."""

from __future__ import annotations

from npuport.ascendc_kernels.norm_perf import norm_perf
from npuport.ascendc_kernels.perf_base import PerfEstimate
from npuport.cost.roofline import ChipProfile


def layer_norm_perf(rows: int, hidden: int, dtype: str, chip: ChipProfile, has_residual: bool = False, has_beta: bool = True) -> PerfEstimate:
    return norm_perf("layer_norm", rows, hidden, dtype, chip, has_residual=has_residual, has_beta=has_beta)
