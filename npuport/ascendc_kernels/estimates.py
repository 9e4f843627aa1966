"""Per-kernel performance estimates at Llama-2-7B shapes (the numbers the README quotes).

Shapes: 8 sequences x 4096 tokens, hidden 4096, 32 heads of 128, bf16. These are model estimates for the
chosen chip profile, not measurements.
"""

from __future__ import annotations

from npuport.ascendc_kernels.perf_base import PerfEstimate
from npuport.ascendc_kernels.registry import get_kernel
from npuport.cost.roofline import ChipProfile

TOKENS, HIDDEN, HEADS, HEAD_DIM, BATCH, SEQ = 8 * 4096, 4096, 32, 128, 8, 4096


def llama7b_estimates(chip: ChipProfile, dtype: str = "bfloat16") -> list[PerfEstimate]:
    return [
        get_kernel("rms_norm").perf_model(TOKENS, HIDDEN, dtype, chip),
        get_kernel("add_rms_norm").perf_model(TOKENS, HIDDEN, dtype, chip),
        get_kernel("layer_norm").perf_model(TOKENS, HIDDEN, dtype, chip, has_residual=True, has_beta=True),
        get_kernel("flash_attention").perf_model(BATCH, HEADS, HEADS, SEQ, SEQ, HEAD_DIM, dtype, chip,
                                                 mask="causal"),
        get_kernel("flash_attention").perf_model(BATCH, HEADS, 8, SEQ, SEQ, HEAD_DIM, dtype, chip, mask="none"),
    ]
