"""Flash-attention forward tiling: (batch, q-head, q-block) work units over vector cores, score tiles in UB.

Mix mode (cube:vector = 1:2): each vector core (AIV) owns a contiguous range of units and drives the cube
through two matmuls per KV block (S = Q K^T, then P V); the AIC of an AI core serves its two AIVs, which is
why the L1 check counts two AIVs' operands. Per unit the kernel walks the visible KV blocks: all of them, or,
for causal (top-left aligned, SDPA's `is_causal`), blocks with k0 <= q0 + rows - 1; blocks cut by the
diagonal take their -inf pattern from a small host-built table (`causal_table`) instead of a full S x S mask.
Units are split over cores by cumulative cost (visible KV blocks), so causal ranges stay balanced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator, Literal

import torch

from npuport.ascendc_kernels.tiling_base import PackedTiling, UbBuffer, UbPlan, align_up, ceil_div, platform_of
from npuport.cost.roofline import ChipProfile
from npuport.errors import NpuportError

Layout = Literal["BNSD", "BSND"]
MASK_NONE, MASK_CAUSAL, MASK_ADDITIVE = 0, 1, 2
MAX_VEC_CORES = 64  # unit_start[] capacity in the C struct (FA_MAX_CORES in kernel.asc)
UB_RESERVE_BYTES = 8 * 1024  # left to the runtime / matmul client (an assumption)
Q_TILES = (128, 64, 32, 16)
KV_TILES = (512, 256, 128, 64, 32, 16)
CUBE_ALIGN = 16  # cube fractal edge: tiles and head dim padding


@dataclass(frozen=True)
class FaTiling(PackedTiling):
    q_sb: int
    q_sn: int
    q_ss: int
    k_sb: int
    k_sn: int
    k_ss: int
    v_sb: int
    v_sn: int
    v_ss: int
    o_sb: int
    o_sn: int
    o_ss: int
    mask_sb: int
    mask_sn: int
    mask_ss: int
    workspace_per_core: int
    batch: int
    heads_q: int
    heads_kv: int
    group: int
    sq: int
    skv: int
    d: int
    d_pad: int
    q_tile: int
    kv_tile: int
    q_blocks: int
    kv_blocks: int
    mask_kind: int
    units: int
    used_cores: int
    buffer_num: int
    s_bytes: int
    mask_bytes: int
    p_bytes: int
    pv_bytes: int
    acc_bytes: int
    o_bytes: int
    stat_bytes: int
    work_bytes: int
    fold_bytes: int  # [q_tile, 64] fp32: column groups folded before a whole-row reduce
    brcb_bytes: int  # [q_tile, 8] fp32: one row statistic broadcast to a 32-byte block per row
    cmp_bytes: int  # bit mask of q_tile rows (Compare / Select)
    in_elem_bytes: int
    is_bf16: int
    scale: float
    reserved: int  # keeps the struct a multiple of 8 bytes without implicit C padding
    unit_start: tuple[int, ...]  # MAX_VEC_CORES + 1 entries; core c owns [unit_start[c], unit_start[c+1])

    C_STRUCT: ClassVar[str] = "FaTiling"
    C_FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (
        *((n, "uint64_t") for n in (
            "q_sb q_sn q_ss k_sb k_sn k_ss v_sb v_sn v_ss o_sb o_sn o_ss mask_sb mask_sn mask_ss "
            "workspace_per_core").split()),
        *((n, "uint32_t") for n in (
            "batch heads_q heads_kv group sq skv d d_pad q_tile kv_tile q_blocks kv_blocks mask_kind units "
            "used_cores buffer_num s_bytes mask_bytes p_bytes pv_bytes acc_bytes o_bytes stat_bytes work_bytes "
            "fold_bytes brcb_bytes cmp_bytes in_elem_bytes is_bf16").split()),
        ("scale", "float"),
        ("reserved", "uint32_t"),
        ("unit_start", f"uint32_t[{MAX_VEC_CORES + 1}]"),
    )

    def unit_coords(self, u: int) -> tuple[int, int, int]:
        """(b, n, q_block) of unit u: b-major, then head, then q block (the kernel's decode)."""
        return u // (self.heads_q * self.q_blocks), (u // self.q_blocks) % self.heads_q, u % self.q_blocks


@dataclass(frozen=True)
class KvStep:
    k0: int
    cols: int
    diagonal: bool  # cut by the causal diagonal: the kernel adds the causal-table tile


@dataclass(frozen=True)
class FaUnit:
    core: int
    b: int
    n: int
    q0: int
    rows: int
    steps: tuple[KvStep, ...]


def kv_steps(t: FaTiling, q_block: int) -> tuple[KvStep, ...]:
    q0 = q_block * t.q_tile
    rows = min(t.q_tile, t.sq - q0)
    out = []
    for kb in range(t.kv_blocks):
        k0 = kb * t.kv_tile
        cols = min(t.kv_tile, t.skv - k0)
        if t.mask_kind == MASK_CAUSAL:
            if k0 > q0 + rows - 1:
                break  # this and every later block is above the diagonal for all rows
            out.append(KvStep(k0, cols, diagonal=k0 + cols - 1 > q0))
        else:
            out.append(KvStep(k0, cols, diagonal=False))
    return tuple(out)


def _ub_plan(qt: int, kt: int, d_pad: int, in_b: int, masked: bool, block: int, repeat_bytes: int) -> UbPlan:
    stat = align_up(qt * 4, repeat_bytes)  # row statistics are compared / selected a whole repeat at a time
    return UbPlan((
        UbBuffer("s", qt * kt * 4, 2),
        UbBuffer("mask", qt * kt * 4 if masked else 0, 2),
        UbBuffer("p", qt * kt * in_b, 2),
        UbBuffer("pv", qt * d_pad * 4, 1),
        UbBuffer("acc", qt * d_pad * 4, 1),
        UbBuffer("o", qt * d_pad * in_b, 1),
        UbBuffer("stat", stat, 5),  # row max, -inf-safe row max, row sum, rescale factor, lse out
        UbBuffer("work", align_up(ceil_div(kt, repeat_bytes // 4), block // 4) * 4, 1),
        UbBuffer("fold", qt * repeat_bytes, 1),
        UbBuffer("brcb", qt * block, 1),
        UbBuffer("cmp", align_up(ceil_div(qt, 8), repeat_bytes // 8), 1),
    ), block)


def l1_bytes(qt: int, kt: int, d_pad: int, in_b: int) -> int:
    """Cube operands of both matmuls, double-buffered, for the two AIVs sharing one AIC's L1."""
    return 2 * 2 * 2 * in_b * (qt * d_pad + kt * d_pad + qt * kt + kt * d_pad)


def strides(layout: Layout, b: int, n: int, s: int, d: int) -> tuple[int, int, int]:
    del b
    return (n * s * d, s * d, d) if layout == "BNSD" else (s * n * d, d, n * d)


def plan_flash_attention(batch: int, heads_q: int, heads_kv: int, sq: int, skv: int, d: int, dtype: str,
                         layout: Layout, mask_kind: int, chip: ChipProfile, *, scale: float | None = None,
                         mask_strides: tuple[int, int, int] = (0, 0, 0), q_tile: int | None = None,
                         kv_tile: int | None = None, ub_reserve: int = UB_RESERVE_BYTES) -> FaTiling:
    if dtype not in ("float16", "bfloat16"):
        raise NpuportError("flash_attention: unsupported dtype", "float16 or bfloat16", dtype)
    if heads_q % heads_kv:
        raise NpuportError("flash_attention: query heads must be a multiple of kv heads", "Nq % Nkv == 0",
                           f"Nq={heads_q}, Nkv={heads_kv}")
    if min(batch, heads_q, sq, skv, d) < 1:
        raise NpuportError("flash_attention: empty input", "B, N, Sq, Skv, D >= 1", str((batch, heads_q, sq, skv, d)))
    p = platform_of(chip)
    block, repeat_bytes = int(p["ubblock_size"]), int(p["vec_calc_size"]) * 2
    budget, cores = int(p["ub_size"]) - ub_reserve, int(p["vector_core_cnt"])
    if cores > MAX_VEC_CORES:
        raise NpuportError("flash_attention: chip has more vector cores than the tiling struct holds",
                           f"<= {MAX_VEC_CORES}", str(cores))
    in_b, d_pad = 2, align_up(d, CUBE_ALIGN)
    masked = mask_kind != MASK_NONE

    def fits(qt: int, kt: int) -> bool:
        ub = _ub_plan(qt, kt, d_pad, in_b, masked, block, repeat_bytes)
        return ub.fits(budget) and l1_bytes(qt, kt, d_pad, in_b) <= int(p["l1_size"])

    if q_tile is not None or kv_tile is not None:
        qt, kt = q_tile or Q_TILES[-1], kv_tile or KV_TILES[-1]
        if qt % CUBE_ALIGN or kt % CUBE_ALIGN or not fits(qt, kt):
            raise NpuportError("flash_attention: requested tiles do not fit", "multiples of 16 within UB and L1",
                               f"q_tile={qt}, kv_tile={kt}")
    else:
        q_cap, kv_cap = align_up(sq, CUBE_ALIGN), align_up(skv, CUBE_ALIGN)
        options = [(min(a, q_cap), min(b, kv_cap)) for a in Q_TILES for b in KV_TILES]
        options = [o for o in dict.fromkeys(options) if fits(*o)]
        if not options:
            raise NpuportError("flash_attention: head dim too large for any tile", "a tile within UB and L1", f"D = {d}")
        units_of = lambda qt_: batch * heads_q * ceil_div(sq, qt_)  # noqa: E731
        # keep every core busy first (short sequences), then the biggest tile, then the tallest q block
        qt, kt = max(options, key=lambda o: (min(units_of(o[0]), cores), o[0] * o[1], o[0]))
    q_blocks, kv_blocks = ceil_div(sq, qt), ceil_div(skv, kt)
    ub = _ub_plan(qt, kt, d_pad, in_b, masked, block, repeat_bytes)
    qs, ks = strides(layout, batch, heads_q, sq, d), strides(layout, batch, heads_kv, skv, d)
    draft = FaTiling(
        *qs, *ks, *ks, *qs, *mask_strides, workspace_per_core=2 * qt * kt * in_b,
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, group=heads_q // heads_kv, sq=sq, skv=skv, d=d,
        d_pad=d_pad, q_tile=qt, kv_tile=kt, q_blocks=q_blocks, kv_blocks=kv_blocks, mask_kind=mask_kind,
        units=batch * heads_q * q_blocks, used_cores=0, buffer_num=2, s_bytes=ub.size("s"),
        mask_bytes=ub.size("mask"), p_bytes=ub.size("p"), pv_bytes=ub.size("pv"), acc_bytes=ub.size("acc"),
        o_bytes=ub.size("o"), stat_bytes=ub.size("stat"), work_bytes=ub.size("work"), fold_bytes=ub.size("fold"),
        brcb_bytes=ub.size("brcb"), cmp_bytes=ub.size("cmp"), in_elem_bytes=in_b,
        is_bf16=int(dtype == "bfloat16"), scale=float(scale if scale is not None else d ** -0.5), reserved=0,
        unit_start=(),
    )
    starts = _partition([len(kv_steps(draft, qb)) for qb in range(q_blocks)], draft.units, cores)
    used = max(c + 1 for c in range(cores) if starts[c + 1] > starts[c])  # launch covers the last busy core
    starts = starts + [starts[-1]] * (MAX_VEC_CORES + 1 - len(starts))
    return FaTiling(**{**draft.__dict__, "used_cores": used, "unit_start": tuple(starts)})


def _partition(qb_cost: list[int], units: int, cores: int) -> list[int]:
    """Contiguous unit ranges with near-equal cumulative cost: core c starts at the first unit whose prefix
    cost reaches c * total / cores. Returns cores + 1 boundaries."""
    nqb = len(qb_cost)
    period = sum(qb_cost)
    total = period * (units // nqb)
    prefix = torch.tensor([0] + qb_cost).cumsum(0).tolist()

    def cost_before(u: int) -> int:
        return period * (u // nqb) + prefix[u % nqb]

    starts = [0]
    u = 0
    for c in range(1, cores):
        target = total * c / cores
        lo, hi = u, units
        while lo < hi:  # first unit whose prefix cost >= target
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if cost_before(mid) < target else (lo, mid)
        u = lo
        starts.append(u)
    starts.append(units)
    return starts


def iter_units(t: FaTiling) -> Iterator[FaUnit]:
    """Every unit in kernel order (core, then its unit range), with its KV steps."""
    steps = [kv_steps(t, qb) for qb in range(t.q_blocks)]
    for core in range(t.used_cores):
        for u in range(t.unit_start[core], t.unit_start[core + 1]):
            b, n, qb = t.unit_coords(u)
            q0 = qb * t.q_tile
            yield FaUnit(core, b, n, q0, min(t.q_tile, t.sq - q0), steps[qb])


def causal_table(t: FaTiling) -> torch.Tensor:
    """[q_tile, 2*kv_tile + q_tile] fp32: 0 where column c <= row + kv_tile, else -inf.

    The tile of block (q0, k0) is table[:, kv_tile - (q0 - k0) :][:, :kv_tile], i.e. attend iff k0 + j <= q0 + i.
    """
    width = 2 * t.kv_tile + t.q_tile
    rows = torch.arange(t.q_tile)[:, None]
    cols = torch.arange(width)[None, :]
    return torch.where(cols <= rows + t.kv_tile, 0.0, float("-inf")).to(torch.float32)


def causal_offset(t: FaTiling, q0: int, k0: int) -> int:
    return t.kv_tile - (q0 - k0)
