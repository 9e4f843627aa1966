"""Loading and validating coverage files: errors name file, entry and field."""

from __future__ import annotations

import pytest

from npuport.coverage import database
from npuport.errors import MappingError


def test_round_trip(write_db):
    write_db("1.0.0")
    db = database.load("1.0.0")
    assert db.native["aten::mm"] == ("op_api", "acl_op")
    assert db.torch_category["aten::rms_norm"] == "implicit"
    assert "aten::gelu" in db.aten_ops() and db.custom["npu::npu_rms_norm"].exposed


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"extra": 1}, r"torch_npu-1\.0\.0\.yaml: entry '<top>', field 'extra': unknown field"),
        ({"native": {"aten::mm": ["cuda"]}}, r"entry 'aten::mm', field 'native'"),
        ({"native": {"mm": ["op_api"]}}, r"entry 'native', field 'mm': operator names must start with 'aten::'"),
        ({"native_composites": ["aten::softmax.int"]}, r"field 'aten::softmax.int': listed here but not under native"),
        ({"schema": "npuport.coverage/0"}, r"field 'schema'"),
        ({"torch_npu": "9.9.9"}, r"field 'torch_npu': '9.9.9' does not match the file name"),
        ({"custom": {"npu::x": {"schema": "x() -> ()", "paths": ["op_api"]}}}, r"entry 'custom\.npu::x', field 'exposed': missing"),
        ({"torch_tables": {"implicit": ["aten::mm"], "explicit": [], "cpu": [], "none": []}}, r"operator listed twice"),
    ],
)
def test_schema_errors(write_db, overrides, match):
    path = write_db("1.0.0")
    if "torch_npu" in overrides:  # the header and file name stay 1.0.0
        text = path.read_text().replace('torch_npu: "1.0.0"', f'torch_npu: "{overrides["torch_npu"]}"')
        path.write_text(text)
    else:
        write_db("1.0.0", **overrides)
    with pytest.raises(MappingError, match=match):
        database.load("1.0.0")


def test_version_key_is_pep440_like():
    versions = ["2.3.1", "2.1.0.post10", "2.1.0", "2.11.0", "2.1.0rc1", "2.1.0.post8", "2.9.0"]
    assert sorted(versions, key=database.version_key) == [
        "2.1.0rc1", "2.1.0", "2.1.0.post8", "2.1.0.post10", "2.3.1", "2.9.0", "2.11.0"]


def test_checked_in_files_load_and_are_small():
    # how fast they load is a benchmark's business (docs/performance.md), not a timed test's on a shared machine
    for version in database.available_versions():
        path = database.coverage_dir() / f"torch_npu-{version}.yaml"
        assert path.stat().st_size < 1_000_000
        database._load.cache_clear()
        assert database.load(version).native, version
