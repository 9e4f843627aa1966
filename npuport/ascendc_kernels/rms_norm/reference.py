"""rms_norm references: the PyTorch baseline, the float64 golden, and the schedule reference.

y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps), statistics in fp32 (torch_npu's npu_rms_norm returns
the same pair). rstd has x's shape with the last dim set to 1, in fp32.
The schedule reference walks the kernel's tiles (`iter_row_groups`) in the kernel's precision: cast the tile
to fp32, sum of squares per row (per column chunk in split mode, accumulated in fp32), scale by the fp32
1/h the tiling carries, then y = (x * rstd) * gamma in fp32 and one rounding to the output dtype.
"""

from __future__ import annotations

import torch

from npuport.ascendc_kernels.norm_tiling import NormTiling, iter_row_groups
from npuport.ascendc_kernels.rms_norm.tiling import rms_norm_tiling
from npuport.cost.roofline import ChipProfile, default_chip, get_chip


def rms_norm_reference(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """The trusted baseline (what CPU / CUDA dispatch runs)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def rms_norm_golden(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 golden; outputs stay float64 (rounding them would hide half the error)."""
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    return xd * rstd * gamma.double(), rstd


def rms_norm_schedule(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6, *, tiling: NormTiling | None = None,
                      chip: ChipProfile | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Walk the kernel's tiles; returns (y, rstd) like the op."""
    chip = chip or get_chip(default_chip())
    t = tiling or rms_norm_tiling(x, gamma, eps, chip)
    x2 = x.reshape(-1, t.h)
    y = torch.empty_like(x2)
    rstd = torch.empty(t.rows, dtype=torch.float32)
    inv_h, eps32 = torch.tensor(t.inv_h, dtype=torch.float32), torch.tensor(eps, dtype=torch.float32)
    g32 = gamma.float()
    for group in iter_row_groups(t):
        r0, nr = group[0].row0, group[0].nrows
        acc = torch.zeros(nr, dtype=torch.float32)
        for tile in group:  # pass 1: statistics (one chunk = the whole row when not split)
            xf = x2[r0:r0 + nr, tile.col0:tile.col0 + tile.ncols].float()
            acc = acc + (xf * xf).sum(-1)
        r = 1.0 / torch.sqrt(acc * inv_h + eps32)
        rstd[r0:r0 + nr] = r
        for tile in group:  # pass 2: normalise
            cols = slice(tile.col0, tile.col0 + tile.ncols)
            xf = x2[r0:r0 + nr, cols].float()
            y[r0:r0 + nr, cols] = ((xf * r[:, None]) * g32[cols]).to(x.dtype)
    return y.reshape(x.shape), rstd.reshape(*x.shape[:-1], 1)
