"""Read the .db export of the Ascend PyTorch profiler (torch_npu.profiler with `export_type="db"`:
ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db, SQLite) into the events the text reader makes
(npuport.profile.ascend_model), so one run reads the same whichever export it was saved as.

The tables read (META_DATA SCHEMA_VERSION 1.0.0 in the public sample, tests/fixtures/profiles/ascend/README.md;
what writes them: Ascend/pytorch@9e73e708 torch_npu/profiler/analysis/prof_view/prof_db_parse/):

- STRING_IDS: every name is an id into it.
- PYTORCH_API (startNs and endNs as text, globalTid, connectionId, name, sequenceNumber, type): rows of type 50001
  ("op" in ENUM_API_TYPE) are what the text export writes as cpu_ops: namespaced ones are the ops, `ProfilerStep#N`
  the steps, `npuport.module:` / `npuport.skip:` the recorder's ranges, torch_npu's own layers (aclnn*, Conv2D,
  HcclAllreduce, empty_tensor) not ops. Rows of type 50003 ("trace") named `nn.Module: X_n` are modules.
- CONNECTION_IDS: an API row's connectionId -> the connection ids of the launches torch_npu gave it
  (_fwk_api_db_parser.py: the innermost op around each task-queue entry whose dequeue holds the CANN launch);
  TASK.connectionId and COMMUNICATION_OP.connectionId are among those.
- TASK (startNs, endNs, deviceId, streamId, connectionId, globalTaskId, taskType): the device tasks, less the
  bookkeeping ones (NOT_WORK: event record / wait, profiling markers) and less the collectives' own steps (the
  globalTaskIds of COMMUNICATION_TASK_INFO); COMPUTE_TASK_INFO names the kernel (else the task type names it).
- COMMUNICATION_OP (opName, startNs, endNs, connectionId, groupName): one task per collective, named without its
  per-call suffix, as the text reader counts the HCCL process's collectives; the TASK rows with its connection id
  (its steps on the communication stream, and one task spanning it there) are not counted again.
- CANN_API and the task queue's Enqueue / Dequeue rows (PYTORCH_API type 50002): for a task whose connection no op
  row holds (a copy's aclrtMemcpyAsync: torch_npu links only node-level launches to ops), its CANN row's dequeue,
  whose enqueue twin ran inside the op that asked for it.

A task goes to the innermost namespaced op enclosing the API row that holds its connection (that row itself when
it is an op), the rule the text reader applies to a flow's start. Not read: memory, PMU, communication bandwidth,
the call stacks; analysis.db.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

from npuport.errors import NpuportError
from npuport.profile.ascend_model import (
    CALL_SUFFIX,
    MODULE_PREFIX,
    NOT_WORK,
    STEP_PREFIX,
    Events,
    Launch,
    Tasks,
    attributed,
)
from npuport.profile.kineto import MODULE_MARK, SKIP_MARK, Trace

OP_TYPE, QUEUE_TYPE, TRACE_TYPE = 50001, 50002, 50003  # ENUM_API_TYPE: "op", "queue", "trace"
_NEEDED = ("STRING_IDS", "PYTORCH_API", "CONNECTION_IDS", "TASK")


def is_profiler_db(path: Path) -> bool:
    return path.is_file() and path.suffix == ".db" and path.name.startswith("ascend_pytorch_profiler")


def read_db(path: Path, source: str) -> Trace:
    """One rank's .db export per op (see the module doc)."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            ev, tasks, launches = _read(con)
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise NpuportError(f"{path} cannot be read as the Ascend profiler's database", "an SQLite ascend_pytorch_profiler_*.db",
                           str(exc)) from None
    if not ev.ops and not tasks.by_place:
        raise NpuportError(f"{path}: no torch op and no device task", "the .db export of one profiled run", "empty tables")
    return attributed(ev, tasks, launches, source)


def _read(con: sqlite3.Connection) -> tuple[Events, Tasks, list[Launch]]:
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    missing = [t for t in _NEEDED if t not in tables]
    if missing:
        raise NpuportError("the Ascend profiler's database lacks tables this reader needs", ", ".join(_NEEDED),
                           "missing " + ", ".join(missing))
    names: dict[int, str] = dict(con.execute("select id, value from STRING_IDS"))
    ev = Events()
    holder: dict[int, tuple[tuple[Any, Any], int]] = {}  # a launch's connection id -> (thread, start ns) of its API row
    rows = con.execute("select startNs, endNs, globalTid, connectionId, name, sequenceNumber, type from PYTORCH_API")
    launch_rows: dict[int, tuple[tuple[Any, Any], int]] = {}  # API row connectionId -> (thread, start)
    for start_s, end_s, tid, conn, name_id, seq, kind in rows:
        name = names.get(name_id, "")
        try:
            start, end = int(start_s), int(end_s)
        except (TypeError, ValueError):
            continue
        thread = ("db", tid)
        span = (start, end, (end - start) / 1000, name)
        if kind == OP_TYPE:
            if conn is not None:
                launch_rows[conn] = (thread, start)
            if name.startswith(STEP_PREFIX):
                ev.steps.append(span)
            elif "::" in name:
                ev.ops[thread].append(span)
                if isinstance(seq, int) and seq >= 0:
                    ev.seqs[(thread[0], thread[1], start, name)] = seq
            elif name.startswith(MODULE_MARK):
                ev.modules[thread].append((start, end, span[2], name[len(MODULE_MARK):]))
                ev.marked = True
            elif name.startswith(SKIP_MARK):
                ev.skips[thread].append((start, end))
        elif kind == TRACE_TYPE and name.startswith(MODULE_PREFIX):
            ev.modules[thread].append((start, end, span[2], name[len(MODULE_PREFIX):]))
    # an op row's CONNECTION_IDS also hold its forward / backward flow ids; only a CANN call's id is a launch (the
    # two number ranges could meet in a long run of an older torch_npu, which offsets neither)
    launch_ids = {r[0] for r in con.execute("select connectionId from CANN_API")} if "CANN_API" in tables else None
    links: dict[int, list[int]] = defaultdict(list)
    for api_conn, launch_conn in con.execute("select id, connectionId from CONNECTION_IDS"):
        links[api_conn].append(launch_conn)
        if api_conn in launch_rows and (launch_ids is None or launch_conn in launch_ids):
            holder[launch_conn] = launch_rows[api_conn]
    for conn, point in _launch_points(con, tables, names, links).items():
        holder.setdefault(conn, point)
    tasks, launches = _tasks(con, tables, names, holder)
    return ev, tasks, launches


def _launch_points(con: sqlite3.Connection, tables: set[str], names: dict[int, str],
                   links: dict[int, list[int]]) -> dict[int, tuple[tuple[Any, Any], int]]:
    """Where the tasks whose connection no op row holds were launched from, by connection id. torch_npu links only
    node-level launches to ops, so a copy's `aclrtMemcpyAsync` (or an operator compiled on first use) has only its
    CANN_API row. That row runs on the task queue's thread inside a `Dequeue@...` row, whose `Enqueue` twin (the same
    correlation id through CONNECTION_IDS) ran on the op's thread inside the op: that is the launch point. A CANN row
    outside every dequeue (no task queue) ran on the op's thread itself."""
    if "CANN_API" not in tables:
        return {}
    enqueued: dict[int, tuple[tuple[Any, Any], int]] = {}
    dequeues: dict[Any, list[tuple[int, int, int]]] = defaultdict(list)
    for start_s, end_s, tid, conn, name_id in con.execute(
            "select startNs, endNs, globalTid, connectionId, name from PYTORCH_API where type = ?", (QUEUE_TYPE,)):
        corr = links.get(conn, [None])[0] if conn is not None else None
        if corr is None:
            continue
        name = names.get(name_id, "")
        if name == "Enqueue" or name.startswith("Enqueue@"):  # "Enqueue@<op>" since Ascend/pytorch 72e3a7dc (2025-06)
            enqueued[corr] = (("db", tid), int(start_s))
        elif name.startswith("Dequeue"):
            dequeues[tid].append((int(start_s), int(end_s), corr))
    starts: dict[Any, list[int]] = {}
    for tid, spans in dequeues.items():
        spans.sort()
        starts[tid] = [a for a, _, _ in spans]
    out: dict[int, tuple[tuple[Any, Any], int]] = {}
    for start, tid, conn in con.execute("select startNs, globalTid, connectionId from CANN_API"):
        if conn is None:
            continue
        point: tuple[tuple[Any, Any], int] | None = (("db", tid), int(start))
        queue = dequeues.get(tid)
        if queue:
            k = bisect.bisect_right(starts[tid], int(start)) - 1
            if k >= 0 and queue[k][0] <= int(start) < queue[k][1]:
                point = enqueued.get(queue[k][2])
        if point is not None:
            out[conn] = point
    return out


def _tasks(con: sqlite3.Connection, tables: set[str], names: dict[int, str],
           holder: dict[int, tuple[tuple[Any, Any], int]]) -> tuple[Tasks, list[Launch]]:
    comm_steps: set[int] = set()
    if "COMMUNICATION_TASK_INFO" in tables:
        comm_steps = {r[0] for r in con.execute("select globalTaskId from COMMUNICATION_TASK_INFO")}
    kernel: dict[int, str] = {}
    if "COMPUTE_TASK_INFO" in tables:
        kernel = {gid: names.get(n, "") for n, gid in con.execute("select name, globalTaskId from COMPUTE_TASK_INFO")}
    found: dict[tuple[Any, Any], list[tuple[int, int, float, str, int | None]]] = defaultdict(list)
    collective_conns: set[int] = set()
    if "COMMUNICATION_OP" in tables:
        for name_id, start, end, conn, group in con.execute(
                "select opName, startNs, endNs, connectionId, groupName from COMMUNICATION_OP"):
            name = names.get(name_id, "")
            collective_conns.add(conn)
            found[("hccl", str(names.get(group, group)))].append((start, end, (end - start) / 1000,
                                                                   CALL_SUFFIX.sub("", name) or name, conn))
    for start, end, device, stream, conn, gid, ttype in con.execute(
            "select startNs, endNs, deviceId, streamId, connectionId, globalTaskId, taskType from TASK"):
        kind = names.get(ttype, "")
        # a collective's own tasks (its steps, and the one spanning it on its stream) share its connection id: the
        # collective is counted once, as itself (the text reader's rule)
        if kind in NOT_WORK or gid in comm_steps or conn in collective_conns:
            continue
        found[("stream", f"{device}:{stream}")].append((start, end, (end - start) / 1000, kernel.get(gid) or kind, conn))
    by_place: dict[tuple[Any, Any], list[Any]] = {}
    launches: list[Launch] = []
    for place, items in found.items():
        items.sort(key=lambda x: (x[0], -x[1]))
        by_place[place] = [x[:4] for x in items]
        for k, item in enumerate(items):
            src = holder.get(item[4]) if item[4] is not None else None
            if src is not None:
                launches.append((place, k, src[0], src[1]))
    return Tasks(by_place), launches


def iter_db(folder: Path) -> Iterator[Path]:
    """The profiler databases in an ASCEND_PROFILER_OUTPUT folder."""
    return (p for p in sorted(folder.glob("ascend_pytorch_profiler*.db")) if p.is_file())
