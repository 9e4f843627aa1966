"""`npuport profile record --dev npu`: the steps under the Ascend PyTorch profiler, its export kept and imported.

There is no NPU here: these run the CPU stand-in of torch_npu (npuport.devices.standin), whose profiler writes the
Ascend text export of torch.profiler's CPU events. What they prove is the recording path (the profiler asked for
what npu_profiler.py documents, the export kept, the import's op and module mapping equal to the Kineto reader's on
the same model) and the importer's reading of npuport's own marks; not anything an NPU would measure.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as ns
from typing import Any

import pytest
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model.loading import load_target
from npuport.model.scenarios import parse_scenario
from npuport.profile.artifact import import_trace, load_artifact
from npuport.profile.ascend import read_ascend
from npuport.profile.compare import compare
from npuport.profile.kineto import UNATTRIBUTED
from npuport.profile.npu_profiler import npu_profile
from npuport.profile.record import npu_side, record_scenario

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"


@pytest.fixture
def standin_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUPORT_NPU_STANDIN", "1")


def _calls(art: dict[str, Any]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Calls per aten op and per (module, op). Only namespaced ops: the Ascend export has no autograd-node or
    torch_npu-layer rows as ops (npuport.profile.ascend), the Kineto trace does."""
    ops = {o["op"]: o["calls"] for o in art["ops"] if "::" in o["op"]}
    mods = {(m["module"], m["op"]): m["calls"] for m in art["modules"] if "::" in m["op"]}
    return ops, mods


def test_npu_record_uses_the_ascend_profiler_and_imports_like_the_cpu_record(tmp_path: Path, standin_npu: None) -> None:
    dev, npu = npu_side("npu:0")
    assert dev == "cpu" and "stand-in" in npu.label  # the stand-in runs on the CPU and says so
    model = load_target(model=str(GPT), fake=False, device=dev)
    for spec in ("train:batch=1,seq=16", "prefill:batch=1,seq=16"):
        sc = parse_scenario(spec)
        on_npu = record_scenario(model, sc, dev, tmp_path / "npu", warmup=1, steps=2, timed_steps=2, npu=npu)
        on_cpu = record_scenario(model, sc, "cpu", tmp_path / "cpu", warmup=1, steps=2, timed_steps=2)
        # the export is kept beside the artifact, as the folder msprof-analyze and `profile import` take
        assert on_npu.trace_path == tmp_path / "npu" / f"{sc.name}_ascend_pt"
        assert (on_npu.trace_path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").is_file()
        art = on_npu.artifact
        assert art["format"] == "ascend" and art["recorded"]["device"] == "npu:0 (CPU stand-in, not a real NPU)"
        assert art["recorded"]["device_name"] == "CPU stand-in"
        assert art["device"] == "cpu"  # no device tasks: the import says it was a CPU run
        assert len(art["steps"]) == 2 and len(art["unprofiled"]["step_s"]) == 2
        # the same model and scenario: every aten op and every (module, op) called as often as the Kineto reader
        # counted them, backward ops in the module of their forward op (by sequence number) included
        ops, mods = _calls(art)
        assert (ops, mods) == _calls(on_cpu.artifact)
        assert ("blocks.*.mlp.fc", "aten::mm") in mods if sc.kind == "train" else ("blocks.*.mlp.fc", "aten::addmm") in mods
        # the export imports the same way on its own
        assert _calls(import_trace(str(on_npu.trace_path))) == (ops, mods)
        # `profile compare` of the CPU run (base) against the NPU one matches every aten op by module and op
        cmp = compare(on_cpu.artifact, art)
        rows = [r for r in cmp["rows"] if "::" in r["op"]]
        assert cmp["matched_by"] == "module and aten op" and rows
        assert all(r["matched"] and r["base_calls"] == r["new_calls"] for r in rows)
    asked = [kw for name, kw in npu.module.calls if name == "profiler.profile"]
    assert len(asked) == 2
    kw = asked[0]
    assert kw["activities"] == ["CPU", "NPU"] and kw["record_shapes"] is True
    assert kw["profile_memory"] is False and kw["with_stack"] is False and kw["with_modules"] is False
    cfg = kw["experimental_config"]
    assert cfg.profiler_level == "Level1" and cfg.aic_metrics == "AiCoreNone" and cfg.export_type == "text"


def test_npu_record_from_the_cli_and_its_outputs_protected(tmp_path: Path, standin_npu: None) -> None:
    out = tmp_path / "p"
    args = ["profile", "record", str(GPT), "--dev", "npu", "--scenario", "prefill:batch=1,seq=8", "--warmup", "1",
            "--steps", "1", "--timed-steps", "2", "--out-dir", str(out), "--quiet"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert load_artifact(out / "prefill.profile.json")["recorded"]["device"].startswith("npu (CPU stand-in")
    (out / "prefill.profile.json").unlink()
    again = CliRunner().invoke(cli, args)  # the export of the first run is still there
    assert again.exit_code == 2 and "prefill_ascend_pt already exists" in again.output
    forced = CliRunner().invoke(cli, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["prefill_ascend_pt"]
    assert (out / "prefill_ascend_pt" / "npuport_record.json").is_file()  # npuport's own: the kind --force replaces
    # a CPU recording into the same folder is not refused for the NPU's export, and leaves it alone
    cpu = CliRunner().invoke(cli, [*args[:4], "cpu", *args[5:], "--force"])
    assert cpu.exit_code == 0, cpu.output
    assert (out / "prefill.trace.json.gz").is_file() and (out / "prefill_ascend_pt" / "npuport_record.json").is_file()


@pytest.mark.parametrize("what", ["file", "folder", "link"])
def test_an_export_path_npuport_did_not_write_is_refused_before_recording(tmp_path: Path, standin_npu: None,
                                                                           what: str) -> None:
    out = tmp_path / "p"
    out.mkdir()
    theirs = out / "prefill_ascend_pt"
    if what == "file":
        theirs.write_text("mine")
    elif what == "folder":
        (theirs / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)  # someone's own export, renamed
    else:
        (tmp_path / "elsewhere" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        theirs.symlink_to(tmp_path / "elsewhere")
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--dev", "npu", "--scenario", "prefill:batch=1,seq=8",
                                   "--out-dir", str(out), "--force", "--quiet"])
    assert res.exit_code == 2 and "is not an export npuport profile record kept" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (out / "prefill.profile.json").exists()
    assert theirs.is_symlink() or theirs.exists() and (what == "file" or (theirs / "ASCEND_PROFILER_OUTPUT").is_dir())


def test_npu_record_without_torch_npu_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPUPORT_NPU_STANDIN", raising=False)
    with pytest.raises(NpuportError, match="not present"):
        api.profile_record(api.ModelSpec(model=str(GPT)), api.RecordOptions(dev="npu", out_dir=str(tmp_path)))
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--dev", "npu", "--out-dir", str(tmp_path / "x")])
    assert res.exit_code == 2 and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_graph_mode_on_the_stand_in_is_refused_in_one_line(tmp_path: Path, standin_npu: None) -> None:
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--dev", "npu", "--scenario",
                                   "prefill:batch=1,seq=8,mode=graph", "--out-dir", str(tmp_path / "g")])
    assert res.exit_code == 2 and "graph mode is recorded for prefill and decode on CUDA or an NPU" in res.output


def _trace_view(tmp_path: Path) -> Path:
    """A hand-made trace_view.json in torch_npu's text-export shape: npuport's module marks around a forward op, a
    backward op under its autograd node (same sequence number), a skip range with an op and the task it launched."""
    us = lambda ns: f"{ns / 1000:.3f}"  # noqa: E731 - µs strings, as torch_npu writes them
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": us(0), "dur": 100.0, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "npuport.module:mlp.fc", "pid": 1, "tid": 1, "ts": us(1000), "dur": 10.0, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": us(2000), "dur": 5.0,
         "args": {"Sequence number": 7, "Fwd thread id": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 2,
         "ts": us(20000), "dur": 8.0, "args": {"Sequence number": 7, "Fwd thread id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": us(21000), "dur": 4.0,
         "args": {"Sequence number": -1}},
        {"ph": "X", "cat": "cpu_op", "name": "npuport.skip:restore decode cache", "pid": 1, "tid": 1, "ts": us(40000),
         "dur": 20.0, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": us(41000), "dur": 3.0, "args": {}},
    ]
    # tasks on the hardware stream, each with the flow from the op that launched it
    for i, (src_tid, src_ns, task_ns, dur) in enumerate([(1, 2000, 3000, 2.0), (2, 21000, 22000, 1.5), (1, 41000, 45000, 9.0)]):
        ev.append({"ph": "X", "name": f"Kernel{i}", "pid": 9, "tid": 3, "ts": us(task_ns), "dur": dur, "args": {"Task Type": "AI_CORE"}})
        ev.append({"ph": "s", "cat": "async_npu", "name": "torch_to_npu", "id": str(i), "pid": 1, "tid": src_tid, "ts": us(src_ns)})
        ev.append({"ph": "f", "cat": "async_npu", "name": "torch_to_npu", "id": str(i), "pid": 9, "tid": 3, "ts": us(task_ns), "bp": "e"})
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(ev))
    return path


def test_the_ascend_reader_takes_npuports_marks_and_skips(tmp_path: Path) -> None:
    t = read_ascend(_trace_view(tmp_path))
    assert t.device == "npu" and t.kernels == 2  # the skipped op's task is not counted anywhere
    assert "aten::copy_" not in t.ops and UNATTRIBUTED not in t.ops
    assert t.ops["aten::mm"].calls == 2 and t.ops["aten::mm"].device_us == pytest.approx(3.5)
    # forward by the mark around it, backward by the sequence number of its autograd node
    assert t.by_module[("mlp.fc", "aten::mm")].calls == 2
    assert t.by_module[("mlp.fc", "aten::mm")].device_us == pytest.approx(3.5)


def test_an_older_torch_npu_gets_only_the_keywords_it_takes(tmp_path: Path) -> None:
    """torch_npu for torch 2.1 (Ascend/pytorch v6.0.0-pytorch2.1.0) has no `async_mode` in its trace handler and no
    `data_simplification` in its experimental config: they are left out, not passed to fail."""
    seen: dict[str, Any] = {}

    def handler(dir_name: str | None = None, worker_name: str | None = None, analyse_flag: bool = True) -> str:
        seen["handler"] = {"dir_name": dir_name, "analyse_flag": analyse_flag}
        return "handler"

    def config(profiler_level: str = "Level0", aic_metrics: str = "", l2_cache: bool = False,
               export_type: str = "text") -> str:
        seen["config"] = {"profiler_level": profiler_level, "aic_metrics": aic_metrics, "export_type": export_type}
        return "config"

    def profile(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    old = ns(profiler=ns(profile=profile, tensorboard_trace_handler=handler, _ExperimentalConfig=config,
                         schedule=lambda **kw: ("schedule", kw), ProfilerActivity=ns(CPU="CPU", NPU="NPU"),
                         ProfilerLevel=ns(Level1="Level1"), AiCMetrics=ns(AiCoreNone="none"), ExportType=ns(Text="text")))
    got = npu_profile(old, tmp_path, warmup=1, steps=2)
    assert got["on_trace_ready"] == "handler" and got["experimental_config"] == "config"
    assert seen["handler"] == {"dir_name": str(tmp_path), "analyse_flag": True}
    assert seen["config"] == {"profiler_level": "Level1", "aic_metrics": "none", "export_type": "text"}
    assert got["schedule"] == ("schedule", {"wait": 0, "warmup": 1, "active": 2, "repeat": 1})
