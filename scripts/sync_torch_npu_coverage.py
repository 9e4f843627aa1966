#!/usr/bin/env python
"""Regenerate mappings/coverage/torch_npu-<version>.yaml and releases.yaml from torch-npu wheels (zip files, never installed).

    python scripts/sync_torch_npu_coverage.py --all                   # every release the package index lists
    python scripts/sync_torch_npu_coverage.py 2.13.0 2.9.0.post9       # find or pip-download the wheels
    python scripts/sync_torch_npu_coverage.py path/to/torch_npu-X.whl --torch-wheel path/to/torch-X.whl
    python scripts/sync_torch_npu_coverage.py --check --all --no-download   # the data against the wheels, writes nothing

Each torch-npu wheel gives its registrations (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml) and its
build time (zip time of torch_npu/version.py). The paired torch (Requires-Dist torch==X, or the release number
when the wheel pins none) gives the dispatch categories, from the first of: its wheel (found under --wheel-dir or
pip-downloaded; aarch64 CPU wheels are the small ones); the checked-in data of the same torch (every file records
the torch category of each op its release leaves to torch), completed from the nearest torch wheel under
--wheel-dir where an op's category is recorded nowhere; the nearest torch wheel alone. A release whose data
equals an earlier-built one's (same torch, same registrations) gets no file of its own: releases.yaml points it at
that one. Every written document is checked against a count of the wheel's yaml made line by line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from npuport.coverage import sync  # noqa: E402
from npuport.coverage.database import version_key  # noqa: E402
from npuport.coverage.dispatch_tables import fill_categories  # noqa: E402
from npuport.errors import NpuportError  # noqa: E402

_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux2014_x86_64", "manylinux_2_28_x86_64")
_PYTHONS = ("3.10", "3.11", "3.9", "3.12", "3.8", "3.13", "3.14")
_OUT = Path(__file__).resolve().parent.parent / "npuport" / "mappings" / "coverage"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def _find(wheel_dir: Path, dist: str, version: str) -> Path | None:
    hits = sorted(wheel_dir.rglob(f"{dist}-{version}-*.whl"))
    return hits[0] if hits else None


def _download(wheel_dir: Path, pip_name: str, dist: str, version: str) -> Path | None:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for python in _PYTHONS:
        for platforms in (_PLATFORMS[:2], _PLATFORMS[2:]):  # aarch64 first: the small CPU torch wheels
            plat = [a for p in platforms for a in ("--platform", p)]
            done = _pip("download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wheel_dir), *plat,
                        "--python-version", python, f"{pip_name}=={version}")
            if done.returncode == 0 and (found := _find(wheel_dir, dist, version)):
                return found
    return None


def _wheel(wheel_dir: Path, pip_name: str, dist: str, version: str, download: bool) -> Path | None:
    return _find(wheel_dir, dist, version) or (_download(wheel_dir, pip_name, dist, version) if download else None)


def published(download: bool) -> list[str]:
    """Every torch-npu version the package index lists for the platforms and Pythons above (pre-releases too)."""
    if not download:
        raise NpuportError("--all needs the package index", "no --no-download, or versions on the command line")
    found: set[str] = set()
    plat = [a for p in _PLATFORMS[:2] for a in ("--platform", p)]
    for python in _PYTHONS:
        done = _pip("index", "versions", "torch-npu", "--pre", "--only-binary=:all:", *plat, "--python-version", python)
        match = re.search(r"^Available versions: (.*)$", done.stdout, re.M)
        if match:
            found.update(v.strip() for v in match.group(1).split(","))
    if not found:
        raise NpuportError("the package index lists no torch-npu release", "pip index versions torch-npu to work")
    return sorted(found, key=version_key)


class TorchSides:
    """The torch side for each paired torch release, read once per run."""

    def __init__(self, args: argparse.Namespace, index: dict[str, dict[str, Any]]) -> None:
        self.args, self.index = args, index
        self.cache: dict[str, sync.TorchSide] = {}

    def document(self, npu_wheel: Path) -> dict[str, Any]:
        info = sync.wheel_info(npu_wheel)
        wanted, _ = sync.paired_torch(info)
        scan = not self.args.no_scan_library
        if self.args.torch_wheel:
            return sync.build_document(npu_wheel, self.args.torch_wheel, scan_library=scan)
        side = self.side(wanted)
        try:
            return sync.build_document(npu_wheel, side, scan_library=scan)
        except sync.MissingCategories as exc:
            nearest = self._nearest_wheel(wanted)
            if nearest is None:
                raise
            tables, missing = fill_categories(side.tables, exc.names, sync.torch_side_from_wheel(nearest).tables)
            if missing:
                raise sync.MissingCategories(missing, wanted) from None
            side = sync.TorchSide(side.version, tables, side.wheel, side.sha256, side.yaml,
                                  f"{side.origin}; {len(exc.names)} op(s) from {nearest.name}")
            return sync.build_document(npu_wheel, side, scan_library=scan)

    def side(self, version: str) -> sync.TorchSide:
        if version not in self.cache:
            self.cache[version] = self._side(version)
        return self.cache[version]

    def _side(self, version: str) -> sync.TorchSide:
        a = self.args
        wheel = _wheel(a.wheel_dir, "torch", "torch", version, not (a.no_download or a.no_torch_download))
        if wheel is not None:
            return sync.torch_side_from_wheel(wheel)
        docs = self._docs_of(version)
        if docs:
            print(f"note: no torch {version} wheel; its dispatch tables come from {', '.join(docs)}", file=sys.stderr)
            return sync.torch_side_from_data(version, docs)
        nearest = self._nearest_wheel(version)
        if nearest is None:
            raise NpuportError(f"no dispatch tables for torch {version}",
                               f"its wheel in {a.wheel_dir}, a reachable index, checked-in data of that torch, or any torch wheel")
        print(f"note: no torch {version} wheel and no data of it; using {nearest.name}", file=sys.stderr)
        return sync.torch_side_from_wheel(nearest, stands_for=version)

    def _docs_of(self, torch_version: str) -> dict[str, dict[str, Any]]:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs = {}
        for path in sorted(self.args.out.glob("torch_npu-*.yaml")):
            first = path.open(encoding="utf-8").readline()
            if f"paired with torch {torch_version}." in first or f"paired with torch {torch_version}," in first:
                docs[path.name] = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        return docs

    def _nearest_wheel(self, version: str) -> Path | None:
        wheels = {}
        for path in self.args.wheel_dir.rglob("torch-*.whl"):
            wheels[path.name.split("-")[1].split("+")[0]] = path
        if not wheels:
            return None
        want = version_key(version)[0]

        def distance(v: str) -> tuple[Any, ...]:
            have = version_key(v)[0]
            return tuple(abs(h - w) for h, w in zip(have[:3], want[:3])) + (have > want,)

        return wheels[min(wheels, key=distance)]


def _load_index(out: Path) -> dict[str, dict[str, Any]]:
    path = out / "releases.yaml"
    if not path.is_file():
        return {}
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {str(k): dict(v) for k, v in (doc.get("releases") or {}).items()}


def _sync_one(item: str, args: argparse.Namespace, sides: TorchSides, index: dict[str, dict[str, Any]]) -> None:
    path = Path(item)
    if path.suffix != ".whl":
        found = _wheel(args.wheel_dir, "torch-npu", "torch_npu", item, not args.no_download)
        if found is None:
            raise NpuportError(f"no torch_npu-{item}-*.whl under {args.wheel_dir}",
                               "a wheel there, or a reachable index (drop --no-download)")
        path = found
    doc = sides.document(path)
    check = sync.check_wheel(path, doc)
    if not check:
        raise NpuportError("the document disagrees with the wheel's own yaml", "the same names", str(check))
    version = doc["torch_npu"]
    if args.check:
        entry = index.get(version)
        recorded = sync.check_wheel(path, _data_doc(args.out, entry["data"])) if entry else None
        same = entry is not None and entry["digest"] == sync.data_digest(doc)[:16]
        print(f"{version}: {check}; checked-in data ({entry['data'] if entry else 'none'}): "
              f"{'same' if same else 'DIFFERS'}" + (f"; {recorded}" if recorded is not None and not recorded else ""))
        if not same or (recorded is not None and not recorded):
            raise NpuportError(f"checked-in data of torch_npu {version} is out of date", "a re-sync", version)
        return
    holder, replaced = sync.place(index, version, sync.release_entry(doc))
    stale = sorted(v for v, e in index.items() if e["data"] == holder and e["digest"] != index[holder]["digest"])
    if stale:  # aliases of what this release's file held before: their data is gone until they are synced again
        print(f"note: {', '.join(stale)} shared the earlier data of {holder}; sync them again", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    if holder == version:
        (args.out / f"torch_npu-{version}.yaml").write_text(sync.render_document(doc), encoding="utf-8")
    if replaced and replaced != holder:
        (args.out / f"torch_npu-{replaced}.yaml").unlink(missing_ok=True)
    tables = doc["torch_tables"]
    where = f"torch_npu-{version}.yaml" if holder == version else f"alias of {holder}"
    print(f"{version} (built {doc['source'].get('torch_npu_built')}, torch {doc['torch']}): {where}; "
          f"native={len(doc['native'])} native_composites={len(doc['native_composites'])} delegates={len(doc['delegates'])} "
          f"implicit={len(tables['implicit'])} explicit={len(tables['explicit'])} cpu={len(tables['cpu'])} "
          f"none={len(tables['none'])} custom={len(doc['custom'])} dropped={len(doc['dropped'])} views={len(doc['views'])} "
          f"metadata={len(doc['metadata'])} fallback_env={doc['fallback_error_env']}; wheel count: {check.counts}")


def _data_doc(out: Path, version: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((out / f"torch_npu-{version}.yaml").read_text(encoding="utf-8"), Loader=loader)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("items", nargs="*", help="torch-npu wheel files or versions (2.13.0, 2.1.0.post10)")
    parser.add_argument("--all", action="store_true", help="every torch-npu release the package index lists")
    parser.add_argument("--torch-wheel", type=Path, help="the paired torch wheel (only with a single item)")
    parser.add_argument("--wheel-dir", type=Path, default=Path("/tmp/wheels"), help="where wheels are found/downloaded")
    parser.add_argument("--out", type=Path, default=_OUT)
    parser.add_argument("--no-download", action="store_true", help="never call pip")
    parser.add_argument("--no-torch-download", action="store_true",
                        help="never download torch wheels: use checked-in data of the same torch, then the nearest torch wheel")
    parser.add_argument("--check", action="store_true",
                        help="build each release's document and compare it with the checked-in data; write nothing")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-release counts of the checked-in data as a markdown table (docs/coverage.md)")
    parser.add_argument("--releases", action="store_true",
                        help="print releases.yaml as a markdown table: build date, torch, data file or alias (docs/coverage.md)")
    parser.add_argument("--no-scan-library", action="store_true",
                        help="skip looking for TORCH_NPU_FALLBACK_CPU_DISABLE in libtorch_npu.so")
    args = parser.parse_args(argv)
    if not args.items and not args.summary and not args.all and not args.releases:
        parser.error("give torch-npu wheels or versions, --all, --summary or --releases")
    if args.torch_wheel and len(args.items) != 1:
        parser.error("--torch-wheel goes with exactly one torch-npu item")
    try:
        items = list(args.items) + (published(not args.no_download) if args.all else [])
        index = _load_index(args.out)
        sides = TorchSides(args, index)
        for item in sorted(dict.fromkeys(items), key=lambda i: _order(i, args)):
            _sync_one(item, args, sides, index)
            if not args.check:  # after each release: an error later leaves files and index consistent
                (args.out / "releases.yaml").write_text(sync.render_index(index), encoding="utf-8")
        if args.releases:
            print(releases_table(_load_index(args.out), args.out))
        if args.summary:
            from npuport.coverage.summary import markdown_table

            print(markdown_table())
    except NpuportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def releases_table(index: dict[str, dict[str, Any]], out: Path) -> str:
    """Every release in the index: build date, commit, paired torch, its data file (or the release it aliases)."""
    lines = ["| torch_npu | built | commit | torch | data | fallback switch |", "|---|---|---|---|---|---|"]
    switch = {}
    for version in sorted(index, key=version_key):
        e = index[version]
        if e["data"] not in switch:
            first = (out / f"torch_npu-{e['data']}.yaml").read_text(encoding="utf-8")
            switch[e["data"]] = "\nfallback_error_env: TORCH_NPU_FALLBACK_CPU_DISABLE" in first
        data = "own file" if e["data"] == version else f"= {e['data']}"
        lines.append(f"| {version} | {(e.get('built') or '-').replace('T', ' ')} | {(e.get('git') or '-')[:8]} | "
                     f"{e['torch']} | {data} | {'yes' if switch[e['data']] else 'no'} |")
    return "\n".join(lines)


def _order(item: str, args: argparse.Namespace) -> tuple[Any, ...]:
    """Sync in build order, so the first of identical releases gets the file (versions stand in for unknown times)."""
    path = Path(item) if item.endswith(".whl") else _find(args.wheel_dir, "torch_npu", item)
    built = sync.release_stamp(path).built if path is not None and path.is_file() else None
    version = Path(item).name.split("-")[1] if item.endswith(".whl") else item
    return (built is None, built or "", version_key(version))


if __name__ == "__main__":
    sys.exit(main())
