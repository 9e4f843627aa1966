"""The `migrate` click command: diff on stdout, diagnostics on stderr, exit codes 0 / 2, --write backups."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.migrate import migrate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "source_scan"


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


def test_prints_diff_and_remaining_diagnostics() -> None:
    res = _runner().invoke(migrate, [str(FIXTURES / "model.py"), "--root", str(FIXTURES)])
    assert res.exit_code == 0
    assert res.stdout.startswith("--- a/model.py\n+++ b/model.py\n")
    assert "+import torch_npu" in res.stdout and "-    model = model.cuda()" in res.stdout
    assert "model.py:22:16: error: NPS050" in res.stderr
    assert "model.py: 16 mechanical change(s)" in res.stderr
    # the local imports are migrated together and their hand changes counted per file (HIPIFY-style)
    assert "helpers.py: 0 mechanical change(s); 2 reference(s) still need a hand change; 2 to check (info)" in res.stderr
    assert "5 file(s): 16 mechanical change(s); 10 reference(s) still need a hand change, 2 to check (info)" in res.stderr
    quiet = _runner().invoke(migrate, [str(FIXTURES / "model.py"), "--root", str(FIXTURES), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == res.stdout


def test_write_and_backup(tmp_path: Path) -> None:
    p = tmp_path / "model.py"
    shutil.copy(FIXTURES / "tiny_model.py", p)
    runner = _runner()
    res = runner.invoke(migrate, [str(p), "--write"])
    assert res.exit_code == 0 and res.stdout == "" and (tmp_path / "model.py.bak").exists()
    assert "torch.npu.is_available()" in p.read_text()
    assert "nothing to change" in runner.invoke(migrate, [str(p), "--write"]).stderr  # already migrated
    shutil.copy(FIXTURES / "tiny_model.py", p)  # a fresh CUDA file: the old backup must not be replaced
    again = runner.invoke(migrate, [str(p), "--write"])
    assert again.exit_code == 2 and again.stderr.startswith("error: backup") and "Traceback" not in again.stderr
    assert runner.invoke(migrate, [str(p), "--write", "--force"]).exit_code == 0


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    runner = _runner()
    for path in (tmp_path / "missing.py", bad):
        res = runner.invoke(migrate, [str(path)])
        assert res.exit_code == 2
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_a_root_that_cannot_take_the_diff_is_one_line(tmp_path: Path) -> None:
    # the diff's paths are relative to --root: a missing folder, or one the program is not in (a/../x.py), would give
    # a diff that applies nowhere
    for root, needle in ((tmp_path / "missing", "is not a folder"), (tmp_path, "does not hold")):
        res = _runner().invoke(migrate, [str(FIXTURES / "model.py"), "--root", str(root)])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, res.output


def test_a_file_that_is_not_python_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"device": "cuda"}\n')
    res = _runner().invoke(migrate, [str(cfg)])
    assert res.exit_code == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"error: cannot migrate {cfg}")
    assert "expected a Python source file ending in .py" in res.stderr and "received: a .json file" in res.stderr


def test_an_unreadable_local_module_is_reported_once_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the reviewer's case: helper.py (Python 3.12 `type` syntax, or any file that does not parse) tests the string
    (tmp_path / "train.py").write_text('import torch, helper\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n'
                                       "helper.setup(device)\n")
    (tmp_path / "helper.py").write_text('type Dev = str\ndef setup(device):\n    if device == "cuda" print("fast")\n')
    monkeypatch.chdir(tmp_path)
    res = _runner().invoke(migrate, ["train.py"])
    assert res.exit_code == 0 and res.stdout == ""  # nothing rewritten: the strings may reach helper.py's test
    assert res.stderr.count("helper.py: not read, not ported") == 1 and "skipped" not in res.stderr
    assert "2 file(s): 0 mechanical change(s); 2 reference(s) still need a hand change; 1 file(s) not read, not ported\n" in res.stderr
    assert "all ported" not in res.stderr
