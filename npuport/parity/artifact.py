"""The record artifact: a directory with manifest.json and safetensors files, never pickle.

    REF_DIR/manifest.json        schema, devices, versions, dtype policy, numerics, entries, sequences, file hashes
    REF_DIR/tensors.safetensors  full mode: one tensor per blob ("b<id>"), and kept modules in stats mode
    REF_DIR/stats.safetensors    stats mode: per blob count/min/max/sum/norm, checksum, samples
    REF_DIR/inputs.safetensors   the model's inputs ("i<n>"; structure in the manifest)
    REF_DIR/weights.safetensors  the state dict, unless stats-only (then a seed + generator spec and a fingerprint)

It is written into a hidden sibling directory and renamed into place at the end, manifest last: an interrupted
record leaves no REF_DIR, and a directory without a manifest, or whose files do not match the hashes the
manifest lists, is refused with one line (exit 2): tensors and stats when it is loaded, inputs and weights when they
are first read. Loading maps tensors.safetensors and reads a tensor only when it is compared (LazyTensors).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from npuport.errors import NpuportError
from npuport.model.scenarios import parse_scenario
from npuport.parity import verified
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
    h = verified.hashed(path, _sha256)
    digest = h.digest
    files[name] = {"bytes": path.stat().st_size, "sha256": digest}
    # the bytes on disk were just hashed here: the first compare on this machine need not hash them again (an own
    # stamp: trusted where the filesystem keeps sub-second times if the file kept its identity over the hash; where
    # it keeps seconds, only once the hash started 2 s after the write, as for any stamp: npuport.parity.verified)
    verified.stamp_hashed(path, h, own=True)


def _shares(t: torch.Tensor) -> bool:
    return t.untyped_storage().nbytes() != t.numel() * t.element_size()


def _sha256(path: Path) -> str:
    """Over a memory map of the file: no copy, and the GIL is released while it hashes (files hash in parallel)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                h.update(mm)
    return h.hexdigest()


def _stats_tensors(stats: Mapping[int, Stats]) -> dict[str, torch.Tensor]:
    if not isinstance(stats, StatsTable):
        table = StatsTable.empty()
        for b, st in stats.items():
            table[b] = st
        stats = table
    return stats.to_tensors()


class LazyTensors(Mapping[int, torch.Tensor]):
    """An artifact's full tensors {blob: tensor}, read when indexed. tensors.safetensors stays open as a memory map;
    indexing maps that blob's bytes (no copy) and keeps nothing, so a comparison holds in memory only the pair it
    compares, and a tensor that is never compared (an entry on one side only) is never read."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: Any = None
        self._names: dict[int, str] = {}
        if path is not None:
            try:
                self._file = safe_open(str(path), framework="pt")
                self._names = {int(k[1:]): k for k in self._file.keys()}
            except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
                raise NpuportError(f"artifact {path.parent} is corrupt: {path.name} cannot be read", "a safetensors file", str(exc)) from None

    def __getitem__(self, blob: int) -> torch.Tensor:
        name = self._names[blob]  # KeyError for a blob kept as statistics only, as a dict
        try:
            return self._file.get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise NpuportError(f"artifact {self.path} is corrupt: {name} cannot be read", "a safetensors file", str(exc)) from None

    def __contains__(self, blob: object) -> bool:
        return blob in self._names

    def __iter__(self) -> Iterator[int]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


_READ_ON_USE = ("inputs.safetensors", "weights.safetensors")  # hash-checked when read (Artifact.inputs / weights)


class Artifact:
    """A loaded artifact: the manifest, the capture (full tensors read on use), and lazy access to inputs and
    weights, whose files are checked against their hashes when first read (comparing two records reads neither)."""

    def __init__(self, path: Path, manifest: dict[str, Any], capture: Capture, verify: bool = True) -> None:
        self.path = path
        self.manifest = manifest
        self.capture = capture
        self.verify = verify
        self._checked: set[str] = set()

    def inputs(self) -> list[torch.Tensor]:
        data = self._read("inputs.safetensors")
        return [data[f"i{n}"] for n in range(len(data))]

    def weights(self) -> dict[str, torch.Tensor] | None:
        if "weights.safetensors" not in self.manifest["files"]:
            return None
        return self._read("weights.safetensors")

    def _read(self, name: str) -> dict[str, torch.Tensor]:
        if self.verify and name not in self._checked and name in self.manifest.get("files", {}):
            check_hashes(self.path, self.manifest, [name])
            self._checked.add(name)
        return _load(self.path, name, self.manifest)


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
    _check_fields(mpath, manifest, _ARTIFACT_FIELDS)
    _check_files(mpath, manifest)
    files = manifest["files"]
    for name, info in files.items():
        fpath = folder / name
        if not fpath.is_file():
            raise NpuportError(f"artifact {folder} is partial: {name} is missing", "every file the manifest lists", "missing")
        if fpath.stat().st_size != info["bytes"]:
            _mismatch(folder, name, info)
    if verify:
        check_hashes(folder, manifest, [n for n in files if n not in _READ_ON_USE])
    try:
        entries = [Entry.from_json(e) for e in manifest["entries"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise NpuportError(f"{mpath} is corrupt: bad entries", "entries written by npuport", repr(exc)) from None
    full = LazyTensors(folder / "tensors.safetensors" if "tensors.safetensors" in manifest.get("files", {}) else None)
    stats = _read_stats(_load(folder, "stats.safetensors", manifest))
    dist = {int(e["blob"]): e["dist"] for e in manifest["entries"] if "dist" in e}
    cap = Capture(manifest["capture_mode"], entries, full, stats, manifest.get("calls", {}),
                  manifest.get("module_sequence", {}).get("items", []), manifest.get("op_sequence", {}).get("items"),
                  manifest.get("warnings", []), dist=dist, compiled=(manifest.get("capture") or {}).get("compiled"))
    return Artifact(folder, manifest, cap, verify)


# What a manifest must hold, said in one line rather than a KeyError later (a hand-edited or damaged manifest):
# every artifact (save_artifact writes these) ...
_ARTIFACT_FIELDS: dict[str, type] = {"files": dict, "entries": list, "capture_mode": str}
# ... and a record of `npuport parity record` (npuport.parity.recording), whose description the compare reads
_RECORD_FIELDS: dict[str, type] = {"model": dict, "scenario": dict, "device": dict, "dtype_policy": dict,
                                   "numerics": dict, "rng": dict, "capture": dict, "inputs": dict}
_NESTED = (("model", "signature"), ("model", "name"), ("device", "label"), ("numerics", "requested"), ("rng", "seed"),
           ("scenario", "kind"), ("scenario", "batch"), ("scenario", "seq"))


def check_record(art: "Artifact") -> None:
    """The fields the parity compare reads of a record made by `npuport parity record`."""
    _check_fields(art.path / MANIFEST, art.manifest, _RECORD_FIELDS)
    for outer, inner in _NESTED:
        if inner not in art.manifest[outer]:
            raise NpuportError(f"{art.path / MANIFEST} is corrupt: {outer}.{inner} is missing",
                               "a manifest as npuport parity record writes it", ", ".join(sorted(art.manifest[outer])) or "{}")
    _check_step(art.path / MANIFEST, art.manifest["scenario"])


def step_spec(sc: dict[str, Any], mode: str | None = None) -> str:
    """The --scenario text that reruns a record's step (its manifest's `scenario`), in `mode` if given, else its own."""
    mode = (sc.get("mode") or "eager") if mode is None else mode
    return (f"{sc.get('name')}:batch={sc.get('batch')},seq={sc.get('seq')}"
            + (f",past={sc['past']}" if sc.get("past") is not None else "") + (f",mode={mode}" if mode != "eager" else ""))


def _check_step(mpath: Path, sc: dict[str, Any]) -> None:
    """The recorded step is rerun from its manifest (step_spec): one no scenario takes is the record's fault, said as
    such (else the scenario grammar would name it as an option the user gave)."""
    try:
        sizes = [sc.get(k) for k in ("batch", "seq")] + ([sc["past"]] if sc.get("past") is not None else [])
        if not all(type(v) is int for v in sizes):
            raise NpuportError("a size is not an integer")
        if not isinstance(sc.get("mode", "eager"), str):
            raise NpuportError("its mode is not a name")
        parse_scenario(step_spec(sc))
    except NpuportError as exc:
        raise NpuportError(f"{mpath} is corrupt: its scenario is not a step npuport runs ({exc.what})",
                           "a manifest as npuport parity record writes it", json.dumps(sc)[:120]) from None


def _check_fields(mpath: Path, manifest: dict[str, Any], fields: dict[str, type]) -> None:
    for key, kind in fields.items():
        if not isinstance(manifest.get(key), kind):
            raise NpuportError(f"{mpath} is corrupt: {key!r} is missing or not a {kind.__name__}",
                               "a manifest as npuport parity record writes it", repr(manifest.get(key))[:80])


def _check_files(mpath: Path, manifest: dict[str, Any]) -> None:
    for name, info in manifest["files"].items():
        if not isinstance(info, dict) or not isinstance(info.get("bytes"), int) or not isinstance(info.get("sha256"), str):
            raise NpuportError(f"{mpath} is corrupt: files[{name!r}] lacks its size or sha256",
                               "bytes and sha256 for every file", repr(info)[:80])


def check_hashes(folder: Path, manifest: dict[str, Any], names: list[str]) -> None:
    """Each named file against its sha256 in the manifest, the files hashed in parallel (sha256 runs at about
    1 GB/s on one core: the largest cost of loading a record; docs/performance.md). A file this machine has already
    matched against that hash and that has not changed since (npuport.parity.verified) is not hashed again."""
    names = [n for n in names if not verified.already_verified(folder / n, manifest["files"][n]["sha256"])]
    if not names:
        return
    with ThreadPoolExecutor(max_workers=min(len(names), os.cpu_count() or 1)) as pool:
        digests = list(pool.map(lambda n: verified.hashed(folder / n, _sha256), names))
    for name, h in zip(names, digests):
        if h.digest != manifest["files"][name]["sha256"]:
            _mismatch(folder, name, manifest["files"][name])
        verified.stamp_hashed(folder / name, h)


def _mismatch(folder: Path, name: str, info: dict[str, Any]) -> NoReturn:
    raise NpuportError(f"artifact {folder} is corrupt: {name} does not match its hash in the manifest",
                       f"{info['bytes']} bytes, sha256 {info['sha256'][:16]}...", f"{(folder / name).stat().st_size} bytes")


def _load(folder: Path, name: str, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    if name not in manifest.get("files", {}):
        return {}
    try:
        return load_file(str(folder / name))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise NpuportError(f"artifact {folder} is corrupt: {name} cannot be read", "a safetensors file", str(exc)) from None


def _read_stats(data: dict[str, torch.Tensor]) -> StatsTable:
    return StatsTable.from_tensors(data)
