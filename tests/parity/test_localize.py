"""Fault injection proves localisation finds exactly the perturbed module and op."""

from __future__ import annotations

import pytest

from npuport.parity.entries import CaptureOptions
from npuport.parity.run import record, run_parity
from npuport.parity.session import RunOptions, Target

from .conftest import SCEN, fault


def opts(**kw) -> RunOptions:
    return RunOptions(scenario=SCEN, capture=CaptureOptions(**kw))


@pytest.mark.parametrize("module, op", [("model.layers.1.mlp", "aten::mul.Tensor"),
                                        ("model.layers.0.self_attn.o_proj", "aten::mm")])
def test_fault_is_localised_to_module_and_op(llama_config, module, op):
    res = run_parity("cpu", fault(op, module), Target(hf_config=llama_config), opts(), golden="cpu64")
    assert not res
    fd = res.first
    assert fd is not None and fd.module == module and fd.inputs_within
    assert fd.replay is not None and fd.replay.verdict == "introduces" and fd.replay.inputs_from == "ref"
    culprit = fd.replay.culprit
    assert culprit is not None and culprit.op == op and culprit.module == module
    assert all(o.passed for o in fd.replay.ops if o is not culprit and o.op != op)
    # everything upstream of the fault passed
    assert all(r.passed for r in res.comparison.judged if r.entry.order < fd.result.entry.order and not r.entry.module.startswith(module))


def test_no_fault_passes_with_and_without_golden(llama_config):
    assert run_parity("cpu", "cpu", Target(hf_config=llama_config), opts(), golden="cpu64")
    assert run_parity("cpu", "cpu", Target(hf_config=llama_config), opts())


def test_bf16_fault_with_relative_verdict(llama_config):
    target = Target(hf_config=llama_config, dtype="bfloat16")
    clean = run_parity("cpu", "cpu", target, opts(), golden="cpu64")
    assert clean
    res = run_parity("cpu", fault(scale=0.3), target, opts(), golden="cpu64")
    assert not res and res.first.module == "model.layers.1.mlp"
    assert res.first.replay.culprit.op == "aten::mul.Tensor"


def test_stats_only_record_then_compare_localises_with_dev_inputs(llama_config, tmp_path):
    target = Target(hf_config=llama_config)
    record(target, "cpu", opts(mode="stats", op_sequence=False), str(tmp_path / "ref"))
    res = run_parity(str(tmp_path / "ref"), fault(), target, RunOptions(), golden="cpu64")
    assert not res
    fd = res.first
    assert fd.module == "model.layers.1.mlp" and fd.result.metrics.basis == "stats"
    assert fd.replay.inputs_from == "dev" and fd.replay.verdict == "introduces"
    assert fd.replay.culprit.op == "aten::mul.Tensor"


def test_op_level_capture_names_first_divergent_op(llama_config):
    res = run_parity("cpu", fault(), Target(hf_config=llama_config), opts(ops=True), localize=False)
    assert not res and res.first.module == "model.layers.1.mlp" and res.first.first_op == "aten::mul.Tensor"
    assert res.first.replay is None
