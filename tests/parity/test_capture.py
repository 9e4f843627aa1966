"""Capture: output structures of a hand-written model, dropout off, backward gradients, dedupe, op entries."""

from __future__ import annotations

from npuport.devices.device import parse_device
from npuport.parity.entries import CaptureOptions
from npuport.parity.run import run_parity
from npuport.parity.session import RunOptions, Target, prepare, run_side

from .conftest import SCEN


def test_model_file_structures_and_eval(model_file):
    prep = prepare(Target(model=model_file), RunOptions(scenario=SCEN))
    assert not prep.lm.module.training  # dropout off by default
    cap = run_side(prep, parse_device("cpu"), RunOptions(scenario=SCEN)).capture
    keys = {e.key for e in cap.entries}
    assert {"blocks.0#0:out.y", "blocks.0#0:out.aux[0]", "blocks.1#0:in.args[0]", "<model>#0:out"} <= keys
    by = cap.by_key()
    assert by["blocks.1#0:in.args[0]"].blob == by["blocks.0#0:out.y"].blob  # stored once
    assert by["blocks.0.drop#0:out"].blob == by["blocks.0.drop#0:in.args[0]"].blob  # eval dropout is identity
    assert cap.module_sequence[-1] == "<model>#0" and cap.op_sequence


def test_backward_captures_parameter_and_output_gradients(model_file):
    o = RunOptions(scenario="train:batch=2,seq=4", capture=CaptureOptions(backward=True))
    cap = run_side(prepare(Target(model=model_file), o), parse_device("cpu"), o).capture
    ios = {e.io for e in cap.entries}
    assert {"grad", "grad_out"} <= ios
    assert "param:blocks.0.fc.weight:grad" in cap.by_key()
    assert run_parity("cpu", "cpu", Target(model=model_file), o, golden="cpu64")


def test_fault_in_backward_run_is_caught(model_file):
    o = RunOptions(scenario="train:batch=2,seq=4", capture=CaptureOptions(backward=True))
    res = run_parity("cpu", "cpu-fault:aten::gelu@blocks.1*0.1", Target(model=model_file), o)
    assert not res and res.first.module == "blocks.1"
    assert any(not r.passed for r in res.comparison.results if r.entry.io == "grad")


def test_dtype_override_for_model_files(model_file):
    prep = prepare(Target(model=model_file, dtype="bfloat16"), RunOptions(scenario=SCEN))
    assert prep.inputs["kwargs"]["x"].dtype.is_floating_point and str(prep.inputs["kwargs"]["x"].dtype) == "torch.bfloat16"
    assert run_parity("cpu", "cpu", Target(model=model_file, dtype="bfloat16"), RunOptions(scenario=SCEN), golden="cpu64")
