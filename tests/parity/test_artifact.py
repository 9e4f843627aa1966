"""Artifact round trip, atomic writes, corrupt / partial / foreign artifacts, regenerated weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from npuport.errors import NpuportError
from npuport.parity import artifact as art
from npuport.parity.entries import Capture, CaptureOptions, Entry
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
    # the configs are compared first: the error names what differs, not only the state-dict signature
    with pytest.raises(NpuportError, match="made from another model config .*: intermediate_size 128 vs 96"):
        run_parity(str(full_ref), "cpu", Target(hf_config=str(other)), RunOptions())
    # a record made before the manifest held the config: its signature still tells another architecture
    m = json.loads((full_ref / "manifest.json").read_text())
    m["model"].pop("config")
    m["model"].pop("config_sha256")
    old = tmp_path / "old"
    shutil.copytree(full_ref, old)
    (old / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(NpuportError, match="recorded from another model"):
        run_parity(str(old), "cpu", Target(hf_config=str(other)), RunOptions())


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


def _synthetic(tmp_path: Path, name: str, blobs: dict[int, torch.Tensor], weights: dict[str, torch.Tensor] | None = None) -> Path:
    """An artifact written by save_artifact from a capture made here: one module output per blob."""
    entries = [Entry(f"m{b}#0:out", f"m{b}", 0, "out", "", tuple(t.shape), str(t.dtype).removeprefix("torch."), b, b)
               for b, t in blobs.items()]
    cap = Capture("full", entries, dict(blobs), {}, {}, [], None)
    return art.save_artifact(tmp_path / name, {}, cap, [], weights)


def test_tensors_are_read_only_when_compared(tmp_path, monkeypatch):
    """Loading maps tensors.safetensors and reads nothing; compare reads each compared tensor once and never one
    whose entry is on one side only."""
    from npuport.parity.compare import compare
    from npuport.parity.tolerances import load_tolerances

    g = torch.Generator().manual_seed(0)
    ref = {b: torch.randn(300, 70, generator=g) for b in range(4)}
    dev = {b: t * 1.000001 for b, t in ref.items() if b != 2}  # blob 2 recorded on the reference side only
    read: list[tuple[str, int]] = []
    real = art.LazyTensors.__getitem__

    def spy(self, blob):
        read.append((self.path.parent.name, blob))
        return real(self, blob)
    monkeypatch.setattr(art.LazyTensors, "__getitem__", spy)
    a = art.load_artifact(_synthetic(tmp_path, "ref", ref))
    b = art.load_artifact(_synthetic(tmp_path, "dev", dev))
    assert read == [] and 2 in a.capture.full and len(a.capture.full) == 4
    comp = compare(a.capture, b.capture, load_tolerances())
    assert not comp.failed and comp.ref_only == ["m2#0:out"]
    assert sorted(read) == sorted([("ref", x) for x in (0, 1, 3)] + [("dev", x) for x in (0, 1, 3)])
    want = compare(Capture("full", a.capture.entries, ref, {}, {}, [], None),
                   Capture("full", b.capture.entries, dev, {}, {}, [], None), load_tolerances())
    assert [r.metrics for r in comp.results] == [r.metrics for r in want.results]  # as from tensors in memory


def test_weights_are_hash_checked_when_read(tmp_path):
    """Comparing two records never reads their weights: their file is checked against its hash when it is read."""
    path = _synthetic(tmp_path, "w", {0: torch.ones(3)}, weights={"w": torch.arange(1000.0)})
    data = bytearray((path / "weights.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (path / "weights.safetensors").write_bytes(bytes(data))
    loaded = art.load_artifact(path)
    assert torch.equal(loaded.capture.full[0], torch.ones(3))
    with pytest.raises(NpuportError, match="corrupt: weights.safetensors does not match its hash"):
        loaded.weights()
    assert art.load_artifact(path, verify=False).weights() is not None
