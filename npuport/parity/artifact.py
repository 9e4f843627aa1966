"""The record artifact: a directory with manifest.json and safetensors files, never pickle.

    REF_DIR/manifest.json        schema, devices, versions, dtype policy, numerics, entries, sequences, file hashes
    REF_DIR/tensors.safetensors  full mode: one tensor per blob ("b<id>"), and kept modules in stats mode
    REF_DIR/stats.safetensors    stats mode: per blob count/min/max/sum/norm, checksum, samples
    REF_DIR/inputs.safetensors   the model's inputs ("i<n>"; structure in the manifest)
    REF_DIR/weights.safetensors  the state dict, unless stats-only (then a seed + generator spec and a fingerprint)

It is written into a hidden sibling directory and renamed into place at the end, manifest last: an interrupted
record leaves no REF_DIR, and a directory without a manifest, or whose files do not match the hashes the
manifest lists, is refused with one line (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from npuport.errors import NpuportError
from npuport.parity.entries import Capture, Entry
from npuport.parity.stats import Stats, StatsTable

SCHEMA = "npuport.parity-artifact/1"
RANKS_SCHEMA = "npuport.parity-ranks/1"  # a record made under torchrun: one artifact per rank (ranked.py)
MANIFEST = "manifest.json"


def check_writable(out_dir: str | Path, force: bool) -> Path:
    """Fail before a long record, not after it."""
    target = Path(out_dir)
    if target.exists() and not force:
        raise NpuportError(f"{target} already exists", "a new directory, or --force to replace it", str(target))
    if target.exists() and not (target / MANIFEST).is_file() and any(target.iterdir()):
        raise NpuportError(f"refusing to replace {target}: it is not a parity artifact", "an artifact directory or a new path", str(target))
    parent = target.resolve().parent
    if not parent.is_dir():
        raise NpuportError(f"output folder {parent} does not exist", "an existing folder", str(parent))
    return target


def save_artifact(out_dir: str | Path, manifest: dict[str, Any], cap: Capture, inputs: list[torch.Tensor],
                  weights: dict[str, torch.Tensor] | None, force: bool = False) -> Path:
    target = check_writable(out_dir, force)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=str(target.resolve().parent)))
    try:
        files: dict[str, dict[str, Any]] = {}
        _save(tmp, "tensors.safetensors", {f"b{b}": t for b, t in cap.full.items()}, files)
        if cap.stats:
            _save(tmp, "stats.safetensors", _stats_tensors(cap.stats), files)
        _save(tmp, "inputs.safetensors", {f"i{n}": t for n, t in enumerate(inputs)}, files)
        if weights is not None:
            _save(tmp, "weights.safetensors", weights, files)
        body = dict(manifest, schema=SCHEMA, capture_mode=cap.mode, entries=_entries_json(cap),
                    calls=cap.calls, files=files, complete=True)
        publish(tmp, target, body)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def publish(staging: Path, target: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest last (fsynced: its presence says the folder is complete), then move the staged folder
    into place in one rename; a folder it replaces (checked by the caller) is removed only after."""
    with open(staging / MANIFEST, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=1, allow_nan=False))
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(staging / MANIFEST, 0o644)
    os.chmod(staging, 0o755)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _entries_json(cap: Capture) -> list[dict[str, Any]]:
    """Entries as JSON; an entry whose tensor was a shard (DTensor) also says where the shard sits (shards.py)."""
    if not cap.dist:
        return [e.to_json() for e in cap.entries]
    out = []
    for e in cap.entries:
        j = e.to_json()
        if e.blob in cap.dist:
            j["dist"] = cap.dist[e.blob]
        out.append(j)
    return out


def _save(folder: Path, name: str, tensors: dict[str, torch.Tensor], files: dict[str, dict[str, Any]]) -> None:
    if not tensors:
        return
    path = folder / name
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for k, v in tensors.items():
        v = v.detach().cpu().contiguous()
        ptr = v.untyped_storage().data_ptr()
        # safetensors refuses tensors sharing memory (tied embeddings: wte.weight is lm_head.weight): copy repeats
        out[k] = v.clone() if _shares(v) or ptr in seen else v
        seen.add(ptr)
    save_file(out, str(path))
    os.chmod(path, 0o644)
    files[name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _shares(t: torch.Tensor) -> bool:
    return t.untyped_storage().nbytes() != t.numel() * t.element_size()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def _stats_tensors(stats: Mapping[int, Stats]) -> dict[str, torch.Tensor]:
    if not isinstance(stats, StatsTable):
        table = StatsTable.empty()
        for b, st in stats.items():
            table[b] = st
        stats = table
    return stats.to_tensors()


class Artifact:
    """A loaded artifact: the manifest, the capture, and lazy access to inputs and weights."""

    def __init__(self, path: Path, manifest: dict[str, Any], capture: Capture) -> None:
        self.path = path
        self.manifest = manifest
        self.capture = capture

    def inputs(self) -> list[torch.Tensor]:
        data = _load(self.path, "inputs.safetensors", self.manifest)
        return [data[f"i{n}"] for n in range(len(data))]

    def weights(self) -> dict[str, torch.Tensor] | None:
        if "weights.safetensors" not in self.manifest["files"]:
            return None
        return _load(self.path, "weights.safetensors", self.manifest)


def load_artifact(path: str | Path, verify: bool = True) -> Artifact:
    folder = Path(path)
    if not folder.exists():
        raise NpuportError(f"artifact {folder} not found", "a directory written by `npuport parity record`", str(folder))
    if not folder.is_dir():
        raise NpuportError(f"{folder} is not an artifact directory", "a directory written by `npuport parity record`", "a file")
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise NpuportError(f"{folder} is a partial or foreign artifact: it has no {MANIFEST}",
                           "a complete record (an interrupted record leaves none)", ", ".join(sorted(p.name for p in folder.iterdir())[:6]) or "empty directory")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NpuportError(f"{mpath} is corrupt", "valid JSON", str(exc)) from None
    if isinstance(manifest, dict) and manifest.get("schema") == RANKS_SCHEMA:
        raise NpuportError(f"{folder} is a per-rank record (world size {manifest.get('world_size')}): one artifact per rank",
                           "one rank's part (its rank-NNNNN folder), or the record through npuport.parity.ranked.load_side",
                           str(folder))
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or not manifest.get("complete"):
        got = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise NpuportError(f"{mpath} is not a complete npuport parity artifact", f"schema {SCHEMA} with complete: true", str(got))
    for name, info in manifest.get("files", {}).items():
        fpath = folder / name
        if not fpath.is_file():
            raise NpuportError(f"artifact {folder} is partial: {name} is missing", "every file the manifest lists", "missing")
        if fpath.stat().st_size != info["bytes"] or (verify and _sha256(fpath) != info["sha256"]):
            raise NpuportError(f"artifact {folder} is corrupt: {name} does not match its hash in the manifest",
                               f"{info['bytes']} bytes, sha256 {info['sha256'][:16]}...", f"{fpath.stat().st_size} bytes")
    try:
        entries = [Entry.from_json(e) for e in manifest["entries"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise NpuportError(f"{mpath} is corrupt: bad entries", "entries written by npuport", repr(exc)) from None
    full = {int(k[1:]): v for k, v in _load(folder, "tensors.safetensors", manifest).items()}
    stats = _read_stats(_load(folder, "stats.safetensors", manifest))
    dist = {int(e["blob"]): e["dist"] for e in manifest["entries"] if "dist" in e}
    cap = Capture(manifest["capture_mode"], entries, full, stats, manifest.get("calls", {}),
                  manifest.get("module_sequence", {}).get("items", []), manifest.get("op_sequence", {}).get("items"),
                  manifest.get("warnings", []), dist=dist)
    return Artifact(folder, manifest, cap)


def _load(folder: Path, name: str, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    if name not in manifest.get("files", {}):
        return {}

    try:
        return load_file(str(folder / name))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise NpuportError(f"artifact {folder} is corrupt: {name} cannot be read", "a safetensors file", str(exc)) from None


def _read_stats(data: dict[str, torch.Tensor]) -> StatsTable:
    return StatsTable.from_tensors(data)
