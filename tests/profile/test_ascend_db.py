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
