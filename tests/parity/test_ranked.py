"""Per-rank records on load (npuport.parity.ranked): a partial or mismatched set is refused with one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.parity.artifact import load_artifact
from npuport.parity.ranked import RankedArtifact, load_side


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _rehash(rec: Path, rank: int) -> None:
    """Make the top manifest list a part's (edited) manifest, so that the check under test is the one that fires."""
    sha = hashlib.sha256((rec / f"rank-{rank:05d}" / "manifest.json").read_bytes()).hexdigest()
    _edit_json(rec / "manifest.json", lambda m: m["parts"][rank].update(manifest_sha256=sha))


def _no_manifest(rec: Path) -> None:
    (rec / "manifest.json").unlink()


def _part_gone(rec: Path) -> None:
    shutil.rmtree(rec / "rank-00001")


def _rank_unlisted(rec: Path) -> None:
    _edit_json(rec / "manifest.json", lambda m: m.update(parts=m["parts"][:1]))


def _extra_rank(rec: Path) -> None:
    shutil.copytree(rec / "rank-00001", rec / "rank-00002")


def _other_world_size(rec: Path) -> None:
    _edit_json(rec / "rank-00001" / "manifest.json", lambda m: m["distributed"].update(world_size=4))
    _rehash(rec, 1)


def _part_edited(rec: Path) -> None:
    _edit_json(rec / "rank-00001" / "manifest.json", lambda m: m["distributed"].update(host="elsewhere"))


@pytest.mark.parametrize("damage, needle", [
    (_no_manifest, "is a partial per-rank record: it has rank folders but no manifest.json"),
    (_part_gone, "is partial: rank-00001 is missing"),
    (_rank_unlisted, "is partial: rank 1 of world size 2 missing"),
    (_extra_rank, "is a mismatched set: rank-00002 beyond world size 2"),
    (_other_world_size, "is a mismatched set: rank-00001 was recorded as rank 1 of world size 4"),
    (_part_edited, "rank-00001/manifest.json does not match its hash"),
])
def test_partial_or_mismatched_sets_are_refused_in_one_line(ref2: Path, single: Path, tmp_path: Path,
                                                             damage: Callable[[Path], None], needle: str) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(ref2, rec)
    assert isinstance(load_side(rec), RankedArtifact)
    damage(rec)
    r = CliRunner().invoke(cli, ["parity", "compare", "--ref", str(single), "--dev", str(rec), "--quiet"])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output
    assert [ln.startswith("error:") for ln in r.output.splitlines()] == [True]


def test_a_per_rank_record_is_not_one_artifact(ref2: Path) -> None:
    with pytest.raises(NpuportError, match="is a per-rank record \\(world size 2\\)"):
        load_artifact(ref2)
    part = load_side(ref2 / "rank-00001")  # one rank's part is an ordinary artifact
    assert not isinstance(part, RankedArtifact) and part.manifest["distributed"]["rank"] == 1


def test_gathered_weights_are_the_single_device_weights(ref2: Path, single: Path) -> None:
    rec = load_side(ref2)
    one = load_side(single)
    assert isinstance(rec, RankedArtifact)
    got, want = rec.weights(), one.weights()
    assert got is not None and want is not None and got.keys() == want.keys()
    assert all(got[k].equal(want[k]) for k in want)  # distributed from the same seeded build, gathered back whole
    assert rec.manifest["weights"]["fingerprint"] == one.manifest["weights"]["fingerprint"]
