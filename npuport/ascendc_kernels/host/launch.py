"""NPU dispatch: Python tiling -> packed struct -> the compiled kernel on torch_npu's current stream.

Runs only under the PrivateUse1 dispatch key, i.e. with tensors already on an NPU; the extension call is the
one place device memory is touched. Output tensors are allocated here so the C++ side stays a thin launcher.
"""

from __future__ import annotations

import os

import torch

from npuport.ascendc_kernels.add_rms_norm.tiling import add_rms_norm_tiling
from npuport.ascendc_kernels.flash_attention.reference import additive_mask, flash_attention_tiling, to_bnsd
from npuport.ascendc_kernels.flash_attention.tiling import MASK_ADDITIVE, MASK_CAUSAL, causal_table
from npuport.ascendc_kernels.host.loader import load_extension
from npuport.ascendc_kernels.layer_norm.tiling import layer_norm_tiling
from npuport.ascendc_kernels.rms_norm.tiling import rms_norm_tiling
from npuport.cost.roofline import ChipProfile, default_chip, get_chip

CHIP_ENV = "NPUPORT_CHIP"  # chip profile whose numbers the tiling uses on this machine


def _chip() -> ChipProfile:
    return get_chip(os.environ[CHIP_ENV] if CHIP_ENV in os.environ else default_chip())


def _blob(packed: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(packed), dtype=torch.uint8)  # host memory: passed by value to the kernel


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    ext = load_extension()
    x, gamma = x.contiguous(), gamma.contiguous()
    t = rms_norm_tiling(x, gamma, eps, _chip())
    y = torch.empty_like(x)
    rstd = x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)
    ext.rms_norm(x, gamma, y, rstd, _blob(t.pack()), t.used_cores)
    return y, rstd


def add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, ...]:
    ext = load_extension()
    x1, x2, gamma = x1.contiguous(), x2.contiguous(), gamma.contiguous()
    t = add_rms_norm_tiling(x1, gamma, eps, _chip())
    y, xs = torch.empty_like(x1), torch.empty_like(x1)
    rstd = x1.new_empty((*x1.shape[:-1], 1), dtype=torch.float32)
    ext.add_rms_norm(x1, x2, gamma, y, rstd, xs, _blob(t.pack()), t.used_cores)
    return y, rstd, xs


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None,
               residual: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, ...]:
    ext = load_extension()
    x, gamma = x.contiguous(), gamma.contiguous()
    t = layer_norm_tiling(x, gamma, beta, residual, eps, _chip())
    y = torch.empty_like(x)
    mean = x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)
    rstd = torch.empty_like(mean)
    xs = torch.empty_like(x) if residual is not None else x.new_empty(0)
    # absent optional inputs travel as 0-element tensors; the kernel reads has_beta / has_residual
    ext.layer_norm(x, gamma, beta.contiguous() if beta is not None else gamma.new_empty(0),
                   residual.contiguous() if residual is not None else x.new_empty(0), y, mean, rstd, xs,
                   _blob(t.pack()), t.used_cores)
    return y, mean, rstd, xs


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                    is_causal: bool = False, scale: float | None = None,
                    layout: str = "BNSD") -> tuple[torch.Tensor, torch.Tensor]:
    ext = load_extension()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    chip = _chip()
    t = flash_attention_tiling(q, k, mask, is_causal, scale, layout, chip)  # type: ignore[arg-type]
    if t.mask_kind == MASK_ADDITIVE:
        am = additive_mask(mask, t.batch, t.heads_q, t.sq, t.skv, torch.float32)
        assert am is not None
        bm, nm = am.shape[0], am.shape[1]
        am = am.expand(bm, nm, t.sq, t.skv).contiguous()
        mstr = (nm * t.sq * t.skv if bm > 1 else 0, t.sq * t.skv if nm > 1 else 0, t.skv)
        t = flash_attention_tiling(q, k, mask, is_causal, scale, layout, chip,  # type: ignore[arg-type]
                                   mask_strides=mstr)
    elif t.mask_kind == MASK_CAUSAL:
        am = causal_table(t).to(q.device)
        t = flash_attention_tiling(q, k, mask, is_causal, scale, layout, chip,  # type: ignore[arg-type]
                                   mask_strides=(0, 0, am.shape[1]))
    else:
        am = q.new_empty(0, dtype=torch.float32)
    b, n, s, _ = to_bnsd(q, layout).shape  # type: ignore[arg-type]
    out = torch.empty_like(q)
    lse = q.new_empty((b, n, s), dtype=torch.float32)
    workspace = q.new_empty(t.workspace_per_core * t.used_cores, dtype=torch.uint8)
    ext.flash_attention(q, k, v, am.to(q.device), out, lse, workspace, _blob(t.pack()), t.used_cores)
    return out, lse
