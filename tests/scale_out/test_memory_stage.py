"""Per-rank memory under estimated expert and pipeline parallel (npuport.audit.memory_stage.rank_share): the traced
rank holds every expert and every layer, a rank of the job its 1/ep of the routed experts and its stage's 1/pp.
Checked against the same model audited as a single process, the expert bytes counted by hand from the config."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from npuport import api
from npuport.cost.memory import GiB, OptimizerMemory, RankShare, ScenarioMemory, plan

H, F, N, LAYERS = 128, 64, 8, 2
OLMOE = {"model_type": "olmoe", "hidden_size": H, "intermediate_size": F, "num_attention_heads": 4,
         "num_key_value_heads": 4, "num_hidden_layers": LAYERS, "num_experts": N, "num_experts_per_tok": 2,
         "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
EXPERTS = LAYERS * N * 3 * H * F * 2  # gate_up (2f x h) and down (h x f) per expert, bf16
TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}
SCENARIOS = ("train:batch=1,seq=64", "decode:batch=2,past=128")


def _memory(tmp_path: Path, cfg: dict[str, Any], parallel: str | None) -> tuple[Any, dict[str, dict[str, Any]]]:
    path = tmp_path / f"{cfg['model_type']}.json"
    path.write_text(json.dumps(cfg))
    report, data = api.audit(api.ModelSpec(hf_config=str(path)), api.AuditOptions(scenarios=SCENARIOS, parallel=parallel))
    data = json.loads(json.dumps(data))
    return (report, data), {s["name"]: s["memory"] for s in data["scenarios"]}


def _param_bytes(report: Any) -> int:
    return sum(getattr(p, "_local_tensor", p).numel() * p.element_size() for p in report.model.module.parameters())


@pytest.fixture(scope="module")
def olmoe_single(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, dict[str, Any]]]:
    return _memory(tmp_path_factory.mktemp("single"), OLMOE, None)


def test_expert_parallel_rank_holds_dense_and_its_experts(tmp_path: Path, olmoe_single: Any) -> None:
    """dp=8,ep=8: weights, gradients and optimizer states are dense + experts / 8 of the whole model's; activations
    and the cache as traced; the JSON, the note and the memory section say it is a rank of the job's."""
    (report, data), mem = _memory(tmp_path, OLMOE, "dp=8,ep=8")
    (single, _), whole = olmoe_single
    total = _param_bytes(single)
    held = total - EXPERTS + EXPERTS // N
    share = held / total
    assert mem["train"]["held_share"] == {"params": pytest.approx(share), "cache": 1.0}
    assert share == pytest.approx(data["distributed"]["held_share"])  # no ZeRO: the colleague's share, same formula
    cut = whole["train"]["weights_bytes"] - mem["train"]["weights_bytes"]
    assert cut == EXPERTS - EXPERTS // N  # 7/8 of the experts off, buffers kept
    assert mem["train"]["grads_bytes"] == pytest.approx(whole["train"]["grads_bytes"] * share, abs=1)
    assert whole["train"]["grads_bytes"] == total  # every parameter has its gradient in the trace
    for key in ("optimizer_states_bytes", "optimizer_step_temporary_bytes"):
        assert mem["train"][key] == pytest.approx(whole["train"][key] * share, abs=1)
    assert mem["train"]["activations_bytes"] == whole["train"]["activations_bytes"]
    assert mem["train"]["traced_peak_bytes"] == whole["train"]["traced_peak_bytes"] - cut
    states = mem["train"]["optimizer_states_bytes"]
    assert mem["train"]["held_bytes"] == mem["train"]["weights_bytes"] + states
    assert mem["train"]["peak_bytes"] >= mem["train"]["traced_peak_bytes"] + states
    assert mem["decode"]["inputs_bytes"] == whole["decode"]["inputs_bytes"]  # ep: every rank keeps its whole cache
    assert mem["decode"]["weights_bytes"] == whole["decode"]["weights_bytes"] - cut
    assert any(n.startswith("memory: per rank of the job (dp=8,ep=8)") and f"{share:.0%}" in n for n in data["notes"])
    from npuport.render.audit_doc import memory_section

    assert memory_section(data).lines[0].startswith(f"per rank of dp=8,ep=8: weights, gradients and optimizer states "
                                                    f"are {share:.0%} of the traced rank's")


def test_zero_already_spreads_the_experts(tmp_path: Path) -> None:
    """dp=8,zero=3,ep=8: FSDP2 shards every expert over the 8 dp ranks, what 1/8 of the experts on each of 8 expert
    ranks gives: ep divides nothing more, the memory is that of dp=8,zero=3."""
    (_, data), mem = _memory(tmp_path, OLMOE, "dp=8,zero=3,ep=8")
    (_, _), plain = _memory(tmp_path, OLMOE, "dp=8,zero=3")
    assert "held_share" not in mem["train"]
    for key in ("weights_bytes", "grads_bytes", "optimizer_states_bytes", "peak_bytes", "held_bytes"):
        assert mem["train"][key] == plain["train"][key], key
    assert any("with zero=3 the trace already spreads every expert" in n for n in data["notes"])


def test_pipeline_stage_holds_half(tmp_path: Path) -> None:
    """pp=2 of a dense model: half the parameters with their gradients and states, half a decode step's cache."""
    (report, data), mem = _memory(tmp_path, TINY_LLAMA, "pp=2")
    (_, _), whole = _memory(tmp_path, TINY_LLAMA, None)
    total = _param_bytes(report)
    assert mem["train"]["held_share"] == {"params": 0.5, "cache": 0.5}
    assert whole["train"]["weights_bytes"] - mem["train"]["weights_bytes"] == total // 2
    assert mem["train"]["grads_bytes"] == whole["train"]["grads_bytes"] // 2 == total // 2
    assert mem["train"]["optimizer_states_bytes"] == whole["train"]["optimizer_states_bytes"] // 2
    assert mem["decode"]["inputs_bytes"] == pytest.approx(whole["decode"]["inputs_bytes"] / 2, abs=1)
    assert mem["decode"]["peak_bytes"] < whole["decode"]["peak_bytes"] * 0.6


def test_data_parallel_alone_changes_nothing(tmp_path: Path) -> None:
    """dp=2 (DDP) of a dense model: every rank holds the whole model, as traced; no share, no note."""
    (_, data), mem = _memory(tmp_path, TINY_LLAMA, "dp=2")
    (_, _), whole = _memory(tmp_path, TINY_LLAMA, None)
    for name in mem:
        assert "held_share" not in mem[name]
        assert {k: v for k, v in mem[name].items() if k.endswith("_bytes")} == \
               {k: v for k, v in whole[name].items() if k.endswith("_bytes")}
    assert not any(n.startswith("memory: per rank") for n in data["notes"])


def _over(share: RankShare) -> ScenarioMemory:
    """A 100 GiB training step on a 60 GiB chip: 20 GiB of weights and of gradients, 40 GiB of states."""
    m = ScenarioMemory("train", weights=20 * GiB, inputs=0, traced_peak=30 * GiB, peak_phase="backward",
                       peak_module="", grads=20 * GiB, optimizer=OptimizerMemory("adamw", 40 * GiB, 20 * GiB, 0),
                       share=share)
    m.peak = 100 * GiB
    plan(m, 60 * GiB, 1.0, 0, SimpleNamespace(batch=1, seq=4096, past=0))
    return m


def test_tensor_parallel_advice_keeps_experts_whole() -> None:
    """Tensor parallel splits only what is not a routed expert (transformers' plans leave them whole): with 90% of
    the parameter bytes in experts no degree up to 8 fits (72 GiB stay whole), expert parallel 4 does; with 20%,
    degree 2 fits at 16 + 84 / 2 GiB and says what stays whole. Checked by hand."""
    m = _over(RankShare(experts=64, experts_share=0.9))
    whole = round(0.9 * 80 * GiB)  # the experts' weights, gradients and states
    assert not [c for c in m.changes if c["change"].startswith("tensor parallel")]
    ep = next(c for c in m.changes if c["change"].startswith("expert parallel"))
    # degree 2: 28 + 36 = 64 GiB, over; degree 4: 28 + 18 = 46 GiB
    assert ep["change"] == "expert parallel degree 4" and ep["peak_bytes"] == 100 * GiB - whole + whole // 4 and ep["fits"]
    m = _over(RankShare(experts=64, experts_share=0.2))
    tp = next(c for c in m.changes if c["change"].startswith("tensor parallel"))
    whole = round(0.2 * 80 * GiB)
    assert tp["change"].startswith("tensor parallel degree 2") and tp["peak_bytes"] == whole + (100 * GiB - whole) // 2
    assert "routed experts (16.0 GiB of them) stay whole" in tp["note"]
    m = _over(RankShare(experts=64, experts_share=0.9, tp_splits_experts=True))  # a plan that splits them
    assert next(c for c in m.changes if c["change"].startswith("tensor parallel"))["peak_bytes"] == 100 * GiB // 2
    dense = _over(RankShare())  # no experts: as it was, no expert-parallel advice
    assert next(c for c in dense.changes if c["change"].startswith("tensor parallel"))["peak_bytes"] == 100 * GiB // 2
    assert not any(c["change"].startswith("expert parallel") for c in dense.changes)
