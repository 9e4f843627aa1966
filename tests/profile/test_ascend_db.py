"""The .db export of the Ascend PyTorch profiler (npuport.profile.ascend_db), on a real public sample: the same
program's step as the text-export sample (tests/fixtures/profiles/ascend/README.md), saved with export_type="db"."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.profile.artifact import load_artifact
from npuport.profile.ascend import read_ascend
from npuport.profile.ascend_model import NOT_WORK
from npuport.profile.kineto import UNATTRIBUTED, Trace

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "fixtures" / "profiles" / "ascend"
TEXT_RANK = HERE / "rank0_ascend_pt"
DB_RANK = HERE / "db" / "rank0_ascend_pt"


@pytest.fixture(scope="module")
def rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample as the profiler wrote it (the fixture keeps its databases gzipped)."""
    out = tmp_path_factory.mktemp("db") / "rank0_ascend_pt"
    shutil.copytree(DB_RANK, out)
    for gz in (out / "ASCEND_PROFILER_OUTPUT").glob("*.db.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    return out


@pytest.fixture(scope="module")
def db(rank: Path) -> Path:
    return rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"


@pytest.fixture(scope="module")
def trace(rank: Path) -> Trace:
    return read_ascend(rank)


def _q(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_db_reads_as_the_text_export_of_the_same_program(trace: Trace) -> None:
    text = read_ascend(TEXT_RANK)
    assert trace.format == "ascend" and trace.device == "npu" and trace.cpu_ops == text.cpu_ops == 535
    # another run of the same step (ProfilerStep#50 of the same script): every aten op and every (module, op) is
    # called as often, and each op's device time lands on the same op
    assert {k: v.calls for k, v in trace.ops.items() if "::" in k} == {k: v.calls for k, v in text.ops.items() if "::" in k}
    assert ({k: v.calls for k, v in trace.by_module.items() if "::" in k[1]}
            == {k: v.calls for k, v in text.by_module.items() if "::" in k[1]})
    for op in ("c10d::allreduce_", "aten::copy_", "aten::_foreach_add_", "aten::mm", "aten::_convolution"):
        assert trace.ops[op].device_us == pytest.approx(text.ops[op].device_us, rel=0.1), op
    # the copies' tasks (which torch_npu links to no op row in the db) reach aten::copy_ through the task queue
    assert "MEMCPY_ASYNC" in trace.ops["aten::copy_"].kernels and UNATTRIBUTED not in trace.ops
    assert [s["name"] for s in trace.steps] == ["ProfilerStep#50"]


def test_the_device_total_is_the_task_tables(trace: Trace, db: Path) -> None:
    _totals_are_the_tables(trace, db)


def _totals_are_the_tables(trace: Trace, db: Path) -> None:
    names = dict(_q(db, "select id, value from STRING_IDS"))
    comm_steps = {r[0] for r in _q(db, "select globalTaskId from COMMUNICATION_TASK_INFO")}
    collectives = _q(db, "select startNs, endNs, connectionId from COMMUNICATION_OP")
    conns = {c for _, _, c in collectives}
    tasks = [(e - s) / 1000 for s, e, gid, conn, tt in _q(db, "select startNs, endNs, globalTaskId, connectionId, taskType from TASK")
             if names[tt] not in NOT_WORK and gid not in comm_steps and conn not in conns]
    expected = sum(tasks) + sum((e - s) / 1000 for s, e, _ in collectives)
    assert sum(v.device_us for v in trace.ops.values()) == pytest.approx(expected, abs=1e-6)
    assert trace.kernels == len(tasks) + len(collectives) == 228


def test_the_step_agrees_with_torch_npus_own_step_breakdown(trace: Trace, rank: Path) -> None:
    """analysis.db's StepTraceTime (torch_npu's own step analysis): the collectives' time is the allreduce's device
    time; computing plus the communication it does not overlap is the union of the step's tasks within 1% (the
    difference is smaller than the step's host-to-device copies, 0.87 ms)."""
    (_, computing, comm_alone, _, comm, *_rest), = _q(rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db",
                                                      "select * from StepTraceTime")
    assert trace.ops["c10d::allreduce_"].device_us == pytest.approx(comm, abs=0.01)
    step = trace.steps[0]
    assert step["kernel_us"] == pytest.approx(computing + comm_alone, rel=0.01)
    assert step["kernel_us"] + step["idle_us"] == pytest.approx(step["wall_us"])


def test_the_db_file_itself_and_the_cli(rank: Path, db: Path, tmp_path: Path) -> None:
    direct = read_ascend(db)
    assert {k: v.calls for k, v in direct.ops.items()} == {k: v.calls for k, v in read_ascend(rank).ops.items()}
    out = tmp_path / "npu.profile.json"
    res = CliRunner().invoke(cli, ["profile", "import", str(rank), "-o", str(out)])
    assert res.exit_code == 0, res.output
    art = load_artifact(out)
    assert art["device"] == "npu" and art["format"] == "ascend" and len(art["steps"]) == 1


def test_enqueues_named_after_their_op_are_read_too(db: Path, tmp_path: Path) -> None:
    """torch_npu since Ascend/pytorch 72e3a7dc (2025-06) names a matched enqueue "Enqueue@<op>"; the sample predates
    that: renamed here, the copies' tasks must still reach aten::copy_ through the task queue."""
    renamed = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(db, renamed)
    con = sqlite3.connect(renamed)
    with con:
        con.execute("update STRING_IDS set value = 'Enqueue@aclnnInplaceCopy' where value = 'Enqueue'")
    con.close()
    t = read_ascend(renamed)
    assert "MEMCPY_ASYNC" in t.ops["aten::copy_"].kernels and UNATTRIBUTED not in t.ops


def _marked_db(path: Path) -> Path:
    """A hand-made database in the export's tables: npuport's module mark around a forward op, its backward op under
    the autograd node with the same sequence number on another thread, a skip range with an op and its task."""
    con = sqlite3.connect(path)
    names = ["ProfilerStep#1", "npuport.module:mlp.fc", "aten::mm", "autograd::engine::evaluate_function: MmBackward0",
             "npuport.skip:restore decode cache", "aten::copy_", "KERNEL_AICORE", "MatMul", "TensorMove"]
    ids = {n: i for i, n in enumerate(names)}
    with con:
        con.execute("create table STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
        con.executemany("insert into STRING_IDS values (?, ?)", [(i, n) for n, i in ids.items()])
        con.execute("create table PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, "
                    "name INTEGER, sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, "
                    "callchainId INTEGER, type INTEGER, depth INTEGER)")
        rows = [(0, 100_000, 1, None, "ProfilerStep#1", -1), (1_000, 10_000, 1, None, "npuport.module:mlp.fc", -1),
                (2_000, 7_000, 1, 1, "aten::mm", 7), (20_000, 28_000, 2, None, "autograd::engine::evaluate_function: "
                "MmBackward0", 7), (21_000, 25_000, 2, 2, "aten::mm", -1),
                (40_000, 60_000, 1, None, "npuport.skip:restore decode cache", -1), (41_000, 44_000, 1, 3, "aten::copy_", -1)]
        con.executemany("insert into PYTORCH_API values (?, ?, ?, ?, ?, ?, 0, NULL, NULL, NULL, 50001, 0)",
                        [(str(a), str(b), tid, conn, ids[n], seq) for a, b, tid, conn, n, seq in rows])
        con.execute("create table CONNECTION_IDS (id INTEGER, connectionId INTEGER)")
        con.executemany("insert into CONNECTION_IDS values (?, ?)", [(1, 100), (2, 101), (3, 102)])
        con.execute("create table CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, "
                    "connectionId INTEGER PRIMARY KEY, name INTEGER, depth INTEGER)")
        con.executemany("insert into CANN_API values (?, ?, 10000, ?, ?, 0, 0)",
                        [(3_000, 3_500, 1, 100), (22_000, 22_500, 2, 101), (42_000, 42_500, 1, 102)])
        con.execute("create table TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, "
                    "globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, "
                    "taskId INTEGER, modelId INTEGER, depth INTEGER)")
        con.executemany("insert into TASK values (?, ?, 0, ?, ?, 0, ?, 0, 2, 0, 0, 0)",
                        [(5_000, 7_000, 100, 1, ids["KERNEL_AICORE"]), (23_000, 24_500, 101, 2, ids["KERNEL_AICORE"]),
                         (45_000, 54_000, 102, 3, ids["KERNEL_AICORE"])])
        con.execute("create table COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY)")
        con.executemany("insert into COMPUTE_TASK_INFO values (?, ?)", [(ids["MatMul"], 1), (ids["MatMul"], 2),
                                                                         (ids["TensorMove"], 3)])
    con.close()
    return path


def test_npuports_marks_and_skips_in_a_database(tmp_path: Path) -> None:
    t = read_ascend(_marked_db(tmp_path / "ascend_pytorch_profiler_0.db"))
    assert t.device == "npu" and t.kernels == 2  # the skipped op's task is counted nowhere
    assert "aten::copy_" not in t.ops and UNATTRIBUTED not in t.ops
    assert t.ops["aten::mm"].calls == 2 and t.ops["aten::mm"].device_us == pytest.approx(3.5)
    # forward by the mark around it, backward by its autograd node's sequence number
    assert t.by_module[("mlp.fc", "aten::mm")].calls == 2
    assert t.by_module[("mlp.fc", "aten::mm")].kernels == {"MatMul": pytest.approx(3.5)}
    assert [s["name"] for s in t.steps] == ["ProfilerStep#1"]


def test_a_level0_export_of_the_same_script_reads_alike(tmp_path: Path) -> None:
    """The same script's step profiled at level 0 (no shapes, fewer tables filled): every aten op called as often as
    in the level-1 samples, its totals its tables', nothing unattributed."""
    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(HERE / "db" / "level0_rank0_ascend_pt", rank)
    gz = rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db.gz"
    db = gz.with_suffix("")
    db.write_bytes(gzip.decompress(gz.read_bytes()))
    gz.unlink()
    t = read_ascend(rank)
    text = read_ascend(TEXT_RANK)
    assert {k: v.calls for k, v in t.ops.items() if "::" in k} == {k: v.calls for k, v in text.ops.items() if "::" in k}
    assert UNATTRIBUTED not in t.ops
    _totals_are_the_tables(t, db)
