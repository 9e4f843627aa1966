"""Fusion advice in a torch.compile step is held against the kernels Inductor makes (npuport.cost.fused), not against
the eager launches: a chain inside one generated kernel saves nothing; a chain across extern calls saves launches
counted against the compiled kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from npuport.cost.inventory import build_inventory
from npuport.cost.roofline import get_chip
from npuport.fusion.advice import advise
from npuport.trace.run import new_fake_mode, trace_module
from tests.fusion.test_patterns import Fn, rms

CONFIGS = Path(__file__).resolve().parent.parent.parent / "examples" / "configs"
CHIP = get_chip("Ascend910B")


def _advice(fn, shapes, params=(), mode="compile"):
    fake = new_fake_mode()
    with fake:
        m = Fn(fn, *params, dtype=torch.float16)
    trace = trace_module(m, lambda: (tuple(torch.randn(*s, dtype=torch.float16) for s in shapes), {}), mode=fake)
    inv = build_inventory({"prefill": trace}, CHIP, frozenset(), modes={"prefill": mode})
    compiled = {"prefill": (mode, inv.compiled_kernels("prefill"))} if mode != "eager" else None
    return [a for a in advise({"prefill": trace}, CHIP, None, compiled) if a.pattern != "sdpa"]


@pytest.mark.parametrize("mode", ["compile", "reduce-overhead"])
def test_a_norm_inside_one_generated_kernel_saves_nothing(mode):
    (eager,) = _advice(lambda x, w: rms(x, w), [(2, 8, 64)], [(64,)], mode="eager")
    (comp,) = _advice(lambda x, w: rms(x, w), [(2, 8, 64)], [(64,)], mode=mode)
    assert eager.pattern == comp.pattern == "rms_norm" and eager.launches_saved > 0 and eager.unfused_s > eager.fused_s
    assert (comp.launches_saved, comp.bytes_saved, comp.unfused_s - comp.fused_s) == (0, 0, 0.0)
    assert comp.status == eager.status and comp.note == eager.note and eager.compiled is None and comp.compiled
    assert comp.compiled.startswith(f"torch.compile (mode={mode}) already fuses this chain into its generated kernel")


def test_attention_across_its_gemms_saves_the_launches_left_after_inductor():
    def attn(q, k, v, mask):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.125 + mask
        return torch.matmul(torch.softmax(s, dim=-1), v)
    shapes = [(1, 4, 16, 32), (1, 4, 16, 32), (1, 4, 16, 32), (1, 1, 16, 16)]
    (eager,) = _advice(attn, shapes, mode="eager")
    (comp,) = _advice(attn, shapes)
    assert eager.pattern == comp.pattern == "unfused_attention"
    # compiled: the two GEMMs (extern) and one generated kernel for scale, mask and softmax between them
    assert comp.launches_saved == 2 < eager.launches_saved
    assert comp.bytes_saved == eager.bytes_saved and comp.unfused_s == eager.unfused_s
    assert comp.compiled is not None and "runs as 3 kernels" in comp.compiled and comp.note == eager.note


def test_the_audit_holds_each_scenario_against_its_own_mode():
    pytest.importorskip("transformers")
    from npuport.api import audit_model

    _, data = audit_model(hf_config=str(CONFIGS / "gpt2.json"), scenarios=["prefill:seq=64,mode=compile", "train:batch=1,seq=64"])
    rows = {(r["scenario"], r["pattern"]): r for r in data["fusions"]}
    pre, train = rows[("prefill", "add_layer_norm")], rows[("train", "add_layer_norm")]
    assert pre["launches_saved"] == 0 and pre["time_saved_s"] == 0 and "mode=compile" in pre["compiled"]
    assert train["launches_saved"] > 0 and train["time_saved_s"] > 0 and train["compiled"] is None
    assert not pre["note"] and not train["note"]


def test_a_compiled_scenario_neither_picks_the_route_nor_asks_for_a_model_change():
    """The route of a chain is scored on an eager scenario's row when there is one (a compiled row saves nothing
    against Inductor and would make eager win everywhere), and the compiled text is not a model change."""
    pytest.importorskip("transformers")
    from npuport.api import audit_model
    from npuport.render.audit_doc import _fusion_actions

    cfg = str(CONFIGS / "tinyllama-1.1b.json")
    _, mixed = audit_model(hf_config=cfg, scenarios=["train:batch=1,seq=64", "decode:past=64,mode=reduce-overhead"])
    _, eager = audit_model(hf_config=cfg, scenarios=["train:batch=1,seq=64", "decode:past=64"])
    pick = lambda data: {(r["target"], r["module"]): r["recommended"] for r in data["routes"] if r["kind"] == "fusion"}  # noqa: E731
    assert pick(mixed) and pick(mixed) == {k: v for k, v in pick(eager).items() if k in pick(mixed)}
    assert any(v != "eager" for v in pick(mixed).values())
    _, gpt = audit_model(hf_config=str(CONFIGS / "gpt2.json"), attn="eager", scenarios=["prefill:seq=64,mode=compile"])
    assert any(r["compiled"] and r["time_saved_s"] > 0 for r in gpt["fusions"])  # unfused attention across its GEMMs
    assert not any("after a model change" in a.fix for a in _fusion_actions(gpt))
