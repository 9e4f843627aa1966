"""Row-norm tiling over shape grids: coverage exactly once, UB budget with double buffering, 32-byte
alignment, core balance, tails; and re-tiling when the chip profile changes."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from npuport.ascendc_kernels.norm_tiling import (
    MAX_REPEAT,
    UB_RESERVE_BYTES,
    iter_row_groups,
    iter_tiles,
    plan_norm,
    ub_plan_of,
)
from npuport.cost.roofline import get_chip
from npuport.errors import NpuportError

CHIP = get_chip("Ascend910B")
ROWS = (1, 2, 3, 47, 48, 49, 97, 1000)
HIDDEN = (1, 7, 15, 16, 17, 100, 4095, 4096, 4099, 8192, 30001, 70001, 100003)
DTYPES = (("float16", "float16"), ("bfloat16", "bfloat16"), ("float32", "float32"), ("bfloat16", "float32"),
          ("float32", "float16"))
KINDS = (("rms_norm", False, False), ("add_rms_norm", False, True), ("layer_norm", True, True),
         ("layer_norm", False, False))


def check_tiling(kind, rows, h, dtype, gdtype, beta, res, chip=CHIP, **kw):
    t = plan_norm(kind, rows, h, dtype, chip, gamma_dtype=gdtype, has_beta=beta, has_residual=res, **kw)
    p = chip.platform
    block = p["ubblock_size"]
    # coverage: row tiles partition the rows, column chunks partition [0, h) in every row tile
    row_hits = [0] * rows
    for group in iter_row_groups(t):
        r0, nr = group[0].row0, group[0].nrows
        assert all(g.row0 == r0 and g.nrows == nr for g in group)
        for r in range(r0, r0 + nr):
            row_hits[r] += 1
        cursor = 0
        for tile in group:
            assert tile.col0 == cursor and 0 < tile.ncols <= t.col_tile
            cursor += tile.ncols
        assert cursor == h
    assert row_hits == [1] * rows
    # UB budget, double buffering included, and alignment of every buffer start and size
    plan = ub_plan_of(kind, t, chip)
    assert plan.total <= p["ub_size"] - UB_RESERVE_BYTES
    assert all(b.depth == 2 for b in plan.buffers if b.name.startswith(("in", "out", "stat")))
    for name, starts in plan.offsets().items():
        assert all(s % block == 0 for s in starts), name
    in_b, g_b = t.in_elem_bytes, t.gamma_elem_bytes
    for elem in (in_b, g_b, 4):
        assert (t.row_stride * elem) % block == 0
    assert t.row_stride >= (t.col_tile if t.split else h)
    # the byte sizes in the struct are the plan's sizes
    assert t.in_bytes == plan.size("in0") and t.f32_bytes == plan.size("f32") and t.work_bytes == plan.size("work")
    # balance over cores: counts differ by at most one, no idle core while rows remain
    counts = [t.core_rows(c)[1] for c in range(t.used_cores)]
    assert max(counts) - min(counts) <= 1 and sum(counts) == rows
    assert t.used_cores == min(rows, p["vector_core_cnt"])
    assert 1 <= t.rows_per_tile <= MAX_REPEAT
    # tails
    assert 0 < t.col_tail <= t.col_tile and (t.col_chunks - 1) * t.col_tile + t.col_tail == h
    if not t.split and "max_rows_per_tile" not in kw:  # the largest row count that fits was chosen
        bigger = dataclasses.replace(t, rows_per_tile=t.rows_per_tile + 1)
        assert (t.rows_per_tile == min(max(counts), MAX_REPEAT)
                or ub_plan_of(kind, bigger, chip).total > p["ub_size"] - UB_RESERVE_BYTES)
    return t


@pytest.mark.parametrize("kind, beta, res", KINDS)
def test_grid(kind, beta, res):
    for rows, h, (dt, gdt) in itertools.product(ROWS, HIDDEN, DTYPES):
        check_tiling(kind, rows, h, dt, gdt, beta, res)


@pytest.mark.parametrize("rpt", [1, 2, 5, 7])
@pytest.mark.parametrize("col", [None, 16, 48, 1000])
def test_forced_tiles(rpt, col):
    kw = {"force_col_tile": col} if col else {"max_rows_per_tile": rpt}
    for rows, h in itertools.product((1, 5, 49, 301), (1, 17, 333, 4099)):
        t = check_tiling("layer_norm", rows, h, "float16", "float16", True, True, **kw)
        if col:
            assert t.split == 1
        else:
            assert t.rows_per_tile <= rpt


def test_llama_shape():
    t = check_tiling("add_rms_norm", 32768, 4096, "bfloat16", "bfloat16", False, True)
    assert t.split == 0 and t.used_cores == 48


def test_split_mode_for_long_rows():
    t = plan_norm("rms_norm", 4, 100003, "float32", CHIP)
    assert t.split == 1 and t.col_chunks > 1


def test_retiles_for_another_chip_profile():
    small = dataclasses.replace(CHIP, platform={**CHIP.platform, "ub_size": 65536, "vector_core_cnt": 20})
    a = check_tiling("rms_norm", 1000, 8192, "bfloat16", "bfloat16", False, False)
    b = check_tiling("rms_norm", 1000, 8192, "bfloat16", "bfloat16", False, False, chip=small)
    assert b.used_cores == 20 and a.used_cores == 48
    assert b.rows_per_tile < a.rows_per_tile or b.split


def test_every_tile_belongs_to_its_core():
    t = plan_norm("rms_norm", 97, 64, "float16", CHIP, max_rows_per_tile=2)
    for tile in iter_tiles(t):
        start, n = t.core_rows(tile.core)
        assert start <= tile.row0 and tile.row0 + tile.nrows <= start + n


def test_rejects_bad_inputs():
    with pytest.raises(NpuportError, match="unsupported dtype"):
        plan_norm("rms_norm", 1, 8, "int8", CHIP)
    with pytest.raises(NpuportError, match="empty input"):
        plan_norm("rms_norm", 0, 8, "float16", CHIP)
