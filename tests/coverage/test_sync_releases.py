"""The sync across releases on synthetic wheels built here (nothing is installed or downloaded): build times,
aliases in releases.yaml, the torch side without the paired torch wheel, the wheel count check; and the count check
on a real torch-npu wheel when one is already on disk."""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from npuport import coverage
from npuport.coverage import database, sync
from npuport.coverage.dispatch_tables import CIA, fill_categories, parse_native_functions, tables_from_documents
from tests.coverage.conftest import NPU_YAML, ROOT, TORCH_NATIVE_FUNCTIONS

YAML = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
TORCH_YAML = "torchgen/packaged/ATen/native/native_functions.yaml"
EXTRA_OP = """\
- func: zeros_like(Tensor self) -> Tensor
  impl_ns: op_api
"""


def _script():
    spec = importlib.util.spec_from_file_location("sync_script", ROOT / "scripts" / "sync_torch_npu_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel(folder: Path, dist: str, version: str, requires: list[str], members: dict[str, str | bytes],
          built: tuple[int, ...] = (2024, 7, 16, 11, 11, 14), git: str = "0123abcd") -> Path:
    """A wheel whose members all carry one zip time, as torch-npu's build writes them."""
    path = folder / f"{dist}-{version}-cp310-cp310-manylinux_2_28_aarch64.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {dist.replace('_', '-')}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    files = {f"{dist}-{version}.dist-info/METADATA": "\n".join(meta) + "\n", **members}
    if dist == "torch_npu":
        files["torch_npu/version.py"] = f"__version__ = '{version}'\ngit_version = '{git}'\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=built), data)
    return path


def npu_wheel(folder: Path, version: str, yaml_text: str = NPU_YAML, built: tuple[int, ...] = (2024, 7, 16, 11, 11, 14),
              torch: str | None = "9.1.0") -> Path:
    return wheel(folder, "torch_npu", version, [f"torch=={torch}.*"] if torch else [], {YAML: yaml_text}, built)


def torch_wheel(folder: Path, version: str) -> Path:
    return wheel(folder, "torch", version, [], {TORCH_YAML: TORCH_NATIVE_FUNCTIONS})


def _run(*argv: str) -> int:
    return _script().main([*argv, "--no-download"])


def _doc(out: Path, version: str) -> dict[str, Any]:
    return yaml.safe_load((out / f"torch_npu-{version}.yaml").read_text())


def test_build_time_commit_and_the_unpinned_torch(tmp_path):
    path = npu_wheel(tmp_path, "9.1.0rc1", built=(2023, 10, 16, 1, 35, 54), torch=None)
    stamp = sync.release_stamp(path)
    assert (stamp.built, stamp.git) == ("2023-10-16T01:35:54", "0123abcd")
    assert sync.paired_torch(sync.wheel_info(path)) == ("9.1.0", "release-number")
    assert sync.paired_torch(sync.wheel_info(npu_wheel(tmp_path, "9.1.0"))) == ("9.1.0", "requires-dist")


def test_yaml_entry_names_counts_without_a_yaml_parser():
    names = sync.yaml_entry_names(NPU_YAML)
    assert names["supported"] == {"view", "mm", "gelu.out", "scaled_dot_product_attention", "lstm_cell", "add.Tensor",
                                  "_coalesce", "copy_memory_", "mean.names_dim"}
    assert names["custom"] == {"npu_rms_norm", "copy_memory_"}
    assert names["symint"] == {"view"}
    indented = "supported:\n  - mm\n  - func: add.default(Tensor self) -> Tensor\n    impl_ns: op_api\ncustom: []\n"
    assert sync.yaml_entry_names(indented)["supported"] == {"mm", "add"}


def test_wheel_check_passes_on_the_document_and_names_what_differs(tmp_path):
    npu = npu_wheel(tmp_path, "9.1.0")
    doc = sync.build_document(npu, torch_wheel(tmp_path, "9.1.0"), scan_library=False)
    check = sync.check_wheel(npu, doc)
    assert check and check.counts == {"aten": (9, 9), "custom": (2, 2), "quant": (0, 0)}
    assert "match" in str(check)
    broken = dict(doc, native={k: v for k, v in doc["native"].items() if k != "aten::mm"},
                  custom={**doc["custom"], "npu::npu_extra": doc["custom"]["npu::npu_rms_norm"]})
    bad = sync.check_wheel(npu, broken)
    assert not bad and bad.only_wheel["aten"] == ["mm"] and bad.only_data["custom"] == ["npu_extra"]
    assert "MISMATCH" in str(bad) and "only in the wheel: mm" in str(bad)


def test_views_and_metadata_from_the_torch_yaml():
    text = TORCH_NATIVE_FUNCTIONS + """\
- func: view_copy(Tensor self, SymInt[] size) -> Tensor
  tags: view_copy
- func: t(Tensor(a) self) -> Tensor(a)
- func: t_(Tensor(a!) self) -> Tensor(a!)
  tags: inplace_view
- func: resize_(Tensor(a!) self, SymInt[] size) -> Tensor(a!)
  tags: inplace_view
  dispatch:
    CPU: resize_
- func: size.int(Tensor self, int dim) -> int
- func: is_nonzero(Tensor self) -> bool
- func: item(Tensor self) -> Scalar
  tags: data_dependent_output
- func: equal(Tensor self, Tensor other) -> bool
  dispatch:
    CPU: cpu_equal
"""
    tables = parse_native_functions(text)
    assert tables.views == {"view", "t_"}  # t has no view_copy twin here; t_ is an inplace view of an aliasing t
    assert tables.metadata == {"size.int"}


def test_tables_rebuilt_from_documents_give_the_same_document(tmp_path):
    npu = npu_wheel(tmp_path, "9.1.0")
    real = sync.torch_side_from_wheel(torch_wheel(tmp_path, "9.1.0"))
    doc = sync.build_document(npu, real, scan_library=False)
    side = sync.torch_side_from_data("9.1.0", {"torch_npu-9.1.0.yaml": doc})
    assert side.tables.uncategorized == {"view", "mm", "gelu.out", "add.Tensor"}  # composites stay known
    assert CIA in side.tables.keys["lstm_cell"]  # a registered composite override stays CompositeImplicitAutograd
    again = sync.build_document(npu, side, scan_library=False)
    assert {k: v for k, v in again.items() if k != "source"} == {k: v for k, v in doc.items() if k != "source"}
    assert again["source"]["torch_tables_from"] == "coverage data of torch 9.1.0: torch_npu-9.1.0.yaml"
    dropping_mm = npu_wheel(tmp_path, "9.1.0.post1", NPU_YAML.replace("- func: mm(Tensor self, Tensor mat2) -> Tensor\n  impl_ns: acl_op, op_api\n", ""))
    with pytest.raises(sync.MissingCategories, match="mm"):
        sync.build_document(dropping_mm, side, scan_library=False)
    filled, missing = fill_categories(side.tables, ["mm"], real.tables)
    assert not missing and "mm" in side.tables.uncategorized and filled.structured_delegate["mm"] == "mm.out"
    with pytest.raises(KeyError):
        tables_from_documents([doc]).category("mm")


def test_identical_releases_share_one_file_the_earliest_built(tmp_path, mappings):
    wheels, out = tmp_path / "wheels", mappings / "coverage"
    wheels.mkdir()
    torch_wheel(wheels, "9.1.0")
    npu_wheel(wheels, "9.1.0", built=(2024, 7, 16, 11, 11, 14))
    npu_wheel(wheels, "9.1.0.post2", NPU_YAML.replace("custom:\n", EXTRA_OP + "custom:\n"), built=(2024, 10, 29, 2, 34, 40))
    npu_wheel(wheels, "9.1.0.post4", built=(2025, 1, 4, 11, 39, 16))  # the same registrations as 9.1.0
    assert _run("9.1.0.post4", "--wheel-dir", str(wheels), "--out", str(out)) == 0
    assert (out / "torch_npu-9.1.0.post4.yaml").is_file()
    assert _run("9.1.0", "9.1.0.post2", "--wheel-dir", str(wheels), "--out", str(out)) == 0
    assert not (out / "torch_npu-9.1.0.post4.yaml").exists()  # 9.1.0, built earlier, now holds the data
    index = yaml.safe_load((out / "releases.yaml").read_text())["releases"]
    assert {v: e["data"] for v, e in index.items()} == {"9.1.0": "9.1.0", "9.1.0.post2": "9.1.0.post2", "9.1.0.post4": "9.1.0"}
    assert index["9.1.0.post4"]["built"] == "2025-01-04T11:39:16"
    assert database.published_versions() == ["9.1.0", "9.1.0.post2", "9.1.0.post4"]
    assert coverage.load("9.1.0.post4").version == "9.1.0"
    assert coverage.load("9.1.0.post3").version == "9.1.0.post2"
    assert _doc(out, "9.1.0")["source"]["torch_npu_built"] == "2024-07-16T11:11:14"


def test_sync_without_the_paired_torch_wheel(tmp_path, mappings, capsys):
    with_torch, no_torch, out = tmp_path / "a", tmp_path / "b", mappings / "coverage"
    with_torch.mkdir()
    no_torch.mkdir()
    torch_wheel(with_torch, "9.1.0")
    npu_wheel(with_torch, "9.1.0")
    assert _run("9.1.0", "--wheel-dir", str(with_torch), "--out", str(out)) == 0
    # a later release with one more registration: the torch side comes from the checked-in 9.1.0 file
    more = NPU_YAML.replace("custom:\n", EXTRA_OP + "custom:\n")
    for folder in (with_torch, no_torch):
        npu_wheel(folder, "9.1.0.post1", more, built=(2025, 1, 1, 0, 0, 0))
    assert _run("9.1.0.post1", "--wheel-dir", str(no_torch), "--out", str(out)) == 0
    assert "its dispatch tables come from torch_npu-9.1.0.yaml" in capsys.readouterr().err
    from_data = _doc(out, "9.1.0.post1")
    assert from_data["source"]["torch_tables_from"] == "coverage data of torch 9.1.0: torch_npu-9.1.0.yaml"
    assert _run("9.1.0.post1", "--wheel-dir", str(with_torch), "--out", str(tmp_path / "ref")) == 0
    ref = _doc(tmp_path / "ref", "9.1.0.post1")
    assert {k: v for k, v in from_data.items() if k != "source"} == {k: v for k, v in ref.items() if k != "source"}
    assert "aten::zeros_like" in from_data["native"]
    # a release that drops mm, which every 9.1.0 file registers: its category is recorded nowhere
    fewer = NPU_YAML.replace("- func: mm(Tensor self, Tensor mat2) -> Tensor\n  impl_ns: acl_op, op_api\n", "")
    npu_wheel(no_torch, "9.1.0.post2", fewer, built=(2025, 2, 1, 0, 0, 0))
    assert _run("9.1.0.post2", "--wheel-dir", str(no_torch), "--out", str(out)) == 2
    assert "does not record the dispatch category of 1 op(s)" in capsys.readouterr().err
    torch_wheel(no_torch, "9.0.0")  # the nearest torch wheel on disk supplies it
    assert _run("9.1.0.post2", "--wheel-dir", str(no_torch), "--out", str(out)) == 0
    doc = _doc(out, "9.1.0.post2")
    assert doc["delegates"]["aten::mm"] == "aten::mm.out"
    assert doc["source"]["torch_tables_from"].endswith("; 1 op(s) from torch-9.0.0-cp310-cp310-manylinux_2_28_aarch64.whl")
    assert coverage.resolve("aten::mm", "9.1.0.post2").status == "cpu-fallback"  # mm.out has only a CPU kernel


def test_check_mode_compares_without_writing(tmp_path, mappings, capsys):
    wheels, out = tmp_path / "wheels", mappings / "coverage"
    wheels.mkdir()
    torch_wheel(wheels, "9.1.0")
    npu_wheel(wheels, "9.1.0")
    assert _run("9.1.0", "--wheel-dir", str(wheels), "--out", str(out)) == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    assert _run("9.1.0", "--check", "--wheel-dir", str(wheels), "--out", str(out)) == 0
    assert "checked-in data (9.1.0): same" in capsys.readouterr().out
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    npu_wheel(wheels, "9.1.0", NPU_YAML.replace("custom:\n", EXTRA_OP + "custom:\n"))  # rebuilt, one more op
    assert _run("9.1.0", "--check", "--wheel-dir", str(wheels), "--out", str(out)) == 2
    assert "DIFFERS" in capsys.readouterr().out


def _cached_wheels() -> list[Path]:
    """torch-npu wheels already on this machine (the sync's default --wheel-dir, or $NPUPORT_WHEEL_DIR)."""
    folder = Path(os.environ.get("NPUPORT_WHEEL_DIR", "/tmp/wheels"))
    return sorted(folder.rglob("torch_npu-*.whl"), key=lambda p: p.stat().st_size)[:3] if folder.is_dir() else []


@pytest.mark.parametrize("path", _cached_wheels() or [None], ids=lambda p: p.name if p else "no-cached-wheel")
def test_real_wheel_count_matches_the_shipped_data(path):
    if path is None:
        pytest.skip("no torch-npu wheel under /tmp/wheels or $NPUPORT_WHEEL_DIR (the synthetic ones above run instead)")
    version = sync.wheel_info(path).version
    if version not in database.releases():
        pytest.skip(f"{version} is not in releases.yaml")
    db = coverage.load(version)
    doc = yaml.load((database.coverage_dir() / f"torch_npu-{db.version}.yaml").read_text(),
                    Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    check = sync.check_wheel(path, doc)
    assert check, str(check)
    assert database.releases()[version].built == sync.release_stamp(path).built
