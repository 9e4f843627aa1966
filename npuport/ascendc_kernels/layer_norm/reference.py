"""layer_norm references (optional residual add, optional beta): baseline, float64 golden, schedule reference.

x = x + residual (rounded to the input dtype, as the unfused pattern keeps it), mean and biased variance over
the last dim, rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * gamma (+ beta).
Returns (y, mean, rstd, x_sum): mean / rstd fp32 with the last dim 1; x_sum is x + residual when a residual is
given, else a 0-element tensor (nothing is written).
Schedule: full rows use two passes over the tile in UB (sum -> mean, then sum of squared deviations); split rows
combine per-chunk (count, mean, M2) with Chan's formula in fp32, exactly as the kernel's scalar code does.
"""

from __future__ import annotations

import torch

from npuport.ascendc_kernels.layer_norm.tiling import layer_norm_tiling
from npuport.ascendc_kernels.norm_tiling import NormTiling, iter_row_groups
from npuport.cost.roofline import ChipProfile, default_chip, get_chip

Out4 = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
Opt = torch.Tensor | None


def _with_residual(x: torch.Tensor, residual: Opt, wide: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if residual is None:
        return x, x.new_empty(0)
    s = (x.to(wide) + residual.to(wide)).to(x.dtype)
    return s, s


def layer_norm_reference(x: torch.Tensor, gamma: torch.Tensor, beta: Opt = None, residual: Opt = None,
                         eps: float = 1e-5) -> Out4:
    xs, out_sum = _with_residual(x, residual, torch.float32)
    xf = xs.float()
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
    y = (xf - mean) * rstd * gamma.float()
    if beta is not None:
        y = y + beta.float()
    return y.to(x.dtype), mean, rstd, out_sum


def layer_norm_golden(x: torch.Tensor, gamma: torch.Tensor, beta: Opt = None, residual: Opt = None,
                      eps: float = 1e-5) -> Out4:
    xs, out_sum = _with_residual(x, residual, torch.float64)
    xd = xs.double()
    mean = xd.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xd - mean).pow(2).mean(-1, keepdim=True) + eps)
    y = (xd - mean) * rstd * gamma.double()
    if beta is not None:
        y = y + beta.double()
    return y, mean, rstd, out_sum.double()


def layer_norm_schedule(x: torch.Tensor, gamma: torch.Tensor, beta: Opt = None, residual: Opt = None,
                        eps: float = 1e-5, *, tiling: NormTiling | None = None, chip: ChipProfile | None = None) -> Out4:
    chip = chip or get_chip(default_chip())
    t = tiling or layer_norm_tiling(x, gamma, beta, residual, eps, chip)
    a = x.reshape(-1, t.h)
    r_in = residual.reshape(-1, t.h) if residual is not None else None
    y, xs = torch.empty_like(a), torch.empty_like(a)
    mean_o = torch.empty(t.rows, dtype=torch.float32)
    rstd_o = torch.empty(t.rows, dtype=torch.float32)
    f32 = torch.float32
    inv_h, eps32 = torch.tensor(t.inv_h, dtype=f32), torch.tensor(eps, dtype=f32)
    g32 = gamma.float()
    b32 = beta.float() if beta is not None else None
    for group in iter_row_groups(t):
        r0, nr = group[0].row0, group[0].nrows
        rows = slice(r0, r0 + nr)
        n = torch.zeros(nr, dtype=f32)
        mean = torch.zeros(nr, dtype=f32)
        m2 = torch.zeros(nr, dtype=f32)
        for tile in group:  # pass 1
            cols = slice(tile.col0, tile.col0 + tile.ncols)
            xc = a[rows, cols]
            if r_in is not None:
                xc = (xc.float() + r_in[rows, cols].float()).to(x.dtype)
            xs[rows, cols] = xc
            xf = xc.float()
            if not t.split:
                mean = xf.sum(-1) * inv_h
                m2 = (xf - mean[:, None]).pow(2).sum(-1)
                continue
            nc = torch.tensor(float(tile.ncols), dtype=f32)
            mc = xf.sum(-1) / nc
            m2c = (xf - mc[:, None]).pow(2).sum(-1)
            total = n + nc
            delta = mc - mean
            mean = mean + delta * (nc / total)
            m2 = m2 + m2c + delta * delta * (n * nc / total)
            n = total
        rstd = 1.0 / torch.sqrt(m2 * inv_h + eps32)
        mean_o[rows], rstd_o[rows] = mean, rstd
        for tile in group:  # pass 2
            cols = slice(tile.col0, tile.col0 + tile.ncols)
            xf = xs[rows, cols].float()
            yc = ((xf - mean[:, None]) * rstd[:, None]) * g32[cols]
            if b32 is not None:
                yc = yc + b32[cols]
            y[rows, cols] = yc.to(x.dtype)
    stat_shape = (*x.shape[:-1], 1)
    x_sum = xs.reshape(x.shape) if residual is not None else x.new_empty(0)
    return y.reshape(x.shape), mean_o.reshape(stat_shape), rstd_o.reshape(stat_shape), x_sum
