"""Flash-attention forward performance model for a chip profile (an estimate, see perf_base).

Counts come from the tiling itself (visible KV steps per q block, padded tile sizes), so causal block skipping
and the wasted half of diagonal blocks are in the numbers. HBM bytes assume K/V are read from HBM once per
(batch, kv head) and then hit L2 (192 MiB on 910B; a head's K+V at S=4096, D=128 is 2 MiB); the P / S
round trips through the GM workspace are L2 traffic and not counted as HBM.
"""

from __future__ import annotations

from npuport.ascendc_kernels.flash_attention.tiling import (
    MASK_ADDITIVE,
    MASK_CAUSAL,
    MASK_NONE,
    kv_steps,
    plan_flash_attention,
)
from npuport.ascendc_kernels.perf_base import PerfEstimate, estimate
from npuport.ascendc_kernels.tiling_base import align_up
from npuport.cost.roofline import ChipProfile

_SCORE_PASSES = 7  # scale, fold-max, subtract max, exp, fold-sum, cast to fp16/bf16, pad fill
_OUT_PASSES = 2  # acc * alpha, acc + P V


def flash_attention_perf(batch: int, heads_q: int, heads_kv: int, sq: int, skv: int, d: int, dtype: str,
                         chip: ChipProfile, *, mask: str = "causal", layout: str = "BNSD") -> PerfEstimate:
    kind = {"none": MASK_NONE, "causal": MASK_CAUSAL, "additive": MASK_ADDITIVE, "bool": MASK_ADDITIVE}[mask]
    t = plan_flash_attention(batch, heads_q, heads_kv, sq, skv, d, dtype, layout, kind, chip)  # type: ignore[arg-type]
    heads = batch * heads_q
    cube = vec = 0.0
    steps_total = 0
    for qb in range(t.q_blocks):
        rows = min(t.q_tile, sq - qb * t.q_tile)
        rows_p = align_up(rows, 16)
        for st in kv_steps(t, qb):
            cols_p = align_up(st.cols, 16)
            cube += 4.0 * rows_p * cols_p * t.d_pad
            masked = kind == MASK_ADDITIVE or st.diagonal
            vec += (_SCORE_PASSES + masked) * rows * t.kv_tile + _OUT_PASSES * rows * t.d_pad
            steps_total += 1
        vec += 3 * rows * t.d_pad  # finalize: reciprocal-scale, cast, lse
    cube, vec, steps_total = cube * heads, vec * heads, steps_total * heads
    elem = 2
    hbm = (2 * batch * heads_q * sq * d * elem  # q in, out
           + 2 * batch * heads_kv * skv * d * elem  # k, v once per kv head (L2 reuse assumed)
           + batch * heads_q * sq * 4  # lse
           + (batch * sq * skv * 4 if kind == MASK_ADDITIVE else 0))  # a [B,1,Sq,Skv] fp32 additive mask
    steps_per_core = steps_total / t.used_cores
    return estimate(
        "flash_attention", f"B={batch} Nq={heads_q} Nkv={heads_kv} Sq={sq} Skv={skv} D={d} {mask} {layout}",
        dtype, chip, hbm_bytes=hbm, vector_ops=vec, cube_flops=cube, syncs_per_core=4 * steps_per_core,
        cube_vector_serial=True,
        extra=(f"tiling: q_tile={t.q_tile}, kv_tile={t.kv_tile}, {t.used_cores} vector cores, "
               f"{steps_total} KV steps", "K/V read from HBM once per kv head, then L2 (assumed)",
               "cube and vector of one vector core do not overlap (no QK^T preload in this kernel version)"),
    )
