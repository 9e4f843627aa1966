"""`npuport bench` on the CPU: exit codes, formats, the whole pipeline on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.cost.roofline import default_chip
from tests.bench.conftest import FIX

FAST = ["--reps", "5", "--warmup", "1", "--budget", "0.05", "--rotate-mb", "1", "--quiet"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("args, needle", [
    (["bench"], "give exactly one source"),
    (["bench", str(FIX / "tiny.py"), "--device", "tpu"], "unknown device"),
    (["bench", str(FIX / "tiny.py"), "--candidates", "eager,fast"], "unknown candidate"),
    (["bench", "--from", str(FIX / "tiny.py")], "not valid JSON"),
    (["bench", str(FIX / "tiny.py"), "--chip", "B300"], "unknown chip"),
    # a Hugging Face config without --hf: a user error, not importlib's AssertionError
    (["bench", str(FIX.parents[2] / "examples" / "configs" / "gpt2.json")], "is not a Python model file"),
])
def test_bad_input_exits_2(args, needle):
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_bench_json_end_to_end_and_emit(tiny_llama, tmp_path):
    out = tmp_path / "bench.json"
    res = run("bench", "--hf", str(tiny_llama), "--scenario", "prefill:batch=1,seq=32", "--top", "3", "--shapes", "1",
              "--chip", "H200", "--format", "json", "-o", str(out), "--emit", str(tmp_path / "repro"), *FAST)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["schema"] == "npuport.bench/1" and data["device"]["name"] == "cpu" and data["device"]["clock"] == "host-monotonic"
    assert data["scenario"] == "prefill" and data["scenario_sizes"]["batch"] == 1 and data["scenario_sizes"]["seq"] == 32
    case = data["cases"][0]
    assert case["median_s"] > 0 and case["attainment"] > 0 and case["achieved_flops_per_s"] > 0
    assert case["candidates"][0]["name"] == "eager"
    e2e = data["end_to_end"]
    assert e2e["step"]["median_s"] > 0 and e2e["op_total_s"] > 0 and e2e["measured_calls"] == e2e["total_calls"]
    assert len(data["emitted"]) == len(data["cases"])
    assert "clock_state" in data and data["clock_state"]["before"]["available"]


def test_bench_text_from_audit_json(tmp_path):
    audit = tmp_path / "audit.json"
    res = run("audit", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16", "--chip", "H200", "--format", "json", "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    res = run("bench", "--from", str(audit), "--top", "5", "--no-kernel-check", *FAST)
    assert res.exit_code == 0, res.output
    assert "npuport bench" in res.output and "aten::addmm" in res.output and "end-to-end" in res.output
    assert "/ prefill (batch 2 x 16) on cpu" in res.output
    # the audit's own sizes written out are the same step; other sizes are not in the JSON: one line, exit 2
    res = run("bench", "--from", str(audit), "--scenario", "prefill:batch=2,seq=16", "--top", "1", "--no-kernel-check",
              "--no-e2e", *FAST)
    assert res.exit_code == 0, res.output
    res = run("bench", "--from", str(audit), "--scenario", "prefill:batch=2,seq=32", "--top", "1", *FAST)
    assert res.exit_code == 2 and "sizes come from the audit JSON" in res.output
    # a missing JSON is said as such, whatever --scenario holds
    res = run("bench", "--from", str(tmp_path / "nope.json"), "--scenario", "prefill:batch=2,seq=16", *FAST)
    assert res.exit_code == 2 and "nope.json not found" in res.output


def test_bench_from_a_compiled_audit_keeps_its_mode(tmp_path):
    audit = tmp_path / "audit.json"
    res = run("audit", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16,mode=reduce-overhead", "--chip", "H200",
              "--format", "json", "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    res = run("bench", "--from", str(audit), "--scenario", "prefill:batch=2,seq=16,mode=reduce-overhead", "--top", "1",
              "--no-kernel-check", "--no-e2e", "--format", "json", *FAST)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["scenario_sizes"]["mode"] == "reduce-overhead"


def test_quiet_bench_leaves_stderr_empty(tmp_path):
    # Kineto writes "USDT: ... profiler_start/stop" on file descriptor 2 each time a profile starts and stops (the
    # kernel check, the whole-step timing); only a real process shows them, CliRunner captures sys.stderr alone
    audit = tmp_path / "audit.json"
    res = run("audit", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16", "--chip", "H200", "--format", "json",
              "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    done = subprocess.run([sys.executable, "-m", "npuport.cli.main", "bench", "--from", str(audit), "--top", "2", *FAST],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert "npuport bench" in done.stdout


def test_bench_from_an_audit_of_a_named_builder_times_the_whole_step(tmp_path):
    # `model.py:function`: the audit JSON keeps the builder's name, so bench --from rebuilds the same model for its
    # whole-step timing (it looked for build_model() and skipped the step)
    model = tmp_path / "named.py"  # no build_model(): only the named builder can make the model
    model.write_text("import torch\n\n\ndef make_mlp():\n    return torch.nn.Sequential(torch.nn.Linear(16, 32), "
                     "torch.nn.GELU(), torch.nn.Linear(32, 4))\n\n\ndef example_inputs(scenario):\n"
                     "    return (torch.randn(scenario.batch, scenario.seq, 16),)\n")
    audit = tmp_path / "audit.json"
    res = run("audit", f"{model}:make_mlp", "--scenario", "prefill:batch=2,seq=16", "--chip", "H200",
              "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    assert json.loads(audit.read_text())["model"]["entry"] == "make_mlp"
    out = tmp_path / "bench.json"
    res = run("bench", "--from", str(audit), "--top", "1", "--no-kernel-check", "-o", str(out), *FAST)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["end_to_end"]["step"]["median_s"] > 0, data.get("notes")
    assert not any("defines no function" in n for n in data.get("notes", []))


def test_an_audit_json_missing_fields_is_one_line(tmp_path):
    audit = tmp_path / "audit.json"
    res = run("audit", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16", "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    data = json.loads(audit.read_text())
    data["scenarios"] = [{"name": s["name"]} for s in data["scenarios"]]  # its sizes gone
    audit.write_text(json.dumps(data))
    res = run("bench", "--from", str(audit), *FAST)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "is not an audit JSON bench can read (KeyError" in res.output


def test_bench_from_another_folder_does_not_time_another_model(tmp_path, monkeypatch):
    # the audit JSON's origin is the path as the audit was given it; from another folder it can name another file
    make = "import torch\n\n\ndef build_model():\n    return {}\n\n\ndef example_inputs(scenario):\n" \
           "    return (torch.randn(scenario.batch, scenario.seq, 16),)\n"
    (tmp_path / "m.py").write_text(make.format("torch.nn.Linear(16, 4)"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text(make.format("torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Linear(64, 4))"))
    monkeypatch.chdir(tmp_path)
    res = run("audit", "m.py", "--scenario", "prefill:batch=2,seq=16", "--chip", "H200", "-o", "a.json", "--quiet")
    assert res.exit_code == 0, res.output
    monkeypatch.chdir(tmp_path / "sub")
    res = run("bench", "--from", "../a.json", "--top", "1", "--no-kernel-check", "-o", "b.json", *FAST)
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "sub" / "b.json").read_text())
    e2e = data["end_to_end"]
    assert not e2e.get("step") and "is not the audited model" in e2e["error"], e2e


def _cases(data):
    return [(c["op"], c["signature"], c["estimated_s"], c["estimate_chip"]) for c in data["cases"]]


def test_the_estimates_chip_is_named_and_the_same_as_the_audits(tmp_path):
    # without --chip on cpu the estimates were silently an H200's, and the audit's default chip is another: the same
    # op got another estimate from `bench MODEL` than from `bench --from` its audit, and --ops picked other ops
    target = default_chip()
    args = ["--scenario", "prefill:batch=2,seq=16", "--ops", "2", "--shapes", "1", "--no-kernel-check", "--no-e2e", *FAST]
    res = run("bench", str(FIX / "tiny.py"), "--device", "cpu", "--format", "json", *args)
    assert res.exit_code == 0, res.output
    now = json.loads(res.output)
    assert now["device"]["chip"] is None
    assert now["estimate_chip"] == target and now["estimate_chip_source"] == "default target chip"
    assert any(f"estimates are for {target}, the default target chip" in n for n in now["notes"])
    audit = tmp_path / "audit.json"
    res = run("audit", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16", "--format", "json", "-o", str(audit), "--quiet")
    assert res.exit_code == 0, res.output
    res = run("bench", "--from", str(audit), "--device", "cpu", "--format", "json", *args)
    assert res.exit_code == 0, res.output
    later = json.loads(res.output)
    assert later["estimate_chip"] == target and later["estimate_chip_source"] == "the audit JSON's chip"
    assert [c[:2] + c[3:] for c in _cases(later)] == [c[:2] + c[3:] for c in _cases(now)] and _cases(now)
    assert [c[2] for c in _cases(later)] == pytest.approx([c[2] for c in _cases(now)])
    # the text header names the chip and why; the ratio line names it too
    res = run("bench", str(FIX / "tiny.py"), "--device", "cpu", *args)
    assert res.exit_code == 0, res.output
    header = " ".join(res.output.split("measured:")[0].split())
    assert f"roofline no chip profile; estimates {target} (default target chip)" in header
    assert f"x the {target} roofline estimate of" in res.output
    # --chip names its own chip (and is the roofline the attainment is on)
    res = run("bench", str(FIX / "tiny.py"), "--device", "cpu", "--chip", "H200", "--format", "json", *args)
    assert res.exit_code == 0, res.output
    chosen = json.loads(res.output)
    assert (chosen["estimate_chip"], chosen["estimate_chip_source"], chosen["device"]["chip"]) == ("H200", "--chip", "H200")
    assert {c["estimate_chip"] for c in chosen["cases"]} == {"H200"}


def test_emit_force_replaces_the_earlier_runs_scripts(tmp_path):
    repro = tmp_path / "repro"
    args = ["--device", "cpu", "--shapes", "1", "--no-kernel-check", "--no-e2e", "--emit", str(repro), *FAST]
    res = run("bench", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=16", "--ops", "1", *args)
    assert res.exit_code == 0, res.output
    first = sorted(p.name for p in repro.iterdir())
    (repro / "keep.txt").write_text("the user's", encoding="utf-8")
    res = run("bench", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=32", "--ops", "1", *args)
    assert res.exit_code == 2 and "already holds repro scripts" in res.output
    res = run("bench", str(FIX / "tiny.py"), "--scenario", "prefill:batch=2,seq=32", "--ops", "1", "--force",
              "--format", "json", *args)
    assert res.exit_code == 0, res.output
    second = sorted(Path(p).name for p in json.loads(res.output)["emitted"])
    assert second and not set(first) & set(second)  # other sizes: other names
    assert sorted(p.name for p in repro.iterdir()) == sorted([*second, "keep.txt"])
