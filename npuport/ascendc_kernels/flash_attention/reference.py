"""Flash-attention forward references: the unfused PyTorch baseline, the float64 golden, the schedule reference.

Semantics (the op's definition, shared by all three):
- q [B,Nq,Sq,D] (BNSD) or [B,Sq,Nq,D] (BSND); k, v with Nkv heads, Nq % Nkv == 0 (GQA: q head n reads kv
  head n // (Nq/Nkv)); out has q's layout and dtype; lse [B,Nq,Sq] fp32 = logsumexp of the scaled, masked
  scores (for a later backward).
- scale defaults to 1/sqrt(D) (SDPA's default, not npu_fusion_attention's 1.0).
- is_causal: top-left aligned, key j visible to query i iff j <= i (SDPA's `is_causal`).
- mask: bool, True = attend (SDPA polarity, the opposite of npu_fusion_attention), or additive float;
  broadcastable to [B,Nq,Sq,Skv]. Not together with is_causal.
- A row with no visible key (fully masked) gives out = 0 and lse = -inf (no NaN). A finite additive mask
  (e.g. finfo.min) is not "no visible key": such a row averages v, as SDPA does.
Schedule reference: walks q blocks and the KV steps of `kv_steps` in the kernel's precision: S = Q K^T with
fp16/bf16 operands and fp32 accumulation, fp32 scale, mask add, online softmax (running max with a -inf-safe
shift, rescale factor alpha, running sum of the fp32 P), P rounded to the input dtype before the P V matmul
(fp32 accumulation), final out = acc / max(l, tiny), lse = m + log(l). It vectorises over (b, head), which is
numerically the same as the kernel's per-unit loop because units never interact.
"""

from __future__ import annotations

import torch

from npuport.ascendc_kernels.flash_attention.tiling import (
    MASK_ADDITIVE,
    MASK_CAUSAL,
    MASK_NONE,
    FaTiling,
    Layout,
    causal_offset,
    causal_table,
    kv_steps,
    plan_flash_attention,
)
from npuport.ascendc_kernels.tiling_base import dtype_name
from npuport.cost.roofline import ChipProfile, default_chip, get_chip
from npuport.errors import NpuportError

Opt = torch.Tensor | None
TINY = 1e-30


def to_bnsd(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    if layout not in ("BNSD", "BSND"):
        raise NpuportError("flash_attention: unknown layout", "BNSD or BSND", layout)
    return t if layout == "BNSD" else t.transpose(1, 2)


def additive_mask(mask: Opt, b: int, n: int, sq: int, skv: int, dtype: torch.dtype) -> Opt:
    """The mask as an additive tensor broadcastable to [B,N,Sq,Skv] (bool True = attend -> 0, else -inf)."""
    if mask is None:
        return None
    if mask.dim() > 4:
        raise NpuportError("flash_attention: mask has too many dims", "<= 4, broadcastable to [B,N,Sq,Skv]",
                           str(tuple(mask.shape)))
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    try:
        torch.broadcast_shapes(m.shape, (b, n, sq, skv))
    except RuntimeError as exc:
        raise NpuportError("flash_attention: mask does not broadcast", f"to [{b},{n},{sq},{skv}]",
                           str(tuple(mask.shape))) from exc
    if m.dtype == torch.bool:
        return torch.where(m, torch.zeros((), dtype=dtype), torch.full((), float("-inf"), dtype=dtype))
    return m.to(dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Opt, is_causal: bool,
               scale: float | None, layout: Layout, wide: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    qb, kb, vb = (to_bnsd(t, layout).to(wide) for t in (q, k, v))
    b, nq, sq, d = qb.shape
    nkv, skv = kb.shape[1], kb.shape[2]
    if nq % nkv:
        raise NpuportError("flash_attention: query heads must be a multiple of kv heads", "Nq % Nkv == 0",
                           f"Nq={nq}, Nkv={nkv}")
    if is_causal and mask is not None:
        raise NpuportError("flash_attention: give is_causal or mask, not both", "one of them", "both")
    kb, vb = kb.repeat_interleave(nq // nkv, 1), vb.repeat_interleave(nq // nkv, 1)
    s = (qb @ kb.transpose(-1, -2)) * (scale if scale is not None else d ** -0.5)
    if is_causal:
        s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool).triu(1), float("-inf"))
    am = additive_mask(mask, b, nq, sq, skv, wide)
    if am is not None:
        s = s + am
    # normalise by the sum, not by exp(s - lse): with a huge finite mask value (bf16's finfo.min) the log of the
    # row length is absorbed into lse and exp(s - lse) would not sum to 1
    m = s.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), torch.zeros((), dtype=wide), m)  # fully masked rows: exp(-inf) = 0
    e = torch.exp(s - m)
    denom = e.sum(-1, keepdim=True)
    lse = (m + torch.log(denom)).squeeze(-1)  # log(0) = -inf on fully masked rows
    return to_bnsd((e / denom.clamp_min(TINY)) @ vb, layout), lse


def flash_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Opt = None,
                              is_causal: bool = False, scale: float | None = None,
                              layout: Layout = "BNSD") -> tuple[torch.Tensor, torch.Tensor]:
    """The trusted (unfused, fp32) baseline."""
    out, lse = _attention(q, k, v, mask, is_causal, scale, layout, torch.float32)
    return out.to(q.dtype).contiguous(), lse


def flash_attention_golden(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Opt = None,
                           is_causal: bool = False, scale: float | None = None,
                           layout: Layout = "BNSD") -> tuple[torch.Tensor, torch.Tensor]:
    return _attention(q, k, v, mask, is_causal, scale, layout, torch.float64)


def flash_attention_tiling(q: torch.Tensor, k: torch.Tensor, mask: Opt, is_causal: bool, scale: float | None,
                           layout: Layout, chip: ChipProfile, **kw: object) -> FaTiling:
    qb, kb = to_bnsd(q, layout), to_bnsd(k, layout)
    b, nq, sq, d = qb.shape
    kind = MASK_CAUSAL if is_causal else (MASK_ADDITIVE if mask is not None else MASK_NONE)
    return plan_flash_attention(b, nq, kb.shape[1], sq, kb.shape[2], d, dtype_name(q), layout, kind, chip,
                                scale=scale, **kw)  # type: ignore[arg-type]


def flash_attention_schedule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Opt = None,
                             is_causal: bool = False, scale: float | None = None, layout: Layout = "BNSD", *,
                             tiling: FaTiling | None = None,
                             chip: ChipProfile | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    chip = chip or get_chip(default_chip())
    t = tiling or flash_attention_tiling(q, k, mask, is_causal, scale, layout, chip)
    f32 = torch.float32
    qb, kb, vb = (to_bnsd(x, layout) for x in (q, k, v))
    heads = torch.arange(t.heads_q) // t.group
    kx, vx = kb[:, heads].to(f32), vb[:, heads].to(f32)  # operands are exact in fp32; products accumulate in fp32
    am = additive_mask(mask, t.batch, t.heads_q, t.sq, t.skv, f32)
    table = causal_table(t) if t.mask_kind == MASK_CAUSAL else None
    scale32 = torch.tensor(t.scale, dtype=f32)
    out = torch.empty(t.batch, t.heads_q, t.sq, t.d, dtype=q.dtype)
    lse = torch.empty(t.batch, t.heads_q, t.sq, dtype=f32)
    for qblk in range(t.q_blocks):
        q0 = qblk * t.q_tile
        rows = slice(q0, min(q0 + t.q_tile, t.sq))
        nr = rows.stop - q0
        qt = qb[:, :, rows].to(f32)
        m = torch.full((t.batch, t.heads_q, nr), float("-inf"), dtype=f32)
        l = torch.zeros_like(m)
        acc = torch.zeros(t.batch, t.heads_q, nr, t.d, dtype=f32)
        for step in kv_steps(t, qblk):
            cols = slice(step.k0, step.k0 + step.cols)
            s = (qt @ kx[:, :, cols].transpose(-1, -2)) * scale32
            if am is not None:
                s = s + am[..., rows, cols]
            if table is not None and step.diagonal:
                off = causal_offset(t, q0, step.k0)
                s = s + table[:nr, off:off + step.cols]
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = torch.where(m_new == float("-inf"), torch.zeros((), dtype=f32), m_new)
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe[..., None])
            l = l * alpha + p.sum(-1)
            pv = p.to(q.dtype).to(f32) @ vx[:, :, cols]
            acc = acc * alpha[..., None] + pv
            m = m_new
        m_safe = torch.where(m == float("-inf"), torch.zeros((), dtype=f32), m)
        out[:, :, rows] = (acc * (1.0 / torch.clamp_min(l, TINY))[..., None]).to(q.dtype)
        lse[:, :, rows] = m_safe + torch.log(l)
    return to_bnsd(out, layout).contiguous(), lse
