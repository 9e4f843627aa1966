"""What a user says about the job (npuport.model.job): every option error is one line, exit 2, before anything is
loaded (no `npuport: loading` line first, torch not needed), and options that would change nothing are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model.job import Layout, check_training, job, parse_layout
from npuport.model.scenarios import parse_scenarios

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"
LLAMA = ROOT / "examples" / "configs" / "llama-2-7b.json"


@pytest.mark.parametrize("text, what, received", [
    ("tp=2,tp=4", "tp given twice", "tp=2 and tp=4"),
    ("", "cannot read --parallel ''", "an empty entry"),
    ("tp=2,", "cannot read --parallel", "an empty entry"),
    ("zero=3", "zero=3 shards over data-parallel ranks", "dp=1, zero=3"),
    ("tp=0", "cannot use --parallel", "tp=0"),
    ("tp=3,dp=2,ep=4", "cannot use --parallel", "ep=4, dp x tp = 6"),
])
def test_bad_layouts(text: str, what: str, received: str) -> None:
    with pytest.raises(NpuportError) as err:
        parse_layout(text)
    assert what in err.value.what and err.value.received == received


def test_layouts_and_ranks() -> None:
    assert parse_layout(" tp = 2 , dp=4,zero=3") == Layout(tp=2, dp=4, zero=3)
    assert job("tp=2,dp=2,pp=2", None, 3) == (Layout(tp=2, dp=2, pp=2), 4)  # the fake group spans one stage
    assert job(None, 4, 3) == (None, 4) and job(None, None, 0) == (None, None)
    assert Layout(tp=2, dp=4, ep=4).expert_dp == 2 and Layout(dp=8, ep=8).expert_dp == 1
    for args, what in (((None, 0, 0), "bad --world-size"), ((None, None, 3), "--rank names a rank of a job"),
                       (("tp=2", None, 2), "--rank is outside the job"), ((None, 2, -1), "bad --rank"),
                       (("tp=2", 4, 0), "--world-size does not match --parallel")):
        with pytest.raises(NpuportError) as err:
            job(*args)
        assert err.value.what == what


def test_training_options_without_a_training_step() -> None:
    prefill = parse_scenarios(["prefill"])
    check_training(parse_scenarios([]), "sgd", True, None)  # the default scenarios train
    check_training(prefill, None, False, "float32")
    with pytest.raises(NpuportError) as err:
        check_training(prefill, "sgd", True, None)
    assert err.value.what.startswith("--optimizer sgd and --master-weights size the training step's memory")
    assert err.value.received == "--scenario prefill"
    with pytest.raises(NpuportError) as err:
        check_training(parse_scenarios(["train"]), None, True, "fp32")
    assert "float32 weights have nothing to copy" in err.value.what


def _one_line_before_loading(args: list[str], what: str) -> None:
    res = CliRunner().invoke(cli, ["audit", *args])  # no --quiet: a progress line would show
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and what in lines[0], res.output
    assert "npuport: loading" not in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("extra, what", [
    (["--parallel", "tp=0"], "cannot use --parallel 'tp=0'"),
    (["--parallel", "tp=2,tp=4"], "tp given twice"),
    (["--parallel", ""], "cannot read --parallel ''"),
    (["--parallel", "zero=3"], "zero=3 shards over data-parallel ranks"),
    (["--rank", "3"], "--rank names a rank of a job"),
    (["--world-size", "0"], "bad --world-size"),
    (["--world-size", "4", "--rank", "4"], "--rank is outside the job"),
    (["--dtype", "int8"], "unknown dtype 'int8'"),
    (["--from-chip", "Ascend910B"], "--from-chip Ascend910B is not a CUDA GPU"),
    (["--optimizer", "sgd", "--master-weights"], "no train scenario is audited"),
    (["--master-weights"], "--master-weights sizes the training step's memory"),
])
def test_option_errors_come_before_loading(extra: list[str], what: str) -> None:
    _one_line_before_loading(["--hf", str(LLAMA), "--scenario", "prefill:batch=1,seq=8", *extra], what)


def test_a_float32_dtype_with_master_weights_is_refused_before_loading() -> None:
    _one_line_before_loading(["--hf", str(LLAMA), "--scenario", "train:batch=1,seq=8", "--dtype", "float32",
                              "--master-weights"], "float32 weights have nothing to copy")


def test_static_only_refuses_job_options() -> None:
    for extra in (["--parallel", "tp=0"], ["--world-size", "2"], ["--rank", "1"], ["--master-weights"]):
        _one_line_before_loading([str(GPT), "--static-only", *extra], "--static-only traces nothing")


def test_the_option_checks_need_no_torch() -> None:
    """npuport.cli.audit checks the job before its first progress line: importing it loads no torch."""
    code = "import sys, npuport.cli.audit, npuport.model.job; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_master_weights_of_a_float32_model_count_nothing(tmp_path: Path) -> None:
    """A model built in float32 (no --dtype): --master-weights would add a second float32 copy; it has no effect
    and the report says so."""
    model = tmp_path / "model.py"
    model.write_text("import torch\n\ndef build_model():\n    return torch.nn.Linear(64, 64)\n\n"
                     "def example_inputs(scenario):\n    return (torch.randn(scenario.batch, 64),)\n\n"
                     "def loss_fn(out, inputs):\n    return out.sum()\n")
    _, data = api.audit(api.ModelSpec(model=str(model)),
                        api.AuditOptions(scenarios=("train:batch=2,seq=1",), master_weights=True))
    train = next(s for s in data["scenarios"] if s["name"] == "train")
    assert train["memory"]["master_weights_bytes"] == 0
    assert any(n.startswith("--master-weights has no effect") for n in data["notes"]), json.dumps(data["notes"])


def test_dtype_names_are_the_builders() -> None:
    """--dtype is checked (torch-free) against the names the HF builder maps to torch dtypes."""
    from npuport.model.hf.build import _DTYPE_NAMES
    from npuport.model.job import DTYPE_NAMES

    assert set(DTYPE_NAMES) == set(_DTYPE_NAMES)
