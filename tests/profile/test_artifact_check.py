"""A profile artifact is checked against its schema (npuport/profile/artifact.schema.json) when it is read, and
whatever a user hands `profile import` that is not a profile is named for what it is: one line, exit 2."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.profile.artifact import import_trace, load_artifact

ROOT = Path(__file__).resolve().parents[2]
ART = ROOT / "tests" / "fixtures" / "profiles" / "gpt_train_h200.profile.json"
TRACE = ROOT / "tests" / "fixtures" / "profiles" / "gpt_prefill_cpu.json.gz"
MEASURED = sorted((ROOT / "docs" / "measured").rglob("*.profile.json"))


def _edit(fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(json.loads(ART.read_text()))
    fn(data)
    return data


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value
    return apply


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        for key in path[:-1]:
            d = d[key]
        del d[path[-1]]
    return apply


@pytest.mark.parametrize(("change", "where"), [
    (_set(["steps"], None), "at steps"),
    (_set(["ops", 0, "device_s"], -1.0), "at ops[0].device_s"),
    (_set(["ops", 0, "calls"], "12"), "at ops[0].calls"),
    (_drop(["ops", 0, "calls"]), "at ops[0]"),
    (_set(["modules", 0, "module"], 5), "at modules[0].module"),
    (_set(["totals", "wall_s"], "x"), "at totals.wall_s"),
    (_set(["unprofiled"], {"median_s": "x"}), "at unprofiled.median_s"),
    (_set(["scenario"], "prefill"), "at scenario"),
    (_set(["scenario"], {"kind": "prefill", "seq": "16"}), "at scenario.seq"),
    (_set(["scenario"], {"kind": "generate"}), "at scenario.kind"),
    (_set(["host_probe"], {"op_s": 0}), "at host_probe.op_s"),
    (_set(["kernel_names"], {"k": {"kernels": 1.5, "device_s": 1e-3}}), "at kernel_names.k.kernels"),
])
def test_a_field_of_the_wrong_type_or_sign_is_one_line_naming_it(tmp_path: Path, change: Callable[[dict[str, Any]], None],
                                                                 where: str) -> None:
    bad = tmp_path / "bad.profile.json"
    bad.write_text(json.dumps(_edit(change)))
    with pytest.raises(NpuportError, match="malformed profile artifact " + where.replace("[", r"\[").replace("]", r"\]")):
        load_artifact(bad)


def _first_time_written_as(token: str, path: Path) -> Path:
    """The fixture artifact with its first op's device time written as `token` (not a number JSON can hold)."""
    text = ART.read_text()
    path.write_text(text.replace(json.dumps(json.loads(text)["ops"][0]["device_s"]), token, 1))
    return path


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(tmp_path: Path, token: str) -> None:
    with pytest.raises(NpuportError, match="finite numbers"):
        load_artifact(_first_time_written_as(token, tmp_path / "bad.json"))


@pytest.mark.parametrize("path", MEASURED[:400], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_recorded_artifact_in_the_repository_passes_the_schema(path: Path) -> None:
    assert load_artifact(path)["schema"] == "npuport.profile/1"


def test_an_imported_artifact_passes_its_own_schema(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    out.write_text(json.dumps(import_trace(TRACE)))
    assert load_artifact(out)["ops"]


def _err(res: Any) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (res.exit_code, res.stderr)
    return lines[0]


def _import(src: Path, out: Path) -> Any:
    return CliRunner().invoke(cli, ["profile", "import", str(src), "-o", str(out), "--quiet"])


def test_import_names_what_it_was_given(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert "no profile at" in _err(_import(tmp_path / "missing.sqlite", out))
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("create table t (x int)")
    assert "SQLite database but no readable Nsight Systems export" in _err(_import(db, out))
    assert "already a profile artifact" in _err(_import(ART, out))
    text = tmp_path / "notes.txt"
    text.write_text("step time 12 ms\n")
    assert "a file that is not JSON" in _err(_import(text, out))
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": -500,
                                                "pid": 1, "tid": 1}]}))
    assert "negative duration" in _err(_import(neg, out))
    assert not out.exists()


def test_import_refuses_an_output_name_of_another_format(tmp_path: Path) -> None:
    for name in ("x.html", "x.csv", "x.md"):
        assert "writes a JSON artifact" in _err(_import(TRACE, tmp_path / name))
        assert not (tmp_path / name).exists()


def test_audit_takes_a_trace_as_its_profile_and_refuses_a_broken_artifact(tmp_path: Path) -> None:
    gpt = ROOT / "examples" / "gpt" / "model.py"
    args = ["audit", str(gpt), "--scenario", "prefill:batch=1,seq=64", "--format", "json", "--quiet"]
    res = CliRunner().invoke(cli, [*args, "--profile", str(TRACE)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["profile"][0]["measured_s"] > 0
    bad = tmp_path / "bad.profile.json"
    bad.write_text(json.dumps(_edit(_set(["ops", 0, "device_s"], -1.0))))
    assert "at ops[0].device_s" in _err(CliRunner().invoke(cli, [*args, "--profile", str(bad)]))
    assert "at ops[0].device_s" in _err(CliRunner().invoke(cli, ["profile", "compare", str(ART), str(bad)]))


def test_compare_refuses_two_scenarios_and_says_what_compares_less_well(tmp_path: Path) -> None:
    measured = ROOT / "docs" / "measured" / "profiles" / "llama-2-7b"
    res = CliRunner().invoke(cli, ["profile", "compare", str(measured / "prefill.profile.json"),
                                   str(measured / "decode.profile.json")])
    assert "different scenarios" in _err(res)
    # a decode of another model: said in every format, and on stderr for the ones that are not text
    olmoe = ROOT / "docs" / "measured" / "profiles" / "olmoe-1b-7b" / "decode.profile.json"
    res = CliRunner().invoke(cli, ["profile", "compare", str(measured / "decode.profile.json"), str(olmoe),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert any("different models ('llama-2-7b', 'olmoe-1b-7b')" in n for n in data["notes"])
    assert "note: the sides were recorded from different models" in res.stderr
    text = CliRunner().invoke(cli, ["profile", "compare", str(measured / "decode.profile.json"), str(olmoe)])
    assert "note: the sides were recorded from different models" in text.stdout
    # the text rows name their module and keep the host change column (a CPU-free, GPU-recorded pair)
    rows = text.stdout.split("worst regression first")[1]
    assert "model.layers.*.self_attn" in rows and "host" in rows


def test_a_profile_of_another_kind_of_device_than_the_audits_chip_is_said() -> None:
    from npuport.profile.join import _device_note

    art = json.loads(ART.read_text())
    assert _device_note({"chip": {"name": "H200"}}, art) is None
    assert "the audit estimates Ascend910B (npu)" in str(_device_note({"chip": {"name": "Ascend910B"}}, art))
    assert "(cpu)" in str(_device_note({"chip": "H200"}, {**art, "device": "cpu", "recorded": {}}))


def test_a_number_too_large_for_a_float_is_refused_like_infinity(tmp_path: Path) -> None:
    bad = _first_time_written_as("1e999", tmp_path / "inf.json")
    with pytest.raises(NpuportError, match="1e999 is not a number an artifact holds"):
        load_artifact(bad)
    res = CliRunner().invoke(cli, ["profile", "compare", str(ART), str(bad), "--format", "json"])
    assert "1e999" in _err(res)


def test_an_artifact_with_its_schema_last_is_still_an_artifact(tmp_path: Path) -> None:
    data = json.loads(ART.read_text())
    rewritten = tmp_path / "sorted.json"  # `jq -S`: keys sorted, "schema" near the end
    rewritten.write_text(json.dumps(data, sort_keys=True, indent=1))
    res = CliRunner().invoke(cli, ["profile", "compare", str(ART), str(rewritten), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["breakdown"]["delta"]["compute_s"] == 0
