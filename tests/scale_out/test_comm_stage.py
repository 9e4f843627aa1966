"""The communication stage (npuport.audit.comm_stage): compute on one footing for every chip, advice that fits the
layout, DDP's gradient all-reduce of what the rank holds (pipeline stage, expert groups), and FSDP2's copy-in costed
as the copy it is. Bytes are counted by hand from the configs' sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npuport import api
from npuport.audit.comm_stage import CommRow, to_hide
from npuport.cost.inventory import step_time
from npuport.cost.roofline import get_chip
from npuport.model.job import Layout

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"
H, F, KV, V = 256, 512, 4 * 32, 1000
TINY_LLAMA = {"model_type": "llama", "hidden_size": H, "intermediate_size": F, "num_attention_heads": 8,
              "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": V, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}
OLMOE = {"model_type": "olmoe", "hidden_size": 128, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 4, "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2,
         "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
LAYER = H * H * 2 + 2 * H * KV + 3 * H * F + 2 * H  # q, o, k, v, gate / up / down, two norms (elements)
ROOT_PARAMS = V * H * 2 + H  # embedding, lm_head (not tied), final norm


def _audit(tmp_path: Path, cfg: dict[str, Any], scenario: str, parallel: str) -> tuple[Any, dict[str, Any]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return api.audit(api.ModelSpec(hf_config=str(path)), api.AuditOptions(scenarios=(scenario,), parallel=parallel))


def _scenario(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in data["scenarios"] if s["name"] == name)


def test_compute_is_device_time_on_every_chip() -> None:
    """The target's and the baseline's compute are both the step's device time (host excluded); the step with
    communication both start from the wall. It was device time on the target, the whole step on the baseline."""
    report, data = api.audit(api.ModelSpec(model=str(GPT)),
                             api.AuditOptions(scenarios=("train:batch=1,seq=32",), world_size=1, chip="Ascend910B"))
    totals = report.inventory.totals["train"]
    by_chip = _scenario(data, "train")["communication"]["by_chip"]
    assert set(by_chip) == {"Ascend910B", data["baseline_chip"]}
    for chip, b in by_chip.items():
        step = step_time(report.inventory.calls["train"], get_chip(chip), "eager")
        assert b["compute_s"] == pytest.approx(step.device_s) == pytest.approx(totals.device_by_chip[chip])
        assert b["step_s"] == pytest.approx(step.step_s)  # no collective: the wall as it is
        assert b["compute_s"] < b["step_s"]  # this small step is host-bound on both chips: compute is not the wall


def _row(op: str, phase: str, overlap: bool = True) -> CommRow:
    return CommRow(op, "x", phase, "m", 1, "bfloat16", 2, None, 1, overlap=overlap)


@pytest.mark.parametrize("layout, rows, zero2, accumulate", [
    (Layout(dp=2), [_row("c10d::allreduce_", "backward")], False, True),
    (Layout(tp=2, dp=2), [_row("c10d::allreduce_", "backward"), _row("_c10d_functional::all_reduce", "forward", False)],
     False, True),
    (Layout(dp=2, zero=2), [_row("c10d::_allgather_base_", "forward"), _row("c10d::_reduce_scatter_base_", "backward")],
     False, True),
    (Layout(dp=2, zero=3), [_row("c10d::_allgather_base_", "forward"), _row("c10d::_allgather_base_", "backward"),
                            _row("c10d::_reduce_scatter_base_", "backward")], True, True),
    (Layout(dp=2, zero=3), [_row("c10d::_allgather_base_", "forward")], False, False),  # prefill: nothing re-gathers
])
def test_advice_to_hide_communication_fits_the_layout(layout: Layout, rows: list[CommRow], zero2: bool,
                                                      accumulate: bool) -> None:
    advice = " | ".join(to_hide(rows, layout))
    assert advice.startswith("larger batches per rank")
    assert ("ZeRO-2 instead of 3" in advice) == zero2
    assert ("gradient accumulation" in advice) == accumulate
    assert "fewer data-parallel ranks" not in advice


@pytest.mark.parametrize("parallel, zero2", [("dp=2", False), ("dp=2,zero=3", True)])
def test_llama_2_7b_layouts_get_advice_that_applies(tmp_path: Path, parallel: str, zero2: bool) -> None:
    """The reviewer's case: Llama-2-7B cut to 2 layers, train batch 1 x 128; the target cannot hide its gradient
    traffic, and only ZeRO-3 is told to try ZeRO-2."""
    cfg = json.loads((ROOT / "examples" / "configs" / "llama-2-7b.json").read_text()) | {"num_hidden_layers": 2}
    _, data = _audit(tmp_path, cfg, "train:batch=1,seq=128", parallel)
    b = _scenario(data, "train")["communication"]["by_chip"][data["chip"]]
    assert not b["hidden"] and b["to_hide"]
    assert any("ZeRO-2 instead of 3" in a for a in b["to_hide"]) == zero2


def test_ddp_all_reduce_of_a_pipeline_stage(tmp_path: Path) -> None:
    """dp=4,pp=2: each stage all-reduces the gradients of its half of the parameters over its 4 data-parallel ranks."""
    _, data = _audit(tmp_path, TINY_LLAMA, "train:batch=1,seq=32", "dp=4,pp=2")
    ddp = [r for r in _scenario(data, "train")["communication"]["collectives"] if r["module"].startswith("(DDP")]
    assert sum(r["bytes"] * r["calls"] for r in ddp) == (2 * LAYER + ROOT_PARAMS) * 2 // 2
    assert {r["group_size"] for r in ddp} == {4} and all(r["estimated"] for r in ddp)
    assert any("pp=2" in e and "scaled to that share" in e for e in data["distributed"]["estimated"])
    assert data["distributed"]["held_share"] == 0.5


@pytest.mark.parametrize("parallel, expert_group", [("dp=8,ep=8", None), ("dp=4,ep=2", 2), ("tp=2,dp=4,ep=4", 2)])
def test_ddp_reduces_expert_gradients_over_the_ranks_holding_them(tmp_path: Path, parallel: str,
                                                                  expert_group: int | None) -> None:
    """Routed experts: 1/ep of them per rank, reduced over the dp x tp / ep ranks that hold the same experts; the
    rest over dp. dp=8,ep=8: every rank holds its own experts, nothing to reduce for them."""
    report, data = _audit(tmp_path, OLMOE, "train:batch=1,seq=16", parallel)
    layout = report.comm.distributed.layout
    h, f, n, layers = 128, 64, 8, 2
    experts = layers * n * 3 * h * f * 2  # gate_up (2f x h) and down (h x f) per expert, bf16
    local = sum(getattr(p, "_local_tensor", p).numel() * 2 for p in report.model.module.parameters())
    rows = _scenario(data, "train")["communication"]["collectives"]
    dense = [r for r in rows if r["module"] == "(DDP gradient buckets)"]
    moe = [r for r in rows if r["module"] == "(DDP gradient buckets: experts)"]
    assert sum(r["bytes"] * r["calls"] for r in dense) == local - experts
    assert {r["group_size"] for r in dense} == {layout.dp}
    # what a rank of the job holds of the traced rank's parameters (memory still counts them all: said as estimated)
    held = (local - experts + experts / layout.ep) / local
    assert data["distributed"]["held_share"] == pytest.approx(held)
    assert any(f"about {held:.0%} of them" in e for e in data["distributed"]["estimated"])
    if expert_group is None:
        assert moe == []
    else:
        assert sum(r["bytes"] * r["calls"] for r in moe) == experts // layout.ep
        assert {r["group_size"] for r in moe} == {expert_group}


def test_fsdp_copy_in_is_a_copy_of_the_shard(tmp_path: Path) -> None:
    """fsdp::all_gather_copy_in copies the rank's shard into its slice of the all-gather buffer: shard read + shard
    written, no FLOPs (it was costed over the whole buffer, three times the traffic, with a FLOP per element)."""
    _, data = _audit(tmp_path, TINY_LLAMA, "train:batch=1,seq=16", "dp=2,zero=3")
    op = next(o for o in data["ops"] if o["op"] == "fsdp::all_gather_copy_in")
    gathers = [r for r in _scenario(data, "train")["communication"]["collectives"] if r["kind"] == "all_gather"]
    assert op["calls"] == sum(r["calls"] for r in gathers)  # one copy-in per all-gather
    assert {r["bytes"] for r in gathers} == {LAYER * 2, ROOT_PARAMS * 2}  # gathered units, bf16
    shards = sum(r["bytes"] * r["calls"] for r in gathers) // 2  # this rank's half of each gathered unit
    assert op["flops"] == 0.0 and op["bytes"] == 2 * shards


def test_overlappable_communication_hides_within_the_whole_step_and_only_the_rest_extends_it(tmp_path: Path) -> None:
    """DDP's bucketed all-reduce on a small host-bound step: it runs in the step's idle gaps as well as beside its
    kernels, so the step grows by what is exposed plus what outlasts the whole wall, never by overlap that fits."""
    _, data = _audit(tmp_path, TINY_LLAMA, "train:batch=1,seq=32", "dp=4")
    by_chip = _scenario(data, "train")["communication"]["by_chip"]
    for b in by_chip.values():
        spill = max(0.0, b["overlappable_s"] - b["wall_s"])
        assert b["step_s"] == pytest.approx(b["wall_s"] + b["exposed_s"] + spill)
        assert b["added_s"] == pytest.approx(b["step_s"] - b["wall_s"])
        assert b["hidden"] == (b["overlappable_s"] <= b["wall_s"])
        assert b["compute_s"] < b["wall_s"]  # host-bound: the wall, not the kernels, is what the stream runs beside
    text = " ".join(data_text(tmp_path))
    summary = text[text.index("Rank 0 of 4"):][:300]  # the line wraps at the report's width
    assert "fits within the" in summary and "the step unchanged" in summary


def data_text(tmp_path: Path) -> list[str]:
    """The text summary of the same audit, line by line."""
    from click.testing import CliRunner

    from npuport.cli.main import cli

    cfg = tmp_path / "config.json"
    res = CliRunner().invoke(cli, ["audit", "--hf", str(cfg), "--scenario", "train:batch=1,seq=32", "--parallel",
                                   "dp=4", "--quiet"])
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()


def test_ep_with_zero_says_the_expert_gathers_are_overstated(tmp_path: Path) -> None:
    _, data = _audit(tmp_path, OLMOE, "train:batch=1,seq=32", "dp=4,ep=2,zero=3")
    notes = data["distributed"]["estimated"]
    assert any("ep=2 with zero=3" in n and "overstated" in n for n in notes)
    assert not any("about 100%" in n for n in notes)


def test_a_zero_2_trains_memory_does_not_depend_on_the_scenario_traced_before_it(tmp_path: Path) -> None:
    """FSDP2 with reshard_after_forward=False keeps parameters gathered after an inference forward: each scenario
    now starts from the sharded parameters, as a step does, so a decode traced first changes nothing of train's."""
    def train_memory(scenarios: tuple[str, ...]) -> dict[str, Any]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(TINY_LLAMA))
        _, data = api.audit(api.ModelSpec(hf_config=str(path)), api.AuditOptions(scenarios=scenarios, parallel="dp=2,zero=2"))
        return _scenario(data, "train")["memory"]

    alone = train_memory(("train:batch=1,seq=32",))
    after = train_memory(("decode:batch=1,past=32", "train:batch=1,seq=32"))
    for key in ("weights_bytes", "grads_bytes", "optimizer_states_bytes", "held_bytes", "peak_bytes"):
        assert after[key] == alone[key], key
