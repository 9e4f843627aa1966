"""CLI contract of `npuport parity`: exit codes 0 / 1 / 2, one-line errors, formats, the JSON schema's fields."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from npuport.cli.main import cli

from .conftest import LLAMA, SCEN, fault


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
    assert r.exit_code == 2 and r.output.startswith("error: --scenario decode is not the step the record"), r.output
    assert "expected the record's own step, prefill batch 1 x 16, or no --scenario" in r.output
    r = run("compare", "--hf", llama_config, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--scenario", SCEN, "--quiet")
    assert r.exit_code == 0, r.output
    # a size other than the record's differs, shorter or longer (a longer one ran the record's step, silently)
    dec = str(two_steps / "dec")
    for past in ("4", "100000"):
        r = run("compare", "--hf", llama_config, "--ref", dec, "--dev", "cpu", "--scenario", f"decode:past={past}", "--quiet")
        assert r.exit_code == 2 and r.output.startswith(f"error: --scenario decode:past={past} is not the step the "
                                                        f"record {dec} holds"), r.output
        assert "decode batch 1 x 1, past 8, or no --scenario" in r.output and len(r.output.splitlines()) == 1
    # the run of a prefill of 64 tokens silently ran the record's 16 and passed
    r = run("compare", "--hf", llama_config, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--scenario",
            "prefill:batch=1,seq=64", "--quiet")
    assert r.exit_code == 2 and "received: --scenario prefill:batch=1,seq=64 (prefill batch 1 x 64)" in r.output, r.output


def test_a_step_the_record_shortened_to_the_models_context_is_the_same_step(llama_config, tmp_path):
    # the model has 128 positions: past=100000 was recorded as past=127, and asking for it again is that step
    long = str(tmp_path / "long")
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", "decode:past=100000", "--stats-only",
            "--out-dir", long, "--quiet")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "long" / "manifest.json").read_text())["scenario"]["past"] == 127
    r = run("compare", "--hf", llama_config, "--ref", long, "--dev", "cpu", "--scenario", "decode:past=100000", "--quiet")
    assert r.exit_code == 0, r.output


def test_run_with_a_record_side_and_seed_or_dtype_other_than_the_records_are_refused(two_steps, llama_config):
    pre = str(two_steps / "pre")
    # `run` with a record as one side checked nothing: it ran the record's prefill for a decode step and passed
    r = run("run", "--ref", "cpu", "--dev", pre, "--hf", llama_config, "--scenario", "decode:past=8", "--quiet")
    assert r.exit_code == 2 and r.output.startswith(f"error: --scenario decode:past=8 is not the step the record {pre} holds"), r.output
    for args, needle in ((["--seed", "5"], f"error: --seed 5 is not the seed the record {pre} was made with (expected its seed 0"),
                         (["--dtype", "bfloat16"], f"error: --dtype bfloat16 is not the dtype of the record {pre} (expected the record's float32")):
        for cmd in (["run", "--ref", "cpu", "--dev", pre], ["compare", "--ref", pre, "--dev", "cpu"]):
            r = run(*cmd, "--hf", llama_config, *args, "--quiet")
            assert r.exit_code == 2 and r.output.startswith(needle) and len(r.output.splitlines()) == 1, r.output
    # the record's own values, given explicitly, are no conflict
    r = run("compare", "--ref", pre, "--dev", "cpu", "--hf", llama_config, "--seed", "0", "--dtype", "fp32",
            "--scenario", SCEN, "--quiet")
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def other_configs(tmp_path_factory):
    """The test model's config with another rope_theta (same names, shapes and seeded weights: only the numbers of
    the rotary embedding differ), and a copy that differs only in what is not the model (dtype, metadata)."""
    root = tmp_path_factory.mktemp("configs")
    (root / "rope.json").write_text(json.dumps(dict(LLAMA, rope_theta=500000.0)))
    (root / "copy.json").write_text(json.dumps(dict(LLAMA, torch_dtype="float32", transformers_version="4.40.0",
                                                    _name_or_path="/models/tiny")))
    runtime = dict(LLAMA, use_cache=False, num_beams=4, top_k=5)
    del runtime["architectures"]
    (root / "runtime.json").write_text(json.dumps(runtime))
    (root / "outputs.json").write_text(json.dumps(dict(LLAMA, output_hidden_states=True)))
    return root


def test_a_record_of_another_config_is_refused_not_blamed_on_the_device(two_steps, other_configs, llama_config):
    pre = str(two_steps / "pre")
    rope = str(other_configs / "rope.json")
    r = run("compare", "--hf", rope, "--ref", pre, "--dev", "cpu", "--quiet")  # was: DIVERGED at model.rotary_emb
    assert r.exit_code == 2 and r.output.startswith("error: the record was made from another model config"), r.output
    assert llama_config in r.output and rope in r.output and "rope_parameters.rope_theta 10000.0 vs 500000.0" in r.output
    assert len(r.output.splitlines()) == 1 and "DIVERGED" not in r.output
    other = str(other_configs / "rec-rope")
    r = run("record", "--dev", "cpu", "--hf", rope, "--scenario", SCEN, "--stats-only", "--out-dir", other, "--quiet")
    assert r.exit_code == 0, r.output
    r = run("compare", "--ref", pre, "--dev", other, "--quiet")
    assert r.exit_code == 2 and r.output.startswith("error: the ref and dev records were made from different model "
                                                    "configs"), r.output
    assert "rope_theta 10000.0 vs 500000.0" in r.output


def test_a_copy_of_the_config_that_differs_only_in_dtype_and_metadata_is_the_same_model(two_steps, other_configs):
    copy = str(other_configs / "copy.json")
    r = run("compare", "--hf", copy, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--quiet")
    assert r.exit_code == 0, r.output
    rec = str(other_configs / "rec-copy")
    assert run("record", "--dev", "cpu", "--hf", copy, "--scenario", SCEN, "--stats-only", "--out-dir", rec,
               "--quiet").exit_code == 0
    r = run("compare", "--ref", str(two_steps / "pre"), "--dev", rec, "--quiet")
    assert r.exit_code == 0, r.output


def test_a_config_that_differs_only_in_how_a_run_behaves_is_the_same_model(two_steps, other_configs):
    """use_cache, architectures, output_hidden_states, return_dict, generation options: not which model it is (they
    were refused as another model config)."""
    runtime = str(other_configs / "runtime.json")
    r = run("compare", "--hf", runtime, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--quiet")
    assert r.exit_code == 0, r.output
    rec = str(other_configs / "rec-runtime")
    r = run("record", "--dev", "cpu", "--hf", runtime, "--scenario", SCEN, "--stats-only", "--out-dir", rec, "--quiet")
    assert r.exit_code == 0, r.output
    r = run("compare", "--ref", str(two_steps / "pre"), "--dev", rec, "--quiet")
    assert r.exit_code == 0, r.output
    # an output switch is not another model either: the outputs it adds are entries on one side only, said as such
    outputs = str(other_configs / "outputs.json")
    r = run("compare", "--hf", outputs, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--quiet")
    assert r.exit_code == 1 and "another model config" not in r.output, r.output
    assert "dev only (6): model#0:out.hidden_states[0]" in r.output, r.output
    r = run("compare", "--hf", outputs, "--ref", str(two_steps / "pre"), "--dev", "cpu", "--allow-unmatched", "--quiet")
    assert r.exit_code == 0, r.output


def test_a_record_made_before_the_config_was_kept_is_not_refused_on_its_hash(two_steps, other_configs, tmp_path):
    """A record holding only the hash of its config file (made before npuport kept the resolved config) against a copy
    of the config that differs only in torch_dtype / _name_or_path: compared (the signature and weights checked), and
    the report says the config could not be checked."""
    old = tmp_path / "old"
    shutil.copytree(two_steps / "pre", old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["model"]["config"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    copy = str(other_configs / "copy.json")
    r = run("compare", "--hf", copy, "--ref", str(old), "--dev", "cpu", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.output)["warnings"]
    assert any(w.startswith("the record and the config given: the config files differ (sha256 ")
               and "the model config could not be checked" in w for w in warnings), warnings
    rec = str(other_configs / "rec-copy-old")
    assert run("record", "--dev", "cpu", "--hf", copy, "--scenario", SCEN, "--stats-only", "--out-dir", rec,
               "--quiet").exit_code == 0
    r = run("compare", "--ref", str(old), "--dev", rec, "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.output)["warnings"]
    assert any(w.startswith("the ref and dev records: the config files differ") for w in warnings), warnings
    # the weights are still checked: a record of other weights is refused as before
    other = tmp_path / "other"
    shutil.copytree(old, other)
    manifest["weights"]["fingerprint"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    r = run("compare", "--ref", rec, "--dev", str(other), "--quiet")
    assert r.exit_code == 2 and "records hold different weights" in r.output, r.output


def test_keep_without_stats_only_is_refused(two_steps, llama_config, tmp_path):
    keep = ["--keep", "model.layers.1*"]
    r = run("--ref", "cpu", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, *keep, "--quiet")
    assert r.exit_code == 2 and r.output.startswith("error: --keep keeps modules in full in a stats-only capture; "
                                                    "without --stats-only"), r.output
    assert "received: --keep model.layers.1* without --stats-only" in r.output and len(r.output.splitlines()) == 1
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, *keep, "--out-dir", str(tmp_path / "k"), "--quiet")
    assert r.exit_code == 2 and "without --stats-only" in r.output and not (tmp_path / "k").exists(), r.output
    pre = str(two_steps / "pre")
    r = run("compare", "--ref", pre, "--dev", pre, *keep, "--quiet")  # no side runs now: nothing to keep
    assert r.exit_code == 2 and "every side here is a record" in r.output, r.output
    # with --stats-only the kept modules are stored in full
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "--stats-only", *keep, "--out-dir",
            str(tmp_path / "kept"), "--quiet")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "kept" / "manifest.json").read_text())
    assert manifest["capture"]["keep"] == ["model.layers.1*"] and "tensors.safetensors" in manifest["files"]
    full = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "--out-dir", str(tmp_path / "full"), "--quiet")
    assert full.exit_code == 0, full.output
    r = run("compare", "--ref", str(tmp_path / "full"), "--dev", "cpu", "--hf", llama_config, *keep, "--quiet")
    assert r.exit_code == 2 and "is a full capture" in r.output, r.output


@pytest.mark.parametrize(("spec", "needle"), [
    ("cpu-fault:aten::nosuch@blocks.0", "the model has no module blocks.0 (expected a module path of the model, such as"),
    ("cpu-fault:aten::mul.Tensor@model.layers.9.mlp", "such as model.layers.1.mlp, model.layers.0.mlp"),
    ("cpu-fault:aten::nosuch@model.layers.1.mlp", "aten::nosuch never ran inside model.layers.1.mlp (expected an op "
                                                  "that runs there (aten::mul.Tensor))"),
])
def test_a_fault_that_never_fires_is_an_input_error_not_a_pass(llama_config, spec, needle):
    r = run("--ref", "cpu", "--dev", spec, "--hf", llama_config, "--scenario", SCEN, "--quiet")
    assert r.exit_code == 2 and r.output.startswith(f"error: the fault {spec} never fired: "), r.output
    assert needle in r.output and len(r.output.splitlines()) == 1 and "PASS" not in r.output


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


def test_a_ported_model_file_is_the_same_model_with_a_note(model_file, tmp_path):
    """The model file on the other machine may differ (ported: `.cuda()` became `.npu()`): its signature and weights
    decide, and the report says the file differed."""
    ref = str(tmp_path / "ref")
    r = run("record", "--dev", "cpu", model_file, "--scenario", SCEN, "--stats-only", "--out-dir", ref, "--quiet")
    assert r.exit_code == 0, r.output
    ported = tmp_path / "ported.py"
    ported.write_text("# ported to the NPU\n" + Path(model_file).read_text())
    r = run("compare", str(ported), "--ref", ref, "--dev", "cpu", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.output)["warnings"]
    assert any(w.startswith("the model file differs from the record's (sha256 ") for w in warnings), warnings
