"""`--scenario ...,mode=compile` in parity: the step under torch.compile on every side but the float64 golden, its
inputs, outputs and gradients captured (no hook or dispatch mode inside the compiled model); an eager record against
a compiled one compared on the entries both have. The plumbing runs with the aot_eager backend (dynamo and
AOTAutograd without Inductor's C++ build); one test compiles with Inductor on this CPU and sees its numbers differ
from eager mode's in bfloat16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import npuport.parity.session as session
from npuport.cli.main import cli

from .conftest import SCEN


def run(*args: str):
    return CliRunner().invoke(cli, ["parity", *args])


@pytest.fixture
def aot_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "COMPILE_BACKEND", "aot_eager")


def test_compiled_sides_capture_the_models_inputs_outputs_and_gradients(llama_config: str, aot_eager: None,
                                                                        standin_npu: None) -> None:
    r = run("--ref", "cpu", "--dev", "npu", "--hf", llama_config, "--scenario", "train:batch=1,seq=8,mode=compile",
            "--backward", "--golden", "cpu64", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["verdict"]["passed"] and data["scenario"]["mode"] == "compile"
    entries = data["entries"]
    # only the root's entries and the parameter gradients: a compiled step has no module boundary left to record
    assert {e["module"] for e in entries if e["io"] != "grad"} == {""}
    assert {e["io"] for e in entries} >= {"in", "out", "grad"}
    grads = [e for e in entries if e["io"] == "grad"]
    assert len(grads) == 21 and all(e["golden"] for e in grads)  # 2 layers x 9 + embed, norm, lm_head; vs float64
    assert any("cpu64 (the float64 golden) runs eagerly" in w for w in data["warnings"])


def test_an_eager_record_against_a_compiled_one(llama_config: str, aot_eager: None, tmp_path: Path) -> None:
    eager, compiled = str(tmp_path / "eager"), str(tmp_path / "compiled")
    assert run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN, "-o", eager, "--quiet").exit_code == 0
    r = run("record", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN + ",mode=compile", "-o", compiled, "--quiet")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "compiled" / "manifest.json").read_text())
    assert manifest["capture"]["compiled"] == "aot_eager" and manifest["scenario"]["mode"] == "compile"
    assert json.loads((tmp_path / "eager" / "manifest.json").read_text())["capture"]["compiled"] is None
    r = run("compare", "--ref", eager, "--dev", compiled, "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output  # the eager side's module entries have no counterpart: listed, not failed
    data = json.loads(r.output)
    assert {e["module"] for e in data["entries"]} == {""} and data["unmatched"]["ref_only"]
    assert any("ref ran eagerly, dev under torch.compile (aot_eager)" in w for w in data["warnings"])
    assert data["scenario"]["mode"] == "mixed" and data["scenario"]["modes"] == {"ref": "eager", "dev": "compile"}
    assert [s_["compiled"] for s_ in data["sides"]] == [None, "aot_eager"]


def test_fault_injection_needs_eager_mode_and_graph_mode_runs_eagerly(llama_config: str, aot_eager: None) -> None:
    r = run("--ref", "cpu", "--dev", "cpu-fault:aten::mul.Tensor@model.layers.1.mlp", "--hf", llama_config,
            "--scenario", SCEN + ",mode=compile", "--quiet")
    assert r.exit_code == 2 and "fault injection runs the model eagerly" in r.output
    r = run("--ref", "cpu", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN + ",mode=graph", "--format", "json",
            "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert any("mode=graph: parity runs the step eagerly" in w for w in data["warnings"])
    assert len({e["module"] for e in data["entries"]}) > 1  # eager: every module captured


def test_inductor_on_this_cpu_differs_from_eager_in_bfloat16(llama_config: str, tmp_path: Path) -> None:
    """Inductor fuses the pointwise chains of a step and keeps their intermediates in float32 registers, where eager
    mode rounds each op's output to bfloat16: the compiled logits are not bit-equal to the eager ones, and stay within
    bfloat16's tolerance. This is what parity under mode=compile is for."""
    eager, compiled = str(tmp_path / "eager"), str(tmp_path / "compiled")
    common = ("--hf", llama_config, "--dtype", "bfloat16", "--quiet")
    assert run("record", "--dev", "cpu", "--scenario", SCEN, "-o", eager, *common).exit_code == 0
    r = run("record", "--dev", "cpu", "--scenario", SCEN + ",mode=compile", "-o", compiled, *common)
    assert r.exit_code == 0, r.output
    r = run("compare", "--ref", eager, "--dev", compiled, "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    out = [e for e in data["entries"] if e["io"] == "out"]
    assert out and all(e["dtype"] == "bfloat16" for e in out)
    assert max(e["metrics"]["max_abs"] for e in out) > 0  # not the eager kernels: the numbers moved
    assert all(e["passed"] for e in out)


def test_reduce_overhead_runs_as_compile_mode_with_a_note(llama_config: str, aot_eager: None) -> None:
    """A graph replay runs the compiled kernels its capture recorded: parity compares the compiled step's numbers."""
    r = run("--ref", "cpu", "--dev", "cpu", "--hf", llama_config, "--scenario", SCEN + ",mode=reduce-overhead",
            "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["verdict"]["passed"] and data["scenario"]["mode"] == "reduce-overhead"
    assert {e["module"] for e in data["entries"]} == {""}  # compiled: the root's entries only
    assert [s_["compiled"] for s_ in data["sides"]] == ["aot_eager", "aot_eager"]
    assert any("mode=reduce-overhead: parity runs the step under torch.compile's default mode" in w for w in data["warnings"])


def test_a_real_eager_against_compiled_report_says_why_entries_are_unmatched():
    """The JSON report of an eager CUDA record against the compiled CUDA step, from a lent H100
    (docs/gpu/parity/compiled/): its unmatched module entries are the eager side's by design, not a divergent path."""
    import json
    from pathlib import Path

    from npuport.render.parity_text import look_at

    data = json.loads((Path(__file__).resolve().parents[2] / "docs/gpu/parity/compiled/parity_eager_vs_compiled.json").read_text())
    assert data["scenario"]["modes"] == {"ref": "eager", "dev": "compile"} and data["verdict"]["unmatched"] == 716
    said = look_at(data)
    assert said[0].startswith("nothing to fix") and "did not take the same path" not in " ".join(said)
    assert "the ref side's 716 module entries have no compiled counterpart" in said[1]
    # entries only the compiled side has are not by design
    odd = {**data, "unmatched": {**data["unmatched"], "dev_only": ["<model>#0:out.extra"]}}
    assert "did not take the same path" in look_at(odd)[1]
    data["scenario"] = {**data["scenario"], "mode": "eager", "modes": None}  # the same gap between two eager runs
    assert "did not take the same path" in look_at(data)[1]
