"""The measured chips' numbers in mappings/timing.yaml are what scripts/fit_timing.py gets from the committed
calibrations (docs/measured/h200-calibration.json, h100-calibration.json), not hand-tuned: refitting gives them back
to their printed precision."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from npuport.mappings import load_checked

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("chip, calibration", [("H200", "h200-calibration.json"), ("H100-SXM", "h100-calibration.json")])
def test_classes_are_the_fit_of_the_committed_calibration(chip: str, calibration: str) -> None:
    spec = importlib.util.spec_from_file_location("fit_timing", ROOT / "scripts" / "fit_timing.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = json.loads((ROOT / "docs" / "measured" / calibration).read_text())
    assert data["chip"] == chip
    fitted = mod.fit(data)
    h200 = load_checked("timing.yaml")["chips"][chip]
    assert set(h200["classes"]) == set(fitted) - {"_gap", "_host"}
    for cls, rates in h200["classes"].items():
        for key in ("compute", "memory", "fixed_s"):
            assert rates[key] == pytest.approx(fitted[cls][key], rel=0.02, abs=1e-9), (cls, key)
    assert h200["kernel_gap_s"] == pytest.approx(fitted["_gap"]["kernel_gap_s"], rel=0.02)
    # the host's extra cost per class (in tiny adds), printed to two significant digits
    extra = h200["host"]["class_extra"]
    assert set(extra) == set(fitted["_host"])
    for cls, v in extra.items():
        assert v == pytest.approx(fitted["_host"][cls], rel=0.06, abs=0.006), cls


@pytest.mark.slow
def test_h200_compile_host_costs_are_the_fit_of_the_committed_compiled_profiles() -> None:
    """timing.yaml's compile_graph_s / compile_kernel_s are what `profile_check.py --fit-compile` gets from the
    committed calibration and TinyLlama's compiled decode (docs/measured/profiles-compile)."""
    spec = importlib.util.spec_from_file_location("profile_check", ROOT / "scripts" / "profile_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    measured = ROOT / "docs" / "measured" / "profiles-compile"
    graph_s, kernel_s = mod.fit_compile(measured, "tinyllama-1.1b", "H200", measured / "compile-host-run1.json")
    host = load_checked("timing.yaml")["chips"]["H200"]["host"]
    assert host["compile_graph_s"] == pytest.approx(graph_s, rel=0.01)
    assert host["compile_kernel_s"] == host["compile_extern_s"] == pytest.approx(kernel_s, rel=0.01)
