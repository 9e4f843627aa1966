"""Artifact round trip, atomic writes, corrupt / partial / foreign artifacts, regenerated weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from npuport.errors import NpuportError
from npuport.parity import artifact as art
from npuport.parity.entries import CaptureOptions
from npuport.parity.run import record, run_parity
from npuport.parity.session import RunOptions, Target

from .conftest import LLAMA, SCEN


def opts(**kw) -> RunOptions:
    return RunOptions(scenario=SCEN, capture=CaptureOptions(**kw))


@pytest.fixture(scope="module")
def full_ref(llama_config, tmp_path_factory) -> Path:
    return record(Target(hf_config=llama_config), "cpu", opts(), str(tmp_path_factory.mktemp("a") / "ref"))


def test_round_trip_and_manifest(full_ref, llama_config):
    a = art.load_artifact(full_ref)
    m = a.manifest
    assert m["schema"] == art.SCHEMA and m["complete"] and m["capture_mode"] == "full"
    assert set(m["files"]) == {"tensors.safetensors", "inputs.safetensors", "weights.safetensors"}
    assert m["device"]["versions"]["torch"] == torch.__version__
    assert m["numerics"]["requested"]["allow_tf32"] is False and m["numerics"]["in_force"]["deterministic_algorithms"]
    assert m["module_sequence"]["sha256"] and m["op_sequence"]["items"]
    assert m["weights"]["stored"] and m["inputs"]["stored"]
    assert not any(p.suffix in (".pt", ".pkl", ".bin") for p in full_ref.iterdir())  # never pickle
    assert run_parity(str(full_ref), "cpu", Target(hf_config=llama_config), RunOptions())
    assert run_parity(str(full_ref), str(full_ref), None, RunOptions())  # two recorded directories


def test_stats_only_has_no_tensors_and_regenerates_weights(llama_config, tmp_path):
    path = record(Target(hf_config=llama_config), "cpu", opts(mode="stats"), str(tmp_path / "s"))
    m = json.loads((path / "manifest.json").read_text())
    assert set(m["files"]) == {"stats.safetensors", "inputs.safetensors"}
    assert m["weights"]["stored"] is False and m["weights"]["generator"] and m["weights"]["fingerprint"]
    assert run_parity(str(path), "cpu", Target(hf_config=llama_config), RunOptions(), golden="cpu64")


def test_refuses_existing_and_replaces_with_force(full_ref, llama_config):
    with pytest.raises(NpuportError, match="already exists"):
        record(Target(hf_config=llama_config), "cpu", opts(), str(full_ref))


def test_interrupted_record_leaves_nothing(llama_config, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(art, "_stats_tensors", boom)
    with pytest.raises(KeyboardInterrupt):
        record(Target(hf_config=llama_config), "cpu", opts(mode="stats"), str(tmp_path / "r"))
    assert list(tmp_path.iterdir()) == []


def _copy(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_partial_and_corrupt(full_ref, tmp_path):
    no_manifest = _copy(full_ref, tmp_path / "p1")
    (no_manifest / "manifest.json").unlink()
    with pytest.raises(NpuportError, match="partial or foreign artifact"):
        art.load_artifact(no_manifest)
    missing = _copy(full_ref, tmp_path / "p2")
    (missing / "tensors.safetensors").unlink()
    with pytest.raises(NpuportError, match="partial: tensors.safetensors is missing"):
        art.load_artifact(missing)
    flipped = _copy(full_ref, tmp_path / "c1")
    data = bytearray((flipped / "tensors.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (flipped / "tensors.safetensors").write_bytes(bytes(data))
    with pytest.raises(NpuportError, match="corrupt: tensors.safetensors does not match its hash"):
        art.load_artifact(flipped)
    bad_json = _copy(full_ref, tmp_path / "c2")
    (bad_json / "manifest.json").write_text("{not json")
    with pytest.raises(NpuportError, match="corrupt"):
        art.load_artifact(bad_json)
    with pytest.raises(NpuportError, match="not found"):
        art.load_artifact(tmp_path / "nope")


def test_artifact_from_another_model(full_ref, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(LLAMA, intermediate_size=96)))
    with pytest.raises(NpuportError, match="recorded from another model"):
        run_parity(str(full_ref), "cpu", Target(hf_config=str(other)), RunOptions())


def test_regenerated_weights_must_match(llama_config, tmp_path):
    path = record(Target(hf_config=llama_config), "cpu", opts(mode="stats"), str(tmp_path / "s"))
    m = json.loads((path / "manifest.json").read_text())
    m["weights"]["fingerprint"] = "0" * 32
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(NpuportError, match="weights regenerated from the seed differ"):
        run_parity(str(path), "cpu", Target(hf_config=llama_config), RunOptions())


def test_tied_weights_are_saved(tmp_path):
    import torch
    from safetensors.torch import load_file

    from npuport.parity.artifact import _save

    w = torch.randn(4, 3)
    files: dict = {}
    _save(tmp_path, "weights.safetensors", {"wte.weight": w, "lm_head.weight": w}, files)
    back = load_file(str(tmp_path / "weights.safetensors"))
    assert torch.equal(back["wte.weight"], w) and torch.equal(back["lm_head.weight"], w)
    assert files["weights.safetensors"]["bytes"] > 0
