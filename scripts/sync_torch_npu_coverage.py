#!/usr/bin/env python
"""Regenerate mappings/coverage/torch_npu-<version>.yaml from torch-npu wheels (read as zip files, never installed).

    python scripts/sync_torch_npu_coverage.py 2.13.0 2.9.0            # find or pip-download the wheels
    python scripts/sync_torch_npu_coverage.py path/to/torch_npu-X.whl --torch-wheel path/to/torch-X.whl

For each torch-npu wheel the paired torch wheel (Requires-Dist torch==X) supplies PyTorch's dispatch tables
(torchgen/packaged/ATen/native/native_functions.yaml); aarch64 CPU wheels are the small ones. Wheels are looked
up in --wheel-dir (recursively) and downloaded there with `pip download --no-deps` when missing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from npuport.coverage.sync import build_document, paired_torch_version, render_document, wheel_info  # noqa: E402
from npuport.errors import NpuportError  # noqa: E402

_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux2014_x86_64", "manylinux_2_28_x86_64")
_PYTHONS = ("3.11", "3.10", "3.12", "3.9")


def _find(wheel_dir: Path, dist: str, version: str) -> Path | None:
    hits = sorted(wheel_dir.rglob(f"{dist}-{version}-*.whl"))
    return hits[0] if hits else None


def _download(wheel_dir: Path, pip_name: str, dist: str, version: str) -> Path:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for platform in _PLATFORMS:
        for python in _PYTHONS:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                   str(wheel_dir), "--platform", platform, "--python-version", python, f"{pip_name}=={version}"]
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                found = _find(wheel_dir, dist, version)
                if found:
                    return found
    raise NpuportError(f"cannot download {pip_name}=={version}", "a reachable package index", " ".join(_PLATFORMS))


def _wheel(wheel_dir: Path, pip_name: str, dist: str, version: str, download: bool) -> Path:
    found = _find(wheel_dir, dist, version)
    if found:
        return found
    if not download:
        raise NpuportError(f"no {dist}-{version}-*.whl under {wheel_dir}", "a wheel there, or drop --no-download")
    return _download(wheel_dir, pip_name, dist, version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("items", nargs="*", help="torch-npu wheel files or versions (2.13.0, 2.1.0.post10)")
    parser.add_argument("--torch-wheel", type=Path, help="the paired torch wheel (only with a single item)")
    parser.add_argument("--wheel-dir", type=Path, default=Path("/tmp/wheels"), help="where wheels are found/downloaded")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "npuport" / "mappings" / "coverage")
    parser.add_argument("--no-download", action="store_true", help="never call pip")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-release counts of the checked-in data as a markdown table (docs/coverage.md)")
    parser.add_argument("--no-scan-library", action="store_true",
                        help="skip looking for TORCH_NPU_FALLBACK_CPU_DISABLE in libtorch_npu.so")
    args = parser.parse_args(argv)
    if not args.items and not args.summary:
        parser.error("give torch-npu wheels or versions, or --summary")
    if args.torch_wheel and len(args.items) != 1:
        parser.error("--torch-wheel goes with exactly one torch-npu item")
    try:
        for item in args.items:
            path = Path(item)
            if not path.suffix == ".whl":
                path = _wheel(args.wheel_dir, "torch-npu", "torch_npu", item, not args.no_download)
            torch_wheel = args.torch_wheel or _wheel(
                args.wheel_dir, "torch", "torch", paired_torch_version(wheel_info(path)), not args.no_download
            )
            doc = build_document(path, torch_wheel, scan_library=not args.no_scan_library)
            args.out.mkdir(parents=True, exist_ok=True)
            target = args.out / f"torch_npu-{doc['torch_npu']}.yaml"
            target.write_text(render_document(doc), encoding="utf-8")
            tables = doc["torch_tables"]
            print(
                f"{target}: native={len(doc['native'])} native_composites={len(doc['native_composites'])} "
                f"delegates={len(doc['delegates'])} implicit={len(tables['implicit'])} explicit={len(tables['explicit'])} "
                f"cpu={len(tables['cpu'])} none={len(tables['none'])} custom={len(doc['custom'])} "
                f"dropped={len(doc['dropped'])} fallback_env={doc['fallback_error_env']}"
            )
        if args.summary:
            from npuport.coverage.summary import markdown_table

            print(markdown_table())
    except NpuportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
