"""Per-rank captures gathered into one (npuport.parity.gather): shards concatenated, partial sums added, replicas
checked, what cannot be put back together left out with the reason, statistics kept only where they can be."""

from __future__ import annotations

import torch

from npuport.parity.entries import Capture, Entry
from npuport.parity.gather import gather


def _dist(placement: str, world: int, global_shape: list[int], rank: int) -> dict:
    return {"placements": [placement], "mesh": {"shape": [world], "ranks": list(range(world)), "dim_names": ["tp"],
            "device_type": "cpu"}, "coordinate": [rank], "global_shape": global_shape}


def rank_capture(rank: int, world: int, items: dict[str, tuple[torch.Tensor, str | None, list[int]]], mode: str = "full") -> Capture:
    """items: key -> (this rank's tensor, placement or None for a plain tensor, global shape)."""
    entries, full, dist = [], {}, {}
    for blob, (key, (t, placement, shape)) in enumerate(items.items()):
        module = key.split("#")[0]
        entries.append(Entry(key, module, 0, key.rsplit(":", 1)[1].split(".")[0], "", tuple(shape), "float32", blob, blob))
        full[blob] = t
        if placement:
            dist[blob] = _dist(placement, world, shape, rank)
    cap = Capture(mode, entries, full, {}, {"up#0": {"spec": {"t": 0}, "blobs": [0]}}, ["up#0"], None, [f"w{rank}"], dist=dist)
    if mode == "stats":
        cap.stats = {b: cap.stats_of(b) for b in full}
        cap.full = {}
    return cap


def test_shards_partials_and_replicas_become_global_tensors() -> None:
    torch.manual_seed(0)
    x, w_out = torch.randn(2, 8), torch.randn(2, 6)
    halves = torch.chunk(w_out, 2, dim=1)
    partial = [torch.randn(2, 4), torch.randn(2, 4)]
    parts = [rank_capture(r, 2, {"up#0:in": (x, None, [2, 8]), "up#0:out": (halves[r], "Shard(1)", [2, 6]),
                                 "down#0:out": (partial[r], "Partial(sum)", [2, 4]),
                                 "norm#0:out": (x * 2, "Replicate()", [2, 8])}) for r in range(2)]
    g = gather(parts)
    got = {e.key: g.capture.full[e.blob] for e in g.capture.entries}
    assert torch.equal(got["up#0:in"], x) and torch.equal(got["up#0:out"], w_out)
    assert torch.allclose(got["down#0:out"], partial[0] + partial[1]) and torch.equal(got["norm#0:out"], x * 2)
    assert [e.key for e in g.capture.entries] == ["up#0:in", "up#0:out", "down#0:out", "norm#0:out"]  # rank 0's order
    assert g.capture.dist == {} and g.notes == [] and g.left_out == {}
    assert g.capture.calls["up#0"]["blobs"] == [next(e.blob for e in g.capture.entries if e.key == "up#0:in")]
    assert g.capture.warnings == ["w0", "w1"]


def test_what_cannot_be_gathered_is_left_out_with_the_reason() -> None:
    a, b = torch.ones(2, 3), torch.zeros(2, 3)
    parts = [rank_capture(0, 2, {"local#0:out": (a, None, [2, 3]), "mixed#0:out": (a, "Shard(0)", [4, 3]),
                                 "repl#0:out": (a, "Replicate()", [2, 3]), "only0#0:out": (a, None, [2, 3])}),
             rank_capture(1, 2, {"local#0:out": (b, None, [2, 3]), "mixed#0:out": (a, None, [4, 3]),
                                 "repl#0:out": (a + 1, "Replicate()", [2, 3])})]
    g = gather(parts)
    assert "differs across ranks and records no placement" in g.left_out["local#0:out"]
    assert "sharded tensor on some ranks" in g.left_out["mixed#0:out"]
    assert g.left_out["only0#0:out"] == "absent on rank 1"
    assert [e.key for e in g.capture.entries] == ["repl#0:out"]  # replicas that differ: rank 0's, with a note
    assert len(g.notes) == 1 and g.notes[0].startswith("repl#0:out: replicas differ (max |d| 1.0")
    warns = g.warnings("dev gathered from 2 ranks")
    assert warns[-1].startswith("dev gathered from 2 ranks: 3 entries could not be gathered")


def test_statistics_are_gathered_only_for_replicas() -> None:
    x = torch.randn(4, 4)
    parts = [rank_capture(r, 2, {"norm#0:out": (x, None, [4, 4]), "rep#0:out": (x, "Replicate()", [4, 4]),
                                 "up#0:out": (x[:, 2 * r: 2 * r + 2].contiguous(), "Shard(1)", [4, 4])}, mode="stats")
             for r in range(2)]
    g = gather(parts)
    assert [e.key for e in g.capture.entries] == ["norm#0:out", "rep#0:out"]
    assert g.capture.stats_of(g.capture.entries[0].blob).count == 16
    assert "recorded as statistics only" in g.left_out["up#0:out"]
