"""The chunked one-pass metrics (sweep.py) against the former whole-tensor float64 code, kept here verbatim as the
reference: random tensors of bfloat16, float16 and float32 (and mixed with float64, as against a golden), with NaN,
Inf, zeros, huge and tiny values, empty tensors and sizes that are not a multiple of the chunk."""

from __future__ import annotations

import math

import pytest
import torch

from npuport.parity import sweep as sw
from npuport.parity.metrics import _TINY, Metrics, _from_sums, stats_metrics, stats_metrics_many, tensor_metrics
from npuport.parity.stats import Stats, tensor_stats


def reference_metrics(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> Metrics:
    """tensor_metrics as it was before issue 25: both tensors in float64, every metric over the whole tensor."""
    if a.numel() == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0, 0)
    x = a.detach().reshape(-1).to(torch.float64)
    y = b.detach().reshape(-1).to(torch.float64)
    return reference_from_flat(x, y, rtol, atol, _TINY.get(str(b.dtype).removeprefix("torch."), 1e-300), "full")


def reference_from_flat(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, tiny: float, basis: str) -> Metrics:
    nan_x, nan_y = torch.isnan(x), torch.isnan(y)
    inf_x, inf_y = torch.isinf(x), torch.isinf(y)
    nan_mismatch = int((nan_x != nan_y).sum())
    inf_mismatch = int(((inf_x | inf_y) & ~(nan_x | nan_y) & (x != y)).sum())
    same_special = (nan_x & nan_y) | (inf_x & inf_y & (x == y))
    finite = torch.isfinite(x) & torch.isfinite(y)
    xf, yf = x[finite], y[finite]
    diff = (xf - yf).abs()
    n = int(finite.sum())
    if n == 0:
        return Metrics(x.numel(), 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, nan_mismatch, inf_mismatch, basis)
    nd, nb, na = float(torch.linalg.vector_norm(diff)), float(torch.linalg.vector_norm(yf)), float(torch.linalg.vector_norm(xf))
    rel_l2 = nd / nb if nb > 0 else (0.0 if nd == 0 else math.inf)
    if nd == 0 or (na == 0 and nb == 0):
        cosine = 1.0
    elif na == 0 or nb == 0:
        cosine = 0.0
    else:
        cosine = max(-1.0, min(1.0, float(torch.dot(xf, yf)) / (na * nb)))
    over = (diff > atol + rtol * yf.abs()).sum() + (~finite & ~same_special).sum()
    return Metrics(
        count=x.numel(), max_abs=float(diff.max()), max_rel=float((diff / yf.abs().clamp_min(tiny)).max()),
        rel_l2=rel_l2, cosine=cosine, rmse=nd / math.sqrt(n), frac_over_rtol=float(over) / x.numel(),
        nan_mismatch=nan_mismatch, inf_mismatch=inf_mismatch, basis=basis)


def reference_stats_metrics(a: Stats, b: Stats, rtol: float, atol: float, ref_dtype: str | None = None) -> Metrics:
    """stats_metrics as it was before issue 25 (one entry at a time)."""
    if a.count != b.count:
        return Metrics(a.count, math.inf, math.inf, math.inf, 0.0, math.inf, 1.0, 0, 0, "stats",
                       problem=f"{a.count} elements vs reference {b.count}")
    if a.count == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0, 0, "stats")
    nonfinite_mismatch = int(a.nonfinite != b.nonfinite)
    x = torch.tensor(a.sample, dtype=torch.float64)
    y = torch.tensor(b.sample, dtype=torch.float64)
    m = reference_from_flat(x, y, rtol, atol, _TINY.get(ref_dtype or "", 1e-300), "stats")
    norm_rel = abs(a.norm - b.norm) / b.norm if b.norm > 0 else (0.0 if a.norm == 0 else math.inf)
    if not (math.isfinite(a.norm) and math.isfinite(b.norm)):
        norm_rel = 0.0 if a.nonfinite and b.nonfinite else math.inf
    exact = a.checksum == b.checksum and a.row() == b.row()
    rel_l2 = 0.0 if exact else max(m.rel_l2, norm_rel)
    extra = {"norm_rel": norm_rel, "mean_abs_diff": abs(a.mean - b.mean), "max_diff": abs(a.max - b.max),
             "min_diff": abs(a.min - b.min), "checksum_equal": float(a.checksum == b.checksum)}
    return Metrics(a.count, m.max_abs, m.max_rel, rel_l2, m.cosine, m.rmse, m.frac_over_rtol,
                   max(m.nan_mismatch, nonfinite_mismatch), m.inf_mismatch, "stats", extra=extra)


TOL = {torch.bfloat16: (1.6e-2, 1e-5, 5e-2, 0.998), torch.float16: (1e-3, 1e-5, 3e-2, 0.9995),
       torch.float32: (1.3e-6, 1e-5, 1e-4, 0.99999999), torch.float64: (1e-7, 1e-7, 1e-10, 0.9999999999)}
NOISE = {torch.bfloat16: 4e-3, torch.float16: 5e-4, torch.float32: 1e-6, torch.float64: 1e-12}


def assert_same(got: Metrics, want: Metrics, dtype: torch.dtype) -> None:
    """Counts exactly; float metrics to float32's resolution (float32 sums, see sweep.py); the decisions
    compare.py takes (rel_l2, cosine, NaN / Inf mismatches) exactly."""
    assert (got.count, got.nan_mismatch, got.inf_mismatch) == (want.count, want.nan_mismatch, want.inf_mismatch)
    for name in ("max_abs", "max_rel", "rel_l2", "rmse"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), rel=2e-6, abs=1e-300), name
    rel_l2 = want.rel_l2 if math.isfinite(want.rel_l2) else 1.0
    assert got.cosine == pytest.approx(want.cosine, abs=1e-12 + 2e-6 * min(1.0, rel_l2)), "cosine"
    # elements exactly at atol + rtol |b| may fall either way in float32: a handful at most
    assert abs(got.frac_over_rtol - want.frac_over_rtol) * want.count <= max(2, 1e-6 * want.count), "frac_over_rtol"
    rtol, atol, max_rel_l2, min_cos = TOL[dtype]
    assert (got.rel_l2 <= max_rel_l2) == (want.rel_l2 <= max_rel_l2)
    assert (got.cosine >= min_cos) == (want.cosine >= min_cos)


def pair(n: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, generator=g, dtype=torch.float64) * scale
    a = b * (1 + NOISE[dtype] * torch.randn(n, generator=g, dtype=torch.float64))
    return a.to(dtype), b.to(dtype)


def check(a: torch.Tensor, b: torch.Tensor, chunk: int = 1000) -> Metrics:
    """Chunks of `chunk` elements and the default chunking (one chunk, or the exact path for a small tensor) both
    give the former code's metrics."""
    rtol, atol, *_ = TOL[b.dtype]
    tiny = _TINY[str(b.dtype).removeprefix("torch.")]
    want = reference_metrics(a, b, rtol, atol)
    chunked = _from_sums(sw.sweep(a, b, rtol, atol, tiny, chunk=chunk), "full")
    assert_same(chunked, want, b.dtype)
    m = tensor_metrics(a, b, rtol, atol)
    assert_same(m, want, b.dtype)
    return chunked


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [1, 999, 1000, 1001, 12_345])
def test_random_tensors_match_the_whole_tensor_code(dtype, n):
    for seed in range(3):
        check(*pair(n, dtype, seed))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_default_chunk_on_a_tensor_of_several_chunks(dtype):
    a, b = pair(sw.CHUNK * 2 + 12_345, dtype, 7)
    rtol, atol, *_ = TOL[dtype]
    assert_same(tensor_metrics(a, b, rtol, atol), reference_metrics(a, b, rtol, atol), dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_differences_as_large_as_the_values(dtype):
    """The cosine then comes from x.y itself (a second pass, sweep._products), not from the sums of squares."""
    a, b = pair(10_007, dtype, 15)
    for x in (-b, b * 3, b * 0.01, a.flip(0)):
        m = check(x, b)
        assert m.rel_l2 > 0.5
    c = torch.randn(10_007, generator=torch.Generator().manual_seed(16)).to(dtype)
    assert abs(check(c, b).cosine) < 0.05  # unrelated values
    a[500] = math.nan  # a chunk summed exactly, the others fast: x.y from both
    check(-a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_nan_and_inf_in_some_chunks(dtype):
    a, b = pair(10_007, dtype, 1)
    a[5], b[5] = math.nan, math.nan  # same NaN: equal
    a[1500] = math.nan  # one side only
    b[2600] = math.inf
    a[3700], b[3700] = math.inf, math.inf  # same Inf: equal
    a[3701], b[3701] = math.inf, -math.inf  # sign differs
    a[9999] = -math.inf
    m = check(a, b)
    assert (m.nan_mismatch, m.inf_mismatch) == (1, 3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_all_non_finite_and_zeros(dtype):
    nan = torch.full((3000,), math.nan, dtype=dtype)
    check(nan, nan.clone())
    check(nan, torch.zeros(3000, dtype=dtype))
    zero = torch.zeros(2500, dtype=dtype)
    check(zero, zero.clone())
    a, b = pair(2500, dtype, 3)
    check(zero, b)
    check(a, zero)
    check(-zero, zero)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_huge_and_tiny_values_fall_back_to_float64(dtype):
    big = torch.finfo(dtype).max / 4  # squares overflow float32
    a, b = pair(4321, dtype, 4)
    a[100], b[100] = big, big * 0.5
    a[2200] = -big
    check(a, b)
    for scale in (1e-30, 1e-21, 1e-19):  # squares underflow float32 (bfloat16 / float32 only)
        check(*pair(4321, dtype, 5, scale=scale))
    a, b = pair(4321, dtype, 6)
    b[10:20] = 0.0  # max_rel divides by tiny there: beyond float32's range
    check(a, b)


def test_float16_extremes():
    a, b = pair(5000, torch.float16, 8)
    a[1], b[1] = 65504.0, -65504.0
    b[2000:2100] = 0.0
    check(a, b)
    check(*pair(5000, torch.float16, 9, scale=1e-6))  # subnormal half values


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_mixed_with_float64_golden(dtype):
    golden = torch.randn(7777, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    low = golden.to(dtype)
    rtol, atol, *_ = TOL[dtype]
    for a, b in ((low, golden), (golden, low)):
        assert_same(tensor_metrics(a, b, rtol, atol), reference_metrics(a, b, rtol, atol), b.dtype)


def test_float64_and_integers():
    a, b = pair(6000, torch.float64, 10)
    rtol, atol, *_ = TOL[torch.float64]
    m = tensor_metrics(a, b, rtol, atol)
    want = reference_metrics(a, b, rtol, atol)
    assert m.rel_l2 == pytest.approx(want.rel_l2, rel=1e-12) and m.cosine == pytest.approx(want.cosine, abs=1e-15)
    assert m.frac_over_rtol == want.frac_over_rtol  # float64 throughout: the same threshold, operation for operation
    ids = torch.randint(0, 32000, (5000,), generator=torch.Generator().manual_seed(0))
    other = ids.clone()
    other[::7] += 1
    assert tensor_metrics(other, ids, 0.0, 0.0) == reference_metrics(other, ids, 0.0, 0.0)


def test_empty_and_shape():
    for dtype in (torch.bfloat16, torch.float32):
        e = torch.empty(0, 5, dtype=dtype)
        assert tensor_metrics(e, e, 1e-3, 0.0) == reference_metrics(e, e, 1e-3, 0.0)
    assert sw.sweep(torch.empty(0), torch.empty(0), 1e-3, 0.0, 1e-38).count == 0


def test_no_whole_tensor_float64_copy(monkeypatch):
    """A bfloat16 tensor is never converted to float64 as a whole: conversions are chunk-sized."""
    a, b = pair(50_000, torch.bfloat16, 11)
    seen: list[int] = []
    real = sw.exact_sums

    def spy(x, y, *args):
        seen.append(x.numel())
        return real(x, y, *args)
    monkeypatch.setattr(sw, "exact_sums", spy)
    a[123] = math.nan
    sw.sweep(a, b, 1.6e-2, 1e-5, 1.18e-38, chunk=1000)
    assert seen == [1000]  # the one chunk that holds the NaN, alone


def test_cosine_near_one_is_exact_enough_for_float32():
    """float32's cosine tolerance is 1 - 1e-8: sums of squares in float32 carry 1e-7 relative error, so the cosine
    must not be their direct quotient."""
    g = torch.Generator().manual_seed(12)
    b = torch.randn(300_000, generator=g)
    for eps in (3e-5, 1e-4, 2e-4):  # 1 - cosine about eps^2 / 2: around the tolerance
        a = b + eps * torch.randn(300_000, generator=g)
        want = reference_metrics(a, b, 1.3e-6, 1e-5)
        got = tensor_metrics(a, b, 1.3e-6, 1e-5)
        assert got.cosine == pytest.approx(want.cosine, abs=1e-12)


def test_stats_many_equal_the_former_one_by_one():
    g = torch.Generator().manual_seed(13)
    tensors = [torch.randn(n, generator=g) for n in (1, 5, 64, 65, 1000)]
    odd = torch.randn(100, generator=g)
    odd[0] = math.nan
    tensors.append(odd)
    inf = torch.randn(200, generator=g)
    inf[3 * (200 // 64)] = math.inf  # a sampled position
    tensors.append(inf)
    pairs = []
    for t in tensors:
        pairs.append((tensor_stats(t * 1.01), tensor_stats(t), 1e-3, 1e-5, "float32"))
        pairs.append((tensor_stats(t.bfloat16()), tensor_stats(t), 1.6e-2, 1e-5, "bfloat16"))
        pairs.append((tensor_stats(t), tensor_stats(t), 1e-3, 1e-5, None))
    pairs.append((tensor_stats(torch.zeros(3)), tensor_stats(torch.zeros(4)), 1e-3, 1e-5, "float32"))  # counts differ
    pairs.append((tensor_stats(torch.zeros(0)), tensor_stats(torch.zeros(0)), 1e-3, 1e-5, "float32"))
    many = stats_metrics_many(pairs)
    for (a, b, rtol, atol, dt), got in zip(pairs, many):
        want = reference_stats_metrics(a, b, rtol, atol, dt).to_json()
        for k, v in got.to_json().items():  # float64 throughout; NaN / Inf as text
            assert v == (pytest.approx(want[k], rel=1e-12, abs=1e-15) if isinstance(v, float) else want[k]), k
        assert got.to_json() == stats_metrics(a, b, rtol, atol, dt).to_json()
    assert many[-2].problem and many[-1].count == 0


def test_sums_do_not_depend_on_the_thread_count():
    """The chunks run on one thread or on torch's (sweep._Pace picks by load): the metrics must be the same bits, or
    a report would change with the machine's load."""
    a, b = pair(sw.CHUNK * 3 + 777, torch.bfloat16, 14)
    before = torch.get_num_threads()
    try:
        got = []
        for n in (1, 2):
            torch.set_num_threads(n)
            got.append(tensor_metrics(a, b, 1.6e-2, 1e-5))
    finally:
        torch.set_num_threads(before)
    assert got[0] == got[1]
