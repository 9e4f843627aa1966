"""npuport.parity.identity: which config differences make another model, and the options a record fixes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from npuport.errors import NpuportError
from npuport.parity.identity import (
    NOT_THE_MODEL,
    check_asked,
    check_same_model,
    check_same_records,
    config_unchecked,
    file_note,
    model_difference,
    model_identity,
    not_the_model,
    record_manifest,
    record_max_positions,
)

from .conftest import LLAMA


def _model(config: dict) -> dict:
    """The `model` fields of a model built from `config` (transformers resolves it, as in a record)."""
    import transformers

    resolved = transformers.AutoConfig.for_model(**config)
    return dict(model_identity(config, SimpleNamespace(config=resolved), []), origin="cfg.json", name="cfg")


def test_another_rope_theta_is_another_model_and_names_the_key():
    other = dict(LLAMA, rope_theta=500000.0)
    # the file leaves rope_theta out: it is compared at transformers' default
    assert model_difference(_model(LLAMA), _model(other)) == "rope_parameters.rope_theta 10000.0 vs 500000.0"
    assert model_difference(_model(LLAMA), _model(dict(LLAMA, rope_theta=10000.0))) is None
    with pytest.raises(NpuportError) as exc:
        check_same_model(_model(LLAMA), _model(other))
    text = exc.value.render()
    assert "another model config" in text and "rope_theta 10000.0 vs 500000.0" in text
    assert _model(LLAMA)["config_sha256"][:12] in text and _model(other)["config_sha256"][:12] in text
    assert "\n" not in text


def test_dtype_attention_and_metadata_keys_are_not_the_model():
    ported = dict(LLAMA, torch_dtype="bfloat16", transformers_version="4.99.0", attn_implementation="eager",
                  _name_or_path="/elsewhere")
    assert _model(LLAMA)["config_sha256"] != _model(ported)["config_sha256"]
    assert model_difference(_model(LLAMA), _model(ported)) is None
    # at any depth; and a key one side's transformers does not know (added, or moved) is left out
    nested = {"config": {"text_config": {"hidden_size": 64, "dtype": "float32"}, "rope_theta": 1.0}}
    assert model_difference(nested, {"config": {"text_config": {"hidden_size": 64, "dtype": "bf16"}}}) is None
    assert model_difference(nested, {"config": {"text_config": {"hidden_size": 128}}}) == "text_config.hidden_size 64 vs 128"


def test_how_a_run_behaves_is_not_the_model():
    """Records of one Llama config were refused as another model config over use_cache, architectures, return_dict,
    output_hidden_states...: keys that say how a run behaves, not which model it is."""
    runtime = dict(LLAMA, use_cache=False, output_hidden_states=True, return_dict=False, output_attentions=True,
                   id2label={"0": "NO", "1": "YES", "2": "MAYBE"}, problem_type="regression", chunk_size_feed_forward=8,
                   num_beams=4, max_length=64, temperature=0.7, do_sample=True, top_k=5, return_dict_in_generate=True,
                   forced_eos_token_id=2, torchscript=True, tokenizer_class="LlamaTokenizer", experts_implementation="eager")
    runtime.pop("architectures")
    assert _model(LLAMA)["config"]["use_cache"] is True and _model(runtime)["config"]["use_cache"] is False
    assert _model(runtime)["config"]["architectures"] is None
    assert model_difference(_model(LLAMA), _model(runtime)) is None
    check_same_model(_model(LLAMA), _model(runtime))
    # a config transformers saved (save_pretrained writes its diff against the defaults) is the file it came from
    import transformers

    saved = json.loads(transformers.AutoConfig.for_model(**runtime).to_json_string())
    assert model_difference(_model(LLAMA), _model(saved)) is None


@pytest.mark.parametrize(("change", "needle"), [
    ({"num_key_value_heads": 4}, "num_key_value_heads 2 vs 4"),
    ({"rms_norm_eps": 1e-6}, "rms_norm_eps 1e-05 vs 1e-06"),
    ({"hidden_act": "gelu"}, 'hidden_act "silu" vs "gelu"'),
    ({"tie_word_embeddings": True}, "tie_word_embeddings false vs true"),
    ({"attention_bias": True}, "attention_bias false vs true"),
    ({"head_dim": 32}, "head_dim 16 vs 32"),
    ({"pad_token_id": 0}, "pad_token_id null vs 0"),  # the embedding's padding_idx
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 'rope_parameters.rope_type "default" vs "linear"'),
])
def test_what_changes_the_computation_is_still_the_model(change, needle):
    assert needle in (model_difference(_model(LLAMA), _model(dict(LLAMA, **change))) or "")


MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256, "num_local_experts": 4,
           "num_experts_per_tok": 2}


def test_moe_routing_is_the_model_its_outputs_switch_is_not():
    assert model_difference(_model(MIXTRAL), _model(dict(MIXTRAL, num_experts_per_tok=1))) == "num_experts_per_tok 2 vs 1"
    assert model_difference(_model(MIXTRAL), _model(dict(MIXTRAL, use_cache=False, return_dict=False))) is None


def test_the_rule_follows_the_installed_transformers():
    """NOT_THE_MODEL is transformers' own: the fields PreTrainedConfig declares for every model, a GenerationConfig's
    attributes but its special tokens, and the load-time options; everything else a model config declares counts."""
    import dataclasses

    import transformers
    from transformers.configuration_utils import PreTrainedConfig
    from transformers.generation.configuration_utils import GenerationConfig

    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    assert base <= NOT_THE_MODEL
    special = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"}
    generation = set(GenerationConfig().to_dict()) - special
    assert all(not_the_model(k) for k in generation) and not any(not_the_model(k) for k in special)
    assert set(GenerationConfig._get_default_generation_params()) <= NOT_THE_MODEL
    for cls in (transformers.LlamaConfig, transformers.MixtralConfig, transformers.Qwen2Config):
        own = {f.name for f in dataclasses.fields(cls)} - base
        assert {k for k in own if not_the_model(k)} == {"use_cache"}, cls
    assert not_the_model("_name_or_path") and not_the_model("_commit_hash") and not_the_model("torch_dtype")


def test_a_record_without_its_config_is_not_refused_on_the_hash_of_the_file():
    """A record made before npuport kept the resolved config holds only its file's hash, which a copy with another
    torch_dtype or _name_or_path changes too: not refused on it (the signature and weights are still checked); said."""
    old = {k: v for k, v in _model(LLAMA).items() if k != "config"}
    copy = _model(dict(LLAMA, torch_dtype="float32", _name_or_path="/models/tiny"))
    assert old["config_sha256"] != copy["config_sha256"]
    assert model_difference(old, copy) is None
    check_same_model(old, copy)
    note = file_note(old, copy, "the model file differs from the record's") or ""
    assert "the model config could not be checked" in note and old["config_sha256"][:12] in note
    assert file_note(old, _model(LLAMA), "the model file differs") is None  # the same file: checked by its hash
    assert config_unchecked(_model(LLAMA), copy, "x") is None  # both configs held: compared key by key
    # two records, one made before: not refused, a note
    notes = check_same_records({"ref": {"model": old, "weights": {}}, "dev": _manifest(dict(LLAMA, _name_or_path="x"))})
    assert len(notes) == 1 and notes[0].startswith("the ref and dev records: the config files differ (sha256 ")
    # a model file: no config on either side, nothing for this check to refuse (the signature and weights decide)
    assert model_difference({"file_sha256": "a" * 64}, {"file_sha256": "b" * 64}) is None


def _manifest(config: dict, fingerprint: str = "f" * 32, file_sha: str | None = None) -> dict:
    model = _model(config) if file_sha is None else {"file_sha256": file_sha, "name": "model"}
    return {"model": model, "weights": {"fingerprint": fingerprint}}


def test_records_of_other_configs_or_weights_are_refused_model_files_noted():
    with pytest.raises(NpuportError, match="the ref and dev records were made from different model configs"):
        check_same_records({"ref": _manifest(LLAMA), "dev": _manifest(dict(LLAMA, rms_norm_eps=1e-6))})
    with pytest.raises(NpuportError, match="the ref and golden records hold different weights"):
        check_same_records({"ref": _manifest(LLAMA), "dev": _manifest(LLAMA), "golden": _manifest(LLAMA, "0" * 32)})
    assert check_same_records({"ref": _manifest(LLAMA), "dev": _manifest(dict(LLAMA, torch_dtype="bfloat16"))}) == []
    notes = check_same_records({"ref": _manifest({}, file_sha="a" * 64), "dev": _manifest({}, file_sha="b" * 64)})
    assert len(notes) == 1 and "model files differ (sha256 aaaaaaaaaaaa vs bbbbbbbbbbbb)" in notes[0]


RECORD = {"scenario": {"name": "decode", "kind": "decode", "batch": 1, "seq": 1, "past": 127, "mode": "eager"},
          "model": {"max_positions": 128}, "rng": {"seed": 0}, "dtype_policy": {"model_dtype": "float32", "requested": None},
          "warnings": []}


@pytest.mark.parametrize("scenario", ["decode", "decode:past=127", "decode:past=100000", "decode:batch=1,mode=compile"])
def test_a_step_that_fits_to_the_records_is_accepted(scenario):
    check_asked(RECORD, "R", scenario=scenario, seed=0, dtype="fp32")


@pytest.mark.parametrize(("kw", "needle"), [
    ({"scenario": "prefill"}, "--scenario prefill is not the step the record R holds"),
    ({"scenario": "decode:past=8"}, "expected the record's own step, decode batch 1 x 1, past 127, or no --scenario"),
    ({"scenario": "decode:batch=2"}, "received: --scenario decode:batch=2 (decode batch 2 x 1, past 127)"),
    ({"seed": 5}, "--seed 5 is not the seed the record R was made with (expected its seed 0"),
    ({"dtype": "bf16"}, "--dtype bf16 is not the dtype of the record R (expected the record's float32"),
])
def test_options_the_record_fixes_are_refused_when_they_differ(kw, needle):
    with pytest.raises(NpuportError) as exc:
        check_asked(RECORD, "R", **kw)
    assert needle in exc.value.render() and "\n" not in exc.value.render()


def test_positions_of_a_record_made_before_the_manifest_held_them():
    old = dict(RECORD, model={}, warnings=["decode: shortened to fit the model's 128 positions (...)"])
    assert record_max_positions(old) == 128
    check_asked(old, "R", scenario="decode:past=100000")
    assert record_max_positions(dict(RECORD, model={})) is None
    with pytest.raises(NpuportError):
        check_asked(dict(RECORD, model={}), "R", scenario="decode:past=100000")


def test_record_manifest_reads_rank_0_of_a_per_rank_record(tmp_path):
    (tmp_path / "rank-00000").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": "npuport.parity-ranks/1",
                                                        "parts": [{"rank": 0, "path": "rank-00000"}]}))
    (tmp_path / "rank-00000" / "manifest.json").write_text(json.dumps(RECORD))
    assert record_manifest(tmp_path) == RECORD
    assert record_manifest(tmp_path / "nothing") is None
