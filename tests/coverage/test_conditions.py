"""Conditional host paths inside registered torch_npu kernels (mappings/coverage/conditions.yaml): each condition on a
recorded call that meets it and one that does not, the folding over an op's calls, the audit's cpu-path / conditional
report, and the file's own checks."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport import coverage, mappings
from npuport.coverage.conditions import carry_source
from npuport.coverage.database import releases
from npuport.errors import MappingError, NpuportError
from npuport.trace.recorder import Recorder
from npuport.trace.records import OpCall, TensorMeta, TensorRef

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "models"
SHIPPED = Path(mappings.__file__).resolve().parent


def call(op: str, inputs: list[tuple[tuple[int, ...], str]], args: tuple[Any, ...], **kwargs: Any) -> OpCall:
    """An OpCall with tensors as TensorRef into `inputs` (shape, dtype): args name them by position as 't0', 't1'."""
    metas = tuple(TensorMeta(i + 1, shape, dtype) for i, (shape, dtype) in enumerate(inputs))
    refs = tuple(TensorRef(int(a[1:])) if isinstance(a, str) and re.fullmatch(r"t\d", a) else a for a in args)
    return OpCall(0, op, "compute", "forward", metas, metas[:1], refs, kwargs, "", "", None, None)


def status(op: str, version: str, c: OpCall | None = None, **kw: Any) -> str:
    return coverage.resolve(op, version, call=c, **kw).status


# --- the shipped file ------------------------------------------------------------------------------------------------

def test_new_statuses_are_statuses() -> None:
    assert {"cpu-path", "conditional"} <= set(coverage.STATUSES)
    assert "cpu-path" in coverage.LEAVES_NPU and "conditional" not in coverage.LEAVES_NPU


def test_conditions_file_is_no_release_and_validates() -> None:
    assert "conditions" not in " ".join(coverage.available_versions())
    mappings.check_document(mappings.load_yaml("coverage/conditions.yaml"), "coverage/conditions.yaml")
    db = coverage.load_conditions()
    assert {e.id for e in db.entries} >= {"logit-soc", "logit-backward-soc", "masked-softmax-args", "unfold-backward-soc",
                                          "unfold-backward-cann", "upsample-bicubic2d-aa", "polar-acl-op"}
    assert db.chips == {"Ascend910A": "Ascend910", "Ascend910B": "Ascend910B", "Ascend310P": "Ascend310P"}


def test_every_entry_names_ops_its_release_registers() -> None:
    """Cross-check against the coverage data of the same release: a condition describes a registered kernel."""
    checked = 0
    for e in coverage.load_conditions().entries:
        for version in e.releases:
            if version not in coverage.available_versions():
                continue
            db = coverage.load(version)
            for op in e.ops:
                assert op in db.native, f"{e.id}: {op} is not registered by torch_npu {version}"
                checked += 1
    assert checked > 50


def test_builds_are_the_wheels_the_coverage_data_was_read_from() -> None:
    """Where the coverage data records a wheel's Ascend/pytorch commit (torch_npu/version.py git_version), it is the
    build the conditions cite: in the release's own file, or in coverage/releases.yaml."""
    db = coverage.load_conditions()
    index = SHIPPED / "coverage" / "releases.yaml"
    recorded = {str(v): e.get("git") for v, e in yaml.safe_load(index.read_text())["releases"].items()} if index.is_file() else {}
    for version in coverage.available_versions():
        git = coverage.load(version).source.get("torch_npu_git")
        if git and recorded.get(version) is None:
            recorded[version] = git
    compared = [v for v in db.builds if recorded.get(v)]
    for version in compared:
        assert recorded[version] == db.builds[version]["pytorch"], version
    # checked by hand from the downloaded wheels: 2.11.0's version.py names this commit
    assert db.builds["2.11.0"]["pytorch"] == "2a40bad989cfb3bb8fe24d1fe3ff0f1babac33bb"


def test_sources_cite_the_release_commit() -> None:
    db = coverage.load_conditions()
    for e in db.entries:
        for version, sources in e.releases.items():
            for s in sources:
                assert s.endswith("@" + db.builds[version]["op_plugin"][:12]), (e.id, s)


@pytest.fixture
def conditions_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A copy of the shipped mappings/ whose conditions.yaml a test rewrites."""
    root = tmp_path / "mappings"
    shutil.copytree(SHIPPED, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    doc = yaml.safe_load((SHIPPED / "coverage" / "conditions.yaml").read_text())

    def write(mutate) -> None:  # noqa: ANN001
        d = copy.deepcopy(doc)
        mutate(d)
        (root / "coverage" / "conditions.yaml").write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")

    return write


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["entries"][0]["when"].append({"cann_below": "8.3.RC1"}), "when"),  # cpu-path takes trace conditions
    (lambda d: d["entries"][0]["releases"]["2.6.0"].__setitem__(0, "x.cpp:1@0123456789ab"), "releases.2.6.0"),
    (lambda d: d["entries"][0]["when"].__setitem__(0, {"chip_not_in": ["Ascend999"]}), "chip_not_in"),
    (lambda d: d["entries"][0]["when"].__setitem__(0, {"chip_below": ["Ascend910B"]}), "when"),  # schema
    (lambda d: d["chips"]["Ascend910A"].__setitem__("family", "Ascend9"), "family"),
    (lambda d: d["entries"].append(copy.deepcopy(d["entries"][0])), "id"),
    (lambda d: d["carried"]["2.14.0"].__setitem__("inferred_from", "2.14.1"), "inferred_from"),  # not a read build
    (lambda d: d["carried"].__setitem__("2.11.0", {"pytorch": "0" * 40, "inferred_from": "2.10.0"}), "inferred_from"),
    (lambda d: d["carried"]["2.13.0"].__setitem__("pytorch", "c798c6532a0d"), "pytorch"),  # schema: a full sha
])
def test_broken_conditions_name_entry_and_field(conditions_copy, mutate, field: str) -> None:  # noqa: ANN001
    conditions_copy(mutate)
    with pytest.raises(MappingError, match=re.escape(f"field '{field}'") if field != "when" else "when"):
        coverage.load_conditions()


def test_no_conditions_file_is_no_condition(write_db) -> None:  # noqa: ANN001
    write_db("1.0.0")
    assert coverage.load_conditions().entries == ()
    assert coverage.resolve("aten::mm", "1.0.0", chip="Ascend910A").status == "native"


# --- releases whose source was not read: conditions carried from the nearest earlier-built read release ----------------

def test_every_unread_release_is_carried_from_the_nearest_earlier_read_build() -> None:
    """Each published release is under builds (its source read) or carried; carried ones name the release the rule
    picks (built earlier, same paired torch where one was read) and the commit releases.yaml records for them."""
    db = coverage.load_conditions()
    known = releases()
    doc = yaml.safe_load((SHIPPED / "coverage" / "conditions.yaml").read_text())
    assert set(known) == set(db.builds) | set(db.carried) and not set(db.builds) & set(db.carried)
    for version, ref in db.carried.items():
        assert carry_source(version, db.builds, known) == ref, version
        assert doc["carried"][version]["pytorch"] == known[version].git, version
    assert db.carried["2.12.0.post2"] == "2.12.0" and db.carried["2.14.0"] == "2.13.0rc1"


def test_default_release_carries_logit_with_a_plain_note() -> None:
    default = coverage.default_version()
    ref = coverage.load_conditions().carried[default]
    res = coverage.resolve("aten::logit", None, chip="Ascend910A")
    assert res.status == "cpu-path" and res.inferred_from == ref and "Ascend910B" in res.condition
    note = f"source at this release's commit not read; condition carried from {ref} (read at op_plugin/ops/opapi/LogitKernel"
    assert note in res.condition and "inferred, not verified" in res.detail
    assert res.sources == coverage.resolve("aten::logit", ref, chip="Ascend910A").sources
    assert all(s.endswith("@" + coverage.load_conditions().builds[ref]["op_plugin"][:12]) for s in res.sources)
    assert coverage.resolve("aten::logit", default, chip="Ascend910B").status == "native"
    assert "not read" in coverage.resolve("aten::logit", default, chip="Ascend910B").detail
    assert status("aten::logit", default, chip="H200") == "conditional"
    assert coverage.resolve("aten::logit").status == "native"  # no call, chip or CANN: the registration, as before
    # an alias and a version string naming the same release
    post2 = coverage.resolve("aten::logit", "2.12.0post2", chip="Ascend910A")
    assert post2.status == "cpu-path" and post2.inferred_from == "2.12.0" and "carried from 2.12.0 (read at" in post2.condition
    gcd = coverage.resolve("aten::gcd", default, chip="Ascend910B")  # a conditional entry, through gcd.out
    assert gcd.status == "conditional" and "GcdKernelNpu.cpp" in gcd.sources[0] and "not read" in gcd.condition


def test_fused_adam_read_only_at_a_later_commit() -> None:
    """_fused_adam_ is registered only by releases whose source was not read, and no read release registers it: its
    host path (every SoC below Ascend950) rests on an op-plugin commit no release is known to be built from."""
    default = coverage.default_version()
    res = coverage.resolve("aten::_fused_adam_", default, chip="Ascend910B")
    assert res.status == "cpu-path" and res.inferred_from is None
    assert "commit no release is known to be built from" in res.condition and "inferred, not verified" in res.detail
    assert res.sources == ("op_plugin/ops/opapi/FusedAdamKernelNpuOpApi.cpp:28-107,161-200@914ee89a6b3e",)
    assert "none of Ascend950" in res.condition
    assert coverage.resolve("aten::_fused_adam_", "2.7.1.post11", chip="Ascend910A").status == "cpu-path"
    assert coverage.resolve("aten::_fused_adam_", "2.12.0", chip="Ascend910B").status == "cpu-fallback"  # unregistered
    paths = coverage.host_paths("aten::_fused_adam_", default)
    assert [h.id for h in paths] == ["fused-adam-soc"] and "914ee89a6b3e" in paths[0].evidence


def test_host_paths_read_or_carried() -> None:
    read = coverage.host_paths("aten::logit", "2.11.0")
    assert [h.id for h in read] == ["logit-soc"] and read[0].inferred_from is None
    assert read[0].evidence == "read at op_plugin/ops/opapi/LogitKernelNpuOpApi.cpp:11-61@8b9c8534fa41"
    carried = coverage.host_paths("aten::logit", "2.13.0")
    assert carried[0].inferred_from == "2.13.0rc1" and carried[0].evidence.startswith("inferred, not verified: source")
    assert coverage.host_paths("aten::logit", "2.5.1") == ()  # not registered: the CPU fallback, no kernel


def test_no_carried_condition_where_the_op_is_not_registered_alike(conditions_copy, tmp_path: Path) -> None:  # noqa: ANN001
    """2.14.0 takes 2.13.0rc1's conditions only for ops its data registers as 2.13.0rc1's does."""
    conditions_copy(lambda d: None)
    data = tmp_path / "mappings" / "coverage" / "torch_npu-2.14.0.yaml"
    text = data.read_text(encoding="utf-8")
    text = text.replace("  aten::logit: [op_api]\n", "  aten::logit: [op_api, acl_op]\n")  # registered differently
    text = text.replace("  aten::logit_backward: [op_api]\n", "")  # not registered
    data.write_text(text, encoding="utf-8")
    assert coverage.conditions_for("aten::logit", "2.14.0") == ()
    assert coverage.conditions_for("aten::logit_backward", "2.14.0") == ()
    assert [e.id for e in coverage.conditions_for("aten::logit.out", "2.14.0")] == ["logit-soc"]
    plain = coverage.resolve("aten::logit", "2.14.0", chip="Ascend910A")
    assert plain.status == "native" and plain.sources == () and plain.inferred_from is None
    assert status("aten::logit_backward", "2.14.0", chip="Ascend910A") != "cpu-path"
    assert status("aten::logit", "2.11.0", chip="Ascend910A") == "cpu-path"  # a read release is untouched


# --- each condition: a call that meets it and one that does not ---------------------------------------------------------

def test_without_call_chip_or_cann_nothing_changes() -> None:
    plain = coverage.resolve("aten::logit", "2.11.0")
    assert plain.status == "native" and plain.condition is None and plain.sources == ()
    assert plain.detail == "registered at PrivateUse1 by torch_npu 2.11.0 (op_api)"


@pytest.mark.parametrize("op", ["aten::logit", "aten::logit.out", "aten::logit_", "aten::logit_backward"])
def test_chip_condition_logit(op: str) -> None:
    off = coverage.resolve(op, "2.11.0", chip="Ascend910A")
    assert off.status == "cpu-path" and "Ascend910B" in off.condition
    assert off.inferred_from is None and "not read" not in off.detail  # 2.11.0's own source was read
    assert off.sources and re.search(r"Logit(Backward)?Kernel(Npu)?OpApi\.cpp:", off.sources[0])
    assert status(op, "2.11.0", chip="Ascend310P") == "cpu-path"
    on = coverage.resolve(op, "2.11.0", chip="Ascend910B")
    assert on.status == "native" and "not taken" in on.detail
    assert status(op, "2.11.0", chip="H200") == "conditional"  # not an Ascend profile: cannot place it
    assert status(op, "2.5.1", chip="Ascend910A") != "cpu-path"  # 2.5.1 does not register logit: cpu-fallback


MS = "aten::_masked_softmax"
X4, M4 = ((2, 4, 8, 8), "float32"), ((2, 4, 8, 8), "bool")


@pytest.mark.parametrize("shape, dim, mask_type, want", [
    ((2, 4, 8, 8), -1, 2, "native"),
    ((2, 4, 8, 8), 3, 2, "native"),  # dim = input.dim() - 1
    ((2, 4, 8, 8), None, 2, "native"),
    ((4, 8, 8), -1, 2, "cpu-path"),  # input_rank_not 4
    ((2, 4, 8, 8), 1, 2, "cpu-path"),  # dim not last
    ((2, 4, 8, 8), -1, 0, "cpu-path"),  # mask_type not 2
    ((2, 4, 8, 8), -1, None, "cpu-path"),
])
def test_argument_conditions_masked_softmax(shape, dim, mask_type, want: str) -> None:  # noqa: ANN001
    c = call(MS, [(shape, "float32"), (shape, "bool")], ("t0", "t1", dim, mask_type))
    assert status(MS, "2.11.0", c, chip="Ascend910B") == want
    assert status(MS, "2.6.0", c) == want  # no chip needed: the conditions are all on the call


def test_argument_conditions_need_the_call() -> None:
    assert status(MS, "2.11.0", chip="Ascend910B") == "conditional"


@pytest.mark.parametrize("chip, cann, want", [
    ("Ascend910B", None, "conditional"), ("Ascend910B", "8.2.RC1", "cpu-path"), ("Ascend910B", "8.3.RC1", "native"),
    ("Ascend910B", "8.5.0", "native"), ("Ascend910A", None, "cpu-path"), ("Ascend910A", "8.5.0", "cpu-path"),
])
def test_cann_condition_unfold_backward(chip: str, cann: str | None, want: str) -> None:
    res = coverage.resolve("aten::unfold_backward", "2.9.0", chip=chip, cann=cann)
    assert res.status == want
    if want == "conditional":
        assert "8.3.RC1" in res.condition and any("OpUtils.cpp" in s for s in res.sources)


@pytest.mark.parametrize("out, scales, want", [
    ([32, 32], (None, None), "native"), ([1, 1], (None, None), "cpu-path"), ([2, 64], (None, None), "native"),
    ([32, 32], (0.01, None), "cpu-path"),  # a given scale wins over the sizes: 1/0.01 = 100 > 50
])
def test_scale_condition_upsample_bicubic2d_aa(out, scales, want: str) -> None:  # noqa: ANN001
    op = "aten::_upsample_bicubic2d_aa"
    c = call(op, [((1, 3, 64, 100), "float32")], ("t0", out, False, *scales))
    assert status(op, "2.11.0", c, chip="Ascend910B") == want
    assert status(op, "2.1.0.post10", c, chip="Ascend910A") == "cpu-path"


@pytest.mark.parametrize("dtype, want", [("float64", "cpu-path"), ("float32", "native"), ("bfloat16", "native")])
def test_dtype_condition_adaptive_max_pool3d(dtype: str, want: str) -> None:
    op = "aten::adaptive_max_pool3d"
    assert status(op, "2.7.1", call(op, [((1, 2, 8, 8, 8), dtype)], ("t0", [2, 2, 2]))) == want


@pytest.mark.parametrize("correction, want", [
    (0.5, "cpu-path"), (float("inf"), "cpu-path"), (1, "native"), (1.0, "native"), (None, "native"), (True, "native"),
])
def test_integral_condition_var_correction(correction: Any, want: str) -> None:
    op = "aten::var.correction"
    assert status(op, "2.11.0", call(op, [((4, 8), "float32")], ("t0", [1]), correction=correction)) == want
    assert status(op, "2.9.0", call(op, [((4, 8), "float32")], ("t0", [1]), correction=0.5)) == "native"  # not read


def test_always_condition() -> None:
    polar = coverage.resolve("aten::polar", "2.3.1", call=call("aten::polar", [((4,), "float32")] * 2, ("t0", "t1")))
    assert polar.status == "cpu-path" and "PolarKernelNpuOpApi.cpp" in polar.sources[0]
    assert status("aten::_embedding_bag_per_sample_weights_backward", "2.11.0", chip="Ascend910B") == "cpu-path"


def test_acl_op_path_is_conditional_also_through_a_structured_out() -> None:
    assert status("aten::polar", "2.11.0", chip="Ascend910B") == "conditional"
    gcd = coverage.resolve("aten::gcd", "2.11.0", chip="Ascend910B")  # runs through gcd.out
    assert gcd.status == "conditional" and "acl_op" in gcd.condition and "GcdKernelNpu.cpp" in gcd.sources[0]


def test_cann_versions_order() -> None:
    assert coverage.cann_key("8.2.RC1") < coverage.cann_key("8.3.RC1") < coverage.cann_key("8.3.0") < coverage.cann_key("8.5.0")
    with pytest.raises(NpuportError, match="not a CANN version"):
        coverage.cann_key("eight")


# --- recorded calls ------------------------------------------------------------------------------------------------------

def test_recorded_calls_under_fake_tensors() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, m: torch.Tensor) -> Any:
            torch.ops.aten._masked_softmax(x, m, -1, 2)
            torch.ops.aten._masked_softmax(x, m, 1, 2)
            return torch.var(x, dim=1, correction=0.5)

    with FakeTensorMode():
        x, m = torch.rand(2, 3, 8, 8), torch.zeros(2, 3, 8, 8, dtype=torch.bool)
        model = M()
        with Recorder(model, "t") as rec:
            model(x, m)
    calls = [c for c in rec.trace.calls if c.op == MS]
    folded = coverage.resolve_calls(MS, "2.11.0", calls, chip="Ascend910B")
    assert folded.resolution.status == "cpu-path" and "(1 of 2 calls)" in folded.resolution.detail
    assert {k: len(v) for k, v in folded.by_status.items()} == {"native": 1, "cpu-path": 1}
    var = next(c for c in rec.trace.calls if c.op == "aten::var.correction")
    assert status(var.op, "2.11.0", var) == "cpu-path"


def test_fold_without_conditions_is_the_registration() -> None:
    folded = coverage.resolve_calls("aten::mm", "2.11.0", [], chip="Ascend910A")
    assert folded.resolution == coverage.resolve("aten::mm", "2.11.0")


# --- the audit -------------------------------------------------------------------------------------------------------

def _audit(chip: str, version: str = "2.11.0") -> dict[str, Any]:
    from npuport.api import audit_model

    _, data = audit_model(model=str(FIX / "uses_logit.py"), torch_npu=version, chip=chip, scenarios=["prefill:seq=8"])
    return data


def test_audit_reports_cpu_path_off_910b() -> None:
    data = _audit("Ascend910A")
    cov = data["coverage"]
    logit = next(o for o in data["ops"] if o["op"] == "aten::logit")["coverage"]
    assert logit["status"] == "cpu-path" and logit["calls_by_status"] == {"cpu-path": 1}
    assert logit["kernel_sources"][0].endswith("@8b9c8534fa41")
    fb = {f["op"]: f for f in cov["cpu_fallback"]}["aten::logit"]
    assert fb["status"] == "cpu-path" and fb["bytes_crossing_host"] > 0 and fb["estimated_transfer_s"] > 0
    assert "Ascend910B" in fb["condition"] and fb["sources"][0].endswith("uses_logit.py:15")
    assert cov["by_status"]["cpu-path"]["ops"] == 1
    assert "aten::logit" in cov["releases_with_fallback"]["2.11.0"]
    assert any("own kernel on Ascend910A" in n for n in data["notes"])
    # a release whose kernels nobody read cannot be the earliest one without the host path
    assert cov["earliest_without_fallback"] in (None, *coverage.load_conditions().builds)


def test_audit_reports_native_on_910b_and_conditional_off_npu() -> None:
    data = _audit("Ascend910B")
    cov = data["coverage"]
    assert next(o for o in data["ops"] if o["op"] == "aten::logit")["coverage"]["status"] == "native"
    assert not cov["cpu_fallback"] and not cov["conditional"]
    assert "2.11.0" not in cov["releases_with_fallback"]
    assert cov["earliest_without_fallback"] in coverage.load_conditions().builds
    cuda = _audit("H200")["coverage"]
    assert [f["op"] for f in cuda["conditional"]] == ["aten::logit"]


def test_audit_on_a_carried_release_says_the_condition_is_inferred() -> None:
    default = coverage.default_version()
    ref = coverage.load_conditions().carried[default]
    cov = _audit("Ascend910A", default)["coverage"]
    fb = {f["op"]: f for f in cov["cpu_fallback"]}["aten::logit"]
    assert fb["status"] == "cpu-path" and f"condition carried from {ref} (read at" in fb["condition"]
    assert "source at this release's commit not read" in fb["detail"]
    assert fb["kernel_sources"][0].endswith("@" + coverage.load_conditions().builds[ref]["op_plugin"][:12])
