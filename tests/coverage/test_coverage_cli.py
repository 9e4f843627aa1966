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
    assert lines[0] == "aten::mm on torch_npu 1.0.0: native via op_api, acl_op"
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


def _with_views(write_db, version="1.0.0", **extra):
    native = {"aten::mm": ["op_api", "acl_op"], "aten::matmul": ["op_api"], "aten::lstm_cell": ["acl_op"],
              "aten::pow.Tensor_Scalar": ["op_api"], "aten::gelu.out": ["op_api"], "aten::view": ["core"]}
    tables = {"implicit": ["aten::rms_norm", "aten::size.int"], "explicit": ["aten::zeros_like", "aten::t"],
              "cpu": ["aten::isin.Tensor_Tensor_out", "aten::mean.dim", "aten::unfold"], "none": ["aten::_flash"]}
    return write_db(version, native=native, torch_tables=tables, views=["aten::t", "aten::unfold", "aten::view"],
                    metadata=["aten::size.int"], **extra)


def test_unknown_op_exits_2_naming_the_nearest_names(write_db):
    _with_views(write_db)
    res = _run("show", "aten::no_such_op")
    assert res.exit_code == 2 and res.stdout == ""
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith("error: unknown operator aten::no_such_op") and "nearest:" in line
    res = _run("show", "aten::mn")
    assert res.exit_code == 2 and "nearest: aten::mm" in res.stderr
    assert _run("show", "npu::npu_rms_nrm").stderr.count("npu::npu_rms_norm") == 1


def test_view_and_metadata_ops_show_status_view(write_db):
    _with_views(write_db)
    for op, kind in (("aten::t", "view"), ("aten::view", "view"), ("aten::size.int", "metadata"), ("aten::size", "metadata")):
        res = _run("show", op)
        assert res.exit_code == 0, (op, res.output)
        row = next(line for line in res.stdout.splitlines() if line.startswith("* 1.0.0"))
        assert "view" in row.split()[3], row
        rows = json.loads(_run("show", op, "--format", "json").stdout)
        assert rows[0]["status"] == "view" and rows[0]["view_kind"] == kind and rows[0]["risk"] is None
    detail = json.loads(_run("show", "aten::t", "--format", "json").stdout)[0]["detail"]
    assert "no kernel" in detail and "contiguous" in detail and "CompositeExplicitAutograd" in detail
    assert "registered at PrivateUse1" in json.loads(_run("show", "aten::view", "--format", "json").stdout)[0]["detail"]
    unfold = json.loads(_run("show", "aten::unfold", "--format", "json").stdout)[0]
    assert unfold["status"] == "cpu-fallback"  # a view with only a CPU kernel still leaves the NPU
    res = _run("list", "--status", "view")
    assert res.exit_code == 0 and res.stdout.split() == ["aten::size.int", "aten::t", "aten::view", "[core]"]
    assert "aten::view" not in _run("list", "--status", "native").stdout


def test_a_version_with_no_data_of_its_own_gets_a_note(write_db):
    _with_views(write_db, "2.3.1.post2")
    _with_views(write_db, "2.3.1.post4")
    _with_views(write_db, "2.5.1")
    res = _run("show", "aten::mm", "--torch-npu", "2.3.1.post5")
    assert res.exit_code == 0, res.output
    assert "2.3.1.post5 is not a release with data; using the nearest earlier release, 2.3.1.post4" in res.stderr
    assert any(line.startswith("* 2.3.1.post4") for line in res.stdout.splitlines())
    assert _run("show", "aten::mm", "--torch-npu", "2.3.1.post5", "--quiet").stderr == ""
    res = _run("list", "--status", "npu-custom", "--torch-npu", "2.3.1.post9")
    assert res.exit_code == 0 and "using the nearest earlier release, 2.3.1.post4" in res.stderr


def test_checked_in_view_ops_through_the_cli():
    for op in ("aten::view", "aten::t", "aten::size", "aten::expand", "aten::detach"):
        rows = json.loads(_run("show", op, "--torch-npu", "2.14.0", "--format", "json").stdout)
        chosen = next(r for r in rows if r["torch_npu"] == "2.14.0")
        assert chosen["status"] == "view", (op, chosen)
    res = _run("show", "aten::no_such_op")
    assert res.exit_code == 2 and "nearest: " in res.stderr


def test_show_prints_the_kernels_host_path_read_or_carried():
    res = _run("show", "aten::logit")  # the default release: its source was not read
    assert res.exit_code == 0, res.output
    assert "2.14.0: the kernel computes on the host CPU when the chip is none of Ascend910B" in res.stdout
    assert ("inferred, not verified: source at this release's commit not read; condition carried from 2.13.0rc1 "
            "(read at op_plugin/ops/opapi/LogitKernelNpuOpApi.cpp:") in res.stdout
    res = _run("show", "aten::logit", "--torch-npu", "2.11.0")
    assert "(cpu-path; read at op_plugin/ops/opapi/LogitKernelNpuOpApi.cpp:11-61@8b9c8534fa41)" in res.stdout
    assert "not read" not in res.stdout
    assert "2.12.0.post2: the kernel computes" in _run("show", "aten::logit", "--torch-npu", "2.12.0.post2").stdout
    rows = json.loads(_run("show", "aten::logit", "--format", "json").stdout)
    by = {r["torch_npu"]: r for r in rows}
    assert by["2.14.0"]["host_paths"][0]["inferred_from"] == "2.13.0rc1"
    assert by["2.11.0"]["host_paths"][0]["inferred_from"] is None and by["2.5.1"]["host_paths"] == []


def test_show_answers_first_then_the_table(write_db):
    write_db("1.0.0")
    write_db("2.0.0", native={"aten::mm": ["op_api"]}, native_composites=[])
    lines = _run("show", "aten::mm").stdout.splitlines()  # no --torch-npu: the newest release
    assert lines[0] == "aten::mm on torch_npu 2.0.0: native via op_api"
    assert lines[1].startswith("2.0.0: registered at PrivateUse1")
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("torch_npu"))
    rows = [line for line in lines[header + 1:] if line]
    assert header > 1 and [r.split()[0] for r in rows] == ["1.0.0", "*"] and rows[1].split()[1] == "2.0.0"
    lines = _run("show", "aten::rms_norm", "--torch-npu", "1.0.0").stdout.splitlines()
    assert lines[0] == "aten::rms_norm on torch_npu 1.0.0: composite (implicit)"
    first = _run("show", "aten::_flash", "--torch-npu", "1.0.0").stdout.splitlines()[0]
    assert first == "aten::_flash on torch_npu 1.0.0: unsupported; risk: fails at run time"


def test_show_answer_names_the_release_asked_for_and_the_data_it_shares():
    res = _run("show", "aten::logit", "--torch-npu", "2.12.0.post2")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "aten::logit on torch_npu 2.12.0.post2 (data of 2.12.0): native via op_api"


def test_unknown_namespace_exits_2_naming_the_nearest_namespaces(write_db):
    write_db("1.0.0")
    for op, nearest in (("atne::mm", "nearest: aten::)"), ("npuu::npu_rms_norm", "nearest: npu::)"),
                        ("qwertyuiop::x", "no namespace is close)")):
        res = _run("show", op)
        assert res.exit_code == 2, (op, res.output)
        assert res.stdout == "" and "Traceback" not in res.output
        line = res.stderr.strip()
        assert len(line.splitlines()) == 1
        assert line.startswith(f"error: no coverage data for namespace {op.split('::')[0]}:: (expected aten:: or npu::")
        assert nearest in line and line.endswith(f"; received: {op}")
    res = _run("show", "prims::add")  # a namespace the running torch registers: its library decides
    assert res.exit_code == 0 and res.stdout.startswith("prims::add on torch_npu 1.0.0: ")
