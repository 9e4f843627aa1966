"""FlexAttention (torch.nn.attention.flex_attention) is recorded as one attention op per call, both passes, with its
FLOPs counted over the tiles its block mask keeps (npuport.trace.flex)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npuport.api import audit_model

MODEL = '''import torch, torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

MASK = "{mask}"


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(256, 768)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 64).permute(2, 0, 3, 1, 4)
        return x + flex_attention(q, k, v, block_mask=mask).transpose(1, 2).reshape(b, t, 256)


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        b, t, _ = x.shape
        mask = None
        if MASK == "causal":
            mask = create_block_mask(causal, None, None, t, t, device=x.device)
        elif MASK == "documents":  # reads a tensor of the step: its tiles cannot be known on fake tensors
            doc = torch.arange(t, device=x.device) // 64
            mask = create_block_mask(lambda b, h, q, kv: doc[q] == doc[kv], None, None, t, t, device=x.device)
        for layer in self.layers:
            x = layer(x, mask)
        return x


def build_model():
    return M()


def example_inputs(sc):
    return (torch.randn(sc.batch, sc.seq, 256),)


def loss_fn(out, inputs):
    return out.float().sum()
'''

DENSE = 4 * 1 * 4 * 256 * 256 * 64  # 4 x B x H x Lq x Lkv x D, one layer's forward at batch 1, 256 tokens


def _audit(tmp_path: Path, mask: str, *scenarios: str) -> dict:
    path = tmp_path / f"flex_{mask}.py"
    path.write_text(MODEL.replace("{mask}", mask), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=list(scenarios))
    assert not data["failed_scenarios"]
    return {o["op"]: o for o in data["ops"]}


def test_prefill_records_one_attention_op_per_layer(tmp_path: Path) -> None:
    ops = _audit(tmp_path, "none", "prefill:batch=1,seq=256")
    flex = ops["higher_order::flex_attention"]
    assert flex["calls"] == 2 and flex["matrix"] and flex["modules"] == ["layers.*"]
    assert flex["flops"] == 2 * DENSE
    shape = flex["shapes"]["prefill"][0]
    assert shape["inputs"] == "1x4x256x64 1x4x256x64 1x4x256x64"
    assert shape["example"]["kwargs"]["block_share"] == 1.0
    # q, k, v read and the output written, 4 bytes each (float32)
    assert flex["bytes"] == 2 * 4 * (4 * 256 * 64) * 4
    assert "higher_order::flex_attention_backward" not in ops


def test_train_traces_the_backward_on_fake_tensors(tmp_path: Path) -> None:
    ops = _audit(tmp_path, "none", "train:batch=1,seq=256")
    assert ops["higher_order::flex_attention"]["calls"] == 2
    bwd = ops["higher_order::flex_attention_backward"]
    assert bwd["calls"] == 2 and bwd["apis"] == ["backward of torch.ops.higher_order.flex_attention"]
    assert bwd["flops"] == 2 * 2.5 * DENSE  # recomputed QK^T, dV, dP, dQ, dK
    # the scratch tensors flex_attention's autograd makes to trace score_mod are not the step's ops
    made = [op for op, o in ops.items() if o["kind"] == "compute" and op.startswith("aten::")
            and any("higher_order" in api for api in o["apis"])]
    assert made == []


def test_a_causal_block_mask_counts_only_the_tiles_it_keeps(tmp_path: Path) -> None:
    flex = _audit(tmp_path, "causal", "prefill:batch=1,seq=256")["higher_order::flex_attention"]
    # 256 tokens in 128-token blocks: 3 of the 4 (query block, key block) tiles hold an unmasked element
    assert flex["shapes"]["prefill"][0]["example"]["kwargs"]["block_share"] == pytest.approx(0.75)
    assert flex["flops"] == 2 * 0.75 * DENSE


def test_a_mask_reading_step_tensors_is_counted_dense(tmp_path: Path) -> None:
    flex = _audit(tmp_path, "documents", "prefill:batch=1,seq=256")["higher_order::flex_attention"]
    assert flex["shapes"]["prefill"][0]["example"]["kwargs"]["block_share"] is None
    assert flex["flops"] == 2 * DENSE


def test_flex_attention_is_said_to_fail_on_the_npu_with_the_way_out(tmp_path: Path) -> None:
    """torch's own device check refuses NPU tensors (NPB076): a crash finding at the call's line, and the fused
    replacement named."""
    path = tmp_path / "flex_npu.py"
    path.write_text(MODEL.replace("{mask}", "none"), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=1,seq=256"])
    found = [f for f in data["findings"] if f["id"] == "NPB076"]
    assert len(found) == 1 and found[0]["level"] == "error" and found[0]["impact"] == "crash"
    assert "scaled_dot_product_attention" in found[0]["fix"]
