"""Read the text export of the Ascend PyTorch profiler (torch_npu.profiler) into the same per-op `Trace` as the
Kineto reader (npuport/profile/kineto.py), so a run on an NPU imports like one on a GPU. Times are microseconds.

Where: a `*_ascend_pt` folder (one rank), its `ASCEND_PROFILER_OUTPUT` folder, a folder holding exactly one of those,
or the `trace_view.json` file itself. Any of the files read may be gzip-compressed (`trace_view.json.gz`, ...).

Primary source, `ASCEND_PROFILER_OUTPUT/trace_view.json`: a bare JSON array (timestamps are µs strings), streamed
one event at a time. Its processes are found by their `process_name` metadata:

- Ops: "cpu_op" events whose name has a namespace (`aten::`, `npu::`, `c10d::`, `autograd::...`). torch_npu also
  records its own layers as cpu_ops (`aclnnMm`, `Conv2D`, `HcclAllreduce`, `empty_tensor`, autograd nodes such as
  `MmBackward0`, record_function ranges such as `Optimizer.step#SGD.step`): those are not ops here. They are not in
  the nesting, so their host time counts as the self time of the op that encloses them, and their kernels go to it:
  the innermost namespaced op, the same rule as the Kineto reader's innermost cpu_op.
- Device tasks: the "Ascend Hardware" process (one thread per stream) less the tasks that are not work (event
  record / wait, notify, profiling markers: a wait there lasts as long as what it waits for, and CUDA traces have no
  such kernels), less the sub-tasks of collectives; plus the collectives themselves from the "HCCL" process (its
  group thread, not the "Plane N" ones): one task per collective, as NCCL is one kernel per collective on CUDA.
  Collective names lose their per-call suffix (`hcom_allReduce__586_0_1` -> `hcom_allReduce_`).
- Op -> task: a flow, cat "async_npu", name "torch_to_npu", from a cpu_op (start at the op's own start, on its
  thread) to the task (end at the task's start, on its stream); a task without one is unattributed.
- Modules: "nn.Module: X_n" python_function events (with_modules / with_stack): an op inside one is counted under
  (innermost module, op) too. A run `npuport profile record --dev npu` made carries its own module marks instead:
  record_function ranges "npuport.module:<path>", which torch_npu writes as cpu_ops like any record_function; an op
  inside one gets that path, and a backward op the path of the forward op whose sequence number its autograd node
  carries (the Kineto reader's rule, `kineto.module_paths`). Its "npuport.skip:" ranges (the recorder's own work
  between steps) are left out with the tasks their ops launched.
- Steps: "ProfilerStep#N" events: wall time, the union of task time inside, the idle rest.
- "CANN" (ACL API calls) and "Overlap Analysis" (derived) are not read.

Fallback when there is no trace_view.json (e.g. a level-0 export made with an old release, or only the CSVs kept):
`kernel_details.csv` gives the tasks (Name, Type, Duration(us), Start Time(us), Step Id) and `operator_details.csv`,
if present, the host self time per op call. These files carry no op-to-kernel link, so the device time goes to
pseudo-ops named after the kernel Type with a "kernel:" prefix (`kernel:MatMulV2`); the aten ops carry host time
only. torch_npu's own layers (rows without a namespace) are dropped there: without timestamps they cannot be folded
into their op. Steps come from the "Step Id" column: the span of the step's kernels (device side, not the host's
ProfilerStep time), their union and the idle rest.

Not read: the `.db` export (export_type="db"), communication.json, memory and the AI Core metric columns; several
ranks at once (import one `*_ascend_pt` folder per rank). A run whose export holds no device task (CPU activity only)
is reported as the Kineto reader reports a CPU run: device "cpu", device time = self host time.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from npuport.errors import NpuportError
from npuport.profile.kineto import MODULE_MARK, SKIP_MARK, UNATTRIBUTED, OpStats, Trace, array_items, iter_events, module_paths

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
RANK_SUFFIX = "_ascend_pt"
TRACE_FILE = "trace_view.json"
KERNELS_CSV = "kernel_details.csv"
OPERATORS_CSV = "operator_details.csv"
HARDWARE, HCCL = "Ascend Hardware", "HCCL"
FLOW_CAT, FLOW_NAME = "async_npu", "torch_to_npu"
MODULE_PREFIX = "nn.Module: "
STEP_PREFIX = "ProfilerStep#"
# Ascend Hardware tasks that are stream bookkeeping, not work (task types as in the Task Type arg, and task names)
NOT_WORK = {"EVENT_WAIT_SQE", "EVENT_RECORD_SQE", "NOTIFY_WAIT_SQE", "NOTIFY_RECORD_SQE", "PLACE_HOLDER_SQE",
            "EVENT_WAIT", "EVENT_RECORD", "NOTIFY_WAIT", "NOTIFY_RECORD", "PROFILING_ENABLE", "PROFILING_DISABLE"}
_CHUNK = 1 << 20
_CALL_SUFFIX = re.compile(r"(_\d+)+$")


# ---- where the export is --------------------------------------------------------------------------------------------

def _present(folder: Path, name: str) -> Path | None:
    """folder/name, or its .gz twin."""
    for p in (folder / name, folder / (name + ".gz")):
        if p.is_file():
            return p
    return None


def _is_output_dir(p: Path) -> bool:
    return p.is_dir() and (p.name == OUTPUT_DIR or p.name.endswith(RANK_SUFFIX))


def is_ascend_output(path: Path) -> bool:
    """True for what read_ascend reads: a `*_ascend_pt` or ASCEND_PROFILER_OUTPUT folder, a folder holding one (or
    several ranks: read_ascend then says to pick one), or a trace_view.json(.gz) file."""
    p = Path(path)
    if p.is_file():
        return p.name in (TRACE_FILE, TRACE_FILE + ".gz")
    if not p.is_dir():
        return False
    return _is_output_dir(p) or any(_is_output_dir(c) for c in p.iterdir())


def _output_dir(p: Path) -> Path:
    """The ASCEND_PROFILER_OUTPUT folder of what the user named (see is_ascend_output)."""
    if not p.exists():
        raise NpuportError(f"no Ascend profiler output at {p}", f"a *{RANK_SUFFIX} or {OUTPUT_DIR} folder", "nothing there")
    if p.name == OUTPUT_DIR:
        return p
    if (p / OUTPUT_DIR).is_dir():
        return p / OUTPUT_DIR
    if p.name.endswith(RANK_SUFFIX):
        raise NpuportError(f"{p} has no {OUTPUT_DIR} folder: the run was not parsed yet",
                           "the parsed export (torch_npu.profiler.profiler.analyse(path) writes it)", "raw data only")
    ranks = sorted(c.name for c in p.iterdir() if c.is_dir() and c.name.endswith(RANK_SUFFIX)) if p.is_dir() else []
    if len(ranks) == 1:
        return _output_dir(p / ranks[0])
    if ranks:
        raise NpuportError(f"{p} holds {len(ranks)} ranks", f"one *{RANK_SUFFIX} folder (import each rank)", ", ".join(ranks))
    raise NpuportError(f"{p} is not Ascend profiler output", f"a *{RANK_SUFFIX} or {OUTPUT_DIR} folder", str(p))


def _open_text(p: Path) -> IO[str]:
    if p.name.endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8", newline="")
    return p.open("r", encoding="utf-8", newline="")


# ---- streaming trace_view.json --------------------------------------------------------------------------------------

def _iter_bare_array(p: Path) -> Iterator[dict[str, Any]]:
    """The objects of a top-level JSON array, one at a time, never holding the file or the document whole.
    A `{"traceEvents": [...]}` file (the Chrome trace form) goes to the Kineto reader's streamer."""
    bad = f"{p}: not a {TRACE_FILE}"
    try:
        with _open_text(p) as fh:
            buf, pos = fh.read(_CHUNK), 0
            while pos < len(buf) and buf[pos] in " \t\r\n\ufeff":
                pos += 1
            if buf[pos:pos + 1] == "{":
                yield from iter_events(p)
                return
            if buf[pos:pos + 1] != "[":
                raise NpuportError(bad, "a JSON array of trace events", repr(buf[pos:pos + 40]) if buf else "an empty file")
            pos += 1
            yield from array_items(fh, buf, pos, bad)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise NpuportError(bad, "a readable .json or .json.gz file", f"{type(exc).__name__}: {exc}") from None


def _ns(v: Any) -> int | None:
    """A timestamp in integer nanoseconds. The export writes µs since the epoch as strings ("1736408883688177.930"):
    as a float that is only 0.25 µs exact, too coarse to match a flow's end to its task's start."""
    if isinstance(v, str):
        whole, _, frac = v.strip().partition(".")
        if whole.isdigit() and (frac.isdigit() or not frac):
            return int(whole) * 1000 + int((frac + "000")[:3])
        try:
            return round(float(v) * 1000)
        except ValueError:
            return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return round(v * 1000)
    return None


def _dur(v: Any) -> float:
    try:
        return max(float(v), 0.0)
    except (TypeError, ValueError):
        return 0.0


# ---- the events kept from trace_view.json ---------------------------------------------------------------------------

Span = tuple[int, int, float, str]  # start ns, end ns, duration µs, name
Place = tuple[Any, Any, int]  # pid, tid, ns


@dataclass
class _Events:
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


def _collect(events: Iterable[dict[str, Any]]) -> _Events:
    ev = _Events()
    for e in events:
        ev.seen += 1
        ph, name, pid, tid = e.get("ph"), str(e.get("name", "")), e.get("pid"), e.get("tid")
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if ph == "M":
            if name == "process_name":
                ev.procs[pid] = str(args.get("name", ""))
            elif name == "thread_name":
                ev.threads[(pid, tid)] = str(args.get("name", ""))
            continue
        ts = _ns(e.get("ts"))
        if ts is None:
            continue
        if ph in ("s", "f"):
            if e.get("cat") == FLOW_CAT and e.get("id") is not None:
                (ev.flow_from if ph == "s" else ev.flow_to)[str(e["id"])] = (pid, tid, ts)
            continue
        if ph != "X":
            continue
        dur = _dur(e.get("dur"))
        span = (ts, ts + round(dur * 1000), dur, name)
        cat = e.get("cat")
        if name.startswith(STEP_PREFIX):
            ev.steps.append(span)
        elif cat == "cpu_op":
            if "::" in name:
                ev.ops[(pid, tid)].append(span)
                seq = args.get("Sequence number")
                if isinstance(seq, int) and seq >= 0:
                    ev.seqs[(pid, tid, ts, name)] = seq
            elif name.startswith(MODULE_MARK):
                ev.modules[(pid, tid)].append((ts, span[1], dur, name[len(MODULE_MARK):] or "(root)"))
                ev.marked = True
            elif name.startswith(SKIP_MARK):
                ev.skips[(pid, tid)].append((ts, span[1]))
        elif cat == "python_function":
            if name.startswith(MODULE_PREFIX):
                ev.modules[(pid, tid)].append((ts, span[1], dur, name[len(MODULE_PREFIX):]))
        elif cat is None:
            ev.device.append((pid, tid, ts, dur, name, str(args.get("Task Type", "")), args.get("stream id")))
    return ev


@dataclass
class _Tasks:
    """The device tasks that count, per (pid, tid), sorted by start: start ns, end ns, duration µs, kernel name."""

    by_place: dict[tuple[Any, Any], list[Span]]

    def all(self) -> Iterator[tuple[tuple[Any, Any], int]]:
        for place, spans in self.by_place.items():
            for k in range(len(spans)):
                yield place, k


def _tasks(ev: _Events) -> _Tasks:
    hw = {pid for pid, n in ev.procs.items() if n == HARDWARE}
    hccl = {pid for pid, n in ev.procs.items() if n == HCCL}
    collectives: list[tuple[int, int]] = []
    comm_streams: set[str] = set()
    out: dict[tuple[Any, Any], list[Span]] = defaultdict(list)
    for pid, tid, ts, dur, name, _, stream in ev.device:
        if pid not in hccl:
            continue
        if ev.threads.get((pid, tid), "").startswith("Plane") or stream is not None:
            if stream is not None:
                comm_streams.add(str(stream))
        else:
            collectives.append((ts, ts + round(dur * 1000)))
            out[(pid, tid)].append((ts, ts + round(dur * 1000), dur, _CALL_SUFFIX.sub("", name) or name))
    collectives.sort()
    starts = [a for a, _ in collectives]
    # Level 0 exports have no "Plane" events naming the collectives' streams: there, a hardware stream that no op
    # launches to (no flow ends on it) and that runs tasks during a collective is taken for a communication stream
    launched = {(pid, tid) for pid, tid, _ in ev.flow_to.values()}

    def inside_collective(ts: int) -> bool:
        k = bisect.bisect_right(starts, ts) - 1
        return k >= 0 and ts < collectives[k][1]

    if not comm_streams:
        comm_streams = {str(tid) for pid, tid, ts, *_ in ev.device
                        if pid in hw and (pid, tid) not in launched and inside_collective(ts)}
    for pid, tid, ts, dur, name, ttype, _ in ev.device:
        if pid not in hw or ttype in NOT_WORK or name in NOT_WORK:
            continue
        # a collective's own steps on its stream (SDMA, Notify Wait, ...): counted once, as the collective
        if str(tid) in comm_streams and inside_collective(ts):
            continue
        out[(pid, tid)].append((ts, ts + round(dur * 1000), dur, name))
    for spans in out.values():
        spans.sort()
    return _Tasks(dict(out))


# ---- nesting --------------------------------------------------------------------------------------------------------

def _innermost(spans: list[Span], starts: list[int], ts: int) -> int | None:
    """Index of the latest-starting span that encloses ts (spans sorted by start, outer before inner)."""
    k = bisect.bisect_right(starts, ts) - 1
    while k >= 0:
        a, b = spans[k][0], spans[k][1]
        if a <= ts < b or a == ts == b:
            return k
        k -= 1
    return None


@dataclass
class _OpCall:
    name: str
    parent: str
    self_us: float
    module: str | None
    device_us: float = 0.0
    kernels: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    up: int = -1  # the enclosing op's index in the flat list
    seq: int | None = None  # its Sequence number (autograd's link from a backward node to its forward op)


def _skipped(ev: _Events, thread: tuple[Any, Any], ts: int) -> bool:
    return any(a <= ts < b for a, b in ev.skips.get(thread, ()))


def _nest(ev: _Events) -> tuple[list[_OpCall], dict[tuple[Any, Any], tuple[list[Span], list[int], int]]]:
    """Per thread: each op's parent and self time; the innermost module it ran in. Also, per thread, the sorted
    spans, their starts and the index of the thread's first call in the flat list (to find the op of a flow).
    Ops inside a skip range are dropped here (so the tasks they launched find no owner and are dropped too)."""
    calls: list[_OpCall] = []
    index: dict[tuple[Any, Any], tuple[list[Span], list[int], int]] = {}
    mods = {t: sorted(s, key=lambda x: (x[0], -x[1])) for t, s in ev.modules.items()}
    mod_starts = {t: [x[0] for x in s] for t, s in mods.items()}
    for thread, spans in ev.ops.items():
        if thread in ev.skips:
            spans[:] = [sp for sp in spans if not _skipped(ev, thread, sp[0])]
        spans.sort(key=lambda x: (x[0], -x[1]))
        first = len(calls)
        stack: list[int] = []
        for ts, end, dur, name in spans:
            while stack and ts >= spans[stack[-1] - first][1]:
                stack.pop()
            parent = calls[stack[-1]].name if stack else ""
            if stack:
                calls[stack[-1]].self_us -= dur
            k = _innermost(mods[thread], mod_starts[thread], ts) if thread in mods else None
            calls.append(_OpCall(name, parent, dur, mods[thread][k][3] if k is not None else None,
                                 up=stack[-1] if stack else -1, seq=ev.seqs.get((thread[0], thread[1], ts, name))))
            stack.append(len(calls) - 1)
        index[thread] = (spans, [s[0] for s in spans], first)
    if ev.marked:  # npuport's marks: backward ops take their forward op's module, as the Kineto reader does
        paths = module_paths([(c.name, c.up, 0.0, c.seq, c.module or "") for c in calls])
        for c, path in zip(calls, paths):
            c.module = path  # "" outside every mark: counted under the root, as the Kineto reader counts it
    return calls, index


def _union(intervals: Iterable[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is not None and b <= end:
            continue
        total += b - (a if end is None else max(a, end))
        end = b
    return total


def _step_rows(steps: list[tuple[str, int, int, float]], busy: list[tuple[int, int]],
               host: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """Per step (name, start ns, end ns, wall µs): wall, the union of busy time inside, the idle rest, and (given the
    CPU ops' spans) the union of host op time inside, as kineto.py reports it."""
    rows = []
    for name, a, b, wall in sorted(steps, key=lambda s: s[1]):
        work = _union((max(x, a), min(y, b)) for x, y in busy if y > a and x < b) / 1000
        row = {"name": name, "wall_us": wall, "kernel_us": work, "idle_us": max(wall - work, 0.0)}
        if host is not None:
            row["host_us"] = _union((max(x, a), min(y, b)) for x, y in host if y > a and x < b) / 1000
        rows.append(row)
    return rows


def _add(st: OpStats, calls: int, host: float, dev: float, parent: str, kernels: dict[str, float]) -> None:
    st.calls += calls
    st.host_us += host
    st.device_us += dev
    st.parents[parent] += dev
    for k, v in kernels.items():
        st.kernels[k] += v


def _from_trace(path: Path, source: str) -> Trace:
    ev = _collect(_iter_bare_array(path))
    if not ev.seen:
        raise NpuportError(f"{path} holds no events", "the trace events of one profiled run", "an empty array")
    if not ev.ops and not ev.device:
        raise NpuportError(f"{path}: no cpu_op and no device events", f"a torch_npu {TRACE_FILE}", f"{ev.seen} other events")
    tasks = _tasks(ev)
    calls, index = _nest(ev)
    task_starts = {place: [s[0] for s in spans] for place, spans in tasks.by_place.items()}
    owner: dict[tuple[tuple[Any, Any], int], int] = {}  # task -> op call
    dropped: set[tuple[tuple[Any, Any], int]] = set()  # tasks launched inside a skip range
    for fid, (pid, tid, ts) in ev.flow_to.items():
        src = ev.flow_from.get(fid)
        if src is None or (pid, tid) not in tasks.by_place:
            continue
        # the flow ends at the task's start on its stream ("bp": "e": the enclosing slice)
        k = _innermost(tasks.by_place[(pid, tid)], task_starts[(pid, tid)], ts)
        thread = (src[0], src[1])
        if k is not None and thread in ev.skips and _skipped(ev, thread, src[2]):
            dropped.add(((pid, tid), k))
            continue
        if k is None or thread not in index:
            continue
        op_spans, op_starts, first = index[thread]
        j = _innermost(op_spans, op_starts, src[2])
        if j is not None:
            owner.setdefault(((pid, tid), k), first + j)
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
        tasks = _Tasks(keep)

    unattributed = OpStats()
    n_tasks = 0
    for place, k in tasks.all():
        n_tasks += 1
        _, _, dur, kname = tasks.by_place[place][k]
        who = owner.get((place, k))
        if who is None:
            _add(unattributed, 0, 0.0, dur, "", {kname: dur})
        else:
            calls[who].device_us += dur
            calls[who].kernels[kname] += dur

    on_cpu = n_tasks == 0
    ops: dict[str, OpStats] = defaultdict(OpStats)
    by_module: dict[tuple[str, str], OpStats] = defaultdict(OpStats)
    for c in calls:
        host = max(c.self_us, 0.0)
        dev = host if on_cpu else c.device_us
        _add(ops[c.name], 1, host, dev, c.parent, c.kernels)
        if c.module is not None:
            _add(by_module[(c.module, c.name)], 1, host, dev, c.parent, c.kernels)
    if unattributed.device_us:
        ops[UNATTRIBUTED] = unattributed

    # busy: the device tasks; on a CPU run the ops themselves (their union is the top-level op time, as in kineto.py)
    busy = [(a, b) for spans in (ev.ops.values() if on_cpu else tasks.by_place.values()) for a, b, *_ in spans]
    host_spans = [(a, b) for spans in ev.ops.values() for a, b, *_ in spans]
    steps = _step_rows([(name, a, b, dur) for a, b, dur, name in ev.steps], busy, host_spans)
    return Trace(format="ascend", source=source, device="cpu" if on_cpu else "npu", ops=dict(ops), steps=steps, kernels=n_tasks,
                 cpu_ops=len(calls), by_module=dict(by_module))


# ---- fallback: kernel_details.csv (+ operator_details.csv) ----------------------------------------------------------

def _csv_rows(p: Path, needed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) with stripped headers and values ("Start Time(us)" ends in a tab); the needed columns must exist."""
    try:
        with _open_text(p) as fh:
            reader = csv.reader(fh)
            header = [h.strip().lstrip("\ufeff") for h in next(reader, [])]
            missing = [c for c in needed if c not in header]
            if missing:
                raise NpuportError(f"{p}: not a torch_npu {p.name.removesuffix('.gz')}",
                                   "columns " + ", ".join(needed), "no " + ", ".join(missing))
            for row in reader:
                if row:
                    yield reader.line_num, {h: v.strip() for h, v in zip(header, row)}
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
        raise NpuportError(f"{p}: unreadable CSV", "a .csv or .csv.gz file", f"{type(exc).__name__}: {exc}") from None


def _number(p: Path, line: int, col: str, v: str) -> float:
    try:
        return float(v)
    except ValueError:
        raise NpuportError(f"{p}:{line}: bad {col}", "a number", repr(v)) from None


def _from_csv(kernels_csv: Path, operators_csv: Path | None, source: str) -> Trace:
    ops: dict[str, OpStats] = defaultdict(OpStats)
    by_step: dict[str, list[tuple[int, int]]] = defaultdict(list)
    n_kernels = 0
    for line, r in _csv_rows(kernels_csv, ("Name", "Duration(us)")):
        dur = max(_number(kernels_csv, line, "Duration(us)", r["Duration(us)"]), 0.0)
        kname = r["Name"]
        # collectives: drop the per-call suffix, as on the trace path
        if r.get("Accelerator Core") == "HCCL":
            kname = _CALL_SUFFIX.sub("", kname) or kname
        _add(ops["kernel:" + (r.get("Type") or r["Name"])], 1, 0.0, dur, "", {kname: dur})
        n_kernels += 1
        start = _ns(r.get("Start Time(us)", ""))
        if r.get("Step Id") and start is not None:
            by_step[r["Step Id"]].append((start, start + round(dur * 1000)))
    n_ops = 0
    if operators_csv is not None:
        col = "Host Self Duration(us)"
        for line, r in _csv_rows(operators_csv, ("Name", col)):
            if "::" in r["Name"]:  # torch_npu's own layers cannot be folded into their op without timestamps
                _add(ops[r["Name"]], 1, max(_number(operators_csv, line, col, r[col]), 0.0), 0.0, "", {})
                n_ops += 1
    if not n_kernels:
        for st in ops.values():  # no device task: a CPU run, as the Kineto reader reports one
            st.device_us = st.host_us
            st.parents = defaultdict(float, {"": st.host_us})
    steps = []
    for sid, spans in by_step.items():
        a, b = min(x for x, _ in spans), max(y for _, y in spans)
        steps.append((STEP_PREFIX + sid, a, b, (b - a) / 1000))
    return Trace(format="ascend", source=source, device="npu" if n_kernels else "cpu", ops=dict(ops),
                 steps=_step_rows(steps, [s for v in by_step.values() for s in v]), kernels=n_kernels, cpu_ops=n_ops)


def read_ascend(path: str | Path) -> Trace:
    """Aggregate one rank of an Ascend PyTorch profiler export per op (see the module doc)."""
    p = Path(path)
    if p.is_file():
        if not is_ascend_output(p):
            raise NpuportError(f"{p} is not Ascend profiler output", f"{TRACE_FILE}(.gz) or a *{RANK_SUFFIX} folder", p.name)
        return _from_trace(p, str(p))
    out = _output_dir(p)
    trace = _present(out, TRACE_FILE)
    if trace is not None:
        return _from_trace(trace, str(p))
    kernels = _present(out, KERNELS_CSV)
    if kernels is not None:
        return _from_csv(kernels, _present(out, OPERATORS_CSV), str(p))
    has_db = any(out.glob("*.db"))
    raise NpuportError(f"{out} has neither {TRACE_FILE} nor {KERNELS_CSV}",
                       "the text export (torch_npu experimental_config export_type='text')",
                       "a .db export, which is not read" if has_db else ", ".join(sorted(c.name for c in out.iterdir())) or "an empty folder")
