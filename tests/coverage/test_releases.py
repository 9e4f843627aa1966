"""Published releases: version strings resolve to data (own, alias, nearest earlier with a note), build-time order,
views and metadata ops, and the shipped data against counts made elsewhere (shared/facts/torch-npu-coverage.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from npuport import coverage
from npuport.coverage import database, sync
from npuport.coverage.fallback import first_release_with_switch, releases_with_switch
from npuport.errors import NpuportError


def _built(write_db: Any, version: str, built: str, **overrides: Any) -> Path:
    source = {"torch_npu_wheel": f"torch_npu-{version}-fixture.whl", "torch_npu_sha256": "0" * 64,
              "torch_npu_yaml": "fixture", "torch_npu_built": built, "torch_wheel": "torch-fixture.whl",
              "torch_sha256": "1" * 64, "torch_yaml": "fixture", "script": "tests", "script_version": 2}
    return write_db(version, source=source, **overrides)


def _index(mappings: Path, **aliases: str) -> None:
    """releases.yaml over the fixture files, plus aliases (version -> the version whose data it shares)."""
    index = {}
    for version in database.available_versions():
        doc = {"torch_npu": version, "torch": "2.99.0", "source": {"torch_npu_wheel": f"torch_npu-{version}.whl",
               "torch_npu_sha256": "0" * 64, "torch_npu_built": database.load_file(version).built}}
        index[version] = sync.release_entry(doc)
    for alias, data in aliases.items():
        index[alias] = dict(index[data], built=None, data=data)
    (mappings / "coverage" / "releases.yaml").write_text(sync.render_index(index), encoding="utf-8")


# --- version strings ------------------------------------------------------------------------------------------------

def test_a_post_release_that_is_not_checked_in_takes_the_nearest_earlier_with_a_note(write_db):
    for v in ("2.3.1.post2", "2.3.1.post4", "2.5.1"):
        write_db(v)
    choice = database.resolve_version("2.3.1.post5")
    assert (choice.data, choice.release) == ("2.3.1.post4", None)
    assert "2.3.1.post5 is not a release with data" in choice.note and "2.3.1.post4" in choice.note
    assert coverage.load("2.3.1.post5").version == "2.3.1.post4"
    assert coverage.resolve("aten::mm", "2.3.1post5").version == "2.3.1.post4"  # spelled without the dot
    assert database.resolve_version("2.4.0").data == "2.3.1.post4"  # another release line: still the nearest earlier
    newer = database.resolve_version("2.9.0")
    assert newer.data == "2.5.1" and "newer than every release with data" in newer.note
    assert database.resolve_version("2.3.1.post4").note is None
    for bad, match in (("2.3.0", "no coverage data for torch_npu 2.3.0"), ("3.0.0", "no coverage data"),
                       ("two", "not a torch_npu version")):
        with pytest.raises(NpuportError, match=match):
            database.resolve_version(bad)


def test_canonical_version_spellings():
    for text, want in (("2.3.1post5", "2.3.1.post5"), ("v2.3.1.post5", "2.3.1.post5"), ("2.3.1-post5", "2.3.1.post5"),
                       ("2.1", "2.1.0"), ("2.6.0rc1", "2.6.0rc1"), ("2.1.0+cpu", "2.1.0"), (" 2.14.0 ", "2.14.0")):
        assert database.canonical_version(text) == want


def test_an_alias_loads_the_data_it_shares(write_db, mappings):
    write_db("2.7.1.post4")
    write_db("2.7.1.post8", native={"aten::mm": ["op_api"]}, native_composites=[])
    _index(mappings, **{"2.7.1.post6": "2.7.1.post4"})
    assert database.published_versions() == ["2.7.1.post4", "2.7.1.post6", "2.7.1.post8"]
    assert database.available_versions() == ["2.7.1.post4", "2.7.1.post8"]
    assert database.aliases("2.7.1.post4") == ["2.7.1.post6"]
    choice = database.resolve_version("2.7.1.post6")
    assert (choice.data, choice.release) == ("2.7.1.post4", "2.7.1.post6")
    assert "same operators as 2.7.1.post4" in choice.note
    assert coverage.resolve("aten::mm", "2.7.1.post6").paths == ("op_api", "acl_op")
    assert database.resolve_version("2.7.1.post7").data == "2.7.1.post4"  # nearest earlier is the alias


def test_an_index_pointing_at_a_missing_file_is_a_mapping_error(write_db, mappings):
    write_db("1.0.0")
    _index(mappings, **{"1.0.1": "1.0.0"})
    text = (mappings / "coverage" / "releases.yaml").read_text().replace('data: "1.0.0",', 'data: "1.0.9",', 1)
    (mappings / "coverage" / "releases.yaml").write_text(text)
    with pytest.raises(NpuportError, match="no file torch_npu-1.0.9.yaml"):
        database.releases()


# --- build time -------------------------------------------------------------------------------------------------------

def test_earliest_release_is_by_build_date_not_version(write_db):
    # 2.1.0.post10 (built 2025-01) comes after 2.3.1 (built 2024-07); 2.1.0 is older than both and lacks the op
    fallback = {"implicit": ["aten::rms_norm"], "explicit": ["aten::zeros_like"],
                "cpu": ["aten::isin.Tensor_Tensor_out", "aten::mean.dim"], "none": ["aten::_flash"]}
    _built(write_db, "2.1.0", "2023-12-25T06:32:38")
    _built(write_db, "2.1.0.post10", "2025-01-04T11:39:48", torch_tables={**fallback, "cpu": ["aten::isin.Tensor_Tensor_out"]},
           native={"aten::mm": ["op_api"], "aten::mean.dim": ["op_api"]}, native_composites=[])
    _built(write_db, "2.3.1", "2024-07-16T11:11:14", torch_tables={**fallback, "cpu": ["aten::isin.Tensor_Tensor_out"]},
           native={"aten::mm": ["op_api"], "aten::mean.dim": ["op_api"]}, native_composites=[])
    _built(write_db, "2.3.1rc1", "2024-06-06T03:43:06", torch_tables={**fallback, "cpu": ["aten::isin.Tensor_Tensor_out"]},
           native={"aten::mm": ["op_api"], "aten::mean.dim": ["op_api"]}, native_composites=[])
    assert database.by_build_date(["2.1.0.post10", "2.3.1", "2.1.0"]) == ["2.1.0", "2.3.1", "2.1.0.post10"]
    assert database.build_date("2.1.0.post10") == "2025-01-04T11:39:48"

    def no_fallback(v: str) -> bool:
        return coverage.resolve("aten::mean.dim", v).status not in ("cpu-fallback", "unsupported")

    assert database.earliest_by_build_date(no_fallback) == "2.3.1"
    assert database.earliest_by_build_date(no_fallback, prereleases=True) == "2.3.1rc1"
    in_version_order = next(v for v in coverage.available_versions() if no_fallback(v) and "rc" not in v)
    assert in_version_order == "2.1.0.post10"  # what a walk in version order would answer
    assert database.earliest_by_build_date(lambda v: False) is None


def test_shipped_build_dates_order_post_releases_of_old_lines_late():
    assert database.build_date("2.1.0.post10").startswith("2025-01-04")
    assert database.build_date("2.3.1").startswith("2024-07-16")
    assert database.by_build_date(["2.1.0.post10", "2.3.1"]) == ["2.3.1", "2.1.0.post10"]
    assert database.earliest_by_build_date(lambda v: v in ("2.1.0.post10", "2.3.1")) == "2.3.1"
    assert all(r.built for r in database.releases().values())


# --- the shipped data --------------------------------------------------------------------------------------------------

def test_every_published_release_resolves_and_aliases_share_identical_registrations():
    known = database.releases()
    assert len(known) >= 67 and {"2.1.0", "2.2.0", "2.4.0", "2.8.0", "2.10.0", "2.12.0", "2.3.1.post6"} <= set(known)
    aliased = {v: r.data for v, r in known.items() if r.data != v}
    assert aliased["2.7.1.post6"] == "2.7.1.post4" and aliased["2.10.0rc2"] == "2.10.0rc1"
    for version, data in aliased.items():
        assert known[version].torch == known[data].torch
        assert known[version].built > known[data].built  # the file goes to the earliest built
    assert database.resolve_version("2.3.1.post5").data == "2.3.1.post4"
    assert database.resolve_version("2.15.0").data == "2.14.0"


def test_the_fallback_switch_came_to_old_lines_as_post_releases():
    assert first_release_with_switch() == "2.13.0"
    with_switch = releases_with_switch()
    assert {"2.7.1.post11", "2.9.0.post9", "2.10.0.post7", "2.11.0.post3", "2.12.0.post3", "2.13.0", "2.14.0"} == set(with_switch)
    assert coverage.load("2.7.1.post10").fallback_error_env is None


@pytest.mark.parametrize("version, aten, core, both, acl_only, dvm, custom", [
    ("2.1.0.post10", 1093, 49, 781, 74, 0, 223),
    ("2.5.1", 1077, 48, 780, 55, 0, 247),
    ("2.6.0", 1087, 48, 782, 53, 0, 277),
    ("2.9.0", 1067, 48, 787, 22, 0, 335),
    ("2.14.0", 1077, 47, 777, 3, 79, 419),
])
def test_counts_match_the_facts_file(version, aten, core, both, acl_only, dvm, custom):
    # shared/facts/torch-npu-coverage.md, counted from the wheels without npuport: aten overloads / core /
    # acl+opapi / acl only / dvm / custom
    db = coverage.load(version)
    paths = db.native.values()
    assert len(db.native) == aten and len(db.custom) == custom
    assert sum("core" in p for p in paths) == core
    assert sum("acl_op" in p and "op_api" in p for p in paths) == both
    assert sum(p == ("acl_op",) for p in paths) == acl_only
    assert sum("dvm" in p for p in paths) == dvm


# --- views and metadata ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2.1.0", "2.14.0"])
def test_views_and_metadata_in_the_shipped_data(version):
    db = coverage.load(version)
    for op in ("aten::view", "aten::t", "aten::expand", "aten::detach", "aten::transpose.int", "aten::permute",
               "aten::slice.Tensor", "aten::select.int", "aten::as_strided", "aten::unsqueeze", "aten::t_"):
        assert database.view_kind(op, db) == "view", op
    newer = ("aten::numel", "aten::dim", "aten::is_contiguous") if version != "2.1.0" else ()  # not in torch 2.1's yaml
    for op in ("aten::size.int", "aten::size", "aten::stride", "aten::sym_size.int", *newer):
        assert database.view_kind(op, db) == "metadata", op
    for op in ("aten::mm", "aten::reshape", "aten::contiguous", "aten::is_nonzero", "aten::resize_", "aten::t_copy",
               "aten::item", "aten::no_such_op"):
        assert database.view_kind(op, db) is None, op
    assert database.view_answer("aten::view", "native", db)[0] == "view"
    assert "contiguous" in database.view_answer("aten::t", "composite", db)[1]
    assert database.view_answer("aten::size", "unsupported", db)[0] == "metadata"  # not in native_functions.yaml
    assert database.view_answer("aten::t", "cpu-fallback", db) is None


def test_unknown_names_and_their_nearest(write_db):
    write_db("1.0.0")
    database.check_known("aten::mm", "1.0.0")
    import torch.distributed.fsdp  # noqa: F401 - registers fsdp::*
    database.check_known("fsdp::all_gather_copy_in")  # other namespaces: their library decides
    database.check_known("prims::add")
    with pytest.raises(NpuportError, match=r"no coverage data for namespace atne:: .*nearest: aten::\).*received: atne::mm"):
        database.check_known("atne::mm", "1.0.0")
    with pytest.raises(NpuportError, match=r"unknown operator aten::mn .*nearest: aten::mm"):
        database.check_known("aten::mn", "1.0.0")


def test_a_view_torch_npu_runs_a_device_kernel_for_stays_native():
    db = coverage.load("2.14.0")
    assert db.native["aten::view_as_real"] == ("op_api",) and database.view_kind("aten::view_as_real", db) == "view"
    assert database.view_answer("aten::view_as_real", "native", db) is None
    assert database.view_answer("aten::view", "native", db)[0] == "view"  # registered on the core path: an alias
