"""One small model of each architecture family audits end to end, and its fake trace takes the path a real run takes.

The configs are the installed transformers' defaults, cut to 2 layers (a hybrid keeps one layer of each kind) and
shrunk to small widths (npuport.model.hf.zoo), so the same config also runs on real CPU tensors as the control.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from npuport.api import audit_model  # noqa: E402
from npuport.audit.trace_stage import trace_scenario  # noqa: E402
from npuport.model.hf.zoo import cut_layers, default_config, tiny  # noqa: E402
from npuport.model.loading import load_hf_config  # noqa: E402
from npuport.model.scenarios import parse_scenarios  # noqa: E402

FAMILIES = {
    "llama": "dense, grouped-query attention",
    "qwen3_moe": "mixture of experts",
    "deepseek_v3": "MLA + MoE with shared experts",
    "gemma2": "no SDPA path, sliding window",
    "falcon_h1": "SSM hybrid (Mamba-2 + attention)",
    "qwen3_next": "linear-attention hybrid + MoE",
    "gemma3": "composite config (text decoder of a multimodal model)",
    "gpt_oss": "no SDPA path, MoE, sliding window",
    "bert": "encoder",
    "megatron-bert": "encoder with a bidirectional mask check and the padding warning",
    "dory": "recurrent loops over shared layers, its cache layers deep-copied in the forward",
    "jetmoe": "MoE that reads its expert token counts on the host (tolist, split)",
    "cpmant": "a decode step that needs the inputs generate() passes (the full input_ids beside the cache)",
}
SCENARIOS = ["train:batch=1,seq=16", "prefill:batch=1,seq=16", "decode:batch=1,past=16"]


def _available(model_type: str) -> bool:
    from npuport.model.hf.zoo import causal_lm_types

    return model_type in causal_lm_types()


@pytest.fixture(scope="module")
def tiny_configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zoo")
    out = {}
    for mt in FAMILIES:
        if _available(mt):
            path = folder / f"{mt}.json"
            path.write_text(json.dumps(tiny(cut_layers(default_config(mt), 2)), default=str))
            out[mt] = path
    return out


# the two hybrids (SSM, linear attention) are the slowest families to trace: marked slow
@pytest.mark.parametrize("model_type", [pytest.param(mt, marks=pytest.mark.slow) if mt in ("falcon_h1", "qwen3_next") else mt
                                        for mt in FAMILIES])
def test_family_audits(model_type, tiny_configs):
    if model_type not in tiny_configs:
        pytest.skip(f"transformers has no {model_type}")
    report, data = audit_model(hf_config=str(tiny_configs[model_type]), scenarios=SCENARIOS)
    assert data["failed_scenarios"] == []
    names = [s["name"] for s in data["scenarios"]]
    if model_type in ("bert", "megatron-bert"):
        assert names == ["train", "prefill"]
        assert any("bidirectional encoder" in n for n in data["notes"])
    else:
        assert names == ["train", "prefill", "decode"]
        dec = data["scenarios"][2]
        assert dec["seq"] == 1 and dec["past"] == 16 and dec["recompute"] is False
    assert data["model"]["dtype"] == "bfloat16"  # the config names none: bfloat16, said in the notes
    assert any("bfloat16" in n for n in data["notes"])
    assert abs(sum(o["time_share"] for o in data["ops"]) - 1.0) < 1e-9
    if model_type in ("gemma2", "gpt_oss"):
        assert data["model"]["attn"] != "sdpa" and any("no SDPA path" in n for n in data["notes"])
    if model_type == "gemma3":
        assert any("composite config" in n for n in data["notes"])
    if model_type == "cpmant":  # the plain decode step fails in transformers itself; generate()'s inputs run
        assert any(n.startswith("decode: traced with the inputs transformers' generate()") for n in data["notes"])
    if model_type == "jetmoe":  # traced with balanced routing, and said so for each scenario
        assert sum("expert routing" in n for n in data["notes"]) == 3


def test_mla_decode_reads_the_latent_cache(tiny_configs):
    """DeepSeek-V3's decode step reads the cache the model itself keeps (per layer: K with the rope part, V)."""
    _, data = audit_model(hf_config=str(tiny_configs["deepseek_v3"]), scenarios=["decode:batch=2,past=16"])
    cat = next(o for o in data["ops"] if o["op"] == "aten::cat")
    # the cache update concatenates 16 cached positions with the new one, for K and V of each of the 2 layers
    shapes = " ".join(s["inputs"] for s in cat["shapes"]["decode"])
    assert "x16x" in shapes and "x1x" in shapes


def _op_multiset(trace) -> Counter:
    """Ops that compute. View ops are left out: autograd regenerates views on real CPU tensors with as_strided where
    fake tensors replay the view itself (slice): same memory, no traffic, a different view op name."""
    return Counter(c.op for c in trace.calls if c.kind == "compute")


# The one documented difference of fake versus real tracing: a real run reads a value on the host (`.item()`, a
# Python `if` on a tensor) as aten::_local_scalar_dense, which fake tensors cannot answer; the audit takes the
# branch a real run takes for its inputs (no padding, no packed sequences) without that read.
_ALLOWED = {"aten::_local_scalar_dense"}



# a real CPU run beside each fake trace; llama stays in the fast run, the other families are marked slow
@pytest.mark.parametrize("model_type", ["llama"] + [pytest.param(mt, marks=pytest.mark.slow)
                                                    for mt in ["qwen3_moe", "deepseek_v3", "gemma2", "falcon_h1", "bert", "megatron-bert"]])
def test_fake_trace_follows_the_real_run(model_type, tiny_configs):
    """The control: the aten ops of a real CPU run and of the fake trace are the same multiset, per scenario."""
    path = tiny_configs[model_type]
    fake = load_hf_config(path, dtype="bfloat16")
    real = load_hf_config(path, dtype="bfloat16", fake=False)
    assert fake.parameters == real.parameters  # same tying on both (skipping init must not skip the ties)
    real.module.load_state_dict({k: torch.zeros_like(v) for k, v in real.module.state_dict().items()}, strict=False)
    for sc in parse_scenarios(SCENARIOS):
        torch.manual_seed(0)
        got_fake, sc_fake = trace_scenario(fake, sc)
        torch.manual_seed(0)
        got_real, _ = trace_scenario(real, sc)
        if got_fake is None:
            assert got_real is None and sc.kind == "decode" and model_type in ("bert", "megatron-bert")
            continue
        a, b = _op_multiset(got_fake), _op_multiset(got_real)
        diff = {op: (a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op] and op not in _ALLOWED}
        assert not diff, f"{model_type} {sc.name}: op counts fake vs real differ: {diff}"


def test_training_step_has_no_mask_or_repeat_kv():
    """With the real path, a grouped-query model's training step passes no mask to SDPA and does not repeat K/V."""
    raw = tiny(cut_layers(default_config("llama"), 2))
    assert raw["num_key_value_heads"] < raw["num_attention_heads"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "llama.json"
        path.write_text(json.dumps(raw, default=str))
        fake = load_hf_config(path)
        trace, _ = trace_scenario(fake, parse_scenarios(["train:batch=1,seq=16"])[0])
    sdpa = [f for f in trace.frames.values() if f.op == "aten::scaled_dot_product_attention"]
    assert sdpa and all(f.kwargs.get("enable_gqa") is True for f in sdpa)
    assert all(f.kwargs.get("attn_mask") is None and len(f.args) < 4 or f.args[3] is None for f in sdpa)
    assert not any(c.op == "aten::expand" and c.module.endswith("self_attn") for c in trace.calls if c.phase == "forward"
                   and len(c.outputs[0].shape) == 5)


def test_moe_by_hand(tiny_configs):
    """Qwen3-MoE, 2 MoE layers, 4 experts, top-2, hidden 64, expert width 32, 16 tokens: the routed experts run as
    two grouped GEMMs per layer over 16 x 2 routed rows, the router is one GEMM per layer plus softmax and top-k."""
    raw = json.loads(tiny_configs["qwen3_moe"].read_text())
    h, f, k, e, layers, t = raw["hidden_size"], raw["moe_intermediate_size"], raw["num_experts_per_tok"], raw["num_local_experts"], 2, 16
    assert (h, f, k, e) == (64, 32, 2, 4)
    _, data = audit_model(hf_config=str(tiny_configs["qwen3_moe"]), scenarios=[f"prefill:batch=1,seq={t}"])
    ops = {o["op"]: o["scenarios"]["prefill"] for o in data["ops"] if "prefill" in o["scenarios"]}
    g = ops["aten::_grouped_mm"]
    assert g["calls"] == 2 * layers
    # gate+up: (t*k) x h @ h x 2f ; down: (t*k) x f @ f x h — only the active experts' rows are computed
    assert g["flops"] == layers * (2 * t * k * h * 2 * f + 2 * t * k * f * h)
    assert {s["inputs"] for s in g["shapes"]} == {f"{t * k}x{h} {e}x{h}x{2 * f} {e}", f"{t * k}x{f} {e}x{f}x{h} {e}"}
    assert ops["aten::topk"]["calls"] == layers and ops["aten::softmax.int"]["calls"] == layers
    router = [s for s in ops["aten::mm"]["shapes"] if s["inputs"] == f"{t}x{h} {h}x{e}"]
    assert router and router[0]["calls"] == layers
    assert any("routing assumed uniform" in a for a in data["assumptions"])


def test_reference_kernel_fallbacks_are_named(tmp_path):
    """Mamba's selective scan comes from `mamba_ssm` (CUDA only): the audit says it traced the reference path."""
    if "mamba" not in __import__("npuport.model.hf.zoo", fromlist=["x"]).causal_lm_types():
        pytest.skip("transformers has no mamba")
    path = tmp_path / "mamba.json"
    path.write_text(json.dumps(tiny(cut_layers(default_config("mamba"), 2)), default=str))
    for _ in range(2):  # transformers logs the fallback once per process: the second audit must still say it
        _, data = audit_model(hf_config=str(path), scenarios=["prefill:batch=1,seq=8"])
        assert any("`selective_scan_fn`" in n and "`mamba_ssm`" in n for n in data["notes"]), data["notes"]
        assert not any("no SDPA path" in n for n in data["notes"])  # attention-free: nothing to say about SDPA


def test_moe_config_dtype_rejected_by_grouped_gemm_does_not_end_the_audit(tmp_path, tiny_configs):
    """A float32 MoE config: torch's grouped GEMM takes bf16 only, so the audit traces bf16 and says why; a float32
    the user asks for is kept and the failure is one clear line."""
    raw = json.loads(tiny_configs["qwen3_moe"].read_text())
    raw["torch_dtype"] = "float32"
    path = tmp_path / "moe32.json"
    path.write_text(json.dumps(raw))
    _, data = audit_model(hf_config=str(path), scenarios=["prefill:batch=1,seq=8"])
    assert data["model"]["dtype"] == "bfloat16" and any("grouped GEMM" in n for n in data["notes"])
    from npuport.errors import NpuportError

    with pytest.raises(NpuportError, match="BF16"):
        audit_model(hf_config=str(path), scenarios=["prefill:batch=1,seq=8"], dtype="float32")


def test_fixed_size_state_cache_is_built_from_a_short_prefill(tmp_path, monkeypatch):
    """Mamba keeps a state whose size does not grow with the context: its decode cache comes from 8 tokens (measured
    against 16), while Llama's KV cache is built from the full `past`."""
    import npuport.model.hf.inputs as inputs

    seen: list[int] = []
    real = inputs._prefill_cache

    def spy(model, batch, past, vocab):
        seen.append(past)
        return real(model, batch, past, vocab)

    monkeypatch.setattr(inputs, "_prefill_cache", spy)
    for model_type, want in (("mamba", [8, 16]), ("llama", [300])):
        if model_type not in __import__("npuport.model.hf.zoo", fromlist=["x"]).causal_lm_types():
            continue
        path = tmp_path / f"{model_type}.json"
        path.write_text(json.dumps(tiny(cut_layers(default_config(model_type), 2)), default=str))
        seen.clear()
        _, data = audit_model(hf_config=str(path), scenarios=["decode:batch=1,past=300"])
        assert seen == want, (model_type, seen)
        assert data["scenarios"][0]["past"] == 300


def _work_for_test(model_type: str, folder: str) -> dict:
    if model_type == "boom":
        raise ValueError("bad type")
    if model_type == "die":
        import os as _os

        _os._exit(3)
    return {"type": model_type, "status": "ok", "folder_exists": __import__("os").path.isdir(folder)}


def test_for_each_type_runs_each_type_apart():
    from npuport.model.hf.zoo import for_each_type

    rows = {r["type"]: r for r in for_each_type(["a", "boom", "die", "b"], _work_for_test, workers=2, timeout=60)}
    assert rows["a"] == {"type": "a", "status": "ok", "folder_exists": True} and rows["b"]["status"] == "ok"
    assert rows["boom"]["status"] == "error" and "ValueError: bad type" in rows["boom"]["reason"]
    assert rows["die"]["status"] == "error" and "process died (exit 3)" in rows["die"]["reason"]
