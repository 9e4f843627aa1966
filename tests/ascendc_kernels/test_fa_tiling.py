"""Flash-attention tiling over shape grids: every (b, head, query row) written once, KV steps cover exactly
the visible keys, causal diagonal flags and table offsets, UB / L1 budgets, alignment, core balance."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from npuport.ascendc_kernels.flash_attention.tiling import (
    MASK_ADDITIVE,
    MASK_CAUSAL,
    MASK_NONE,
    UB_RESERVE_BYTES,
    _ub_plan,
    causal_offset,
    causal_table,
    iter_units,
    kv_steps,
    l1_bytes,
    plan_flash_attention,
)
from npuport.cost.roofline import get_chip
from npuport.errors import NpuportError

CHIP = get_chip("Ascend910B")
SHAPES = [(1, 1, 1, 1, 1), (2, 4, 2, 77, 77), (1, 8, 1, 130, 45), (3, 6, 3, 40, 100), (1, 2, 2, 513, 513),
          (2, 32, 8, 1, 4096), (1, 3, 1, 1000, 17)]
DIMS = (16, 64, 80, 128, 256)


def check(t):
    p = CHIP.platform
    seen = torch.zeros(t.batch, t.heads_q, t.sq, dtype=torch.int32)
    for unit in iter_units(t):
        seen[unit.b, unit.n, unit.q0:unit.q0 + unit.rows] += 1
        last_visible = min(t.skv - 1, unit.q0 + unit.rows - 1) if t.mask_kind == MASK_CAUSAL else t.skv - 1
        cursor = 0
        for st in unit.steps:
            assert st.k0 == cursor and 0 < st.cols <= t.kv_tile  # contiguous, each key block once
            cursor += st.cols
            if t.mask_kind == MASK_CAUSAL:
                assert st.k0 <= unit.q0 + unit.rows - 1  # no step is invisible to every row
                assert st.diagonal == (st.k0 + st.cols - 1 > unit.q0)
                if st.diagonal:
                    off = causal_offset(t, unit.q0, st.k0)
                    assert 0 <= off and off + t.kv_tile <= 2 * t.kv_tile + t.q_tile
        assert cursor >= last_visible + 1 and cursor - unit.steps[-1].cols <= last_visible
    assert bool((seen == 1).all())
    plan = _ub_plan(t.q_tile, t.kv_tile, t.d_pad, 2, t.mask_kind != MASK_NONE, p["ubblock_size"],
                    p["vec_calc_size"] * 2)
    assert plan.total <= p["ub_size"] - UB_RESERVE_BYTES
    assert all(s % p["ubblock_size"] == 0 for starts in plan.offsets().values() for s in starts)
    assert l1_bytes(t.q_tile, t.kv_tile, t.d_pad, 2) <= p["l1_size"]
    assert t.q_tile % 16 == 0 and t.kv_tile % 16 == 0 and t.d_pad % 16 == 0 and t.d_pad >= t.d
    assert (t.kv_tile * 4) % p["ubblock_size"] == 0 and t.kv_tile // 8 <= 255  # repeat strides fit uint8
    # balance: contiguous ranges, no core more than one unit's cost above the ideal share
    starts = t.unit_start[: t.used_cores + 1]
    assert starts[0] == 0 and starts[-1] == t.units and list(starts) == sorted(starts)
    cost = [len(kv_steps(t, qb)) for qb in range(t.q_blocks)]
    per_core = [sum(cost[u % t.q_blocks] for u in range(starts[c], starts[c + 1])) for c in range(t.used_cores)]
    ideal = sum(per_core) / p["vector_core_cnt"]
    assert max(per_core) <= ideal + max(cost)
    assert t.used_cores <= p["vector_core_cnt"]


@pytest.mark.parametrize("mask", [MASK_NONE, MASK_CAUSAL, MASK_ADDITIVE])
@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
def test_grid(mask, layout):
    for (b, nq, nkv, sq, skv), d in itertools.product(SHAPES, DIMS):
        check(plan_flash_attention(b, nq, nkv, sq, skv, d, "bfloat16", layout, mask, CHIP))


@pytest.mark.parametrize("qt, kt", [(16, 16), (16, 32), (32, 16), (64, 64), (128, 16)])
def test_forced_tiles(qt, kt):
    for (b, nq, nkv, sq, skv) in SHAPES:
        check(plan_flash_attention(b, nq, nkv, sq, skv, 64, "float16", "BNSD", MASK_CAUSAL, CHIP, q_tile=qt,
                                   kv_tile=kt))


def test_llama_shape_balances_48_cores():
    t = plan_flash_attention(8, 32, 32, 4096, 4096, 128, "bfloat16", "BNSD", MASK_CAUSAL, CHIP)
    assert t.used_cores == 48 and t.units == 8 * 32 * t.q_blocks
    check(t)


def test_causal_table_matches_the_causal_mask():
    t = plan_flash_attention(1, 1, 1, 100, 100, 16, "float16", "BNSD", MASK_CAUSAL, CHIP, q_tile=32, kv_tile=16)
    table = causal_table(t)
    for qb in range(t.q_blocks):
        q0 = qb * t.q_tile
        for st in kv_steps(t, qb):
            if not st.diagonal:
                continue
            off = causal_offset(t, q0, st.k0)
            tile = table[:, off:off + st.cols]
            i = torch.arange(t.q_tile)[:, None] + q0
            j = torch.arange(st.cols)[None, :] + st.k0
            assert torch.equal(tile == 0, j <= i)


def test_strides_follow_the_layout():
    bnsd = plan_flash_attention(2, 4, 2, 10, 12, 16, "float16", "BNSD", MASK_NONE, CHIP)
    bsnd = plan_flash_attention(2, 4, 2, 10, 12, 16, "float16", "BSND", MASK_NONE, CHIP)
    assert (bnsd.q_sb, bnsd.q_sn, bnsd.q_ss) == (4 * 10 * 16, 10 * 16, 16)
    assert (bsnd.q_sb, bsnd.q_sn, bsnd.q_ss) == (10 * 4 * 16, 16, 4 * 16)
    assert (bsnd.k_sb, bsnd.k_sn, bsnd.k_ss) == (12 * 2 * 16, 16, 2 * 16)


def test_retiles_for_another_chip_profile():
    small = dataclasses.replace(CHIP, platform={**CHIP.platform, "ub_size": 98304, "vector_core_cnt": 16})
    t = plan_flash_attention(1, 8, 8, 1024, 1024, 128, "float16", "BNSD", MASK_NONE, small)
    big = plan_flash_attention(1, 8, 8, 1024, 1024, 128, "float16", "BNSD", MASK_NONE, CHIP)
    assert t.used_cores <= 16 and t.q_tile * t.kv_tile < big.q_tile * big.kv_tile


@pytest.mark.parametrize("args, msg", [
    ((1, 3, 2, 8, 8, 64, "float16"), "multiple of kv heads"),
    ((1, 2, 2, 8, 8, 64, "float32"), "unsupported dtype"),
    ((1, 2, 2, 8, 8, 4096, "float16"), "head dim too large"),
])
def test_rejects(args, msg):
    with pytest.raises(NpuportError, match=msg):
        plan_flash_attention(*args, "BNSD", MASK_NONE, CHIP)


def test_rejects_tiles_that_do_not_fit():
    with pytest.raises(NpuportError, match="do not fit"):
        plan_flash_attention(1, 1, 1, 64, 64, 256, "float16", "BNSD", MASK_ADDITIVE, CHIP, q_tile=128, kv_tile=512)
