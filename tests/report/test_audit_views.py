"""The audit's views: the answer first, text that fits 80 and 120 columns without cutting a cell, markdown that
carries everything the JSON carries, and snapshots of every format for the shipped GPT example (regenerate with
`python scripts/regen_golden.py` after an intended change, and review the diff)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from npuport.api import audit_model
from npuport.render.audit_csv import render_csv
from npuport.render.audit_doc import build
from npuport.render.audit_markdown import render_markdown
from npuport.render.audit_text import render_summary, render_text

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "report"


def text_view(data: dict[str, Any], width: int, **kw: Any) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    render_text(data, console, **kw)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def views(data: dict[str, Any]) -> dict[str, str]:
    """Every format of one audit, as regen_golden.py writes them."""
    return {"gpt.80.txt": text_view(data, 80), "gpt.120.txt": text_view(data, 120), "gpt.md": render_markdown(data),
            "gpt.csv": render_csv(data)}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    _, d = audit_model(model=str(ROOT / "examples" / "gpt" / "model.py"))
    return json.loads(json.dumps(d))


@pytest.mark.parametrize("width", [80, 120])
def test_text_fits_the_terminal_and_cuts_nothing(data: dict[str, Any], width: int) -> None:
    text = text_view(data, width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    for op in [o["op"] for o in data["ops"] if o["kind"] == "compute"][:30]:
        assert op in text  # op names are never folded


def test_the_answer_comes_first_and_fits_a_screen(data: dict[str, Any]) -> None:
    console = Console(record=True, width=80, file=io.StringIO(), color_system=None)
    render_summary(data, console)
    first = console.export_text().splitlines()
    assert len(first) <= 25
    head = "\n".join(first)
    assert "Runs on torch_npu" in head and "Computes differently?" in head and "Top actions" in head
    assert "A100-SXM-80GB (from)" in head and "Ascend910B (target)" in head
    full = text_view(data, 120)
    assert full.index("Top actions") < full.index("Operator inventory")
    # the warnings (risk) rank before the fusions (time)
    items = build(data)[0].items
    # risk first: every behaviour finding before the first fusion (which then go by the time they save)
    kinds = ["fuse" if i.startswith("fuse ") else "finding" for i in items]
    assert kinds[0] == "finding" and "fuse" in kinds and kinds.index("fuse") > max(k for k, v in enumerate(kinds) if v == "finding")


def test_markdown_carries_everything_the_json_does(data: dict[str, Any]) -> None:
    md = render_markdown(data)
    for f in data["findings"]:
        assert f["id"] in md and f["fix"].replace("|", "\\|") in md
        for ev in f["evidence"]:
            assert ev["op"] in md
    for r in data["fusions"]:
        assert r["module"] in md and r["pattern"] in md
    for r in data["routes"]:
        assert r["target"] in md
        for c in r["candidates"]:
            assert f"{c['score']:.2f}" in md
    for m in data["modules"]:
        assert m["module"] in md
    for chip in data["scenarios"][0]["estimated_time_s_by_chip"]:
        assert chip in md
    for o in data["ops"]:
        assert o["op"] in md
        for sc in o["scenarios"].values():
            for sh in sc["shapes"]:
                assert sh["inputs"] in md
    for line in data["notes"] + data["assumptions"]:
        assert line.replace("|", "\\|") in md
    for status in data["coverage"]["by_status"]:
        assert status in md
    assert "--format" not in md  # terminal hints stay in the terminal


def _normalized(text: str) -> str:
    """Versions and the checkout's absolute path (the JSON keeps full source paths) do not belong to a snapshot."""
    text = re.sub(r"npuport \d+\.\d+\.\d+\S*|torch \d+\.\d+\.\d+\S*", "<version>", text)
    return re.sub(r"(?:/[^/\s,;|]+)+/(examples/)", r"<root>/\1", text)


@pytest.mark.parametrize("name", ["gpt.80.txt", "gpt.120.txt", "gpt.md", "gpt.csv"])
def test_snapshots(data: dict[str, Any], name: str) -> None:
    want = (GOLDEN / name).read_text(encoding="utf-8")
    assert _normalized(views(data)[name]) == _normalized(want), f"regenerate with python scripts/regen_golden.py: {name}"


def test_fusion_actions_are_one_per_code_site() -> None:
    """One change at one line is one action: its rows in several modules add up, in the scenario where it saves most."""
    from npuport.render.audit_doc import actions

    def row(scenario: str, module: str, matches: int, saved: float, source: str | None, note: str = "") -> dict:
        return {"pattern": "add_rms_norm", "status": "proposed", "replacement": {"op": "npu::npu_add_rms_norm"},
                "scenario": scenario, "module": module, "matches": matches, "time_saved_s": saved,
                "sources": [source] if source else [], "note": note}

    norm = "/x/modeling_llama.py:66"
    data = {"scenarios": [{"name": "prefill", "estimated_time_s": 1.0}, {"name": "decode", "estimated_time_s": 0.1}],
            "fusions": [row("prefill", "model.layers.*.post_attention_layernorm", 32, 0.02, norm),
                        row("prefill", "model.layers.*.input_layernorm", 31, 0.02, norm, note="needs a model change"),
                        row("prefill", "model.norm", 1, 0.001, norm),
                        row("decode", "model.layers.*.post_attention_layernorm", 32, 0.004, norm),
                        row("prefill", "a.b", 2, 0.001, None), row("prefill", "a.c", 2, 0.001, None)]}
    got = [(a.what, a.where, a.fix) for a in actions(data)]
    assert got[0] == ("fuse add_rms_norm x64 into npu::npu_add_rms_norm", "modeling_llama.py:66",
                      "saves 41 ms per prefill step (4.1%), after a model change (see Fusion opportunities)")
    # no source to name: the module is the site, and two modules stay two actions
    assert sorted(w for _, w, _ in got[1:]) == ["a.b", "a.c"]


def test_scenarios_no_single_change_fits_share_one_action() -> None:
    from npuport.render.audit_doc import memory_actions

    def sc(name: str, peak_gib: float, fits: bool, changes: list[dict]) -> dict:
        return {"name": name, "memory": {"peak_bytes": int(peak_gib * 2**30), "changes": changes,
                                         "fit": [{"chip": "Ascend910B", "fits": fits, "usable_bytes": 60 * 2**30}]}}

    tp2 = {"change": "tensor parallel degree 2", "peak_bytes": 44 * 2**30, "fits": True, "extra_time_s": 0.0}
    data = {"chip": "Ascend910B", "scenarios": [sc("train", 615.9, False, [{"change": "recompute", "peak_bytes": 400 * 2**30,
                                                                            "fits": False, "extra_time_s": 1.0}]),
                                                 sc("prefill", 88.6, False, [tp2]), sc("decode", 1251.8, False, []),
                                                 sc("tiny", 10.0, True, [])]}
    got = [(a.what, a.fix) for a in memory_actions(data)]
    assert got[0] == ("the prefill step needs 88.6 GiB, 60.0 GiB usable", "tensor parallel degree 2 (44.0 GiB)")
    assert got[1] == ("the train and decode steps need 615.9 GiB / 1251.8 GiB, 60.0 GiB usable",
                      "no single change found (see Memory); even with every byte sharded evenly: at least 11 / 21 devices")
    assert len(got) == 2  # the scenario that fits asks for nothing


def test_a_host_bound_eager_step_gets_its_graph_mode_time_and_an_action(data: dict[str, Any]) -> None:
    """An eager step whose host outruns its device (the small GPT's prefill and decode on the 910B) carries the same
    calls simulated as one captured graph, with the APIs that capture it there; a device-bound step carries none.
    The summary lists the saving as one action, and the NPU has no graph class for a training step."""
    from npuport.audit.json_form import _graph_how

    steps = {s["name"]: s["step"] for s in data["scenarios"]}
    assert steps["train"]["bound"] == "device" and "as_graph" not in steps["train"]
    for name in ("prefill", "decode"):
        step = steps[name]
        assert step["mode"] == "eager" and step["bound"] == "host"
        graph = step["as_graph"]
        # the device's work stays; the host's per-op cost goes
        assert graph["device_s"] == pytest.approx(step["device_s"]) and graph["host_s"] < step["host_s"] / 10
        assert step["device_s"] <= graph["step_s"] < step["step_s"]
        assert graph["how"] == "NPUGraph or torch.compile: NPS040, NPS084"
    lines = [i for i in build(data)[0].items if "host-bound" in i]
    assert len(lines) == 1 and lines[0].startswith("prefill and decode are host-bound: as a graph")
    assert _graph_how("npu", "train") == "torch.compile: NPS084"
    assert _graph_how("cuda", "decode").startswith("CUDA graphs")


def test_a_host_bound_step_that_reads_values_is_not_offered_as_a_graph_as_it_is() -> None:
    """A step with host syncs (`.item()`, `nonzero`) cannot be captured as it is: the action says, for that scenario
    alone, that they must go."""
    from npuport.render.audit_doc import graph_actions

    how = "NPUGraph or torch.compile: NPS040, NPS084"
    decode = {"mode": "eager", "step_s": 0.05, "host_s": 0.05, "device_s": 0.01, "bound": "host", "syncs": 3,
              "as_graph": {"step_s": 0.011, "host_s": 2e-5, "device_s": 0.01, "how": how}}
    prefill = dict(decode, syncs=0, step_s=0.02, as_graph=dict(decode["as_graph"], step_s=0.015))
    (act,) = graph_actions({"scenarios": [{"name": "prefill", "step": prefill}, {"name": "decode", "step": decode}]})
    assert act.what == "prefill and decode are host-bound" and act.share == pytest.approx(0.78)
    assert act.fix.endswith("prefill 20 ms -> 15 ms, decode 50 ms -> 11 ms once its 3 host syncs are gone")
    decode["syncs"] = 1
    (act,) = graph_actions({"scenarios": [{"name": "decode", "step": decode}]})
    assert act.fix.endswith("once its 1 host sync is gone")
    del decode["syncs"]
    (act,) = graph_actions({"scenarios": [{"name": "decode", "step": decode}]})
    assert "sync" not in act.fix
