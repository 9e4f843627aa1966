"""The decode cache's prefill with identical layers run once (npuport.model.hf.prefill_once): the same cache as
running every layer, only on fake tensors, only when the audit allows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from npuport.model.hf import prefill_once
from npuport.model.hf.inputs import _shapes
from npuport.model.loading import load_target
from npuport.model.scenarios import parse_scenario

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, name: str, layers: int = 4, small: bool = False) -> str:
    from npuport.model.hf.zoo import cut_layers

    cfg = cut_layers(json.loads((ROOT / "examples" / "configs" / f"{name}.json").read_text()), layers)
    if small:  # real weights on the CPU: a few MB
        cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(cfg))
    return str(out)


def _cache(model, sc, monkeypatch: pytest.MonkeyPatch, allow: bool) -> tuple[object, int]:
    copies = []
    real = prefill_once._clone
    monkeypatch.setattr(prefill_once, "_clone", lambda layer: copies.append(1) or real(layer))
    with prefill_once.allowed(allow), model.mode:
        args, kwargs = model.make_inputs(sc)
    monkeypatch.setattr(prefill_once, "_clone", real)
    cache = next(v for v in kwargs.values() if hasattr(v, "layers"))
    return cache, len(copies)


@pytest.mark.parametrize("name", ["llama-2-7b", "gemma-3-27b", "qwen3-next-80b-a3b"])
def test_fake_prefill_copies_slots_and_keeps_every_shape(name: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path, name, layers=6)
    sc = parse_scenario("decode:batch=1,past=64")
    fast, made = _cache(load_target(hf_config=cfg), sc, monkeypatch, True)
    full, none = _cache(load_target(hf_config=cfg), sc, monkeypatch, False)
    assert none == 0 and made > 0  # some slots were copied rather than computed
    assert _shapes(fast) == _shapes(full)
    sizes = lambda c: [sorted(t.untyped_storage().nbytes() for t in vars(layer).values()  # noqa: E731
                              if isinstance(t, torch.Tensor)) for layer in c.layers]
    assert sizes(fast) == sizes(full)  # a sliding-window slot's view keeps its whole storage, as the model's does


def test_real_weights_always_run_every_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parity, profile and bench build the cache on real tensors: its values must be the model's, never copies."""
    cfg = _config(tmp_path, "llama-2-7b", layers=3, small=True)
    sc = parse_scenario("decode:batch=1,past=8")
    torch.manual_seed(0)
    model = load_target(hf_config=cfg, fake=False, dtype="float32")
    cache, made = _cache(model, sc, monkeypatch, True)
    assert made == 0
    keys = [layer.keys for layer in cache.layers]
    assert not any(torch.equal(keys[0], k) for k in keys[1:])  # every layer computed its own
