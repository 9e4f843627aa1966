"""docs/cli.md cannot drift from the CLI: every option it names exists, its table of options per command is what
the commands take, and its scenario sizes are the parser's defaults."""

from __future__ import annotations

import re
from pathlib import Path

from npuport.cli.options import FORMATS, REMOVED_IN
from npuport.model.scenarios import DEFAULT_SET, DEFAULTS, GRAMMAR
from tests.cli.helpers import commands, option, options, walk

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")


def _spellings() -> set[str]:
    out = set()
    for _, cmd in walk():
        for p in cmd.params:
            out.update(getattr(p, "opts", []))
            out.update(getattr(p, "secondary_opts", []))
    return out | {"--help", "--version"}


def test_every_option_named_exists() -> None:
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", DOC))
    assert named - _spellings() == {"--bogus"}  # the unknown option of the usage-error example
    assert named >= {"--scenario", "--top", "--json-out", "--format", "--quiet", "--debug", "--force", "--wide", "--chip",
                     "--from-chip", "--torch-npu", "--out-dir", "--ops"}


def expected_table() -> list[str]:
    rows = []
    for path, cmd in commands():
        fmt = option(cmd, "--format")
        top = option(cmd, "--top")
        cells = [f"`{path.removeprefix('npuport ')}`", ", ".join(fmt.type.choices) if fmt else "-",  # type: ignore[attr-defined]
                 *("yes" if option(cmd, f) else "-" for f in ("-o", "--json-out")), str(top.default) if top else "-",
                 *("yes" if option(cmd, f) else "-" for f in ("--wide", "--scenario", "--chip"))]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def test_the_table_of_options_per_command_is_the_cli() -> None:
    table = DOC.split("## Options per command")[1].split("\n## ")[0]
    got = [line for line in table.splitlines() if line.startswith("| `")]
    want = expected_table()
    assert got == want, "docs/cli.md 'Options per command' should read:\n" + "\n".join(want)


def test_scenario_grammar_and_defaults() -> None:
    assert f"`--scenario {GRAMMAR}`" in DOC
    for name in DEFAULT_SET:
        assert f"| {name} | `{DEFAULTS[name].spec()}` |" in DOC  # type: ignore[index]


def test_formats_exit_codes_and_removal() -> None:
    assert "`" + "`, `".join(FORMATS) + "`" in DOC
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in DOC
    assert f"removed in {REMOVED_IN}" in DOC
    assert sum(len(options(c, deprecated=True)) for _, c in commands()) == DOC.count(f"| {REMOVED_IN} |")
