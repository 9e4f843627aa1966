"""npuport.profile: the Kineto importer, the artifact, the join to the audit, and their CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.profile.artifact import SCHEMA, import_trace, load_artifact, write_artifact
from npuport.profile.join import join

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "fixtures" / "profiles" / "gpt_prefill_cpu.json.gz"
GPT = ROOT / "examples" / "gpt" / "model.py"


def test_cpu_trace_imports_with_ops_calls_and_consistent_totals() -> None:
    art = import_trace(TRACE)
    assert art["schema"] == SCHEMA and art["device"] == "cpu" and "cpu" in art["device_time"]
    ops = {r["op"]: r for r in art["ops"]}
    for name in ("aten::addmm", "aten::mm", "aten::gelu", "aten::native_layer_norm"):
        assert ops[name]["calls"] > 0 and ops[name]["device_s"] > 0
    assert ops["aten::addmm"]["calls"] == 48
    t = art["totals"]
    assert t["calls"] == t["cpu_ops"] == sum(r["calls"] for r in art["ops"])
    assert t["device_s"] == pytest.approx(sum(r["device_s"] for r in art["ops"]))
    assert sum(r["share"] for r in art["ops"]) == pytest.approx(1.0)
    # a CPU run: device time is self CPU time, so it equals host time and fits inside the step's wall time
    assert t["device_s"] == pytest.approx(t["host_s"])
    (step,) = art["steps"]
    assert step["name"].startswith("ProfilerStep#")
    assert 0 < step["kernel_s"] <= step["wall_s"] and step["idle_s"] == pytest.approx(step["wall_s"] - step["kernel_s"])
    assert t["device_s"] <= step["wall_s"] * 1.001


def test_gz_and_plain_json_give_the_same_artifact(tmp_path: Path) -> None:
    plain = tmp_path / TRACE.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    a, b = import_trace(TRACE), import_trace(plain)
    a.pop("source"), b.pop("source")
    assert a == b


def test_artifact_round_trips(tmp_path: Path) -> None:
    art = import_trace(TRACE)
    write_artifact(art, tmp_path / "a.json")
    assert load_artifact(tmp_path / "a.json") == art


@pytest.mark.parametrize("text", ['{"traceEvents": [{"ph": "X"}, ', '{"other": 1}', "not json at all", '{"traceEvents": [1]}'])
def test_malformed_trace_raises_one_line(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(NpuportError) as exc:
        import_trace(bad)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("field, value", [("ts", '"abc"'), ("dur", "null"), ("dur", "true"), ("ts", "[1]"),
                                          ("ts", '"nan"'), ("dur", '"inf"'), ("dur", "NaN")])
def test_an_event_time_that_is_not_a_number_is_refused(tmp_path: Path, field: str, value: str) -> None:
    # read as 0 it put the op at the trace's start with no length, and the import said nothing
    times = {"ts": "10", "dur": "5"} | {field: value}
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": %s, "dur": %s, "pid": 1, '
                   '"tid": 1, "args": {}}]}' % (times["ts"], times["dur"]))
    with pytest.raises(NpuportError, match=f"'aten::mm': its '{field}' is not a number"):
        import_trace(bad)
    # times written as strings of microseconds (as some exporters write them) are numbers
    good = tmp_path / "good.json"
    good.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": "10.5", "dur": "5", '
                    '"pid": 1, "tid": 1, "args": {}}]}')
    assert import_trace(good)["ops"][0]["op"] == "aten::mm"


@pytest.mark.parametrize("text", ['{"traceEvents": []}', '{"traceEvents": [{"ph": "M", "name": "process_name"}]}'])
def test_a_trace_with_nothing_to_profile_is_refused(tmp_path: Path, text: str) -> None:
    # valid JSON that holds no op, kernel or step imported as an empty profile, which compare then took as a baseline
    empty = tmp_path / "empty.json"
    empty.write_text(text)
    with pytest.raises(NpuportError, match="holds no op, kernel or step"):
        import_trace(empty)


def test_malformed_gzip_and_artifact(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(NpuportError):
        import_trace(bad)
    art = tmp_path / "art.json"
    art.write_text('{"schema": "npuport.audit/1"}')
    with pytest.raises(NpuportError, match="not a profile artifact"):
        load_artifact(art)


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_synthetic_kineto_trace_attributes_kernels_by_correlation(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 100),
        _x("cpu_op", "aten::linear", 10, 30, **{"External id": 1}),
        _x("cpu_op", "aten::addmm", 12, 20, **{"External id": 2}),  # nested in linear: kernels go to addmm
        _x("cuda_runtime", "cudaLaunchKernel", 14, 2, correlation=7),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 2, correlation=8),
        _x("cpu_op", "aten::gelu", 50, 10, **{"External id": 3}),
        _x("cuda_runtime", "cudaLaunchKernel", 52, 2, correlation=9),
        _x("kernel", "sm90_gemm_a", 30, 5, tid=7, correlation=7),
        _x("kernel", "sm90_gemm_b", 36, 4, tid=7, correlation=8),
        _x("kernel", "gelu_kernel", 70, 3, tid=7, correlation=9),
        {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 14, "cat": "ac2g", "name": "ac2g"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    art = import_trace(path)
    ops = {r["op"]: r for r in art["ops"]}
    assert art["device"] == "cuda" and art["totals"]["kernels"] == 3
    assert ops["aten::addmm"]["device_s"] == pytest.approx(9e-6)
    assert ops["aten::gelu"]["device_s"] == pytest.approx(3e-6)
    assert ops["aten::linear"]["device_s"] == 0.0
    assert ops["aten::linear"]["host_s"] == pytest.approx(10e-6)  # 30 minus addmm's 20
    assert ops["aten::addmm"]["share"] == pytest.approx(0.75)
    assert ops["aten::addmm"]["parents"] == {"aten::linear": pytest.approx(9e-6)}
    (step,) = art["steps"]
    assert step["wall_s"] == pytest.approx(100e-6) and step["kernel_s"] == pytest.approx(12e-6)
    assert step["idle_s"] == pytest.approx(88e-6)


def _audit(ops: dict[str, tuple[str, float]]) -> dict[str, object]:
    return {"scenarios": [{"name": "prefill"}],
            "ops": [{"op": op, "kind": kind, "scenarios": {"prefill": {"estimated_time_s": t}}} for op, (kind, t) in ops.items()]}


def _profile(rows: list[tuple[str, float, dict[str, float] | None]]) -> dict[str, object]:
    return {"schema": SCHEMA, "source": "x", "device": "cuda", "device_time": "kernels",
            "ops": [{"op": op, "calls": 1, "host_s": 0.0, "device_s": t, "share": 0.0, "parents": p or {"": t}}
                    for op, t, p in rows]}


def test_join_arithmetic() -> None:
    audit = _audit({"aten::mm": ("compute", 3.0), "aten::add.Tensor": ("compute", 1.0), "aten::softmax.int": ("compute", 0.0)})
    prof = _profile([("aten::mm", 4.0, None), ("aten::add", 2.0, None), ("aten::_to_copy", 2.0, None)])
    j = join(audit, prof, "prefill")
    rows = {r["op"]: r for r in j["ops"]}
    assert rows["aten::mm"]["ratio"] == pytest.approx(4 / 3)
    assert rows["aten::mm"]["estimated_share"] == pytest.approx(0.75) and rows["aten::mm"]["measured_share"] == pytest.approx(0.5)
    assert rows["aten::add"]["ratio"] == pytest.approx(2.0) and rows["aten::add"]["measured_share"] == pytest.approx(0.25)
    assert [r["op"] for r in j["only_in_profile"]] == ["aten::_to_copy"]
    assert j["only_in_profile"][0]["measured_share"] == pytest.approx(0.25)
    assert j["only_in_audit"] == []  # softmax has no estimated time either
    assert j["estimated_s"] == 4.0 and j["measured_s"] == 8.0 and j["ratio"] == 2.0
    # half L1: |0.75-0.5| + |0.25-0.25| + |0-0.25| = 0.5, halved
    assert j["distance"] == pytest.approx(0.25)
    classes = {c["class"]: c for c in j["classes"]}
    assert classes["matmul"]["ratio"] == pytest.approx(4 / 3) and classes["cast"]["measured_s"] == 2.0


def test_join_rolls_unlisted_children_into_their_audited_parent() -> None:
    audit = _audit({"aten::scaled_dot_product_attention": ("compute", 1.0), "aten::gelu": ("compute", 1.0)})
    prof = _profile([("aten::_scaled_dot_product_flash_attention", 3.0, {"aten::scaled_dot_product_attention": 3.0}),
                     ("aten::scaled_dot_product_attention", 0.0, None)])
    j = join(audit, prof, "prefill")
    rows = {r["op"]: r for r in j["ops"]}
    assert rows["aten::scaled_dot_product_attention"]["measured_s"] == 3.0 and j["only_in_profile"] == []
    assert j["only_in_audit"] == ["aten::gelu"]
    with pytest.raises(NpuportError):
        join(audit, prof, "decode")


def test_join_gives_a_kernel_to_the_outermost_audited_op_enclosing_it() -> None:
    """The audit records the op its dispatch mode saw, the outermost one: a cast's kernel launched by the `copy_`
    inside `_to_copy` is the cast's time even where the model also calls `copy_` itself (DeepSeek-V2's MLA writes
    key halves with `copy_`): those direct calls alone stay `copy_`'s. Before, every `copy_` kernel went to `copy_`
    and the casts measured 0."""
    audit = _audit({"aten::_to_copy": ("compute", 2.0), "aten::copy_": ("compute", 1.0), "aten::sort": ("compute", 1.0)})
    prof = _profile([("aten::copy_", 4.5, {"aten::_to_copy": 3.0, "": 1.0, "aten::sort": 0.5}),
                     ("aten::_to_copy", 0.0, {}), ("aten::sort", 1.0, None)])
    prof["ops"][1]["parents_inclusive"] = {"aten::to": 3.0}  # where the cast's callees' time sat: under `to`
    prof["ops"].append({"op": "aten::to", "calls": 1, "host_s": 0.0, "device_s": 0.0, "share": 0.0, "parents": {},
                        "parents_inclusive": {"": 3.0}})
    rows = {r["op"]: r for r in join(audit, prof, "prefill")["ops"]}
    assert rows["aten::_to_copy"]["measured_s"] == pytest.approx(3.0)
    assert rows["aten::copy_"]["measured_s"] == pytest.approx(1.0)
    assert rows["aten::sort"]["measured_s"] == pytest.approx(1.5)  # its own kernel and the copy inside it


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(cli, list(args))


def test_cli_import_and_audit_with_profile(tmp_path: Path) -> None:
    art = tmp_path / "art.json"
    res = _run("profile", "import", str(TRACE), "-o", str(art), "--quiet")
    assert res.exit_code == 0, res.output
    assert load_artifact(art)["device"] == "cpu"
    res = _run("audit", str(GPT), "--scenario", "prefill:batch=1,seq=64", "--profile", str(art), "--format", "json", "--quiet")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    (j,) = data["profile"]
    assert j["scenario"] == "prefill" and j["measured_s"] > 0
    assert {"aten::addmm", "aten::mm"} <= {r["op"] for r in j["ops"] if r["measured_s"] > 0}
    res = _run("audit", str(GPT), "--scenario", "prefill:batch=1,seq=64", "--profile", str(art), "--quiet")
    assert res.exit_code == 0 and "Measured against estimated" in res.stdout


def test_cli_malformed_trace_exits_2_with_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": ')
    res = _run("profile", "import", str(bad), "-o", str(tmp_path / "a.json"))
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert not (tmp_path / "a.json").exists()


def test_kernel_less_op_rolls_up_by_its_callees_time_not_its_calls(tmp_path: Path) -> None:
    """`zero_` has no kernel of its own; its `fill_` kernels run under two parents with very different sizes (one
    large `nll_loss_backward` zeroing, three small `new_zeros`). The join must give each parent the time its own
    zeroing took, not a share by call count."""
    events = [_x("user_annotation", "ProfilerStep#0", 0, 1000)]
    corr = 1
    kernels = []

    def call(parent: str, start: float, fill_us: float) -> None:
        nonlocal corr
        events.extend([_x("cpu_op", parent, start, 40), _x("cpu_op", "aten::zero_", start + 2, 30),
                       _x("cpu_op", "aten::fill_", start + 4, 20),
                       _x("cuda_runtime", "cudaLaunchKernel", start + 6, 2, correlation=corr)])
        kernels.append(_x("kernel", "fill_kernel", 500 + start, fill_us, tid=7, correlation=corr))
        corr += 1

    call("aten::nll_loss_backward", 10, 90.0)
    for i in range(3):
        call("aten::new_zeros", 100 + 50 * i, 2.0)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events + kernels}))
    art = import_trace(path)
    ops = {r["op"]: r for r in art["ops"]}
    assert ops["aten::zero_"]["parents_inclusive"] == {"aten::nll_loss_backward": pytest.approx(90e-6),
                                                       "aten::new_zeros": pytest.approx(6e-6)}
    audit = _audit({"aten::nll_loss_backward": ("compute", 1e-4), "aten::new_zeros": ("compute", 1e-5)})
    rows = {r["op"]: r for r in join(audit, art, "prefill")["ops"]}
    assert rows["aten::nll_loss_backward"]["measured_s"] == pytest.approx(90e-6)  # by calls it was 24 us
    assert rows["aten::new_zeros"]["measured_s"] == pytest.approx(6e-6)
