"""Each fusion pattern on a minimal module, single-consumer negatives, constraint failures, HF architectures."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from npuport.cost.roofline import get_chip
from npuport.fusion.advice import advise
from npuport.trace.run import new_fake_mode, trace_module

CONFIGS = Path(__file__).resolve().parent.parent.parent / "examples" / "configs"


class Fn(nn.Module):
    def __init__(self, fn, *params, dtype=torch.float32):
        super().__init__()
        self.fn = fn
        self.p = nn.ParameterList([nn.Parameter(torch.ones(*s, dtype=dtype)) for s in params])

    def forward(self, *xs):
        return self.fn(*xs, *self.p)


def rms(x, w, eps=1e-6):
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(x.dtype)


def run(fn, shapes, params=(), chip="Ascend910B", dtype=torch.float16):
    mode = new_fake_mode()
    with mode:
        m = Fn(fn, *params, dtype=dtype)
    trace = trace_module(m, lambda: (tuple(torch.randn(*s, dtype=dtype) for s in shapes), {}), mode=mode)
    return advise({"prefill": trace}, get_chip(chip), None)


def found(advice):
    return Counter((a.pattern, a.status) for a in advice if a.pattern != "sdpa")


def test_rms_norm():
    got = found(run(lambda x, w: rms(x, w), [(2, 8, 64)], [(64,)]))
    assert got == {("rms_norm", "proposed"): 1}


def test_add_rms_norm_returns_the_residual():
    def f(x, y, w):
        h = x + y
        return rms(h, w) + h  # the residual sum has another reader: allowed, npu_add_rms_norm returns it
    got = found(run(f, [(2, 8, 64), (2, 8, 64)], [(64,)]))
    assert got[("add_rms_norm", "proposed")] == 1


def test_rms_norm_blocked_when_an_intermediate_is_read_elsewhere():
    def f(x, w):
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        y = w * (h * torch.rsqrt(var + 1e-6)).to(x.dtype)
        return y, var * 2  # variance also used outside the norm
    adv = [a for a in run(f, [(2, 8, 64)], [(64,)]) if a.pattern == "rms_norm"]
    assert len(adv) == 1 and adv[0].status == "blocked"
    assert "aten::mean.dim" in adv[0].blocked_by[0]["tensor"]
    assert "aten::mul.Tensor" in adv[0].blocked_by[0]["other_reader"]


def test_layer_norm_decomposed_and_add_layer_norm_and_ln_gelu():
    def dec(x, w, b):
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = xc.pow(2).mean(-1, keepdim=True)
        return xc * torch.rsqrt(var + 1e-5) * w + b
    assert found(run(dec, [(4, 32)], [(32,), (32,)], dtype=torch.float32)) == {("layer_norm_decomposed", "proposed"): 1}
    add_ln = lambda x, y, w, b: F.layer_norm(x + y, (32,), w, b)  # noqa: E731
    assert found(run(add_ln, [(4, 32), (4, 32)], [(32,), (32,)])) == {("add_layer_norm", "proposed"): 1}
    ln_gelu = lambda x, w, b: F.gelu(F.layer_norm(x, (32,), w, b))  # noqa: E731
    adv = [a for a in run(ln_gelu, [(4, 32)], [(32,), (32,)]) if a.pattern != "sdpa"]
    assert [a.pattern for a in adv] == ["layer_norm_gelu"]
    # torch_npu has no LayerNorm+GELU op: the match is reported, with our kernel the only candidate
    assert [r["id"] for r in adv[0].rejected] == ["npuport_layer_norm"] or adv[0].replacement["kind"] == "npuport_kernel"


@pytest.mark.parametrize("order", ["silu_first", "up_first"])
def test_swiglu_packed_both_operand_orders(order):
    def f(x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up if order == "silu_first" else up * F.silu(gate)
    adv = [a for a in run(f, [(2, 8, 128)]) if a.pattern == "swiglu"]
    assert len(adv) == 1 and adv[0].status == "proposed" and adv[0].note is None
    assert adv[0].replacement["op"] == "npu::npu_swiglu"


def test_swiglu_packed_up_gate_needs_reordering():
    def f(x):
        up, gate = x.split(64, dim=-1)
        return F.silu(gate) * up
    adv = [a for a in run(f, [(2, 8, 128)]) if a.pattern == "swiglu"]
    assert len(adv) == 1 and "reorder" in adv[0].note


def test_silu_times_scale_is_not_swiglu():
    assert not [a for a in run(lambda x: F.silu(x) * 0.5, [(2, 8, 64)]) if a.pattern == "swiglu"]


def test_geglu_and_gelu_tanh_decomposed():
    def geglu(x):
        a, b = x.chunk(2, -1)
        return F.gelu(a) * b
    assert found(run(geglu, [(2, 64)])) == {("geglu", "proposed"): 1}

    def new_gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))
    assert found(run(new_gelu, [(2, 64)], dtype=torch.float32)) == {("gelu_tanh_decomposed", "proposed"): 1}


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def test_rope_rotate_half_and_interleaved():
    f = lambda q, cos, sin: q * cos + rotate_half(q) * sin  # noqa: E731
    adv = [a for a in run(f, [(1, 4, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64)]) if a.pattern == "rope_rotate_half"]
    assert len(adv) == 1 and adv[0].replacement["op"] == "npu::npu_rotary_mul"

    def inter(q, cos, sin):
        x1, x2 = q[..., ::2], q[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return q * cos + rot * sin
    assert found(run(inter, [(1, 4, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64)])) == {("rope_interleaved", "proposed"): 1}


def test_rope_head_dim_constraints():
    f = lambda q, cos, sin: q * cos + rotate_half(q) * sin  # noqa: E731
    odd = [a for a in run(f, [(1, 4, 8, 31), (1, 1, 8, 31), (1, 1, 8, 31)]) if a.pattern == "rope_rotate_half"]
    assert len(odd) == 1 and odd[0].status == "no-replacement"
    reasons = [r for x in odd[0].rejected for r in x["reasons"]]
    assert "head dim 31 is odd" in reasons and "head dim 31 not in [64, 128]" in reasons
    wide = [a for a in run(f, [(1, 4, 8, 1024), (1, 1, 8, 1024), (1, 1, 8, 1024)]) if a.pattern == "rope_rotate_half"]
    assert wide[0].status == "no-replacement" and any("head dim 1024 > 895" in r for x in wide[0].rejected for r in x["reasons"])


def test_unfused_attention_and_masked_softmax():
    def attn(q, k, v, mask):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.125 + mask
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p, v)
    shapes = [(1, 4, 16, 32), (1, 4, 16, 32), (1, 4, 16, 32), (1, 1, 16, 16)]
    assert found(run(attn, shapes)) == {("unfused_attention", "proposed"): 1}
    sm = lambda x, m: torch.softmax(x + m, dim=-1)  # noqa: E731
    assert found(run(sm, [(2, 16, 16), (1, 16, 16)])) == {("masked_softmax", "proposed"): 1}


def test_transpose_contiguous_view():
    f = lambda x: x.transpose(1, 2).contiguous().view(2, 8, -1)  # noqa: E731
    assert found(run(f, [(2, 4, 8, 16)])) == {("transpose_contiguous", "proposed"): 1}


def test_sdpa_float_mask_leaves_the_fused_path():
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    shapes = [(1, 4, 16, 64), (1, 4, 16, 64), (1, 4, 16, 64), (1, 1, 16, 16)]
    adv = [a for a in run(f, shapes) if a.pattern == "sdpa"]
    assert len(adv) == 1 and adv[0].status != "fused"
    assert any("float attention mask" in r for x in adv[0].rejected for r in x["reasons"])
    bool_adv = [a for a in run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), shapes[:3]) if a.pattern == "sdpa"]
    assert bool_adv[0].status == "fused"


def test_chip_without_the_fused_op_switches_the_recommendation():
    f = lambda x, y, w: rms(x + y, w)  # noqa: E731
    adv = [a for a in run(f, [(2, 8, 64), (2, 8, 64)], [(64,)], chip="Ascend910A") if a.pattern == "add_rms_norm"]
    assert adv and adv[0].rejected[0]["id"] == "npu_add_rms_norm"
    assert "not available on Ascend910A" in adv[0].rejected[0]["reasons"][0]
    pytest.importorskip("npuport.ascendc_kernels.registry")
    # npuport's kernels are built for dav-c220 (910B) only, so on 910A nothing fits, and the report says why
    assert adv[0].status == "no-replacement"
    assert any("Ascend910A" in r for x in adv[0].rejected[1:] for r in x["reasons"])


def test_float_mask_switches_attention_to_our_kernel():
    pytest.importorskip("npuport.ascendc_kernels.registry")
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    shapes = [(1, 4, 16, 64), (1, 4, 16, 64), (1, 4, 16, 64), (1, 1, 16, 16)]
    adv = [a for a in run(f, shapes) if a.pattern == "sdpa"]
    assert adv[0].status == "proposed"
    assert adv[0].replacement["kind"] == "npuport_kernel" and adv[0].replacement["op"] == "npuport::flash_attention"


# Expected per forward pass, derived by hand from each architecture (L layers):
# RMSNorm models: 2 norms per layer + the final one; all but layer 0's input norm follow a residual add.
# RoPE on q and k in every layer; SwiGLU once per MLP; SDPA once per layer.
EXPECTED = {
    "llama-2-7b": {"add_rms_norm": 64, "rms_norm": 1, "rope_rotate_half": 64, "swiglu": 32, "sdpa": 32},
    "qwen2-7b": {"add_rms_norm": 56, "rms_norm": 1, "rope_rotate_half": 56, "swiglu": 28, "sdpa": 28},
    "mistral-7b": {"add_rms_norm": 64, "rms_norm": 1, "rope_rotate_half": 64, "swiglu": 32, "sdpa": 32},
    # GPT-2: every LayerNorm reads a sum (layer 0's reads wte + wpe); gelu_new written out once per MLP
    "gpt2": {"add_layer_norm": 25, "gelu_tanh_decomposed": 12, "sdpa": 12},
    # Mixtral: experts' packed gate_up output through one silu(gate) * up per layer (grouped GEMM path)
    "mixtral-8x7b": {"add_rms_norm": 64, "rms_norm": 1, "rope_rotate_half": 64, "swiglu": 32, "sdpa": 32},
}


# each traces a full-size HF architecture (about 1 s apiece); gpt2 stays in the fast run
@pytest.mark.parametrize("name", [n if n == "gpt2" else pytest.param(n, marks=pytest.mark.slow) for n in sorted(EXPECTED)])
def test_hf_architectures_match_counts(name):
    pytest.importorskip("transformers")
    from npuport.api import audit_model

    report, _ = audit_model(hf_config=str(CONFIGS / f"{name}.json"), scenarios=["prefill:seq=64"])
    adv = advise(report.traces, get_chip("Ascend910B"), None)
    got = Counter(a.pattern for a in adv if a.status in ("proposed", "fused"))
    assert dict(got) == EXPECTED[name]
    assert not [a for a in adv if a.status == "blocked"]
