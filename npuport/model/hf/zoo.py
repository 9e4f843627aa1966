"""Configs for sweeping the installed transformers' architectures: every causal-LM model type from its default
config, with the layer count cut (per-layer lists cut to match) so a sweep stays quick, and a "tiny" variant with
small widths that can be built on real tensors as a control.

Used by scripts/zoo_sweep.py and the per-family tests; nothing here runs a model.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import tempfile
import time
from typing import Any, Callable, Iterator

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "decoder_layers")

# Small widths for the real-tensor control. Only keys a config already has are changed.
_TINY = {
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "dim": 64,
    "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "ffn_hidden_size": 128,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "expert_intermediate_size": 32,
    "vocab_size": 256, "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
    "max_position_embeddings": 512, "n_positions": 512,
}


def cut_layers(raw: dict[str, Any], layers: int = 2) -> dict[str, Any]:
    """The config with `layers` decoder layers; lists of per-layer values are cut to the same layers. A hybrid keeps
    one layer of each kind it has (attention, linear attention, SSM, ...) where `layers` allows, and a MoE config whose
    first dense layers would cover every kept layer keeps one MoE layer."""
    out = copy.deepcopy(raw)
    for section in _sections(out):
        old = next((section[k] for k in LAYER_KEYS if isinstance(section.get(k), int)), None)
        if old is None or old <= layers:
            continue
        _unroll_cycles(section, old)
        keep = _kept_layers(section, old, layers)
        for k in LAYER_KEYS:
            if isinstance(section.get(k), int):
                section[k] = layers
        for k, v in list(section.items()):
            if isinstance(v, list) and len(v) == old:
                section[k] = [v[i] for i in keep]
            elif isinstance(v, str) and len(v) == old and k.endswith("pattern"):
                section[k] = "".join(v[i] for i in keep)
            elif isinstance(v, dict) and v and all(str(i).isdigit() for i in v):  # {layer index: settings}
                section[k] = {type(i)(keep.index(int(i))): x for i, x in v.items() if int(i) in keep}
            elif k.endswith(("layer_indices", "layer_ids")) and isinstance(v, list) and all(isinstance(i, int) for i in v):
                section[k] = [keep.index(i) for i in v if i in keep]  # absolute indices renumbered
        for k in ("first_k_dense_replace", "num_dense_layers", "first_dense_layers"):
            if isinstance(section.get(k), int) and section[k] >= layers:
                section[k] = layers - 1
        for kind in ("attn", "expert"):  # Jamba-style "every period-th layer from offset"
            off, per = f"{kind}_layer_offset", f"{kind}_layer_period"
            if isinstance(section.get(off), int) and isinstance(section.get(per), int) and section[off] >= layers:
                section[off], section[per] = layers - 1, layers
        if all(isinstance(section.get(k), int) for k in ("n_input_layers", "n_recurrent_layers", "n_output_layers")):
            section["n_input_layers"], section["n_output_layers"] = 0, 0
            section["n_recurrent_layers"] = layers
    return out


_KINDS = ("layer_types", "layers_block_type", "pattern", "block_types")


def _kept_layers(section: dict[str, Any], old: int, layers: int) -> list[int]:
    """Which of the `old` layers to keep: the fewest layers that show every kind of every per-layer list (an attention
    kind and an MLP kind are separate lists in Kimi-Linear: the first dense layer is a linear-attention one, the full
    attention sits in a sparse layer), then the explicit attention-layer indices, then the earliest others."""
    lists = [[str(x) for x in v] for k, v in section.items() if isinstance(v, (list, str)) and len(v) == old
             and k.endswith(_KINDS)]
    want = {(j, kinds[i]) for j, kinds in enumerate(lists) for i in range(old)}
    keep: list[int] = []
    while want:  # greedy cover: the layer showing most kinds not yet kept, the earliest among equals
        gain = {i: sum((j, kinds[i]) in want for j, kinds in enumerate(lists)) for i in range(old) if i not in keep}
        best = max(gain, key=lambda i: (gain[i], -i))
        keep.append(best)
        want -= {(j, kinds[best]) for j, kinds in enumerate(lists)}
    for k, v in section.items():  # explicit attention-layer index lists (Bamba, Zamba)
        if k.endswith(("layer_indices", "layer_ids")) and isinstance(v, list) and v and isinstance(v[0], int) and v[0] not in keep:
            keep.append(v[0])
    keep = sorted(keep[:layers])
    for i in range(old):
        if len(keep) >= layers:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep)


def _unroll_cycles(section: dict[str, Any], old: int) -> None:
    """A layer-kind list shorter than the layers repeats (RecurrentGemma's block_types: recurrent, recurrent,
    attention, ...): written out per layer, so that cutting keeps the kinds of the layers kept."""
    for k, v in list(section.items()):
        if k.endswith("block_types") and isinstance(v, list) and 0 < len(v) < old and all(isinstance(x, str) for x in v):
            section[k] = [v[i % len(v)] for i in range(old)]


def tiny(raw: dict[str, Any]) -> dict[str, Any]:
    """Small widths for a real-tensor run (the control); layer count untouched."""
    out = copy.deepcopy(raw)
    for section in _sections(out):
        for k, v in _TINY.items():
            if isinstance(section.get(k), int) and not isinstance(section.get(k), bool) and section[k] > v:
                section[k] = v
        # special token ids must stay inside the shrunk vocabulary (an embedding's padding_idx is checked)
        vocab = section.get("vocab_size")
        if isinstance(vocab, int):
            for k, v in list(section.items()):
                if k.endswith("token_id") and isinstance(v, int) and v >= vocab:
                    section[k] = vocab - 1
                elif k.endswith("token_id") and isinstance(v, list):
                    section[k] = [x if not isinstance(x, int) or x < vocab else vocab - 1 for x in v]
        # MLA (DeepSeek-style): head_dim is the rotary part of the query/key head; the full head is nope + rope
        if isinstance(section.get("qk_rope_head_dim"), int):
            if "head_dim" in section:
                section["head_dim"] = section["qk_rope_head_dim"]
            if "num_key_value_heads" in section:  # MLA shares the latent across heads: no grouped K/V heads
                section["num_key_value_heads"] = section.get("num_attention_heads")
            if "qk_head_dim" in section:
                section["qk_head_dim"] = section["qk_rope_head_dim"] + section.get("qk_nope_head_dim", 0)
    return out


def _sections(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The top-level config and any nested sub-config (text_config, ...) that has its own layer count."""
    found = [raw]
    for v in raw.values():
        if isinstance(v, dict) and any(k in v for k in LAYER_KEYS + ("hidden_size",)):
            found.append(v)
    return found


def default_config(model_type: str) -> dict[str, Any]:
    import transformers  # noqa: PLC0415 - optional dependency, imported where it is used

    cfg = transformers.AutoConfig.for_model(model_type)
    raw = cfg.to_dict()
    raw["model_type"] = model_type
    return raw


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: PLC0415 - optional dependency, imported where it is used

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def for_each_type(types: list[str], work: Callable[[str, str], dict], workers: int = 2,
                  timeout: float = 300.0) -> Iterator[dict]:
    """Run `work(model_type, folder)` for each type in its own forked process (one model's monkeypatches and memory
    never reach the next), `workers` at a time, and yield each row as it finishes. A process that dies or runs past
    `timeout` seconds yields {"type", "status": "error", "reason"}. Import what `work` needs before calling this,
    so each child starts with it loaded."""
    ctx = mp.get_context("fork")

    def child(model_type: str, folder: str, queue: "mp.Queue") -> None:
        try:
            queue.put(work(model_type, folder))
        except Exception as exc:  # a crash in `work` is a row, not the end of the sweep
            queue.put({"type": model_type, "status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:160]}"})

    with tempfile.TemporaryDirectory() as folder:
        pending = list(types)
        running: dict[str, tuple[Any, Any, float]] = {}
        while pending or running:
            while pending and len(running) < workers:
                t = pending.pop(0)
                q = ctx.Queue()
                p = ctx.Process(target=child, args=(t, folder, q))
                p.start()
                running[t] = (p, q, time.perf_counter())
            time.sleep(0.2)
            for t, (p, q, started) in list(running.items()):
                row = None
                if not q.empty():
                    row = q.get()
                    p.join()
                elif not p.is_alive():
                    row = {"type": t, "status": "error", "reason": f"process died (exit {p.exitcode})"}
                elif time.perf_counter() - started > timeout:
                    p.kill()
                    row = {"type": t, "status": "error", "reason": f"timed out after {timeout:.0f} s"}
                if row is not None:
                    del running[t]
                    yield row
