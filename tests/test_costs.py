"""FLOP and byte formulas against hand counts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from npuport.cost.inventory import reported_calls
from npuport.cost.op_costs import call_cost
from npuport.trace.run import new_fake_mode, trace_module


def _calls(fn, *shapes, dtype=torch.float32, **kw):
    mode = new_fake_mode()
    with mode:
        args = tuple(torch.randn(*s, dtype=dtype) for s in shapes)
    trace = trace_module(_Wrap(fn), lambda: (args, kw), mode=mode)
    return trace


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kw):
        return self.fn(*args, **kw)


def _only(trace, op):
    found = [c for c in trace.calls if c.op == op]
    assert len(found) == 1, [c.op for c in trace.calls]
    return found[0]


def test_mm_flops_and_bytes():
    t = _calls(torch.mm, (64, 32), (32, 16))
    c = call_cost(_only(t, "aten::mm"))
    assert c.flops == 2 * 64 * 32 * 16
    assert c.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    assert c.matrix


def test_addmm_bf16_bytes_use_itemsize():
    t = _calls(lambda x, w, b: F.linear(x, w, b), (8, 32), (16, 32), (16,), dtype=torch.bfloat16)
    c = call_cost(_only(t, "aten::addmm"))
    assert c.flops == 2 * 8 * 32 * 16  # flop_counter counts the GEMM, not the bias add
    assert c.bytes == 2 * (16 + 8 * 32 + 32 * 16 + 8 * 16)
    assert c.dtype == "bfloat16"


def test_bmm_flops():
    t = _calls(torch.bmm, (4, 8, 16), (4, 16, 32))
    assert call_cost(_only(t, "aten::bmm")).flops == 2 * 4 * 8 * 16 * 32


def test_elementwise_and_broadcast_bytes():
    t = _calls(torch.mul, (8, 128), (128,))
    c = call_cost(_only(t, "aten::mul.Tensor"))
    assert c.flops == 8 * 128
    # the broadcast operand is read once (128 elements), not once per row
    assert c.bytes == 4 * (8 * 128 + 128 + 8 * 128)
    assert not c.matrix


def test_expanded_input_counts_distinct_elements():
    t = _calls(lambda x, y: x + y.expand(8, 128), (8, 128), (1, 128))
    c = call_cost(_only(t, "aten::add.Tensor"))
    assert c.bytes == 4 * (8 * 128 + 128 + 8 * 128)


def test_view_moves_nothing():
    t = _calls(lambda x: x.view(16, 4), (8, 8))
    c = call_cost(_only(t, "aten::view"))
    assert (c.flops, c.bytes) == (0.0, 0)


def test_embedding_reads_only_gathered_rows():
    mode = new_fake_mode()
    with mode:
        emb = torch.nn.Embedding(1000, 64)
        idx = torch.randint(0, 1000, (4, 10))
    t = trace_module(emb, lambda: ((idx,), {}), mode=mode)
    c = call_cost(_only(t, "aten::embedding"))
    out = 4 * 10 * 64 * 4
    assert c.bytes == out + 4 * 10 * 8 + out  # rows read + indices + output written
    assert c.flops == 0


def test_sdpa_reported_as_one_op_with_causal_half_flops():
    b, h, s, d = 2, 4, 64, 32
    t = _calls(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (b, h, s, d), (b, h, s, d), (b, h, s, d))
    calls = reported_calls(t, frozenset({"aten::scaled_dot_product_attention"}))
    sdpa = [c for c in calls if c.op == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 1
    assert not any("for_cpu" in c.op for c in calls)
    full = 2 * (2 * b * h * s * s * d)  # QK^T and PV
    assert sdpa[0].cost.flops == full / 2
    assert sdpa[0].cost.bytes == 4 * 4 * b * h * s * d  # q, k, v read, out written
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in sdpa[0].children


def test_sdpa_without_collapse_shows_cpu_variant():
    t = _calls(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4))
    ops = {c.op for c in reported_calls(t, frozenset())}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops


def test_grouped_mm_flops():
    from npuport.cost.op_costs import _grouped_mm_flops

    assert _grouped_mm_flops((96, 64), (8, 64, 128)) == 2 * 96 * 64 * 128
    # the weight gradient, grouped along K: (K, M_total) x (M_total, N) -> (G, K, N), each row of M meets K x N once
    assert _grouped_mm_flops((64, 96), (96, 128)) == 2 * 64 * 96 * 128
    # grouped along N: (G, M, K) x (K, N_total) -> (M, N_total)
    assert _grouped_mm_flops((8, 96, 64), (64, 128)) == 2 * 96 * 64 * 128


def test_reduction_counts_input_elements():
    t = _calls(lambda x: x.sum(dim=-1), (16, 256))
    c = call_cost(_only(t, "aten::sum.dim_IntList"))
    assert c.flops == 16 * 256


def test_sdpa_flops_with_grouped_kv_heads():
    from torch.utils import flop_counter

    from npuport.cost.op_costs import sdpa_flops

    assert sdpa_flops((2, 8, 64, 32), (2, 8, 96, 32), (2, 8, 96, 32)) == flop_counter.sdpa_flop_count((2, 8, 64, 32), (2, 8, 96, 32), (2, 8, 96, 32))
    # 8 query heads over 2 KV heads: every query head still does its own QK^T and PV
    assert sdpa_flops((2, 8, 64, 32), (2, 2, 96, 32), (2, 2, 96, 32)) == 2 * 2 * 8 * 64 * 96 * (32 + 32)
    assert flop_counter.sdpa_backward_flop_count((2, 8, 64, 32), (2, 8, 64, 32), (2, 8, 96, 32), (2, 8, 96, 32)) == 2.5 * sdpa_flops((2, 8, 64, 32), (2, 8, 96, 32), (2, 8, 96, 32))
