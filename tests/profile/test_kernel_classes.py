"""Kernels by the kind of work their names say they do (mappings/kernel_classes.yaml, npuport.profile.kernel_classes):
real kernel names from profiles recorded on lent GPUs and a real Ascend profiler export, the artifact's sums, the
audit's estimated classes for graph / compiled / reduce-overhead steps and the join of the two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport.cli.main import cli
from npuport.cost.roofline import get_chip
from npuport.cost.timing import _data as timing_data
from npuport.profile import kernel_classes as kc
from npuport.profile.artifact import import_trace
from npuport.profile.join import join
from npuport.profile.kineto import read_trace

ROOT = Path(__file__).resolve().parents[2]
H200_TRACE = ROOT / "tests" / "fixtures" / "profiles" / "gpt_train_h200.trace.json.gz"
ASCEND = ROOT / "tests" / "fixtures" / "profiles" / "ascend" / "rank0_ascend_pt"
GPT = ROOT / "examples" / "gpt" / "model.py"
RO_H100 = ROOT / "docs" / "measured" / "profiles-reduce-overhead-h100"


@pytest.mark.parametrize("name, cls", [
    # names as lent H200 / H100 GPUs recorded them (docs/measured, torch 2.11)
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", "matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(...)", "matmul"),
    ("void at::cuda::detail::prepare_grouped_gemm_data<...>", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0", "attention"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<...>", "attention"),
    # Inductor names a kernel after every op it fuses: attention in the name, still a generated kernel
    ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_arange_cat_cos_expand_le_", "generated"),
    ("triton_red_fused__to_copy__unsafe_view_add_mean_mul_pow_rsqrt_10", "generated"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<...>", "cat"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)", "copy"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("Memset (Device)", "memset"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>", "elementwise"),
    ("void at::native::sbtopk::gatherTopK<...>", "index"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    # a reduce-overhead prefill's input copy: _foreach_copy_'s kernel (estimated as a copy)
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<long, 2, 1, 1>, at::native::Copy<long, long> >",
     "copy"),
    # index_copy_ (a static KV cache's update) is an indexed store, not a copy
    ("void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::native::OpaqueType<2> >", "index"),
    # where the audit's timing classes put their ops: fill_ / masked_fill_ are copies, histc / cumsum / an
    # embedding's backward reductions, a sort's helper kernels the sort's
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >", "copy"),
    ("void at::native::(anonymous namespace)::fill_reverse_indices_kernel<long>(long*, int, IntDivider<unsigned int>)", "index"),
    ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortHistogramKernel<...>", "index"),
    ("void at::cuda::kernelHistogram1D<...>", "reduction"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>", "reduction"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>", "reduction"),
    ("void at::native::triu_tril_kernel<float, int, false, 4, true>", "elementwise"),  # timing.yaml: triu / tril
    # index_add_: an indexed store, whatever its template arguments say (ReduceAdd)
    ("void at::native::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true, "
     "at::native::(anonymous namespace)::ReduceAdd>(cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)", "index"),
    # _foreach_norm (clip_grad_norm_) is timed as elementwise
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, 1, float, float>, float*, int>",
     "elementwise"),
    # nonzero / masked_select's select sweep is indexing, cumsum's scan a reduction
    ("void at_cuda_detail::cub::detail::select::DeviceSelectSweepKernel<at_cuda_detail::cub::detail::ScanTileState<int, true> >",
     "index"),
    ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<...>", "reduction"),
    # embedding_dense_backward's sorted path
    ("void at::native::(anonymous namespace)::sum_and_scatter<float, float, long>(long const*, float*)", "reduction"),
    # Inductor's max-autotune templates are the work they template
    ("triton_tem_fused_mm_0", "matmul"),
    ("triton_tem_fused_flex_attention_0", "attention"),
])
def test_cuda_names(name: str, cls: str) -> None:
    assert kc.classify(name, "cuda") == cls


@pytest.mark.parametrize("name, cls", [
    # the real Ascend profiler export's kernel_details.csv (tests/fixtures/profiles/ascend)
    ("aclnnMm_MatMulCommon_MatMulV2", "matmul"),
    ("aclnnMm_MatMulCommon_MemSet", "memset"),  # its own launch, named after its op
    ("aclnnInplaceCopy_TensorMoveAiCore_TensorMove", "copy"),
    ("trans_TransData_12", "copy"),
    ("aclnnMuls_MulAiCore_Mul", "elementwise"),
    ("ReduceSum7", "reduction"),
    ("aclnnTopk_TopkV2_TopKV2", "index"),
    ("hcom_allReduce_", "communication"),
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "attention"),
    ("aclnnEqTensor_BroadcastToAiCore_BroadcastTo", "elementwise"),  # not a Cast
    ("aclnnCast_CastAiCore_Cast", "copy"),
    ("aclnnRotaryPositionEmbedding_RotaryPositionEmbedding_RotaryPositionEmbedding", "elementwise"),  # not an embedding
    ("aclnnEmbedding_GatherV2_GatherV2", "index"),
    ("aclnnEmbeddingDenseBackward_EmbeddingDenseGrad_EmbeddingDenseGrad", "reduction"),
    ("aclnnInplaceFillScalar_FillAiCore_Fill", "copy"),
    # classed by the kernel, not by the API that launched it (aclnn<Api>_<KernelType>_<Op>)
    ("aclnnTopk_CastAiCore_Cast", "copy"),
    ("aclnnConvTranspose2d_ConvTranspose2D_ConvTranspose2D", "matmul"),
    ("AtomicAddrClean", "memset"),
    # torch_npu's Inductor backend names its Triton kernels as Inductor does
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "generated"),
    ("triton_poi_fused_cat_2", "generated"),
    ("SomethingNobodyListed", "other"),
])
def test_npu_names(name: str, cls: str) -> None:
    assert kc.classify(name, "npu") == cls


def test_every_timing_class_has_a_kernel_class() -> None:
    """Each class and variant timing.yaml times a call with (on any chip) is counted under a listed kernel class."""
    data = timing_data()
    names = set(data["classes"]) | {"elementwise", "generated"}
    for chip in data["chips"].values():
        names |= set(chip.get("classes") or {})
    for fam in (data.get("families") or {}).values():
        names |= set(fam.get("classes") or {})
    order = set(kc.kernel_classes().order)
    for name in names:
        assert kc.estimate_class(name) in order - {kc.OTHER}, name
    assert kc.estimate_class("cast_widen") == "copy" and kc.estimate_class("attention_backward") == "attention"


def test_artifact_sums_every_kernel_of_a_real_h200_trace() -> None:
    trace = read_trace(H200_TRACE)
    art = import_trace(H200_TRACE)
    classes = art["kernel_classes"]
    assert list(classes) == [c for c in kc.kernel_classes().order if c in classes]  # the file's order
    assert sum(v["kernels"] for v in classes.values()) == art["totals"]["kernels"] == trace.kernels
    assert sum(v["device_s"] for v in classes.values()) == pytest.approx(sum(t for _, t in trace.by_kernel.values()) * 1e-6)
    assert "other" not in classes  # every kernel of this real trace is told by its name
    assert classes["matmul"]["kernels"] > 100 and classes["attention"]["kernels"] == 24
    assert len(classes["matmul"]["top"]) == 3 and all(t > 0 for t in classes["matmul"]["top"].values())


def test_artifact_of_a_real_ascend_export() -> None:
    art = import_trace(ASCEND)
    classes = art["kernel_classes"]
    assert sum(v["kernels"] for v in classes.values()) == art["totals"]["kernels"]
    assert classes["communication"]["device_s"] > 0.1  # its 106 ms allreduce
    assert classes["matmul"]["kernels"] > 0 and classes["copy"]["kernels"] > 0


def _gpt_audit(tmp_path: Path, mode: str) -> dict:
    out = tmp_path / f"gpt-{mode}.json"
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", f"train:batch=8,seq=128,mode={mode}", "--chip", "H200",
                                   "--json-out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_estimated_classes_of_graph_and_compiled_steps(tmp_path: Path) -> None:
    for mode in ("compile", "graph"):
        step = _gpt_audit(tmp_path, mode)["scenarios"][0]["step"]
        classes = step["timing_classes"]
        assert classes["matmul"]["kernels"] > 0 and classes["attention"]["kernels"] > 0
        assert sum(v["device_s"] for v in classes.values()) == pytest.approx(step["device_s"])
        if mode == "compile":
            assert sum(v["kernels"] for v in classes.values()) == step["kernels"]
            assert classes["generated"]["kernels"] > 0  # Inductor's fused kernels
        else:
            assert "generated" not in classes
    eager = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "prefill:batch=1,seq=64", "--format", "json", "--quiet"])
    assert "timing_classes" not in json.loads(eager.output)["scenarios"][0]["step"]  # eager: per op, as before


def test_reduce_overhead_counts_each_copied_input(tmp_path: Path) -> None:
    from npuport.api import audit_model
    from npuport.cost.inventory import GraphInputs, step_time
    report, _ = audit_model(hf_config=str(ROOT / "examples" / "configs" / "tinyllama-1.1b.json"),
                            scenarios=["decode:batch=1,past=64,mode=reduce-overhead"], chip="H200")
    inv = report.inventory
    chip = get_chip("H200")
    base = dict((c, n) for c, n, _ in step_time(inv.calls["decode"], chip, "reduce-overhead").classes)
    more = dict((c, n) for c, n, _ in step_time(inv.calls["decode"], chip, "reduce-overhead",
                                                graph_inputs=GraphInputs(1 << 20, 7)).classes)
    assert more["copy"] == base.get("copy", 0) + 7  # one copy kernel per input tensor


def test_join_sets_measured_classes_beside_the_estimate(tmp_path: Path) -> None:
    data = _gpt_audit(tmp_path, "eager")
    art = import_trace(H200_TRACE)
    rows = {r["class"]: r for r in join(data, art, "train")["kernel_classes"]}
    # eager: one estimated kernel per compute call, by its op's class
    assert rows["matmul"]["estimated_kernels"] > 0 and rows["matmul"]["measured_kernels"] == 244
    assert rows["memset"]["estimated_kernels"] == 0 and rows["memset"]["measured_kernels"] == 24 and rows["memset"]["ratio"] is None
    assert rows["attention"]["ratio"] == pytest.approx(rows["attention"]["measured_s"] / rows["attention"]["estimated_s"])
    # an artifact written before kernel classes: nothing to compare, no error
    old = json.loads((RO_H100 / "reduce-overhead" / "tinyllama-1.1b" / "decode.profile.json").read_text())
    assert "kernel_classes" not in old
    assert kc.compare({"matmul": {"kernels": 3, "device_s": 1.0}}, old.get("kernel_classes"), 5) == []
    # per step: a profile of 2 steps is halved
    two = kc.compare({"matmul": {"kernels": 3, "device_s": 1.0}}, {"matmul": {"kernels": 8, "device_s": 4.0, "top": {}}}, 2)
    assert two == [{"class": "matmul", "estimated_kernels": 3, "estimated_s": 1.0, "measured_kernels": 4,
                    "measured_s": 2.0, "ratio": 2.0, "top": []}]


def test_report_shows_the_class_table(tmp_path: Path) -> None:
    art = tmp_path / "gpt.profile.json"
    assert CliRunner().invoke(cli, ["profile", "import", str(H200_TRACE), "-o", str(art), "--quiet"]).exit_code == 0
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", "train:batch=8,seq=128", "--chip", "H200",
                                   "--profile", str(art), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "Kernels per class, per step (train)" in res.output
    line = next(x for x in res.output.splitlines() if x.startswith("cat "))
    assert "CatArrayBatchedCopy" in line  # the costliest kernel's name, without its signature


def test_compare_a_cuda_run_with_an_npu_run_by_class() -> None:
    """Kernel names have nothing in common between the vendors; their classes do."""
    from npuport.profile.compare import compare
    from npuport.render.profile_compare import render_html, render_markdown
    cuda, npu = import_trace(H200_TRACE), import_trace(ASCEND)
    data = compare(cuda, npu)
    rows = {r["class"]: r for r in data["kernel_classes"]}
    assert rows["matmul"]["base_kernels"] == 244 and rows["matmul"]["new_kernels"] > 0
    assert rows["communication"]["base_s"] == 0 and rows["communication"]["new_s"] > 0.1
    assert rows["attention"]["new_kernels"] == 0 and rows["attention"]["delta_s"] < 0
    assert "## Kernels per class, per step" in render_markdown(data) and 'id="tbl-kernel_classes"' in render_html(data)
    # an artifact without kernel classes (written before them) on either side: no class rows, the rest as before
    old = json.loads((RO_H100 / "reduce-overhead" / "tinyllama-1.1b" / "decode.profile.json").read_text())
    assert compare(old, npu)["kernel_classes"] == [] and "Kernels per class" not in render_markdown(compare(old, npu))


def test_import_says_what_the_kernel_time_is_made_of(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["profile", "import", str(H200_TRACE), "-o", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    assert "kernel time by class: matmul 70%, attention 11%, reduction 10%" in res.output
    cpu = CliRunner().invoke(cli, ["profile", "import", str(ROOT / "tests" / "fixtures" / "profiles" / "gpt_prefill_cpu.json.gz"),
                                   "-o", str(tmp_path / "b.json")])
    assert cpu.exit_code == 0 and "by class" not in cpu.output  # a CPU trace has no kernels to class


def test_every_importer_counts_every_kernel(tmp_path: Path) -> None:
    """Kineto (above), the Ascend text export (above), its database export and an Nsight Systems export: the classes
    hold every kernel the importer counted."""
    import gzip
    import shutil

    db = tmp_path / "rank0_ascend_pt"
    shutil.copytree(ROOT / "tests" / "fixtures" / "profiles" / "ascend" / "db" / "rank0_ascend_pt", db)
    for gz in (db / "ASCEND_PROFILER_OUTPUT").glob("*.db.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    nsys = tmp_path / "saxpy.sqlite"
    nsys.write_bytes(gzip.decompress((ROOT / "tests" / "fixtures" / "profiles" / "nsys"
                                      / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz").read_bytes()))
    for path, device in ((db, "npu"), (nsys, "cuda")):
        art = import_trace(path)
        assert art["device"] == device
        classes = art["kernel_classes"]
        assert sum(v["kernels"] for v in classes.values()) == art["totals"]["kernels"] > 0, path
    assert "communication" in import_trace(db)["kernel_classes"]  # the sample's allreduce
    assert set(import_trace(nsys)["kernel_classes"]) >= {"copy"}  # saxpy's host / device copies


def test_a_broken_kernel_classes_file_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import yaml

    from npuport import mappings
    from npuport.errors import MappingError

    root = tmp_path / "mappings"
    shutil.copytree(Path(mappings.__file__).parent, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    shipped = yaml.safe_load((root / "kernel_classes.yaml").read_text())
    try:
        for mutate, problem in ((lambda d: d["classes"][0].__setitem__("class", "gemm"), "'gemm' is not in order"),
                                (lambda d: d["classes"][0].__setitem__("match", ["(unclosed"]), "not a regular expression"),
                                (lambda d: d["order"].remove("other"), "must list 'other'")):
            doc = yaml.safe_load(yaml.safe_dump(shipped))
            mutate(doc)
            (root / "kernel_classes.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            kc.kernel_classes.cache_clear()
            with pytest.raises(MappingError, match=problem):
                kc.kernel_classes()
    finally:
        kc.kernel_classes.cache_clear()
        kc.classify.cache_clear()


def test_profile_check_kernels_and_masked_attention_on_committed_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/profile_check.py --kernels and --masked-attention, whose output docs/profile.md quotes, on a committed
    H100 run (one model, to keep it quick)."""
    import importlib.util
    import shutil
    import tempfile

    spec = importlib.util.spec_from_file_location("profile_check", ROOT / "scripts" / "profile_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("reduce-overhead", "compile"):
            shutil.copytree(ROOT / "docs" / "measured" / "profiles-reduce-overhead-h100-run3" / mode / "tinyllama-1.1b",
                            Path(tmp) / mode / "tinyllama-1.1b")
        mod.kernel_counts(Path(tmp) / "reduce-overhead", "H100-SXM")
        out = capsys.readouterr().out
        decode = [line for line in out.splitlines() if "decode" in line]
        attention = next(line for line in decode if "| attention |" in line)
        assert "| 22 | 44 |" in attention  # cuDNN's decode attention: two kernels a call
        assert any("| copy | 45 | 45 |" in line for line in decode)  # one copy per input tensor, as estimated
        assert "`Memset`" in out  # names without their trailing space
        mod.masked_attention([Path(tmp) / "compile"], "H100-SXM")
        row = next(line for line in capsys.readouterr().out.splitlines() if "prefill" in line)
        assert "3.12x" in row  # TinyLlama's masked attention against its causal estimate (3.1 in timing.yaml)


def test_classes_follow_the_mappings_of_the_day_they_are_read() -> None:
    """An artifact keeps every kernel name, so a pattern fixed after it was written classes its kernels anew; an
    artifact written with classes only (before kernel_names) keeps the ones it was written with."""
    art = import_trace(H200_TRACE)
    assert sum(v["kernels"] for v in art["kernel_names"].values()) == art["totals"]["kernels"]
    stale = dict(art, kernel_classes={"other": {"kernels": 579, "device_s": 1.0, "top": {}}})
    again = kc.of_artifact(stale)  # made again from the names
    assert again is not None and list(again) == list(art["kernel_classes"])
    for cls, row in art["kernel_classes"].items():
        assert again[cls]["kernels"] == row["kernels"] and again[cls]["device_s"] == pytest.approx(row["device_s"])
    # join and compare read the classes through of_artifact too
    data = {"scenarios": [{"name": "train", "batch": 8, "seq": 128, "past": 0, "step": {}}], "ops": []}
    joined = {r["class"] for r in join(data, stale, "train")["kernel_classes"]}
    assert "matmul" in joined and "other" not in joined
    from npuport.profile.compare import compare
    assert "matmul" in {r["class"] for r in compare(stale, stale)["kernel_classes"]}
    no_names = {k: v for k, v in stale.items() if k != "kernel_names"}
    assert kc.of_artifact(no_names) == stale["kernel_classes"]
    assert kc.of_artifact({"ops": []}) is None


def test_a_malformed_kernel_table_in_an_artifact_is_one_clear_line(tmp_path: Path) -> None:
    art = import_trace(H200_TRACE)
    for key, bad in (("kernel_names", {"x": 5}), ("kernel_classes", {"matmul": {"kernels": "many", "device_s": 1.0}}),
                     ("kernel_classes", {"matmul": {"kernels": 1, "device_s": 1.0, "top": ["x"]}})):
        path = tmp_path / f"{key}.profile.json"
        path.write_text(json.dumps(dict(art, **{key: bad})))
        for args in (["profile", "compare", str(path), str(path)],
                     ["audit", str(GPT), "--scenario", "train:batch=8,seq=128", "--profile", str(path)]):
            res = CliRunner().invoke(cli, args)
            assert res.exit_code == 2, res.output
            errors = [line for line in res.output.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "malformed profile artifact" in errors[0] and "Traceback" not in res.output
