"""Shared performance model of the three row-norm kernels (estimates; see perf_base)."""

from __future__ import annotations

from npuport.ascendc_kernels.norm_tiling import DTYPE_BYTES, NormKind, plan_norm
from npuport.ascendc_kernels.perf_base import PerfEstimate, estimate
from npuport.cost.roofline import ChipProfile

# fp32 vector passes per element, from the kernel's Compute(): casts, square, reduce, scale, gamma (, beta)
_PASSES = {"rms_norm": 6, "add_rms_norm": 9, "layer_norm": 8}
_STREAMS = {"rms_norm": (1, 1), "add_rms_norm": (2, 2), "layer_norm": (1, 1)}  # (inputs, outputs) per element


def norm_perf(kind: NormKind, rows: int, h: int, dtype: str, chip: ChipProfile, *, has_residual: bool = False,
              has_beta: bool = False) -> PerfEstimate:
    t = plan_norm(kind, rows, h, dtype, chip, has_residual=has_residual, has_beta=has_beta)
    b = DTYPE_BYTES[dtype]
    n_in, n_out = _STREAMS[kind]
    passes = _PASSES[kind]
    if kind == "layer_norm" and has_residual:
        n_in, n_out, passes = 2, 2, passes + 3
    reread = 1 if t.split else 0  # split rows read each input chunk again in pass 2
    stats = (2 if kind == "layer_norm" else 1) * rows * 4
    params = (2 if has_beta else 1) * h * b * t.used_cores  # gamma / beta read once per core (L2-resident)
    hbm = rows * h * b * (n_in * (1 + reread) + n_out) + stats + params
    rows_per_core = t.rows_base + (1 if t.rows_rem else 0)
    tiles_per_core = -(-rows_per_core // t.rows_per_tile) * t.col_chunks
    fill = t.rows_per_tile * min(t.row_stride, h) * b * n_in / (chip.memory_bandwidth / t.used_cores)
    return estimate(kind, f"{rows}x{h}", dtype, chip, hbm_bytes=hbm, vector_ops=passes * rows * h,
                    syncs_per_core=rows_per_core * (2 if kind == "layer_norm" else 1) + tiles_per_core,
                    fill_s=fill, extra=(f"tiling: {t.rows_per_tile} rows/tile, split={t.split}, "
                                        f"{t.used_cores} vector cores",))
