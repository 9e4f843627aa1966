"""Is a record the run it is compared as: the same model, and the step and seed the user named.

A compare that holds a record against another model (an HF config with another rope_theta: same state-dict names
and shapes, same seeded weights) or against a step the user did not ask for reports a divergence and blames the
device. These checks say so first, in one line (exit 2). Pure functions over manifests and loaded models' plain
attributes (no torch), so the CLI can check what the user asked before anything loads.

What is not the model: the device, and the config keys transformers itself keeps apart from the architecture
(NOT_THE_MODEL: what every config holds, generation options, load-time options, private keys; see there). A model
file may differ between the machines (ported: `.cuda()` became `.npu()`): it is the same model when its state-dict
signature and weights match, which the compare checks; the difference is noted. So is a record made before npuport
kept the resolved config whose config file's hash differs: the config could not be checked, it is not refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from npuport.errors import NpuportError
from npuport.model.scenarios import Scenario, fit_to_context, parse_scenario

# HF config keys, at any depth, that say how a run behaves or where the file came from, not which model it is. Not a
# list of keys seen to differ: the keys transformers (5.25) keeps apart from any architecture's own, so a key a model
# config class declares for its computation (hidden sizes, heads, rope_parameters, norm eps, hidden_act, MoE routing,
# tie_word_embeddings, pad_token_id...) is compared. tests/parity/test_identity.py checks them against the installed
# transformers. Keys with a leading "_" (transformers' internal state: _name_or_path, _commit_hash,
# _attn_implementation*, _experts_implementation, _output_attentions, _from_model_config) are left out too.
# 1. The fields PreTrainedConfig itself declares (dataclasses.fields(PreTrainedConfig)), common to every model:
#    metadata, output switches, the dtype (the state-dict signature holds the dtypes), feed-forward chunking (the same
#    sums), and the fine-tuning labels (a head of another size changes the state-dict signature).
_CONFIG_BASE = frozenset({"transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype",
                          "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type"})
# 2. Generation options: the attributes a GenerationConfig holds (GenerationConfig().to_dict(); use_cache and
#    output_attentions among them), less its "special tokens" (pad_token_id, bos_token_id, eos_token_id,
#    decoder_start_token_id), which models read in their forward: pad_token_id is the embedding's padding_idx,
#    decoder_start_token_id starts the decoder inputs shifted from labels, eos_token_id marks the token BART-style
#    classification heads pool.
_GENERATION = frozenset({
    "assistant_confidence_threshold", "assistant_early_exit", "assistant_ensemble_weight", "assistant_lookbehind",
    "bad_words_ids", "begin_suppress_tokens", "cache_config", "cache_implementation", "compile_config", "constraints",
    "continuous_batching_config", "disable_compile", "diversity_penalty", "do_sample", "dola_layers", "early_stopping",
    "encoder_no_repeat_ngram_size", "encoder_repetition_penalty", "epsilon_cutoff", "eta_cutoff",
    "exponential_decay_length_penalty", "force_words_ids", "forced_bos_token_id", "forced_eos_token_id",
    "guidance_scale", "is_assistant", "length_penalty", "low_memory", "max_cache_len", "max_length",
    "max_matching_ngram_size", "max_new_tokens", "max_time", "min_length", "min_new_tokens", "min_p",
    "no_repeat_ngram_size", "num_assistant_tokens", "num_assistant_tokens_schedule", "num_beam_groups", "num_beams",
    "num_return_sequences", "output_attentions", "output_hidden_states", "output_logits", "output_scores",
    "penalty_alpha", "prefill_chunk_size", "prompt_lookup_num_tokens", "remove_invalid_values", "renormalize_logits",
    "repetition_penalty", "return_dict_in_generate", "sequence_bias", "speculation_type", "stop_strings",
    "suppress_tokens", "target_lookbehind", "temperature", "token_healing", "top_h", "top_k", "top_p",
    "typical_p", "use_cache", "use_mtp", "watermarking_config"})
# 3. Load-time options: what PreTrainedConfig.from_dict takes from from_pretrained's keywords (attn_implementation,
#    experts_implementation, output_attentions, torch_dtype, dtype, name_or_path; num_labels is id2label's length)
#    and, for configs resolved by transformers 4.x (pyproject allows >= 4.40), the runtime and tokenizer attributes its
#    PretrainedConfig.__init__ set on every config (torchscript, use_bfloat16, tf_legacy_loss, finetuning_task,
#    task_specific_params, tokenizer_class, prefix, gradient_checkpointing).
_LOAD_TIME = frozenset({"attn_implementation", "experts_implementation", "output_attentions", "torch_dtype", "dtype",
                        "name_or_path", "num_labels", "torchscript", "use_bfloat16", "tf_legacy_loss",
                        "finetuning_task", "task_specific_params", "tokenizer_class", "prefix", "gradient_checkpointing"})
NOT_THE_MODEL = _CONFIG_BASE | _GENERATION | _LOAD_TIME
_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # the --dtype spellings (model/hf/build.py)
_FITTED = re.compile(r"shortened to fit the model's (\d+) positions")


def not_the_model(key: str) -> bool:
    """A config key (at any depth) that says how a run behaves or where the file came from, not which model it is."""
    return key in NOT_THE_MODEL or key.startswith("_")


def resolved_config(module: Any) -> dict[str, Any] | None:
    """The model's config as transformers resolved it (its defaults filled in, so a key a config file leaves out is
    compared at its default), as plain JSON; None for a model without one."""
    config = getattr(module, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        data = json.loads(json.dumps(to_dict(), default=str))
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def model_identity(raw_config: dict[str, Any] | None, module: Any, source_files: list[Path]) -> dict[str, Any]:
    """The manifest's `model` fields that identify the model: `config` (resolved_config, so a difference can be
    named), `config_sha256` (of the config file as given), or a model file's `file_sha256`."""
    out: dict[str, Any] = {}
    config = resolved_config(module)
    if config is not None:
        out["config"] = config
    if raw_config is not None:
        out["config_sha256"] = hashlib.sha256(json.dumps(raw_config, sort_keys=True).encode()).hexdigest()
    elif source_files:
        out["file_sha256"] = hashlib.sha256(Path(source_files[0]).read_bytes()).hexdigest()
    return out


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two resolved configs disagree. A key on one side only is left out: transformers versions add, rename and
    move keys (rope_theta into rope_parameters), and the resolved config holds every key its version knows."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) & set(b), key=str):
            if not not_the_model(str(k)):
                out += _differences(a[k], b[k], f"{path}.{k}" if path else str(k))
        return out
    return [] if a == b else [f"{path} {json.dumps(a)[:40]} vs {json.dumps(b)[:40]}"]


def model_difference(first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """None when the two manifests' `model` fields (or a live model's model_identity) name the same model; else what
    differs, for the error. Resolved configs are compared key by key, the keys not_the_model left out. A record made
    before the manifest held its config has only the hash of the config file as given, which a copy with another
    torch_dtype or _name_or_path changes too: not refused on it (config_unchecked says so; the state-dict signature
    and weights fingerprint are still checked)."""
    a, b = first.get("config"), second.get("config")
    if isinstance(a, dict) and isinstance(b, dict):
        diff = _differences(a, b)
        if not diff:
            return None
        more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
        return ", ".join(diff[:3]) + more
    return None


def config_unchecked(first: dict[str, Any], second: dict[str, Any], what: str) -> str | None:
    """A note when one side (a record made before npuport kept the resolved config) holds only the hash of its config
    file and the hashes differ: the configs could not be compared key by key, so nothing was refused on them."""
    if isinstance(first.get("config"), dict) and isinstance(second.get("config"), dict):
        return None
    ha, hb = first.get("config_sha256"), second.get("config_sha256")
    if isinstance(ha, str) and isinstance(hb, str) and ha != hb:
        return (f"{what}: the config files differ (sha256 {ha[:12]} vs {hb[:12]}) and the model config could not be "
                "checked (a record made before npuport kept the resolved config holds only its file's hash, which "
                "another torch_dtype or _name_or_path changes too); compared as the same model on its state-dict "
                "signature and weights: record it again to have the config checked")
    return None


def _config_name(model: dict[str, Any]) -> str:
    digest = model.get("config_sha256")
    return f"{model.get('origin') or model.get('name')}" + (f" (config sha256 {digest[:12]})" if isinstance(digest, str) else "")


def check_same_model(recorded: dict[str, Any], live: dict[str, Any]) -> None:
    """The model built now (`live`: model_identity plus origin) against the record's `model`: another config is
    refused."""
    diff = model_difference(recorded, live)
    if diff is not None:
        raise NpuportError("the record was made from another model config than the one given",
                           f"the record's config {_config_name(recorded)}", f"{_config_name(live)}: {diff}")


def file_note(recorded: dict[str, Any], live: dict[str, Any], what: str) -> str | None:
    """A model file that differs from the record's (ported, say): not refused, the signature and weights decide; said.
    Likewise an HF config that could not be checked against an old record's (config_unchecked)."""
    return config_unchecked(recorded, live, "the record and the config given") or _file_differs(recorded, live, what)


def _file_differs(recorded: dict[str, Any], live: dict[str, Any], what: str) -> str | None:
    ha, hb = recorded.get("file_sha256"), live.get("file_sha256")
    if isinstance(ha, str) and isinstance(hb, str) and ha != hb:
        return (f"{what} (sha256 {ha[:12]} vs {hb[:12]}): compared as the same model, its state-dict signature and "
                "weights match")
    return None


def check_same_records(manifests: dict[str, dict[str, Any]]) -> list[str]:
    """Records compared with each other (role -> manifest, ref first) hold one model: the same config and the same
    weights (their fingerprint is taken on the CPU before the model is placed, so it is equal across devices and
    layouts). Returns notes (model files that differ, configs an old record let go unchecked)."""
    roles = list(manifests)
    base = manifests[roles[0]]
    notes = []
    for role in roles[1:]:
        other = manifests[role]
        diff = model_difference(base["model"], other["model"])
        if diff is not None:
            raise NpuportError(f"the {roles[0]} and {role} records were made from different model configs",
                               "records of the same model", f"{_config_name(base['model'])} vs "
                               f"{_config_name(other['model'])}: {diff}")
        fa, fb = ((m.get("weights") or {}).get("fingerprint") for m in (base, other))
        if isinstance(fa, str) and isinstance(fb, str) and fa != fb:
            raise NpuportError(f"the {roles[0]} and {role} records hold different weights", "records of the same model "
                               "made with the same seed (transformers' initialisation may change between versions: "
                               "record with --store-weights)", f"weights fingerprint {fa[:16]} vs {fb[:16]}")
        note = (config_unchecked(base["model"], other["model"], f"the {roles[0]} and {role} records")
                or _file_differs(base["model"], other["model"], f"the {roles[0]} and {role} records' model files differ"))
        if note:
            notes.append(note)
    return notes


# -- what the user asked against what a record holds (the CLI knows which options were given) --------------------

def record_manifest(folder: str | Path) -> dict[str, Any] | None:
    """A record's manifest (rank 0's part for a per-rank record); None when unreadable: loading it says why."""
    try:
        top = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
        if isinstance(top, dict) and top.get("schema") == "npuport.parity-ranks/1":
            part = next(p for p in top["parts"] if p.get("rank") == 0)
            top = json.loads((Path(folder) / str(part["path"]) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, AttributeError, KeyError, TypeError, StopIteration):
        return None
    return top if isinstance(top, dict) else None


def record_max_positions(manifest: dict[str, Any]) -> int | None:
    """The positions the record's model takes (its step was shortened to them): the manifest's, or, in a record made
    before it held them, the number its note about shortening names."""
    n = (manifest.get("model") or {}).get("max_positions")
    if isinstance(n, int):
        return n
    for w in manifest.get("warnings") or []:
        m = _FITTED.search(str(w))
        if m:
            return int(m.group(1))
    return None


def _show(sc: dict[str, Any]) -> str:
    return f"{sc.get('kind')} batch {sc.get('batch')} x {sc.get('seq')}" + (f", past {sc['past']}" if sc.get("past") else "")


def check_asked(manifest: dict[str, Any], path: str, scenario: str | None = None, seed: int | None = None,
                dtype: str | None = None) -> None:
    """The options a user gave (None: not given) against the record at `path`, which fixes them: a compare runs the
    record's own step, seed and dtype, so one that names others would be silently ignored. The step asked is fitted
    to the record's model's positions first (as the record's was), and only the sizes named in `scenario` count;
    its mode may differ (an eager record against a compiled step is a comparison the docs describe)."""
    recorded = manifest.get("scenario")
    if scenario is not None and isinstance(recorded, dict):
        want: Scenario = parse_scenario(scenario)
        fitted, _ = fit_to_context(want, record_max_positions(manifest))
        named = {p.partition("=")[0].strip() for p in scenario.partition(":")[2].split(",") if "=" in p}
        differ = want.kind != recorded.get("kind")
        differ = differ or any(k in named and getattr(fitted, k) != recorded.get(k) for k in ("batch", "seq", "past"))
        if differ:
            raise NpuportError(f"--scenario {scenario} is not the step the record {path} holds",
                               f"the record's own step, {_show(recorded)}, or no --scenario",
                               f"--scenario {scenario} ({_show(fitted.to_json())})")
    held = (manifest.get("rng") or {}).get("seed")
    if seed is not None and isinstance(held, int) and seed != held:
        raise NpuportError(f"--seed {seed} is not the seed the record {path} was made with",
                           f"its seed {held}, which made its weights and inputs, or no --seed", f"--seed {seed}")
    policy = manifest.get("dtype_policy") or {}
    held_dtype = policy.get("requested") or policy.get("model_dtype")
    if dtype is not None and isinstance(held_dtype, str) and _ALIASES.get(dtype, dtype) != _ALIASES.get(held_dtype, held_dtype):
        raise NpuportError(f"--dtype {dtype} is not the dtype of the record {path}",
                           f"the record's {held_dtype}, or no --dtype", f"--dtype {dtype}")
