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
import functools
import gzip
import json
import math
import sys
import zlib
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

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
    kernels: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # device kernel name -> device_us
    parent_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # immediate parent op -> calls
    # immediate parent op -> the kernel time of these calls and everything they called (kept where that is more than
    # their own): the join rolls an unlisted op's time up to its parents in these proportions, which calls of a
    # kernel-less op (`zero_` under `new_zeros`, `zeros`, `nll_loss_backward`) cannot give
    parents_inclusive: dict[str, float] = field(default_factory=lambda: defaultdict(float))


@dataclass
class Trace:
    """One trace aggregated per aten op; times in microseconds, as in the Chrome trace."""

    source: str
    device: str  # "cuda" (kernels found) or "cpu" (no kernels: device time is CPU op time)
    ops: dict[str, OpStats]
    steps: list[dict[str, Any]]
    kernels: int
    cpu_ops: int
    # (module path or name, op) -> stats, where the trace says which module ran the op (npuport profile record's
    # annotations, or "nn.Module: X_n" events); empty when it does not
    by_module: dict[tuple[str, str], OpStats] = field(default_factory=dict)
    format: str = "kineto"  # what was read: kineto | ascend | nsys
    # device kernel name -> [launches, device_us], every kernel of the trace (npuport.profile.kernel_classes sums
    # them per class: a replayed graph's or a compiled step's kernels carry no aten op)
    by_kernel: dict[str, list[float]] = field(default_factory=dict)


def count_kernel(by_kernel: dict[str, list[float]], name: str, dur: float) -> None:
    """One launched kernel into Trace.by_kernel (name: [launches, summed duration]): a reader that streams its
    kernels counts them as they come, holding one row per distinct name."""
    row = by_kernel.get(name)
    if row is None:
        by_kernel[name] = [1, dur]
    else:
        row[0] += 1
        row[1] += dur


def kernel_counts(kernels: Iterable[tuple[str, float]]) -> dict[str, list[float]]:
    """(name, duration) per launched kernel -> Trace.by_kernel."""
    out: dict[str, list[float]] = {}
    for name, dur in kernels:
        count_kernel(out, name, dur)
    return out


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
            yield from array_items(fh, buf, pos, bad)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise NpuportError(bad, "a readable .json or .json.gz file", f"{type(exc).__name__}: {exc}") from None


def array_items(fh: IO[str], buf: str, pos: int, bad: str) -> Iterator[dict[str, Any]]:
    """The objects of a JSON array whose '[' ends just before buf[pos], read on from `fh` in chunks and decoded one
    at a time (shared by the Kineto and the Ascend readers); `bad` starts every error line."""
    dec = json.JSONDecoder()
    while True:
        while True:  # skip whitespace and commas, refill as needed
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf):
                break
            more = fh.read(_CHUNK)
            if not more:
                raise NpuportError(bad, "a closed JSON array", "the file ends inside it")
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


def _num(e: dict[str, Any], k: str) -> float:
    """An event's time field in microseconds; absent is 0, anything but a finite number (or one written as a string)
    is a malformed trace: read as 0 it would put the event at the trace's start with no length, a wrong profile with
    no word said."""
    v = e.get(k, 0.0)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    if isinstance(v, str):  # some exporters write times as strings of microseconds (the Ascend profiler does)
        try:
            f = float(v)
        except ValueError:
            f = math.nan
        if math.isfinite(f):
            return f
    raise NpuportError(f"malformed trace event {str(e.get('name', '?'))[:80]!r}: its {k!r} is not a number",
                       f"a number of microseconds in every event's {k!r}", repr(v)[:80])


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


MODULE_MARK = "npuport.module:"  # the user_annotation `npuport profile record` wraps each module call in
SKIP_MARK = "npuport.skip:"  # work of the recorder itself between steps (restoring a decode cache): left out


def _innermost(begins: list[float], ends: list[float], ts: float) -> int | None:
    """Index of the latest-starting interval that encloses ts (properly nested intervals sorted by start)."""
    k = bisect.bisect_right(begins, ts) - 1
    while k >= 0:
        if begins[k] <= ts < ends[k] or begins[k] == ts == ends[k]:
            return k
        k -= 1
    return None


def read_trace(path: str | Path) -> Trace:
    """Aggregate a Chrome trace per aten op (see the module doc)."""
    ops_by_thread: dict[tuple[Any, Any], _Ops] = defaultdict(_Ops)
    marks_by_thread: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    skips_by_thread: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    launches: dict[Any, tuple[Any, Any, float]] = {}  # correlation -> (pid, tid, ts)
    kernels: list[tuple[float, float, Any, Any, str]] = []  # ts, dur, correlation, External id, name
    steps: list[tuple[str, float, float]] = []
    intern = sys.intern  # op and kernel names repeat millions of times in a large trace: one string each
    for e in iter_events(path):
        if e.get("ph") != "X":
            continue
        cat, name, args = e.get("cat"), intern(str(e.get("name", ""))), e.get("args") or {}
        ts, dur = _num(e, "ts"), _num(e, "dur")
        if dur < 0:  # a span that ends before it starts: summed it would take time off its op
            raise NpuportError(f"malformed trace event {name[:80]!r}: negative duration", "a 'dur' of 0 or more "
                               "microseconds", repr(e.get("dur"))[:80])
        if cat == "cpu_op":
            ops_by_thread[(e.get("pid"), e.get("tid"))].append(ts, dur, name, args.get("External id"),
                                                               args.get("Sequence number"))
        elif cat in KERNEL_CATS:
            kernels.append((ts, dur, args.get("correlation"), args.get("External id"), name))
        elif cat in RUNTIME_CATS and args.get("correlation") is not None:
            launches[args["correlation"]] = (e.get("pid"), e.get("tid"), ts)
        elif name.startswith("ProfilerStep#") and not str(cat).startswith("gpu_"):  # not its GPU-side copy
            steps.append((name, ts, dur))
        elif name.startswith(MODULE_MARK) and str(cat).lower() == "user_annotation":
            marks_by_thread[(e.get("pid"), e.get("tid"))].append((ts, ts + dur, name[len(MODULE_MARK):]))
        elif name.startswith(SKIP_MARK) and str(cat).lower() == "user_annotation":
            skips_by_thread[(e.get("pid"), e.get("tid"))].append((ts, ts + dur))
    if skips_by_thread:
        ops_by_thread, launches, kernels = _without_skipped(ops_by_thread, launches, kernels, skips_by_thread)

    ops: dict[str, OpStats] = defaultdict(OpStats)
    # External ids only of the kernels whose runtime launch is not in the trace (the fallback needs no more)
    wanted_ext = {ext for _, _, corr, ext, _ in kernels if ext is not None and (corr is None or corr not in launches)}
    by_ext: dict[Any, int] = {}
    # per op instance, as columns (a large trace has millions: no tuple per instance): name, parent instance (-1 at
    # the top level), self time, sequence number (_Ops.NONE when absent), module path
    f_name: list[str] = []
    f_parent, f_seq = array("q"), array("q")
    f_self, child_us = array("d"), array("d")
    f_module: list[str] = []
    starts: dict[tuple[Any, Any], tuple[array, array]] = {}  # per thread: sorted starts, instance index
    begin_of, end_of = array("d"), array("d")  # per op instance
    top_level: list[tuple[float, float]] = []
    none = _Ops.NONE
    for thread, column in ops_by_thread.items():
        order = column.order()
        c_ts, c_dur, c_names, c_ext, c_seq = column.ts, column.dur, column.names, column.ext, column.seq
        marks = sorted(marks_by_thread.get(thread, []), key=lambda m: (m[0], -m[1]))
        mark_begins, mark_ends = [m[0] for m in marks], [m[1] for m in marks]
        stack: list[int] = []
        first = len(f_name)
        for r in order:
            ts, dur = c_ts[r], c_dur[r]
            while stack and ts >= end_of[stack[-1]]:
                stack.pop()
            idx = len(f_name)
            if stack:
                child_us[stack[-1]] += dur  # its callee's time is not its own
            else:
                top_level.append((ts, ts + dur))
            m = _innermost(mark_begins, mark_ends, ts) if marks else None
            f_name.append(c_names[r])
            f_parent.append(stack[-1] if stack else -1)
            f_self.append(dur)
            child_us.append(0.0)
            f_seq.append(c_seq[r])
            f_module.append(marks[m][2] if m is not None else "")
            begin_of.append(ts)
            end_of.append(ts + dur)
            ext = c_ext[r]
            if ext != none and ext in wanted_ext:
                by_ext[ext] = idx
            stack.append(idx)
        for k in range(first, len(f_name)):
            f_self[k] = max(f_self[k] - child_us[k], 0.0)
        starts[thread] = (array("d", (c_ts[r] for r in order)), array("q", range(first, len(f_name))))
        del order
        column.clear()  # what is kept of them is in the columns above
    del child_us
    modules = module_path_columns(f_name, f_parent, f_seq, f_module)
    del f_module

    def innermost(thread: tuple[Any, Any], ts: float) -> int | None:
        if thread not in starts:
            return None
        begins, idxs = starts[thread]
        k = bisect.bisect_right(begins, ts) - 1
        while k >= 0:  # the latest-starting op that still encloses ts is the innermost
            i = idxs[k]
            a, b = begin_of[i], end_of[i]
            if a <= ts < b or (a == ts == b):
                return i
            k -= 1
        return None

    device_us: dict[int, float] = defaultdict(float)  # op instance -> kernel time
    kernel_names: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    unattributed: dict[str, float] = defaultdict(float)
    for ts, dur, corr, ext, kname in kernels:
        who: int | None = None
        if corr is not None and corr in launches:
            pid, tid, lts = launches[corr]
            who = innermost((pid, tid), lts)
        if who is None and ext is not None:
            who = by_ext.get(ext)
        if who is None:
            unattributed[kname] += dur
        else:
            device_us[who] += dur
            kernel_names[who][kname] += dur
    on_cpu = not kernels
    inclusive: dict[int, float] = {}  # op instance -> its kernels' and its callees' (children come after parents)
    if not on_cpu:
        inclusive = dict(device_us)
        for k in range(len(f_name) - 1, -1, -1):
            up, t = f_parent[k], inclusive.get(k)
            if t and up >= 0:
                inclusive[up] = inclusive.get(up, 0.0) + t
    by_module: dict[tuple[str, str], OpStats] = defaultdict(OpStats)
    for k, name in enumerate(f_name):
        self_us, parent = f_self[k], f_parent[k]
        dev = self_us if on_cpu else device_us.get(k, 0.0)
        within = inclusive.get(k, 0.0)
        up_name = f_name[parent] if parent >= 0 else ""
        for st in (ops[name], by_module[(modules[k], name)]):
            st.calls += 1
            st.host_us += self_us
            st.device_us += dev
            st.parents[up_name] += dev
            st.parent_calls[up_name] += 1
            if within > dev:
                st.parents_inclusive[up_name] += within
            for kn, t in kernel_names.get(k, {}).items():
                st.kernels[kn] += t
    if unattributed:
        total = sum(unattributed.values())
        for st in (ops[UNATTRIBUTED], by_module[("", UNATTRIBUTED)]):
            st.device_us += total
            st.parents[""] += total
            for kn, t in unattributed.items():
                st.kernels[kn] += t

    busy = top_level if on_cpu else [(ts, ts + dur) for ts, dur, *_ in kernels]
    step_rows = []
    for name, ts, dur in sorted(steps, key=lambda s: s[1]):
        inside = [(max(a, ts), min(b, ts + dur)) for a, b in busy if b > ts and a < ts + dur]
        work = union_length(inside)
        host = union_length([(max(a, ts), min(b, ts + dur)) for a, b in top_level if b > ts and a < ts + dur])
        step_rows.append({"name": name, "wall_us": dur, "kernel_us": work, "idle_us": max(dur - work, 0.0),
                          "host_us": host})
    return Trace(source=str(path), device="cpu" if on_cpu else "cuda", ops=dict(ops), steps=step_rows,
                 kernels=len(kernels), cpu_ops=len(f_name),
                 by_module=dict(by_module) if any(modules) else {},
                 by_kernel=kernel_counts((k[4], k[1]) for k in kernels))


class _Ops:
    """One thread's CPU ops as columns (a large trace holds millions: arrays of numbers, names interned), read back
    sorted by start, longer first at equal starts (the enclosing op before the ones it encloses)."""

    NONE = -(1 << 62)  # an absent External id or sequence number

    def __init__(self) -> None:
        self.ts, self.dur = array("d"), array("d")
        self.names: list[str] = []
        self.ext, self.seq = array("q"), array("q")

    def append(self, ts: float, dur: float, name: str, ext: Any, seq: Any) -> None:
        self.ts.append(ts)
        self.dur.append(dur)
        self.names.append(name)
        self.ext.append(ext if isinstance(ext, int) else self.NONE)
        self.seq.append(seq if isinstance(seq, int) else self.NONE)

    def rows(self, order: Iterable[int] | None = None) -> list[tuple[float, float, str, Any, Any]]:
        none = self.NONE
        return [(self.ts[i], self.dur[i], self.names[i], None if self.ext[i] == none else self.ext[i],
                 None if self.seq[i] == none else self.seq[i]) for i in (order if order is not None else range(len(self.ts)))]

    def order(self) -> list[int]:
        """Row numbers by start, longer first at equal starts."""
        ts, dur = self.ts, self.dur
        return sorted(range(len(ts)), key=lambda i: (ts[i], -dur[i]))

    def keep(self, want: Callable[[float], bool]) -> _Ops:
        out = _Ops()
        for row in self.rows():
            if want(row[0]):
                out.append(*row)
        return out

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]


def _outside(ranges: list[tuple[float, float]], ts: float) -> bool:
    return not any(a <= ts < b for a, b in ranges)


def _without_skipped(ops_by_thread: dict[tuple[Any, Any], _Ops],
                     launches: dict[Any, tuple[Any, Any, float]], kernels: list[tuple[float, float, Any, Any, str]],
                     skips: dict[tuple[Any, Any], list[tuple[float, float]]]) -> tuple[Any, Any, Any]:
    """Drop the CPU ops inside a skip annotation, and the kernels they launched."""
    def inside(thread: tuple[Any, Any], ts: float) -> bool:
        return any(a <= ts < b for a, b in skips.get(thread, ()))
    kept_ops = {t: evs.keep(functools.partial(_outside, skips.get(t, []))) for t, evs in ops_by_thread.items()}
    dropped = {c for c, (pid, tid, ts) in launches.items() if inside((pid, tid), ts)}
    return (defaultdict(_Ops, kept_ops), {c: v for c, v in launches.items() if c not in dropped},
            [k for k in kernels if k[2] not in dropped])


def module_paths(flat: list[tuple[str, int, float, Any, str]]) -> list[str]:
    """module_path_columns over rows of (name, parent, self, sequence number or None, module)."""
    none = _Ops.NONE
    return module_path_columns([r[0] for r in flat], [r[1] for r in flat], [none if r[3] is None else r[3] for r in flat],
                               [r[4] for r in flat])


def module_path_columns(names: list[str], parents: Sequence[int], seqs: Sequence[int], modules: list[str]) -> list[str]:
    """The module path of every op instance: the annotation around it in forward; in backward (autograd's own
    thread, outside any annotation) the module of the forward op whose sequence number the enclosing autograd node
    (`MmBackward0`, `autograd::engine::evaluate_function: ...`) carries. A sequence number of _Ops.NONE is none."""
    none = _Ops.NONE
    forward: dict[int, str] = {}
    for name, seq, module in zip(names, seqs, modules):
        if seq != none and module and "Backward" not in name and seq not in forward:
            forward[seq] = module
    out: list[str] = []
    for k, module in enumerate(modules):
        j = k
        while not module and j >= 0:
            seq = seqs[j]
            if seq != none and "Backward" in names[j] and seq in forward:
                module = forward[seq]
                break
            j = parents[j]
        out.append(module)
    return out
