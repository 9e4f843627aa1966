"""Time one callable: warm-up, then one pair of timestamps per repetition, read only after one final synchronize.

Where the timestamps come from is injected (`Clock`), so the logic is tested with a fake clock:
- on a device (cuda / npu) a `DeviceEventClock` records events into the stream, in order with the work; the
  host never reads a clock around a synchronize, so launch latency and host jitter stay out of the numbers;
- on the CPU there are no device events, but there is nothing asynchronous either: an aten CPU kernel returns
  only when its intra-op threads have joined, so a monotonic host clock read before and after each repetition
  (`HostClock`, perf_counter_ns) brackets exactly the op's work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from npuport.devices.timing_stats import Stats, summarize

Inputs = Callable[[int], Any]


class Clock(Protocol):
    kind: str  # "device-events" or "host-monotonic"

    def mark(self) -> Any:
        """A timestamp taken in order with the queued work (device) or now (host)."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds between two marks; for device events only valid after `synchronize()`."""

    def synchronize(self) -> None:
        """Wait until every queued piece of work (and mark) has completed."""


class HostClock:
    """Monotonic host clock (nanoseconds); `now` is injectable for tests."""

    kind = "host-monotonic"

    def __init__(self, now: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now = now

    def mark(self) -> int:
        return self._now()

    def elapsed_s(self, start: int, end: int) -> float:
        return (end - start) / 1e9

    def synchronize(self) -> None:
        return None


class DeviceEventClock:
    """Timing events of a device backend (torch.cuda.Event, torch.npu.Event): `make_event()` returns an event
    created with enable_timing=True; `sync()` is the backend's synchronize."""

    kind = "device-events"

    def __init__(self, make_event: Callable[[], Any], sync: Callable[[], None]) -> None:
        self._make = make_event
        self._sync = sync

    def mark(self) -> Any:
        ev = self._make()
        ev.record()
        return ev

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1e3  # events report milliseconds

    def synchronize(self) -> None:
        self._sync()


@dataclass(frozen=True)
class Measurement:
    stats: Stats  # seconds per call
    samples: tuple[float, ...]
    warmup: int
    clock: str
    calls_per_sample: int = 1

    def to_json(self) -> dict[str, Any]:
        return {**self.stats.to_json(), "warmup": self.warmup, "clock": self.clock,
                "calls_per_sample": self.calls_per_sample}


def _timed(fn: Callable[[Any], Any], inputs: Inputs, clock: Clock, count: int, offset: int) -> list[float]:
    marks = []
    for i in range(count):
        args = inputs(offset + i)  # made (or picked) before the first mark: not part of the sample
        start = clock.mark()
        fn(args)
        marks.append((start, clock.mark()))
    clock.synchronize()  # once, after every mark is queued; samples are read only now
    return [clock.elapsed_s(a, b) for a, b in marks]


def measure(
    fn: Callable[[Any], Any],
    inputs: Inputs | Sequence[Any],
    clock: Clock,
    *,
    warmup: int = 10,
    reps: int = 50,
    min_reps: int = 5,
    budget_s: float | None = None,
    probe: int = 3,
    calls_per_sample: int = 1,
) -> Measurement:
    """Median and spread of `fn(inputs(i))` over repetitions.

    `inputs` is a sequence of argument sets used round-robin (rotating buffers, so repeated runs do not read a
    warm cache) or a function of the repetition index (fresh inputs per repetition, e.g. a KV cache the step
    appends to). With `budget_s`, a few probe repetitions (timed with the same clock) size the run so that it
    takes about `budget_s`, between `min_reps` and `reps` repetitions. `calls_per_sample` divides each sample
    (a captured graph that replays k calls).
    """
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be >= 1 and warmup >= 0")
    pick: Inputs
    if callable(inputs):
        pick = inputs
    else:
        sets = list(inputs)
        if not sets:
            raise ValueError("no input sets")
        pick = lambda i: sets[i % len(sets)]  # noqa: E731
    for i in range(warmup):
        fn(pick(i))
    clock.synchronize()
    offset = warmup
    count = reps
    if budget_s is not None and reps > min_reps:
        first = _timed(fn, pick, clock, probe, offset)
        offset += probe
        per = sorted(first)[len(first) // 2]
        count = reps if per <= 0 else max(min_reps, min(reps, int(budget_s / per)))
    samples = [s / calls_per_sample for s in _timed(fn, pick, clock, count, offset)]
    return Measurement(summarize(samples), tuple(samples), warmup, clock.kind, calls_per_sample)
