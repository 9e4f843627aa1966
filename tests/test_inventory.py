"""Scenario merging, time shares, classes and bottleneck flips, on the shipped GPT example."""

from __future__ import annotations

import pytest

from npuport.api import audit_model
from npuport.cost.inventory import module_pattern


@pytest.fixture(scope="module")
def gpt(request):
    from tests.conftest import EXAMPLES

    report, data = audit_model(model=str(EXAMPLES / "gpt" / "model.py"))
    return report, data


def test_shares_sum_to_one_per_scenario(gpt):
    _, data = gpt
    for sc in data["scenarios"]:
        total = sum(o["scenarios"][sc["name"]]["time_share"] for o in data["ops"] if sc["name"] in o["scenarios"])
        assert total == pytest.approx(1.0, rel=1e-9)
    assert sum(o["time_share"] for o in data["ops"]) == pytest.approx(1.0, rel=1e-9)


def test_merged_entry_keeps_every_scenario(gpt):
    _, data = gpt
    mm = next(o for o in data["ops"] if o["op"] == "aten::addmm")
    assert set(mm["scenarios"]) == {"train", "prefill", "decode"}
    assert mm["calls"] == sum(s["calls"] for s in mm["scenarios"].values())
    assert mm["flops"] == pytest.approx(sum(s["flops"] for s in mm["scenarios"].values()))


def test_gemm_flips_from_compute_to_memory_bound_at_decode(gpt):
    _, data = gpt
    for name in ("aten::addmm", "aten::mm"):
        op = next(o for o in data["ops"] if o["op"] == name)
        assert op["scenarios"]["prefill"]["bound"] == "compute"
        assert op["scenarios"]["decode"]["bound"] == "memory"
        assert op["bound_flips"] and op["bound"] == "mixed"


def test_hot_ops_cover_the_configured_share(gpt):
    report, data = gpt
    from npuport.cost.op_costs import op_classes

    for sc in data["scenarios"]:
        rows = sorted((o["scenarios"][sc["name"]] for o in data["ops"] if sc["name"] in o["scenarios"] and o["kind"] == "compute"),
                      key=lambda r: -r["time_share"])
        hot = [r for r in rows if r["class"] == "hot"]
        assert hot and hot == rows[: len(hot)]
        assert sum(r["time_share"] for r in hot) >= op_classes().hot_share
        assert sum(r["time_share"] for r in hot[:-1]) < op_classes().hot_share
    views = [o for o in data["ops"] if o["kind"] == "view"]
    assert views and all(o["class"] == "cold" and o["flops"] == 0 and o["bytes"] == 0 for o in views)


def test_attention_is_the_native_op_not_the_cpu_variant(gpt):
    _, data = gpt
    ops = {o["op"] for o in data["ops"]}
    assert "aten::scaled_dot_product_attention" in ops
    assert not any("for_cpu" in o for o in ops)
    sdpa = next(o for o in data["ops"] if o["op"] == "aten::scaled_dot_product_attention")
    assert sdpa["calls"] == 12 * 2 + 12 + 12  # train fwd + bwd, prefill, decode
    assert sdpa["fused"]


def test_decode_is_one_token_against_the_cache(gpt):
    _, data = gpt
    dec = next(s for s in data["scenarios"] if s["name"] == "decode")
    assert (dec["batch"], dec["seq"], dec["past"]) == (1, 1, 1023)
    head = next(o for o in data["ops"] if o["op"] == "aten::mm")
    assert head["scenarios"]["decode"]["shapes"][0]["inputs"] == "1x768 768x50304"


def test_module_pattern_merges_layer_indices():
    assert module_pattern("model.layers.31.mlp.down_proj") == "model.layers.*.mlp.down_proj"
    assert module_pattern("h.0") == "h.*"
    assert module_pattern("") == "(root)"
