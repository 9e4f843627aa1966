"""Static parsing of native_functions.yaml, checked against a fixture and against the live torch dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from npuport.coverage.dispatch_tables import CEA, CEANF, CIA, parse_native_functions
from tests.coverage.conftest import TORCH_NATIVE_FUNCTIONS


def test_rules_on_a_fixture():
    t = parse_native_functions(TORCH_NATIVE_FUNCTIONS)
    assert t.keys["rms_norm"] == {CIA}  # no dispatch section
    assert t.keys["_nested_thing"] == frozenset()  # explicit empty dispatch: no kernel
    assert t.keys["mm"] == {CEANF, "CPU", "CUDA"} and t.structured_delegate["mm"] == "mm.out"
    assert {"CPU", "CUDA"} <= t.keys["add.out"]  # ufunc_inner_loop generates CPU/CUDA kernels
    assert t.keys["zeros_like.out"] == {CEA}  # autogen
    assert t.category("rms_norm") == "implicit"
    assert t.category("gelu") == "delegate"
    assert t.category("zeros_like") == "explicit"
    assert t.category("isin.Tensor_Tensor_out") == "cpu"
    assert t.category("_scaled_dot_product_flash_attention") == "none"


_KEYS = (CIA, CEA, CEANF, "CPU")


def _live(qualified: str) -> set[str]:
    out = set()
    for key in _KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
            out.add(key)
    return out


def test_static_tables_match_the_live_dispatcher():
    """Every aten overload known to both must agree on the four keys the decisions use."""
    import torchgen

    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.is_file():
        pytest.skip("this torch ships no torchgen/packaged native_functions.yaml")
    tables = parse_native_functions(path.read_bytes())
    live = {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    common = sorted(live & set(tables.keys))
    assert len(common) > 0.99 * len(live)
    mismatches = {}
    for name in common:
        static = {k for k in tables.keys[name] if k in _KEYS}
        got = _live(f"aten::{name}")
        if static != got:
            mismatches[name] = (sorted(static), sorted(got))
    assert not mismatches, list(mismatches.items())[:10]
