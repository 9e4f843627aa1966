"""The awkward-shape checks: each kernel's schedule reference against its float64 golden, on CPU.

`npuport kernels test` runs these; tests/ascendc_kernels runs them and more. A case names its inputs, any
forced tile sizes (to make tails and many tiles happen on small inputs) and the tolerance kind of each output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from npuport.ascendc_kernels.add_rms_norm.tiling import add_rms_norm_tiling
from npuport.ascendc_kernels.compare import CompareResult, compare_output, tolerance
from npuport.ascendc_kernels.flash_attention.reference import flash_attention_tiling
from npuport.ascendc_kernels.layer_norm.tiling import layer_norm_tiling
from npuport.ascendc_kernels.registry import get_kernel
from npuport.ascendc_kernels.rms_norm.tiling import rms_norm_tiling
from npuport.cost.roofline import ChipProfile, default_chip, get_chip

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
OUTPUT_KINDS = {
    "rms_norm": (("y", "norm"), ("rstd", "stat")),
    "add_rms_norm": (("y", "norm"), ("rstd", "stat"), ("x", "exact")),
    "layer_norm": (("y", "norm"), ("mean", "stat"), ("rstd", "stat"), ("x_sum", "exact")),
    "flash_attention": (("out", "attention"), ("lse", "stat")),
}


@dataclass(frozen=True)
class Case:
    kernel: str
    name: str
    make: Callable[[torch.Generator], dict[str, Any]]
    tiles: dict[str, int] = field(default_factory=dict)


def _norm(rows: int, h: int, dtype: torch.dtype, gdtype: torch.dtype | None = None, two: bool = False,
          beta: bool = False, residual: bool = False) -> Callable[[torch.Generator], dict[str, Any]]:
    def make(g: torch.Generator) -> dict[str, Any]:
        x = (torch.randn(rows, h, generator=g) * 2 + 0.5).to(dtype)
        out: dict[str, Any] = {"gamma": (torch.rand(h, generator=g) + 0.5).to(gdtype or dtype)}
        if two:
            out.update(x1=x, x2=torch.randn(rows, h, generator=g).to(dtype))
        else:
            out["x"] = x
        if beta:
            out["beta"] = torch.randn(h, generator=g).to(gdtype or dtype)
        if residual:
            out["residual"] = torch.randn(rows, h, generator=g).to(dtype)
        return out
    return make


def _attn(b: int, nq: int, nkv: int, sq: int, skv: int, d: int, dtype: torch.dtype, layout: str = "BNSD",
          causal: bool = False, mask: str = "none") -> Callable[[torch.Generator], dict[str, Any]]:
    def make(g: torch.Generator) -> dict[str, Any]:
        def shp(n: int, s: int) -> tuple[int, ...]:
            return (b, n, s, d) if layout == "BNSD" else (b, s, n, d)
        q = torch.randn(shp(nq, sq), generator=g).to(dtype)
        k = torch.randn(shp(nkv, skv), generator=g).to(dtype)
        v = torch.randn(shp(nkv, skv), generator=g).to(dtype)
        m = None
        if mask == "bool":  # SDPA polarity; rows 0 and sq-1 of batch 0 see nothing
            m = torch.rand(b, 1, sq, skv, generator=g) > 0.4
            m[0, :, 0] = False
            m[0, :, -1] = False
        elif mask == "additive":  # finite 'minus infinity' rows average v, as SDPA does
            m = torch.randn(sq, skv, generator=g).to(dtype)
            m[1 % sq] = torch.finfo(dtype).min
        return {"q": q, "k": k, "v": v, "mask": m, "is_causal": causal, "layout": layout}
    return make


CASES: tuple[Case, ...] = (
    Case("rms_norm", "1 row x 4099 fp16", _norm(1, 4099, F16)),
    Case("rms_norm", "37 x 4096 bf16, fp32 gamma", _norm(37, 4096, BF16, F32)),
    Case("rms_norm", "301 x 333 fp32, 7 rows/tile", _norm(301, 333, F32), {"max_rows_per_tile": 7}),
    Case("rms_norm", "3 x 70001 fp16 (split rows)", _norm(3, 70001, F16)),
    Case("rms_norm", "5 x 4099 bf16, forced 1000-col chunks", _norm(5, 4099, BF16), {"force_col_tile": 1000}),
    Case("add_rms_norm", "50 x 4097 fp16", _norm(50, 4097, F16, two=True), {"max_rows_per_tile": 3}),
    Case("add_rms_norm", "1 x 5120 bf16, fp32 gamma", _norm(1, 5120, BF16, F32, two=True)),
    Case("add_rms_norm", "4 x 3001 bf16, forced 512-col chunks", _norm(4, 3001, BF16, two=True),
         {"force_col_tile": 512}),
    Case("layer_norm", "97 x 769 fp16, beta", _norm(97, 769, F16, beta=True), {"max_rows_per_tile": 5}),
    Case("layer_norm", "33 x 1023 bf16, beta + residual", _norm(33, 1023, BF16, beta=True, residual=True)),
    Case("layer_norm", "1 x 1 fp32", _norm(1, 1, F32)),
    Case("layer_norm", "3 x 9001 fp16, residual, forced 1024-col chunks", _norm(3, 9001, F16, residual=True),
         {"force_col_tile": 1024}),
    Case("flash_attention", "causal GQA 4:2 BNSD fp16 S=77, tiles 16x32", _attn(2, 4, 2, 77, 77, 64, F16, causal=True),
         {"q_tile": 16, "kv_tile": 32}),
    Case("flash_attention", "bool mask, fully masked rows, BSND bf16, GQA 8:1", _attn(1, 8, 1, 130, 45, 80, BF16,
                                                                                      "BSND", mask="bool")),
    Case("flash_attention", "additive mask with finfo.min row, fp16, tiles 32x16",
         _attn(1, 2, 2, 50, 70, 128, F16, mask="additive"), {"q_tile": 32, "kv_tile": 16}),
    Case("flash_attention", "causal Sq=40 < Skv=100 BSND bf16", _attn(2, 4, 4, 40, 100, 32, BF16, "BSND", causal=True),
         {"q_tile": 16, "kv_tile": 16}),
    Case("flash_attention", "single query row, GQA 12:3", _attn(1, 12, 3, 1, 333, 96, F16)),
)


def tiling_for(case: Case, inputs: dict[str, Any], chip: ChipProfile) -> Any:
    kw = case.tiles
    if case.kernel == "rms_norm":
        return rms_norm_tiling(inputs["x"], inputs["gamma"], 1e-6, chip, **kw)
    if case.kernel == "add_rms_norm":
        return add_rms_norm_tiling(inputs["x1"], inputs["gamma"], 1e-6, chip, **kw)
    if case.kernel == "layer_norm":
        return layer_norm_tiling(inputs["x"], inputs["gamma"], inputs.get("beta"), inputs.get("residual"), 1e-5,
                                 chip, **kw)
    return flash_attention_tiling(inputs["q"], inputs["k"], inputs["mask"], inputs["is_causal"], None,
                                  inputs["layout"], chip, **kw)


def run_case(case: Case, chip: ChipProfile | None = None, seed: int = 0) -> CompareResult:
    chip = chip or get_chip(default_chip())
    spec = get_kernel(case.kernel)
    inputs = case.make(torch.Generator().manual_seed(seed))
    t = tiling_for(case, inputs, chip)
    got = spec.schedule(**inputs, tiling=t, chip=chip)
    gold = spec.golden(**inputs)
    dtype = next(v for k, v in inputs.items() if k in ("x", "x1", "q")).dtype
    outs = []
    for (name, kind), g, e in zip(OUTPUT_KINDS[case.kernel], got, gold):
        tol = tolerance(kind, torch.float32 if kind == "stat" else dtype)
        outs.append(compare_output(name, g, e, tol))
    return CompareResult(f"{case.kernel}: {case.name}", tuple(outs))


def run_checks(kernels: list[str] | None = None, chip: ChipProfile | None = None) -> list[CompareResult]:
    return [run_case(c, chip) for c in CASES if kernels is None or c.kernel in kernels]
