"""The old spellings work for one release (until npuport REMOVED_IN), each with one note on stderr (none with
--quiet); giving the old and the new spelling together is an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import npuport.cli.bench_impl as bench_impl
import npuport.cli.parity_impl as parity_impl
from npuport.cli.main import cli
from npuport.cli.options import REMOVED_IN, DeprecatedOption
from npuport.errors import NpuportError
from tests.cli.helpers import commands, options

TINY = str(Path(__file__).resolve().parent.parent / "fixtures" / "models" / "tiny.py")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_parity_save_json_is_json_out(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    res = run("parity", "--ref", "cpu", "--dev", "cpu", TINY, "--scenario", "prefill:seq=4", "--save-json", str(out))
    assert res.exit_code == 0, res.output
    assert "npuport: --save-json is deprecated, use --json-out\n" in res.stderr
    assert json.loads(out.read_text())["schema"] == "npuport.parity/1"
    assert "PASS" in res.stdout  # the text report still goes to stdout


def test_kernels_list_json_prints_json_like_format_json() -> None:
    old, new = run("kernels", "list", "--json"), run("kernels", "list", "--format", "json")
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout and json.loads(old.stdout)[0]["name"]
    assert old.stderr == "npuport: --json is deprecated, use --format json\n" and new.stderr == ""


def test_bench_top_is_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake(source: Any, run: Any, progress: Any = None) -> Any:
        seen["top"] = run.top
        raise NpuportError("stopped here")

    monkeypatch.setattr(bench_impl, "bench_api", fake)
    res = run("bench", TINY, "--top", "3")
    assert res.exit_code == 2 and seen["top"] == 3
    assert "npuport: --top is deprecated, use --ops (in bench --top N meant --ops N" in res.stderr
    res = run("bench", TINY, "--ops", "4")
    assert seen["top"] == 4 and "deprecated" not in res.stderr


def test_parity_record_o_is_out_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = {}

    def fake(spec: Any, dev: str, output: str, opts: Any, force: bool = False, progress: Any = None) -> Path:
        seen["dir"] = output
        return tmp_path

    monkeypatch.setattr(parity_impl, "parity_record", fake)
    res = run("parity", "record", "--dev", "cpu", TINY, "-o", str(tmp_path / "ref"))
    assert res.exit_code == 0, res.output and seen["dir"] == str(tmp_path / "ref")
    assert "npuport: -o/--output is deprecated, use --out-dir (-o is always a file)" in res.stderr
    res = run("parity", "record", "--dev", "cpu", TINY, "--out-dir", str(tmp_path / "ref2"), "--quiet")
    assert res.exit_code == 0 and seen["dir"] == str(tmp_path / "ref2") and res.stderr == ""


def test_kernels_build_out_is_out_dir(tmp_path: Path) -> None:
    res = run("kernels", "build", "--dry-run", "--out", str(tmp_path / "b"))
    assert res.exit_code == 0 and str(tmp_path / "b") in res.stdout
    assert res.stderr == "npuport: --out is deprecated, use --out-dir\n"


def test_quiet_silences_the_note() -> None:
    res = run("kernels", "list", "--json", "--quiet")
    assert res.exit_code == 0 and res.stderr == "" and json.loads(res.stdout)


@pytest.mark.parametrize("args", [["kernels", "list", "--json", "--format", "text"],
                                  ["kernels", "build", "--dry-run", "--out", "a", "--out-dir", "b"],
                                  ["parity", "record", "--dev", "cpu", TINY, "-o", "a", "--out-dir", "b"]])
def test_old_and_new_spelling_together_is_an_error(args: list[str]) -> None:
    res = run(*args)
    assert res.exit_code == 2 and res.stderr.startswith("error: both ") and len(res.stderr.splitlines()) == 1, res.output
    if "--json" in args:  # the new option named as given (--format text), not as the old one maps (--format json)
        assert res.stderr.startswith("error: both --json and --format text given"), res.stderr


def test_every_deprecation_is_hidden_and_documented() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    found = [(path, o) for path, cmd in commands() for o in options(cmd, deprecated=True)]
    assert len(found) == 6
    for path, o in found:
        assert isinstance(o, DeprecatedOption) and o.hidden
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{path.removeprefix('npuport ')} ")
                    and o.opts[-1] in line), None)
        assert row is not None and o.use in row and REMOVED_IN in row, (path, o.opts)
