"""A record made under torchrun: one ordinary artifact per rank, and rank 0's manifest naming them.

    OUT/manifest.json          schema npuport.parity-ranks/1: world size, backend, meshes, layout hash, the parts
    OUT/rank-00000/            rank 0's artifact (artifact.py), its manifest's `distributed` says rank and world size
    OUT/rank-00001/ ...

Every rank writes only its own rank-NNNNN folder, inside a hidden staging folder that rank 0 makes and, once every
rank has written its part, completes with the manifest and renames into place: an interrupted or failed record
leaves no OUT (nor an old OUT half replaced). Loading refuses a partial or mismatched set with one line: a missing
manifest or part, a part of another world size or rank, a rank folder the manifest does not list, hashes that do
not match.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import npuport
from npuport.errors import NpuportError
from npuport.parity.artifact import MANIFEST, RANKS_SCHEMA, SCHEMA, Artifact, check_writable, load_artifact, publish
from npuport.parity.entries import Capture
from npuport.parity.gather import Gathered, gather
from npuport.parity.procgroup import RankInfo
from npuport.parity.shards import ShardError, assemble, layout_key

PART = re.compile(r"^rank-(\d{5})$")


def part_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def write_ranked(pg: RankInfo, out_dir: str | Path, force: bool, write_part: Callable[[Path], Path]) -> Path:
    """Each rank calls this with a function that writes its own part to the folder it is given."""
    target = check_writable(out_dir, force)
    staging = target.resolve().parent / f".{target.name}.ranks-{pg.token():012x}"
    err: BaseException | None = None
    if pg.rank == 0:
        try:
            staging.mkdir()
        except OSError as exc:
            err = exc
    _agree(pg, err, "rank 0 could not make the staging folder", staging)
    try:
        if not staging.is_dir():
            raise NpuportError(f"rank {pg.rank} does not see the folder rank 0 made: {staging}",
                               "--out-dir on a filesystem every rank sees (a shared mount on several hosts)", str(staging))
        write_part(staging / part_name(pg.rank))
    except BaseException as exc:  # the others must learn it, or they would wait for this rank forever
        err = exc
    _agree(pg, err, "the record failed on another rank", staging)
    if pg.rank == 0:
        try:
            _finish(staging, target, pg, force)
        except BaseException as exc:
            err = exc
    _agree(pg, err, "rank 0 could not complete the record", staging)
    return target


def _agree(pg: RankInfo, err: BaseException | None, what: str, staging: Path) -> None:
    failed = pg.failed_ranks(err is None)
    if not failed:
        return
    if pg.rank == 0:
        shutil.rmtree(staging, ignore_errors=True)
    if err is not None:
        raise err
    raise NpuportError(f"{what} (rank {', '.join(map(str, failed))})", "every rank to record its part",
                       "that rank's error is in its own output")


def _finish(staging: Path, target: Path, pg: RankInfo, force: bool) -> None:
    parts, manifests = [], []
    for r in range(pg.world_size):
        path = staging / part_name(r) / MANIFEST
        m = json.loads(path.read_text(encoding="utf-8"))
        d = m.get("distributed") or {}
        if d.get("rank") != r or d.get("world_size") != pg.world_size:
            raise NpuportError(f"the part in {part_name(r)} says rank {d.get('rank')} of {d.get('world_size')}",
                               f"rank {r} of {pg.world_size}", str(path))
        manifests.append(m)
        parts.append({"rank": r, "path": part_name(r), "local_rank": d.get("local_rank"), "host": d.get("host"),
                      "manifest_sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    m0 = manifests[0]
    body = {"schema": RANKS_SCHEMA, "complete": True,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "tool": {"npuport": npuport.__version__}, "world_size": pg.world_size, "backend": pg.backend,
            "process_group": m0["distributed"]["process_group"], "model": {"name": m0["model"]["name"], "signature": m0["model"]["signature"]},
            "device": m0["device"]["spec"], "mesh": m0["distributed"].get("mesh"), "meshes": _meshes(manifests),
            "layout": {"sha256": _layout_hash(manifests), "sharded_entries": sum(1 for e in m0["entries"] if "dist" in e)},
            "parts": parts}
    if target.exists() and not force:
        raise NpuportError(f"{target} already exists", "a new directory, or --force to replace it", str(target))
    publish(staging, target, body)


def _meshes(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for m in manifests:
        metas = [e["dist"] for e in m["entries"] if "dist" in e] + list(m.get("weights", {}).get("dist", {}).values())
        for meta in metas:
            if meta["mesh"] not in seen:
                seen.append(meta["mesh"])
    return seen


def _layout_hash(manifests: list[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for r, m in enumerate(manifests):
        for e in m["entries"]:
            h.update(f"{r}:{e['key']}:{layout_key(e.get('dist'))}\n".encode())
    return h.hexdigest()


class RankedArtifact:
    """A loaded per-rank record. `parts[r]` is rank r's Artifact. As a side of a comparison that does not go rank by
    rank it acts as one artifact: `capture` is the ranks' captures gathered into global tensors (gather.py),
    `weights()` the gathered state dict, `inputs()` and `manifest` rank 0's."""

    def __init__(self, path: Path, top: dict[str, Any], parts: list[Artifact]) -> None:
        self.path, self.top, self.parts = path, top, parts
        self._gathered: Gathered | None = None

    @property
    def world_size(self) -> int:
        return len(self.parts)

    @property
    def manifest(self) -> dict[str, Any]:
        return self.parts[0].manifest

    @property
    def gathered(self) -> Gathered:
        if self._gathered is None:
            self._gathered = gather([p.capture for p in self.parts])
        return self._gathered

    @property
    def capture(self) -> Capture:
        return self.gathered.capture

    def inputs(self) -> list[torch.Tensor]:
        return self.parts[0].inputs()

    def weights(self) -> dict[str, torch.Tensor] | None:
        per = [p.weights() for p in self.parts]
        if per[0] is None:
            return None
        placed = self.manifest.get("weights", {}).get("dist", {})
        out: dict[str, torch.Tensor] = {}
        for name, t0 in per[0].items():
            if name not in placed:
                out[name] = t0
                continue
            try:
                out[name], _ = assemble({r: w[name] for r, w in enumerate(per) if w is not None and name in w}, placed[name])
            except ShardError as exc:
                raise NpuportError(f"the weights of {self.path} cannot be gathered: {name}", "placements Shard, Replicate or Partial",
                                   str(exc)) from None
        return out

    def layout(self) -> dict[tuple[int, str], str]:
        """(rank, entry key) -> placement: what must match for a rank-by-rank comparison."""
        return {(r, e.key): layout_key(p.capture.dist.get(e.blob)) for r, p in enumerate(self.parts) for e in p.capture.entries}


def load_side(path: str | Path, verify: bool = True) -> Artifact | RankedArtifact:
    """An artifact directory: a single record, or a per-rank record made under torchrun."""
    folder = Path(path)
    mpath = folder / MANIFEST
    if folder.is_dir() and not mpath.is_file() and any(PART.match(p.name) for p in folder.iterdir()):
        raise NpuportError(f"{folder} is a partial per-rank record: it has rank folders but no {MANIFEST}",
                           "a complete record (rank 0 writes the manifest once every rank has written its part)",
                           ", ".join(sorted(p.name for p in folder.iterdir())[:6]))
    if not mpath.is_file():
        return load_artifact(folder, verify)
    try:
        top = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return load_artifact(folder, verify)  # says it is corrupt
    if not isinstance(top, dict) or top.get("schema") != RANKS_SCHEMA:
        return load_artifact(folder, verify)
    return _load_ranked(folder, top, verify)


def _load_ranked(folder: Path, top: dict[str, Any], verify: bool) -> RankedArtifact:
    world = top.get("world_size")
    parts = top.get("parts")
    if not top.get("complete") or not isinstance(world, int) or world < 1 or not isinstance(parts, list):
        raise NpuportError(f"{folder / MANIFEST} is not a complete per-rank record", f"schema {RANKS_SCHEMA} with complete: true",
                           f"world_size {world!r}, {type(parts).__name__} parts")
    listed = {p.get("rank"): p for p in parts if isinstance(p, dict)}
    missing = [r for r in range(world) if r not in listed]
    if missing:
        raise NpuportError(f"per-rank record {folder} is partial: rank {', '.join(map(str, missing))} of world size {world} missing",
                           f"one part per rank 0 .. {world - 1}", f"ranks {sorted(k for k in listed if isinstance(k, int))}")
    extra = sorted(p.name for p in folder.iterdir() if PART.match(p.name) and int(p.name[5:]) not in range(world))
    if extra or len(listed) != world:
        raise NpuportError(f"per-rank record {folder} is a mismatched set: {', '.join(extra) or 'extra parts'} beyond world size {world}",
                           f"exactly ranks 0 .. {world - 1}", ", ".join(extra) or f"{len(listed)} parts listed")
    arts: list[Artifact] = []
    for r in range(world):
        sub = folder / str(listed[r].get("path", part_name(r)))
        if not (sub / MANIFEST).is_file():
            raise NpuportError(f"per-rank record {folder} is partial: {sub.name} is missing", f"rank {r}'s part", "missing")
        if verify and hashlib.sha256((sub / MANIFEST).read_bytes()).hexdigest() != listed[r].get("manifest_sha256"):
            raise NpuportError(f"per-rank record {folder} is corrupt: {sub.name}/{MANIFEST} does not match its hash",
                               "the part rank 0 listed", "a different manifest")
        art = load_artifact(sub, verify)
        d = art.manifest.get("distributed") or {}
        if d.get("world_size") != world or d.get("rank") != r:
            raise NpuportError(f"per-rank record {folder} is a mismatched set: {sub.name} was recorded as rank {d.get('rank')} "
                               f"of world size {d.get('world_size')}", f"rank {r} of world size {world}", str(sub))
        if arts and art.manifest["model"]["signature"] != arts[0].manifest["model"]["signature"]:
            raise NpuportError(f"per-rank record {folder} is a mismatched set: {sub.name} is another model",
                               arts[0].manifest["model"]["name"], art.manifest["model"]["name"])
        arts.append(art)
    return RankedArtifact(folder, top, arts)


__all__ = ["SCHEMA", "RANKS_SCHEMA", "RankedArtifact", "load_side", "write_ranked", "part_name"]
