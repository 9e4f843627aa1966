"""CLI contract: exit codes, one-line errors without tracebacks, output files, formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "models"


def run(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize(
    "args, needle",
    [
        (["audit", str(FIX / "missing.py")], "not found"),
        (["audit", str(FIX / "syntax_error.py")], "syntax error at line 1"),
        (["audit", str(FIX / "no_entry.py")], "defines no function build_model()"),
        (["audit", str(FIX / "raises.py")], "ValueError: weights path not configured"),
        (["audit", str(FIX / "not_module.py")], "must return a torch.nn.Module"),
        (["audit", str(FIX / "bad_inputs.py"), "--scenario", "prefill"], "failed on the prefill inputs"),
        (["audit", str(FIX / "import_error.py")], "ModuleNotFoundError"),
        (["audit", str(FIX / "tiny.py"), "--chip", "B300"], "unknown chip 'B300'"),
        (["audit", str(FIX / "tiny.py"), "--scenario", "inference"], "unknown scenario 'inference'"),
        (["audit"], "give exactly one model"),
        (["audit", "--hf", str(FIX / "tiny.py")], "not valid JSON"),
        (["audit", str(FIX / "tiny.py"), "--entry", "nope"], "defines no function nope()"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    res = run(*args)
    assert res.exit_code == 2, res.output
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [l for l in err.strip().splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err
    assert "expected" in lines[0] and "received" in lines[0]


def test_text_report_and_skipped_scenario():
    res = run("audit", str(FIX / "tiny.py"), "--quiet")
    assert res.exit_code == 0, res.output
    assert "aten::addmm" in res.output
    assert "train: skipped" in res.output


def test_entry_option_and_file_colon_function():
    for args in (["--entry", "alt_builder"], []):
        target = str(FIX / "tiny.py") + ("" if args else ":alt_builder")
        res = run("audit", target, *args, "--quiet", "--format", "json", "--scenario", "prefill")
        assert res.exit_code == 0, res.output
        data = json.loads(res.stdout if hasattr(res, "stdout") else res.output)
        assert [o["op"] for o in data["ops"] if o["kind"] == "compute"] == ["aten::addmm"]


@pytest.mark.parametrize("ext, probe", [(".json", '"schema": "npuport.audit/1"'), (".md", "# npuport audit"),
                                        (".csv", "op,kind,class"), (".html", "<svg")])
def test_output_formats_by_extension(tmp_path, ext, probe):
    out = tmp_path / f"report{ext}"
    res = run("audit", str(FIX / "tiny.py"), "--quiet", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert probe in out.read_text()


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "keep.json"
    out.write_text("precious")
    res = run("audit", str(FIX / "tiny.py"), "--quiet", "-o", str(out))
    assert res.exit_code == 2 and out.read_text() == "precious"
    res = run("audit", str(FIX / "tiny.py"), "--quiet", "-o", str(out), "--force")
    assert res.exit_code == 0 and out.read_text().startswith("{")


def test_refuses_to_write_over_the_model(tmp_path):
    model = tmp_path / "m.py"
    model.write_text((FIX / "tiny.py").read_text())
    res = run("audit", str(model), "--quiet", "-o", str(model), "--force")
    assert res.exit_code == 2 and "input file" in res.output
    assert model.read_text() == (FIX / "tiny.py").read_text()


def test_help_and_version():
    assert run("--help").exit_code == 0
    res = run("--version")
    assert res.exit_code == 0 and "npuport" in res.output


SCAN = Path(__file__).resolve().parent.parent / "fixtures" / "source_scan"
GPT = Path(__file__).resolve().parent.parent.parent / "examples" / "gpt" / "model.py"


def test_findings_fail_on_and_suppress():
    res = run("audit", str(GPT), "--quiet", "--scenario", "train:seq=64", "--format", "json", "--fail-on", "warning")
    assert res.exit_code == 1
    data = json.loads(res.stdout if hasattr(res, "stdout") else res.output.split("\nnpuport:")[0])
    ids = {f["id"] for f in data["findings"]}
    assert "NPB016" in ids  # exact GELU becomes tanh GELU on NPU
    warn = sorted(f["id"] for f in data["findings"] if f["level"] in ("warning", "error"))
    res = run("audit", str(GPT), "--quiet", "--scenario", "train:seq=64", "--format", "json", "--fail-on", "warning",
              *[a for w in warn for a in ("--suppress", w)])
    assert res.exit_code == 0, res.output
    res = run("audit", str(GPT), "--quiet", "--scenario", "prefill:seq=8", "--suppress", "NPB9x-")
    assert res.exit_code == 2


def test_static_only_scans_without_executing(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import torch\nraise SystemExit('never run')\nx = torch.zeros(2).cuda()\n")
    res = run("audit", str(src), "--static-only", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout if hasattr(res, "stdout") else res.output)
    assert data["schema"] == "npuport.source_scan/1"
    assert any(d["line"] == 3 for d in data["diagnostics"])
    res = run("audit", str(src), "--static-only", "--fail-on", "info")
    assert res.exit_code == 1
    # a step size or a profile has nothing to act on when nothing is traced: one line, exit 2, not ignored
    res = run("audit", str(src), "--static-only", "--scenario", "decode")
    assert res.exit_code == 2 and "--static-only traces nothing" in res.output and "--scenario decode" in res.output
