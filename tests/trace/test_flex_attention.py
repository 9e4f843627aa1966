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


# masks past the 2^26 elements a whole real mask would take: counted tile row by tile row (npuport.trace.flex)
LONG_MASKS = '''if MASK == "causal_bh":  # B and H given: the mask is evaluated for every (batch, head)
            mask = create_block_mask(causal, b, 4, t, t, device=x.device)
        elif MASK == "window":
            mask = create_block_mask(lambda b, h, q, kv: (q >= kv) & (q - kv <= 1024), None, None, t, t,
                                     device=x.device)
        elif MASK == "documents":'''


def _audit_long(tmp_path: Path, mask: str, scenario: str) -> dict:
    path = tmp_path / f"flex_long_{mask}.py"
    path.write_text(MODEL.replace("{mask}", mask).replace('elif MASK == "documents":', LONG_MASKS, 1), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=[scenario])
    assert not data["failed_scenarios"]
    return data


def _flex(data: dict) -> dict:
    return next(o for o in data["ops"] if o["op"] == "higher_order::flex_attention")


def test_a_causal_mask_over_batch_and_heads_past_the_whole_mask_limit_counts_its_tiles(tmp_path: Path) -> None:
    """B=2, H=4, 4096 tokens: 2^27 mask elements. 32 tiles a side, of which the causal mask keeps 32 x 33 / 2."""
    data = _audit_long(tmp_path, "causal_bh", "prefill:batch=2,seq=4096")
    flex = _flex(data)
    share = flex["shapes"]["prefill"][0]["example"]["kwargs"]["block_share"]
    assert share == pytest.approx(528 / 1024)
    assert flex["flops"] == pytest.approx(2 * share * 4 * 2 * 4 * 4096 * 4096 * 64)
    assert not any("counted dense" in n for n in data["notes"])


def test_a_sliding_window_at_16k_tokens_counts_its_tiles(tmp_path: Path) -> None:
    """A 1024-token window in 128-token blocks keeps the diagonal tile and the 8 before it in each tile row."""
    data = _audit_long(tmp_path, "window", "prefill:batch=1,seq=16384")
    share = _flex(data)["shapes"]["prefill"][0]["example"]["kwargs"]["block_share"]
    kept = sum(min(i + 1, 9) for i in range(128))
    assert share == pytest.approx(kept / 128**2)


def test_a_call_counted_dense_says_so_in_the_notes(tmp_path: Path) -> None:
    path = tmp_path / "flex_dense.py"
    path.write_text(MODEL.replace("{mask}", "documents"), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=1,seq=256"])
    dense = [n for n in data["notes"] if "counted dense" in n]
    assert len(dense) == 1 and dense[0].startswith("prefill: ") and "flex_attention" in dense[0]


def test_the_npu_answers_name_npb076_and_route_flex_attention_to_fused_attention(tmp_path: Path) -> None:
    """No torch_npu release can run FlexAttention (NPB076): "Runs?" counts the finding with its fix, and the
    implementation route for the op is F.scaled_dot_product_attention / npu_fusion_attention, not a kernel of one's
    own."""
    path = tmp_path / "flex_npu_answers.py"
    path.write_text(MODEL.replace("{mask}", "causal"), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=1,seq=256", "train:batch=1,seq=256"])
    runs = data["answers"]["runs"]
    assert runs["answer"] == "no" and "NPB076" in runs["failing_findings"]
    assert "NPB041" not in runs["failing_findings"]  # it restates the unsupported ops: named once, as the ops
    routes = {r["target"]: r for r in data["routes"] if r["kind"] == "op"}
    for op in ("higher_order::flex_attention", "higher_order::flex_attention_backward"):
        if op in routes:
            assert routes[op]["recommended"] == "sdpa_npu_fusion_attention"
    assert "higher_order::flex_attention" in routes


def test_too_many_batch_head_pairs_are_sampled_and_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the cap on mask elements evaluated, an even sample of the (batch, head) pairs gives the share, and the
    share says it is an estimate; one pair over the cap leaves the share unknown."""
    from npuport.trace import flex

    monkeypatch.setattr(flex, "_MAX_EVALUATED", 3 * 1024 * 1024)
    causal = lambda b, h, q, kv: q >= kv  # noqa: E731
    sampled = flex._evaluate(causal, 2, 4, 1024, 1024, 128, 128)
    assert sampled.value == pytest.approx(36 / 64) and "3 of its 8" in (sampled.why or "")
    unknown = flex._evaluate(causal, 1, 1, 2048, 2048, 128, 128)
    assert unknown.value is None and "more than" in (unknown.why or "")


def test_the_top_action_gives_npb076s_fix_not_another_release(tmp_path: Path) -> None:
    """No torch_npu release can run FlexAttention (torch refuses NPU tensors): the action for its unsupported ops is
    the rule's fix, not 'pick a release that has it'."""
    from npuport.render.audit_doc import actions

    path = tmp_path / "flex_action.py"
    path.write_text(MODEL.replace("{mask}", "none"), encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=1,seq=256"])
    acts = [a for a in actions(data) if "flex_attention" in a.what]
    assert acts and all(a.fix.startswith("NPB076: Use F.scaled_dot_product_attention") for a in acts), acts
