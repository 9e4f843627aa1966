"""`npuport kernels build` detection (and its exit 2 here), `list`, `test`, `perf` through click's CliRunner."""

from __future__ import annotations

import stat

import pytest
from click.testing import CliRunner

from npuport.ascendc_kernels.build import KERNEL_SOURCES, build_steps, find_toolchain
from npuport.cli.kernels import kernels


def run(*args, env=None):
    return CliRunner().invoke(kernels, list(args), env=env)


def test_no_toolchain_here():
    tc = find_toolchain({"PATH": "/nonexistent"})
    assert not tc.found and "ASCEND_HOME_PATH" in tc.why_not()


def test_toolchain_found_in_a_fake_cann(tmp_path):
    bin_dir = tmp_path / "compiler" / "ccec_compiler" / "bin"
    bin_dir.mkdir(parents=True)
    cc = bin_dir / "bisheng"
    cc.write_text("#!/bin/sh\nexit 0\n")
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    tc = find_toolchain({"ASCEND_HOME_PATH": str(tmp_path), "PATH": "/nonexistent"})
    assert tc.found and tc.compiler == cc
    steps = build_steps(tc, tmp_path / "out")
    assert len(steps) == len(KERNEL_SOURCES) + 2
    assert all("--npu-arch=dav-2201" in s.argv for s in steps[:-1])
    assert all(p.is_file() for p in KERNEL_SOURCES.values())


def test_home_without_compiler(tmp_path):
    tc = find_toolchain({"ASCEND_HOME_PATH": str(tmp_path), "PATH": "/nonexistent"})
    assert not tc.found and "no bisheng/ccec" in tc.why_not()


def test_build_exits_2_with_one_clear_line(monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    r = run("build")
    assert r.exit_code == 2
    assert r.output.strip().startswith("error: CANN toolkit not found") and len(r.output.strip().splitlines()) == 1
    assert "Traceback" not in r.output


@pytest.mark.parametrize("var", ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"])
def test_build_with_a_home_that_does_not_exist_says_so_with_the_value(monkeypatch, tmp_path, var):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    missing = tmp_path / "no_cann_here"
    monkeypatch.setenv(var, str(missing))
    r = run("build")
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"error: CANN toolkit not found: {var} names a path that does not exist")
    assert "is not set" not in line and line.endswith(f"; received: {var}={missing}")
    afile = tmp_path / "a_file"
    afile.write_text("")
    monkeypatch.setenv(var, str(afile))
    line = run("build").output.strip()
    assert "names a path that is not a directory" in line and line.endswith(f"received: {var}={afile}")


def test_build_with_no_home_set_says_what_was_expected_and_received():
    why = find_toolchain({"PATH": "/nonexistent"}).why_not()
    assert "ASCEND_HOME_PATH is not set" in why and "ASCEND_TOOLKIT_HOME" in why
    assert why.endswith("received: neither is set")


def test_build_dry_run_prints_commands(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    r = run("build", "--dry-run", "--kernel", "flash_attention")
    assert r.exit_code == 0 and "nothing compiled" in r.output and "flash_attention/kernel.asc" in r.output


def test_build_unknown_kernel(monkeypatch):
    r = run("build", "--dry-run", "--kernel", "softmax")
    assert r.exit_code == 2 and r.output.startswith("error: unknown kernel")


def test_list():
    r = run("list")
    assert r.exit_code == 0
    for word in ("rms_norm", "add_layer_norm", "attention", "max_head_dim", "not yet"):
        assert word in r.output
    j = run("list", "--format", "json")
    assert j.exit_code == 0 and '"replaces"' in j.output


def test_test_command_passes_and_reports_tolerances():
    r = run("test", "--kernel", "layer_norm")
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and "atol=" in r.output and "4/4 checks passed" in r.output


def test_test_command_exits_1_on_failure(monkeypatch):
    from npuport.ascendc_kernels import compare
    monkeypatch.setitem(compare.TOLERANCES, ("norm", "float16"), compare.Tolerance(0.0, 0.0))
    r = run("test", "--kernel", "rms_norm")
    assert r.exit_code == 1 and "FAIL" in r.output and "would pass with atol>=" in r.output


def test_unknown_kernel_for_test():
    r = run("test", "--kernel", "nope")
    assert r.exit_code == 2 and r.output.startswith("error: unknown kernel")


def test_perf_and_bad_chip():
    r = run("perf")
    assert r.exit_code == 0 and r.output.count("ESTIMATE") == 5
    bad = run("perf", "--chip", "B300")
    assert bad.exit_code == 2 and "unknown chip" in bad.output


@pytest.mark.parametrize("chip", ["Ascend910A", "H200"])
def test_perf_on_a_chip_without_platform_numbers_is_one_line(chip: str) -> None:
    # a chip of hardware.yaml without the Ascend C platform block (UB size, vector cores) cannot be tiled for
    r = run("perf", "--chip", chip)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: the chip has no Ascend C platform numbers") and "Ascend910B" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_help_works_without_devices():
    r = run("--help")
    assert r.exit_code == 0 and all(c in r.output for c in ("list", "build", "test", "perf"))
