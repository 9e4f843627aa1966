"""add_rms_norm references: baseline, float64 golden, schedule reference.

x = x1 + x2 rounded to the input dtype (the residual stream an unfused model keeps), y = rms_norm(x) * gamma.
Returns (y, rstd, x) like torch_npu's npu_add_rms_norm. Normalising the *rounded* sum is deliberate: it is what
the unfused `hidden = residual + hidden; norm(hidden)` pattern computes, so the fused op is a drop-in.
"""

from __future__ import annotations

import torch

from npuport.ascendc_kernels.add_rms_norm.tiling import add_rms_norm_tiling
from npuport.ascendc_kernels.norm_tiling import NormTiling, iter_row_groups
from npuport.cost.roofline import ChipProfile, default_chip, get_chip

Out3 = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def add_rms_norm_reference(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> Out3:
    x = (x1.float() + x2.float()).to(x1.dtype)
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x1.dtype), rstd, x


def add_rms_norm_golden(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> Out3:
    x = (x1.double() + x2.double()).to(x1.dtype)  # the rounding is part of the op's definition
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    return xd * rstd * gamma.double(), rstd, xd


def add_rms_norm_schedule(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6, *,
                          tiling: NormTiling | None = None, chip: ChipProfile | None = None) -> Out3:
    """Pass 1 adds in fp32, rounds, writes x (to GM in the kernel), sums squares of the rounded x; in split mode
    pass 2 re-reads the x chunk it wrote."""
    chip = chip or get_chip(default_chip())
    t = tiling or add_rms_norm_tiling(x1, gamma, eps, chip)
    a, b = x1.reshape(-1, t.h), x2.reshape(-1, t.h)
    y, xs = torch.empty_like(a), torch.empty_like(a)
    rstd = torch.empty(t.rows, dtype=torch.float32)
    inv_h, eps32 = torch.tensor(t.inv_h, dtype=torch.float32), torch.tensor(eps, dtype=torch.float32)
    g32 = gamma.float()
    for group in iter_row_groups(t):
        r0, nr = group[0].row0, group[0].nrows
        acc = torch.zeros(nr, dtype=torch.float32)
        for tile in group:
            cols = slice(tile.col0, tile.col0 + tile.ncols)
            xc = (a[r0:r0 + nr, cols].float() + b[r0:r0 + nr, cols].float()).to(x1.dtype)
            xs[r0:r0 + nr, cols] = xc
            xf = xc.float()
            acc = acc + (xf * xf).sum(-1)
        r = 1.0 / torch.sqrt(acc * inv_h + eps32)
        rstd[r0:r0 + nr] = r
        for tile in group:
            cols = slice(tile.col0, tile.col0 + tile.ncols)
            xf = xs[r0:r0 + nr, cols].float()
            y[r0:r0 + nr, cols] = ((xf * r[:, None]) * g32[cols]).to(x1.dtype)
    shape = x1.shape
    return y.reshape(shape), rstd.reshape(*shape[:-1], 1), xs.reshape(shape)
