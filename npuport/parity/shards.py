"""Sharded tensors (torch.distributed.tensor.DTensor) in a parity capture: what one rank records, and how the host
puts the ranks' pieces back together.

A rank records the local tensor it computed (the shard), never a gathered copy: gathering inside the forward would
add collectives the model does not run, and a record must not change the run it records. Beside the shard it
records where the shard sits (`describe`): the placement per mesh dimension (Shard(d), Replicate(), Partial(op)),
the mesh (its shape, its ranks, their dimension names), this rank's coordinate, the global and local shapes.
`assemble` is the inverse on the host: along each mesh dimension, Shard(d) concatenates along d in coordinate
order (torch.chunk's uneven split is undone by concatenation), Replicate() takes the first copy and checks the
others are equal, Partial(op) reduces (sum, avg, max, min). Mesh dimensions are undone innermost first, because
DTensor shards the outer dimension first and the inner one splits each of its pieces.

A DTensor exists only once torch.distributed.tensor has been imported (by the model), so `local` looks the class up
in sys.modules: a model without one pays a dictionary lookup per captured tensor, and nothing here imports
torch.distributed.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch

_MODULE = "torch.distributed.tensor"
_PLACEMENT = re.compile(r"^(Shard|Partial)\((-?\d+|\w+)\)$|^Replicate\(\)$")
_REDUCE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "sum": torch.add, "avg": torch.add, "max": torch.maximum, "min": torch.minimum}


class ShardError(ValueError):
    """The pieces cannot be put together (a placement this module does not undo, pieces that do not fit)."""


def _dtensor_type() -> type | None:
    mod = sys.modules.get(_MODULE)
    return getattr(mod, "DTensor", None) if mod is not None else None


def is_dtensor(t: Any) -> bool:
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


def placement_name(p: Any, ndim: int) -> str:
    """Shard(d) with d made non-negative, Replicate(), Partial(sum); other placements (_StridedShard of FSDP2 + TP,
    _MaskPartial) keep their repr and are recorded, not assembled."""
    kind = type(p).__name__
    if kind == "Shard":
        return f"Shard({p.dim % ndim if ndim else p.dim})"
    if kind == "Replicate":
        return "Replicate()"
    if kind == "Partial":
        return f"Partial({p.reduce_op})"
    return repr(p)


def mesh_json(mesh: Any) -> dict[str, Any]:
    names = getattr(mesh, "mesh_dim_names", None)
    return {"shape": list(mesh.shape), "ranks": mesh.mesh.tolist(), "dim_names": list(names) if names else None,
            "device_type": mesh.device_type}


def model_mesh(module: Any) -> dict[str, Any] | None:
    """The mesh a model exposes as its `device_mesh` attribute (a DeviceMesh), for the record's manifest."""
    mesh = getattr(module, "device_mesh", None)
    return mesh_json(mesh) if type(mesh).__name__ == "DeviceMesh" else None


def describe(t: Any, local: torch.Tensor) -> dict[str, Any]:
    mesh = t.device_mesh
    coord = mesh.get_coordinate()
    return {"placements": [placement_name(p, t.dim()) for p in t.placements], "mesh": mesh_json(mesh),
            "coordinate": list(coord) if coord is not None else None, "global_shape": list(t.shape),
            "local_shape": list(local.shape)}


def local(t: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any] | None]:
    """(the tensor this rank holds, its placement record or None for a plain tensor)."""
    if not is_dtensor(t):
        return t, None
    shard = t.to_local().detach()  # type: ignore[attr-defined]
    return shard, describe(t, shard)


def map_local(t: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """fn over a plain tensor, or over each rank's shard of a DTensor (the placements stay)."""
    if not is_dtensor(t):
        return fn(t)
    cls: Any = type(t)
    out = fn(t.to_local())  # type: ignore[attr-defined]
    return cls.from_local(out, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride())  # type: ignore[attr-defined]


def full_value(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective for a DTensor: every rank must call it in the same order)."""
    return t.full_tensor() if is_dtensor(t) else t  # type: ignore[attr-defined]


def local_state(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, Any]]]:
    """A state dict as this rank's local tensors, and the placement of each sharded one."""
    tensors: dict[str, torch.Tensor] = {}
    placed: dict[str, dict[str, Any]] = {}
    for name, t in state.items():
        tensors[name], meta = local(t)
        if meta is not None:
            placed[name] = meta
    return tensors, placed


def layout_key(meta: dict[str, Any] | None) -> str:
    """What must be equal for two ranks' pieces to be compared piece by piece."""
    if meta is None:
        return "-"
    return f"{','.join(meta['placements'])}@{meta['mesh']['shape']}:{meta['mesh']['ranks']}"


def _parse(name: str) -> tuple[str, Any]:
    m = _PLACEMENT.match(name)
    if m is None:
        raise ShardError(f"placement {name} cannot be assembled on the host")
    if name == "Replicate()":
        return "Replicate", None
    kind, arg = m.group(1), m.group(2)
    if kind == "Shard":
        return kind, int(arg)
    if arg not in _REDUCE:
        raise ShardError(f"placement {name}: reduce op {arg!r} cannot be assembled on the host")
    return kind, arg


def assemble(pieces: Mapping[int, torch.Tensor], meta: dict[str, Any]) -> tuple[torch.Tensor, list[str]]:
    """The global tensor from each rank's piece (rank -> local tensor) and the placement record of any one of them;
    notes say where replicas that should be equal are not (the first copy is used)."""
    shape, ranks = meta["mesh"]["shape"], meta["mesh"]["ranks"]
    places = [_parse(p) for p in meta["placements"]]
    if len(places) != len(shape):
        raise ShardError(f"{len(places)} placements for a {len(shape)}-dimensional mesh")
    notes: list[str] = []

    def piece(coord: tuple[int, ...]) -> torch.Tensor:
        r: Any = ranks
        for c in coord:
            r = r[c]
        if r not in pieces:
            raise ShardError(f"rank {r} holds no piece")
        return pieces[r]

    def build(level: int, coord: tuple[int, ...]) -> torch.Tensor:
        if level == len(shape):
            return piece(coord)
        parts = [build(level + 1, (*coord, i)) for i in range(shape[level])]
        kind, arg = places[level]
        if kind == "Shard":
            try:
                return torch.cat(parts, dim=arg)
            except (RuntimeError, IndexError) as exc:
                raise ShardError(f"pieces along mesh dimension {level} do not concatenate on dim {arg}: {exc}") from None
        if kind == "Replicate":
            for i, p in enumerate(parts[1:], 1):
                if p.shape != parts[0].shape or not torch.equal(p, parts[0]):
                    notes.append(_replica_note(parts[0], p, level, coord, i))
            return parts[0]
        total = functools.reduce(_REDUCE[arg], parts)
        return total / len(parts) if arg == "avg" else total

    out = build(0, ())
    if list(out.shape) != list(meta["global_shape"]):
        raise ShardError(f"assembled shape {list(out.shape)} is not the recorded global shape {meta['global_shape']}")
    return out, notes


def _replica_note(first: torch.Tensor, other: torch.Tensor, level: int, coord: tuple[int, ...], i: int) -> str:
    where = f"mesh dimension {level}, coordinate {[*coord, i]} vs {[*coord, 0]}"
    if first.shape != other.shape:
        return f"replicas differ in shape ({list(other.shape)} vs {list(first.shape)}) along {where}"
    diff = (other.double() - first.double()).abs().max().item() if first.is_floating_point() else "integers differ"
    return f"replicas differ (max |d| {diff}) along {where}"
