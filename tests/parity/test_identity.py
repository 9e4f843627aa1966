"""npuport.parity.identity: which config differences make another model, and the options a record fixes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from npuport.errors import NpuportError
from npuport.parity.identity import (
    check_asked,
    check_same_model,
    check_same_records,
    model_difference,
    model_identity,
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


def test_a_record_without_its_config_is_compared_by_the_hash_of_the_whole_file():
    old = {k: v for k, v in _model(LLAMA).items() if k != "config"}
    assert model_difference(old, _model(LLAMA)) is None
    assert "holds only its hash" in (model_difference(old, _model(dict(LLAMA, vocab_size=512))) or "")
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
