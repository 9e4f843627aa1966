"""The package as users get it: built into a wheel from the tracked files alone, installed (not editable) into a
fresh virtual environment, and run from another directory. Proves the mappings, schemas and kernel sources ship
as package data and that nothing reads the source checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked_copy(dst: Path) -> Path:
    """The tracked files only (an untracked file in a dev checkout must not make the test pass)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, files):
        src = ROOT / rel.decode()
        if src.is_file():
            target = dst / rel.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dst


@pytest.mark.slow
def test_non_editable_install_audits_from_another_directory(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to know the tracked files")
    src = _tracked_copy(tmp_path / "src")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # torch, click, ... come from the test environment's site-packages as a plain path entry: its .pth files
    # (among them an editable install of npuport) are not processed, so only the installed copy can be imported
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site),
                    str(src)], check=True, capture_output=True, text=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NPUPORT_MAPPINGS", "PYTHONPATH")}
    where = subprocess.run([str(py), "-c", "import npuport, npuport.mappings as m; print(npuport.__file__); print(m.mappings_dir())"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), where
    shipped = sorted(p.name for p in Path(where[1]).glob("*.yaml"))
    assert shipped == sorted(p.name for p in (ROOT / "npuport" / "mappings").glob("*.yaml"))
    out = subprocess.run([str(py), "-m", "npuport.cli.main", "audit", str(ROOT / "examples" / "gpt" / "model.py"),
                          "--scenario", "prefill:batch=1,seq=64", "--format", "json", "--quiet"],
                         cwd=work, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["schema"] == "npuport.audit/1" and data["coverage"]["version"] and data["findings"] is not None
    assert any(o["op"] == "aten::addmm" for o in data["ops"])
