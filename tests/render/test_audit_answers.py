"""The summary answers the question it asks: a finding whose impact is a crash makes "Runs?" say no and names it,
"Computes differently?" counts only numeric findings, performance findings are counted apart, and an op with no NPU
kernel is a failure rather than an op that leaves the NPU at a transfer cost. The same in text, markdown, HTML and
the JSON's `answers`."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from npuport.api import audit_model
from npuport.render.answers import answers
from npuport.render.audit_doc import actions, build, summary
from npuport.render.audit_html import render_html
from npuport.render.audit_markdown import render_markdown
from npuport.render.audit_text import render_text

ROOT = Path(__file__).resolve().parents[2]

# sorted=False on the default target: NPB051 (impact crash, level error); a sort over int64 keys: NPB005
# (impact performance, level warning)
TOPK_MODEL = '''
import torch


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(16, 8)

    def forward(self, x):
        scores = self.gate(x)
        top = torch.topk(scores, 2, dim=-1, sorted=False).indices
        order = torch.sort(top.flatten()).values
        return scores.sum() + order.sum()


def build_model():
    return Router()


def example_inputs(scenario):
    if scenario.kind == "train":
        return None
    return (torch.randn(scenario.batch, scenario.seq, 16),)
'''


def _text(data: dict[str, Any], width: int = 120, top: int = 30) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    render_text(data, console, top=top)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


@pytest.fixture(scope="module")
def topk_audit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("topk") / "model.py"
    path.write_text(TOPK_MODEL)
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=1,seq=8"])
    return json.loads(json.dumps(data))


def test_a_crash_finding_says_no_and_is_not_a_numeric_difference(topk_audit: dict[str, Any]) -> None:
    findings = {f["id"]: f for f in topk_audit["findings"]}
    assert findings["NPB051"]["impact"] == "crash" and findings["NPB051"]["level"] == "error"
    got = topk_audit["answers"]
    assert got == answers(topk_audit)  # the JSON carries what every view phrases
    assert got["runs"]["answer"] == "no" and got["runs"]["failing_findings"] == ["NPB051"]
    numeric = [f["id"] for f in topk_audit["findings"] if f["impact"] == "numerics"]
    slow = [f["id"] for f in topk_audit["findings"] if f["impact"] == "performance"]
    assert sorted(got["computes_differently"]["findings"]) == sorted(numeric)
    assert "NPB051" not in got["computes_differently"]["findings"]
    assert "NPB005" in slow and sorted(got["slow_paths"]["findings"]) == sorted(slow)
    assert got["computes_differently"]["error"] == 0

    lines = summary(topk_audit).lines
    runs = next(line for line in lines if line.startswith("Runs on"))
    assert "? NO: NPB051 topk(sorted=False) is not supported" in runs and "yes" not in runs
    differs = next(line for line in lines if line.startswith("Computes differently?"))
    assert "NPB051" not in differs and "NPB005" not in differs and "0 error(s)" in differs
    slow_line = next(line for line in lines if line.startswith("Slow paths on"))
    assert "NPB005" in slow_line and f"{got['slow_paths']['warning']} warning(s)" in slow_line

    assert "Runs on torch_npu" in _text(topk_audit) and "? NO: NPB051" in _text(topk_audit)
    assert "? NO: NPB051" in render_markdown(topk_audit)
    page = render_html(topk_audit)
    tile = page[page.index('<div class="answers">'):]
    assert tile.startswith('<div class="answers"><div class="answer bad"><div class="q">Runs on torch_npu')
    assert f'<div class="answer warn"><div class="q">Slow paths on {topk_audit["chip"]}?</div>' in tile


def test_crash_warnings_put_the_run_at_risk_and_info_ones_are_notes(topk_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(topk_audit)
    f = next(x for x in data["findings"] if x["id"] == "NPB051")
    f["level"] = "warning"
    assert answers(data)["runs"]["answer"] == "at-risk"
    runs = summary(data).lines[0]
    assert "? at risk: may fail: NPB051" in runs
    assert 'class="answer warn"><div class="q">Runs on' in render_html(data)
    f["level"] = "info"
    assert answers(data)["runs"]["answer"] == "yes"
    assert summary(data).lines[0].endswith("note: NPB051 (see Behaviour differences)")


def test_findings_without_an_impact_count_as_before() -> None:
    """An old report's finding with no `impact` stays a numeric one (what the summary counted it as)."""
    data = {"coverage": None, "findings": [{"id": "NPB001", "level": "warning", "evidence": []}]}
    assert answers(data)["computes_differently"]["warning"] == 1 and answers(data)["slow_paths"]["findings"] == []


@pytest.fixture(scope="module")
def olmoe_26() -> dict[str, Any]:
    """OLMoE on torch_npu 2.6.0, whose torch has no aten::_grouped_mm (docs/coverage.md: unsupported)."""
    _, data = audit_model(hf_config=str(ROOT / "examples" / "configs" / "olmoe-1b-7b.json"),
                          scenarios=["prefill:seq=16"], torch_npu="2.6.0")
    return json.loads(json.dumps(data))


def test_an_unsupported_op_is_a_failure_not_a_transfer(olmoe_26: dict[str, Any]) -> None:
    cov = olmoe_26["coverage"]
    assert [f["op"] for f in cov["unsupported"]] == ["aten::_grouped_mm"]
    row = next(f for f in cov["cpu_fallback"] if f["op"] == "aten::_grouped_mm")  # kept for earlier readers
    assert row["status"] == "unsupported" and row["estimated_transfer_s"] == 0.0 and row["bytes_crossing_host"] == 0
    runs = olmoe_26["answers"]["runs"]
    assert runs["answer"] == "no" and runs["unsupported_ops"] == ["aten::_grouped_mm"]
    assert runs["failing_findings"] == []  # NPB041 restates the unsupported op: named once
    secs = {s.id: s for s in build(olmoe_26)}
    tables = {t.id: t for t in secs["coverage"].tables}
    assert "fallbacks" not in tables  # nothing leaves the NPU at a cost
    assert [r[0] for r in tables["unsupported"].rows] == ["aten::_grouped_mm"]
    assert tables["unsupported"].title.startswith("Ops that fail on torch_npu 2.6.0")
    text = _text(olmoe_26)
    assert "Ops that leave the NPU" not in text and "fail at run time (aten::_grouped_mm)" in text
    assert any("no NPU kernel on torch_npu 2.6.0 and fail at run time" in n for n in olmoe_26["notes"])
    top = [a.what for a in actions(olmoe_26) if "_grouped_mm" in a.what or a.what.startswith("NPB041")]
    assert top == ["aten::_grouped_mm has no kernel in torch_npu 2.6.0 (fails at run time)"]


def test_a_cpu_fallback_still_leaves_the_npu_with_its_cost(gpt_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(gpt_audit)
    data["coverage"]["cpu_fallback"].append({"op": "aten::gelu", "status": "cpu-fallback", "calls": 3, "modules": [],
                                             "sources": [], "bytes_crossing_host": 2**20,
                                             "estimated_transfer_s": 0.002, "detail": ""})
    assert answers(data)["runs"]["answer"] == "with-cpu-fallbacks"
    assert "yes, with CPU fallbacks: 1 op(s) fall back to the CPU (aten::gelu; 2 ms of host transfers per step" in \
        summary(data).lines[0]
    tables = {t.id: t for s in build(data) for t in s.tables}
    assert tables["fallbacks"].rows[0][0] == "aten::gelu" and "unsupported" not in tables


def test_a_slow_path_ranks_with_the_time_savings_and_a_crash_first(topk_audit: dict[str, Any]) -> None:
    tiers = {a.what.split()[0]: a.tier for a in actions(topk_audit) if a.what.startswith("NPB")}
    assert tiers["NPB051"] == 0 and tiers["NPB005"] == 2
