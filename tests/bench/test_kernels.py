"""Kernel-path expectations checked on recorded kernel names (the names seen on the project's H200)."""

from __future__ import annotations

import pytest
import torch

from npuport.bench.kernels import check, load_expectations, record_names

SDPA = "aten::scaled_dot_product_attention"
# Seen on the project's H200 (../shared/facts/parity-anchors.md): the kernel family changes with dtype and mask.
CUDNN_BF16 = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"
CUTLASS_F32 = "fmha_cutlassF_f32_aligned_64x64_rf_sm80"


def test_shipped_expectations_load():
    exps = load_expectations()
    ids = {e.id for e in exps.items}
    assert {"cuda-attention-fused", "cuda-gemm-tensor-core", "npu-attention-fused", "npu-gemm-cube"} <= ids
    assert exps.single_op_patterns["sdpa"].op == SDPA


def test_bf16_causal_cudnn_is_the_fused_path():
    res = check(SDPA, "bfloat16", "cuda", [CUDNN_BF16], ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention"])
    assert res and res.verdict == "ok" and res.path == "cudnn" and res.kernel == CUDNN_BF16


def test_fp32_memory_efficient_is_caught():
    res = check(SDPA, "float32", "cuda", [CUTLASS_F32], ["aten::_scaled_dot_product_efficient_attention"])
    assert not res and res.verdict == "warn" and res.path == "memory-efficient"
    assert "expected fused path not taken" in res.message and CUTLASS_F32 in res.message


def test_additive_float_mask_path_is_caught():
    # bf16 with an additive float mask: no flash kernel; what ran is named in the warning
    res = check(SDPA, "bfloat16", "cuda", ["fmha_cutlassF_bf16_aligned_64x64_rf_sm80"], ["aten::_scaled_dot_product_efficient_attention"])
    assert res.verdict == "warn" and "fmha_cutlassF_bf16" in res.message


def test_math_fallback_fails():
    kernels = ["ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", "void (anonymous namespace)::softmax_warp_forward<...>"]
    res = check(SDPA, "bfloat16", "cuda", kernels, ["aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax"])
    assert res.verdict == "fail" and res.path == "math"


def test_unknown_names_are_reported_not_passed():
    res = check(SDPA, "bfloat16", "cuda", ["some_new_kernel"], [])
    assert res.verdict == "unknown" and "some_new_kernel" in res.message and not res


def test_gemm_expectations_follow_dtype():
    assert check("aten::mm", "bfloat16", "cuda", ["nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT"]).verdict == "ok"
    assert check("aten::mm", "bfloat16", "cuda", ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"]).path == "tensor-core"
    fp32 = check("aten::mm", "float32", "cuda", ["sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8"])
    assert fp32.verdict == "warn" and fp32.path == "cuda-core-fp32"
    assert check("aten::mm", "float32", "cuda", ["sm80_xmma_gemm_tf32f32_tf32f32_f32_nn"]).verdict == "ok"
    assert check("aten::mm", "bfloat16", "cpu", []).verdict == "none"  # nothing expected of a CPU GEMM
    assert check("aten::mm", "bfloat16", "npu", ["MatMulV2"]).verdict == "ok"
    assert check("aten::mm", "float16", "npu", ["MatMul_AI_CPU"]).verdict == "fail"


def test_npu_attention():
    assert check(SDPA, "bfloat16", "npu", ["FlashAttentionScore"]).verdict == "ok"
    assert check(SDPA, "bfloat16", "npu", ["BatchMatMulV2", "SoftmaxV2"]).verdict == "fail"


def test_no_names_is_unavailable_not_a_failure():
    res = check(SDPA, "bfloat16", "cuda", [], [])
    assert res.verdict == "unavailable" and res


@pytest.mark.parametrize("mask, path", [(None, "flash-cpu")])
def test_record_names_on_cpu_sees_the_dispatched_sdpa_op(mask, path):
    q = torch.randn(1, 2, 16, 8)
    kernels, aten = record_names("cpu", lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=True))
    assert kernels == []
    res = check(SDPA, "float32", "cpu", kernels, aten)
    assert res.verdict == "ok" and res.path == path
