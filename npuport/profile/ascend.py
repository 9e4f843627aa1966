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

The `.db` export (export_type="db", ascend_pytorch_profiler_*.db) is read by npuport.profile.ascend_db into the same
events, when the folder has no trace_view.json. Not read: communication.json, memory and the AI Core metric
columns; several ranks at once (import one `*_ascend_pt` folder per rank). A run whose export holds no device task (CPU activity only)
is reported as the Kineto reader reports a CPU run: device "cpu", device time = self host time.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import zlib
from collections import defaultdict
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from npuport.errors import NpuportError
from npuport.profile.ascend_db import is_profiler_db, iter_db, read_db
from npuport.profile.ascend_model import (
    CALL_SUFFIX,
    MODULE_PREFIX,
    NOT_WORK,
    STEP_PREFIX,
    Events,
    Launch,
    Span,
    Tasks,
    add_stats,
    attributed,
    innermost,
    step_rows,
)
from npuport.profile.kineto import MODULE_MARK, SKIP_MARK, OpStats, Trace, array_items, count_kernel, iter_events

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
RANK_SUFFIX = "_ascend_pt"
TRACE_FILE = "trace_view.json"
KERNELS_CSV = "kernel_details.csv"
OPERATORS_CSV = "operator_details.csv"
HARDWARE, HCCL = "Ascend Hardware", "HCCL"
FLOW_CAT, FLOW_NAME = "async_npu", "torch_to_npu"
_CHUNK = 1 << 20


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
    several ranks: read_ascend then says to pick one), a trace_view.json(.gz) file or an ascend_pytorch_profiler*.db."""
    p = Path(path)
    if p.is_file():
        return p.name in (TRACE_FILE, TRACE_FILE + ".gz") or is_profiler_db(p)
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

def _collect(events: Iterable[dict[str, Any]]) -> Events:
    ev = Events()
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


def _tasks(ev: Events) -> Tasks:
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
            out[(pid, tid)].append((ts, ts + round(dur * 1000), dur, CALL_SUFFIX.sub("", name) or name))
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
    return Tasks(dict(out))


def _from_trace(path: Path, source: str) -> Trace:
    ev = _collect(_iter_bare_array(path))
    if not ev.seen:
        raise NpuportError(f"{path} holds no events", "the trace events of one profiled run", "an empty array")
    if not ev.ops and not ev.device:
        raise NpuportError(f"{path}: no cpu_op and no device events", f"a torch_npu {TRACE_FILE}", f"{ev.seen} other events")
    tasks = _tasks(ev)
    return attributed(ev, tasks, _flow_launches(ev, tasks), source)


def _flow_launches(ev: Events, tasks: Tasks) -> Iterator[Launch]:
    """Per "torch_to_npu" flow: the task it ends at (at the task's start on its stream, "bp": "e": the enclosing
    slice) and the thread and time it leaves from (the launching cpu_op's start)."""
    task_starts = {place: [s[0] for s in spans] for place, spans in tasks.by_place.items()}
    for fid, (pid, tid, ts) in ev.flow_to.items():
        src = ev.flow_from.get(fid)
        if src is None or (pid, tid) not in tasks.by_place:
            continue
        k = innermost(tasks.by_place[(pid, tid)], task_starts[(pid, tid)], ts)
        if k is not None:
            yield (pid, tid), k, (src[0], src[1]), src[2]


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
    by_kernel: dict[str, list[float]] = {}
    for line, r in _csv_rows(kernels_csv, ("Name", "Duration(us)")):
        dur = max(_number(kernels_csv, line, "Duration(us)", r["Duration(us)"]), 0.0)
        kname = r["Name"]
        # collectives: drop the per-call suffix, as on the trace path
        if r.get("Accelerator Core") == "HCCL":
            kname = CALL_SUFFIX.sub("", kname) or kname
        add_stats(ops["kernel:" + (r.get("Type") or r["Name"])], 1, 0.0, dur, "", {kname: dur})
        count_kernel(by_kernel, kname, dur)
        n_kernels += 1
        start = _ns(r.get("Start Time(us)", ""))
        if r.get("Step Id") and start is not None:
            by_step[r["Step Id"]].append((start, start + round(dur * 1000)))
    n_ops = 0
    if operators_csv is not None:
        col = "Host Self Duration(us)"
        for line, r in _csv_rows(operators_csv, ("Name", col)):
            if "::" in r["Name"]:  # torch_npu's own layers cannot be folded into their op without timestamps
                add_stats(ops[r["Name"]], 1, max(_number(operators_csv, line, col, r[col]), 0.0), 0.0, "", {})
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
                 steps=step_rows(steps, [s for v in by_step.values() for s in v]), kernels=n_kernels, cpu_ops=n_ops,
                 by_kernel=by_kernel)


def read_ascend(path: str | Path) -> Trace:
    """Aggregate one rank of an Ascend PyTorch profiler export per op (see the module doc)."""
    p = Path(path)
    if p.is_file():
        if not is_ascend_output(p):
            raise NpuportError(f"{p} is not Ascend profiler output",
                               f"{TRACE_FILE}(.gz), an ascend_pytorch_profiler_*.db or a *{RANK_SUFFIX} folder", p.name)
        return read_db(p, str(p)) if is_profiler_db(p) else _from_trace(p, str(p))
    out = _output_dir(p)
    trace = _present(out, TRACE_FILE)
    if trace is not None:
        return _from_trace(trace, str(p))
    dbs = list(iter_db(out))
    if len(dbs) == 1:  # the .db export (export_type="db"): npuport.profile.ascend_db
        return read_db(dbs[0], str(p))
    if len(dbs) > 1:
        raise NpuportError(f"{out} holds {len(dbs)} profiler databases", "one ascend_pytorch_profiler_*.db (import each rank)",
                           ", ".join(d.name for d in dbs))
    kernels = _present(out, KERNELS_CSV)
    if kernels is not None:
        return _from_csv(kernels, _present(out, OPERATORS_CSV), str(p))
    raise NpuportError(f"{out} has neither {TRACE_FILE}, a profiler database nor {KERNELS_CSV}",
                       "the text or db export of torch_npu.profiler",
                       ", ".join(sorted(c.name for c in out.iterdir())) or "an empty folder")
