"""Shape functions (Meta kernels) for the torch_npu custom ops an LLM port typically calls.

Written from the ops' documented input/output contracts, not from torch_npu's code. They only allocate outputs
of the right shape and dtype, so a model that already calls torch_npu.npu_* can be traced on fake tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

META: dict[str, Callable[..., Any]] = {}


def meta(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the shape function of npu::<name>; a second registration of the same name is a bug."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in META:
            raise RuntimeError(f"duplicate meta kernel for npu::{name}")
        META[name] = fn
        return fn

    return wrap


def _like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return t.new_empty(t.shape, dtype=dtype or t.dtype)


def _rstd(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    # one float32 statistic per normalized row: the gamma dims collapse to 1
    shape = list(x.shape[: x.dim() - gamma.dim()]) + [1] * gamma.dim()
    return x.new_empty(shape, dtype=torch.float32)


@meta("npu_rms_norm")
def _rms_norm(x, gamma, epsilon=1e-6):
    return _like(x), _rstd(x, gamma)


@meta("npu_rms_norm_backward")
def _rms_norm_backward(dy, x, gamma, rstd):
    return _like(x), _like(gamma, torch.float32)


@meta("npu_add_rms_norm")
def _add_rms_norm(x1, x2, gamma, epsilon=1e-6):
    return _like(x1), _rstd(x1, gamma), _like(x1)


def _halve(x: torch.Tensor, dim: int) -> list[int]:
    shape = list(x.shape)
    torch._check(shape[dim] % 2 == 0, lambda: f"npu swiglu/geglu: dim {dim} of {shape} must be even")
    shape[dim] //= 2
    return shape


@meta("npu_swiglu")
def _swiglu(x, dim=-1):
    return x.new_empty(_halve(x, dim))


@meta("npu_swiglu_backward")
def _swiglu_backward(grad_output, x, dim=-1):
    return _like(x)


@meta("npu_geglu")
def _geglu(x, dim=-1, approximate=1, activate_left=False):
    shape = _halve(x, dim)
    return x.new_empty(shape), x.new_empty(shape)


for _name in ("npu_gelu", "npu_silu", "npu_format_cast", "npu_incre_flash_attention", "npu_prompt_flash_attention"):
    meta(_name)(lambda x, *args, **kwargs: _like(x))


@meta("npu_rotary_mul")
def _rotary_mul(x, r1, r2, rotary_mode="half", rotate=None):
    return _like(x)


@meta("npu_rotary_mul_backward")
def _rotary_mul_backward(grad, x, r1, r2, rotary_mode="half"):
    return _like(x), _like(r1), _like(r2)


@meta("npu_apply_rotary_pos_emb")
def _apply_rotary_pos_emb(query, key, cos, sin, layout="BSH", rotary_mode="half"):
    return _like(query), _like(key)


def _bns(q: torch.Tensor, layout: str, head_num: int) -> tuple[list[int], int]:
    """(batch, heads, seq) prefix of the softmax statistics, and the query's sequence length."""
    if layout == "BSH":
        return [q.shape[0], head_num, q.shape[1]], q.shape[1]
    if layout == "SBH":
        return [q.shape[1], head_num, q.shape[0]], q.shape[0]
    if layout == "BSND":
        return [q.shape[0], q.shape[2], q.shape[1]], q.shape[1]
    if layout == "BNSD":
        return [q.shape[0], q.shape[1], q.shape[2]], q.shape[2]
    if layout == "TND":
        return [q.shape[0], q.shape[1]], q.shape[0]
    raise ValueError(f"npu_fusion_attention: unknown input_layout {layout!r}")


def _attention_out(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, head_num: int) -> torch.Tensor:
    if layout in ("BSH", "SBH"):  # hidden = heads x head_dim; value may have its own head_dim
        head_dim = q.shape[-1] // head_num
        kv_heads = max(k.shape[-1] // max(head_dim, 1), 1)
        return q.new_empty(list(q.shape[:-1]) + [head_num * (v.shape[-1] // kv_heads)])
    return q.new_empty(list(q.shape[:-1]) + [v.shape[-1]])


@meta("npu_fusion_attention")
def _fusion_attention(query, key, value, head_num, input_layout, *args, **kwargs):
    prefix, _ = _bns(query, input_layout, head_num)
    stats = query.new_empty(prefix + [8], dtype=torch.float32)  # softmax max / sum, 8 lanes per row
    return (_attention_out(query, key, value, input_layout, head_num), stats, query.new_empty(prefix + [8], dtype=torch.float32),
            query.new_empty([0]), 0, 0, 0)


@meta("npu_fusion_attention_grad")
def _fusion_attention_grad(query, key, value, dy, head_num, input_layout, *args, **kwargs):
    return _like(query), _like(key), _like(value), query.new_empty([0]), query.new_empty([0])


@meta("npu_fused_infer_attention_score")
def _fused_infer_attention_score(query, key, value, *args, **kwargs):
    return _like(query), query.new_empty([1], dtype=torch.float32)


@meta("npu_moe_gating_top_k_softmax")
def _moe_gating_top_k_softmax(x, finished=None, k=1):
    shape = list(x.shape[:-1]) + [k]
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int32), x.new_empty(shape, dtype=torch.int32)


@meta("npu_dropout_with_add_softmax")
def _dropout_with_add_softmax(x, x1, alpha, prob, dim):
    return _like(x, torch.uint8), _like(x1), _like(x1)
