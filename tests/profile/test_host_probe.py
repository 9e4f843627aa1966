"""`npuport profile probe` and `npuport audit --host-probe`: an eager step's host side follows the host it runs on;
the CUDA chips' host costs (fit on a host whose probe read `reference_probe_s`) are scaled to the user's probe, the
NPU's are not (no NPU host probe is lent here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from npuport import api
from npuport.cli.main import cli
from npuport.cost.host_probe import parse_host_probe
from npuport.cost.roofline import get_chip
from npuport.cost.timing import host_probe, reference_probe_s, timing_for
from npuport.errors import NpuportError

GPT = Path(__file__).resolve().parents[2] / "examples" / "gpt" / "model.py"
DECODE = ("decode:batch=1,past=64",)


@pytest.mark.parametrize("text, seconds", [("9.3us", 9.3e-6), ("9.3\u00b5s", 9.3e-6), ("9.3\u03bcs", 9.3e-6),
                                           ("0.0093ms", 9.3e-6), ("9300ns", 9.3e-6), ("9.3e-6s", 9.3e-6),
                                           (" 12 US ", 12e-6), ("100ns", 1e-7)])
def test_probe_text_to_seconds(text: str, seconds: float) -> None:
    assert parse_host_probe(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["9", "9.3", "9.3e-6", "fast", "9.3 parsecs", "0us", "2s", "-5us", "10ns"])
def test_a_probe_without_a_unit_or_out_of_range_is_refused(text: str) -> None:
    with pytest.raises(NpuportError) as err:
        parse_host_probe(text)
    assert "--host-probe" in str(err.value.what)


def test_scaled_host_costs_follow_the_probe_and_leave_the_npu_alone() -> None:
    a100, npu = get_chip("A100-SXM-80GB"), get_chip("Ascend910B")
    ref = reference_probe_s(a100)
    assert ref
    base = timing_for(a100).host.forward_call_s
    with host_probe({"cuda": ref / 2}):
        assert timing_for(a100).host.forward_call_s == pytest.approx(base / 2)
        assert timing_for(a100) is timing_for(a100)  # one model per chip and probe: the inventory's identity check
        assert timing_for(npu) is timing_for(npu) and timing_for(npu).host.reference_probe_s == pytest.approx(ref)
        assert reference_probe_s(a100) == pytest.approx(ref)
    assert timing_for(a100).host.forward_call_s == pytest.approx(base)  # restored on exit


def test_audit_with_a_faster_host_estimates_every_chip_on_it() -> None:
    """The step-time ratio compares the chips on one host: the NPU's host costs are scaled by the same factor."""
    _, plain = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=DECODE))
    ref = reference_probe_s(get_chip("A100-SXM-80GB"))
    assert ref
    _, fast = api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=DECODE, host_probe=ref / 2))
    p, f = plain["scenarios"][0]["estimated_time_s_by_chip"], fast["scenarios"][0]["estimated_time_s_by_chip"]
    assert f["A100-SXM-80GB"] < 0.7 * p["A100-SXM-80GB"]  # a host-bound eager decode: about half
    assert f["Ascend910B"] < 0.7 * p["Ascend910B"]
    assert any("--host-probe" in n and "Ascend910B's are scaled by the same factor" in n for n in fast["notes"])
    assert fast["host_probe"]["probe_s"] == ref / 2 and fast["host_probe"]["reference_probe_s"] == ref
    assert {"A100-SXM-80GB", "Ascend910B"} <= set(fast["host_probe"]["scaled"])
    assert "host_probe" not in plain
    with pytest.raises(NpuportError):
        api.audit(api.ModelSpec(model=str(GPT)), api.AuditOptions(scenarios=DECODE, host_probe=5.0))


def test_cli_probe_on_the_cpu_and_a_bad_host_probe_is_one_line() -> None:
    res = CliRunner().invoke(cli, ["profile", "probe", "--dev", "cpu", "--rounds", "2"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("host probe on cpu: ") and " us per tiny eager op" in res.stdout
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--host-probe", "9"])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot use --host-probe"), res.stderr


def test_a_profile_join_under_host_probe_names_the_probe_the_costs_were_fit_at() -> None:
    """The estimate for the recorded host scales from the scaled model, but the report names the fit's own probe."""
    root = Path(__file__).resolve().parents[2]
    prof = root / "docs" / "measured" / "profiles" / "tinyllama-1.1b" / "decode.profile.json"
    cfg = root / "examples" / "configs" / "tinyllama-1.1b.json"
    ref = reference_probe_s(get_chip("H200"))
    assert ref
    opts = dict(scenarios=("decode:batch=1,past=2048",), chip="H200", profiles=(str(prof),))
    _, plain = api.audit(api.ModelSpec(hf_config=str(cfg)), api.AuditOptions(**opts))  # type: ignore[arg-type]
    _, scaled = api.audit(api.ModelSpec(hf_config=str(cfg)), api.AuditOptions(**opts, host_probe=11e-6))  # type: ignore[arg-type]
    at_plain, at_scaled = (d["profile"][0]["step"]["estimated_at_host"] for d in (plain, scaled))
    assert at_scaled["reference_probe_s"] == pytest.approx(ref)  # not the 11 us the model was scaled to
    assert at_scaled["step_s"] == pytest.approx(at_plain["step_s"], rel=1e-9)  # the same host, the same estimate


def test_the_step_time_tables_say_which_host_the_times_are_for() -> None:
    res = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", DECODE[0], "--host-probe", "8.5us", "--quiet"],
                             terminal_width=120)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert text.count("host: every chip's times are for this host (8.5 µs per tiny eager op") == 2  # summary, chips
    plain = CliRunner().invoke(cli, ["audit", str(GPT), "--scenario", DECODE[0], "--quiet"])
    assert "host: every chip's times" not in plain.stdout
