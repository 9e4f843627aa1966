"""Timer and statistics logic against fake clocks: no device, no sleeping."""

from __future__ import annotations

import pytest

from npuport.devices.timer import DeviceEventClock, HostClock, measure
from npuport.devices.timing_stats import differs, quantile, summarize


class FakeHost:
    """A nanosecond counter that only the benchmarked function advances."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


class FakeDevice:
    """A device queue: work is enqueued by fn, events are stamped at the queue's virtual time, and an event
    can be read only after synchronize() (reading earlier is a bug the timer must not have)."""

    def __init__(self) -> None:
        self.queue_t = 0.0
        self.syncs = 0
        self.synced_upto = -1
        self.events: list["FakeDevice.Event"] = []

    class Event:
        def __init__(self, dev: "FakeDevice") -> None:
            self.dev, self.t, self.n = dev, None, None

        def record(self) -> None:
            self.t = self.dev.queue_t
            self.n = len(self.dev.events)
            self.dev.events.append(self)

        def elapsed_time(self, end: "FakeDevice.Event") -> float:
            assert end.n is not None and end.n <= self.dev.synced_upto, "event read before synchronize"
            return (end.t - self.t) * 1e3  # ms, like torch.cuda.Event

    def make(self) -> "FakeDevice.Event":
        return FakeDevice.Event(self)

    def sync(self) -> None:
        self.syncs += 1
        self.synced_upto = len(self.events) - 1


def test_host_clock_measures_each_repetition():
    clock = FakeHost()
    durations = iter([5_000] * 3 + [1_000, 2_000, 3_000, 4_000, 100_000])  # 3 warm-up calls, then 5 timed

    def fn(_x):
        clock.t += next(durations)

    m = measure(fn, [None], HostClock(clock), warmup=3, reps=5)
    assert m.samples == (1e-6, 2e-6, 3e-6, 4e-6, 1e-4)
    assert m.stats.median == pytest.approx(3e-6)
    assert m.clock == "host-monotonic"


def test_device_events_sync_once_and_never_read_early():
    dev = FakeDevice()
    times = iter([0.002] * 2 + [0.001, 0.003, 0.002])

    def fn(_x):
        dev.queue_t += next(times)

    m = measure(fn, [None], DeviceEventClock(dev.make, dev.sync), warmup=2, reps=3)
    assert sorted(m.samples) == pytest.approx([0.001, 0.002, 0.003])
    assert dev.syncs == 2  # after warm-up, and once after all timed marks
    assert m.clock == "device-events"


def test_inputs_rotate_round_robin_and_are_made_outside_the_marks():
    seen = []
    clock = FakeHost()

    def fn(x):
        seen.append(x)
        clock.t += 10

    def make(i):
        clock.t += 1_000_000  # input creation must not land in a sample
        return i

    m = measure(fn, make, HostClock(clock), warmup=1, reps=4)
    assert all(s == pytest.approx(1e-8) for s in m.samples)
    seen.clear()
    measure(fn, ["a", "b", "c"], HostClock(clock), warmup=2, reps=4)
    assert seen == ["a", "b", "c", "a", "b", "c"]


def test_budget_sizes_repetitions_between_min_and_max():
    clock = FakeHost()

    def fn(_x):
        clock.t += 100_000_000  # 0.1 s per call

    m = measure(fn, [None], HostClock(clock), warmup=0, reps=50, min_reps=5, budget_s=1.0)
    assert m.stats.n == 10
    m = measure(fn, [None], HostClock(clock), warmup=0, reps=50, min_reps=5, budget_s=0.01)
    assert m.stats.n == 5


def test_calls_per_sample_divides():
    clock = FakeHost()

    def fn(_x):
        clock.t += 20_000

    m = measure(fn, [None], HostClock(clock), warmup=0, reps=3, calls_per_sample=20)
    assert m.stats.median == pytest.approx(1e-6)
    assert m.calls_per_sample == 20


def test_statistics():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median, s.min, s.max, s.mean) == (3.0, 1.0, 5.0, 3.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(4.6)
    assert s.iqr == pytest.approx(2.0)
    assert s.spread == pytest.approx((4.6 - 1.4) / 3.0)
    assert quantile([7.0], 0.9) == 7.0
    assert summarize([1.0] * 10).spread == 0.0
    one_outlier = summarize([1.0] * 19 + [100.0])
    assert one_outlier.median == 1.0 and one_outlier.spread == 0.0  # p10..p90 ignores a single outlier
    assert differs(summarize([1.0, 1.01, 0.99]), summarize([2.0, 2.01, 1.99]))
    assert not differs(summarize([1.0, 1.5, 0.5]), summarize([1.1, 1.6, 0.6]))
    with pytest.raises(ValueError):
        summarize([])
