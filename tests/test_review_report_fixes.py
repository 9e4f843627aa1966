"""Defects a reviewer found in the audit reports: the host syncs of an MoE that reads its routing counts with
`.tolist()`, the step time of a pipeline stage told one way, the tensor-parallel note's byte sizes, and the exit code
of an audit whose every scenario failed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.cost.inventory import ReportedCall, mark_joined_reads, step_time
from npuport.cost.op_costs import CallCost
from npuport.cost.roofline import get_chip
from npuport.cost.timing import is_sync, sync_ops
from npuport.render.audit_doc import build, graph_actions
from npuport.render.fmt import fmt_time
from npuport.trace.records import TensorMeta, TensorRef

ROOT = Path(__file__).resolve().parents[1]

# the reviewer's MoE (/tmp/rv2/f5/moe.py, K=where): routing counts read with one .tolist(), then torch.where per expert
MOE = """
import torch, torch.nn as nn
E, TOPK, D = 4, 2, 64
class MoE(nn.Module):
    def __init__(s):
        super().__init__()
        s.gate = nn.Linear(D, E, bias=False)
        s.experts = nn.ModuleList([nn.Linear(D, D) for _ in range(E)])
    def forward(s, x):
        w, idx = s.gate(x).softmax(-1).topk(TOPK, dim=-1)
        y = torch.zeros_like(x)
        counts = torch.bincount(idx.flatten(), minlength=E).tolist()
        for i in range(E):
            if counts[i] == 0: continue
            tok, slot = torch.where(idx == i)
            y[tok] += s.experts[i](x[tok]) * w[tok, slot, None]
        return y
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.e = nn.Embedding(100, D); s.moe = MoE(); s.h = nn.Linear(D, 100)
    def forward(s, ids):
        return s.h(s.moe(s.e(ids).view(-1, D)))
def build_model(): return M()
def example_inputs(sc):
    return None if sc.kind == "decode" else (torch.randint(0, 100, (sc.batch, sc.seq)),)
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# --- 1. host syncs ------------------------------------------------------------------------------------------------

def _scalar_read(index: int, tensor: int, base: int | None, source: str = "moe.py:15") -> ReportedCall:
    meta = TensorMeta(tensor, (), "int64", base=base)
    return ReportedCall("aten::_local_scalar_dense", "view", "forward", "moe", "MoE", source, "Tensor.item", (meta,), (),
                        CallCost(0.0, 0, "int64", False), index, indices=(index,), args=(TensorRef(0),))


def _kernel(index: int) -> ReportedCall:
    t = TensorMeta(100 + index, (64, 64), "float32")
    return ReportedCall("aten::add.Tensor", "compute", "forward", "moe", "MoE", "moe.py:20", "Tensor.add", (t, t), (t,),
                        CallCost(4096.0, 3 * 4096 * 4, "float32", False), index, indices=(index,),
                        args=(TensorRef(0), TensorRef(1)))


def _syncs(calls: list[ReportedCall]) -> int:
    mark_joined_reads(calls)
    return step_time(calls, get_chip("Ascend910B")).syncs


def test_the_scalar_reads_of_one_tolist_are_one_sync() -> None:
    """FakeTensor.tolist reads each element with its own .item(): four reads of the elements of one tensor, nothing
    queued between them, are one device-to-host copy."""
    assert _syncs([_scalar_read(i, 13 + i, 12) for i in range(4)]) == 1


def test_reads_of_other_tensors_or_after_a_kernel_are_syncs_of_their_own() -> None:
    assert _syncs([_scalar_read(0, 1, None), _scalar_read(1, 2, None)]) == 2  # a.item(), b.item()
    assert _syncs([_scalar_read(0, 13, 12), _kernel(1), _scalar_read(2, 14, 12)]) == 2  # a kernel queued between
    assert _syncs([_scalar_read(0, 13, 12), _scalar_read(1, 14, 12, source="moe.py:16")]) == 2  # another line


def test_bincount_syncs_in_every_overload() -> None:
    """CUDA's bincount sizes its output by the input's max read on the host (SummaryOps.cu, _bincount_cuda_template);
    torch_npu's reads max(self).item() the same way."""
    assert "bincount" in sync_ops()
    t = TensorMeta(1, (128,), "int64")
    call = ReportedCall("aten::bincount", "compute", "forward", "", "", None, None, (t,), (), CallCost(0.0, 0, "int64", False),
                        0, args=(TensorRef(0),), kwargs={"minlength": 4})
    assert is_sync(call)


@pytest.fixture(scope="module")
def moe_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = _write(tmp_path_factory.mktemp("moe"), "moe.py", MOE)
    _, data = api.audit_model(model=str(path), scenarios=["prefill:batch=1,seq=64"])
    return data


def test_the_moe_step_counts_bincount_one_tolist_and_four_wheres(moe_report: dict[str, Any]) -> None:
    """bincount (its own read of the max), the .tolist() of its counts, one torch.where per expert."""
    assert moe_report["scenarios"][0]["step"]["syncs"] == 6


def test_the_graph_action_names_the_syncs_the_step_has(moe_report: dict[str, Any]) -> None:
    lines = [a.line() for a in graph_actions(moe_report)]
    assert lines and all("once its 6 host syncs are gone" in line for line in lines), lines


# --- 2. and 3. a pipeline stage's step, the tensor-parallel note -------------------------------------------------------

@pytest.fixture(scope="module")
def pp_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cfg = json.loads((ROOT / "examples" / "configs" / "tinyllama-1.1b.json").read_text())
    cfg |= {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 1000}
    path = tmp_path_factory.mktemp("pp") / "tiny-llama4.json"
    path.write_text(json.dumps(cfg))
    _, data = api.audit(api.ModelSpec(hf_config=str(path)),
                        api.AuditOptions(scenarios=("train:batch=2,seq=128",), parallel="tp=2,pp=2"))
    return data


def _doc_text(data: dict[str, Any]) -> str:
    out = []
    for sec in build(data):
        out += [sec.title, *sec.lines, sec.items_title, *sec.items, *sec.after]
        out += [t.title for t in sec.tables]
    return "\n".join(out)


def test_the_json_tells_the_traced_step_from_the_stages(pp_report: dict[str, Any]) -> None:
    sc = pp_report["scenarios"][0]
    chip = pp_report["chip"]
    b = sc["communication"]["by_chip"][chip]
    assert sc["step"]["step_s"] == pytest.approx(sc["estimated_time_s_by_chip"][chip])  # unchanged: the whole model
    assert b["traced_wall_s"] == pytest.approx(sc["step"]["step_s"])
    assert b["wall_s"] == pytest.approx(b["traced_wall_s"] / 2)
    assert b["pipeline_stages"] == 2


def test_the_whole_model_figures_are_labelled_and_the_action_takes_the_stage(pp_report: dict[str, Any]) -> None:
    sc = pp_report["scenarios"][0]
    chip = pp_report["chip"]
    stage = fmt_time(sc["communication"]["by_chip"][chip]["wall_s"])
    whole = fmt_time(sc["step"]["step_s"])
    text = _doc_text(pp_report)
    # under the step-time table, the Scenarios table and the per-chip table
    assert text.count("whole model the rank traced (every layer); a pipeline stage of pp=2 runs about 1/2 of it") >= 3, text
    action = next(a.line() for a in graph_actions(pp_report))
    assert f"train {stage} ->" in action and whole not in action and "pp=2" in action, action


def test_the_tp_note_formats_bytes_as_the_summary_does(pp_report: dict[str, Any]) -> None:
    note = next(n for n in pp_report["distributed"]["notes"] if "of the weights stay whole" in n)
    assert "e+" not in note and note.startswith("tp=2: 1.0 MiB (18%)"), note
    assert "1.0 MiB (18%) of the weights whole" in _doc_text(pp_report)


# --- 4. exit codes ----------------------------------------------------------------------------------------------------

SHORT = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.e = nn.Embedding(100, 16); s.h = nn.Linear(16, 100)
    def forward(s, ids):
        assert ids.shape[1] <= 16, "block size is only 16"
        return s.h(s.e(ids))
def build_model(): return M()
def example_inputs(sc):
    return None if sc.kind == "decode" else (torch.randint(0, 100, (sc.batch, sc.seq)),)
"""


def test_an_audit_with_nothing_traced_exits_2_and_one_beside_a_good_scenario_exits_1(tmp_path: Path) -> None:
    """2: nothing could be reported (one error line); 1: a report written with a failed scenario in it."""
    path = _write(tmp_path, "short.py", SHORT)
    alone = CliRunner().invoke(cli, ["audit", str(path), "--scenario", "prefill:batch=1,seq=64", "--quiet"])
    assert alone.exit_code == 2, alone.output
    assert [ln for ln in alone.stderr.splitlines() if ln.startswith("error:")] == alone.stderr.strip().splitlines()
    beside = CliRunner().invoke(cli, ["audit", str(path), "--scenario", "train:batch=1,seq=64",
                                      "--scenario", "prefill:batch=1,seq=8", "--quiet", "--format", "json"])
    assert beside.exit_code == 1, beside.output
    assert [f["name"] for f in json.loads(beside.stdout)["failed_scenarios"]] == ["train"]


def test_the_cli_docs_say_which_exit_code_a_failed_scenario_gives() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("## Exit codes and errors"):text.index("## Deprecated spellings")]
    assert "no scenario could be traced" in table and "beside" in table, table


def test_a_value_read_is_a_sync_in_a_compiled_step_too(tmp_path: Path) -> None:
    """Under torch.compile a .tolist() breaks the graph and waits for the device: the compiled plan keeps it as a sync
    (its reads are view-kind calls, which the plan used to drop): bincount and the tolist, in both modes."""
    model = tmp_path / "reads.py"
    model.write_text("""import torch, torch.nn as nn
E = 4
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.gate = nn.Linear(16, E); s.b = nn.Linear(16, 16)
    def forward(s, x):
        w, idx = s.gate(x).softmax(-1).topk(2, dim=-1)
        counts = torch.bincount(idx.flatten(), minlength=E).tolist()
        return s.b(x) * (1.0 + 0.0 * len(counts))
def build_model(): return M()
def example_inputs(sc): return (torch.randn(sc.batch * sc.seq, 16),)
""", encoding="utf-8")
    from npuport.api import audit_model

    steps = [audit_model(model=str(model), scenarios=[sc])[1]["scenarios"][0]["step"]
             for sc in ("prefill:batch=1,seq=8,mode=compile", "prefill:batch=1,seq=8")]
    assert [s["syncs"] for s in steps] == [2, 2], steps
