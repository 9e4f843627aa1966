"""`npuport coverage show|diff|list` through click's CliRunner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from npuport.cli.coverage import coverage


def _run(*args: str):
    return CliRunner().invoke(coverage, list(args))


def test_show_table_across_versions(write_db):
    write_db("1.0.0")
    write_db("2.0.0", native={"aten::mm": ["op_api"]}, native_composites=[])
    res = _run("show", "aten::mm", "--torch-npu", "1.0.0")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "aten::mm"
    assert any(l.startswith("* 1.0.0") and "native" in l and "op_api, acl_op" in l for l in lines)
    assert any(l.startswith("  2.0.0") for l in lines)
    assert "1.0.0: registered at PrivateUse1" in res.output


def test_show_json(write_db):
    write_db("1.0.0")
    rows = json.loads(_run("show", "aten::rms_norm", "--format", "json").output)
    assert rows[0]["status"] == "composite" and rows[0]["composite_kind"] == "implicit"


def test_diff(write_db):
    write_db("1.0.0")
    write_db("2.0.0", native={"aten::mm": ["op_api"], "aten::mean.dim": ["op_api"]}, native_composites=[],
             torch_tables={"implicit": ["aten::rms_norm", "aten::matmul", "aten::lstm_cell"], "explicit": ["aten::zeros_like"],
                           "cpu": ["aten::isin.Tensor_Tensor_out", "aten::pow.Tensor_Scalar", "aten::gelu.out"], "none": ["aten::_flash"]})
    res = _run("diff", "1.0.0", "2.0.0")
    assert res.exit_code == 0, res.output
    assert "aten::mean.dim: cpu-fallback -> native (op_api)" in res.output
    assert "aten::pow.Tensor_Scalar: native (op_api) -> cpu-fallback" in res.output
    assert "aten::mm: native (op_api, acl_op) -> native (op_api)" in res.output
    data = json.loads(_run("diff", "1.0.0", "2.0.0", "--format", "json").output)
    assert [c["op"] for c in data["added"]] == ["aten::mean.dim"]


def test_list(write_db):
    write_db("1.0.0")
    res = _run("list", "--status", "cpu-fallback", "--torch-npu", "1.0.0")
    assert res.exit_code == 0
    assert res.stdout.split() == ["aten::isin.Tensor_Tensor", "aten::isin.Tensor_Tensor_out", "aten::mean.dim"]
    data = json.loads(_run("list", "--status", "npu-custom", "--format", "json").output)
    assert data["ops"][0]["op"] == "npu::npu_rms_norm"


def test_user_errors_exit_2_with_one_line(write_db):
    write_db("1.0.0")
    for args, needle in ((["show", "aten::mm", "--torch-npu", "0.1"], "no coverage data for torch_npu 0.1"),
                         (["show", "mm"], "not an operator overload name"),
                         (["list", "--status", "native", "--torch-npu", "7"], "no coverage data for torch_npu 7"),
                         (["diff", "1.0.0", "5.0"], "no coverage data for torch_npu 5.0")):
        res = _run(*args)
        assert res.exit_code == 2, args
        assert res.stderr.startswith("error: ") and needle in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_checked_in_data_through_the_cli():
    res = _run("show", "aten::isin.Tensor_Tensor_out")
    assert res.exit_code == 0 and "2.3.1" in res.output and "cpu-fallback" in res.output
