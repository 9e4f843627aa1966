"""add_rms_norm tiling: the shared row-norm plan (norm_tiling.py) with this op's buffer set."""

from __future__ import annotations

import torch

from npuport.ascendc_kernels.norm_tiling import NormTiling, plan_norm
from npuport.ascendc_kernels.tiling_base import dtype_name
from npuport.cost.roofline import ChipProfile


def add_rms_norm_tiling(x1: torch.Tensor, gamma: torch.Tensor, eps: float, chip: ChipProfile,
                        **kw: object) -> NormTiling:
    h = x1.shape[-1]
    return plan_norm("add_rms_norm", x1.numel() // h, h, dtype_name(x1), chip, gamma_dtype=dtype_name(gamma), eps=eps,
                     has_residual=True, **kw)  # type: ignore[arg-type]
