"""One CLI grammar (docs/cli.md), checked on every command and subcommand through click's introspection."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from npuport.cli.main import COMMANDS, cli
from npuport.cli.options import FORMATS, SCENARIO_METAVAR, TOP_HELP, DeprecatedOption
from npuport.cost.roofline import load_chips
from npuport.coverage import available_versions
from tests.cli.helpers import commands, option, walk

ALL = [p for p, _ in walk()]
RUNNABLE = dict(commands())
JSON_OUT = ["npuport audit", "npuport parity run", "npuport parity compare", "npuport bench", "npuport coverage show",
            "npuport coverage diff", "npuport coverage list", "npuport kernels list"]


def help_text(path: str) -> str:
    res = CliRunner().invoke(cli, [*path.split()[1:], "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return res.output


def test_the_walk_sees_every_command() -> None:
    assert {"npuport audit", "npuport migrate", "npuport bench", "npuport parity run", "npuport parity compare",
            "npuport parity record", "npuport coverage show", "npuport coverage diff", "npuport coverage list",
            "npuport profile import", "npuport profile record", "npuport profile compare", "npuport profile probe", "npuport kernels list", "npuport kernels build", "npuport kernels test", "npuport kernels perf"} == set(RUNNABLE)


@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_every_command_has_quiet_and_debug(path: str) -> None:
    cmd = RUNNABLE[path]
    for flag in ("--quiet", "--debug"):
        opt = option(cmd, flag)
        assert opt is not None and opt.is_flag, f"{path} has no {flag}"
    assert option(cmd, "--quiet").help == option(RUNNABLE["npuport audit"], "--quiet").help  # type: ignore[union-attr]


@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_old_json_spellings_only_as_hidden_deprecated_aliases(path: str) -> None:
    cmd = RUNNABLE[path]
    for p in cmd.params:
        if isinstance(p, click.Option) and {"--save-json", "--json"} & set(p.opts):
            assert isinstance(p, DeprecatedOption) and p.hidden, f"{path}: {p.opts} is not a hidden deprecated alias"


@pytest.mark.parametrize("path", JSON_OUT)
def test_json_out_where_a_report_is_written(path: str) -> None:
    opt = option(RUNNABLE[path], "--json-out")
    assert opt is not None and opt.metavar == "FILE"


@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_o_is_always_a_file(path: str) -> None:
    opt = option(RUNNABLE[path], "-o")
    if opt is not None:
        assert opt.metavar == "FILE" and "--output" in opt.opts, path


@pytest.mark.parametrize("path", ["npuport parity record", "npuport kernels build"])
def test_an_output_directory_is_named_as_one(path: str) -> None:
    opt = option(RUNNABLE[path], "--out-dir")
    assert opt is not None and opt.metavar == "DIR"


def test_scenario_is_one_grammar() -> None:
    found = {p: option(c, "--scenario") for p, c in RUNNABLE.items() if option(c, "--scenario")}
    assert set(found) == {"npuport audit", "npuport bench", "npuport parity run", "npuport parity compare", "npuport parity record",
                          "npuport profile record"}
    helps = set()
    for path, opt in found.items():
        assert opt is not None and opt.metavar == SCENARIO_METAVAR, path
        assert "past=" in (opt.help or "") and "Default: " in (opt.help or ""), path
        helps.add((opt.help or "").split(" Repeatable")[0].split(" One scenario")[0])
    assert len(helps) == 1, helps  # the same wording everywhere; only the default differs


@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_top_means_rows_shown_in_tables(path: str) -> None:
    opt = option(RUNNABLE[path], "--top")
    if opt is not None:
        assert opt.help == TOP_HELP, path


def test_bench_counts_ops_with_ops() -> None:
    assert option(RUNNABLE["npuport bench"], "--ops") is not None
    assert option(RUNNABLE["npuport bench"], "--top") is None  # only the hidden deprecated alias


@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_format_choices_follow_one_list(path: str) -> None:
    opt = option(RUNNABLE[path], "--format")
    if opt is None:
        return
    assert isinstance(opt.type, click.Choice)
    choices = list(opt.type.choices)
    assert choices[:2] == ["text", "json"] and choices == [f for f in FORMATS if f in choices], path


@pytest.mark.parametrize("path", ALL)
def test_every_help_shows_examples(path: str) -> None:
    text = help_text(path)
    assert "Examples:" in text, path
    block = text.split("Examples:")[1]
    assert len(re.findall(r"^\s+npuport \S+", block, re.M)) >= 2, path


@pytest.mark.parametrize("path", sorted(p for p, c in RUNNABLE.items() if option(c, "--chip")))
def test_chip_help_lists_the_chips(path: str) -> None:
    text = option(RUNNABLE[path], "--chip").help or ""  # type: ignore[union-attr]
    assert all(chip in text for chip in load_chips()), text
    assert "Default:" in text


def test_from_chip_and_torch_npu_list_their_values() -> None:
    audit = RUNNABLE["npuport audit"]
    assert all(c in (option(audit, "--from-chip").help or "") for c, p in load_chips().items() if p.family == "cuda")  # type: ignore[union-attr]
    for path in ("npuport audit", "npuport coverage show", "npuport coverage list"):
        text = option(RUNNABLE[path], "--torch-npu").help or ""  # type: ignore[union-attr]
        assert available_versions()[0] in text and available_versions()[-1] in text, path


def test_root_help_lists_each_command_once() -> None:
    text = help_text("npuport")
    for name in COMMANDS:
        assert len(re.findall(rf"^\s+{name}\s", text, re.M)) == 1, (name, text)
    assert text.index("Commands:") < text.index(" kernels ")


def test_help_imports_no_torch() -> None:
    """`npuport --help` and `npuport COMMAND --help` load the command's options only, never torch or npuport.api."""
    code = ("import sys, io, contextlib\nfrom npuport.cli.main import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    for a in (['--help'], ['audit', '--help'], ['bench', '--help'], ['parity', 'run', '--help'],\n"
            "              ['coverage', 'show', '--help'], ['kernels', 'perf', '--help'], ['migrate', '--help']):\n"
            "        cli.main(a, standalone_mode=False)\n"
            "print(sorted(m for m in ('torch', 'npuport.api', 'transformers', 'rich') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


@pytest.mark.parametrize("args", [
    ["audit", "--bogus"],
    ["audit", "x.py", "--format", "xml"],
    ["nope"],
    ["parity", "run", "--dev", "cpu"],
    ["coverage", "list"],
    ["kernels", "perf", "--chip"],
    ["parity", "bogus"],
    ["audit", "--hf", "c.json", "--attn", "flash"],
])
def test_usage_errors_in_the_one_error_style(args: list[str]) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    assert res.stdout == "" and res.stderr.startswith("error: ") and len(res.stderr.splitlines()) == 1, res.output
    assert "Usage:" not in res.output and "Error:" not in res.output


@pytest.mark.parametrize("args", [["audit", "--chip", "B300", "m.py"], ["kernels", "perf", "--chip", "B300"],
                                  ["bench", "--from", "nope.json"], ["coverage", "show", "aten::mm", "--torch-npu", "0.1"],
                                  ["migrate", "nope.py"], ["parity", "record", "--dev", "cpu", "m.py"]])
def test_input_errors_in_the_one_error_style(args: list[str]) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output


@pytest.mark.parametrize(("args", "says"), [
    (["parity", "bogus", "--ref", "cuda"], "no parity subcommand or model file 'bogus' (expected one of compare, record, run"),
    (["audit", "--hf", "c.json", "--attn", "flash"], "'flash' is not one of 'auto', 'sdpa', 'eager'"),
    (["profile", "record", "--hf", "c.json", "--attn", "flash"], "'flash' is not one of 'auto', 'sdpa', 'eager'"),
])
def test_mistyped_words_are_named_before_anything_runs(args: list[str], says: str) -> None:
    """A mistyped parity subcommand is not taken for a model to run; a bad --attn fails before a model is built."""
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and says in res.stderr, res.output


def test_attn_is_a_checked_choice_everywhere() -> None:
    """Traced on fake tensors (audit, bench): auto, sdpa, eager; run for real (parity, profile record): transformers'
    kernel-backed implementations too (flash_attention_2 is torch_npu's fused attention on an NPU)."""
    with_attn = {p: option(c, "--attn") for p, c in RUNNABLE.items() if option(c, "--attn") is not None}
    fake, real = {"npuport audit", "npuport bench"}, {"npuport parity run", "npuport parity record", "npuport parity compare",
                                                     "npuport profile record"}
    assert set(with_attn) == fake | real
    for path, opt in with_attn.items():
        assert isinstance(opt.type, click.Choice), path
        want = ("auto", "sdpa", "eager") + (("flash_attention_2", "flash_attention_3", "flex_attention") if path in real else ())
        assert tuple(opt.type.choices) == want, path


def test_a_model_path_with_a_colon_still_runs_as_parity_run(tmp_path) -> None:
    """FILE and FILE:FUNCTION are models, and FILE may hold a ':' itself: none is taken for a mistyped subcommand."""
    model = tmp_path / "run:1" / "model.py"
    model.parent.mkdir()
    model.write_text("def build_model():\n    pass\n")
    for word in (str(model), f"{model}:build_model"):
        res = CliRunner().invoke(cli, ["parity", word])
        assert res.exit_code == 2 and "missing option '--ref'" in res.stderr, res.output


def test_python_dash_m_npuport_is_the_console_script() -> None:
    out = subprocess.run([sys.executable, "-m", "npuport", "--help"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("Usage: npuport"), out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--scenario", "prefill:"], "ends with ':' and no options"),
    (["--scenario", "prefill:foo=1"], "or mode=M"),
    (["--chip", "Ascend910B4"], "a memory variant of Ascend910B"),
    (["--chip", "a100-sxm-40gb"], "a memory variant of A100-SXM-80GB"),
])
def test_a_scenario_or_chip_the_tool_half_knows_is_one_line_saying_what_it_is(args: list[str], says: str) -> None:
    from pathlib import Path

    gpt = Path(__file__).resolve().parents[2] / "examples" / "gpt" / "model.py"
    res = CliRunner().invoke(cli, ["audit", str(gpt), *args])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and says in lines[0], res.stderr


def test_an_output_named_for_a_format_npuport_never_writes_is_refused(tmp_path) -> None:  # noqa: ANN001
    from pathlib import Path

    gpt = Path(__file__).resolve().parents[2] / "examples" / "gpt" / "model.py"
    for name in ("r.pdf", "r.docx", "r.png"):
        res = CliRunner().invoke(cli, ["audit", str(gpt), "--static-only", "-o", str(tmp_path / name)])
        assert res.exit_code == 2 and "which npuport does not write" in res.stderr and not (tmp_path / name).exists()
    res = CliRunner().invoke(cli, ["audit", str(gpt), "--static-only", "--format", "text", "-o", str(tmp_path / "r.pdf")])
    assert res.exit_code == 0 and (tmp_path / "r.pdf").read_text().strip()  # asked for by name: --format decides
