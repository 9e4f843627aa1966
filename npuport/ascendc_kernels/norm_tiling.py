"""Row-norm tiling shared by rms_norm, add_rms_norm and layer_norm: rows over vector cores, rows or column
chunks over the Unified Buffer.

Two modes, chosen by what fits in UB (chip.platform['ub_size'] minus a reserve):
- full rows (split=0): `rows_per_tile` whole rows per tile; gamma (and beta) cast to fp32 once per core.
- split rows (split=1): a row is too long for UB; one row per tile, walked in `col_chunks` column chunks of
  `col_tile` elements (the last has `col_tail`), in two passes: statistics, then normalise. The kernel then
  reads each input chunk twice (the perf model counts it).
Rows are split evenly over the vector cores (rms and layer norm have equal cost per row).
The same struct (`NormTiling` in tiling_structs.h) feeds the three kernels; op-specific buffers are sized 0 when
unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator, Literal

from npuport.ascendc_kernels.tiling_base import (
    PackedTiling,
    UbBuffer,
    UbPlan,
    align_up,
    ceil_div,
    even_start,
    platform_of,
    split_even,
)
from npuport.cost.roofline import ChipProfile
from npuport.errors import NpuportError

NormKind = Literal["rms_norm", "add_rms_norm", "layer_norm"]
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
UB_RESERVE_BYTES = 8 * 1024  # left to the runtime (an assumption, not a chip fact); budget = ub_size - this
MAX_BLOCK_COUNT = 4095  # DataCopyExtParams.blockCount limit: rows moved in one DataCopyPad
MAX_REPEAT = 255  # vector repeatTimes limit: per-tile row loops stay within one repeat count
BUFFER_NUM = 2  # double buffering of every CopyIn / CopyOut queue


@dataclass(frozen=True)
class NormTiling(PackedTiling):
    rows: int
    h: int
    row_stride: int  # UB elements per row (32-byte aligned for the input dtype and for fp32)
    used_cores: int
    rows_base: int
    rows_rem: int
    rows_per_tile: int
    col_tile: int
    col_chunks: int
    col_tail: int
    split: int
    buffer_num: int
    in_bytes: int  # one copy of each input tile queue (x, x1, x2, residual)
    out_bytes: int  # one copy of each output tile queue (y, x_sum)
    stat_bytes: int  # one copy of each per-row statistic queue (rstd, mean), fp32
    gamma_in_bytes: int  # native-dtype staging of gamma / beta
    gamma_f32_bytes: int  # gamma in fp32 (full: the whole row, split: one chunk)
    beta_f32_bytes: int
    f32_bytes: int  # the fp32 copy of the x tile
    sq_bytes: int  # one row (or chunk) of fp32 scratch
    work_bytes: int  # ReduceSum scratch
    has_beta: int
    has_residual: int
    in_elem_bytes: int
    gamma_elem_bytes: int
    eps: float
    inv_h: float

    C_STRUCT: ClassVar[str] = "NormTiling"
    C_FIELDS: ClassVar[tuple[tuple[str, str], ...]] = tuple(
        (n, "float" if n in ("eps", "inv_h") else "uint32_t") for n in (
            "rows h row_stride used_cores rows_base rows_rem rows_per_tile col_tile col_chunks col_tail split "
            "buffer_num in_bytes out_bytes stat_bytes gamma_in_bytes gamma_f32_bytes beta_f32_bytes f32_bytes "
            "sq_bytes work_bytes has_beta has_residual in_elem_bytes gamma_elem_bytes eps inv_h").split()
    )

    def core_rows(self, core: int) -> tuple[int, int]:
        start = even_start(core, self.rows_base, self.rows_rem)
        return start, self.rows_base + (1 if core < self.rows_rem else 0)


@dataclass(frozen=True)
class NormTile:
    core: int
    row0: int
    nrows: int
    col0: int
    ncols: int


def _plan(kind: NormKind, rpt: int, cols: int, in_b: int, g_b: int, has_beta: bool, has_res: bool,
          block: int, repeat_bytes: int) -> UbPlan:
    """UB buffers of one tile of `rpt` rows x `cols` UB elements (cols already aligned)."""
    n_in = {"rms_norm": 1, "add_rms_norm": 2, "layer_norm": 2 if has_res else 1}[kind]
    n_out = {"rms_norm": 1, "add_rms_norm": 2, "layer_norm": 2 if has_res else 1}[kind]
    n_stat = 2 if kind == "layer_norm" else 1
    f32_per_repeat = repeat_bytes // 4
    # ReduceSum scratch, and at least two blocks: Rsqrt1 in norm_common.h uses work[0:16]
    work_elems = max(align_up(ceil_div(cols, f32_per_repeat), block // 4), 2 * block // 4)
    bufs = [UbBuffer(f"in{i}", rpt * cols * in_b, BUFFER_NUM) for i in range(n_in)]
    bufs += [UbBuffer(f"out{i}", rpt * cols * in_b, BUFFER_NUM) for i in range(n_out)]
    bufs += [UbBuffer(f"stat{i}", align_up(rpt * 4, block), BUFFER_NUM) for i in range(n_stat)]
    bufs += [
        UbBuffer("gamma_in", cols * g_b),
        UbBuffer("gamma_f32", cols * 4),
        UbBuffer("beta_f32", cols * 4 if has_beta else 0),
        UbBuffer("f32", rpt * cols * 4),
        UbBuffer("sq", cols * 4),
        UbBuffer("work", work_elems * 4),
    ]
    return UbPlan(tuple(bufs), block)


def plan_norm(kind: NormKind, rows: int, h: int, dtype: str, chip: ChipProfile, *, gamma_dtype: str | None = None,
              eps: float = 1e-6, has_beta: bool = False, has_residual: bool = False,
              ub_reserve: int = UB_RESERVE_BYTES, max_rows_per_tile: int | None = None,
              force_col_tile: int | None = None) -> NormTiling:
    """Tile `rows` x `h` for `chip`; `max_rows_per_tile` / `force_col_tile` exist so tests can force many tiles."""
    if dtype not in DTYPE_BYTES or (gamma_dtype or dtype) not in DTYPE_BYTES:
        raise NpuportError(f"{kind}: unsupported dtype", "float16, bfloat16 or float32", f"{dtype}/{gamma_dtype}")
    if rows < 1 or h < 1:
        raise NpuportError(f"{kind}: empty input", "rows >= 1 and hidden >= 1", f"rows={rows}, h={h}")
    p = platform_of(chip)
    block, budget = int(p["ubblock_size"]), int(p["ub_size"]) - ub_reserve
    repeat_bytes = int(p["vec_calc_size"]) * 2  # one vector repeat: vec_calc_size fp16 elements
    in_b, g_b = DTYPE_BYTES[dtype], DTYPE_BYTES[gamma_dtype or dtype]
    unit = block // min(in_b, g_b)  # elements per 32 B of the narrowest buffer: every row start stays aligned
    row_stride = align_up(h, unit)
    base, rem, used = split_even(rows, int(p["vector_core_cnt"]))
    rows_core_max = base + (1 if rem else 0)
    args = (kind, in_b, g_b, has_beta, has_residual, block, repeat_bytes)

    def plan(rpt: int, cols: int) -> UbPlan:
        return _plan(kind, rpt, cols, *args[1:])

    rpt = 0
    if force_col_tile is None:
        cap = min(rows_core_max, MAX_BLOCK_COUNT, MAX_REPEAT, max_rows_per_tile or MAX_REPEAT)
        lo, hi = 0, cap
        while lo < hi:  # the largest row count whose UB plan fits
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if plan(mid, row_stride).fits(budget) else (lo, mid - 1)
        rpt = lo
    if rpt >= 1:
        col_tile, chunks, tail, split, ub = row_stride, 1, h, 0, plan(rpt, row_stride)
    else:
        if force_col_tile is not None:
            col_tile = align_up(force_col_tile, unit)
        else:
            col_tile = (row_stride // unit) * unit
            while col_tile > unit and not plan(1, col_tile).fits(budget):
                col_tile -= unit * max(1, (col_tile // unit) // 64)
        ub = plan(1, col_tile)
        if not ub.fits(budget):
            raise NpuportError(f"{kind}: no tile fits the Unified Buffer", f"<= {budget} bytes", f"{ub.total} bytes")
        rpt, chunks = 1, ceil_div(h, col_tile)
        tail, split = h - (chunks - 1) * col_tile, 1
    return NormTiling(
        rows=rows, h=h, row_stride=row_stride if not split else col_tile, used_cores=used, rows_base=base,
        rows_rem=rem, rows_per_tile=rpt, col_tile=col_tile, col_chunks=chunks, col_tail=tail, split=split,
        buffer_num=BUFFER_NUM, in_bytes=ub.size("in0"), out_bytes=ub.size("out0"), stat_bytes=ub.size("stat0"),
        gamma_in_bytes=ub.size("gamma_in"), gamma_f32_bytes=ub.size("gamma_f32"), beta_f32_bytes=ub.size("beta_f32"),
        f32_bytes=ub.size("f32"), sq_bytes=ub.size("sq"), work_bytes=ub.size("work"), has_beta=int(has_beta),
        has_residual=int(has_residual), in_elem_bytes=in_b, gamma_elem_bytes=g_b, eps=float(eps), inv_h=1.0 / h,
    )


def ub_plan_of(kind: NormKind, t: NormTiling, chip: ChipProfile) -> UbPlan:
    """Rebuild the UB plan a tiling implies (tests check it against the budget)."""
    p = platform_of(chip)
    return _plan(kind, t.rows_per_tile, t.row_stride, t.in_elem_bytes, t.gamma_elem_bytes, bool(t.has_beta),
                 bool(t.has_residual), int(p["ubblock_size"]), int(p["vec_calc_size"]) * 2)


def iter_tiles(t: NormTiling) -> Iterator[NormTile]:
    """The tiles the kernel writes, in the kernel's loop order (core, row tile, column chunk)."""
    for core in range(t.used_cores):
        start, n = t.core_rows(core)
        for r0 in range(start, start + n, t.rows_per_tile):
            nr = min(t.rows_per_tile, start + n - r0)
            if not t.split:
                yield NormTile(core, r0, nr, 0, t.h)
                continue
            for c in range(t.col_chunks):
                yield NormTile(core, r0, nr, c * t.col_tile, t.col_tail if c == t.col_chunks - 1 else t.col_tile)


def iter_row_groups(t: NormTiling) -> Iterator[tuple[NormTile, ...]]:
    """Tiles grouped by row tile: in split mode a group is the column chunks of one row (two kernel passes)."""
    group: list[NormTile] = []
    for tile in iter_tiles(t):
        if group and (tile.core, tile.row0) != (group[0].core, group[0].row0):
            yield tuple(group)
            group = []
        group.append(tile)
    if group:
        yield tuple(group)
