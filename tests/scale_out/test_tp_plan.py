"""Tensor parallel by transformers' plan (npuport.model.tp_plan) and the layout checks of npuport.model.distributed:
what the plan cannot split is reported (never a library warning on the terminal), transformers' own styles run,
and a layout the model cannot run is an error naming the layout."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model import tp_plan
from npuport.model.tp_plan import unresolved_in

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"

# a Qwen3-MoE (every layer sparse: its plan's mlp.gate_proj / up_proj / down_proj exist in no layer) and an OLMoE
# (q/k/v colwise_gather_output, o_proj rowwise_split_input), both tiny
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 2,
             "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 512,
             "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": []}
OLMOE = {"model_type": "olmoe", "hidden_size": 128, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 4, "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2,
         "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}


def _config(tmp_path: Path, cfg: dict[str, Any]) -> str:
    path = tmp_path / f"{cfg['model_type']}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _collectives(data: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return next(s for s in data["scenarios"] if s["name"] == scenario)["communication"]["collectives"]


def test_unresolved_is_walked_as_torch_walks_a_plan_key() -> None:
    block = torch.nn.Module()
    block.mlp = torch.nn.Module()
    block.mlp.experts = torch.nn.Linear(2, 2)
    layers = torch.nn.ModuleList([block, torch.nn.Module()])
    layers[1].mlp = torch.nn.Module()
    layers[1].mlp.gate_proj = torch.nn.Linear(2, 2)
    root = torch.nn.Module()
    root.layers = layers
    assert unresolved_in(root, "layers.*.mlp.gate_proj", "model.") == [("model.layers.0.mlp", "gate_proj")]
    assert unresolved_in(root, "layers.*.mlp.experts") == [("layers.1.mlp", "experts")]
    assert unresolved_in(root, "norm") == [("(root)", "norm")]
    assert unresolved_in(root, "layers.*.mlp") == []


def test_moe_experts_the_plan_cannot_split_are_reported_not_warned(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report, data = api.audit(api.ModelSpec(hf_config=_config(tmp_path, QWEN3_MOE)),
                                 api.AuditOptions(scenarios=("prefill:batch=1,seq=16",), parallel="tp=2"))
    assert not [w for w in caught if "could not be resolved" in str(w.message)]
    dist = data["distributed"]
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert dist["tp_unresolved"][f"model.layers.*.mlp.{name}"] == [{"module": "model.layers.*.mlp", "missing": name}]
        assert f"model.layers.*.mlp.{name}" not in dist["tp_plan"]  # applied only where it resolved
    experts = dist["unsharded"][0]
    h, f, n = 128, 64, 8
    assert experts["module"] == "model.layers.*.mlp.experts" and experts["type"] == "Qwen3MoeExperts"
    assert experts["bytes"] == 2 * n * 3 * h * f * 2  # two layers of gate_up (2f x h) and down (h x f) per expert, bf16
    assert experts["plan_keys"] == ["model.layers.*.mlp.down_proj", "model.layers.*.mlp.gate_proj",
                                    "model.layers.*.mlp.up_proj"]
    notes = " | ".join(dist["notes"])
    assert "names gate_proj, up_proj, down_proj in model.layers.*.mlp, which has no such submodule" in notes
    assert "stay whole on every rank: model.layers.*.mlp.experts (Qwen3MoeExperts" in notes
    # torch's warnings are kept for --debug
    assert any("could not be resolved" in w for w in report.comm.distributed.library_warnings)


def test_the_cli_prints_no_library_warning_and_debug_shows_them(tmp_path: Path) -> None:
    cfg = _config(tmp_path, QWEN3_MOE)
    args = ["audit", "--hf", cfg, "--scenario", "prefill:batch=1,seq=8", "--parallel", "tp=2", "--format", "json",
            "-o", str(tmp_path / "out.json")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "Warning" not in res.output and "could not be resolved" not in res.output
    debug = CliRunner().invoke(cli, [*args, "--force", "--debug"])
    assert debug.exit_code == 0 and "npuport: debug: while sharding: UserWarning: Parallelize plan key" in debug.output


def test_olmoe_rowwise_split_input_runs_as_transformers_registers_it(tmp_path: Path) -> None:
    """o_proj's input arrives whole (q/k/v gather their outputs) and is split locally: it ran as an already split
    input (Shard(-1)) before and failed in the matmul, blamed on the inputs."""
    _, data = api.audit(api.ModelSpec(hf_config=_config(tmp_path, OLMOE)),
                        api.AuditOptions(scenarios=("prefill:batch=1,seq=16",), parallel="tp=2"))
    rows = _collectives(data, "prefill")
    out = 1 * 16 * 128 * 2  # (B, S, H) bf16
    gathers = [r for r in rows if r["kind"] == "all_gather"]
    assert sum(r["calls"] for r in gathers) == 3 * 2 and {r["bytes"] for r in gathers} == {out}  # q, k, v per layer
    reduces = [r for r in rows if r["kind"] == "all_reduce"]
    assert sum(r["calls"] for r in reduces) == 2 and {r["bytes"] for r in reduces} == {out}  # o_proj per layer
    assert data["distributed"]["tp_plan"]["model.layers.*.self_attn.o_proj"] == "rowwise_split_input"


def test_a_layout_the_model_cannot_run_names_the_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    broken = {"colwise_gather_output": ColwiseParallel(), "rowwise_split_input": RowwiseParallel(input_layouts=Shard(-1))}
    monkeypatch.setattr(tp_plan, "styles", lambda: broken)  # o_proj's whole input read as a shard: a matmul error
    with pytest.raises(NpuportError) as err:
        api.audit(api.ModelSpec(hf_config=_config(tmp_path, OLMOE)),
                  api.AuditOptions(scenarios=("prefill:batch=1,seq=16",), parallel="tp=2"))
    assert err.value.what == "the model cannot run prefill laid out as --parallel tp=2"
    assert "inputs" not in err.value.what and err.value.received.startswith("RuntimeError")


@pytest.mark.parametrize("cfg, parallel, what", [
    (TINY_LLAMA, "pp=4", "--parallel pp=4: pp=4 stages for 2 decoder layers"),
    (TINY_LLAMA, "dp=2,ep=2", "--parallel dp=2,ep=2: ep=2 spreads experts, and the model has none"),
    (OLMOE, "dp=6,ep=3", "--parallel dp=6,ep=3: ep=3 does not divide the model's 8 experts"),
    (TINY_LLAMA, "tp=3", "--parallel tp=3: tp does not divide the model's num_attention_heads (8)"),
])
def test_layouts_the_model_cannot_take(tmp_path: Path, cfg: dict[str, Any], parallel: str, what: str) -> None:
    res = CliRunner().invoke(cli, ["audit", "--hf", _config(tmp_path, cfg), "--scenario", "prefill:batch=1,seq=8",
                                   "--quiet", "--parallel", parallel])
    assert res.exit_code == 2 and res.output.startswith(f"error: {what}") and len(res.output.splitlines()) == 1, res.output


def test_tp_on_a_model_file_points_to_its_own_parallelize() -> None:
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "prefill:batch=1,seq=8", "--quiet",
                                   "--parallel", "tp=2"])
    assert res.exit_code == 2 and len(res.output.splitlines()) == 1
    assert "GPT has none" in res.output and "--world-size N instead of --parallel" in res.output
    assert "or a model file with parallelize(model, device_type)" not in res.output  # GPT has one: not the advice
