"""`npuport parity record` and `compare` under torchrun, for real: gloo on the CPU at world size 2 and 4, a
tensor-parallel MLP (torch.distributed.tensor.parallel), one side perturbed at a known module and rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli

from .conftest import TP_SCEN, Torchrun


def compare(*args: str, fmt: str = "json"):
    r = CliRunner().invoke(cli, ["parity", "compare", *args, "--format", fmt, "--quiet"])
    return r, (json.loads(r.output) if fmt == "json" and r.exit_code in (0, 1) else None)


def test_record_writes_one_part_per_rank_and_a_manifest(ref2: Path) -> None:
    top = json.loads((ref2 / "manifest.json").read_text())
    assert top["schema"] == "npuport.parity-ranks/1" and top["complete"] and top["world_size"] == 2
    assert top["backend"] == "gloo" and top["process_group"] == "npuport"
    assert top["mesh"] == {"shape": [2], "ranks": [0, 1], "dim_names": ["tp"], "device_type": "cpu"}
    assert [p["path"] for p in top["parts"]] == ["rank-00000", "rank-00001"] and top["layout"]["sharded_entries"] > 0
    assert sorted(p.name for p in ref2.iterdir()) == ["manifest.json", "rank-00000", "rank-00001"]
    assert not [p for p in ref2.parent.iterdir() if p.name.startswith(".ref2")]  # no staging folder left behind
    for rank in (0, 1):
        part = json.loads((ref2 / f"rank-{rank:05d}" / "manifest.json").read_text())
        assert part["schema"] == "npuport.parity-artifact/1"
        assert part["distributed"]["rank"] == rank and part["distributed"]["world_size"] == 2
        entries = {e["key"]: e for e in part["entries"]}
        up = entries["up#0:out"]["dist"]  # column-parallel: each rank holds half of the last dimension
        assert up["placements"] == ["Shard(2)"] and up["coordinate"] == [rank]
        assert entries["up#0:out"]["shape"] == [1, 8, 32] and up["local_shape"] == [1, 8, 16]
        assert entries["down#0:out"]["dist"]["placements"] == ["Replicate()"] and "dist" not in entries["norm#0:out"]
        wd = part["weights"]["dist"]
        assert wd["up.weight"]["placements"] == ["Shard(0)"] and wd["down.weight"]["placements"] == ["Shard(1)"]


def test_rank_by_rank_compare_names_each_rank_s_first_divergence(ref2: Path, dev2: Path) -> None:
    assert json.loads((dev2 / "manifest.json").read_text())["process_group"] == "existing"  # the program's own group
    r, data = compare("--ref", str(ref2), "--dev", str(dev2))
    assert r.exit_code == 1 and data is not None
    ranks = data["ranks"]
    assert ranks["mode"] == "per-rank" and ranks["world_size"] == {"ref": 2, "dev": 2}
    rows = {row["rank"]: row for row in ranks["rows"]}
    assert rows[1]["first_divergence"]["call_key"] == "act#0"  # the perturbed rank: its activation
    assert rows[0]["first_divergence"]["call_key"] == "down#0"  # rank 0 sees it only after the all-reduce
    assert ranks["worst_rank"] == 1 and ranks["failing"] == [0, 1]
    assert ranks["first_divergence"]["rank"] == 1 and ranks["first_divergence"]["call_key"] == "act#0"
    assert data["first_divergence"]["call_key"] == "act#0" and "on rank 1 (worst of 2" in data["verdict"]["text"]
    assert rows[1]["worst_entry"]["key"] == "act#0:out" and rows[0]["failed"] == 2 and rows[1]["failed"] == 3
    text, _ = compare("--ref", str(ref2), "--dev", str(dev2), fmt="text")
    lines = text.output.splitlines()
    table = lines.index("ranks compared rank by rank (world size: ref 2, dev 2); worst rank 1")
    closing = max(i for i, ln in enumerate(lines) if ln.startswith("DIVERGED:"))
    assert table < closing and lines[table + 1].split() == ["rank", "verdict", "failed", "worst", "entry,", "rel_l2", "first", "divergence"]
    assert lines[table + 3].split()[:2] == ["1", "DIVERGED"] and lines[table + 3].endswith("act#0 (act#0:out)")
    same, data = compare("--ref", str(ref2), "--dev", str(ref2))
    assert same.exit_code == 0 and data is not None and data["verdict"]["text"].endswith("on each of 2 ranks")


def test_single_device_against_world_size_2_gathers_the_shards(single: Path, ref2: Path, dev2: Path, torchrun: Torchrun) -> None:
    r, data = compare("--ref", str(single), "--dev", str(ref2))
    assert r.exit_code == 0, r.output
    assert data is not None and data["ranks"] == {"mode": "gathered", "world_size": {"ref": 1, "dev": 2}}
    assert data["verdict"]["checked"] == 5 and data["unmatched"]["dev_only"] == [] and data["warnings"] == []
    assert next(s for s in data["sides"] if s["role"] == "dev")["distributed"]["world_size"] == 2
    r, data = compare("--ref", str(single), "--dev", str(dev2))
    assert r.exit_code == 1 and data is not None and data["first_divergence"]["call_key"] == "act#0"
    # a live device against the gathered record: the replay feeds the module the record's gathered inputs
    fault = "cpu-fault:aten::gelu@act*0.05"
    r, data = compare(str(torchrun.model), "--ref", str(ref2), "--dev", fault, "--scenario", TP_SCEN)
    assert r.exit_code == 1 and data is not None
    fd = data["first_divergence"]
    assert fd["call_key"] == "act#0" and fd["replay"]["verdict"] == "introduces" and fd["replay"]["culprit_op"]["op"] == "aten::gelu"


def test_world_size_4_record(torchrun: Torchrun) -> None:
    ref4 = torchrun.record(4, "ref4")
    top = json.loads((ref4 / "manifest.json").read_text())
    assert top["world_size"] == 4 and len(top["parts"]) == 4


def test_world_size_4_rank_by_rank_and_against_world_size_2(torchrun: Torchrun, ref2: Path, single: Path) -> None:
    ref4 = torchrun.folder / "ref4"
    dev4 = torchrun.record(4, "dev4", dev="cpu-fault:aten::gelu@act*0.05")  # the fault device, shard by shard
    r, data = compare("--ref", str(ref4), "--dev", str(dev4))
    assert r.exit_code == 1 and data is not None
    assert [row["first_divergence"]["call_key"] for row in data["ranks"]["rows"]] == ["act#0"] * 4
    r, data = compare("--ref", str(ref2), "--dev", str(ref4))
    assert r.exit_code == 0 and data is not None
    assert data["ranks"] == {"mode": "gathered", "world_size": {"ref": 2, "dev": 4}}
    r, data = compare("--ref", str(single), "--dev", str(dev4))
    assert r.exit_code == 1 and data is not None and data["first_divergence"]["call_key"] == "act#0"


def test_compare_under_torchrun_runs_the_device_on_every_rank(torchrun: Torchrun, ref2: Path) -> None:
    res = torchrun(2, "cli.py", "parity", "compare", str(torchrun.model), "--ref", str(ref2), "--dev", "cpu",
                   "--format", "json", "--quiet")
    data = json.loads(res.stdout)  # one report: rank 0's
    assert data["verdict"]["passed"] and data["ranks"]["mode"] == "per-rank" and len(data["ranks"]["rows"]) == 2
    dev = next(s for s in data["sides"] if s["role"] == "dev")
    assert dev["source"] == "live" and dev["distributed"]["world_size"] == 2
    assert not [p for p in ref2.parent.iterdir() if p.name.startswith(".ref2")]  # its temporary record is gone


@pytest.mark.parametrize("args, needle", [
    (["--ref", "./A", "--dev", "./B"], "under torchrun, parity compare runs MODEL on the --dev device of every rank"),
    (["--ref", "./A", "--dev", "cpu", "--golden", "cpu64", "m.py"], "(a cpu64 golden: record it first, or compare in one process)"),
])
def test_compare_under_torchrun_needs_a_model_and_a_device(monkeypatch: pytest.MonkeyPatch, args: list[str], needle: str) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    r = CliRunner().invoke(cli, ["parity", "compare", *args, "--quiet"])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output
