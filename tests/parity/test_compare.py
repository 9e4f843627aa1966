"""Matching, absolute and relative verdicts, and results that say which tolerance would have passed."""

from __future__ import annotations

import torch

from npuport.parity.compare import compare
from npuport.parity.entries import Capture, Entry
from npuport.parity.tolerances import load_tolerances


def cap(tensors: dict[str, torch.Tensor], mode: str = "full") -> Capture:
    entries, full = [], {}
    for i, (key, t) in enumerate(tensors.items()):
        module = key.split("#")[0]
        entries.append(Entry(f"{key}#0:out", module, 0, "out", "", tuple(t.shape), str(t.dtype).removeprefix("torch."), i, i))
        full[i] = t
    c = Capture(mode, entries, full, {}, {}, [], None)
    if mode == "stats":
        c.stats = {b: c.stats_of(b) for b in full}
        c.full = {}
    return c


TOL = load_tolerances()


def test_tolerance_file_loads_with_every_dtype():
    for d in ("float32", "float16", "bfloat16", "float64", "integer", "float32-tf32"):
        assert TOL.by_dtype[d].source
    assert TOL.key_for("int64") == "integer" and TOL.with_overrides(tf32=True).key_for("float32") == "float32-tf32"


def test_unmatched_entries_are_listed_and_fail():
    a = cap({"x": torch.ones(3), "only_ref": torch.ones(1)})
    b = cap({"x": torch.ones(3), "only_dev": torch.ones(1)})
    res = compare(a, b, TOL)
    assert res.ref_only == ["only_ref#0:out"] and res.dev_only == ["only_dev#0:out"]
    assert not res and "one side only" in str(res)
    assert compare(a, b, TOL, allow_unmatched=True)


def test_absolute_verdict_text_names_passing_tolerance():
    torch.manual_seed(0)
    x = torch.randn(1000)
    res = compare(cap({"m": x}), cap({"m": x * 1.001}), TOL)
    r = res.results[0]
    assert not r and not res
    assert "rel_l2 0.001 > 0.0001 [float32]" in r.reason
    assert "would pass with rel_l2 <= 0.001" in r.would_pass
    ok = compare(cap({"m": x}), cap({"m": x * (1 + 1e-6)}), TOL)
    assert ok and ok.results[0] and str(ok).startswith("PASS")


def test_dtype_mismatch_fails():
    x = torch.randn(10)
    res = compare(cap({"m": x}), cap({"m": x.double()}), TOL)
    assert not res and "dtype float64 vs reference float32" in res.results[0].reason


def test_integers_must_match_exactly():
    ids = torch.arange(10)
    assert compare(cap({"m": ids}), cap({"m": ids}), TOL)
    other = ids.clone()
    other[3] = 99
    assert not compare(cap({"m": ids}), cap({"m": other}), TOL)


def _bf16_drift(golden: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (golden * (1 + scale * torch.randn(golden.shape, generator=g, dtype=torch.float64))).to(torch.bfloat16)


def test_relative_verdict_separates_worse_device_from_common_drift():
    torch.manual_seed(0)
    golden = torch.randn(4096, dtype=torch.float64)
    ref = _bf16_drift(golden, 1e-2, 1)        # the baseline drifts as bf16 does
    similar = _bf16_drift(golden, 1.2e-2, 2)  # the dev drifts about as much: pass
    worse = _bf16_drift(golden, 6e-2, 3)      # the dev drifts 6x as much: fail
    g = cap({"m": golden})
    ok = compare(cap({"m": ref}), cap({"m": similar}), TOL, golden=g)
    assert ok and ok.relative
    r = ok.results[0]
    assert r.golden is not None and r.golden.ratio < 3 and "would pass with k >=" in r.would_pass
    bad = compare(cap({"m": ref}), cap({"m": worse}), TOL, golden=g)
    rb = bad.results[0]
    assert not bad and rb.golden.ratio > 3 and "> 3 x max(reference's" in rb.reason
    # the same pair judged without a golden passes the absolute bf16 threshold: only the golden catches it
    assert compare(cap({"m": ref}), cap({"m": worse}), TOL.with_overrides(rel_l2=0.1))


def test_relative_verdict_floor_and_nan():
    golden = torch.linspace(1, 2, 100, dtype=torch.float64)
    exact = golden.to(torch.float32)
    near = exact * (1 + 5e-7)
    assert compare(cap({"m": exact}), cap({"m": near}), TOL, golden=cap({"m": golden}))  # floor 1e-6, ref error ~0
    broken = exact.clone()
    broken[0] = float("nan")
    res = compare(cap({"m": exact}), cap({"m": broken}), TOL, golden=cap({"m": golden}))
    assert not res and "NaN/Inf" in res.results[0].reason


def test_stats_basis_when_one_side_is_stats_only():
    torch.manual_seed(0)
    x = torch.randn(5000)
    res = compare(cap({"m": x}, mode="stats"), cap({"m": x * 1.05}), TOL)
    assert res.results[0].metrics.basis == "stats" and not res
    assert compare(cap({"m": x}, mode="stats"), cap({"m": x.clone()}), TOL)
