"""A model path that is not a Python model file: one `error:` line, exit 2, no traceback, in every command that
loads a model (audit, bench, parity run, parity record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model.loading import load_model_file

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "configs" / "gpt2.json"  # a shipped HF config: the common mistake is leaving out --hf
TINY = ROOT / "tests" / "fixtures" / "models" / "tiny.py"


def _commands(model: str, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "audit": ["audit", model],
        "bench": ["bench", model, "--device", "cpu", "--quiet"],
        "parity run": ["parity", "run", "--ref", "cpu", "--dev", "cpu", model],
        "parity record": ["parity", "record", "--dev", "cpu", model, "--out-dir", str(tmp_path / "rec")],
    }


def _one_error_line(args: list[str], needle: str) -> str:
    res = CliRunner().invoke(cli, args)
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert res.exit_code == 2, (args, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], err
    assert "expected" in lines[0] and "received" in lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["audit", "bench", "parity run", "parity record"])
def test_hf_config_without_hf_is_one_line(command, tmp_path):
    line = _one_error_line(_commands(str(CONFIG), tmp_path)[command], "is not a Python model file")
    assert str(CONFIG) in line and "use --hf" in line and "a .json file" in line


@pytest.mark.parametrize("command", ["audit", "bench"])
def test_other_suffixes_and_folders(command, tmp_path):
    text = tmp_path / "model.txt"
    text.write_text("def build_model(): ...\n", encoding="utf-8")
    _one_error_line(_commands(str(text), tmp_path)[command], "is not a Python model file")
    bare = tmp_path / "model"
    bare.write_text("def build_model(): ...\n", encoding="utf-8")
    assert "without the .py suffix" in _one_error_line(_commands(str(bare), tmp_path)[command], "is not a Python model file")
    folder = tmp_path / "pkg.py"
    folder.mkdir()
    assert "a directory" in _one_error_line(_commands(str(folder), tmp_path)[command], "is not a file")


@pytest.mark.parametrize("command", ["audit", "bench"])
def test_unreadable_model_file(command, tmp_path, monkeypatch):
    # chmod 000 does not stop root (CI containers), so the read itself is made to fail as it would for a user
    model = tmp_path / "model.py"
    model.write_text(TINY.read_text(encoding="utf-8"), encoding="utf-8")
    real = Path.read_text

    def refuse(self: Path, *args, **kwargs):
        if self == model:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    line = _one_error_line(_commands(str(model), tmp_path)[command], "could not be read")
    assert "Permission denied" in line


def test_library_raises_the_user_error():
    with pytest.raises(NpuportError, match="not a Python model file"):
        load_model_file(CONFIG)
