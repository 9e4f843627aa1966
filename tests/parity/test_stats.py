"""Batched statistics equal per-tensor ones; samples, checksum and the one host copy."""

from __future__ import annotations

import math

import torch

from npuport.parity.stats import SAMPLE, StatsBatcher, sample_step, tensor_stats


def test_values_and_samples():
    t = torch.arange(200, dtype=torch.float32)
    s = tensor_stats(t)
    assert (s.count, s.min, s.max, s.sum) == (200, 0.0, 199.0, float(sum(range(200))))
    assert abs(s.norm - math.sqrt(sum(i * i for i in range(200)))) < 1e-6 * s.norm  # accumulated in float32
    assert s.mean == 99.5
    step = sample_step(200)
    assert s.sample == tuple(float(i * step) for i in range(SAMPLE))


def test_short_and_empty_and_integer_and_bf16():
    assert tensor_stats(torch.tensor([1.0, 2.0])).sample == (1.0, 2.0)
    e = tensor_stats(torch.empty(0))
    assert (e.count, e.sum, e.sample) == (0, 0.0, ())
    i = tensor_stats(torch.tensor([[1, 2], [3, 4]]))
    assert (i.min, i.max, i.sum) == (1.0, 4.0, 10.0)
    b = tensor_stats(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert (b.min, b.max, b.sum) == (-2.0, 1.5, -0.5)
    assert tensor_stats(torch.tensor([True, False, True])).sum == 2.0


def test_checksum_is_of_the_bytes():
    a = torch.randn(1000)
    assert tensor_stats(a).checksum == tensor_stats(a.clone()).checksum
    b = a.clone()
    b[500] = torch.nextafter(b[500], torch.tensor(10.0))  # one ulp
    assert tensor_stats(b).checksum != tensor_stats(a).checksum


def test_batched_equals_single_and_flags_mutation():
    torch.manual_seed(0)
    ts = [torch.randn(3, 50), torch.randn(150), torch.randn(7).to(torch.bfloat16), torch.randn(0), torch.randn(3, 50)]
    batch = StatsBatcher(budget_bytes=1000)  # forces one intermediate flush
    for i, t in enumerate(ts):
        batch.add(i, t)
    ts[4].mul_(2)  # changed in place after capture, before its flush
    out = batch.finish()
    for i in range(4):
        assert out[i] == tensor_stats(ts[i])
    assert out[4].mutated and not out[0].mutated


def test_nonfinite_flag():
    assert tensor_stats(torch.tensor([1.0, float("inf")])).nonfinite
    assert not tensor_stats(torch.tensor([1.0, 2.0])).nonfinite


def _fake_cuda(monkeypatch, free: int, reserved: int = 0, allocated: int = 0) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    nested = {"reserved_bytes": {"all": {"current": reserved}}, "allocated_bytes": {"all": {"current": allocated}}}
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: nested)


def test_free_bytes_read_the_allocator_cache_either_way(monkeypatch):
    """One read of the allocator's nested statistics where the backend has it, memory_reserved/allocated otherwise:
    the same number."""
    from npuport.devices.memory import device_free_bytes

    _fake_cuda(monkeypatch, free=3 << 30, reserved=2 << 30, allocated=1 << 30)
    assert device_free_bytes("cuda:0", include_cached=True) == 4 << 30
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: {})  # not initialised: empty
    assert device_free_bytes("cuda:0", include_cached=True) == 4 << 30
    monkeypatch.delattr(torch.cuda, "memory_stats_as_nested_dict")
    assert device_free_bytes("cuda:0", include_cached=True) == 4 << 30


def test_auto_budget_is_a_share_of_free_memory_within_bounds(monkeypatch):
    from npuport.parity import stats

    cuda = torch.device("cuda", 0)
    _fake_cuda(monkeypatch, free=140 << 30)
    assert stats.auto_budget(cuda) == stats.AUTO_MAX  # an idle H200: capped
    _fake_cuda(monkeypatch, free=3 << 30, reserved=2 << 30, allocated=1 << 30)  # the allocator's unused cache counts
    assert stats.auto_budget(cuda) == (4 << 30) // stats.AUTO_SHARE
    _fake_cuda(monkeypatch, free=100 << 20)
    assert stats.auto_budget(cuda) == stats.AUTO_MIN  # nearly full: the floor
    assert stats.auto_budget(torch.device("cpu")) == stats.HOST_BUDGET

    def broken(device=None):
        raise RuntimeError("no driver")
    monkeypatch.setattr(torch.cuda, "mem_get_info", broken)
    assert stats.auto_budget(cuda) == stats.HOST_BUDGET


def test_unset_budget_resolves_on_the_first_tensor_and_bounds_the_queue(monkeypatch):
    from npuport.parity import stats

    monkeypatch.setattr(stats, "HOST_BUDGET", 1000)  # CPU tensors take the host budget
    batch = StatsBatcher()
    assert not batch.add(0, torch.zeros(100))  # 400 bytes: resolved to 1000, no flush
    assert batch.budget == 1000
    assert batch.add(1, torch.zeros(200))  # 1200 >= 1000: flushed
    assert not batch._pending
    out = batch.finish()
    assert out[0] == tensor_stats(torch.zeros(100)) and out[1].count == 200
