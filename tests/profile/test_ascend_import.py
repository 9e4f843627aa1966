"""npuport.profile.ascend: a real torch_npu profiler export (tests/fixtures/profiles/ascend/README.md) read per op,
checked against figures computed here straight from its files, its CSV fallback, and its errors. CPU only."""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from npuport.errors import NpuportError
from npuport.profile import ascend
from npuport.profile.artifact import to_artifact
from npuport.profile.ascend import is_ascend_output, read_ascend
from npuport.profile.kineto import UNATTRIBUTED, Trace

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "fixtures" / "profiles" / "ascend"
RANK = HERE / "rank0_ascend_pt"
OUT = RANK / "ASCEND_PROFILER_OUTPUT"
TRACE_GZ = OUT / "trace_view.json.gz"
KERNELS = OUT / "kernel_details.csv"
OPERATORS_GZ = OUT / "operator_details.csv.gz"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return read_ascend(RANK)


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return json.loads(gzip.decompress(TRACE_GZ.read_bytes()))


def _csv(path: Path) -> list[dict[str, str]]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def _total(t: Trace) -> float:
    return sum(s.device_us for s in t.ops.values())


def _ns(ts: str) -> int:
    whole, _, frac = ts.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


# ---- finding the export ---------------------------------------------------------------------------------------------

def test_the_export_is_recognised_at_each_level_and_nothing_else_is(tmp_path: Path) -> None:
    for p in (HERE, RANK, OUT, TRACE_GZ):
        assert is_ascend_output(p), p
    for p in (ROOT / "tests" / "fixtures" / "profiles" / "gpt_prefill_cpu.json.gz", KERNELS, tmp_path, tmp_path / "nope"):
        assert not is_ascend_output(p), p


def test_every_way_of_naming_the_export_reads_the_same(trace: Trace) -> None:
    for p in (HERE, OUT, TRACE_GZ, str(RANK)):
        other = read_ascend(p)
        assert (other.ops, other.steps, other.kernels, other.by_module) == (trace.ops, trace.steps, trace.kernels,
                                                                             trace.by_module)


# ---- the real sample, from trace_view.json --------------------------------------------------------------------------

def test_real_sample_reads_as_aten_ops_with_npu_time(trace: Trace) -> None:
    assert trace.device == "npu" and trace.kernels == 215 and trace.cpu_ops == 535
    # every op has a namespace: torch_npu's own layers (aclnnMm, Conv2D, HcclAllreduce, ...) are folded into their op
    assert all("::" in name for name in trace.ops if name != UNATTRIBUTED)
    assert not any(name.startswith(("aclnn", "Hccl", "ProfilerStep")) for name in trace.ops)
    for name in ("aten::addmm", "aten::mm", "aten::_convolution", "aten::convolution_backward", "c10d::allreduce_"):
        assert trace.ops[name].device_us > 0, name
    assert trace.ops["aten::addmm"].calls == 3 and trace.ops["c10d::allreduce_"].calls == 4
    attributed = _total(trace) - trace.ops[UNATTRIBUTED].device_us
    assert attributed / _total(trace) > 0.99
    # the allreduce of the gradients dominates this one-step DDP run
    assert max(trace.ops, key=lambda n: trace.ops[n].device_us) == "c10d::allreduce_"


def test_device_total_matches_the_hardware_and_hccl_processes(trace: Trace, events: list[dict[str, Any]]) -> None:
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    hccl = [e for e in events if e.get("ph") == "X" and procs[e["pid"]] == "HCCL"]
    collectives = [e["dur"] for e in hccl if threads[(e["pid"], e["tid"])].endswith("Communication")]
    comm_streams = {e["args"]["stream id"] for e in hccl if "stream id" in e["args"]}
    hardware = [e for e in events if e.get("ph") == "X" and procs[e["pid"]] == "Ascend Hardware"]
    work = [e["dur"] for e in hardware
            if e["tid"] not in comm_streams and not e["args"]["Task Type"].startswith(("EVENT_", "PLACE_HOLDER"))]
    assert len(collectives) == 4 and comm_streams == {4}
    assert len(work) + len(collectives) == trace.kernels
    assert _total(trace) == pytest.approx(sum(work) + sum(collectives), rel=1e-9)
    assert trace.ops["c10d::allreduce_"].device_us == pytest.approx(sum(collectives), rel=1e-9)


def test_attribution_matches_torch_npus_own_operator_details(trace: Trace) -> None:
    # operator_details.csv is torch_npu's own op -> kernel attribution (innermost op, its layers included)
    own = sum(float(r["Device Self Duration(us)"]) for r in _csv(OPERATORS_GZ))
    attributed = _total(trace) - trace.ops[UNATTRIBUTED].device_us
    assert attributed == pytest.approx(own, abs=0.01)
    # the unattributed rest: 5 small copies that no op launches by a flow
    assert set(trace.ops[UNATTRIBUTED].kernels) == {"MEMCPY_ASYNC"} and trace.ops[UNATTRIBUTED].device_us < 20
    # kernel_details.csv lists the same tasks less the copies (its durations rounded to 1 ns each: 191 rows)
    copies = sum(t for st in trace.ops.values() for k, t in st.kernels.items() if k == "MEMCPY_ASYNC")
    rows = _csv(KERNELS)
    assert _total(trace) - copies == pytest.approx(sum(float(r["Duration(us)"]) for r in rows), abs=0.1)
    hccl_rows = [float(r["Duration(us)"]) for r in rows if r["Accelerator Core"] == "HCCL"]
    assert trace.ops["c10d::allreduce_"].device_us == pytest.approx(sum(hccl_rows), abs=0.01)


def test_kernel_names_and_parents_split_each_ops_device_time(trace: Trace) -> None:
    for name, st in trace.ops.items():
        assert sum(st.kernels.values()) == pytest.approx(st.device_us), name
        assert sum(st.parents.values()) == pytest.approx(st.device_us), name
    assert set(trace.ops["aten::addmm"].kernels) == {"aclnnAddmm_MatMulCommon_MatMulV2"}
    assert set(trace.ops["aten::addmm"].parents) == {"aten::linear"}
    # a collective's per-call suffix is dropped (hcom_allReduce__586_0_1 ...), as kernel_details' Type has it
    assert set(trace.ops["c10d::allreduce_"].kernels) == {"hcom_allReduce_"}
    assert "aten::_foreach_add_" in trace.ops and trace.ops["aten::_foreach_add_"].parents.keys() == {""}


def test_host_self_times_add_up_to_the_top_level_op_time(trace: Trace, events: list[dict[str, Any]]) -> None:
    spans: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and "::" in e["name"]:
            a = _ns(e["ts"])
            spans[e["tid"]].append((a, a + round(e["dur"] * 1000)))
    top = 0.0
    for intervals in spans.values():  # the union per thread: the time of the top-level ops
        end = 0
        for a, b in sorted(intervals):
            top += max(b - max(a, end), 0) / 1000
            end = max(end, b)
    assert all(st.host_us >= 0 for st in trace.ops.values())
    assert sum(st.host_us for st in trace.ops.values()) == pytest.approx(top, rel=1e-6)
    assert trace.ops["aten::addmm"].host_us > 0 and trace.ops[UNATTRIBUTED].host_us == 0


def test_the_one_profiled_step(trace: Trace) -> None:
    (step,) = trace.steps
    assert step["name"] == "ProfilerStep#50" and step["wall_us"] == pytest.approx(155985.8)
    assert 0 < step["kernel_us"] <= _total(trace) and step["kernel_us"] < step["wall_us"]
    assert step["idle_us"] == pytest.approx(step["wall_us"] - step["kernel_us"])


def test_ops_inside_nn_modules_are_counted_per_module(trace: Trace) -> None:
    modules = {m for m, _ in trace.by_module}
    assert {"Conv2d_0", "Linear_0", "ReLU_0", "AlexNet_0"} <= modules
    assert trace.by_module[("Linear_0", "aten::addmm")].calls == 1
    assert trace.by_module[("Linear_0", "aten::addmm")].device_us > 0
    # forward ops only (the backward thread runs outside modules), so a part of the ops' time
    per_op: dict[str, float] = defaultdict(float)
    for (_, op), st in trace.by_module.items():
        per_op[op] += st.device_us
    assert all(t <= trace.ops[op].device_us + 1e-6 for op, t in per_op.items())
    assert per_op["aten::addmm"] == pytest.approx(trace.ops["aten::addmm"].device_us)


def test_plain_json_and_small_read_chunks_give_the_same_trace(tmp_path: Path, trace: Trace,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_bytes(gzip.decompress(TRACE_GZ.read_bytes()))
    monkeypatch.setattr(ascend, "_CHUNK", 257)  # events straddle every chunk border
    other = read_ascend(out.parent)
    assert (other.ops, other.steps, other.kernels, other.by_module) == (trace.ops, trace.steps, trace.kernels,
                                                                         trace.by_module)


def test_the_trace_fits_the_profile_artifact(trace: Trace) -> None:
    art = to_artifact(trace)
    assert art["device"] == "npu" and art["device_time"] == "kernels"
    assert art["totals"]["device_s"] == pytest.approx(_total(trace) * 1e-6)


# ---- fallback: kernel_details.csv + operator_details.csv ------------------------------------------------------------

def _csv_only(tmp_path: Path, kernels_text: str | None = None) -> Path:
    out = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    if kernels_text is None:
        shutil.copy(KERNELS, out / KERNELS.name)
    else:
        (out / KERNELS.name).write_text(kernels_text, encoding="utf-8")
    shutil.copy(OPERATORS_GZ, out / OPERATORS_GZ.name)
    return out.parent


def test_csv_fallback_reads_kernels_by_type_and_host_time_by_op(tmp_path: Path) -> None:
    t = read_ascend(_csv_only(tmp_path))
    rows = _csv(KERNELS)
    assert t.device == "npu" and t.kernels == len(rows) == 191 and not t.by_module
    assert _total(t) == pytest.approx(sum(float(r["Duration(us)"]) for r in rows))
    assert all(n.startswith("kernel:") or "::" in n for n in t.ops)
    assert t.ops["kernel:MatMulV2"].calls == 8 and t.ops["kernel:hcom_allReduce_"].kernels.keys() == {"hcom_allReduce_"}
    assert "aclnnAddmm_MatMulCommon_MatMulV2" in t.ops["kernel:MatMulV2"].kernels
    ops = [r for r in _csv(OPERATORS_GZ) if "::" in r["Name"]]
    assert t.cpu_ops == len(ops)
    assert t.ops["aten::addmm"].host_us == pytest.approx(sum(float(r["Host Self Duration(us)"])
                                                             for r in ops if r["Name"] == "aten::addmm"))
    assert t.ops["aten::addmm"].device_us == 0
    # the step from "Step Id": step_trace_time.csv of the same run has Computing + Communication(Not Overlapped)
    # 8873.756 + 101963.203 µs and Free 25744.05 µs
    (step,) = t.steps
    assert step["name"] == "ProfilerStep#50"
    assert step["kernel_us"] == pytest.approx(8873.756 + 101963.203, abs=0.1)
    assert step["idle_us"] == pytest.approx(25744.05, abs=0.1)


def test_csv_fallback_takes_the_column_variants_of_other_releases(tmp_path: Path) -> None:
    """Without "Step Id", with "Device_id" (2025-06), "Block Dim" renamed "Block Num" (2026-02): same kernels."""
    src = list(csv.reader(io.StringIO(KERNELS.read_text(encoding="utf-8"))))
    head = src[0]
    keep = [i for i, h in enumerate(head) if h != "Step Id"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["Device_id"] + ["Block Num" if head[i] == "Block Dim" else head[i] for i in keep])
    for row in src[1:]:
        w.writerow(["0"] + [row[i] for i in keep])
    t = read_ascend(_csv_only(tmp_path, buf.getvalue()))
    assert t.kernels == 191 and t.steps == []
    assert _total(t) == pytest.approx(sum(float(r["Duration(us)"]) for r in _csv(KERNELS)))


# ---- what is not an export, or a broken one -------------------------------------------------------------------------

def _raises(path: Path | str, *words: str) -> None:
    with pytest.raises(NpuportError) as exc:
        read_ascend(path)
    msg = str(exc.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_missing_or_unparsed_or_ambiguous_folders_say_so(tmp_path: Path) -> None:
    _raises(tmp_path / "missing", "no Ascend profiler output")
    (tmp_path / "raw_ascend_pt").mkdir()
    _raises(tmp_path / "raw_ascend_pt", "not parsed")
    (tmp_path / "two").mkdir()
    for r in ("a_ascend_pt", "b_ascend_pt"):
        (tmp_path / "two" / r / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    _raises(tmp_path / "two", "2 ranks")
    db = tmp_path / "db_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    db.mkdir(parents=True)
    (db / "ascend_pytorch_profiler_0.db").write_bytes(b"")  # an empty SQLite file: none of the export's tables
    _raises(db.parent, "lacks tables", "PYTORCH_API")
    (db / "ascend_pytorch_profiler_0.db").write_bytes(b"not a database at all, but long enough to be read" * 100)
    _raises(db.parent, "cannot be read as the Ascend profiler's database")
    (db / "ascend_pytorch_profiler_1.db").write_bytes(b"")
    _raises(db.parent, "2 profiler databases")
    _raises(ROOT / "tests" / "fixtures" / "profiles" / "gpt_prefill_cpu.json.gz", "not Ascend profiler output")


@pytest.mark.parametrize("text", ["", "[", "not json", "[1, 2]", "[]", '[{"ph": "X", "name": "a", "ts": "1", "dur": 1}',
                                  '{"other": 1}'])
def test_malformed_trace_view_raises_one_line(tmp_path: Path, text: str) -> None:
    out = tmp_path / "ASCEND_PROFILER_OUTPUT"
    out.mkdir()
    (out / "trace_view.json").write_text(text)
    _raises(out)


def test_truncated_real_trace_raises_one_line(tmp_path: Path) -> None:
    data = gzip.decompress(TRACE_GZ.read_bytes())
    out = tmp_path / "ASCEND_PROFILER_OUTPUT"
    out.mkdir()
    (out / "trace_view.json").write_bytes(data[: len(data) // 2])
    _raises(out, "trace_view.json")
    (out / "trace_view.json").unlink()
    (out / "trace_view.json.gz").write_bytes(TRACE_GZ.read_bytes()[:5000])  # a cut gzip stream
    _raises(out, "trace_view.json.gz")


def test_csv_without_duration_or_with_a_bad_number_raises_one_line(tmp_path: Path) -> None:
    rows = list(csv.reader(io.StringIO(KERNELS.read_text(encoding="utf-8"))))
    i = rows[0].index("Duration(us)")
    no_dur = "\n".join(",".join(c for k, c in enumerate(r) if k != i) for r in [rows[0], ["x"] * len(rows[0])])
    _raises(_csv_only(tmp_path / "a", no_dur), "kernel_details.csv", "Duration(us)")
    rows[1][i] = "fast"
    buf = io.StringIO()
    csv.writer(buf).writerows(rows[:3])
    _raises(_csv_only(tmp_path / "b", buf.getvalue()), "kernel_details.csv:2", "'fast'")
