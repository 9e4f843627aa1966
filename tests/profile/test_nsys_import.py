"""npuport.profile.nsys on Nsight Systems SQLite exports built here with sqlite3, in the tables and columns of the
documented export schema, and (at the end) on one real export of a CUDA program, not a PyTorch one
(tests/fixtures/profiles/nsys/README.md). Every expected number of the built exports is worked out by hand from the
timeline below, in µs (the database holds ns).

Process 4242, main thread T_MAIN, emit_nvtx ranges:

    ProfilerStep#3 [0, 100)  push/pop           ProfilerStep#4 [100, 150)  start/end range
    forward        [5, 95)   user range, not an op
      aten::linear [10, 50)                      aten::relu (2nd call) [130, 140)
        aten::t     [11, 13)                       launch corr 8 @131 -> relu kernel [141, 143)
        aten::addmm [15, 45)
          launch corr 1 @20 -> gemm     [30, 60)
          launch corr 2 @25 -> splitK   [60, 65)
      aten::relu   [55, 65)   launch corr 3 @58 -> relu kernel [66, 70)
      aten::copy_  [70, 80)   launch corr 4 @72 -> memcpy HtoD [76, 86)
      (no op)                 launch corr 5 @90 -> my_custom_kernel [96, 104)
    T_OTHER: aten::mul [85, 95): encloses 90 in time, but on another thread
    no launch in the export: corr 7 -> memset [120, 122)
    process 777 reuses correlation id 3 (a launch at 12 on its own thread): must not capture the relu kernel
"""

from __future__ import annotations

import gzip
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.profile.artifact import load_artifact, to_artifact
from npuport.profile.kineto import UNATTRIBUTED
from npuport.profile.nsys import SQLITE_MAGIC, is_nsys_sqlite, op_name, read_nsys

# column names and order of Nsight Systems' SQLite schema reference (NOT NULL constraints left out)
SCHEMA = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "start end deviceId contextId streamId correlationId globalPid demangledName shortName "
    "mangledName launchType cacheConfig registersPerThread gridX gridY gridZ blockX blockY blockZ staticSharedMemory "
    "dynamicSharedMemory localMemoryPerThread localMemoryTotal gridId sharedMemoryExecuted graphNodeId "
    "sharedMemoryLimitConfig",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start end deviceId contextId streamId correlationId globalPid bytes copyKind "
    "deprecatedSrcId srcKind dstKind srcDeviceId srcContextId dstDeviceId dstContextId migrationCause graphNodeId "
    "virtualAddress",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start end deviceId contextId streamId correlationId globalPid value bytes graphNodeId "
    "memKind",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start end eventClass globalTid correlationId nameId returnValue callchainId",
    "NVTX_EVENTS": "start end eventType rangeId category color text globalTid endGlobalTid textId domainId uint64Value "
    "int64Value doubleValue uint32Value int32Value floatValue jsonTextId jsonText",
    "ENUM_NSYS_EVENT_TYPE": "id name label",
}
TEXT_COLUMNS = {"text", "jsonText", "name", "label"}

PID = 4242
GPID = PID << 24  # serialized GlobalId: process in bits 24-47, thread in bits 0-23
T_MAIN, T_OTHER = GPID | 4242, GPID | 4250
T_ELSEWHERE = (777 << 24) | 777
PUSH_POP, START_END, MARK, DOMAIN_CREATE = 59, 60, 34, 75

GEMM = "ampere_sgemm_128x64_nn"
SPLITK_SHORT = "splitKreduce_kernel"
SPLITK = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>(cublasLt::cublasSplitKParams<float>)"
RELU_SHORT = "vectorized_elementwise_kernel"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar>(int, at::native::Array<char*, 2>)"
CUSTOM_SHORT, CUSTOM = "my_custom_kernel", "my_custom_kernel(float*, int)"
MEMCPY = "Memcpy HtoD (Pageable -> Device)"
MEMSET = "Memset (Device)"


class _Export:
    """Writes one export: the documented tables less `omit` (rows for those are dropped), strings interned into
    StringIds, times given in µs and stored in ns."""

    def __init__(self, path: Path, omit: tuple[str, ...] = ()) -> None:
        self.db, self.omit = sqlite3.connect(path), omit
        self.strings: dict[str, int] = {}
        self.db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        for table, cols in SCHEMA.items():
            if table not in omit:
                spec = ", ".join(f'"{c}" {"TEXT" if c in TEXT_COLUMNS else "INTEGER"}' for c in cols.split())
                self.db.execute(f'CREATE TABLE "{table}" ({spec})')
        for i, name in ((MARK, "NvtxMark"), (PUSH_POP, "NvtxPushPopRange"), (START_END, "NvtxStartEndRange"),
                        (DOMAIN_CREATE, "NvtxDomainCreate")):
            self.insert("ENUM_NSYS_EVENT_TYPE", id=i, name=name, label=name)

    def sid(self, s: str) -> int:
        if s not in self.strings:
            self.strings[s] = len(self.strings) + 1
            self.db.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[s], s))
        return self.strings[s]

    def insert(self, table: str, **values: Any) -> None:
        if table in self.omit:
            return
        cols = ", ".join(f'"{c}"' for c in values)
        self.db.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({", ".join("?" * len(values))})', tuple(values.values()))

    def kernel(self, corr: int, start: float, end: float, short: str, full: str) -> None:
        self.insert("CUPTI_ACTIVITY_KIND_KERNEL", start=ns(start), end=ns(end), deviceId=0, contextId=1, streamId=7,
                    correlationId=corr, globalPid=GPID, demangledName=self.sid(full), shortName=self.sid(short),
                    gridX=1, gridY=1, gridZ=1, blockX=128, blockY=1, blockZ=1)

    def launch(self, corr: int, start: float, end: float, tid: int = T_MAIN, api: str = "cudaLaunchKernel_v7000") -> None:
        self.insert("CUPTI_ACTIVITY_KIND_RUNTIME", start=ns(start), end=ns(end), eventClass=1, globalTid=tid,
                    correlationId=corr, nameId=self.sid(api), returnValue=0)

    def nvtx(self, text: str | None, start: float, end: float | None, tid: int = T_MAIN, kind: int = PUSH_POP,
             registered: bool = False) -> None:
        """A range: its text inline (`text`), or as a registered string through textId, as nsys stores either."""
        self.insert("NVTX_EVENTS", start=ns(start), end=None if end is None else ns(end), eventType=kind,
                    text=None if registered else text, textId=self.sid(text) if registered and text else None,
                    globalTid=tid, endGlobalTid=tid if kind == START_END else None, domainId=0)

    def close(self) -> None:
        self.db.commit()
        self.db.close()


def ns(us: float) -> int:
    return round(us * 1000)


def write_export(path: Path, omit: tuple[str, ...] = (), nvtx: str = "ops") -> Path:
    """The timeline of the module doc. nvtx: "ops" (all ranges), "steps" (only ProfilerStep and user ranges)."""
    x = _Export(path, omit)
    x.kernel(1, 30, 60, GEMM, GEMM)
    x.kernel(2, 60, 65, SPLITK_SHORT, SPLITK)
    x.kernel(3, 66, 70, RELU_SHORT, RELU)
    x.kernel(5, 96, 104, CUSTOM_SHORT, CUSTOM)
    x.kernel(8, 141, 143, RELU_SHORT, RELU)
    x.insert("CUPTI_ACTIVITY_KIND_MEMCPY", start=ns(76), end=ns(86), deviceId=0, contextId=1, streamId=7,
             correlationId=4, globalPid=GPID, bytes=4096, copyKind=1, srcKind=0, dstKind=2)
    x.insert("CUPTI_ACTIVITY_KIND_MEMSET", start=ns(120), end=ns(122), deviceId=0, contextId=1, streamId=7,
             correlationId=7, globalPid=GPID, value=0, bytes=512, memKind=2)
    for corr, start in ((1, 20), (2, 25), (3, 58), (5, 90), (8, 131)):
        x.launch(corr, start, start + 2)
    x.launch(4, 72, 75, api="cudaMemcpyAsync_v3020")
    x.launch(3, 12, 13, tid=T_ELSEWHERE)  # same correlation id in another process, written last
    x.nvtx("ProfilerStep#3", 0, 100)
    x.nvtx("ProfilerStep#4", 100, 150, kind=START_END)
    x.nvtx("forward", 5, 95)
    x.nvtx("NCCL", 1, None, kind=DOMAIN_CREATE)
    if nvtx == "ops":
        x.nvtx("aten::linear, seq = 1", 10, 50, registered=True)
        x.nvtx("aten::t, seq = 2", 11, 13)
        x.nvtx("aten::addmm, seq = 3, sizes = [[4], [2, 3], [3, 4]]", 15, 45, registered=True)
        x.nvtx("aten::relu, seq = 4", 55, 65)
        x.nvtx("aten::copy_, seq = 5, op_id = 7", 70, 80)
        x.nvtx("aten::relu, seq = 10", 130, 140)
        x.nvtx("aten::mul, seq = 9", 85, 95, tid=T_OTHER)
        x.nvtx("aten::bogus", 60, 60, kind=MARK)  # a mark, not a range, whatever its end says
        x.nvtx("aten::unclosed, seq = 11", 99, None)  # pushed, never popped before the capture ended
    x.close()
    return path


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return write_export(tmp_path / "run.sqlite")


def test_emit_nvtx_suffixes_are_stripped_to_the_op() -> None:
    assert op_name("aten::mm, seq = 12") == "aten::mm"
    assert op_name("aten::addmm, seq = 3, op_id = 4, sizes = [[4], [2, 3]], input_op_ids = [(1, 0)]") == "aten::addmm"
    assert op_name("autograd::engine::evaluate_function: MmBackward0, seq = 5") == \
        "autograd::engine::evaluate_function: MmBackward0"
    assert op_name("aten::mm") == "aten::mm"


def test_kernels_go_to_the_innermost_op_on_the_launching_thread(export: Path) -> None:
    t = read_nsys(export)
    assert (t.device, t.source, t.kernels, t.cpu_ops) == ("cuda", str(export), 7, 7)
    assert set(t.ops) == {"aten::linear", "aten::t", "aten::addmm", "aten::relu", "aten::copy_", "aten::mul", UNATTRIBUTED}
    device = {op: st.device_us for op, st in t.ops.items()}
    assert device == pytest.approx({"aten::linear": 0, "aten::t": 0, "aten::addmm": 35, "aten::relu": 6,
                                    "aten::copy_": 10, "aten::mul": 0, UNATTRIBUTED: 10})
    assert sum(device.values()) == pytest.approx(30 + 5 + 4 + 10 + 8 + 2 + 2)  # every bit of device work, once
    assert dict(t.ops["aten::addmm"].kernels) == pytest.approx({GEMM: 30, SPLITK: 5})
    assert dict(t.ops["aten::relu"].kernels) == pytest.approx({RELU: 6})  # not the other process's correlation id 3
    assert dict(t.ops["aten::copy_"].kernels) == pytest.approx({MEMCPY: 10})


def test_calls_parents_and_self_host_time(export: Path) -> None:
    t = read_nsys(export)
    calls = {op: st.calls for op, st in t.ops.items()}
    assert calls == {"aten::linear": 1, "aten::t": 1, "aten::addmm": 1, "aten::relu": 2, "aten::copy_": 1,
                     "aten::mul": 1, UNATTRIBUTED: 0}
    host = {op: st.host_us for op, st in t.ops.items()}
    # linear: 40 less its children t (2) and addmm (30); relu: two calls of 10
    assert host == pytest.approx({"aten::linear": 8, "aten::t": 2, "aten::addmm": 30, "aten::relu": 20,
                                  "aten::copy_": 10, "aten::mul": 10, UNATTRIBUTED: 0})
    # the user range "forward" around them is no parent
    assert dict(t.ops["aten::addmm"].parents) == pytest.approx({"aten::linear": 35})
    assert dict(t.ops["aten::t"].parents) == pytest.approx({"aten::linear": 0})
    assert dict(t.ops["aten::linear"].parents) == pytest.approx({"": 0})
    assert dict(t.ops["aten::relu"].parents) == pytest.approx({"": 6})


def test_work_outside_every_op_is_unattributed(export: Path) -> None:
    st = read_nsys(export).ops[UNATTRIBUTED]
    # the custom kernel launched at 90 (inside aten::mul's time, on another thread) and the memset with no launch
    assert dict(st.kernels) == pytest.approx({CUSTOM: 8, MEMSET: 2})
    assert dict(st.parents) == pytest.approx({"": 10})
    assert "aten::bogus" not in read_nsys(export).ops and "aten::unclosed" not in read_nsys(export).ops


def test_steps_wall_busy_idle_and_host(export: Path) -> None:
    steps = read_nsys(export).steps
    assert [s["name"] for s in steps] == ["ProfilerStep#3", "ProfilerStep#4"]
    # step 3: gemm 30 + splitK 5 + relu 4 + memcpy 10 + custom kernel clipped to [96, 100) 4 = 53 busy;
    # host: top-level ops linear 40, relu 10, copy_ 10 and (other thread) mul 10
    assert steps[0] == pytest.approx({"name": "ProfilerStep#3", "wall_us": 100, "kernel_us": 53, "idle_us": 47,
                                      "host_us": 70})
    # step 4 (a start/end range): custom kernel [100, 104) 4 + memset 2 + relu 2 = 8; host: relu [130, 140)
    assert steps[1] == pytest.approx({"name": "ProfilerStep#4", "wall_us": 50, "kernel_us": 8, "idle_us": 42,
                                      "host_us": 10})


def test_without_nvtx_each_kernel_is_its_own_op(tmp_path: Path) -> None:
    t = read_nsys(write_export(tmp_path / "plain.sqlite", omit=("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMSET")))
    device = {op: st.device_us for op, st in t.ops.items()}
    assert device == pytest.approx({f"kernel:{GEMM}": 30, f"kernel:{SPLITK_SHORT}": 5, f"kernel:{RELU_SHORT}": 6,
                                    f"kernel:{CUSTOM_SHORT}": 8, f"kernel:{MEMCPY}": 10})
    assert t.ops[f"kernel:{RELU_SHORT}"].calls == 2
    assert dict(t.ops[f"kernel:{SPLITK_SHORT}"].kernels) == pytest.approx({SPLITK: 5})  # the full name is kept
    assert all(st.host_us == 0 and dict(st.parents) == pytest.approx({"": st.device_us}) for st in t.ops.values())
    assert (t.steps, t.cpu_ops, t.kernels, t.device) == ([], 0, 6, "cuda")


def test_nvtx_without_op_ranges_falls_back_but_keeps_steps(tmp_path: Path) -> None:
    t = read_nsys(write_export(tmp_path / "steps.sqlite", nvtx="steps"))
    assert UNATTRIBUTED not in t.ops and f"kernel:{MEMSET}" in t.ops and t.cpu_ops == 0
    assert t.steps[0] == pytest.approx({"name": "ProfilerStep#3", "wall_us": 100, "kernel_us": 53, "idle_us": 47,
                                        "host_us": 0})


def test_without_runtime_calls_kernels_cannot_be_placed(tmp_path: Path) -> None:
    t = read_nsys(write_export(tmp_path / "noapi.sqlite", omit=("CUPTI_ACTIVITY_KIND_RUNTIME", "ENUM_NSYS_EVENT_TYPE")))
    assert t.ops[UNATTRIBUTED].device_us == pytest.approx(61)
    assert t.ops["aten::addmm"].device_us == 0 and t.ops["aten::addmm"].host_us == pytest.approx(30)


def test_an_older_kernel_table_with_a_name_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript("""
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, name INT NOT NULL);
            INSERT INTO StringIds VALUES (1, 'gemm');
            INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 4000, 1), (5000, 6000, 1);
        """)
    t = read_nsys(path)
    assert {op: (st.calls, st.device_us) for op, st in t.ops.items()} == {"kernel:gemm": (2, pytest.approx(4))}


def test_the_export_is_read_only_and_paths_need_no_escaping(tmp_path: Path) -> None:
    path = write_export(tmp_path / "run #1?%.sqlite")
    before = path.read_bytes()
    assert is_nsys_sqlite(path) and read_nsys(path).kernels == 7
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_the_trace_makes_a_profile_artifact(export: Path) -> None:
    art = to_artifact(read_nsys(export))
    assert art["device"] == "cuda" and art["totals"]["kernels"] == 7
    assert art["totals"]["device_s"] == pytest.approx(61e-6)


def test_is_nsys_sqlite(tmp_path: Path, export: Path) -> None:
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE notes (x TEXT)")
    strings_only = tmp_path / "nvtx_only.sqlite"
    with closing(sqlite3.connect(strings_only)) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    assert is_nsys_sqlite(export) and is_nsys_sqlite(strings_only)
    assert not is_nsys_sqlite(other) and not is_nsys_sqlite(tmp_path / "trace.json")
    assert not is_nsys_sqlite(tmp_path / "missing.sqlite")


def test_not_sqlite_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"\x00QDSTRM not an export")
    with pytest.raises(NpuportError, match="not an SQLite database") as err:
        read_nsys(path)
    assert err.value.exit_code == 2 and "nsys export --type sqlite" in str(err.value)
    with pytest.raises(NpuportError, match="no profile file"):
        read_nsys(tmp_path / "missing.sqlite")


def test_sqlite_without_kernels_is_a_user_error(tmp_path: Path) -> None:
    path = write_export(tmp_path / "nokernels.sqlite", omit=("CUPTI_ACTIVITY_KIND_KERNEL",))
    with pytest.raises(NpuportError, match="no CUDA kernels") as err:
        read_nsys(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in str(err.value) and "NVTX_EVENTS" in str(err.value)


def test_a_damaged_database_is_a_user_error(tmp_path: Path) -> None:
    garbled = tmp_path / "garbled.sqlite"
    garbled.write_bytes(SQLITE_MAGIC + b"\xff" * 200)
    with pytest.raises(NpuportError, match="unreadable Nsight Systems export"):
        read_nsys(garbled)
    assert not is_nsys_sqlite(garbled)
    odd = tmp_path / "odd.sqlite"
    with closing(sqlite3.connect(odd)) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (begin_ns INT, finish_ns INT)")
    with pytest.raises(NpuportError, match="unreadable Nsight Systems export"):
        read_nsys(odd)


# ---- a real export (tests/fixtures/profiles/nsys/README.md) -----------------------------------------------------------

REAL_GZ = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "profiles" / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz"


def test_a_real_nsys_export_reads_every_kernel_and_copy_of_its_tables(tmp_path: Path) -> None:
    path = tmp_path / "saxpy.sqlite"
    path.write_bytes(gzip.decompress(REAL_GZ.read_bytes()))
    with closing(sqlite3.connect(path)) as con:
        kernels = con.execute("select count(*), sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        copies = dict((kind, (n, ns)) for kind, n, ns in con.execute(
            "select copyKind, count(*), sum(end - start) from CUPTI_ACTIVITY_KIND_MEMCPY group by copyKind"))
        version = dict(con.execute("select name, value from EXPORT_META_DATA"))["EXPORT_PRODUCT_VERSION"]
    assert version == "2022.2.1.31" and kernels[0] == 5
    t = read_nsys(path)
    assert t.device == "cuda" and t.kernels == 5 + sum(n for n, _ in copies.values())
    # its NVTX ranges are MPI calls and a user range, not ops: each kernel and copy is its own pseudo-op, with its
    # whole table's time (CUPTI copy kinds 1 HtoD, 2 DtoH; source kind 0 pageable, destination 2 device)
    assert set(t.ops) == {"kernel:saxpy", "kernel:Memcpy HtoD (Pageable -> Device)", "kernel:Memcpy DtoH (Device -> Pageable)"}
    assert t.ops["kernel:saxpy"].calls == 5
    assert t.ops["kernel:saxpy"].device_us == pytest.approx(kernels[1] / 1000)
    assert t.ops["kernel:Memcpy HtoD (Pageable -> Device)"].device_us == pytest.approx(copies[1][1] / 1000)
    assert t.ops["kernel:Memcpy DtoH (Device -> Pageable)"].device_us == pytest.approx(copies[2][1] / 1000)
    assert "saxpy(double *, double *, double *, double, int)" in t.ops["kernel:saxpy"].kernels
    assert UNATTRIBUTED not in t.ops and t.steps == []
    out = tmp_path / "nsys.profile.json"
    res = CliRunner().invoke(cli, ["profile", "import", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert load_artifact(out)["format"] == "nsys"
