"""Read a torch.profiler / Kineto Chrome trace (`.json` or `.json.gz`) and aggregate it per aten op.

The file is streamed: `traceEvents` is decoded one event at a time with `json.JSONDecoder.raw_decode` over chunks
of the (decompressed) text, so neither the text nor the parsed JSON document is ever held whole (`ijson` is not a
dependency). What is kept is one compact tuple per CPU op, runtime launch and device kernel, which the nesting and
kernel attribution need: memory grows with the number of events, not with the size of their JSON text.

- CPU ops: events with cat "cpu_op" (`aten::mm`, ...). Nesting per thread gives each op its self CPU time (host time)
  and its immediate parent op.
- Kernels: events with cat "kernel" (also "gpu_memcpy" / "gpu_memset"). A kernel is attributed to the innermost CPU op
  that launched it: through its `correlation` id to the runtime launch event (cat "cuda_runtime" / "cuda_driver" /
  "runtime") and the innermost cpu_op of that thread enclosing the launch; else through its "External id".
- Steps: "ProfilerStep#N" events give per step the wall time, the union of kernel time inside it and the idle gap.

A trace without kernels (a CPU run) uses each op's self CPU time as its "device" time and says so (device "cpu").
"""

from __future__ import annotations

import bisect
import gzip
import json
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

from npuport.errors import NpuportError

KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "privateuse1_runtime"}
UNATTRIBUTED = "(kernels without an aten op)"
_CHUNK = 1 << 20


@dataclass
class OpStats:
    calls: int = 0
    host_us: float = 0.0  # self CPU time
    device_us: float = 0.0  # kernels attributed to it (self CPU time on a CPU run)
    parents: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # immediate parent op -> device_us


@dataclass
class Trace:
    """One trace aggregated per aten op; times in microseconds, as in the Chrome trace."""

    source: str
    device: str  # "cuda" (kernels found) or "cpu" (no kernels: device time is CPU op time)
    ops: dict[str, OpStats]
    steps: list[dict[str, Any]]
    kernels: int
    cpu_ops: int


def _open_text(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the objects of the top-level `traceEvents` array of a Chrome trace, one at a time (streamed)."""
    p = Path(path)
    bad = f"{p}: not a torch.profiler / Kineto Chrome trace"
    if not p.is_file():
        raise NpuportError(f"no trace file {p}", "a .json or .json.gz Chrome trace", str(p))
    dec = json.JSONDecoder()
    try:
        with _open_text(p) as fh:
            buf, pos, key = "", 0, '"traceEvents"'
            while True:  # find the key and its '['
                i = buf.find(key)
                if i >= 0:
                    j = buf.find("[", i + len(key))
                    if j >= 0:
                        pos = j + 1
                        break
                more = fh.read(_CHUNK)
                if not more:
                    raise NpuportError(bad, 'a top-level "traceEvents" array', "no traceEvents")
                buf = buf[-(len(key) + 64):] + more if i < 0 else buf + more
            while True:
                while True:  # skip whitespace and commas, refill as needed
                    while pos < len(buf) and buf[pos] in " \t\r\n,":
                        pos += 1
                    if pos < len(buf):
                        break
                    more = fh.read(_CHUNK)
                    if not more:
                        raise NpuportError(bad, "a closed traceEvents array", "the file ends inside it")
                    buf, pos = more, 0
                if buf[pos] == "]":
                    return
                while True:
                    try:
                        obj, end = dec.raw_decode(buf, pos)
                        break
                    except json.JSONDecodeError as exc:
                        more = fh.read(_CHUNK)
                        if not more:
                            raise NpuportError(bad, "valid JSON events", f"{exc.msg} at char {exc.pos}") from None
                        buf, pos = buf[pos:] + more, 0
                if not isinstance(obj, dict):
                    raise NpuportError(bad, "an object per trace event", type(obj).__name__)
                yield obj
                pos = end
                if pos > _CHUNK:
                    buf, pos = buf[pos:], 0
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise NpuportError(bad, "a readable .json or .json.gz file", f"{type(exc).__name__}: {exc}") from None


def _num(e: dict[str, Any], k: str) -> float:
    v = e.get(k, 0.0)
    return float(v) if isinstance(v, (int, float)) else 0.0


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def read_trace(path: str | Path) -> Trace:
    """Aggregate a Chrome trace per aten op (see the module doc)."""
    ops_by_thread: dict[tuple[Any, Any], list[tuple[float, float, str, Any]]] = defaultdict(list)
    launches: dict[Any, tuple[Any, Any, float]] = {}  # correlation -> (pid, tid, ts)
    kernels: list[tuple[float, float, Any, Any]] = []  # ts, dur, correlation, External id
    steps: list[tuple[str, float, float]] = []
    for e in iter_events(path):
        if e.get("ph") != "X":
            continue
        cat, name, args = e.get("cat"), str(e.get("name", "")), e.get("args") or {}
        ts, dur = _num(e, "ts"), _num(e, "dur")
        if cat == "cpu_op":
            ops_by_thread[(e.get("pid"), e.get("tid"))].append((ts, dur, name, args.get("External id")))
        elif cat in KERNEL_CATS:
            kernels.append((ts, dur, args.get("correlation"), args.get("External id")))
        elif cat in RUNTIME_CATS and args.get("correlation") is not None:
            launches[args["correlation"]] = (e.get("pid"), e.get("tid"), ts)
        elif name.startswith("ProfilerStep#"):
            steps.append((name, ts, dur))

    ops: dict[str, OpStats] = defaultdict(OpStats)
    by_ext: dict[Any, int] = {}
    flat: list[tuple[str, str, float]] = []  # per op instance: name, parent name, self time
    starts: dict[tuple[Any, Any], tuple[list[float], list[int]]] = {}  # per thread: sorted starts, instance index
    intervals: dict[int, tuple[float, float]] = {}
    top_level: list[tuple[float, float]] = []
    for thread, events in ops_by_thread.items():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack: list[int] = []
        child_us: list[float] = []
        first = len(flat)
        for ts, dur, name, ext in events:
            while stack and ts >= intervals[stack[-1]][1]:
                stack.pop()
            idx = len(flat)
            parent = flat[stack[-1]][0] if stack else ""
            if stack:
                child_us[stack[-1] - first] += dur
            else:
                top_level.append((ts, ts + dur))
            flat.append((name, parent, dur))
            child_us.append(0.0)
            intervals[idx] = (ts, ts + dur)
            if ext is not None:
                by_ext[ext] = idx
            stack.append(idx)
        for k in range(first, len(flat)):
            name, parent, dur = flat[k]
            flat[k] = (name, parent, max(dur - child_us[k - first], 0.0))
        starts[thread] = ([ev[0] for ev in events], list(range(first, len(flat))))

    def innermost(thread: tuple[Any, Any], ts: float) -> int | None:
        if thread not in starts:
            return None
        begins, idxs = starts[thread]
        k = bisect.bisect_right(begins, ts) - 1
        best = None
        while k >= 0:  # the latest-starting op that still encloses ts is the innermost
            a, b = intervals[idxs[k]]
            if a <= ts < b or (a == ts == b):
                best = idxs[k]
                break
            k -= 1
        return best

    device_us: dict[int, float] = defaultdict(float)  # op instance -> kernel time
    unattributed = 0.0
    for ts, dur, corr, ext in kernels:
        who: int | None = None
        if corr is not None and corr in launches:
            pid, tid, lts = launches[corr]
            who = innermost((pid, tid), lts)
        if who is None and ext is not None:
            who = by_ext.get(ext)
        if who is None:
            unattributed += dur
        else:
            device_us[who] += dur
    on_cpu = not kernels
    for k, (name, parent, self_us) in enumerate(flat):
        st = ops[name]
        st.calls += 1
        st.host_us += self_us
        dev = self_us if on_cpu else device_us.get(k, 0.0)
        st.device_us += dev
        st.parents[parent] += dev
    if unattributed:
        ops[UNATTRIBUTED].device_us += unattributed
        ops[UNATTRIBUTED].parents[""] += unattributed

    busy = top_level if on_cpu else [(ts, ts + dur) for ts, dur, _, _ in kernels]
    step_rows = []
    for name, ts, dur in sorted(steps, key=lambda s: s[1]):
        inside = [(max(a, ts), min(b, ts + dur)) for a, b in busy if b > ts and a < ts + dur]
        work = _union(inside)
        step_rows.append({"name": name, "wall_us": dur, "kernel_us": work, "idle_us": max(dur - work, 0.0)})
    return Trace(source=str(path), device="cpu" if on_cpu else "cuda", ops=dict(ops), steps=step_rows,
                 kernels=len(kernels), cpu_ops=len(flat))
