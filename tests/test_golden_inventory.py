"""The shipped GPT example's inventory is pinned (regenerate with scripts/regen_golden.py, review the diff)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _regen():
    spec = importlib.util.spec_from_file_location("regen_golden", ROOT / "scripts" / "regen_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpt_inventory_matches_golden():
    regen = _regen()
    from npuport.api import audit_model

    _, data = audit_model(**regen.GOLDENS["gpt_inventory.json"])
    got = regen.golden_view(data)
    want = json.loads((ROOT / "tests" / "golden" / "gpt_inventory.json").read_text())
    assert got == want


def test_golden_hand_checks():
    """A few golden numbers checked by hand against the architecture (d=768, 12 layers, vocab 50304)."""
    want = json.loads((ROOT / "tests" / "golden" / "gpt_inventory.json").read_text())
    addmm = want["ops"]["aten::addmm"]["prefill"]
    # 4 biased Linears per block x 12 blocks; per token 2*(768*2304 + 768*768 + 768*3072 + 3072*768) FLOPs
    assert addmm["calls"] == 48
    assert addmm["flops"] == 2 * 1024 * 12 * (768 * 2304 + 768 * 768 + 768 * 3072 + 3072 * 768)
    lm_head = want["ops"]["aten::mm"]["decode"]
    assert lm_head["calls"] == 1 and lm_head["flops"] == 2 * 768 * 50304
    assert want["ops"]["aten::native_layer_norm"]["prefill"]["calls"] == 25
