"""Progress a person sees: the first line comes before torch is imported; --quiet leaves stderr empty."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from npuport.cli.main import cli

TINY = str(Path(__file__).resolve().parent.parent / "fixtures" / "models" / "tiny.py")

# a meta-path hook that says on stderr when torch starts to load, then runs `npuport ARGS`
PROBE = """
import sys
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.stderr.write("PROBE: importing torch\\n"); sys.stderr.flush(); sys.meta_path.remove(self)
        return None
sys.meta_path.insert(0, Probe())
from npuport.cli.main import cli
cli.main(sys.argv[1:], prog_name="npuport")
"""


def _stderr(*args: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True)
    return res.stderr.splitlines()


def test_first_progress_line_comes_before_torch_loads() -> None:
    err = _stderr("audit", TINY, "--scenario", "prefill:seq=4", "--format", "json")
    assert err[0] == f"npuport: loading {TINY}" and err[1] == "PROBE: importing torch", err[:3]
    assert any(line.startswith("npuport: tracing prefill") for line in err)


def test_parity_and_bench_say_what_they_load_first() -> None:
    err = _stderr("parity", "--ref", "cpu", "--dev", "cpu", TINY, "--scenario", "prefill:seq=4", "--format", "json")
    assert err[:2] == [f"npuport: loading {TINY}", "PROBE: importing torch"], err[:3]
    err = _stderr("bench", "--from", "nope.json")
    assert err[:2] == ["npuport: loading nope.json", "PROBE: importing torch"] and err[-1].startswith("error: audit JSON"), err


def test_bad_options_fail_before_anything_loads() -> None:
    err = _stderr("audit", TINY, "--scenario", "inference")
    assert len(err) == 1 and err[0].startswith("error: unknown scenario 'inference'"), err


def test_quiet_leaves_stderr_empty() -> None:
    for args in (["audit", TINY, "--scenario", "prefill:seq=4"], ["audit", TINY, "--static-only"],
                 ["parity", "--ref", "cpu", "--dev", "cpu", TINY, "--scenario", "prefill:seq=4"],
                 ["coverage", "list", "--status", "npu-custom"], ["kernels", "list", "--json"]):
        res = CliRunner().invoke(cli, [*args, "--quiet"])
        assert res.exit_code == 0 and res.stderr == "", (args, res.stderr)
        assert res.stdout


def test_the_models_own_prints_go_to_stderr_even_with_quiet(tmp_path: Path) -> None:
    model = tmp_path / "loud.py"
    model.write_text(Path(TINY).read_text() + "\nprint('hello from the model')\n")
    res = CliRunner().invoke(cli, ["audit", str(model), "--scenario", "prefill:seq=4", "--format", "json", "--quiet"])
    assert res.exit_code == 0 and res.stderr == "hello from the model\n" and "hello" not in res.stdout
