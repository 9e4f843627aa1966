"""Read an Nsight Systems SQLite export (`nsys export --type sqlite run.nsys-rep`, or the `.sqlite` that
`nsys profile --export sqlite` writes) into the same per-op `Trace` as kineto.py, so CUDA users' existing nsys runs
can be imported without re-profiling under torch.profiler.

Tables read (Nsight Systems' SQLite schema reference, https://docs.nvidia.com/nsight-systems/UserGuide/index.html
section "SQLite Schema Reference", and the older https://docs.nvidia.com/nsight-systems/2021.5/nsys-exporter/
exported_data.html); every time is in ns there and in µs here:

- CUPTI_ACTIVITY_KIND_KERNEL (required): start, end, correlationId, globalPid, demangledName / shortName (ids into
  StringIds). CUPTI_ACTIVITY_KIND_MEMCPY (copyKind, srcKind, dstKind) and CUPTI_ACTIVITY_KIND_MEMSET (memKind), when
  present, count as device work too, named as Kineto names them ("Memcpy HtoD (Pageable -> Device)", "Memset (Device)").
- CUPTI_ACTIVITY_KIND_RUNTIME: the CUDA API call with a kernel's correlationId gives the launching thread (globalTid)
  and the launch time. Correlation ids are unique per process, so they are matched within the process (globalPid).
- NVTX_EVENTS: ranges (eventType 59 NvtxPushPopRange, 60 NvtxStartEndRange) with their text in `text` or, for
  registered strings, in StringIds through `textId`.

Ops come from NVTX ranges as PyTorch's `torch.autograd.profiler.emit_nvtx()` writes them: "aten::mm, seq = 12",
optionally followed by ", op_id = N", ", sizes = [[2, 3], [3, 4]]" or ", input_op_ids = [...]" (the formats in
libtorch's profiler); those suffixes are stripped. A range counts as an op when its name looks like one, "ns::name".
As in kineto.py: nesting of op ranges per thread gives each op its self host time and its immediate parent op (other
ranges, such as user ranges, are not parents); a kernel belongs to the innermost op range enclosing its launch on the
launching thread, else to UNATTRIBUTED. "ProfilerStep#N" ranges give steps: wall time, the union of device work inside
(kernel_us), the idle rest, and the union of top-level op ranges inside (host_us).

Without any NVTX op range (nsys run without emit_nvtx), each kernel becomes its own op, "kernel:" + its short name,
with no host time: there is nothing to attribute kernels to. `by_module` stays empty: nsys carries no module
annotations. All devices and processes of the export are aggregated together.

The tests build databases with sqlite3 from the documented schema, and read one real export (nsys 2022.2, schema
2.9.1, an MPI + CUDA SAXPY program from a public repository, not a PyTorch run: tests/fixtures/profiles/nsys/README.md).
"""

from __future__ import annotations

import bisect
import re
import sqlite3
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from npuport.errors import NpuportError
from npuport.profile.kineto import UNATTRIBUTED, OpStats, Trace, kernel_counts, union_length

SQLITE_MAGIC = b"SQLite format 3\x00"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
NVTX_RANGE_TYPES = (59, 60)  # ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange, NvtxStartEndRange (34 NvtxMark has no length)
KERNEL_OP_PREFIX = "kernel:"  # the op a kernel becomes when the export has no NVTX op ranges
STEP_PREFIX = "ProfilerStep#"
_OP_NAME = re.compile(r"[A-Za-z_]\w*::\S")  # aten::mm, c10d::allreduce_, autograd::engine::evaluate_function: ...
_EMIT_NVTX_SUFFIX = re.compile(r",\s*(?:stashed seq|seq|op_id|sizes|input_op_ids)\s*=.*\Z", re.S)
# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND ids of the export, spelled as Kineto spells them
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
              6: "Managed Static", 7: "Unknown"}


class _Work(NamedTuple):
    """One kernel, memcpy or memset on the device."""

    start: float  # µs
    end: float
    corr: int | None  # correlationId
    pid: int | None  # process, where the table says (globalPid)
    name: str  # full (demangled) name, as kept per op
    short: str  # base name, for the "kernel:" op of the no-NVTX fallback


@dataclass
class _Nesting:
    """Op range instances of all threads, nested per thread."""

    names: list[str] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # enclosing instance, -1 at the top level
    self_us: list[float] = field(default_factory=list)
    begins: dict[int, list[float]] = field(default_factory=dict)  # per thread: starts in order
    order: dict[int, list[int]] = field(default_factory=dict)  # per thread: the instances in that order
    top_level: list[tuple[float, float]] = field(default_factory=list)


def is_nsys_sqlite(path: str | Path) -> bool:
    """Whether `path` is an SQLite database holding Nsight Systems tables (kernels or its string table)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        with closing(_connect(p)) as db:
            return bool({KERNEL_TABLE, "StringIds"} & _tables(db))
    except (OSError, sqlite3.Error):
        return False


def read_nsys(path: str | Path) -> Trace:
    """Aggregate an Nsight Systems SQLite export per op (see the module doc)."""
    p = Path(path)
    _check_sqlite(p)
    try:
        with closing(_connect(p)) as db:
            tables = _tables(db)
            if KERNEL_TABLE not in tables:
                found = ", ".join(sorted(tables)[:8]) or "no tables"
                raise NpuportError(f"{p}: no CUDA kernels in this Nsight Systems export",
                                   f"a {KERNEL_TABLE} table (profile with `nsys profile -t cuda,nvtx`)", found)
            strings = _Strings(db, "StringIds" in tables)
            work = _device_work(db, tables, strings)
            # correlation ids repeat across processes: match within the process where every device table says it
            by_pid = all(w.pid is not None for w in work)
            launches = _launches(db, tables, {w.corr for w in work if w.corr is not None}, by_pid)
            ops, steps = _nvtx_ranges(db, tables, strings)
    except sqlite3.Error as exc:  # corrupt file, or a table without a column the schema documents
        raise NpuportError(f"{p}: unreadable Nsight Systems export", "an `nsys export --type sqlite` database",
                           f"{type(exc).__name__}: {exc}") from None
    if not ops:
        return _kernels_as_ops(str(path), work, steps)
    return _aggregate(str(path), work, launches, by_pid, ops, steps)


def _check_sqlite(p: Path) -> None:
    expected = "an `nsys export --type sqlite` file (a .nsys-rep report converts with `nsys export --type sqlite`)"
    if not p.is_file():
        raise NpuportError(f"no profile file {p}", expected, str(p))
    try:
        with p.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise NpuportError(f"{p}: unreadable", expected, f"{type(exc).__name__}: {exc}") from None
    if head != SQLITE_MAGIC:
        raise NpuportError(f"{p}: not an SQLite database", expected, f"first bytes {head!r}")


def _connect(p: Path) -> sqlite3.Connection:
    # read-only, through a URI built by pathlib: it percent-encodes '?', '#' and '%' that a plain f-string would
    # let SQLite read as URI syntax
    return sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}


def _first(columns: set[str], *names: str) -> str:
    """The first of `names` the table has, quoted for SQL, or NULL (column names come from the schema, never input)."""
    return next((f'"{n}"' for n in names if n in columns), "NULL")


class _Strings:
    """StringIds lookups, one query per distinct id: the table holds every string of the report and can be large."""

    def __init__(self, db: sqlite3.Connection, present: bool) -> None:
        self._db, self._present = db, present
        self._cache: dict[Any, str] = {}

    def __call__(self, ref: Any) -> str:
        if isinstance(ref, str):  # some exports (and older schemas) store the text itself
            return ref
        if ref is None or not self._present:
            return ""
        if ref not in self._cache:
            row = self._db.execute("SELECT value FROM StringIds WHERE id = ?", (ref,)).fetchone()
            self._cache[ref] = str(row[0]) if row else f"<string {ref}>"
        return self._cache[ref]


def _select(db: sqlite3.Connection, table: str, *picks: tuple[str, ...]) -> sqlite3.Cursor:
    """start, end and, per pick, the first of its columns the table has (NULL where none): columns differ between
    nsys versions (older kernel tables have `name` where newer have demangledName / shortName)."""
    cols = _columns(db, table)
    extra = "".join(f", {_first(cols, *names)}" for names in picks)
    return db.execute(f'SELECT start, "end"{extra} FROM "{table}"')


def _device_work(db: sqlite3.Connection, tables: set[str], strings: _Strings) -> list[_Work]:
    ids = (("correlationId",), ("globalPid",))
    work: list[_Work] = []
    for start, end, corr, gpid, full, short in _select(db, KERNEL_TABLE, *ids, ("demangledName", "name", "shortName"),
                                                       ("shortName", "demangledName", "name")):
        name = strings(full) or strings(short) or "(unnamed kernel)"
        work.append(_Work(_us(start), _us(end), corr, _pid(gpid), name, strings(short) or name))
    if MEMCPY_TABLE in tables:
        for start, end, corr, gpid, kind, src, dst in _select(db, MEMCPY_TABLE, *ids, ("copyKind",), ("srcKind",),
                                                              ("dstKind",)):
            name = _memcpy_name(kind, src, dst)
            work.append(_Work(_us(start), _us(end), corr, _pid(gpid), name, name))
    if MEMSET_TABLE in tables:
        for start, end, corr, gpid, kind in _select(db, MEMSET_TABLE, *ids, ("memKind",)):
            name = f"Memset ({_MEM_KINDS[kind]})" if kind in _MEM_KINDS else "Memset"
            work.append(_Work(_us(start), _us(end), corr, _pid(gpid), name, name))
    return work


def _us(ns: Any) -> float:
    return float(ns) / 1000.0


def _memcpy_name(kind: Any, src: Any, dst: Any) -> str:
    name = f"Memcpy {_COPY_KINDS.get(kind, 'Unknown')}"
    if src in _MEM_KINDS and dst in _MEM_KINDS:
        name += f" ({_MEM_KINDS[src]} -> {_MEM_KINDS[dst]})"
    return name


def _pid(global_id: Any) -> int | None:
    """The process of a serialized GlobalId (globalPid or globalTid): bits 24-47, as the export schema documents."""
    return (int(global_id) >> 24) & 0xFFFFFF if global_id is not None else None


def _launches(db: sqlite3.Connection, tables: set[str], wanted: set[int],
              by_pid: bool) -> dict[tuple[int | None, int], tuple[int, float]]:
    """(process, correlationId) -> (launching thread, launch time µs), for the correlation ids device work carries.
    Where a device table has no globalPid the process is left out of the key (None) on both sides."""
    if RUNTIME_TABLE not in tables or not wanted:
        return {}
    cols = _columns(db, RUNTIME_TABLE)
    if "correlationId" not in cols or "globalTid" not in cols:
        return {}
    out: dict[tuple[int | None, int], tuple[int, float]] = {}
    for tid, corr, start in db.execute(f'SELECT globalTid, correlationId, start FROM {RUNTIME_TABLE} '
                                       "WHERE correlationId IS NOT NULL"):
        if corr in wanted:
            out[(_pid(tid) if by_pid else None, corr)] = (tid, _us(start))
    return out


def op_name(text: str) -> str:
    """The op of an emit_nvtx range text: "aten::mm, seq = 12, sizes = [[2, 3], [3, 4]]" -> "aten::mm"."""
    return _EMIT_NVTX_SUFFIX.sub("", text).strip()


def _nvtx_ranges(db: sqlite3.Connection, tables: set[str], strings: _Strings
                 ) -> tuple[dict[int, list[tuple[float, float, str]]], list[tuple[str, float, float]]]:
    """Closed NVTX ranges: op ranges per thread (start, end, op) and ProfilerStep ranges (name, start, end)."""
    ops: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    steps: list[tuple[str, float, float]] = []
    if NVTX_TABLE not in tables:
        return ops, steps
    cols = _columns(db, NVTX_TABLE)
    where = '"end" IS NOT NULL AND "end" >= start'  # an unclosed range has no end
    if "eventType" in cols:
        where += f" AND eventType IN {NVTX_RANGE_TYPES}"
    sql = (f'SELECT {_first(cols, "globalTid")}, start, "end", {_first(cols, "text")}, {_first(cols, "textId")} '
           f"FROM {NVTX_TABLE} WHERE {where}")
    interned: dict[str, str] = {}  # one str per op name, not per range
    for tid, start, end, text, text_id in db.execute(sql):
        name = op_name(text if text is not None else strings(text_id))
        if _OP_NAME.match(name):
            ops[tid].append((_us(start), _us(end), interned.setdefault(name, name)))
        elif name.startswith(STEP_PREFIX):
            steps.append((name, _us(start), _us(end)))
    return ops, steps


def _nest(ops_by_thread: dict[int, list[tuple[float, float, str]]]) -> _Nesting:
    """Nest each thread's op ranges (by start, longest first) and take each instance's self time: its length less
    that of its direct children."""
    n = _Nesting()
    child_us: list[float] = []
    for tid, ranges in ops_by_thread.items():
        ranges.sort(key=lambda r: (r[0], -r[1]))
        stack: list[int] = []
        order: list[int] = []
        for start, end, name in ranges:
            while stack and start >= n.ends[stack[-1]]:
                stack.pop()
            idx = len(n.names)
            if stack:
                child_us[stack[-1]] += end - start
            else:
                n.top_level.append((start, end))
            n.names.append(name)
            n.parents.append(stack[-1] if stack else -1)
            n.self_us.append(end - start)
            n.starts.append(start)
            n.ends.append(end)
            child_us.append(0.0)
            order.append(idx)
            stack.append(idx)
        n.begins[tid], n.order[tid] = [r[0] for r in ranges], order
    n.self_us = [max(d - c, 0.0) for d, c in zip(n.self_us, child_us)]
    return n


def _innermost(n: _Nesting, tid: int, ts: float) -> int:
    """The innermost op instance of thread `tid` enclosing `ts`, or -1. Any range enclosing ts encloses the latest one
    starting at or before ts, so only that one's chain of parents is searched, not every earlier range."""
    if tid not in n.begins:
        return -1
    k = bisect.bisect_right(n.begins[tid], ts) - 1
    k = n.order[tid][k] if k >= 0 else -1
    # kineto.py's rule: [start, end), and a zero-length range encloses its own instant
    while k >= 0 and not (ts < n.ends[k] or n.starts[k] == ts == n.ends[k]):
        k = n.parents[k]
    return k


def _clip(intervals: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    return [(max(s, a), min(e, b)) for s, e in intervals if e > a and s < b]


def _step_rows(steps: list[tuple[str, float, float]], work: list[_Work],
               top_level: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per ProfilerStep range: wall time, the union of device work inside it, the idle rest, and the union of
    top-level op ranges inside it (kineto.py's rule)."""
    busy = [(w.start, w.end) for w in work]
    rows = []
    for name, a, b in sorted(steps, key=lambda s: s[1]):
        kernel_us = union_length(_clip(busy, a, b))
        rows.append({"name": name, "wall_us": b - a, "kernel_us": kernel_us, "idle_us": max(b - a - kernel_us, 0.0),
                     "host_us": union_length(_clip(top_level, a, b))})
    return rows


def _attribute(n: _Nesting, work: list[_Work], launches: dict[tuple[int | None, int], tuple[int, float]],
               by_pid: bool) -> dict[int, dict[str, float]]:
    """Op instance -> device work name -> µs; instance -1 holds the work launched outside every op range or whose
    launch is not in the export."""
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in work:
        launch = launches.get((w.pid if by_pid else None, w.corr)) if w.corr is not None else None
        out[_innermost(n, *launch) if launch else -1][w.name] += w.end - w.start
    return out


def _add(st: OpStats, parent: str, kernels: dict[str, float], host_us: float, calls: int = 1) -> None:
    dev = sum(kernels.values())
    st.calls += calls
    st.host_us += host_us
    st.device_us += dev
    st.parents[parent] += dev
    for name, t in kernels.items():
        st.kernels[name] += t


def _aggregate(source: str, work: list[_Work], launches: dict[tuple[int | None, int], tuple[int, float]], by_pid: bool,
               ops_by_thread: dict[int, list[tuple[float, float, str]]], steps: list[tuple[str, float, float]]) -> Trace:
    n = _nest(ops_by_thread)
    by_op = _attribute(n, work, launches, by_pid)
    ops: dict[str, OpStats] = defaultdict(OpStats)
    for k, name in enumerate(n.names):
        _add(ops[name], n.names[n.parents[k]] if n.parents[k] >= 0 else "", by_op.get(k, {}), n.self_us[k])
    if -1 in by_op:
        _add(ops[UNATTRIBUTED], "", by_op[-1], 0.0, calls=0)  # as kineto.py: device time, no calls
    return Trace(format="nsys", source=source, device="cuda", ops=dict(ops), steps=_step_rows(steps, work, n.top_level),
                 kernels=len(work), cpu_ops=len(n.names), by_kernel=kernel_counts((w.name, w.end - w.start) for w in work))


def _kernels_as_ops(source: str, work: list[_Work], steps: list[tuple[str, float, float]]) -> Trace:
    """No NVTX op ranges: each kernel (memcpy, memset) is its own op, "kernel:<short name>", with no host time."""
    ops: dict[str, OpStats] = defaultdict(OpStats)
    for w in work:
        _add(ops[KERNEL_OP_PREFIX + w.short], "", {w.name: w.end - w.start}, 0.0)
    return Trace(format="nsys", source=source, device="cuda", ops=dict(ops), steps=_step_rows(steps, work, []),
                 kernels=len(work), cpu_ops=0, by_kernel=kernel_counts((w.name, w.end - w.start) for w in work))
