"""Shards put back together on the host (npuport.parity.shards), against DTensor itself: torch's
distribute_tensor splits a known tensor under a fake process group, and assemble must give it back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from npuport.parity.shards import ShardError, assemble, describe, full_value, is_dtensor, local, local_state, map_local


def _meta(placements: list[str], mesh_shape: list[int], global_shape: list[int]) -> dict:
    ranks = torch.arange(int(torch.tensor(mesh_shape).prod())).reshape(mesh_shape).tolist()
    return {"placements": placements, "mesh": {"shape": mesh_shape, "ranks": ranks, "dim_names": None, "device_type": "cpu"},
            "global_shape": global_shape}


def test_shard_concatenates_in_rank_order_even_when_uneven() -> None:
    full = torch.arange(7.0 * 3).reshape(7, 3)
    pieces = dict(enumerate(torch.chunk(full, 3, dim=0)))  # 3, 3, 1 rows: torch.chunk's split, as DTensor's
    out, notes = assemble(pieces, _meta(["Shard(0)"], [3], [7, 3]))
    assert torch.equal(out, full) and notes == []


def test_two_dimensional_mesh_shards_outer_dimension_first() -> None:
    full = torch.arange(8.0 * 4).reshape(8, 4)
    pieces = {}
    for i, rows in enumerate(torch.chunk(full, 2, dim=0)):  # mesh dim 0 splits first, mesh dim 1 splits each piece
        for j, part in enumerate(torch.chunk(rows, 2, dim=0)):
            pieces[2 * i + j] = part
    out, _ = assemble(pieces, _meta(["Shard(0)", "Shard(0)"], [2, 2], [8, 4]))
    assert torch.equal(out, full)
    cols = {2 * i + j: torch.chunk(torch.chunk(full, 2, dim=0)[i], 2, dim=1)[j] for i in range(2) for j in range(2)}
    assert torch.equal(assemble(cols, _meta(["Shard(0)", "Shard(1)"], [2, 2], [8, 4]))[0], full)


def test_partial_sums_and_replicate_checks_the_copies() -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    out, _ = assemble({0: a, 1: b}, _meta(["Partial(sum)"], [2], [4, 5]))
    assert torch.allclose(out, a + b)
    assert torch.allclose(assemble({0: a, 1: b}, _meta(["Partial(avg)"], [2], [4, 5]))[0], (a + b) / 2)
    same, notes = assemble({0: a, 1: a.clone()}, _meta(["Replicate()"], [2], [4, 5]))
    assert torch.equal(same, a) and notes == []
    first, notes = assemble({0: a, 1: a + 1e-3}, _meta(["Replicate()"], [2], [4, 5]))
    assert torch.equal(first, a) and len(notes) == 1 and "replicas differ (max |d| 0.001" in notes[0]


@pytest.mark.parametrize("placements, shape, needle", [
    (["_StridedShard(dim=0, sf=2)"], [4, 5], "cannot be assembled"),
    (["Partial(product)"], [4, 5], "reduce op 'product'"),
    (["Shard(0)", "Shard(0)"], [4, 5], "2 placements for a 1-dimensional mesh"),
    (["Shard(0)"], [9, 5], "not the recorded global shape"),
])
def test_what_cannot_be_assembled_says_why(placements: list[str], shape: list[int], needle: str) -> None:
    meta = _meta(placements, [2], shape)
    with pytest.raises(ShardError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")):
        assemble({0: torch.zeros(2, 5), 1: torch.zeros(2, 5)}, meta)


def test_plain_tensors_are_not_shards() -> None:
    t = torch.ones(3)
    assert local(t) == (t, None) and full_value(t) is t and not is_dtensor(t)
    assert torch.equal(map_local(t, lambda x: x * 2), t * 2)


@pytest.fixture
def fake_world() -> Iterator[int]:
    """A process group of 4 ranks in this process (torch's fake backend: collectives do nothing), as rank 1."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=4)
    try:
        yield 1
    finally:
        dist.destroy_process_group()


def test_dtensor_is_recorded_as_its_shard_with_placement(fake_world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    full = torch.arange(8.0 * 6).reshape(8, 6)
    d = distribute_tensor(full, mesh, [Replicate(), Shard(-1)], src_data_rank=None)
    shard, meta = local(d)
    assert meta is not None and is_dtensor(d)
    assert meta["placements"] == ["Replicate()", "Shard(1)"]  # a negative dim is recorded as the dimension it is
    assert meta["mesh"] == {"shape": [2, 2], "ranks": [[0, 1], [2, 3]], "dim_names": ["dp", "tp"], "device_type": "cpu"}
    assert meta["coordinate"] == [0, 1] and meta["global_shape"] == [8, 6] and meta["local_shape"] == [8, 3]
    assert describe(d, shard) == meta and type(shard) is torch.Tensor
    state, placed = local_state({"w": d, "b": torch.zeros(2)})
    assert set(placed) == {"w"} and state["w"].shape == (8, 3) and torch.equal(state["b"], torch.zeros(2))
    twice = map_local(d, lambda x: x * 2)
    assert is_dtensor(twice) and twice.placements == d.placements and torch.equal(twice.to_local(), d.to_local() * 2)


@pytest.mark.parametrize("placements", [("Shard(0)", "Shard(1)"), ("Shard(0)", "Shard(0)"), ("Replicate()", "Shard(1)"),
                                        ("Shard(1)", "Replicate()")])
def test_assemble_undoes_distribute_tensor_on_every_rank(placements: tuple[str, ...]) -> None:
    """Each of 4 ranks (one fake group at a time) asks DTensor for its shard of a 7 x 6 tensor (uneven on dim 0);
    the pieces, put together by assemble, are the tensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    full = torch.arange(7.0 * 6).reshape(7, 6)
    make = {"Shard(0)": Shard(0), "Shard(1)": Shard(1), "Replicate()": Replicate()}
    pieces, meta = {}, None
    for rank in range(4):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=4)
        try:
            mesh = init_device_mesh("cpu", (2, 2))
            pieces[rank], meta = local(distribute_tensor(full, mesh, [make[p] for p in placements], src_data_rank=None))
        finally:
            dist.destroy_process_group()
    assert meta is not None and meta["placements"] == list(placements)
    out, notes = assemble(pieces, meta)
    assert torch.equal(out, full) and notes == []
