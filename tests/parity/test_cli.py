"""CLI contract of `npuport parity`: exit codes 0 / 1 / 2, one-line errors, formats, the JSON schema's fields."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from npuport.cli.main import cli

from .conftest import SCEN, fault


def run(*args: str):
    return CliRunner().invoke(cli, ["parity", *args])


def test_help_lists_subcommands():
    r = run("--help")
    assert r.exit_code == 0 and "record" in r.output and "compare" in r.output


def test_pass_is_exit_0_and_json_schema(llama_config):
    r = run("--ref", "cpu", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "--golden", "cpu64", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["schema"] == "npuport.parity/1"
    assert set(data) >= {"verdict", "entries", "first_divergence", "sides", "tolerances", "unmatched", "scenario", "warnings"}
    assert data["verdict"]["passed"] and data["verdict"]["mode"] == "relative" and data["first_divergence"] is None
    e = data["entries"][0]
    assert set(e) >= {"key", "module", "call", "io", "leaf", "dtype", "shape", "metrics", "golden", "passed", "reason", "would_pass"}
    assert set(e["metrics"]) >= {"max_abs", "max_rel", "rel_l2", "cosine", "rmse", "frac_over_rtol", "nan_mismatch", "inf_mismatch"}


def test_divergence_is_exit_1_with_verdict_line(llama_config):
    r = run("--ref", "cpu", "--dev", fault(), "--hf", llama_config, "--scenario", SCEN, "--quiet")
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("DIVERGED") or "DIVERGED" in r.output
    assert "first divergence: model.layers.1.mlp#0" in r.output and "aten::mul.Tensor" in r.output


def test_record_then_compare_and_two_directories(llama_config, tmp_path, standin_npu):
    ref = str(tmp_path / "ref")
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "--stats-only", "--stats-budget", "1", "-o", ref, "--quiet")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "ref" / "manifest.json").read_text())["capture"]["stats_budget_bytes"] == 1 << 20
    r = run("compare", "--hf", llama_config, "--ref", ref, "--dev", "npu", "--golden", "cpu64", "--quiet")
    assert r.exit_code == 0, r.output
    assert "CPU stand-in, not a real NPU" in r.output
    dev = str(tmp_path / "dev")
    assert run("record", "--dev", "npu", "--hf", llama_config, "--scenario", SCEN, "--stats-only", "-o", dev, "--quiet").exit_code == 0
    r = run("compare", "--ref", ref, "--dev", dev, "--format", "json", "--quiet")
    assert r.exit_code == 0 and json.loads(r.output)["sides"][1]["device"]["standin"] is True
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "-o", ref, "--quiet")
    assert r.exit_code == 2 and "already exists" in r.output


@pytest.mark.parametrize("fmt, needle", [("markdown", "## Error per layer"), ("html", "<svg")])
def test_markdown_and_html(llama_config, tmp_path, fmt, needle):
    out = tmp_path / f"report.{'md' if fmt == 'markdown' else 'html'}"
    r = run("--ref", "cpu", "--dev", fault(), "--hf", llama_config, "--scenario", SCEN, "-o", str(out), "--quiet", "--no-localize")
    assert r.exit_code == 1
    assert needle in out.read_text()


@pytest.mark.parametrize("args, needle", [
    (["--ref", "cpu", "--dev", "cpu"], "needs the model"),
    (["--ref", "cpu", "--dev", "tpu", "--hf", "x.json"], "unknown device 'tpu'"),
    (["--ref", "cpu", "--dev", "cpu", "--hf", "missing.json"], "config file missing.json not found"),
    (["--ref", "cpu", "--dev", "cpu", "--hf", "x.json", "--scenario", "warmup"], "unknown scenario"),
    (["compare", "--ref", "cpu", "--dev", "cpu"], "is not a record directory"),
    (["compare", "--ref", "./nope", "--dev", "cpu"], "artifact nope not found"),
    (["record", "--dev", "cpu", "-o", "x"], "no model given"),
])
def test_usage_errors_are_exit_2_one_line(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("error:")]) == 1


def test_stats_budget_must_be_positive():
    r = run("record", "--dev", "cpu", "--hf", "x.json", "--stats-only", "--stats-budget", "0", "-o", "x")
    assert r.exit_code == 2 and "'--stats-budget': 0 is not in the range" in r.output and "Traceback" not in r.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine has the device")
def test_device_not_present_is_exit_2(llama_config):
    r = run("--ref", "cuda", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN)
    assert r.exit_code == 2 and "device 'cuda' is not present" in r.output


def test_decode_gives_each_side_its_own_cache(llama_config):
    """A decode step appends to the KV cache object it is given: each side (and the float64 golden, whose cache must
    be float64 too) runs on its own copy, so the same device against itself is exact (it was not: the second side
    ran with the first side's grown cache)."""
    r = run("--ref", "cpu", "--dev", "cpu", "--golden", "cpu64", "--hf", llama_config, "--scenario", "decode:batch=1,past=8",
            "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["verdict"]["passed"] and data["verdict"]["mode"] == "relative"
    judged = [e for e in data["entries"] if e["io"] == "out"]
    assert judged and all(e["metrics"]["max_abs"] == 0 for e in judged)


@pytest.fixture(scope="module")
def two_steps(llama_config, tmp_path_factory):
    """Two stats-only records of one model: the prefill SCEN and a decode step."""
    root = tmp_path_factory.mktemp("steps")
    for name, scen in (("pre", SCEN), ("dec", "decode:batch=1,past=8")):
        r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", scen, "--stats-only", "--out-dir",
                str(root / name), "--quiet")
        assert r.exit_code == 0, r.output
    return root


def test_records_of_different_steps_are_an_input_error(two_steps):
    # a prefill against a decode step differs in every shape: not a divergence, two different inputs
    r = run("compare", "--ref", str(two_steps / "pre"), "--dev", str(two_steps / "dec"), "--quiet")
    assert r.exit_code == 2 and r.output.startswith("error: the two records ran different steps"), r.output
    assert "decode batch 1 x 1, past 8" in r.output


@pytest.mark.parametrize("key", ["files", "scenario", "device", "model", "entries"])
def test_a_manifest_missing_a_field_is_one_line(two_steps, tmp_path, key):
    damaged = tmp_path / "rec"
    shutil.copytree(two_steps / "pre", damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    del manifest[key]
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    r = run("compare", "--ref", str(damaged), "--dev", str(two_steps / "pre"), "--quiet")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.startswith(f"error: {damaged / 'manifest.json'} is corrupt: '{key}' is missing"), r.output


def test_a_scenario_other_than_the_records_is_refused(two_steps, llama_config):
    # compare runs the record's own step; a --scenario naming another was silently ignored
    r = run("compare", "--hf", llama_config, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--scenario", "decode",
            "--quiet")
    assert r.exit_code == 2 and r.output.startswith("error: --scenario names another step than the record's"), r.output
    r = run("compare", "--hf", llama_config, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--scenario", SCEN, "--quiet")
    assert r.exit_code == 0, r.output
    # a size shorter than the record's differs; a longer one may be what the record shortened to the model's context
    dec = str(two_steps / "dec")
    r = run("compare", "--hf", llama_config, "--ref", dec, "--dev", "cpu", "--scenario", "decode:past=4", "--quiet")
    assert r.exit_code == 2 and "another step than the record's" in r.output, r.output
    r = run("compare", "--hf", llama_config, "--ref", dec, "--dev", "cpu", "--scenario", "decode:past=100000", "--quiet")
    assert r.exit_code == 0, r.output


def test_a_golden_that_is_not_float64_and_records_of_other_seeds_are_input_errors(two_steps, llama_config, tmp_path):
    # a float32 record as the golden judged the other sides against a reference as rounded as they are: a false PASS
    pre = str(two_steps / "pre")
    r = run("compare", "--ref", pre, "--dev", pre, "--golden", pre, "--quiet")
    assert r.exit_code == 2 and "is not a float64 record" in r.output, r.output
    other = str(tmp_path / "seed1")
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "--stats-only", "--seed", "1",
            "--out-dir", other, "--quiet")
    assert r.exit_code == 0, r.output
    r = run("compare", "--ref", pre, "--dev", other, "--quiet")
    assert r.exit_code == 2 and "made with different seeds" in r.output, r.output


@pytest.mark.parametrize(("field", "value"), [("batch", 0), ("batch", "8"), ("batch", 2**31), ("batch", True),
                                              ("past", False), ("name", "prefil"), ("name", None), ("mode", "inductor")])
def test_a_manifest_with_a_bad_step_names_the_record_not_an_option(two_steps, llama_config, tmp_path, field, value):
    """The record's step comes from its manifest: a size there that no scenario takes is the record's fault, said so
    (it was reported as a bad --scenario option the user never gave)."""
    damaged = tmp_path / "rec"
    shutil.copytree(two_steps / "pre", damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    if value is None:
        del manifest["scenario"][field]
    else:
        manifest["scenario"][field] = value
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    r = run("compare", "--hf", llama_config, "--ref", str(damaged), "--dev", "cpu", "--quiet")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.startswith(f"error: {damaged / 'manifest.json'} is corrupt: its scenario is not a step"), r.output
    assert "--scenario" not in r.output, r.output
