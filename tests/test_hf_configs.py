"""Every shipped Hugging Face config audits on fake tensors, with op counts checked against the architecture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from npuport.api import audit_model  # noqa: E402

ALL_CONFIGS = sorted((Path(__file__).resolve().parent.parent / "examples" / "configs").glob("*.json"))
# Current open-weights architectures (MLA, MoE, no SDPA path, composite, linear-attention hybrid): published sizes,
# checked below on a short decode; the dense classics get the full three-scenario check.
LARGE = {"deepseek-v3": 671.0e9, "qwen3-235b-a22b": 235.1e9, "gpt-oss-120b": 116.8e9, "gemma-3-27b": 27.0e9,
         "qwen3-next-80b-a3b": 79.7e9}
CONFIGS = [c for c in ALL_CONFIGS if c.stem not in LARGE]
# each config traces a full-size architecture (1-10 s apiece on CPU); the smallest stays in the fast run
FAST = {"gpt2"}


def _op(data, name):
    return next((o for o in data["ops"] if o["op"] == name), None)


@pytest.mark.parametrize("config", [c if c.stem in FAST else pytest.param(c, marks=pytest.mark.slow) for c in CONFIGS],
                         ids=lambda p: p.stem)
def test_config_audits(config):
    raw = json.loads(config.read_text())
    _, data = audit_model(hf_config=str(config))
    layers = raw.get("num_hidden_layers") or raw["n_layer"]
    assert [s["name"] for s in data["scenarios"]] == ["train", "prefill", "decode"]
    sdpa = _op(data, "aten::scaled_dot_product_attention")
    assert sdpa is not None, "attention must be reported as SDPA, not its CPU variant"
    assert not any("for_cpu" in o["op"] for o in data["ops"])
    assert sdpa["scenarios"]["prefill"]["calls"] == layers
    assert sdpa["scenarios"]["train"]["phases"] == {"forward": layers, "backward": layers}
    dec = next(s for s in data["scenarios"] if s["name"] == "decode")
    assert dec["seq"] == 1 and dec["past"] > 0
    hot = [o["op"] for o in data["ops"] if o["class"] == "hot"]
    assert any(op in hot for op in ("aten::mm", "aten::addmm", "aten::_grouped_mm"))
    assert abs(sum(o["time_share"] for o in data["ops"]) - 1.0) < 1e-9


@pytest.mark.slow
def test_llama2_7b_by_hand():
    cfg = next(c for c in CONFIGS if c.stem == "llama-2-7b")
    _, data = audit_model(hf_config=str(cfg))
    assert data["model"]["parameters"] == 6_738_415_616  # the published Llama-2-7B parameter count
    mm = _op(data, "aten::mm")
    # 7 projections per layer x 32 layers + lm_head, one token at decode: M = 1
    assert mm["scenarios"]["prefill"]["calls"] == 7 * 32 + 1
    assert mm["scenarios"]["decode"]["shapes"][0]["inputs"] in {"1x4096 4096x11008", "1x11008 11008x4096"}
    h, i, v, layers, t = 4096, 11008, 32000, 32, 4096
    expect = 2 * t * (layers * (4 * h * h + 3 * h * i) + h * v)
    assert mm["scenarios"]["prefill"]["flops"] == expect
    assert mm["scenarios"]["prefill"]["bound"] == "compute" and mm["scenarios"]["decode"]["bound"] == "memory"
    # RMSNorm is decomposed on NPU (no fused aten kernel): two per layer plus the final one
    assert _op(data, "aten::rsqrt")["scenarios"]["prefill"]["calls"] == 2 * layers + 1


@pytest.mark.slow
def test_mixtral_experts_use_grouped_gemm():
    cfg = next(c for c in CONFIGS if c.stem == "mixtral-8x7b")
    _, data = audit_model(hf_config=str(cfg), scenarios=["prefill"])
    g = _op(data, "aten::_grouped_mm")
    assert g is not None and g["scenarios"]["prefill"]["calls"] == 2 * 32
    # every token meets top-2 experts: 2 x 4096 rows through gate_up (4096 -> 2 x 14336) and down (14336 -> 4096)
    assert g["scenarios"]["prefill"]["flops"] == 32 * 2 * (2 * 4096) * (4096 * 2 * 14336 + 14336 * 4096)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LARGE))
def test_current_architectures_audit(name):
    """Each audits at its real dtype with the published parameter count (to 0.5%), decode reading the model's own cache."""
    cfg = next(c for c in ALL_CONFIGS if c.stem == name)
    _, data = audit_model(hf_config=str(cfg), scenarios=["decode:past=256"])
    assert data["failed_scenarios"] == []
    assert data["model"]["dtype"] == "bfloat16" and data["model"]["dtype_source"] == "config"
    assert abs(data["model"]["parameters"] / LARGE[name] - 1) < 0.005, data["model"]["parameters"]
    dec = data["scenarios"][0]
    assert dec["past"] == 256 and dec["recompute"] is False
    assert abs(sum(o["time_share"] for o in data["ops"]) - 1.0) < 1e-9
    if name in ("deepseek-v3", "qwen3-235b-a22b", "gpt-oss-120b", "qwen3-next-80b-a3b"):
        assert any(o["op"] == "aten::_grouped_mm" for o in data["ops"])


def test_prophetnet_fits_its_ngram_streams_and_its_decode_assertion(tmp_path):
    """ProphetNet's n-gram streams take the positions after the main stream's: its context is its position table
    less `ngram` (510 of 512; 511 tokens fail on real tensors too), and its decode asserts on its position ids,
    taken as holding and noted."""
    from transformers import ProphetNetConfig

    cfg = ProphetNetConfig(hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64, num_encoder_layers=2,
                           num_decoder_layers=2, num_encoder_attention_heads=2, num_decoder_attention_heads=2,
                           vocab_size=128).to_dict()
    assert cfg["max_position_embeddings"] == 512 and cfg["ngram"] == 2
    path = tmp_path / "prophetnet.json"
    path.write_text(json.dumps(cfg))
    _, data = audit_model(hf_config=str(path), scenarios=["prefill:seq=4096", "decode:past=4096"])
    assert data["failed_scenarios"] == []
    assert data["model"]["max_positions"] == 510
    by = {s["name"]: s for s in data["scenarios"]}
    assert by["prefill"]["seq"] == 510 and by["decode"]["past"] == 509
    assert any(n.startswith("decode: the model asserts on tensor values") for n in data["notes"])
