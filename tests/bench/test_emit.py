"""--emit: each script runs on the CPU without npuport and prints a time."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from npuport.bench.cases import cases_from_report
from npuport.bench.emit import call_source, emit_scripts
from npuport.bench.emitted import earlier_scripts


@pytest.mark.slow  # one fresh interpreter per emitted script
def test_emitted_scripts_run_standalone(tiny_audit, tmp_path):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    picked = [c for c in cases if c.op in ("aten::mm", "aten::scaled_dot_product_attention")] + \
        [c for c in cases if c.op not in ("aten::mm", "aten::scaled_dot_product_attention")][:1]
    paths = emit_scripts([(c, "median 1.0 ms on test") for c in picked], tmp_path / "repro", "Model tiny, scenario prefill.")
    assert len(paths) == len(picked) >= 3
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for path in paths:
        text = path.read_text()
        assert "npuport" not in re.sub(r"(written by|from) `?npuport bench`?|\[bench:", "", text).split('"""', 2)[2]
        out = subprocess.run([sys.executable, "-I", str(path), "--device", "cpu", "--reps", "3", "--warmup", "1"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert re.search(r"median \d+\.\d+ ms", out.stdout), out.stdout


def test_call_source_keeps_recorded_arguments(tiny_audit):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    sdpa = next(c for c in cases if c.op == "aten::scaled_dot_product_attention")
    src = call_source(sdpa)
    assert src.startswith("torch.ops.aten.scaled_dot_product_attention.default(t[0], t[1], t[2]")
    assert "is_causal=True" in src


def test_a_second_emit_replaces_the_first_runs_scripts_only(tiny_audit, tmp_path):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    assert len(cases) >= 3
    folder = tmp_path / "repro"
    first = emit_scripts([(c, "") for c in cases[:3]], folder, "run 1")
    mine = folder / "01_mine.py"  # a user's own numbered script: no marker, never deleted
    mine.write_text('"""my own benchmark"""\n', encoding="utf-8")
    (folder / "notes.txt").write_text("keep", encoding="utf-8")
    link = folder / "09_link.py"  # bench never writes links: not one of its scripts, whatever it points at
    link.symlink_to(first[0])
    assert earlier_scripts(folder) == sorted(first)
    second = emit_scripts([(c, "") for c in cases[1:2]], folder, "run 2")  # another case under 01_
    assert earlier_scripts(folder) == second and second[0].name != first[0].name
    assert "run 2" in second[0].read_text()
    assert sorted(p.name for p in folder.iterdir()) == sorted([second[0].name, "01_mine.py", "09_link.py", "notes.txt"])


def test_emit_never_writes_over_or_through_a_file_it_did_not_write(tiny_audit, tmp_path):
    import pytest

    from npuport.bench.emit import script_name
    from npuport.errors import NpuportError

    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    folder = tmp_path / "repro"
    folder.mkdir()
    target = tmp_path / "mine.py"
    target.write_text("my own\n", encoding="utf-8")
    (folder / script_name(1, cases[0])).symlink_to(target)  # the name the first script would take, a link
    with pytest.raises(NpuportError, match="was not written by npuport bench"):
        emit_scripts([(c, "") for c in cases[:2]], folder, "run")
    assert target.read_text() == "my own\n" and sorted(p.name for p in folder.iterdir()) == [script_name(1, cases[0])]
