"""torch.compile's default mode as the step model sees it (npuport.cost.fused): which calls become one generated
kernel, the bytes that kernel moves, and the compiled step's time against eager."""

from __future__ import annotations

import json

import pytest

from npuport.cost.fused import FusedRun, fused_runs
from npuport.cost.inventory import ReportedCall
from npuport.cost.op_costs import CallCost
from npuport.trace.records import TensorMeta, TensorRef

N = 1024 * 1024  # elements of one [1024, 1024] activation


def t(id_: int, shape: tuple[int, ...] = (1024, 1024), dtype: str = "bfloat16", base: int | None = None) -> TensorMeta:
    return TensorMeta(id_, shape, dtype, base=base)


def call(op: str, ins: tuple[TensorMeta, ...], outs: tuple[TensorMeta, ...], kind: str = "compute",
         phase: str = "forward") -> ReportedCall:
    nbytes = sum(x.numel * (2 if x.dtype == "bfloat16" else 4) for x in ins + outs)
    return ReportedCall(op, kind, phase, "", "", None, None, ins, outs, CallCost(0.0, nbytes, False, "bfloat16"), 0)


def cls(calls: list[ReportedCall]) -> list[str]:
    table = {"aten::mm": "matmul", "aten::embedding": "gather", "aten::mean.dim": "reduction", "aten::nonzero": "elementwise"}
    return ["view" if c.kind == "view" else table.get(c.op, "elementwise") for c in calls]


def runs(items: list[FusedRun | int]) -> list[FusedRun]:
    return [x for x in items if isinstance(x, FusedRun)]


def test_a_norm_chain_is_one_kernel_reading_its_input_once_and_writing_what_is_read_later() -> None:
    # x (bf16) -> float32 -> mean -> rsqrt -> x * r -> bf16 -> mm: the float32 copies never reach memory
    calls = [call("aten::_to_copy", (t(1),), (t(2, dtype="float32"),)),
             call("aten::mean.dim", (t(2, dtype="float32"),), (t(3, (1024, 1), "float32"),)),
             call("aten::rsqrt", (t(3, (1024, 1), "float32"),), (t(4, (1024, 1), "float32"),)),
             call("aten::mul.Tensor", (t(2, dtype="float32"), t(4, (1024, 1), "float32")), (t(5, dtype="float32"),)),
             call("aten::_to_copy", (t(5, dtype="float32"),), (t(6),)),
             call("aten::mm", (t(6), t(7)), (t(8),))]
    items = fused_runs(calls, cls(calls))
    assert items[-1] == 5  # the GEMM keeps its own kernel
    (run,) = runs(items)
    assert run.members == (0, 1, 2, 3, 4)
    assert run.bytes == 2 * N + 2 * N  # reads x once (bf16), writes the bf16 result the GEMM reads
    eager = sum(c.cost.bytes for c in calls[:5])
    assert run.bytes < eager / 4


def test_a_run_joins_the_next_run_that_reads_it_across_a_gemm_that_does_not() -> None:
    # SwiGLU: silu(gate) before the up projection's GEMM, the multiply after it
    calls = [call("aten::mm", (t(1), t(2)), (t(3),)),
             call("aten::silu", (t(3),), (t(4),)),
             call("aten::mm", (t(1), t(5)), (t(6),)),
             call("aten::mul.Tensor", (t(4), t(6)), (t(7),)),
             call("aten::mm", (t(7), t(8)), (t(9),))]
    items = fused_runs(calls, cls(calls))
    assert [x if isinstance(x, int) else x.members for x in items] == [0, 2, (1, 3), 4]
    (run,) = runs(items)
    assert run.bytes == 3 * 2 * N  # gate and up read, the product written; silu's output stays in registers


def test_a_run_does_not_join_when_a_gemm_between_reads_its_output() -> None:
    calls = [call("aten::silu", (t(1),), (t(2),)),
             call("aten::mm", (t(2), t(3)), (t(4),)),
             call("aten::mul.Tensor", (t(2), t(4)), (t(5),))]
    items = fused_runs(calls, cls(calls))
    assert [x if isinstance(x, int) else x.members for x in items] == [(0,), 1, (2,)]


def test_a_sync_and_a_phase_change_end_a_run_and_views_alone_launch_nothing() -> None:
    calls = [call("aten::add.Tensor", (t(1), t(2)), (t(3),)),
             call("aten::nonzero", (t(3),), (t(4, (10, 2), "int64"),)),
             call("aten::mul.Tensor", (t(3), t(3)), (t(5),)),
             call("aten::mul.Tensor", (t(5), t(5)), (t(6),), phase="backward"),
             call("aten::t", (t(7),), (t(8, base=7),), kind="view")]
    items = fused_runs(calls, cls(calls))
    assert [x if isinstance(x, int) else x.members for x in items] == [(0,), 1, (2,), (3,)]
    assert runs(items)[-1].backward


def test_a_gather_reads_the_rows_it_takes_not_the_whole_table() -> None:
    table = t(1, (32000, 4096))
    calls = [call("aten::embedding", (table, t(2, (1, 8), "int64")), (t(3, (1, 8, 4096)),))]
    (run,) = runs(fused_runs(calls, cls(calls)))
    assert run.bytes == 2 * (8 * 4096 * 2) + 8 * 8  # rows read and written, the indices read


@pytest.fixture(scope="module")
def gpt_audit() -> dict:
    from npuport import api

    _, data = api.audit(api.ModelSpec(model="examples/gpt/model.py"),
                        api.AuditOptions(chip="H200", scenarios=("train:batch=2,seq=64,mode=compile",
                                                                 "prefill:batch=1,seq=64,mode=compile",
                                                                 "decode:batch=1,past=64")))
    return {s["name"]: s for s in data["scenarios"]}


def test_the_compiled_step_moves_less_and_issues_faster_than_eager(gpt_audit: dict) -> None:
    from npuport import api

    _, eager = api.audit(api.ModelSpec(model="examples/gpt/model.py"),
                         api.AuditOptions(chip="H200", scenarios=("train:batch=2,seq=64", "prefill:batch=1,seq=64")))
    plain = {s["name"]: s for s in eager["scenarios"]}
    for name in ("train", "prefill"):
        step = gpt_audit[name]["step"]
        assert step["mode"] == "compile"
        # GPT's layers are few ops already (layer_norm, addmm, gelu); the compiled step still moves less and its
        # host issues less, though the bias each attention writes out is one more kernel per layer
        assert 0 < step["kernels"] < plain[name]["compute_calls"] + plain[name]["compute_calls"] // 4
        assert step["host_s"] < plain[name]["step"]["host_s"]
        assert step["step_s"] < plain[name]["step"]["step_s"]
    # on the device the training step's fused pointwise work takes less than eager's; what a compiled step adds is
    # in its attention (the bias each attention writes out, a causal attention run as a masked one: about 3x the
    # causal kernel's time, timing.yaml compile_masked_attention), which at GPT's 64 tokens outweighs the fusion
    comp = gpt_audit["train"]["step"]
    comp_attention = sum(v["device_s"] for k, v in comp["timing_classes"].items() if k.startswith("attention"))
    eager_attention = sum(op["scenarios"]["train"]["estimated_time_s"] for op in eager["ops"]
                          if "attention" in op["op"] and "train" in op["scenarios"])
    assert comp["device_s"] - comp_attention < plain["train"]["step"]["device_s"] - eager_attention
    assert comp_attention > 2 * eager_attention
    assert gpt_audit["train"]["step"]["graph_calls"] == 2  # the forward's graph and the backward's
    assert gpt_audit["prefill"]["step"]["graph_calls"] == 1
    assert "kernels" not in gpt_audit["decode"]["step"]  # an eager step's JSON is as before


def test_the_report_shows_a_compiled_steps_kernels_and_its_host_cost_source(gpt_audit: dict) -> None:
    from click.testing import CliRunner

    from npuport.cli.main import cli

    res = CliRunner().invoke(cli, ["audit", "examples/gpt/model.py", "--chip", "H200", "--scenario",
                                   "prefill:batch=1,seq=64,mode=compile", "--wide"])
    assert res.exit_code == 0, res.output
    kernels = gpt_audit["prefill"]["step"]["kernels"]
    assert f"compiled: {kernels} kernels" in res.output
    assert "step time (compile)" in res.output
    res = CliRunner().invoke(cli, ["audit", "examples/gpt/model.py", "--chip", "H200", "--scenario",
                                   "prefill:batch=1,seq=64,mode=compile", "--format", "json", "--quiet"])
    from npuport.cost.roofline import get_chip
    from npuport.cost.timing import timing_for

    source = timing_for(get_chip("H200")).host.compile_source
    assert source and any("compile mode:" in a and source in a for a in json.loads(res.output)["assumptions"])


def test_a_compiled_attention_writes_its_bias_and_repeats_grouped_kv_where_the_chip_model_says() -> None:
    from npuport.cost.fused import attention_inputs, kernel_count

    q, k, v = t(1, (1, 32, 2048, 64)), t(2, (1, 4, 2048, 64)), t(3, (1, 4, 2048, 64))
    sdpa = call("aten::scaled_dot_product_attention", (q, k, v), (t(4, (1, 32, 2048, 64)),))
    assert attention_inputs(sdpa, "attention", frozenset()) == []  # a chip model that lists none
    mask, kk, vv = attention_inputs(sdpa, "attention", frozenset({"mask", "gqa_kv"}))
    assert mask.bytes == 2048 * 2048 * 2  # [B, 1, Q, K] in the query's dtype
    assert len(attention_inputs(sdpa, "attention", frozenset({"mask", "gqa_kv"}), mask=False)) == 2
    assert kk.bytes == vv.bytes == (4 + 32) * 2048 * 64 * 2  # read at 4 heads, written at 32
    same_heads = call("aten::scaled_dot_product_attention", (q, q, q), (t(4, (1, 32, 2048, 64)),))
    assert len(attention_inputs(same_heads, "attention", frozenset({"mask", "gqa_kv"}))) == 1
    backward = call("aten::scaled_dot_product_attention", (q, k, v), (q,), phase="backward")
    assert attention_inputs(backward, "attention", frozenset({"mask", "gqa_kv"})) == []
    # kernels of a run, by what it writes out: a residual add and its norm share one, two rotary outputs do not
    norm = [call("aten::add.Tensor", (t(10), t(11)), (t(12),)), call("aten::mean.dim", (t(12),), (t(13, (1024, 1)),)),
            call("aten::mul.Tensor", (t(12), t(13, (1024, 1))), (t(14),))]
    assert kernel_count(norm, [0, 1, 2], ["elementwise", "reduction", "elementwise"], {12, 14}) == 1
    rope = [call("aten::mul.Tensor", (t(20), t(21)), (t(22),)), call("aten::mul.Tensor", (t(23), t(21)), (t(24),))]
    assert kernel_count(rope, [0, 1], ["elementwise", "elementwise"], {22, 24}) == 2


def test_reduce_overhead_is_the_compiled_kernels_with_a_host_cost_per_graph_not_per_kernel() -> None:
    """torch.compile(mode="reduce-overhead"): the compiled step's kernels (the same plan as compile mode) replayed as
    device graphs: its device time is compile mode's, its host time a graph call plus one replay launch per graph."""
    from click.testing import CliRunner

    from npuport import api
    from npuport.cli.main import cli
    from npuport.cost.roofline import get_chip
    from npuport.cost.timing import timing_for

    specs = ("train:batch=2,seq=64", "prefill:batch=1,seq=64", "decode:batch=1,past=64")
    steps, memory, notes = {}, {}, {}
    for mode in ("compile", "reduce-overhead"):
        _, data = api.audit(api.ModelSpec(model="examples/gpt/model.py"),
                            api.AuditOptions(chip="H200", scenarios=tuple(f"{s},mode={mode}" for s in specs)))
        steps[mode] = {s["name"]: s["step"] for s in data["scenarios"]}
        memory[mode] = {s["name"]: s["memory"] for s in data["scenarios"]}
        notes[mode] = data["notes"]
    # the graphs keep their own copy of the step's inputs: a decode step's cache is held twice
    ro, comp = memory["reduce-overhead"]["decode"], memory["compile"]["decode"]
    assert ro["graph_inputs_bytes"] == ro["inputs_bytes"] > 0 and "graph_inputs_bytes" not in comp
    assert ro["peak_bytes"] == comp["peak_bytes"] + ro["inputs_bytes"]
    assert any("decode in reduce-overhead mode holds its inputs twice" in n for n in notes["reduce-overhead"])
    # a compiled training step saves fewer activations than the eager trace shows: said, not modelled
    for mode in ("compile", "reduce-overhead"):
        assert sum("train under torch.compile is measured on its eager ops" in n for n in notes[mode]) == 1
        assert not any("prefill under torch.compile" in n or "decode under torch.compile" in n for n in notes[mode])
    host = timing_for(get_chip("H200")).host
    assert host.graph_input_s  # measured (mappings/timing.yaml), else the copies would cost the host nothing
    per_graph = float(host.compile_graph_s or 0) + host.graph_launch_s
    for name in ("train", "prefill", "decode"):
        comp, ro = steps["compile"][name], steps["reduce-overhead"][name]
        # each replay first copies the step's inputs that are not parameters into its graph's buffers, one copy per
        # tensor object: the token ids, and in decode the example's cache (one K object shared by its 12 layers and
        # a V clone per layer: 13 tensors)
        copies = ro["kernels"] - comp["kernels"]
        assert ro["mode"] == "reduce-overhead" and copies == (1 if name != "decode" else 14)
        assert ro["device_s"] > comp["device_s"] and ro["graph_calls"] == comp["graph_calls"]
        assert ro["device_s"] - comp["device_s"] < 0.3 * comp["device_s"]
        # nothing per kernel; per copied input its own host cost
        assert ro["host_s"] == pytest.approx(per_graph * ro["graph_calls"] + copies * float(host.graph_input_s or 0))
        assert ro["host_s"] < comp["host_s"] and ro["step_s"] <= comp["step_s"]
    assert steps["reduce-overhead"]["train"]["graph_calls"] == 2  # the forward's graph and the backward's
    text = CliRunner().invoke(cli, ["audit", "examples/gpt/model.py", "--chip", "H200", "--scenario", "decode:batch=1,past=64,mode=reduce-overhead",
         "--wide"]).output
    assert "step time (reduce-overhead)" in text and "compiled:" in text and "reduce-overhead mode: the calls between two library kernels" in text


def test_a_causal_attention_with_its_bias_written_out_costs_the_measured_masked_factor() -> None:
    """timing.yaml compile_masked_attention: cuDNN's masked kernel took about 3.1x the causal estimate forward and
    2.5x backward (TinyLlama's compiled steps on the H200); a chip whose model measured none keeps 2 (the masked half
    no longer skipped)."""
    from dataclasses import replace

    from npuport.api import audit_model
    from npuport.cost.inventory import step_time
    from npuport.cost.roofline import get_chip
    from npuport.cost.timing import timing_for

    report, _ = audit_model(hf_config="examples/configs/tinyllama-1.1b.json",
                            scenarios=["train:batch=1,seq=256,mode=compile"], chip="H200")
    calls = report.inventory.calls["train"]
    chip = get_chip("H200")
    tm = timing_for(chip)
    assert tm.compile_masked_attention == (3.1, 2.5)
    assert timing_for(get_chip("Ascend910B")).compile_masked_attention == (2.0, 2.0)
    measured = dict((c, t) for c, _, t in step_time(calls, chip, "compile").classes)
    doubled = dict((c, t) for c, _, t in step_time(calls, chip, "compile",
                                                   model=replace(tm, compile_masked_attention=(2.0, 2.0))).classes)
    causal = dict((c, t) for c, _, t in step_time(calls, chip, "compile",
                                                  model=replace(tm, compile_masked_attention=(1.0, 1.0))).classes)
    assert measured["attention"] == pytest.approx(3.1 * causal["attention"])
    assert measured["attention_backward"] == pytest.approx(2.5 * causal["attention_backward"])
    assert doubled["attention"] == pytest.approx(2 * causal["attention"])
    assert measured["matmul"] == doubled["matmul"]  # nothing else moves


def _scatter(op: str, dtype: str = "bfloat16", index_dtype: str = "int64", accumulate: bool = True,
             kwargs: dict | None = None, args: tuple = ()) -> ReportedCall:
    c = call(op, (t(1, (4096, 64), dtype), t(2, (8192,), index_dtype), t(3, (8192, 64), dtype)), (t(4, (4096, 64), dtype),))
    c.args = args or (TensorRef(0), [TensorRef(1)], TensorRef(2), accumulate)
    c.kwargs = kwargs or {}
    return c


def test_inductor_generates_index_put_and_scatter_kernels_except_where_it_falls_back_to_aten() -> None:
    from npuport.cost.fused import fusible, lowered_scatter

    # an expert dispatch's backward: index_put with accumulate into bf16 (atomic adds: a generated kernel on sm90+)
    assert lowered_scatter(_scatter("aten::index_put")) and fusible(_scatter("aten::index_put"), "scatter_accumulate")
    assert lowered_scatter(_scatter("aten::index_put_", accumulate=False))
    # a boolean mask as the index, and an accumulation into int64: ATen's kernel (torch/_inductor/lowering.py)
    assert not lowered_scatter(_scatter("aten::index_put", index_dtype="bool"))
    assert not lowered_scatter(_scatter("aten::index_put", dtype="int64"))
    assert lowered_scatter(_scatter("aten::index_put", dtype="int64", accumulate=False))
    # scatter: plain or add / sum lowered; other reductions fall back
    assert lowered_scatter(_scatter("aten::scatter.src", args=(None, 0, None, None)))
    assert lowered_scatter(_scatter("aten::scatter_add", args=(None, 0, None, None)))
    assert not lowered_scatter(_scatter("aten::scatter_add", dtype="int64", args=(None, 0, None, None)))
    assert not lowered_scatter(_scatter("aten::scatter_reduce.two", args=(None, 0, None, None, "amax")))
    assert lowered_scatter(_scatter("aten::scatter_reduce.two", args=(None, 0, None, None, "sum")))
    assert not lowered_scatter(_scatter("aten::scatter.reduce", args=(None, 0, None, None), kwargs={"reduce": "multiply"}))
    # a tensor source of int64 or bool goes to ATen even without a reduction (use_scatter_fallback): top-p's mask
    assert not lowered_scatter(_scatter("aten::scatter.src", dtype="bool", args=(None, 1, None, TensorRef(2))))
    assert lowered_scatter(_scatter("aten::scatter.value", dtype="bool", args=(None, 1, None, True)))
    # index_copy is decomposed into an index_put (a static cache's write): generated; index_add too, but not in bf16
    assert lowered_scatter(_scatter("aten::index_copy_"))
    assert not fusible(_scatter("aten::index_add_"), "scatter_accumulate")  # bf16: ATen's index_add kernel
    assert fusible(_scatter("aten::index_add_", dtype="float32"), "scatter_accumulate")


def test_a_masked_index_put_is_aten_unless_it_is_one_mask_written_with_one_value() -> None:
    from npuport.cost.fused import lowered_scatter

    def put(values: tuple[int, ...], n_index: int = 1) -> ReportedCall:
        ins = (t(1, (4, 8), "float32"), t(2, (4, 8), "bool"), t(3, values, "float32"))
        c = call("aten::index_put_", ins, (t(1, (4, 8), "float32"),))
        c.args = (TensorRef(0), [TensorRef(1)] + [None] * (n_index - 1), TensorRef(2), False)
        return c

    assert lowered_scatter(put(()))  # y[mask] = 0: a where, fused (cpp_fused_add_index_put_lift_fresh_mul_0 on the CPU)
    assert not lowered_scatter(put((5,)))  # y[mask] = values: nonzero, then ATen's index_put
    assert not lowered_scatter(put((), n_index=2))


def test_a_short_sort_is_a_generated_kernel_a_long_one_and_histc_are_aten() -> None:
    from npuport.cost.fused import SORT_GENERATED_MAX, fusible

    def sort(n: int, dim: int = -1) -> ReportedCall:
        c = call("aten::sort", (t(1, (4, n)),), (t(2, (4, n)), t(3, (4, n), "int64")))
        c.args = (None, dim)
        return c

    assert fusible(sort(8), "sort")  # OLMoE's decode: the 8 chosen experts' ids, inside a triton_per_ kernel
    assert fusible(sort(SORT_GENERATED_MAX), "sort")
    assert not fusible(sort(SORT_GENERATED_MAX + 1), "sort")
    assert not fusible(sort(16384), "sort_radix")  # its prefill: 16,384 ids, cub's radix sort
    assert fusible(sort(16384, dim=0), "sort")  # along the short dim
    histc = call("aten::histc", (t(1, (16384,), "float32"),), (t(2, (64,), "float32"),))
    assert not fusible(histc, "reduction")  # make_fallback(aten.histc): kernelHistogram1D, measured
    assert fusible(call("aten::mean.dim", (t(1),), (t(2, (1024, 1)),)), "reduction")


def test_an_moe_backward_scatter_joins_the_generated_kernel_around_it() -> None:
    # new_zeros -> index_put(accumulate) -> mul: one generated run, no extern call between
    zeros = call("aten::new_zeros", (t(1, (8192, 64)),), (t(5, (4096, 64)),))
    put = call("aten::index_put", (t(5, (4096, 64)), t(2, (8192,), "int64"), t(3, (8192, 64))), (t(6, (4096, 64)),))
    put.args = (None, [None], None, True)
    mul = call("aten::mul.Tensor", (t(6, (4096, 64)), t(7, (4096, 64))), (t(8, (4096, 64)),))
    calls = [zeros, put, mul]
    items = fused_runs(calls, ["copy", "scatter_accumulate", "elementwise"])
    assert [x.members for x in runs(items)] == [(0, 1, 2)] and not any(isinstance(x, int) for x in items)
