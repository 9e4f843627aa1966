"""scripts/npu_kernels_check.py: npuport's 910B estimate held against a real NPU run's kernel table. Its reading of the
Ascend profiler's kernel_details.csv and its shapes -> aten op -> estimate path, on five real rows of a Qwen3-0.6B
training step (tests/fixtures/profiles/ascend/qwen3_kernel_rows.csv, README there), checked by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from npuport.cost.timing import timing_for

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "tests" / "fixtures" / "profiles" / "ascend" / "qwen3_kernel_rows.csv"


def _script():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("npu_kernels_check", ROOT / "scripts" / "npu_kernels_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["npu_kernels_check"] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def test_reads_the_real_rows_and_the_chip_they_ran_on() -> None:
    c = _script()
    ks = c.read_kernels(ROWS)
    assert [k.type for k in ks] == ["RmsNorm", "FlashAttentionScore", "Add", "MatMulV2"]  # the hcom task left out
    mm = ks[-1]
    assert mm.inputs == ((4096, 4096), (4096, 1024)) and mm.in_dtypes == ("bfloat16", "bfloat16")
    assert mm.duration_s == pytest.approx(168.34e-6)
    chip, said = c.chip_of(ks, None, None, None)
    assert "20 AI cores, 40 vector cores at 1650 MHz" in said  # Block Dim 20; cycles / (20 x aicore_time)
    assert chip.matrix_peak["bfloat16"] == pytest.approx(20 * 16 ** 3 * 2 * 1.65e9, rel=2e-3)


def test_matmul_and_causal_attention_are_estimated_as_the_audit_costs_them() -> None:
    c = _script()
    ks = {k.type: k for k in c.read_kernels(ROWS)}
    chip, _ = c.chip_of(list(ks.values()), 20, 40, 1650.0)
    model = timing_for(chip)
    peak = chip.matrix_peak["bfloat16"]
    t, how = c.ESTIMATORS["MatMulV2"](ks["MatMulV2"], chip)
    r = model.rates("matmul")  # M = N-side from the output (4096 x 1024), K = 4096
    assert how == "aten::mm (matmul)"
    assert t == pytest.approx(2 * 4096 * 1024 * 4096 / (peak * r.compute) + r.fixed_s, rel=1e-6)
    t, how = c.ESTIMATORS["FlashAttentionScore"](ks["FlashAttentionScore"], chip)
    r = model.rates("attention")  # B 1, 16 query heads, 8 KV heads of 128, S 4096; the 2048 x 2048 mask: causal, half
    assert "causal" in how
    assert t == pytest.approx((2 * 16 * 4096 * 4096 * 128 * 2) / 2 / (peak * r.compute) + r.fixed_s, rel=1e-6)
