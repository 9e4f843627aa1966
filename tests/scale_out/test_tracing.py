"""One rank of a distributed job traced on fake tensors under torch's fake process group: the collectives the program
really issues, with their bytes counted by hand from the model's sizes (docs/scale-out.md)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from click.testing import CliRunner
from rich.console import Console

from npuport import api
from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model.distributed import fake_world, parse_layout
from npuport.render.audit_text import render_text
from npuport.trace.collectives import describe, is_collective

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"

TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}


def _rows(data: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    sc = next(s for s in data["scenarios"] if s["name"] == scenario)
    return sc["communication"]["collectives"]


def _count(rows: list[dict[str, Any]], kind: str, phase: str) -> Counter:
    """bytes -> calls for one kind and phase."""
    out: Counter = Counter()
    for r in rows:
        if r["kind"] == kind and r["phase"] == phase:
            out[r["bytes"]] += r["calls"]
    return out


def test_model_file_parallelize_fsdp2_and_tensor_parallel_hand_counted() -> None:
    """examples/gpt's parallelize(): world 4 = tensor parallel over pairs (MLP fc colwise, proj rowwise) x FSDP2 over
    2. GPTConfig: d 768, 12 blocks, vocab 50304, 1024 positions, fp32, lm_head tied to wte."""
    _, data = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=("train:batch=1,seq=32",), world_size=4,
                                                                         chip="Ascend910B"))
    d = 768
    block = {"ln_1": 2 * d, "attn.qkv": d * 3 * d + 3 * d, "attn.proj": d * d + d, "ln_2": 2 * d,
             "mlp.fc (colwise: half the rows)": (d * 4 * d + 4 * d) // 2,
             "mlp.proj (rowwise: half the weight, whole bias)": (4 * d * d) // 2 + d}
    per_block = sum(block.values()) * 4  # fp32; the FSDP all-gather output is the whole (tensor-parallel-local) unit
    root = (50304 * d + 1024 * d + 2 * d) * 4  # wte (= lm_head), wpe, ln_f
    rows = _rows(data, "train")
    assert _count(rows, "all_gather", "forward") == Counter({per_block: 12, root: 1})
    assert _count(rows, "all_gather", "backward") == Counter({per_block: 12})  # the root stays gathered for backward
    assert _count(rows, "reduce_scatter", "backward") == Counter({per_block: 12, root: 1})
    tp = 1 * 32 * d * 4  # the row-parallel output (forward) and column-parallel input gradient (backward), fp32
    assert _count(rows, "all_reduce", "forward") == Counter({tp: 12})
    assert _count(rows, "all_reduce", "backward") == Counter({tp: 12})
    ag = next(r for r in rows if r["kind"] == "all_gather" and r["bytes"] == per_block and r["phase"] == "forward")
    assert ag["group_size"] == 2 and ag["module"] == "blocks.*" and ag["overlap"] is True
    tp_row = next(r for r in rows if r["kind"] == "all_reduce" and r["phase"] == "forward")
    assert tp_row["module"] == "blocks.*.mlp" and tp_row["overlap"] is False and tp_row["reduce_op"] == "sum"
    assert any("model.py" in s for s in tp_row["sources"])
    # each collective is timed on the target's and the baseline's link model, and checked against HCCL
    assert set(ag["time_s_per_call"]) == {"Ascend910B", "A100-SXM-80GB"} and ag["time_s_per_call"]["Ascend910B"] > 0
    assert ag["hccl"]["status"] == "supported"
    split = next(s for s in data["scenarios"] if s["name"] == "train")["communication"]["by_chip"]["Ascend910B"]
    assert split["exposed_s"] > 0 and split["overlappable_s"] > 0
    assert split["step_s"] >= split["compute_s"]
    assert data["distributed"]["world_size"] == 4 and data["distributed"]["how"].startswith("parallelize()")


def test_parallel_layout_on_an_hf_config_hand_counted(tmp_path: Path) -> None:
    """--parallel tp=2,dp=2,zero=3 on a tiny Llama: transformers' own tensor-parallel plan, FSDP2 per decoder layer."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    _, data = api.audit(api.ModelSpec(hf_config=str(cfg)),
                        api.AuditOptions(scenarios=("train:batch=2,seq=64", "decode:batch=2,past=64"), parallel="tp=2,dp=2,zero=3"))
    h, f, kv = 256, 512, 4 * 32
    layer = (h * h + 2 * h * kv + h * h + 3 * h * f) // 2 + 2 * h  # every projection split over tp=2; two norms whole
    root = 1000 * h * 2 + h  # embedding and lm_head (not tied), final norm
    rows = _rows(data, "train")
    assert _count(rows, "all_gather", "forward") == Counter({layer * 2: 2, root * 2: 1})  # bf16
    assert _count(rows, "reduce_scatter", "backward") == Counter({layer * 2: 2, root * 2: 1})
    assert _count(rows, "all_reduce", "forward") == Counter({2 * 64 * h * 2: 4})  # o_proj, down_proj per layer
    assert _count(rows, "all_reduce", "backward") == Counter({2 * 64 * h * 2: 10})  # q, k, v, gate, up input grads
    assert _count(_rows(data, "decode"), "all_reduce", "forward") == Counter({2 * 1 * h * 2: 4})
    # device memory holds this rank's shards: weights / (tp x dp) for the projections, / dp for the rest
    mem = next(s for s in data["scenarios"] if s["name"] == "train")["memory"]
    rotary = 2 * (32 // 2) * 4  # the rotary embedding's inv_freq and original_inv_freq buffers (fp32, whole)
    assert mem["weights_bytes"] == (2 * layer + root) * 2 // 2 + rotary
    dist_json = data["distributed"]
    assert dist_json["layout"] == "tp=2,dp=2,zero=3" and dist_json["world_size"] == 4
    assert dist_json["tp_plan"]["model.layers.*.mlp.down_proj"] == "rowwise"


def test_a_long_collectives_table_shows_its_costliest_rows_in_the_terminal(tmp_path: Path) -> None:
    """More collectives than --top lists (13 rows here, --top 12): the costliest 12 on the target, then a line saying
    how many more and how to see them; the table stays in the text report (it was moved out of it whole)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    _, data = api.audit(api.ModelSpec(hf_config=str(cfg)),
                        api.AuditOptions(scenarios=("train:batch=2,seq=64",), parallel="tp=2,dp=2,zero=3"))
    rows = _rows(data, "train")
    assert len(rows) == 13
    console = Console(width=200, record=True, file=io.StringIO())
    render_text(data, console, top=12)  # --top 12: every text table shows 12 rows (the default 30 shows all 13)
    text = console.export_text()
    lines = text[text.index("Collectives in train"):].splitlines()[3:]
    shown = lines[:lines.index(next(ln for ln in lines if "more collectives" in ln))]
    assert len(shown) == 12 and "1 more collectives (less time) not shown: --top 0 shows all" in text
    chip = data["chip"]
    totals = sorted((r["calls"] * r["time_s_per_call"][chip] for r in rows), reverse=True)
    first = max(rows, key=lambda r: r["calls"] * r["time_s_per_call"][chip])
    assert shown[0].split()[:2] == [first["kind"], first["phase"]] and totals[0] > totals[-1]


def test_layouts_that_are_estimated(tmp_path: Path) -> None:
    """DDP (dp without ZeRO), expert and pipeline parallel: communication estimated from the model's sizes; a stage
    all-reduces the gradients of its half of the parameters (it was every parameter)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    _, data = api.audit(api.ModelSpec(hf_config=str(cfg)), api.AuditOptions(scenarios=("train:batch=1,seq=32",), parallel="dp=4,pp=2"))
    rows = _rows(data, "train")
    ddp = [r for r in rows if r["module"] == "(DDP gradient buckets)"]
    params = 2 * (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 1000 * 256 * 2 + 256
    assert sum(r["bytes"] * r["calls"] for r in ddp) == params * 2 // 2 and all(r["estimated"] for r in ddp)
    assert all(r["bytes"] <= 25 * 2**20 and r["group_size"] == 4 for r in ddp)
    pp = next(r for r in rows if r["kind"] == "send_recv")
    assert pp["bytes"] == 1 * 32 * 256 * 2 and pp["calls"] == 4 and pp["estimated"]
    assert data["distributed"]["world_size"] == 8 and any("pp=2" in e for e in data["distributed"]["estimated"])


def test_bad_layouts_and_ranks_are_one_line_exit_2(tmp_path: Path) -> None:
    for args, what in ((["--parallel", "tp=2,foo=3"], "cannot read --parallel"),
                       (["--world-size", "4", "--rank", "4"], "--rank is outside the job"),
                       (["--parallel", "tp=2", "--world-size", "3"], "--world-size does not match --parallel")):
        res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "prefill:batch=1,seq=8", "--quiet", *args])
        assert res.exit_code == 2, res.output
        assert what in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    with pytest.raises(NpuportError):
        parse_layout("tp=3,dp=2,ep=4")  # ep must divide dp x tp
    cfg = tmp_path / "config.json"  # 8 heads, 4 kv heads: tp=3 splits neither (it failed inside the model, as a shape)
    cfg.write_text(json.dumps(TINY_LLAMA))
    res = CliRunner().invoke(cli, ["audit", "--hf", str(cfg), "--scenario", "prefill:batch=1,seq=8", "--quiet",
                                   "--parallel", "tp=3"])
    assert res.exit_code == 2 and res.output.startswith("error: --parallel tp=3: tp does not divide the model's num_attention_heads (8)")


def test_world_size_without_parallelize_says_so(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("import torch\n\ndef build_model():\n    return torch.nn.Linear(8, 8)\n\n"
                     "def example_inputs(scenario):\n    return (torch.randn(scenario.batch, 8),)\n")
    _, data = api.audit(api.ModelSpec(model=str(model)), api.AuditOptions(scenarios=("prefill:batch=2,seq=1",), world_size=2))
    assert any("defines no parallelize" in n for n in data["distributed"]["notes"])
    assert _rows(data, "prefill") == []
    assert not dist.is_initialized()  # the fake process group does not outlive the audit


def test_collective_descriptions_follow_nccl_tests_sizes() -> None:
    """all_gather: the gathered output; reduce_scatter and all_to_all: the input; all_reduce: the tensor."""
    import torch.distributed._functional_collectives as funcol
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Any] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if is_collective(func):
                seen.append(describe(func, args, kwargs or {}, out))
            return out

    with fake_world(4, 1), FakeTensorMode():
        x = torch.randn(8, 16)  # 512 bytes of fp32
        with Spy():
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            dist.all_gather_into_tensor(torch.empty(32, 16), x)
            dist.reduce_scatter_tensor(torch.empty(2, 16), x, op=dist.ReduceOp.AVG)
            dist.all_to_all_single(torch.empty(8, 16), x)
            dist.broadcast(x, src=0)
            funcol.all_reduce(x, "sum", dist.group.WORLD)
            funcol.all_gather_tensor(x.to(torch.bfloat16), 0, dist.group.WORLD)
    got = [(c.kind, c.nbytes, c.dtype, c.group_size, c.reduce_op) for c in seen]
    assert got == [("all_reduce", 512, "float32", 4, "max"), ("all_gather", 2048, "float32", 4, None),
                   ("reduce_scatter", 512, "float32", 4, "avg"), ("all_to_all", 512, "float32", 4, None),
                   ("broadcast", 512, "float32", 4, None), ("all_reduce", 512, "float32", 4, "sum"),
                   ("all_gather", 1024, "bfloat16", 4, None)]


def test_dtype_apart_picks_the_outermost_submodules_of_another_dtype() -> None:
    """FSDP2 gathers one dtype per wrapped module: a float32 router inside a bfloat16 layer is wrapped first."""
    from npuport.model.distributed import dtype_apart

    layer = torch.nn.Module()
    layer.attn = torch.nn.Linear(8, 8).to(torch.bfloat16)
    layer.mlp = torch.nn.Module()
    layer.mlp.gate = torch.nn.Linear(8, 4)  # float32
    layer.mlp.gate.inner = torch.nn.Linear(2, 2)  # float32 too: taken with its parent, not apart
    layer.mlp.up = torch.nn.Linear(8, 32).to(torch.bfloat16)
    assert [name for name, _ in dtype_apart(layer)] == ["mlp.gate"]
    assert dtype_apart(layer.mlp.up) == []  # one dtype: nothing apart
    # the modules already wrapped are left out, and what is left decides the main dtype
    root = torch.nn.Module()
    root.layers = torch.nn.ModuleList([layer])
    root.head = torch.nn.Linear(2, 2)  # float32, the rest of the root after the layers
    assert dtype_apart(root, skip={id(layer)}) == []


def test_zero3_wraps_a_float32_router_apart_and_gathers_it(tmp_path: Path) -> None:
    """DeepSeek-V3 keeps its router's weight in float32 in bfloat16 layers, which FSDP2 refuses as one group
    ('uniform original parameter dtype'); the router is wrapped on its own first: one more all-gather per MoE layer,
    of its float32 weight (experts x hidden x 4 bytes)."""
    h, experts = 64, 8
    cfg = {"model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": h, "intermediate_size": 128,
           "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
           "n_shared_experts": 1, "n_routed_experts": experts, "kv_lora_rank": 16, "q_lora_rank": 32,
           "qk_rope_head_dim": 8, "v_head_dim": 16, "qk_nope_head_dim": 16, "n_group": 2, "topk_group": 1,
           "num_experts_per_tok": 2, "first_k_dense_replace": 1, "max_position_embeddings": 256,
           "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _, data = api.audit(api.ModelSpec(hf_config=str(path)),
                        api.AuditOptions(scenarios=("train:batch=1,seq=32",), parallel="dp=2,zero=3"))
    assert data["failed_scenarios"] == []
    rows = _rows(data, "train")
    router = experts * h * 4  # float32 weight, gathered whole
    assert _count(rows, "all_gather", "forward")[router] == 1  # the one MoE layer's router
    assert _count(rows, "reduce_scatter", "backward")[router] == 1
    notes = data["distributed"]["notes"]
    assert any("1 submodule whose" in n and "mlp.gate" in n for n in notes), notes


def test_pipeline_stages_keep_the_collectives_of_their_own_layers(tmp_path: Path) -> None:
    """pp=2 on a 4-layer tiny Llama: the rank traces every layer, but the first stage runs layers 0-1 only, so its
    tensor-parallel all-reduces and FSDP2 gathers are those of 2 layers (and the root's), not of 4."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(TINY_LLAMA, num_hidden_layers=4)))
    spec = api.ModelSpec(hf_config=str(cfg))

    def rows(parallel: str) -> list[dict[str, Any]]:
        _, data = api.audit(spec, api.AuditOptions(scenarios=("train:batch=2,seq=64",), parallel=parallel))
        notes = data["distributed"]["notes"]
        assert ("pp=2" in parallel) == any("first pipeline stage's 2 of 4 decoder layers" in n for n in notes), notes
        return _rows(data, "train")

    h = 256
    assert _count(rows("tp=2"), "all_reduce", "forward") == Counter({2 * 64 * h * 2: 8})
    assert _count(rows("tp=2,pp=2"), "all_reduce", "forward") == Counter({2 * 64 * h * 2: 4})
    zero = rows("dp=2,zero=3,pp=2")
    gathers = [r for r in zero if r["kind"] == "all_gather" and r["phase"] == "forward"]
    assert sorted((r["module"], r["calls"]) for r in gathers) == [("", 1), ("model.layers.*", 2)]
