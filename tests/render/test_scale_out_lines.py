"""The summary's scale-out lines: communication that does not hide gets the suggestions that fit its layout (the
JSON's `by_chip[chip].to_hide`, npuport.audit.comm_stage.to_hide), never a fixed list, and the rank's line names the
weights tensor parallel leaves whole (`distributed.unsharded`)."""

from __future__ import annotations

import copy
from typing import Any

from npuport.render.audit_doc import _comm_line, comm_actions

CHIP = "Ascend910B"


def _data(to_hide: list[str], unsharded: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    b = {"bytes": 1e9, "communication_s": 0.03, "exposed_s": 0.0, "overlappable_s": 0.03, "compute_s": 0.01,
         "hidden": False, "compute_to_communication": 0.33, "step_s": 0.05, "to_hide": to_hide}
    return {"chip": CHIP, "scenarios": [{"name": "train", "communication": {"collectives": [], "by_chip": {CHIP: b}}}],
            "distributed": {"rank": 0, "world_size": 8, "layout": "dp=8", "unsharded": unsharded or []}}


def test_communication_action_prints_the_layouts_suggestions() -> None:
    hide = ["larger batches per rank (more compute behind the same bytes)",
            "gradient accumulation over micro-batches (one gradient reduction per several micro-batches)"]
    (act,) = comm_actions(_data(hide))
    assert act.tier == 2 and act.share == (0.03 - 0.01) / 0.05
    assert act.fix == "30 ms to overlap against 10 ms of compute: " + "; ".join(hide)
    assert "ZeRO-2" not in act.line() and "fewer data-parallel ranks" not in act.line()
    (zero3,) = comm_actions(_data(hide + ["ZeRO-2 instead of 3 (zero=2: parameters kept gathered after forward, "
                                          "no all-gather in backward)"]))
    assert "ZeRO-2 instead of 3" in zero3.fix
    (bare,) = comm_actions(_data([]))  # a report without suggestions: the times alone
    assert bare.fix == "30 ms to overlap against 10 ms of compute"


def test_rank_line_names_the_weights_tensor_parallel_leaves_whole() -> None:
    rows = [{"module": "model.layers.*.mlp.experts", "type": "OlmoeExperts", "bytes": 3 * 2**30, "plan_keys": [],
             "share": 0.75},
            {"module": "lm_head", "type": "Linear", "bytes": 2**30, "plan_keys": [], "share": 0.25}]
    line = _comm_line(_data([], rows))
    assert line is not None and line.endswith("tensor parallel leaves 4.0 GiB (100%) of the weights whole on every "
                                              "rank: model.layers.*.mlp.experts, lm_head")
    plain = _comm_line(_data([]))
    assert plain is not None and "whole on every rank" not in plain
    data = copy.deepcopy(_data([]))
    del data["distributed"]["unsharded"]  # a JSON from before the field: nothing said
    assert "whole" not in (_comm_line(data) or "")
