"""What the Ascend PyTorch profiler's exports have in common once read (npuport.profile.ascend reads the text export,
npuport.profile.ascend_db the .db one): the CPU ops per thread with their modules and sequence numbers, the device
tasks per stream, which op launched which task; and the per-op aggregation both readers share (host self time,
device time, kernels, parents, modules, steps), so a run reads the same whichever export it was saved as.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from npuport.profile.kineto import UNATTRIBUTED, OpStats, Trace, count_kernel, module_paths

MODULE_PREFIX = "nn.Module: "
STEP_PREFIX = "ProfilerStep#"
# Ascend Hardware tasks that are stream bookkeeping, not work (task types as in the Task Type arg, and task names)
NOT_WORK = {"EVENT_WAIT_SQE", "EVENT_RECORD_SQE", "NOTIFY_WAIT_SQE", "NOTIFY_RECORD_SQE", "PLACE_HOLDER_SQE",
            "EVENT_WAIT", "EVENT_RECORD", "NOTIFY_WAIT", "NOTIFY_RECORD", "PROFILING_ENABLE", "PROFILING_DISABLE"}
CALL_SUFFIX = re.compile(r"(_\d+)+$")  # a collective's per-call suffix: hcom_allReduce__586_0_1 -> hcom_allReduce_

Span = tuple[int, int, float, str]  # start ns, end ns, duration µs, name
Place = tuple[Any, Any, int]  # pid, tid, ns


@dataclass
class Events:
    """What one rank's export holds for the reader, whichever export it came from (trace_view.json or the .db)."""

    procs: dict[Any, str] = field(default_factory=dict)  # pid -> process name
    threads: dict[tuple[Any, Any], str] = field(default_factory=dict)  # (pid, tid) -> thread name
    ops: dict[tuple[Any, Any], list[Span]] = field(default_factory=lambda: defaultdict(list))  # namespaced cpu_ops
    seqs: dict[tuple[Any, Any, int, str], int] = field(default_factory=dict)  # (pid, tid, start, name) -> Sequence number
    modules: dict[tuple[Any, Any], list[Span]] = field(default_factory=lambda: defaultdict(list))
    marked: bool = False  # the modules are npuport's own marks (their paths), not "nn.Module:" events
    skips: dict[tuple[Any, Any], list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    steps: list[Span] = field(default_factory=list)
    # device-side X events (no cat): pid, tid, start, duration, name, Task Type arg, stream id arg (HCCL sub-tasks)
    device: list[tuple[Any, Any, int, float, str, str, Any]] = field(default_factory=list)
    flow_from: dict[str, Place] = field(default_factory=dict)
    flow_to: dict[str, Place] = field(default_factory=dict)
    seen: int = 0


@dataclass
class Tasks:
    """The device tasks that count, per (pid, tid), sorted by start: start ns, end ns, duration µs, kernel name."""

    by_place: dict[tuple[Any, Any], list[Span]]

    def all(self) -> Iterator[tuple[tuple[Any, Any], int]]:
        for place, spans in self.by_place.items():
            for k in range(len(spans)):
                yield place, k


def innermost(spans: list[Span], starts: list[int], ts: int) -> int | None:
    """Index of the latest-starting span that encloses ts (spans sorted by start, outer before inner)."""
    k = bisect.bisect_right(starts, ts) - 1
    while k >= 0:
        a, b = spans[k][0], spans[k][1]
        if a <= ts < b or a == ts == b:
            return k
        k -= 1
    return None


@dataclass
class OpCall:
    name: str
    parent: str
    self_us: float
    module: str | None
    device_us: float = 0.0
    kernels: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    up: int = -1  # the enclosing op's index in the flat list
    seq: int | None = None  # its Sequence number (autograd's link from a backward node to its forward op)


def skipped(ev: Events, thread: tuple[Any, Any], ts: int) -> bool:
    return any(a <= ts < b for a, b in ev.skips.get(thread, ()))


def nest(ev: Events) -> tuple[list[OpCall], dict[tuple[Any, Any], tuple[list[Span], list[int], int]]]:
    """Per thread: each op's parent and self time; the innermost module it ran in. Also, per thread, the sorted
    spans, their starts and the index of the thread's first call in the flat list (to find the op of a flow).
    Ops inside a skip range are dropped here (so the tasks they launched find no owner and are dropped too)."""
    calls: list[OpCall] = []
    index: dict[tuple[Any, Any], tuple[list[Span], list[int], int]] = {}
    mods = {t: sorted(s, key=lambda x: (x[0], -x[1])) for t, s in ev.modules.items()}
    mod_starts = {t: [x[0] for x in s] for t, s in mods.items()}
    for thread, spans in ev.ops.items():
        if thread in ev.skips:
            spans[:] = [sp for sp in spans if not skipped(ev, thread, sp[0])]
        spans.sort(key=lambda x: (x[0], -x[1]))
        first = len(calls)
        stack: list[int] = []
        for ts, end, dur, name in spans:
            while stack and ts >= spans[stack[-1] - first][1]:
                stack.pop()
            parent = calls[stack[-1]].name if stack else ""
            if stack:
                calls[stack[-1]].self_us -= dur
            k = innermost(mods[thread], mod_starts[thread], ts) if thread in mods else None
            calls.append(OpCall(name, parent, dur, mods[thread][k][3] if k is not None else None,
                                 up=stack[-1] if stack else -1, seq=ev.seqs.get((thread[0], thread[1], ts, name))))
            stack.append(len(calls) - 1)
        index[thread] = (spans, [s[0] for s in spans], first)
    if ev.marked:  # npuport's marks: backward ops take their forward op's module, as the Kineto reader does
        paths = module_paths([(c.name, c.up, 0.0, c.seq, c.module or "") for c in calls])
        for c, path in zip(calls, paths):
            c.module = path  # "" outside every mark: counted under the root, as the Kineto reader counts it
    return calls, index


def union(intervals: Iterable[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is not None and b <= end:
            continue
        total += b - (a if end is None else max(a, end))
        end = b
    return total


def step_rows(steps: list[tuple[str, int, int, float]], busy: list[tuple[int, int]],
               host: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """Per step (name, start ns, end ns, wall µs): wall, the union of busy time inside, the idle rest, and (given the
    CPU ops' spans) the union of host op time inside, as kineto.py reports it."""
    rows = []
    for name, a, b, wall in sorted(steps, key=lambda s: s[1]):
        work = union((max(x, a), min(y, b)) for x, y in busy if y > a and x < b) / 1000
        row = {"name": name, "wall_us": wall, "kernel_us": work, "idle_us": max(wall - work, 0.0)}
        if host is not None:
            row["host_us"] = union((max(x, a), min(y, b)) for x, y in host if y > a and x < b) / 1000
        rows.append(row)
    return rows


def add_stats(st: OpStats, calls: int, host: float, dev: float, parent: str, kernels: dict[str, float]) -> None:
    st.calls += calls
    st.host_us += host
    st.device_us += dev
    st.parents[parent] += dev
    for k, v in kernels.items():
        st.kernels[k] += v

Launch = tuple[tuple[Any, Any], int, tuple[Any, Any], int]  # task (place, index), the launching thread, ns on it


def attributed(ev: Events, tasks: Tasks, launches: Iterable[Launch], source: str) -> Trace:
    """Each task to the innermost op enclosing the point its launch left from (the flow's start in trace_view.json,
    the connection's API row in the .db), tasks launched inside a skip range dropped; then per op and per (module,
    op): calls, host self time, device time, kernels, parents; the steps."""
    calls, index = nest(ev)
    owner: dict[tuple[tuple[Any, Any], int], int] = {}  # task -> op call
    dropped: set[tuple[tuple[Any, Any], int]] = set()  # tasks launched inside a skip range
    for place, k, thread, ts in launches:
        if thread in ev.skips and skipped(ev, thread, ts):
            dropped.add((place, k))
            continue
        if thread not in index:
            continue
        op_spans, op_starts, first = index[thread]
        j = innermost(op_spans, op_starts, ts)
        if j is not None:
            owner.setdefault((place, k), first + j)
    if dropped:
        keep = {place: [sp for k, sp in enumerate(spans) if (place, k) not in dropped]
                for place, spans in tasks.by_place.items()}
        remap = {}
        for place, spans in tasks.by_place.items():
            at = 0
            for k in range(len(spans)):
                if (place, k) not in dropped:
                    remap[(place, k)] = (place, at)
                    at += 1
        owner = {remap[t]: who for t, who in owner.items() if t in remap}
        tasks = Tasks(keep)

    unattributed = OpStats()
    n_tasks = 0
    by_kernel: dict[str, list[float]] = {}
    for place, k in tasks.all():
        n_tasks += 1
        _, _, dur, kname = tasks.by_place[place][k]
        count_kernel(by_kernel, kname, dur)
        who = owner.get((place, k))
        if who is None:
            add_stats(unattributed, 0, 0.0, dur, "", {kname: dur})
        else:
            calls[who].device_us += dur
            calls[who].kernels[kname] += dur

    on_cpu = n_tasks == 0
    ops: dict[str, OpStats] = defaultdict(OpStats)
    by_module: dict[tuple[str, str], OpStats] = defaultdict(OpStats)
    for c in calls:
        host = max(c.self_us, 0.0)
        dev = host if on_cpu else c.device_us
        add_stats(ops[c.name], 1, host, dev, c.parent, c.kernels)
        if c.module is not None:
            add_stats(by_module[(c.module, c.name)], 1, host, dev, c.parent, c.kernels)
    if unattributed.device_us:
        ops[UNATTRIBUTED] = unattributed

    # busy: the device tasks; on a CPU run the ops themselves (their union is the top-level op time, as in kineto.py)
    busy = [(a, b) for spans in (ev.ops.values() if on_cpu else tasks.by_place.values()) for a, b, *_ in spans]
    host_spans = [(a, b) for spans in ev.ops.values() for a, b, *_ in spans]
    steps = step_rows([(name, a, b, dur) for a, b, dur, name in ev.steps], busy, host_spans)
    return Trace(format="ascend", source=source, device="cpu" if on_cpu else "npu", ops=dict(ops), steps=steps, kernels=n_tasks,
                 cpu_ops=len(calls), by_module=dict(by_module), by_kernel=by_kernel)
