"""npuport profile record (CPU run of the shipped GPT example), the module mapping of the Kineto reader on a real
H200 trace, profile compare, and the step-time model the join holds against a measured profile."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.cost.roofline import get_chip
from npuport.cost.timing import Issued, call_device_s, is_broadcast, is_strided, op_class, simulate, timing_for
from npuport.errors import NpuportError
from npuport.model.loading import load_target
from npuport.model.scenarios import parse_scenario
from npuport.profile.artifact import import_trace, load_artifact
from npuport.profile.compare import breakdown, compare
from npuport.profile.join import join
from npuport.profile.kineto import read_trace
from npuport.profile.record import _restore_cache, module_annotations

ROOT = Path(__file__).resolve().parents[2]
GPT = ROOT / "examples" / "gpt" / "model.py"
H200_TRACE = ROOT / "tests" / "fixtures" / "profiles" / "gpt_train_h200.trace.json.gz"
MEASURED = ROOT / "docs" / "measured" / "profiles"


def test_record_on_cpu_writes_trace_and_artifact_with_modules(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", "prefill:batch=1,seq=16",
                                   "--scenario", "train:batch=1,seq=16", "--warmup", "1", "--steps", "2",
                                   "--timed-steps", "4", "--out-dir", str(tmp_path / "p"), "--quiet"])
    assert res.exit_code == 0, res.output
    art = load_artifact(tmp_path / "p" / "train.profile.json")
    assert (tmp_path / "p" / "train.trace.json.gz").is_file()
    assert art["scenario"]["spec"] == "train:batch=1,seq=16" and art["recorded"]["steps"] == 2
    assert len(art["steps"]) == 2 and len(art["unprofiled"]["step_s"]) == 4 and art["host_probe"]["op_s"] > 0
    # each timed step is bracketed by a host probe before and after it
    assert len(art["unprofiled"]["probe_s"]) == len(art["unprofiled"]["probe_after_s"]) == 4
    assert all(p > 0 for p in art["unprofiled"]["probe_after_s"])
    # the host's issue time per timed step: never more than that step's wall time
    plain = art["unprofiled"]
    assert len(plain["host_s"]) == 4 and all(0 < h <= w for h, w in zip(plain["host_s"], plain["step_s"]))
    mods = {r["module"] for r in art["modules"]}
    # layer indices collapse as in the audit; backward ops land in the module of their forward op
    assert "blocks.*.mlp.fc" in mods and "lm_head" in mods
    fc_ops = {r["op"] for r in art["modules"] if r["module"] == "blocks.*.mlp.fc"}
    assert "aten::addmm" in fc_ops and "aten::mm" in fc_ops  # mm: the weight / input gradients of fc
    # nothing the recorder ran itself (cache restore, annotations) is counted as an op
    assert not any(r["op"].startswith("npuport") for r in art["ops"])
    # a second run into the same folder refuses to overwrite without --force
    again = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", "train:batch=1,seq=16",
                                     "--out-dir", str(tmp_path / "p")])
    assert again.exit_code == 2 and "already exists" in again.output


def test_record_refuses_an_absent_npu_and_bad_counts_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(NpuportError):
        api.profile_record(api.ModelSpec(model=str(GPT)), api.RecordOptions(dev="npu", out_dir=str(tmp_path)))
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--decode-cache", "sometimes", "--out-dir", str(tmp_path)])
    assert res.exit_code == 2
    # without a warm-up step torch.profiler's schedule loses the first profiled step: refused
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--warmup", "0", "--out-dir", str(tmp_path)])
    assert res.exit_code == 2 and "--warmup" in res.output
    with pytest.raises(NpuportError, match="warmup >= 1"):
        api.profile_record(api.ModelSpec(model=str(GPT)), api.RecordOptions(warmup=0, out_dir=str(tmp_path)))


def test_module_annotations_close_every_range_even_when_forward_raises() -> None:
    class Boom(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Boom())
    with torch.profiler.profile() as prof, module_annotations(model), pytest.raises(RuntimeError):
        model(torch.ones(1, 2))
    names = [e.name for e in prof.events()]
    assert "npuport.module:0" in names and "npuport.module:1" in names
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())  # hooks removed


def test_restore_cache_gives_back_the_past_length_contiguous(tmp_path: Path) -> None:
    config = json.loads((ROOT / "examples" / "configs" / "llama-2-7b.json").read_text())
    config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, vocab_size=100)
    (tmp_path / "tiny.json").write_text(json.dumps(config))
    target = load_target(hf_config=str(tmp_path / "tiny.json"), fake=False)
    sc = parse_scenario("decode:batch=1,past=8")
    inputs = target.make_inputs(sc)
    assert inputs is not None
    cache = next(v for v in inputs[1].values() if hasattr(v, "get_seq_length"))
    with torch.no_grad():
        target.module(*inputs[0], **inputs[1])
    assert cache.get_seq_length() == 9
    _restore_cache(inputs, 8)
    assert cache.get_seq_length() == 8
    assert all(layer.keys.is_contiguous() and layer.values.is_contiguous() for layer in cache.layers)


def test_real_h200_trace_maps_kernels_to_ops_and_modules() -> None:
    """A trace recorded on the lent H200 (scripts/profile_gpu_run.sh): kernels attributed through their runtime
    launch, backward ops mapped to their forward module by sequence number."""
    trace = read_trace(H200_TRACE)
    assert trace.device == "cuda" and trace.kernels > 100
    unattributed = trace.ops.get("(kernels without an aten op)")
    total = sum(s.device_us for s in trace.ops.values())
    assert unattributed is None or unattributed.device_us < 0.02 * total
    mods = {m for m, _ in trace.by_module}
    assert "blocks.0.mlp.fc" in mods
    bwd = [(m, op) for m, op in trace.by_module if op == "aten::mm" and m.startswith("blocks.0.mlp.fc")]
    assert bwd, "the backward GEMMs of fc are attributed to fc"
    mm = trace.ops["aten::mm"]
    assert mm.kernels and all(("gemm" in k.lower() or "sm90" in k or "cutlass" in k.lower() or "kernel" in k.lower())
                              for k in mm.kernels)
    (step,) = trace.steps
    assert 0 < step["kernel_us"] <= step["wall_us"] and step["host_us"] > 0
    art = import_trace(H200_TRACE)
    assert art["format"] == "kineto" and art["modules"] and art["ops"][0]["parent_calls"] is not None


def test_compare_a_run_with_itself_and_with_a_slower_host() -> None:
    base = json.loads((MEASURED / "llama-2-7b" / "decode.profile.json").read_text())
    same = compare(base, base)
    assert all(r["delta_s"] == 0 for r in same["rows"]) and same["matched_by"] == "module and aten op"
    assert same["breakdown"]["delta"]["wall_s"] == 0
    grow = json.loads((ROOT / "docs" / "measured" / "profiles-grow" / "llama-2-7b" / "decode.profile.json").read_text())
    diff = compare(base, grow)
    # the grown cache makes cuDNN attention plan anew every step: host time, found first
    assert diff["breakdown"]["delta"]["host_idle_s"] > 0.02
    assert diff["rows"][0]["op"] == "aten::_cudnn_attention_forward" and diff["rows"][0]["host_delta_s"] > 0.02
    b = breakdown(base)
    assert b["compute_s"] > 0 and b["communication_s"] == 0 and b["wall_s"] >= b["compute_s"]


def test_compare_cli_formats_and_an_ascend_side(tmp_path: Path) -> None:
    base = str(MEASURED / "llama-2-7b" / "decode.profile.json")
    npu = str(ROOT / "tests" / "fixtures" / "profiles" / "ascend" / "rank0_ascend_pt")
    for fmt in ("text", "markdown", "csv", "json", "html"):
        res = CliRunner().invoke(cli, ["profile", "compare", base, npu, "--format", fmt, "--quiet"])
        assert res.exit_code == 0, res.output
        assert "allreduce" in res.output or fmt == "text"
        if fmt == "html":
            assert res.output.startswith("<!DOCTYPE html>") and 'id="tbl-rows"' in res.output
    art = api.profile_import(npu)
    (step,) = art["steps"]
    assert 0 < step["host_s"] <= step["wall_s"] and 0 < step["kernel_s"] <= step["wall_s"]
    res = CliRunner().invoke(cli, ["profile", "compare", base, npu, "--format", "json"])
    data = json.loads(res.stdout)
    assert data["breakdown"]["new"]["communication_s"] > 0.1  # the NPU sample's allreduce (106 ms)
    # a recorded CUDA run against an imported Ascend export: the walls are of one kind (the profiled steps'), the
    # sides' models differ in nothing said; the notes are in the JSON and on stderr
    assert data["breakdown"]["base"]["wall_from"] == data["breakdown"]["new"]["wall_from"] == "profiled steps"
    assert any("only one side has steps timed without the profiler" in n for n in data["notes"])
    assert "note: only one side" in res.stderr
    bad = CliRunner().invoke(cli, ["profile", "compare", base, str(tmp_path / "missing.json")])
    assert bad.exit_code == 2 and bad.output.startswith("error:")


def test_timing_model_units() -> None:
    h200 = get_chip("H200")
    tm = timing_for(h200)
    assert tm.status == "measured" and timing_for(get_chip("A100-SXM-80GB")).status == "assumed"
    assert timing_for(get_chip("Ascend910B")).status == "unverified"
    # a big GEMM is compute-bound at the achieved fraction; a tiny op costs its fixed cost
    flops = 2.0 * 8192 ** 3
    t = call_device_s(tm, h200, "matmul", flops, 3 * 8192 * 8192 * 2, "bfloat16", True)
    assert t == pytest.approx(flops / (h200.peak_flops("bfloat16", True) * tm.rates("matmul").compute) + tm.rates("matmul").fixed_s)
    assert call_device_s(tm, h200, "elementwise", 8, 48, "bfloat16", False) == pytest.approx(tm.rates("elementwise").fixed_s, rel=0.01)
    assert call_device_s(tm, h200, "view", 0, 0, "bfloat16", False) == 0.0
    # a strided input takes the strided rates: slower than the same bytes dense
    dense = call_device_s(tm, h200, "cat", 0, 64e6, "bfloat16", False)
    assert call_device_s(tm, h200, "cat", 0, 64e6, "bfloat16", False, strided=True) > 2 * dense
    assert op_class("_grouped_mm") == "grouped_matmul" and op_class("t", "view") == "view" and op_class("gelu") == "elementwise"
    assert is_strided((4, 8), (1, 4)) and not is_strided((4, 8), (0, 1)) and not is_strided((4, 8), None)
    # operand layout picks the class variant: a broadcast multiply and a widening cast cost more per byte
    plain = call_device_s(tm, h200, "elementwise", 0, 64e6, "bfloat16", False)
    assert call_device_s(tm, h200, "elementwise", 0, 64e6, "bfloat16", False, broadcast=True) > plain
    assert call_device_s(tm, h200, "cast", 0, 64e6, "bfloat16", False, widening=True) > \
        call_device_s(tm, h200, "cast", 0, 64e6, "bfloat16", False)
    assert is_broadcast((0, 1), (4, 8)) and not is_broadcast((8, 1), (4, 8)) and not is_broadcast((0, 1), (1, 8))


def test_simulation_host_bound_device_bound_and_syncs() -> None:
    tm = timing_for(get_chip("H200"))
    h, gap = tm.host.forward_call_s, tm.kernel_gap_s
    assert 0 < gap < 1e-5
    tiny = [Issued(1e-6, False, False, False)] * 100
    st = simulate(tm, tiny)
    assert st.bound == "host" and st.step_s == pytest.approx(100 * h + 1e-6)
    big = [Issued(1e-3, False, False, False)] * 10
    st = simulate(tm, big)  # back to back on the device: each kernel waits the gap after the one before
    assert st.bound == "device" and st.step_s == pytest.approx(h + 10e-3 + 9 * gap)
    # a sync in the middle makes the host wait for the queue: the step is longer than max(host, device)
    synced = big[:5] + [Issued(0.0, False, False, True)] + big[5:]
    st2 = simulate(tm, synced)
    assert st2.syncs == 1 and st2.step_s > st.step_s
    graph = simulate(tm, tiny, "graph")
    assert graph.step_s == pytest.approx(tm.host.graph_launch_s + 100e-6 + 100 * gap)
    assert graph.host_s == tm.host.graph_launch_s
    assert tm.host.scaled(2 * (tm.host.reference_probe_s or 1)).forward_call_s == pytest.approx(2 * h)


def test_a_class_host_extra_is_added_per_call_and_scales_with_the_probe() -> None:
    from dataclasses import replace

    from npuport.cost.timing import HostCosts

    host = HostCosts(20e-6, 30e-6, 0.0, 1e-5, 10e-6, (("matmul", 2.0), ("sort", 5.0)))
    assert host.extra_s("matmul") == pytest.approx(20e-6) and host.extra_s("elementwise") == 0.0
    # a variant without its own entry takes its class's; a model fit without a probe has no extras to scale
    assert host.extra_s("sort_radix") == pytest.approx(50e-6)
    assert replace(host, reference_probe_s=None).extra_s("sort") == 0.0
    assert host.scaled(20e-6).extra_s("matmul") == pytest.approx(40e-6)
    tm = replace(timing_for(get_chip("H200")), host=host)
    plain = simulate(tm, [Issued(0.0, False, False, False)] * 10)
    costly = simulate(tm, [Issued(0.0, False, False, False, host.extra_s("matmul"))] * 10)
    assert costly.host_s == pytest.approx(plain.host_s + 10 * 20e-6)
    # a view costs no host time and gets no extra
    assert simulate(tm, [Issued(0.0, True, False, False, 0.0)] * 10).host_s == 0.0


def test_graph_mode_scenario_grammar_and_step() -> None:
    sc = parse_scenario("decode:past=16,mode=graph")
    assert sc.mode == "graph" and sc.spec().endswith(",mode=graph") and parse_scenario(sc.spec()) == sc
    with pytest.raises(NpuportError):
        parse_scenario("decode:mode=lazy")
    _, eager = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=("decode:past=16",), chip="H200"))
    _, graph = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=("decode:past=16,mode=graph",), chip="H200"))
    e, g = eager["scenarios"][0]["step"], graph["scenarios"][0]["step"]
    assert e["mode"] == "eager" and g["mode"] == "graph" and g["step_s"] < e["step_s"]
    assert g["device_s"] == pytest.approx(e["device_s"])


def test_join_holds_the_estimate_against_the_h200_profile() -> None:
    """The table of docs/profile.md in one assertion per scenario: the join's numbers are the script's numbers."""
    art = json.loads((MEASURED / "llama-2-7b" / "prefill.profile.json").read_text())
    _, data = api.audit(api.ModelSpec(hf_config=str(ROOT / "examples" / "configs" / "llama-2-7b.json"), dtype="bfloat16"),
                        api.AuditOptions(scenarios=(art["scenario"]["spec"],), chip="H200"))
    j = join(data, art, "prefill")
    assert j["shape_note"] is None
    st = j["step"]
    assert st["measured"]["step_s"] == pytest.approx(art["unprofiled"]["median_s"])
    # the host side as measured without the profiler (the step's call returning), against the estimated host time
    assert st["measured"]["host_issue_s"] == pytest.approx(art["unprofiled"]["host_median_s"])
    assert st["host_error"] == pytest.approx(st["estimated"]["host_s"] / st["measured"]["host_issue_s"] - 1.0)
    assert abs(st["device_error"]) < 0.25  # device time per step within 25% (docs/profile.md has the figure)
    assert j["distance"] < 0.2
    mods = {m["module"]: m for m in j["modules"]}
    assert mods["model.layers.*.mlp.down_proj"]["measured_s"] > 0 and mods["model.layers.*.mlp.down_proj"]["estimated_s"] > 0
    attn = {r["op"]: r for r in j["ops"]}["aten::scaled_dot_product_attention"]
    assert attn["measured_s"] > 0  # cuDNN's forward kernel rolled into the audit's attention


def test_raw_h200_trace_fixture_is_small_and_gzip() -> None:
    assert H200_TRACE.stat().st_size < 400_000
    with gzip.open(H200_TRACE, "rt") as fh:
        assert '"traceEvents"' in fh.read(4096)


def test_audit_joins_one_recorded_profile_per_scenario(tmp_path: Path) -> None:
    """Two artifacts recorded on CPU, each joined to the audit scenario it names; text and JSON carry both."""
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", "prefill:batch=1,seq=16",
                                   "--scenario", "decode:batch=1,past=16", "--warmup", "1", "--steps", "1",
                                   "--out-dir", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "audit.json"
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "prefill:batch=1,seq=16", "--scenario",
                                   "decode:batch=1,past=16", "--profile", str(tmp_path / "decode.profile.json"),
                                   "--profile", str(tmp_path / "prefill.profile.json"), "--json-out", str(out),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    joins = {j["scenario"]: j for j in data["profile"]}
    assert set(joins) == {"prefill", "decode"}
    for name, j in joins.items():
        # recorded on this CPU, estimated for the default chip (an NPU): said, and nothing else is
        assert j["shape_note"].startswith("the profile ran on") and ";" not in j["shape_note"]
        assert "the estimate is not held against a run on its own kind of device" in j["shape_note"]
        assert j["step"]["measured"]["step_from"] == "unprofiled median"
        assert j["modules"] and j["ops"] and 0 <= j["distance"] <= 1
        # the source line each measured op was traced to comes from the audit (model.py's own lines)
        assert any(src.startswith(str(GPT)) or "model.py:" in src for r in j["ops"] for src in r["sources"])
    assert "Measured against estimated" in res.output and "decode: step" in res.output
    # a profile of other shapes than the audited scenario says so
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "prefill:batch=1,seq=32", "--profile",
                                   str(tmp_path / "prefill.profile.json"), "--format", "json", "--quiet"])
    assert res.exit_code == 0
    assert "times do not compare" in json.loads(res.output)["profile"][0]["shape_note"]
    # and a profile recorded from another model says that first (its name is in the artifact's `recorded`)
    other = tmp_path / "tiny.py"
    other.write_text((ROOT / "tests" / "fixtures" / "models" / "tiny.py").read_text())
    res = CliRunner().invoke(cli, ["audit", str(other), "--scenario", "prefill:batch=1,seq=16", "--profile",
                                   str(tmp_path / "prefill.profile.json"), "--format", "json", "--quiet"])
    assert res.exit_code == 0, res.output
    note = json.loads(res.output)["profile"][0]["shape_note"]
    assert note.startswith("the profile was recorded from model 'gpt', the audit is of 'tiny': a different model")


def test_record_runs_its_steps_outside_the_model_context(tmp_path: Path) -> None:
    """`torch.device(dev)` as a context (how a real model is built on its device) is a TorchFunctionMode: every torch
    call under it pays a Python hook a user's own run does not. Inputs are made under it; the timed and profiled
    steps must not run under it."""
    import dataclasses

    from torch.overrides import TorchFunctionMode

    from npuport.model.loading import load_target
    from npuport.model.scenarios import parse_scenario
    from npuport.profile.record import record_scenario

    class Counting(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    sc = parse_scenario("train:batch=1,seq=8")
    model = dataclasses.replace(load_target(str(GPT), fake=False, device="cpu"), mode=Counting())
    with model.mode:
        model.make_inputs(sc)
    per_inputs = Counting.calls
    assert per_inputs > 0  # the inputs are made under the context: it counts
    Counting.calls = 0
    record_scenario(model, sc, "cpu", tmp_path / "p", warmup=1, steps=1)
    assert Counting.calls == per_inputs  # the steps (profiled, timed) added none


def test_layout_variants_of_the_timing_classes() -> None:
    from npuport.cost.timing import is_implicit_broadcast, op_variant

    tm = timing_for(get_chip("H200"))
    # broadcast by the op itself: a norm's [S, 1] and [H] operands; not a scalar, not a broadcast over heads
    assert is_implicit_broadcast((2048, 1), (2048, 4096)) and is_implicit_broadcast((4096,), (1, 2048, 4096))
    assert not is_implicit_broadcast((), (2048, 4096)) and not is_implicit_broadcast((2048, 4096), (2048, 4096))
    assert not is_implicit_broadcast((1, 1, 2048, 128), (1, 32, 2048, 128))
    # a weight gradient's grouped GEMM (2-D x 2-D) and indexed stores pick their own measured rates
    assert op_variant("_grouped_mm", "grouped_matmul", (2, 2, 1), None, tm) == "grouped_matmul_wgrad"
    assert op_variant("_grouped_mm", "grouped_matmul", (2, 3, 1), None, tm) == "grouped_matmul"
    assert op_variant("index_put", "scatter", (2, 1, 2), True, tm) == "scatter_accumulate"
    assert op_variant("index_put_", "scatter", (1, 1, 1), False, tm) == "scatter_store"
    assert op_variant("index_add", "scatter", (2, 1, 2), None, tm) == "scatter"
    # a sort along more than 4096 elements is CUDA's radix sort (several kernels), a shorter one the in-place kernel
    assert op_variant("sort", "sort", (1,), None, tm, sort_len=16384) == "sort_radix"
    assert op_variant("sort", "sort", (1,), None, tm, sort_len=4096) == "sort"
    assert op_variant("sort", "sort", (1,), None, tm) == "sort"
    # a chip model without the variant keeps the class
    npu = timing_for(get_chip("Ascend910B"))
    assert op_variant("sort", "sort", (1,), None, npu, sort_len=16384) == "sort"
    assert op_variant("_grouped_mm", "grouped_matmul", (2, 2, 1), None, npu) == "grouped_matmul"


def test_backward_attention_unique_indices_and_expanded_copies_take_their_measured_rates() -> None:
    from npuport.cost.inventory import ReportedCall, timing_class
    from npuport.cost.op_costs import CallCost
    from npuport.cost.timing import call_device_s, op_variant
    from npuport.trace.records import TensorMeta, TensorRef

    chip = get_chip("H200")
    tm = timing_for(chip)
    # attention's backward runs other kernels than its forward (the calibration times both)
    assert op_variant("scaled_dot_product_attention", "attention", (4, 4, 4), None, tm, backward=True) == "attention_backward"
    assert op_variant("scaled_dot_product_attention", "attention", (4, 4, 4), None, tm) == "attention"
    assert op_variant("npu_fusion_attention", "attention", (4, 4, 4), None, timing_for(get_chip("Ascend910B")),
                      backward=True) == "attention"  # no NPU figure for the backward: the class stays

    def store(rows: int, picks: int) -> ReportedCall:
        ins = (TensorMeta(1, (rows, 2048), "bfloat16"), TensorMeta(2, (picks,), "int64"),
               TensorMeta(3, (picks, 2048), "bfloat16"))
        return ReportedCall("aten::index_put", "compute", "backward", "", "", None, None, ins, ins[:1],
                            CallCost(0.0, 0, False, "bfloat16"), 0, args=(), kwargs={"accumulate": True})

    # more indices than rows: some row is hit twice and its adds run serially; as many: an MoE's token permutation
    assert timing_class(store(2048, 16384), tm) == "scatter_accumulate"
    assert timing_class(store(16384, 16384), tm) == "scatter_accumulate_unique"

    def sort(shape: tuple[int, ...], args: tuple = (), kwargs: dict | None = None) -> ReportedCall:
        ins = (TensorMeta(1, shape, "int64"),)
        return ReportedCall("aten::sort", "compute", "forward", "", "", None, None, ins, ins,
                            CallCost(0.0, 8 * math.prod(shape), False, "int64"), 0, args=args, kwargs=kwargs or {})

    # the sorted dim: the last by default, positional after self, or `dim=` of the stable overload
    assert timing_class(sort((16384,)), tm) == "sort_radix" and timing_class(sort((2048, 8)), tm) == "sort"
    assert timing_class(sort((16384, 8), (TensorRef(0), 0)), tm) == "sort_radix"
    assert timing_class(sort((16384, 8), (TensorRef(0),), {"stable": True, "dim": 0}), tm) == "sort_radix"
    def reduce(shape: tuple[int, ...], dim: object) -> ReportedCall:
        ins = (TensorMeta(1, shape, "bfloat16"),)
        return ReportedCall("aten::sum.dim_IntList", "compute", "forward", "", "", None, None, ins, ins,
                            CallCost(0.0, 2 * math.prod(shape), False, "bfloat16"), 0, args=(TensorRef(0), dim))

    # an MoE's sum over its top-k outputs ([T, k, H] over k) reduces an outer dim; a row sum or a sum whose later
    # dims are all of size one reduces the innermost one
    assert timing_class(reduce((2048, 8, 2048), [1]), tm) == "reduction_outer"
    assert timing_class(reduce((2048, 8, 2048), -1), tm) == "reduction"
    assert timing_class(reduce((2048, 8, 1), [1]), tm) == "reduction"
    assert timing_class(reduce((2048, 8, 2048), None), tm) == "reduction"
    radix = call_device_s(tm, chip, "sort_radix", 0.0, 8 * 16384, "int64", False)
    assert radix > 3 * call_device_s(tm, chip, "sort", 0.0, 8 * 8, "int64", False)
    assert tm.rates("scatter_accumulate_unique").memory > tm.rates("scatter_accumulate").memory
    # a copy from an expanded (stride-0) source runs at the broadcast rates, slower than a dense copy
    nb = 2.0 * (2048 * 2048 + 2048 * 8 * 2048)
    dense = call_device_s(tm, chip, "copy", 0.0, nb, "bfloat16", False)
    expanded = call_device_s(tm, chip, "copy", 0.0, nb, "bfloat16", False, broadcast=True)
    assert expanded > 2 * dense


def test_the_join_holds_the_step_also_at_the_recorded_hosts_speed() -> None:
    """A recorded profile carries the host probe of its timed steps: `audit --profile` simulates the step again with
    the host costs scaled to it (npuport.profile.host_speed), and says so in the report."""
    import statistics

    from npuport.profile.host_speed import recorded_probe

    path = MEASURED / "llama-2-7b" / "decode.profile.json"
    art = json.loads(path.read_text())
    _, data = api.audit(api.ModelSpec(hf_config=str(ROOT / "examples" / "configs" / "llama-2-7b.json"), dtype="bfloat16"),
                        api.AuditOptions(scenarios=(art["scenario"]["spec"],), chip="H200", profiles=(str(path),)))
    step = data["profile"][0]["step"]
    at = step["estimated_at_host"]
    probe = statistics.median(art["unprofiled"]["probe_s"])
    assert at["probe_s"] == pytest.approx(probe)
    # host-bound decode: the host side scales with the probe, the device side stays
    ref = at["reference_probe_s"]
    assert at["host_s"] == pytest.approx(step["estimated"]["host_s"] * probe / ref, rel=1e-6)
    assert step["error_at_host"] == pytest.approx(at["step_s"] / step["measured"]["step_s"] - 1.0)
    # the committed run's decode ran on a faster host than the calibration's: the plain estimate is far off (+70%),
    # the one for its host near (+15%)
    assert abs(step["error"]) > 0.3 and abs(step["error_at_host"]) < abs(step["error"]) / 3
    # an imported trace has no probe: nothing to scale to; a profile with only the probe after its steps uses it
    assert recorded_probe({"unprofiled": {"step_s": [0.1]}}) is None
    assert recorded_probe({"host_probe": {"op_s": 1e-5}}) == 1e-5


def test_a_steps_host_speed_is_the_mean_of_the_probes_that_bracket_it() -> None:
    """The host can switch speed during a step: with a probe after each step as well, a step's host speed is the
    mean of its two probes; a profile recorded with the probe before only (the committed runs) keeps that one, and
    a probe list that does not line up with the steps' is not averaged."""
    from npuport.profile.host_speed import recorded_probe, step_probes

    both = {"probe_s": [1e-5, 2e-5, 1e-5], "probe_after_s": [3e-5, 2e-5, 1e-5]}
    assert step_probes(both) == pytest.approx([2e-5, 2e-5, 1e-5])
    assert recorded_probe({"unprofiled": both}) == pytest.approx(2e-5)
    assert step_probes({"probe_s": [1e-5, 2e-5]}) == [1e-5, 2e-5]
    assert step_probes({"probe_s": [1e-5, 2e-5], "probe_after_s": [3e-5]}) == [1e-5, 2e-5]
    assert step_probes({"probe_s": [1e-5, 0.0]}) is None and step_probes({}) is None


def test_compile_mode_records_the_compiled_step_with_its_graph_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import npuport.profile.record as rec

    # aot_eager: dynamo and AOTAutograd as torch.compile runs them, without Inductor's C++ build on a CPU machine
    monkeypatch.setattr(rec, "COMPILE_BACKEND", "aot_eager")
    sc = parse_scenario("train:batch=1,seq=16,mode=compile")
    assert sc.mode == "compile" and parse_scenario(sc.spec()) == sc
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", sc.spec(), "--scenario",
                                   "prefill:batch=1,seq=16,mode=compile", "--warmup", "1", "--steps", "1",
                                   "--timed-steps", "3", "--out-dir", str(tmp_path / "p"), "--quiet"])
    assert res.exit_code == 0, res.output
    for name in ("train", "prefill"):
        art = load_artifact(tmp_path / "p" / f"{name}.profile.json")
        got = art["recorded"]["compile"]
        assert art["scenario"]["mode"] == "compile" and got["backend"] == "aot_eager"
        # the GPT example compiles whole: one graph, no break, and no recompile while the steps were timed
        assert got["graphs"] == 1 and got["graph_breaks"] == 0 and got["graphs_after_steps"] == 1
        assert len(art["unprofiled"]["step_s"]) == 3
        # the profiled steps ran the compiled region (its profiler range), not the eager module
        assert any(r["op"].startswith("Torch-Compiled Region") for r in art["ops"])


def test_a_compiled_or_replayed_profile_joins_by_its_kernels_not_op_by_op() -> None:
    prof = ROOT / "docs" / "measured" / "profiles-compile" / "llama-2-7b" / "decode.profile.json"
    res = CliRunner().invoke(cli, ["audit", "--hf", str(ROOT / "examples" / "configs" / "llama-2-7b.json"), "--chip",
                                   "H200", "--dtype", "bfloat16", "--scenario", "decode:batch=1,past=2048,mode=compile",
                                   "--profile", str(prof), "--format", "json", "--quiet"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    (j,) = data["profile"]
    comp = j["compiled"]
    # the recorded step: 225 Triton kernels and 257 library ones (224 GEMMs + lm_head, 32 attention) per step
    assert (comp["generated"], comp["library"]) == (225, 257)
    assert comp["estimated_kernels"] == data["scenarios"][0]["step"]["kernels"]
    assert j["distance"] is None
    text = CliRunner().invoke(cli, ["audit", "--hf", str(ROOT / "examples" / "configs" / "llama-2-7b.json"), "--chip",
                                    "H200", "--dtype", "bfloat16", "--scenario", "decode:batch=1,past=2048,mode=compile",
                                    "--profile", str(prof)]).output
    assert "compiled step, per step: 225 generated kernels" in text and "Per op (decode)" not in text
    # an eager profile joins op by op as before, whatever the audit's mode
    eager = join(data, load_artifact(MEASURED / "llama-2-7b" / "decode.profile.json"), "decode")
    assert eager["compiled"] is None and eager["captured"] is None and 0 <= eager["distance"] <= 1
    # a CUDA graph replay: its kernels per step (no aten op around them), no distance
    replay = load_artifact(ROOT / "docs" / "measured" / "profiles-graph" / "llama-2-7b" / "decode.profile.json")
    graph = join(data, replay, "decode")
    assert graph["distance"] is None and graph["compiled"] is None
    assert graph["captured"]["kernels"] == round(replay["totals"]["kernels"] / replay["recorded"]["steps"]) > 1000


def test_reduce_overhead_records_the_compiled_step_and_counts_graphs_torch_did_not_replay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mode=reduce-overhead: torch.compile(mode="reduce-overhead"), each step begun with cudagraph_mark_step_begin.
    On this CPU no CUDA graph can be made, so torch skips it (Inductor counts the skip): the artifact says so, and the
    join treats the step as compile mode's (its kernels launched one by one) with a warning."""
    import npuport.profile.record as rec

    monkeypatch.setattr(rec, "COMPILE_BACKEND", "inductor")  # the mode is Inductor's; it builds on this CPU
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", "prefill:batch=1,seq=16,mode=reduce-overhead",
                                   "--warmup", "1", "--steps", "1", "--timed-steps", "2", "--out-dir", str(tmp_path / "p"),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    art = load_artifact(tmp_path / "p" / "prefill.profile.json")
    got = art["recorded"]["compile"]
    assert art["scenario"]["mode"] == "reduce-overhead" and got["mode"] == "reduce-overhead"
    assert got["graphs"] == 1 and got["cudagraph_skips"] >= 1 and got["cudagraph_skips_after_steps"] >= 1
    _, data = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(
        chip="H200", scenarios=("prefill:batch=1,seq=16,mode=reduce-overhead",)))
    j = join(data, art, "prefill")
    assert j["compiled"] is not None and j["captured"] is None  # it ran as compile mode does
    assert "could not replay" in j["shape_note"]
    # and the estimate for the recorded host is compile mode's too: a host cost per kernel, not per graph call
    _, held = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(
        chip="H200", scenarios=("prefill:batch=1,seq=16,mode=reduce-overhead",),
        profiles=(str(tmp_path / "p" / "prefill.profile.json"),)))
    at = held["profile"][0]["step"]["estimated_at_host"]
    assert at["host_s"] > 3 * held["scenarios"][0]["step"]["host_s"] * at["probe_s"] / at["reference_probe_s"]
    # replayed (no skip): its kernels per step against the compiled step's estimate, as a graph replay
    replayed = json.loads(json.dumps(art))
    replayed["recorded"]["compile"]["cudagraph_skips_after_steps"] = 0
    replayed["device"] = "cuda"  # as a replay is recorded (this CPU run stands in for it)
    j = join(data, replayed, "prefill")
    assert j["captured"]["estimated_kernels"] == data["scenarios"][0]["step"]["kernels"] and j["compiled"] is None
    assert j["shape_note"] is None and j["distance"] is None  # the H200 estimate of a run on CUDA: nothing to say
    # an eager audit of a reduce-overhead profile: the modes differ, said
    _, eager = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(chip="H200", scenarios=("prefill:batch=1,seq=16",)))
    assert "ran in reduce-overhead mode, the audit's prefill is timed in eager mode" in join(eager, replayed, "prefill")["shape_note"]


BOOM = '''
import torch


class Boom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        if x.shape[1] == 3:  # the decode scenario's shape: fails while recording it
            raise RuntimeError("kaboom")
        return self.fc(x)


def build_model():
    return Boom()


def example_inputs(scenario):
    return (torch.randn(scenario.batch, 3 if scenario.kind == "decode" else scenario.seq, 16),)
'''


def test_a_failed_scenario_keeps_the_finished_ones_whole_and_leaves_nothing_of_its_own(tmp_path: Path) -> None:
    model = tmp_path / "boom.py"
    model.write_text(BOOM)
    out = tmp_path / "p"
    res = CliRunner().invoke(cli, ["profile", "record", str(model), "--scenario", "prefill:batch=1,seq=4",
                                   "--scenario", "decode:batch=1,past=4", "--warmup", "1", "--steps", "1",
                                   "--timed-steps", "2", "--out-dir", str(out), "--quiet"])
    assert res.exit_code == 2 and "kaboom" in res.stderr, res.output
    # prefill finished before decode failed: its artifact and trace are written, side by side; nothing of decode
    assert sorted(p.name for p in out.iterdir()) == ["prefill.profile.json", "prefill.trace.json.gz"]
    assert load_artifact(out / "prefill.profile.json")["scenario"]["kind"] == "prefill"
    # a run that records nothing leaves no folder it made
    only = tmp_path / "q"
    res = CliRunner().invoke(cli, ["profile", "record", str(model), "--scenario", "decode:batch=1,past=4",
                                   "--warmup", "1", "--steps", "1", "--out-dir", str(only), "--quiet"])
    assert res.exit_code == 2 and not only.exists()


def test_the_record_summary_gives_the_step_compare_and_the_join_read(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["profile", "record", str(GPT), "--scenario", "prefill:batch=1,seq=16",
                                   "--warmup", "1", "--steps", "1", "--timed-steps", "3", "--out-dir", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    art = load_artifact(tmp_path / "p" / "prefill.profile.json")
    from npuport.render.fmt import fmt_time
    assert f"step {fmt_time(art['unprofiled']['median_s'])} wall (median of 3 unprofiled)" in res.stderr
