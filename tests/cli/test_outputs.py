"""Where a report may go, checked before any work: never over an input (a model file, a config, an audit JSON, a
parity record or anything inside it), never into a folder or a missing one, never twice, and the folders a command
fills (--out-dir, --emit) never a file. Each refusal is one `error:` line, exit 2, and leaves the inputs as they were."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.bench import check_emit
from npuport.cli.common import check_new, write_output
from npuport.cli.main import cli
from npuport.cli.options import not_negative
from npuport.parity.run import is_artifact_path

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def _run(args: list[str], cwd: Path) -> tuple[int, str]:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(cli, args)
    finally:
        os.chdir(old)
    return res.exit_code, res.output


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    (tmp_path / "tiny.py").write_text((FIX / "tiny.py").read_text())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (tmp_path / "note.txt").write_text("keep")
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "manifest.json").write_text('{"schema": "npuport.parity/1"}')
    (tmp_path / "folder").mkdir()
    (tmp_path / "emitted").mkdir()
    (tmp_path / "emitted" / "01_case.py").write_text('"""Standalone repro of aten::mm, written by `npuport bench`."""\n# edited')
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "nowhere")
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "decode.trace.json.gz").write_text("a trace recorded earlier")
    (tmp_path / "prof" / "prefill.profile.json").write_text(json.dumps({"model_type": "llama"}))  # a config, here
    (tmp_path / "rec" / "model.py").write_text((FIX / "tiny.py").read_text())
    (tmp_path / "note-link.txt").symlink_to(tmp_path / "note.txt")
    return tmp_path


CASES = [
    # the report over an input, --force or not
    (["audit", "tiny.py", "-o", "tiny.py", "--force"], "refusing to write the report"),
    (["bench", "tiny.py", "-o", "tiny.py", "--force"], "refusing to write the report"),
    (["bench", "--from", "note.txt", "--json-out", "note.txt", "--force"], "refusing to write the report"),
    (["parity", "run", "--ref", "cpu", "--dev", "cpu", "tiny.py", "-o", "tiny.py", "--force"],
     "refusing to write the report"),
    (["parity", "compare", "--ref", "rec", "--dev", "rec", "-o", "rec/manifest.json", "--force"],
     "refusing to write the report"),
    (["parity", "compare", "--ref", "rec", "--dev", "cpu", "tiny.py", "--json-out", "rec/new.json"],
     "refusing to write the report"),
    (["profile", "import", "note.txt", "-o", "note.txt", "--force"], "refusing to write the report"),
    # a folder, a missing folder, a file as a folder, one path twice, an empty path, a dangling link
    (["audit", "tiny.py", "-o", "folder", "--force"], "folder is a folder"),
    (["audit", "tiny.py", "-o", "missing/report.json"], "output folder missing does not exist"),
    (["audit", "tiny.py", "-o", "note.txt/report.json"], "note.txt is not a folder"),
    (["audit", "tiny.py", "-o", "r.json", "--json-out", "r.json"], "r.json is given as two outputs"),
    (["audit", "tiny.py", "-o", ""], "an output path is empty"),
    (["audit", "tiny.py", "-o", "dangling.txt"], "dangling.txt already exists"),
    (["kernels", "list", "-o", "folder", "--force"], "folder is a folder"),
    # folders a command fills
    (["parity", "record", "--dev", "cpu", "tiny.py", "--out-dir", "note.txt", "--force"], "--out-dir note.txt is a file"),
    (["profile", "record", "tiny.py", "--out-dir", "note.txt"], "--out-dir note.txt is a file"),
    (["bench", "tiny.py", "--emit", "note.txt"], "--emit note.txt is a file"),
    (["bench", "tiny.py", "--emit", "emitted"], "--emit emitted already holds repro scripts of an earlier run"),
    (["profile", "record", "tiny.py", "--scenario", "train:seq=8+decode:past=8", "--out-dir", "prof"],
     "prof/decode.trace.json.gz already exists"),
    (["kernels", "list", "-o", "/dev/stdout", "--force"], "/dev/stdout is not a regular file"),
    (["audit", "tiny.py", "-o", "newout/"], "newout/ names a folder"),
    (["audit", "tiny.py", "-o", "note.txt", "--json-out", "note-link.txt", "--force"], "is given as two outputs"),
    (["profile", "record", "tiny.py", "--out-dir", "note.txt/sub"], "lies under"),
    (["bench", "tiny.py", "--emit", "note.txt/sub"], "lies under"),
    (["parity", "record", "--dev", "cpu", "rec/model.py", "--out-dir", "rec", "--force"], "holds an input"),
    (["profile", "record", "--hf", "prof/prefill.profile.json", "--out-dir", "prof", "--force"],
     "refusing to write the report over an input file"),
    (["kernels", "build", "--dry-run", "--out-dir", "note.txt"], "--out-dir note.txt is a file"),
    (["profile", "record", "tiny.py", "--hf", "config.json", "--out-dir", "p"], "give exactly one model"),
]


@pytest.mark.parametrize("args, needle", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_refused_in_one_line_before_any_work(work: Path, args: list[str], needle: str) -> None:
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    code, out = _run(args, work)
    assert code == 2, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], out
    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == before  # nothing written, nothing lost
    assert sorted(p.name for p in work.iterdir()) == sorted(["tiny.py", "config.json", "note.txt", "rec", "folder",
                                                              "emitted", "dangling.txt", "prof", "note-link.txt"])


OPTION_CASES = [
    (["parity", "run", "tiny.py", "--ref", "cpu", "--dev", "cpu", "--golden", "cpu"], "expected cpu64 or a record folder"),
    (["parity", "compare", "--ref", "rec", "--dev", "rec", "--k", "-1"], "expected a finite number, 0 or more"),
    (["parity", "compare", "--ref", "rec", "--dev", "rec", "--rel-l2", "nan"], "expected a finite number, 0 or more"),
    (["bench", "tiny.py", "--budget", "-1"], "expected a finite number, 0 or more"),
    (["bench", "tiny.py", "--rotate-mb", "-5"], "expected a finite number, 0 or more"),
    (["bench", "tiny.py", "--graph-below-us", "nan"], "expected a finite number, 0 or more"),
    (["profile", "record", "tiny.py", "--out-dir", "dangling.txt"], "--out-dir dangling.txt is a link to nothing"),
    (["audit", "tiny.py", "--world-size", "0"], "bad --world-size"),
    (["audit", "tiny.py", "--rank", "3"], "--rank names a rank of a job"),
    (["audit", "tiny.py", "--scenario", "prefill:batch=1,batch=2"], "batch= given twice"),
    (["coverage", "list", "--status", "native", "-o", "list.md"], "its extension asks for markdown"),
    (["audit", "tiny.py", "--from-chip", "Ascend910A"], "is not a CUDA GPU"),
    (["audit", "tiny.py:build_model", "--entry", "alt_builder"], "the builder is named twice"),
    (["migrate", "tiny.py", "--force"], "--force without --write"),
    (["audit", "tiny.py", "--profile-scenario", "prefill"], "--profile-scenario names the scenario a --profile measured"),
]


@pytest.mark.parametrize("args, needle", OPTION_CASES, ids=[" ".join(a) for a, _ in OPTION_CASES])
def test_options_out_of_range_are_one_line(work: Path, args: list[str], needle: str) -> None:
    code, out = _run(args, work)
    assert code == 2, out
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0] and "Traceback" not in out, out
    assert not (work / "list.md").exists()


def test_what_the_checks_let_through(work: Path) -> None:
    """The checks refuse only what they name: a device spelled with an index beside a folder of that name, a folder
    of notes for --emit, --force through a link (the file it names replaced, the link kept), 0 where it means
    bit-exact or minimum repetitions."""
    (work / "npu").mkdir()
    check_new([str(work / "npu" / "parity.json")], False, inputs=["npu:0", "cuda:1"])
    (work / "notes").mkdir()
    (work / "notes" / "README.md").write_text("notes")
    check_emit(str(work / "notes"), False)
    (work / "notes" / "02_mine.py").write_text("x = 1  # the user's own numbered script, not bench's")
    check_emit(str(work / "notes"), False)
    (work / "real.txt").write_text("old")
    (work / "link.txt").symlink_to(work / "real.txt")
    check_new([str(work / "link.txt")], True)
    write_output(str(work / "link.txt"), "new", True)
    assert (work / "link.txt").is_symlink() and (work / "real.txt").read_text() == "new"
    assert not_negative(None, None, 0.0) == 0.0  # type: ignore[arg-type]
    # a device name beside a folder of that name stays a device, unless the folder is a record
    old = os.getcwd()
    os.chdir(work)
    try:
        assert not is_artifact_path("npu") and is_artifact_path("rec")
        (work / "npu" / "manifest.json").write_text("{}")
        assert is_artifact_path("npu")
    finally:
        os.chdir(old)
    code, out = _run(["parity", "compare", "--ref", "rec", "--dev", "rec", "--rel-l2", "0"], work)
    assert "--rel-l2" not in out  # the option is accepted; the hand-made record is what fails
