"""add_rms_norm performance model for a chip profile (an estimate, see perf_base)."""

from __future__ import annotations

from npuport.ascendc_kernels.norm_perf import norm_perf
from npuport.ascendc_kernels.perf_base import PerfEstimate
from npuport.cost.roofline import ChipProfile


def add_rms_norm_perf(rows: int, hidden: int, dtype: str, chip: ChipProfile) -> PerfEstimate:
    return norm_perf("add_rms_norm", rows, hidden, dtype, chip)
